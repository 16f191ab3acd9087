"""``Agent``: a supervised actor running bounded turns of model calls and tool calls.

One run is one trio cancel scope folding every bound: the caller's :class:`~actors.Abort`
tokens, :meth:`Agent.abort`, the run's deadline and its token budget. Whatever trips first cuts
the provider stream and the tool calls in flight at once, and the run still commits what it
produced:

* a cancel is not an error: the run resolves an :class:`~protocols.messages.AgentResult` with
  ``partial=True`` and the stop reason (``cancelled``, ``timeout``, ``budget``); the partial
  assistant text is committed to the conversation marked ``interrupted``;
* tool calls running at the cancel are recorded as interrupted, queued ones as not executed --
  every assistant tool call in the history always has a result;
* a run cut before it begins -- its tokens tripped, its caller cancelled or its stream left
  while it waited its turn -- is withdrawn at once: no provider call, nothing committed;
* every provider call of the run, the loop's own extra calls included, is inside its scope and
  none starts once the budget is spent;
* at most ``limit`` provider turns; reaching it while the model still asks for tools ends the
  run with ``stop="exhausted"`` and "not executed" results for those calls; ``limit=0`` makes no
  call;
* a reply the provider cut short (its token limit, its content filter) ends the run partial,
  ``stop="max_tokens"`` or ``"content_filter"`` (``AgentResult.finish`` says ``length`` or
  ``content_filter``); none of that reply's tool calls runs, each is answered why;
* only genuine failures (a provider error after its retries, a bug) raise, after the partial
  was committed;
* a cancel of the *caller's* own scope aborts a running run, waits (shielded, briefly) for it
  to commit, then propagates as ``trio.Cancelled``; no way of a caller going away crashes the
  agent;
* a run requested from inside a run of the same agent (A -> A, A -> B -> A) would wait on
  itself: it is refused at once with :class:`CycleError`.

Runs on one agent are taken one at a time, in the order they were started (FIFO); separate
agents run concurrently. A :meth:`Agent.stream` that is never iterated never takes the slot.

An agent keeps one conversation, which every run reads and extends. A run given ``history=``
works on that history instead (in a conversation of its own, thrown away when it ends) and
touches the agent's not at all; :meth:`Agent.fork` makes an agent with the same configuration
and a conversation of its own.
"""

from __future__ import annotations

import collections
import contextvars
import enum
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from protocols.accounting import BudgetMeter, Pricing, TeamBudget, TokenBudget
from protocols.authority import Authority
from protocols.context import Instructions, Scope
from protocols.errors import (
    AgentsError,
    Category,
    ConfigError,
    ValidationError,
)
from protocols.history import check_history
from protocols.live import RunEvent, terminal_for
from protocols.messages import (
    AgentResult,
    Message,
    StopReason,
    ToolDefinition,
    new_id,
)
from protocols.settings import ModelSettings, SettingsLike, check_reasoning
from protocols.workspace import Workspace, WorkspaceManager

from . import _guarding, _tracing
from ._core._abort import Abort
from ._core._actor import Actor, ActorRef, ActorStopped
from ._core._supervisor import Restart
from ._live import LiveRun, RunEvents
from ._pricing import run_rates
from ._questions import Answerer
from ._run_context import RunContext, RunStep
from ._run_loop import (
    COMMIT_DEADLINE,
    EXHAUST_INSTRUCTION,
    EXHAUSTED,
    FALLBACK_SUMMARY,
    OUTPUT_FEEDBACK,
    OUTPUT_INSTRUCTION,
    TOOLS_OFF,
    UNKNOWN_TOOLS_FALLBACK,
    AgentEvent,
    Chunk,
    OutputError,
    Resume,
    RunJournal,
    _Run,
)
from .conversation import Conversation
from .providers import observe_retries
from .tools import Approver, CallableTool, ToolRegistry

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer, TracerProvider

    from ._core._runtime import Runtime
    from .guardrails import Guardrail
    from .providers import ProviderConnection, ProviderInterface

__all__ = [
    "EXHAUSTED",
    "EXHAUST_INSTRUCTION",
    "FALLBACK_SUMMARY",
    "OUTPUT_FEEDBACK",
    "OUTPUT_INSTRUCTION",
    "TOOLS_OFF",
    "UNKNOWN_TOOLS_FALLBACK",
    "Agent",
    "AgentBusy",
    "AgentEvent",
    "AgentRun",
    "AgentStatus",
    "Chunk",
    "CycleError",
    "OutputError",
    "RunOptions",
]

log = logging.getLogger("trio_agents.agent")

#: Called with the error and the event when an event listener raises.
ErrorHandler = Callable[[BaseException, "AgentEvent"], None]

#: Awaited before every provider call of a run (see ``RunOptions.pace``).
Pace = Callable[[RunContext[Any]], Awaitable[None]]

#: What a request does when the agent is busy (see :meth:`Agent.generate`).
BusyPolicy = Literal["queue", "interrupt", "reject"]


class AgentStatus(enum.StrEnum):
    """Where an agent is: ``idle`` (never ran), ``running``, ``done`` (the last run ended, also
    partially) or ``error`` (the last run raised)."""

    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"


def _positive(name: str, value: object) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
    ):
        raise ValidationError(f"{name} must be a number > 0 or None, not {value!r}")


def _settings(value: SettingsLike) -> ModelSettings | None:
    return None if value is None else ModelSettings.of(value)


def _tokens(value: Iterable[Abort]) -> tuple[Abort, ...]:
    return tuple(value)


