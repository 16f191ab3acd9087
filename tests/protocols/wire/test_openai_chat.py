"""Tests for protocols.wire.openai_chat: the request encoder, the stream reader, the response
reader and error bodies, then recorded transcripts replayed at random chunk boundaries."""

from __future__ import annotations

import base64
import json
import pathlib
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from protocols.wire.openai_chat import (
    DEFAULT_BASE_URL,
    PATH,
    RESERVED_KEYS,
    TOOL_IMAGES_LABEL,
    OpenAIChatReader,
    encode_request,
    error_details,
    read_response,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "openai_chat"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()


def no_mint() -> str:
    raise AssertionError("a transcript carries its call ids: none may be minted")


# --------------------------------------------------------------------------- constants


def test_endpoint_constants() -> None:
    assert PATH == "/chat/completions"
    assert DEFAULT_BASE_URL == "https://api.openai.com/v1"
    assert DEFAULT_BASE_URL + PATH == "https://api.openai.com/v1/chat/completions"


# --------------------------------------------------------------------------- encoder


def test_encode_minimal_streaming_request() -> None:
    body = encode_request([Message.system("Be brief."), Message.user("Hi")], model="gpt-4o-mini")
    assert body == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_encode_non_streaming_request_sends_no_stream_keys() -> None:
    body = encode_request([Message.user("Hi")], model="m", stream=False)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


def test_encode_user_images_become_parts_with_data_urls() -> None:
    body = encode_request(
        [Message.user("What is this?", images=[PNG, JPEG, "data:image/webp;base64,UklGRg=="])],
        model="m",
        stream=False,
    )
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
                {"type": "image_url", "image_url": {"url": "data:image/webp;base64,UklGRg=="}},
            ],
        }
    ]


def test_encode_image_only_user_message_has_no_text_part() -> None:
    body = encode_request([Message.user("", images=[PNG])], model="m", stream=False)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
            ],
        }
    ]


def test_encode_tool_images_follow_the_tool_messages_in_one_user_message() -> None:
    calls = [ToolCall("c1", "draw", {}), ToolCall("c2", "add", {})]
    body = encode_request(
        [
            Message.user("q"),
            Message.assistant(calls=calls),
            Message.tool("c1", "draw", "a dot", images=[PNG]),
            Message.tool("c2", "add", "3"),
        ],
        model="m",
        stream=False,
    )
    assert body["messages"][2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "a dot"},
        {"role": "tool", "tool_call_id": "c2", "content": "3"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": TOOL_IMAGES_LABEL.format(name="draw", call_id="c1")},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        },
    ]
    assert TOOL_IMAGES_LABEL.format(name="add", call_id="c1") == (
        "Images returned by tool add (call c1):"
    )


def test_encode_assistant_with_calls_and_no_text_sends_empty_content_never_null() -> None:
    calls = [
        ToolCall("call_a", "get_weather", {"city": "Zürich", "days": [1, 2]}),
        ToolCall("call_b", "ping"),
    ]
    message = Message.assistant(
        calls=calls, thinking="secret reasoning", continuation={"sig": "x"}, interrupted=True
    )
    body = encode_request([message], model="m", stream=False)
    assert body["messages"] == [
        {
            "role": "assistant",
            "content": "",  # null makes llama.cpp-based servers answer 500
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city":"Zürich","days":[1,2]}',
                    },
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "ping", "arguments": "{}"},
                },
            ],
        }
    ]


def test_encode_assistant_text_with_calls_and_plain_text() -> None:
    with_calls = Message.assistant("Checking.", calls=[ToolCall("c1", "t", {"x": 1})])
    plain = Message.assistant("Done.", thinking="hidden")
    empty = Message.assistant("")
    body = encode_request([with_calls, plain, empty], model="m", stream=False)
    assert body["messages"] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": '{"x":1}'}}
            ],
        },
        {"role": "assistant", "content": "Done."},
        {"role": "assistant", "content": ""},
    ]


def test_encode_tool_message() -> None:
    body = encode_request([Message.tool("call_a", "get_weather", "12 C")], model="m", stream=False)
    assert body["messages"] == [{"role": "tool", "tool_call_id": "call_a", "content": "12 C"}]


def test_encode_tools_omit_empty_description() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [
        ToolDefinition("get_weather", "Current weather for a city.", schema),
        ToolDefinition("ping"),
    ]
    body = encode_request([Message.user("x")], model="m", tools=tools, stream=False)
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": schema,
            },
        },
        {
            "type": "function",
            "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert "tools" not in encode_request([Message.user("x")], model="m", tools=[])


def test_encode_options() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    options = ProviderOptions(
        max_tokens=256,
        temperature=1,
        stop=["\n\n", "END"],
        tool_choice="required",
        schema=schema,
        think=True,
    )
    body = encode_request([Message.user("x")], model="m", options=options, stream=False)
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 256,
        "temperature": 1.0,
        "stop": ["\n\n", "END"],
        "reasoning_effort": "medium",
        "tool_choice": "required",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema},
        },
    }


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_encode_tool_choice_keywords_are_strings(choice: str) -> None:
    body = encode_request(
        [Message.user("x")], model="m", options=ProviderOptions(tool_choice=choice)
    )
    assert body["tool_choice"] == choice


