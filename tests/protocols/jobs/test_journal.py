"""Tests for a job's journal (protocols.jobs._journal), without an event loop.

Replay of well-formed journals into the conversation they made; the decision for each open call
(run, rerun with its key, unknown effect); every kind of drift refused with the entry named; the
stored history checked against the journal; the strict JSON of every entry kind; the checkpoint
policy. Then a property: journals written by a randomly simulated run that crashes anywhere,
and is continued from what ``replay`` and ``decide`` say, always replay without drift into a
well-formed conversation, and never repeat the effect of a call that is not idempotent.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.accounting import Usage, estimate_tokens
from protocols.codec import dumps, loads
from protocols.errors import ProtocolError
from protocols.jobs import (
    CHECKPOINT_EVERY,
    UNKNOWN_EFFECT,
    AnswerEntry,
    AskEntry,
    AttemptEntry,
    CheckpointEntry,
    CheckpointPolicy,
    Decision,
    Entry,
    InputEntry,
    IntentEntry,
    JournalDrift,
    MessageEntry,
    Replay,
    RequestEntry,
    ResponseEntry,
    ResultEntry,
    StreamEntry,
    TerminalEntry,
    decide,
    entry_from_json,
    entry_to_json,
    idempotency_key,
    replay,
)
from protocols.messages import (
    AgentResult,
    Message,
    Role,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolResult,
    ToolSuccess,
)

JOB = "job-7"


# --------------------------------------------------------------------------- helpers


def user(text: str) -> Message:
    return Message.user(text, id=f"user-{text}", created_at=1.0)


def call(id: str, name: str = "search", **arguments: Any) -> ToolCall:
    return ToolCall(id, name, arguments)


def assistant(content: str = "", *calls: ToolCall, thinking: str = "") -> Message:
    return Message.assistant(content, calls=calls, thinking=thinking, id=f"a-{content}")


def ok(made: ToolCall, value: Any = "done") -> ResultEntry:
    return ResultEntry(ToolSuccess(made.id, made.name, value))


def failed(made: ToolCall, error: str = "no such file") -> ResultEntry:
    return ResultEntry(ToolFailure(made.id, made.name, error))


def essence(message: Message) -> tuple[Any, ...]:
    return (
        message.role,
        message.content,
        message.thinking,
        message.calls,
        message.tool_call_id,
        message.name,
        message.images,
        message.interrupted,
    )


def essences(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    return [essence(message) for message in messages]


def never(name: str) -> bool:
    return False


def always(name: str) -> bool:
    return True


C1 = call("c1", "search", q="trio")
C2 = call("c2", "write", path="/tmp/x")
C3 = call("c3", "search", q="anyio")
FIRST = assistant("let me look", C1, C2)
INPUT = InputEntry((user("find it"),))
#: The start of most journals below: the input, a request and a response with two calls.
OPENED: list[Entry] = [INPUT, RequestEntry(1), ResponseEntry(FIRST, Usage(10, 5))]


# --------------------------------------------------------------------------- replay


def test_a_whole_run_replays_into_its_conversation() -> None:
    final = assistant("found it")
    result = AgentResult("found it", turns=2)
    entries: list[Entry] = [
        *OPENED,
        IntentEntry(C1, idempotency_key(JOB, 1, 0)),
        IntentEntry(C2, idempotency_key(JOB, 1, 1)),
        failed(C2),
        ok(C1, {"hits": [1, 2]}),
        RequestEntry(2),
        CheckpointEntry(2, "found"),
        ResponseEntry(final, Usage(20, 3)),
        TerminalEntry(StopReason.COMPLETE, result),
    ]
    made = replay(JOB, entries)
    assert essences(made.messages) == essences(
        [
            user("find it"),
            FIRST,
            Message.tool("c2", "write", "no such file"),
            Message.tool("c1", "search", '{"hits":[1,2]}'),
            final,
        ]
    )
    # The input and the responses are the journal's own messages.
    assert made.messages[0] == user("find it")
    assert made.messages[1] == FIRST
    assert made.messages[4] == final
    assert made.turns == 2
    assert made.settled == 2
    assert made.usage == Usage(30, 8)
    assert made.open == ()
    assert made.checkpoint is None
    assert made.unsettled == 0
    assert made.terminal == TerminalEntry(StopReason.COMPLETE, result)
    assert made.started


def test_tool_messages_are_made_from_the_results() -> None:
    results: list[ToolResult] = [
        ToolSuccess("c1", "search", {"a": [1, None]}, images=["iVBORw0KGgo="]),
        ToolFailure("c2", "write", "disk full"),
    ]
    made = replay(JOB, [*OPENED, *(ResultEntry(r) for r in results)])
    tools = made.messages[2:]
    assert essences(tools) == essences([Message.from_result(r) for r in results])
    assert [m.content for m in tools] == ['{"a":[1,null]}', "disk full"]
    assert [m.images for m in tools] == [("iVBORw0KGgo=",), ()]
    assert made.results == {"c1": results[0], "c2": results[1]}


def test_an_empty_journal_has_not_started() -> None:
    made = replay(JOB, [])
    assert made == Replay()
    assert not made.started
    assert made.turns == made.settled == 0


def test_the_open_batch_is_the_calls_without_a_result_in_call_order() -> None:
    second = assistant("more", C3, C2, C1)
    entries: list[Entry] = [
        *OPENED,
        ok(C2),
        ok(C1),
        RequestEntry(2),
        ResponseEntry(second),
        IntentEntry(C1, "k-c1"),
        ok(C2),
    ]
    made = replay(JOB, entries)
    # Call ids may repeat across turns: the open batch is the last response's.
    assert [c.id for c in made.open] == ["c3", "c1"]
    assert made.intents == {"c1": "k-c1"}
    assert set(made.results) == {"c2"}
    assert made.settled == 2


def test_a_trailing_checkpoint_is_an_interrupted_assistant_message() -> None:
    entries: list[Entry] = [
        *OPENED,
        ok(C1),
        ok(C2),
        RequestEntry(2),
        CheckpointEntry(2, "The ans"),
        CheckpointEntry(2, "The answer is", thinking="hm"),
    ]
    made = replay(JOB, entries)
    last = made.messages[-1]
    assert essence(last) == essence(
        Message.assistant("The answer is", thinking="hm", interrupted=True)
    )
    assert made.checkpoint == CheckpointEntry(2, "The answer is", thinking="hm")
    assert made.unsettled == estimate_tokens("The answer is") + estimate_tokens("hm")
    # The lost call counts as a turn; it did not settle.
    assert made.turns == 2
    assert made.settled == 1
    assert made.open == ()


def test_an_empty_checkpoint_adds_no_message() -> None:
    made = replay(JOB, [INPUT, RequestEntry(1), CheckpointEntry(1)])
    assert essences(made.messages) == essences([user("find it")])
    assert made.checkpoint == CheckpointEntry(1)
    assert made.unsettled == 0
    assert made.turns == 1


def test_a_checkpoint_followed_by_its_response_leaves_no_interrupted_message() -> None:
    made = replay(JOB, [INPUT, RequestEntry(1), CheckpointEntry(1, "par"), ResponseEntry(FIRST)])
    assert not any(m.interrupted for m in made.messages)
    assert made.checkpoint is None


def test_a_call_lost_in_a_crash_keeps_what_it_streamed_and_its_number() -> None:
    entries: list[Entry] = [
        INPUT,
        RequestEntry(1),
        CheckpointEntry(1, "half an ans"),
        RequestEntry(2),
        CheckpointEntry(2, "the whole"),
        ResponseEntry(assistant("the whole answer")),
    ]
    made = replay(JOB, entries)
    assert essences(made.messages) == essences(
        [
            user("find it"),
            Message.assistant("half an ans", interrupted=True),
            assistant("the whole answer"),
        ]
    )
    assert made.turns == 2
    assert made.settled == 1
    assert made.checkpoint is None


def test_usage_is_unknown_once_one_response_reported_none() -> None:
    entries: list[Entry] = [
        INPUT,
        RequestEntry(1),
        ResponseEntry(assistant("a"), Usage(1, 1)),
        RequestEntry(2),
        ResponseEntry(assistant("b"), None),
        RequestEntry(3),
        ResponseEntry(assistant("c"), Usage(5, 5)),
    ]
    assert replay(JOB, entries[:3]).usage == Usage(1, 1)
    assert replay(JOB, entries).usage is None


def test_usage_unknown_keeps_what_was_reported_and_an_estimate_of_the_rest_apart() -> None:
    unreported = Message.assistant(
        "four", thinking="eightish", calls=[ToolCall("c9", "lookup", {"q": 1})]
    )
    entries: list[Entry] = [
        INPUT,
        RequestEntry(1),
        ResponseEntry(assistant("a"), Usage(1, 1)),
        RequestEntry(2),
        ResponseEntry(unreported, None),
        ResultEntry(ToolSuccess("c9", "lookup", "ok")),
        RequestEntry(3),
        ResponseEntry(assistant("c"), Usage(5, 5)),
    ]
    made = replay(JOB, entries)
    assert made.usage is None  # never the known part as the whole
    assert made.known == Usage(6, 6)
    text = estimate_tokens("four") + estimate_tokens("eightish") + estimate_tokens('{"q":1}')
    assert made.estimate == text


def test_usage_is_unknown_once_a_call_was_lost() -> None:
    # Its worker died while the second call streamed: what that call cost was never reported.
    entries: list[Entry] = [
        INPUT,
        RequestEntry(1),
        ResponseEntry(FIRST, Usage(1, 1)),
        ok(C1),
        ok(C2),
        RequestEntry(2),
        CheckpointEntry(2, "half an ans"),
    ]
    made = replay(JOB, entries)
    assert (made.usage, made.known, made.estimate) == (None, Usage(1, 1), 0)
    assert made.unsettled == estimate_tokens("half an ans")
    # A call lost before it streamed anything is unknown too.
    assert replay(JOB, entries[:-1]).usage is None
    assert replay(JOB, entries[:-2]).usage == Usage(1, 1)


@settings(max_examples=150)
@given(
    turns=st.lists(
        st.tuples(
            st.text(max_size=20),
            st.none() | st.builds(Usage, st.integers(0, 99), st.integers(0, 99)),
        ),
        max_size=6,
    ),
    lost=st.none() | st.text(max_size=20),
)
def test_a_replays_usage_is_the_whole_or_unknown_never_a_part(
    turns: list[tuple[str, Usage | None]], lost: str | None
) -> None:
    entries: list[Entry] = [INPUT]
    for number, (text, usage) in enumerate(turns, start=1):
        entries += [RequestEntry(number), ResponseEntry(assistant(text), usage)]
    if lost is not None:  # its worker died while the next call streamed
        entries += [RequestEntry(len(turns) + 1), CheckpointEntry(len(turns) + 1, lost)]
    made = replay(JOB, entries)
    reported = [usage for _, usage in turns if usage is not None]
    known = sum(reported, Usage())
    assert made.known == known
    assert made.estimate == sum(estimate_tokens(text) for text, usage in turns if usage is None)
    whole = lost is None and len(reported) == len(turns)
    assert made.usage == (known if whole else None)


def test_a_journal_without_request_entries_counts_its_responses() -> None:
    entries: list[Entry] = [INPUT, ResponseEntry(FIRST), ok(C1), ok(C2), ResponseEntry(assistant())]
    assert replay(JOB, entries).turns == 2


def test_approvals_of_the_open_batch() -> None:
    entries: list[Entry] = [
        *OPENED,
        AskEntry(("c2",), {"c2": "writes a file"}),
        AnswerEntry("c2", False, "not there"),
    ]
    made = replay(JOB, entries)
    assert made.asked == {"c2": "writes a file"}
    assert made.answers == {"c2": AnswerEntry("c2", False, "not there")}
    assert [c.id for c in made.open] == ["c1", "c2"]
    # A new response starts a new batch: the approvals were the old one's.
    later = replay(JOB, [*entries, failed(C2, "denied"), ok(C1), ResponseEntry(assistant("x"))])
    assert later.asked == later.answers == {}


def test_an_ask_without_a_reason_has_an_empty_one() -> None:
    made = replay(JOB, [*OPENED, AskEntry(("c1", "c2"), {"c2": "why"})])
    assert made.asked == {"c1": "", "c2": "why"}


def test_other_messages_join_the_conversation() -> None:
    feedback = user("that was not valid JSON")
    entries: list[Entry] = [
        INPUT,
        RequestEntry(1),
        ResponseEntry(assistant("{oops")),
        MessageEntry(feedback),
        RequestEntry(2),
        ResponseEntry(assistant("{}")),
    ]
    made = replay(JOB, entries)
    assert essences(made.messages) == essences(
        [user("find it"), assistant("{oops"), feedback, assistant("{}")]
    )


def test_an_intent_may_record_the_arguments_the_call_ran_with() -> None:
    changed = attrs.evolve(C1, arguments={"q": "trio", "limit": 5})
    made = replay(JOB, [*OPENED, IntentEntry(changed, "k")])
    assert made.intents == {"c1": "k"}


def test_the_same_intent_twice_is_a_rerun_not_drift() -> None:
    made = replay(JOB, [*OPENED, IntentEntry(C1, "k"), IntentEntry(C1, "k"), ok(C1)])
    assert made.intents == {"c1": "k"}
    assert [c.id for c in made.open] == ["c2"]


# --------------------------------------------------------------------------- decide


def test_decide_runs_a_call_that_never_started_with_a_fresh_key() -> None:
    made = replay(JOB, OPENED)
    decisions = decide(JOB, made, idempotent=always)
    assert decisions == [
        Decision("run", C1, idempotency_key(JOB, 1, 0)),
        Decision("run", C2, idempotency_key(JOB, 1, 1)),
    ]


def test_decide_reruns_a_started_idempotent_call_with_its_recorded_key() -> None:
    made = replay(JOB, [*OPENED, IntentEntry(C1, "recorded-key")])
    asked: list[str] = []

    def idempotent(name: str) -> bool:
        asked.append(name)
        return name == "search"

    decisions = decide(JOB, made, idempotent=idempotent)
    assert decisions[0] == Decision("rerun", C1, "recorded-key")
    assert decisions[1] == Decision("run", C2, idempotency_key(JOB, 1, 1))
    assert asked == ["search"]


def test_decide_answers_a_started_call_of_another_tool_unknown() -> None:
    made = replay(JOB, [*OPENED, IntentEntry(C2, "k2")])
    decisions = decide(JOB, made, idempotent=lambda name: name == "search")
    assert decisions[1] == Decision("unknown", C2, "k2", ToolFailure("c2", "write", UNKNOWN_EFFECT))
    assert UNKNOWN_EFFECT == (
        "interrupted: the worker stopped while this call was running; its effect is unknown"
    )
    unknown = decisions[1].result
    assert unknown is not None
    assert Message.from_result(unknown).content == UNKNOWN_EFFECT


def test_decide_never_runs_a_call_that_has_its_result() -> None:
    made = replay(JOB, [*OPENED, IntentEntry(C1, "k1"), ok(C1, 42), IntentEntry(C2, "k2")])
    decisions = decide(JOB, made, idempotent=always)
    for decision in decisions:
        if decision.call.id == "c1":
            # Its result is the one recorded (already in the conversation).
            assert decision.action == "reuse"
            assert decision.result == ToolSuccess("c1", "search", 42)
    assert [d for d in decisions if d.call.id == "c2"] == [Decision("rerun", C2, "k2")]
    assert essence(made.messages[-1]) == essence(Message.tool("c1", "search", "42"))


def test_decide_with_nothing_open() -> None:
    made = replay(JOB, [*OPENED, ok(C1), ok(C2)])
    assert [d.action for d in decide(JOB, made, idempotent=always)] in ([], ["reuse", "reuse"])
    assert decide(JOB, replay(JOB, [INPUT]), idempotent=always) == []


def test_idempotency_keys_are_stable_and_distinct() -> None:
    assert idempotency_key(JOB, 3, 1) == idempotency_key(JOB, 3, 1)
    keys = {
        idempotency_key(job, turn, index)
        for job in ("a", "b")
        for turn in (1, 2)
        for index in (0, 1)
    }
    assert len(keys) == 8
    assert JOB in idempotency_key(JOB, 1, 0)
    # The same decision from two readings of one journal (another process, a later attempt).
    first = decide(JOB, replay(JOB, OPENED), idempotent=never)
    again = decide(JOB, replay(JOB, list(OPENED)), idempotent=never)
    assert [d.key for d in first] == [d.key for d in again]


def test_a_run_key_follows_the_settled_responses() -> None:
    entries: list[Entry] = [
        *OPENED,
        ok(C1),
        ok(C2),
        RequestEntry(2),
        ResponseEntry(assistant("", C3)),
    ]
    (decision,) = decide(JOB, replay(JOB, entries), idempotent=never)
    assert decision == Decision("run", C3, idempotency_key(JOB, 2, 0))


# --------------------------------------------------------------------------- drift


DRIFT: list[tuple[str, list[Entry], int, str]] = [
    ("entry-before-input", [RequestEntry(1)], 1, "a request entry before the input"),
    ("response-before-input", [ResponseEntry(FIRST)], 1, "a response entry before the input"),
    ("second-input", [INPUT, INPUT], 2, "a second input"),
    ("empty-input", [InputEntry(())], 1, "an input without messages"),
    ("request-skips", [INPUT, RequestEntry(2)], 2, "a request for turn 2 after turn 0"),
    ("request-repeats", [INPUT, RequestEntry(1), RequestEntry(1)], 3, "a request for turn 1"),
    ("request-while-open", [*OPENED, ok(C1), RequestEntry(2)], 5, "a request while calls"),
    (
        "response-not-assistant",
        [INPUT, RequestEntry(1), ResponseEntry(user("me"))],
        3,
        "not an assistant message",
    ),
    (
        "response-while-open",
        [*OPENED, ok(C1), ResponseEntry(assistant("again"))],
        5,
        "a response while calls ['c2'] have no result",
    ),
    (
        "result-unknown-call",
        [*OPENED, ok(call("c9"))],
        4,
        "a result for call 'c9', which the last response did not make",
    ),
    (
        "result-of-an-older-batch",
        [*OPENED, ok(C1), ok(C2), RequestEntry(2), ResponseEntry(assistant("", C3)), ok(C1)],
        8,
        "a result for call 'c1'",
    ),
    (
        "result-other-tool",
        [*OPENED, ResultEntry(ToolSuccess("c1", "delete"))],
        4,
        "the result for call 'c1' names another tool",
    ),
    ("second-result", [*OPENED, ok(C1), failed(C1)], 5, "a second result for call 'c1'"),
    (
        "intent-unknown-call",
        [*OPENED, IntentEntry(call("c9"), "k")],
        4,
        "an intent for call 'c9', which the last response did not make",
    ),
    (
        "intent-differs",
        [*OPENED, IntentEntry(call("c1", "delete"), "k")],
        4,
        "the intent for call 'c1' names another tool",
    ),
    (
        "intent-after-result",
        [*OPENED, ok(C1), IntentEntry(C1, "k")],
        5,
        "an intent for call 'c1', which has its result",
    ),
    (
        "intent-two-keys",
        [*OPENED, IntentEntry(C1, "k"), IntentEntry(C1, "other")],
        5,
        "call 'c1' has two idempotency keys",
    ),
    ("checkpoint-ahead", [INPUT, RequestEntry(1), CheckpointEntry(2, "x")], 3, "turn 2"),
    (
        "checkpoint-behind",
        [*OPENED, ok(C1), ok(C2), RequestEntry(2), CheckpointEntry(1)],
        7,
        "turn 1",
    ),
    ("checkpoint-of-settled", [*OPENED, CheckpointEntry(1, "x")], 4, "a checkpoint while calls"),
    ("ask-unknown", [*OPENED, AskEntry(("c9",))], 4, "an approval request for calls ['c9']"),
    ("ask-nothing", [*OPENED, AskEntry(())], 4, "an approval request for calls (none)"),
    (
        "answer-not-asked",
        [*OPENED, AnswerEntry("c1", True)],
        4,
        "an answer for call 'c1', which was not asked",
    ),
    (
        "answer-other-call",
        [*OPENED, AskEntry(("c1",)), AnswerEntry("c2", True)],
        5,
        "an answer for call 'c2', which was not asked",
    ),
    (
        "second-answer",
        [*OPENED, AskEntry(("c1",)), AnswerEntry("c1", True), AnswerEntry("c1", True)],
        6,
        "a second answer for call 'c1'",
    ),
    (
        "message-in-open-batch",
        [*OPENED, MessageEntry(user("hi"))],
        4,
        "a message inside an unanswered batch",
    ),
    (
        "tool-message-entry",
        [*OPENED, ok(C1), ok(C2), MessageEntry(Message.tool("c1", "search", "x"))],
        6,
        "a tool message",
    ),
    ("after-terminal", [INPUT, TerminalEntry(error="x"), RequestEntry(1)], 3, "after the terminal"),
    (
        "result-after-terminal",
        [*OPENED, TerminalEntry(StopReason.CANCELLED), ok(C1)],
        5,
        "a result entry after the terminal",
    ),
    ("terminal-after-terminal", [INPUT, TerminalEntry(), TerminalEntry()], 3, "after the terminal"),
]


@pytest.mark.parametrize(
    ("entries", "position", "detail"),
    [pytest.param(e, p, d, id=name) for name, e, p, d in DRIFT],
)
def test_a_malformed_journal_is_drift_naming_the_entry(
    entries: list[Entry], position: int, detail: str
) -> None:
    # The bad entry is the last one, and everything before it is well formed.
    assert len(entries) == position
    replay(JOB, entries[:-1])
    with pytest.raises(JournalDrift) as caught:
        replay(JOB, entries)
    drift = caught.value
    assert drift.job == JOB
    assert drift.detail.startswith(f"entry {position}: ")
    assert detail in drift.detail
    assert f"the journal of job {JOB} does not match its history" in str(drift)
    assert drift.code == "journal_drift"
    assert drift.retryable is False


def test_replay_reads_entries_lazily_and_stops_at_the_first_drift() -> None:
    seen: list[Entry] = []

    def entries() -> Any:
        for entry in [INPUT, INPUT, RequestEntry(1)]:
            seen.append(entry)
            yield entry

    with pytest.raises(JournalDrift, match="entry 2: a second input"):
        replay(JOB, entries())
    assert len(seen) == 2


# --------------------------------------------------------------------------- history


HISTORY_JOURNAL: list[Entry] = [
    *OPENED,
    ok(C1, "hit"),
    ok(C2),
    RequestEntry(2),
    CheckpointEntry(2, "so"),
]


def minted_again(messages: Sequence[Message]) -> list[Message]:
    """The same messages as another store keeps them: other ids and timestamps."""
    return [attrs.evolve(m, id=f"other-{i}", created_at=99.0) for i, m in enumerate(messages)]


def test_a_history_that_is_the_journals_passes() -> None:
    made = replay(JOB, HISTORY_JOURNAL)
    again = replay(JOB, HISTORY_JOURNAL, history=minted_again(made.messages))
    assert essences(again.messages) == essences(made.messages)
    # The stored history need not have the checkpoint's interrupted message yet.
    replay(JOB, HISTORY_JOURNAL, history=minted_again(made.messages[:-1]))


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (lambda h: h[:-2], "the history has 3 messages, the journal 5"),
        (lambda h: [*h, user("extra")], "the history has 6 messages, the journal 5"),
        (lambda h: [user("other"), *h[1:]], "message 1 of the history is not the journal's"),
        (
            lambda h: [*h[:2], attrs.evolve(h[2], content="miss"), *h[3:]],
            "message 3 of the history is not the journal's",
        ),
        (lambda h: [h[0], h[2], h[1], *h[3:]], "message 2 of the history is not the journal's"),
        (
            lambda h: [*h[:2], attrs.evolve(h[2], images=["iVBORw0KGgo="]), *h[3:]],
            "message 3 of the history is not the journal's",
        ),
        (
            lambda h: [*h[:-1], attrs.evolve(h[-1], interrupted=False)],
            "message 5 of the history is not the journal's",
        ),
        (lambda h: [], "the history has 0 messages, the journal 5"),
    ],
    ids=[
        "shorter",
        "longer",
        "first-differs",
        "tool-differs",
        "tool-images-differ",
        "reordered",
        "not-interrupted",
        "empty",
    ],
)
def test_a_history_that_differs_from_the_journal_is_drift(
    change: Callable[[list[Message]], list[Message]], detail: str
) -> None:
    made = replay(JOB, HISTORY_JOURNAL)
    assert len(made.messages) == 5
    with pytest.raises(JournalDrift) as caught:
        replay(JOB, HISTORY_JOURNAL, history=change(minted_again(made.messages)))
    assert caught.value.detail == detail


# --------------------------------------------------------------------------- JSON


TEXT = st.text(max_size=10)
IDS = st.text(alphabet="abcdef0123456789_-", min_size=1, max_size=8)
NAMES = st.sampled_from(["search", "write", "send"])
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
CALLS = st.builds(
    ToolCall, id=IDS, name=NAMES, arguments=st.dictionaries(TEXT, JSON_VALUES, max_size=2)
)
RESULTS: st.SearchStrategy[ToolResult] = st.builds(
    ToolSuccess,
    id=IDS,
    name=NAMES,
    value=JSON_VALUES,
    images=st.lists(st.sampled_from(["iVBORw0KGgo=", "data:image/gif;base64,R0lG"]), max_size=2),
) | st.builds(ToolFailure, id=IDS, name=NAMES, error=st.text(min_size=1, max_size=10))
USAGES = st.builds(Usage, prompt=st.integers(0, 10**6), completion=st.integers(0, 10**6))
STAMPS = st.floats(min_value=0, max_value=4e9)
ASSISTANTS = st.builds(
    Message.assistant,
    TEXT,
    calls=st.lists(CALLS, max_size=3, unique_by=lambda c: c.id),
    thinking=TEXT,
    interrupted=st.booleans(),
    id=IDS,
    created_at=STAMPS,
)
MESSAGES = st.one_of(
    st.builds(Message.user, TEXT, id=IDS, created_at=STAMPS),
    st.builds(Message.system, TEXT, id=IDS, created_at=STAMPS),
    ASSISTANTS,
    st.builds(
        Message.tool,
        IDS,
        NAMES,
        TEXT,
        images=st.lists(st.just("iVBORw0KGgo="), max_size=1),
        id=IDS,
        created_at=STAMPS,
    ),
)
RUN_RESULTS = st.builds(
    lambda content, messages, usage, complete, turns: AgentResult(
        content,
        messages=messages,
        usage=usage,
        stop=StopReason.COMPLETE if complete else StopReason.EXHAUSTED,
        turns=turns,
    ),
    TEXT,
    st.lists(MESSAGES, max_size=2),
    st.none() | USAGES,
    st.booleans(),
    st.integers(0, 50),
)
ENTRIES: dict[str, st.SearchStrategy[Any]] = {
    "input": st.builds(InputEntry, st.lists(MESSAGES, max_size=3).map(tuple)),
    "request": st.builds(RequestEntry, st.integers(0, 10**6)),
    "response": st.builds(ResponseEntry, ASSISTANTS, st.none() | USAGES),
    "message": st.builds(MessageEntry, MESSAGES),
    "intent": st.builds(IntentEntry, CALLS, TEXT),
    "result": st.builds(ResultEntry, RESULTS),
    "checkpoint": st.builds(CheckpointEntry, st.integers(0, 1000), TEXT, TEXT),
    "stream": st.builds(
        StreamEntry,
        st.integers(0, 1000),
        st.lists(st.tuples(st.sampled_from(["content", "thinking"]), TEXT), max_size=4).map(tuple),
    ),
    "attempt": st.builds(
        AttemptEntry, st.integers(1, 1000), st.sampled_from(["takeover", "retry", "answered"])
    ),
    "ask": st.builds(
        AskEntry, st.lists(IDS, max_size=3).map(tuple), st.dictionaries(IDS, TEXT, max_size=3)
    ),
    "answer": st.builds(AnswerEntry, IDS, st.booleans(), TEXT),
    "terminal": st.builds(
        TerminalEntry,
        st.none() | st.sampled_from(list(StopReason)),
        st.none() | RUN_RESULTS,
        st.none() | TEXT,
    ),
}


def test_every_entry_kind_has_a_strategy() -> None:
    kinds = {cls.kind for cls in Entry.__args__}  # type: ignore[attr-defined]
    assert kinds == set(ENTRIES)


@settings(max_examples=120, deadline=None)
@given(st.one_of(*ENTRIES.values()))
def test_entry_json_round_trip(entry: Entry) -> None:
    data = entry_to_json(entry)
    assert data["kind"] == entry.kind
    assert next(iter(data)) == "kind"
    text = dumps(data)
    back = entry_from_json(loads(text))
    assert back == entry
    assert type(back) is type(entry)
    assert entry_to_json(back) == data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "gossip"}, "unknown journal entry kind 'gossip'"),
        ({"kind": "Input", "messages": []}, "unknown journal entry kind 'Input'"),
        ({"turn": 1}, "must be an object with a 'kind'"),
        ({"kind": 3}, "must be an object with a 'kind'"),
        ({"kind": None}, "must be an object with a 'kind'"),
        (["kind", "input"], "must be an object with a 'kind'"),
        ("input", "must be an object with a 'kind'"),
        (None, "must be an object with a 'kind'"),
        ({"kind": "request", "turn": 1, "extra": 0}, "unknown field(s) 'extra'"),
        ({"kind": "request"}, "$.turn: required field missing"),
        ({"kind": "request", "turn": True}, "$.turn: expected an integer, got bool"),
        ({"kind": "request", "turn": "1"}, "$.turn"),
        ({"kind": "checkpoint", "turn": 1, "content": 5}, "$.content"),
        ({"kind": "answer", "call_id": "c", "allow": 1}, "$.allow: expected true or false"),
        ({"kind": "ask", "calls": "c1"}, "$.calls"),
        ({"kind": "result", "result": {"id": "c", "name": "t"}}, "success"),
        (
            {"kind": "result", "result": {"success": True, "id": "c", "name": "t", "x": 1}},
            "unknown field(s) 'x'",
        ),
        ({"kind": "intent", "call": {"id": "c", "name": "t"}}, "$.key: required field missing"),
        ({"kind": "input", "messages": [{"role": "robot"}]}, "$.messages[0]"),
        ({"kind": "terminal", "stop": "exploded"}, "$.stop"),
        ({"kind": "response", "message": {"role": "assistant"}, "usage": {"prompt": -1}}, "$"),
    ],
)
def test_entry_decoding_is_strict(data: Any, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        entry_from_json(data)
    assert message in str(caught.value)
    assert caught.value.code == "decode"


def test_entry_json_is_plain_json_data() -> None:
    entry = ResponseEntry(FIRST, Usage(1, 2))
    data = entry_to_json(entry)
    assert json.loads(json.dumps(data)) == data
    assert data["message"]["calls"][0] == {"id": "c1", "name": "search", "arguments": {"q": "trio"}}


# --------------------------------------------------------------------------- checkpoint policy


def test_the_default_policy_checkpoints_every_20_deltas() -> None:
    assert CHECKPOINT_EVERY == 20
    policy = CheckpointPolicy()
    said = [policy.delta() for _ in range(60)]
    assert [i + 1 for i, yes in enumerate(said) if yes] == [20, 40, 60]


def test_a_tool_boundary_checkpoints_and_starts_a_new_count() -> None:
    policy = CheckpointPolicy(every=3)
    assert [policy.delta(), policy.delta()] == [False, False]
    assert policy.boundary() is True
    assert [policy.delta(), policy.delta(), policy.delta()] == [False, False, True]
    assert policy.boundary() is True
    assert policy.boundary() is True
    assert [policy.delta(), policy.delta(), policy.delta()] == [False, False, True]


def test_every_one_checkpoints_each_delta() -> None:
    policy = CheckpointPolicy(every=1)
    assert all(policy.delta() for _ in range(5))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 25), st.lists(st.booleans(), max_size=120))
def test_the_policy_never_lets_more_than_every_deltas_pass_unsaved(
    every: int, events: list[bool]
) -> None:
    policy = CheckpointPolicy(every)
    unsaved = 0
    for is_boundary in events:
        if is_boundary:
            assert policy.boundary()
            unsaved = 0
            continue
        unsaved += 1
        if policy.delta():
            assert unsaved == every
            unsaved = 0
        assert unsaved < every


@pytest.mark.parametrize("every", [0, -1, True, 2.0, "20", None])
def test_the_policy_needs_a_positive_int(every: Any) -> None:
    with pytest.raises(ValueError, match="every N >= 1"):
        CheckpointPolicy(every)


# --------------------------------------------------------------------------- simulated runs

#: The simulated tools and whether each is idempotent.
TOOLS = {"search": True, "write": False, "send": False}
MAX_TURNS = 4


def is_idempotent(name: str) -> bool:
    return TOOLS[name]


class Run:
    """A worker running one journaled job, as the runtime does: everything it makes durable
    goes to ``entries`` before the boundary it guards is crossed; any step may crash it, and a
    new worker then continues from ``replay`` and ``decide`` alone."""

    def __init__(self, data: st.DataObject, input: tuple[Message, ...]) -> None:
        self.data = data
        self.input = input
        self.entries: list[Entry] = [InputEntry(input)]
        self.effects: collections.Counter[str] = collections.Counter()
        self.decisions = 0
        self.crashes = 0
        self.attempt()

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def attempt(self) -> None:
        """A worker takes the job: what it knows is what the journal says."""
        made = replay(JOB, self.entries)
        self.counter = made.settled  # which response the open batch belongs to
        self.streaming: str | None = None  # the text of the call in flight
        self.intended: set[str] = set()  # calls whose intent this attempt wrote
        self.executed: set[str] = set()  # calls whose effect this attempt made
        self.decided = False

    def write(self, *entries: Entry) -> None:
        self.entries.extend(entries)
        made = replay(JOB, self.entries)  # never drift, at any point
        check_conversation(made, self.input)

    def key(self, made: Replay, call_id: str) -> str:
        last = [m for m in made.messages if m.role is Role.ASSISTANT and m.calls][-1]
        index = [c.id for c in last.calls].index(call_id)
        return made.intents.get(call_id) or idempotency_key(JOB, self.counter, index)

    def step(self) -> bool:
        """One step of the worker; False once the run has ended."""
        made = replay(JOB, self.entries)
        if made.terminal is not None:
            return False
        if self.draw(st.integers(0, 9)) == 0:
            self.crashes += 1
            self.attempt()
            return True
        if made.open and not self.decided:
            self.continue_batch(made)
            return True
        if made.open:
            self.work_on_batch(made)
        elif self.streaming is not None:
            self.stream(made)
        else:
            last = made.messages[-1]
            if made.settled and last.role is Role.ASSISTANT and not last.interrupted:
                if not last.calls and self.draw(st.booleans()):
                    self.write(TerminalEntry(StopReason.COMPLETE, AgentResult(last.content)))
                    return True
                if not last.calls and made.turns < MAX_TURNS:
                    self.write(MessageEntry(user(f"more {made.turns}")))
                    return True
            if made.turns >= MAX_TURNS + 2:
                self.write(TerminalEntry(StopReason.EXHAUSTED, error="limit"))
                return True
            self.write(RequestEntry(made.turns + 1))
            self.streaming = ""
        return True

    def continue_batch(self, made: Replay) -> None:
        """Before touching the open batch, a worker decides what to do with each call."""
        self.decided = True
        decisions = decide(JOB, made, idempotent=is_idempotent)
        check_decisions(made, decisions)
        self.decisions += len(decisions)
        for decision in decisions:
            if decision.action == "unknown":
                assert decision.result is not None
                self.write(ResultEntry(decision.result))
            elif decision.action == "run":
                # The key a worker would use for it is the decision's.
                assert decision.key == self.key(made, decision.call.id)

    def work_on_batch(self, made: Replay) -> None:
        waiting = [cid for cid in made.asked if cid not in made.answers]
        if waiting:
            # The whole batch waits for every answer (a human, from any process).
            cid = self.draw(st.sampled_from(waiting))
            self.write(AnswerEntry(cid, self.draw(st.booleans())))
            return
        target = self.draw(st.sampled_from(made.open))
        answer = made.answers.get(target.id)
        if answer is not None and not answer.allow:
            self.write(ResultEntry(ToolFailure(target.id, target.name, "denied")))
        elif target.id in self.executed:
            self.write(ResultEntry(ToolSuccess(target.id, target.name, f"ok {target.id}")))
        elif target.id in self.intended:
            self.effects[self.key(made, target.id)] += 1
            self.executed.add(target.id)
        else:
            # A call with an intent from before a crash was decided on: it is either
            # answered unknown (so not open) or idempotent and run again under its key.
            if target.id in made.intents:
                assert is_idempotent(target.name)
            self.write(IntentEntry(target, self.key(made, target.id)))
            self.intended.add(target.id)

    def stream(self, made: Replay) -> None:
        if self.draw(st.integers(0, 2)) == 0:
            self.streaming += self.draw(st.sampled_from(["a", "bc ", "d."]))
            self.write(CheckpointEntry(made.turns, self.streaming, thinking=""))
            return
        ids = ["t1", "t2", "t3"]  # models reuse call ids across turns
        count = 0 if made.turns >= MAX_TURNS else self.draw(st.integers(0, 3))
        calls = [
            ToolCall(ids[i], self.draw(st.sampled_from(sorted(TOOLS))), {"turn": made.turns})
            for i in range(count)
        ]
        usage = self.draw(st.none() | st.just(Usage(3, 2)))
        self.write(ResponseEntry(Message.assistant(self.streaming + "!", calls=calls), usage))
        self.streaming = None
        self.counter = replay(JOB, self.entries).settled
        self.intended, self.executed = set(), set()
        self.decided = True
        if calls and self.draw(st.booleans()):
            asked = self.draw(
                st.lists(st.sampled_from([c.id for c in calls]), min_size=1, unique=True)
            )
            self.write(AskEntry(tuple(asked), dict.fromkeys(asked, "needs a human")))


def check_conversation(made: Replay, input: tuple[Message, ...]) -> None:
    """Every call answered by exactly one tool message, in its batch, except the open ones;
    the last batch's tool messages are its recorded results."""
    messages = made.messages
    assert messages[: len(input)] == input
    pending: set[str] = set()
    leader: Message | None = None
    answered: list[Message] = []
    for message in messages[len(input) :]:
        if message.role is Role.TOOL:
            assert message.tool_call_id in pending, message
            pending.discard(message.tool_call_id)
            answered.append(message)
            continue
        assert not pending, f"{pending} unanswered before {message}"
        if message.interrupted:
            assert message.role is Role.ASSISTANT
            assert not message.calls
        pending = {call.id for call in message.calls}
        leader, answered = message, []
    assert pending == {call.id for call in made.open}
    if made.open:
        assert not messages[-1].interrupted
    if leader is not None and leader.calls:
        assert {m.tool_call_id for m in answered} == set(made.results)
        for message in answered:
            assert message.tool_call_id is not None
            assert message.content == made.results[message.tool_call_id].render()


