"""The run's event log, sans-IO (issue 25): the strict wire codec, the bounded in-memory log and
the events a durable job's journal gives -- each checked by properties, without an event loop.

* Every kind's event goes through :func:`event_to_json` and :func:`event_from_json` (and strict
  JSON text between them) unchanged; data that is not what :class:`RunEvent` lists for its kind
  -- a field missing, unknown or of the wrong type, a text too long, an unknown kind -- is
  refused with ``ProtocolError(code="decode")``.
* :class:`EventLog`: any follower, reading from any seq in pages of any size while events are
  added, reads each event it can have once, in order, under the seq it was added with, and a
  ``gap`` naming exactly those it cannot have; the terminal event ends the log.
* :class:`JournalEvents`: the same entries give the same events under the same seqs in any
  split into ``feed`` calls; the events of a prefix of a journal are a prefix of the journal's
  (a follower that derived them before the journal grew, in any process, never sees one seq
  with two contents); a continued attempt begins with a ``rewind`` to the last seq before it,
  then its ``takeover``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from protocols._json import dumps, loads
from protocols.codec import to_json
from protocols.errors import ProtocolError, ValidationError
from protocols.jobs import (
    AnswerEntry,
    AskEntry,
    AttemptEntry,
    Entry,
    InputEntry,
    IntentEntry,
    MessageEntry,
    RequestEntry,
    ResponseEntry,
    ResultEntry,
    StreamEntry,
    TerminalEntry,
)
from protocols.live import (
    KINDS,
    MAX_ID_CHARS,
    MAX_TEXT_CHARS,
    TERMINAL,
    EventLog,
    JournalEvents,
    RunEvent,
    event_from_json,
    event_to_json,
)
from protocols.messages import (
    AgentResult,
    Message,
    ProviderResult,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    Usage,
)

# -- strategies ------------------------------------------------------------------------------------

UTF8 = st.characters(codec="utf-8")
TEXT = st.text(alphabet=UTF8, max_size=12)
IDS = st.text(alphabet=UTF8, min_size=1, max_size=10)
MAYBE_IDS = st.none() | IDS
SEQS = st.integers(min_value=1, max_value=10**18 - 1)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), TEXT)
ARGUMENTS = st.dictionaries(TEXT, JSON_SCALARS, max_size=3)
CALLS = st.builds(ToolCall, id=IDS, name=IDS, arguments=ARGUMENTS)
RESULTS = st.one_of(
    st.builds(ToolSuccess, id=IDS, name=IDS, value=JSON_SCALARS),
    st.builds(ToolFailure, id=IDS, name=IDS, error=IDS),
)
USAGES = st.builds(Usage, prompt=st.integers(0, 10**6), completion=st.integers(0, 10**6))
MESSAGES = st.one_of(
    st.builds(Message.user, TEXT),
    st.builds(
        Message.assistant,
        TEXT,
        calls=st.lists(CALLS, max_size=2, unique_by=lambda call: call.id),
    ),
)
AGENT_RESULTS = st.builds(
    AgentResult,
    content=TEXT,
    messages=st.lists(MESSAGES, max_size=2).map(tuple),
    usage=st.none() | USAGES,
    stop=st.sampled_from(StopReason),
    turns=st.integers(0, 100),
    run_id=TEXT,
)
ASKED = st.fixed_dictionaries({"call_id": IDS, "tool": IDS, "reason": TEXT})

#: Per kind, the data :class:`RunEvent` lists for it.
DATA: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "started": st.fixed_dictionaries({"agent": MAYBE_IDS}),
    "turn": st.fixed_dictionaries({"turn": st.integers(0, 10**6)}),
    "content": st.fixed_dictionaries({"text": TEXT}),
    "thinking": st.fixed_dictionaries({"text": TEXT}),
    "tool_call": st.fixed_dictionaries({"call": CALLS}),
    "tool_result": st.fixed_dictionaries({"result": RESULTS}),
    "progress": st.fixed_dictionaries({"call_id": MAYBE_IDS, "text": TEXT}),
    "usage": st.fixed_dictionaries(
        {
            "usage": st.none() | USAGES,
            "estimated": st.booleans(),
            "finish": st.none() | st.sampled_from(["stop", "tool_calls", "length"]),
        }
    ),
    "retry": st.fixed_dictionaries(
        {
            "attempt": st.integers(0, 100),
            "delay": st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
            "reason": TEXT,
        }
    ),
    "fallback": st.fixed_dictionaries(
        {"provider": IDS, "next": IDS, "reason": TEXT, "rewind": st.booleans()}
    ),
    "guard": st.fixed_dictionaries({"reason": TEXT}),
    "guardrail": st.fixed_dictionaries(
        {
            "name": IDS,
            "kind": st.sampled_from(["input", "output", "tool"]),
            "reason": TEXT,
            "call_id": MAYBE_IDS,
        }
    ),
    "fault": st.fixed_dictionaries({"reason": TEXT}),
    "message": st.fixed_dictionaries({"message": MESSAGES}),
    "approval_requested": st.fixed_dictionaries(
        {"call_id": IDS, "tool": IDS, "reason": st.none() | TEXT}
    ),
    "approval_answered": st.fixed_dictionaries(
        {"call_id": IDS, "allow": st.booleans(), "reason": TEXT}
    ),
    "subagent_started": st.fixed_dictionaries(
        {"call_id": MAYBE_IDS, "agent": MAYBE_IDS, "run_id": MAYBE_IDS}
    ),
    "subagent_finished": st.fixed_dictionaries(
        {"call_id": MAYBE_IDS, "run_id": MAYBE_IDS, "status": MAYBE_IDS}
    ),
    "handoff": st.fixed_dictionaries({"call_id": MAYBE_IDS, "agent": MAYBE_IDS}),
    "compaction": st.fixed_dictionaries(
        {"reason": st.sampled_from(["window", "overflow"]), "replaced": st.integers(0, 10**4)}
    ),
    "takeover": st.fixed_dictionaries(
        {
            "fence": st.integers(0, 10**9),
            "reason": st.sampled_from(["takeover", "retry", "answered"]),
        }
    ),
    "rewind": st.fixed_dictionaries({"to": st.integers(0, 10**6)}),
    "gap": st.fixed_dictionaries({"first": st.integers(1, 10**6)}),
    "finished": st.fixed_dictionaries({"result": AGENT_RESULTS}),
    "cancelled": st.fixed_dictionaries({"result": st.none() | AGENT_RESULTS}),
    "failed": st.fixed_dictionaries(
        {
            "error": st.fixed_dictionaries(
                {"type": IDS, "code": MAYBE_IDS, "message": TEXT},
            )
        }
    ),
    "awaiting_input": st.fixed_dictionaries({"calls": st.lists(ASKED, max_size=3)}),
}


PROVIDER_RESULTS = st.builds(
    ProviderResult,
    content=TEXT,
    thinking=TEXT,
    calls=st.lists(CALLS, max_size=2, unique_by=lambda call: call.id).map(tuple),
    usage=st.none() | USAGES,
)
#: The other form of some kinds' data: a relay run's (a provider call the relay made a run
#: of), whose log keeps the provider's response and the asked call as JSON.
RELAY_DATA: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "finished": st.fixed_dictionaries({"response": PROVIDER_RESULTS.map(to_json)}),
    "cancelled": st.fixed_dictionaries({"response": PROVIDER_RESULTS.map(to_json)}),
    "approval_requested": st.fixed_dictionaries(
        {"call_id": IDS, "tool": IDS, "reason": TEXT, "call": CALLS.map(to_json)}
    ),
    "failed": st.fixed_dictionaries(
        {
            "error": st.fixed_dictionaries(
                {"type": IDS, "code": MAYBE_IDS, "message": TEXT, "retryable": st.booleans()}
            )
        }
    ),
}


@st.composite
def events(draw: st.DrawFn, kind: str, relay: bool = False) -> RunEvent:
    data = draw((RELAY_DATA if relay else DATA)[kind])
    seq = draw(SEQS)
    if kind == "gap":
        seq = max(seq, data["first"])
    if kind == "rewind":
        seq = max(seq, data["to"] + 1)
    time = draw(st.floats(0, 1e10, allow_nan=False) | st.just(math.nan))
    return RunEvent(draw(IDS), seq, kind, time, data)


def same(a: RunEvent, b: RunEvent) -> bool:
    """Equal events (a time that is not a number equal to one that is not either)."""
    both_nan = math.isnan(a.time) and math.isnan(b.time)
    return (a.run_id, a.seq, a.kind, a.data) == (b.run_id, b.seq, b.kind, b.data) and (
        both_nan or a.time == b.time
    )


# -- the wire codec --------------------------------------------------------------------------------


def test_every_kind_has_a_strategy() -> None:
    assert set(DATA) == KINDS


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_kind_round_trips_through_strict_json_text(kind: str, data: st.DataObject) -> None:
    event = data.draw(events(kind))
    wire = event_to_json(event)
    text = dumps(wire)  # strict JSON: it serialises
    back = event_from_json(loads(text))
    assert same(back, event)
    assert back.terminal == (kind in TERMINAL)
    assert ("time" in wire) == math.isfinite(event.time)
    assert event_to_json(back) == wire


@pytest.mark.parametrize("kind", sorted(RELAY_DATA))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_relay_runs_events_round_trip_with_their_json_as_it_is(
    kind: str, data: st.DataObject
) -> None:
    event = data.draw(events(kind, relay=True))
    back = event_from_json(loads(dumps(event_to_json(event))))
    assert same(back, event)  # the response and the call stay JSON, checked


def valid(kind: str = "content", **data: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"run_id": "r", "seq": 3, "kind": kind, "time": 1.0}
    base["data"] = data if data else {"text": "hi"}
    return base


@pytest.mark.parametrize(
    ("wire", "match"),
    [
        ([], "JSON object"),
        ({**valid(), "extra": 1}, "unknown fields"),
        ({**valid(), "kind": "nope"}, "unknown event kind"),
        ({**valid(), "kind": 5}, "unknown event kind"),
        ({**valid(), "run_id": ""}, "run_id"),
        ({**valid(), "run_id": "r" * (MAX_ID_CHARS + 1)}, "run_id"),
        ({**valid(), "seq": 0}, "seq"),
        ({**valid(), "seq": True}, "seq"),
        ({**valid(), "seq": 10**18}, "seq"),
        ({**valid(), "time": "now"}, "time"),
        ({**valid(), "time": math.inf}, "time"),
        ({**valid(), "time": False}, "time"),
        ({k: v for k, v in valid().items() if k != "data"}, "lacks its data"),
        (valid(text=5), r"data\.text must be a string"),
        (valid(text="x" * (MAX_TEXT_CHARS + 1)), "longer than"),
        (valid(text="x", more="y"), "unknown fields 'more'"),
        ({**valid(), "data": {}}, "lacks text"),
        ({**valid(), "data": []}, "must be an object"),
        (valid("turn", turn=-1), "turn must be between"),
        (valid("turn", turn=1.0), "turn must be an int"),
        (valid("tool_call", call={"id": "c"}), "call is not a ToolCall"),
        (valid("tool_call", call=None), "call must be a ToolCall"),
        (valid("finished", result=None), "result must be a AgentResult"),
        (valid("usage", usage=None, estimated=0, finish=None), "estimated must be true or false"),
        (valid("retry", attempt=1, delay=-1, reason=""), "delay must be a finite number"),
        (valid("compaction", reason="because", replaced=3), "reason must be one of"),
        (valid("takeover", fence=2, reason="stolen"), "reason must be one of"),
        (valid("approval_requested", call_id="c", tool="t" * 1001, reason=""), "longer than"),
        (valid("rewind", to=3), "rewind's to"),
        (valid("gap", first=4), "gap's first"),
        (valid("failed", error={"type": "E", "message": "m"}), r"error lacks code"),
        (valid("failed", error={"type": "E", "code": 1, "message": "m"}), r"error\.code"),
        (valid("awaiting_input", calls={}), "calls must be a list"),
        (valid("finished", response={"content": 5}), "response is not a ProviderResult"),
        (valid("finished", response={}, result=None), "unknown fields 'result'"),
        (valid("cancelled", response=[]), "response must be a ProviderResult"),
        (
            valid("approval_requested", call_id="c", tool="t", reason="", call={"id": "c"}),
            "call is not a ToolCall",
        ),
        (
            valid("failed", error={"type": "E", "code": None, "message": "", "retryable": 1}),
            "retryable must be true or false",
        ),
        (
            valid("awaiting_input", calls=[{"call_id": "c", "tool": "t", "reason": "", "x": 1}]),
            r"calls\[0\] has unknown fields 'x'",
        ),
        (valid("awaiting_input", calls=[{"call_id": "c"}] * 1001), "more than 1000"),
    ],
)
def test_data_that_is_not_what_its_kind_lists_is_refused(wire: Any, match: str) -> None:
    with pytest.raises(ProtocolError, match=match) as refused:
        event_from_json(wire)
    assert refused.value.code == "decode"


def test_a_refusal_does_not_echo_a_long_unknown_name() -> None:
    with pytest.raises(ProtocolError) as refused:
        event_from_json({**valid(), "kind": "k" * 10_000})
    assert len(str(refused.value)) < 200


# -- the in-memory log ----------------------------------------------------------------------------

#: Steps of a log's life: add an event (True) or let a follower read a page (its size).
STEPS = st.lists(st.one_of(st.just(True), st.integers(1, 5)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 8),
    steps=STEPS,
    followers=st.lists(st.integers(0, 12), min_size=1, max_size=4),
)
def test_a_follower_of_a_bounded_log_reads_each_event_once_or_a_gap_for_it(
    capacity: int, steps: list[bool | int], followers: list[int]
) -> None:
    log = EventLog("run", capacity=capacity)
    added: list[str] = []
    positions = list(followers)  # each follower's `after`
    seen: list[dict[int, str]] = [{} for _ in followers]
    gaps: list[set[int]] = [set() for _ in followers]

    def read(index: int, limit: int) -> None:
        after = positions[index]
        page = log.read(after, limit, now=9.0)
        assert len(page) <= limit
        for event in page:
            assert event.seq > after, "in order, never twice"
            if event.kind == "gap":
                assert event.data["first"] == after + 1
                assert event.seq < log.first
                assert event.time == 9.0
                gaps[index].update(range(event.data["first"], event.seq + 1))
            elif event.kind == "finished":
                assert event.seq == after + 1 == log.last
                assert event.terminal
            else:
                assert event.seq == after + 1, "no silent hole"
                assert event.data == {"text": added[event.seq - 1]}
                seen[index][event.seq] = event.data["text"]
            after = event.seq
        positions[index] = after

    for number, step in enumerate(steps):
        if step is True:
            seq = log.add("content", f"delta {len(added) + 1}", float(number))
            added.append(f"delta {len(added) + 1}")
            assert seq == len(added) == log.last
            assert log.first == max(1, len(added) - capacity + 1)
        else:
            read(number % len(followers), step)
    end = log.add("finished", {"result": AgentResult(content="done")}, 99.0)
    with pytest.raises(ValidationError, match="after the terminal"):
        log.add("content", "late", 100.0)
    assert log.ended == 99.0
    for index in range(len(followers)):
        while positions[index] < end:
            read(index, 3)
        assert log.read(positions[index]) == []
        start = min(followers[index], len(added))
        # Every event after the follower's start: read once, or named by a gap -- never both.
        assert set(seen[index]) | gaps[index] >= set(range(start + 1, len(added) + 1))
        assert not set(seen[index]) & gaps[index]
        kept = range(max(log.first, start + 1), len(added) + 1)
        assert set(kept) <= set(seen[index]), "what the log keeps is never skipped"


def test_every_reader_of_an_event_gets_the_same_object() -> None:
    # (What makes a thousand followers cheap: each event is made once, when first read.)
    log = EventLog("r", capacity=3)
    for number in range(5):
        log.add("content", f"d{number}", float(number))
    first, again = log.read(0, now=7.0), log.read(0, now=8.0)
    assert [event.seq for event in first] == [2, 3, 4, 5]
    assert first[0].kind == "gap"
    assert again[0].time == 8.0  # a gap is each reader's own
    assert all(a is b for a, b in zip(first[1:], again[1:], strict=True))
    assert [event.data for event in first[1:]] == [{"text": f"d{n}"} for n in (2, 3, 4)]


def test_a_log_refuses_a_capacity_or_position_that_is_not_one() -> None:
    for capacity in (0, -1, True, 1.5):
        with pytest.raises(ValidationError, match="capacity"):
            EventLog("r", capacity=capacity)  # type: ignore[arg-type]
    log = EventLog("r")
    for after in (-1, True, "3"):
        with pytest.raises(ValidationError, match="after"):
            log.read(after)  # type: ignore[arg-type]


# -- a durable job's events -----------------------------------------------------------------------


@st.composite
def journals(draw: st.DrawFn) -> list[Entry]:
    """A well-formed journal: an input, turns that stream deltas and call tools, continued
    attempts (takeovers, retries) between any two entries, approvals, maybe a terminal."""
    entries: list[Entry] = [InputEntry((Message.user("question"),))]
    fence = 1
    for turn in range(1, draw(st.integers(0, 4)) + 1):
        entries.append(RequestEntry(turn))
        for _ in range(draw(st.integers(0, 3))):
            deltas = draw(
                st.lists(st.tuples(st.sampled_from(["content", "thinking"]), TEXT), max_size=3)
            )
            entries.append(StreamEntry(turn, tuple(deltas)))
        if draw(st.booleans()):  # a takeover cut the turn: it is asked again
            fence += 1
            entries.append(AttemptEntry(fence, draw(st.sampled_from(["takeover", "retry"]))))
            continue
        calls = tuple(ToolCall(f"c{turn}-{i}", "tool", {}) for i in range(draw(st.integers(0, 2))))
        entries.append(ResponseEntry(Message.assistant("", calls=calls), draw(st.none() | USAGES)))
        asking: bool = draw(st.booleans())
        if calls and asking:
            entries.append(AskEntry(tuple(c.id for c in calls), {c.id: "why" for c in calls}))
            fence += 1
            entries.append(AttemptEntry(fence, "answered"))
            allows = draw(st.lists(st.booleans(), min_size=len(calls), max_size=len(calls)))
            entries.extend(
                AnswerEntry(c.id, allow, "ok") for c, allow in zip(calls, allows, strict=True)
            )
        for call in calls:
            entries.append(IntentEntry(call, f"job:{turn}:{call.id}"))
            if draw(st.booleans()):
                fence += 1
                entries.append(AttemptEntry(fence, "takeover"))
            entries.append(ResultEntry(ToolSuccess(call.id, call.name, "ok")))
        if draw(st.booleans()):
            entries.append(MessageEntry(Message.user("feedback")))
    ending = draw(st.sampled_from(["open", "finished", "cancelled", "failed"]))
    if ending == "finished":
        entries.append(TerminalEntry(StopReason.COMPLETE, AgentResult(content="done")))
    elif ending == "cancelled":
        entries.append(TerminalEntry(StopReason.CANCELLED))
    elif ending == "failed":
        entries.append(TerminalEntry(error="ProviderError: it broke"))
    return entries


def derive(entries: list[Entry], cuts: Sequence[int] = ()) -> list[RunEvent]:
    derived = JournalEvents("job", agent="helper")
    out: list[RunEvent] = []
    start = 0
    for cut in [*sorted({c % (len(entries) + 1) for c in cuts}), len(entries)]:
        out += derived.feed(entries[start:cut], 5.0)
        start = cut
    assert derived.entries == len(entries)
    assert derived.last == len(out)
    return out


@settings(max_examples=300, deadline=None)
@given(entries=journals(), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_the_same_journal_gives_the_same_events_in_any_split(
    entries: list[Entry], cuts: list[int]
) -> None:
    whole = derive(entries)
    assert derive(entries, cuts) == whole
    assert [event.seq for event in whole] == list(range(1, len(whole) + 1))
    assert whole[0].kind == "started"
    assert whole[0].data == {"agent": "helper"}
    for event in whole:  # each event is one the wire carries as it is
        assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
    deltas = [
        (("thinking" if e.kind == "thinking" else "content"), e.data["text"])
        for e in whole
        if e.kind in ("content", "thinking")
    ]
    assert deltas == [d for e in entries if isinstance(e, StreamEntry) for d in e.deltas]


@settings(max_examples=300, deadline=None)
@given(entries=journals())
def test_a_prefix_of_a_journal_gives_a_prefix_of_its_events(entries: list[Entry]) -> None:
    # A follower that derived the events of the journal as it was (in any process, at any
    # moment) and resumes from its last seq never sees a seq it had with another content.
    whole = derive(entries)
    for length in range(len(entries) + 1):
        part = derive(entries[:length])
        assert whole[: len(part)] == part


@settings(max_examples=300, deadline=None)
@given(entries=journals())
def test_a_continued_attempt_begins_with_a_rewind_to_the_last_seq_that_stands(
    entries: list[Entry],
) -> None:
    whole = derive(entries)
    attempts = [e for e in entries if isinstance(e, AttemptEntry)]
    rewinds = [event for event in whole if event.kind == "rewind"]
    assert len(rewinds) == len(attempts)
    for rewind, attempt in zip(rewinds, attempts, strict=True):
        index = rewind.seq - 1
        assert rewind.data == {"to": rewind.seq - 1}
        # What stands is everything before it: the events of the entries journaled before the
        # attempt, the same as a journal cut at the attempt gives.
        before = derive(entries[: entries.index(attempt)])
        assert whole[:index] == before
        assert len(before) == rewind.data["to"]
        takeover = whole[index + 1]
        assert takeover.kind == "takeover"
        assert takeover.data == {"fence": attempt.fence, "reason": attempt.reason}
    terminal = [event for event in whole if event.kind in TERMINAL]
    ended = isinstance(entries[-1], TerminalEntry)
    assert (whole[-1].kind in TERMINAL) == (ended or isinstance(entries[-1], AskEntry))
    assert sum(event.kind != "awaiting_input" for event in terminal) == int(ended)
