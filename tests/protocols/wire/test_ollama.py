"""Tests for protocols.wire.ollama: every encoder and reader rule, then recorded transcripts
replayed at random chunk boundaries through the whole sans-IO pipeline."""

from __future__ import annotations

import copy
import itertools
import json
import pathlib
import random
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols._json import dumps
from protocols.codec import to_json
from protocols.errors import ConfigError, ProtocolError, ProviderError
from protocols.messages import (
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.ndjson import NDJSONDecoder
from protocols.wire import CallFragment, Increment, StreamAssembler
from protocols.wire.ollama import (
    DEFAULT_BASE_URL,
    PATH,
    OllamaReader,
    encode_request,
    error_details,
    read_response,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "ollama"
SUCCESSFUL = ["text", "thinking", "tool_calls", "think_tags", "no_usage"]

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)


def minter() -> Callable[[], str]:
    """A deterministic id minter: call_0, call_1, ..."""
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def body(**kwargs: Any) -> dict[str, Any]:
    """encode_request for a one-message conversation."""
    kwargs.setdefault("model", "llama3.2")
    return encode_request([Message.user("hi", id="u")], **kwargs)


USER = {"role": "user", "content": "hi"}


# --------------------------------------------------------------------------- constants


def test_endpoint_constants() -> None:
    assert PATH == "/api/chat"
    assert DEFAULT_BASE_URL == "http://127.0.0.1:11434"


# --------------------------------------------------------------------------- request: messages


def test_minimal_request() -> None:
    messages = [Message.system("Be brief."), Message.user("Hello")]
    assert encode_request(messages, model="llama3.2") == {
        "model": "llama3.2",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
        ],
        "stream": True,
    }


def test_stream_false() -> None:
    assert body(stream=False) == {"model": "llama3.2", "messages": [USER], "stream": False}


def test_no_messages_is_allowed() -> None:
    assert encode_request([], model="m") == {"model": "m", "messages": [], "stream": True}


def test_user_images_are_bare_base64() -> None:
    message = Message.user(
        "What is this?",
        images=[
            PNG,
            f"data:image/png;base64,{PNG}",
            "data:image/jpeg;base64,/9j/4AAQ",
            "data:no-comma",
        ],
    )
    assert encode_request([message], model="llava")["messages"] == [
        {
            "role": "user",
            "content": "What is this?",
            "images": [PNG, PNG, "/9j/4AAQ", "data:no-comma"],
        }
    ]


def test_assistant_calls_are_sent_with_object_arguments() -> None:
    message = Message.assistant(
        "Checking.",
        calls=[
            ToolCall("c1", "get_weather", {"city": "Paris"}),
            ToolCall("c2", "get_time", {}),
        ],
    )
    assert encode_request([message], model="m")["messages"] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": {"name": "get_time", "arguments": {}}},
            ],
        }
    ]


def test_assistant_thinking_interrupted_and_continuation_are_never_sent() -> None:
    message = Message.assistant(
        "Answer.",
        thinking="secret reasoning",
        interrupted=True,
        continuation={"signature": "abc"},
    )
    assert encode_request([message], model="m")["messages"] == [
        {"role": "assistant", "content": "Answer."}
    ]


def test_tool_message_names_its_tool() -> None:
    message = Message.tool("c1", "get_weather", '{"temp": 21}')
    assert encode_request([message], model="m")["messages"] == [
        {"role": "tool", "content": '{"temp": 21}', "tool_name": "get_weather"}
    ]


def test_tool_message_images_are_bare_base64_on_the_tool_message() -> None:
    message = Message.tool("c1", "draw", "a dot", images=[PNG, "data:image/jpeg;base64,/9j/4AAQ"])
    assert encode_request([message], model="m")["messages"] == [
        {"role": "tool", "content": "a dot", "tool_name": "draw", "images": [PNG, "/9j/4AAQ"]}
    ]


