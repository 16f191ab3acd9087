"""Tests for protocols.wire.openai_responses: every encoder rule, every reader rule, the error
mapping, and recorded-looking Responses API transcripts replayed at random chunk boundaries."""

from __future__ import annotations

import base64
import itertools
import json
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols._json import dumps, loads
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
from protocols.wire.openai_responses import (
    DEFAULT_BASE_URL,
    NAMESPACE,
    PATH,
    RESERVED_KEYS,
    THINK_EFFORT,
    OpenAIResponsesReader,
    encode_request,
    error_details,
    read_response,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "openai_responses"
MODEL = "gpt-5-mini"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
WEATHER = ToolDefinition(
    "get_weather",
    "Current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
STORED = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Think."}],
    "encrypted_content": "gAAAAB-opaque",
}


def body(messages: list[Message], **kwargs: Any) -> dict[str, Any]:
    return encode_request(messages, model=MODEL, **kwargs)


def event(kind: str, **fields: Any) -> SSEEvent:
    """One Responses event as the SSE decoder gives it (event name and ``type`` agree)."""
    return SSEEvent(data=json.dumps({"type": kind, **fields}), event=kind)


def no_mint() -> str:
    raise AssertionError("every call in these streams carries its id")


# --------------------------------------------------------------------------- constants


def test_constants() -> None:
    assert PATH == "/responses"
    assert DEFAULT_BASE_URL == "https://api.openai.com/v1"
    assert THINK_EFFORT == "medium"
    assert NAMESPACE == "openai_responses"
    assert {"model", "input", "store", "previous_response_id"} <= RESERVED_KEYS


# --------------------------------------------------------------------------- encoder


def test_minimal_streaming_request_is_stateless() -> None:
    assert body([Message.user("Hi")]) == {
        "model": MODEL,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
        ],
        "store": False,
        "stream": True,
    }


def test_non_streaming_request_has_no_stream_key_and_never_a_previous_response() -> None:
    request = body([Message.user("Hi")], stream=False)
    assert "stream" not in request
    assert request["store"] is False
    assert "previous_response_id" not in request


def test_the_whole_history_is_sent_in_order_as_items_with_one_system_item_first() -> None:
    call = ToolCall("call_1", "get_weather", {"city": "Paris"})
    history = [
        Message.system("Be terse."),
        Message.user("Weather in Paris?"),
        Message.assistant("Let me look.", calls=[call], thinking="private"),
        Message.tool("call_1", "get_weather", "18 C"),
        Message.system("Answer in French."),
        Message.assistant("Il fait 18 degrés."),
    ]
    assert body(history)["input"] == [
        {"type": "message", "role": "system", "content": "Be terse.\n\nAnswer in French."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Weather in Paris?"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look."}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Il fait 18 degrés."}],
        },
    ]
    assert "private" not in dumps(body(history))


def test_an_assistant_turn_of_calls_alone_sends_no_empty_message() -> None:
    calls = [ToolCall("a", "f", {}), ToolCall("b", "g", {"x": [1]})]
    items = body([Message.user("go"), Message.assistant(calls=calls)])["input"][1:]
    assert items == [
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": '{"x":[1]}'},
    ]


def test_an_empty_assistant_turn_without_calls_is_an_empty_message() -> None:
    items = body([Message.user("go"), Message.assistant("")])["input"]
    assert items[1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": ""}],
    }


def test_user_images_become_input_image_parts_after_the_text() -> None:
    message = Message.user("What is this?", images=[PNG, "data:image/webp;base64,AAAA"])
    assert body([message])["input"][0]["content"] == [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        {"type": "input_image", "image_url": "data:image/webp;base64,AAAA", "detail": "auto"},
    ]


def test_an_image_only_user_message_has_no_text_part() -> None:
    parts = body([Message.user("", images=[PNG])])["input"][0]["content"]
    assert [part["type"] for part in parts] == ["input_image"]


