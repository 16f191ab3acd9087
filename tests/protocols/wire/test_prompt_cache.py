"""Prompt caching on the wire (issue 27, section 3), without an event loop: the settings that
control it, Anthropic's ``cache_control`` marks (automatic, off, by hand) in the exact request
JSON, OpenAI's ``prompt_cache_key`` and ``prompt_cache_retention``, and the refusals where a
vendor cannot honour a control. Properties: never more than four marks for any request, and the
marks never change anything else of a request."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.codec import from_json, to_json
from protocols.errors import ConfigError, ValidationError
from protocols.messages import Message, ProviderOptions, ToolCall, ToolDefinition
from protocols.relay import StreamFrame, decode_client_frame, encode_frame, unsupported_options
from protocols.serve.openai_chat import decode_request
from protocols.settings import MAX_CACHE_BREAKPOINTS, ModelSettings
from protocols.simulator import Vendor, parse_request
from protocols.wire import anthropic, ollama, openai_chat, openai_responses

MARK = {"type": "ephemeral"}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
ADD = ToolDefinition("add", "Add two integers.", {"type": "object", "properties": {}})
NOW = ToolDefinition("now", parameters={"type": "object", "properties": {}})
SIGNED = {"type": "thinking", "thinking": "Let me see.", "signature": "EqQB"}


def anthropic_body(
    messages: list[Message], tools: list[ToolDefinition] | None = None, **options: Any
) -> dict[str, Any]:
    return anthropic.encode_request(
        messages,
        model="claude",
        tools=tools or [],
        options=ProviderOptions(**options),
        stream=False,
    )


def text(value: str, *, marked: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if marked:
        block["cache_control"] = MARK
    return block


def marks(body: Any) -> int:
    """How many ``cache_control`` marks the body holds, anywhere."""
    if isinstance(body, dict):
        return ("cache_control" in body) + sum(marks(value) for value in body.values())
    if isinstance(body, list):
        return sum(marks(value) for value in body)
    return 0


def unmarked(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without its marks, and its system as the plain string it is when unmarked."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    plain: dict[str, Any] = strip(body)
    system = plain.get("system")
    if isinstance(system, list):
        [block] = system
        plain["system"] = block["text"]
    return plain


CONVERSATION = [
    Message.system("Be terse."),
    Message.user("u1"),
    Message.assistant("a1"),
    Message.user("u2"),
    Message.assistant("a2"),
    Message.user("u3"),
]


# ---------------------------------------------------------------------------------------------
# Settings


def test_the_cache_settings_are_checked_when_made() -> None:
    settings = ModelSettings(
        cache="auto",
        cache_breakpoints=["system", "m1"],
        cache_key="tenant-7",
        cache_retention="24h",
    )
    assert settings.cache_breakpoints == ("system", "m1")
    assert ModelSettings(cache_breakpoints=()).fields() == {"cache_breakpoints": ()}
    problems: dict[str, tuple[Any, str]] = {
        "cache": ("on", "must be 'auto' or 'off'"),
        "cache_key": ("", "non-empty str of at most 1024"),
        "cache_retention": ("1h", "'in_memory' or '24h'"),
    }
    for field, (value, problem) in problems.items():
        with pytest.raises(ValidationError, match=problem):
            ModelSettings(**{field: value})
    with pytest.raises(ValidationError, match="at most 1024"):
        ModelSettings(cache_key="k" * 1025)
    with pytest.raises(ValidationError, match="sequence of names"):
        ModelSettings(cache_breakpoints="system")
    with pytest.raises(ValidationError, match=f"at most {MAX_CACHE_BREAKPOINTS} names"):
        ModelSettings(cache_breakpoints=["tools", "system", "a", "b", "c"])
    with pytest.raises(ValidationError, match="names 'a' twice"):
        ModelSettings(cache_breakpoints=["a", "a"])
    with pytest.raises(ValidationError, match=r"cache_breakpoints\[1\] must be a non-empty"):
        ModelSettings(cache_breakpoints=["a", ""])
    with pytest.raises(ValidationError, match=r"ProviderOptions\.cache must be"):
        ProviderOptions(cache="maybe")  # type: ignore[arg-type]


cache_settings = st.builds(
    ModelSettings,
    cache=st.none() | st.sampled_from(["auto", "off"]),
    cache_breakpoints=st.none()
    | st.lists(st.sampled_from(["tools", "system", "m1", "m2", "m3"]), max_size=4, unique=True),
    cache_key=st.none() | st.text(min_size=1, max_size=12),
    cache_retention=st.none() | st.sampled_from(["in_memory", "24h"]),
)


@given(agent=cache_settings, run=cache_settings)
def test_the_cache_settings_merge_field_by_field_and_travel_as_json(
    agent: ModelSettings, run: ModelSettings
) -> None:
    merged = agent.merge(run)
    for name in ("cache", "cache_breakpoints", "cache_key", "cache_retention"):
        over = getattr(run, name)
        assert getattr(merged, name) == (over if over is not None else getattr(agent, name))
    assert from_json(ModelSettings, to_json(merged)) == merged
    # what a run gives a provider, and what a relay frame carries to one
    options = ProviderOptions.from_settings(merged)
    assert options.settings == merged
    frame = StreamFrame("r1", [Message.user("hi")], options=options)
    assert decode_client_frame(encode_frame(frame)) == frame
    # a relay of version 1 would refuse them: the client says so itself
    assert set(unsupported_options(options, 1)) == set(merged.fields())
    assert unsupported_options(options, 2) == ()


# ---------------------------------------------------------------------------------------------
# Anthropic: automatic marks


def test_anthropic_marks_the_stable_prefix_by_default() -> None:
    body = anthropic_body(CONVERSATION, [ADD, NOW])
    assert body["tools"] == [
        {"name": "add", "description": "Add two integers.", "input_schema": ADD.parameters},
        {"name": "now", "input_schema": NOW.parameters, "cache_control": MARK},
    ]
    assert body["system"] == [text("Be terse.", marked=True)]
    assert body["messages"] == [
        {"role": "user", "content": [text("u1")]},
        # where the previous request of this conversation put its mark: read back
        {"role": "assistant", "content": [text("a1", marked=True)]},
        {"role": "user", "content": [text("u2")]},
        # the history up to the last turn: written
        {"role": "assistant", "content": [text("a2", marked=True)]},
        {"role": "user", "content": [text("u3")]},
    ]
    assert marks(body) == 4
    assert anthropic_body(CONVERSATION, [ADD, NOW], cache="auto") == body


def test_the_previous_requests_mark_is_where_the_next_request_reads_it() -> None:
    """Each request marks the history up to its last turn; the next request of the same
    conversation marks that same place again (three turns back), so what was written is read."""
    first = anthropic_body(CONVERSATION[:4])  # ... u2
    second = anthropic_body([*CONVERSATION[:4], Message.assistant("a2"), Message.user("u3")])
    assert first["messages"][1] == {"role": "assistant", "content": [text("a1", marked=True)]}
    assert second["messages"][:2] == first["messages"][:2]


def test_a_first_turn_marks_only_the_tools_and_the_system() -> None:
    body = anthropic_body([Message.system("S"), Message.user("hi")], [ADD])
    assert marks(body) == 2
    assert body["messages"] == [{"role": "user", "content": [text("hi")]}]
    bare = anthropic_body([Message.user("hi")])
    assert marks(bare) == 0
    assert "system" not in bare


def test_tool_turns_mark_their_last_block_and_thinking_is_never_marked() -> None:
    call = ToolCall("toolu_1", "add", {"a": 1})
    history = [
        Message.user("Add."),
        Message.assistant(
            "", calls=[call], continuation={"anthropic": {"thinking_blocks": [SIGNED]}}
        ),
        Message.tool("toolu_1", "add", "2"),
        # a turn of thinking alone: nothing in it may carry a mark
        Message.assistant("", continuation={"anthropic": {"thinking_blocks": [SIGNED]}}),
        Message.user("Again?", images=[PNG]),
    ]
    body = anthropic_body(history)
    turns = body["messages"]
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user", "assistant", "user"]
    # three turns back: the thinking block stays as it was, the call after it is marked
    assert turns[1]["content"] == [
        SIGNED,
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "add",
            "input": {"a": 1},
            "cache_control": MARK,
        },
    ]
    assert turns[3]["content"] == [SIGNED]  # the turn before the last: thinking only, no mark
    assert marks(body) == 1
    assert SIGNED == {"type": "thinking", "thinking": "Let me see.", "signature": "EqQB"}


def test_marks_never_touch_the_callers_data() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    tool = ToolDefinition("add", parameters=schema)
    stored = {"anthropic": {"thinking_blocks": [dict(SIGNED)]}}
    history = [
        Message.user("q"),
        Message.assistant("", calls=[ToolCall("t1", "add", {"a": 1})], continuation=stored),
        Message.tool("t1", "add", "1"),
    ]
    before = copy.deepcopy((schema, stored))
    anthropic_body(history, [tool])
    assert (schema, stored) == before


# ---------------------------------------------------------------------------------------------
# Anthropic: off, by hand, refusals


def test_cache_off_sends_no_mark_and_the_system_as_a_string() -> None:
    body = anthropic_body(CONVERSATION, [ADD], cache="off")
    assert marks(body) == 0
    assert body["system"] == "Be terse."
    assert body == unmarked(anthropic_body(CONVERSATION, [ADD]))
    # off wins over marks by hand
    named = anthropic_body(CONVERSATION, [ADD], cache="off", cache_breakpoints=["system"])
    assert named == body


def test_marks_by_hand_go_exactly_where_they_are_named() -> None:
    document = Message.user("A long document...", id="doc")
    history = [
        Message.system("S"),
        document,
        Message.assistant("Read it."),
        Message.user("Summarise."),
    ]
    body = anthropic_body(history, [ADD, NOW], cache_breakpoints=["doc", "system"])
    assert body["system"] == [text("S", marked=True)]
    assert "cache_control" not in body["tools"][-1]  # not named
    assert body["messages"][0] == {
        "role": "user",
        "content": [text("A long document...", marked=True)],
    }
    assert marks(body) == 2
    # "tools" names the end of the tool definitions; a name with nothing to mark marks nothing
    body = anthropic_body(history, [ADD, NOW], cache_breakpoints=["tools", "gone"])
    assert body["tools"][-1]["cache_control"] == MARK
    assert body["system"] == "S"
    assert marks(body) == 1
    # () is set, but names nothing by hand: the automatic marks
    assert anthropic_body(history, [ADD], cache_breakpoints=()) == anthropic_body(history, [ADD])


def test_tools_and_system_name_those_even_where_a_message_has_that_id() -> None:
    history = [
        Message.system("S"),
        Message.user("one", id="tools"),
        Message.assistant("two", id="system"),
        Message.user("three", id="x"),
        Message.assistant("four", id="y"),
        Message.user("five"),
    ]
    body = anthropic_body(history, [ADD], cache_breakpoints=["tools", "system", "x", "y"])
    assert marks(body) == 4  # one a name, never more than four
    assert body["tools"][-1]["cache_control"] == MARK
    assert body["system"] == [text("S", marked=True)]
    assert marks(body["messages"][:2]) == 0


def test_a_mark_by_hand_on_a_tool_result_or_a_call_goes_on_that_block() -> None:
    call = ToolCall("toolu_9", "add", {"a": 1})
    asked = Message.assistant("Adding.", calls=[call], id="asked")
    answered = Message.tool("toolu_9", "add", "2", id="answered")
    history = [Message.user("q"), asked, answered, Message.user("next")]
    body = anthropic_body(history, cache_breakpoints=["asked", "answered"])
    assert body["messages"][1]["content"] == [
        text("Adding."),
        {
            "type": "tool_use",
            "id": "toolu_9",
            "name": "add",
            "input": {"a": 1},
            "cache_control": MARK,
        },
    ]
    # the tool result and the next user message share a turn; the mark is on the result
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "2", "cache_control": MARK},
        text("next"),
    ]


def test_anthropic_refuses_what_it_cannot_honour() -> None:
    with pytest.raises(ConfigError, match="Anthropic has no cache_key"):
        anthropic_body(CONVERSATION, cache_key="k")
    with pytest.raises(ConfigError, match="an hour at most"):
        anthropic_body(CONVERSATION, cache_retention="24h")
    # in memory is the only retention it has: nothing to send
    assert anthropic_body(CONVERSATION, cache_retention="in_memory") == anthropic_body(CONVERSATION)


# ---------------------------------------------------------------------------------------------
# Properties of the marks


TEXTS = st.text(st.characters(codec="utf-8"), max_size=6)


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[Message], list[ToolDefinition]]:
    """Any request shape: system messages anywhere, user messages with and without images,
    assistant messages with text, calls and thinking blocks in any mix, their tool results."""
    messages: list[Message] = []
    for turn in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            messages.append(Message.system(draw(TEXTS)))
        if draw(st.booleans()):
            images = [PNG] if draw(st.booleans()) else []
            # (a message's id may be "tools" or "system": those names still mean what they say)
            named = draw(st.sampled_from([f"u{turn}", f"u{turn}", "tools", "system"]))
            messages.append(Message.user(draw(TEXTS), images=images, id=named))
        if draw(st.booleans()):
            calls = [
                ToolCall(f"c{turn}_{i}", "add", {"i": i}) for i in range(draw(st.integers(0, 2)))
            ]
            thinking = {"anthropic": {"thinking_blocks": [SIGNED]}} if draw(st.booleans()) else {}
            messages.append(
                Message.assistant(draw(TEXTS), calls=calls, continuation=thinking, id=f"a{turn}")
            )
            for call in calls:
                messages.append(Message.tool(call.id, call.name, draw(TEXTS), id=f"t{call.id}"))
    tools = draw(st.lists(st.sampled_from([ADD, NOW]), max_size=2, unique_by=lambda t: t.name))
    return messages, tools


NAMES = st.lists(
    st.sampled_from(["tools", "system", "u0", "a1", "tc1_0", "u3", "a4", "u5", "missing"]),
    max_size=MAX_CACHE_BREAKPOINTS,
    unique=True,
)


@given(shape=requests(), by_hand=st.none() | NAMES)
def test_never_more_than_four_marks_and_nothing_else_changes(
    shape: tuple[list[Message], list[ToolDefinition]], by_hand: list[str] | None
) -> None:
    messages, tools = shape
    off = anthropic_body(messages, tools, cache="off")
    body = anthropic_body(messages, tools, cache_breakpoints=by_hand)
    assert marks(body) <= MAX_CACHE_BREAKPOINTS
    if by_hand is not None and by_hand:
        assert marks(body) <= len(by_hand)
    assert unmarked(body) == off
    assert marks(off) == 0
    # every mark is Anthropic's one form, on a block that may carry it
    for turn in body["messages"]:
        for block in turn["content"]:
            if "cache_control" in block:
                assert block["cache_control"] == MARK
                assert block["type"] not in ("thinking", "redacted_thinking")
    # and the simulator, which refuses a fifth mark as Anthropic does, reads the body
    parse_request("anthropic", json.dumps(body))


@given(shape=requests())
def test_automatic_marks_are_tools_system_and_two_turns_back(
    shape: tuple[list[Message], list[ToolDefinition]],
) -> None:
    messages, tools = shape
    body = anthropic_body(messages, tools)
    expected = bool(tools) + isinstance(body.get("system"), list)
    for back in (2, 4):
        if len(body["messages"]) >= back:
            content = body["messages"][-back]["content"]
            expected += any(b["type"] not in ("thinking", "redacted_thinking") for b in content)
    assert marks(body) == expected
    # the last turn -- the new one, which the next request may send otherwise -- never
    # carries a mark, nor do turns 1 and 3 back
    for back in (1, 3):
        if len(body["messages"]) >= back:
            assert marks(body["messages"][-back]) == 0


# ---------------------------------------------------------------------------------------------
# OpenAI and Ollama


@pytest.mark.parametrize("module", [openai_chat, openai_responses])
def test_openai_sends_the_cache_key_and_retention_under_its_names(module: Any) -> None:
    plain = module.encode_request(CONVERSATION, model="gpt", stream=False)
    body = module.encode_request(
        CONVERSATION,
        model="gpt",
        stream=False,
        options=ProviderOptions(cache="auto", cache_key="tenant-7", cache_retention="24h"),
    )
    assert body == {**plain, "prompt_cache_key": "tenant-7", "prompt_cache_retention": "24h"}
    # automatic caching is what OpenAI does: "auto" and () say nothing
    assert (
        module.encode_request(
            CONVERSATION,
            model="gpt",
            stream=False,
            options=ProviderOptions(cache="auto", cache_breakpoints=()),
        )
        == plain
    )
    # and the simulator reads them back as the settings they came from
    vendor: Vendor = "openai" if module is openai_chat else "openai-responses"
    got = parse_request(vendor, json.dumps(body)).settings
    assert (got.cache_key, got.cache_retention) == ("tenant-7", "24h")
    with pytest.raises(ConfigError, match=r"extra may not set 'prompt_cache_key'.* from cache_key"):
        module.encode_request(
            CONVERSATION,
            model="gpt",
            options=ProviderOptions(cache_key="a", extra={"prompt_cache_key": "b"}),
        )


@pytest.mark.parametrize("module", [openai_chat, openai_responses, ollama])
def test_a_vendor_that_caches_by_itself_refuses_off_and_marks_by_hand(module: Any) -> None:
    for options, problem in (
        (ProviderOptions(cache="off"), "cache='off' cannot be honoured"),
        (ProviderOptions(cache_breakpoints=["system"]), "takes no cache breakpoints"),
    ):
        with pytest.raises(ConfigError, match=problem):
            module.encode_request(CONVERSATION, model="m", options=options)


def test_ollama_has_no_cache_key_nor_retention() -> None:
    for options in (ProviderOptions(cache_key="k"), ProviderOptions(cache_retention="in_memory")):
        with pytest.raises(ConfigError, match="Ollama has no cache_"):
            ollama.encode_request(CONVERSATION, model="m", options=options)
    plain = ollama.encode_request(CONVERSATION, model="m")
    assert (
        ollama.encode_request(CONVERSATION, model="m", options=ProviderOptions(cache="auto"))
        == plain
    )


def test_the_relays_openai_route_reads_openais_names_for_the_cache() -> None:
    """The relay's own OpenAI-compatible route: ``prompt_cache_retention`` is the setting,
    ``prompt_cache_key`` is about the caller (dropped, as documented there), and our own field
    names are no wire keys of OpenAI's (unknown keys: ``extra``, as any other)."""
    body = {
        "model": "agent",
        "messages": [{"role": "user", "content": "hi"}],
        "prompt_cache_retention": "24h",
        "prompt_cache_key": "tenant-7",
        "cache": "off",
    }
    settings = decode_request(json.dumps(body).encode()).settings
    assert settings == ModelSettings(cache_retention="24h", extra={"cache": "off"})


