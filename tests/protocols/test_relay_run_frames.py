"""Relay protocol version 3, without an event loop: a run's frames and the events they stand
for (both ways, and through the events' wire form), ``seq`` on a run's frames, the ``watch``,
``run`` and ``gap`` frames, a request's ``cancel_on_disconnect``, and 002's continuation rule
for polling clients (:class:`RunContinuation`)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_relay_frames import NONEMPTY, TOOL_CALLS, provider_results

from protocols.errors import ProtocolError, ProviderError, ValidationError
from protocols.live import EventLog, RunEvent, event_from_json
from protocols.messages import Message, ProviderResult, ToolCall
from protocols.relay import (
    ERROR_MESSAGES,
    MAX_SAFE_INTEGER,
    RUN_ERROR_TYPE,
    AbortFrame,
    ApprovalFrame,
    DeltaFrame,
    GapFrame,
    HttpRequest,
    ReadyFrame,
    ResultFrame,
    RunContinuation,
    RunFrame,
    ServerFrame,
    StreamFrame,
    WatchFrame,
    decode_client_frame,
    decode_http_request,
    decode_server_frame,
    encode_frame,
    error_frame,
    event_frame,
    frame_events,
    parse_start_index,
    run_event_json,
    run_event_sse,
    with_seq,
)

SETTINGS = settings(max_examples=60, deadline=None)

RUN_FRAMES: st.SearchStrategy[ServerFrame] = st.one_of(
    st.builds(
        DeltaFrame,
        id=st.just("r1"),
        channel=st.sampled_from(["content", "thinking"]),
        text=NONEMPTY,
    ),
    st.builds(ResultFrame, id=st.just("r1"), result=provider_results()),
    st.builds(AbortFrame, id=st.just("r1"), partial=provider_results()),
    st.builds(error_frame, st.sampled_from(sorted(ERROR_MESSAGES)), st.just("r1")),
    st.builds(ApprovalFrame, id=st.just("r1"), call=TOOL_CALLS, reason=st.none() | NONEMPTY),
)


def logged(frames: list[ServerFrame]) -> tuple[EventLog, list[int]]:
    """The frames' events in a log, and each frame's seq (its last event's)."""
    log = EventLog("run_x")
    seqs = []
    for frame in frames:
        seq = 0
        for kind, data in frame_events(frame):
            seq = log.add(kind, data, 1.0)
        seqs.append(seq)
    return log, seqs


# -- frames and events ---------------------------------------------------------------------------


@SETTINGS
@given(st.lists(RUN_FRAMES, min_size=1, max_size=6), st.sampled_from(["r1", "w9"]))
def test_a_runs_frames_come_back_from_its_events_with_their_seq(
    frames: list[ServerFrame], request_id: str
) -> None:
    # Only the last may be terminal (nothing follows a terminal event).
    frames = [f for f in frames[:-1] if isinstance(f, DeltaFrame | ApprovalFrame)] + frames[-1:]
    log, seqs = logged(frames)
    events = log.read(0, limit=10_000)
    assert [event.seq for event in events] == list(range(1, log.last + 1))  # no gaps
    back = [event_frame(event, request_id) for event in events]
    shown = [frame for frame in back if frame is not None]
    assert len(shown) == len(frames)
    for frame, seq, again in zip(frames, seqs, shown, strict=True):
        # The same frame, under the follower's request id, carrying its seq.
        assert again == with_seq(_renamed(frame, request_id), seq)
        assert decode_server_frame(encode_frame(again)) == again
    # The events' wire form (SSE, polling answers) gives the same frames.
    wire = [event_from_json(json.loads(json.dumps(run_event_json(event)))) for event in events]
    assert [event_frame(event, request_id) for event in wire] == back


def _renamed(frame: ServerFrame, request_id: str) -> ServerFrame:
    import attrs

    return attrs.evolve(frame, id=request_id)  # type: ignore[arg-type]


def test_a_result_is_logged_as_its_calls_its_usage_and_the_terminal_event() -> None:
    calls = (ToolCall("c1", "add", {"a": 1}), ToolCall("c2", "ls"))
    result = ProviderResult(content="hi", calls=calls, denied={"c2": "no"})
    events = frame_events(ResultFrame("r1", result))
    assert [kind for kind, _ in events] == ["tool_call", "tool_call", "usage", "finished"]
    assert [data["call"] for _, data in events[:2]] == list(calls)
    assert events[2][1] == {"usage": None, "estimated": False, "finish": "tool_calls"}
    assert events[3][1]["response"] == result
    # On a wire, the result is JSON.
    finished = RunEvent("run_x", 4, events[3][0], 1.0, events[3][1])
    assert run_event_json(finished)["data"]["response"]["denied"] == {"c2": "no"}
    assert event_frame(event_from_json(run_event_json(finished)), "r1") == ResultFrame(
        "r1", result, 4
    )
    record = run_event_sse(finished).decode()
    assert record.startswith("id: 4\nevent: finished\ndata: {")
    assert json.loads(record.split("data: ", 1)[1]) == run_event_json(finished)
    # The failed event of an error says its code the way every run's failed event does.
    ((kind, data),) = frame_events(error_frame("upstream", "r1"))
    assert kind == "failed"
    assert data["error"] == {
        "type": RUN_ERROR_TYPE,
        "code": "upstream",
        "message": ERROR_MESSAGES["upstream"],
        "retryable": True,
    }
    # Frames that are not a run's events stand for none.
    assert frame_events(error_frame("timeout")) == []  # the connection's, not a request's
    assert frame_events(ReadyFrame(3, 1024, 4)) == []
    assert frame_events(RunFrame("r1", "run_x")) == []


def test_events_no_frame_stands_for_are_skipped_and_a_gap_is_a_gap_frame() -> None:
    usage = RunEvent("run_x", 3, "usage", 0.0, {"usage": None})
    assert event_frame(usage, "r1") is None
    assert event_frame(RunEvent("run_x", 1, "started", 0.0, {}), "r1") is None
    gap = RunEvent("run_x", 9, "gap", 0.0, {"first": 4})
    assert event_frame(gap, "r1") == GapFrame("r1", 4, 9)
    # A failed event with a code the relay does not send is an upstream failure to a client.
    failed = RunEvent("run_x", 2, "failed", 0.0, {"error": {"code": "teapot"}})
    assert event_frame(failed, "r1") == error_frame("upstream", "r1", 2)
    with pytest.raises(ProtocolError, match="finished event is malformed"):
        event_frame(RunEvent("run_x", 2, "finished", 0.0, {"result": {}}), "r1")
    with pytest.raises(ProtocolError, match="content event is malformed"):
        event_frame(RunEvent("run_x", 2, "content", 0.0, {"text": ""}), "r1")


def test_with_seq_sets_the_seq_of_a_runs_frames_only() -> None:
    delta = with_seq(DeltaFrame("r1", "content", "x"), 7)
    assert delta == DeltaFrame("r1", "content", "x", 7)
    assert (
        encode_frame(delta) == '{"type":"delta","id":"r1","channel":"content","text":"x","seq":7}'
    )
    assert with_seq(error_frame("upstream", "r1"), 3) == error_frame("upstream", "r1", 3)
    with pytest.raises(ValidationError, match="RunFrame carries no seq"):
        with_seq(RunFrame("r1", "run_x"), 1)


# -- the new frames ------------------------------------------------------------------------------


def test_a_stream_frame_says_cancel_on_disconnect_only_when_it_is_false() -> None:
    keep = StreamFrame("r1", [Message.user("hi")])
    assert "cancel_on_disconnect" not in encode_frame(keep)  # what a version 2 relay decodes
    outlive = StreamFrame("r1", [Message.user("hi")], cancel_on_disconnect=False)
    text = encode_frame(outlive)
    assert json.loads(text)["cancel_on_disconnect"] is False
    assert decode_client_frame(text) == outlive
    with pytest.raises(ValidationError, match="cancel_on_disconnect must be true or false"):
        StreamFrame("r1", [Message.user("hi")], cancel_on_disconnect=0)  # type: ignore[arg-type]


def test_the_new_frames_check_their_fields() -> None:
    assert encode_frame(WatchFrame("w1", "run_x")) == '{"type":"watch","id":"w1","run_id":"run_x"}'
    assert decode_client_frame('{"type":"watch","id":"w1","run_id":"run_x","after":5}') == (
        WatchFrame("w1", "run_x", 5)
    )
    for bad in (
        '{"type":"watch","id":"w1","run_id":"","after":5}',
        '{"type":"watch","id":"w1","run_id":"run_x","after":-1}',
        '{"type":"watch","id":"w1","run_id":"run_x","after":true}',
        '{"type":"watch","id":"w1","run_id":"run_x","after":9007199254740992}',
        '{"type":"watch","id":"w1","run_id":"' + "x" * 65 + '"}',
        '{"type":"watch","id":"w1"}',
    ):
        with pytest.raises(ProtocolError):
            decode_client_frame(bad)
    with pytest.raises(ValidationError, match="first must not be after its seq"):
        GapFrame("r1", 5, 4)
    with pytest.raises(ValidationError, match="seq must be a seq"):
        DeltaFrame("r1", "content", "x", 0)
    with pytest.raises(ProtocolError):
        decode_server_frame('{"type":"run","id":"r1"}')


def test_an_http_request_may_ask_for_version_3_and_a_run_that_outlives_it() -> None:
    plain = decode_http_request(b'{"messages":[{"role":"user","content":"hi"}]}')
    assert (plain.version, plain.cancel_on_disconnect) == (None, True)
    body = b'{"messages":[{"role":"user","content":"hi"}],"version":3,"cancel_on_disconnect":false}'
    asked = decode_http_request(body)
    assert (asked.version, asked.cancel_on_disconnect) == (3, False)
    with pytest.raises(ProtocolError):
        decode_http_request(b'{"messages":[{"role":"user","content":"hi"}],"version":4}')
    with pytest.raises(ValidationError, match="version must be one of 1, 2, 3"):
        HttpRequest([Message.user("hi")], version=0)


# -- startIndex -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (None, 0),
        ("", 0),
        ("0", 0),
        ("17", 17),
        (" 5 ", 5),
        (str(MAX_SAFE_INTEGER), MAX_SAFE_INTEGER),
    ],
)
def test_a_start_index_is_a_non_negative_safe_integer(text: str | None, value: int) -> None:
    assert parse_start_index(text) == value