def test_a_tool_output_with_images_is_a_list_of_input_items() -> None:
    call = ToolCall("c1", "draw", {})
    history = [Message.user("draw"), Message.assistant(calls=[call])]
    plain = body([*history, Message.tool("c1", "draw", "a dot")])["input"][-1]
    assert plain == {"type": "function_call_output", "call_id": "c1", "output": "a dot"}
    pictured = Message.tool("c1", "draw", "a dot", images=[PNG, "data:image/webp;base64,AAAA"])
    assert body([*history, pictured])["input"][-1] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "a dot"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
            {"type": "input_image", "image_url": "data:image/webp;base64,AAAA", "detail": "auto"},
        ],
    }
    silent = Message.tool("c1", "draw", "", images=[PNG])
    output = body([*history, silent])["input"][-1]["output"]
    assert [part["type"] for part in output] == ["input_image"]


def test_stored_reasoning_goes_back_just_before_its_turn() -> None:
    call = ToolCall("c1", "f", {})
    turn = Message.assistant(
        calls=[call],
        continuation={NAMESPACE: {"reasoning": [STORED]}, "anthropic": {"thinking_blocks": []}},
    )
    items = body([Message.user("go"), turn, Message.tool("c1", "f", "ok")])["input"]
    assert [item["type"] for item in items] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert items[1] == STORED


@pytest.mark.parametrize(
    "continuation",
    [{}, {NAMESPACE: "x"}, {NAMESPACE: {"reasoning": "x"}}, {NAMESPACE: {"reasoning": [{"a": 1}]}}],
)
def test_other_continuation_data_is_never_sent(continuation: dict[str, Any]) -> None:
    items = body([Message.user("go"), Message.assistant("ok", continuation=continuation)])["input"]
    assert [item["type"] for item in items] == ["message", "message"]


def test_tools_are_flat_functions_and_not_strict() -> None:
    bare = ToolDefinition("ping", "", {"type": "object", "properties": {}})
    assert body([Message.user("Hi")], tools=[WEATHER, bare])["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER.parameters,
            "strict": False,
        },
        {"type": "function", "name": "ping", "parameters": bare.parameters, "strict": False},
    ]
    assert "tools" not in body([Message.user("Hi")])


def test_options_map_to_responses_fields() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    options = ProviderOptions(
        max_tokens=64, temperature=0.5, tool_choice="get_weather", schema=schema
    )
    request = body([Message.user("Hi")], options=options)
    assert request["max_output_tokens"] == 64
    assert "max_tokens" not in request
    assert request["temperature"] == 0.5
    assert request["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert request["text"] == {
        "format": {"type": "json_schema", "name": "output", "schema": schema}
    }


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_tool_choice_keywords_are_strings(choice: str) -> None:
    assert (
        body([Message.user("Hi")], options=ProviderOptions(tool_choice=choice))["tool_choice"]
        == choice
    )


