"""The doors' engine: one trio runtime in a thread of its own, and calls into it from others.

Private. :mod:`actors.sync` (blocking) and :mod:`actors.aio` (asyncio) are its two faces; a face
only decides how its caller waits. Everything trio happens in the runtime's thread. What crosses
into it is a function to run there (:meth:`Portal.submit`, :meth:`Portal.hold`,
:meth:`Portal.soon`); what comes back is an :class:`outcome.Outcome` -- and a stream's chunks --
through a callback the face gives, which is called in the runtime's thread and must only hand
the value over (put it in a queue, schedule a wake-up on a loop).

Why a thread and not trio's guest mode on asyncio's loop: see docs/from-asyncio.md ("Why a
thread"). In short: one mechanism for both doors, two runtimes are independent (guest mode
allows one trio run per host thread), and the runtime's deadlines and leases do not stall when
the host loop does -- at a per-call price that the benchmark (benchmarks/doors.py) measures.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import outcome
import trio

from ._core._errors import one_cause, only_cancelled
from ._runtime import Runtime, open_runtime
from .providers import AnthropicMessages, HTTPProvider, OllamaChat, OpenAIChat, OpenAIResponses
from .testing import Simulator

if TYPE_CHECKING:
    from protocols.messages import AgentResult, Message

    from .agent import Agent, AgentRun, Chunk
    from .durable import AgentRegistry, JobQueue, RunStore

__all__ = ["Call", "DoorSimulator", "Hold", "Portal", "RuntimeClosed"]

log = logging.getLogger(__name__)

T = TypeVar("T")
P = TypeVar("P", bound=HTTPProvider)
#: Called in the runtime's thread with the outcome of what was sent there.
Deliver = Callable[[outcome.Outcome[Any]], None]


class RuntimeClosed(RuntimeError):
    """The runtime is not running -- not started yet, closed, or closing -- so it takes no
    call, or it was closed while the call ran (the call was cut)."""


class Call:
    """A function sent to run in the runtime's thread. :meth:`cancel` cuts it from any thread;
    its outcome is delivered all the same (a cut one: :class:`RuntimeClosed`)."""

    __slots__ = ("_cancelled", "_portal", "_scope")

    def __init__(self, portal: Portal) -> None:
        self._portal = portal
        self._scope: trio.CancelScope | None = None
        self._cancelled = False

    def cancel(self) -> None:
        """Cut the call (a no-op once it ended, or once the runtime has stopped)."""
        self._portal.soon(self._cancel)

    def _cancel(self) -> None:
        self._cancelled = True
        if self._scope is not None:
            self._scope.cancel()


class Hold:
    """An async context manager entered in the runtime's thread, and left when
    :meth:`release` is called -- or when the runtime stops, in the reverse order of entering."""

    __slots__ = ("_ended", "_entered", "_exited", "_make", "_portal", "_released")

    def __init__(
        self,
        portal: Portal,
        make: Callable[[], AbstractAsyncContextManager[Any]],
        entered: Deliver,
        exited: Deliver,
    ) -> None:
        self._portal = portal
        self._make = make
        self._entered = entered
        self._exited = exited
        self._released: trio.Event | None = None
        self._ended: trio.Event | None = None

    def release(self) -> None:
        """Leave the context (its exit's outcome goes to ``exited``); from any thread."""
        self._portal.soon(self._release)

    def _release(self) -> None:
        if self._released is not None:
            self._released.set()


def _safely(deliver: Deliver, result: outcome.Outcome[Any]) -> None:
    # A callback that raised in trio's re-entry queue would crash the whole run.
    try:
        deliver(result)
    except BaseException:
        log.exception("a door's delivery callback raised")


_State = Literal["new", "starting", "running", "stopping", "stopped"]


class Portal:
    """A trio runtime (:func:`~actors.open_runtime`) run in a thread of its own, and the way
    other threads use it.

    Guarantees: :meth:`start` starts one thread, which ends after ``on_exit`` is called;
    stopping cuts the calls still running (each commits what a cancelled caller's run commits),
    then leaves the held contexts in reverse order, then leaves the runtime; every call, hold
    and start gets exactly one outcome, also when the runtime stops under it.
    """

    def __init__(self, options: dict[str, Any], *, name: str) -> None:
        self._options = options
        self._name = name
        self._lock = threading.Lock()
        self._state: _State = "new"
        self._stop_requested = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._calls: trio.Nursery | None = None
        self._holding: trio.Nursery | None = None
        self._holds: list[Hold] = []
        self._stopping: trio.Event | None = None
        self._hard: trio.CancelScope | None = None
        self._thread: threading.Thread | None = None
        self._ready: Deliver | None = None
        self.runtime: Runtime | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The runtime's thread, once started."""
        return self._thread

    @property
    def running(self) -> bool:
        """Whether it takes calls."""
        return self._state == "running"

    # -- from any thread -------------------------------------------------------------------------

    def start(self, on_ready: Deliver, on_exit: Deliver) -> None:
        """Start the runtime's thread. ``on_ready`` gets ``Value(None)`` once calls are taken
        (or the error the start failed with); ``on_exit`` the runtime's end, last of all."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError("a runtime is started once")
            self._state = "starting"
        self._ready = on_ready
        thread = threading.Thread(target=self._main, args=(on_exit,), name=self._name, daemon=True)
        self._thread = thread
        thread.start()

    def stop(self) -> None:
        """Ask the runtime to stop (it stops as the class docstring says); returns at once."""
        with self._lock:
            if self._state not in ("starting", "running"):
                return
            self._stop_requested = True
            if self._state == "starting":
                return  # stopped as soon as it is up
            self._state = "stopping"
        self.soon(self._stop_now)

    def kill(self) -> None:
        """Cancel everything in the runtime at once (what a second Ctrl-C asks for): its
        actors still stop, each within its shutdown deadline."""
        self.soon(self._kill_now)

    def soon(self, fn: Callable[[], object]) -> bool:
        """Run ``fn`` (quick, sync, never raising) in the runtime's thread; ``False`` when the
        runtime has ended and it will never run."""
        token = self._token
        if token is None:
            return False
        try:
            token.run_sync_soon(fn)
        except trio.RunFinishedError:
            return False
        return True

    def submit(self, fn: Callable[[], Awaitable[Any]], deliver: Deliver) -> Call:
        """Run ``fn()`` as a task in the runtime's thread; ``deliver`` gets its outcome there
        (a group with one real cause as that cause). Raises :class:`RuntimeClosed` when the
        runtime takes no calls."""
        call = Call(self)
        if not (self._state == "running" and self.soon(lambda: self._spawn(fn, deliver, call))):
            raise RuntimeClosed("the runtime is not running")
        return call

    def hold(
        self,
        make: Callable[[], AbstractAsyncContextManager[Any]],
        entered: Deliver,
        exited: Deliver,
    ) -> Hold:
        """Enter ``make()`` in the runtime's thread and stay in it until released (see
        :class:`Hold`); ``entered`` gets what it yields (or why it failed), ``exited`` how its
        exit went. Raises :class:`RuntimeClosed` when the runtime takes no calls."""
        hold = Hold(self, make, entered, exited)
        if not (self._state == "running" and self.soon(lambda: self._spawn_hold(hold))):
            raise RuntimeClosed("the runtime is not running")
        return hold

    # -- in the runtime's thread -------------------------------------------------------------

    def _main(self, on_exit: Deliver) -> None:
        try:
            trio.run(self._serve)
        except BaseException as error:
            result: outcome.Outcome[None] = outcome.Error(one_cause(error))
        else:
            result = outcome.Value(None)
        with self._lock:
            self._state = "stopped"
            self._token = None
        ready, self._ready = self._ready, None
        if ready is not None:  # the start itself failed
            failed = result if isinstance(result, outcome.Error) else None
            _safely(ready, failed or outcome.Error(RuntimeClosed("the runtime stopped")))
        _safely(on_exit, result)

    async def _serve(self) -> None:
        with trio.CancelScope() as self._hard:
            async with (
                open_runtime(**self._options) as runtime,
                trio.open_nursery() as holding,
            ):
                async with trio.open_nursery() as calls:
                    self._stopping = trio.Event()
                    with self._lock:
                        self.runtime = runtime
                        self._calls = calls
                        self._holding = holding
                        self._token = trio.lowlevel.current_trio_token()
                        self._state = "stopping" if self._stop_requested else "running"
                    if self._stop_requested:
                        self._stopping.set()
                    ready, self._ready = self._ready, None
                    if ready is not None:
                        _safely(ready, outcome.Value(None))
                    await self._stopping.wait()
                    calls.cancel_scope.cancel()  # the calls in flight are cut first
                while self._holds:  # then the held contexts, last entered first
                    hold = self._holds[-1]
                    hold._release()
                    assert hold._ended is not None
                    await hold._ended.wait()

    def _stop_now(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    def _kill_now(self) -> None:
        self._stop_now()
        if self._hard is not None:
            self._hard.cancel()

    def _spawn(self, fn: Callable[[], Awaitable[Any]], deliver: Deliver, call: Call) -> None:
        try:
            assert self._calls is not None
            self._calls.start_soon(self._run, fn, deliver, call)
        except RuntimeError:  # the nursery is closed: the runtime is stopping
            _safely(deliver, outcome.Error(RuntimeClosed("the runtime is closing")))

    async def _run(self, fn: Callable[[], Awaitable[Any]], deliver: Deliver, call: Call) -> None:
        result: outcome.Outcome[Any] | None = None
        try:
            with trio.CancelScope() as scope:
                call._scope = scope
                if call._cancelled:
                    scope.cancel()
                try:
                    result = outcome.Value(await fn())
                except BaseException as error:  # delivered to the caller, unless a cancel
                    if only_cancelled(error):
                        raise
                    result = outcome.Error(one_cause(error))
        finally:
            call._scope = None
            if result is None:
                why = "the call was cut" if call._cancelled else "the runtime was closed"
                result = outcome.Error(RuntimeClosed(why))
            _safely(deliver, result)

    def _spawn_hold(self, hold: Hold) -> None:
        if self._state != "running" or self._holding is None:
            _safely(hold._entered, outcome.Error(RuntimeClosed("the runtime is closing")))
            return
        hold._released = trio.Event()
        hold._ended = trio.Event()
        self._holds.append(hold)
        self._holding.start_soon(self._keep, hold)

    async def _keep(self, hold: Hold) -> None:
        entered = False
        result: outcome.Outcome[None] | None = None
        try:
            async with hold._make() as value:
                entered = True
                _safely(hold._entered, outcome.Value(value))
                assert hold._released is not None
                await hold._released.wait()
            result = outcome.Value(None)
        except BaseException as error:
            if only_cancelled(error):
                raise
            result = outcome.Error(one_cause(error))
        finally:
            self._holds.remove(hold)
            if result is None:
                result = outcome.Error(RuntimeClosed("the runtime was closed"))
            _safely(hold._exited if entered else hold._entered, result)
            assert hold._ended is not None
            hold._ended.set()


# -- what both faces run in the runtime's thread ---------------------------------------------


class RunSlot:
    """The trio side of a streamed run, for ``abort()`` from another thread: the
    :class:`~actors.AgentRun` once made, or the reason of an abort asked for before."""

    __slots__ = ("pending", "run")

    def __init__(self) -> None:
        self.run: AgentRun | None = None
        self.pending: str | None = None

    def abort(self, reason: str) -> None:
        """In the runtime's thread: abort the run (now, or as soon as it exists)."""
        if self.run is not None:
            self.run.abort(reason)
        else:
            self.pending = reason