@pytest.mark.parametrize(
    "text", ["-1", "1.5", "1e3", "abc", "٣", str(MAX_SAFE_INTEGER + 1), "9" * 40, "0x10"]
)
def test_anything_else_is_refused_as_a_start_index(text: str) -> None:
    with pytest.raises(ValidationError, match="non-negative safe integer"):
        parse_start_index(text)


# -- 002's continuation rule ----------------------------------------------------------------------


def run_events(count: int, terminal: str = "finished") -> list[RunEvent]:
    events = [
        RunEvent("run_x", seq, "content", 0.0, {"text": f"{seq} "}) for seq in range(1, count)
    ]
    events.append(RunEvent("run_x", count, terminal, 0.0, {"response": {}}))
    return events


@st.composite
def answers(draw: st.DrawFn, events: list[RunEvent]) -> list[tuple[int, int]]:
    """A server's answers as (first index, count) slices: each starts at or before where the
    client is (answers may overlap what it had), some are empty (polling gaps)."""
    out = []
    position = 0
    while position < len(events):
        start = draw(st.integers(0, position))
        count = draw(st.integers(0, 4))
        out.append((start, count))
        position = max(position, start + count)
        if len(out) > 60:
            out.append((position, len(events) - position))
            break
    return out


@SETTINGS
@given(st.data(), st.integers(1, 25))
def test_continuations_deliver_every_event_once_in_order_through_the_terminal(
    data: st.DataObject, count: int
) -> None:
    events = run_events(count)
    cursor = RunContinuation("run_x", limit=None)
    delivered: list[RunEvent] = []
    for start, size in data.draw(answers(events)):
        if cursor.done:
            break
        asked = int(cursor.query()["startIndex"])
        chunk = events[start : start + size]
        got = cursor.feed(chunk, tail_index=start)
        delivered.extend(got)
        assert cursor.polling_gap == (not got and not cursor.done)
        assert cursor.start_index == (got[-1].seq if got else asked)
    assert delivered == events
    assert cursor.done
    with pytest.raises(ValidationError, match="the stream has ended"):
        cursor.query()
    with pytest.raises(ValidationError, match="the stream has ended"):
        cursor.feed(events)