def test_a_whole_tool_round_trip_conversation() -> None:
    messages = [
        Message.user("Weather in Paris?"),
        Message.assistant(calls=[ToolCall("c1", "get_weather", {"city": "Paris"})]),
        Message.tool("c1", "get_weather", "21C, sunny"),
    ]
    assert encode_request(messages, model="qwen3", tools=[WEATHER]) == {
        "model": "qwen3",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
                ],
            },
            {"role": "tool", "content": "21C, sunny", "tool_name": "get_weather"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ],
        "stream": True,
    }


# --------------------------------------------------------------------------- request: tools


def test_tools_are_openai_style() -> None:
    bare = ToolDefinition(name="now")
    assert body(tools=[WEATHER, bare])["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "now",
                "description": "",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]


def test_no_tools_means_no_tools_key() -> None:
    assert "tools" not in body(tools=[])


@pytest.mark.parametrize("choice", [None, "auto"])
def test_tool_choice_auto_sends_the_tools(choice: str | None) -> None:
    request = body(tools=[WEATHER], options=ProviderOptions(tool_choice=choice))
    assert [tool["function"]["name"] for tool in request["tools"]] == ["get_weather"]


def test_tool_choice_none_leaves_the_tools_out() -> None:
    request = body(tools=[WEATHER], options=ProviderOptions(tool_choice="none"))
    assert request == {"model": "llama3.2", "messages": [USER], "stream": True}


@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_tool_choice_ollama_cannot_honour_is_a_config_error(choice: str) -> None:
    with pytest.raises(ConfigError, match=rf"tool_choice={choice!r}.*no way to force") as info:
        body(tools=[WEATHER], options=ProviderOptions(tool_choice=choice))
    assert info.value.code == "config"


# --------------------------------------------------------------------------- request: options


def test_every_option() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    options = ProviderOptions(
        think=True, schema=schema, max_tokens=256, temperature=0.2, stop=["\n\n", "END"]
    )
    assert body(options=options) == {
        "model": "llama3.2",
        "messages": [USER],
        "stream": True,
        "think": True,
        "format": schema,
        "options": {"num_predict": 256, "temperature": 0.2, "stop": ["\n\n", "END"]},
    }


def test_think_false_is_sent() -> None:
    assert body(options=ProviderOptions(think=False))["think"] is False


def test_default_options_add_nothing() -> None:
    assert body(options=ProviderOptions()) == body()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (ProviderOptions(max_tokens=1), {"num_predict": 1}),
        (ProviderOptions(temperature=0), {"temperature": 0.0}),
        (ProviderOptions(stop=["x"]), {"stop": ["x"]}),
    ],
)
def test_each_sampling_option_alone(options: ProviderOptions, expected: dict[str, Any]) -> None:
    assert body(options=options)["options"] == expected


def test_extra_is_merged_last() -> None:
    options = ProviderOptions(think=True, extra={"keep_alive": "10m"})
    assert body(options=options) == {
        "model": "llama3.2",
        "messages": [USER],
        "stream": True,
        "think": True,
        "keep_alive": "10m",
    }
    options = ProviderOptions(think=True, extra={"think": False})
    with pytest.raises(ConfigError, match=r"may not set 'think'.*from think"):
        body(options=options)


def test_extra_options_are_merged_into_the_encoders_options() -> None:
    options = ProviderOptions(max_tokens=64, temperature=0.5, extra={"options": {"num_ctx": 8192}})
    assert body(options=options)["options"] == {
        "num_predict": 64,
        "temperature": 0.5,
        "num_ctx": 8192,
    }
    options = ProviderOptions(max_tokens=64, extra={"options": {"num_predict": 8}})
    with pytest.raises(ConfigError, match=r"may not set 'num_predict'.*from max_tokens"):
        body(options=options)
    with pytest.raises(ConfigError, match="'options' must be an object"):
        body(options=ProviderOptions(max_tokens=64, extra={"options": 1}))