def check_decisions(made: Replay, decisions: list[Decision]) -> None:
    """One decision per open call, in call order; never a silent re-run."""
    open_ids = [call.id for call in made.open]
    assert [d.call.id for d in decisions if d.action != "reuse"] == open_ids
    for decision in decisions:
        cid = decision.call.id
        if cid in made.results:
            assert decision.action == "reuse"
            assert decision.result == made.results[cid]
            continue
        intent = made.intents.get(cid)
        if intent is None:
            assert decision.action == "run"
        elif is_idempotent(decision.call.name):
            assert decision.action == "rerun"
            assert decision.key == intent
        else:
            assert decision.action == "unknown"
            assert decision.key == intent
            assert decision.result == ToolFailure(cid, decision.call.name, UNKNOWN_EFFECT)


INPUTS = st.sampled_from(
    [
        (user("task"),),
        (Message.system("be brief", id="s", created_at=0.0), user("task")),
        # A thread's earlier answer in the input: not a settled response of this run.
        (user("q1"), Message.assistant("a1", id="old", created_at=0.5), user("task")),
    ]
)


@settings(max_examples=150, deadline=None)
@given(st.data(), INPUTS)
def test_a_run_crashing_anywhere_replays_without_drift(
    data: st.DataObject, input: tuple[Message, ...]
) -> None:
    run = Run(data, input)
    for _ in range(80):
        if not run.step():
            break
    entries = run.entries
    # Any prefix is a journal a crash could have left: each replays, well formed.
    for end in range(1, len(entries) + 1):
        made = replay(JOB, entries[:end])
        check_conversation(made, input)
        check_decisions(made, decide(JOB, made, idempotent=is_idempotent))
        # The stored history, minted anew, is accepted as the journal's.
        replay(JOB, entries[:end], history=minted_again(made.messages))
    # No effect of a call that is not idempotent happened twice.
    for key, times in run.effects.items():
        name = next(e.call.name for e in entries if isinstance(e, IntentEntry) and e.key == key)
        assert times == 1 or TOOLS[name], (key, times)
    # A call keeps one key; two calls never share one.
    keys: dict[tuple[int, str], str] = {}
    response = -1
    for index, entry in enumerate(entries):
        if isinstance(entry, ResponseEntry):
            response = index
        elif isinstance(entry, IntentEntry):
            assert keys.setdefault((response, entry.call.id), entry.key) == entry.key
    assert len(set(keys.values())) == len(keys)
