"""Tool schemas from typed Python functions, and model arguments checked and turned into values.

Pure and sans-IO. Four functions:

- :func:`signature_of` reads a function's signature, type hints and Google-style docstring into a
  :class:`ToolSignature`: a name, a one-paragraph description and a JSON Schema object of
  parameters, plus the resolved types and the defaults.
- :func:`schema_for` is the JSON Schema (Draft 2020-12) of one annotation.
- :func:`validate_arguments` lists every problem of a model's arguments against a schema, each as
  ``"<json path>: <message>"``; it never raises.
- :func:`structure_arguments` turns validated JSON arguments into typed Python values.

Supported annotations and their schemas:

=========================================  =========================================================
``str`` / ``int`` / ``float`` / ``bool``   ``string`` / ``integer`` / ``number`` / ``boolean``;
                                           a ``float`` parameter also accepts integers (made float)
``None``                                   ``{"type": "null"}``
``X | None``, ``Optional[X]``, ``Union``   ``anyOf`` of the members, in order
``Literal[...]`` (str, int, bool, None)    ``enum`` of the values with their ``type``
``Enum`` subclasses (scalar values)        ``enum`` of the member values with their ``type``
``list[X]``, ``Sequence[X]``               ``{"type": "array", "items": X}``
``tuple[X, ...]`` / ``tuple[X, Y]``        ``items`` / ``prefixItems`` with ``minItems = maxItems``
``dict[str, X]``, ``Mapping[str, X]``      ``{"type": "object", "additionalProperties": X}``
attrs classes                              an object of the ``__init__`` fields (by their init
                                           name), ``required`` = fields without a default,
                                           ``additionalProperties: false``; nested classes inline
``Annotated[X, "text"]``                   X's schema with ``"description": "text"``
``Any``, ``object``                        ``{}`` (anything)
=========================================  =========================================================

Refused with :class:`~protocols.errors.ValidationError` naming the annotation and why: anything
else (``datetime``, ``bytes``, ``set``, plain classes, dataclasses, type variables, unresolved
forward references, dicts with non-string keys) and **recursive attrs classes**. Schemas are
always inlined, never ``$ref``/``$defs``: not every vendor resolves references, and a tool's
arguments are a finite tree a model writes out anyway.

Descriptions: the description of an attrs class is the summary of its docstring, and each field's
comes from the class docstring's ``Attributes:`` section. An explicit ``Annotated`` text wins over
a docstring entry, which wins over the type's own description. Defaults are not written into the
schema (they are in :attr:`ToolSignature.defaults`), but each is checked to fit it.

Union values are structured by trying the members in the order written: the first that accepts
the JSON value wins (``str | Color`` keeps ``"red"`` a string; ``float | int`` makes ``1`` a
float). Written by hand rather than with a cattrs converter because structuring here runs after
validation against a schema generated from the same annotations, so it is a straight walk; doing
it ourselves keeps the JSON paths identical to :func:`validate_arguments` and the messages
bounded (cattrs' messages embed value reprs), and keeps ``bool`` apart from ``int`` in
``Literal``/``Enum`` lookups.
"""

from __future__ import annotations

import collections.abc
import enum
import functools
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import attrs
from jsonschema import Draft202012Validator, SchemaError
from jsonschema import ValidationError as SchemaViolation

from ._json import MAX_DEPTH, json_kind
from .errors import ValidationError
from .messages import ToolDefinition

__all__ = [
    "MAX_PROBLEMS",
    "ToolSignature",
    "schema_for",
    "signature_of",
    "structure_arguments",
    "validate_arguments",
]

#: The most problems :func:`validate_arguments` returns (the last one may say more were left out).
MAX_PROBLEMS: Final = 20