def test_extra_options_alone() -> None:
    options = ProviderOptions(extra={"options": {"seed": 7}})
    assert body(options=options)["options"] == {"seed": 7}


@pytest.mark.parametrize("key", ["model", "messages", "tools", "stream"])
def test_extra_may_not_override_owned_keys(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"may not set {key!r}"):
        body(options=ProviderOptions(extra={key: "x"}))


@pytest.mark.parametrize("model", ["", None, 3])
def test_model_must_be_a_non_empty_string(model: Any) -> None:
    with pytest.raises(ConfigError, match="model name"):
        encode_request([], model=model)


def test_encoding_never_modifies_its_inputs_and_is_strict_json() -> None:
    messages = [
        Message.user("look", images=[f"data:image/png;base64,{PNG}"]),
        Message.assistant(calls=[ToolCall("c", "get_weather", {"city": "Oslo"})]),
        Message.tool("c", "get_weather", "cold"),
    ]
    options = ProviderOptions(max_tokens=5, extra={"options": {"num_ctx": 2048}})
    before = copy.deepcopy((messages, options, WEATHER))
    request = encode_request(messages, model="m", tools=[WEATHER], options=options)
    assert (messages, options, WEATHER) == before
    assert json.loads(dumps(request)) == request


# --------------------------------------------------------------------------- reader


def read(*records: Any) -> list[Increment]:
    """Each record's increment from one reader, mid-stream: after a first line that named the
    model, so that the increments do not (see the tests of the model)."""
    reader = OllamaReader()
    assert reader.read({"model": "llama3.2", "done": False}) == Increment(model="llama3.2")
    return [reader.read(record) for record in records]


def chunk(message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "model": "llama3.2",
        "created_at": "2025-06-12T09:41:07.5Z",
        "message": {"role": "assistant", **message},
        "done": False,
        **fields,
    }


@pytest.mark.parametrize("record", [[], "text", 3, None, True, (1,)])
def test_a_record_must_be_an_object(record: Any) -> None:
    with pytest.raises(ProtocolError, match="not a JSON object") as info:
        OllamaReader().read(record)
    assert info.value.code == "protocol"


def test_content_and_thinking() -> None:
    assert read(chunk({"content": "Hel"}), chunk({"content": "", "thinking": "hmm"})) == [
        Increment(content="Hel"),
        Increment(thinking="hmm"),
    ]


def test_inline_think_tags_are_left_for_the_assembler() -> None:
    assert read(chunk({"content": "<think>x</think>y"})) == [Increment(content="<think>x</think>y")]


def test_null_and_missing_fields_contribute_nothing() -> None:
    assert (
        read(
            {"model": "m"},
            {"message": None},
            chunk({"content": None, "thinking": None, "tool_calls": None}),
            {"error": None, "done": None, "message": {}},
        )
        == [Increment()] * 4
    )


def test_unknown_fields_are_tolerated() -> None:
    record = chunk(
        {"content": "a", "images": None, "future": {"x": 1}},
        logprobs=[{"token": "a"}],
        brand_new=True,
    )
    assert read(record) == [Increment(content="a")]


def test_tool_calls_are_numbered_across_the_stream() -> None:
    first = chunk(
        {
            "content": "",
            "tool_calls": [
                {"function": {"name": "a", "arguments": {"x": 1, "y": [1, "é"]}}},
                {"id": "call_x", "function": {"index": 7, "name": "b", "arguments": {}}},
            ],
        }
    )
    second = chunk({"tool_calls": [{"function": {"name": "c", "arguments": '{"z": 2}'}}]})
    assert read(first, second) == [
        Increment(
            calls=(
                CallFragment(index=0, id=None, name="a", arguments='{"x":1,"y":[1,"é"]}'),
                CallFragment(index=1, id="call_x", name="b", arguments="{}"),
            )
        ),
        Increment(calls=(CallFragment(index=2, id=None, name="c", arguments='{"z": 2}'),)),
    ]


