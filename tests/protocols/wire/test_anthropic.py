"""Tests for protocols.wire.anthropic: every encoder rule, every reader rule, the error table, and
recorded streams replayed at random chunk boundaries."""

from __future__ import annotations

import base64
import json
import pathlib
import random
from typing import Any

import attrs
import pytest

from protocols.codec import from_json, to_json
from protocols.errors import ConfigError, ProtocolError, ProviderError
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.sse import SSEDecoder, SSEEvent
from protocols.wire import CallFragment, Increment, StreamAssembler
from protocols.wire.anthropic import (
    API_VERSION,
    DEFAULT_BASE_URL,
    DEFAULT_MAX_TOKENS,
    PATH,
    AnthropicReader,
    encode_request,
    error_details,
    is_context_overflow,
    read_response,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "anthropic"
MODEL = "claude-sonnet-4-5"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()
SIGNED = {"type": "thinking", "thinking": "Let me add them.", "signature": "EqQBCgIYAhIM"}
TIMES = "\u00d7"  # the fixtures use the multiplication sign (non-ASCII text)
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}


def body(messages: list[Message], **kwargs: Any) -> dict[str, Any]:
    """The request body, without the prompt-cache marks Anthropic's default adds (unless the
    options say otherwise): they are tested in test_prompt_cache.py."""
    options = kwargs.pop("options", None) or ProviderOptions()
    if options.cache is None:
        options = attrs.evolve(options, cache="off")
    return encode_request(messages, model=MODEL, options=options, **kwargs)


def user_turn(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def result_block(call_id: str, content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


# --------------------------------------------------------------------------- constants


def test_constants() -> None:
    assert PATH == "/v1/messages"
    assert DEFAULT_BASE_URL == "https://api.anthropic.com"
    assert API_VERSION == "2023-06-01"
    assert DEFAULT_MAX_TOKENS == 4096


# --------------------------------------------------------------------------- encoder: messages


def test_minimal_request() -> None:
    assert body([Message.user("Hi")]) == {
        "model": MODEL,
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [user_turn(text("Hi"))],
        "stream": True,
    }


def test_stream_false_sends_no_stream_field() -> None:
    assert "stream" not in body([Message.user("Hi")], stream=False)


def test_model_must_be_non_empty() -> None:
    with pytest.raises(ConfigError, match="model"):
        encode_request([Message.user("Hi")], model="")


def test_system_messages_are_joined_into_the_top_level_field() -> None:
    request = body(
        [
            Message.system("You are terse."),
            Message.system(""),
            Message.user("Hi"),
            Message.system("Answer in French."),
        ]
    )
    assert request["system"] == "You are terse.\n\nAnswer in French."
    assert request["messages"] == [user_turn(text("Hi"))]


def test_no_system_field_without_system_text() -> None:
    assert "system" not in body([Message.user("Hi")])
    assert "system" not in body([Message.system(""), Message.user("Hi")])


def test_user_images_come_first_as_base64_blocks() -> None:
    request = body([Message.user("What is this?", images=[PNG, f"data:image/webp;base64,{JPEG}"])])
    assert request["messages"] == [
        user_turn(
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            # A data: URL's declared type wins and its prefix is stripped.
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/webp", "data": JPEG},
            },
            text("What is this?"),
        )
    ]


def test_image_media_type_is_sniffed_from_a_bare_payload() -> None:
    (turn,) = body([Message.user("", images=[JPEG])])["messages"]
    # An empty text sends no text block.
    assert turn == user_turn(
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}}
    )


def test_empty_user_message_is_skipped() -> None:
    request = body([Message.user("a"), Message.assistant("b"), Message.user(""), Message.user("c")])
    assert request["messages"] == [
        user_turn(text("a")),
        {"role": "assistant", "content": [text("b")]},
        user_turn(text("c")),
    ]


