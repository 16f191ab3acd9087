"""Which tool-argument schemas describe an object at their root: shared by
:class:`~protocols.messages.ToolDefinition` (what it accepts) and
:func:`protocols.wire.schema.project` (what it flattens for a vendor); and where JSON Schema
keeps its subschemas (:data:`ONE_SUBSCHEMA`, :data:`SUBSCHEMA_LISTS`), for whatever walks one.
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["ONE_SUBSCHEMA", "SUBSCHEMA_LISTS", "UNIONS", "object_root", "resolve_local"]

#: Keywords whose value is one subschema (``items`` may also be an array of them).
ONE_SUBSCHEMA: Final = frozenset(
    {
        "additionalItems",
        "additionalProperties",
        "contains",
        "contentSchema",
        "else",
        "if",
        "items",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
#: Keywords whose value is an array of subschemas.
SUBSCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})

#: The combinators a typeless root may be made of, when all their members are object schemas.
UNIONS: Final = ("anyOf", "oneOf")

#: How deep unions of unions (and local references) are followed when deciding, and how many
#: members are looked at in all (past either: not recognised as objects).
_MAX_DEPTH: Final = 8
_MAX_VISITS: Final = 2000


def resolve_local(root: Mapping[str, Any], reference: object) -> Any:
    """What the local JSON pointer ``reference`` (``#/$defs/a``, ``#/definitions/a/...``, ``~0``
    and ``~1`` escapes) names inside ``root``; ``None`` when it is not local or names nothing.
    """
    if not isinstance(reference, str) or not reference.startswith("#"):
        return None
    node: Any = root
    if reference in ("#", "#/"):
        return node
    if not reference.startswith("#/"):
        return None  # an anchor (``#name``): not followed
    for part in reference[2:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


class _Decide:
    """One decision, its work bounded by :data:`_MAX_VISITS` member visits (references may
    share a definition many times over) and its depth by :data:`_MAX_DEPTH`."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.visits = 0

    def is_object(self, schema: Any, depth: int) -> bool:
        """``schema`` only ever admits objects: ``"type": "object"``, a local reference to
        such a schema, or a typeless ``anyOf``/``oneOf`` of them."""
        self.visits += 1
        if self.visits > _MAX_VISITS or depth > _MAX_DEPTH or not isinstance(schema, dict):
            return False
        if "type" in schema:
            return schema["type"] in ("object", ["object"])
        if "$ref" in schema:
            target = resolve_local(self.root, schema["$ref"])
            return target is not schema and self.is_object(target, depth + 1)
        return self.is_union_of_objects(schema, depth + 1)

    def is_union_of_objects(self, schema: Mapping[str, Any], depth: int) -> bool:
        found = False
        for keyword in UNIONS:
            members = schema.get(keyword)
            if members is None:
                continue
            if not isinstance(members, list) or not members:
                return False
            if not all(self.is_object(member, depth) for member in members):
                return False
            found = True
        return found


def object_root(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``schema`` itself when its root has ``"type": "object"``; a copy with ``"type":
    "object"`` added when its root has no ``type`` and is an ``anyOf`` or ``oneOf`` (or both)
    whose members are all object schemas -- as MCP servers write a union of argument sets --
    which adds nothing its members did not already require; ``None`` otherwise."""
    if schema.get("type") == "object":
        return schema
    if "type" in schema or not _Decide(schema).is_union_of_objects(schema, 0):
        return None
    return {"type": "object", **schema}