def test_encode_tool_choice_name_is_a_function_choice() -> None:
    options = ProviderOptions(tool_choice="get_weather")
    body = encode_request([Message.user("x")], model="m", options=options)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_encode_default_options_add_nothing() -> None:
    plain = encode_request([Message.user("x")], model="m")
    assert encode_request([Message.user("x")], model="m", options=ProviderOptions()) == plain
    # think=False has no "off" every server takes: nothing is sent
    options = ProviderOptions(think=False)
    assert encode_request([Message.user("x")], model="m", options=options) == plain


def test_encode_think_asks_for_reasoning_effort_and_extra_may_not_override_it() -> None:
    body = encode_request([Message.user("x")], model="m", options=ProviderOptions(think=True))
    assert body["reasoning_effort"] == "medium"
    options = ProviderOptions(think=True, extra={"reasoning_effort": "high"})
    with pytest.raises(ConfigError, match=r"may not set 'reasoning_effort'.*from think"):
        encode_request([Message.user("x")], model="m", options=options)
    # reasoning off, the server's way: extra says what no option does
    options = ProviderOptions(extra={"reasoning_effort": "minimal"})
    body = encode_request([Message.user("x")], model="m", options=options)
    assert body["reasoning_effort"] == "minimal"


def test_encode_extra_is_merged_last() -> None:
    options = ProviderOptions(
        max_tokens=100,
        temperature=0.5,
        extra={"reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": False}},
    )
    body = encode_request([Message.user("x")], model="m", options=options, stream=False)
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 100,
        "temperature": 0.5,
        "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": False},
    }


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens", "temperature"])
def test_encode_extra_may_not_set_what_an_option_sets(key: str) -> None:
    # the token cap has two names: both are the encoder's once max_tokens is set
    options = ProviderOptions(max_tokens=100, temperature=0.5, extra={key: 1})
    with pytest.raises(ConfigError, match=f"may not set {key!r}"):
        encode_request([Message.user("x")], model="m", options=options)


@pytest.mark.parametrize("key", sorted(RESERVED_KEYS))
def test_encode_extra_may_not_override_owned_keys(key: str) -> None:
    assert {"model", "messages", "tools", "stream", "stream_options"} == RESERVED_KEYS
    options = ProviderOptions(extra={key: "x"})
    with pytest.raises(ConfigError, match=repr(key)):
        encode_request([Message.user("x")], model="m", options=options)


def test_encode_needs_a_model() -> None:
    with pytest.raises(ConfigError, match="model"):
        encode_request([Message.user("x")], model="")


def test_encoded_body_is_strict_json() -> None:
    from protocols._json import dumps, loads

    messages = [
        Message.system("s"),
        Message.user("u", images=[PNG]),
        Message.assistant(calls=[ToolCall("c", "t", {"a": [1, None]})]),
        Message.tool("c", "t", "r"),
    ]
    body = encode_request(
        messages,
        model="m",
        tools=[ToolDefinition("t")],
        options=ProviderOptions(stop=["x"], tool_choice="t"),
    )
    assert loads(dumps(body)) == body


# --------------------------------------------------------------------------- reader helpers


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
    """One chat.completion.chunk record as SSE data text."""
    record: dict[str, Any] = {
        "id": "chatcmpl-T",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    record.update(extra)
    return json.dumps(record)


def as_increment(item: Increment | str) -> Increment:
    """A reader's answer as an Increment (a plain str is shorthand for content only)."""
    return Increment(content=item) if isinstance(item, str) else item


#: A first record naming the model and the response, as :func:`chunk` does.
NAMED = json.dumps({"id": "chatcmpl-T", "object": "chat.completion.chunk", "model": "m"})


def read(*datas: str) -> list[Increment]:
    """Each record's increment from one reader, mid-stream: after a first record that named the
    model and the response, so that the increments name neither (see the tests of names)."""
    reader = OpenAIChatReader()
    assert reader.read(SSEEvent(NAMED)) == Increment(model="m", response_id="chatcmpl-T")
    return [as_increment(reader.read(SSEEvent(data))) for data in datas]


def read_one(data: str) -> Increment:
    (increment,) = read(data)
    return increment


# --------------------------------------------------------------------------- reader


@pytest.mark.parametrize("data", ["[DONE]", " [DONE]\n"])
def test_done_is_terminal(data: str) -> None:
    assert read_one(data) == Increment(terminal=True, final=True)


def test_content_delta() -> None:
    assert read_one(chunk({"content": "Hel"})) == Increment(content="Hel")


def test_records_with_nothing_useful_are_empty() -> None:
    assert read_one(chunk({"role": "assistant", "content": "", "refusal": None})) == Increment()
    assert read_one(chunk({"content": None}, usage=None)) == Increment()
    assert read_one(chunk(None)) == Increment()
    assert read_one(json.dumps({"id": "x", "object": "chat.completion.chunk"})) == Increment()
    assert read_one(json.dumps({"choices": None})) == Increment()
    assert read_one(json.dumps({"choices": []})) == Increment()
    assert read_one(json.dumps({"choices": [{"index": 0}]})) == Increment()
    assert read_one(json.dumps({"choices": [{"index": 0, "delta": None}]})) == Increment()


def test_unknown_fields_are_tolerated() -> None:
    data = chunk(
        {"content": "x", "audio": {"id": "a"}, "annotations": []},
        logprobs=None,
        x_vendor={"anything": [1, 2]},
        service_tier="default",
    )
    assert read_one(data) == Increment(content="x")


def test_only_the_first_choice_is_read() -> None:
    data = json.dumps(
        {
            "choices": [
                {"index": 1, "delta": {"content": "second"}, "finish_reason": None},
                {"index": 0, "delta": {"content": "first"}, "finish_reason": None},
            ]
        }
    )
    assert read_one(data) == Increment(content="first")
    only_other = json.dumps({"choices": [{"index": 2, "delta": {"content": "x"}}]})
    assert read_one(only_other) == Increment()
    no_index = json.dumps({"choices": [{"delta": {"content": "y"}}]})
    assert read_one(no_index) == Increment(content="y")


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_is_native_thinking(key: str) -> None:
    assert read_one(chunk({key: "hmm", "content": None})) == Increment(thinking="hmm")


def test_reasoning_sent_under_both_names_counts_once() -> None:
    data = chunk({"reasoning_content": "step", "reasoning": "step"})
    assert read_one(data) == Increment(thinking="step")
    assert read_one(chunk({"reasoning_content": "", "reasoning": "b"})) == Increment(thinking="b")


def test_content_and_reasoning_in_one_delta() -> None:
    assert read_one(chunk({"content": "a", "reasoning_content": "b"})) == Increment(
        content="a", thinking="b"
    )


def test_refusal_is_content() -> None:
    data = chunk({"content": None, "refusal": "I can't help with that."})
    assert read_one(data) == Increment(content="I can't help with that.")


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("stop", FinishReason.STOP),
        ("length", FinishReason.LENGTH),
        ("tool_calls", FinishReason.TOOL_CALLS),
        ("function_call", FinishReason.TOOL_CALLS),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("eos", FinishReason.OTHER),
        ("abort", FinishReason.OTHER),
    ],
)
def test_finish_reasons_are_normalised_and_terminal(reason: str, finish: FinishReason) -> None:
    assert read_one(chunk({}, reason)) == Increment(finish=finish, terminal=True)


