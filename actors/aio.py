"""The asyncio door: trio-agents from an asyncio program -- FastAPI, a Jupyter notebook,
anything on asyncio's loop.

::

    import actors.aio

    async with actors.aio.Runtime() as runtime:
        simulator = await runtime.simulator()        # or a provider string: "openai:gpt-4.1-mini"
        agent = await runtime.agent(simulator.openai(), system="Be terse.")
        result = await agent.generate("What is 19 + 23?")
        async with agent.stream("Count to 5.") as run:
            async for chunk in run:
                print(chunk.text, end="")

It is a door into the same runtime, not a second one: :class:`Runtime` runs
:func:`~actors.open_runtime` in a thread of its own (why a thread and not trio's guest mode:
docs/from-asyncio.md), and every call here runs there as a trio task while the asyncio task
awaits it. So everything trio promises holds, and:

* **Cancelling** the asyncio task that awaits a call (``task.cancel()``, a timeout, a client
  that disconnected) cuts the call: a run is aborted and its partial committed, as when a trio
  caller is cancelled. The task still sees ``CancelledError`` -- once that is done.
* **Errors** raised in the runtime reach the awaiting task as themselves (a group with one
  cause, as that cause): ``except ProviderError`` works as in trio.
* **Leaving** ``async with agent.stream(...)`` early cuts the run, as in trio; so does
  breaking out of ``async for chunk in agent.stream(...)`` (asyncio closes the abandoned
  generator soon after; the ``async with`` form waits until the partial is committed).
* **No thread or task is left behind**: leaving the ``async with`` block -- normally, on an
  error or a cancel -- stops the runtime (calls still running are cut, the queues and
  simulators it holds are left, last opened first, then every actor stops) and joins its
  thread. Several runtimes may run at once, on one loop or several.

asyncio is imported by this module only: the library itself never uses it. What runs in the
runtime's thread, on trio: the agent's tools, its event listeners (``on=``) and its error
handler -- an ``async def`` tool is a trio function.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import outcome

from . import _door
from ._door import RuntimeClosed

if TYPE_CHECKING:
    import random
    from types import TracebackType

    from protocols.jobs import AgentJob, JobRecord, Priority
    from protocols.messages import AgentResult, Message

    from . import agent as _agent
    from ._core._supervisor import Backoff
    from ._runtime import Runtime as TrioRuntime
    from .durable import AgentRegistry, RunStore
    from .durable import JobQueue as TrioJobQueue
    from .providers import ProviderConnection, ProviderInterface, StreamingProvider
    from .testing import Simulator

__all__ = ["Agent", "JobQueue", "Run", "Runtime", "RuntimeClosed"]

T = TypeVar("T")


class _Inbox:
    """Items put from the runtime's thread, taken on the loop. Puts are batched: one wake-up
    of the loop carries every item put until it runs."""

    __slots__ = ("_items", "_loop", "_scheduled", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[Any] = collections.deque()
        self._scheduled = False
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Any) -> None:
        """From the runtime's thread (or the loop's)."""
        self._items.append(item)
        if not self._scheduled:
            self._scheduled = True
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._scheduled = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> Any:
        """The next item, waiting for it."""
        while not self._items:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    async def get_shielded(self) -> Any:
        """:meth:`get`, however often the task is cancelled meanwhile (re-raised after)."""
        cancelled: asyncio.CancelledError | None = None
        while True:
            try:
                item = await self.get()
            except asyncio.CancelledError as error:
                cancelled = error
                continue
            if cancelled is not None:
                raise cancelled
            return item


class Runtime:
    """An actor runtime (:func:`~actors.open_runtime`) in a thread of its own, used from
    asyncio: ``async with actors.aio.Runtime() as runtime: ...``.

    The arguments are :func:`~actors.open_runtime`'s (the root supervisor's). For a session
    spanning several cells of a notebook, ``runtime = await actors.aio.Runtime().start()`` and,
    when done, ``await runtime.aclose()`` -- until then its thread runs.
    """

    def __init__(
        self,
        *,
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        options = {"max_restarts": max_restarts, "period": period, "backoff": backoff, "rng": rng}
        self._portal = _door.Portal(options, name="trio-agents runtime (asyncio)")
        self._exit: _Inbox | None = None
        self._closed = False

    def __repr__(self) -> str:
        state = "running" if self._portal.running else "not running"
        return f"<actors.aio.Runtime {state}>"

    # -- its life ------------------------------------------------------------------------------

    async def start(self) -> Runtime:
        """Start the runtime's thread and return once the runtime is up (or raise why it could
        not start). Cancelled while starting, it stops again before ``CancelledError`` is
        raised."""
        loop = asyncio.get_running_loop()
        ready = _Inbox(loop)
        self._exit = _Inbox(loop)
        self._portal.start(ready.put, self._exit.put)
        try:
            started: outcome.Outcome[Any] = await ready.get()
        except asyncio.CancelledError:
            if isinstance(await ready.get_shielded(), outcome.Value):
                await self.aclose()
            raise
        if isinstance(started, outcome.Error):
            await self._join()
        started.unwrap()
        return self

    async def aclose(self) -> None:
        """Stop the runtime: cut the calls still running (runs commit their partials), leave
        what it holds (job queues, simulators) last opened first, stop every actor, and join
        its thread. Raises what the runtime failed with, if it did. Idempotent. Cancelled
        meanwhile, it still waits for the thread -- which is never left behind -- and then
        raises ``CancelledError``."""
        if self._exit is None or self._closed:
            return
        self._portal.stop()
        await self._join()

    async def _join(self) -> None:
        assert self._exit is not None
        ended: outcome.Outcome[Any] = await self._exit.get_shielded()
        self._closed = True
        thread = self._portal.thread
        if thread is not None:
            thread.join()  # it has delivered its end: only returning is left to it
        ended.unwrap()

    async def __aenter__(self) -> Runtime:
        return await self.start()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None:
            await self.aclose()
            return
        try:
            await self.aclose()
        except Exception as failure:
            error.add_note(f"(and the runtime failed while stopping: {failure!r})")

    # -- using it ------------------------------------------------------------------------------

    @property
    def trio(self) -> TrioRuntime:
        """The trio :class:`~actors.Runtime` itself, for functions passed to :meth:`call`."""
        runtime = self._portal.runtime
        if runtime is None or not self._portal.running:
            raise RuntimeClosed("the runtime is not running")
        return runtime

    async def call(self, async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``async_fn(*args)`` -- a trio function -- as a task in the runtime's thread and
        return what it returns (or raise what it raises). Cancelling the awaiting task cuts
        it."""
        return await _wait(self._portal, lambda: async_fn(*args))

    async def agent(self, provider: ProviderInterface | str, **options: Any) -> Agent:
        """Start an agent on ``provider`` -- a provider, or a provider string such as
        ``"openai:gpt-4.1-mini"`` -- and return it. ``options`` are those of
        :meth:`actors.Runtime.agent` (``system=``, ``tools=``, ``limit=``, ...)."""
        runtime = self.trio
        trio_agent = await _wait(self._portal, lambda: runtime.agent(provider, **options))
        return Agent(self._portal, trio_agent)

    async def connect(
        self, provider: StreamingProvider | Callable[[], StreamingProvider] | str, **options: Any
    ) -> ProviderConnection:
        """Run ``provider`` as a supervised connection (see :meth:`actors.Runtime.connect`),
        to give to :meth:`agent`."""
        runtime = self.trio
        return await _wait(self._portal, lambda: runtime.connect(provider, **options))

    async def simulator(self, **options: Any) -> Simulator:
        """Start an offline model server (:class:`~actors.testing.Simulator`, with
        ``options``) that runs until the runtime stops; point providers at it with its
        ``openai()``, ``anthropic()``, ... methods -- the providers they make are closed with
        it."""
        simulator: Simulator = await _Held(
            self._portal, lambda: _door.DoorSimulator(**options)
        ).enter()
        return simulator

    def open_job_queue(
        self, store: RunStore | str, registry: AgentRegistry, **options: Any
    ) -> JobQueue:
        """A worker of the durable job queue on ``store`` -- a run store, or a store URL
        (``"sqlite:///jobs.db"``) opened for it and closed after -- for an ``async with``
        block: ``async with runtime.open_job_queue(store, registry) as queue: ...``.
        ``options`` are :func:`~actors.durable.open_job_queue`'s."""
        runtime = self.trio
        return JobQueue(self._portal, lambda: _door.job_queue(runtime, store, registry, options))