def test_nothing_after_the_terminal_event_belongs_to_the_stream() -> None:
    events = run_events(3, terminal="cancelled")
    stray = RunEvent("run_x", 4, "content", 0.0, {"text": "late"})
    cursor = RunContinuation("run_x")
    assert cursor.feed([*events, stray]) == events
    assert cursor.done
    assert cursor.start_index == 3


def test_the_continuation_limit_counts_follow_ups_gaps_included() -> None:
    events = run_events(5)
    cursor = RunContinuation("run_x", limit=2)
    assert cursor.query() == {"startIndex": "0"}
    assert cursor.feed(events[:1]) == events[:1]  # the first answer: not a continuation
    assert cursor.query() == {"startIndex": "1"}
    assert cursor.feed([]) == []  # follow-up 1: a polling gap
    assert cursor.polling_gap
    assert cursor.query() == {"startIndex": "1"}  # the same startIndex again
    assert cursor.feed(events[1:3]) == events[1:3]  # follow-up 2
    with pytest.raises(ProviderError) as spent:
        cursor.query()
    assert (spent.value.code, spent.value.retryable) == ("continuation_limit", False)
    # With a limit of 0, any answer that does not end the run fails.
    none = RunContinuation("run_x", limit=0)
    none.feed(events[:2])
    with pytest.raises(ProviderError, match="no terminal event after 0 continuations"):
        none.query()
    ended = RunContinuation("run_x", limit=0)
    assert ended.feed(events) == events
    assert ended.done


def test_a_start_index_is_checked_before_any_request_and_an_answer_may_not_skip_ahead() -> None:
    for bad in (-1, MAX_SAFE_INTEGER + 1, 1.0, True, math.nan):
        with pytest.raises(ValidationError, match="startIndex must be a non-negative safe"):
            RunContinuation("run_x", start_index=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="limit must be"):
        RunContinuation("run_x", limit=-1)
    with pytest.raises(ValidationError, match="run_id must be"):
        RunContinuation("")
    cursor = RunContinuation("run_x", start_index=2)
    assert cursor.query() == {"startIndex": "2"}
    with pytest.raises(ProtocolError, match="starts after seq 4"):
        cursor.feed([], tail_index=4)  # it would hide events 3 and 4
    got = cursor.feed(run_events(4), tail_index=0)  # overlapping: what it had is skipped
    assert [event.seq for event in got] == [3, 4]