def test_assistant_text_then_tool_use_blocks() -> None:
    calls = [ToolCall("toolu_1", "add", {"a": 1, "b": 2}), ToolCall("toolu_2", "now")]
    (_, turn) = body([Message.user("q"), Message.assistant("On it.", calls=calls)])["messages"]
    assert turn == {
        "role": "assistant",
        "content": [
            text("On it."),
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
            {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
        ],
    }


def test_assistant_with_only_calls_has_no_empty_text_block() -> None:
    calls = [ToolCall("toolu_1", "now")]
    (_, turn) = body([Message.user("q"), Message.assistant("", calls=calls)])["messages"]
    assert turn["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}]


def test_empty_assistant_message_is_skipped() -> None:
    request = body([Message.user("a"), Message.assistant(""), Message.user("b")])
    # Skipping it leaves two user turns in a row, which merge.
    assert request["messages"] == [user_turn(text("a"), text("b"))]


def test_thinking_blocks_from_continuation_go_first_and_message_thinking_is_not_sent() -> None:
    message = Message.assistant(
        "The sum is 3.",
        calls=[ToolCall("toolu_1", "check", {"n": 3})],
        thinking="private reasoning kept for audit",
        continuation={"anthropic": {"thinking_blocks": [SIGNED, REDACTED]}},
    )
    (_, turn) = body([Message.user("1+2?"), message])["messages"]
    assert turn == {
        "role": "assistant",
        "content": [
            SIGNED,
            REDACTED,
            text("The sum is 3."),
            {"type": "tool_use", "id": "toolu_1", "name": "check", "input": {"n": 3}},
        ],
    }
    assert "private reasoning" not in json.dumps(body([Message.user("1+2?"), message]))


def test_continuation_of_other_vendors_is_ignored() -> None:
    message = Message.assistant("x", continuation={"openai": {"reasoning": "r"}})
    (_, turn) = body([Message.user("q"), message])["messages"]
    assert turn == {"role": "assistant", "content": [text("x")]}


@pytest.mark.parametrize(
    "stored",
    [
        {"anthropic": "nope"},
        {"anthropic": {"thinking_blocks": "nope"}},
        {"anthropic": {"thinking_blocks": [1]}},
    ],
)
def test_malformed_thinking_blocks_are_refused(stored: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="thinking_blocks"):
        body([Message.user("q"), Message.assistant("x", continuation=stored)])


def test_consecutive_tool_results_and_a_following_user_message_share_one_user_turn() -> None:
    calls = [ToolCall("toolu_a", "f"), ToolCall("toolu_b", "g")]
    request = body(
        [
            Message.system("sys"),
            Message.user("Run both."),
            Message.assistant("", calls=calls),
            Message.tool("toolu_a", "f", "1"),
            Message.tool("toolu_b", "g", "2"),
            Message.user("Now summarise."),
            Message.assistant("Done: 1 and 2."),
        ]
    )
    assert request == {
        "model": MODEL,
        "max_tokens": DEFAULT_MAX_TOKENS,
        "system": "sys",
        "messages": [
            user_turn(text("Run both.")),
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}},
                    {"type": "tool_use", "id": "toolu_b", "name": "g", "input": {}},
                ],
            },
            user_turn(
                result_block("toolu_a", "1"),
                result_block("toolu_b", "2"),
                text("Now summarise."),
            ),
            {"role": "assistant", "content": [text("Done: 1 and 2.")]},
        ],
        "stream": True,
    }


def test_tool_result_images_follow_its_text_inside_the_block() -> None:
    calls = [ToolCall("toolu_a", "draw"), ToolCall("toolu_b", "g")]
    request = body(
        [
            Message.user("Draw."),
            Message.assistant("", calls=calls),
            Message.tool(
                "toolu_a", "draw", "a dot", images=[PNG, f"data:image/jpeg;base64,{JPEG}"]
            ),
            Message.tool("toolu_b", "g", "2"),
        ]
    )
    image = {"type": "base64", "media_type": "image/png", "data": PNG}
    jpeg = {"type": "base64", "media_type": "image/jpeg", "data": JPEG}
    assert request["messages"][2] == user_turn(
        {
            "type": "tool_result",
            "tool_use_id": "toolu_a",
            "content": [
                text("a dot"),
                {"type": "image", "source": image},
                {"type": "image", "source": jpeg},
            ],
        },
        result_block("toolu_b", "2"),  # without images: the text as a string, as before
    )


