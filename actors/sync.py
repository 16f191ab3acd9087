"""The blocking door: trio-agents from a script, a test or a REPL -- code with no event loop.

::

    import actors.sync

    with actors.sync.Runtime() as runtime:
        simulator = runtime.simulator()              # or a provider string: "openai:gpt-4.1-mini"
        agent = runtime.agent(simulator.openai(), system="Be terse.")
        print(agent.generate("What is 19 + 23?").content)
        for chunk in agent.stream("Count to 5."):
            print(chunk.text, end="")

It is a door into the same runtime, not a second one: :class:`Runtime` runs
:func:`~actors.open_runtime` in a thread of its own, and every call here runs there as a trio
task, while the calling thread waits. So everything trio promises holds -- one cancel scope per
run, a cut run commits its partial -- and:

* **Ctrl-C** (``KeyboardInterrupt`` in the main thread, while it waits here) cuts the call in
  flight -- a run is aborted and its partial committed, as when a trio caller is cancelled --
  waits until that is done, and raises ``KeyboardInterrupt``. (A second Ctrl-C stops waiting.)
* **Breaking out** of ``for chunk in agent.stream(...)`` cuts the run, as leaving ``async with
  agent.stream()`` does (the generator is closed at once, in CPython; ``with agent.stream(...)
  as run:`` makes it explicit).
* **Errors** raised in the runtime reach the caller as themselves (a group with one cause, as
  that cause).
* **No thread is left behind**: leaving the ``with`` block -- normally, on an error or on
  ``KeyboardInterrupt`` -- stops the runtime (the calls still running are cut, the queues and
  simulators it holds are left, last opened first, then every actor stops) and joins its thread.

What runs in the runtime's thread: the agent's tools, its event listeners (``on=``) and its
error handler. A sync tool runs there, so it must not call back into this door (that would wait
for itself: it raises instead).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

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
_Item = TypeVar("_Item")


class Runtime:
    """An actor runtime (:func:`~actors.open_runtime`) in a thread of its own, used from
    blocking code: ``with actors.sync.Runtime() as runtime: ...``.

    The arguments are :func:`~actors.open_runtime`'s (the root supervisor's). For a session
    spanning several steps without a ``with`` block (a REPL), :meth:`start` it and
    :meth:`close` it -- until then its thread runs.
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
        self._portal = _door.Portal(options, name="trio-agents runtime (sync)")
        self._exit: queue.SimpleQueue[outcome.Outcome[Any]] = queue.SimpleQueue()
        self._closed = False

    def __repr__(self) -> str:
        state = "running" if self._portal.running else "not running"
        return f"<actors.sync.Runtime {state}>"

    # -- its life ------------------------------------------------------------------------------

    def start(self) -> Runtime:
        """Start the runtime's thread and return once the runtime is up (or raise why it could
        not start). Ctrl-C while starting stops it again and raises ``KeyboardInterrupt``."""
        ready: queue.SimpleQueue[outcome.Outcome[Any]] = queue.SimpleQueue()
        self._portal.start(ready.put, self._exit.put)
        try:
            started = _take(ready)
        except BaseException:
            _take(ready)  # up (or failed): stop it again below
            self.close()
            raise
        if isinstance(started, outcome.Error):
            self._join()
        started.unwrap()
        return self

    def close(self) -> None:
        """Stop the runtime: cut the calls still running (runs commit their partials), leave
        what it holds (job queues, simulators) last opened first, stop every actor, and join
        its thread. Raises what the runtime failed with, if it did (a supervisor that gave
        up). Idempotent. A Ctrl-C while it stops cancels what is left at once (each actor still
        within its shutdown deadline) and is raised once the thread has ended."""
        portal = self._portal
        if portal.thread is None or self._closed:
            return
        portal.stop()
        try:
            self._join()
        except BaseException:
            portal.kill()
            self._join()
            raise

    def _join(self) -> None:
        ended = _take(self._exit)
        self._closed = True
        thread = self._portal.thread
        if thread is not None:
            thread.join()
        ended.unwrap()

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None:
            self.close()
            return
        try:
            self.close()
        except Exception as failure:
            # The block's own error is the one to see; the runtime's failure is a note on it.
            error.add_note(f"(and the runtime failed while stopping: {failure!r})")

    # -- using it ------------------------------------------------------------------------------

    @property
    def trio(self) -> TrioRuntime:
        """The trio :class:`~actors.Runtime` itself, for functions passed to :meth:`call`."""
        runtime = self._portal.runtime
        if runtime is None or not self._portal.running:
            raise RuntimeClosed("the runtime is not running")
        return runtime

    def call(self, async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``async_fn(*args)`` as a trio task in the runtime's thread and return what it
        returns (or raise what it raises). Ctrl-C cuts it, as for any call here."""
        return _wait(self._portal, lambda: async_fn(*args))

    def agent(self, provider: ProviderInterface | str, **options: Any) -> Agent:
        """Start an agent on ``provider`` -- a provider, or a provider string such as
        ``"openai:gpt-4.1-mini"`` -- and return it. ``options`` are those of
        :meth:`actors.Runtime.agent` (``system=``, ``tools=``, ``limit=``, ...)."""
        runtime = self.trio
        trio_agent = _wait(self._portal, lambda: runtime.agent(provider, **options))
        return Agent(self._portal, trio_agent)

    def connect(
        self, provider: StreamingProvider | Callable[[], StreamingProvider] | str, **options: Any
    ) -> ProviderConnection:
        """Run ``provider`` as a supervised connection (see :meth:`actors.Runtime.connect`),
        to give to :meth:`agent`."""
        runtime = self.trio
        return _wait(self._portal, lambda: runtime.connect(provider, **options))

    def simulator(self, **options: Any) -> Simulator:
        """Start an offline model server (:class:`~actors.testing.Simulator`, with
        ``options``) that runs until the runtime stops; point providers at it with its
        ``openai()``, ``anthropic()``, ... methods -- the providers they make are closed with
        it."""
        hold = _Held(self._portal, lambda: _door.DoorSimulator(**options))
        simulator: Simulator = hold.enter()
        return simulator

    def open_job_queue(
        self, store: RunStore | str, registry: AgentRegistry, **options: Any
    ) -> JobQueue:
        """A worker of the durable job queue on ``store`` -- a run store, or a store URL
        (``"sqlite:///jobs.db"``) opened for it and closed after -- for a ``with`` block:
        ``with runtime.open_job_queue(store, registry) as queue: ...``. ``options`` are
        :func:`~actors.durable.open_job_queue`'s."""
        runtime = self.trio
        return JobQueue(self._portal, lambda: _door.job_queue(runtime, store, registry, options))


class Agent:
    """An agent of a :class:`Runtime`, used from blocking code (made by
    :meth:`Runtime.agent`). Its runs are the trio agent's runs (see :class:`actors.Agent`)."""

    def __init__(self, portal: _door.Portal, agent: _agent.Agent) -> None:
        self._portal = portal
        self._agent = agent

    def __repr__(self) -> str:
        return f"<actors.sync.Agent {self._agent.name}>"

    @property
    def trio(self) -> _agent.Agent:
        """The trio :class:`~actors.Agent` itself, for functions passed to
        :meth:`Runtime.call`."""
        return self._agent

    @property
    def name(self) -> str:
        """Its actor's name."""
        return self._agent.name

    def generate(
        self, input: str | Message | Sequence[Message] | None = None, **options: Any
    ) -> AgentResult:
        """Run to the end and return the result (see :meth:`actors.Agent.generate`; the
        ``options`` are its own). Ctrl-C cuts the run -- its partial is committed -- and
        raises ``KeyboardInterrupt``."""
        agent = self._agent
        return _wait(self._portal, lambda: agent.generate(input, **options))

    def stream(self, input: str | Message | Sequence[Message] | None = None, **options: Any) -> Run:
        """A run to iterate: ``for chunk in agent.stream("..."):`` (see :class:`Run`). It
        starts when the iteration does."""
        return Run(self._portal, self._agent, input, options)

    def messages(self) -> tuple[Message, ...]:
        """The agent's conversation, every message in order."""
        conversation = self._agent.conversation
        return _wait(self._portal, conversation.messages)

    def statistics(self) -> dict[str, int]:
        """Its statistics (see :meth:`actors.Agent.statistics`)."""
        agent = self._agent

        async def read() -> dict[str, int]:
            return agent.statistics()

        return _wait(self._portal, read)

    def abort(self, reason: str = "aborted") -> None:
        """Cut the run in progress (it commits its partial; see :meth:`actors.Agent.abort`).
        Returns at once; from any thread."""
        agent = self._agent
        self._portal.soon(lambda: agent.abort(reason))

    def close(self, *, cancel: bool = False) -> None:
        """Close the agent (see :meth:`actors.Agent.aclose`). Ctrl-C meanwhile still closes
        it -- cutting the run in progress -- before ``KeyboardInterrupt`` is raised."""
        agent = self._agent
        _wait(self._portal, lambda: agent.aclose(cancel=cancel))

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Run(_door.StreamedRun):
    """A streamed run, from blocking code: iterate it for its chunks (:class:`actors.Chunk`),
    then read :attr:`result`::

        with agent.stream("Write a story.") as run:
            for chunk in run:
                print(chunk.text, end="")
        print(run.result.stop)

    The run starts when the iteration does, and is iterated once. Leaving the iteration early
    -- ``break``, an exception, Ctrl-C -- cuts the run (its partial is committed) and waits
    until that is done; so does leaving the ``with`` block before the end.
    """

    def __init__(
        self,
        portal: _door.Portal,
        agent: _agent.Agent,
        input: str | Message | Sequence[Message] | None,
        options: dict[str, Any],
    ) -> None:
        super().__init__(portal, agent, input, options)
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def __iter__(self) -> Iterator[_agent.Chunk]:
        self._start(self._items.put)
        return self._chunks()

    def _chunks(self) -> Generator[_agent.Chunk, None, None]:
        # Holds this Run, never the other way round: a `for` loop left early drops the last
        # reference to the generator, which CPython then closes at once -- cutting the run.
        try:
            while True:
                item = _take(self._items)
                if isinstance(item, _door.End):
                    self._finish(item.outcome)
                    return
                self._seen(item)
                yield item
        finally:
            if not self._ended:
                self._cut()

    def _cut(self) -> None:
        call = self._call
        self._ended = True
        if call is None:
            return
        call.cancel()
        while not isinstance(_take(self._items), _door.End):  # until the run has committed
            pass

    def close(self) -> None:
        """Leave the run (what leaving the ``with`` block does): not started, it never runs;
        running, it is cut and this waits until its partial is committed."""
        if not self._ended:
            self._cut()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class JobQueue:
    """A worker of the durable job queue, from blocking code (made by
    :meth:`Runtime.open_job_queue`); its methods are those of
    :class:`actors.durable.JobQueue`, each waiting for its answer."""

    def __init__(self, portal: _door.Portal, make: Callable[[], Any]) -> None:
        self._portal = portal
        self._held = _Held(portal, make)
        self._queue: TrioJobQueue | None = None

    def __enter__(self) -> JobQueue:
        self._queue = self._held.enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._queue = None
        self._held.leave()

    @property
    def trio(self) -> TrioJobQueue:
        """The trio :class:`~actors.durable.JobQueue` itself, inside the ``with`` block."""
        if self._queue is None:
            raise RuntimeError("the job queue is used inside its 'with' block")
        return self._queue

    def enqueue(
        self, job: AgentJob, *, key: str | None = None, priority: Priority | str = "normal"
    ) -> str:
        """Admit ``job`` and return its id once it is durable (see
        :meth:`actors.durable.JobQueue.enqueue`)."""
        q = self.trio
        return _wait(self._portal, lambda: q.enqueue(job, key=key, priority=priority))

    def record(self, id: str) -> JobRecord | None:
        """The job's record as stored now."""
        q = self.trio
        return _wait(self._portal, lambda: q.record(id))

    def result(self, id: str) -> AgentResult:
        """Wait until the job ends and return its result (see
        :meth:`actors.durable.JobQueue.result`). Ctrl-C stops waiting; the job goes on."""
        q = self.trio
        return _wait(self._portal, lambda: q.result(id))

    def run(
        self, jobs: Iterable[AgentJob], *, priority: Priority | str = "normal"
    ) -> list[AgentResult]:
        """Run ``jobs`` as one batch and return their results (see
        :meth:`actors.durable.JobQueue.run`)."""
        q = self.trio
        batch = list(jobs)
        return _wait(self._portal, lambda: q.run(batch, priority=priority))

    def cancel(self, id: str) -> JobRecord:
        """Cancel the job (see :meth:`actors.durable.JobQueue.cancel`)."""
        q = self.trio
        return _wait(self._portal, lambda: q.cancel(id))

    def answer(self, id: str, call_id: str, allow: bool, reason: str = "") -> JobRecord:
        """Answer an approval the job waits for (see :meth:`actors.durable.JobQueue.answer`)."""
        q = self.trio
        return _wait(self._portal, lambda: q.answer(id, call_id, allow, reason))

    def purge(self, id: str) -> None:
        """Remove an ended job (see :meth:`actors.durable.JobQueue.purge`)."""
        q = self.trio
        _wait(self._portal, lambda: q.purge(id))

    def wait_idle(self) -> None:
        """Wait until no job runs in this worker."""
        q = self.trio
        _wait(self._portal, q.wait_idle)

    def statistics(self) -> dict[str, int]:
        """What this worker did (see :meth:`actors.durable.JobQueue.statistics`)."""
        q = self.trio

        async def read() -> dict[str, int]:
            return q.statistics()

        return _wait(self._portal, read)


# -- waiting -----------------------------------------------------------------------------------


def _check_thread(portal: _door.Portal) -> None:
    if threading.current_thread() is portal.thread:
        raise RuntimeError(
            "a blocking call into the runtime from its own thread (a tool or a listener) would "
            "wait for itself: use the trio API there"
        )


#: How often the main thread, waiting for the runtime, wakes to run the signal handlers Python
#: has pending (seconds).
_WAKE: Final = 0.1


def _take(box: queue.SimpleQueue[_Item]) -> _Item:
    """The next item of ``box``, waiting for it -- and a wait in the main thread that Ctrl-C
    (any signal with a Python handler) interrupts whichever thread the kernel gave the signal
    to: a signal taken by another thread (the runtime's, say) only marks the handler pending
    for the main thread, which runs it when it next runs Python, so the wait wakes every
    :data:`_WAKE` seconds to let it. (A plain ``get()`` slept through it: Ctrl-C did
    nothing.)"""
    if threading.current_thread() is not threading.main_thread():
        return box.get()
    while True:
        try:
            return box.get(timeout=_WAKE)
        except queue.Empty:
            continue


def _wait(portal: _door.Portal, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn()`` in the runtime and wait for its outcome; on ``KeyboardInterrupt`` (or any
    exception raised into the waiting thread), cut it, wait until it has ended, re-raise."""
    _check_thread(portal)
    box: queue.SimpleQueue[outcome.Outcome[T]] = queue.SimpleQueue()
    call: _door.Call | None = None
    try:
        call = portal.submit(fn, box.put)
        result = _take(box)
    except BaseException:
        if call is not None:
            call.cancel()
            _take(box)  # the cut call has ended: a run's partial is committed (2nd Ctrl-C: leave)
        raise
    return result.unwrap()


class _Held:
    """A context manager held in the runtime (a queue, a simulator), entered and left from
    here."""

    def __init__(self, portal: _door.Portal, make: Callable[[], Any]) -> None:
        self._portal = portal
        self._make = make
        self._entered: queue.SimpleQueue[outcome.Outcome[Any]] = queue.SimpleQueue()
        self._exited: queue.SimpleQueue[outcome.Outcome[Any]] = queue.SimpleQueue()
        self._hold: _door.Hold | None = None

    def enter(self) -> Any:
        _check_thread(self._portal)
        self._hold = hold = self._portal.hold(self._make, self._entered.put, self._exited.put)
        try:
            entered = _take(self._entered)
        except BaseException:
            if isinstance(_take(self._entered), outcome.Value):
                hold.release()
                _take(self._exited)
            raise
        return entered.unwrap()

    def leave(self) -> None:
        hold, self._hold = self._hold, None
        if hold is None:
            return
        _check_thread(self._portal)
        hold.release()
        _take(self._exited).unwrap()
