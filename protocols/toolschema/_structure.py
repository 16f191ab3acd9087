"""Validated JSON arguments turned into the typed values a function takes."""

from __future__ import annotations

import enum
import functools
import math
import typing
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

from .._json import json_kind
from ..errors import ValidationError
from ._pydantic import is_pydantic, pydantic_problems, pydantic_validator
from ._schema import (
    _MAPPINGS,
    _SEQUENCES,
    _UNIONS,
    MAX_PROBLEMS,
    ToolSignature,
    _describe,
    _excerpt,
    _json_type,
    _unknown_reason,
    _unsupported,
    _unwrap,
    is_record,
    is_typeddict,
    record_fields,
)
from ._validate import _choices, _join, _key, _render

# ---------------------------------------------------------------------------------------------
# Structuring


class _Mismatch(Exception):
    """Values that do not fit: ``str()`` is their problems, ``"<path>: <message>"`` each,
    joined with ``"; "``."""

    def __init__(self, path: str, message: str, *more: str) -> None:
        self.problems = (f"{path}: {message}", *more)
        super().__init__("; ".join(self.problems))

    @classmethod
    def of(cls, problems: list[str]) -> _Mismatch:
        """Problems already written as ``"<path>: <message>"``."""
        first, _, message = problems[0].partition(": ")
        return cls(first, message, *problems[1:])


_Structure = Callable[[Any, str], Any]


@functools.lru_cache(maxsize=4096)
def _root_path(name: str) -> str:
    """The JSON path of the parameter ``name`` (a signature's names are few, and asked for on
    every call)."""
    return _join("$", name)


#: Each signature's parameters as (name, JSON path, structurer), by the signature's identity
#: (signatures are read-only): what :func:`structure_arguments` would look up on every call.
_PLANS: dict[int, tuple[ToolSignature, tuple[tuple[str, str, _Structure], ...]]] = {}


def _plan(signature: ToolSignature) -> tuple[tuple[str, str, _Structure], ...]:
    cached = _PLANS.get(id(signature))
    if cached is not None and cached[0] is signature:
        return cached[1]
    plan = tuple(
        (name, _root_path(name), _planned(annotation))
        for name, annotation in signature.types.items()
    )
    if len(_PLANS) >= 256:
        _PLANS.clear()
    _PLANS[id(signature)] = (signature, plan)
    return plan


def _planned(annotation: Any) -> _Structure:
    try:
        return _structurer(annotation)
    except Exception:
        # Built where it is used, each time, failing there as it would unplanned.
        def build(value: Any, path: str) -> Any:
            return _structurer(annotation)(value, path)

        return build


def structure_arguments(signature: ToolSignature, arguments: dict[str, Any]) -> dict[str, Any]:
    """Turn validated JSON ``arguments`` into typed values per ``signature.types``.

    Builds Enum members, tuples, pydantic models (``model_validate``), dataclass and attrs
    instances (by init name), TypedDicts, lists and dicts; keeps Literal
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
    types = signature.types
    problems = (
        []
        if arguments.keys() <= types.keys()
        else [
            f"{_join('$', key)}: unknown argument {_key(key)}"
            for key in arguments
            if key not in types
        ]
    )
    values: dict[str, Any] = {}
    for name, path, build in _plan(signature):
        if name in arguments:
            try:
                values[name] = build(arguments[name], path)
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


def structure_value(annotation: Any, value: Any) -> Any:
    """Turn one validated JSON ``value`` into a value of ``annotation`` (any annotation
    :func:`schema_for` takes): a pydantic model through its ``model_validate``, a dataclass,
    attrs class or TypedDict field by field, and so on as for :func:`structure_arguments`.

    Raises :class:`~protocols.errors.ValidationError` whose message lists each value that does
    not fit, ``"<json path>: <message>"`` (paths from ``$``), joined with ``"; "`` -- a
    pydantic validator's refusal as pydantic words it, without the value or a link; at most
    :data:`MAX_PROBLEMS` of them. Also for an annotation :func:`schema_for` refuses.
    """
    build = _structurer(annotation)
    try:
        return build(value, "$")
    except _Mismatch as exc:
        problems = list(exc.problems)
    except RecursionError:
        problems = ["$: nested too deeply"]
    if len(problems) > MAX_PROBLEMS:
        problems = [*problems[: MAX_PROBLEMS - 1], "$: more problems not shown"]
    raise ValidationError("; ".join(problems))


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
    if is_pydantic(annotation):
        return _pydantic(annotation)
    if is_record(annotation):
        if annotation in stack:
            raise _unsupported(annotation, "recursive classes are not supported")
        return _record(annotation, (*stack, annotation))
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


def _refused(cls: type, exc: Exception, path: str) -> _Mismatch:
    """A class that refused the value it was built from: pydantic's errors one by one (a
    pydantic model inside an attrs class raises them too), or the exception's text."""
    problems = pydantic_problems(exc, _join, path)
    if problems:
        return _Mismatch.of(problems)
    detail = _excerpt(str(exc) or type(exc).__name__)
    return _Mismatch(path, f"{cls.__name__} refused the value: {detail}")


def _pydantic(cls: type) -> _Structure:
    validate = pydantic_validator(cls)

    def structure(value: Any, path: str) -> Any:
        try:
            return validate(value)
        except Exception as exc:
            raise _refused(cls, exc, path) from None

    return structure


def _record(cls: type, stack: tuple[type, ...]) -> _Structure:
    fields = [
        (field.key, _build(field.annotation, stack), field.required) for field in record_fields(cls)
    ]
    known = [key for key, _, _ in fields]
    allowed = _excerpt(", ".join(known)) if known else "(none)"
    typed_dict = is_typeddict(cls)  # its value is the dict itself, its fields structured

    def structure(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _Mismatch(path, f"expected an object, got {json_kind(value)}")
        for key in value:
            if key not in known:
                where = _join(path, key) if isinstance(key, str) else path
                raise _Mismatch(where, f"unknown field {_key(str(key))}; allowed: {allowed}")
        kwargs: dict[str, Any] = {}
        for key, item, required in fields:
            if key in value:
                kwargs[key] = item(value[key], _join(path, key))
            elif required:
                raise _Mismatch(_join(path, key), f"missing required field {_key(key)}")
        if typed_dict:
            return kwargs
        try:
            return cls(**kwargs)
        except Exception as exc:
            raise _refused(cls, exc, path) from None

    return structure