def test_turns_alternate_and_tool_results_lead_a_merged_turn() -> None:
    request = body(
        [
            Message.user("first"),
            Message.user("second"),
            Message.assistant("", calls=[ToolCall("toolu_a", "f")]),
            Message.user("(interjection)"),
            Message.tool("toolu_a", "f", "ok"),
        ]
    )
    roles = [turn["role"] for turn in request["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert request["messages"][0] == user_turn(text("first"), text("second"))
    assert request["messages"][2] == user_turn(
        result_block("toolu_a", "ok"), text("(interjection)")
    )


def test_tools_encoding() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tools = [ToolDefinition("weather", "Current weather.", schema), ToolDefinition("now")]
    assert body([Message.user("q")], tools=tools)["tools"] == [
        {"name": "weather", "description": "Current weather.", "input_schema": schema},
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert "tools" not in body([Message.user("q")])


def test_request_is_strict_json() -> None:
    request = body(
        [
            Message.system("s"),
            Message.user("u", images=[PNG]),
            Message.assistant("a", calls=[ToolCall("t", "f", {"x": [1, 2.5, None]})]),
            Message.tool("t", "f", "r"),
        ],
        tools=[ToolDefinition("f")],
    )
    assert json.loads(json.dumps(request, allow_nan=False)) == request


# --------------------------------------------------------------------------- encoder: options


def test_options_none_and_defaults_are_the_same() -> None:
    messages = [Message.user("q")]
    assert body(messages) == body(messages, options=ProviderOptions())


def test_max_tokens_temperature_and_stop() -> None:
    options = ProviderOptions(max_tokens=300, temperature=0.3, stop=["\n\nHuman:", "END"])
    request = body([Message.user("q")], options=options)
    assert request["max_tokens"] == 300
    assert request["temperature"] == 0.3
    assert request["stop_sequences"] == ["\n\nHuman:", "END"]


def test_temperature_one_is_allowed() -> None:
    assert body([Message.user("q")], options=ProviderOptions(temperature=1))["temperature"] == 1.0


def test_temperature_above_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="temperature from 0 to 1"):
        body([Message.user("q")], options=ProviderOptions(temperature=1.5))


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ("weather", {"type": "tool", "name": "weather"}),
    ],
)
def test_tool_choice(choice: str, expected: dict[str, Any]) -> None:
    tools = [ToolDefinition("weather"), ToolDefinition("now")]
    options = ProviderOptions(tool_choice=choice)
    assert body([Message.user("q")], tools=tools, options=options)["tool_choice"] == expected


def test_no_tool_choice_field_by_default() -> None:
    assert "tool_choice" not in body([Message.user("q")], tools=[ToolDefinition("now")])


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_harmless_tool_choice_without_tools_is_dropped(choice: str) -> None:
    request = body([Message.user("q")], options=ProviderOptions(tool_choice=choice))
    assert "tool_choice" not in request


@pytest.mark.parametrize("choice", ["required", "weather"])
def test_tool_choice_that_needs_tools_is_refused_without_tools(choice: str) -> None:
    with pytest.raises(ConfigError, match="needs tools"):
        body([Message.user("q")], options=ProviderOptions(tool_choice=choice))


def test_tool_choice_naming_an_unknown_tool_is_refused() -> None:
    with pytest.raises(ConfigError, match="'weather'"):
        body(
            [Message.user("q")],
            tools=[ToolDefinition("now")],
            options=ProviderOptions(tool_choice="weather"),
        )


@pytest.mark.parametrize(("max_tokens", "budget"), [(None, 2048), (1025, 1024), (20000, 10000)])
def test_think_true_enables_thinking_with_a_budget(max_tokens: int | None, budget: int) -> None:
    options = ProviderOptions(think=True, max_tokens=max_tokens)
    request = body([Message.user("q")], options=options)
    assert request["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert request["thinking"]["budget_tokens"] < request["max_tokens"]


def test_think_true_needs_room_for_the_minimum_budget() -> None:
    with pytest.raises(ConfigError, match="max_tokens above 1024"):
        body([Message.user("q")], options=ProviderOptions(think=True, max_tokens=1024))


def test_think_false_sends_nothing() -> None:
    assert "thinking" not in body([Message.user("q")], options=ProviderOptions(think=False))


def test_schema_is_refused_with_advice() -> None:
    options = ProviderOptions(schema={"type": "object"})
    with pytest.raises(ConfigError, match="tool"):
        body([Message.user("q")], options=options)


def test_extra_is_merged_last_and_may_not_set_what_an_option_sets() -> None:
    options = ProviderOptions(max_tokens=100, extra={"top_k": 5, "metadata": {"user_id": "u1"}})
    request = body([Message.user("q")], options=options)
    assert request["max_tokens"] == 100
    assert request["top_k"] == 5
    assert request["metadata"] == {"user_id": "u1"}
    # max_tokens is always the encoder's (Anthropic requires it: its default when unset)
    for given in (100, None):
        options = ProviderOptions(max_tokens=given, extra={"max_tokens": 200})
        with pytest.raises(ConfigError, match=r"may not set 'max_tokens'.*from max_tokens"):
            body([Message.user("q")], options=options)
    options = ProviderOptions(think=True, extra={"thinking": {"type": "disabled"}})
    with pytest.raises(ConfigError, match=r"may not set 'thinking'.*from think"):
        body([Message.user("q")], options=options)
    # a key no option wrote is the caller's
    assert (
        body([Message.user("q")], options=ProviderOptions(extra={"thinking": {}}))["thinking"] == {}
    )


@pytest.mark.parametrize("key", ["model", "messages", "system", "tools", "stream"])
def test_extra_may_not_override_owned_keys(key: str) -> None:
    with pytest.raises(ConfigError, match=repr(key)):
        body([Message.user("q")], options=ProviderOptions(extra={key: "x"}))


def test_encoding_does_not_mutate_inputs() -> None:
    blocks = [dict(SIGNED)]
    message = Message.assistant("a", continuation={"anthropic": {"thinking_blocks": blocks}})
    before = to_json(message)
    request = body([Message.user("q"), message, Message.user("r")])
    request["messages"][1]["content"].append(text("appended"))
    assert to_json(message) == before


# --------------------------------------------------------------------------- reader


def event(kind: str, **fields: Any) -> SSEEvent:
    return SSEEvent(data=json.dumps({"type": kind, **fields}), event=kind)


def start_event(
    input_tokens: int = 10, read: int | None = 0, creation: int | None = 0, output: int = 1
) -> SSEEvent:
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output}
    if read is not None:
        usage["cache_read_input_tokens"] = read
    if creation is not None:
        usage["cache_creation_input_tokens"] = creation
    message = {"id": "msg_01", "type": "message", "role": "assistant", "content": []}
    return event("message_start", message={**message, "usage": usage})


