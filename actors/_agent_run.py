"""A run being streamed (:class:`AgentRun`): its chunks, its result, its events, and leaving it
early."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import trio

from protocols.errors import (
    ValidationError,
)
from protocols.live import RunEvent
from protocols.messages import (
    AgentResult,
)

from ._live import RunEvents
from ._request import BusyPolicy, _Request
from ._run_loop import (
    Chunk,
)

if TYPE_CHECKING:
    from .agent import Agent


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
