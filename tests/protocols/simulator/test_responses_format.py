"""The simulator's OpenAI Responses API format, driven purely: our encoder's bodies parsed, the
policy's answers written as frames and bodies, and read back by our own reader."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulator_cases import ADD, LOOKUP, MODEL, PNG, calls_of, tool_conversation, user

from protocols._json import dumpb, loads
from protocols.accounting import estimate_tokens
from protocols.errors import ValidationError
from protocols.messages import (
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.simulator import (
    MEDIA_TYPES,
    ROUTES,
    SimAnswer,
    SimCall,
    SimTurn,
    Vendor,
    answer,
    error_body,
    parse_request,
    response_body,
    stream_frames,
)
from protocols.sse import SSEDecoder, SSEEvent
from protocols.wire import StreamAssembler
from protocols.wire.openai_responses import (
    NAMESPACE,
    PATH,
    OpenAIResponsesReader,
    encode_request,
    read_response,
)

VENDOR: Vendor = "openai-responses"
THINK = ProviderOptions(think=True)


def encode(
    messages: list[Message],
    *,
    tools: tuple[ToolDefinition, ...] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
) -> bytes:
    return dumpb(encode_request(messages, model=MODEL, tools=tools, options=options, stream=stream))


def drive(chunks: list[bytes]) -> ProviderResult:
    """Bytes -> SSE decoder -> our Responses reader -> assembler, as the HTTP engine does."""
    decoder = SSEDecoder()
    reader = OpenAIResponsesReader()
    assembler = StreamAssembler()
    for chunk in [*chunks, None]:
        for item in decoder.feed(chunk) if chunk is not None else decoder.close():
            if isinstance(item, SSEEvent):
                assembler.add(reader.read(item))
    assembler.flush()
    assert assembler.terminal
    return assembler.result()


def assert_same(result: ProviderResult, sim: SimAnswer) -> None:
    """What our client read equals what the simulator said (the Responses format always
    reports ``cached_tokens``, 0 here, as OpenAI does, and ``reasoning_tokens``: the thinking's
    estimate, within the completion)."""
    assert result.content == sim.text
    assert result.thinking == sim.thinking
    assert calls_of(result) == calls_of(sim)
    assert result.finish is sim.finish
    reasoning = min(estimate_tokens(sim.thinking), sim.usage.completion)
    assert result.usage == Usage(
        sim.usage.prompt, sim.usage.completion, sim.usage.total, cached=0, reasoning=reasoning
    )


def both_ways(
    messages: list[Message],
    *,
    tools: tuple[ToolDefinition, ...] = (),
    options: ProviderOptions | None = None,
) -> tuple[SimAnswer, ProviderResult]:
    """Parse our request streamed and not; check that the frames and the body both read back as
    the policy's answer; return it and the streamed result."""
    results = []
    for stream in (True, False):
        request = parse_request(
            VENDOR, encode(messages, tools=tools, options=options, stream=stream)
        )
        assert (request.vendor, request.model, request.stream) == (VENDOR, MODEL, stream)
        sim = answer(request)
        if stream:
            got = drive([b"".join(stream_frames(request, sim, seq=3))])
        else:
            got = read_response(loads(dumpb(response_body(request, sim, seq=3))))
        assert_same(got, sim)
        results.append((sim, got))
    assert results[0][0] == results[1][0]
    assert results[0][1] == results[1][1]
    return results[0]


def test_the_route_and_media_type() -> None:
    assert ROUTES["/v1" + PATH] == VENDOR
    assert MEDIA_TYPES[VENDOR] == "text/event-stream"


# --------------------------------------------------------------------------- reading requests