def test_string_arguments_pass_through_as_is() -> None:
    # Even malformed text: the assembler, not the reader, parses (and refuses) it.
    increments = read(chunk({"tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}))
    assert increments[0].calls == (CallFragment(index=0, name="f", arguments="{bad"),)


def test_missing_arguments_and_empty_id_or_name() -> None:
    increments = read(chunk({"tool_calls": [{"id": "", "function": {"name": ""}}]}))
    assert increments[0].calls == (CallFragment(index=0, id=None, name=None, arguments=""),)


@pytest.mark.parametrize(
    ("tool_calls", "match"),
    [
        ({"function": {}}, r"tool_calls' is not an array \(got an object\)"),
        (["call"], r"tool call 0 is not a JSON object \(got a string\)"),
        ([{}], r"tool call 0 has no 'function' object \(got null\)"),
        ([{"function": []}], r"tool call 0 has no 'function' object \(got an array\)"),
        ([{"function": {"name": 5}}], r"tool call 0 name is not a string"),
        ([{"id": 5, "function": {"name": "f"}}], r"tool call 0 id is not a string"),
        ([{"function": {"name": "f", "arguments": [1]}}], r"arguments are not a JSON object"),
        ([{"function": {"name": "f", "arguments": 1}}], r"arguments are not a JSON object"),
    ],
)
def test_malformed_tool_calls(tool_calls: Any, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        read(chunk({"tool_calls": tool_calls}))


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"message": "hi"}, r"'message' is not a JSON object \(got a string\)"),
        ({"message": {"content": 1}}, r"'message.content' is not a string \(got an integer\)"),
        ({"message": {"thinking": []}}, r"'message.thinking' is not a string \(got an array\)"),
        ({"done": "true"}, r"'done' is not true or false \(got a string\)"),
        ({"done": 1}, r"'done' is not true or false \(got an integer\)"),
        ({"done": True, "done_reason": 1}, r"'done_reason' is not a string"),
    ],
)
def test_malformed_known_fields(record: dict[str, Any], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        read(record)


def final(**fields: Any) -> dict[str, Any]:
    return {
        "model": "llama3.2",
        "created_at": "2025-06-12T09:41:08Z",
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "total_duration": 1_000_000,
        "load_duration": 10,
        "prompt_eval_count": 12,
        "prompt_eval_duration": 100,
        "eval_count": 34,
        "eval_duration": 200,
        **fields,
    }


def test_done_record() -> None:
    assert read(final(done_reason="stop")) == [
        Increment(
            usage=Usage(prompt=12, completion=34),
            finish=FinishReason.STOP,
            terminal=True,
            final=True,
        )
    ]


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("stop", FinishReason.STOP),
        ("length", FinishReason.LENGTH),
        ("load", FinishReason.OTHER),
        ("unload", FinishReason.OTHER),
        ("something_new", FinishReason.OTHER),
        ("", None),
        (None, None),
    ],
)
def test_done_reason_mapping(reason: str | None, finish: FinishReason | None) -> None:
    (increment,) = read(final(done_reason=reason))
    assert increment.finish is finish
    assert increment.terminal


def test_missing_done_reason_leaves_finish_to_the_assembler() -> None:
    (increment,) = read(final())
    assert increment.finish is None
    assert increment.terminal


def test_stop_after_tool_calls_is_tool_calls() -> None:
    calls = chunk({"tool_calls": [{"function": {"name": "f", "arguments": {}}}]})
    assert read(calls, final(done_reason="stop"))[1].finish is FinishReason.TOOL_CALLS
    assert read(calls, final(done_reason="length"))[1].finish is FinishReason.LENGTH
    assert read(calls, final(done_reason="load"))[1].finish is FinishReason.OTHER