def test_null_or_empty_finish_reason_is_not_terminal() -> None:
    assert read_one(chunk({"content": "x"}, None)) == Increment(content="x")
    assert read_one(chunk({"content": "x"}, "")) == Increment(content="x")


def test_finish_with_content_in_the_same_record() -> None:
    assert read_one(chunk({"content": "."}, "length")) == Increment(
        content=".", finish=FinishReason.LENGTH, terminal=True
    )


def test_usage_in_a_final_chunk_without_choices() -> None:
    data = json.dumps(
        {
            "id": "chatcmpl-T",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": 20,
                "completion_tokens": 7,
                "total_tokens": 27,
                "prompt_tokens_details": {"cached_tokens": 16, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        }
    )
    assert read_one(data) == Increment(usage=Usage(20, 7, 27, cached=16, reasoning=0))


def test_usage_with_the_finish() -> None:
    data = chunk({}, "stop", usage={"prompt_tokens": 3, "completion_tokens": 2})
    assert read_one(data) == Increment(
        usage=Usage(3, 2, 5), finish=FinishReason.STOP, terminal=True
    )


def test_usage_variants_are_sanitised() -> None:
    no_details = {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": None}
    assert read_one(json.dumps({"usage": no_details})) == Increment(usage=Usage(5, 1, 6))
    deepseek = {"prompt_tokens": 9, "completion_tokens": 1, "prompt_cache_hit_tokens": 4}
    assert read_one(json.dumps({"usage": deepseek})).usage == Usage(9, 1, 10, cached=4)
    garbage = {"prompt_tokens": -3, "completion_tokens": "7", "total_tokens": 1, "x": 1}
    usage = read_one(json.dumps({"usage": garbage})).usage
    assert usage is not None
    assert usage.total >= usage.prompt + usage.completion
    too_cached = {"prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 99}}
    assert read_one(json.dumps({"usage": too_cached})).usage == Usage(2, 0, 2, cached=2)


def test_usage_without_any_count_is_unknown_not_zero() -> None:
    for usage in ({}, {"prompt_tokens": None, "completion_tokens": None}, {"x": 1}):
        assert read_one(json.dumps({"choices": [], "usage": usage})) == Increment()
    assert read_one(chunk({}, "stop", usage={})).usage is None
    # a stream that never reports usage assembles to usage None
    assembler, reader = StreamAssembler(), OpenAIChatReader()
    for data in (chunk({"content": "hi"}), chunk({}, "stop"), "[DONE]"):
        assembler.add(reader.read(SSEEvent(data=data)))
    assert assembler.result().usage is None
    assert assembler.partial().usage is None


def test_tool_call_fragments() -> None:
    first, later = read(
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ],
            }
        ),
        chunk({"tool_calls": [{"index": 0, "id": None, "function": {"arguments": '{"ci'}}]}),
    )
    assert first == Increment(calls=(CallFragment(0, "call_1", "get_weather", ""),))
    assert later == Increment(calls=(CallFragment(0, None, None, '{"ci'),))


def test_tool_call_arguments_sent_as_an_object_are_written_out() -> None:
    data = chunk(
        {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "t", "arguments": {"a": 1}}}]}
    )
    assert read_one(data) == Increment(calls=(CallFragment(0, "c", "t", '{"a":1}'),))


