"""The run's event log, sans-IO: what every observer of a run reads -- the caller's stream, other
followers, the relay's frames and SSE, the durable job's watchers.

A run publishes :class:`RunEvent`\\ s, numbered ``seq`` 1, 2, 3, ... per run, each once: a seq never
stands for two events with different content, in any process. The last event is terminal
(:data:`TERMINAL`: ``finished``, ``failed``, ``cancelled``, ``awaiting_input``); nothing belongs
to that stream after it (002's terminal rule).

* :class:`EventLog` keeps one run's events in memory, bounded: a follower that fell behind what
  it keeps reads a ``gap`` event (:func:`gap`) saying which events it cannot have and where to go
  on, never a silent hole.
* :class:`JournalEvents` derives a durable job's events from its journal, deterministically: the
  same journal gives the same events under the same seqs, in any process, after any restart. A
  continued attempt (a takeover, a retry) starts with a ``rewind`` event saying up to which seq
  the log stands (``data["to"]``): what a dead worker showed beyond it was never published.
* :func:`event_to_json` / :func:`event_from_json` carry an event on a wire (strict JSON);
  :func:`event_to_sse` frames one as a Server-Sent Event whose ``id:`` is its seq, and
  :func:`last_event_id` reads the seq a resuming client sends back (``Last-Event-ID``).

Nothing here waits; :mod:`actors` publishes and follows. How each kind's data is checked off a
wire (and the bounds on it) is in :mod:`protocols._live_checks`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from time import time as _wall_clock
from typing import Any, Final, Literal

import attrs

from ._json import JSON
from ._live_checks import (
    _CHECKS,
    _DATA,
    _NONE,
    _OBJECTS,
    MAX_ASKED,  # noqa: F401 - a constant of this module before the split
    MAX_ID_CHARS,
    MAX_SEQ,  # noqa: F401 - a constant of this module before the split
    MAX_TEXT_CHARS,
    _int,
)
from .accounting import Cost
from .codec import to_json
from .errors import ProtocolError, ValidationError
from .jobs._journal import (
    AnswerEntry,
    AskEntry,
    AttemptEntry,
    CheckpointEntry,
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
from .messages import AgentResult, StopReason, ToolCall, Usage

__all__ = [
    "DEFAULT_CAPACITY",
    "KINDS",
    "MAX_ID_CHARS",
    "MAX_TEXT_CHARS",
    "SSE_KEEPALIVE",
    "TERMINAL",
    "EventLog",
    "JournalEvents",
    "RunEvent",
    "decimal_seq",
    "event_from_json",
    "event_to_json",
    "event_to_sse",
    "gap",
    "last_event_id",
    "terminal_for",
    "usage_parts",
]

#: Events an in-memory run keeps by default (a long answer's deltas and then some).
DEFAULT_CAPACITY: Final = 10_000

EventKind = Literal[
    "started",
    "turn",
    "content",
    "thinking",
    "tool_call",
    "tool_result",
    "progress",
    "usage",
    "retry",
    "fallback",
    "guard",
    "guardrail",
    "fault",
    "message",
    "approval_requested",
    "approval_answered",
    "subagent_started",
    "subagent_finished",
    "handoff",
    "compaction",
    "takeover",
    "rewind",
    "gap",
    "finished",
    "failed",
    "cancelled",
    "awaiting_input",
]

#: Every kind of event (``gap`` is never in a log: a follower that fell behind reads one).
KINDS: Final[frozenset[str]] = frozenset(EventKind.__args__)  # type: ignore[attr-defined]

#: The kinds that end a run's stream: nothing follows them in that stream.
TERMINAL: Final[frozenset[str]] = frozenset({"finished", "failed", "cancelled", "awaiting_input"})


@attrs.frozen(slots=True)
class RunEvent:
    """One thing that happened in run ``run_id``: its ``seq`` (1, 2, 3, ... in the run's order),
    ``kind`` (:data:`KINDS`), wall-clock ``time`` (seconds) and ``data``, by kind:

    * ``started``: ``agent`` (its name); ``turn``: ``turn`` (the provider call, from 1);
    * ``content`` / ``thinking``: ``text`` (a delta of the answer or of its reasoning);
    * ``tool_call``: ``call`` (a :class:`~protocols.messages.ToolCall`); ``tool_result``:
      ``result`` (a :class:`~protocols.messages.ToolResult`); ``progress``: ``call_id``,
      ``text`` (what a running tool reported);
    * ``usage``: ``usage`` (a :class:`~protocols.messages.Usage`, ``None`` when not reported),
      ``estimated``, ``finish`` (the call's finish reason);
    * ``retry``: ``attempt``, ``delay``, ``reason`` (a provider call tried again);
    * ``fallback``: ``provider``, ``next``, ``reason``, ``rewind`` (a fallback provider's call
      left member ``provider`` for ``next``, and why; ``rewind``: ``provider`` had streamed,
      and a ``rewind`` event right before this one voids what it showed);
    * ``guardrail``: ``name``, ``kind`` (``input``, ``output`` or ``tool``), ``reason``,
      ``call_id`` (the call a tool guard stopped; ``None`` otherwise): a guardrail tripped,
      and the run ends (``stop`` ``guardrail``);
    * ``guard`` / ``fault``: ``reason``; ``message``: ``message`` (a message the run added that
      is neither an answer nor a result);
    * ``approval_requested``: ``call_id``, ``tool``, ``reason`` (``None``: none given), and
      in a relay run ``call`` (the :class:`~protocols.messages.ToolCall` as JSON), and for a
      question a tool asks the human ``question`` (the
      :class:`~protocols.questions.Question` as JSON; ``reason`` is its prompt);
      ``approval_answered``: ``call_id``, ``allow``, ``reason``, and for an answered question
      ``answer`` (the answer, as checked);
    * ``subagent_started``: ``call_id``, ``agent``, ``run_id`` (the child run's id: follow it
      too); ``subagent_finished``: ``call_id``, ``run_id``, ``status``; ``handoff``:
      ``call_id``, ``agent``;
    * ``compaction``: ``reason`` (``window``: the prompt reached the agent's window;
      ``overflow``: the provider refused it as too long), ``replaced`` (how many messages the
      summary stands for);
    * ``takeover``: ``fence`` (another worker continues the durable run) with ``reason``
      (``takeover``, ``retry`` or ``answered``); ``rewind``: ``to`` (the last seq that stands:
      a client drops what it showed after it);
    * ``gap`` (never in a log): ``first`` -- the events ``first`` .. ``seq`` are gone from the
      log; the follower goes on after ``seq``;
    * terminal: ``finished`` / ``cancelled``: ``result`` (the
      :class:`~protocols.messages.AgentResult`; ``None`` for a job cancelled before its run
      had one) -- or, in a relay run (a provider call the relay made a run of), ``response``
      (the :class:`~protocols.messages.ProviderResult`, or the partial one, as JSON);
      ``failed``: ``error`` (``type``, ``code``, ``message``; a relay run's also
      ``retryable``); ``awaiting_input``: ``calls`` (the approvals asked: ``call_id``,
      ``tool``, ``reason`` each, and ``question`` for a question).
    """

    run_id: str
    seq: int
    kind: str
    time: float
    data: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def terminal(self) -> bool:
        """Nothing follows this event in its stream."""
        return self.kind in TERMINAL


def gap(run_id: str, first: int, last: int, time: float) -> RunEvent:
    """The event a follower reads for the events ``first`` .. ``last`` it cannot have (they
    are gone from the log): its seq is ``last``, so that going on after it is going on."""
    return RunEvent(run_id, last, "gap", time, {"first": first})


def terminal_for(result: AgentResult) -> str:
    """The terminal kind of a run that ended with ``result``: ``cancelled`` when it was
    cancelled, ``finished`` otherwise (a partial result says why in its ``stop``)."""
    return "cancelled" if result.stop is StopReason.CANCELLED else "finished"


# ---------------------------------------------------------------------------------------------
# The in-memory log


class EventLog:
    """One run's events in memory: at most ``capacity`` of the latest (older ones are
    dropped; a follower behind them reads a :func:`gap`). Seqs start at ``first`` (1).
    :meth:`add` after the terminal event raises :class:`~protocols.errors.ValidationError`.

    Adding is cheap (the run's hot path: an event is kept as its parts); an event is made a
    :class:`RunEvent` when first read, and every later reader gets that same object -- a
    thousand followers of a run read each event for the price of one."""

    __slots__ = (
        "_base",
        "_head",
        "_items",
        "_limit",
        "_read",
        "capacity",
        "ended",
        "last",
        "run_id",
        "wake",
    )

    def __init__(self, run_id: str, *, capacity: int = DEFAULT_CAPACITY) -> None:
        if type(capacity) is not int or capacity < 1:
            raise ValidationError(f"an event log's capacity must be an int >= 1, not {capacity!r}")
        self.run_id = run_id
        self.capacity = capacity
        #: The time the terminal event was added (``None``: the run goes on).
        self.ended: float | None = None
        #: Called after each :meth:`add` when set (a runtime wakes the followers waiting for
        #: the next event with it).
        self.wake: Callable[[], object] | None = None
        # The event of seq n is at index 3 * (n - _base - 1) of _items: its kind, data and
        # time, one after the other (no object is kept per event added: a run that nobody
        # follows costs one list); those of the first _head events are dropped (the list is
        # compacted once they are as many as half the capacity: amortized O(1) per add).
        # _read holds each event read, by seq (made by the first read).
        self._items: list[Any] = []
        self._read: dict[int, RunEvent] | None = None
        self._head = 0
        self._base = 0
        self._limit = capacity  # the last seq it keeps before it drops one: base + head + capacity
        #: The seq of the latest event (0: none yet).
        self.last = 0

    @property
    def first(self) -> int:
        """The seq of the oldest event still kept (``last + 1`` when none is)."""
        return self._base + self._head + 1

    def add(self, kind: str, data: Any, time: float | None = None) -> int:
        """Append an event; its seq. A terminal ``kind`` ends the log. A ``started`` event's
        ``data`` may be its agent's name alone, a ``turn``'s its number, a ``content`` or
        ``thinking`` delta's its text, a ``tool_call``'s its
        :class:`~protocols.messages.ToolCall`, a ``tool_result``'s its
        :class:`~protocols.messages.ToolResult`, a ``finished`` or ``cancelled`` one's its
        :class:`~protocols.messages.AgentResult`, a ``usage``'s the :func:`usage_parts` (the
        run's hot path): they read back as ``{"agent": data}``, ``{"turn": data}``,
        ``{"text": data}``, ``{"call": data}``, ``{"result": data}`` and the usage's data.
        ``time``: the event's (default: now, by the wall clock)."""
        if self.ended is not None:
            raise ValidationError(f"run {self.run_id}: an event after the terminal one")
        if time is None:
            time = _wall_clock()
        items = self._items
        items += (kind, data, time)
        seq = self.last = self.last + 1
        if seq > self._limit:
            self._compact()
        if kind in TERMINAL:
            self.ended = time
        if self.wake is not None:
            self.wake()
        return seq

    def _compact(self) -> None:
        # Drop the oldest event; once half the capacity is dropped, let go of them.
        self._limit += 1
        self._head += 1
        if self._head <= self.capacity // 2:
            return
        head, self._head = self._head, 0
        del self._items[: 3 * head]
        self._base += head
        read = self._read
        if read:
            for seq in [seq for seq in read if seq <= self._base]:
                del read[seq]

    def read(self, after: int, limit: int = 1000, *, now: float = math.nan) -> list[RunEvent]:
        """The events after seq ``after``, at most ``limit`` of them: a :func:`gap` first when
        some of them are gone (``now``: the gap's time)."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValidationError(f"after must be a seq (an int >= 0), not {after!r}")
        out: list[RunEvent] = []
        start = after + 1
        first = self._base + self._head + 1
        if start < first:
            out.append(gap(self.run_id, start, first - 1, now))
            start = first
            limit -= 1
        read = self._read
        if read is None:
            read = self._read = {}
        items = self._items
        base = self._base
        index = start - base - 1
        for at in range(index, min(len(items) // 3, index + limit)):
            seq = base + at + 1
            event = read.get(seq)
            if event is None:
                kind, data, time = items[3 * at : 3 * at + 3]
                event = read[seq] = RunEvent(self.run_id, seq, kind, time, _data(kind, data))
            out.append(event)
        return out


#: The kinds whose data the log may be given as its one value alone (the run's hot path: no
#: object made or kept per event added), and that value's name in the event's data.
_ALONE: Final[Mapping[str, str]] = {
    "started": "agent",
    "turn": "turn",
    "content": "text",
    "thinking": "text",
    "tool_call": "call",
    "tool_result": "result",
    "finished": "result",
    "cancelled": "result",
}


def usage_parts(
    usage: Usage | None, estimated: bool, finish: str | None
) -> tuple[int | bool | str | Decimal | None, ...]:
    """A ``usage`` event's data as :meth:`EventLog.add` may keep it: a tuple of plain values
    (which holds on to no object: an ended run's log is kept a while, and the collector
    passes over plain tuples; a priced usage adds its cost's amount, currency and
    provenance). It reads back as ``{"usage": ..., "estimated": ..., "finish": ...}``,
    ``usage`` an equal :class:`~protocols.messages.Usage`."""
    if usage is None:
        return (None, None, None, None, None, None, estimated, finish)
    cost = usage.cost
    if cost is None:
        return (
            usage.prompt,
            usage.completion,
            usage.total,
            usage.cached,
            usage.reasoning,
            usage.cache_write,
            estimated,
            finish,
        )
    return (
        usage.prompt,
        usage.completion,
        usage.total,
        usage.cached,
        usage.reasoning,
        usage.cache_write,
        estimated,
        finish,
        cost.amount,
        cost.currency,
        cost.provenance,
    )


def _data(kind: str, data: Any) -> Mapping[str, Any]:
    name = _ALONE.get(kind)
    if name is not None and not isinstance(data, Mapping):
        return {name: data}  # kept alone; the event shows it whole
    if kind == "usage" and type(data) is tuple:
        prompt, completion, total, cached, reasoning, cache_write, estimated, finish = data[:8]
        usage = None
        if prompt is not None:
            usage = Usage(
                prompt,
                completion,
                total,
                cached=cached,
                reasoning=reasoning,
                cache_write=cache_write,
                cost=Cost(*data[8:]) if len(data) > 8 else None,
            )
        # (A finish reason may be kept as its enum member: it reads back as its value.)
        return {
            "usage": usage,
            "estimated": estimated,
            "finish": None if finish is None else str(finish),
        }
    return data if data is not None else {}


# ---------------------------------------------------------------------------------------------
# A durable job's events, from its journal


class JournalEvents:
    """The events of job ``run_id`` (of agent ``agent``), derived from its journal: feed the
    entries in order
    (:meth:`feed`), in as many calls as they arrive; the events come out numbered from 1. The
    same entries always give the same events (content and seqs); times are the
    ``time``\\ s given with the entries (an entry's write), which only a display reads."""

    __slots__ = ("_calls", "_seq", "agent", "ended", "entries", "final", "run_id")

    def __init__(self, run_id: str, *, agent: str | None = None) -> None:
        self.run_id = run_id
        #: The job's agent, as its ``started`` event names it.
        self.agent = agent
        #: How many entries were fed.
        self.entries = 0
        #: The last event was terminal (a new attempt may follow an ``awaiting_input``).
        self.ended = False
        #: The last event ended the run for good (terminal, and not ``awaiting_input``).
        self.final = False
        self._seq = 0
        self._calls: dict[str, ToolCall] = {}  # the open batch's calls, by id

    @property
    def last(self) -> int:
        """The seq of the last event derived (0: none)."""
        return self._seq

    def feed(self, entries: Iterable[Entry], time: float = math.nan) -> list[RunEvent]:
        """The events the next ``entries`` add (none for an entry that shows nothing)."""
        out: list[RunEvent] = []
        for entry in entries:
            self.entries += 1
            out.extend(self._events(entry, time))
        return out

    def _event(self, kind: str, time: float, **data: Any) -> RunEvent:
        self._seq += 1
        self.ended = kind in TERMINAL
        self.final = self.ended and kind != "awaiting_input"
        return RunEvent(self.run_id, self._seq, kind, time, data)

    def _events(self, entry: Entry, time: float) -> Iterator[RunEvent]:
        if isinstance(entry, InputEntry):
            yield self._event("started", time, agent=self.agent)
        elif isinstance(entry, AttemptEntry):
            yield self._event("rewind", time, to=self._seq)
            yield self._event("takeover", time, fence=entry.fence, reason=entry.reason)
        elif isinstance(entry, RequestEntry):
            yield self._event("turn", time, turn=entry.turn)
        elif isinstance(entry, StreamEntry):
            for channel, text in entry.deltas:
                yield self._event(
                    "thinking" if channel == "thinking" else "content", time, text=text
                )
        elif isinstance(entry, ResponseEntry):
            message = entry.message
            self._calls = {call.id: call for call in message.calls}
            for call in message.calls:
                yield self._event("tool_call", time, call=call)
            yield self._event("usage", time, usage=entry.usage, estimated=False, finish=None)
        elif isinstance(entry, ResultEntry):
            yield self._event("tool_result", time, result=entry.result)
        elif isinstance(entry, MessageEntry):
            yield self._event("message", time, message=entry.message)
        elif isinstance(entry, AskEntry):
            asked = []
            for call_id in entry.calls:
                asking = self._calls.get(call_id)
                tool = asking.name if asking is not None else ""
                reason = entry.reasons.get(call_id, "")
                item: dict[str, Any] = {"call_id": call_id, "tool": tool, "reason": reason}
                question = entry.questions.get(call_id)
                if question is not None:
                    item["question"] = to_json(question)
                asked.append(item)
                yield self._event("approval_requested", time, **item)
            yield self._event("awaiting_input", time, calls=asked)
        elif isinstance(entry, AnswerEntry):
            answered: dict[str, Any] = {"allow": entry.allow, "reason": entry.reason}
            if entry.value is not None:
                answered["answer"] = entry.value
            yield self._event("approval_answered", time, call_id=entry.call_id, **answered)
        elif isinstance(entry, TerminalEntry):
            if entry.result is not None:
                yield self._event(terminal_for(entry.result), time, result=entry.result)
            elif entry.stop is StopReason.CANCELLED and not entry.error:
                yield self._event("cancelled", time, result=None)
            else:
                yield self._event("failed", time, **_failure(entry.error))
        # IntentEntry (a call about to run) and CheckpointEntry (an older journal's
        # accumulated text) show nothing.
        elif not isinstance(entry, IntentEntry | CheckpointEntry):  # pragma: no cover
            raise ProtocolError(f"no events for a journal entry {entry.kind!r}", code="decode")


def _failure(error: str | None) -> dict[str, Any]:
    text = error or "the job ended without a result"
    kind, _, message = text.partition(": ")
    if not message:
        kind, message = "JobError", text
    return {"error": {"type": kind, "code": None, "message": message}}


# ---------------------------------------------------------------------------------------------
# On a wire

assert set(_DATA) == KINDS, "every kind has its data's fields"


def event_to_json(event: RunEvent) -> dict[str, JSON]:
    """``event`` as strict JSON data: ``{"run_id", "seq", "kind", "time", "data"}`` (a time
    that is not a finite number is left out). :func:`event_from_json` reads it back as the same
    event (an event whose data is what :class:`RunEvent` lists for its kind)."""
    objects = _OBJECTS.get(event.kind, _NONE)
    data: dict[str, JSON]
    if objects:
        data = {
            key: to_json(value) if key in objects and value is not None else value
            for key, value in event.data.items()
        }
    else:
        data = dict(event.data)
    out: dict[str, JSON] = {
        "run_id": event.run_id,
        "seq": event.seq,
        "kind": event.kind,
        "data": data,
    }
    if math.isfinite(event.time):
        out["time"] = event.time
    return out


def event_from_json(data: Any) -> RunEvent:
    """The event :func:`event_to_json` made, checked strictly: the envelope's fields and none
    other (``run_id`` a non-empty id, ``seq`` an int from 1, ``kind`` one of :data:`KINDS`, an
    optional finite ``time``), and the data its kind has (:class:`RunEvent` lists them) -- each
    field present, of its type, texts at most :data:`MAX_TEXT_CHARS` characters, ids at most
    :data:`MAX_ID_CHARS`, no field unknown; a ``gap``'s ``first`` and a ``rewind``'s ``to``
    before its seq. Raises :class:`~protocols.errors.ProtocolError` ``code="decode"``."""
    if not isinstance(data, dict):
        raise ProtocolError("an event must be a JSON object", code="decode")
    unknown = [key for key in data if key not in _ENVELOPE]
    if unknown:
        shown = ", ".join(repr(key[:40]) for key in sorted(unknown)[:5])
        raise ProtocolError(f"an event has unknown fields {shown}", code="decode")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        shown = repr(kind[:40]) if isinstance(kind, str) else type(kind).__name__
        raise ProtocolError(f"unknown event kind {shown}", code="decode")
    run_id = data.get("run_id")
    if not isinstance(run_id, str) or not run_id or len(run_id) > MAX_ID_CHARS:
        raise ProtocolError(
            f"an event's run_id must be a non-empty string of at most {MAX_ID_CHARS} characters",
            code="decode",
        )
    seq = _int(1)(data.get("seq"), "seq")
    time = data.get("time", math.nan)
    if "time" in data and (
        isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time)
    ):
        raise ProtocolError("an event's time must be a finite number", code="decode")
    if "data" not in data:
        raise ProtocolError("an event lacks its data", code="decode")
    decoded = _CHECKS[kind](data["data"], "data")
    if kind == "gap" and decoded["first"] > seq:
        raise ProtocolError("a gap's first must be at most its seq", code="decode")
    if kind == "rewind" and decoded["to"] >= seq:
        raise ProtocolError("a rewind's to must be before its seq", code="decode")
    return RunEvent(run_id, seq, kind, float(time), decoded)


_ENVELOPE: Final = frozenset({"run_id", "seq", "kind", "time", "data"})


#: A Server-Sent Events comment that keeps an idle stream open through proxies.
SSE_KEEPALIVE: Final = b": keep-alive\n\n"


def event_to_sse(event: RunEvent) -> bytes:
    """``event`` as one Server-Sent Event: ``id:`` its seq (what a browser's ``EventSource``
    sends back as ``Last-Event-ID`` when it reconnects), ``event:`` its kind, ``data:`` the
    :func:`event_to_json` object on one line."""
    data = json.dumps(event_to_json(event), separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n".encode()


def last_event_id(value: str | None) -> int:
    """The seq a resuming client asks to go on after, from its ``Last-Event-ID`` header (or a
    query's ``after``): ``0`` for none. Raises :class:`~protocols.errors.ValidationError` for
    anything but a decimal seq of at most 18 digits."""
    return decimal_seq(
        value,
        most=10**18 - 1,
        refusal="Last-Event-ID must be the seq of an event (a decimal int >= 0)",
    )


def decimal_seq(value: str | None, *, most: int, refusal: str) -> int:
    """A seq a client sent as text (a header, a query's value): ``0`` for none; a decimal int
    from 0 to ``most``, blanks around it allowed -- else
    :class:`~protocols.errors.ValidationError` saying ``refusal``."""
    if value is None or value == "":
        return 0
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(most)):
        raise ValidationError(refusal)
    number = int(text)
    if number > most:
        raise ValidationError(refusal)
    return number
