"""The provider interface: what every model provider offers (a stream of deltas, or the whole
result at once), the stream object, and how a task hears the retries of the streams it runs.
Nothing here is HTTP: the HTTP engine (``_http``) is one implementation."""

from __future__ import annotations

import contextlib
import contextvars
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import attrs
import trio

from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
)

__all__ = [
    "ProviderInterface",
    "ProviderStream",
    "RetryEvent",
    "StreamingProvider",
    "TextStream",
    "observe_retries",
]


class ProviderInterface(Protocol):
    """What every model provider offers: a stream of deltas, or the whole result at once."""

    name: str

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream: ...

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderResult: ...


class StreamingProvider(ABC):
    """Base for providers: implement :meth:`stream`, and :meth:`generate` is that stream,
    drained (the guarantee that both assemble the same result)."""

    name: str = "provider"

    @abstractmethod
    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        """Stream one completion (see :class:`ProviderStream`)."""

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderResult:
        """The whole result at once: :meth:`stream`, drained."""
        async with self.stream(messages, tools=tools, options=options) as stream:
            async for _ in stream:
                pass
        return stream.result


@attrs.frozen
class RetryEvent:
    """Reported to ``on_retry`` before each retry: which attempt failed, why, and the wait."""

    attempt: int
    delay: float
    code: str
    status: int | None


_RETRY_OBSERVERS: contextvars.ContextVar[tuple[Callable[[RetryEvent], object], ...]] = (
    contextvars.ContextVar("trio_agents_retry_observers", default=())
)


@contextlib.contextmanager
def observe_retries(listener: Callable[[RetryEvent], object]) -> Iterator[None]:
    """Within the block, every retry of a provider stream iterated by this task (or by tasks
    it starts inside the block) is also reported to ``listener`` -- whichever provider it is,
    and on top of the provider's own ``on_retry``. A listener that raises is logged and
    changes nothing. Blocks nest: every enclosing listener hears each retry."""
    token = _RETRY_OBSERVERS.set((*_RETRY_OBSERVERS.get(), listener))
    try:
        yield
    finally:
        _RETRY_OBSERVERS.reset(token)


class ProviderStream(ABC):
    """One streamed provider call: ``async with provider.stream(...) as stream: async for delta
    in stream: ...``, then ``stream.result``.

    Guarantees (of every implementation): the call starts when iteration starts; deltas come in
    order; after the iteration ends, :attr:`result` is the assembled
    :class:`~protocols.messages.ProviderResult`; :attr:`partial` is always what was produced so
    far (the result to commit when the caller's scope cancels the stream: the
    ``trio.Cancelled`` propagates as trio requires). Leaving the block -- early, by an error or by
    a cancel -- releases what the call holds (for HTTP, the response).
    """

    async def __aenter__(self) -> ProviderStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with trio.CancelScope(shield=True):
            await self.aclose()

    def __aiter__(self) -> ProviderStream:
        return self

    @abstractmethod
    async def __anext__(self) -> Delta:
        """The next delta; ``StopAsyncIteration`` once the call has completed."""

    @property
    @abstractmethod
    def result(self) -> ProviderResult:
        """The assembled result, once the iteration has ended (``RuntimeError`` before)."""

    @property
    @abstractmethod
    def partial(self) -> ProviderResult:
        """What the call produced so far: the text of the deltas yielded to the caller, and
        the tool calls that were complete."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the call holds (idempotent)."""

    def take_ready(self) -> list[Delta]:
        """The deltas that are already decoded and can be had without waiting, in order, taken
        as if iterated (they count as yielded to the caller); ``[]`` when the next one needs a
        wait. For callers that pass deltas on in batches, such as the relay."""
        return []


class TextStream(ProviderStream):
    """A :class:`ProviderStream` that keeps what it yielded: subclasses append each delta's text
    to ``_content`` or ``_thinking`` as they yield it and set ``_result`` at the end; then
    :attr:`partial` is the yielded text (finish ``cancelled``) and :attr:`result` the result."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._thinking: list[str] = []
        self._result: ProviderResult | None = None

    @property
    def result(self) -> ProviderResult:
        if self._result is None:
            raise RuntimeError("the stream has not finished: iterate it to the end first")
        return self._result

    @property
    def partial(self) -> ProviderResult:
        if self._result is not None:
            return self._result
        return ProviderResult(
            content="".join(self._content),
            thinking="".join(self._thinking),
            finish=FinishReason.CANCELLED,
        )
