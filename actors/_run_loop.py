"""The run loop of an agent: one run's turns -- provider calls, tool batches, the guards --
and what a cut run commits. :class:`~actors.agent.Agent` owns the runs; this module is the
loop it drives for each, with the chunks and events a run produces."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import attrs
import trio

from protocols.accounting import BudgetMeter, Cost, Pricing
from protocols.authority import Authority
from protocols.codec import dumps, loads
from protocols.context import Scope, build
from protocols.errors import (
    AgentsError,
    ConfigError,
    ProtocolError,
    ProviderError,
    ToolError,
    ValidationError,
)
from protocols.history import estimate_messages
from protocols.jobs import UNKNOWN_EFFECT, Decision
from protocols.live import usage_parts
from protocols.messages import (
    CUT_SHORT,
    AgentResult,
    FinishReason,
    GuardrailTrip,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    Usage,
)
from protocols.toolschema import schema_for, structure_value, validate_arguments
from protocols.workspace import WorkspaceManager

from . import _guarding
from ._core._abort import Abort
from ._output_stream import OutputStream, output_stream
from ._pricing import price_result, price_usage
from ._run_context import RunStep, _tool_run, context_for
from .conversation import CompactionError, Conversation, paying
from .providers import FallbackEvent, RetryEvent
from .providers._fallback import _OBSERVERS as _FALLBACK_OBSERVERS
from .providers._fallback import _Observer as _FallbackObserver
from .tools import NOT_EXECUTED, ToolBatch, ToolRegistry

_T = TypeVar("_T")

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from protocols.live import EventLog
    from protocols.settings import ModelSettings

    from ._tracing import RunTrace
    from .agent import Agent, _Request
    from .guardrails import Guardrail
    from .providers import ProviderStream

__all__ = [
    "COMMIT_DEADLINE",
    "EXHAUSTED",
    "EXHAUST_INSTRUCTION",
    "FALLBACK_SUMMARY",
    "OUTPUT_FEEDBACK",
    "OUTPUT_INSTRUCTION",
    "TOOLS_OFF",
    "UNKNOWN_TOOLS_FALLBACK",
    "AgentEvent",
    "Chunk",
    "OutputError",
    "Resume",
    "RunJournal",
]

log = logging.getLogger("trio_agents.agent")

#: The result text of calls the model asked for on the last turn the limit allowed.
EXHAUSTED = "not executed: the run reached its turn limit"

#: The result text of calls a model made in a run with ``tool_choice="none"`` (which then fails).
TOOLS_OFF = "not executed: tools are off for this request (tool_choice='none')"

#: How a run ends when the provider cut a reply short, by the reply's finish reason.
_CUT_STOP: Mapping[FinishReason, StopReason] = {
    FinishReason.LENGTH: StopReason.MAX_TOKENS,
    FinishReason.CONTENT_FILTER: StopReason.CONTENT_FILTER,
}

#: How long a cancelled run may take to commit its partial (seconds, shielded).
COMMIT_DEADLINE = 5.0

#: The instruction of the final tool-less call ``on_exhaust="summarize"`` makes (never stored).
EXHAUST_INSTRUCTION = (
    "You have reached the limit of tool-using turns for this request. Do not call any tools. "
    "Answer now, as well as you can, from what you have found so far, and say what is left "
    "undone."
)

#: The answer recorded when that final call answers with nothing.
FALLBACK_SUMMARY = "I reached my turn limit before I could finish, and have nothing to add."

#: The answer recorded when the final call after unknown tools answers with nothing.
UNKNOWN_TOOLS_FALLBACK = (
    "I could not finish: the tools I tried to use do not exist ({names}), and I have nothing "
    "to add."
)


class OutputError(AgentsError):
    """The model's final answer never matched the requested schema. ``issues`` are the
    problems with the last answer, ``attempts`` how many answers were checked; every attempt
    stays in the conversation."""

    def __init__(self, issues: Sequence[str], attempts: int) -> None:
        shown = "; ".join(issues[:5])
        super().__init__(
            f"the answer did not match the schema after {attempts} attempt(s): {shown}",
            code="output",
            retryable=False,
        )
        self.issues = tuple(issues)
        self.attempts = attempts


#: How a wrong structured answer is sent back to the model (``{issues}`` filled in).
OUTPUT_FEEDBACK = (
    "Your answer is not valid: {issues}. Answer again with only a JSON value that matches the "
    "requested schema, with no other text."
)

#: How the schema is stated when the provider has no native JSON-schema mode.
OUTPUT_INSTRUCTION = "Answer with only a JSON value matching this JSON Schema, and nothing else:\n"


@attrs.frozen
class _OutputSpec:
    """A requested output: its JSON Schema and, for a class, the class answers are built into."""

    schema: dict[str, Any]
    target: type | None

    @classmethod
    def of(cls, output: dict[str, Any] | type) -> _OutputSpec:
        if isinstance(output, dict):
            return cls(output, None)
        if isinstance(output, type):
            try:
                json_schema = schema_for(output)
            except ValidationError as error:
                raise ValidationError(f"output: {error.message}") from None
            if json_schema.get("type") == "object":
                return cls(json_schema, output)
        raise ValidationError(
            "output must be a JSON Schema (a dict) or a class whose values are JSON objects -- "
            f"a pydantic model, a dataclass, a TypedDict or an attrs class -- not {output!r}"
        )

    def read(self, text: str) -> tuple[Any, list[str]]:
        """The typed output of ``text``, or the problems with it."""
        body = text.strip()
        if body.startswith("```"):
            body = body.split("\n", 1)[1] if "\n" in body else ""
            body = body.rsplit("```", 1)[0]
        try:
            value = loads(body)
        except ProtocolError as error:
            return None, [f"it is not JSON ({error.message})"]
        problems = validate_arguments(self.schema, value)
        if problems:
            return None, problems
        if self.target is None:
            return value, []
        try:
            return structure_value(self.target, value), []
        except ValidationError as error:  # what the schema cannot say: a validator's refusal
            return None, [error.message]


@attrs.frozen
class AgentEvent:
    """Something that happened in a run, delivered to listeners after it happened.

    ``run`` is the run's number on this agent, ``run_id`` its id (the ``run_id`` of its
    :class:`~protocols.messages.AgentResult`); ``turn`` the provider calls made so far. An event
    of a delegated run, as the parent's listeners hear it, has a non-empty ``path`` (the
    delegation hops down to it, see :class:`~actors.RunStep`). By ``kind``:

    * ``start``: the run began (a run withdrawn while it waited never starts);
    * ``turn``: a provider call begins;
    * ``retry``: the provider call failed before anything streamed and is tried again --
      ``attempt`` (the failed attempt, from 1), ``delay`` (seconds until the next), ``reason``
      (the error code and HTTP status);
    * ``fallback``: the call of a :class:`~actors.providers.FallbackProvider` left one member
      for the next -- ``fallback`` (the :class:`~actors.providers.FallbackEvent`: which member,
      which next, why, whether what it streamed was voided by a rewind), ``reason`` (why, in
      words);
    * ``tool``: a call's ``result`` is in;
    * ``tool_error``: the tool behind ``call`` raised ``error``; ``result`` is the failure the
      model reads;
    * ``deny``: the authority refused ``call`` (``reason``);
    * ``usage``: a turn's ``usage`` (``None``: not reported; ``estimated``: charged to the
      budget by estimate because it was not reported) and ``finish``, its finish reason;
    * ``guard``: a guard refused a batch (``reason``);
    * ``guardrail``: a guardrail tripped and ends the run -- ``guardrail`` (the
      :class:`~protocols.messages.GuardrailTrip`: its name, kind and reason), ``reason``;
    * ``fault``: automatic compaction failed and the run goes on (``error``);
    * ``abort``: the run was cut, or withdrawn before it began (``reason``, ``stop``; ``error``:
      a failure that raced the cut, its cause -- ``None`` when the cut was the only one);
    * ``exhaust``: the turn limit was reached;
    * ``finish``: the run ended (``partial``, ``stop``, and ``finish``: the finish reason of
      its last provider call, ``None`` when it made none -- ``length`` or ``content_filter``
      with ``stop`` ``max_tokens`` or ``content_filter`` when the provider cut its last reply
      short);
    * ``error``: the run raised ``error``;
    * ``progress``: a tool reported progress (``call``, ``text``, ``data``);
    * ``subagent_start``: the tool ``call`` delegated to ``agent``, whose run is ``child``
      (``subagent:<call id>:<12 hex digits>``, unique: follow it by its id);
    * ``subagent_finish``: that run ended: ``status`` (its stop reason, or ``error``),
      ``duration`` (seconds), ``usage`` (its total, delegations included; ``estimated``: it
      includes estimates);
    * ``handoff``: the tool ``call`` handed the rest of the run to ``agent``.
    """

    kind: Literal[
        "start",
        "turn",
        "retry",
        "fallback",
        "tool",
        "tool_error",
        "deny",
        "usage",
        "guard",
        "guardrail",
        "fault",
        "abort",
        "exhaust",
        "finish",
        "error",
        "progress",
        "subagent_start",
        "subagent_finish",
        "handoff",
    ]
    run: int
    turn: int = 0
    call: ToolCall | None = None
    result: ToolResult | None = None
    usage: Usage | None = None
    reason: str | None = None
    stop: StopReason | None = None
    partial: bool | None = None
    error: BaseException | None = None
    attempt: int | None = None
    delay: float | None = None
    estimated: bool = False
    run_id: str = ""
    path: tuple[RunStep, ...] = ()
    text: str | None = None
    data: Mapping[str, Any] | None = None
    agent: str | None = None
    child: str | None = None
    status: str | None = None
    duration: float | None = None
    finish: FinishReason | None = None
    fallback: FallbackEvent | None = None
    guardrail: GuardrailTrip | None = None


@attrs.frozen
class Chunk:
    """One piece of a run, in order: ``content`` or ``thinking`` text, a ``tool_call`` the model
    made, a ``tool_result``, the ``usage`` of a finished turn (``None`` when the provider
    reported none; ``estimated`` when the run's budget charged it by estimate instead), or a
    tool's ``progress`` (``text``; ``call`` is the reporting call) -- or a ``rewind``: the
    ``content`` and ``thinking`` chunks of the provider call in flight so far are void (a
    :class:`~actors.providers.FallbackProvider` with ``rewind=True`` left a member that had
    streamed; the next member answers the turn from the start) -- or, in a run with ``output=``,
    an ``output``: the structured answer known so far (``output``: the dict of the fields
    complete so far, validated leniently -- see :class:`~protocols.toolschema.PartialOutput`;
    ``None`` once a new attempt began, before anything of it is known) of provider call
    ``attempt`` (from 1; a later attempt -- a retry, a turn after tools, a rewind -- starts
    over), emitted whenever it changes, only while somebody reads the chunks.

    ``run_id`` is the run that produced it; a chunk of a run delegated to (``as_tool``) reaches
    the parent's stream with the hops down to that run in ``path`` (empty for the run's own).
    ``seq`` is the chunk's event in the log of run ``run_id`` (:meth:`Runtime.watch
    <actors.Runtime.watch>`: follow the run from there, from anywhere): the event of that seq
    has the chunk's kind and data (``text``; ``call``; ``result``; ``usage`` and ``estimated``;
    ``progress``'s ``call_id`` and ``text``); an ``output`` chunk has no event of its own: its
    seq is that of the content delta it follows. 0 for a run whose log is not in memory -- a
    durable job's, which its queue's log is (``JobQueue.watch``)."""

    kind: Literal[
        "content", "thinking", "tool_call", "tool_result", "usage", "progress", "rewind", "output"
    ]
    text: str = ""
    call: ToolCall | None = None
    result: ToolResult | None = None
    usage: Usage | None = None
    estimated: bool = False
    run_id: str = ""
    path: tuple[RunStep, ...] = ()
    seq: int = 0
    output: Any = None
    attempt: int = 0


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


class _Run:
    """The state of one run: what it appended, its usage, and what to commit on a cancel."""

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
        return None if usage is None or delegated is None else usage + delegated

    def result(self, stop: StopReason) -> AgentResult:
        content = next(
            (m.content for m in reversed(self.appended) if m.role.value == "assistant"), ""
        )
        return AgentResult(
            content=content,
            thinking="\n\n".join(t for t in self.thinking if t),
            messages=self.appended,
            usage=self.usage,
            stop=stop,
            turns=self.turns_made,
            output=self.output,
            estimated=self.estimated,
            run_id=self.run_id,
            agent=self.answered_by or self.agent.name,
            total_usage=self.total(),
            finish=self.finish,
            guardrail=self.tripped if stop is StopReason.GUARDRAIL else None,
        )

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

    def progress(self, call_id: str, text: str, data: Mapping[str, Any]) -> None:
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

    async def turns(self, limit: int) -> StopReason:
        agent = self.agent
        options = self.request.options
        definitions: tuple[ToolDefinition, ...] | None = _advertised(agent)
        choice = agent._option(options, "tool_choice")
        tools_off = choice == "none"
        if tools_off:
            definitions = ()  # no tools this run: none advertised, and none will run
        client: frozenset[str] | None = None
        if options.client_tools and not tools_off:
            client = frozenset(tool.name for tool in options.client_tools)
            own = {d.name for d in definitions or ()}
            clash = sorted(client & own)
            if clash:
                raise ValidationError(
                    f"client_tools {', '.join(map(repr, clash))}: the agent has a tool of that name"
                )
            definitions = (*(definitions or ()), *options.client_tools)
        definitions = definitions or None
        provider_options = _provider_options(
            agent,
            agent._settings(options),
            agent._option(options, "think"),
            choice if definitions else None,
        )
        max_repeats: int = agent._option(options, "max_repeats") or 3
        unknown_streak: list[ToolCall] = []
        requested = agent._option(options, "output")
        if requested is None:
            requested = agent._option(options, "schema")  # the same option, by its first name
        spec = _OutputSpec.of(requested) if requested is not None else None
        configured: int | None = agent._option(options, "schema_retries")
        retries_left = 2 if configured is None else configured
        stated: tuple[Message, ...] = ()  # the schema, stated for a provider without a JSON mode
        if spec is not None:
            provider_options = attrs.evolve(provider_options, schema=spec.schema)
            self.partial = output_stream(self, spec.schema, Chunk)
        attempts = 0
        guards = agent._guardrails(options)
        watching: Sequence[Guardrail] = ()  # input guards to run alongside the first call
        tool_guards: Sequence[Guardrail] = ()
        if guards:
            tool_guards = [guard for guard in guards if guard.kind == "tool"]
            watching = await _guarding.before(self, guards)
            if self.tripped is not None:
                return StopReason.GUARDRAIL
        while self.turns_made < limit:
            if self.meter is not None and self.meter.spent:
                # Reported usage (prompt tokens, thinking) spent the budget after the stream:
                # no further turn starts. The last turn's tool calls have run and are answered.
                self.budget_tripped = True
                return StopReason.BUDGET
            if watching:
                # The first call, while the input guards check the input: its answer is
                # committed (and its calls run) only once they all passed.
                async with _guarding.alongside(self, watching) as watch:
                    result, provider_options, stated = await self.model_turn(
                        definitions, provider_options, stated, spec
                    )
                watching = ()
                if watch.trip is not None:
                    return _guarding.void_first(self, watch.trip)
            else:
                prompt = self.prompt(stated)
                if await self.keep_in_window(prompt):
                    prompt = self.prompt(stated)
                try:
                    result = await self.provider_turn(prompt, definitions, provider_options)
                except (ProviderError, ConfigError) as error:
                    result, provider_options, stated = await self.turn_again(
                        error, definitions, provider_options, stated, spec
                    )
            await self.respond(
                Message.assistant(
                    result.content,
                    calls=result.calls,
                    thinking=result.thinking,
                    continuation=result.continuation,
                ),
                result.usage,
            )
            cut = _CUT_STOP.get(result.finish)
            if cut is not None:
                # The provider cut the reply short (its token limit, its content filter): the
                # run ends here, partial. None of the reply's calls runs -- the last one's
                # arguments may be cut, and the model had not finished deciding -- and each is
                # answered why, so the history stays well formed. A structured answer is never
                # read from a cut reply, and no retry is spent on it.
                await self.cut_short(result)
                return cut
            if not result.calls:
                if spec is None:
                    return StopReason.COMPLETE
                attempts += 1
                self.output, issues = spec.read(result.content)
                if not issues:
                    return StopReason.COMPLETE
                if retries_left == 0:
                    raise OutputError(issues, attempts)
                retries_left -= 1
                limit += 1  # a retry is an extra answer, not one of the tool turns
                feedback = OUTPUT_FEEDBACK.format(issues="; ".join(issues[:5]))
                await self.note(Message.user(feedback))
                continue
            self.open_calls = result.calls
            for call in result.calls:
                self.show("tool_call", call=call)
            if tools_off:
                # The model was told to call no tools and did: none runs, each is answered (the
                # history stays well formed), and the run fails -- its answer cannot be trusted.
                await self.answer(result.calls, TOOLS_OFF)
                names = ", ".join(sorted({call.name for call in result.calls}))
                raise ProtocolError(
                    f"the model called tools ({names}) although this run set tool_choice='none'",
                    code="tool_choice",
                )
            if tool_guards:
                checks = _guarding.tool_checks(tool_guards, result.calls)
                trip = await _guarding.check(self, checks) if checks else None
                if trip is not None:
                    reason = _guarding.TOOL_TRIPPED.format(name=trip.name, reason=trip.reason)
                    await self.answer(result.calls, reason)
                    return _guarding.tripped(self, trip)
            if client is not None and any(call.name in client for call in result.calls):
                # A call of the caller's own tools: the agent's calls of the turn run, and the
                # run stops for the caller's results (they are the next run's input).
                ours = tuple(call for call in result.calls if call.name not in client)
                if ours:
                    await self.run_tools(ours, refused=result.denied)
                self.open_calls = ()
                return StopReason.CLIENT_TOOLS
            if self.turns_made >= limit:
                await self.answer(result.calls, EXHAUSTED)
                self.event("exhaust", reason=f"the turn limit of {limit} was reached")
                if agent._option(options, "on_exhaust") == "summarize":
                    await self.final_answer(EXHAUST_INSTRUCTION, provider_options, FALLBACK_SUMMARY)
                return StopReason.EXHAUSTED
            repeated = self.repeats(result.calls, max_repeats)
            if repeated is not None:
                reason = (
                    f"not executed: the identical call {repeated} was already made {max_repeats} "
                    "times in this run; change the arguments or answer with what you have"
                )
                await self.answer(result.calls, reason)
                self.event("guard", reason=reason)
                continue
            batch = await self.run_tools(result.calls, refused=result.denied)
            if self.handoff is not None:
                return StopReason.COMPLETE  # the agent handed to answers the rest of the turn
            unknown = [result.calls[index] for index in sorted(batch.skipped)]
            if unknown and unknown_streak:
                # Unknown tools two turns running: one last call, without tools, that names
                # what never ran -- instead of letting the model spin on names that do not exist.
                names = ", ".join(sorted({c.name for c in (*unknown_streak, *unknown)}))
                reason = f"unknown tools requested in consecutive turns: {names}"
                self.event("guard", reason=reason)
                instruction = (
                    f"These tool calls never ran because no such tools exist: {names}. Do not "
                    "call tools; answer with what you have."
                )
                fallback = UNKNOWN_TOOLS_FALLBACK.format(names=names)
                final = await self.final_answer(instruction, provider_options, fallback)
                return _CUT_STOP.get(final.finish, StopReason.COMPLETE)
            unknown_streak = unknown
        return StopReason.COMPLETE

    async def model_turn(
        self,
        definitions: tuple[ToolDefinition, ...] | None,
        options: ProviderOptions,
        stated: tuple[Message, ...],
        spec: _OutputSpec | None,
    ) -> tuple[ProviderResult, ProviderOptions, tuple[Message, ...]]:
        """One turn's provider call, on a prompt built fresh: compacted first when it reaches
        the window; once more after compacting when the provider says it overflowed; once
        more with the schema stated when the provider has no JSON-schema mode. Returns the
        result, and the options and stated messages the next turns use."""
        prompt = self.prompt(stated)
        if await self.keep_in_window(prompt):
            prompt = self.prompt(stated)
        try:
            result = await self.provider_turn(prompt, definitions, options)
        except (ProviderError, ConfigError) as error:
            return await self.turn_again(error, definitions, options, stated, spec)
        return result, options, stated

    async def turn_again(
        self,
        error: ProviderError | ConfigError,
        definitions: tuple[ToolDefinition, ...] | None,
        options: ProviderOptions,
        stated: tuple[Message, ...],
        spec: _OutputSpec | None,
    ) -> tuple[ProviderResult, ProviderOptions, tuple[Message, ...]]:
        """A turn's provider call failed with ``error``: the same turn once more, after
        compacting, when the provider says the prompt overflowed its context window; with the
        schema stated, when the provider has no JSON-schema mode. Raises ``error`` otherwise.
        Returns as :meth:`model_turn` does."""
        if isinstance(error, ProviderError):
            # The provider says the prompt is over its context window, although the estimate
            # was not (or there is no window set): one compaction, whatever the estimate
            # says, and the turn once more; a second overflow is the run's error.
            if error.code != "context_overflow" or self.refused:
                raise error
            if not await self.compact_after_overflow(error):
                raise error
        else:
            if spec is None or options.schema is None:
                raise error
            # No native JSON-schema mode on this provider: state the schema instead.
            options = attrs.evolve(options, schema=None)
            stated = (Message.user(OUTPUT_INSTRUCTION + dumps(spec.schema)),)
        prompt = self.prompt(stated)
        result = await self.provider_turn(prompt, definitions, options, again=True)
        return result, options, stated

    async def keep_in_window(self, prompt: Sequence[Message]) -> bool:
        """Before a provider call: compact when the prompt reaches the agent's window (and the
        conversation can summarise). True when a compaction changed the history."""
        agent = self.agent
        conversation = self.conversation
        if agent.window is None or self.futile or not conversation.summarizable:
            return False
        head = [m for m in prompt[:1] if m.role is Role.SYSTEM]
        window = agent.window
        before = len(conversation._history_now().messages)
        check = await self.compacting(lambda: conversation.fit(window, head=head))
        if check is None:
            return False
        if check.futile:
            self.futile = True  # nothing more can fold: the window guard refuses the prompt
        if check.compacted:
            self.compacted("window", max(0, before - len(conversation._history_now().messages)))
        return check.compacted

    async def compact_after_overflow(self, error: ProviderError) -> bool:
        """The provider refused the prompt as over its context window: compact the conversation
        once, whatever the estimate says. True when that changed the history, so that the turn
        may be sent once more."""
        conversation = self.conversation
        if self.futile or not conversation.summarizable:
            return False
        self.event("guard", reason=f"the provider refused the prompt as too long: {error.message}")
        before = len(conversation._history_now().messages)
        section = await self.compacting(conversation.compact)
        if section is None:
            self.futile = True
            return False
        self.compacted("overflow", max(0, before - len(conversation._history_now().messages)))
        return True

    async def compacting(self, fold: Callable[[], Awaitable[_T]]) -> _T | None:
        """Run a compaction of the conversation (``fold``) as part of this run: its summarizer
        calls charged to the run's budget, and cut the moment the run is (they run in the
        conversation's actor, not in this scope). A summarizer failure emits ``fault`` and gives
        ``None`` (with this run trying no more), or fails the run when the agent is strict."""
        cut = Abort()
        try:
            with paying(self.charge_compaction, cut):
                return await fold()
        except CompactionError as error:
            self.event("fault", error=error, reason=error.message)
            if self.agent.strict:
                raise
            self.futile = True  # do not retry a failing summarizer on every turn of this run
            return None
        except BaseException:
            cut.cancel("the run was cut during its compaction")
            raise

    def within_window(self, prompt: Sequence[Message]) -> None:
        """The window guard: a prompt estimated at or over the agent's context window is not
        sent. Raises :class:`~protocols.errors.ProviderError` ``context_overflow`` (not
        retryable) before any provider call, with a ``guard`` event saying why."""
        window = self.agent.window
        self.refused = False
        if window is None:
            return
        tokens = estimate_messages(prompt)
        if tokens < window:
            return
        reason = (
            f"the prompt is estimated at {tokens} tokens, at or over the agent's context window "
            f"of {window}"
            + (" after compaction" if self.conversation.summarizable else "")
            + "; it was not sent"
        )
        self.refused = True
        self.event("guard", reason=reason)
        raise ProviderError(reason, code="context_overflow", retryable=False)

    def charge_compaction(self, usage: Usage | None, text: str) -> None:
        """A summarizer call of this run's compaction: charged to the budget (by estimate of
        its answer when unreported). Not a turn: ``AgentResult.usage`` sums the turns."""
        if self.meter is not None:
            self.meter.charge(usage, text=text)
            self.estimated = self.estimated or usage is None

    def repeats(self, calls: Sequence[ToolCall], max_repeats: int) -> str | None:
        """Count this batch's calls; the first one now repeated beyond the limit, if any."""
        keys = [f"{call.name}({dumps(call.arguments, canonical=True)})" for call in calls]
        over = next((key for key in keys if self.seen.get(key, 0) >= max_repeats), None)
        if over is None:
            for key in keys:
                self.seen[key] = self.seen.get(key, 0) + 1
        return over

    async def finish_batch(self, decisions: Sequence[Decision]) -> None:
        """A continued run first answers the batch its crash left open: calls that never
        started run, idempotent ones that had started run again (same key), the others are
        answered that their effect is unknown; recorded results are already in the history."""
        calls = tuple(d.call for d in decisions)
        self.open_calls = calls
        unknown = [d.result for d in decisions if d.action == "unknown" and d.result is not None]
        if unknown:
            for tool_result in unknown:
                self.show("tool_result", result=tool_result)
            await self.record(unknown)
        again = tuple(d.call for d in decisions if d.action in ("run", "rerun"))
        if again:
            await self.run_tools(again)
        self.open_calls = ()

    async def close_batch(self, decisions: Sequence[Decision]) -> None:
        """A continued run that is cut before it begins answers the batch its crash left open
        without running any of it: a call that had started is answered that it was interrupted
        with its effect unknown, one that never started that it was not executed."""
        results = [
            decision.result
            if decision.result is not None
            else _failed(
                decision.call, NOT_EXECUTED if decision.action == "run" else UNKNOWN_EFFECT
            )
            for decision in decisions
        ]
        for tool_result in results:
            self.show("tool_result", result=tool_result)
        await self.record(results)

    async def answer(self, calls: Sequence[ToolCall], text: str) -> None:
        """Record ``text`` as the failed result of every call (none of them runs)."""
        results = [_failed(call, text) for call in calls]
        for tool_result in results:
            self.show("tool_result", result=tool_result)
        await self.record(results)
        self.open_calls = ()

    async def run_tools(
        self, calls: tuple[ToolCall, ...], *, refused: dict[str, str] | None = None
    ) -> ToolBatch:
        """Run a turn's calls (those the provider side ``refused`` are answered, not run)."""
        agent = self.agent
        self.batch = batch = ToolBatch(calls)
        registry = agent.registry
        if self.journal is not None:
            waiting = [call for call in calls if not refused or call.id not in refused]
            await self.journal.gate(waiting, agent.authority, registry, agent.scope)
            registry = self.journal.tools(registry)
        reset = _tool_run.set(self)
        try:
            results = await registry.execute(
                calls,
                scope=agent.scope,
                authority=agent.authority,
                approve=agent.approve,
                limit=agent.tool_concurrency,
                batch=batch,
                refused=refused,
            )
        finally:
            _tool_run.reset(reset)
        for index, (call, tool_result) in enumerate(zip(calls, results, strict=True)):
            self.show("tool_result", result=tool_result)
            if index in batch.denied and isinstance(tool_result, ToolFailure):
                self.event("deny", call=call, result=tool_result, reason=tool_result.error)
            else:
                self.notify("tool", call=call, result=tool_result)
                if index in batch.errors:
                    self.event(
                        "tool_error", call=call, result=tool_result, error=batch.errors[index]
                    )
        await self.record(results)
        self.batch = None
        self.open_calls = ()
        if batch.errors and agent._option(self.request.options, "on_tool_error") == "raise":
            index = min(batch.errors)
            call, error = calls[index], batch.errors[index]
            raise ToolError(
                f"tool {call.name!r} raised {type(error).__name__} (call {call.id!r}), and "
                "this run fails on tool errors (on_tool_error='raise')",
                code="tool_raised",
                tool=call.name,
                call_id=call.id,
            ) from error
        return batch

    async def final_answer(
        self, instruction: str, options: ProviderOptions, fallback: str
    ) -> ProviderResult:
        """One last provider call without tools, told ``instruction`` (which is not stored);
        ``fallback`` is recorded when it answers with nothing. Returns the call's result."""
        prompt = self.prompt([Message.user(instruction)])
        quiet = attrs.evolve(options, tool_choice=None)
        result = await self.provider_turn(prompt, None, quiet)
        text = result.content.strip() or fallback
        await self.respond(Message.assistant(text, thinking=result.thinking), result.usage)
        return result

    async def cut_short(self, result: ProviderResult) -> None:
        """Answer every call of a reply the provider cut short (committed already) with why it
        did not run: the text the result's ``denied`` gives it (:data:`CUT_SHORT`)."""
        calls = result.calls
        if not calls:
            return
        self.open_calls = calls
        for call in calls:
            self.show("tool_call", call=call)
        default = CUT_SHORT[result.finish]
        results = [_failed(call, result.denied.get(call.id, default)) for call in calls]
        for tool_result in results:
            self.show("tool_result", result=tool_result)
        await self.record(results)
        self.open_calls = ()

    async def provider_turn(
        self,
        prompt: Sequence[Message],
        definitions: Any,
        options: ProviderOptions,
        *,
        again: bool = False,
    ) -> ProviderResult:
        """Every provider call of the run, whatever asks for it, goes through here: inside the
        run's scope (its deadline and abort), and never once the budget is spent -- then the
        run is cut as by a budget trip mid-stream. ``again``: the same turn, re-sent."""
        meter = self.meter
        # A cut that landed while the run was shielded (committing) stops it here, before a
        # provider call starts.
        await trio.lowlevel.checkpoint_if_cancelled()
        self.within_window(prompt)
        if self.pace is not None:
            # Inside the run's scope: a cancel, a deadline or a budget trip while pacing cuts
            # the run like any other wait.
            await self.pace(context_for(self, ""))
        if meter is not None:
            if meter.spent:
                self.budget_tripped = True
                assert self.scope is not None
                self.scope.cancel()
                await trio.lowlevel.checkpoint()  # raises Cancelled: the run's scope takes it
            meter.begin_turn()
        if not again:
            self.turns_made += 1
            self.agent._statistics["turns"] += 1
            live = self.live
            if live is not None:
                live.add("turn", self.turns_made)  # (read back as {"turn": ...})
            self.notify("turn")
        journal = self.journal
        if journal is not None and not again:
            await journal.request(self.turns_made)
        provider = self.agent.provider
        trace = self.trace
        # The call's span, current while the provider streams (a relay client sends it on).
        chat = trace.chat(provider, options, self.turns_made) if trace is not None else None
        partial = self.partial
        if partial is not None:
            partial.begin()  # a new attempt: its answer is read from the start
        self.void_to = None
        # While the run consumes the stream it hears the stream's fallbacks (fell_back), and
        # takes their rewinds unless it is journaled (a durable job's log is derived from its
        # journal, which has no rewind of a live attempt: there a failure after the first
        # delta fails the turn, as without the opt-in). (observe_fallbacks, without its
        # context manager's price on every turn.)
        observed = _FALLBACK_OBSERVERS.set((*_FALLBACK_OBSERVERS.get(), self.observer))
        try:
            self.stream = stream = provider.stream(prompt, tools=definitions, options=options)
            async with stream:
                turn = self.turns_made
                async for delta in stream:
                    if meter is not None and meter.spent:
                        # Spent by another run drawing on the same budget (a team's, a parent's)
                        # before this delta: it is neither shown nor charged.
                        self.budget_tripped = True
                        assert self.scope is not None
                        self.scope.cancel()
                        await trio.lowlevel.checkpoint()
                    # Shown -- and journaled, written behind the run: a durable job's log is
                    # derived from its journal -- exactly as the stream gave it.
                    if self.void_to is None:  # the attempt's first delta: a rewind goes back here
                        self.void_to = self.live.last if self.live is not None else 0
                    self.show(delta.channel, delta.text)
                    if partial is not None and delta.channel == "content":
                        partial.feed(delta.text)
                    if journal is not None:
                        journal.stream(turn, delta.channel, delta.text)
                    if (
                        delta.channel == "content"
                        and meter is not None
                        and meter.charge_content(delta.text)
                    ):
                        self.budget_tripped = True
                        assert self.scope is not None
                        self.scope.cancel()
                        # Stop at this delta: the cancel is delivered here, not at the stream's
                        # next network read (which may be many buffered deltas later).
                        await trio.lowlevel.checkpoint()
                if partial is not None:
                    partial.end()
            result: ProviderResult = stream.result
            if self.pricing is not None:
                result = price_result(self.pricing, provider, result, self.currency)
        except BaseException as error:
            if chat is not None:
                cut = self.stream
                chat.failed(error, cut.partial if cut is not None else None)
            raise
        finally:
            _FALLBACK_OBSERVERS.reset(observed)
        if chat is not None:
            chat.done(result)
        self.stream = None
        self.settle_usage(result)
        return result

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
        self.usage = None if self.usage is None or draw is None else self.usage + draw
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


def _advertised(agent: Agent) -> tuple[ToolDefinition, ...]:
    """The definitions of the agent's tools in its scope, but those its authority never allows
    (not shown at all) -- the same tuple run after run while none of them changed."""
    registry, scope, authority = agent.registry, agent.scope, agent.authority
    cached = agent._advertised
    if (
        cached is not None
        and cached[0] is registry
        and cached[1] == registry.version
        and cached[2] is scope
        and cached[3] is authority
    ):
        known: tuple[ToolDefinition, ...] = cached[4]
        return known
    definitions = tuple(
        d
        for d in registry.definitions(scope)
        if authority is None or not authority.withholds(d.name)
    )
    agent._advertised = (registry, registry.version, scope, authority, definitions)
    return definitions


def _provider_options(
    agent: Agent, settings: ModelSettings | None, think: bool | None, tool_choice: str | None
) -> ProviderOptions:
    """The options of a run's provider calls: the same (immutable) object run after run while
    the settings are the same object and the call options equal."""
    cached = agent._call_options
    if (
        cached is not None
        and cached[0] is settings
        and cached[1] == think
        and cached[2] == tool_choice
    ):
        same: ProviderOptions = cached[3]
        return same
    made = ProviderOptions.from_settings(settings, think=think, tool_choice=tool_choice)
    agent._call_options = (settings, think, tool_choice, made)
    return made


#: No usage (yet): a run's starting count (a usage is immutable: one for every run).
_NOTHING = Usage()


def _failed(call: ToolCall, text: str) -> ToolResult:
    return ToolFailure(call.id, call.name, text)


def _reason_data(run: _Run, fields: dict[str, Any]) -> dict[str, Any]:
    error = fields.get("error")
    return {"reason": fields.get("reason") or (str(error) if error is not None else "")}


def _call_id(fields: dict[str, Any]) -> str | None:
    call = fields.get("call")
    return call.id if call is not None else None


#: The listener events a run's log also holds: their kind in the log, and their data there.
#: (``started`` and ``turn``, the hot ones, are logged where they happen.)
_LOGGED: dict[str, tuple[str, Callable[[_Run, dict[str, Any]], Any]]] = {
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
