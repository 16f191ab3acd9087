"""Tool JSON Schemas from typed Python: docstrings and annotations."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import math
import re
import types
import typing
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import attrs

from ..errors import ValidationError
from ._pydantic import is_pydantic, is_pydantic_v1_model, pydantic_schema

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
    ``context`` names the parameter the runtime fills with the run's context (one annotated with
    a class marked ``__tool_context__ = True``, such as ``actors.RunContext``); it is in none of
    the others, so the model never sees it.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    types: dict[str, Any]
    defaults: dict[str, Any]
    context: str | None = None


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
    if origin is not annotation and (attrs.has(origin) or dataclasses.is_dataclass(origin)):
        return "generic attrs classes and dataclasses are not supported; use a concrete class"
    if isinstance(origin, type) and origin.__module__ in ("datetime", "decimal", "uuid"):
        return "no JSON Schema mapping; take a str (and parse it), or use a pydantic model"
    if is_pydantic_v1_model(origin):
        return "pydantic v1 models are not supported; use a pydantic v2 BaseModel"
    return (
        "no JSON Schema mapping; use str, int, float, bool, None, a Literal, an Enum, "
        "list, tuple, dict[str, X], a pydantic model, a dataclass, a TypedDict, an attrs "
        "class, a union of those, or Any"
    )


#: The qualifiers a TypedDict's keys may carry (typing's or typing_extensions', by name).
_QUALIFIERS: Final = frozenset({"Required", "NotRequired", "ReadOnly"})


def _qualifier(annotation: Any) -> str | None:
    """``"Required"``, ``"NotRequired"`` or ``"ReadOnly"`` for ``Q[X]``, else None."""
    name = getattr(get_origin(annotation), "_name", None)
    return name if name in _QUALIFIERS and get_args(annotation) else None


def _unwrap(annotation: Any) -> tuple[Any, str | None]:
    """The annotation without ``Annotated``, NewType and TypedDict qualifier (``Required``,
    ``NotRequired``, ``ReadOnly``) layers, and the outermost description."""
    description: str | None = None
    while True:
        if get_origin(annotation) is Annotated:
            texts = [item for item in annotation.__metadata__ if isinstance(item, str)]
            if texts and description is None:
                description = _normalise(" ".join(texts))
            annotation = annotation.__origin__
        elif isinstance(annotation, typing.NewType):
            annotation = annotation.__supertype__
        elif _qualifier(annotation) is not None:
            annotation = get_args(annotation)[0]
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
    (or anything inside it) has no JSON form, or is a recursive class. The result is a new
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
    if is_pydantic(annotation):
        return pydantic_schema(annotation)
    if is_record(annotation):
        return _record_schema(annotation, stack)
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


def is_typeddict(annotation: Any) -> bool:
    """A ``TypedDict`` class, typing's or typing_extensions' (``typing.is_typeddict`` knows
    only the first on Python < 3.12)."""
    return (
        isinstance(annotation, type)
        and issubclass(annotation, dict)
        and isinstance(getattr(annotation, "__required_keys__", None), frozenset)
        and isinstance(getattr(annotation, "__optional_keys__", None), frozenset)
    )


def is_record(annotation: Any) -> bool:
    """A class whose values are JSON objects of named fields this module reads itself: an
    attrs class, a dataclass or a TypedDict (pydantic classes go to pydantic)."""
    return isinstance(annotation, type) and (
        attrs.has(annotation) or dataclasses.is_dataclass(annotation) or is_typeddict(annotation)
    )


@attrs.frozen
class Field:
    """One field of a record class: its JSON name (the ``__init__`` name), the name its type
    hint and docstring entry are under, its annotation and whether it must be given."""

    key: str
    name: str
    annotation: Any
    required: bool


def record_fields(cls: type) -> list[Field]:
    """The fields of an attrs class, a dataclass or a TypedDict, in order (see :func:`is_record`).

    attrs: the ``__init__`` fields by init name, required without a default. Dataclasses: the
    ``__init__`` fields, required without a default or a default factory (``InitVar`` refused).
    TypedDict: every key, required as ``Required``/``NotRequired`` and ``total`` say.
    """
    hints = _class_hints(cls)
    if attrs.has(cls):
        fields = []
        for field in _init_fields(cls):
            annotation = hints.get(field.name, field.type)
            if annotation is None:
                raise ValidationError(f"field {field.name!r} of {_describe(cls)} has no type")
            required = field.default is attrs.NOTHING
            fields.append(Field(_alias(field), field.name, annotation, required))
        return fields
    if dataclasses.is_dataclass(cls):
        for name, hint in hints.items():
            if isinstance(hint, dataclasses.InitVar):
                raise ValidationError(
                    f"unsupported annotation {_describe(cls)}: its InitVar {name!r} has no "
                    "JSON form; make it a field"
                )
        return [
            Field(
                field.name,
                field.name,
                hints.get(field.name, field.type),
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING,
            )
            for field in dataclasses.fields(cls)
            if field.init
        ]
    fields = []
    for name, hint in hints.items():
        qualifiers = _qualifiers(hint)
        if "Required" in qualifiers:
            required = True
        elif "NotRequired" in qualifiers:
            required = False
        else:
            # ``__required_keys__`` misses Required/NotRequired written as strings
            # (``from __future__ import annotations``) on Python < 3.14: the hint decides then.
            required = name in cls.__required_keys__  # type: ignore[attr-defined]
        fields.append(Field(name, name, hint, required))
    return fields


def _qualifiers(annotation: Any) -> set[str]:
    found: set[str] = set()
    while True:
        if get_origin(annotation) is Annotated:
            annotation = annotation.__origin__
        elif (qualifier := _qualifier(annotation)) is not None:
            found.add(qualifier)
            annotation = get_args(annotation)[0]
        else:
            return found


def _class_doc(cls: type) -> str | None:
    """The docstring a class was written with: None for the one ``@dataclass`` makes up."""
    doc = cls.__doc__
    if doc and dataclasses.is_dataclass(cls):
        try:
            made_up = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            made_up = None
        if doc == made_up or re.fullmatch(re.escape(cls.__name__) + r"\(.*\)", doc):
            return None
    return doc


def _record_kind(cls: type) -> str:
    if attrs.has(cls):
        return "attrs classes"
    return "dataclasses" if dataclasses.is_dataclass(cls) else "TypedDicts"


def _record_schema(cls: type, stack: tuple[type, ...]) -> dict[str, Any]:
    if cls in stack:
        chain = " -> ".join(klass.__qualname__ for klass in (*stack[stack.index(cls) :], cls))
        raise ValidationError(
            f"unsupported annotation {_describe(cls)}: recursive {_record_kind(cls)} are not "
            f"supported ({chain}); schemas are inlined, without $ref"
        )
    summary, documented = _parse_doc(_class_doc(cls), frozenset({"Attributes", *_PARAM_SECTIONS}))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in record_fields(cls):
        try:
            schema = _schema(field.annotation, (*stack, cls))
        except ValidationError as exc:
            raise ValidationError(f"{_describe(cls)}.{field.name}: {exc.message}") from None
        text = documented.get(field.name) or documented.get(field.key)
        if text and not _has_description(field.annotation):
            schema["description"] = text
        properties[field.key] = schema
        if field.required:
            required.append(field.key)
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if summary:
        schema["description"] = summary
    return schema


def _excerpt(text: str, limit: int = _TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
