"""One run's state and its bookkeeping (:class:`_RunState`): what it appended, spent and
showed, its log events, chunks and listeners' events, its commits (journaled first), what a
cut commits; and where a continued durable run stands (:class:`Resume`) and what a journal
makes durable (:class:`RunJournal`)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import attrs
import trio

from protocols.accounting import BudgetMeter, Cost, Pricing
from protocols.authority import Authority
from protocols.context import Scope, build
from protocols.jobs import Decision
from protocols.live import usage_parts
from protocols.messages import (
    AgentResult,
    FinishReason,
    GuardrailTrip,
    Message,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolResult,
    Usage,
)
from protocols.workspace import WorkspaceManager

from ._core._abort import Abort
from ._output_stream import OutputStream
from ._pricing import price_result, price_usage
from ._run_events import AgentEvent, Chunk
from .conversation import Conversation
from .providers import FallbackEvent, RetryEvent
from .providers._fallback import _Observer as _FallbackObserver
from .tools import NOT_EXECUTED, ToolBatch, ToolRegistry

_T = TypeVar("_T")

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from protocols.live import EventLog

    from ._request import _Request
    from ._tracing import RunTrace
    from .agent import Agent
    from .providers import ProviderStream


#: How long a cancelled run may take to commit its partial (seconds, shielded).
COMMIT_DEADLINE = 5.0


@attrs.frozen
class Resume:
    """Where a journaled run that is being continued stands: the provider calls it made
    (``turns``), what its settled responses reported (``usage``: ``None`` once part of it is
    unknown), the tokens a call lost in a crash streamed (``unsettled``, by estimate), and what
    to do with each call of its open batch. ``known`` is what was reported when ``usage`` is
    unknown (the sum of the responses that reported), and ``estimate`` the tokens of the
    settled responses that reported nothing, by estimate: a budget is charged both, as an
    estimate."""

    turns: int = 0
    usage: Usage | None = attrs.field(factory=Usage)
    unsettled: int = 0
    decisions: tuple[Decision, ...] = ()
    known: Usage = attrs.field(factory=Usage)
    estimate: int = 0


class RunJournal(Protocol):
    """What a journaled run makes durable, each before the boundary it guards
    (:mod:`actors.durable` implements it). A write the store refuses as fenced drops the run:
    the journal cuts it and writes nothing more."""

    async def request(self, turn: int) -> None:
        """A provider call of ``turn`` is about to start."""

    async def response(self, message: Message, usage: Usage | None) -> None:
        """A settled response, before any of its calls is dispatched."""

    async def message(self, message: Message) -> None:
        """Another message the run adds."""

    async def results(self, results: Sequence[ToolResult]) -> None:
        """Results of the open batch (those not journaled yet, of calls it knows)."""

    async def checkpoint(self, turn: int, content: str, thinking: str) -> None:
        """What the turn in flight has streamed so far (a cut turn's whole partial)."""

    def stream(self, turn: int, channel: str, text: str) -> None:
        """A delta the turn in flight streamed (as shown), to be journaled behind the run."""

    async def gate(
        self,
        calls: Sequence[ToolCall],
        authority: Authority | None,
        registry: ToolRegistry,
        scope: Scope | None,
    ) -> None:
        """Before a batch runs: make the run wait for approvals no human has given yet, and
        for answers to the questions ``registry``'s question tool (in ``scope``) asks."""

    def tools(self, registry: ToolRegistry) -> ToolRegistry:
        """``registry`` with each tool recording its call's intent before its effect and its
        result after."""
        ...

    def key(self, call_id: str) -> str | None:
        """The idempotency key of a call of the open batch."""
        ...


class _RunState:
    """The state of one run -- what it appended, its usage, what to commit on a cancel -- and
    what it publishes (its log, its chunks, its events) and commits (its messages, journaled
    first). The loop that drives it is :class:`~actors._run_loop._Run`."""

    def __init__(
        self, agent: Agent, request: _Request, meter: BudgetMeter | None, number: int
    ) -> None:
        self.agent = agent
        self.request = request
        self.meter = meter
        self.number = number
        self.run_id = request.run_id
        self.path = request.path
        self.conversation: Conversation = request.conversation or agent.conversation
        self.deps = (
            request.deps if request.deps is not None else agent._option(request.options, "deps")
        )
        self.token: Abort = request.watch if request.watch is not None else request.token
        # How often each identical call (name + canonical arguments) has been run.
        self.seen: dict[str, int] = {}
        # Automatic compaction gave up for this run (futile, or its summarizer failed).
        self.futile = False
        # The window guard refused the last provider call (the error is ours, not a vendor's).
        self.refused = False
        self.output: Any = None
        self.scope: trio.CancelScope | None = None
        self.appended: list[Message] = []
        self.usage: Usage | None = _NOTHING  # None once a turn's usage is unknown
        # What the runs this run delegated to spent (None once one of them is unknown).
        self.delegated: Usage | None = _NOTHING
        self.estimated = False
        # The finish reason of the run's last provider call (None: it made none yet).
        self.finish: FinishReason | None = None
        self.turns_made = 0
        self.thinking: list[str] = []
        self.budget_tripped = False
        # What a cancel must commit: the stream of the turn in flight, or its tool batch.
        self.stream: ProviderStream | None = None
        self.batch: ToolBatch | None = None
        # Calls of a committed assistant message whose results are not committed yet.
        self.open_calls: tuple[ToolCall, ...] = ()
        # A handoff tool of the last batch: the agent to answer the rest of this turn.
        self.handoff: Agent | None = None
        # The agent whose answer ended the run, after a handoff.
        self.answered_by: str | None = None
        self.pace: Callable[[Any], Awaitable[None]] | None = agent._option(request.options, "pace")
        # What prices the run's calls (None: nobody does -- usage carries no cost), and the
        # currency of its model's rates (an unknown cost is said in it, when known).
        self.pricing: Pricing | None = agent._option(request.options, "pricing")
        prices = meter.prices if meter is not None else None
        self.currency: str | None = prices.currency if prices is not None else None
        #: The run's event log (None: a journaled run, whose log is its journal's).
        self.live: EventLog | None = request.live
        self.journal: RunJournal | None = request.journal
        # The run's spans (None: not traced), and the context of the tool call that handed
        # the run on (a handoff), the parent of the handed-to run's span.
        self.trace: RunTrace | None = request.trace
        # A structured run's partial answers, as ``output`` chunks (None: not one, or unread).
        self.partial: OutputStream | None = None
        self.handed_from: Context | None = None
        # The seq before the first delta of the provider attempt in flight (None: it has shown
        # none yet): where a rewind of a fallback provider's voided attempt goes back to.
        self.void_to: int | None = None
        # The guardrail that ended the run (its stop is ``guardrail``).
        self.tripped: GuardrailTrip | None = None
        # How the run hears the fallbacks of the streams it consumes (see provider_turn).
        self.observer = _FallbackObserver(self.fell_back, self.journal is None)
        # The run ended and let go of its request (release).
        self.ended = False

    def show(
        self,
        kind: Literal["content", "thinking", "tool_call", "tool_result", "progress"],
        text: str = "",
        *,
        call: ToolCall | None = None,
        result: ToolResult | None = None,
    ) -> None:
        """Publish one of the run's own chunks: in its log, then to its stream."""
        seq = 0
        live = self.live
        if live is not None:
            if kind == "content" or kind == "thinking":  # noqa: PLR1714 - the hot path
                seq = live.add(kind, text)
            elif kind == "tool_call":
                seq = live.add(kind, call)  # (read back as {"call": call})
            elif kind == "tool_result":
                seq = live.add(kind, result)  # (read back as {"result": result})
            else:
                seq = live.add(kind, {"call_id": call.id if call else None, "text": text})
        request = self.request
        if request.forward is not None or request.send is not None:  # (else nobody reads it)
            self.emit(Chunk(kind, text, call, result, None, False, self.run_id, (), seq))

    def emit(self, chunk: Chunk) -> None:
        request = self.request
        forward = request.forward
        if forward is not None:
            forward(chunk)
        elif request.send is not None and not request.deliver(chunk):
            # The consumer went away without closing the run: that is a cancel, never a crash.
            request.token.cancel("the stream's consumer went away")

    def total(self) -> Usage | None:
        """What the run and the runs it delegated to spent (``None``: not all of it is known)."""
        usage, delegated = self.usage, self.delegated
        if delegated is _NOTHING:  # (it delegated nothing: no sum to make)
            return usage
        return None if usage is None or delegated is None else usage + delegated

    def result(self, stop: StopReason) -> AgentResult:
        content = ""
        for message in reversed(self.appended):
            if message.role is Role.ASSISTANT:
                content = message.content
                break
        # Made without AgentResult's checks: each part is valid already (messages the
        # conversation took, usages and reasons the run's turns built) -- see _RESULT_FIELDS.
        made: AgentResult = _new(AgentResult)
        _set(made, "content", content)
        _set(made, "thinking", "\n\n".join(filter(None, self.thinking)))
        _set(made, "messages", tuple(self.appended))
        _set(made, "usage", self.usage)
        _set(made, "stop", stop)
        _set(made, "partial", stop is not StopReason.COMPLETE)
        _set(made, "turns", self.turns_made)
        _set(made, "output", self.output)
        _set(made, "estimated", self.estimated)
        _set(made, "run_id", self.run_id)
        _set(made, "agent", self.answered_by or self.agent.name)
        _set(made, "total_usage", self.total())
        _set(made, "finish", self.finish)
        _set(made, "guardrail", self.tripped if stop is StopReason.GUARDRAIL else None)
        return made

    def cut_reason(self) -> StopReason:
        """Why the run is being cut, as its stop reason would say."""
        if self.budget_tripped:
            return StopReason.BUDGET
        if trio.current_time() >= self.deadline():
            return StopReason.TIMEOUT
        return StopReason.CANCELLED

    def deadline(self) -> float:
        """The run's deadline (``inf``: none), in :func:`trio.current_time` terms."""
        scope = self.scope
        own = scope.deadline if scope is not None else math.inf
        return min(own, self.request.deadline)

    def relay(self, event: AgentEvent) -> None:
        """Pass an event of a run below this one to this run's listeners and up."""
        if self.agent._listeners:
            self.agent._emit(event)
        forward = self.request.forward_event
        if forward is not None:
            forward(event)

    def release(self) -> None:
        """The run has ended and delivered its outcome: what it did stays readable (its usage,
        turns, messages), and it lets go of its request and its callbacks -- so that it is freed
        as soon as its last reader is done, with no reference cycle left for the garbage
        collector. Whatever a tool still calls on it afterwards does nothing."""
        self.ended = True
        del self.request
        self.observer = _RELEASED

    def progress(self, call_id: str, text: str, data: Mapping[str, Any]) -> None:
        if self.ended:
            return  # (a tool reporting after its run ended: nobody reads it any more)
        call = next((c for c in self.open_calls if c.id == call_id), None)
        self.show("progress", text, call=call)
        self.event("progress", call=call, text=text, data=dict(data))

    def delegated_to(self, usage: Usage | None, *, estimated: bool = False) -> None:
        """A run this run delegated to ended having spent ``usage`` (its total; ``estimated``:
        it includes estimates, which this run's total then does too)."""
        delegated = self.delegated
        self.delegated = None if delegated is None or usage is None else delegated + usage
        self.estimated = self.estimated or (estimated and usage is not None)

    def resumed(self, resume: Resume) -> None:
        """A continued run: what its earlier attempts spent counts toward its limits, and its
        usage. Unknown stays unknown -- unless a budget charges it, by estimate (then the run's
        usage is that estimate too, and ``estimated``); never the known part as the whole."""
        self.turns_made = resume.turns
        self.usage = resume.usage
        meter = self.meter
        if meter is None:
            return
        guessed = resume.unsettled + (resume.estimate if resume.usage is None else 0)
        spent = resume.usage if resume.usage is not None else resume.known
        meter.charge(spent)
        if resume.usage is None or guessed:
            meter.charge(Usage(completion=guessed), estimated=True)
            self.usage = spent + Usage(completion=guessed)
            self.estimated = True

    async def add(self, *messages: Message) -> None:
        # Shielded: a commit is quick (a local actor call) and must be known to have happened
        # or not -- a cancel landing mid-call could otherwise commit a tool call unrecorded.
        conversation = self.conversation
        if not conversation._add_now(messages):  # the actor is busy: queue behind its work
            with trio.CancelScope(shield=True):
                await conversation.add(messages)
        self.appended.extend(messages)

    async def respond(self, message: Message, usage: Usage | None) -> None:
        """Commit a settled response: journaled first (before any of its calls runs)."""
        if self.journal is not None:
            await self.journal.response(message, usage)
        await self.add(message)

    async def note(self, message: Message) -> None:
        """Commit a message of the run's own (journaled first)."""
        if self.journal is not None:
            await self.journal.message(message)
        await self.add(message)

    async def record(self, results: Sequence[ToolResult]) -> None:
        """Commit results of the open batch (journaled first)."""
        if self.journal is not None:
            await self.journal.results(results)
        await self.add(*(Message.from_result(r) for r in results))

    def retried(self, retry: RetryEvent) -> None:
        status = f" (HTTP {retry.status})" if retry.status is not None else ""
        self.event("retry", attempt=retry.attempt, delay=retry.delay, reason=retry.code + status)

    def fell_back(self, event: FallbackEvent) -> None:
        """The turn's call left a member of a fallback provider for the next: what the attempt
        left behind cost is charged (every attempt is paid for); one that had streamed is
        voided -- a ``rewind`` in the log (to the seq before its first delta) and a ``rewind``
        chunk -- and stays charged, as a turn cut with nothing reported is (by estimate, with
        a budget; unknown without one); then the ``fallback`` event."""
        draw = event.usage
        pricing = self.pricing
        if pricing is not None and draw is not None and draw.cost is None:
            # The attempt left behind is priced as the member that made it.
            cost = price_usage(pricing, self.agent.provider, draw, member=event.provider)
            draw = draw.priced(cost if cost is not None else Cost.unavailable(self.currency))
        meter = self.meter
        if event.rewind:
            if self.void_to is None:  # (nothing of it was shown: the rewind says so anyway)
                self.void_to = self.live.last if self.live is not None else 0
            self.void_shown()  # the next member's answer is read from the start
            if meter is not None:
                thinking = event.partial.thinking if event.partial is not None else ""
                draw = meter.reconcile(draw, thinking=thinking)
                self.estimated = self.estimated or event.usage is None
                if pricing is not None and draw.cost is None:  # (an estimate: no cost known)
                    draw = draw.priced(Cost.unavailable(self.currency))
            self.usage = None if self.usage is None or draw is None else self.usage + draw
        elif draw is not None:
            if meter is not None:
                meter.charge(draw)
            if self.usage is not None:
                self.usage = self.usage + draw
        self.void_to = None
        self.event("fallback", reason=event.describe(), fallback=event)

    def void_shown(self) -> None:
        """Take back what the provider call of the turn showed (nothing when it showed
        nothing): a ``rewind`` in the log to the seq before its first delta, and a ``rewind``
        chunk."""
        to = self.void_to
        self.void_to = None
        if to is None:
            return
        seq = 0
        live = self.live
        if live is not None:
            seq = live.add("rewind", {"to": to})
        request = self.request
        if request.forward is not None or request.send is not None:
            self.emit(Chunk("rewind", "", None, None, None, False, self.run_id, (), seq))
        if self.partial is not None:
            self.partial.begin()  # what it showed of a structured answer is void too

    def asked(self, call: ToolCall, reason: str) -> None:
        """The authority asks a human about ``call``: the run waits for the approver."""
        live = self.live
        if live is not None:
            live.add(
                "approval_requested", {"call_id": call.id, "tool": call.name, "reason": reason}
            )

    def answered(self, call: ToolCall, allow: bool, reason: str) -> None:
        """The approver answered about ``call`` (or, with none attached, the ask was denied)."""
        live = self.live
        if live is not None:
            live.add("approval_answered", {"call_id": call.id, "allow": allow, "reason": reason})

    def compacted(self, reason: Literal["window", "overflow"], replaced: int) -> None:
        """The run compacted its conversation: ``replaced`` messages now stand as a summary
        (``window``: its prompt reached the agent's window; ``overflow``: the provider refused
        it as too long)."""
        live = self.live
        if live is not None:
            live.add("compaction", {"reason": reason, "replaced": replaced})

    def started(self) -> None:
        """The run begins: in its log (a handed-to run goes on in the log of the run that
        handed to it: no second ``started`` there -- the ``handoff`` event says who answers),
        and to its listeners."""
        live = self.live
        if live is not None and self.request.owns_log:
            live.add("started", self.agent.name)  # (read back as {"agent": ...})
        self.notify("start")

    def event(self, kind: Any, **fields: Any) -> None:
        """An event for the agent's listeners, which the run's log also holds if it is one of
        :data:`_LOGGED` (the hot ones -- a turn, a usage, a tool's end -- go to :meth:`notify`:
        their log events are added where they happen)."""
        live = self.live
        if live is not None:
            logged = _LOGGED.get(kind)
            if logged is not None:
                live.add(logged[0], logged[1](self, fields))
        self.notify(kind, **fields)

    def notify(self, kind: Any, **fields: Any) -> None:
        """An event for the agent's listeners only (built only if somebody listens)."""
        agent = self.agent
        forward = self.request.forward_event
        if agent._listeners or forward is not None:  # nobody listening: build no event
            event = AgentEvent(
                kind, self.number, turn=self.turns_made, run_id=self.run_id, **fields
            )
            if agent._listeners:
                agent._emit(event)
            if forward is not None:
                forward(event)

    def prompt(self, extra: Sequence[Message] = ()) -> tuple[Message, ...]:
        """The next request's messages, built fresh (``extra`` is appended, never stored)."""
        agent = self.agent
        source = agent.workspace
        active = source.active if isinstance(source, WorkspaceManager) else source
        built = build(
            self.conversation._history_now().view(),
            system=agent.system,
            instructions=agent.instructions,
            files=active.files() if active is not None else (),
            scope=agent.scope,
        )
        return (*built, *extra)

    def settle_usage(self, result: ProviderResult) -> None:
        """Account a finished (or cut) turn: what was reported; unreported usage stays unknown
        (``None``), or, with a budget, is charged by estimate and marked so (its cost, with
        pricing, ``unavailable``). A priced turn's usage carries its cost (see
        :func:`~actors._pricing.price_result`)."""
        draw: Usage | None
        estimated = False
        if self.meter is not None:
            draw = self.meter.reconcile(result.usage, thinking=result.thinking)
            estimated = result.usage is None
            self.estimated = self.estimated or estimated
            if estimated and self.pricing is not None:
                # Tokens estimated for a budget: what they cost is not known (not a floor).
                draw = draw.priced(Cost.unavailable(self.currency))
        else:
            draw = result.usage
        usage = self.usage
        if usage is None or draw is None:
            self.usage = None
        else:
            # (Nothing spent yet: the sum is the draw itself -- no tokens and no cost add
            # nothing.)
            self.usage = draw if usage is _NOTHING else usage + draw
        self.finish = result.finish
        self.thinking.append(result.thinking)
        seq = 0
        live = self.live
        if live is not None:
            finish = result.finish
            seq = live.add(
                "usage",
                usage_parts(draw, estimated, finish),  # (a finish reason is a str)
            )
        request = self.request
        if request.forward is not None or request.send is not None:  # (else nobody reads it)
            self.emit(Chunk("usage", "", None, None, draw, estimated, self.run_id, (), seq))
        self.notify("usage", usage=draw, estimated=estimated, finish=result.finish)

    async def commit_partial(self) -> None:
        """After a cancel or a failure: commit what the cut turn produced, with a result for
        every call (running ones interrupted, the others not executed)."""
        with trio.CancelScope(shield=True) as shield:
            shield.deadline = trio.current_time() + COMMIT_DEADLINE
            stream, self.stream = self.stream, None
            if stream is not None:
                partial = stream.partial
                if self.pricing is not None:
                    partial = price_result(
                        self.pricing, self.agent.provider, partial, self.currency
                    )
                self.settle_usage(partial)
                if self.journal is not None and (partial.content or partial.thinking):
                    await self.journal.checkpoint(
                        self.turns_made, partial.content, partial.thinking
                    )
                if partial.content or partial.calls:
                    await self.add(
                        Message.assistant(
                            partial.content,
                            calls=partial.calls,
                            thinking=partial.thinking,
                            interrupted=True,
                        )
                    )
                    self.open_calls = partial.calls
            if self.open_calls:
                batch = self.batch
                settled = batch.settled() if batch is not None else []
                # Every open call is answered, also one the batch running did not hold (a
                # client tool's call, whose turn ran the agent's own calls alone).
                answered = {tool_result.id for tool_result in settled}
                settled += [
                    _failed(call, NOT_EXECUTED)
                    for call in self.open_calls
                    if call.id not in answered
                ]
                for tool_result in settled:
                    self.show("tool_result", result=tool_result)
                await self.record(settled)
                self.open_calls = ()
                self.batch = None


_NOTHING = Usage()

_new = object.__new__
_set = object.__setattr__

#: The fields :meth:`_RunState.result` sets: every field of AgentResult (checked at import, so
#: that a field added there is not left unset here).
_RESULT_FIELDS = frozenset(
    {
        "content",
        "thinking",
        "messages",
        "usage",
        "stop",
        "partial",
        "turns",
        "output",
        "estimated",
        "run_id",
        "agent",
        "total_usage",
        "finish",
        "guardrail",
    }
)
if {field.name for field in attrs.fields(AgentResult)} != _RESULT_FIELDS:  # pragma: no cover
    raise RuntimeError("_RunState.result does not set every field of AgentResult")


#: A released run's fallback observer: it hears nothing (see :meth:`_Run.release`).
_RELEASED = _FallbackObserver(lambda _event: None, False)


def _failed(call: ToolCall, text: str) -> ToolResult:
    return ToolFailure(call.id, call.name, text)


def _reason_data(run: _RunState, fields: dict[str, Any]) -> dict[str, Any]:
    error = fields.get("error")
    return {"reason": fields.get("reason") or (str(error) if error is not None else "")}


def _call_id(fields: dict[str, Any]) -> str | None:
    call = fields.get("call")
    return call.id if call is not None else None


#: The listener events a run's log also holds: their kind in the log, and their data there.
#: (``started`` and ``turn``, the hot ones, are logged where they happen.)
_LOGGED: dict[str, tuple[str, Callable[[_RunState, dict[str, Any]], Any]]] = {
    "retry": (
        "retry",
        lambda run, fields: {
            "attempt": fields["attempt"],
            "delay": fields["delay"],
            "reason": fields["reason"],
        },
    ),
    "fallback": (
        "fallback",
        lambda run, fields: {
            "provider": fields["fallback"].provider,
            "next": fields["fallback"].next,
            "reason": fields["reason"],
            "rewind": fields["fallback"].rewind,
        },
    ),
    "guard": ("guard", _reason_data),
    "fault": ("fault", _reason_data),
    "subagent_start": (
        "subagent_started",
        lambda run, fields: {
            "call_id": _call_id(fields),
            "agent": fields.get("agent"),
            "run_id": fields.get("child"),
        },
    ),
    "subagent_finish": (
        "subagent_finished",
        lambda run, fields: {
            "call_id": _call_id(fields),
            "run_id": fields.get("child"),
            "status": fields.get("status"),
        },
    ),
    "handoff": (
        "handoff",
        lambda run, fields: {"call_id": _call_id(fields), "agent": fields.get("agent")},
    ),
}