def block_start(index: int, block: dict[str, Any]) -> SSEEvent:
    return event("content_block_start", index=index, content_block=block)


def block_delta(index: int, delta: dict[str, Any]) -> SSEEvent:
    return event("content_block_delta", index=index, delta=delta)


def block_stop(index: int) -> SSEEvent:
    return event("content_block_stop", index=index)


def test_message_start_reports_usage_with_cache_arithmetic() -> None:
    reader = AnthropicReader()
    increment = reader.read(start_event(input_tokens=7, read=100, creation=20, output=1))
    # Anthropic's input_tokens excludes cache reads and writes; our prompt is the whole prompt.
    assert increment == Increment(
        usage=Usage(prompt=127, completion=1, cached=100, cache_write=20), response_id="msg_01"
    )


def test_usage_without_cache_fields_has_no_cached_count() -> None:
    increment = AnthropicReader().read(start_event(input_tokens=7, read=None, creation=None))
    assert increment.usage == Usage(prompt=7, completion=1, cached=None)


def test_message_delta_merges_cumulative_output_tokens() -> None:
    reader = AnthropicReader()
    reader.read(start_event(input_tokens=7, read=3, creation=0, output=1))
    first = reader.read(event("message_delta", delta={}, usage={"output_tokens": 40}))
    assert first == Increment(usage=Usage(prompt=10, completion=40, cached=3, cache_write=0))
    second = reader.read(
        event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 55})
    )
    assert second == Increment(
        usage=Usage(prompt=10, completion=55, cached=3, cache_write=0), finish=FinishReason.STOP
    )


def test_message_delta_may_restate_input_counts() -> None:
    reader = AnthropicReader()
    reader.read(start_event(input_tokens=7, read=0, creation=0))
    increment = reader.read(
        event(
            "message_delta",
            delta={"stop_reason": None},
            usage={"input_tokens": 9, "cache_read_input_tokens": 50, "output_tokens": 4},
        )
    )
    assert increment == Increment(usage=Usage(prompt=59, completion=4, cached=50, cache_write=0))


def test_usage_nobody_reported_stays_unknown_not_zero() -> None:
    reader = AnthropicReader()
    start = event("message_start", message={"id": "msg_1", "type": "message", "content": []})
    assert reader.read(start) == Increment(usage=None, response_id="msg_1")
    assert reader.read(event("message_start", message={"usage": {}})).usage is None
    finish = event("message_delta", delta={"stop_reason": "end_turn"})
    assert reader.read(finish) == Increment(finish=FinishReason.STOP)
    assert read_response({"content": [], "usage": {}}).usage is None
    assert read_response({"content": []}).usage is None
    # one reported count makes the usage known (the others are then zero)
    assert reader.read(event("message_delta", delta={}, usage={"output_tokens": 3})).usage == (
        Usage(completion=3)
    )


def test_silly_usage_counts_are_sanitised() -> None:
    reader = AnthropicReader()
    increment = reader.read(start_event(input_tokens=-5, read=None, creation=None, output=1))
    assert increment.usage == Usage(prompt=0, completion=1)


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("model_context_window_exceeded", FinishReason.LENGTH),
        ("tool_use", FinishReason.TOOL_CALLS),
        ("refusal", FinishReason.CONTENT_FILTER),
        ("pause_turn", FinishReason.OTHER),
        ("something_new", FinishReason.OTHER),
        (None, None),
    ],
)
def test_stop_reason_mapping(reason: str | None, finish: FinishReason | None) -> None:
    increment = AnthropicReader().read(event("message_delta", delta={"stop_reason": reason}))
    assert increment == Increment(finish=finish)


