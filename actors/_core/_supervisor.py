"""Supervisors: start children in order, restart them by strategy, stop them in reverse."""

from __future__ import annotations

import enum
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from protocols.errors import AgentsError, Category, ConfigError

from ._actor import (
    Actor,
    ActorExit,
    ActorRef,
    ActorState,
    ActorStatistics,
    ExitKind,
    _Cell,
)
from ._incarnation import run_incarnation

__all__ = [
    "AutoShutdown",
    "Backoff",
    "ChildSpec",
    "Restart",
    "StartChild",
    "Strategy",
    "Supervisor",
    "SupervisorGaveUp",
    "SupervisorStatistics",
    "TerminateChild",
]


class Strategy(enum.StrEnum):
    """What a supervisor restarts when a child has to be restarted."""

    #: Only that child.
    ONE_FOR_ONE = "one_for_one"
    #: Every child: the others are stopped (in reverse order), then all restart in order.
    ONE_FOR_ALL = "one_for_all"
    #: That child and every child started after it.
    REST_FOR_ONE = "rest_for_one"


class Restart(enum.StrEnum):
    """When a child that ended is restarted."""

    #: Always, however it ended.
    PERMANENT = "permanent"
    #: Only after a failure (not after a normal exit or a shutdown).
    TRANSIENT = "transient"
    #: Never.
    TEMPORARY = "temporary"


class AutoShutdown(enum.StrEnum):
    """Whether a supervisor stops itself when its *significant* children end for good."""

    NEVER = "never"
    #: When any significant child ends and is not restarted.
    ANY_SIGNIFICANT = "any_significant"
    #: When every significant child has ended and none will be restarted.
    ALL_SIGNIFICANT = "all_significant"


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{type(instance).__name__}.{attribute.name} must be > 0, not {value!r}")