def test_our_request_is_read_into_turns_tools_and_options() -> None:
    call = ToolCall("call_1", "add", {"a": 1, "b": 2})
    history = [
        Message.system("Be terse."),
        Message.user("Look at this", images=[PNG]),
        Message.assistant("Adding.", calls=[call, ToolCall("call_2", "lookup", {})]),
        Message.tool("call_1", "add", "3"),
        Message.tool("call_2", "lookup", "none"),
    ]
    options = ProviderOptions(think=True, max_tokens=7, tool_choice="add")
    request = parse_request(VENDOR, encode(history, tools=(ADD, LOOKUP), options=options))
    assert request.turns == (
        SimTurn("system", "Be terse."),
        SimTurn("user", "Look at this"),
        SimTurn("assistant", "Adding.", (SimCall("add", {"a": 1, "b": 2}), SimCall("lookup", {}))),
        SimTurn("tool", "3"),
        SimTurn("tool", "none"),
    )
    assert request.tools == ("add", "lookup")
    assert (request.think, request.max_tokens, request.tool_choice) == (True, 7, "add")
    assert request.stream is True
    assert request.include_usage is True


def test_tool_outputs_with_images_are_read_for_their_text() -> None:
    history = [
        Message.user("draw"),
        Message.assistant(calls=[ToolCall("c1", "add", {})]),
        Message.tool("c1", "add", "3", images=[PNG]),
    ]
    request = parse_request(VENDOR, encode(history))
    assert request.turns[-1] == SimTurn("tool", "3")
    assert answer(request).text == "The answer is 3."


def test_a_call_alone_makes_an_assistant_turn() -> None:
    history = [Message.user("go"), Message.assistant(calls=[ToolCall("c", "add", {"a": 1})])]
    request = parse_request(VENDOR, encode(history))
    assert request.turns[1] == SimTurn("assistant", "", (SimCall("add", {"a": 1}),))


