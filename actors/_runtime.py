"""The public runtime: the core one (:mod:`actors._core._runtime`: spawn, start, lookup,
statistics, the root) with what the features bring -- agents and provider connections started
from it (:meth:`Runtime.agent`, :meth:`Runtime.connect`) and the runs' event logs
(:attr:`Runtime.live`, :meth:`Runtime.watch`). ``actors.Runtime`` and ``actors.open_runtime``
are these."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

from protocols.breaker import CircuitBreaker
from protocols.live import DEFAULT_CAPACITY

from ._core._runtime import Runtime as CoreRuntime
from ._core._runtime import run_root
from ._live import DEFAULT_KEEP, LiveRuns, RunEvents
from .agent import Agent
from .providers import ProviderConnection, ProviderInterface, StreamingProvider
from .providers._spec import provider_from_string

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from protocols.accounting import Pricing, TeamBudget, TokenBudget
    from protocols.authority import Authority
    from protocols.context import Instructions, Scope
    from protocols.settings import SettingsLike
    from protocols.workspace import Workspace, WorkspaceManager

    from ._core._abort import Abort
    from ._core._actor import _Cell
    from ._core._supervisor import Backoff, Supervisor
    from ._questions import Answerer
    from ._run_loop import AgentEvent
    from ._run_options import Pace
    from .agent import ErrorHandler
    from .conversation import Conversation
    from .guardrails import Guardrail
    from .tools import Approver, CallableTool, ToolRegistry

__all__ = ["Runtime", "open_runtime"]


class Runtime(CoreRuntime):
    """A running actor tree, as yielded by :func:`open_runtime`. Its root is a one-for-one
    :class:`~actors.Supervisor`; everything spawned here is a child of it."""

    __slots__ = ("live",)

    def __init__(self, root: Supervisor, cell: _Cell, live: LiveRuns | None = None) -> None:
        super().__init__(root, cell)
        #: The runs whose event logs can be followed here (:meth:`watch`).
        self.live = live if live is not None else LiveRuns()

    def watch(self, run_id: str, *, after: int = 0) -> RunEvents:
        """Follow run ``run_id`` of an agent of this runtime: an async iterator of its
        :class:`~protocols.live.RunEvent` objects after seq ``after`` (0: from its first) -- those
        already published, then the others as they come -- ending after the terminal event.
        A follower that fell behind what the log keeps reads a ``gap`` event first. A run's log
        exists from the moment the run is asked for (``generate()`` called, a stream's first
        chunk awaited; a delegated run's from its parent's ``subagent_started`` event). Raises
        :class:`~protocols.errors.ValidationError` for a run this runtime does not know (not
        asked for here, or ended longer ago than its logs are kept:
        ``open_runtime(keep_events=)``). A durable job's events are its queue's to follow
        (``JobQueue.watch``)."""
        return self.live.watch(run_id, after=after)

    async def connect(
        self,
        provider: StreamingProvider | Callable[[], StreamingProvider] | str,
        *,
        name: str | None = None,
        limit: int = 16,
        breaker: CircuitBreaker | None = None,
    ) -> ProviderConnection:
        """Run ``provider`` as a supervised :class:`~actors.providers.ProviderConnection`
        (a concurrency limit, a circuit breaker, a fresh HTTP client on restart) and return it;
        it is itself a provider. A provider string (``"openai:gpt-4.1-mini"``) is built with
        :func:`~actors.providers.provider_from_string` first."""
        if isinstance(provider, str):
            provider = provider_from_string(provider)
        return await ProviderConnection.start(
            self, provider, name=name, limit=limit, breaker=breaker
        )

    async def agent(
        self,
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
        """Start an :class:`~actors.agent.Agent` on ``provider`` under this runtime: the same
        as :meth:`Agent.start <actors.agent.Agent.start>`, whose parameters these are."""
        return await Agent.start(
            self,
            provider,
            name=name,
            conversation=conversation,
            system=system,
            instructions=instructions,
            tools=tools,
            scope=scope,
            workspace=workspace,
            authority=authority,
            approve=approve,
            answer=answer,
            deps=deps,
            limit=limit,
            timeout=timeout,
            budget=budget,
            think=think,
            tool_choice=tool_choice,
            abort=abort,
            on_exhaust=on_exhaust,
            max_repeats=max_repeats,
            on_tool_error=on_tool_error,
            pace=pace,
            settings=settings,
            guardrails=guardrails,
            pricing=pricing,
            tool_concurrency=tool_concurrency,
            window=window,
            strict=strict,
            on=on,
            error=error,
            tracer_provider=tracer_provider,
        )


@asynccontextmanager
async def open_runtime(
    *,
    max_restarts: int = 3,
    period: float = 5.0,
    backoff: Backoff | None = None,
    rng: random.Random | None = None,
    event_capacity: int = DEFAULT_CAPACITY,
    keep_events: float = DEFAULT_KEEP,
) -> AsyncIterator[Runtime]:
    """Run an actor runtime for the duration of the ``async with`` block.

    Guarantees:

    * Leaving the block stops every actor, in reverse start order, each gracefully and then
      cancelled at its shutdown deadline -- also when the block is left by an exception or a
      cancellation (the stop is shielded from it).
    * If the root supervisor gives up (a child restarted too often), the block is cancelled and
      :class:`~actors.SupervisorGaveUp` is raised to the caller, chained to the child failure.
    * ``KeyboardInterrupt`` and a cancellation from outside pass through untouched.
    * No exception group comes out for one cause: an exception raised in the block comes out
      as itself (``except ValueError`` catches it), with its own traceback; a failure of the
      runtime as its own class. Only several unrelated failures at once form a group.
    * No task started by the runtime outlives the block, and nothing is global: two runtimes in
      one process are independent.

    The arguments configure the root supervisor (see :class:`~actors.Supervisor`), and the runs'
    event logs (:meth:`Runtime.watch`): ``event_capacity`` events kept per run (10,000 by
    default; a follower behind them reads a gap), ``keep_events`` seconds an ended run's log is
    kept (600 by default).
    """
    live = LiveRuns(capacity=event_capacity, keep=keep_events)  # (checks them before any start)

    def make(root: Supervisor, cell: _Cell) -> Runtime:
        return Runtime(root, cell, live)

    async with run_root(
        make, max_restarts=max_restarts, period=period, backoff=backoff, rng=rng
    ) as runtime:
        yield runtime
