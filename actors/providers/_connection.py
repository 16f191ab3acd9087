"""``ProviderConnection``: a provider supervised as an actor, with a concurrency limit and a
circuit breaker, that is itself a provider."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from protocols.breaker import BreakerState, CircuitBreaker
from protocols.errors import ConfigError, ProviderError
from protocols.messages import Delta, Message, ProviderOptions, ProviderResult, ToolDefinition

from .._core._actor import Actor, ActorExit, ActorRef, ActorState, ActorStopped
from .._core._supervisor import Restart
from ._http import HTTPProvider
from ._interface import ProviderStream, StreamingProvider

if TYPE_CHECKING:
    from .._runtime import Runtime

__all__ = ["ConnectionStatistics", "ProviderConnection"]

#: Failure codes that say something about the provider's health (and count for the breaker).
HEALTH_FAILURES = frozenset(
    {"transport", "timeout", "server_error", "overloaded", "truncated", "pool_timeout"}
)

_GET = "get"
_RECYCLE = "recycle"


class _Recycled(Exception):
    """Raised by the holder to be restarted with a fresh client (not an error of its own)."""


class _ProviderActor(Actor[str, Any]):
    """The supervised part: owns the provider for one incarnation (a restart renews it)."""

    mailbox_size = 64

    def __init__(self, source: StreamingProvider | Callable[[], StreamingProvider]) -> None:
        self._source = source
        self.provider: StreamingProvider | None = None

    async def on_start(self) -> None:
        source = self._source
        provider = source if isinstance(source, StreamingProvider) else source()
        if isinstance(provider, HTTPProvider):
            provider.renew_client()  # a fresh pool for every incarnation
        self.provider = provider

    async def handle(self, message: str) -> Any:
        if message == _RECYCLE:
            raise _Recycled("recycling the provider's HTTP client")
        return self.provider

    async def on_stop(self, exit: ActorExit) -> None:
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()


@attrs.frozen
class ConnectionStatistics:
    """A snapshot of a connection."""

    #: Calls holding a slot of the concurrency limit right now.
    in_flight: int
    #: Calls waiting for a slot.
    waiting: int
    limit: int
    breaker: BreakerState
    #: Consecutive health failures counted by the breaker.
    failures: int
    #: How many times the provider (and its client) was renewed.
    restarts: int


class _ConnectionStream(ProviderStream):
    def __init__(
        self,
        connection: ProviderConnection,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None,
        options: ProviderOptions | None,
    ) -> None:
        self._connection = connection
        self._args = (messages, tools, options)
        self._inner: ProviderStream | None = None
        self._started = False
        self._holding = False
        self._settled = False  # the breaker has heard how this call went

    async def __anext__(self) -> Delta:
        connection = self._connection
        if not self._started:
            self._started = True
            await self._begin()
        assert self._inner is not None
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            self._settle(None)
            raise
        except ProviderError as error:
            self._settle(error)
            if error.code == "pool_timeout":
                connection.recycle_nowait()
            raise

    async def _begin(self) -> None:
        connection = self._connection
        now = trio.current_time()
        if not connection.breaker.allow(now):
            self._settled = True
            wait = connection.breaker.retry_in(now)
            raise ProviderError(
                f"{connection.name}: circuit open after repeated failures; "
                f"next attempt allowed in {wait:.1f} s",
                code="circuit_open",
                retryable=True,
                retry_after=wait,
            )
        await connection.limiter.acquire_on_behalf_of(self)
        self._holding = True
        provider = await connection.current_provider()
        messages, tools, options = self._args
        self._inner = provider.stream(messages, tools=tools, options=options)

    def _settle(self, error: ProviderError | None) -> None:
        if self._settled:
            return
        self._settled = True
        breaker = self._connection.breaker
        if error is None:
            breaker.success()
        elif error.code in HEALTH_FAILURES:
            breaker.failure(trio.current_time())
        else:
            breaker.abandon()

    @property
    def result(self) -> ProviderResult:
        if self._inner is None:
            raise RuntimeError("the stream has not finished: iterate it to the end first")
        return self._inner.result

    @property
    def partial(self) -> ProviderResult:
        if self._inner is None:
            return ProviderResult()
        return self._inner.partial

    async def aclose(self) -> None:
        inner, self._inner = self._inner, None
        try:
            if inner is not None:
                await inner.aclose()
                self._inner = inner  # keep result/partial readable
        finally:
            if not self._settled:
                self._settled = True
                self._connection.breaker.abandon()  # cancelled or abandoned: no news
            if self._holding:
                self._holding = False
                self._connection.limiter.release_on_behalf_of(self)


class ProviderConnection(StreamingProvider):
    """A provider run as a supervised actor, and itself a provider.

    Guarantees:

    * At most ``limit`` calls are in flight; more wait for a slot (bounded by the caller's own
      scope), which each call holds until its stream is closed.
    * A :class:`~protocols.breaker.CircuitBreaker` counts consecutive health failures
      (transport errors, timeouts, server errors, truncations); once open, calls fail at once with
      a retryable ``ProviderError(code="circuit_open")`` until a probe after the cool-down
      succeeds. Other errors (a bad request, say) do not count.
    * The provider lives in a supervised actor: :meth:`recycle` -- also triggered by a pool
      timeout -- restarts it with a fresh HTTP client, without changing this object.
    * :meth:`aclose` stops the actor, which closes the provider's client.

    Create one with :meth:`start` (or ``runtime.connect(...)``).
    """

    def __init__(
        self,
        ref: ActorRef[str, Any],
        *,
        name: str,
        limit: int,
        breaker: CircuitBreaker,
    ) -> None:
        self.ref = ref
        self.name = name
        self.limiter = trio.CapacityLimiter(limit)
        self.breaker = breaker

    @classmethod
    async def start(
        cls,
        runtime: Runtime,
        provider: StreamingProvider | Callable[[], StreamingProvider],
        *,
        name: str | None = None,
        limit: int = 16,
        breaker: CircuitBreaker | None = None,
    ) -> ProviderConnection:
        """Spawn the connection's actor under ``runtime`` and return the connection.

        ``provider`` is a provider (its HTTP client is renewed on each restart) or a factory
        building a fresh one per restart.
        """
        if limit < 1:
            raise ConfigError(f"a connection's limit must be >= 1, not {limit!r}")
        label = name or f"{getattr(provider, 'name', 'provider')}-connection"

        def holder() -> _ProviderActor:
            return _ProviderActor(provider)

        holder.__name__ = label  # unnamed connections are called "<label>-<n>" in the tree
        ref: ActorRef[str, Any] = await runtime.spawn(
            holder, name=name, restart=Restart.PERMANENT, shutdown=5.0
        )
        return cls(ref, name=label, limit=limit, breaker=breaker or CircuitBreaker())

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        """Stream through the connection (see :class:`ProviderStream`)."""
        return _ConnectionStream(self, messages, tools, options)

    async def current_provider(self) -> StreamingProvider:
        """The provider of the actor's current incarnation, waiting through a restart.
        Raises ``ActorStopped`` once the connection is stopped for good."""
        while True:
            try:
                provider: StreamingProvider = await self.ref.call(_GET)
            except ActorStopped:
                # Queued behind a recycle or a crash: the next incarnation will answer.
                if self.ref.state in (ActorState.STOPPING, ActorState.STOPPED):
                    raise
                continue
            return provider

    async def recycle(self) -> None:
        """Restart the provider's actor with a fresh HTTP client."""
        await self.ref.send(_RECYCLE)

    def recycle_nowait(self) -> None:
        """:meth:`recycle` if that needs no waiting (otherwise a recycle is already queued)."""
        # Busy: a recycle is on its way; stopped: nothing to recycle.
        with contextlib.suppress(trio.WouldBlock, ActorStopped):
            self.ref.send_nowait(_RECYCLE)

    def statistics(self) -> ConnectionStatistics:
        """A snapshot (see :class:`ConnectionStatistics`)."""
        limiter = self.limiter.statistics()
        return ConnectionStatistics(
            in_flight=limiter.borrowed_tokens,
            waiting=limiter.tasks_waiting,
            limit=int(limiter.total_tokens),
            breaker=self.breaker.state,
            failures=self.breaker.failures,
            restarts=self.ref.statistics().restarts,
        )

    async def aclose(self) -> None:
        """Stop the connection's actor (closing the provider's client)."""
        await self.ref.stop()
