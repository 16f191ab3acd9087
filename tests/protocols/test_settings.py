"""``ModelSettings`` (issue 24, item 1): valid when it exists, merged field by field, JSON both
ways -- and what it becomes in ``ProviderOptions``. Pure: no event loop."""

from __future__ import annotations

import math
import re
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols import ModelSettings
from protocols.codec import from_json, to_json
from protocols.errors import ProtocolError, ValidationError
from protocols.messages import ProviderOptions
from protocols.settings import MAX_STOP, REASONING_EFFORTS

NAMES = [field.name for field in attrs.fields(ModelSettings)]


def finite(low: float, high: float, *, exclude_low: bool = False) -> st.SearchStrategy[float]:
    return st.floats(low, high, exclude_min=exclude_low, allow_nan=False)


#: Any valid settings: each field unset or a valid value.
settings_strategy: st.SearchStrategy[ModelSettings] = st.builds(
    ModelSettings,
    temperature=st.none() | finite(0, 2),
    top_p=st.none() | finite(0, 1, exclude_low=True),
    max_tokens=st.none() | st.integers(1, 1 << 40),
    stop=st.none() | st.lists(st.text(min_size=1, max_size=8), max_size=MAX_STOP),
    seed=st.none() | st.integers(-(2**63), 2**63 - 1),
    presence_penalty=st.none() | finite(-2, 2),
    frequency_penalty=st.none() | finite(-2, 2),
    reasoning_effort=st.none() | st.sampled_from(REASONING_EFFORTS),
    parallel_tool_calls=st.none() | st.booleans(),
    extra=st.none()
    | st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=6), max_size=3),
)


def test_nothing_is_set_by_default() -> None:
    empty = ModelSettings()
    assert empty.fields() == {}
    assert all(getattr(empty, name) is None for name in NAMES)
    assert repr(empty) == "ModelSettings()"
    assert to_json(empty) == {}
    assert NAMES == [
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "reasoning_effort",
        "parallel_tool_calls",
        "extra",
        "cache",
        "cache_breakpoints",
        "cache_key",
        "cache_retention",
    ]


def test_valid_values_are_kept_and_ints_become_floats() -> None:
    settings = ModelSettings(
        temperature=1,
        top_p=1,
        max_tokens=1,
        stop=["END", "\n\n"],
        seed=-(2**63),
        presence_penalty=-2,
        frequency_penalty=2,
        reasoning_effort="low",
        parallel_tool_calls=False,
        extra={"top_k": 40, "nested": {"a": [1, None]}},
    )
    assert settings.temperature == 1.0
    assert type(settings.temperature) is float
    assert type(settings.top_p) is float
    assert type(settings.presence_penalty) is float
    assert settings.stop == ("END", "\n\n")
    assert settings.extra == {"top_k": 40, "nested": {"a": [1, None]}}
    assert repr(settings).startswith("ModelSettings(temperature=1.0, top_p=1.0, max_tokens=1,")
    # frozen
    with pytest.raises(AttributeError):
        settings.temperature = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("temperature", -0.1, "a number from 0 to 2"),
        ("temperature", 2.01, "a number from 0 to 2"),
        ("temperature", math.nan, "a number from 0 to 2"),
        ("temperature", "0.5", "a number from 0 to 2"),
        ("temperature", True, "a number from 0 to 2"),
        ("top_p", 0, "a number above 0 and at most 1"),
        ("top_p", 1.5, "a number above 0 and at most 1"),
        ("top_p", math.inf, "a number above 0 and at most 1"),
        ("max_tokens", 0, "an int >= 1"),
        ("max_tokens", 1.0, "an int >= 1"),
        ("max_tokens", True, "an int >= 1"),
        ("seed", 2**63, "an int from -2\\*\\*63"),
        ("seed", 1.5, "an int from -2\\*\\*63"),
        ("seed", False, "an int from -2\\*\\*63"),
        ("presence_penalty", -2.5, "a number from -2 to 2"),
        ("frequency_penalty", 3, "a number from -2 to 2"),
        ("reasoning_effort", "max", "'low', 'medium' or 'high'"),
        ("reasoning_effort", "minimal", "'low', 'medium' or 'high'"),
        ("parallel_tool_calls", 1, "true or false"),
    ],
)
def test_an_invalid_value_is_refused_naming_the_field(field: str, value: Any, rule: str) -> None:
    with pytest.raises(ValidationError, match=rf"^ModelSettings\.{field} must be {rule}"):
        ModelSettings(**{field: value})
    # the same rule in the options a provider is given
    with pytest.raises(ValidationError, match=rf"^ProviderOptions\.{field} must be {rule}"):
        ProviderOptions(**{field: value})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("END", "ModelSettings.stop must be a sequence of strings such as ['END'], not a str"),
        ([""], "ModelSettings.stop[0] must be a non-empty str, not ''"),
        (["a", 1], "ModelSettings.stop[1] must be a non-empty str, not 1"),
        (["x"] * (MAX_STOP + 1), f"ModelSettings.stop holds at most {MAX_STOP} sequences"),
        ({"a": 1}, "ModelSettings.stop must be a sequence of strings, not dict"),
    ],
)
def test_stop_sequences_are_checked(value: Any, problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        ModelSettings(stop=value)


def test_extra_must_be_a_strict_json_object() -> None:
    with pytest.raises(ValidationError, match=r"ModelSettings\.extra must be a JSON object"):
        ModelSettings(extra=[1])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"ModelSettings\.extra\.x"):
        ModelSettings(extra={"x": math.nan})


