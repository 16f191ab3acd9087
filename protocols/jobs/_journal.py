"""A job's journal: what a run made durable before crossing each boundary, and what a worker
continuing it decides from that.

The rule: every boundary whose loss would be ambiguous is made durable before it is crossed.

* :class:`InputEntry` -- the messages the run starts from, before its first provider call;
* :class:`ResponseEntry` -- a settled model response (the assistant message, its tool calls, its
  usage), before any of its calls is dispatched;
* :class:`IntentEntry` -- a call is about to run, before its effect (with its idempotency key);
* :class:`ResultEntry` -- the call's result, after it;
* :class:`MessageEntry` -- any other message the run adds (feedback on a wrong structured
  answer);
* :class:`StreamEntry` -- the deltas a turn streamed since the last one, in order (written
  behind the run, a few milliseconds after they streamed): the run's event log is derived from
  them, delta by delta; :class:`CheckpointEntry` -- the text a turn has streamed so far (what
  journals written before :class:`StreamEntry` hold);
* :class:`AttemptEntry` -- a continued attempt begins (a takeover, a retry, answered
  approvals), before anything else it journals;
* :class:`AskEntry` / :class:`AnswerEntry` -- a batch waiting for human approval, and each
  answer;
* :class:`TerminalEntry` -- how the run ended.

:func:`replay` reads a journal back into the conversation it made and what is left open;
:func:`decide` says, for each open call, what a continuing worker does. A journal that does not
make sense -- an entry out of order, a result for a call nobody made, a history that is not the
journal's -- is :class:`JournalDrift`, refused, never repaired.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Literal

import attrs

from ..accounting import estimate_tokens
from ..codec import dumps, from_json, to_json
from ..errors import AgentsError, Category, ProtocolError
from ..messages import (
    AgentResult,
    Message,
    Role,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolResult,
    Usage,
)
from ..questions import Question

__all__ = [
    "CHECKPOINT_EVERY",
    "UNKNOWN_EFFECT",
    "AnswerEntry",
    "AskEntry",
    "AttemptEntry",
    "CheckpointEntry",
    "CheckpointPolicy",
    "Decision",
    "Entry",
    "InputEntry",
    "IntentEntry",
    "JournalDrift",
    "MessageEntry",
    "Replay",
    "RequestEntry",
    "ResponseEntry",
    "ResultEntry",
    "StreamEntry",
    "TerminalEntry",
    "crosses",
    "decide",
    "entry_from_json",
    "entry_to_json",
    "idempotency_key",
    "replay",
]

#: Streamed deltas between two text checkpoints of a turn.
CHECKPOINT_EVERY = 20

#: What a continuing worker answers for a call that had started and whose tool is not
#: idempotent: the model is told, and decides.
UNKNOWN_EFFECT = (
    "interrupted: the worker stopped while this call was running; its effect is unknown"
)


class JournalDrift(AgentsError):
    """A job's journal does not match itself or the history it should have made: the run is
    refused (and abandoned), never continued on a guess and never overwritten."""

    def __init__(self, job: str, detail: str) -> None:
        super().__init__(
            f"the journal of job {job} does not match its history: {detail}",
            code="journal_drift",
            category=Category.SYSTEM,
            retryable=False,
        )
        self.job = job
        self.detail = detail


def idempotency_key(job: str, turn: int, index: int) -> str:
    """The idempotency key of the ``index``-th call of the ``turn``-th response: the same for
    every attempt at it, in any process (not the call's id: models reuse those across
    turns)."""
    return f"{job}:{turn}:{index}"


@attrs.frozen
class InputEntry:
    """The messages the run starts from."""

    messages: tuple[Message, ...]
    kind: ClassVar[str] = "input"


@attrs.frozen
class RequestEntry:
    """A provider call of ``turn`` is about to start (written with the commit before it): a
    call lost in a crash still counts toward the run's turns, and what it streamed (its
    checkpoint) toward its budget."""

    turn: int
    kind: ClassVar[str] = "request"


@attrs.frozen
class ResponseEntry:
    """A settled model response: the assistant ``message`` (its calls included) and the turn's
    ``usage`` (``None``: not reported)."""

    message: Message
    usage: Usage | None = None
    kind: ClassVar[str] = "response"


@attrs.frozen
class MessageEntry:
    """A message the run added that is neither a response nor a result (the feedback on a
    structured answer that did not match its schema)."""

    message: Message
    kind: ClassVar[str] = "message"


@attrs.frozen
class IntentEntry:
    """The call is about to run (its effect may follow)."""

    call: ToolCall
    key: str
    kind: ClassVar[str] = "intent"


@attrs.frozen
class ResultEntry:
    """The call's result."""

    result: ToolResult
    kind: ClassVar[str] = "result"