def test_think_asks_for_a_summary_and_the_encrypted_reasoning() -> None:
    request = body([Message.user("Hi")], options=ProviderOptions(think=True))
    assert request["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert request["include"] == ["reasoning.encrypted_content"]
    off = body([Message.user("Hi")], options=ProviderOptions(think=False))
    assert "reasoning" not in off
    assert "include" not in off


def test_default_options_add_nothing() -> None:
    assert body([Message.user("Hi")], options=ProviderOptions()) == body([Message.user("Hi")])


def test_extra_is_merged_last() -> None:
    options = ProviderOptions(extra={"reasoning": {"effort": "minimal"}, "top_logprobs": 2})
    request = body([Message.user("Hi")], options=options)
    assert request["reasoning"] == {"effort": "minimal"}
    assert request["top_logprobs"] == 2
    for key in ("reasoning", "include"):
        options = ProviderOptions(think=True, extra={key: {}})
        with pytest.raises(ConfigError, match=f"may not set {key!r}.*from think"):
            body([Message.user("Hi")], options=options)


@pytest.mark.parametrize("key", sorted(RESERVED_KEYS))
def test_extra_may_not_set_owned_keys(key: str) -> None:
    with pytest.raises(ConfigError, match=repr(key)):
        body([Message.user("Hi")], options=ProviderOptions(extra={key: "x"}))


def test_stop_sequences_are_refused_not_dropped() -> None:
    with pytest.raises(ConfigError, match="stop"):
        body([Message.user("Hi")], options=ProviderOptions(stop=["END"]))


def test_a_model_is_required() -> None:
    with pytest.raises(ConfigError, match="model"):
        encode_request([Message.user("Hi")], model="")


def test_the_body_is_strict_json() -> None:
    call = ToolCall("c", "get_weather", {"city": "Zürich"})
    history = [Message.user("Hi", images=[PNG]), Message.assistant(calls=[call])]
    history.append(Message.tool("c", "get_weather", "ok"))
    request = body(history, tools=[WEATHER], options=ProviderOptions(think=True, max_tokens=9))
    assert loads(dumps(request)) == request


# --------------------------------------------------------------------------- reader: events


def test_a_text_delta_is_returned_as_its_text() -> None:
    reader = OpenAIResponsesReader()
    extra = {
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "logprobs": [],
        "obfuscation": "x",
    }
    assert (
        reader.read(event("response.output_text.delta", delta="Hé", sequence_number=4, **extra))
        == "Hé"
    )


def test_a_refusal_is_content() -> None:
    assert OpenAIResponsesReader().read(event("response.refusal.delta", delta="No.")) == "No."


def test_the_type_in_the_data_wins_and_the_event_name_is_the_fallback() -> None:
    reader = OpenAIResponsesReader()
    named = SSEEvent(data='{"delta": "hi"}', event="response.output_text.delta")
    assert reader.read(named) == "hi"
    mislabelled = SSEEvent(
        data='{"type": "response.output_text.delta", "delta": "x"}', event="message"
    )
    assert reader.read(mislabelled) == "x"


@pytest.mark.parametrize(
    "kind", ["response.reasoning_summary_text.delta", "response.reasoning_text.delta"]
)
def test_reasoning_deltas_are_thinking(kind: str) -> None:
    increment = OpenAIResponsesReader().read(event(kind, output_index=0, delta="Hmm"))
    assert increment == Increment(thinking="Hmm")


def test_a_new_summary_part_starts_with_a_blank_line() -> None:
    reader = OpenAIResponsesReader()
    kind = "response.reasoning_summary_text.delta"
    pieces = [
        reader.read(event(kind, output_index=0, summary_index=0, delta="A")),
        reader.read(event(kind, output_index=0, summary_index=0, delta="b")),
        reader.read(event(kind, output_index=0, summary_index=0, delta="")),
        reader.read(event(kind, output_index=0, summary_index=1, delta="C")),
        reader.read(event(kind, output_index=2, summary_index=0, delta="D")),
    ]
    assert [getattr(piece, "thinking", None) for piece in pieces] == [
        "A",
        "b",
        "",
        "\n\nC",
        "\n\nD",
    ]


def test_a_function_call_starts_at_its_output_index_and_takes_argument_deltas() -> None:
    reader = OpenAIResponsesReader()
    item = {
        "id": "fc_1",
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": "call_1",
        "name": "f",
    }
    started = reader.read(event("response.output_item.added", output_index=3, item=item))
    piece = reader.read(
        event(
            "response.function_call_arguments.delta",
            item_id="fc_1",
            output_index=3,
            delta='{"a"',
            obfuscation="q",
        )
    )
    assert started == Increment(calls=(CallFragment(3, id="call_1", name="f"),))
    assert piece == Increment(calls=(CallFragment(3, arguments='{"a"'),))
    # The whole arguments again, once the pieces came: nothing more.
    done = {**item, "status": "completed", "arguments": '{"a":1}'}
    assert (
        reader.read(
            event("response.function_call_arguments.done", output_index=3, arguments='{"a":1}')
        )
        == Increment()
    )
    assert reader.read(event("response.output_item.done", output_index=3, item=done)) == Increment()


def test_a_call_whose_pieces_never_came_takes_the_whole_arguments_once() -> None:
    reader = OpenAIResponsesReader()
    item = {"type": "function_call", "arguments": "", "call_id": "c", "name": "f"}
    assembler = StreamAssembler(mint_id=no_mint)
    assembler.add(reader.read(event("response.output_item.added", output_index=0, item=item)))
    assembler.add(
        reader.read(
            event("response.function_call_arguments.done", output_index=0, arguments='{"x":1}')
        )
    )
    done = {**item, "arguments": '{"x":1}'}
    assembler.add(reader.read(event("response.output_item.done", output_index=0, item=done)))
    assembler.add(reader.read(event("response.completed", response={})))
    assert assembler.result().calls == (ToolCall("c", "f", {"x": 1}),)


def test_a_call_seen_only_when_done_is_taken_whole() -> None:
    reader = OpenAIResponsesReader()
    item = {"type": "function_call", "arguments": '{"x":2}', "call_id": "c9", "name": "g"}
    increment = reader.read(event("response.output_item.done", output_index=1, item=item))
    assert increment == Increment(calls=(CallFragment(1, id="c9", name="g", arguments='{"x":2}'),))
    final = reader.read(event("response.completed", response={}))
    assert isinstance(final, Increment)
    assert final.finish is FinishReason.TOOL_CALLS


def test_completed_reports_usage_and_a_terminal_stop() -> None:
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 64},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 20},
        "total_tokens": 130,
    }
    increment = OpenAIResponsesReader().read(
        event("response.completed", response={"status": "completed", "usage": usage})
    )
    assert increment == Increment(
        usage=Usage(prompt=100, completion=30, total=130, cached=64, reasoning=20),
        finish=FinishReason.STOP,
        terminal=True,
        final=True,
    )


