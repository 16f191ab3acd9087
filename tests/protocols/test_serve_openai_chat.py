"""The served OpenAI Chat Completions codec (protocols/serve/openai_chat.py): requests decoded
(good and bad), the project's own client encoder and stream reader round-tripped through it,
every chunk and completion validated by the ``openai`` SDK's own models, and the SDK itself
driving the codec over an in-memory transport."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols._json import dumpb
from protocols.errors import ProtocolError, ProviderError, SizeLimitError, ValidationError
from protocols.live import RunEvent
from protocols.messages import (
    CUT_SHORT,
    AgentResult,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolSuccess,
    Usage,
)
from protocols.relay import ResultFrame, frame_events, run_event_json
from protocols.serve.openai_chat import (
    DONE,
    ERRORS,
    ChunkEncoder,
    answer,
    completion,
    decode_request,
    encode_sse,
    error_body,
    error_response,
    new_completion_id,
)
from protocols.settings import ModelSettings
from protocols.sse import SSEDecoder, SSEEvent
from protocols.wire import StreamAssembler
from protocols.wire.openai_chat import OpenAIChatReader, encode_request, read_response

openai = pytest.importorskip("openai")
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwAB"
    "BAEAwS2OUAAAAABJRU5ErkJggg=="
)
WEATHER = ToolDefinition(
    "weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
WEATHER_WIRE = {
    "name": WEATHER.name,
    "description": WEATHER.description,
    "parameters": WEATHER.parameters,
}
CID, MODEL, CREATED = "chatcmpl-test", "relay-model", 1_700_000_000


def body(**fields: Any) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]} | fields
    ).encode()


def event(kind: str, seq: int = 1, **data: Any) -> RunEvent:
    return RunEvent("run", seq, kind, 0.0, data)


def shape(message: Message) -> tuple[Any, ...]:
    return (
        message.role,
        message.content,
        message.calls,
        message.tool_call_id,
        message.name,
        message.images,
        message.thinking,
    )


# -- decoding ----------------------------------------------------------------------------------


def test_a_full_request_decodes_into_the_data_model() -> None:
    request = decode_request(
        json.dumps(
            {
                "model": "agent:helper",
                "messages": [
                    {"role": "developer", "content": "Be brief."},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is "},
                            {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
                            {"type": "text", "text": "this?"},
                        ],
                    },
                    {
                        "role": "assistant",
                        "content": None,
                        "reasoning_content": "hm",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                            }
                        ],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": "c1",
                        "content": [{"type": "text", "text": "sun"}],
                    },
                ],
                "tools": [{"type": "function", "function": WEATHER_WIRE}],
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_completion_tokens": 100,
                "temperature": 0.5,
                "top_p": 0.9,
                "stop": "END",
                "seed": 7,
                "presence_penalty": 0.1,
                "frequency_penalty": -0.1,
                "reasoning_effort": "high",
                "parallel_tool_calls": False,
                "user": "someone",
                "n": 1,
                "top_k": 40,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "o", "schema": {"type": "object"}},
                },
            }
        ).encode()
    )
    assert request.agent == "helper"
    assert request.model == "agent:helper"
    assert [shape(m) for m in request.messages] == [
        (Role.SYSTEM, "Be brief.", (), None, None, (), ""),
        (Role.USER, "What is this?", (), None, None, (PNG,), ""),
        (Role.ASSISTANT, "", (ToolCall("c1", "weather", {"city": "Oslo"}),), None, None, (), "hm"),
        (Role.TOOL, "sun", (), "c1", "weather", (), ""),
    ]
    assert request.tools == (WEATHER,)
    assert request.tool_choice == "weather"
    assert request.stream
    assert request.include_usage
    assert request.schema == {"type": "object"}
    assert request.settings == ModelSettings(
        max_tokens=100,
        temperature=0.5,
        top_p=0.9,
        stop=("END",),
        seed=7,
        presence_penalty=0.1,
        frequency_penalty=-0.1,
        reasoning_effort="high",
        parallel_tool_calls=False,
        extra={"top_k": 40},
    )
    assert request.options.tool_choice == "weather"
    assert request.options.max_tokens == 100


def test_defaults_and_small_choices() -> None:
    request = decode_request(body())
    assert request.agent is None
    assert not request.stream
    assert not request.include_usage
    assert request.settings == ModelSettings()
    assert request.tools == ()
    assert request.tool_choice is None
    # include_usage without streaming means nothing; [] stops are unset; other efforts are extra
    request = decode_request(
        body(
            stream_options={"include_usage": True},
            stop=[],
            reasoning_effort="minimal",
            max_tokens=5,
            max_completion_tokens=5,
            tool_choice="none",
        )
    )
    assert not request.include_usage
    assert request.tool_choice == "none"
    assert request.settings == ModelSettings(max_tokens=5, extra={"reasoning_effort": "minimal"})


def bad(**fields: Any) -> bytes:
    return body(**fields)


TOOL_MSG = {"role": "tool", "tool_call_id": "c9", "content": "x"}
CALLING = {
    "role": "assistant",
    "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}


@pytest.mark.parametrize(
    ("raw", "words", "code"),
    [
        (b"{", "invalid JSON", "json"),
        (b"[]", "must be a JSON object, not an array", "invalid"),
        (bad(model=""), "model must be", "invalid"),
        (bad(model=3), "model must be a string, not an integer", "invalid"),
        (bad(model="agent:"), "agent:NAME", "invalid"),
        (bad(messages=[]), "messages must be an array of at least one", "invalid"),
        (bad(messages={"role": "user"}), "messages must be an array", "invalid"),
        (bad(messages=["hi"]), "messages[0] must be an object", "invalid"),
        (bad(messages=[{"role": "function", "content": "x"}]), "messages[0].role", "invalid"),
        (
            bad(messages=[{"role": "user"}]),
            "messages[0].content must be a string or an array",
            "invalid",
        ),
        (
            bad(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]),
            "messages[0].content[0]",
            "unsupported",
        ),
        (
            bad(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
                    }
                ]
            ),
            "data: URLs",
            "unsupported",
        ),
        (
            bad(messages=[TOOL_MSG]),
            "messages[0].tool_call_id 'c9' answers no earlier call",
            "invalid",
        ),
        (
            bad(messages=[CALLING, TOOL_MSG, TOOL_MSG]),
            "messages[2].tool_call_id 'c9' answers a call already answered",
            "invalid",
        ),
        (
            bad(
                messages=[
                    {
                        **CALLING,
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{no"}}],
                    }
                ]
            ),
            "messages[0].tool_calls[0].function.arguments is not JSON",
            "invalid",
        ),
        (
            bad(
                messages=[
                    {
                        **CALLING,
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}],
                    }
                ]
            ),
            "must be a JSON object, not an array",
            "invalid",
        ),
        (
            bad(messages=[{**CALLING, "tool_calls": [{"function": {"name": "f"}}]}]),
            "messages[0]: ToolCall.id",
            "invalid",
        ),
        (
            bad(tools=[{"type": "function", "function": {"name": "bad name"}}]),
            "tools[0].function: ToolDefinition.name",
            "invalid",
        ),
        (
            bad(
                tools=[
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
                ]
            ),
            "tools[0].function",
            "invalid",
        ),
        (
            bad(tools=[{"type": "function", "function": {"name": "f"}}] * 2),
            "two tools are named 'f'",
            "invalid",
        ),
        (bad(tools=[{"type": "custom", "custom": {"name": "f"}}]), "tools[0].type", "unsupported"),
        (bad(tool_choice="required"), "tool_choice", "invalid"),
        (
            bad(tool_choice={"type": "function", "function": {"name": "nope"}}),
            "names no tool",
            "invalid",
        ),
        (bad(stream="yes"), "stream must be true or false, not a string", "invalid"),
        (bad(temperature=3), "temperature must be a number from 0 to 2", "invalid"),
        (bad(temperature=True), "temperature must be a number from 0 to 2", "invalid"),
        (bad(max_tokens=0), "max_tokens must be an int >= 1", "invalid"),
        (bad(max_tokens=5, max_completion_tokens=6), "differ", "invalid"),
        (bad(stop=[""]), "stop", "invalid"),
        (bad(reasoning_effort=3), "reasoning_effort", "invalid"),
        (bad(n=2), "does not support n=2", "unsupported"),
        (bad(logprobs=True), "does not support logprobs", "unsupported"),
        (bad(top_logprobs=3), "does not support top_logprobs", "unsupported"),
        (bad(audio={"voice": "x"}), "does not support audio", "unsupported"),
        (bad(modalities=["text", "audio"]), "does not support modalities", "unsupported"),
        (bad(logit_bias={"1": 2}), "does not support logit_bias", "unsupported"),
        (bad(functions=[{"name": "f"}]), "does not support functions", "unsupported"),
        (bad(response_format={"type": "json_object"}), "json_schema", "unsupported"),
        (
            bad(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
            "json_schema.schema",
            "invalid",
        ),
        (
            bad(response_format={"type": "json_schema", "json_schema": {"schema": {"type": 5}}}),
            "ProviderOptions.schema",
            "invalid",
        ),
    ],
)
def test_bad_requests_are_refused_naming_the_field(raw: bytes, words: str, code: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_request(raw)
    assert words in caught.value.message
    assert caught.value.code == code
    assert caught.value.category == "user"
    assert ERRORS[code].status == 400


def test_too_many_messages_or_tools() -> None:
    with pytest.raises(SizeLimitError) as caught:
        decode_request(body(messages=[{"role": "user", "content": "x"}] * 3), max_messages=2)
    assert caught.value.code == "too_large"
    assert "messages" in caught.value.message
    tools = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(3)]
    with pytest.raises(SizeLimitError):
        decode_request(body(tools=tools), max_tools=2)
    assert ERRORS["too_large"].status == 413


# -- the project's own client encoder, decoded back ---------------------------------------------

NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
TEXT = st.text(max_size=20)
ARGS = st.dictionaries(
    st.text(max_size=5), st.none() | st.integers() | st.text(max_size=5), max_size=3
)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages = [Message.system(draw(TEXT))] if draw(st.booleans()) else []
    for turn in range(draw(st.integers(1, 3))):
        images = draw(st.lists(st.just(PNG), max_size=2))
        messages.append(Message.user(draw(TEXT), images=images))
        names = draw(st.lists(NAMES, max_size=2))
        calls = [ToolCall(f"call_{turn}_{i}", name, draw(ARGS)) for i, name in enumerate(names)]
        messages.append(Message.assistant(draw(TEXT), calls=calls))
        messages.extend(Message.tool(call.id, call.name, draw(TEXT)) for call in calls)
    return messages


OPTIONS = st.builds(
    ProviderOptions,
    max_tokens=st.none() | st.integers(1, 10**6),
    temperature=st.none() | st.floats(0, 2),
    top_p=st.none() | st.floats(0.01, 1),
    stop=st.lists(st.text(min_size=1, max_size=5), max_size=4).map(tuple),
    seed=st.none() | st.integers(-(2**63), 2**63 - 1),
    presence_penalty=st.none() | st.floats(-2, 2),
    frequency_penalty=st.none() | st.floats(-2, 2),
    reasoning_effort=st.none() | st.sampled_from(["low", "medium", "high"]),
    parallel_tool_calls=st.none() | st.booleans(),
    tool_choice=st.none() | st.sampled_from(["auto", "none", "required", "weather"]),
    schema=st.none() | st.just({"type": "object", "properties": {"a": {"type": "string"}}}),
    extra=st.dictionaries(
        st.sampled_from(["top_k", "min_p", "chat_template_kwargs"]), st.integers(), max_size=2
    ),
)


@settings(max_examples=60, deadline=None)
@given(
    conversations(),
    OPTIONS,
    st.booleans(),
    st.sampled_from(["max_tokens", "max_completion_tokens"]),
)
def test_what_the_client_encoder_sends_decodes_back(
    messages: list[Message], options: ProviderOptions, stream: bool, key: Any
) -> None:
    tools = (WEATHER, ToolDefinition("lookup"))
    sent = encode_request(
        messages, model="agent:a", tools=tools, options=options, stream=stream, max_tokens_key=key
    )
    request = decode_request(dumpb(sent))
    assert [shape(m) for m in request.messages] == [shape(m) for m in messages]
    assert request.tools == tools
    assert request.agent == "a"
    assert request.stream == stream
    assert request.include_usage == stream
    assert request.options == options


# -- streams, read back by the project's own reader ---------------------------------------------

USAGES = st.none() | st.builds(
    lambda p, c, cached, reasoning: Usage(
        p, c, cached=cached and min(cached, p), reasoning=reasoning and min(reasoning, c)
    ),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
)


@st.composite
def relayed(draw: st.DrawFn) -> tuple[list[str], list[str], ProviderResult]:
    pieces = draw(st.lists(st.text(min_size=1, max_size=8), max_size=5))
    thoughts = draw(st.lists(st.text(min_size=1, max_size=8), max_size=3))
    names = draw(st.lists(NAMES, max_size=3))
    calls = [ToolCall(f"id{i}", name, draw(ARGS)) for i, name in enumerate(names)]
    finish = draw(
        st.sampled_from(
            [
                FinishReason.STOP,
                FinishReason.LENGTH,
                FinishReason.TOOL_CALLS,
                FinishReason.CONTENT_FILTER,
            ]
        )
    )
    denied = {}
    if finish in CUT_SHORT:
        denied = dict.fromkeys((call.id for call in calls), CUT_SHORT[finish])
    elif calls and draw(st.booleans()):
        denied = {calls[0].id: "the relay's policy refused it"}
    result = ProviderResult(
        "".join(pieces), "".join(thoughts), calls, usage=draw(USAGES), finish=finish, denied=denied
    )
    return pieces, thoughts, result


def stream_of(pieces: list[str], thoughts: list[str], result: ProviderResult) -> list[RunEvent]:
    kinds = [("thinking", text) for text in thoughts] + [("content", text) for text in pieces]
    events = [(kind, {"text": text}) for kind, text in kinds]
    events += frame_events(ResultFrame("r", result))
    return [event(kind, seq, **data) for seq, (kind, data) in enumerate(events, 1)]


def encode_all(
    events: Iterable[RunEvent], include_usage: bool = True
) -> tuple[list[dict[str, Any]], bytes]:
    encoder = ChunkEncoder(CID, MODEL, CREATED, include_usage)
    chunks = [chunk for item in events for chunk in encoder.feed(item)]
    assert encoder.done
    return chunks, encode_sse(chunks) + DONE


def read_back(wire: bytes) -> ProviderResult:
    reader, assembler = OpenAIChatReader(), StreamAssembler(split=False)
    for sse in SSEDecoder().feed(wire):
        assert isinstance(sse, SSEEvent)
        assembler.add(reader.read(sse))
    assert assembler.final
    assembler.flush()
    return assembler.result()


@settings(max_examples=80, deadline=None)
@given(relayed(), st.booleans())
def test_a_relayed_call_streams_back_into_the_same_result(
    case: tuple[list[str], list[str], ProviderResult], json_response: bool
) -> None:
    pieces, thoughts, result = case
    events = stream_of(pieces, thoughts, result)
    if json_response:  # as a follower reads it off the wire: the response as JSON
        from protocols.live import event_from_json

        events = [event_from_json(run_event_json(item)) for item in events]
    chunks, wire = encode_all(events)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    back = read_back(wire)
    sent = tuple(call for call in result.calls if call.id not in result.denied)
    assert (back.content, back.thinking, back.calls) == (result.content, result.thinking, sent)
    assert back.usage == result.usage
    assert back.model == MODEL
    assert back.response_id == CID
    if result.finish is FinishReason.TOOL_CALLS and not sent:
        assert back.finish is FinishReason.STOP  # every call denied: none to run
    else:
        assert back.finish is result.finish


@settings(max_examples=60, deadline=None)
@given(relayed())
def test_a_whole_completion_reads_back_into_the_same_result(
    case: tuple[list[str], list[str], ProviderResult],
) -> None:
    _, _, result = case
    whole = completion(result, completion_id=CID, model=MODEL, created=CREATED)
    ChatCompletion.model_validate(whole)
    back = read_response(json.loads(dumpb(whole)), split=False)
    sent = tuple(call for call in result.calls if call.id not in result.denied)
    assert (back.content, back.thinking, back.calls, back.usage) == (
        result.content,
        result.thinking,
        sent,
        result.usage,
    )
    assert back.finish is (
        FinishReason.STOP
        if result.finish is FinishReason.TOOL_CALLS and not sent
        else result.finish
    )


def test_chunks_as_openai_sends_them() -> None:
    call = ToolCall("call_1", "weather", {"city": "Oslo"})
    result = ProviderResult("Hi", "", (call,), Usage(3, 4, cached=1, reasoning=2))
    chunks, wire = encode_all(stream_of(["Hi"], [], result))
    assert [c["choices"][0]["delta"] if c["choices"] else c["usage"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                }
            ]
        },
        {},
        {
            "prompt_tokens": 3,
            "completion_tokens": 4,
            "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 1},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    ]
    assert chunks[3]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c["usage"] is None for c in chunks[:-1])
    assert {(c["id"], c["object"], c["created"], c["model"]) for c in chunks} == {
        (CID, "chat.completion.chunk", CREATED, MODEL)
    }
    assert wire.startswith(b'data: {"id":"chatcmpl-test"')
    assert wire.endswith(b"\n\ndata: [DONE]\n\n")
    # without include_usage: no usage chunk and no usage field
    plain, _ = encode_all(stream_of(["Hi"], [], result), include_usage=False)
    assert len(plain) == 4
    assert all("usage" not in c for c in plain)


def test_thinking_streams_as_reasoning_content() -> None:
    chunks, wire = encode_all(stream_of(["a"], ["why"], ProviderResult("a", "why")))
    assert chunks[1]["choices"][0]["delta"] == {"reasoning_content": "why"}
    assert read_back(wire).thinking == "why"


# -- an agent run --------------------------------------------------------------------------------


def agent_events(result: AgentResult) -> list[RunEvent]:
    call = ToolCall("c1", "weather", {"city": "Oslo"})
    kinds: list[tuple[str, dict[str, Any]]] = [
        ("started", {"agent": "helper"}),
        ("turn", {"turn": 1}),
        ("thinking", {"text": "look it up"}),
        ("content", {"text": "Let me look."}),
        ("tool_call", {"call": call}),
        ("usage", {"usage": Usage(5, 5), "estimated": False, "finish": "tool_calls"}),
        ("tool_result", {"result": ToolSuccess("c1", "weather", "sun")}),
        ("turn", {"turn": 2}),
        ("content", {"text": "Sunny."}),
        ("usage", {"usage": Usage(7, 2), "estimated": False, "finish": "stop"}),
        ("finished", {"result": result}),
    ]
    return [event(kind, seq, **data) for seq, (kind, data) in enumerate(kinds, 1)]


def test_an_agent_run_shows_its_answer_not_its_own_tools() -> None:
    result = AgentResult(
        "Sunny.", "look it up", usage=Usage(12, 7), turns=2, total_usage=Usage(20, 9)
    )
    chunks, wire = encode_all(agent_events(result))
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "look it up"},
        {"content": "Let me look."},
        {"content": "\n\nSunny."},
        {},
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["total_tokens"] == 29  # with what it delegated
    back = read_back(wire)
    assert back.content == "Let me look.\n\nSunny."
    assert back.calls == ()
    assert back.usage == Usage(20, 9)
    whole = completion(result, completion_id=CID, model="agent:helper", created=CREATED)
    ChatCompletion.model_validate(whole)
    assert whole["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Sunny.",
        "refusal": None,
        "reasoning_content": "look it up",
    }


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        (StopReason.COMPLETE, "stop"),
        (StopReason.MAX_TOKENS, "length"),
        (StopReason.CONTENT_FILTER, "content_filter"),
        (StopReason.BUDGET, "length"),
        (StopReason.EXHAUSTED, "length"),
        (StopReason.TIMEOUT, "length"),
    ],
)
def test_why_an_agent_run_ended_is_its_finish_reason(stop: StopReason, finish: str) -> None:
    whole = completion(AgentResult("x", stop=stop), completion_id=CID, model=MODEL, created=CREATED)
    assert whole["choices"][0]["finish_reason"] == finish


def test_unknown_or_estimated_usage_is_never_shown_as_a_count() -> None:
    for result in (
        AgentResult("x", usage=None),
        AgentResult("x", usage=Usage(1, 1), estimated=True),
    ):
        chunks, _ = encode_all([event("finished", result=result)])
        assert chunks[-1]["choices"]
        assert "usage" not in completion(result, completion_id=CID, model=MODEL, created=CREATED)
    with pytest.raises(ValidationError):
        completion(
            AgentResult(stop=StopReason.CANCELLED), completion_id=CID, model=MODEL, created=0
        )


# -- how a stream ends otherwise ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("last", "code", "words"),
    [
        (
            event(
                "failed",
                2,
                error={
                    "type": "RelayError",
                    "code": "upstream",
                    "message": "relay provider failed",
                    "retryable": True,
                },
            ),
            "upstream",
            "relay provider failed",
        ),
        (
            event("failed", 2, error={"type": "ValueError", "code": None, "message": ""}),
            None,
            "the run failed",
        ),
        (event("cancelled", 2, response={"content": "He"}), "cancelled", "cancelled"),
        (event("cancelled", 2, result=None), "cancelled", "cancelled"),
        (event("awaiting_input", 2, calls=[]), "awaiting_input", "approval"),
        (event("gap", 9, first=2), "gap", "events 2 to 9 are gone"),
        (event("rewind", 2, to=0), "rewind", "takes back"),
    ],
)
def test_a_stream_that_does_not_finish_ends_with_an_error(
    last: RunEvent, code: str | None, words: str
) -> None:
    encoder = ChunkEncoder(CID, MODEL, CREATED, True)
    assert len(encoder.feed(event("content", 1, text="He"))) == 2
    (error,) = encoder.feed(last)
    assert encoder.done
    assert encoder.feed(event("content", 3, text="more")) == []
    assert set(error) == {"error"}
    assert words in error["error"]["message"]
    assert error["error"]["code"] == code
    assert error["error"]["type"] == (ERRORS[code].type if code else "server_error")
    with pytest.raises(ProviderError) as caught:  # the project's own reader raises it
        read_back(encode_sse([error]) + DONE)
    assert words in caught.value.message
    if last.terminal:
        status, _, payload = answer(last, completion_id=CID, model=MODEL, created=CREATED)
        assert status == (ERRORS[code].status if code else 500)
        assert json.loads(payload)["error"]["code"] == code


def test_a_rewind_to_what_was_not_shown_changes_nothing() -> None:
    encoder = ChunkEncoder(CID, MODEL, CREATED)
    encoder.feed(event("content", 3, text="a"))
    assert encoder.feed(event("rewind", 4, to=3)) == []
    assert not encoder.done


def test_answer_a_finished_run() -> None:
    status, headers, payload = answer(
        event("finished", response={"content": "hi"}),
        completion_id=CID,
        model=MODEL,
        created=CREATED,
    )
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert ChatCompletion.model_validate_json(payload).choices[0].message.content == "hi"


# -- errors ----------------------------------------------------------------------------------


def test_error_shapes_and_statuses() -> None:
    assert json.loads(error_body(400, "bad\nthing", "invalid_request_error", "invalid")) == {
        "error": {
            "message": "bad thing",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid",
        }
    }
    expected = {
        "unauthorized": 401,
        "invalid": 400,
        "unknown_agent": 404,
        "rate_limited": 429,
        "budget": 429,
        "upstream": 502,
        "auth": 502,
        "shutdown": 503,
        "internal": 500,
        "too_large": 413,
        "cancelled": 409,
    }
    assert {code: ERRORS[code].status for code in expected} == expected
    assert ERRORS["unauthorized"].type == "authentication_error"
    assert ERRORS["rate_limited"].type == "rate_limit_error"
    assert ERRORS["rate_limited"].retry
    status, headers, payload = error_response("no-such-code", "x" * 5000)
    assert status == 500
    assert headers["x-should-retry"] == "false"
    assert len(json.loads(payload)["error"]["message"]) == 2000
    assert new_completion_id().startswith("chatcmpl-")
    assert len(new_completion_id()) == 41


# -- the official SDK, end to end over an in-memory transport -----------------------------------


def sdk(handler: Callable[[httpx.Request], httpx.Response]) -> Any:
    transport = httpx.MockTransport(handler)
    return openai.OpenAI(
        api_key="relay-token",
        base_url="http://relay.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=transport),
    )


def relay(result: ProviderResult, seen: list[Any]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer relay-token"
        try:
            decoded = decode_request(request.content)
        except ProtocolError as error:
            status, headers, payload = error_response(error.code, error.message)
            return httpx.Response(status, headers=headers, content=payload)
        seen.append(decoded)
        events = stream_of([result.content], [], result)
        if not decoded.stream:
            status, headers, payload = answer(
                events[-1], completion_id=CID, model=decoded.model, created=CREATED
            )
            return httpx.Response(status, headers=headers, content=payload)
        _, wire = encode_all(events, decoded.include_usage)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=wire)

    return handler


def test_the_openai_sdk_streams_through_the_codec() -> None:
    call = ToolCall("call_1", "weather", {"city": "Oslo"})
    seen: list[Any] = []
    client = sdk(relay(ProviderResult("Checking.", calls=(call,), usage=Usage(9, 3)), seen))
    stream = client.chat.completions.create(
        model="gpt-whatever",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo?"},
        ],
        tools=[{"type": "function", "function": WEATHER_WIRE}],
        temperature=0.2,
        max_completion_tokens=50,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    (request,) = seen
    assert request.agent is None
    assert request.settings == ModelSettings(temperature=0.2, max_tokens=50)
    assert [m.content for m in request.messages] == [
        "Be brief.",
        "Weather in Oslo?",
    ]
    assert request.tools == (WEATHER,)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    (calls,) = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert text == "Checking."
    assert calls[0].function.name == "weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Oslo"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage.total_tokens == 12


def test_the_openai_sdk_reads_a_whole_completion_and_our_errors() -> None:
    seen: list[Any] = []
    client = sdk(relay(ProviderResult("Hello.", usage=Usage(2, 1)), seen))
    whole = client.chat.completions.create(
        model="agent:helper", messages=[{"role": "user", "content": "hi"}]
    )
    assert whole.choices[0].message.content == "Hello."
    assert whole.usage.total_tokens == 3
    assert whole.choices[0].finish_reason == "stop"
    assert seen[0].agent == "helper"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], n=2)
    assert "does not support n=2" in caught.value.message
    assert caught.value.code == "unsupported"


def test_the_openai_sdk_raises_a_failed_stream() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        encoder = ChunkEncoder(CID, MODEL, CREATED)
        chunks = encoder.feed(event("content", 1, text="Par"))
        chunks += encoder.feed(event("cancelled", 2, response={"content": "Par"}))
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=encode_sse(chunks) + DONE
        )

    stream = sdk(handler).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], stream=True
    )
    chunks = iter(stream)
    shown = [next(chunks).choices[0].delta.content, next(chunks).choices[0].delta.content]
    with pytest.raises(openai.APIError) as caught:
        next(chunks)
    assert shown == ["", "Par"]
    assert "cancelled" in caught.value.message