_TEXT_LIMIT: Final = 200  # the longest excerpt of a message, a value or a list of names
_KEY_LIMIT: Final = 64  # the longest object key quoted in a path or message
_INT_BITS: Final = 1024  # larger integers are refused (beyond any float, and costly to print)
_SCAN_LIMIT: Final = 200  # the most jsonschema errors inspected per call

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@attrs.frozen
class ToolSignature:
    """What :func:`signature_of` reads from a function.

    ``parameters`` is a JSON Schema object (``type``, ``properties`` in parameter order,
    ``required``, ``additionalProperties: false``); ``types`` maps each parameter to its resolved
    annotation (``Annotated`` kept) and ``defaults`` each optional parameter to its default.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    types: dict[str, Any]
    defaults: dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Docstrings


_SECTION: Final = re.compile(
    r"(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
    r"Attributes|Returns?|Yields?|Raises|Examples?|Notes?|Warnings?|See Also|Todo|References)"
    r"\s*:\s*"
)
_PARAM_SECTIONS: Final = frozenset(
    {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
)
_ENTRY: Final = re.compile(r"\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:(.*)")


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _parse_doc(doc: str | None, sections: frozenset[str]) -> tuple[str, dict[str, str]]:
    """The summary of a Google-style docstring and the entries of its ``sections``."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    entries: dict[str, list[str]] = {}
    index = 0
    while index < len(lines) and not _SECTION.fullmatch(lines[index].strip()):
        summary.append(lines[index])
        index += 1
    while index < len(lines):
        header = _SECTION.fullmatch(lines[index].strip())
        base = _indent(lines[index])
        index += 1
        entry_indent: int | None = None
        current: list[str] | None = None
        while index < len(lines):
            line = lines[index]
            if line.strip() and _indent(line) <= base:
                break
            index += 1
            if not line.strip() or header is None or header.group(1) not in sections:
                continue
            if entry_indent is None:
                entry_indent = _indent(line)
            match = _ENTRY.fullmatch(line.strip()) if _indent(line) <= entry_indent else None
            if match:
                current = entries.setdefault(match.group(1), [])
                current.append(match.group(2))
            elif current is not None:
                current.append(line)
        # Text at the section's own level that is not a header ends it: skip to the next header.
        while index < len(lines) and not _SECTION.fullmatch(lines[index].strip()):
            index += 1
    described = {name: _normalise(" ".join(text)) for name, text in entries.items()}
    return _normalise(" ".join(summary)), {name: text for name, text in described.items() if text}


# ---------------------------------------------------------------------------------------------
# Schemas


def _describe(annotation: Any) -> str:
    text = getattr(annotation, "__qualname__", None) if isinstance(annotation, type) else None
    if text is not None and annotation.__module__ not in ("builtins", __name__):
        text = f"{annotation.__module__}.{text}"
    text = text or repr(annotation).replace("typing.", "")
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


def _unsupported(annotation: Any, why: str) -> ValidationError:
    return ValidationError(f"unsupported annotation {_describe(annotation)}: {why}")


_REASONS: Final[dict[Any, str]] = {
    bytes: "bytes cannot travel in JSON; use str (e.g. base64)",
    bytearray: "bytes cannot travel in JSON; use str (e.g. base64)",
    set: "JSON has no sets; use list[X]",
    frozenset: "JSON has no sets; use list[X]",
    complex: "JSON has no complex numbers; use two floats",
}


def _unknown_reason(annotation: Any) -> str:
    origin = get_origin(annotation) or annotation
    if origin in _REASONS:
        return _REASONS[origin]
    if isinstance(annotation, typing.TypeVar):
        return "a type variable has no JSON Schema; use a concrete type"
    if isinstance(annotation, str | typing.ForwardRef):
        return "an unresolved forward reference; define the type at module level"
    if origin is not annotation and attrs.has(origin):
        return "generic attrs classes are not supported; use a concrete attrs class"
    if isinstance(origin, type) and origin.__module__ in ("datetime", "decimal", "uuid"):
        return "no JSON Schema mapping; take a str (and parse it) or an attrs class"
    return (
        "no JSON Schema mapping; use str, int, float, bool, None, a Literal, an Enum, "
        "list, tuple, dict[str, X], an attrs class, a union of those, or Any"
    )


def _unwrap(annotation: Any) -> tuple[Any, str | None]:
    """The annotation without ``Annotated`` (and NewType) layers, and the outermost description."""
    description: str | None = None
    while True:
        if get_origin(annotation) is Annotated:
            texts = [item for item in annotation.__metadata__ if isinstance(item, str)]
            if texts and description is None:
                description = _normalise(" ".join(texts))
            annotation = annotation.__origin__
        elif isinstance(annotation, typing.NewType):
            annotation = annotation.__supertype__
        else:
            return annotation, description


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = list(dict.fromkeys(_json_type(value) for value in values))
    if "number" in kinds and "integer" in kinds:
        kinds.remove("integer")
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int)


_SEQUENCES: Final = (list, collections.abc.Sequence, collections.abc.MutableSequence)
_MAPPINGS: Final = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_UNIONS: Final = (Union, types.UnionType)