@pytest.mark.parametrize("usage", [None, {}, {"input_tokens_details": {"cached_tokens": 3}}])
def test_usage_without_any_count_is_unknown(usage: dict[str, Any] | None) -> None:
    increment = OpenAIResponsesReader().read(event("response.completed", response={"usage": usage}))
    assert isinstance(increment, Increment)
    assert increment.usage is None
    assert increment.terminal


def test_reported_counts_are_sanitised() -> None:
    usage = {
        "input_tokens": -4,
        "output_tokens": 5.0,
        "input_tokens_details": {"cached_tokens": 99},
    }
    increment = OpenAIResponsesReader().read(event("response.completed", response={"usage": usage}))
    assert isinstance(increment, Increment)
    assert increment.usage == Usage(prompt=0, completion=5, cached=0)


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("max_output_tokens", FinishReason.LENGTH),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("something_new", FinishReason.OTHER),
        (None, FinishReason.OTHER),
    ],
)
def test_incomplete_is_terminal_with_its_reason(reason: str | None, finish: FinishReason) -> None:
    response = {
        "status": "incomplete",
        "incomplete_details": {"reason": reason},
        "usage": {"input_tokens": 2, "output_tokens": 1},
    }
    increment = OpenAIResponsesReader().read(event("response.incomplete", response=response))
    assert increment == Increment(usage=Usage(2, 1), finish=finish, terminal=True, final=True)


def test_a_reasoning_item_with_encrypted_content_is_kept_in_order() -> None:
    reader = OpenAIResponsesReader()
    later: dict[str, Any] = {
        "id": "rs_2",
        "type": "reasoning",
        "summary": [],
        "encrypted_content": "E2",
        "status": None,
    }
    first = {**STORED, "summary": [*STORED["summary"], {"type": "other", "x": 1}], "extra": True}
    reader.read(event("response.output_item.done", output_index=4, item=later))
    increment = reader.read(event("response.output_item.done", output_index=0, item=first))
    assert isinstance(increment, Increment)
    assert increment.continuation == {
        NAMESPACE: {
            "reasoning": [
                STORED,
                {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "E2"},
            ]
        }
    }


def test_a_reasoning_item_without_encrypted_content_is_not_kept() -> None:
    item = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "x"}]}
    assert (
        OpenAIResponsesReader().read(event("response.output_item.done", output_index=0, item=item))
        == Increment()
    )