def test_text_block() -> None:
    reader = AnthropicReader()
    assert reader.read(block_start(0, {"type": "text", "text": ""})) == Increment()
    delta = reader.read(block_delta(0, {"type": "text_delta", "text": "Hel"}))
    assert delta == Increment(content="Hel")
    assert reader.read(block_stop(0)) == Increment()


def test_text_block_start_with_initial_text_is_not_lost() -> None:
    increment = AnthropicReader().read(block_start(0, {"type": "text", "text": "Hi"}))
    assert increment == Increment(content="Hi")


def test_tool_use_block() -> None:
    reader = AnthropicReader()
    block = {"type": "tool_use", "id": "toolu_9", "name": "add", "input": {}}
    assert reader.read(block_start(3, block)) == Increment(
        calls=(CallFragment(3, id="toolu_9", name="add"),)
    )
    piece = reader.read(block_delta(3, {"type": "input_json_delta", "partial_json": '{"a": '}))
    assert piece == Increment(calls=(CallFragment(3, arguments='{"a": '),))
    assert reader.read(block_stop(3)) == Increment()


def test_thinking_block_ends_in_a_continuation() -> None:
    reader = AnthropicReader()
    assert reader.read(block_start(0, {"type": "thinking", "thinking": ""})) == Increment()
    assert reader.read(block_delta(0, {"type": "thinking_delta", "thinking": "Let me "})) == (
        Increment(thinking="Let me ")
    )
    assert reader.read(block_delta(0, {"type": "thinking_delta", "thinking": "add them."})) == (
        Increment(thinking="add them.")
    )
    signature = block_delta(0, {"type": "signature_delta", "signature": "EqQBCgIYAhIM"})
    assert reader.read(signature) == Increment()
    assert reader.read(block_stop(0)) == Increment(
        continuation={"anthropic": {"thinking_blocks": [SIGNED]}}
    )


def test_redacted_thinking_is_kept_whole_and_blocks_accumulate_in_order() -> None:
    reader = AnthropicReader()
    assert reader.read(block_start(0, REDACTED)) == Increment(
        continuation={"anthropic": {"thinking_blocks": [REDACTED]}}
    )
    reader.read(block_start(1, {"type": "thinking", "thinking": "Let me add them."}))
    reader.read(block_delta(1, {"type": "signature_delta", "signature": "EqQBCgIYAhIM"}))
    assert reader.read(block_stop(1)) == Increment(
        continuation={"anthropic": {"thinking_blocks": [REDACTED, SIGNED]}}
    )


def test_thinking_blocks_are_kept_in_block_order_when_they_finish_out_of_order() -> None:
    reader = AnthropicReader()
    reader.read(block_start(0, {"type": "thinking", "thinking": "first"}))
    reader.read(block_start(1, REDACTED))
    increment = reader.read(block_stop(0))
    first = {"type": "thinking", "thinking": "first", "signature": ""}
    assert increment.continuation == {"anthropic": {"thinking_blocks": [first, REDACTED]}}


def test_ping_unknown_events_and_unknown_deltas_contribute_nothing() -> None:
    reader = AnthropicReader()
    assert reader.read(event("ping")) == Increment()
    assert reader.read(event("brand_new_event", payload={"x": 1})) == Increment()
    citation = {"type": "citations_delta", "citation": {"cited_text": "c"}}
    assert reader.read(block_delta(0, citation)) == Increment()


def test_unknown_block_types_are_ignored_with_their_deltas() -> None:
    reader = AnthropicReader()
    server_tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    assert reader.read(block_start(1, server_tool)) == Increment()
    json_piece = {"type": "input_json_delta", "partial_json": '{"query": "trio"}'}
    assert reader.read(block_delta(1, json_piece)) == Increment()
    assert reader.read(block_stop(1)) == Increment()


def test_unknown_fields_are_tolerated() -> None:
    reader = AnthropicReader()
    data = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "x", "brand_new": [1]},
        "trace": {"id": 7},
    }
    assert reader.read(SSEEvent(json.dumps(data), event="content_block_delta")) == Increment(
        content="x"
    )


def test_message_stop_is_terminal() -> None:
    assert AnthropicReader().read(event("message_stop")) == Increment(terminal=True, final=True)


def test_the_data_type_is_trusted_over_the_event_name() -> None:
    data = json.dumps({"type": "message_stop"})
    assert AnthropicReader().read(SSEEvent(data, event="ping")) == Increment(
        terminal=True, final=True
    )


def test_the_event_name_is_used_when_the_data_has_no_type() -> None:
    assert AnthropicReader().read(SSEEvent("{}", event="message_stop")) == Increment(
        terminal=True, final=True
    )


@pytest.mark.parametrize("data", ["", "{", "not json", '{"type": "ping"} trailing', "NaN"])
def test_malformed_json_raises_protocol_error(data: str) -> None:
    with pytest.raises(ProtocolError):
        AnthropicReader().read(SSEEvent(data, event="content_block_delta"))


