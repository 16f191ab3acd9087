"""The one converter between the data model and JSON, and strict JSON text.

- :func:`to_json` / :func:`from_json` turn any data-model object into plain JSON data (dicts, lists,
  strings, numbers) and back. Fields equal to their default are omitted; ``from_json`` accepts them
  absent or present.
- :func:`encode` / :func:`decode` do the same to and from JSON *text*.
- :func:`dumps` / :func:`loads` (and :func:`dumpb`) are strict JSON text for any JSON value.

Decoding is strict, because these are our own wire formats: unknown fields are refused, a ``bool``
is never accepted where an ``int`` is required, a number never where a string is, a string never
where a list is. Every refusal raises :class:`~protocols.errors.ProtocolError` (``code="decode"``)
listing each problem with its JSON path, e.g. ``$.calls[0].name: must be a non-empty str``.
"""

from __future__ import annotations

import decimal
import enum
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar, get_args, get_origin, overload

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory
from cattrs.errors import ForbiddenExtraKeysError
from cattrs.gen import make_dict_unstructure_fn, override

from ._json import JSON, MAX_DEPTH, check_json, dumpb, dumps, loads
from .errors import Category, ProtocolError
from .messages import ToolFailure, ToolResult, ToolSuccess

__all__ = [
    "JSON",
    "MAX_DEPTH",
    "check_json",
    "converter",
    "decode",
    "dumpb",
    "dumps",
    "encode",
    "from_json",
    "loads",
    "to_json",
]

T = TypeVar("T")


def _type_error(expected: str, value: object) -> TypeError:
    return TypeError(f"expected {expected}, got {type(value).__name__}")


def _structure_str(value: object, _: type) -> str:
    if not isinstance(value, str):
        raise _type_error("a string", value)
    return value