@pytest.mark.parametrize(
    "kind",
    [
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.reasoning_summary_part.added",
        "response.web_search_call.searching",
        "response.something_from_the_future",
    ],
)
def test_other_events_contribute_nothing(kind: str) -> None:
    assert (
        OpenAIResponsesReader().read(event(kind, output_index=0, anything={"x": [1]}))
        == Increment()
    )


def test_output_items_of_other_types_contribute_nothing() -> None:
    reader = OpenAIResponsesReader()
    for item in (
        {"type": "message", "role": "assistant", "content": []},
        {"type": "web_search_call", "id": "ws"},
    ):
        assert (
            reader.read(event("response.output_item.added", output_index=0, item=item))
            == Increment()
        )
        assert (
            reader.read(event("response.output_item.done", output_index=0, item=item))
            == Increment()
        )


# --------------------------------------------------------------------------- reader: errors


@pytest.mark.parametrize(
    ("vendor_code", "message", "code", "retryable"),
    [
        ("server_error", "The model failed.", "server_error", True),
        ("rate_limit_exceeded", "Slow down.", "rate_limit", True),
        (
            "context_length_exceeded",
            "Your input exceeds the context window.",
            "context_overflow",
            False,
        ),
        ("invalid_prompt", "Your prompt was flagged.", "provider_error", False),
        (None, "This model's maximum context length is 8192 tokens.", "context_overflow", False),
    ],
)
def test_a_failed_response_raises_with_the_vendor_code(
    vendor_code: str | None, message: str, code: str, retryable: bool
) -> None:
    failed = event(
        "response.failed",
        response={"status": "failed", "error": {"code": vendor_code, "message": message}},
    )
    with pytest.raises(ProviderError) as caught:
        OpenAIResponsesReader().read(failed)
    assert (caught.value.code, caught.value.retryable) == (code, retryable)
    assert caught.value.vendor_code == vendor_code
    assert message in caught.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {"code": "rate_limit_exceeded", "message": "Rate limit reached.", "param": None},
        {
            "error": {
                "type": "tokens",
                "code": "rate_limit_exceeded",
                "message": "Rate limit reached.",
            }
        },
    ],
)
def test_an_error_event_raises_flat_or_nested(fields: dict[str, Any]) -> None:
    with pytest.raises(ProviderError) as caught:
        OpenAIResponsesReader().read(event("error", sequence_number=7, **fields))
    assert caught.value.code == "rate_limit"
    assert caught.value.retryable
    assert caught.value.vendor_code == "rate_limit_exceeded"
    assert "Rate limit reached." in caught.value.message


def test_an_error_event_of_plain_text_is_a_provider_error() -> None:
    with pytest.raises(ProviderError, match="upstream overloaded") as caught:
        OpenAIResponsesReader().read(SSEEvent(data="upstream overloaded", event="error"))
    assert caught.value.code == "provider_error"


def test_an_error_message_is_bounded() -> None:
    with pytest.raises(ProviderError) as caught:
        OpenAIResponsesReader().read(event("error", code="x", message="y" * 5000))
    assert len(caught.value.excerpt) == 300
    assert caught.value.code == "provider_error"


@pytest.mark.parametrize("data", ["{not json", "", "[DONE]", '{"a": 1, "a": 2}'])
def test_malformed_json_is_a_protocol_error(data: str) -> None:
    with pytest.raises(ProtocolError):
        OpenAIResponsesReader().read(SSEEvent(data=data, event="response.output_text.delta"))


@pytest.mark.parametrize("data", ["[]", '"text"', "3", "null"])
def test_a_record_that_is_not_an_object_is_a_protocol_error(data: str) -> None:
    with pytest.raises(ProtocolError, match="object"):
        OpenAIResponsesReader().read(SSEEvent(data=data))