class Agent:
    """An agent of a :class:`Runtime`, used from asyncio (made by :meth:`Runtime.agent`).
    Its runs are the trio agent's runs (see :class:`actors.Agent`)."""

    def __init__(self, portal: _door.Portal, agent: _agent.Agent) -> None:
        self._portal = portal
        self._agent = agent

    def __repr__(self) -> str:
        return f"<actors.aio.Agent {self._agent.name}>"

    @property
    def trio(self) -> _agent.Agent:
        """The trio :class:`~actors.Agent` itself, for functions passed to
        :meth:`Runtime.call`."""
        return self._agent

    @property
    def name(self) -> str:
        """Its actor's name."""
        return self._agent.name

    async def generate(
        self, input: str | Message | Sequence[Message] | None = None, **options: Any
    ) -> AgentResult:
        """Run to the end and return the result (see :meth:`actors.Agent.generate`; the
        ``options`` are its own). Cancelling the awaiting task cuts the run -- its partial is
        committed -- before ``CancelledError`` is raised."""
        agent = self._agent
        return await _wait(self._portal, lambda: agent.generate(input, **options))

    def stream(self, input: str | Message | Sequence[Message] | None = None, **options: Any) -> Run:
        """A run to iterate: ``async with agent.stream("...") as run: async for chunk in
        run:`` (see :class:`Run`). It starts when the iteration does."""
        return Run(self._portal, self._agent, input, options)

    async def messages(self) -> tuple[Message, ...]:
        """The agent's conversation, every message in order."""
        return await _wait(self._portal, self._agent.conversation.messages)

    async def statistics(self) -> dict[str, int]:
        """Its statistics (see :meth:`actors.Agent.statistics`)."""
        agent = self._agent

        async def read() -> dict[str, int]:
            return agent.statistics()

        return await _wait(self._portal, read)

    def abort(self, reason: str = "aborted") -> None:
        """Cut the run in progress (it commits its partial; see :meth:`actors.Agent.abort`).
        Returns at once."""
        agent = self._agent
        self._portal.soon(lambda: agent.abort(reason))

    async def aclose(self, *, cancel: bool = False) -> None:
        """Close the agent (see :meth:`actors.Agent.aclose`). Cancelled meanwhile, it still
        closes it -- cutting the run in progress -- before ``CancelledError`` is raised."""
        agent = self._agent
        await _wait(self._portal, lambda: agent.aclose(cancel=cancel))

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class Run(_door.StreamedRun):
    """A streamed run, from asyncio: iterate it for its chunks (:class:`actors.Chunk`), then
    read :attr:`result`::

        async with agent.stream("Write a story.") as run:
            async for chunk in run:
                print(chunk.text, end="")
        print(run.result.stop)

    The run starts when the iteration does, and is iterated once. Leaving the block early --
    ``break``, an exception, the task cancelled -- cuts the run and waits until its partial is
    committed. Without the block, ``async for chunk in agent.stream(...)`` works too: a cancel
    cuts the run the same way; a ``break`` leaves the iterator to asyncio, which closes it --
    cutting the run -- soon after.
    """

    def __init__(
        self,
        portal: _door.Portal,
        agent: _agent.Agent,
        input: str | Message | Sequence[Message] | None,
        options: dict[str, Any],
    ) -> None:
        super().__init__(portal, agent, input, options)
        self._inbox: _Inbox | None = None

    def __aiter__(self) -> AsyncIterator[_agent.Chunk]:
        inbox = _Inbox(asyncio.get_running_loop())
        self._start(inbox.put)
        self._inbox = inbox
        return self._chunks(inbox)

    async def _chunks(self, inbox: _Inbox) -> AsyncGenerator[_agent.Chunk, None]:
        # Holds this Run, never the other way round, so that an abandoned iteration is
        # collected -- and closed by asyncio -- at once.
        try:
            while True:
                item = await inbox.get()
                if isinstance(item, _door.End):
                    self._finish(item.outcome)
                    return
                self._seen(item)
                yield item
        finally:
            if not self._ended:
                await self._cut()

    async def _cut(self) -> None:
        call, inbox = self._call, self._inbox
        self._ended = True
        if call is None or inbox is None:
            return
        call.cancel()
        while not isinstance(await inbox.get_shielded(), _door.End):  # until it has committed
            pass

    async def aclose(self) -> None:
        """Leave the run (what leaving the ``async with`` block does): not started, it never
        runs; running, it is cut and this waits until its partial is committed."""
        if not self._ended:
            await self._cut()

    async def __aenter__(self) -> Run:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class JobQueue:
    """A worker of the durable job queue, from asyncio (made by
    :meth:`Runtime.open_job_queue`); its methods are those of
    :class:`actors.durable.JobQueue`, awaitable."""

    def __init__(self, portal: _door.Portal, make: Callable[[], Any]) -> None:
        self._portal = portal
        self._held = _Held(portal, make)
        self._queue: TrioJobQueue | None = None

    async def __aenter__(self) -> JobQueue:
        self._queue = await self._held.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._queue = None
        await self._held.leave()

    @property
    def trio(self) -> TrioJobQueue:
        """The trio :class:`~actors.durable.JobQueue` itself, inside the ``async with``
        block."""
        if self._queue is None:
            raise RuntimeError("the job queue is used inside its 'async with' block")
        return self._queue

    async def enqueue(
        self, job: AgentJob, *, key: str | None = None, priority: Priority | str = "normal"
    ) -> str:
        """Admit ``job`` and return its id once it is durable (see
        :meth:`actors.durable.JobQueue.enqueue`)."""
        q = self.trio
        return await _wait(self._portal, lambda: q.enqueue(job, key=key, priority=priority))

    async def record(self, id: str) -> JobRecord | None:
        """The job's record as stored now."""
        q = self.trio
        return await _wait(self._portal, lambda: q.record(id))

    async def result(self, id: str) -> AgentResult:
        """Wait until the job ends and return its result (see
        :meth:`actors.durable.JobQueue.result`). A cancel stops waiting; the job goes on."""
        q = self.trio
        return await _wait(self._portal, lambda: q.result(id))

    async def run(
        self, jobs: Iterable[AgentJob], *, priority: Priority | str = "normal"
    ) -> list[AgentResult]:
        """Run ``jobs`` as one batch and return their results (see
        :meth:`actors.durable.JobQueue.run`)."""
        q = self.trio
        batch = list(jobs)
        return await _wait(self._portal, lambda: q.run(batch, priority=priority))

    async def cancel(self, id: str) -> JobRecord:
        """Cancel the job (see :meth:`actors.durable.JobQueue.cancel`)."""
        q = self.trio
        return await _wait(self._portal, lambda: q.cancel(id))

    async def answer(self, id: str, call_id: str, allow: bool, reason: str = "") -> JobRecord:
        """Answer an approval the job waits for (see :meth:`actors.durable.JobQueue.answer`)."""
        q = self.trio
        return await _wait(self._portal, lambda: q.answer(id, call_id, allow, reason))

    async def purge(self, id: str) -> None:
        """Remove an ended job (see :meth:`actors.durable.JobQueue.purge`)."""
        q = self.trio
        await _wait(self._portal, lambda: q.purge(id))

    async def wait_idle(self) -> None:
        """Wait until no job runs in this worker."""
        await _wait(self._portal, self.trio.wait_idle)

    async def statistics(self) -> dict[str, int]:
        """What this worker did (see :meth:`actors.durable.JobQueue.statistics`)."""
        q = self.trio

        async def read() -> dict[str, int]:
            return q.statistics()

        return await _wait(self._portal, read)