@pytest.mark.parametrize(
    "data",
    [
        "[]",
        '"text"',
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_delta", "index": "0", "delta": {"type": "text_delta"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}},
        {"type": "content_block_delta", "index": 0, "delta": "text"},
        {"type": "content_block_start", "index": 0, "content_block": None},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking"}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": 1}},
        {"type": "message_start", "message": []},
        {"type": "message_delta", "delta": {"stop_reason": 3}},
        {"type": "content_block_stop", "index": -1},
    ],
)
def test_known_fields_of_the_wrong_shape_raise_protocol_error(data: Any) -> None:
    text_data = data if isinstance(data, str) else json.dumps(data)
    with pytest.raises(ProtocolError):
        AnthropicReader().read(SSEEvent(text_data))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("vendor_type", "message", "code", "retryable"),
    [
        ("overloaded_error", "Overloaded", "overloaded", True),
        (
            "rate_limit_error",
            "Number of request tokens has exceeded your limit",
            "rate_limit",
            True,
        ),
        ("api_error", "Internal server error", "server_error", True),
        (
            "invalid_request_error",
            "prompt is too long: 210644 tokens > 200000 maximum",
            "context_overflow",
            False,
        ),
        (
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000",
            "context_overflow",
            False,
        ),
        ("invalid_request_error", "messages: roles must alternate", "provider_error", False),
        ("authentication_error", "invalid x-api-key", "auth", False),
        ("permission_error", "no access", "auth", False),
        ("not_found_error", "model: claude-x", "model_not_found", False),
        ("timeout_error", "Request timed out", "timeout", True),
        ("brand_new_error", "?", "provider_error", False),
    ],
)
def test_error_event_mapping(vendor_type: str, message: str, code: str, retryable: bool) -> None:
    record = event("error", error={"type": vendor_type, "message": message})
    with pytest.raises(ProviderError) as caught:
        AnthropicReader().read(record)
    error = caught.value
    assert (error.code, error.retryable) == (code, retryable)
    assert (error.vendor_type, error.vendor_code) == (vendor_type, vendor_type)
    assert message in error.message
    assert error.status is None


def test_error_event_message_is_bounded_and_never_the_whole_record() -> None:
    secret_field = "request-body-should-not-leak"
    record = event(
        "error",
        error={"type": "api_error", "message": "boom " * 1000},
        request={"echo": secret_field},
    )
    with pytest.raises(ProviderError) as caught:
        AnthropicReader().read(record)
    error = caught.value
    assert len(error.message) <= 300
    assert len(error.excerpt) <= 300
    assert secret_field not in str(error)
    assert secret_field not in error.excerpt
    assert error.message.startswith("Anthropic api_error: boom boom")


def test_error_event_of_unknown_shape_is_still_a_provider_error() -> None:
    with pytest.raises(ProviderError) as caught:
        AnthropicReader().read(event("error", error="weird"))
    assert (caught.value.code, caught.value.vendor_type) == ("provider_error", None)


def test_error_details_of_an_anthropic_error_body() -> None:
    raw = json.dumps(
        {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "Slow down."},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
        }
    )
    assert error_details(raw) == ("rate_limit_error", "rate_limit_error", "Slow down.")


def test_error_details_bounds_the_message() -> None:
    raw = json.dumps({"type": "error", "error": {"type": "api_error", "message": "x" * 5000}})
    vendor_type, vendor_code, message = error_details(raw)
    assert (vendor_type, vendor_code) == ("api_error", "api_error")
    assert len(message) <= 300


@pytest.mark.parametrize(
    "raw",
    ["<html>502 Bad Gateway</html>", "   upstream timed out  ", "", "null", "[1]", '{"e": 1}'],
)
def test_error_details_of_something_else(raw: str) -> None:
    assert error_details(raw) == (None, None, raw.strip())


def test_error_details_cuts_non_json_text() -> None:
    vendor_type, vendor_code, message = error_details("  " + "z" * 5000)
    assert (vendor_type, vendor_code) == (None, None)
    assert 0 < len(message) <= 300
    assert set(message.rstrip(".")) == {"z"}


@pytest.mark.parametrize(
    "raw",
    ['{"error": 5}', '{"error": {"type": 5, "message": 7}}', '{"error": {"type": "x"}}', "\x00"],
)
def test_error_details_never_raises(raw: str) -> None:
    vendor_type, _, message = error_details(raw)
    assert vendor_type in (None, "x")
    assert isinstance(message, str)