def _structure_int(value: object, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error("an integer", value)
    return value


def _structure_float(value: object, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _type_error("a number", value)
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def _structure_bool(value: object, _: type) -> bool:
    if not isinstance(value, bool):
        raise _type_error("true or false", value)
    return value


#: A decimal amount (money) on the wire: a JSON string in plain notation, exact.
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")


def _unstructure_decimal(value: decimal.Decimal) -> str:
    return format(value, "f")


def _structure_decimal(value: object, _: type) -> decimal.Decimal:
    if not isinstance(value, str):
        raise _type_error('a decimal string such as "0.25"', value)
    if len(value) > 100 or not _DECIMAL.fullmatch(value):
        raise ValueError(f'expected a decimal string such as "0.25", got {value[:40]!r}')
    return decimal.Decimal(value)


def _is_homogeneous_tuple(cls: Any) -> bool:
    args = get_args(cls)
    return get_origin(cls) is tuple and len(args) == 2 and args[1] is Ellipsis


def _strict_tuple_factory(cls: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = homogenous_tuple_structure_factory(cls, conv)

    def structure(value: Any, target: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise _type_error("an array", value)
        return inner(value, target)

    return structure


def _is_str_keyed_dict(cls: Any) -> bool:
    return get_origin(cls) is dict


def _structure_object(value: object, _: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _type_error("an object", value)
    return value


def _enum_value(member: enum.Enum) -> Any:
    return member.value


def _structure_enum(value: object, cls: type[enum.StrEnum]) -> enum.StrEnum:
    if not isinstance(value, str):
        raise _type_error("a string", value)
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in cls)
        raise ValueError(
            f"{value!r} is not a valid {cls.__name__}; expected one of {allowed}"
        ) from None


def _unstructure_factory(cls: type, conv: cattrs.Converter) -> Callable[[Any], dict[str, Any]]:
    """The unstructure hook of an attrs class, omitting defaults without calling factories.

    cattrs' own ``omit_if_default`` calls a field's default factory (and its converter) on every
    object to compare against it: for a message that is a fresh uuid, a clock read and a JSON
    check each time. Here a deterministic factory's value is computed once; a factory that mints
    a new value per call (an id, a timestamp) can never equal the field, so the field is always
    written, as before. The output is the same dict, in the same key order.
    """
    constants: list[tuple[str, Any]] = []
    overrides: dict[str, Any] = {}
    for field in attrs.fields(cls):
        default = field.default
        if isinstance(default, attrs.Factory) and not default.takes_self:  # type: ignore[arg-type]
            convert = field.converter if callable(field.converter) else (lambda value: value)
            first, second = convert(default.factory()), convert(default.factory())
            overrides[field.name] = override(omit_if_default=False)
            if first == second:
                constants.append((field.name, first))
    base: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(
        cls, conv, _cattrs_omit_if_default=True, **overrides
    )
    if not constants:
        return base

    def unstructure(obj: Any) -> dict[str, Any]:
        data = base(obj)
        for name, empty in constants:
            if getattr(obj, name) == empty:
                del data[name]
        return data

    return unstructure


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, omit_if_default=True)
    conv.register_unstructure_hook_factory(attrs.has, _unstructure_factory)
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook(bool, _structure_bool)
    # Money (Cost.amount, prices, caps) travels as a decimal string: exact, and strict JSON.
    conv.register_unstructure_hook(decimal.Decimal, _unstructure_decimal)
    conv.register_structure_hook(decimal.Decimal, _structure_decimal)
    conv.register_structure_hook_factory(_is_homogeneous_tuple, _strict_tuple_factory)
    # JSON-object fields (tool arguments, schemas, extra) are validated by the classes themselves.
    conv.register_structure_hook_func(_is_str_keyed_dict, _structure_object)
    # Every StrEnum (Role, StopReason, JobStatus, ...) travels as its plain string value.
    # (registered on StrEnum itself, which comes before str in every such enum's MRO: cattrs
    # would otherwise treat the members as plain str, as is.) Structured here too, so a bad value
    # is reported at its own path ($.role), not the object's.
    conv.register_unstructure_hook(enum.StrEnum, _enum_value)
    conv.register_structure_hook(enum.StrEnum, _structure_enum)

    plain_success = conv.get_unstructure_hook(ToolSuccess)
    plain_failure = conv.get_unstructure_hook(ToolFailure)
    structure_success = conv.get_structure_hook(ToolSuccess)
    structure_failure = conv.get_structure_hook(ToolFailure)

    # Tool results carry their arm as "success": true/false, so the union decodes unambiguously.
    def unstructure_success(result: ToolSuccess) -> dict[str, Any]:
        return {"success": True, **plain_success(result)}

    def unstructure_failure(result: ToolFailure) -> dict[str, Any]:
        return {"success": False, **plain_failure(result)}

    def arm(value: object) -> bool:
        if not isinstance(value, dict):
            raise _type_error("an object", value)
        tag = value.get("success")
        if not isinstance(tag, bool):
            raise ValueError('a tool result needs "success": true or false')
        return tag

    def untagged(value: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in value.items() if k != "success"}

    def structure_result(value: Any, _: Any) -> ToolResult:
        if arm(value):
            return structure_success(untagged(value), ToolSuccess)  # type: ignore[no-any-return]
        return structure_failure(untagged(value), ToolFailure)  # type: ignore[no-any-return]

    def structure_one(expected: bool) -> Callable[[Any, Any], Any]:
        def structure(value: Any, target: Any) -> Any:
            if arm(value) is not expected:
                raise ValueError(f'a {target.__name__} needs "success": {str(expected).lower()}')
            return structure_result(value, target)

        return structure

    conv.register_unstructure_hook(ToolSuccess, unstructure_success)
    conv.register_unstructure_hook(ToolFailure, unstructure_failure)
    conv.register_structure_hook(ToolSuccess, structure_one(True))
    conv.register_structure_hook(ToolFailure, structure_one(False))
    conv.register_structure_hook_func(lambda t: t == ToolResult, structure_result)
    return conv


#: The one cattrs converter for the data model. Register hooks on it only for new model types.
converter = _make_converter()


def _format(exc: BaseException, _: type | None) -> str:
    if isinstance(exc, ForbiddenExtraKeysError):
        return "unknown field(s) " + ", ".join(repr(key) for key in sorted(exc.extra_fields))
    if isinstance(exc, KeyError):
        return "required field missing"
    return str(exc) or type(exc).__name__


def to_json(obj: Any) -> JSON:
    """Convert a data-model object (or a list/tuple/dict of them) to plain JSON data.

    Guarantees: the result serialises with :func:`dumps` and ``from_json(type(obj), to_json(obj))
    == obj``.
    """
    return converter.unstructure(obj)


@overload
def from_json(cls: type[T], data: JSON, *, category: Category = ...) -> T: ...
@overload
def from_json(cls: object, data: JSON, *, category: Category = ...) -> Any: ...
def from_json(cls: object, data: JSON, *, category: Category = Category.PROVIDER) -> Any:
    """Build a ``cls`` (a data-model class, a ``list[...]`` of one, or the ``ToolResult`` union)
    from plain JSON data, strictly.

    Raises :class:`~protocols.errors.ProtocolError` (``code="decode"``, the given ``category``)
    listing every problem found with its JSON path: unknown fields, missing fields, wrong types,
    values that break the model's invariants.
    """
    try:
        return converter.structure(data, cls)  # type: ignore[arg-type]
    except Exception as exc:
        problems = cattrs.transform_error(exc, path="$", format_exception=_format)
        name = "ToolResult" if cls == ToolResult else getattr(cls, "__name__", None) or str(cls)
        detail = "; ".join(_locate(problem) for problem in problems)
        raise ProtocolError(f"invalid {name}: {detail}", code="decode", category=category) from None


def _locate(problem: str) -> str:
    # cattrs renders "message @ $.path"; lead with the path, which is what readers scan for.
    message, sep, path = problem.rpartition(" @ ")
    return f"{path}: {message}" if sep else problem


def encode(obj: Any, *, canonical: bool = False) -> str:
    """:func:`to_json` then :func:`dumps`: compact strict JSON text (sorted keys if canonical)."""
    return dumps(to_json(obj), canonical=canonical)


@overload
def decode(cls: type[T], text: str | bytes, *, category: Category = ...) -> T: ...
@overload
def decode(cls: object, text: str | bytes, *, category: Category = ...) -> Any: ...
def decode(cls: object, text: str | bytes, *, category: Category = Category.PROVIDER) -> Any:
    """:func:`loads` then :func:`from_json`; every failure is a :class:`ProtocolError`.

    ``cls`` is a data-model class, a ``list[...]`` of one, or the ``ToolResult`` union.
    """
    return from_json(cls, loads(text, category=category), category=category)