def test_calls_numbered_zero_with_distinct_ids_stay_apart() -> None:
    # Some servers give every call index 0; a new id at a taken index is a new call.
    reader = OpenAIChatReader()
    assembler = StreamAssembler(mint_id=no_mint)
    for call_id, name, args in (("a", "one", '{"n":1}'), ("b", "two", '{"n":2}')):
        item = {"index": 0, "id": call_id, "function": {"name": name, "arguments": args}}
        assembler.add(reader.read(SSEEvent(chunk({"tool_calls": [item]}))))
    assert assembler.result().calls == (
        ToolCall("a", "one", {"n": 1}),
        ToolCall("b", "two", {"n": 2}),
    )


def test_a_known_id_at_a_new_index_joins_its_call() -> None:
    first, again = read(
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "t"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "a", "function": {"arguments": "{}"}}]}),
    )
    assert first.calls[0].index == again.calls[0].index == 0


def test_calls_without_index_follow_ids_then_the_previous_call() -> None:
    reader = OpenAIChatReader()
    fragments = [
        {"id": "a", "function": {"name": "one", "arguments": '{"x":'}},
        {"function": {"arguments": "1}"}},
        {"id": "b", "function": {"name": "two", "arguments": "{}"}},
        {"id": "a", "function": {"arguments": ""}},
    ]
    increments = [reader.read(SSEEvent(chunk({"tool_calls": [f]}))) for f in fragments]
    assert [inc.calls[0].index for inc in increments] == [0, 0, 1, 0]
    assembler = StreamAssembler(mint_id=no_mint)
    for increment in increments:
        assembler.add(increment)
    assert assembler.result().calls == (ToolCall("a", "one", {"x": 1}), ToolCall("b", "two"))


def test_parallel_interleaved_calls_with_late_ids_and_names() -> None:
    """Two calls interleaved by index; the second's id and name arrive after its arguments."""

    def calls(*items: dict[str, Any]) -> str:
        return chunk({"tool_calls": list(items)})

    reader = OpenAIChatReader()
    assembler = StreamAssembler(mint_id=no_mint)
    records = [
        calls({"index": 0, "id": "call_A", "function": {"name": "search", "arguments": ""}}),
        calls({"index": 1, "function": {"arguments": '{"tz"'}}),
        calls(
            {"index": 0, "function": {"arguments": '{"q": "tr'}},
            {"index": 1, "id": "call_B", "function": {"name": None, "arguments": ': "UTC"'}},
        ),
        calls({"index": 1, "id": None, "function": {"name": "clock", "arguments": "}"}}),
        calls({"index": 0, "id": "call_A", "function": {"name": "search", "arguments": 'io"}'}}),
        chunk({}, "tool_calls"),
        json.dumps({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 30}}),
        "[DONE]",
    ]
    deltas: list[Delta] = []
    for data in records:
        deltas.extend(assembler.add(reader.read(SSEEvent(data))))
    deltas.extend(assembler.flush())
    assert deltas == []
    assert assembler.terminal
    assert assembler.result() == ProviderResult(
        calls=[
            ToolCall("call_A", "search", {"q": "trio"}),
            ToolCall("call_B", "clock", {"tz": "UTC"}),
        ],
        usage=Usage(40, 30),
        finish=FinishReason.TOOL_CALLS,
        model="m",
        response_id="chatcmpl-T",
    )


def test_error_record_raises_provider_error() -> None:
    record = {
        "error": {
            "message": "The server had an error while processing your request.",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        },
        "padding": "z" * 5000,
    }
    with pytest.raises(ProviderError) as caught:
        read_one(json.dumps(record))
    error = caught.value
    assert error.vendor_type == "server_error"
    assert error.vendor_code == "internal_error"
    assert "The server had an error while processing your request." in error.message
    assert "zzz" not in error.message
    assert "zzz" not in error.excerpt


def test_error_record_message_is_bounded_and_codes_are_text() -> None:
    record = {"error": {"message": "x" * 10_000, "type": None, "code": 503}}
    with pytest.raises(ProviderError) as caught:
        read_one(json.dumps(record))
    assert caught.value.vendor_type is None
    assert caught.value.vendor_code == "503"
    assert len(caught.value.message) < 400
    assert len(caught.value.excerpt) <= 300