ENCODERS: dict[Vendor, Any] = {
    "anthropic": anthropic.encode_request,
    "openai": openai_chat.encode_request,
    "openai-responses": openai_responses.encode_request,
    "ollama": ollama.encode_request,
}


def refusal(vendor: Vendor, settings: ModelSettings) -> str | None:
    """Why ``vendor`` must refuse ``settings``' cache fields (``None``: it takes them all)."""
    if vendor == "anthropic":
        if settings.cache_key is not None:
            return "cache_key"
        return "cache_retention" if settings.cache_retention == "24h" else None
    if settings.cache == "off":
        return "cache='off'"
    if settings.cache_breakpoints:
        return "breakpoints"
    if vendor == "ollama" and (settings.cache_key or settings.cache_retention):
        return "cache_"
    return None


@given(settings=cache_settings, vendor=st.sampled_from(sorted(ENCODERS)))
def test_a_set_cache_field_is_sent_or_refused_never_dropped(
    settings: ModelSettings, vendor: Vendor
) -> None:
    history = [Message.system("S", id="system-prompt"), *CONVERSATION[1:]]
    options = ProviderOptions.from_settings(settings)
    if refusal(vendor, settings) is not None:
        with pytest.raises(ConfigError):
            ENCODERS[vendor](history, model="m", tools=[ADD], options=options)
        return
    body = ENCODERS[vendor](history, model="m", tools=[ADD], options=options)
    got = parse_request(vendor, json.dumps(body))
    if vendor in ("openai", "openai-responses"):
        assert (got.settings.cache_key, got.settings.cache_retention) == (
            settings.cache_key,
            settings.cache_retention,
        )
    if vendor == "anthropic":
        # marks wherever the settings put them: automatic (tools, system, two turns back),
        # by hand (the names this request has: m1-m3 are no message's), or none
        if settings.cache == "off":
            expected = 0
        elif settings.cache_breakpoints:
            expected = len({"tools", "system"} & set(settings.cache_breakpoints))
        else:
            expected = 4
        assert marks(body) == expected
        assert len(got.prefixes) == expected