CALL = {"type": "function_call", "call_id": "c", "name": "f", "arguments": ""}


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("response.output_text.delta", {"delta": 3}),
        ("response.output_text.delta", {}),
        ("response.reasoning_summary_text.delta", {"delta": ["x"]}),
        ("response.reasoning_summary_text.delta", {"delta": "x", "summary_index": "0"}),
        ("response.function_call_arguments.delta", {"output_index": 0, "delta": {"a": 1}}),
        ("response.function_call_arguments.delta", {"delta": "x"}),
        ("response.function_call_arguments.delta", {"output_index": -1, "delta": "x"}),
        ("response.function_call_arguments.delta", {"output_index": True, "delta": "x"}),
        ("response.function_call_arguments.done", {"output_index": 0, "arguments": 5}),
        ("response.output_item.added", {"output_index": 0, "item": "fc"}),
        ("response.output_item.added", {"output_index": 0, "item": {**CALL, "name": 7}}),
        ("response.output_item.added", {"output_index": 0, "item": {**CALL, "call_id": 7}}),
        ("response.output_item.added", {"output_index": 0, "item": {**CALL, "arguments": {}}}),
        ("response.output_item.added", {"item": CALL}),
        (
            "response.output_item.done",
            {"output_index": 0, "item": {"type": "reasoning", "encrypted_content": 1}},
        ),
        (
            "response.output_item.done",
            {
                "output_index": 0,
                "item": {"type": "reasoning", "encrypted_content": "e", "summary": "s"},
            },
        ),
        ("response.completed", {"response": []}),
        ("response.completed", {"response": {"usage": 5}}),
        (
            "response.completed",
            {"response": {"usage": {"input_tokens": 1, "input_tokens_details": 0}}},
        ),
        ("response.incomplete", {"response": {"incomplete_details": "max_output_tokens"}}),
        ("response.incomplete", {"response": {"incomplete_details": {"reason": 1}}}),
        ("response.failed", {"response": {"error": "boom"}}),
    ],
)
def test_known_fields_of_the_wrong_shape_are_protocol_errors(
    kind: str, fields: dict[str, Any]
) -> None:
    with pytest.raises(ProtocolError, match="OpenAI Responses"):
        OpenAIResponsesReader().read(event(kind, **fields))


# --------------------------------------------------------------------------- non-streamed response


def test_a_response_body_reads_text_reasoning_calls_and_usage() -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "error": None,
        "output": [
            {
                **STORED,
                "summary": [
                    {"type": "summary_text", "text": "One."},
                    {"type": "summary_text", "text": "Two."},
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Hello", "annotations": []},
                    {"type": "refusal", "refusal": " but no."},
                ],
            },
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": ""},
            {"type": "web_search_call", "id": "ws_1"},
        ],
        "usage": {"input_tokens": 9, "output_tokens": 4, "total_tokens": 13},
    }
    result = read_response(response)
    assert result.content == "Hello but no."
    assert result.thinking == "One.\n\nTwo."
    assert result.calls == (ToolCall("c1", "f", {"a": 1}), ToolCall("c2", "g", {}))
    assert result.finish is FinishReason.TOOL_CALLS
    assert result.usage == Usage(9, 4)
    kept = {
        **STORED,
        "summary": [
            {"type": "summary_text", "text": "One."},
            {"type": "summary_text", "text": "Two."},
        ],
    }
    assert result.continuation == {NAMESPACE: {"reasoning": [kept]}}


def test_a_response_body_as_text_and_its_inline_think_tags() -> None:
    part = {"type": "output_text", "text": "<think>hm</think>Hi"}
    text = json.dumps({"status": "completed", "output": [{"type": "message", "content": [part]}]})
    assert (read_response(text).thinking, read_response(text).content) == ("hm", "Hi")
    assert read_response(text, split=False).content == "<think>hm</think>Hi"


def test_an_incomplete_response_body_has_its_finish() -> None:
    response = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [],
    }
    assert read_response(response).finish is FinishReason.LENGTH


def test_a_failed_or_error_body_raises_provider_error() -> None:
    failed = {
        "status": "failed",
        "error": {"code": "server_error", "message": "oops"},
        "output": [],
    }
    with pytest.raises(ProviderError) as caught:
        read_response(failed)
    assert (caught.value.code, caught.value.retryable) == ("server_error", True)
    with pytest.raises(ProviderError) as caught:
        read_response(
            {
                "error": {
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                    "message": "too long",
                }
            }
        )
    assert caught.value.code == "context_overflow"


