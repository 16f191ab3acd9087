"""A typed function read into a ToolSignature: its name, description, parameter schema and
checked defaults."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import typing
from collections.abc import Callable
from typing import Any

import attrs
from jsonschema import Draft202012Validator

from ..errors import ValidationError
from ..messages import ToolDefinition
from ._pydantic import is_pydantic, pydantic_dump
from ._schema import (
    _PARAM_SECTIONS,
    ToolSignature,
    _alias,
    _describe,
    _excerpt,
    _has_description,
    _init_fields,
    _parse_doc,
    _unwrap,
    schema_for,
)
from ._structure import _Mismatch, _structurer
from ._validate import _problems

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
    context: str | None = None
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
        if is_context_type(annotation):
            if context is not None:
                raise ValidationError(
                    f"{where}: a tool takes one run context parameter ({context!r} is one)"
                )
            context = parameter.name
            continue
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
    return ToolSignature(tool_name, text, schema, types_, defaults, context)


def is_context_type(annotation: Any) -> bool:
    """Whether ``annotation`` (``C``, ``C[Deps]``, ``Annotated[C[Deps], ...]``) names a class
    marked ``__tool_context__ = True``: a parameter the runtime fills, not the model."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and getattr(origin, "__tool_context__", False) is True


def _dump(value: Any) -> Any:
    """A Python value as JSON data (Enum -> value, attrs and dataclass -> dict by init name,
    pydantic -> its JSON dump by alias, tuple -> list)."""
    if isinstance(value, enum.Enum):
        return value.value
    if is_pydantic(type(value)):
        return pydantic_dump(value)
    if attrs.has(type(value)):
        return {
            _alias(field): _dump(getattr(value, field.name)) for field in _init_fields(type(value))
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _dump(getattr(value, field.name))
            for field in dataclasses.fields(value)
            if field.init
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
    if type(default) is type(structured) and (
        attrs.has(type(structured)) or dataclasses.is_dataclass(structured)
    ):
        return True  # fields already checked against the schema; eq may be off
    return bool(structured == default)