def test_of_takes_settings_a_mapping_or_none() -> None:
    settings = ModelSettings(temperature=0.2)
    assert ModelSettings.of(settings) is settings
    assert ModelSettings.of(None) == ModelSettings()
    assert ModelSettings.of({"temperature": 0.2, "stop": ["x"]}) == ModelSettings(
        temperature=0.2, stop=("x",)
    )
    with pytest.raises(ValidationError, match="ModelSettings has no field 'temprature'; its"):
        ModelSettings.of({"temprature": 0.2})
    with pytest.raises(ValidationError, match="must be a ModelSettings or a mapping"):
        ModelSettings.of(0.2)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"ModelSettings\.top_p must be"):
        ModelSettings.of({"top_p": 2})


def test_merge_is_field_by_field() -> None:
    agent = ModelSettings(temperature=0.2, max_tokens=100, stop=["END"], extra={"a": 1})
    run = ModelSettings(max_tokens=50, seed=7, extra={"b": 2})
    merged = agent.merge(run)
    assert merged == ModelSettings(
        temperature=0.2, max_tokens=50, stop=("END",), seed=7, extra={"b": 2}
    )
    # a mapping works too; () is set (no stop sequences), None is not
    assert agent.merge({"stop": []}).stop == ()
    assert agent.merge({"stop": None}).stop == ("END",)
    assert agent.merge(None) is agent
    assert ModelSettings().merge(run) is run


@given(a=settings_strategy, b=settings_strategy, c=settings_strategy)
def test_merge_is_associative_with_the_last_set_value_winning(
    a: ModelSettings, b: ModelSettings, c: ModelSettings
) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    merged = a.merge(b).merge(c)
    for name in NAMES:
        values = [getattr(s, name) for s in (a, b, c) if getattr(s, name) is not None]
        assert getattr(merged, name) == (values[-1] if values else None)
    assert a.merge(ModelSettings()) == a == ModelSettings().merge(a)


@given(settings=settings_strategy)
def test_json_round_trip_keeps_exactly_the_set_fields(settings: ModelSettings) -> None:
    data = to_json(settings)
    assert isinstance(data, dict)
    assert set(data) == set(settings.fields())
    assert from_json(ModelSettings, data) == settings


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"temprature": 1}, "unknown field(s) 'temprature'"),
        ({"top_p": 2}, "ModelSettings.top_p must be"),
        ({"reasoning_effort": "max"}, "reasoning_effort"),
        ({"stop": "END"}, "stop"),
    ],
)
def test_decoding_is_strict(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(problem)):
        from_json(ModelSettings, data)


@given(settings=settings_strategy)
def test_provider_options_carry_the_settings_unchanged(settings: ModelSettings) -> None:
    options = ProviderOptions.from_settings(settings, think=True, tool_choice="auto")
    assert (options.think, options.tool_choice) == (True, "auto")
    expected = settings
    if settings.stop == ():  # no stop sequences: the options hold none either way
        expected = ModelSettings(**{**settings.fields(), "stop": None})
    if settings.extra == {}:
        expected = ModelSettings(**{**expected.fields(), "extra": None})
    assert options.settings == expected
    assert ProviderOptions.from_settings(None) == ProviderOptions()


def test_think_false_with_an_effort_is_a_contradiction() -> None:
    with pytest.raises(ValidationError, match="think=False contradicts reasoning_effort='low'"):
        ProviderOptions(think=False, reasoning_effort="low")
    assert ProviderOptions(think=True, reasoning_effort="low").reasoning_effort == "low"
    assert ProviderOptions(reasoning_effort="high").think is None