def test_calls_and_done_in_one_record() -> None:
    record = final(done_reason="stop")
    record["message"]["tool_calls"] = [{"function": {"name": "f", "arguments": {"a": 1}}}]
    (increment,) = read(record)
    assert increment.finish is FinishReason.TOOL_CALLS
    assert increment.calls == (CallFragment(index=0, name="f", arguments='{"a":1}'),)


def test_done_false_is_not_terminal() -> None:
    (increment,) = read(chunk({"content": "x"}, prompt_eval_count=5, eval_count=5))
    assert increment == Increment(content="x")


@pytest.mark.parametrize(
    ("fields", "usage"),
    [
        ({"prompt_eval_count": None, "eval_count": None}, None),  # nothing reported
        ({"prompt_eval_count": -3, "eval_count": "many"}, Usage()),
        ({"prompt_eval_count": 7.0, "eval_count": True}, Usage(prompt=7)),
    ],
)
def test_usage_is_sanitised(fields: dict[str, Any], usage: Usage | None) -> None:
    record = final(**fields)
    assert read(record)[0].usage == usage


def test_usage_when_counts_are_absent_is_unknown_not_zero() -> None:
    assert read({"done": True})[0] == Increment(usage=None, terminal=True, final=True)
    assert read({"done": True, "eval_count": 4})[0].usage == Usage(completion=4)


def test_error_record_raises_provider_error() -> None:
    with pytest.raises(ProviderError) as info:
        read({"error": "model runner has unexpectedly stopped"})
    error = info.value
    assert error.message == "Ollama reported an error: model runner has unexpectedly stopped"
    assert error.code == "provider_error"
    assert error.vendor_type is None
    assert error.vendor_code is None
    assert error.excerpt == "model runner has unexpectedly stopped"
    assert error.status is None


def test_error_message_is_bounded() -> None:
    with pytest.raises(ProviderError) as info:
        read({"error": "x" * 100_000})
    assert len(info.value.message) <= 400
    assert info.value.excerpt == "x" * 300


@pytest.mark.parametrize(
    ("error", "text"),
    [
        ({"message": "boom", "type": "t"}, "boom"),
        ({"code": 5}, '{"code":5}'),
        (42, "42"),
        ("", ""),
    ],
)
def test_error_values_of_other_shapes(error: Any, text: str) -> None:
    with pytest.raises(ProviderError) as info:
        read(chunk({"content": "x"}, error=error))
    assert info.value.excerpt == text


# --------------------------------------------------------------------------- non-streaming


RESPONSE = {
    "model": "qwen3:8b",
    "created_at": "2025-06-12T10:00:00.1Z",
    "message": {
        "role": "assistant",
        "content": "Calling.",
        "thinking": "Need weather.",
        "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {
                "id": "call_given",
                "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
            },
        ],
    },
    "done_reason": "stop",
    "done": True,
    "total_duration": 5,
    "prompt_eval_count": 40,
    "eval_count": 20,
}

EXPECTED_RESPONSE = ProviderResult(
    content="Calling.",
    thinking="Need weather.",
    calls=[
        ToolCall("call_0", "get_weather", {"city": "Paris"}),
        ToolCall("call_given", "get_weather", {"city": "Rome"}),
    ],
    usage=Usage(prompt=40, completion=20),
    finish=FinishReason.TOOL_CALLS,
    model="qwen3:8b",
)


@pytest.mark.parametrize("form", ["object", "mapping", "text", "bytes"])
def test_read_response(form: str) -> None:
    text = json.dumps(RESPONSE)
    given_body: Any = {
        "object": RESPONSE,
        "mapping": types.MappingProxyType(RESPONSE),
        "text": text,
        "bytes": text.encode(),
    }[form]
    assert read_response(given_body, mint_id=minter()) == EXPECTED_RESPONSE


