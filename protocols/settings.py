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
    "CACHE_MODES",
    "CACHE_RETENTIONS",
    "CACHE_SYSTEM",
    "CACHE_TOOLS",
    "MAX_CACHE_BREAKPOINTS",
    "MAX_CACHE_KEY",
    "MAX_STOP",
    "REASONING_EFFORTS",
    "CacheMode",
    "CacheRetention",
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

#: Whether the adapter marks prompt-cache breakpoints itself (``"auto"``) or sends none
#: (``"off"``), where the vendor caches only what a request marks (Anthropic).
CacheMode: TypeAlias = Literal["auto", "off"]
#: The values of :data:`CacheMode`.
CACHE_MODES: Final[tuple[CacheMode, ...]] = ("auto", "off")
#: How long a vendor keeps a cached prompt prefix (OpenAI's ``prompt_cache_retention``): in
#: memory (minutes, up to an hour) or for up to 24 hours.
CacheRetention: TypeAlias = Literal["in_memory", "24h"]
#: The values of :data:`CacheRetention`.
CACHE_RETENTIONS: Final[tuple[CacheRetention, ...]] = ("in_memory", "24h")
#: The most cache breakpoints one request may carry (Anthropic refuses a fifth).
MAX_CACHE_BREAKPOINTS: Final = 4
#: The longest ``cache_key`` (characters).
MAX_CACHE_KEY: Final = 1024
#: The name ``cache_breakpoints`` gives the end of the tool definitions.
CACHE_TOOLS: Final = "tools"
#: The name ``cache_breakpoints`` gives the end of the system prompt.
CACHE_SYSTEM: Final = "system"
#: The longest name in ``cache_breakpoints`` (a message id, or one of the two above).
_MAX_BREAKPOINT_NAME: Final = 256


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


def check_cache(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or one of :data:`CACHE_MODES`."""
    if value is not None and value not in CACHE_MODES:
        raise _fail(instance, attribute.name, "'auto' or 'off'", value)


def check_cache_key(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or a non-empty str of at most :data:`MAX_CACHE_KEY` characters."""
    if value is not None and not (isinstance(value, str) and 0 < len(value) <= MAX_CACHE_KEY):
        shown = value[:40] if isinstance(value, str) else value
        raise _fail(
            instance,
            attribute.name,
            f"a non-empty str of at most {MAX_CACHE_KEY} characters",
            shown,
        )


def check_cache_retention(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or one of :data:`CACHE_RETENTIONS`."""
    if value is not None and value not in CACHE_RETENTIONS:
        raise _fail(instance, attribute.name, "'in_memory' or '24h'", value)


def cache_breakpoints(owner: str, value: object) -> tuple[str, ...]:
    """``value`` (a sequence of at most :data:`MAX_CACHE_BREAKPOINTS` distinct non-empty
    strings: :data:`CACHE_TOOLS`, :data:`CACHE_SYSTEM` or message ids) as a tuple."""
    where = f"{owner}.cache_breakpoints"
    if isinstance(value, str):
        raise ValidationError(f"{where} must be a sequence of names such as [{value[:20]!r}]")
    if isinstance(value, bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError(f"{where} must be a sequence of names, not {type(value).__name__}")
    items = tuple(value)
    if len(items) > MAX_CACHE_BREAKPOINTS:
        raise ValidationError(
            f"{where} holds at most {MAX_CACHE_BREAKPOINTS} names (the most breakpoints a "
            f"request may carry), not {len(items)}"
        )
    for index, item in enumerate(items):
        if not isinstance(item, str) or not 0 < len(item) <= _MAX_BREAKPOINT_NAME:
            raise ValidationError(
                f"{where}[{index}] must be a non-empty str of at most {_MAX_BREAKPOINT_NAME} "
                f"characters, not {item!r:.60}"
            )
        if item in items[:index]:
            raise ValidationError(f"{where} names {item!r:.60} twice")
    return items


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


def _to_breakpoints(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else cache_breakpoints("ModelSettings", value)


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
    - ``cache``: prompt caching where the vendor caches only what a request marks (Anthropic):
      ``"auto"`` (what ``None`` means there too) marks the stable prefix -- the tool
      definitions, the system prompt, and the history up to the last turn -- and ``"off"``
      marks nothing. Vendors that cache prefixes by themselves take ``"auto"`` and refuse
      ``"off"``.
    - ``cache_breakpoints``: the places to mark by hand, instead of the automatic ones: at
      most :data:`MAX_CACHE_BREAKPOINTS` distinct names, each ``"tools"`` (the end of the tool
      definitions), ``"system"`` (the end of the system prompt) or a message's id (the end of
      that message); ``()`` is set: none by hand, the automatic ones. ``cache="off"`` wins.
    - ``cache_key``: a key grouping requests that share a prefix (OpenAI's
      ``prompt_cache_key``), a non-empty string of at most :data:`MAX_CACHE_KEY` characters.
    - ``cache_retention``: how long a cached prefix is kept (OpenAI's
      ``prompt_cache_retention``): ``"in_memory"`` or ``"24h"``.

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
    cache: CacheMode | None = attrs.field(default=None, validator=check_cache)
    cache_breakpoints: tuple[str, ...] | None = attrs.field(default=None, converter=_to_breakpoints)
    cache_key: str | None = attrs.field(default=None, validator=check_cache_key)
    cache_retention: CacheRetention | None = attrs.field(
        default=None, validator=check_cache_retention
    )

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