# -- waiting -----------------------------------------------------------------------------------


async def _wait(portal: _door.Portal, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn()`` in the runtime and await its outcome; when the awaiting task is cancelled,
    cut it, wait until it has ended (a run's partial committed), and re-raise."""
    inbox = _Inbox(asyncio.get_running_loop())
    call = portal.submit(fn, inbox.put)
    try:
        result: outcome.Outcome[T] = await inbox.get()
    except asyncio.CancelledError:
        call.cancel()
        await inbox.get_shielded()
        raise
    return result.unwrap()


class _Held:
    """A context manager held in the runtime (a queue, a simulator), entered and left from
    the loop."""

    def __init__(self, portal: _door.Portal, make: Callable[[], Any]) -> None:
        self._portal = portal
        self._make = make
        self._hold: _door.Hold | None = None
        self._exited: _Inbox | None = None

    async def enter(self) -> Any:
        loop = asyncio.get_running_loop()
        entered = _Inbox(loop)
        self._exited = exited = _Inbox(loop)
        self._hold = hold = self._portal.hold(self._make, entered.put, exited.put)
        try:
            result: outcome.Outcome[Any] = await entered.get()
        except asyncio.CancelledError:
            if isinstance(await entered.get_shielded(), outcome.Value):
                hold.release()
                await exited.get_shielded()
            raise
        return result.unwrap()

    async def leave(self) -> None:
        hold, self._hold = self._hold, None
        if hold is None or self._exited is None:
            return
        hold.release()
        left: outcome.Outcome[Any] = await self._exited.get_shielded()
        left.unwrap()