@pytest.mark.parametrize(
    ("response", "match"),
    [
        ([], "object"),
        ({"output": {}}, "array"),
        ({"output": ["x"]}, "object"),
        ({"output": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "no name"),
        (
            {"output": [{"type": "function_call", "name": "f", "arguments": "[1]"}]},
            "not a JSON object",
        ),
        (
            {"output": [{"type": "message", "content": [{"type": "output_text", "text": 1}]}]},
            "string",
        ),
    ],
)
def test_a_response_body_of_the_wrong_shape(response: Any, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        read_response(response)


# --------------------------------------------------------------------------- error bodies


def test_error_details_of_the_openai_shapes() -> None:
    error = {"message": "Incorrect API key", "type": "invalid_request_error", "param": None}
    nested = json.dumps({"error": {**error, "code": "invalid_api_key"}})
    assert error_details(nested) == (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key",
    )
    flat = json.dumps(
        {
            "type": "error",
            "code": "rate_limit_exceeded",
            "message": "Slow down",
            "sequence_number": 2,
        }
    )
    assert error_details(flat) == (None, "rate_limit_exceeded", "Slow down")
    assert error_details('{"error": "text only"}') == (None, None, "text only")
    assert error_details('{"detail": "Not Found"}') == (None, None, "Not Found")
    assert error_details('{"error": {"code": 500}}') == (None, "500", '{"error": {"code": 500}}')


def test_error_details_falls_back_to_the_text_on_one_bounded_line() -> None:
    assert error_details("upstream\n  timed out") == (None, None, "upstream timed out")
    assert error_details("x" * 1000)[2] == "x" * 300


@given(st.text(max_size=400))
def test_error_details_never_raises(text: str) -> None:
    vendor_type, vendor_code, message = error_details(text)
    assert len(message) <= 300
    assert vendor_type is None or isinstance(vendor_type, str)
    assert vendor_code is None or isinstance(vendor_code, str)


# --------------------------------------------------------------------------- transcripts

TRANSCRIPTS = ["reasoning_text", "parallel_tools", "incomplete"]


def feed(chunks: list[bytes], assembler: StreamAssembler) -> list[Delta]:
    """Bytes -> SSEDecoder -> OpenAIResponsesReader -> ``assembler``; the deltas (no flush)."""
    decoder = SSEDecoder()
    reader = OpenAIResponsesReader()
    deltas: list[Delta] = []
    for piece in [*chunks, None]:
        items = decoder.close() if piece is None else decoder.feed(piece)
        for item in items:
            if isinstance(item, SSEEvent):
                deltas.extend(assembler.add(reader.read(item)))
    return deltas


def replay(chunks: list[bytes]) -> tuple[ProviderResult, list[Delta]]:
    assembler = StreamAssembler(mint_id=no_mint)
    deltas = feed(chunks, assembler)
    deltas.extend(assembler.flush())
    assert assembler.terminal
    return assembler.result(), deltas


def joined(deltas: list[Delta], channel: str) -> str:
    return "".join(delta.text for delta in deltas if delta.channel == channel)


def expected_of(name: str) -> tuple[dict[str, Any], ProviderResult]:
    data = json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8"))
    return data, from_json(ProviderResult, data)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = sorted({0, len(data), *points})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_a_transcript_replays_whole_and_byte_by_byte_to_the_expected_result(name: str) -> None:
    data = (FIXTURES / f"{name}.sse").read_bytes()
    expected_json, expected = expected_of(name)
    for chunks in ([data], [data[i : i + 1] for i in range(len(data))]):
        result, deltas = replay(chunks)
        assert result == expected
        assert to_json(result) == expected_json
        assert joined(deltas, "content") == result.content
        assert joined(deltas, "thinking") == result.thinking


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(TRANSCRIPTS),
    cuts=st.lists(st.floats(0, 1), max_size=80),
    crlf=st.booleans(),
)
def test_chunk_boundaries_never_change_the_result(name: str, cuts: list[float], crlf: bool) -> None:
    data = (FIXTURES / f"{name}.sse").read_bytes()
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    chunks = cut(data, [int(point * len(data)) for point in cuts])
    assert b"".join(chunks) == data
    result, deltas = replay(chunks)
    assert result == expected_of(name)[1]
    assert joined(deltas, "content") == result.content


@pytest.mark.parametrize("name", ["reasoning_text", "parallel_tools"])
def test_the_completed_response_object_reads_as_the_stream_does(name: str) -> None:
    blocks = (FIXTURES / f"{name}.sse").read_text(encoding="utf-8").split("\n\n")
    last = json.loads(blocks[-2].split("\ndata: ", 1)[1])
    assert last["type"] == "response.completed"
    assert read_response(last["response"]) == expected_of(name)[1]


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=10_000), max_size=40))
def test_a_failed_transcript_raises_with_what_came_before(cuts: list[int]) -> None:
    data = (FIXTURES / "failed.sse").read_bytes()
    assembler = StreamAssembler()
    with pytest.raises(ProviderError) as caught:
        feed(cut(data, [point % len(data) for point in cuts]), assembler)
    assert (caught.value.code, caught.value.retryable) == ("server_error", True)
    assert caught.value.vendor_code == "server_error"
    assert "Sorry about that!" in caught.value.message
    assert not assembler.terminal
    partial = assembler.partial()
    assert partial.content == "Once upon a"
    assert partial.finish is FinishReason.CANCELLED


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.sse")), ids=lambda p: p.stem)
def test_transcripts_are_well_formed(path: pathlib.Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n\n")
    blocks = text.split("\n\n")[:-1]
    numbers = []
    for block in blocks:
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ")
        record = json.loads(data_line.removeprefix("data: "))
        assert record["type"] == name_line.removeprefix("event: ")
        numbers.append(record["sequence_number"])
    assert numbers == list(range(len(blocks)))
    kinds = [json.loads(block.split("\ndata: ")[1])["type"] for block in blocks]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete", "response.failed")
    assert (
        "response.output_text.delta" in kinds or "response.function_call_arguments.delta" in kinds
    )


# --------------------------------------------------------------------------- model and id


def test_the_created_response_names_the_model_and_the_response_once() -> None:
    reader, assembler = OpenAIResponsesReader(), StreamAssembler()
    shell = {"id": "resp_1", "object": "response", "model": MODEL, "status": "in_progress"}
    created = reader.read(event("response.created", response=shell))
    assert created == Increment(model=MODEL, response_id="resp_1")
    assert reader.read(event("response.in_progress", response=shell)) == Increment()
    assembler.add(created)
    assembler.add(reader.read(event("response.output_text.delta", delta="Hi")))
    final = {**shell, "id": "resp_other", "status": "completed"}
    completed = reader.read(event("response.completed", response=final))
    assert (completed.model, completed.response_id) == (None, None)
    assembler.add(completed)
    assembler.flush()
    result = assembler.result()
    assert (result.content, result.model, result.response_id) == ("Hi", MODEL, "resp_1")


@pytest.mark.parametrize("kind", ["response.completed", "response.incomplete"])
def test_the_final_response_names_them_when_nothing_did_before(kind: str) -> None:
    reader = OpenAIResponsesReader()
    assert reader.read(event("response.created", response={"id": 5, "model": ""})) == Increment()
    final = reader.read(event(kind, response={"id": "resp_2", "model": MODEL}))
    assert (final.model, final.response_id, final.terminal) == (MODEL, "resp_2", True)


def test_read_response_names_the_model_and_the_response() -> None:
    whole = {"id": "resp_3", "model": MODEL, "status": "completed", "output": []}
    result = read_response(whole)
    assert (result.model, result.response_id) == (MODEL, "resp_3")
    unnamed = read_response({**whole, "id": "r" * 257, "model": None})
    assert (unnamed.model, unnamed.response_id) == (None, None)