@attrs.frozen
class Backoff:
    """Exponential backoff with jitter between restarts of a failing child.

    The n-th consecutive restart (n = 0, 1, ...) waits ``min(maximum, initial * factor**n)``
    scaled by a random factor in ``[1 - jitter, 1]``. The count starts again once a child has run
    for ``reset_after`` seconds without failing.
    """

    initial: float = attrs.field(default=0.1, validator=_positive)
    maximum: float = attrs.field(default=10.0, validator=_positive)
    factor: float = attrs.field(default=2.0, validator=_positive)
    jitter: float = attrs.field(default=0.5)
    reset_after: float = attrs.field(default=30.0, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"Backoff.jitter must be between 0 and 1, not {self.jitter!r}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait before consecutive restart number ``attempt`` (0-based)."""
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return base * (1 - self.jitter * rng.random())


def _shutdown_ok(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value >= 0:
        raise ConfigError(f"ChildSpec.shutdown must be >= 0 (or None), not {value!r}")


@attrs.frozen
class ChildSpec:
    """How to run one child.

    - ``factory`` builds a fresh actor for every incarnation (a class works).
    - ``name`` must be unique among the supervisor's children (default: the factory's name plus a
      counter). With ``register=True`` the child can be found by name through the runtime.
    - ``restart``: see :class:`Restart` (default ``permanent``, as in OTP).
    - ``shutdown``: seconds a stop may take before the child is cancelled; 0 kills at once,
      ``math.inf`` waits forever. ``None`` takes the actor class's ``default_shutdown``: 5 s for
      workers, forever for supervisors.
    - ``significant``: the child counts for the supervisor's :class:`AutoShutdown`.
    - ``mailbox_size`` overrides the actor class's ``mailbox_size``.
    """

    factory: Callable[[], Actor[Any, Any]]
    name: str | None = None
    restart: Restart = attrs.field(default=Restart.PERMANENT, converter=Restart)
    shutdown: float | None = attrs.field(default=None, validator=_shutdown_ok)
    significant: bool = False
    register: bool = False
    mailbox_size: int | None = None


@attrs.frozen
class StartChild:
    """Request for a supervisor actor: start ``spec`` as a new child; the reply is its ref."""

    spec: ChildSpec


@attrs.frozen
class TerminateChild:
    """Request for a supervisor actor: stop the named child for good; the reply is its exit."""

    name: str


class SupervisorGaveUp(AgentsError):
    """A supervisor restarted children more often than its intensity allows, stopped them all and
    failed. ``last_failure`` (also the ``__cause__``) is the child failure that tipped it over."""

    default_code = "supervisor_gave_up"
    default_category = Category.SYSTEM

    def __init__(self, message: str, *, last_failure: BaseException | None) -> None:
        super().__init__(message)
        self.last_failure = last_failure


@attrs.frozen
class SupervisorStatistics(ActorStatistics):
    """A snapshot of a supervisor: its own actor statistics (``restarts`` counts restarts *of
    the supervisor*), plus its children and the restarts it performed."""

    strategy: Strategy
    #: Children it currently has (running or restarting), in start order.
    children: tuple[str, ...]
    #: Restarts it has performed on its children, in total.
    child_restarts: int
    #: Restarts it performed inside the current intensity window.
    recent_restarts: int


class _Child:
    __slots__ = ("cell", "failures", "spec", "started_at", "stopping")

    def __init__(self, spec: ChildSpec, cell: _Cell) -> None:
        self.spec = spec
        self.cell = cell
        self.failures = 0
        self.started_at = 0.0
        # Set while this supervisor stops the child on purpose: its exit then triggers nothing.
        self.stopping = False

    @property
    def ref(self) -> ActorRef[Any, Any]:
        # Made on demand: refs compare by cell, and an idle child should not carry one.
        return ActorRef(self.cell)


class Supervisor(Actor[StartChild | TerminateChild, Any]):
    """An actor whose job is to run other actors, and itself a child like any other.

    Guarantees:

    * Children start in order, each ready (its ``on_start`` done) before the next starts; a
      child that fails to start fails the supervisor's start.
    * They stop in reverse order, each gracefully and then cancelled at its shutdown deadline.
    * A child that ends is restarted according to its :class:`Restart` type and the supervisor's
      :class:`Strategy`, after an optional :class:`Backoff` delay.
    * More than ``max_restarts`` restarts within ``period`` seconds (counted per supervisor, over
      all children) make it give up: it stops every child and fails with
      :class:`SupervisorGaveUp`, which its own supervisor then handles (escalation).
    * Refs to a child reach its current incarnation across restarts. A restarted *supervisor*
      starts new children, so refs into the old one's children raise ``ActorStopped``; use the
      runtime registry (``register=True``) to find the new ones by name.

    All timing uses ``trio.current_time()``, so tests can drive it with a mock clock.
    """

    mailbox_size = 64
    #: A supervisor waits for its children's own deadlines; it is never cut short by default.
    default_shutdown = math.inf
    #: A request that cannot be done (a duplicate name, a child failing to start) is the
    #: caller's error, not the supervisor's failure.
    reply_errors = (Exception,)

    def __init__(
        self,
        children: Sequence[ChildSpec] = (),
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Backoff | None = None,
        auto_shutdown: AutoShutdown = AutoShutdown.NEVER,
        rng: random.Random | None = None,
    ) -> None:
        if max_restarts < 0:
            raise ConfigError(f"max_restarts must be >= 0, not {max_restarts!r}")
        if not period > 0:
            raise ConfigError(f"period must be > 0, not {period!r}")
        self.strategy = Strategy(strategy)
        self.max_restarts = max_restarts
        self.period = period
        self.backoff = backoff
        self.auto_shutdown = AutoShutdown(auto_shutdown)
        self._initial = tuple(children)
        self._rng = rng if rng is not None else random.Random()
        # Children by name, in start order (dicts keep insertion order): O(1) to add, find and
        # remove, which matters for a supervisor of 100,000 dynamic children.
        self._children: dict[str, _Child] = {}
        self._lock = trio.Lock()
        self._window: deque[float] = deque()
        self._restarts = 0
        self._counter = 0
        self._shutting_down = False
        self._registry: dict[str, ActorRef[Any, Any]] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    async def on_start(self) -> None:
        owner = self._cell.owner if self._cell is not None else None
        if owner is not None:
            self._registry = owner._registry  # one registry per runtime, shared down the tree
        async with self._lock:
            for spec in self._initial:
                await self._add(spec)

    async def on_stop(self, exit: ActorExit) -> None:
        await self._stop_all()

    async def handle(self, message: StartChild | TerminateChild) -> Any:
        if isinstance(message, StartChild):
            return await self.start_child(message.spec)
        if isinstance(message, TerminateChild):
            return await self.terminate_child(message.name)
        raise TypeError(f"a Supervisor does not understand {message!r}")

    # -- public operations ---------------------------------------------------------------------

    async def start_child(self, spec: ChildSpec) -> ActorRef[Any, Any]:
        """Start ``spec`` as a new (dynamic) child, after the existing ones; return its ref once
        it is ready. Its start failure is raised here and does not count as a restart."""
        async with self._lock:
            if self._shutting_down:
                raise RuntimeError(f"supervisor {self.name!r} is shutting down")
            return await self._add(spec)

    async def terminate_child(self, child: str | ActorRef[Any, Any]) -> ActorExit:
        """Stop a child for good (no restart) and return how it ended. Unknown or already
        stopped children are not an error: their last exit is returned."""
        async with self._lock:
            record = self._find(child)
            if record is None:
                return self._exit_of_gone(child)
            await self._stop(record)
            self._remove(record)
            assert record.cell.exit is not None
            return record.cell.exit

    def children(self) -> list[ActorRef[Any, Any]]:
        """Refs to the current children, in start order."""
        return [child.ref for child in self._children.values()]

    def lookup(self, name: str) -> ActorRef[Any, Any] | None:
        """The registered actor called ``name`` anywhere in this runtime, if it is not stopped."""
        ref = self._registry.get(name)
        if ref is not None and ref.state is ActorState.STOPPED:
            del self._registry[name]  # its supervisor died without unregistering it
            return None
        return ref

    def statistics(self) -> SupervisorStatistics:
        """A snapshot of this supervisor (see :class:`SupervisorStatistics`)."""
        self._trim_window(trio.current_time())
        own = super().statistics()
        return SupervisorStatistics(
            **attrs.asdict(own, recurse=False),
            strategy=self.strategy,
            children=tuple(self._children),
            child_restarts=self._restarts,
            recent_restarts=len(self._window),
        )

    # -- internals -----------------------------------------------------------------------------

    def _find(self, child: str | ActorRef[Any, Any]) -> _Child | None:
        if isinstance(child, ActorRef):
            record = child._cell.child
            return record if isinstance(record, _Child) and self._owns(record) else None
        return self._children.get(child)

    def _owns(self, record: _Child) -> bool:
        return self._children.get(record.cell.name) is record

    def _exit_of_gone(self, child: str | ActorRef[Any, Any]) -> ActorExit:
        if isinstance(child, ActorRef) and child._cell.exit is not None:
            return child._cell.exit
        return ActorExit(ExitKind.SHUTDOWN)

    async def _add(self, spec: ChildSpec) -> ActorRef[Any, Any]:
        self._counter += 1
        name = spec.name or f"{getattr(spec.factory, '__name__', 'actor')}-{self._counter}"
        if name in self._children:
            raise ConfigError(f"supervisor {self.name!r} already has a child named {name!r}")
        if spec.register and name in self._registry:
            raise ConfigError(f"an actor named {name!r} is already registered in this runtime")
        cell = _Cell(name, owner=self, mailbox_size=spec.mailbox_size, shutdown=spec.shutdown)
        record = _Child(spec, cell)
        cell.child = record
        await self._start(record)
        self._children[name] = record
        if spec.register:
            self._registry[name] = record.ref
        return record.ref

    async def _start(self, record: _Child) -> None:
        record.started_at = trio.current_time()
        record.stopping = False
        await self.nursery.start(
            run_incarnation, record.cell, record.spec.factory, self._child_exited
        )

    def _remove(self, record: _Child) -> None:
        if self._owns(record):
            del self._children[record.cell.name]
        if record.spec.register and self._registry.get(record.cell.name) == record.ref:
            del self._registry[record.cell.name]
        record.cell.set_state(ActorState.STOPPED)
        # Gone for good: the child's cell no longer leads to its record (which leads back to
        # it), so a stopped actor is freed when its last ref goes, not left to the collector.
        record.cell.child = None
        record.cell.let_go()

    async def _stop(self, record: _Child) -> None:
        """Stop one child's current incarnation on purpose (its exit triggers nothing)."""
        record.stopping = True
        await record.cell.stop(ExitKind.SHUTDOWN)

    async def _stop_all(self) -> None:
        self._shutting_down = True
        async with self._lock:
            for record in reversed(list(self._children.values())):
                await self._stop(record)
                self._remove(record)

    def _trim_window(self, now: float) -> None:
        while self._window and self._window[0] <= now - self.period:
            self._window.popleft()

    def _should_restart(self, record: _Child, exit: ActorExit) -> bool:
        restart = record.spec.restart
        if restart is Restart.PERMANENT:
            return True
        if restart is Restart.TRANSIENT:
            return exit.kind is ExitKind.FAILED
        return False

    async def _child_exited(self, cell: _Cell, exit: ActorExit) -> None:
        record: _Child = cell.child
        # A child we are stopping on purpose (or everything, while shutting down) just ends; the
        # stopper holds the lock and cleans up.
        if record.stopping or self._shutting_down:
            return
        async with self._lock:
            if not self._owns(record) or self._shutting_down:
                record.cell.set_state(ActorState.STOPPED)
                return
            if not self._should_restart(record, exit):
                self._remove(record)
                self._maybe_auto_shutdown(record)
                return
            await self._restart(record, exit)

    def _maybe_auto_shutdown(self, ended: _Child) -> None:
        if not ended.spec.significant or self.auto_shutdown is AutoShutdown.NEVER:
            return
        if self.auto_shutdown is AutoShutdown.ALL_SIGNIFICANT and any(
            child.spec.significant for child in self._children.values()
        ):
            return
        # A shutdown, not a normal exit: a transient parent spec does not restart us (as in OTP).
        if self._cell is not None:
            self._cell.request_stop(ExitKind.SHUTDOWN)

    async def _restart(self, record: _Child, exit: ActorExit) -> None:
        """Restart ``record`` (and its group, per the strategy) until it starts, or give up."""
        while True:
            now = trio.current_time()
            self._trim_window(now)
            self._window.append(now)
            if len(self._window) > self.max_restarts:
                await self._give_up(record, exit)
            self._restarts += 1
            group = self._group(record)
            for other in reversed(group):
                if other is not record:
                    await self._stop(other)
            if self.backoff is not None:
                if now - record.started_at >= self.backoff.reset_after:
                    record.failures = 0
                await trio.sleep(self.backoff.delay(record.failures, self._rng))
                record.failures += 1
            for member in group:
                member.cell.restarts += 1
                try:
                    await self._start(member)
                except Exception as error:  # a failed restart is one more failure
                    record, exit = member, ActorExit(ExitKind.FAILED, error)
                    member.cell.set_state(ActorState.RESTARTING)
                    break
            else:
                return

    def _group(self, record: _Child) -> list[_Child]:
        if self.strategy is Strategy.ONE_FOR_ONE:
            return [record]
        children = list(self._children.values())
        if self.strategy is Strategy.ONE_FOR_ALL:
            return children
        return children[children.index(record) :]

    async def _give_up(self, record: _Child, exit: ActorExit) -> None:
        self._shutting_down = True
        for child in reversed(list(self._children.values())):
            if child is not record:
                await self._stop(child)
        for child in list(self._children.values()):
            self._remove(child)
        error = SupervisorGaveUp(
            f"supervisor {self.name!r} gave up: more than {self.max_restarts} restarts in "
            f"{self.period} s (last: child {record.cell.name!r} {exit.kind.value})",
            last_failure=exit.error,
        )
        raise error from exit.error