@attrs.frozen
class CheckpointEntry:
    """What the turn in flight has streamed so far (its ``turn`` is one past the settled
    responses)."""

    turn: int
    content: str = ""
    thinking: str = ""
    kind: ClassVar[str] = "checkpoint"


def _deltas(value: Any) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in value:
        pair = tuple(item)
        if len(pair) != 2 or pair[0] not in ("content", "thinking") or not isinstance(pair[1], str):
            raise ValueError(f"a delta is a (channel, text) pair, not {item!r}")
        out.append((pair[0], pair[1]))
    return tuple(out)


@attrs.frozen
class StreamEntry:
    """Deltas the turn in flight streamed (``turn`` is one past the settled responses), in
    order: ``(channel, text)`` pairs, ``channel`` ``content`` or ``thinking``."""

    turn: int
    deltas: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_deltas)
    kind: ClassVar[str] = "stream"


@attrs.frozen
class AttemptEntry:
    """A continued attempt of the run begins, held with fencing token ``fence``; ``reason``:
    ``takeover`` (its worker died), ``retry`` (an attempt failed and was given up) or
    ``answered`` (the approvals it waited for are in)."""

    fence: int
    reason: Literal["takeover", "retry", "answered"] = "takeover"
    kind: ClassVar[str] = "attempt"


def _to_questions(value: Any) -> dict[str, Question]:
    """The questions of an :class:`AskEntry`, each a :class:`Question` (read back from JSON,
    a str-keyed object's values are plain data)."""
    return {
        key: item if isinstance(item, Question) else from_json(Question, item)
        for key, item in dict(value).items()
    }


@attrs.frozen
class AskEntry:
    """The batch of the last response waits for approval of these calls (``reasons``: the
    authority's text for each, by call id) -- or, for the calls in ``questions``, for the
    answer to the question each asks the human (its reason is the question's prompt)."""

    calls: tuple[str, ...]
    reasons: dict[str, str] = attrs.field(factory=dict)
    questions: dict[str, Question] = attrs.field(factory=dict, converter=_to_questions)
    kind: ClassVar[str] = "ask"


@attrs.frozen
class AnswerEntry:
    """A human's answer to one asked call (``value``: a question's answer, as checked)."""

    call_id: str
    allow: bool
    reason: str = ""
    value: Any = None
    kind: ClassVar[str] = "answer"


@attrs.frozen
class TerminalEntry:
    """How the run ended (``result`` or ``error``)."""

    stop: StopReason | None = None
    result: AgentResult | None = None
    error: str | None = None
    kind: ClassVar[str] = "terminal"


Entry = (
    InputEntry
    | RequestEntry
    | ResponseEntry
    | MessageEntry
    | IntentEntry
    | ResultEntry
    | CheckpointEntry
    | StreamEntry
    | AttemptEntry
    | AskEntry
    | AnswerEntry
    | TerminalEntry
)


def crosses(entries: Iterable[Entry]) -> bool:
    """Whether writing ``entries`` lets the run start new work: a provider call (its
    :class:`RequestEntry`) or a tool call's effect (its :class:`IntentEntry`). A job whose
    cancel was acknowledged never gets such an append through (see
    :func:`protocols.jobs.may_append`)."""
    return any(isinstance(entry, RequestEntry | IntentEntry) for entry in entries)


_KINDS: dict[str, type[Any]] = {
    cls.kind: cls
    for cls in (
        InputEntry,
        RequestEntry,
        ResponseEntry,
        MessageEntry,
        IntentEntry,
        ResultEntry,
        CheckpointEntry,
        StreamEntry,
        AttemptEntry,
        AskEntry,
        AnswerEntry,
        TerminalEntry,
    )
}


def entry_to_json(entry: Entry) -> dict[str, Any]:
    """An entry as JSON data, tagged with its ``kind``."""
    data = to_json(entry)
    assert isinstance(data, dict)
    return {"kind": entry.kind, **data}