def test_flat_and_string_error_records() -> None:
    flat = {"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}
    with pytest.raises(ProviderError) as caught:
        read_one(json.dumps(flat))
    assert (caught.value.vendor_type, caught.value.vendor_code) == ("BadRequestError", "400")
    with pytest.raises(ProviderError, match="overloaded"):
        read_one(json.dumps({"error": "overloaded"}))


def test_error_event_with_text_data() -> None:
    with pytest.raises(ProviderError, match="upstream timed out"):
        OpenAIChatReader().read(SSEEvent("upstream timed out", event="error"))


def test_null_error_field_is_not_an_error() -> None:
    assert read_one(chunk({"content": "x"}, error=None)) == Increment(content="x")


@pytest.mark.parametrize("data", ['{"choices": [', "not json", "", '{"a": 1, "a": 2}', "NaN"])
def test_malformed_json_is_a_protocol_error(data: str) -> None:
    with pytest.raises(ProtocolError, match="invalid JSON"):
        read_one(data)


@pytest.mark.parametrize("data", ["[1, 2]", '"text"', "42", "null", "true"])
def test_a_record_that_is_not_an_object_is_a_protocol_error(data: str) -> None:
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        read_one(data)


@pytest.mark.parametrize(
    ("record", "where"),
    [
        ({"choices": {"index": 0}}, "record.choices"),
        ({"choices": ["x"]}, "choices items"),
        ({"choices": [{"delta": []}]}, "choice.delta"),
        ({"choices": [{"delta": {"content": 5}}]}, "delta.content"),
        ({"choices": [{"delta": {"reasoning_content": ["a"]}}]}, "delta.reasoning_content"),
        ({"choices": [{"delta": {"tool_calls": {}}}]}, "delta.tool_calls"),
        ({"choices": [{"delta": {"tool_calls": [1]}}]}, "tool_calls items"),
        ({"choices": [{"delta": {"tool_calls": [{"index": "0"}]}}]}, "tool call.index"),
        ({"choices": [{"delta": {"tool_calls": [{"index": True}]}}]}, "tool call.index"),
        ({"choices": [{"delta": {"tool_calls": [{"index": -1}]}}]}, "index must be >= 0"),
        ({"choices": [{"delta": {"tool_calls": [{"id": 7}]}}]}, "tool call.id"),
        ({"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]}, "tool call.function"),
        (
            {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": 1}}]}}]},
            "function.arguments",
        ),
        ({"choices": [{"finish_reason": 1}]}, "choice.finish_reason"),
        ({"usage": [1]}, "record.usage"),
    ],
)
def test_known_fields_of_the_wrong_shape_are_protocol_errors(
    record: dict[str, Any], where: str
) -> None:
    with pytest.raises(ProtocolError, match=where.replace(".", r"\.")):
        read_one(json.dumps(record))


# --------------------------------------------------------------------------- model and id


def test_the_first_record_names_the_model_and_the_response_once() -> None:
    reader = OpenAIChatReader()
    first = reader.read(SSEEvent(chunk({"role": "assistant", "content": ""})))
    assert first == Increment(model="m", response_id="chatcmpl-T")
    # Every chunk repeats them: reported once (a different value later changes nothing).
    later = chunk({"content": "x"}, "stop", id="chatcmpl-U", model="n")
    assert reader.read(SSEEvent(later)) == Increment(
        content="x", finish=FinishReason.STOP, terminal=True
    )


def test_a_name_missing_from_the_first_record_is_taken_from_a_later_one() -> None:
    reader = OpenAIChatReader()
    # A plain text record on the fast path that names only the model.
    plain = json.dumps({"model": "m", "choices": [{"index": 0, "delta": {"content": "Hi"}}]})
    assert reader.read(SSEEvent(plain)) == Increment(content="Hi", model="m")
    usage = json.dumps(
        {"id": "chatcmpl-9", "model": "m", "choices": [], "usage": {"total_tokens": 3}}
    )
    assert reader.read(SSEEvent(usage)) == Increment(usage=Usage(total=3), response_id="chatcmpl-9")


@pytest.mark.parametrize("bad", [7, "", "x" * 257, ["chatcmpl-1"], True])
def test_a_model_or_id_that_cannot_be_one_is_ignored_not_an_error(bad: Any) -> None:
    reader = OpenAIChatReader()
    named = reader.read(SSEEvent(chunk({"content": "a"}, id=bad, model=bad)))
    assert as_increment(named) == Increment(content="a")
    # Still looked for: the next record that has acceptable ones names them.
    assert reader.read(SSEEvent(chunk({"content": "b"}))) == Increment(
        content="b", model="m", response_id="chatcmpl-T"
    )
    body = response({"content": "x"}, id=bad, model=bad)
    assert (read_response(body).model, read_response(body).response_id) == (None, None)


def test_a_stream_through_the_assembler_names_its_model_and_response() -> None:
    reader, assembler = OpenAIChatReader(), StreamAssembler()
    for data in [
        chunk({"role": "assistant", "content": "Hel"}),
        chunk({"content": "lo"}, id="chatcmpl-other"),
        chunk({}, "stop"),
        "[DONE]",
    ]:
        assembler.add(reader.read(SSEEvent(data)))
    assembler.flush()
    result = assembler.result()
    assert (result.content, result.model, result.response_id) == ("Hello", "m", "chatcmpl-T")


# --------------------------------------------------------------------------- read_response


def response(message: dict[str, Any], finish: str | None = "stop", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-R",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    body.update(extra)
    return body


def test_response_text_and_usage() -> None:
    body = response(
        {"role": "assistant", "content": "Hello!", "refusal": None},
        usage={
            "prompt_tokens": 9,
            "completion_tokens": 2,
            "total_tokens": 11,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        system_fingerprint="fp_x",
    )
    assert read_response(body) == ProviderResult(
        content="Hello!",
        usage=Usage(9, 2, 11, cached=0),
        finish=FinishReason.STOP,
        model="m",
        response_id="chatcmpl-R",
    )


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_response_reasoning(key: str) -> None:
    body = response({"role": "assistant", "content": "4", key: "2+2"}, "length")
    assert read_response(body) == ProviderResult(
        content="4", thinking="2+2", finish=FinishReason.LENGTH, model="m", response_id="chatcmpl-R"
    )


def test_response_tool_calls() -> None:
    body = response(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
                {"type": "function", "function": {"name": "ping", "arguments": ""}},
            ],
        },
        "tool_calls",
    )
    result = read_response(body)
    assert result.finish is FinishReason.TOOL_CALLS
    assert result.calls[0] == ToolCall("call_1", "get_weather", {"city": "Oslo"})
    minted = result.calls[1]
    assert (minted.name, minted.arguments) == ("ping", {})
    assert len(minted.id) == 32
    assert int(minted.id, 16) >= 0


def test_response_finish_defaults() -> None:
    with_call = response(
        {
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "t", "arguments": "{}"}}],
        },
        None,
    )
    assert read_response(with_call).finish is FinishReason.TOOL_CALLS
    assert read_response(response({"content": "x"}, None)).finish is FinishReason.STOP
    assert read_response(response({"content": "x"}, "weird")).finish is FinishReason.OTHER


def test_response_inline_think_is_split_unless_asked_not_to() -> None:
    body = response({"content": "<think>plan</think>answer"})
    assert read_response(body) == ProviderResult(
        content="answer", thinking="plan", model="m", response_id="chatcmpl-R"
    )
    assert read_response(body, split=False).content == "<think>plan</think>answer"


def test_response_refusal_is_content() -> None:
    assert read_response(response({"content": None, "refusal": "No."})).content == "No."


@pytest.mark.parametrize(
    ("calls", "match"),
    [
        ([{"id": "c", "function": {"name": "t", "arguments": "{bad"}}], "malformed arguments"),
        ([{"id": "c", "function": {"name": "t", "arguments": "[1]"}}], "not a JSON object"),
        ([{"id": "c", "function": {"arguments": "{}"}}], "no name"),
        (
            [
                {"id": "c", "function": {"name": "t", "arguments": "{}"}},
                {"id": "c", "function": {"name": "u", "arguments": "{}"}},
            ],
            "share the id",
        ),
        (["call"], "tool_calls items"),
        ({"id": "c"}, "message.tool_calls"),
    ],
)
def test_response_malformed_calls_are_protocol_errors(calls: Any, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        read_response(response({"content": None, "tool_calls": calls}))


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([], "must be a JSON object"),
        ("text", "must be a JSON object"),
        ({"id": "x"}, "no choice"),
        ({"choices": []}, "no choice"),
        ({"choices": [{"index": 0, "message": "hi"}]}, "choice.message"),
        (response({"content": 3}), "message.content"),
    ],
)
def test_response_of_the_wrong_shape(body: Any, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        read_response(body)


def test_response_error_body_raises_provider_error() -> None:
    body = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}}
    with pytest.raises(ProviderError, match="Rate limit reached") as caught:
        read_response(body)
    assert (caught.value.vendor_type, caught.value.vendor_code) == ("requests", "rate_limit")


