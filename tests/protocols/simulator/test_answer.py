"""protocols.simulator, answers: the shape of each vendor's stream, chunking invariance and
determinism.

Expected answers are derived from the policy in the simulator's module docstring, never copied
from a run of the code.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulator_cases import (
    ADD,
    FORMAT_IDS,
    FORMATS,
    LOOKUP,
    MODEL,
    assert_same,
    calls_of,
    drive,
    encode,
    streamed,
    think_options,
    tool_conversation,
    user,
)

from protocols._json import dumpb, dumps, loads
from protocols.messages import (
    Message,
    ToolDefinition,
)
from protocols.ndjson import NDJSONDecoder
from protocols.simulator import (
    SimAnswer,
    SimRequest,
    ThinkStyle,
    Vendor,
    answer,
    parse_request,
    response_body,
    stream_frames,
)
from protocols.sse import SSEDecoder, SSEEvent

# ---------------------------------------------------------------------------------------------
# The streams' shape


def frames_for(
    vendor: Vendor, text: str, tools: Sequence[ToolDefinition] = (), style: ThinkStyle = "tags"
) -> tuple[SimRequest, SimAnswer, list[bytes]]:
    body = encode(vendor, user(text), tools=tools, options=think_options(vendor))
    request = parse_request(vendor, body)
    sim = answer(request)
    return request, sim, list(stream_frames(request, sim, seq=1, think_style=style))


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_every_frame_is_one_complete_record(vendor: Vendor, style: ThinkStyle) -> None:
    _, _, frames = frames_for(vendor, 'count to 4 and call add with {"a": 1}', [ADD], style)
    _, _, more = frames_for(vendor, "count to 4", style=style)
    for frame in frames + more:
        if vendor == "ollama":
            decoder = NDJSONDecoder()
            assert len(decoder.feed(frame)) == 1
            assert decoder.close() == []
        else:
            sse = SSEDecoder()
            items = sse.feed(frame)
            assert len(items) == 1
            assert isinstance(items[0], SSEEvent)
            assert sse.close() == []


def test_anthropic_frames_have_the_documented_shape() -> None:
    """Each event's data has the fields Anthropic's streaming docs show and the official SDK's
    types require (the ``anthropic`` package is not installed here to drive it directly): a
    thinking block starts with ``"thinking": ""`` and ``"signature": ""``, a text block with
    ``"text": ""``, a tool_use block with its id, name and ``"input": {}``."""
    _, _, frames = frames_for("anthropic", 'call add with {"a": 1}', [ADD])
    _, _, more = frames_for("anthropic", "count to 2")
    records = [loads(item.data) for frame in frames + more for item in SSEDecoder().feed(frame)]
    starts = [
        record["content_block"] for record in records if record["type"] == "content_block_start"
    ]
    by_type = {block["type"]: block for block in starts}
    assert by_type["thinking"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert by_type["text"] == {"type": "text", "text": ""}
    assert set(by_type["tool_use"]) == {"type", "id", "name", "input"}
    assert by_type["tool_use"]["input"] == {}
    for record in records:
        if record["type"] == "message_start":
            assert set(record["message"]) == {
                "id",
                "type",
                "role",
                "model",
                "content",
                "stop_reason",
                "stop_sequence",
                "usage",
            }
        elif record["type"] in ("content_block_start", "content_block_delta"):
            assert isinstance(record["index"], int)
        elif record["type"] == "message_delta":
            assert set(record["delta"]) == {"stop_reason", "stop_sequence"}
            assert "output_tokens" in record["usage"]


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_every_content_delta_is_its_own_frame(vendor: Vendor, style: ThinkStyle) -> None:
    _, sim, frames = frames_for(vendor, "count to 6", style=style)
    _, increments = drive(vendor, frames)
    contents = [increment.content for increment in increments if increment.content]
    thoughts = [increment.thinking for increment in increments if increment.thinking]
    if vendor == "openai" and style == "tags":
        # The thinking rides inline in the content, before the answer's deltas.
        assert "".join(contents) == f"<think>{sim.thinking}</think>{sim.text}"
        assert contents[-len(sim.pieces) :] == list(sim.pieces)
        assert thoughts == []
    else:
        assert contents == list(sim.pieces)
        assert "".join(thoughts) == sim.thinking
    assert len(sim.pieces) == 6


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_call_arguments_arrive_in_fragments_to_assemble(vendor: Vendor) -> None:
    arguments = {"city": "Llanfairpwllgwyngyll", "note": "a long enough argument value"}
    _, sim, frames = frames_for(vendor, f"call lookup with {dumps(arguments)}", [LOOKUP])
    assert calls_of(sim) == [("lookup", arguments)]
    result, increments = drive(vendor, frames)
    fragments = [f.arguments for i in increments for f in i.calls if f.arguments]
    assert len(fragments) > 1
    assert "".join(fragments) == dumps(arguments)
    assert calls_of(result) == [("lookup", arguments)]


def test_ollama_sends_each_call_whole() -> None:
    text = 'call lookup with {"city": "Oslo"} and call add with {"a": 1, "b": 2}'
    _, sim, frames = frames_for("ollama", text, [LOOKUP, ADD])
    _, increments = drive("ollama", frames)
    fragments = [f for i in increments for f in i.calls]
    assert [(f.name, loads(f.arguments)) for f in fragments] == calls_of(sim)


def test_openai_stream_ends_with_done_and_usage_only_when_asked() -> None:
    with_usage = parse_request("openai", encode("openai", user("hi")))
    assert with_usage.include_usage
    frames = list(stream_frames(with_usage, answer(with_usage)))
    assert frames[-1] == b"data: [DONE]\n\n"
    last_data = loads(frames[-2][len(b"data: ") :])
    assert last_data["choices"] == []
    assert last_data["usage"]["total_tokens"] == answer(with_usage).usage.total

    body = loads(encode("openai", user("hi")))
    del body["stream_options"]
    without = parse_request("openai", dumpb(body))
    assert without.stream
    assert not without.include_usage
    sim = answer(without)
    frames = list(stream_frames(without, sim))
    assert frames[-1] == b"data: [DONE]\n\n"
    assert b'"usage"' not in b"".join(frames)
    result, _ = drive("openai", frames)
    assert_same(result, sim, usage=False)


def test_anthropic_stream_runs_from_message_start_to_message_stop() -> None:
    _, sim, frames = frames_for("anthropic", "19 + 23", [ADD])
    events = [item for item in SSEDecoder().feed(b"".join(frames)) if isinstance(item, SSEEvent)]
    assert events[0].event == "message_start"
    assert events[-1].event == "message_stop"
    for event in events:
        assert loads(event.data)["type"] == event.event
    assert calls_of(sim) == [("add", {"a": 19, "b": 23})]


def test_ollama_stream_ends_with_one_done_record_holding_the_counts() -> None:
    _, sim, frames = frames_for("ollama", "count to 3")
    records = [loads(frame) for frame in frames]
    assert [record["done"] for record in records] == [False] * (len(records) - 1) + [True]
    assert records[-1]["prompt_eval_count"] == sim.usage.prompt
    assert records[-1]["eval_count"] == sim.usage.completion
    assert all(record["model"] == MODEL for record in records)


# ---------------------------------------------------------------------------------------------
# Chunking invariance and determinism

CHUNK_CASES: list[tuple[str, tuple[ToolDefinition, ...], bool]] = [
    ("Hello, wörld ✓ — ünïcode", (), False),
    ("count to 8", (), True),
    ("What is 19 + 23 and 5 + 5?", (ADD,), True),
    ('call lookup with {"city": "Zürich"}', (LOOKUP,), False),
]


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from(CHUNK_CASES),
    form=st.sampled_from(FORMATS),
    cuts=st.lists(st.floats(min_value=0, max_value=1), max_size=30),
)
def test_chunking_never_changes_the_result(
    case: tuple[str, tuple[ToolDefinition, ...], bool],
    form: tuple[Vendor, ThinkStyle],
    cuts: list[float],
) -> None:
    text, tools, think = case
    vendor, style = form
    options = think_options(vendor) if think else None
    request = parse_request(vendor, encode(vendor, user(text), tools=tools, options=options))
    sim = answer(request)
    data = b"".join(stream_frames(request, sim, seq=2, think_style=style))
    points = sorted({int(cut * len(data)) for cut in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    assert b"".join(chunks) == data
    whole, _ = drive(vendor, [data])
    pieces, _ = drive(vendor, chunks)
    assert pieces == whole
    assert_same(pieces, sim)


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_chunking_byte_by_byte_gives_the_same_result(vendor: Vendor, style: ThinkStyle) -> None:
    text = 'Grüße! call lookup with {"city": "Köln"}'
    request, sim, frames = frames_for(vendor, text, [LOOKUP], style)
    data = b"".join(frames)
    whole, _ = drive(vendor, [data])
    assert drive(vendor, [data[i : i + 1] for i in range(len(data))])[0] == whole
    assert_same(whole, sim, usage=request.include_usage)


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_equal_requests_give_equal_bytes(vendor: Vendor, style: ThinkStyle) -> None:
    def once() -> tuple[SimRequest, bytes, bytes]:
        # Fresh messages each time (new message ids, which the encoders do not send).
        messages = [Message.system("sys"), *tool_conversation(["4", "5"])]
        body = encode(vendor, messages, tools=[ADD], options=think_options(vendor))
        request = parse_request(vendor, body)
        sim = answer(request)
        frames = b"".join(stream_frames(request, sim, seq=7, think_style=style))
        return request, frames, dumpb(response_body(request, sim, seq=7, think_style=style))

    first, second = once(), once()
    assert first == second
    assert answer(first[0]) == answer(second[0])


def ids_of(vendor: Vendor, request: SimRequest, seq: int) -> tuple[list[str], list[str]]:
    """(response ids, call ids) of the one-shot body and the stream for ``seq``."""
    sim = answer(request)
    body = response_body(request, sim, seq=seq)
    events = SSEDecoder().feed(b"".join(stream_frames(request, sim, seq=seq)))
    datas = [loads(e.data) for e in events if isinstance(e, SSEEvent) and e.data != "[DONE]"]
    if vendor == "openai":
        message_ids = [body["id"], *(data["id"] for data in datas)]
        call_ids = [call["id"] for call in body["choices"][0]["message"]["tool_calls"]]
    else:
        starts = [data["message"] for data in datas if data["type"] == "message_start"]
        message_ids = [body["id"], *(start["id"] for start in starts)]
        call_ids = [block["id"] for block in body["content"] if block["type"] == "tool_use"]
    return message_ids, call_ids


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_seq_makes_the_ids(vendor: Vendor) -> None:
    request = parse_request(vendor, encode(vendor, user("1 + 2 and 3 + 4"), tools=[ADD]))
    messages_1, calls_1 = ids_of(vendor, request, 1)
    messages_2, calls_2 = ids_of(vendor, request, 2)
    # One response id per response, used throughout its stream.
    assert len(set(messages_1)) == 1
    assert len(set(messages_2)) == 1
    assert messages_1[0] != messages_2[0]
    assert len(calls_1) == len(set(calls_1)) == 2
    assert not set(calls_1) & set(calls_2)
    # The streamed calls carry the same ids as the one-shot body.
    sim = answer(request)
    streamed_ids = [call.id for call in streamed(request, seq=1).calls]
    assert streamed_ids == calls_1
    assert calls_of(sim) == [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})]


def test_ollama_has_no_ids_so_seq_changes_nothing() -> None:
    request = parse_request("ollama", encode("ollama", user("1 + 2"), tools=[ADD]))
    sim = answer(request)
    one = b"".join(stream_frames(request, sim, seq=1))
    two = b"".join(stream_frames(request, sim, seq=2))
    assert one == two
    assert response_body(request, sim, seq=1) == response_body(request, sim, seq=2)


@pytest.mark.parametrize("vendor", ["anthropic", "ollama"])
def test_think_style_only_concerns_openai(vendor: Vendor) -> None:
    request = parse_request(vendor, encode(vendor, user("hi"), options=think_options(vendor)))
    sim = answer(request)
    assert sim.thinking
    tags = b"".join(stream_frames(request, sim, think_style="tags"))
    field = b"".join(stream_frames(request, sim, think_style="field"))
    assert tags == field
    assert response_body(request, sim, think_style="tags") == response_body(
        request, sim, think_style="field"
    )