def test_read_response_splits_inline_thinking_unless_asked_not_to() -> None:
    response = final(done_reason="stop")
    response["message"]["content"] = "<think>plan</think>Done."
    assert read_response(response) == ProviderResult(
        content="Done.",
        thinking="plan",
        usage=Usage(prompt=12, completion=34),
        finish=FinishReason.STOP,
        model="llama3.2",
    )
    assert read_response(response, split=False).content == "<think>plan</think>Done."


def test_read_response_must_be_final() -> None:
    with pytest.raises(ProtocolError, match="not final"):
        read_response(chunk({"content": "partial"}))


def test_read_response_error_body() -> None:
    with pytest.raises(ProviderError, match="model 'nope' not found"):
        read_response('{"error":"model \'nope\' not found"}')


@pytest.mark.parametrize("text", ["{", b"\xff", "[1]", '{"done": true, "done": true}'])
def test_read_response_malformed(text: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        read_response(text)


def test_read_response_malformed_arguments() -> None:
    response = final(done_reason="stop")
    response["message"]["tool_calls"] = [{"function": {"name": "f", "arguments": "[1, 2]"}}]
    with pytest.raises(ProtocolError, match="not a JSON object"):
        read_response(response)


# --------------------------------------------------------------------------- error bodies


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"error":"model \\"x\\" not found, try pulling it first"}',
            'model "x" not found, try pulling it first',
        ),
        ('  {"error": "  padded  "}\n', "padded"),
        ('{"error": {"message": "nested"}}', "nested"),
        ("\n 502 Bad Gateway \n", "502 Bad Gateway"),
        ('{"detail": "not ollama"}', '{"detail": "not ollama"}'),
        ('{"error": null}', '{"error": null}'),
        ("[1, 2]", "[1, 2]"),
        ("", ""),
        ("x" * 1000, "x" * 300),
        ('{"error": "' + "e" * 1000 + '"}', "e" * 300),
    ],
)
def test_error_details(text: str, expected: str) -> None:
    assert error_details(text) == (None, None, expected)


@given(st.text())
def test_error_details_never_raises(text: str) -> None:
    vendor_type, vendor_code, message = error_details(text)
    assert vendor_type is None
    assert vendor_code is None
    assert len(message) <= 300


# --------------------------------------------------------------------------- transcripts


