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
* only genuine failures (a provider error after its retries, a bug) raise, after the partial
  was committed;
* a cancel of the *caller's* own scope aborts a running run, waits (shielded, briefly) for it
  to commit, then propagates as ``trio.Cancelled``; no way of a caller going away crashes the
  agent;
* a run requested from inside a run of the same agent (A -> A, A -> B -> A) would wait on
  itself: it is refused at once with :class:`CycleError`.

Runs on one agent are taken one at a time, in the order they were started (FIFO); separate
agents run concurrently. A :meth:`Agent.stream` that is never iterated never takes the slot.
"""

from __future__ import annotations

import contextvars
import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from protocols.accounting import BudgetMeter, TokenBudget
from protocols.authority import Authority
from protocols.context import Instructions, Scope
from protocols.errors import (
    AgentsError,
    Category,
    ConfigError,
    ValidationError,
)
from protocols.messages import (
    AgentResult,
    Message,
    StopReason,
)
from protocols.workspace import Workspace, WorkspaceManager

from ._core._abort import Abort
from ._core._actor import Actor, ActorRef, ActorStopped
from ._core._supervisor import Restart
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
    _Run,
)
from .conversation import Conversation
from .providers import observe_retries
from .tools import Approver, CallableTool, ToolRegistry

if TYPE_CHECKING:
    from ._core._runtime import Runtime
    from .providers import ProviderInterface

__all__ = [
    "EXHAUSTED",
    "EXHAUST_INSTRUCTION",
    "FALLBACK_SUMMARY",
    "OUTPUT_FEEDBACK",
    "OUTPUT_INSTRUCTION",
    "TOOLS_OFF",
    "UNKNOWN_TOOLS_FALLBACK",
    "Agent",
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


def _tokens(value: Iterable[Abort]) -> tuple[Abort, ...]:
    return tuple(value)


@attrs.frozen
class RunOptions:
    """Options of one run (``None``: the agent's own setting).

    ``limit``: provider turns at most (>= 0); ``timeout``: seconds for the whole run; ``budget``:
    a :class:`~protocols.accounting.TokenBudget`; ``abort``: caller tokens that cancel the run;
    ``think`` and ``tool_choice``: passed to the provider; ``on_exhaust``: ``"stop"`` or
    ``"summarize"`` (one final tool-less call when the limit is reached while the model still
    wants tools); ``max_repeats``: how often one identical call (name and arguments) may run in
    one run before a batch repeating it is refused; ``schema``: a JSON Schema (a dict) or an
    attrs class the final answer must follow (see :class:`OutputError`); ``schema_retries``: how
    many more answers a wrong one may be followed by (default 2); ``on_tool_error``: what a
    tool that raises does -- ``"record"`` (the default: the model reads the error, a
    ``tool_error`` event and a WARNING log with the traceback tell you) or ``"raise"`` (the
    batch's results are committed, then the run fails with a
    :class:`~protocols.errors.ToolError` chained to the tool's exception).
    """

    limit: int | None = None
    timeout: float | None = None
    budget: TokenBudget | None = None
    abort: tuple[Abort, ...] = attrs.field(default=(), converter=_tokens)
    think: bool | None = None
    tool_choice: str | None = None
    on_exhaust: Literal["stop", "summarize"] | None = None
    max_repeats: int | None = None
    schema: dict[str, Any] | type | None = None
    schema_retries: int | None = None
    on_tool_error: Literal["record", "raise"] | None = None

    def __attrs_post_init__(self) -> None:
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
        if self.schema_retries is not None and (
            isinstance(self.schema_retries, bool)
            or not isinstance(self.schema_retries, int)
            or self.schema_retries < 0
        ):
            raise ValidationError(
                f"schema_retries must be an integer >= 0, not {self.schema_retries!r}"
            )
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0
        ):
            raise ValidationError(f"limit must be an integer >= 0, not {self.limit!r}")
        _positive("timeout", self.timeout)
        if self.budget is not None and not isinstance(self.budget, TokenBudget):
            raise ValidationError("budget must be a TokenBudget")
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


@attrs.define
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

    async def submit(self, ref: ActorRef[Any, Any]) -> None:
        """Queue this run in the agent's mailbox (without a yield when there is room).

        Raises :class:`CycleError` when the calling task is inside a run of this agent; a
        request whose tokens already tripped is withdrawn without being queued."""
        await trio.lowlevel.checkpoint_if_cancelled()
        chain = tuple(run for run in _chain.get() if run.state is _State.RUNNING)
        agent = self.agent
        if any(run.agent is agent for run in chain):
            self.state = _State.WITHDRAWN
            raise CycleError([run.agent.name for run in chain], agent.name)
        self.chain = (*chain, self)
        sources = (*agent.defaults.abort, *self.options.abort)
        self.watch = watch = Abort.any(self.token, *sources) if sources else self.token
        self._unwatch = watch.on_cancel(self._tripped)
        if self.state is not _State.QUEUED:  # already tripped: never queued
            return
        try:
            try:
                ref.send_nowait(self)
            except trio.WouldBlock:
                await ref.send(self)
        except BaseException:
            self.withdraw("the request was never delivered", quiet=True)
            raise
        if self.state is _State.QUEUED:
            self._waiting = True
            agent._queued += 1

    def _settle(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._waiting:
            self._waiting = False
            self.agent._queued -= 1

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
        self.result = result = AgentResult(stop=StopReason.CANCELLED)
        self.deliver(("result", result))
        self.close()
        self.finished.set()
        agent = self.agent
        agent._statistics["withdrawn"] += 1
        if agent._listeners and not quiet:
            agent._runs += 1
            number = agent._runs
            agent._emit(AgentEvent("abort", number, reason=reason, stop=StopReason.CANCELLED))
            agent._emit(AgentEvent("finish", number, stop=StopReason.CANCELLED, partial=True))

    def fail(self, error: BaseException) -> None:
        """End a run that will never finish (its agent stopped): its caller gets ``error``."""
        if self.state not in (_State.QUEUED, _State.RUNNING):
            return
        self.state = _State.DONE
        self._settle()
        if self.result is None and self.error is None:
            self.error = error
            self.deliver(("error", error))
        self.close()
        self.finished.set()

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
    then ``run.result``. Leaving the block early aborts the run (its partial is committed)."""

    def __init__(self, agent: Agent, request: _Request, receive: trio.MemoryReceiveChannel[Any]):
        self._agent = agent
        self._request = request
        self._receive = receive
        self._submitted = False
        self._result: AgentResult | None = None
        self._error: BaseException | None = None
        self._ended = False

    @property
    def result(self) -> AgentResult:
        """The run's result, once the iteration has ended."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the run has not finished: iterate it to the end first")
        return self._result

    def abort(self, reason: str = "cancelled") -> None:
        """Cancel this run (a no-op once it has ended). A run still waiting its turn is
        withdrawn at once: it commits nothing and ends ``cancelled``."""
        self._request.token.cancel(reason)

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
        if not self._submitted:
            # Only a delivered request has a run to wait for: a send that raises (the caller
            # cancelled, the agent stopped) delivered nothing.
            await self._request.submit(self._agent.ref)
            self._submitted = True
        try:
            item = await self._receive.receive()
        except trio.EndOfChannel:  # the run ended without a word (it cannot, but never hang)
            self._ended = True
            raise StopAsyncIteration from None
        if isinstance(item, Chunk):
            return item
        self._ended = True
        kind, value = item
        if kind == "error":
            self._error = value
            raise value
        self._result = value
        raise StopAsyncIteration


def _input_messages(input: str | Message | Sequence[Message] | None) -> tuple[Message, ...]:
    if input is None:
        return ()
    if isinstance(input, str):
        return (Message.user(input),)
    if isinstance(input, Message):
        return (input,)
    return tuple(input)


class _AgentActor(Actor[_Request, None]):
    """Takes runs from the mailbox one at a time."""

    mailbox_size = 1024

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def undelivered(self, message: _Request, error: ActorStopped) -> None:
        message.fail(error)  # the agent stopped before this run's turn: its caller must not wait

    async def handle(self, message: _Request) -> None:
        if not message.begin():  # withdrawn while it waited: nothing of it happens
            return
        agent = self._agent
        agent._current = message
        agent.status = AgentStatus.RUNNING
        agent._runs += 1
        number = agent._runs
        chain = _chain.set(message.chain)
        try:
            result = await agent._run(message, number)
        except Exception as error:
            agent.status = AgentStatus.ERROR
            agent._statistics["errors"] += 1
            message.error = error
            message.deliver(("error", error))
            if agent._listeners:
                agent._emit(AgentEvent("error", number, error=error))
        except BaseException:
            # Cancelled from outside: the agent is being stopped (its partial was committed).
            message.fail(
                ActorStopped(f"agent {agent.name!r} stopped during the run", name=agent.name)
            )
            raise
        else:
            agent.status = AgentStatus.DONE
            agent._statistics["runs"] += 1
            message.result = result
            message.deliver(("result", result))
            if agent._listeners:
                agent._emit(
                    AgentEvent(
                        "finish",
                        number,
                        turn=result.turns,
                        stop=result.stop,
                        partial=result.partial,
                    )
                )
        finally:
            _chain.reset(chain)
            agent._current = None
            message.state = _State.DONE
            message.finished.set()
            message.close()


class Agent:
    """An agent: a provider, a conversation, context and tools, run as a supervised actor.

    Start one with :meth:`start`. ``provider`` is any provider or
    :class:`~actors.providers.ProviderConnection`; ``conversation`` an existing
    :class:`~actors.conversation.Conversation` (default: a new one). Construction options --
    ``limit`` (10), ``timeout``, ``budget``, ``think``, ``tool_choice``, ``on_exhaust``,
    ``max_repeats``, ``on_tool_error`` -- apply to every run unless the run overrides them.
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
        defaults: RunOptions = RunOptions(),
        tool_concurrency: int = 8,
        on: Iterable[Callable[[AgentEvent], None]] = (),
        error: ErrorHandler | None = None,
        window: int | None = None,
        strict: bool = False,
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
        self.scope = scope
        self.workspace = workspace
        self.authority = authority
        self.approve = approve
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
        self._statistics = {"runs": 0, "errors": 0, "turns": 0, "withdrawn": 0}
        self._queued = 0
        self._ref: ActorRef[_Request, None] | None = None
        self._listeners: list[Callable[[AgentEvent], None]] = list(on)
        self._error_handler = error
        self._runs = 0

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
        provider: ProviderInterface,
        *,
        conversation: Conversation | None = None,
        limit: int = 10,
        timeout: float | None = None,  # noqa: ASYNC109 - the runs' deadline, not start()'s
        budget: TokenBudget | None = None,
        think: bool | None = None,
        tool_choice: str | None = None,
        abort: Iterable[Abort] = (),
        on_exhaust: Literal["stop", "summarize"] = "stop",
        max_repeats: int = 3,
        on_tool_error: Literal["record", "raise"] = "record",
        name: str | None = None,
        **context: Any,
    ) -> Agent:
        """Start an agent under ``runtime``'s root supervisor and return it.

        ``context`` holds the other constructor arguments (``system``, ``instructions``,
        ``tools``, ``scope``, ``workspace``, ``authority``, ``approve``, ``tool_concurrency``,
        ``on`` (event listeners), ``error`` (their error handler), ``window`` (the model's
        context window in tokens: compact the conversation automatically to stay inside it)
        and ``strict`` (a failed automatic compaction raises instead of emitting ``fault``)).
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
        )
        conversation = conversation or await Conversation.start(runtime)
        self = cls(provider, conversation, defaults=defaults, **context)

        def agent() -> _AgentActor:  # the factory's name names the actor
            return _AgentActor(self)

        self._ref = await runtime.spawn(agent, name=name, restart=Restart.TRANSIENT)
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

    def __repr__(self) -> str:
        return f"<Agent {self.name} {self.status.value}>"

    def statistics(self) -> dict[str, int]:
        """Runs completed (partial ones included), runs that raised, provider turns made, runs
        withdrawn before they began (their caller gave up or their token tripped while they
        waited), and runs waiting their turn."""
        return {**self._statistics, "queued": self._queued}

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the run in progress, if any (queued runs are not affected)."""
        if self._current is not None:
            self._current.token.cancel(reason)

    def stream(
        self, input: str | Message | Sequence[Message] | None = None, **options: Any
    ) -> AgentRun:
        """Start a run and stream its chunks (see :class:`AgentRun`). ``options`` are
        :class:`RunOptions` fields overriding the agent's for this run."""
        run_options = RunOptions(**options)
        send, receive = trio.open_memory_channel[Any](float("inf"))
        return AgentRun(self, _Request(self, _input_messages(input), run_options, send), receive)

    async def generate(
        self, input: str | Message | Sequence[Message] | None = None, **options: Any
    ) -> AgentResult:
        """Run to the end and return the result: :meth:`stream`, drained (the same run,
        without producing chunks nobody reads)."""
        request = _Request(self, _input_messages(input), RunOptions(**options), None)
        await request.submit(self.ref)
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

    # -- the run -------------------------------------------------------------------------------

    def _option(self, options: RunOptions, name: str) -> Any:
        value = getattr(options, name)
        return getattr(self.defaults, name) if value is None else value

    async def _run(self, request: _Request, number: int) -> AgentResult:
        options = request.options
        limit: int = self._option(options, "limit")
        timeout: float | None = self._option(options, "timeout")
        budget: TokenBudget | None = self._option(options, "budget")
        meter = BudgetMeter(budget) if budget is not None else None
        run = _Run(self, request, meter, number)
        token = request.watch if request.watch is not None else request.token
        if request.input:
            await run.add(*request.input)
        if self._listeners:
            self._emit(AgentEvent("start", number))
        if token.cancelled or (meter is not None and meter.exhausted):
            stop = StopReason.CANCELLED if token.cancelled else StopReason.BUDGET
            self._emit(AgentEvent("abort", number, reason=token.reason or "budget", stop=stop))
            return run.result(stop)
        with trio.CancelScope() as scope, token.bind(scope):
            if timeout is not None:
                scope.deadline = trio.current_time() + timeout
            run.scope = scope
            try:
                with observe_retries(run.retried):
                    stop = await run.turns(limit)
            except BaseException:
                # A genuine failure, a cut (committed once: a second commit finds nothing), or
                # the agent stopped from outside: the history is left well formed either way.
                await run.commit_partial()
                raise
        if scope.cancelled_caught:
            if run.budget_tripped:
                stop = StopReason.BUDGET
            elif not token.cancelled and trio.current_time() >= scope.deadline:
                stop = StopReason.TIMEOUT
            else:
                stop = StopReason.CANCELLED
            await run.commit_partial()
            reason = "budget" if stop is StopReason.BUDGET else token.reason or stop.value
            self._emit(AgentEvent("abort", number, turn=run.turns_made, reason=reason, stop=stop))
        elif stop is StopReason.BUDGET:  # spent by a turn's reported usage, between turns
            self._emit(AgentEvent("abort", number, turn=run.turns_made, reason="budget", stop=stop))
        return run.result(stop)