# --------------------------------------------------------------------------- error_details


def test_error_details_openai_shape() -> None:
    body = json.dumps(
        {
            "error": {
                "message": "Incorrect API key provided.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
    )
    assert error_details(body) == (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided.",
    )


def test_error_details_other_shapes() -> None:
    assert error_details('{"error": {"message": "m", "code": 429}}') == (None, "429", "m")
    assert error_details('{"error": "model not found"}') == (None, None, "model not found")
    flat = '{"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}'
    assert error_details(flat) == ("BadRequestError", "400", "too long")
    assert error_details('{"detail": "Not Found"}') == (None, None, "Not Found")


def test_error_details_falls_back_to_the_text() -> None:
    assert error_details("  <html>502 Bad Gateway</html>\n") == (
        None,
        None,
        "<html>502 Bad Gateway</html>",
    )
    truncated = '{"error": {"message": "' + "y" * 1000
    assert error_details(truncated) == (None, None, truncated[:300])
    no_message = '{"error": {"type": "server_error"}}'
    assert error_details(no_message) == ("server_error", None, no_message)
    assert error_details('{"other": 1}') == (None, None, '{"other": 1}')
    assert error_details("[1]") == (None, None, "[1]")
    assert error_details("") == (None, None, "")


@given(st.text(max_size=400))
def test_error_details_never_raises(text: str) -> None:
    vendor_type, vendor_code, message = error_details(text)
    assert vendor_type is None or isinstance(vendor_type, str)
    assert vendor_code is None or isinstance(vendor_code, str)
    assert len(message) <= 300


# --------------------------------------------------------------------------- transcripts

#: Transcripts replayed to a result, and whether the think splitter reclassifies (qwen3 style).
TRANSCRIPTS = {
    "text": False,
    "reasoning": False,
    "parallel_tools": False,
    "think_tags": False,
    "think_close_only": True,
    "no_usage": False,  # llama-cpp-python's shape: no usage record at all
}


def splits(data: bytes, seed: int, count: int = 50) -> list[list[bytes]]:
    """Whole, byte by byte, and ``count`` random chunkings of ``data``."""
    rng = random.Random(seed)
    out = [[data], [data[i : i + 1] for i in range(len(data))]]
    for _ in range(count):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, min(60, len(data) - 1))))
        out.append([data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)])
    return out


def feed(chunks: list[bytes], assembler: StreamAssembler) -> list[Delta]:
    """Bytes -> SSEDecoder -> OpenAIChatReader -> ``assembler``; return the deltas (no flush)."""
    decoder = SSEDecoder()
    reader = OpenAIChatReader()
    deltas: list[Delta] = []

    def take(items: list[Any]) -> None:
        for item in items:
            if isinstance(item, SSEEvent):
                deltas.extend(assembler.add(reader.read(item)))

    for piece in chunks:
        take(decoder.feed(piece))
    take(decoder.close())
    return deltas


