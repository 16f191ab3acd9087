"""Model settings: how the model samples and how long it may answer, as data.

:class:`ModelSettings` is what an agent is given (``settings=``), what a run overrides, what a
durable job stores and what a relay frame carries. Each adapter's wire module maps its fields
to the vendor's names (``protocols.wire``); ``docs/providers.md`` says which fields a vendor
ignores or refuses. A field left ``None`` is not set: the vendor's (or the model's) default
applies, and nothing is sent for it.

Guarantees:

* A :class:`ModelSettings` is valid when it exists: every value out of range is refused at
  construction with a :class:`~protocols.errors.ValidationError` naming the field, so an
  invalid setting never reaches a provider call.
* :meth:`ModelSettings.merge` is field by field -- the other settings' set fields win, its
  unset ones leave these alone -- and associative; ``ModelSettings()`` is its identity.
* It is frozen and encodes to JSON (:func:`protocols.codec.to_json`) with only its set fields,
  and back, strictly (an unknown field is refused).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from ._json import JSON, check_json
from .errors import ValidationError

__all__ = [
    "MAX_STOP",
    "REASONING_EFFORTS",
    "ModelSettings",
    "ReasoningEffort",
    "SettingsLike",
]

#: How much the model reasons before it answers, where the vendor lets one say so.
ReasoningEffort: TypeAlias = Literal["low", "medium", "high"]

#: The values of :data:`ReasoningEffort`, lowest first.
REASONING_EFFORTS: Final[tuple[ReasoningEffort, ...]] = ("low", "medium", "high")

#: The most stop sequences one request may give (OpenAI takes at most 4; the others more).
MAX_STOP: Final = 16

#: The range of a seed: a signed 64-bit integer, as the vendors read it.
_SEED_RANGE: Final = (-(2**63), 2**63 - 1)


# ---------------------------------------------------------------------------------------------
# Validators and converters, shared with ProviderOptions (each names the instance's class).


def _fail(instance: object, field: str, rule: str, value: object) -> ValidationError:
    return ValidationError(f"{type(instance).__name__}.{field} must be {rule}, not {value!r}")


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def to_float(value: Any) -> Any:
    """An exact ``int`` as a ``float`` (1 and 1.0 are one setting, and encode alike); anything
    else as it is, for the validator to judge."""
    return float(value) if type(value) is int else value


def check_temperature(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or a number from 0 to 2."""
    if value is not None and not (_number(value) and 0 <= value <= 2):  # type: ignore[operator]
        raise _fail(instance, attribute.name, "a number from 0 to 2", value)


