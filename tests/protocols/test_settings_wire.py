"""Model settings on each vendor's wire (issue 24, item 1): every field goes out under the
vendor's name, a field the vendor cannot take is refused before any call (never dropped), and
``extra`` may not set what the encoder sets itself. The property at the end reads each body
back with the simulator's request parser: a set field always arrives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_settings import settings_strategy

from protocols._json import dumps
from protocols.errors import ConfigError
from protocols.messages import Message, ProviderOptions, ToolDefinition
from protocols.settings import ModelSettings
from protocols.simulator import parse_request
from protocols.wire import anthropic, gemini, ollama, openai_chat, openai_responses

USER = [Message.user("hi")]
TOOLS = [ToolDefinition("add", parameters={"type": "object", "properties": {}})]
FULL = ModelSettings(
    temperature=0.5,
    top_p=0.9,
    max_tokens=2000,
    stop=["END"],
    seed=7,
    presence_penalty=0.25,
    frequency_penalty=-0.5,
    reasoning_effort="high",
    parallel_tool_calls=False,
    extra={"vendor_option": 1},
)

Encoder = Callable[..., dict[str, Any]]
ENCODERS: dict[str, Encoder] = {
    "openai": openai_chat.encode_request,
    "openai-responses": openai_responses.encode_request,
    "anthropic": anthropic.encode_request,
    "ollama": ollama.encode_request,
    "gemini": gemini.encode_request,
}
#: The fields each vendor has no place for: refused, never dropped.
UNSUPPORTED: dict[str, frozenset[str]] = {
    "openai": frozenset(),
    "openai-responses": frozenset({"stop", "seed", "presence_penalty", "frequency_penalty"}),
    "anthropic": frozenset({"seed", "presence_penalty", "frequency_penalty"}),
    "ollama": frozenset(),
    "gemini": frozenset(),
}


def encode(vendor: str, settings: ModelSettings, *, tools: bool = True, **kw: Any) -> Any:
    options = ProviderOptions.from_settings(settings, **kw)
    return ENCODERS[vendor](USER, model="m", tools=TOOLS if tools else (), options=options)


def without(settings: ModelSettings, *names: str) -> ModelSettings:
    return ModelSettings(**{k: v for k, v in settings.fields().items() if k not in names})


def test_openai_chat_sends_every_field_under_its_name() -> None:
    body = encode("openai", FULL)
    assert {key: body[key] for key in body if key not in ("model", "messages", "tools")} == {
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 2000,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
        "presence_penalty": 0.25,
        "frequency_penalty": -0.5,
        "reasoning_effort": "high",
        "parallel_tool_calls": False,
        "vendor_option": 1,
    }
    options = ProviderOptions.from_settings(FULL)
    body = openai_chat.encode_request(
        USER, model="m", options=options, max_tokens_key="max_completion_tokens"
    )
    assert body["max_completion_tokens"] == 2000
    assert "max_tokens" not in body
    assert "parallel_tool_calls" not in body  # no tools: OpenAI refuses it alone


def test_openai_responses_sends_what_it_has_and_refuses_the_rest() -> None:
    body = encode("openai-responses", without(FULL, *UNSUPPORTED["openai-responses"]))
    assert {key: body[key] for key in body if key not in ("model", "input", "tools", "store")} == {
        "stream": True,
        "max_output_tokens": 2000,
        "temperature": 0.5,
        "top_p": 0.9,
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "parallel_tool_calls": False,
        "vendor_option": 1,
    }
    for name in sorted(UNSUPPORTED["openai-responses"]):
        value = ["x"] if name == "stop" else 0
        with pytest.raises(ConfigError, match=f"the OpenAI Responses API has no {name}"):
            encode("openai-responses", ModelSettings(**{name: value}))


def test_anthropic_sends_what_it_has_and_refuses_the_rest() -> None:
    body = encode("anthropic", without(FULL, *UNSUPPORTED["anthropic"]))
    assert {key: body[key] for key in body if key not in ("model", "messages", "tools")} == {
        "stream": True,
        "max_tokens": 2000,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 1500},
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "vendor_option": 1,
    }
    for name in sorted(UNSUPPORTED["anthropic"]):
        with pytest.raises(ConfigError, match=f"Anthropic has no {name}"):
            encode("anthropic", ModelSettings(**{name: 0}))
    with pytest.raises(ConfigError, match="temperature from 0 to 1"):
        encode("anthropic", ModelSettings(temperature=1.5))


@pytest.mark.parametrize(
    ("max_tokens", "effort", "budget"),
    [
        (4096, "low", 1024),
        (4096, "medium", 2048),
        (4096, "high", 3072),
        (1025, "high", 1024),
        (20000, "low", 5000),
    ],
)
def test_anthropic_reasoning_effort_is_a_thinking_budget(
    max_tokens: int, effort: str, budget: int
) -> None:
    body = encode("anthropic", ModelSettings(max_tokens=max_tokens, reasoning_effort=effort))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert budget < max_tokens
    assert anthropic.thinking_budget(max_tokens, effort) == budget  # type: ignore[arg-type]


def test_anthropic_keeps_its_default_max_tokens_and_thinking_needs_room() -> None:
    body = encode("anthropic", ModelSettings())
    assert body["max_tokens"] == anthropic.DEFAULT_MAX_TOKENS
    # think=True alone is medium effort, as it always was
    assert encode("anthropic", ModelSettings(), think=True)["thinking"] == {
        "type": "enabled",
        "budget_tokens": anthropic.DEFAULT_MAX_TOKENS // 2,
    }
    with pytest.raises(ConfigError, match="needs max_tokens above 1024"):
        encode("anthropic", ModelSettings(max_tokens=1024, reasoning_effort="low"))


def test_anthropic_parallel_tool_calls_rides_on_the_tool_choice() -> None:
    settings = ModelSettings(parallel_tool_calls=False)
    options = ProviderOptions.from_settings(settings, tool_choice="required")
    body = anthropic.encode_request(USER, model="m", tools=TOOLS, options=options)
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    # allowed is Anthropic's default; without tools there is nothing to call
    assert "tool_choice" not in encode("anthropic", ModelSettings(parallel_tool_calls=True))
    assert "tool_choice" not in encode("anthropic", settings, tools=False)


def test_ollama_sends_every_field_in_its_places() -> None:
    body = encode("ollama", without(FULL, "parallel_tool_calls"))
    assert body["think"] == "high"
    assert body["options"] == {
        "num_predict": 2000,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
        "presence_penalty": 0.25,
        "frequency_penalty": -0.5,
    }
    assert body["vendor_option"] == 1
    with pytest.raises(ConfigError, match="Ollama cannot honour parallel_tool_calls=False"):
        encode("ollama", ModelSettings(parallel_tool_calls=False))
    # True is what Ollama does; without tools there are no calls to keep apart
    assert "parallel_tool_calls" not in encode("ollama", ModelSettings(parallel_tool_calls=True))
    assert encode("ollama", ModelSettings(parallel_tool_calls=False), tools=False)


@pytest.mark.parametrize("vendor", sorted(ENCODERS))
def test_think_alone_is_no_setting_but_medium_effort_where_the_wire_says_an_effort(
    vendor: str,
) -> None:
    body = encode(vendor, ModelSettings(), think=True, tools=False)
    got = parse_request(vendor, dumps(body))  # type: ignore[arg-type]
    assert got.think
    medium = vendor in ("openai", "openai-responses")  # the wire says "medium"
    max_tokens = anthropic.DEFAULT_MAX_TOKENS if vendor == "anthropic" else None
    assert got.settings == ModelSettings(
        reasoning_effort="medium" if medium else None, max_tokens=max_tokens
    )


#: For each vendor, the body key each settings field is written under (where it has one).
WIRE_KEYS: dict[str, dict[str, str]] = {
    "openai": {
        "temperature": "temperature",
        "top_p": "top_p",
        "max_tokens": "max_tokens",
        "stop": "stop",
        "seed": "seed",
        "presence_penalty": "presence_penalty",
        "frequency_penalty": "frequency_penalty",
        "reasoning_effort": "reasoning_effort",
        "parallel_tool_calls": "parallel_tool_calls",
    },
    "openai-responses": {
        "temperature": "temperature",
        "top_p": "top_p",
        "max_tokens": "max_output_tokens",
        "reasoning_effort": "reasoning",
        "parallel_tool_calls": "parallel_tool_calls",
    },
    "anthropic": {
        "temperature": "temperature",
        "top_p": "top_p",
        "max_tokens": "max_tokens",
        "stop": "stop_sequences",
        "reasoning_effort": "thinking",
        "parallel_tool_calls": "tool_choice",
    },
    "ollama": {"reasoning_effort": "think"},
}
SAMPLE = FULL.fields()


@pytest.mark.parametrize(
    ("vendor", "field"),
    [(vendor, field) for vendor, keys in WIRE_KEYS.items() for field in keys],
)
def test_extra_may_not_set_a_key_a_setting_wrote(vendor: str, field: str) -> None:
    key = WIRE_KEYS[vendor][field]
    settings = ModelSettings(
        **{field: SAMPLE[field], "extra": {key: "x"}},
        **({"max_tokens": 4000} if vendor == "anthropic" and field != "max_tokens" else {}),
    )
    with pytest.raises(ConfigError, match=rf"extra may not set {key!r}: .* from {field}"):
        encode(vendor, settings)


def test_gemini_sends_every_field_in_generation_config() -> None:
    body = encode("gemini", without(FULL, "parallel_tool_calls"))
    assert body["generationConfig"] == {
        "maxOutputTokens": 2000,
        "temperature": 0.5,
        "topP": 0.9,
        "stopSequences": ["END"],
        "seed": 7,
        "presencePenalty": 0.25,
        "frequencyPenalty": -0.5,
        "thinkingConfig": {"thinkingBudget": 24576, "includeThoughts": True},
    }
    assert body["vendor_option"] == 1
    with pytest.raises(ConfigError, match="Gemini cannot honour parallel_tool_calls=False"):
        encode("gemini", ModelSettings(parallel_tool_calls=False))
    with pytest.raises(ConfigError, match="at most 5 stop sequences"):
        encode("gemini", ModelSettings(stop=[str(n) for n in range(6)]))
    with pytest.raises(ConfigError, match="32-bit"):
        encode("gemini", ModelSettings(seed=-(2**31) - 1))


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("maxOutputTokens", "max_tokens"),
        ("temperature", "temperature"),
        ("stopSequences", "stop"),
        ("seed", "seed"),
        ("topP", "top_p"),
        ("thinkingConfig", "reasoning_effort"),
    ],
)
def test_gemini_extra_generation_config_may_not_set_what_a_setting_wrote(
    name: str, field: str
) -> None:
    settings = ModelSettings(**{field: SAMPLE[field], "extra": {"generationConfig": {name: 1}}})
    with pytest.raises(ConfigError, match=rf"extra may not set {name!r}: .* from {field}"):
        encode("gemini", settings)


@pytest.mark.parametrize("name", ["num_predict", "temperature", "stop", "seed", "top_p"])
def test_ollama_extra_options_may_not_set_what_a_setting_wrote(name: str) -> None:
    field = {"num_predict": "max_tokens"}.get(name, name)
    settings = ModelSettings(**{field: SAMPLE[field], "extra": {"options": {name: 1}}})
    with pytest.raises(ConfigError, match=rf"extra may not set {name!r}"):
        encode("ollama", settings)


def test_the_token_cap_has_two_names_on_openai_chat_and_both_are_the_encoders() -> None:
    for key in openai_chat.MAX_TOKENS_KEYS:
        settings = ModelSettings(max_tokens=10, extra={key: 5000})
        with pytest.raises(ConfigError, match=f"may not set {key!r}"):
            encode("openai", settings)


def unsupported(vendor: str, settings: ModelSettings, tools: bool) -> set[str]:
    fields = settings.fields()
    if settings.stop == ():
        del fields["stop"]  # no stop sequences: what every vendor does anyway, refused by none
    out = {name for name in UNSUPPORTED[vendor] if name in fields}
    if vendor in ("ollama", "gemini") and settings.parallel_tool_calls is False and tools:
        out.add("parallel_tool_calls")
    if vendor == "gemini":
        if len(settings.stop or ()) > gemini.MAX_STOP:
            out.add("stop")
        if settings.seed is not None and not -(2**31) <= settings.seed < 2**31:
            out.add("seed")
    if vendor == "anthropic":
        if (settings.temperature or 0) > 1:
            out.add("temperature")
        if settings.reasoning_effort is not None and (settings.max_tokens or 4096) <= 1024:
            out.add("reasoning_effort")
    return out


def expected_back(vendor: str, settings: ModelSettings, tools: bool) -> ModelSettings:
    """What a vendor's body says of ``settings``, read back: every set field, except what the
    vendor expresses otherwise (or not at all, where it is its default or meaningless)."""
    fields = settings.fields()
    if settings.stop == ():
        del fields["stop"]  # no stop sequences: nothing to send
    if not tools:
        fields.pop("parallel_tool_calls", None)  # no tools: nothing to parallelise
    if vendor in ("anthropic", "ollama", "gemini") and settings.parallel_tool_calls is True:
        fields.pop("parallel_tool_calls", None)  # what they do anyway
    if vendor == "anthropic":
        fields.pop("reasoning_effort", None)  # a thinking budget: checked apart
        fields["max_tokens"] = settings.max_tokens or anthropic.DEFAULT_MAX_TOKENS
    if settings.extra == {}:
        del fields["extra"]
    return ModelSettings(**fields)


extra_strategy = st.dictionaries(
    st.sampled_from(["vendor_a", "vendor_b", "top_k"]), st.integers(0, 9), max_size=2
)


@given(
    settings=settings_strategy.map(
        lambda s: ModelSettings(**{k: v for k, v in s.fields().items() if k != "extra"})
    ),
    extra=st.none() | extra_strategy,
    vendor=st.sampled_from(sorted(ENCODERS)),
    tools=st.booleans(),
)
def test_a_set_field_is_sent_or_refused_never_dropped(
    settings: ModelSettings, extra: dict[str, Any] | None, vendor: str, tools: bool
) -> None:
    if extra is not None:
        settings = settings.merge({"extra": extra})
    refused = unsupported(vendor, settings, tools)
    if refused:
        with pytest.raises(ConfigError):
            encode(vendor, settings, tools=tools)
        return
    body = encode(vendor, settings, tools=tools)
    got = parse_request(vendor, dumps(body))  # type: ignore[arg-type]
    assert got.settings == expected_back(vendor, settings, tools)
    if vendor == "anthropic":
        effort = settings.reasoning_effort
        max_tokens = settings.max_tokens or anthropic.DEFAULT_MAX_TOKENS
        assert got.thinking_budget == (
            None if effort is None else anthropic.thinking_budget(max_tokens, effort)
        )