def schema_for(annotation: Any) -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of one annotation; see the module docstring for the map.

    Raises :class:`~protocols.errors.ValidationError` naming the annotation and the reason when it
    (or anything inside it) has no JSON form, or is a recursive attrs class. The result is a new
    dict each call.
    """
    return _schema(annotation, ())


def _schema(annotation: Any, stack: tuple[type, ...]) -> dict[str, Any]:
    annotation, description = _unwrap(annotation)
    schema = _plain_schema(annotation, stack)
    if description:
        schema["description"] = description
    return schema


def _plain_schema(annotation: Any, stack: tuple[type, ...]) -> dict[str, Any]:
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any or annotation is object:
        return {}
    if annotation is None or annotation is type(None):
        return {"type": "null"}
    for kind, name in ((bool, "boolean"), (str, "string"), (int, "integer"), (float, "number")):
        if annotation is kind:
            return {"type": name}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [member.value for member in annotation]
        if not values:
            raise _unsupported(annotation, "an Enum without members accepts nothing")
        if not all(_is_scalar(value) for value in values):
            raise _unsupported(annotation, "Enum values must be str, int, finite float or None")
        return _enum_schema(values)
    if origin is Literal:
        if not all(value is None or isinstance(value, str | int) for value in args):
            raise _unsupported(annotation, "Literal values must be str, int, bool or None")
        return _enum_schema(list(args))
    if origin in _UNIONS:
        return {"anyOf": [_schema(arm, stack) for arm in args]}
    if annotation in _SEQUENCES or origin in _SEQUENCES:
        return {"type": "array", "items": _schema(args[0], stack) if args else {}}
    if annotation is tuple or origin is tuple:
        return _tuple_schema(annotation, args, stack)
    if annotation in _MAPPINGS or origin in _MAPPINGS:
        if not args:
            return {"type": "object"}
        key = _unwrap(args[0])[0]
        if key is not str and key is not Any:
            raise _unsupported(annotation, "JSON object keys are strings; use dict[str, X]")
        return {"type": "object", "additionalProperties": _schema(args[1], stack)}
    if isinstance(annotation, type) and attrs.has(annotation):
        return _attrs_schema(annotation, stack)
    raise _unsupported(annotation, _unknown_reason(annotation))


def _tuple_schema(
    annotation: Any, args: tuple[Any, ...], stack: tuple[type, ...]
) -> dict[str, Any]:
    if annotation is tuple or annotation is typing.Tuple:  # noqa: UP006
        return {"type": "array", "items": {}}
    if len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _schema(args[0], stack)}
    if not args:  # tuple[()]
        return {"type": "array", "maxItems": 0}
    if Ellipsis in args:
        raise _unsupported(annotation, "'...' is only allowed as tuple[X, ...]")
    return {
        "type": "array",
        "prefixItems": [_schema(arg, stack) for arg in args],
        "minItems": len(args),
        "maxItems": len(args),
    }


def _init_fields(cls: type) -> list[attrs.Attribute[Any]]:
    return [field for field in attrs.fields(cls) if field.init]


def _alias(field: attrs.Attribute[Any]) -> str:
    """The name a field takes in ``__init__`` (and in JSON): ``_x`` is ``x``."""
    return field.alias or field.name


def _class_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise ValidationError(
            f"cannot resolve the type hints of {_describe(cls)}: {_excerpt(str(exc))} "
            "(define the types it uses at module level)"
        ) from None


def _has_description(annotation: Any) -> bool:
    return _unwrap(annotation)[1] is not None


def _attrs_schema(cls: type, stack: tuple[type, ...]) -> dict[str, Any]:
    if cls in stack:
        chain = " -> ".join(klass.__qualname__ for klass in (*stack[stack.index(cls) :], cls))
        raise ValidationError(
            f"unsupported annotation {_describe(cls)}: recursive attrs classes are not supported "
            f"({chain}); schemas are inlined, without $ref"
        )
    hints = _class_hints(cls)
    summary, documented = _parse_doc(cls.__doc__, frozenset({"Attributes", *_PARAM_SECTIONS}))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in _init_fields(cls):
        annotation = hints.get(field.name, field.type)
        if annotation is None:
            raise ValidationError(f"field {field.name!r} of {_describe(cls)} has no type")
        try:
            schema = _schema(annotation, (*stack, cls))
        except ValidationError as exc:
            raise ValidationError(f"{_describe(cls)}.{field.name}: {exc.message}") from None
        text = documented.get(field.name) or documented.get(_alias(field))
        if text and not _has_description(annotation):
            schema["description"] = text
        properties[_alias(field)] = schema
        if field.default is attrs.NOTHING:
            required.append(_alias(field))
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if summary:
        schema["description"] = summary
    return schema


# ---------------------------------------------------------------------------------------------
# Signatures


def _hints_of(function: Any, name: str) -> dict[str, Any]:
    target = function
    if isinstance(function, type):
        target = function.__init__  # type: ignore[misc]  # a class: its __init__ carries the annotations
    elif not inspect.isroutine(function) and callable(function):
        target = function.__call__  # a callable object: its __call__ carries the annotations
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        raise ValidationError(
            f"tool {name!r}: cannot resolve its type hints: {_excerpt(str(exc))} "
            "(define the types it uses at module level)"
        ) from None


def signature_of(
    function: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> ToolSignature:
    """Read ``function``'s name, description, parameter schema, types and defaults.

    ``name`` defaults to ``function.__name__`` and ``description`` to the docstring's summary
    (the text before its first section such as ``Args:``, whitespace collapsed to single spaces).
    Each parameter's ``description`` comes from ``Annotated[X, "text"]`` or else from the
    docstring's Google-style ``Args:`` entry (continuation lines joined).

    Raises :class:`~protocols.errors.ValidationError` naming the tool and the parameter for:
    ``*args``/``**kwargs``, positional-only parameters, a parameter without an annotation, an
    unsupported annotation, a default that does not fit its schema, or a name/schema that
    :class:`~protocols.messages.ToolDefinition` refuses.
    """
    tool_name = name if name is not None else getattr(function, "__name__", None)
    if not isinstance(tool_name, str):
        raise ValidationError("a tool needs a name: pass name=... for this callable")
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"tool {tool_name!r}: cannot read its signature: {exc}") from None
    hints = _hints_of(function, tool_name)
    summary, documented = _parse_doc(getattr(function, "__doc__", None), _PARAM_SECTIONS)
    properties: dict[str, Any] = {}
    required: list[str] = []
    types_: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for parameter in parameters.values():
        where = f"tool {tool_name!r}, parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            star = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            raise ValidationError(
                f"{where}: {star}{parameter.name} is not supported; "
                "a tool takes named parameters only"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ValidationError(
                f"{where}: positional-only parameters are not supported; "
                "the model passes arguments by name"
            )
        if parameter.name not in hints:
            raise ValidationError(
                f"{where}: no type annotation; annotate it so its JSON Schema can be generated"
            )
        annotation = hints[parameter.name]
        try:
            schema = schema_for(annotation)
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc.message}") from None
        text = documented.get(parameter.name)
        if text and not _has_description(annotation):
            schema["description"] = text
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        else:
            _check_default(where, parameter.default, annotation, schema)
            defaults[parameter.name] = parameter.default
        properties[parameter.name] = schema
        types_[parameter.name] = annotation
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    text = summary if description is None else description
    ToolDefinition(tool_name, text, schema)  # the same checks a provider request will make
    return ToolSignature(tool_name, text, schema, types_, defaults)


def _dump(value: Any) -> Any:
    """A Python value as JSON data (Enum -> value, attrs -> dict by init name, tuple -> list)."""
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(type(value)):
        return {
            _alias(field): _dump(getattr(value, field.name)) for field in _init_fields(type(value))
        }
    if isinstance(value, list | tuple):
        return [_dump(item) for item in value]
    if isinstance(value, dict):
        return {key: _dump(item) for key, item in value.items()}
    return value


def _check_default(where: str, default: Any, annotation: Any, schema: dict[str, Any]) -> None:
    """A default must fit the schema in its JSON form, and be what structuring that JSON gives
    back (a ``"red"`` default for an Enum parameter, or a dict for an attrs one, is refused)."""
    try:
        dumped = _dump(default)
        problems = _problems(Draft202012Validator(schema), dumped, top=False)
        if not problems and not _same(_structurer(annotation)(dumped, "$"), default):
            problems = [f"$: not a value of type {_describe(_unwrap(annotation)[0])}"]
    except _Mismatch as exc:
        problems = [str(exc)]
    except RecursionError:
        problems = ["$: nested too deeply"]
    if problems:
        raise ValidationError(
            f"{where}: the default {_excerpt(repr(default))} does not fit the parameter's "
            f"schema: {'; '.join(problems)}"
        )


def _same(structured: Any, default: Any) -> bool:
    """Whether a default equals its own structured JSON form (a tuple for a list is fine)."""
    if isinstance(structured, list | tuple) and isinstance(default, list | tuple):
        return len(structured) == len(default) and all(map(_same, structured, default))
    if isinstance(structured, dict) and isinstance(default, dict):
        return structured.keys() == default.keys() and all(
            _same(structured[key], default[key]) for key in structured
        )
    if attrs.has(type(structured)) and type(default) is type(structured):
        return True  # fields already checked against the schema; eq may be off
    return bool(structured == default)


# ---------------------------------------------------------------------------------------------
# Validation


def _excerpt(text: str, limit: int = _TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(key: str) -> str:
    return repr(_excerpt(key, _KEY_LIMIT))


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _NAME.fullmatch(key) and len(key) <= _KEY_LIMIT:
        return f"{path}.{key}"
    return f"{path}[{json.dumps(_excerpt(key, _KEY_LIMIT))}]"


def _path(parts: Iterable[str | int]) -> str:
    path = "$"
    for part in parts:
        path = _join(path, part)
    return path


_TYPE_WORDS: Final = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}


def _expected_types(value: Any) -> str:
    names = value if isinstance(value, list) else [value]
    return " or ".join(_TYPE_WORDS.get(str(name), repr(name)) for name in names)


def _render(value: Any) -> str:
    try:
        return _excerpt(json.dumps(value, ensure_ascii=False), 60)
    except (TypeError, ValueError):
        return json_kind(value)


def _choices(values: Any) -> str:
    items = values if isinstance(values, list) else [values]
    shown = ", ".join(_render(value) for value in items[:20])
    return _excerpt(shown + (", ..." if len(items) > 20 else ""))


def _json_problems(value: Any, path: str, depth: int, out: list[tuple[str, str, bool]]) -> None:
    """Non-JSON values in a model's arguments: (path, message, fatal). Fatal ones stop the
    schema check (jsonschema could fail on them)."""
    if len(out) > MAX_PROBLEMS:
        return
    if depth > MAX_DEPTH:
        out.append((path, f"nested deeper than {MAX_DEPTH} levels", True))
    elif isinstance(value, float):
        if not math.isfinite(value):
            word = "NaN" if math.isnan(value) else "Infinity"
            out.append((path, f"{word} is not a valid number; numbers must be finite", False))
    elif isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _INT_BITS:
            out.append((path, f"integer too large (more than {_INT_BITS} bits)", True))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _json_problems(item, _join(path, index), depth + 1, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                out.append((path, f"object key {_excerpt(repr(key), 60)} is not a string", True))
            else:
                _json_problems(item, _join(path, key), depth + 1, out)
    elif not (value is None or isinstance(value, str | bool)):
        out.append((path, f"{json_kind(value)} is not a JSON value", True))


#: A flat object schema's fast check: its properties' accepted Python types, the required
#: names, whether other keys are allowed.
_Flat = tuple[dict[str, Callable[[Any], bool]], frozenset[str], bool]

_VALIDATORS: dict[int, tuple[dict[str, Any], Draft202012Validator, _Flat | None]] = {}

# Property keywords that only annotate (they never make a value invalid).
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "deprecated"})


def _is_string(value: Any) -> bool:
    return type(value) is str


def _is_integer(value: Any) -> bool:
    return type(value) is int and value.bit_length() <= _INT_BITS


def _is_number(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    return kind is int and value.bit_length() <= _INT_BITS


def _is_boolean(value: Any) -> bool:
    return type(value) is bool


_FLAT_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": _is_string,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": _is_boolean,
}


def _flat(parameters: dict[str, Any]) -> _Flat | None:
    """The fast check of a flat schema -- an object whose properties are plain strings,
    integers, numbers or booleans, the commonest tool signature -- or None for any other."""
    if set(parameters) - {"type", "properties", "required", "additionalProperties", *_ANNOTATIONS}:
        return None
    properties = parameters.get("properties", {})
    required = parameters.get("required", [])
    additional = parameters.get("additionalProperties", True)
    if (
        parameters.get("type") != "object"
        or not isinstance(properties, dict)
        or not isinstance(required, list)
        or not all(isinstance(name, str) for name in required)
        or additional not in (True, False)
    ):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, schema in properties.items():
        if not isinstance(schema, dict) or set(schema) - {"type", *_ANNOTATIONS}:
            return None
        kind = schema.get("type")
        check = _FLAT_TYPES.get(kind) if isinstance(kind, str) else None
        if check is None:
            return None
        checks[name] = check
    return checks, frozenset(required), bool(additional)


def _flat_valid(flat: _Flat, arguments: Any) -> bool:
    """True only when ``arguments`` certainly satisfies the flat schema (False: unsure)."""
    checks, required, additional = flat
    if type(arguments) is not dict:
        return False
    for name, value in arguments.items():
        check = checks.get(name)
        if check is None:
            # An extra key the schema allows: sure only of a string under a string key.
            if not additional or type(name) is not str or type(value) is not str:
                return False
        elif not check(value):
            return False
    return required.issubset(arguments)


def _validator(parameters: dict[str, Any]) -> tuple[Draft202012Validator, _Flat | None]:
    """A checked validator for ``parameters`` and its fast check, if flat; cached by identity
    (schemas are read-only)."""
    cached = _VALIDATORS.get(id(parameters))
    if cached is not None and cached[0] is parameters:
        return cached[1], cached[2]
    Draft202012Validator.check_schema(parameters)
    validator = Draft202012Validator(parameters)
    flat = _flat(parameters)
    if len(_VALIDATORS) >= 256:
        _VALIDATORS.clear()
    _VALIDATORS[id(parameters)] = (parameters, validator, flat)
    return validator, flat


def validate_arguments(parameters: dict[str, Any], arguments: Any) -> list[str]:
    """Every problem of a model's ``arguments`` against the JSON Schema ``parameters``.

    Each problem is ``"<json path>: <message>"`` (paths like ``$.items[2].name``): unknown keys
    name the allowed ones (``$.x: unknown argument 'x'; allowed: a, b``), missing ones are named,
    a ``null`` where it is not allowed, ``NaN``/``Infinity`` (never valid here, although JSON
    Schema's ``number`` would take them), non-JSON values, wrong types, values outside an
    ``enum``. Validates with Draft 2020-12, format checks off. An empty list means valid.

    Guarantees: never raises, whatever the inputs; at most :data:`MAX_PROBLEMS` entries (the
    last then says more were left out), each bounded in size.
    """
    schema: Any = parameters  # typed as a dict, but any input must be answered
    try:
        if not isinstance(schema, dict):
            return ["$: the tool's parameter schema is not a JSON object"]
        try:
            validator, flat = _validator(schema)
        except SchemaError as exc:
            return [f"$: the tool's parameter schema is invalid: {_excerpt(exc.message)}"]
        # The hot path: a flat schema's valid arguments need no walk through jsonschema (which
        # costs tens of microseconds a call). Anything else, and every invalid value, takes
        # the general path, which names the problems.
        if flat is not None and _flat_valid(flat, arguments):
            return []
        return _problems(validator, arguments, top=True)
    except Exception as exc:
        return [f"$: the arguments could not be validated ({type(exc).__name__})"]


def _problems(validator: Draft202012Validator, arguments: Any, *, top: bool) -> list[str]:
    found: list[tuple[str, str, bool]] = []
    _json_problems(arguments, "$", 0, found)
    problems = [f"{path}: {message}" for path, message, _ in found]
    if not any(fatal for _, _, fatal in found):
        # Schema errors at or under a path already reported (a NaN) would only repeat it.
        flagged = tuple(f"{path}{mark}" for path, _, _ in found for mark in ":.[")
        seen = set(problems)
        for problem in _schema_problems(validator.iter_errors(arguments), top=top):
            if problem in seen or (flagged and problem.startswith(flagged)):
                continue
            seen.add(problem)
            problems.append(problem)
            if len(problems) > MAX_PROBLEMS:
                break
    if len(problems) > MAX_PROBLEMS:
        problems = [*problems[: MAX_PROBLEMS - 1], "$: more problems not shown"]
    return problems


def _bounded(errors: Iterable[SchemaViolation]) -> list[SchemaViolation]:
    out: list[SchemaViolation] = []
    for error in errors:
        out.append(error)
        if len(out) >= _SCAN_LIMIT:
            break
    return out


def _schema_problems(errors: Iterable[SchemaViolation], *, top: bool) -> Iterator[str]:
    errors = _bounded(errors)
    typed = {tuple(error.absolute_path) for error in errors if error.validator == "type"}
    for error in errors:
        where = tuple(error.absolute_path)
        if error.validator in ("enum", "const") and where in typed:
            continue  # "expected a string" already says it; the enum adds nothing
        yield from _messages(error, _path(where), top=top and not where)


def _messages(error: SchemaViolation, path: str, *, top: bool) -> Iterator[str]:
    kind, instance, value = error.validator, error.instance, error.validator_value
    noun = "argument" if top else "field"
    if kind == "type":
        expected = _expected_types(value)
        if instance is None:
            yield f"{path}: null is not allowed here; expected {expected}"
        else:
            yield f"{path}: expected {expected}, got {json_kind(instance)}"
    elif kind == "additionalProperties" and value is False and isinstance(instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        known = list(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        allowed = _excerpt(", ".join(known)) if known else "(none)"
        for key in instance:
            if key in known or any(re.search(pattern, key) for pattern in patterns):
                continue
            yield f"{_join(path, key)}: unknown {noun} {_key(key)}; allowed: {allowed}"
    elif kind == "required" and isinstance(instance, dict) and isinstance(value, list):
        for key in value:
            if isinstance(key, str) and key not in instance:
                yield f"{_join(path, key)}: missing required {noun} {_key(key)}"
    elif kind == "enum":
        yield f"{path}: expected one of {_choices(value)}, got {_render(instance)}"
    elif kind == "const":
        yield f"{path}: expected {_render(value)}, got {_render(instance)}"
    elif kind in ("minItems", "maxItems") and isinstance(instance, list):
        bound = "at least" if kind == "minItems" else "at most"
        yield f"{path}: expected {bound} {value} items, got {len(instance)}"
    elif kind in ("anyOf", "oneOf") and error.context:
        yield from _alternatives(error, path, top=top)
    else:
        yield f"{path}: {_excerpt(error.message)}"


def _alternatives(error: SchemaViolation, path: str, *, top: bool) -> Iterator[str]:
    """An ``anyOf`` failure: the one arm whose JSON type fits, else what every arm expects."""
    arms: dict[Any, list[SchemaViolation]] = {}
    for sub in error.context or ():
        arms.setdefault(sub.relative_schema_path[0], []).append(sub)
    fitting = [
        errs
        for errs in arms.values()
        if not any(sub.validator == "type" and not sub.relative_path for sub in errs)
    ]
    if len(fitting) == 1:
        yield from _schema_problems(fitting[0], top=top)
        return
    options = error.validator_value if isinstance(error.validator_value, list) else []
    words = " or ".join(dict.fromkeys(_option(option) for option in options))
    yield f"{path}: expected {_excerpt(words)}, got {json_kind(error.instance)}"


def _option(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "a value of another form"
    if "enum" in schema:
        return f"one of {_choices(schema['enum'])}"
    if "const" in schema:
        return _render(schema["const"])
    if "type" in schema:
        return _expected_types(schema["type"])
    return "a value of another form"


# ---------------------------------------------------------------------------------------------
# Structuring


class _Mismatch(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")


_Structure = Callable[[Any, str], Any]


def structure_arguments(signature: ToolSignature, arguments: dict[str, Any]) -> dict[str, Any]:
    """Turn validated JSON ``arguments`` into typed values per ``signature.types``.

    Builds Enum members, tuples, attrs instances (by init name), lists and dicts; keeps Literal
    values as they are; makes integers given for ``float`` float; fills the defaults of missing
    optional parameters. The result is keyed by parameter name, in parameter order.

    Raises :class:`~protocols.errors.ValidationError` listing each value that still does not fit
    with its JSON path (call :func:`validate_arguments` first and this only catches what a
    schema cannot say, such as an attrs validator's refusal).
    """
    if not isinstance(arguments, dict):
        raise ValidationError(
            f"invalid arguments for tool {signature.name!r}: $: expected an object, "
            f"got {json_kind(arguments)}"
        )
    problems = [
        f"{_join('$', key)}: unknown argument {_key(key)}"
        for key in arguments
        if key not in signature.types
    ]
    values: dict[str, Any] = {}
    for name, annotation in signature.types.items():
        path = _join("$", name)
        if name in arguments:
            try:
                values[name] = _structurer(annotation)(arguments[name], path)
            except _Mismatch as exc:
                problems.append(str(exc))
            except RecursionError:
                problems.append(f"{path}: nested too deeply")
        elif name in signature.defaults:
            values[name] = signature.defaults[name]
        else:
            problems.append(f"{path}: missing required argument {_key(name)}")
    if problems:
        shown = "; ".join(problems[:MAX_PROBLEMS])
        raise ValidationError(f"invalid arguments for tool {signature.name!r}: {shown}")
    return values


def _structurer(annotation: Any) -> _Structure:
    # Keyed with the repr too: ``int | float == float | int``, but union order matters here.
    try:
        return _cached_structurer(annotation, repr(annotation))
    except TypeError:  # unhashable metadata in an Annotated: build it uncached
        return _build(annotation, ())


@functools.lru_cache(maxsize=1024)
def _cached_structurer(annotation: Any, text: str) -> _Structure:
    return _build(annotation, ())


def _identity(value: Any, path: str) -> Any:
    return value


def _scalar(kind: type, word: str) -> _Structure:
    def structure(value: Any, path: str) -> Any:
        if type(value) is bool and kind is not bool:
            raise _Mismatch(path, f"expected {word}, got a boolean")
        if not isinstance(value, kind):
            raise _Mismatch(path, f"expected {word}, got {json_kind(value)}")
        return value

    return structure


def _float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Mismatch(path, f"expected a number, got {json_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Mismatch(path, "numbers must be finite")
    try:
        return float(value)
    except OverflowError:
        raise _Mismatch(path, "number too large") from None


def _lookup_key(value: Any) -> tuple[str, Any]:
    # bool and None apart from numbers; int and float alike (1 == 1.0 as in JSON Schema)
    kind = "number" if isinstance(value, int | float) and not isinstance(value, bool) else None
    return (kind or _json_type(value), value)


def _choice(table: dict[tuple[str, Any], Any], expected: str) -> _Structure:
    def structure(value: Any, path: str) -> Any:
        try:
            return table[_lookup_key(value)]
        except (KeyError, TypeError):
            raise _Mismatch(path, f"expected one of {expected}, got {_render(value)}") from None

    return structure


def _build(annotation: Any, stack: tuple[type, ...]) -> _Structure:
    annotation = _unwrap(annotation)[0]
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any or annotation is object:
        return _identity
    if annotation is None or annotation is type(None):
        return _scalar(type(None), "null")
    if annotation is float:
        return _float
    for kind, word in ((bool, "a boolean"), (str, "a string"), (int, "an integer")):
        if annotation is kind:
            return _scalar(kind, word)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        table = {_lookup_key(member.value): member for member in annotation}
        return _choice(table, _choices([member.value for member in annotation]))
    if origin is Literal:
        return _choice({_lookup_key(value): value for value in args}, _choices(list(args)))
    if origin in _UNIONS:
        return _union([_build(arm, stack) for arm in args], annotation)
    if annotation in _SEQUENCES or origin in _SEQUENCES:
        return _sequence(_build(args[0], stack) if args else _identity, list)
    if annotation is tuple or origin is tuple:
        if annotation is tuple or annotation is typing.Tuple:  # noqa: UP006
            return _sequence(_identity, tuple)
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(_build(args[0], stack), tuple)
        return _fixed([_build(arg, stack) for arg in args])
    if annotation in _MAPPINGS or origin in _MAPPINGS:
        return _mapping(_build(args[1], stack) if args else _identity)
    if isinstance(annotation, type) and attrs.has(annotation):
        if annotation in stack:
            raise _unsupported(annotation, "recursive attrs classes are not supported")
        return _attrs(annotation, (*stack, annotation))
    raise _unsupported(annotation, _unknown_reason(annotation))


def _union(arms: list[_Structure], annotation: Any) -> _Structure:
    def structure(value: Any, path: str) -> Any:
        for arm in arms:
            try:
                return arm(value, path)
            except _Mismatch:
                continue
        raise _Mismatch(path, f"fits none of {_describe(annotation)}, got {json_kind(value)}")

    return structure


def _sequence(item: _Structure, result: type[list[Any]] | type[tuple[Any, ...]]) -> _Structure:
    def structure(value: Any, path: str) -> Any:
        if not isinstance(value, list | tuple):
            raise _Mismatch(path, f"expected an array, got {json_kind(value)}")
        return result(item(element, _join(path, index)) for index, element in enumerate(value))

    return structure


def _fixed(items: list[_Structure]) -> _Structure:
    def structure(value: Any, path: str) -> Any:
        if not isinstance(value, list | tuple):
            raise _Mismatch(path, f"expected an array, got {json_kind(value)}")
        if len(value) != len(items):
            raise _Mismatch(path, f"expected {len(items)} items, got {len(value)}")
        return tuple(
            item(element, _join(path, index))
            for index, (item, element) in enumerate(zip(items, value, strict=True))
        )

    return structure


def _mapping(item: _Structure) -> _Structure:
    def structure(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _Mismatch(path, f"expected an object, got {json_kind(value)}")
        out: dict[str, Any] = {}
        for key, element in value.items():
            if not isinstance(key, str):
                raise _Mismatch(path, f"object key {_excerpt(repr(key), 60)} is not a string")
            out[key] = item(element, _join(path, key))
        return out

    return structure


def _attrs(cls: type, stack: tuple[type, ...]) -> _Structure:
    hints = _class_hints(cls)
    fields = [
        (_alias(field), _build(hints.get(field.name, field.type), stack), field.default)
        for field in _init_fields(cls)
    ]
    known = [alias for alias, _, _ in fields]
    allowed = _excerpt(", ".join(known)) if known else "(none)"

    def structure(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _Mismatch(path, f"expected an object, got {json_kind(value)}")
        for key in value:
            if key not in known:
                where = _join(path, key) if isinstance(key, str) else path
                raise _Mismatch(where, f"unknown field {_key(str(key))}; allowed: {allowed}")
        kwargs: dict[str, Any] = {}
        for alias, item, default in fields:
            if alias in value:
                kwargs[alias] = item(value[alias], _join(path, alias))
            elif default is attrs.NOTHING:
                raise _Mismatch(_join(path, alias), f"missing required field {_key(alias)}")
        try:
            return cls(**kwargs)
        except Exception as exc:
            detail = _excerpt(str(exc) or type(exc).__name__)
            raise _Mismatch(path, f"{cls.__name__} refused the value: {detail}") from None

    return structure
