"""Projection of a tool's JSON Schema onto what one vendor accepts: pure, never raises, never
mutates its input.

:func:`project` returns a :class:`Projection` with one of three outcomes:

- ``adopted``: the vendor takes the schema as it is; ``schema`` is the input object itself.
- ``adapted``: the vendor needs small changes; ``schema`` is a new, independent deep copy with
  them applied, and ``changes`` says what changed, one line per change with its JSON path
  (e.g. ``"added empty 'properties' at $.properties.when"``).
- ``rejected``: the schema cannot be sent safely; ``schema`` is ``None`` and ``reason`` says why.

Rejections (the same for every vendor):

- the root is not a JSON object with ``"type": "object"`` (every vendor wants an object of
  arguments);
- a cycle (a Python dict or list that contains itself cannot be serialised);
- ``__proto__``, ``constructor`` or ``prototype`` used as a name: a key of ``properties``,
  ``$defs``, ``definitions``, ``dependentSchemas``, ``dependentRequired`` or ``dependencies``, or
  an entry of ``required`` or of a name array in ``dependentRequired``/``dependencies`` (such
  names can pollute object prototypes in JavaScript consumers of the schema); the same words in
  values (``enum``, ``default``, descriptions) or ``patternProperties`` patterns are fine;
- nesting deeper than ``max_depth``: the root is level 1, each subschema is one level deeper than
  the schema holding it, and each array or object in a keyword's value (``enum``, ``default``, an
  unknown keyword, ...) one level deeper than its container;
- more than ``max_nodes`` nodes, counting every JSON value of the document except object keys and
  the maps and arrays that only hold subschemas (``properties``, ``anyOf``, ...); the walk stops
  there, so the work is bounded whatever the input (shared subtrees count each time they are
  reached);
- a value that is not strict JSON as :func:`json.loads` produces it: only ``dict`` with string
  keys, ``list``, ``str``, ``int``, finite ``float``, ``bool`` and ``None``;
- an unknown vendor.

Adaptations, each recorded in ``changes``:

- every vendor: a ``$schema`` keyword at the root is dropped (vendors do not need the dialect
  URI and some refuse it); nested ``$schema`` keywords are left alone;
- ``openai`` and ``ollama``: an object schema (``"type"`` is ``"object"`` or a list holding it)
  without ``properties`` gets ``"properties": {}``, and an array schema without ``items`` gets
  ``"items": {}``, wherever a subschema occurs (their validators and grammar builders need both);
- ``anthropic``: nothing else; it takes JSON Schema as it is.

The adaptations other than dropping ``$schema`` do not change which arguments are valid (a missing
``properties`` or ``items`` means the same as an empty one). Projection does not validate the
schema itself (``ToolDefinition`` checks it against its metaschema); a keyword whose value has an
unexpected shape is carried over as data. Whatever the projection, a model's arguments are always
validated against the ORIGINAL, unprojected schema, never against what was sent to the vendor.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

__all__ = ["Outcome", "Projection", "Vendor", "project"]

#: How a projection turned out.
Outcome: TypeAlias = Literal["adopted", "adapted", "rejected"]
#: The vendors a schema can be projected for.
Vendor: TypeAlias = Literal["openai", "anthropic", "ollama"]

_VENDORS: Final = frozenset({"openai", "anthropic", "ollama"})
_RESERVED: Final = frozenset({"__proto__", "constructor", "prototype"})

#: Keywords whose value is one subschema (``items`` may also be an array of them).
_ONE: Final = frozenset(
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
_LIST: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
#: Keywords whose value maps names to subschemas (``dependencies`` values may be name arrays).
_MAP: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
#: Keywords whose keys are names (``patternProperties`` keys are patterns, not names).
_NAMED: Final = frozenset(
    {"properties", "$defs", "definitions", "dependentSchemas", "dependentRequired", "dependencies"}
)

_IDENTIFIER: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_KEY_LIMIT: Final = 64


@attrs.frozen
class Projection:
    """The outcome of :func:`project` (see the module docstring).

    ``schema`` is the input itself when ``adopted``, an independent copy when ``adapted`` and
    ``None`` when ``rejected``; ``changes`` lists the adaptations (empty unless ``adapted``);
    ``reason`` says why a schema was rejected (``None`` otherwise).
    """

    outcome: Outcome
    schema: dict[str, Any] | None
    changes: tuple[str, ...] = ()
    reason: str | None = None


class _Rejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def project(
    schema: Mapping[str, Any],
    vendor: Vendor,
    *,
    max_depth: int = 32,
    max_nodes: int = 2000,
) -> Projection:
    """Project the tool-argument ``schema`` for ``vendor``; see the module docstring for the rules.

    Guarantees: never raises (every problem is a ``rejected`` projection), never modifies
    ``schema``, and does work bounded by ``max_nodes``. An adapted schema projects again as
    ``adopted``.
    """
    if vendor not in _VENDORS:
        return _reject(f"unknown vendor {vendor!r}; expected one of {sorted(_VENDORS)}")
    if not isinstance(schema, dict):
        return _reject(f"the schema must be a JSON object, not {_kind(schema)}")
    if schema.get("type") != "object":
        return _reject('the root schema must have "type": "object"')
    walk = _Walk(vendor, max_depth=max_depth, max_nodes=max_nodes)
    try:
        copy = walk.schema(schema, "$", 1)
    except _Rejected as rejected:
        return _reject(rejected.reason)
    except RecursionError:
        return _reject("the schema is nested too deeply to inspect")
    if not walk.changes:
        return Projection("adopted", schema)
    return Projection("adapted", copy, tuple(walk.changes))


def _reject(reason: str) -> Projection:
    return Projection("rejected", None, (), reason)


class _Walk:
    """One projection: a depth-first copy of the schema that records its changes."""

    def __init__(self, vendor: str, *, max_depth: int, max_nodes: int) -> None:
        self.fill = vendor in ("openai", "ollama")
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.nodes = 0
        self.active: set[int] = set()
        self.changes: list[str] = []

    # -- bookkeeping

    def _count(self, path: str) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _Rejected(f"the schema has more than {self.max_nodes} nodes (at {path})")

    def _deep(self, depth: int, path: str) -> None:
        if depth > self.max_depth:
            raise _Rejected(f"the schema nests deeper than {self.max_depth} levels (at {path})")

    def _enter(self, container: dict[str, Any] | list[Any], path: str) -> None:
        if id(container) in self.active:
            raise _Rejected(f"the schema contains itself at {path} (a cycle)")
        self.active.add(id(container))

    def _name(self, name: Any, path: str) -> None:
        if isinstance(name, str) and name in _RESERVED:
            raise _Rejected(f"{name!r} may not be used as a name (at {path})")

    def _names(self, names: Any, path: str) -> None:
        """Check an array of property names (``required``, a ``dependentRequired`` entry)."""
        if isinstance(names, list):
            for index, name in enumerate(names):
                self._name(name, f"{path}[{index}]")

    # -- schemas

    def schema(self, node: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        self._deep(depth, path)
        self._count(path)
        self._enter(node, path)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                raise _Rejected(f"{path}: object key {key!r} is not a string")
            here = _child(path, key)
            if key == "$schema" and depth == 1:
                self.changes.append(f"dropped '$schema' at {path}")
                continue
            if key in _ONE and isinstance(value, dict | bool):
                out[key] = self.subschema(value, here, depth + 1)
            elif (key in _LIST or key == "items") and isinstance(value, list):
                out[key] = self._schema_list(value, here, depth)
            elif key in _MAP and isinstance(value, dict):
                out[key] = self._schema_map(value, here, depth, names=key in _NAMED)
            else:
                out[key] = self.data(value, here, depth + 1)  # counted and checked first
                if key == "required":
                    self._names(value, here)
                elif key in _NAMED and isinstance(value, dict):
                    for name, names in value.items():
                        self._name(name, _child(here, name))
                        self._names(names, _child(here, name))
        if self.fill:
            kinds = node.get("type")
            if not isinstance(kinds, list):
                kinds = [kinds]
            if "object" in kinds and "properties" not in node:
                out["properties"] = {}
                self.changes.append(f"added empty 'properties' at {path}")
            if "array" in kinds and "items" not in node:
                out["items"] = {}
                self.changes.append(f"added empty 'items' at {path}")
        self.active.discard(id(node))
        return out

    def subschema(self, node: dict[str, Any] | bool, path: str, depth: int) -> Any:
        if isinstance(node, bool):
            self._deep(depth, path)
            self._count(path)
            return node
        return self.schema(node, path, depth)

    def _schema_list(self, items: list[Any], path: str, depth: int) -> list[Any]:
        self._enter(items, path)
        out = [
            self.subschema(item, f"{path}[{index}]", depth + 1)
            if isinstance(item, dict | bool)
            else self.data(item, f"{path}[{index}]", depth + 1)
            for index, item in enumerate(items)
        ]
        self.active.discard(id(items))
        return out

    def _schema_map(
        self, mapping: dict[str, Any], path: str, depth: int, *, names: bool
    ) -> dict[str, Any]:
        self._enter(mapping, path)
        out: dict[str, Any] = {}
        for name, item in mapping.items():
            if not isinstance(name, str):
                raise _Rejected(f"{path}: object key {name!r} is not a string")
            here = _child(path, name)
            if names:
                self._name(name, here)
            if isinstance(item, dict | bool):
                out[name] = self.subschema(item, here, depth + 1)
            else:  # e.g. a ``dependencies`` entry that is an array of names
                out[name] = self.data(item, here, depth + 1)
                if names:
                    self._names(item, here)
        self.active.discard(id(mapping))
        return out

    # -- plain JSON values (enum, const, default, examples, unknown keywords, ...)

    def data(self, value: Any, path: str, depth: int) -> Any:
        self._count(path)
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _Rejected(f"{path}: {value!r} is not a finite number")
            return value
        if isinstance(value, dict):
            self._deep(depth, path)
            self._enter(value, path)
            copy: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _Rejected(f"{path}: object key {key!r} is not a string")
                copy[key] = self.data(item, _child(path, key), depth + 1)
            self.active.discard(id(value))
            return copy
        if isinstance(value, list):
            self._deep(depth, path)
            self._enter(value, path)
            items = [self.data(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
            self.active.discard(id(value))
            return items
        raise _Rejected(f"{path}: {_kind(value)} is not a JSON value")


def _child(path: str, key: str) -> str:
    """``path.key``, or ``path["key"]`` for a key that is not an identifier (long keys cut)."""
    if len(key) > _KEY_LIMIT:
        key = key[:_KEY_LIMIT] + "..."
        return f"{path}[{json.dumps(key, ensure_ascii=False)}]"
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _kind(value: Any) -> str:
    return f"a {type(value).__name__}"