def entry_from_json(data: Any) -> Entry:
    """The entry ``data`` describes (strict: its ``kind`` names it, unknown fields refused).
    Raises :class:`~protocols.errors.ProtocolError`."""
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise ProtocolError("a journal entry must be an object with a 'kind'", code="decode")
    cls = _KINDS.get(data["kind"])
    if cls is None:
        raise ProtocolError(f"unknown journal entry kind {data['kind']!r}", code="decode")
    fields = {key: value for key, value in data.items() if key != "kind"}
    entry: Entry = from_json(cls, fields)
    return entry


@attrs.frozen
class Decision:
    """What a continuing worker does with one call of the open batch (a call without a
    result): ``run`` it (it never started), ``rerun`` it with its ``key`` (it started and its
    tool is idempotent), or answer it ``unknown`` (:data:`UNKNOWN_EFFECT`: it started and its
    effect is unknown). A call with a recorded result is not open: its result is reused."""

    action: Literal["run", "rerun", "unknown"]
    call: ToolCall
    key: str | None = None
    result: ToolResult | None = None


@attrs.frozen
class Replay:
    """A journal read back.

    ``messages``: the conversation the run made (input, responses, results; a turn cut before
    it settled is its last checkpoint, an interrupted assistant message, when nothing settled
    after it); ``turns``: the provider calls it started (settled or not); ``usage``: what its
    settled responses reported -- ``None`` once part of what it spent is unknown: a response
    reported none, or a call was lost (started, never settled); never the known part as the
    whole -- with ``known``, the sum of what was reported, and ``estimate``, the tokens of the
    responses that reported none by estimate (their text, thinking and calls' arguments);
    ``unsettled``: the tokens the last call streamed before it was lost, by estimate (its
    checkpoint); ``open``: the calls of the last response without a result, in call order,
    with their intents; ``asked`` and ``answers``: approvals of the open batch; ``terminal``:
    its end, once it has one."""

    messages: tuple[Message, ...] = ()
    turns: int = 0
    usage: Usage | None = attrs.field(factory=Usage)
    open: tuple[ToolCall, ...] = ()
    intents: dict[str, str] = attrs.field(factory=dict)
    results: dict[str, ToolResult] = attrs.field(factory=dict)
    asked: dict[str, str] = attrs.field(factory=dict)
    answers: dict[str, AnswerEntry] = attrs.field(factory=dict)
    checkpoint: CheckpointEntry | None = None
    terminal: TerminalEntry | None = None
    unsettled: int = 0
    known: Usage = attrs.field(factory=Usage)
    estimate: int = 0
    #: Continued attempts that were takeovers (an :class:`AttemptEntry` each).
    takeovers: int = 0

    @property
    def started(self) -> bool:
        """The run has its input."""
        return bool(self.messages)

    @property
    def settled(self) -> int:
        """The responses that settled (the last one's calls are the open batch)."""
        return sum(1 for m in self.messages if m.role is Role.ASSISTANT and not m.interrupted)


