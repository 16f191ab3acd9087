"""The checks and converters the data model's fields run (each raises a
:class:`~protocols.errors.ValidationError` naming ``Class.field``), and the cache of tool schemas
already found valid; :mod:`protocols.messages` uses them."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs
from jsonschema import SchemaError
from jsonschema.validators import validator_for

from ._json import check_json
from ._schema_root import object_root
from .errors import ValidationError
from .settings import cache_breakpoints, stop_sequences

#: Tool names every major vendor accepts: 1-64 of ASCII letters, digits, ``_`` and ``-``.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


# ---------------------------------------------------------------------------------------------
# Validation helpers (each raises ValidationError naming "Class.field").


def _fail(owner: str, field: str, rule: str) -> ValidationError:
    return ValidationError(f"{owner}.{field} {rule}")


def _owner(instance: object) -> str:
    return type(instance).__name__


def _str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise _fail(_owner(instance), attribute.name, f"must be a str, not {type(value).__name__}")


def _nonempty_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(_owner(instance), attribute.name, "must be a non-empty str")


def _optional_nonempty_str(
    instance: object, attribute: attrs.Attribute[Any], value: object
) -> None:
    if value is not None:
        _nonempty_str(instance, attribute, value)


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise _fail(_owner(instance), attribute.name, f"must be a bool, not {type(value).__name__}")


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(_owner(instance), attribute.name, f"must be an int >= 0, not {value!r}")


_E = TypeVar("_E", bound=enum.StrEnum)
_T = TypeVar("_T")


def _enum(cls: type[_E], value: object) -> _E:
    if isinstance(value, cls):
        return value
    try:
        return cls(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in cls)
        raise ValidationError(
            f"{value!r} is not a valid {cls.__name__}; expected one of {allowed}"
        ) from None


def _tuple(kind: type[_T], what: str, value: object) -> tuple[_T, ...]:
    """Any iterable (but not a str/bytes/mapping) of ``kind`` as a tuple."""
    if type(value) is tuple:  # (the common case, without the abstract classes' checks)
        items: tuple[Any, ...] = value
    elif isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a sequence of {kind.__name__}")
    else:
        items = tuple(value)
    for index, item in enumerate(items):
        if not isinstance(item, kind):
            raise ValidationError(
                f"{what}[{index}] must be a {kind.__name__}, not {type(item).__name__}"
            )
    return items


def _object(what: str, value: object) -> dict[str, Any]:
    """A strict-JSON object (dict with str keys), repaired of lone surrogates."""
    if type(value) is dict and not value:
        return value  # (the common case: an empty object is strict JSON)
    if not isinstance(value, Mapping):
        raise ValidationError(f"{what} must be a JSON object, not {type(value).__name__}")
    checked = check_json(value, what=what)
    return checked if isinstance(checked, dict) else dict(checked)


def _to_arguments(value: Mapping[str, Any]) -> dict[str, Any]:
    return _object("ToolCall.arguments", value)


def _to_parameters(value: Mapping[str, Any]) -> dict[str, Any]:
    schema = _object("ToolDefinition.parameters", value)
    rooted = object_root(schema)  # a typeless anyOf/oneOf of objects gets its "type": "object"
    return schema if rooted is None else dict(rooted)


def _to_schema(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else _object("ProviderOptions.schema", value)


def _to_extra(value: Mapping[str, Any]) -> dict[str, Any]:
    return _object("ProviderOptions.extra", value)


def _to_continuation(value: Mapping[str, Any]) -> dict[str, Any]:
    return _object("continuation", value)


def _to_denied(value: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(text, str) and text for key, text in value.items()
    ):
        raise ValidationError("ProviderResult.denied must map call ids to non-empty strings")
    return dict(value)


def _to_value(value: Any) -> Any:
    return check_json(value, what="ToolSuccess.value")


def _to_images(value: Iterable[str]) -> tuple[str, ...]:
    return _tuple(str, "Message.images", value)


def _to_result_images(value: Iterable[str]) -> tuple[str, ...]:
    return _tuple(str, "ToolSuccess.images", value)


def _check_images(
    instance: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]
) -> None:
    for index, image in enumerate(value):
        if not image:
            raise _fail(
                _owner(instance),
                f"{attribute.name}[{index}]",
                "must be a non-empty base64 string or data: URL",
            )


def _to_stop_sequences(value: Iterable[str]) -> tuple[str, ...]:
    return stop_sequences("ProviderOptions", value)


def _to_breakpoints(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else cache_breakpoints("ProviderOptions", value)


#: Schemas already found valid, by their exact form (``repr``: a tuple is not a list, key order
#: kept): checking one against the meta-schema costs about a millisecond, and the same tool
#: schemas are checked again and again (every agent made a tool, every decoded tool
#: definition). Bounded; cleared when full.
_VALID_SCHEMAS: dict[str, None] = {}
_VALID_SCHEMAS_MAX = 1024


def _check_schema(what: str, schema: Mapping[str, Any]) -> None:
    key = repr(schema)
    if key in _VALID_SCHEMAS:
        return
    try:
        validator_for(schema).check_schema(dict(schema))
    except SchemaError as exc:
        location = "/".join(str(part) for part in exc.path) or "(root)"
        raise ValidationError(
            f"{what} is not a valid JSON Schema at {location}: {exc.message}"
        ) from None
    if len(_VALID_SCHEMAS) >= _VALID_SCHEMAS_MAX:
        _VALID_SCHEMAS.clear()
    _VALID_SCHEMAS[key] = None


def _check_tool_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _TOOL_NAME.fullmatch(value):
        raise ValidationError(
            f"ToolDefinition.name must be 1-64 ASCII letters, digits, '_' or '-', not {value!r}"
        )


def _empty_object_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


def _check_created_at(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValidationError(f"Message.created_at must be a finite number >= 0, not {value!r}")


def _to_timestamp(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"Message.created_at must be a number, not {type(value).__name__}")
    return float(value)


def _check_tool_choice(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None or value in ("auto", "none", "required"):
        return
    if not isinstance(value, str) or not _TOOL_NAME.fullmatch(value):
        raise ValidationError(
            "ProviderOptions.tool_choice must be 'auto', 'none', 'required' or a tool name, "
            f"not {value!r}"
        )


def _check_output_schema(
    instance: object, attribute: attrs.Attribute[Any], value: dict[str, Any] | None
) -> None:
    if value is not None:
        _check_schema("ProviderOptions.schema", value)


def _optional_bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _bool(instance, attribute, value)


def _check_channel(_: object, __: attrs.Attribute[str], value: str) -> None:
    if value not in ("content", "thinking"):
        raise ValidationError(f"Delta.channel must be 'content' or 'thinking', not {value!r}")


def _check_delta_text(_: object, __: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError("Delta.text must be a non-empty string")


#: The longest response model name or response id a :class:`ProviderResult` holds (characters).
_MAX_RESPONSE_NAME = 256


def _response_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value or len(value) > _MAX_RESPONSE_NAME:
        raise _fail(
            _owner(instance),
            attribute.name,
            f"must be None or a non-empty str of at most {_MAX_RESPONSE_NAME} characters",
        )