class End:
    """The last item of a streamed run's queue: how its call ended."""

    __slots__ = ("outcome",)

    def __init__(self, result: outcome.Outcome[Any]) -> None:
        self.outcome = result


class StreamedRun:
    """What a door's streamed run (``aio.Run``, ``sync.Run``) holds, whichever face it has:
    the call that pumps its chunks into a queue (``put``), then an :class:`End`, and its
    result or error once that came."""

    def __init__(
        self,
        portal: Portal,
        agent: Agent,
        input: str | Message | Sequence[Message] | None,
        options: dict[str, Any],
    ) -> None:
        self._portal = portal
        self._agent = agent
        self._input = input
        self._options = options
        self._slot = RunSlot()
        self._call: Call | None = None
        self._ended = False
        self._result: AgentResult | None = None
        self._error: BaseException | None = None
        self._partial: Any = None

    @property
    def result(self) -> AgentResult:
        """The run's result, once the iteration has ended (or the error it raised)."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the run has not finished: iterate it to the end first")
        return self._result

    def _start(self, put: Callable[[Any], None]) -> None:
        """Start the run's call (once): its chunks, then its :class:`End`, go to ``put``."""
        if self._call is not None:
            raise RuntimeError("a run is iterated once")
        slot = self._slot
        agent, input, options = self._agent, self._input, self._options

        def deliver(result: outcome.Outcome[Any]) -> None:
            put(End(result))

        self._call = self._portal.submit(lambda: pump(agent, input, options, put, slot), deliver)

    def _finish(self, result: outcome.Outcome[Any]) -> None:
        """The run's call ended with ``result``: keep it (raise its error)."""
        self._ended = True
        if isinstance(result, outcome.Error):
            self._error = result.error
            raise result.error
        self._result = result.unwrap()

    def partial_output(self) -> Any:
        """The structured answer known so far, as of the chunks the iteration gave: the
        ``output`` of the last ``output`` chunk of this run's own (``None`` before any) -- see
        :meth:`actors.AgentRun.partial_output`."""
        return self._partial

    def _seen(self, chunk: Chunk) -> None:
        """The iteration gives ``chunk``: keep a partial answer it carries."""
        if chunk.kind == "output" and not chunk.path:
            self._partial = chunk.output

    def abort(self, reason: str = "cancelled") -> None:
        """Abort the run: it ends at once, partial, and the iteration ends with its result
        (``stop="cancelled"``). From any thread."""
        slot = self._slot
        self._portal.soon(lambda: slot.abort(reason))