def replay(
    job: str, entries: Iterable[Entry], *, history: Sequence[Message] | None = None
) -> Replay:
    """Read a journal back (see :class:`Replay`). ``history``, when given, is the conversation
    as stored elsewhere: it must be exactly the journal's. Raises :class:`JournalDrift`."""
    messages: list[Message] = []
    turns = 0  # settled responses
    requested = 0  # provider calls started
    usage: Usage | None = Usage()
    known = Usage()  # what the settled responses that reported usage reported
    estimate = 0  # the others' tokens, by estimate
    calls: dict[str, ToolCall] = {}  # of the last response
    intents: dict[str, str] = {}
    results: dict[str, ToolResult] = {}
    asked: dict[str, str] = {}
    answers: dict[str, AnswerEntry] = {}
    checkpoint: CheckpointEntry | None = None
    terminal: TerminalEntry | None = None
    fence = 0  # the last continued attempt's
    takeovers = 0

    def drift(index: int, detail: str) -> JournalDrift:
        return JournalDrift(job, f"entry {index + 1}: {detail}")

    for index, entry in enumerate(entries):
        if terminal is not None:
            raise drift(index, f"a {entry.kind} entry after the terminal")
        if isinstance(entry, InputEntry):
            if messages:
                raise drift(index, "a second input")
            if not entry.messages:
                raise drift(index, "an input without messages")
            messages.extend(entry.messages)
            continue
        if not messages:
            raise drift(index, f"a {entry.kind} entry before the input")
        if isinstance(entry, RequestEntry):
            # Provider calls are numbered from 1 in the order they start; one lost in a crash
            # (requested, never settled) keeps its number.
            if entry.turn != requested + 1:
                raise drift(index, f"a request for turn {entry.turn} after turn {requested}")
            unanswered = [cid for cid in calls if cid not in results]
            if unanswered:
                raise drift(index, f"a request while calls {unanswered} have no result")
            requested = entry.turn
            if checkpoint is not None and (checkpoint.content or checkpoint.thinking):
                # The call it checkpointed was lost: what it streamed stays, interrupted.
                messages.append(
                    Message.assistant(
                        checkpoint.content, thinking=checkpoint.thinking, interrupted=True
                    )
                )
            checkpoint = None
            continue
        if isinstance(entry, ResponseEntry):
            if entry.message.role is not Role.ASSISTANT:
                raise drift(index, "a response that is not an assistant message")
            unanswered = [cid for cid in calls if cid not in results]
            if unanswered:
                raise drift(index, f"a response while calls {unanswered} have no result")
            checkpoint = None
            messages.append(entry.message)
            turns += 1
            requested = max(requested, turns)
            usage = None if usage is None or entry.usage is None else usage + entry.usage
            if entry.usage is not None:
                known = known + entry.usage
            else:
                estimate += _answer_tokens(entry.message)
            calls = {call.id: call for call in entry.message.calls}
            intents, results, asked, answers = {}, {}, {}, {}
        elif isinstance(entry, MessageEntry):
            unanswered = [cid for cid in calls if cid not in results]
            if unanswered or entry.message.role is Role.TOOL:
                raise drift(index, "a message inside an unanswered batch, or a tool message")
            checkpoint = None
            messages.append(entry.message)
        elif isinstance(entry, IntentEntry):
            call = calls.get(entry.call.id)
            if call is None:
                raise drift(
                    index,
                    f"an intent for call {entry.call.id!r}, which the last response did not make",
                )
            if call.name != entry.call.name:
                # (The arguments may differ: the intent records those the call ran with.)
                raise drift(index, f"the intent for call {call.id!r} names another tool")
            if call.id in results:
                raise drift(index, f"an intent for call {call.id!r}, which has its result")
            previous = intents.get(call.id)
            if previous is not None and previous != entry.key:
                raise drift(index, f"call {call.id!r} has two idempotency keys")
            intents[call.id] = entry.key
        elif isinstance(entry, ResultEntry):
            result = entry.result
            call = calls.get(result.id)
            if call is None:
                raise drift(
                    index, f"a result for call {result.id!r}, which the last response did not make"
                )
            if call.name != result.name:
                raise drift(index, f"the result for call {call.id!r} names another tool")
            if call.id in results:
                raise drift(index, f"a second result for call {call.id!r}")
            results[call.id] = result
            messages.append(Message.from_result(result))
        elif isinstance(entry, CheckpointEntry | StreamEntry):
            unanswered = [cid for cid in calls if cid not in results]
            if unanswered:
                raise drift(index, f"a {entry.kind} while calls {unanswered} have no result")
            if entry.turn != max(requested, turns + 1):
                raise drift(
                    index, f"a {entry.kind} of turn {entry.turn}, not of the call in flight"
                )
            if isinstance(entry, CheckpointEntry):
                checkpoint = entry
            else:
                # What the turn streamed so far: the deltas before, and these.
                content = checkpoint.content if checkpoint is not None else ""
                thinking = checkpoint.thinking if checkpoint is not None else ""
                added = {"content": [content], "thinking": [thinking]}
                for channel, text in entry.deltas:
                    added[channel].append(text)
                checkpoint = CheckpointEntry(
                    entry.turn, "".join(added["content"]), "".join(added["thinking"])
                )
        elif isinstance(entry, AttemptEntry):
            if entry.fence <= fence:
                raise drift(index, f"an attempt with fence {entry.fence} after fence {fence}")
            fence = entry.fence
            takeovers += entry.reason == "takeover"
        elif isinstance(entry, AskEntry):
            unknown = [cid for cid in entry.calls if cid not in calls]
            if unknown or not entry.calls:
                raise drift(index, f"an approval request for calls {unknown or '(none)'}")
            asked = {cid: entry.reasons.get(cid, "") for cid in entry.calls}
            answers = {}
        elif isinstance(entry, AnswerEntry):
            if entry.call_id not in asked:
                raise drift(index, f"an answer for call {entry.call_id!r}, which was not asked")
            if entry.call_id in answers:
                raise drift(index, f"a second answer for call {entry.call_id!r}")
            answers[entry.call_id] = entry
        elif isinstance(entry, TerminalEntry):
            terminal = entry
        else:  # pragma: no cover - the union is closed
            raise drift(index, f"an unknown entry {entry!r}")
    open_calls = tuple(call for cid, call in calls.items() if cid not in results)
    unsettled = 0
    if checkpoint is not None:
        unsettled = estimate_tokens(checkpoint.content) + estimate_tokens(checkpoint.thinking)
    if checkpoint is not None and (checkpoint.content or checkpoint.thinking):
        # A turn cut before it settled: what it streamed stays, marked interrupted.
        messages.append(
            Message.assistant(checkpoint.content, thinking=checkpoint.thinking, interrupted=True)
        )
    if requested > turns:
        usage = None  # a call was lost (started, never settled): what it cost is unknown
    made = Replay(
        tuple(messages),
        max(turns, requested),
        usage,
        open_calls,
        intents,
        results,
        asked,
        answers,
        checkpoint,
        terminal,
        unsettled,
        known,
        estimate,
        takeovers,
    )
    if history is not None:
        _check_history(job, made, history)
    return made