def check_top_p(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or a number above 0 and at most 1."""
    if value is not None and not (_number(value) and 0 < value <= 1):  # type: ignore[operator]
        raise _fail(instance, attribute.name, "a number above 0 and at most 1", value)


def check_penalty(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or a number from -2 to 2."""
    if value is not None and not (_number(value) and -2 <= value <= 2):  # type: ignore[operator]
        raise _fail(instance, attribute.name, "a number from -2 to 2", value)


def check_max_tokens(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or an integer >= 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise _fail(instance, attribute.name, "an int >= 1", value)


def check_seed(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or a signed 64-bit integer."""
    low, high = _SEED_RANGE
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
    ):
        raise _fail(instance, attribute.name, "an int from -2**63 to 2**63 - 1", value)


def check_effort(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or one of :data:`REASONING_EFFORTS`."""
    if value is not None and value not in REASONING_EFFORTS:
        raise _fail(instance, attribute.name, "'low', 'medium' or 'high'", value)


def check_optional_bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or a bool."""
    if value is not None and not isinstance(value, bool):
        raise _fail(instance, attribute.name, "true or false", value)


def stop_sequences(owner: str, value: object) -> tuple[str, ...]:
    """``value`` (a sequence of non-empty strings, at most :data:`MAX_STOP`) as a tuple."""
    if value == () and type(value) is tuple:
        return ()  # (the common case: none)
    if isinstance(value, str):
        raise ValidationError(
            f"{owner}.stop must be a sequence of strings such as [{value[:20]!r}], not a str"
        )
    if isinstance(value, bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError(
            f"{owner}.stop must be a sequence of strings, not {type(value).__name__}"
        )
    items = tuple(value)
    if len(items) > MAX_STOP:
        raise ValidationError(f"{owner}.stop holds at most {MAX_STOP} sequences, not {len(items)}")
    for index, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise ValidationError(f"{owner}.stop[{index}] must be a non-empty str, not {item!r}")
    return items


def check_reasoning(think: bool | None, effort: str | None) -> None:
    """Refuse ``think=False`` with a reasoning effort: a contradiction (ValidationError)."""
    if think is False and effort is not None:
        raise ValidationError(
            f"think=False contradicts reasoning_effort={effort!r}: leave think unset (or True) "
            "to have the model reason at that effort"
        )


def json_object(what: str, value: object) -> dict[str, Any]:
    """``value`` as a strict-JSON object (a dict with str keys), repaired of lone surrogates."""
    if not isinstance(value, Mapping):
        raise ValidationError(f"{what} must be a JSON object, not {type(value).__name__}")
    checked = check_json(value, what=what)
    return checked if isinstance(checked, dict) else dict(checked)


def _to_stop(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else stop_sequences("ModelSettings", value)


def _to_extra(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else json_object("ModelSettings.extra", value)


# ---------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, repr=False)
class ModelSettings:
    """How the model samples and how long it may answer; ``None`` (every field's default)
    leaves a field unset.

    - ``temperature``: sampling temperature, 0 to 2 (Anthropic takes 0 to 1).
    - ``top_p``: nucleus sampling, above 0 and at most 1.
    - ``max_tokens``: the most output tokens of one reply (>= 1); a reply that reaches it is
      cut short (the run ends ``stop="max_tokens"``).
    - ``stop``: sequences that end the reply (at most :data:`MAX_STOP` non-empty strings;
      ``()`` is set: no stop sequences, overriding any).
    - ``seed``: a seed for sampling, where the vendor takes one (a signed 64-bit int).
    - ``presence_penalty``, ``frequency_penalty``: -2 to 2.
    - ``reasoning_effort``: ``"low"``, ``"medium"`` or ``"high"``: the model reasons, that much
      (with ``think=False`` it is refused as a contradiction).
    - ``parallel_tool_calls``: whether one reply may call several tools at once.
    - ``extra``: a JSON object merged into the request body as given, for vendor options no
      field names; a key the adapter sets itself is refused with a
      :class:`~protocols.errors.ConfigError` before any call.

    Each vendor's names for these, and what it ignores or refuses: ``docs/providers.md``.
    """

    temperature: float | None = attrs.field(
        default=None, converter=to_float, validator=check_temperature
    )
    top_p: float | None = attrs.field(default=None, converter=to_float, validator=check_top_p)
    max_tokens: int | None = attrs.field(default=None, validator=check_max_tokens)
    stop: tuple[str, ...] | None = attrs.field(default=None, converter=_to_stop)
    seed: int | None = attrs.field(default=None, validator=check_seed)
    presence_penalty: float | None = attrs.field(
        default=None, converter=to_float, validator=check_penalty
    )
    frequency_penalty: float | None = attrs.field(
        default=None, converter=to_float, validator=check_penalty
    )
    reasoning_effort: ReasoningEffort | None = attrs.field(default=None, validator=check_effort)
    parallel_tool_calls: bool | None = attrs.field(default=None, validator=check_optional_bool)
    extra: dict[str, JSON] | None = attrs.field(default=None, converter=_to_extra)

    @classmethod
    def of(cls, value: SettingsLike) -> ModelSettings:
        """``value`` as settings: a :class:`ModelSettings` as it is, a mapping of its fields
        (``{"temperature": 0.2}``) checked like the constructor's keywords (an unknown name is
        refused, naming the fields there are), ``None`` as ``ModelSettings()``."""
        if value is None:
            return _EMPTY
        if isinstance(value, ModelSettings):
            return value
        if not isinstance(value, Mapping):
            raise ValidationError(
                "settings must be a ModelSettings or a mapping of its fields, "
                f"not {type(value).__name__}"
            )
        unknown = [key for key in value if key not in _FIELDS]
        if unknown:
            raise ValidationError(
                f"ModelSettings has no field {str(unknown[0])[:60]!r}; its fields are "
                f"{', '.join(_FIELDS)}"
            )
        return cls(**value)

    def merge(self, other: SettingsLike) -> ModelSettings:
        """These settings with ``other``'s over them, field by field: each field ``other``
        sets wins, each it leaves unset keeps this one's (``extra`` is one field: a set
        ``extra`` replaces this one's whole)."""
        over = ModelSettings.of(other)
        if over is _EMPTY or not over.fields():
            return self
        if not self.fields():
            return over
        merged = {name: getattr(self, name) for name in _FIELDS}
        merged.update(over.fields())
        return ModelSettings(**merged)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.fields().items())
        return f"ModelSettings({shown})"

    def fields(self) -> dict[str, Any]:
        """The set fields, by name (``{}`` for ``ModelSettings()``)."""
        return {name: value for name in _FIELDS if (value := getattr(self, name)) is not None}


#: Every field of :class:`ModelSettings`, in order.
_FIELDS: Final = tuple(field.name for field in attrs.fields(ModelSettings))
_EMPTY: Final = ModelSettings()

#: What ``settings=`` takes: settings, a mapping of their fields, or ``None`` (none set).
SettingsLike: TypeAlias = ModelSettings | Mapping[str, Any] | None