def _check_guardrails(value: object) -> tuple[Guardrail, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError("guardrails takes a list of guardrails")
    guards = tuple(value)
    for guard in guards:
        # (The class lives above this module: known by what it offers.)
        if getattr(guard, "kind", None) not in ("input", "output", "tool") or not callable(
            getattr(guard, "verdict", None)
        ):
            raise ValidationError(
                "guardrails takes Guardrail objects (input_guardrail(...), output_guardrail(...), "
                f"tool_guardrail(...)), not {type(guard).__name__}"
            )
    return guards


@attrs.frozen
class RunOptions:
    """Options of one run (``None``: the agent's own setting).

    ``limit``: provider turns at most (>= 0); ``timeout``: seconds for the whole run; ``budget``:
    a :class:`~protocols.accounting.TokenBudget`; ``abort``: caller tokens that cancel the run;
    ``think`` and ``tool_choice``: passed to the provider; ``on_exhaust``: ``"stop"`` or
    ``"summarize"`` (one final tool-less call when the limit is reached while the model still
    wants tools); ``max_repeats``: how often one identical call (name and arguments) may run in
    one run before a batch repeating it is refused; ``output``: the shape the final answer
    must have (see :class:`OutputError`) -- a JSON Schema (a dict), or a pydantic model, a
    dataclass, a TypedDict or an attrs class, whose instance ``result.output`` then is;
    ``schema``: the same option by its first name (give one of the two); ``schema_retries``: how
    many more answers a wrong one may be followed by (default 2); ``partial_strings``: while such
    an answer streams, show a string field still being read as it grows in its ``output``
    chunks (default ``False``: a field appears once its value is complete);
    ``on_tool_error``: what a tool that raises does -- ``"record"`` (the default: the model
    reads the error, a ``tool_error`` event and a WARNING log with the traceback tell you) or
    ``"raise"`` (the batch's results are committed, then the run fails with a
    :class:`~protocols.errors.ToolError` chained to the tool's exception); ``deps``: what tools
    read as :attr:`RunContext.deps <actors.RunContext.deps>`; ``pace``: an async function
    awaited (with the run's :class:`~actors.RunContext`) before every provider call of the
    run, inside the run's scope -- rate limiting, scheduling; a cancel while it waits is a
    cancel like any other. ``budget`` may be a :class:`~protocols.accounting.TeamBudget`, drawn
    on by every run given it. ``settings``: the model's
    :class:`~protocols.settings.ModelSettings` (or a mapping of their fields), which override
    the agent's field by field -- each field this sets wins, each it leaves unset keeps the
    agent's. ``client_tools``: tools the caller runs itself (a frontend's, a remote client's),
    as :class:`~protocols.messages.ToolDefinition` objects -- shown to the model beside the agent's
    own (a name of the agent's own is refused); a turn that calls one ends the run, ``stop``
    ``"client_tools"``, once the agent's own calls of that turn have run: the calls it left
    open are :attr:`AgentResult.client_calls <protocols.messages.AgentResult.client_calls>`,
    and the caller continues with their results as the next run's input. Such a run works on
    a ``history=`` (the caller's: the open calls are answered there), never on the agent's
    conversation. ``guardrails``: :class:`~actors.guardrails.Guardrail` checks of the run's
    input, its final answer and its tool calls -- a run's are added to the agent's (a run
    cannot take one of its agent's away); one that trips ends the run ``stop="guardrail"``.
    ``pricing``: a :class:`~protocols.accounting.Pricing` (a
    :class:`~protocols.accounting.PriceTable`, :class:`~actors.GenAIPrices`) that prices
    each provider call: its usage then carries a :class:`~protocols.accounting.Cost` (see
    ``docs/agent.md``, "Cost"); needed by a budget with a ``max_cost``.
    """

    limit: int | None = None
    timeout: float | None = None
    budget: TokenBudget | TeamBudget | None = None
    abort: tuple[Abort, ...] = attrs.field(default=(), converter=_tokens)
    think: bool | None = None
    tool_choice: str | None = None
    on_exhaust: Literal["stop", "summarize"] | None = None
    max_repeats: int | None = None
    output: dict[str, Any] | type | None = None
    schema: dict[str, Any] | type | None = None
    schema_retries: int | None = None
    partial_strings: bool | None = None
    on_tool_error: Literal["record", "raise"] | None = None
    deps: Any = None
    pace: Pace | None = None
    settings: ModelSettings | None = attrs.field(default=None, converter=_settings)
    client_tools: tuple[ToolDefinition, ...] = ()
    guardrails: tuple[Guardrail, ...] = ()
    pricing: Pricing | None = None

    def __attrs_post_init__(self) -> None:
        if self.pricing is not None and not (
            callable(getattr(self.pricing, "price", None))
            and callable(getattr(self.pricing, "rates", None))
        ):
            raise ValidationError(
                "pricing takes a Pricing (a PriceTable, GenAIPrices), not "
                f"{type(self.pricing).__name__}"
            )
        if self.client_tools:  # (a run without them pays nothing for them)
            tools = tuple(self.client_tools)
            _check_client_tools(tools)
            object.__setattr__(self, "client_tools", tools)
        if self.guardrails:
            object.__setattr__(self, "guardrails", _check_guardrails(self.guardrails))
        if self.on_exhaust not in (None, "stop", "summarize"):
            raise ValidationError(
                f"on_exhaust must be 'stop' or 'summarize', not {self.on_exhaust!r}"
            )
        if self.on_tool_error not in (None, "record", "raise"):
            raise ValidationError(
                f"on_tool_error must be 'record' or 'raise', not {self.on_tool_error!r}"
            )
        if self.max_repeats is not None and (
            isinstance(self.max_repeats, bool)
            or not isinstance(self.max_repeats, int)
            or self.max_repeats < 1
        ):
            raise ValidationError(f"max_repeats must be an integer >= 1, not {self.max_repeats!r}")
        if self.output is not None and self.schema is not None and self.output != self.schema:
            raise ValidationError("give output= or schema=, not both: they are the same option")
        if self.schema_retries is not None and (
            isinstance(self.schema_retries, bool)
            or not isinstance(self.schema_retries, int)
            or self.schema_retries < 0
        ):
            raise ValidationError(
                f"schema_retries must be an integer >= 0, not {self.schema_retries!r}"
            )
        if self.partial_strings is not None and not isinstance(self.partial_strings, bool):
            raise ValidationError(f"partial_strings must be a bool, not {self.partial_strings!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0
        ):
            raise ValidationError(f"limit must be an integer >= 0, not {self.limit!r}")
        _positive("timeout", self.timeout)
        if self.budget is not None and not isinstance(self.budget, TokenBudget | TeamBudget):
            raise ValidationError("budget must be a TokenBudget or a TeamBudget")
        if self.pace is not None and not callable(self.pace):
            raise ValidationError(f"pace must be an async function, not {self.pace!r}")
        for token in self.abort:
            if not isinstance(token, Abort):
                raise ValidationError(f"abort takes Abort tokens, not {type(token).__name__}")


class _State(enum.Enum):
    QUEUED = "queued"  # submitted (or about to be), not taken by the agent yet
    RUNNING = "running"  # taken: it commits as any run does
    DONE = "done"  # ended (its result or error is set)
    WITHDRAWN = "withdrawn"  # given up before it began: nothing of it is ever committed


#: The chain of runs the current task is inside of, outermost first. A task started from inside
#: a run inherits it and may outlive it: only runs still running count.
_chain: contextvars.ContextVar[tuple[_Request, ...]] = contextvars.ContextVar(
    "trio_agents_run_chain", default=()
)


class CycleError(AgentsError):
    """A run was requested on an agent whose run the requesting task is already inside of (an
    agent calling itself, or A -> B -> A): it would wait on itself. Refused at once, before
    anything is queued or committed; ``chain`` names the agents, outermost first. A tool that
    makes such a request fails with this text, which the model reads."""

    def __init__(self, chain: Sequence[str], agent: str) -> None:
        path = " -> ".join([*chain, agent])
        super().__init__(
            f"refused: a run of agent {agent!r} was requested from inside its own run "
            f"({path}); it would wait on itself",
            code="cycle",
            category=Category.USER,
            retryable=False,
        )
        self.chain = (*chain, agent)


class AgentBusy(AgentsError):
    """A request with ``if_busy="reject"`` found the agent busy (a run in progress or
    waiting): refused at once, nothing queued or committed."""

    def __init__(self, agent: str) -> None:
        super().__init__(
            f"agent {agent!r} is busy answering another message (if_busy='reject')",
            code="busy",
            category=Category.USER,
            retryable=True,
        )
        self.agent = agent


@attrs.define(eq=False)
class _Request:
    """One run, from its request to its end: what was asked, where it is, how it ended.

    A request is *queued* until the agent's actor takes it. A queued request whose tokens trip,
    or whose caller gives up, is *withdrawn* at once: it resolves as cancelled with nothing
    committed, and the actor skips it when it reaches it.
    """

    agent: Agent
    input: tuple[Message, ...]
    options: RunOptions
    #: Where chunks and the outcome go (None: generate(), which only wants the outcome).
    send: trio.MemorySendChannel[Any] | None
    #: The run's own token (``AgentRun.abort``, ``Agent.abort``, a caller that gave up).
    token: Abort = attrs.field(factory=Abort)
    finished: trio.Event = attrs.field(factory=trio.Event)
    result: AgentResult | None = None
    error: BaseException | None = None
    state: _State = _State.QUEUED
    #: Everything that cancels the run: its own token, the agent's and the caller's tokens.
    watch: Abort | None = None
    chain: tuple[_Request, ...] = ()
    _unwatch: Callable[[], None] | None = None
    _waiting: bool = False  # counted in the agent's queued runs
    run_id: str = attrs.field(factory=new_id)
    #: The delegation hops above this run (empty for a run a caller started).
    path: tuple[RunStep, ...] = ()
    #: The conversation the run works in (None: the agent's).
    conversation: Conversation | None = None
    #: A history of the caller's the run goes on from, in a conversation of its own made when
    #: the run begins and thrown away when it ends (None: not such a run).
    history: tuple[Message, ...] | None = None
    deps: Any = None
    #: A delegated or handed-to run passes its chunks and events to its parent run.
    forward: Callable[[Chunk], None] | None = None
    forward_event: Callable[[AgentEvent], None] | None = None
    #: A deadline inherited from a parent run (``trio.current_time()`` terms).
    deadline: float = math.inf
    #: The meters of the runs this run draws on (its parent's).
    meters: tuple[BudgetMeter, ...] = ()
    #: The loop state of the run, once it began (what a cut delegated run had done).
    run: _Run | None = None
    #: A journaled run's journal (actors.durable), and where a continued one stands.
    journal: RunJournal | None = None
    resume: Resume | None = None
    #: The run's event log, from the moment it is asked for (None: a journaled run's log is its
    #: journal's, or the agent has no runtime).
    live: LiveRun | None = None
    #: The run ends its log (False: a handed-to run, which publishes into the log of the run
    #: that handed to it -- that run ends it).
    owns_log: bool = True
    #: Tracing (actors._tracing): the tracer of the run (None: not traced), the OpenTelemetry
    #: context current where the run was requested (its span's parent), and the run's spans.
    tracer: Tracer | None = None
    parent: Context | None = None
    trace: _tracing.RunTrace | None = None

    def bind(self, *, queued: bool) -> None:
        """Check the chain of runs the calling task is inside of and watch the tokens.

        Raises :class:`CycleError` when the calling task is inside a run of this agent, and
        :class:`~protocols.errors.ValidationError` when the run's settings contradict its
        ``think`` (``think=False`` with a ``reasoning_effort``)."""
        chain = tuple(run for run in _chain.get() if run.state is _State.RUNNING)
        agent = self.agent
        if any(run.agent is agent for run in chain):
            self.state = _State.WITHDRAWN
            raise CycleError([run.agent.name for run in chain], agent.name)
        settings = agent._settings(self.options)
        if settings is not None and settings.reasoning_effort is not None:
            # A contradiction is refused now, before anything is queued or committed.
            try:
                check_reasoning(agent._option(self.options, "think"), settings.reasoning_effort)
            except ValidationError:
                self.state = _State.WITHDRAWN
                raise
        self.chain = (*chain, self)
        self.open_log()
        sources = (*agent.defaults.abort, *self.options.abort)
        self.watch = watch = Abort.any(self.token, *sources) if sources else self.token
        if queued:
            self._unwatch = watch.on_cancel(self._tripped)

    async def submit(self, ref: ActorRef[Any, Any], if_busy: BusyPolicy = "queue") -> None:
        """Queue this run for the agent's actor (without a yield when there is room).

        Raises :class:`CycleError` when the calling task is inside a run of this agent,
        :class:`AgentBusy` for ``if_busy="reject"`` when the agent is busy, and
        :class:`~actors.ActorStopped` once the agent is closing; a request whose tokens
        already tripped is withdrawn without being queued. ``if_busy="interrupt"`` queues it
        ahead of ordinary runs and cuts the run in progress."""
        await trio.lowlevel.checkpoint_if_cancelled()
        agent = self.agent
        if if_busy not in ("queue", "interrupt", "reject"):
            raise ValidationError(
                f"if_busy must be 'queue', 'interrupt' or 'reject', not {if_busy!r}"
            )
        if agent._closing:
            self.state = _State.WITHDRAWN
            error = ActorStopped(f"agent {agent.name!r} is closed", name=agent.name)
            self.end_log("failed", {"error": _described(error)})  # (a log opened beforehand)
            raise error
        self.bind(queued=True)
        if if_busy == "reject" and agent.busy:
            self.state = _State.WITHDRAWN
            self._settle()
            busy = AgentBusy(agent.name)
            self.end_log("failed", {"error": _described(busy)})
            raise busy
        if self.state is not _State.QUEUED:  # already tripped: never queued
            return
        queue = agent._queue(urgent=if_busy == "interrupt")
        queue.append(self)
        try:
            try:
                ref.send_nowait(self)
            except trio.WouldBlock:
                await ref.send(self)
        except BaseException:
            queue.remove(self)  # never delivered: no wake-up will come for it
            self.withdraw("the request was never delivered", quiet=True)
            raise
        if self.state is _State.QUEUED:
            self._waiting = True
            agent._queued += 1
            if if_busy == "interrupt" and agent._current is not None:
                agent._current.token.cancel("interrupted by a new message")

    def _settle(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._waiting:
            self._waiting = False
            self.agent._queued -= 1
            self.agent._maybe_idle()

    def _tripped(self, reason: str) -> None:
        if self.state is _State.QUEUED:
            self.withdraw(reason)

    def begin(self) -> bool:
        """The actor takes the run: False when it was withdrawn (skip it)."""
        if self.state is not _State.QUEUED:
            return False
        self.state = _State.RUNNING
        self._settle()
        return True

    def withdraw(self, reason: str, *, quiet: bool = False) -> None:
        """Give up a queued run: it resolves cancelled, partial, with no messages, at once."""
        if self.state is not _State.QUEUED:
            return
        self.state = _State.WITHDRAWN
        self._settle()
        self.input = ()
        self.result = result = AgentResult(
            stop=StopReason.CANCELLED, run_id=self.run_id, agent=self.agent.name
        )
        self.end_log("cancelled", {"result": result})
        self.deliver(("result", result))
        self.close()
        self.finished.set()
        agent = self.agent
        agent._statistics["withdrawn"] += 1
        if agent._listeners and not quiet:
            agent._runs += 1
            number, run_id = agent._runs, self.run_id
            agent._emit(
                AgentEvent("abort", number, reason=reason, stop=StopReason.CANCELLED, run_id=run_id)
            )
            agent._emit(
                AgentEvent("finish", number, stop=StopReason.CANCELLED, partial=True, run_id=run_id)
            )

    def fail(self, error: BaseException) -> None:
        """End a run that will never finish (its agent stopped): its caller gets ``error``."""
        if self.state not in (_State.QUEUED, _State.RUNNING):
            return
        self.state = _State.DONE
        self._settle()
        if self.result is None and self.error is None:
            self.error = error
            self.end_log("failed", {"error": _described(error)})
            self.deliver(("error", error))
        self.close()
        self.finished.set()

    def open_log(self) -> None:
        """Register the run's event log with its agent's runtime, so that it can be followed
        by its id from now on (once; not for a journaled run, whose log is its journal's)."""
        runtime = self.agent._runtime
        if self.live is None and self.journal is None and runtime is not None:
            self.live = runtime.live.open(self.run_id)

    def close_log(self) -> None:
        """End the log of a run that will not end it itself -- one that never began (its
        caller was cut first): ``failed`` with its error, else ``cancelled``. A no-op for a run
        whose log has ended."""
        live = self.live
        if live is None or live.ended is not None or self.state is _State.RUNNING:
            return  # (a running run ends its log itself)
        if self.error is not None:
            self.end_log("failed", {"error": _described(self.error)})
        else:
            result = self.result or AgentResult(
                stop=StopReason.CANCELLED, run_id=self.run_id, agent=self.agent.name
            )
            self.end_log(terminal_for(result), result)

    def end_log(self, kind: str, data: dict[str, Any] | AgentResult) -> None:
        """Publish the run's terminal event (once: ``data`` is its result, or its data), and
        let its log go after the runtime's keeping time."""
        live = self.live
        if live is not None and live.ended is None and self.owns_log:
            live.add(kind, data)
            runtime = self.agent._runtime
            if runtime is not None:
                runtime.live.end(self.run_id)

    def deliver(self, item: Any) -> bool:
        """Hand ``item`` to the consumer; False (and nothing raised) when it has gone away."""
        send = self.send
        if send is None:
            return False
        try:
            send.send_nowait(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.send = None
            return False
        return True

    def close(self) -> None:
        if self.send is not None:
            self.send.close()
            self.send = None

    async def give_up(self, reason: str) -> None:
        """The caller stopped waiting for the run (its scope was cancelled, it left the stream):
        a queued run is withdrawn at once; a running one is aborted, and this waits (shielded,
        bounded) until it has committed its partial."""
        if self.state is _State.QUEUED:
            self.withdraw(reason)
            return
        self.token.cancel(reason)
        if self.state is _State.RUNNING:
            with trio.CancelScope(shield=True) as shield:
                shield.deadline = trio.current_time() + COMMIT_DEADLINE + 1
                await self.finished.wait()


class AgentRun:
    """A run being streamed: ``async with agent.stream(...) as run: async for chunk in run``,
    then ``run.result``. Leaving the block early aborts the run (its partial is committed).
    :meth:`events` reads the run's whole event log instead (what ``runtime.watch(run.run_id)``
    gives any follower)."""

    def __init__(
        self,
        agent: Agent,
        request: _Request,
        receive: trio.MemoryReceiveChannel[Any],
        if_busy: BusyPolicy = "queue",
    ):
        self._agent = agent
        self._request = request
        self._if_busy = if_busy
        self._receive = receive
        self._submitted = False
        self._result: AgentResult | None = None
        self._error: BaseException | None = None
        self._ended = False
        self._partial: Any = None

    @property
    def run_id(self) -> str:
        """The run's id: its result's and its events' ``run_id``."""
        return self._request.run_id

    @property
    def result(self) -> AgentResult:
        """The run's result, once the iteration has ended."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the run has not finished: iterate it to the end first")
        return self._result

    def partial_output(self) -> Any:
        """The structured answer known so far, as of the chunks read: the ``output`` of the
        last ``output`` chunk of this run's own read from the iteration (see :class:`Chunk`),
        ``None`` before any (and after a new attempt began). For a class, the ``dict`` of the
        fields complete so far, each valid against its part of the schema (nested objects
        partial too), keyed as in the JSON; for a JSON Schema, the JSON value so far. Never
        the final object: that is ``run.result.output``, validated strictly (the class's own
        validators included). ``None`` for a run without ``output=``."""
        return self._partial

    def abort(self, reason: str = "cancelled") -> None:
        """Cancel this run (a no-op once it has ended). A run still waiting its turn is
        withdrawn at once: it commits nothing and ends ``cancelled``."""
        self._request.token.cancel(reason)

    def events(self, *, after: int = 0) -> AsyncIterator[RunEvent]:
        """The run's whole event log, for the caller that started it: the same
        :class:`~protocols.live.RunEvent` objects, under the same seqs, that a follower of
        ``runtime.watch(run.run_id, after=after)`` reads -- ``started``, ``turn``, the deltas,
        tool calls and results, usage, approvals, compactions, subagents -- ending with the
        terminal event (``finished``, ``cancelled`` or ``failed``). Iterating it starts the run
        if the chunks have not; after the terminal event :attr:`result` is the run's result
        (or raises its error), as after the chunks. The chunks are the same events, those of
        kinds ``content``, ``thinking``, ``tool_call``, ``tool_result``, ``usage`` and
        ``progress`` (each :class:`Chunk`'s ``seq`` is its event's), with a delegated run's
        chunks besides (under the delegated run's id); an ``output`` chunk is not an event (it
        is derived from the content events: :class:`~protocols.toolschema.PartialOutput`).
        Raises
        :class:`~protocols.errors.ValidationError` for a run of an agent without a runtime."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValidationError(f"after must be a seq (an int >= 0), not {after!r}")
        return _OwnEvents(self, after)

    async def _start(self) -> None:
        if not self._submitted:
            # Only a delivered request has a run to wait for: a send that raises (the caller
            # cancelled, the agent stopped) delivered nothing.
            await self._request.submit(self._agent.ref, self._if_busy)
            self._submitted = True

    def _ended_with(self, event: RunEvent) -> None:
        """The log's terminal ``event`` was read: the run has ended."""
        request = self._request
        self._ended = True
        if request.result is not None:
            self._result = request.result
        elif request.error is not None:
            self._error = request.error
        elif isinstance(event.data.get("result"), AgentResult):
            self._result = event.data["result"]

    async def __aenter__(self) -> AgentRun:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Leave the run (what leaving the ``async with`` block does): a run still queued is
        withdrawn at once and commits nothing; a running one is aborted and this waits, briefly
        and even when the caller is being cancelled, until it has committed its partial."""
        if self._submitted and not self._ended:
            await self._request.give_up("the stream was closed before the run ended")
        self._ended = True
        self._receive.close()

    def __aiter__(self) -> AgentRun:
        return self

    async def __anext__(self) -> Chunk:
        if self._ended:
            raise StopAsyncIteration
        await self._start()
        try:
            item = await self._receive.receive()
        except trio.EndOfChannel:  # the run ended without a word (it cannot, but never hang)
            self._ended = True
            raise StopAsyncIteration from None
        if isinstance(item, Chunk):
            if item.kind == "output" and not item.path:
                self._partial = item.output
            return item
        self._ended = True
        kind, value = item
        if kind == "error":
            self._error = value
            raise value
        self._result = value
        raise StopAsyncIteration


class _OwnEvents:
    """See :meth:`AgentRun.events`."""

    def __init__(self, run: AgentRun, after: int) -> None:
        self._run = run
        self._after = after
        self._events: RunEvents | None = None

    def __aiter__(self) -> _OwnEvents:
        return self

    async def __anext__(self) -> RunEvent:
        events = self._events
        if events is None:
            run = self._run
            await run._start()
            live = run._request.live
            if live is None:
                raise ValidationError(
                    "this run has no event log to follow (its agent has no runtime)"
                )
            events = self._events = RunEvents(live, self._after)
        event = await events.__anext__()
        if event.terminal:
            self._run._ended_with(event)
        return event


def _raced(error: BaseException, scope: trio.CancelScope) -> BaseException | None:
    """The failure that raced the run's own cut (notes/000.md G17): ``error`` leaving the run
    once its scope had been cancelled (its abort, deadline or budget) -- the cut outranks it,
    and it becomes the cut's cause -- or ``None``: not cut, so a genuine failure that
    propagates; or only ``Cancelled`` (the scope takes it) or something that is no
    ``Exception`` (``KeyboardInterrupt``), which propagate. Out of a group, the failures
    without the ``Cancelled`` (the one failure itself when there is one)."""
    if not scope.cancel_called:
        return None
    if isinstance(error, BaseExceptionGroup):
        _, rest = error.split(trio.Cancelled)
        if rest is None or not isinstance(rest, ExceptionGroup):
            return None
        return rest.exceptions[0] if len(rest.exceptions) == 1 else rest
    return error if isinstance(error, Exception) else None


def _check_client_tools(tools: tuple[ToolDefinition, ...]) -> None:
    names: set[str] = set()
    for tool in tools:
        if not isinstance(tool, ToolDefinition):
            raise ValidationError(
                f"client_tools must be ToolDefinitions, not {type(tool).__name__}"
            )
        if tool.name in names:
            raise ValidationError(f"client_tools name {tool.name!r} twice")
        names.add(tool.name)


def _client_history(options: RunOptions, past: tuple[Message, ...] | None) -> None:
    if options.client_tools and past is None:
        raise ValidationError(
            "a run with client_tools works on the caller's history: give history= (an empty "
            "one to begin); the calls it leaves open are answered there, not in the agent's "
            "conversation"
        )


def _history(
    history: Sequence[Message] | None, input: Sequence[Message]
) -> tuple[Message, ...] | None:
    """A run's ``history=``, checked: well formed, and none of its ids an input message's."""
    if history is None:
        return None
    past = check_history(history)
    if input:
        ids = {message.id for message in past}
        for index, message in enumerate(input):
            if message.id in ids:
                raise ValidationError(
                    f"the input message {index} has the id {message.id!r} of a message of the "
                    "history (is it in both?)"
                )
    return past


def _input_messages(input: str | Message | Sequence[Message] | None) -> tuple[Message, ...]:
    if input is None:
        return ()
    if isinstance(input, str):
        return (Message.user(input),)
    if isinstance(input, Message):
        return (input,)
    return tuple(input)


class _AgentActor(Actor[_Request, None]):
    """Takes runs one at a time: interrupting ones first, then the others, each class in the
    order it came (every mailbox message is the wake-up of one queued request)."""

    mailbox_size = 1024

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def undelivered(self, message: _Request, error: ActorStopped) -> None:
        request = self._agent._next()
        if request is not None:
            request.fail(error)  # the agent stopped before this run's turn: never wait for it

    async def handle(self, message: _Request) -> None:
        agent = self._agent
        request = agent._next()
        if request is None or not request.begin():  # withdrawn while it waited: skip it
            return
        agent._current = request
        try:
            await agent._execute(request)
        finally:
            agent._current = None
            agent._maybe_idle()


class Agent:
    """An agent: a provider, a conversation, context and tools, run as a supervised actor.

    It keeps one conversation (:attr:`conversation`): every run reads and extends it, unless
    the run is given a ``history`` of its own (see :meth:`generate`); :meth:`fork` makes an
    agent like it with a conversation of its own.

    Start one with :meth:`start` (or ``runtime.agent(...)``, the same). Run options given there
    -- ``limit``, ``timeout``, ``budget``, ``think``, ``tool_choice``, ``on_exhaust``,
    ``max_repeats``, ``on_tool_error``, ``deps``, ``pace``, ``settings`` -- apply to every run
    unless the run overrides them (``settings`` field by field). Close it with :meth:`aclose`
    (or ``async with agent:``).
    """

    def __init__(
        self,
        provider: ProviderInterface,
        conversation: Conversation,
        *,
        system: str | None = None,
        instructions: Instructions | None = None,
        tools: Iterable[CallableTool] | ToolRegistry = (),
        scope: Scope | None = None,
        workspace: Workspace | WorkspaceManager | None = None,
        authority: Authority | None = None,
        approve: Approver | None = None,
        answer: Answerer | None = None,
        defaults: RunOptions = RunOptions(),
        tool_concurrency: int = 8,
        on: Iterable[Callable[[AgentEvent], None]] = (),
        error: ErrorHandler | None = None,
        window: int | None = None,
        strict: bool = False,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        """Prefer :meth:`start`, which also starts the agent's actor: an agent built here has
        none, and its runs raise until it has."""
        if isinstance(tool_concurrency, bool) or not isinstance(tool_concurrency, int):
            raise ConfigError("tool_concurrency must be an integer >= 1")
        if tool_concurrency < 1:
            raise ConfigError("tool_concurrency must be an integer >= 1")
        self.provider = provider
        self.conversation = conversation
        self.system = system
        self.instructions = instructions or Instructions()
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        # What the last run advertised and the options of its calls, with what they came from
        # (a run reuses them while those are the same: see _run_loop).
        self._advertised: tuple[Any, ...] | None = None
        self._call_options: tuple[Any, ...] | None = None
        self.scope = scope
        self.workspace = workspace
        self.authority = authority
        self.approve = approve
        #: Answers the questions its tools ask (``ask_user``, ``RunContext.ask``).
        self.answer = answer
        self.defaults = defaults
        self.tool_concurrency = tool_concurrency
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ConfigError(f"window must be a number of tokens >= 1, not {window!r}")
        self.window = window
        self.strict = strict
        self.status = AgentStatus.IDLE
        self._current: _Request | None = None
        # Runs executing in their caller's task (delegated to, handed to), for abort().
        self._direct: set[_Request] | None = None
        self._statistics = {"runs": 0, "errors": 0, "turns": 0, "withdrawn": 0}
        self._queued = 0
        # Requests waiting for the actor: interrupting ones go first (see _AgentActor). Made
        # when first needed: an idle agent should cost little.
        self._urgent: collections.deque[_Request] | None = None
        self._ordinary: collections.deque[_Request] | None = None
        self._ref: ActorRef[_Request, None] | None = None
        self._runtime: Runtime | None = None
        self._owns_conversation = False
        self._connection: ProviderConnection | None = None  # made from a provider string
        self._closing = False
        self._idle: trio.Event | None = None  # set when the last waiting run has ended
        self._listeners: list[Callable[[AgentEvent], None]] = list(on)
        self._error_handler = error
        self._runs = 0
        # The tracer of tracer_provider= (None: the global provider's, looked up per run).
        self._tracer: Tracer | None = _tracing.tracer_for(tracer_provider)

    def _traced(self, request: _Request, parent: Context | None = None) -> _Request:
        """Mark ``request`` traced when this agent traces (its own tracer provider, else a
        configured global one): its span's parent is ``parent``, or else the OpenTelemetry
        context current now -- where the run is requested, not where it will execute."""
        tracer = self._tracer if self._tracer is not None else _tracing.global_tracer()
        if tracer is not None:
            context = parent if parent is not None else _tracing.current_context()
            if not _tracing.idle(tracer, context):
                request.tracer = tracer
                request.parent = context
        return request

    def subscribe(self, listener: Callable[[AgentEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every event from now on; returns a function that
        unsubscribes. A listener that raises never changes a run: the error goes to the
        agent's ``error`` handler (or the log)."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _emit(self, event: AgentEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as error:
                handler = self._error_handler
                if handler is None:
                    log.exception("an event listener raised on %s", event.kind)
                    continue
                try:
                    handler(error, event)
                except Exception:
                    log.exception("the error handler raised on %s", event.kind)

    @classmethod
    async def start(
        cls,
        runtime: Runtime,
        provider: ProviderInterface | str,
        *,
        name: str | None = None,
        conversation: Conversation | None = None,
        system: str | None = None,
        instructions: Instructions | None = None,
        tools: Iterable[CallableTool] | ToolRegistry = (),
        scope: Scope | None = None,
        workspace: Workspace | WorkspaceManager | None = None,
        authority: Authority | None = None,
        approve: Approver | None = None,
        answer: Answerer | None = None,
        deps: Any = None,
        limit: int = 10,
        timeout: float | None = None,  # noqa: ASYNC109 - the runs' deadline, not start()'s
        budget: TokenBudget | TeamBudget | None = None,
        think: bool | None = None,
        tool_choice: str | None = None,
        abort: Iterable[Abort] = (),
        on_exhaust: Literal["stop", "summarize"] = "stop",
        max_repeats: int = 3,
        on_tool_error: Literal["record", "raise"] = "record",
        pace: Pace | None = None,
        settings: SettingsLike = None,
        guardrails: Iterable[Guardrail] = (),
        pricing: Pricing | None = None,
        tool_concurrency: int = 8,
        window: int | None = None,
        strict: bool = False,
        on: Iterable[Callable[[AgentEvent], None]] = (),
        error: ErrorHandler | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> Agent:
        """Start an agent under ``runtime``'s root supervisor and return it.

        ``provider``: a provider, or a provider string such as ``"openai:gpt-4.1-mini"`` (see
        :func:`~actors.providers.provider_from_string`), which the agent connects under
        ``runtime`` and closes with itself.

        What it is: ``name`` (its actor's; default ``agent-N``), ``conversation`` (an existing
        one, which it never stops; default: a new one it owns and stops on :meth:`aclose`),
        ``system``, ``instructions``, ``tools``, ``scope`` (which tools and files are in
        reach), ``workspace``, ``authority`` and ``approve`` (the tool gate and who answers its
        asks), ``answer`` (who answers the questions its tools ask the human: ``ask_user``,
        ``RunContext.ask``; see ``docs/agent.md``), ``deps`` (what tools read as
        ``RunContext.deps``).

        How its runs go, unless a run says otherwise (see :class:`RunOptions`): ``limit``
        (provider turns, 10), ``timeout``, ``budget`` (a :class:`TokenBudget` per run, or a
        :class:`TeamBudget` shared), ``think``, ``tool_choice``, ``abort``, ``on_exhaust``,
        ``max_repeats``, ``on_tool_error``, ``pace``, and ``settings``: the model's
        :class:`~protocols.settings.ModelSettings` (or a mapping of their fields; a run's
        settings override these field by field), and ``guardrails`` (checks of every run's
        input, answer and tool calls: see :mod:`actors.guardrails`; a run's own are added),
        and ``pricing`` (what prices each provider call: its usage then carries a cost).

        And: ``tool_concurrency`` (calls of one batch at once), ``window`` (the model's context
        window in tokens: compact the conversation automatically to stay inside it),
        ``strict`` (a failed automatic compaction raises instead of emitting ``fault``),
        ``on`` (event listeners) and ``error`` (their error handler).

        ``tracer_provider``: an OpenTelemetry ``TracerProvider`` its runs are traced with (see
        ``docs/tracing.md``); by default the global one, if one is configured -- otherwise its
        runs do no tracing work at all.
        """
        defaults = RunOptions(
            limit=limit,
            timeout=timeout,
            budget=budget,
            think=think,
            tool_choice=tool_choice,
            abort=abort,
            on_exhaust=on_exhaust,
            max_repeats=max_repeats,
            on_tool_error=on_tool_error,
            deps=deps,
            pace=pace,
            settings=settings,
            guardrails=_check_guardrails(guardrails),
            pricing=pricing,
        )
        owned = conversation is None
        conversation = conversation or await Conversation.start(runtime)
        connection: ProviderConnection | None = None
        try:
            if isinstance(provider, str):  # a provider string: a connection of the agent's own
                provider = connection = await runtime.connect(provider)
            self = cls(
                provider,
                conversation,
                system=system,
                instructions=instructions,
                tools=tools,
                scope=scope,
                workspace=workspace,
                authority=authority,
                approve=approve,
                answer=answer,
                defaults=defaults,
                tool_concurrency=tool_concurrency,
                on=on,
                error=error,
                window=window,
                strict=strict,
                tracer_provider=tracer_provider,
            )
            self._runtime = runtime
            self._owns_conversation = owned
            self._connection = connection

            def agent() -> _AgentActor:  # the factory's name names the actor
                return _AgentActor(self)

            self._ref = await runtime.spawn(agent, name=name, restart=Restart.TRANSIENT)
        except BaseException:
            with trio.CancelScope(shield=True):
                if owned:
                    await conversation.stop()
                if connection is not None:
                    await connection.aclose()
            raise
        return self

    @property
    def ref(self) -> ActorRef[Any, Any]:
        """The agent's actor."""
        if self._ref is None:
            raise RuntimeError("the agent has no actor: create it with 'await Agent.start(...)'")
        return self._ref

    @property
    def name(self) -> str:
        """The name the agent's actor runs under (``"(not started)"`` before :meth:`start`)."""
        return self._ref.name if self._ref is not None else "(not started)"

    @property
    def deps(self) -> Any:
        """The dependencies tools of its runs read (``RunContext.deps``) unless a run gives
        its own."""
        return self.defaults.deps

    @property
    def busy(self) -> bool:
        """A run is in progress or waiting its turn."""
        return self._current is not None or self._queued > 0

    @property
    def closed(self) -> bool:
        """:meth:`aclose` was called: no new run is taken."""
        return self._closing

    def __repr__(self) -> str:
        return f"<Agent {self.name} {self.status.value}>"

    def statistics(self) -> dict[str, int]:
        """Runs completed (partial ones included), runs that raised, provider turns made, runs
        withdrawn before they began (their caller gave up or their token tripped while they
        waited), and runs waiting their turn."""
        return {**self._statistics, "queued": self._queued}

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the run in progress and the runs delegated to this agent that are running,
        if any (queued runs are not affected)."""
        if self._current is not None:
            self._current.token.cancel(reason)
        for request in list(self._direct or ()):
            request.token.cancel(reason)

    async def aclose(self, *, cancel: bool = False) -> None:
        """Close the agent: it takes no new run (they raise :class:`~actors.ActorStopped`), the
        runs in progress (runs delegated to it and served over MCP included) and those already
        waiting end as they would -- or, with ``cancel=True``, the runs in progress are cut
        (committing their partials) and the waiting ones are withdrawn -- then its actor stops,
        and the conversation it owns (one it made, not one it was given) stops too.
        Idempotent; the actors it stopped leave the runtime."""
        if self._closing:
            if self._ref is not None:
                await self._ref.wait_stopped()
            return
        self._closing = True
        if cancel:
            for request in (*(self._urgent or ()), *(self._ordinary or ())):
                request.withdraw("the agent was closed")
            self.abort("the agent was closed")
        else:
            # However long they take: stopping the actor would cut them at its shutdown
            # deadline. (A caller cancelled while waiting here still closes the agent below.)
            try:
                while self.busy or self._direct:
                    self._idle = trio.Event()
                    await self._idle.wait()
            except BaseException:
                self.abort("the agent was closed")
                await self._stop_owned()
                raise
        await self._stop_owned()

    def _maybe_idle(self) -> None:
        idle = self._idle
        if idle is not None and not self.busy and not self._direct:
            idle.set()

    async def _stop_owned(self) -> None:
        with trio.CancelScope(shield=True):
            if self._ref is not None:
                await self._ref.stop()
            if self._owns_conversation:
                await self.conversation.stop()
            if self._connection is not None:
                await self._connection.aclose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _next(self) -> _Request | None:
        """The next waiting request: interrupting ones first, each class in order."""
        if self._urgent:
            return self._urgent.popleft()
        if self._ordinary:
            return self._ordinary.popleft()
        return None

    def _queue(self, *, urgent: bool) -> collections.deque[_Request]:
        """Where a request waits: the interrupting class or the ordinary one."""
        if urgent:
            if self._urgent is None:
                self._urgent = collections.deque()
            return self._urgent
        if self._ordinary is None:
            self._ordinary = collections.deque()
        return self._ordinary

    def stream(
        self,
        input: str | Message | Sequence[Message] | None = None,
        *,
        history: Sequence[Message] | None = None,
        if_busy: BusyPolicy = "queue",
        **options: Any,
    ) -> AgentRun:
        """Start a run and stream its chunks (see :class:`AgentRun`). ``options`` are
        :class:`RunOptions` fields overriding the agent's for this run; ``history`` and
        ``if_busy`` as for :meth:`generate`."""
        run_options = RunOptions(**options)
        messages = _input_messages(input)
        past = _history(history, messages)
        _client_history(run_options, past)
        send, receive = trio.open_memory_channel[Any](float("inf"))
        request = self._traced(_Request(self, messages, run_options, send, history=past))
        return AgentRun(self, request, receive, if_busy)

    async def generate(
        self,
        input: str | Message | Sequence[Message] | None = None,
        *,
        history: Sequence[Message] | None = None,
        if_busy: BusyPolicy = "queue",
        **options: Any,
    ) -> AgentResult:
        """Run to the end and return the result: :meth:`stream`, drained (the same run,
        without producing chunks nobody reads).

        ``history`` (a sequence of messages) runs on that history instead of the agent's
        conversation, which the run then neither reads nor changes: the prompt is the agent's
        system prompt, instructions and workspace, then ``history``, then ``input`` and what
        the run adds. ``result.messages`` is what the run added (``input`` first), so
        ``[*history, *result.messages]`` is the history to give the next call -- well formed
        also when the run was cut (every call answered). It must be well formed itself
        (:func:`~protocols.history.check_history`; a :class:`~protocols.errors.ValidationError`
        says where it is not, before anything runs). Such a run is never compacted (the agent's
        ``window`` still refuses a prompt over it), and waits its turn like any run.

        ``if_busy`` says what happens when the agent is already answering (or has runs
        waiting): ``"queue"`` (the default) waits its turn, first come first served;
        ``"interrupt"`` cuts the run in progress (its partial is committed as for any cancel)
        and goes next, ahead of ordinary waiting runs; ``"reject"`` raises :class:`AgentBusy`
        at once."""
        messages = _input_messages(input)
        past = _history(history, messages)
        run_options = RunOptions(**options)
        _client_history(run_options, past)
        request = self._traced(_Request(self, messages, run_options, None, history=past))
        return await self._wait(request, if_busy)

    async def _wait(self, request: _Request, if_busy: BusyPolicy = "queue") -> AgentResult:
        await request.submit(self.ref, if_busy)
        try:
            await request.finished.wait()
        except BaseException:
            # Cancelled: a queued run is withdrawn at once, a running one commits its partial.
            await request.give_up("the caller was cancelled")
            raise
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        conversation: Literal["fresh", "shared"] = "fresh",
    ) -> CallableTool:
        """A tool whose call is a run of this agent inside the calling run (see
        ``docs/multi-agent.md``): it inherits the caller's deadline and abort, draws on its
        budget, and streams into its stream. ``conversation="fresh"`` (the default) gives each
        call a new conversation; ``"shared"`` runs it in this agent's own conversation, in turn
        with its other callers."""
        # Imported here: the delegation module builds on this one.
        from ._delegation import AgentTool  # noqa: PLC0415

        return AgentTool(self, name=name, description=description, conversation=conversation)

    async def fork(
        self, *, history: Sequence[Message] | None = None, name: str | None = None
    ) -> Agent:
        """A new agent with this one's configuration and a conversation of its own: the same
        provider, system prompt, instructions, tools (the same registry), scope, workspace,
        authority, approver, answerer, run defaults (``limit``, ``budget``, ``deps``, ...), tool
        concurrency, window, listeners (those subscribed now) and tracing; its conversation
        compacts as this one's does (the same summarizer and settings). It starts empty, or
        with ``history`` (checked as for :meth:`generate`) -- ``history=await
        agent.conversation.messages()`` continues from where this agent is.

        The fork is an agent like any other, under the same runtime: its runs queue on its
        own (it runs side by side with this one), it has its own :meth:`statistics`, and it
        owns its conversation, which :meth:`aclose` stops. Neither agent ever sees the
        other's conversation. ``name`` names its actor (default ``agent-N``)."""
        if self._closing:
            raise ActorStopped(f"agent {self.name!r} is closed", name=self.name)
        runtime = self._runtime
        if runtime is None:
            raise RuntimeError("the agent has no actor: create it with 'await Agent.start(...)'")
        start = check_history(history) if history is not None else ()
        conversation = await self._new_conversation(start, compacting=True)
        try:
            fork = Agent(
                self.provider,
                conversation,
                system=self.system,
                instructions=self.instructions,
                tools=self.registry,
                scope=self.scope,
                workspace=self.workspace,
                authority=self.authority,
                approve=self.approve,
                answer=self.answer,
                defaults=self.defaults,
                tool_concurrency=self.tool_concurrency,
                on=self._listeners,
                error=self._error_handler,
                window=self.window,
                strict=self.strict,
            )
            fork._tracer = self._tracer
            fork._runtime = runtime
            fork._owns_conversation = True

            def agent() -> _AgentActor:  # the factory's name names the actor
                return _AgentActor(fork)

            fork._ref = await runtime.spawn(agent, name=name, restart=Restart.TRANSIENT)
        except BaseException:
            with trio.CancelScope(shield=True):
                await conversation.stop()
            raise
        return fork

    async def _new_conversation(
        self, history: Sequence[Message], *, compacting: bool
    ) -> Conversation:
        """A conversation of the agent's runtime holding ``history`` (checked already): one
        that compacts as the agent's own does (``compacting``), or one never compacted."""
        runtime = self._runtime
        if runtime is None:
            raise RuntimeError("the agent has no actor: create it with 'await Agent.start(...)'")
        if compacting:
            own = self.conversation._state
            conversation = await Conversation.start(
                runtime, summarize=own.summarize, keep=own.keep, sections=own.sections
            )
        else:
            conversation = await Conversation.start(runtime)
        if history:
            try:
                await conversation.add(history)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await conversation.stop()
                raise
        return conversation

    # -- the run -------------------------------------------------------------------------------

    def _option(self, options: RunOptions, name: str) -> Any:
        value = getattr(options, name)
        return getattr(self.defaults, name) if value is None else value

    def _guardrails(self, options: RunOptions) -> tuple[Guardrail, ...]:
        """The guardrails of a run: the agent's, and the run's own after them."""
        own, extra = self.defaults.guardrails, options.guardrails
        return (*own, *extra) if extra else own

    def _settings(self, options: RunOptions) -> ModelSettings | None:
        """The model settings of a run: the agent's, with the run's over them field by field."""
        base, over = self.defaults.settings, options.settings
        if over is None:
            return base
        return over if base is None else base.merge(over)

    async def _execute(self, request: _Request) -> None:
        """Run ``request`` (already begun) to its end, delivering its outcome."""
        self.status = AgentStatus.RUNNING
        self._runs += 1
        number = self._runs
        trace: _tracing.RunTrace | None = None
        private: Conversation | None = None  # a run on a history: its own, for the run only
        chain = _chain.set(request.chain)
        try:
            if request.history is not None and request.conversation is None:
                private = await self._new_conversation(request.history, compacting=False)
                request.conversation = private
            if request.tracer is not None:
                conversation = request.conversation or self.conversation
                trace = request.trace = _tracing.RunTrace(
                    request.tracer,
                    request.parent,
                    agent=self.name,
                    provider=self.provider,
                    conversation=conversation.id,
                    run_id=request.run_id,
                )
            result = await self._run(request, number)
        except Exception as error:
            if trace is not None:
                trace.fail(error)
            self.status = AgentStatus.ERROR
            self._statistics["errors"] += 1
            request.error = error
            request.end_log("failed", {"error": _described(error)})
            request.deliver(("error", error))
            self._event(request, AgentEvent("error", number, error=error, run_id=request.run_id))
        except BaseException as error:
            run = request.run
            self.status = AgentStatus.DONE  # it ended, partially
            if trace is not None:
                trace.cut(run.cut_reason() if run is not None else StopReason.CANCELLED)
            if run is not None and not isinstance(error, Exception):
                # (Cancelled, or a group of them out of a tool batch's nursery.)
                # Cut from outside -- with the run it was delegated from, or its agent stopping:
                # its partial was committed; its listeners still hear how it ended.
                self._statistics["runs"] += 1
                stop = run.cut_reason()
                run.event("abort", reason=run.token.reason or stop.value, stop=stop)
                run.event("finish", stop=stop, partial=True, finish=run.finish)
            if request.forward is None:
                # The agent is being stopped: its caller must not wait for the run (its log
                # ends ``failed`` with the error the caller gets).
                request.fail(
                    ActorStopped(f"agent {self.name!r} stopped during the run", name=self.name)
                )
            elif run is not None:
                # Cut with the run it was delegated from (or handed from): ``cancelled``, with
                # what it had done.
                cut = run.result(run.cut_reason())
                request.end_log(terminal_for(cut), cut)
            else:
                request.close_log()  # cut before its loop began: ``cancelled``, nothing done
            raise
        else:
            if trace is not None:
                trace.finish(result)
            self.status = AgentStatus.DONE
            self._statistics["runs"] += 1
            request.result = result
            request.end_log(terminal_for(result), result)
            request.deliver(("result", result))
            if self._listeners or request.forward_event is not None:
                finish = AgentEvent(
                    "finish",
                    number,
                    turn=result.turns,
                    stop=result.stop,
                    partial=result.partial,
                    run_id=request.run_id,
                    finish=result.finish,
                )
                self._event(request, finish)
        finally:
            if private is not None:
                with trio.CancelScope(shield=True):
                    await private.stop()
            if trace is not None:
                trace.end()  # whatever happened, the run's span ends with it (once)
            _chain.reset(chain)
            request.state = _State.DONE
            request.finished.set()
            request.close()

    def _event(self, request: _Request, event: AgentEvent) -> None:
        if self._listeners:
            self._emit(event)
        if request.forward_event is not None:
            request.forward_event(event)

    async def _execute_here(self, request: _Request) -> AgentResult:
        """Run ``request`` in the calling task (a delegated or handed-to run: inside its
        parent's scope; a run served over MCP: in the call's task), not in the agent's actor.
        Raises what the run raises."""
        if self._closing:
            error = ActorStopped(f"agent {self.name!r} is closed", name=self.name)
            request.end_log("failed", {"error": _described(error)})  # (a log opened beforehand)
            raise error
        request.bind(queued=False)
        request.state = _State.RUNNING
        if self._direct is None:
            self._direct = set()
        direct = self._direct
        direct.add(request)
        try:
            await self._execute(request)
        finally:
            direct.discard(request)
            self._maybe_idle()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    async def _run(self, request: _Request, number: int) -> AgentResult:
        options = request.options
        limit: int = self._option(options, "limit")
        timeout: float | None = self._option(options, "timeout")
        meter = _meter_for(
            self._option(options, "budget"),
            request.meters,
            self._option(options, "pricing"),
            self.provider,
        )
        run = _Run(self, request, meter, number)
        request.run = run
        token = run.token
        resume = request.resume
        if resume is not None:
            run.resumed(resume)  # what it spent before counts toward its limits
        if request.input:
            await run.add(*request.input)
        run.started()
        if token.cancelled or (meter is not None and meter.spent):
            stop = StopReason.CANCELLED if token.cancelled else StopReason.BUDGET
            if resume is not None and resume.decisions:
                # A continued run cut before it began (its job was cancelled while its worker
                # was dead): the batch the crash left open is answered, never run.
                await run.close_batch(resume.decisions)
            run.event("abort", reason=token.reason or "budget", stop=stop)
            return run.result(stop)
        raced: BaseException | None = None
        with trio.CancelScope() as scope, token.bind(scope):
            deadline = request.deadline
            if timeout is not None:
                deadline = min(deadline, trio.current_time() + timeout)
            scope.deadline = deadline
            run.scope = scope
            untrip = _cut_on_trip(meter, run, scope)
            try:
                with observe_retries(run.retried):
                    if resume is not None and resume.decisions:
                        await run.finish_batch(resume.decisions)
                    stop = await run.turns(limit)
                    if run.handoff is not None:
                        stop = await self._hand_off(run)
                    if stop is StopReason.COMPLETE and (
                        self.defaults.guardrails or options.guardrails
                    ):
                        stop = await _guarding.after(run, self._guardrails(options))
            except BaseException as error:
                # A genuine failure, a cut (committed once: a second commit finds nothing), or
                # the agent stopped from outside: the history is left well formed either way.
                await run.commit_partial()
                raced = _raced(error, scope)
                if raced is None:
                    raise
            finally:
                untrip()
        if scope.cancelled_caught or raced is not None:
            if run.budget_tripped:
                stop = StopReason.BUDGET
            elif trio.current_time() >= scope.deadline:
                # The deadline had passed when the cut landed: a timeout, also when a caller
                # gave up at that same moment (a parent cut by its own deadline does so).
                stop = StopReason.TIMEOUT
            else:
                stop = StopReason.CANCELLED
            await run.commit_partial()
            reason = "budget" if stop is StopReason.BUDGET else token.reason or stop.value
            run.event("abort", reason=reason, stop=stop, error=raced)
        elif stop is StopReason.BUDGET:  # spent by a turn's reported usage, between turns
            run.event("abort", reason="budget", stop=stop)
        return run.result(stop)

    async def _hand_off(self, run: _Run) -> StopReason:
        """The last batch handed the turn to ``run.handoff``: it answers, in this run's
        conversation and scope; its work becomes this run's."""
        target = run.handoff
        assert target is not None
        run.handoff = None
        run.answered_by = target.name  # from now on, whatever the run shows is the target's
        request = _Request(
            target,
            (),
            RunOptions(),
            None,
            run_id=run.run_id,
            path=run.path,
            conversation=run.conversation,
            deps=run.deps,
            # The same run, answered on by another agent: its events go on in the run's log.
            live=run.request.live,
            owns_log=False,
            forward=run.emit,
            forward_event=run.request.forward_event,
            deadline=run.deadline(),
            meters=(run.meter,) if run.meter is not None else (),
        )
        if run.trace is not None:
            # A child of the span of the handoff's tool call (else of this run's span).
            target._traced(request, run.handed_from or run.trace.context)
        try:
            result = await target._execute_here(request)
        finally:
            handed = request.run
            if handed is not None:
                run.appended.extend(handed.appended)
                run.thinking.extend(handed.thinking)
                run.turns_made += handed.turns_made
                run.usage = (
                    None
                    if run.usage is None or handed.usage is None
                    else (run.usage + handed.usage)
                )
                run.delegated_to(handed.delegated)
                run.estimated = run.estimated or handed.estimated
                if handed.finish is not None:  # its last provider call is the run's last
                    run.finish = handed.finish
        run.answered_by = result.agent  # the target may have handed on in turn
        run.output = result.output
        run.tripped = result.guardrail  # (the target's own guardrails checked its run)
        return result.stop


def _meter_for(
    budget: TokenBudget | TeamBudget | None,
    parents: tuple[BudgetMeter, ...],
    pricing: Pricing | None = None,
    provider: object = None,
) -> BudgetMeter | None:
    """The meter of a run (``None``: nothing to count). With ``pricing``, it charges money at
    the rates of ``provider``'s model; a money cap without them is refused here, when the run
    starts (:meth:`BudgetMeter.check_prices`: a ``ConfigError``)."""
    if isinstance(budget, TeamBudget):
        own, parents = None, (budget.meter, *parents)
    elif budget is not None:
        own = budget
    elif parents:
        own = None
    else:
        return None
    prices = run_rates(pricing, provider) if pricing is not None else None
    meter = BudgetMeter(own, parents=parents, prices=prices)
    meter.check_prices()
    return meter


def _cut_on_trip(
    meter: BudgetMeter | None, run: _Run, scope: trio.CancelScope
) -> Callable[[], None]:
    """Cut ``run`` when its meter, or any meter it draws on, is spent (by whichever run's
    charge); returns a function that stops watching."""
    if meter is None:
        return _nothing

    def cut() -> None:
        run.budget_tripped = True
        scope.cancel()

    removers = []
    stack = [meter]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.budget is not None:
            removers.append(current.on_trip(cut))
        stack.extend(current.parents)

    def stop_watching() -> None:
        for remove in removers:
            remove()

    return stop_watching


def _nothing() -> None:
    pass


def _described(error: BaseException) -> dict[str, Any]:
    """A failure as a run's ``failed`` event shows it: its class, code and message (an error of
    ours; a foreign one's message is left out, as tracing leaves it out)."""
    if isinstance(error, AgentsError):
        return {"type": type(error).__name__, "code": error.code, "message": error.message}
    return {"type": type(error).__name__, "code": None, "message": ""}