def test_a_string_input_instructions_and_other_items() -> None:
    body = {
        "model": MODEL,
        "instructions": "Be kind.",
        "input": "hello",
        "tools": [{"type": "web_search"}, {"type": "function", "name": "add"}],
        "tool_choice": "auto",
        "reasoning": {"effort": "minimal"},
    }
    request = parse_request(VENDOR, json.dumps(body))
    assert request.turns == (SimTurn("system", "Be kind."), SimTurn("user", "hello"))
    assert request.tools == ("add",)
    assert (request.tool_choice, request.think, request.stream) == (None, False, False)
    items = [
        {"type": "reasoning", "id": "rs", "summary": []},
        {"role": "developer", "content": [{"type": "input_text", "text": "Rule."}]},
        {"type": "item_reference", "id": "x"},
    ]
    request = parse_request(VENDOR, json.dumps({"model": MODEL, "input": items}))
    assert request.turns == (SimTurn("system", "Rule."),)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"model": MODEL}, "input"),
        ({"model": MODEL, "input": 3}, "input"),
        ({"model": "", "input": "x"}, "model"),
        ({"model": MODEL, "input": ["x"]}, r"input\[0\]"),
        ({"model": MODEL, "input": [{"type": "function_call", "call_id": "c"}]}, "name"),
        ({"model": MODEL, "input": [{"type": "function_call", "name": "f"}]}, "call_id"),
        ({"model": MODEL, "input": [{"type": "function_call_output", "output": "x"}]}, "call_id"),
        (
            {
                "model": MODEL,
                "input": [
                    {"type": "function_call", "name": "f", "call_id": "c", "arguments": "[1]"}
                ],
            },
            "JSON object",
        ),
        ({"model": MODEL, "input": [{"role": "robot", "content": "x"}]}, "role"),
        ({"model": MODEL, "input": "x", "tools": {}}, "tools"),
        ({"model": MODEL, "input": "x", "instructions": 1}, "instructions"),
        ({"model": MODEL, "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": MODEL, "input": "x", "stream": "yes"}, "stream"),
    ],
)
def test_a_request_of_the_wrong_shape_is_refused(body: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        parse_request(VENDOR, json.dumps(body))


def test_an_error_body_has_the_openai_shape() -> None:
    assert error_body(VENDOR, 429, "slow down") == {
        "error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}
    }


# --------------------------------------------------------------------------- answers


def test_an_echo_reads_back_word_by_word() -> None:
    sim, got = both_ways(user("Please echo this"))
    assert got.content == "You said: Please echo this"
    assert got.finish is FinishReason.STOP
    assert len(sim.pieces) == 5


def test_thinking_comes_as_a_summary_with_encrypted_content_kept() -> None:
    sim, got = both_ways(user("What is 19 + 23?"), tools=(ADD,), options=THINK)
    assert got.thinking == sim.thinking != ""
    assert got.calls[0].name == "add"
    kept = got.continuation[NAMESPACE]["reasoning"]
    assert [item["id"] for item in kept] == ["rs_sim3"]
    assert kept[0]["summary"] == [{"type": "summary_text", "text": sim.thinking}]


def test_parallel_calls_and_the_answer_from_their_results() -> None:
    _, got = both_ways(user("What is 1 + 2 and 3 + 4?"), tools=(ADD,))
    assert [call.arguments for call in got.calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert [call.id for call in got.calls] == ["call_sim3_0", "call_sim3_1"]
    assert got.finish is FinishReason.TOOL_CALLS
    _, final = both_ways(tool_conversation(["3", "7"]), tools=(ADD,))
    assert final.content == "The tools returned: 3, 7."


def test_an_output_cap_ends_incomplete_with_finish_length() -> None:
    _, got = both_ways(user("count to 50"), options=ProviderOptions(max_tokens=5))
    assert got.content == "1 2 3 4 5"
    assert got.finish is FinishReason.LENGTH
    request = parse_request(
        VENDOR, encode(user("count to 50"), options=ProviderOptions(max_tokens=5))
    )
    frames = b"".join(stream_frames(request, answer(request)))
    assert b"event: response.incomplete" in frames
    assert b"response.completed" not in frames


def test_usage_can_be_left_out() -> None:
    request = parse_request(VENDOR, encode(user("hi")))
    sim = answer(request)
    assert drive([b"".join(stream_frames(request, sim, usage=False))]).usage is None
    assert read_response(response_body(request, sim, usage=False)).usage is None


def test_every_frame_is_one_numbered_event_and_text_is_one_frame_per_delta() -> None:
    prompt = 'call lookup with {"city": "Zürich"} please'
    request = parse_request(VENDOR, encode(user(prompt), tools=(LOOKUP,), options=THINK))
    sim = answer(request)
    frames = list(stream_frames(request, sim, seq=1))
    kinds = []
    for number, frame in enumerate(frames):
        events = SSEDecoder().feed(frame)
        assert len(events) == 1
        assert isinstance(events[0], SSEEvent)
        record = json.loads(events[0].data)
        assert record["type"] == events[0].event
        assert record["sequence_number"] == number
        kinds.append(record["type"])
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.function_call_arguments.delta") > 1  # fragments to assemble
    echo = parse_request(VENDOR, encode(user("one two three four")))
    texts = [frame for frame in stream_frames(echo, answer(echo)) if b"output_text.delta" in frame]
    assert len(texts) == len(answer(echo).pieces)


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from(
        [
            ("Please echo these words back", (), False),
            ("What is 1 + 2 and 3 + 4?", (ADD,), True),
            ('call lookup with {"city": "Zürich"}', (LOOKUP,), False),
            ("count to 12", (), True),
        ]
    ),
    cuts=st.lists(st.floats(min_value=0, max_value=1), max_size=40),
)
def test_chunking_never_changes_the_result(
    case: tuple[str, tuple[ToolDefinition, ...], bool], cuts: list[float]
) -> None:
    text, tools, think = case
    request = parse_request(
        VENDOR, encode(user(text), tools=tools, options=THINK if think else None)
    )
    sim = answer(request)
    data = b"".join(stream_frames(request, sim, seq=2))
    points = sorted({int(cut * len(data)) for cut in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    assert drive(chunks) == drive([data])
    assert_same(drive(chunks), sim)