@pytest.mark.parametrize(
    ("message", "overflow"),
    [
        ("prompt is too long: 210644 tokens > 200000 maximum", True),
        ("Prompt is too long", True),
        ("input length and `max_tokens` exceed context limit: 1 + 2 > 2", True),
        ("max_tokens: 100000 > 64000, which is the maximum allowed", False),
        ("Overloaded", False),
        ("", False),
    ],
)
def test_is_context_overflow(message: str, overflow: bool) -> None:
    assert is_context_overflow(message) is overflow


# --------------------------------------------------------------------------- read_response


def response_body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "msg_01AbCdEf",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            dict(REDACTED),
            dict(SIGNED),
            {"type": "text", "text": "Adding "},
            {"type": "text", "text": "now."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 5,
            "cache_read_input_tokens": 40,
            "cache_creation_input_tokens": 2,
            "output_tokens": 30,
        },
    }
    base.update(overrides)
    return base


def test_read_response() -> None:
    assert read_response(response_body()) == ProviderResult(
        content="Adding now.",
        thinking="Let me add them.",
        calls=[ToolCall("toolu_1", "add", {"a": 1, "b": 2})],
        usage=Usage(prompt=47, completion=30, cached=40, cache_write=2),
        finish=FinishReason.TOOL_CALLS,
        continuation={"anthropic": {"thinking_blocks": [REDACTED, SIGNED]}},
        model=MODEL,
        response_id="msg_01AbCdEf",
    )


def test_read_response_accepts_text_and_bytes() -> None:
    raw = json.dumps(response_body())
    assert read_response(raw) == read_response(raw.encode()) == read_response(response_body())


def test_read_response_defaults() -> None:
    result = read_response({"type": "message", "content": [], "stop_reason": None})
    assert result == ProviderResult()
    assert result.usage is None
    call = {"type": "tool_use", "name": "now"}
    minted = read_response({"content": [call], "stop_reason": None})
    assert minted.calls[0].id  # a missing id is minted
    assert minted.calls[0].arguments == {}
    assert minted.finish is FinishReason.TOOL_CALLS


def test_read_response_of_an_error_body_raises_provider_error() -> None:
    raw = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(ProviderError) as caught:
        read_response(raw)
    assert (caught.value.code, caught.value.retryable) == ("overloaded", True)


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "{",
        {"content": "text"},
        {"content": [{"type": "text"}]},
        {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]},
        {
            "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                {"type": "tool_use", "id": "t", "name": "g", "input": {}},
            ]
        },
        {"content": [], "usage": 5},
    ],
)
def test_read_response_of_a_malformed_body_raises_protocol_error(raw: Any) -> None:
    with pytest.raises(ProtocolError):
        read_response(raw)