async def pump(
    agent: Agent,
    input: str | Message | Sequence[Message] | None,
    options: dict[str, Any],
    put: Callable[[Chunk], None],
    slot: RunSlot,
) -> AgentResult:
    """Stream a run of ``agent``, handing every chunk to ``put``; its result. Cut (its call
    cancelled), it is left as leaving ``async with agent.stream()`` leaves it: aborted, its
    partial committed."""
    async with agent.stream(input, **options) as run:
        slot.run = run
        if slot.pending is not None:
            run.abort(slot.pending)
        async for chunk in run:
            put(chunk)
    return run.result


def job_queue(
    runtime: Runtime,
    store: RunStore | str,
    registry: AgentRegistry,
    options: dict[str, Any],
) -> AbstractAsyncContextManager[JobQueue]:
    """``open_job_queue`` on ``store`` -- a store, or a store URL this opens and closes."""
    from .durable import open_job_queue, open_run_store  # noqa: PLC0415 - only when used

    @asynccontextmanager
    async def queue() -> AsyncIterator[JobQueue]:
        if not isinstance(store, str):
            async with open_job_queue(store, registry, runtime, **options) as opened:
                yield opened
            return
        own = await open_run_store(store)
        try:
            async with open_job_queue(own, registry, runtime, **options) as opened:
                yield opened
        finally:
            with trio.CancelScope(shield=True):
                await own.aclose()

    return queue()


class DoorSimulator(Simulator):
    """A :class:`~actors.testing.Simulator` that also closes, when it stops, the providers it
    made (``openai()``, ...): a door's caller hands them to agents and forgets them, and their
    HTTP clients must not outlive the runtime."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._made: list[HTTPProvider] = []

    def openai(self, *, model: str = "simulator", **kwargs: Any) -> OpenAIChat:
        return self._keep(super().openai(model=model, **kwargs))

    def openai_responses(self, *, model: str = "simulator", **kwargs: Any) -> OpenAIResponses:
        return self._keep(super().openai_responses(model=model, **kwargs))

    def anthropic(self, *, model: str = "simulator", **kwargs: Any) -> AnthropicMessages:
        return self._keep(super().anthropic(model=model, **kwargs))

    def ollama(self, *, model: str = "simulator", **kwargs: Any) -> OllamaChat:
        return self._keep(super().ollama(model=model, **kwargs))

    def _keep(self, provider: P) -> P:
        self._made.append(provider)
        return provider

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # (The way out of ``async with`` and of aclose() alike.)
        try:
            await super().__aexit__(kind, error, traceback)
        finally:
            made, self._made = self._made, []
            with trio.CancelScope(shield=True):
                for provider in made:
                    await provider.aclose()
