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
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import trio

from protocols.accounting import Pricing, TeamBudget, TokenBudget
from protocols.authority import Authority
from protocols.context import Instructions, Scope
from protocols.errors import (
    ConfigError,
)
from protocols.history import check_history
from protocols.messages import (
    AgentResult,
    Message,
)
from protocols.settings import ModelSettings, SettingsLike
from protocols.workspace import Workspace, WorkspaceManager

from . import _tracing
from ._agent_run import AgentRun
from ._core._abort import Abort
from ._core._actor import Actor, ActorRef, ActorStopped
from ._core._supervisor import Restart
from ._questions import Answerer
from ._request import (
    AgentBusy,
    AgentStatus,
    BusyPolicy,
    CycleError,
    _client_history,
    _described,
    _history,
    _input_messages,
    _Request,
    _State,
)
from ._run_loop import (
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
)
from ._run_options import _NO_OPTIONS, Pace, RunOptions, _check_guardrails
from ._run_steps import execute
from .conversation import Conversation, _LocalConversation
from .tools import Approver, CallableTool, ToolRegistry

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer, TracerProvider

    from ._runtime import Runtime
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
            await execute(agent, request)
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

    #: Whether :meth:`start` gives the agent an actor (and a conversation with one): see
    #: :class:`_RunAgent`.
    _actor: ClassVar[bool] = True

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
        defaults: RunOptions = _NO_OPTIONS,
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
        # The name of an agent without an actor (see _RunAgent).
        self._label = "(not started)"
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
        if conversation is None:
            conversation = await Conversation.start(runtime) if cls._actor else _LocalConversation()
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

            if not cls._actor:
                self._label = name or "agent"
                return self

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
        if self._ref is not None:
            return self._ref.name
        return self._label

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
        if self._ref is None and self._connection is None:
            # A run's agent (no actor, a conversation in the calling task): nothing to wait
            # for, so no shield to pay for.
            if not self._owns_conversation:
                return
            if isinstance(self.conversation, _LocalConversation):
                self.conversation.stop_now()
                return
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
        run_options = RunOptions(**options) if options else _NO_OPTIONS
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
        run_options = RunOptions(**options) if options else _NO_OPTIONS
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
        if options is _NO_OPTIONS:  # (a run given no options: every one is the agent's)
            return getattr(self.defaults, name)
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
            await execute(self, request)
        finally:
            direct.discard(request)
            self._maybe_idle()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result


class _RunAgent(Agent):
    """An agent made for one run in its caller's task -- a durable job's, which a worker runs
    with :meth:`Agent._execute_here` and then closes. :meth:`start` configures it exactly as it
    configures any agent, but starts no actor for it and gives it a conversation that has none
    either (its changes are applied in the calling task, one at a time): the run's steps, scope
    and guarantees are an agent's, without an actor started and stopped around each run. It
    takes no run through :meth:`generate` or :meth:`stream` (it has no actor to queue them on);
    its name is the ``name`` it was started with (``"agent"`` by default)."""

    _actor = False