def test_streamed_and_whole_responses_agree() -> None:
    streamed = replay((FIXTURES / "tool_use.sse").read_bytes(), [])
    whole = read_response(
        {
            "id": "msg_01Ty8cNf2VgW6LpQhXaZ4rKm",
            "model": "claude-sonnet-4-5-20250929",
            "content": [
                {"type": "text", "text": "I'll look up the weather in both cities."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A9sRkWzE4qLm7TcVbN2xHd",
                    "name": "get_weather",
                    "input": {"city": "Paris", "unit": "celsius"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01KpQ3vXcJ8nGy5BfRt6aLwE",
                    "name": "get_weather",
                    "input": {"city": "São Paulo", "unit": "celsius"},
                },
            ],
            "stop_reason": "tool_use",
            "usage": {
                "input_tokens": 412,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 131,
            },
        }
    )
    assert streamed == whole


# --------------------------------------------------------------------------- recorded streams

SUCCESSFUL = ["text", "thinking", "tool_use", "cached_usage", "no_usage"]
SPLITS = 50


def chunks(raw: bytes, rng: random.Random) -> list[bytes]:
    count = rng.randint(0, min(len(raw) - 1, 40))
    cuts = sorted(rng.sample(range(1, len(raw)), count))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


def replay(raw: bytes, pieces: list[bytes], deltas: list[Delta] | None = None) -> ProviderResult:
    """SSEDecoder -> AnthropicReader -> StreamAssembler(split=False) -> flush -> result."""
    decoder = SSEDecoder()
    reader = AnthropicReader()
    assembler = StreamAssembler(split=False)
    for chunk in pieces or [raw]:
        for item in decoder.feed(chunk):
            if isinstance(item, SSEEvent):
                for delta in assembler.add(reader.read(item)):
                    if deltas is not None:
                        deltas.append(delta)
    for item in decoder.close():
        assert not isinstance(item, SSEEvent)
    assembler.flush()
    assert assembler.terminal
    return assembler.result()


def expected(name: str) -> ProviderResult:
    data = json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8"))
    return from_json(ProviderResult, data)


@pytest.mark.parametrize("name", SUCCESSFUL)
def test_recorded_stream_at_random_chunk_boundaries(name: str) -> None:
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    want = expected(name)
    rng = random.Random(f"anthropic-{name}")
    for _ in range(SPLITS):
        pieces = chunks(raw, rng)
        deltas: list[Delta] = []
        got = replay(raw, pieces, deltas)
        assert got == want, pieces
        for channel in ("content", "thinking"):
            shown = "".join(delta.text for delta in deltas if delta.channel == channel)
            assert shown == getattr(want, channel)
    assert to_json(replay(raw, [])) == json.loads(
        (FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8")
    )


@pytest.mark.parametrize("name", [*SUCCESSFUL, "error"])
def test_recorded_streams_look_like_anthropic(name: str) -> None:
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    assert raw.endswith(b"\n\n")
    events = [item for item in SSEDecoder().feed(raw) if isinstance(item, SSEEvent)]
    assert events[0].event == "message_start"
    assert json.loads(events[0].data)["message"]["id"].startswith("msg_")
    for item in events:
        assert json.loads(item.data)["type"] == item.event


def test_recorded_expectations() -> None:
    text_result = expected("text")
    assert text_result.content.startswith("Trio's nurseries")
    assert text_result.usage == Usage(prompt=21, completion=17, cached=0, cache_write=0)
    thinking = expected("thinking")
    assert thinking.content == f"17 {TIMES} 23 = **391**."
    assert thinking.thinking.endswith("340 + 51 = 391.")
    (block,) = thinking.continuation["anthropic"]["thinking_blocks"]
    assert block["thinking"] == thinking.thinking
    assert block["signature"].startswith("ErUB")
    tools = expected("tool_use")
    assert [call.id for call in tools.calls] == [
        "toolu_01A9sRkWzE4qLm7TcVbN2xHd",
        "toolu_01KpQ3vXcJ8nGy5BfRt6aLwE",
    ]
    assert tools.calls[1].arguments == {"city": "São Paulo", "unit": "celsius"}
    assert tools.finish is FinishReason.TOOL_CALLS
    cached = expected("cached_usage")
    assert cached.usage == Usage(
        prompt=12 + 2048 + 512, completion=11, cached=2048, cache_write=512
    )


def test_thinking_round_trips_from_a_recorded_stream_into_the_next_request() -> None:
    result = replay((FIXTURES / "thinking.sse").read_bytes(), [])
    reply = Message.assistant(
        result.content, thinking=result.thinking, continuation=result.continuation
    )
    request = body([Message.user("17 x 23?"), reply, Message.user("And 17 x 24?")])
    sent = request["messages"][1]["content"]
    assert sent == [
        *result.continuation["anthropic"]["thinking_blocks"],
        text(f"17 {TIMES} 23 = **391**."),
    ]
    assert sent[0]["type"] == "thinking"
    assert sent[0]["signature"].startswith("ErUB")


def test_recorded_error_stream_raises_overloaded_at_any_chunking() -> None:
    raw = (FIXTURES / "error.sse").read_bytes()
    rng = random.Random("anthropic-error")
    for _ in range(SPLITS):
        with pytest.raises(ProviderError) as caught:
            replay(raw, chunks(raw, rng))
        error = caught.value
        assert (error.code, error.retryable, error.vendor_type) == (
            "overloaded",
            True,
            "overloaded_error",
        )


# --------------------------------------------------------------------------- model and id


def test_message_start_names_the_model_and_the_response() -> None:
    reader, assembler = AnthropicReader(), StreamAssembler()
    message = {"id": "msg_01X", "type": "message", "model": MODEL, "content": []}
    start = reader.read(event("message_start", message=message))
    assert (start.model, start.response_id) == (MODEL, "msg_01X")
    for item in (
        start,
        reader.read(block_start(0, {"type": "text", "text": ""})),
        reader.read(block_delta(0, {"type": "text_delta", "text": "Hi"})),
        reader.read(event("message_delta", delta={"stop_reason": "end_turn"})),
    ):
        assembler.add(item)
    # A stream cut before message_stop still knows them.
    partial = assembler.partial()
    assert (partial.content, partial.model, partial.response_id) == ("Hi", MODEL, "msg_01X")


@pytest.mark.parametrize("bad", [7, "", "m" * 257, {"name": "x"}])
def test_a_model_or_id_that_cannot_be_one_is_ignored_not_an_error(bad: Any) -> None:
    message = {"id": bad, "model": bad, "content": [], "usage": {"input_tokens": 3}}
    start = AnthropicReader().read(event("message_start", message=message))
    assert start == Increment(usage=Usage(prompt=3))
    whole = read_response({**message, "type": "message"})
    assert (whole.model, whole.response_id) == (None, None)