def _answer_tokens(message: Message) -> int:
    """A response's tokens by estimate: its text, thinking and calls' arguments."""
    return (
        estimate_tokens(message.content)
        + estimate_tokens(message.thinking)
        + sum(estimate_tokens(dumps(call.arguments)) for call in message.calls)
    )


def _check_history(job: str, made: Replay, history: Sequence[Message]) -> None:
    expected = list(made.messages)
    # The checkpoint is this replay's reading; the stored history need not have it yet.
    if (
        made.checkpoint is not None
        and expected
        and expected[-1].interrupted
        and len(history) == len(expected) - 1
    ):
        expected = expected[:-1]
    if len(history) != len(expected):
        raise JournalDrift(
            job, f"the history has {len(history)} messages, the journal {len(expected)}"
        )
    for position, (stored, journaled) in enumerate(zip(history, expected, strict=True)):
        if _essence(stored) != _essence(journaled):
            raise JournalDrift(job, f"message {position + 1} of the history is not the journal's")


def _essence(message: Message) -> tuple[Any, ...]:
    # What a message says, not when or under which id it was minted (a replayed checkpoint
    # message is minted anew).
    return (
        message.role,
        message.content,
        message.thinking,
        message.calls,
        message.tool_call_id,
        message.images,
        message.interrupted,
    )


def decide(job: str, made: Replay, *, idempotent: Callable[[str], bool]) -> list[Decision]:
    """For each call of the open batch, in call order, what a continuing worker does (see
    :class:`Decision`): one that never started runs, one that started runs again with its key
    only if ``idempotent(tool name)``, and is otherwise answered :data:`UNKNOWN_EFFECT`. Calls
    with a recorded result are not open (their results stand). Never re-runs a call silently."""
    out: list[Decision] = []
    last = next((m for m in reversed(made.messages) if m.role is Role.ASSISTANT and m.calls), None)
    index_of = {call.id: i for i, call in enumerate(last.calls)} if last is not None else {}
    for call in made.open:
        key = made.intents.get(call.id)
        if key is None:
            fresh = idempotency_key(job, made.settled, index_of.get(call.id, 0))
            out.append(Decision("run", call, fresh))
        elif idempotent(call.name):
            out.append(Decision("rerun", call, key))
        else:
            out.append(
                Decision("unknown", call, key, ToolFailure(call.id, call.name, UNKNOWN_EFFECT))
            )
    return out


class CheckpointPolicy:
    """When to checkpoint a turn's streamed text: every ``every`` deltas, and at every tool
    boundary (a call, a result, an approval) -- :meth:`boundary` always says yes and starts a
    new count."""

    __slots__ = ("_seen", "every")

    def __init__(self, every: int = CHECKPOINT_EVERY) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoints come every N >= 1 deltas, not {every!r}")
        self.every = every
        self._seen = 0

    def delta(self) -> bool:
        """A delta streamed: whether to checkpoint now."""
        self._seen += 1
        if self._seen >= self.every:
            self._seen = 0
            return True
        return False

    def boundary(self) -> bool:
        """A tool boundary: checkpoint now."""
        self._seen = 0
        return True
