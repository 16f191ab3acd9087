"""A structured answer while it streams: the part of it known so far, validated leniently."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
from typing import Any, Final

from jsonschema import Draft202012Validator, SchemaError

from .._json import MAX_DEPTH
from ..errors import ValidationError
from ..partial_json import MAX_CHARS, NOTHING, JSONPrefix, PartialJSON
from ._schema import _excerpt
from ._validate import _validator

#: Keywords of a string schema that a prefix of a valid string always satisfies (or that only
#: annotate): a string still being read under a schema with no others is shown as it grows.
_GROWABLE: Final = frozenset(
    {
        "type",
        "maxLength",
        "format",  # (formats are not checked)
        "contentMediaType",
        "contentEncoding",
        "description",
        "title",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
    }
)

#: Keywords that judge an open container as a whole: one under such a schema is shown only
#: once it is complete (and valid).
_WHOLE: Final = ("enum", "const", "not", "if", "allOf", "$dynamicRef")

#: The keywords of an object or array schema whose verdict on a complete container follows
#: from its members' verdicts and its size (and keywords that do not judge at all): a container
#: the walk saw open under such a schema is judged from what the walk checked, not again.
_STRUCTURAL: Final = frozenset(
    {
        "type",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "$defs",
        "definitions",
        "$schema",
        *_GROWABLE,
    }
    - {"maxLength", "format", "contentMediaType", "contentEncoding"}
)

#: How a schema takes a string still being read (see ``_Lenient._string_status``); a union
#: takes the largest of its arms'.
_NO_STRINGS: Final = 0
_TOO_LONG: Final = 1
_FITS: Final = 2
_FIXED: Final = 3

#: At most this many complete values' verdicts are remembered per stream (then forgotten).
_MEMO_LIMIT: Final = 65_536


@functools.lru_cache(maxsize=256)
def _pattern(text: str) -> re.Pattern[str] | None:
    try:
        return re.compile(text)
    except re.error:
        return None


def _types(schema: Mapping[str, Any]) -> tuple[str, ...] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return (kind,)
    if isinstance(kind, list):
        return tuple(k for k in kind if isinstance(k, str))
    return None


class _Lenient:
    """Leniently validated partials of values of one schema: complete values are checked
    strictly (each verdict remembered by the value's identity -- a complete value never
    changes), open containers member by member."""

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        if not isinstance(schema, Mapping | bool):
            raise ValidationError(
                f"a partial output needs a JSON Schema (a dict), not {type(schema).__name__}"
            )
        try:
            # Checked and made once per schema object: the same validator the final answer's
            # check (validate_arguments) then finds made.
            root = (
                _validator(dict(schema) if type(schema) is not dict else schema)[0]
                if not isinstance(schema, bool)
                else Draft202012Validator(schema)
            )
        except SchemaError as error:
            raise ValidationError(
                f"the output schema is invalid: {_excerpt(error.message)}"
            ) from None
        self.schema = schema
        self._root = root
        # id(schema) -> (schema, its validator); (id(value), id(schema)) -> (value, verdict).
        self._validators: dict[int, tuple[Any, Any]] = {}
        self._memo: dict[tuple[int, int], tuple[Any, bool]] = {}
        # (path, id(schema)) -> what was checked of the open container at that path.
        self._opened: dict[tuple[tuple[Any, ...], int], _Open] = {}
        # id(schema) -> how an open container is walked under it.
        self._shapes: dict[int, _Shape] = {}
        # (id(schema), key) -> the schemas a member of that key satisfies.
        self._members: dict[tuple[int, str], tuple[Any, list[Any]]] = {}

    def reset(self) -> None:
        self._memo.clear()
        self._opened.clear()

    def value(self, prefix: JSONPrefix) -> Any:
        value = prefix.value
        if value is NOTHING:
            return NOTHING
        schema = self.schema
        if prefix.complete:
            if self._complete([schema], value, ()):
                return value
            if not isinstance(value, dict | list):
                return NOTHING
            # Invalid as a whole (a required field missing, say): what is valid of it.
            return self._container(schema, value, None, ())[0]
        return self._node(schema, value, prefix.open, prefix.growing, ())[0]

    # -- the walk -------------------------------------------------------------------------------

    def _valid(self, schema: Any, value: Any) -> bool:
        if schema is True:
            return True
        if schema is False or not isinstance(schema, Mapping):
            return False
        key = (id(value), id(schema))
        known = self._memo.get(key)
        if known is not None:
            return known[1]
        cached = self._validators.get(id(schema))
        if cached is None or cached[0] is not schema:
            # Evolved from the root's validator: a $ref resolves against the whole schema.
            cached = (schema, self._root.evolve(schema=schema))
            self._validators[id(schema)] = cached
        try:
            verdict = bool(cached[1].is_valid(value))
        except Exception:  # an unresolvable $ref, a pattern Python cannot compile, ...
            verdict = False
        memo = self._memo
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = (value, verdict)
        return verdict

    def _node(
        self, schema: Any, value: Any, open: int, growing: bool, path: tuple[Any, ...]
    ) -> tuple[Any, int]:
        """What to show of ``value`` (at ``path`` from the root) under ``schema``, and how many
        values were left out as invalid. ``open``: the open containers from ``value`` down;
        ``growing``: the last of them ends with a string still being read (``value`` itself,
        when ``open`` is 0). ``open`` below 0: a value still being read that is not shown
        (:data:`_HIDDEN`)."""
        if open < 0:
            return NOTHING, 0
        if open == 0:
            if not growing:
                return (value, 0) if self._valid(schema, value) else (NOTHING, 1)
            return (value, 0) if self._grows(schema, value, 0) else (NOTHING, 0)
        last = (open - 1, growing) if open >= 2 or growing else None
        return self._container(schema, value, last, path)

    def _resolve(self, schema: Any, depth: int) -> Any:
        """``schema`` with a local ``$ref`` followed (``None``: one it cannot follow)."""
        while isinstance(schema, Mapping) and "$ref" in schema:
            if depth > 32:
                return None
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                return None
            target: Any = self.schema
            for raw in ref[1:].split("/")[1:]:
                part = raw.replace("~1", "/").replace("~0", "~")
                if isinstance(target, Mapping) and part in target:
                    target = target[part]
                elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                    target = target[int(part)]
                else:
                    return None
            if len(schema) > 1:
                return None  # a $ref beside other keywords: not followed here
            schema = target
            depth += 1
        return schema

    def _grows(self, schema: Any, text: str, depth: int) -> bool:
        """A string still being read may be shown under ``schema``: every schema that may
        take a string there (every arm of a union) takes every prefix of a valid string, and
        one of them takes this one. (Then the final string, if valid, is valid under an arm
        that takes every prefix of it: it is shown all along.)"""
        return self._string_status(schema, len(text), depth) == _FITS

    def _string_status(self, schema: Any, length: int, depth: int) -> int:
        """How ``schema`` takes a string of ``length`` still being read: :data:`_NO_STRINGS`,
        :data:`_FIXED` (only whole: an enum, a pattern, ...), :data:`_FITS` or
        :data:`_TOO_LONG` (it takes every prefix of a valid string, and this one is
        or is not one)."""
        schema = self._resolve(schema, depth)
        if schema is True:
            return _FITS
        if not isinstance(schema, Mapping) or depth > 32:
            return _FIXED if schema is not False else _NO_STRINGS
        arms = schema.get("anyOf", schema.get("oneOf"))
        if isinstance(arms, list):
            found = [self._string_status(arm, length, depth + 1) for arm in arms]
            return max(found, default=_NO_STRINGS)  # (_FIXED > _FITS > _TOO_LONG > none)
        kinds = _types(schema)
        if kinds is not None and "string" not in kinds:
            return _NO_STRINGS
        if not _GROWABLE.issuperset(schema):
            return _FIXED
        most = schema.get("maxLength")
        return _TOO_LONG if isinstance(most, int) and length > most else _FITS

    def _container(
        self, schema: Any, value: Any, last: tuple[int, bool] | None, path: tuple[Any, ...]
    ) -> tuple[Any, int]:
        """An open container (or a complete one shown leniently): its members or items valid
        so far; ``last``: its last member is still being read (its ``open`` and
        ``growing``)."""
        if len(path) > 2 * MAX_DEPTH:
            return NOTHING, 0
        shape = self._shapes.get(id(schema))
        if shape is None or shape.schema is not schema:
            shape = self._shape(schema)
        target = shape.target
        if target is None:
            return NOTHING, shape.dropped
        arms = shape.arms
        if arms is not None:
            # The arm that leaves out the fewest values (the first of those): with a valid
            # final value, the arm it is valid under leaves out none, at every step. Where
            # several arms take such a container, only its complete members are shown: the
            # arms may differ on what to show of one still being read, and what one showed
            # another could take back.
            if last is not None and self._arms_taking(shape, value) > 1:
                last = _HIDDEN
            best: tuple[Any, int] | None = None
            fewest = 1  # what an arm that shows nothing leaves out, at the fewest
            for arm in arms:
                shown, dropped = self._container(arm, value, last, path)
                if shown is NOTHING:
                    fewest = min(fewest, dropped)
                elif best is None or dropped < best[1]:
                    best = (shown, dropped)
                    if dropped == 0:
                        break
            return best if best is not None else (NOTHING, fewest)
        if isinstance(value, dict):
            if not shape.objects:
                return NOTHING, 1
            return self._object(target, value, last, path)
        if not shape.arrays:
            return NOTHING, 1
        return self._array(target, value, last, path)

    def _arms_taking(self, shape: _Shape, value: Any) -> int:
        """How many arms of ``shape`` may take a container like ``value`` (an object, an
        array), nested unions counted arm by arm."""
        is_object = isinstance(value, dict)
        count = shape.objects_taken if is_object else shape.arrays_taken
        if count is None:
            count = 0
            for arm in shape.arms or ():
                inner = self._shapes.get(id(arm))
                if inner is None or inner.schema is not arm:
                    inner = self._shape(arm)
                if inner.arms is not None:
                    count += self._arms_taking(inner, value)
                elif inner.target is None:
                    count += 0 if inner.dropped else 1  # judged whole: it may take it
                else:
                    count += 1 if (inner.objects if is_object else inner.arrays) else 0
            if is_object:
                shape.objects_taken = count
            else:
                shape.arrays_taken = count
        return count

    def _shape(self, schema: Any) -> _Shape:
        """How an open container is walked under ``schema`` (made once per schema)."""
        target = self._resolve(schema, 0)
        if target is True:
            target = _ANY
        shape = _Shape(schema)
        if target is False:
            shape.dropped = 1  # nothing is valid
        elif isinstance(target, Mapping):
            arms = target.get("anyOf", target.get("oneOf"))
            if any(keyword in target for keyword in _WHOLE):
                pass  # judged as a whole: shown once complete
            elif isinstance(arms, list):
                shape.target, shape.arms = target, arms
            else:
                shape.target = target
                kinds = _types(target)
                shape.objects = kinds is None or "object" in kinds
                shape.arrays = kinds is None or "array" in kinds
        if len(self._shapes) >= _MEMO_LIMIT:
            self._shapes.clear()
        self._shapes[id(schema)] = shape
        return shape

    def _complete(self, schemas: list[Any], value: Any, path: tuple[Any, ...]) -> bool:
        """A complete ``value`` (at ``path``) is valid against every one of ``schemas``. A
        container the walk saw open under its (one, structural) schema is judged from what the
        walk checked of its members -- each complete value is validated once, not again at
        every level above it."""
        if len(schemas) == 1 and isinstance(value, dict | list):
            schema = schemas[0]
            if isinstance(schema, Mapping) and _STRUCTURAL.issuperset(schema):
                state = self._opened.get((path, id(schema)))
                if state is not None and state.schema is schema:
                    return self._whole(schema, value, path)
        return all(self._valid(schema, value) for schema in schemas)

    def _whole(self, schema: Mapping[str, Any], value: Any, path: tuple[Any, ...]) -> bool:
        """A complete container, seen open under the structural ``schema``: valid when its
        type fits, no member was left out and its size and required keys fit."""
        kinds = _types(schema)
        size = len(value)
        if isinstance(value, dict):
            if kinds is not None and "object" not in kinds:
                return False
            if self._object(schema, value, None, path)[1]:
                return False
            required = schema.get("required", ())
            if isinstance(required, list) and any(key not in value for key in required):
                return False
            least, most = schema.get("minProperties", 0), schema.get("maxProperties")
        else:
            if kinds is not None and "array" not in kinds:
                return False
            if self._array(schema, value, None, path)[1]:
                return False
            least, most = schema.get("minItems", 0), schema.get("maxItems")
        return size >= least and (most is None or size <= most)

    def _state(self, path: tuple[Any, ...], schema: Mapping[str, Any], fresh: Any) -> _Open:
        """What was checked of the container at ``path`` under ``schema`` (a container there
        is one and the same for the whole answer, and only grows while it is open)."""
        key = (path, id(schema))
        known = self._opened.get(key)
        if known is None or known.schema is not schema:
            if len(self._opened) >= _MEMO_LIMIT:
                self._opened.clear()
            known = self._opened[key] = _Open(schema, fresh)
        return known

    def _object(
        self,
        schema: Mapping[str, Any],
        value: dict[str, Any],
        last: tuple[int, bool] | None,
        path: tuple[Any, ...],
    ) -> tuple[dict[str, Any], int]:
        state = self._state(path, schema, {})
        shown: dict[str, Any] = state.shown
        complete = len(value) - (1 if last is not None else 0)
        if state.checked < complete:
            for key, member in itertools.islice(value.items(), state.checked, complete):
                schemas = self._member_schemas(schema, key)
                if self._complete(schemas, member, (*path, key)):
                    shown[key] = member
                else:
                    state.dropped += 1
            state.checked = complete
        if last is None or not value:
            return dict(shown), state.dropped
        key, member = next(reversed(value.items()))
        schemas = self._member_schemas(schema, key)
        if len(schemas) > 1:
            return dict(shown), state.dropped  # under several schemas: shown once complete
        part, lost = self._node(schemas[0], member, *last, (*path, key))
        out = dict(shown)
        if part is not NOTHING:
            out[key] = part
        return out, state.dropped + lost

    def _member_schemas(self, schema: Mapping[str, Any], key: str) -> list[Any]:
        """The schemas the member ``key`` of an object of ``schema`` must satisfy."""
        known = self._members.get((id(schema), key))
        if known is not None and known[0] is schema:
            return known[1]
        schemas = self._find_member_schemas(schema, key)
        if len(self._members) >= _MEMO_LIMIT:
            self._members.clear()
        self._members[(id(schema), key)] = (schema, schemas)
        return schemas

    def _find_member_schemas(self, schema: Mapping[str, Any], key: str) -> list[Any]:
        properties = schema.get("properties")
        schemas = [properties[key]] if isinstance(properties, Mapping) and key in properties else []
        patterns = schema.get("patternProperties")
        if isinstance(patterns, Mapping):
            for text, sub in patterns.items():
                pattern = _pattern(text)
                if pattern is not None and pattern.search(key):
                    schemas.append(sub)
        if not schemas:
            schemas.append(schema.get("additionalProperties", True))
        return schemas

    def _array(
        self,
        schema: Mapping[str, Any],
        value: list[Any],
        last: tuple[int, bool] | None,
        path: tuple[Any, ...],
    ) -> tuple[list[Any], int]:
        leading = schema.get("prefixItems")
        if not isinstance(leading, list):
            leading = []
        rest = schema.get("items", True)
        state = self._state(path, schema, [])
        shown: list[Any] = state.shown
        complete = len(value) - (1 if last is not None else 0)
        if state.checked < complete and not state.dropped:
            for index in range(state.checked, complete):
                item = value[index]
                sub = leading[index] if index < len(leading) else rest
                if not self._complete([sub], item, (*path, index)):
                    state.dropped = 1  # the items after an invalid one are not shown either
                    break
                shown.append(item)
            state.checked = complete
        if state.dropped or last is None or not value:
            return list(shown), state.dropped
        index = len(value) - 1
        sub = leading[index] if index < len(leading) else rest
        part, lost = self._node(sub, value[index], *last, (*path, index))
        out = [*shown, part] if part is not NOTHING else list(shown)
        return out, lost


class _Shape:
    """How open containers are walked under ``schema``: under ``target`` (the schema, its
    ``$ref`` followed; ``None``: they are not shown open -- ``dropped`` says whether that
    leaves a value out), by ``arms`` (``anyOf``/``oneOf``), or as objects or arrays."""

    __slots__ = (
        "arms",
        "arrays",
        "arrays_taken",
        "dropped",
        "objects",
        "objects_taken",
        "schema",
        "target",
    )

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.target: Mapping[str, Any] | None = None
        self.arms: list[Any] | None = None
        self.dropped = 0
        self.objects = False
        self.arrays = False
        # How many of the arms take an object, an array (None: not counted yet).
        self.objects_taken: int | None = None
        self.arrays_taken: int | None = None


class _Open:
    """What was checked of one open container: its first ``checked`` members (or items), those
    of them ``shown``, and how many were left out (an array: 1 once one was, and then no more
    is checked)."""

    __slots__ = ("checked", "dropped", "schema", "shown")

    def __init__(self, schema: Mapping[str, Any], shown: Any) -> None:
        self.schema = schema
        self.shown = shown
        self.checked = 0
        self.dropped = 0


#: The last member of a container, still being read, is not shown (see ``_Lenient._node``).
_HIDDEN: Final = (-1, False)

#: The schema ``true`` stands for, as a dict (one object: the walk caches by schema identity).
_ANY: Final[Mapping[str, Any]] = {}


def partial_value(schema: Mapping[str, Any] | bool, prefix: JSONPrefix) -> Any:
    """What to show of a JSON value being read (``prefix``, from a
    :class:`~protocols.partial_json.PartialJSON`) as a value of ``schema``, validated
    leniently -- :data:`~protocols.partial_json.NOTHING` when nothing of it can be shown yet.

    Complete values are validated strictly against their part of the schema: a member or an
    item that fails is left out (and, in an array, the items after it too). Open containers
    are shown member by member, without the keywords that judge a container as a whole
    (``required``, ``minItems``, ...); one under a schema that judges it only as a whole
    (``enum``, ``const``, ``not``, ``if``, ``allOf``, a ``$ref`` it cannot follow) is shown
    once complete. Under ``anyOf``/``oneOf``, the arm that leaves the fewest values out (the
    first of those) is shown; in an open container that several arms may take (a union of
    object shapes), only complete members are shown. A growing string is shown only where
    every schema that may take a string there takes every prefix of a valid string
    (``type: string`` with ``maxLength`` at most, or no constraint) and one takes this one. A
    complete value valid as a whole is returned as it is; one invalid as a whole is shown
    member by member as an open one would be.

    Guarantees: the result is consistent with the final value whenever that value is valid:
    every member or item shown is the final one's (a growing string a prefix of it, an open
    container a partial of it), and each later prefix shows at least as much. Raises
    :class:`~protocols.errors.ValidationError` for an invalid schema. For many prefixes of
    one stream, :class:`PartialOutput` does the same at the price of what is new."""
    return _Lenient(schema).value(prefix)


class PartialOutput:
    """A structured answer of ``schema`` while it streams: feed it the answer's text, read
    :attr:`value`, the part of it known so far validated leniently (:func:`partial_value`),
    or :data:`~protocols.partial_json.NOTHING` before anything of it is.

    ``strings=True`` shows a string still being read as it grows (where the schema allows every
    prefix of it); by default a string is shown once complete. ``max_chars``: the most
    characters of an answer read. :meth:`reset` starts a new answer (a retry).

    For a class's schema the value is a ``dict`` of the fields known so far, keyed as in the
    JSON (an alias, an init name), with nested objects partial too -- never an instance: the
    class (and its validators) builds the final answer only, from the complete value.

    Cost: linear in the text, plus, for each feed that shows something new, a copy of the open
    containers (complete values inside are shared, and each is validated once).
    """

    def __init__(
        self,
        schema: Mapping[str, Any] | bool,
        *,
        strings: bool = False,
        max_chars: int = MAX_CHARS,
    ) -> None:
        self._lenient = _Lenient(schema)
        self.reader = PartialJSON(strings=strings, max_chars=max_chars)
        #: The part of the answer known so far (NOTHING: none yet).
        self.value: Any = NOTHING

    @property
    def schema(self) -> Mapping[str, Any] | bool:
        """The schema answers are validated against."""
        return self._lenient.schema

    def reset(self) -> None:
        """Forget the answer read so far: the next feed starts a new one."""
        self.reader.reset()
        self._lenient.reset()
        self.value = NOTHING

    def feed(self, text: str) -> bool:
        """Read the next piece of the answer; True when :attr:`value` changed.

        Raises :class:`~protocols.errors.ProtocolError` (``code="json"``) once the text cannot
        be a JSON value any more (not JSON at all, say), and
        :class:`~protocols.errors.SizeLimitError` past ``max_chars`` -- then again on every
        later feed, until :meth:`reset`."""
        if not self.reader.feed(text):
            return False
        return self._update()

    def close(self) -> bool:
        """The answer's text has ended (a number at its very end is complete now); True when
        :attr:`value` changed. Raises :class:`~protocols.errors.ProtocolError` when the text
        is not a complete JSON value."""
        self.reader.close()
        return self._update()

    def _update(self) -> bool:
        value = self._lenient.value(self.reader.prefix())
        before = self.value
        if value is before or (type(value) is type(before) and value == before):
            return False
        self.value = value
        return True