def splits(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` cut at random places (sometimes one byte at a time, sometimes not at all)."""
    style = rng.randrange(4)
    if style == 0:
        return [data]
    if style == 1:
        return [data[i : i + 1] for i in range(len(data))]
    cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, min(60, len(data) - 1))))
    return [data[a:b] for a, b in itertools.pairwise([0, *cuts, len(data)])]


def replay(chunks: list[bytes]) -> tuple[StreamAssembler, list[Any]]:
    """Run chunks through NDJSONDecoder -> OllamaReader -> StreamAssembler; return the assembler
    (flushed) and the deltas it produced."""
    decoder = NDJSONDecoder()
    reader = OllamaReader()
    assembler = StreamAssembler(mint_id=minter())
    deltas: list[Any] = []
    for data in chunks:
        for record in decoder.feed(data):
            deltas.extend(assembler.add(reader.read(record)))
    for record in decoder.close():
        deltas.extend(assembler.add(reader.read(record)))
    deltas.extend(assembler.flush())
    return assembler, deltas


def test_fixtures_are_raw_ndjson() -> None:
    for name in [*SUCCESSFUL, "error"]:
        data = (FIXTURES / f"{name}.ndjson").read_bytes()
        assert data.endswith(b"\n")
        lines = data.split(b"\n")[:-1]
        assert len(lines) >= 2
        for line in lines:
            assert line == line.strip()
            record = json.loads(line)
            assert isinstance(record, dict)
            assert ("model" in record) != ("error" in record)


@pytest.mark.parametrize("name", SUCCESSFUL)
def test_transcript_replays_at_random_chunk_boundaries(name: str) -> None:
    data = (FIXTURES / f"{name}.ndjson").read_bytes()
    expected = json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8"))
    rng = random.Random(f"ollama-{name}")
    for _ in range(50):
        assembler, deltas = replay(splits(data, rng))
        assert assembler.terminal
        result = assembler.result()
        assert to_json(result) == expected
        streamed = {
            channel: "".join(d.text for d in deltas if d.channel == channel)
            for channel in ("content", "thinking")
        }
        assert streamed == {"content": result.content, "thinking": result.thinking}


def test_transcript_error_line_raises_after_the_text_before_it() -> None:
    data = (FIXTURES / "error.ndjson").read_bytes()
    rng = random.Random("ollama-error")
    for _ in range(50):
        decoder = NDJSONDecoder()
        reader = OllamaReader()
        assembler = StreamAssembler(mint_id=minter())
        with pytest.raises(ProviderError) as info:  # noqa: PT012 - the whole replay raises
            for data_chunk in splits(data, rng):
                for record in decoder.feed(data_chunk):
                    assembler.add(reader.read(record))
        assert info.value.excerpt == (
            "an error was encountered while running the model: unexpected EOF"
        )
        assert not assembler.terminal
        assert assembler.partial() == ProviderResult(
            content="Once upon", finish="cancelled", model="mistral:7b"
        )


def test_transcript_cut_before_done_is_not_terminal() -> None:
    data = (FIXTURES / "tool_calls.ndjson").read_bytes()
    first_line = data[: data.index(b"\n") + 1]
    assembler, _ = replay([first_line])
    assert not assembler.terminal
    assert [call.name for call in assembler.partial().calls] == [
        "get_current_weather",
        "get_forecast",
    ]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
FIELDS = st.sampled_from(
    ["message", "done", "done_reason", "error", "prompt_eval_count", "eval_count", "model"]
)
MESSAGE_FIELDS = st.sampled_from(["content", "thinking", "tool_calls", "role"])


@given(
    st.dictionaries(FIELDS | st.text(), JSON_VALUES, max_size=5),
    st.dictionaries(MESSAGE_FIELDS, JSON_VALUES, max_size=3),
)
def test_any_record_is_read_or_refused_with_a_typed_error(
    record: dict[str, Any], message: dict[str, Any]
) -> None:
    if message:
        record["message"] = message
    try:
        increment = OllamaReader().read(record)
    except (ProtocolError, ProviderError):
        return
    assert isinstance(increment, Increment)
    assert increment.terminal == (record.get("done") is True)


def test_values_that_are_not_strict_json_are_typed_errors() -> None:
    # Readers are public: a hand-built record must still fail with the documented error types.
    with pytest.raises(ProviderError, match="inf"):
        OllamaReader().read({"error": float("inf")})
    call = {"function": {"name": "f", "arguments": {"x": float("nan")}}}
    with pytest.raises(ProtocolError, match="not strict JSON"):
        OllamaReader().read({"message": {"tool_calls": [call]}})


# --------------------------------------------------------------------------- model


def test_the_first_line_names_the_model_once_and_no_response_id() -> None:
    reader, assembler = OllamaReader(), StreamAssembler()
    first = reader.read(chunk({"content": "Hel"}))
    assert first == Increment(content="Hel", model="llama3.2")
    second = reader.read(chunk({"content": "lo"}, model="other"))
    assert second == Increment(content="lo")
    assembler.add(first)
    assembler.add(second)
    assembler.add(reader.read(final(done_reason="stop")))
    assembler.flush()
    result = assembler.result()
    assert (result.content, result.model, result.response_id) == ("Hello", "llama3.2", None)


@pytest.mark.parametrize("bad", [7, "", "m" * 257, None])
def test_a_model_that_cannot_be_one_is_ignored_and_looked_for_again(bad: Any) -> None:
    reader = OllamaReader()
    assert reader.read(chunk({"content": "a"}, model=bad)) == Increment(content="a")
    assert reader.read(chunk({"content": "b"})).model == "llama3.2"