def replay(chunks: list[bytes]) -> tuple[StreamAssembler, list[Delta]]:
    assembler = StreamAssembler(mint_id=no_mint)
    deltas = feed(chunks, assembler)
    deltas.extend(assembler.flush())
    return assembler, deltas


def joined(deltas: list[Delta], channel: str) -> str:
    return "".join(delta.text for delta in deltas if delta.channel == channel)


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_transcript_replays_to_the_expected_result(name: str) -> None:
    data = (FIXTURES / f"{name}.sse").read_bytes()
    expected_json = json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8"))
    expected = from_json(ProviderResult, expected_json)
    reclassified = TRANSCRIPTS[name]
    seed = sum(name.encode())
    for chunks in splits(data, seed):
        assembler, deltas = replay(chunks)
        assert assembler.terminal
        result = assembler.result()
        assert to_json(result) == expected_json
        assert result == expected
        if not reclassified:
            assert joined(deltas, "content") == result.content
            assert joined(deltas, "thinking") == result.thinking


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_transcript_with_crlf_line_ends_gives_the_same_result(name: str) -> None:
    data = (FIXTURES / f"{name}.sse").read_bytes().replace(b"\n", b"\r\n")
    expected = from_json(
        ProviderResult,
        json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8")),
    )
    for chunks in splits(data, 7, count=10):
        assembler, _ = replay(chunks)
        assert assembler.result() == expected


def test_qwen_transcript_reclassifies_leading_text_as_thinking() -> None:
    assembler, deltas = replay([(FIXTURES / "think_close_only.sse").read_bytes()])
    result = assembler.result()
    assert result.thinking.startswith("Okay, a greeting.")
    assert "</think>" not in result.content
    assert "</think>" not in result.thinking
    # the live deltas over-report content in this one case: the result is authoritative
    assert joined(deltas, "content").endswith(result.content)


def test_error_transcript_raises_with_what_came_before() -> None:
    data = (FIXTURES / "error.sse").read_bytes()
    for chunks in splits(data, 11, count=20):
        assembler = StreamAssembler()
        with pytest.raises(ProviderError) as caught:
            feed(chunks, assembler)
        assert caught.value.vendor_type == "server_error"
        assert caught.value.vendor_code is None
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
    datas = [block for block in blocks if not block.startswith(":")]
    assert all(block.startswith("data: ") and "\n" not in block for block in datas)
    if path.stem == "error":
        assert "[DONE]" not in text
        assert "error" in json.loads(datas[-1][6:])
        datas = datas[:-1]
    else:
        assert datas[-1] == "data: [DONE]"
        assert (FIXTURES / f"{path.stem}.expected.json").exists()
        datas = datas[:-1]
    for block in datas:
        record = json.loads(block[6:])
        assert record["object"] == "chat.completion.chunk"
        assert record["id"]


def test_object_arguments_that_are_not_strict_json_are_a_protocol_error() -> None:
    # A parsed body handed to read_response can hold what strict JSON text never could.
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1e999}}}
    body = {"choices": [{"index": 0, "message": {"tool_calls": [call]}, "finish_reason": "stop"}]}
    with pytest.raises(ProtocolError, match="not strict JSON"):
        read_response(body)


# --------------------------------------------------------------------------- the fast path


def test_a_plain_text_record_is_read_as_its_text() -> None:
    reader = OpenAIChatReader()
    # The first record also names the model and the response; once both are known, plain text.
    named = Increment(content="Hel", model="m", response_id="chatcmpl-T")
    assert reader.read(SSEEvent(chunk({"content": "Hel"}))) == named
    assert reader.read(SSEEvent(chunk({"role": "assistant", "content": "lo"}))) == "lo"
    assert reader.read(SSEEvent(chunk({"content": "!"}, id="chatcmpl-U", model="n"))) == "!"
    # Anything more than plain text takes the general path and gives an Increment.
    assert isinstance(reader.read(SSEEvent(chunk({"content": "x"}, "stop"))), Increment)
    assert isinstance(reader.read(SSEEvent(chunk({"content": ""}))), Increment)


@pytest.mark.parametrize(
    "data",
    [
        # Duplicate keys hidden in every object of a plain record: strictness is kept.
        '{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}',
        '{"choices":[{"index":0,"index":0,"delta":{"content":"a"}}]}',
        '{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[]}',
        # ... also when a string's colons or whitespace could balance the colon count.
        '{"model":"x:y","choices":[{"delta":{"content":"a","content" :"b"}}]}',
        '{"model" :"m","model":"n","choices":[{"delta":{"content":"a:b"}}]}',
        # An escaped colon (\u003a) cannot stand in for a missing key either.
        '{"a":1,"a":2,"choices":[{"delta":{"content":"\\u003a"}}]}',
    ],
)
def test_duplicate_keys_are_refused_on_the_fast_path_too(data: str) -> None:
    with pytest.raises(ProtocolError, match="duplicate object key"):
        OpenAIChatReader().read(SSEEvent(data))


_KEYS = st.sampled_from(["content", "role", "index", "model", "id", "a:b", "usage", "error"])
_SCALARS = st.one_of(
    st.none(),
    st.integers(-2, 2),
    st.sampled_from(["", "x", "a:b", ":", "[", "{", "\\u003a", "caf\u00e9", "\ud800"]),
)


