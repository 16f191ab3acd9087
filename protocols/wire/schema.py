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
  arguments), nor one without a ``type`` that is an ``anyOf``/``oneOf`` of object schemas;
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

- every vendor: a root ``anyOf``, ``oneOf`` or ``allOf`` is flattened into one object schema --
  OpenAI's chat and Responses APIs and Anthropic's refuse them at the top level ("schema must
  have type 'object' and not have 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level",
  "input_schema does not support oneOf, allOf, or anyOf at the top level"), and Ollama ignores
  them. MCP servers write a union of argument sets that way. The flat schema has ``"type":
  "object"``; its ``properties`` are the root's and every member's (a member given as a local
  ``$ref`` is followed; a name with different schemas in different places gets the ``anyOf``
  of them); its ``required`` are the root's, with what every member of an ``anyOf``/``oneOf``
  requires and what any member of an ``allOf`` requires; ``additionalProperties: false`` when
  the root sets none and every member of the union is closed (``additionalProperties: false``,
  no ``patternProperties``); the root's other keywords (``$defs``, ``description``, ...) are
  kept, and for an ``anyOf``/``oneOf`` the ``description`` says which argument sets are
  accepted (each member's title or description, its fields and what it requires). A member
  that cannot describe an object (``false``, a ``type`` without ``object``) is left out, and
  one whose reference cannot be followed adds no fields. The flat schema is a description for
  the model, never what its arguments are checked against; it accepts everything the original
  does when the members describe each field alike or are closed (MCP servers' unions are), and
  a field one member describes and an open one leaves out keeps the description it was given;
- ``openai``, ``ollama`` and ``gemini``: a root ``not``, ``enum`` or ``const`` is dropped as
  well (OpenAI refuses those at the top level too; they only narrow what the original
  accepts);
- every vendor: a ``$schema`` keyword at the root is dropped (vendors do not need the dialect
  URI and some refuse it); nested ``$schema`` keywords are left alone;
- ``openai`` and ``ollama``: an object schema (``"type"`` is ``"object"`` or a list holding it)
  without ``properties`` gets ``"properties": {}``, and an array schema without ``items`` gets
  ``"items": {}``, wherever a subschema occurs (their validators and grammar builders need both);
- ``anthropic``: nothing else; below the root it takes JSON Schema as it is.
- ``gemini``: nothing else (its ``parametersJsonSchema`` must describe an object of the
  arguments, which the rules above ensure); below the root it takes JSON Schema as it is (the
  adapter sends ``parametersJsonSchema``, JSON Schema itself, rather than ``parameters``, an
  OpenAPI subset that would need a lossy translation).

The adaptations other than dropping ``$schema`` and flattening the root do not change which
arguments are valid (a missing ``properties`` or ``items`` means the same as an empty one).
Projection does not validate the schema itself (``ToolDefinition`` checks it against its
metaschema); a keyword whose value has an unexpected shape is carried over as data. Whatever
the projection, a model's arguments are always validated against the ORIGINAL, unprojected
schema, never against what was sent to the vendor.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from .._schema_root import ONE_SUBSCHEMA as _ONE
from .._schema_root import SUBSCHEMA_LISTS as _LIST
from .._schema_root import object_root, resolve_local

__all__ = ["Outcome", "Projection", "Vendor", "project"]

#: How a projection turned out.
Outcome: TypeAlias = Literal["adopted", "adapted", "rejected"]
#: The vendors a schema can be projected for.
Vendor: TypeAlias = Literal["openai", "anthropic", "ollama", "gemini"]

_VENDORS: Final = frozenset({"openai", "anthropic", "ollama", "gemini"})
_RESERVED: Final = frozenset({"__proto__", "constructor", "prototype"})

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
    try:
        rooted = object_root(schema)
    except RecursionError:
        return _reject("the schema is nested too deeply to inspect")
    if rooted is None:
        return _reject(
            'the root schema must have "type": "object" (or be an anyOf/oneOf of object schemas)'
        )
    walk = _Walk(vendor, max_depth=max_depth, max_nodes=max_nodes)
    try:
        flat, flattened = _Flatten(schema, vendor, max_nodes=max_nodes).root()
        copy = walk.schema(flat, "$", 1)
    except _Rejected as rejected:
        return _reject(rejected.reason)
    except RecursionError:
        return _reject("the schema is nested too deeply to inspect")
    changes = [*flattened, *walk.changes]
    if not changes:
        return Projection("adopted", schema)
    return Projection("adapted", copy, tuple(changes))


def _reject(reason: str) -> Projection:
    return Projection("rejected", None, (), reason)


#: Root keywords flattened away for every vendor, and those only dropped for OpenAI's rules.
_COMBINATORS: Final = ("anyOf", "oneOf", "allOf")
_NARROWING: Final = ("not", "enum", "const")
#: How many argument sets the flat schema's description names, and how long each may be.
_SETS_NAMED: Final = 8
_SET_TEXT: Final = 160


@attrs.frozen
class _Shape:
    """What a member of a root union says about the arguments object: its properties (name ->
    the subschemas given for it), the names it requires, whether it admits no other names, and
    how the model may be told of it."""

    properties: dict[str, list[Any]]
    required: tuple[str, ...]
    closed: bool
    label: str | None


class _Flatten:
    """A root ``anyOf``/``oneOf``/``allOf`` made one object schema (see the module docstring).
    Work is bounded by ``max_nodes`` member visits; a schema that contains itself is refused."""

    def __init__(self, schema: dict[str, Any], vendor: str, *, max_nodes: int) -> None:
        self.schema = schema
        self.narrowing = _NARROWING if vendor in ("openai", "ollama", "gemini") else ()
        self.budget = max_nodes
        self.active: set[int] = set()

    def root(self) -> tuple[dict[str, Any], list[str]]:
        """(the schema to walk, the changes made): the input itself when nothing is flattened.
        A combinator whose value is not a list is carried over as data, as the walk does."""
        schema = self.schema
        unions = [k for k in _COMBINATORS if isinstance(schema.get(k), list)]
        dropped = [k for k in self.narrowing if k in schema]
        if not unions and not dropped:
            return schema, []
        changes: list[str] = []
        if "type" not in schema:
            changes.append("added 'type': 'object' at $ (its members are all objects)")
        shapes = [self.shape(schema, "$", unions=False)]
        described: list[str] = []
        self.active.add(id(schema))
        for keyword in unions:
            members = schema[keyword]
            shapes.append(self.union(keyword, members, _child("$", keyword)))
            changes.append(
                f"flattened '{keyword}' of {len(members)} schemas at $ into one object "
                "(arguments are still checked against the original)"
            )
            if keyword != "allOf":
                described.append(self.describe(keyword, members))
        changes.extend(f"dropped '{key}' at $ (refused at the top level)" for key in dropped)
        merged = _merge(shapes, every=True)
        flat: dict[str, Any] = {"type": "object"}
        flat.update(
            (key, value)
            for key, value in schema.items()
            if key not in (*unions, *dropped, "type", "properties", "required")
        )
        flat["properties"] = {
            name: subs[0] if len(subs) == 1 else {"anyOf": subs}
            for name, subs in merged.properties.items()
        }
        if merged.required or "required" in schema:
            flat["required"] = list(merged.required)
        if merged.closed and "additionalProperties" not in schema:
            flat["additionalProperties"] = False
        if described:
            text = " ".join(described)
            base = schema.get("description")
            flat["description"] = f"{base}\n\n{text}" if isinstance(base, str) and base else text
        return flat, changes

    def union(self, keyword: str, members: list[Any], path: str) -> _Shape:
        """The shape of ``members`` under ``keyword`` at ``path``."""
        self._enter(members, path)
        try:
            shapes = [self.member(m, f"{path}[{i}]") for i, m in enumerate(members)]
        finally:
            self.active.discard(id(members))
        viable = [shape for shape in shapes if shape is not None]
        if keyword == "allOf":
            return _merge(viable, every=True)
        if not viable:
            return _Shape({}, (), False, None)
        return _merge(viable, every=False)

    def member(self, member: Any, path: str) -> _Shape | None:
        """The shape of one union member; ``None`` for one that admits no object."""
        self.budget -= 1
        if self.budget < 0:
            raise _Rejected(f"the root union is too large to flatten (at {path})")
        if member is True:
            return _Shape({}, (), False, None)
        if not isinstance(member, dict):
            return None  # false (or not a schema): no object fits it
        kinds = member.get("type", "object")
        if not (kinds == "object" or (isinstance(kinds, list) and "object" in kinds)):
            return None
        self._enter(member, path)
        try:
            if "$ref" in member:
                target = resolve_local(self.schema, member["$ref"])
                if isinstance(target, dict | bool) and id(target) not in self.active:
                    shape = self.member(target, _child(path, "$ref"))
                    if shape is None:
                        return None
                    here = self.shape(member, path, unions=True)
                    return _merge([shape, here], every=True, label=here.label or shape.label)
                # Not local, a loop of references, or nothing there: nothing is known of what
                # it admits, so it adds no fields and may admit anything.
            return self.shape(member, path, unions=True)
        finally:
            self.active.discard(id(member))

    def shape(self, node: dict[str, Any], path: str, *, unions: bool) -> _Shape:
        """``node``'s own properties, required names and closedness, with (``unions``) those
        of the unions it holds."""
        properties = node.get("properties")
        required = node.get("required")
        own = _Shape(
            {
                name: [sub]
                for name, sub in (properties.items() if isinstance(properties, dict) else ())
                if isinstance(name, str)
            },
            tuple(
                name
                for name in (required if isinstance(required, list) else ())
                if isinstance(name, str)
            ),
            node.get("additionalProperties") is False and "patternProperties" not in node,
            _label(node),
        )
        if not unions:
            return own
        shapes = [own]
        for keyword in _COMBINATORS:
            members = node.get(keyword)
            if isinstance(members, list):
                shapes.append(self.union(keyword, members, _child(path, keyword)))
        return _merge(shapes, every=True, label=own.label) if len(shapes) > 1 else own

    def describe(self, keyword: str, members: list[Any]) -> str:
        """What the model is told of a root union: its argument sets, one by one."""
        sets: list[str] = []
        for index, member in enumerate(members[:_SETS_NAMED]):
            shape = self.member(member, f"$.{keyword}[{index}]")
            if shape is None:
                continue
            fields = ", ".join(shape.properties) or "no fields"
            text = f"{shape.label}: {fields}" if shape.label else fields
            if shape.required:
                text += f" (required: {', '.join(shape.required)})"
            if len(text) > _SET_TEXT:
                text = text[: _SET_TEXT - 3] + "..."
            sets.append(f"({len(sets) + 1}) {text}")
        if len(members) > _SETS_NAMED:
            sets.append(f"(and {len(members) - _SETS_NAMED} more)")
        which = "exactly one" if keyword == "oneOf" else "at least one"
        return f"The arguments must match {which} of these sets: {'; '.join(sets)}."

    def _enter(self, container: dict[str, Any] | list[Any], path: str) -> None:
        if id(container) in self.active:
            raise _Rejected(f"the schema contains itself at {path} (a cycle)")
        self.active.add(id(container))


def _label(node: dict[str, Any]) -> str | None:
    for key in ("title", "description"):
        value = node.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
    return None


def _merge(shapes: list[_Shape], *, every: bool, label: str | None = None) -> _Shape:
    """The shapes together: all of them hold (``every``: their required names add up, and one
    closed shape closes them) or at least one does (only the names all require are required,
    and they are closed only if all are). The properties are all of theirs, either way."""
    properties: dict[str, list[Any]] = {}
    for shape in shapes:
        for name, subs in shape.properties.items():
            known = properties.setdefault(name, [])
            for sub in subs:
                if sub not in known:
                    known.append(sub)
    if every:
        required = tuple(dict.fromkeys(name for shape in shapes for name in shape.required))
        closed = any(shape.closed for shape in shapes)
    else:
        first, *rest = shapes
        required = tuple(
            name for name in first.required if all(name in shape.required for shape in rest)
        )
        closed = all(shape.closed for shape in shapes)
    return _Shape(properties, required, closed, label)


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