@st.composite
def near_plain_records(draw: st.DrawFn) -> str:
    """Records shaped like (or almost like) a plain text chunk, written with duplicate keys,
    odd spacing and colons in strings, to find any record the fast path misjudges."""

    def obj(pairs: list[tuple[str, str]]) -> str:
        space = draw(st.sampled_from(["", " "]))
        return "{" + ",".join(f"{json.dumps(k)}{space}:{v}" for k, v in pairs) + "}"

    def scalar() -> str:
        return json.dumps(draw(_SCALARS))

    delta = [("content", json.dumps(draw(st.sampled_from(["hi", "a:b", "", "x"]))))]
    delta_keys = st.sampled_from(["role", "refusal", "reasoning_content", "reasoning", "content"])
    delta += [(draw(delta_keys), scalar()) for _ in range(draw(st.integers(0, 2)))]
    choice = [("delta", obj(delta))]
    choice += [(draw(st.sampled_from(["index", "finish_reason", "logprobs"])), scalar())]
    choices = "[" + obj(choice) + "]"
    record = [("choices", choices)]
    record += [(draw(_KEYS), scalar()) for _ in range(draw(st.integers(0, 3)))]
    return obj(draw(st.permutations(record)))


@given(near_plain_records(), st.booleans())
def test_the_fast_path_agrees_with_the_general_reader(data: str, named: bool) -> None:
    """Also on the first record, which may name the model and the response (``named``: a
    reader that knows both already)."""

    def outcome(general: bool) -> object:
        reader = OpenAIChatReader()
        if named:
            reader.read(SSEEvent(NAMED))
        try:
            return as_increment((reader._read_general if general else reader.read)(SSEEvent(data)))
        except (ProtocolError, ProviderError) as error:
            return (type(error), error.code)

    assert outcome(general=False) == outcome(general=True)


_MIDDLES = st.one_of(
    st.text().map(json.dumps),  # any valid string token, also with escapes and surrogates
    st.text().map(lambda text: json.dumps(text, ensure_ascii=False)),
    st.sampled_from(
        [
            '""',
            '"a","content":"b"',  # two tokens: a second content key smuggled in
            '"a"},"x":{"y":"z"',
            '"unterminated',
            '"a" ',
            '"\\u0000"',
            '"\\ud83d"',
            '"tab\there"',  # a raw control character: invalid in strict JSON
            "123",
            "null",
            '"x":1',
        ]
    ),
)


@st.composite
def template_streams(draw: st.DrawFn) -> list[str]:
    """A stream of text records around one content slot, some of them broken inside the slot,
    mixed with records of other shapes: the learned template must never change an outcome."""
    keys = st.sampled_from(["id", "model", "x:y", "content"])
    before = draw(st.dictionaries(keys, st.text(max_size=5)))
    after = draw(st.dictionaries(keys, st.sampled_from(["", "a", "slot"]), max_size=2))
    compact = draw(st.booleans())
    separators = (",", ":") if compact else (", ", ": ")
    marker = "\x00slot\x00"
    record = {**before, "choices": [{"index": 0, "delta": {"content": marker}}]}
    record.update((key, value) for key, value in after.items() if key not in before)
    base = json.dumps(record, separators=separators)
    prefix, suffix = base.split(json.dumps(marker))
    slot = draw(st.sampled_from(["", "a", "slot"]))  # sometimes equal to a decoy "content"
    first = prefix + json.dumps(slot) + suffix
    others = st.sampled_from(
        [chunk({"content": "other"}), chunk({"content": "x"}, "stop"), "[DONE]", chunk({})]
    )
    records = st.one_of(_MIDDLES.map(lambda middle: prefix + middle + suffix), others)
    return [first, *draw(st.lists(records, min_size=1, max_size=12))]


@given(template_streams())
def test_the_learned_template_agrees_with_the_general_reader(datas: list[str]) -> None:
    reader, general_reader = OpenAIChatReader(), OpenAIChatReader()
    for data in datas:
        try:
            fast: object = as_increment(reader.read(SSEEvent(data)))
        except (ProtocolError, ProviderError) as error:
            fast = (type(error), error.code)
        try:
            general: object = general_reader._read_general(SSEEvent(data))
        except (ProtocolError, ProviderError) as error:
            general = (type(error), error.code)
        assert fast == general, data
        if data == "[DONE]":
            break  # the end: the reader ignores whatever follows (tested on its own)


def test_a_stream_of_text_records_is_read_through_its_template() -> None:
    reader = OpenAIChatReader()
    texts = ["Hel", "lo", ' "quoted"', " caf\u00e9", " a:b"]
    read = [reader.read(SSEEvent(chunk({"content": text}))) for text in texts]
    assert read == [Increment(content="Hel", model="m", response_id="chatcmpl-T"), *texts[1:]]
    assert reader._prefix is not None
    assert reader._hits == len(texts) - 1


def test_a_decoy_content_field_never_becomes_the_template_slot() -> None:
    # The last '"content"' of the first record is a top-level decoy equal to the delta's text;
    # the probe shows the slot is not the delta's content, so no template is learned from it.
    reader = OpenAIChatReader()
    decoy = '{"choices":[{"index":0,"delta":{"content":"a"}}],"content":"%s"}'
    assert reader.read(SSEEvent(decoy % "a")) == "a"
    assert reader.read(SSEEvent(decoy % "b")) == "a"
