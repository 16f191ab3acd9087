"""The runtime root: one supervisor tree per ``async with open_runtime()`` block.

This is the core runtime alone -- spawn, start, lookup, statistics, the root -- and it imports
nothing of ``actors`` outside ``actors/_core``. The public :class:`actors.Runtime` and
:func:`actors.open_runtime` (``actors/_runtime.py``) are built on it and add what the features
bring: agents and provider connections started from it, and the runs' event logs
(``live``, ``watch()``)."""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from ._actor import Actor, ActorRef, _Cell
from ._errors import OneCause
from ._incarnation import run_incarnation
from ._supervisor import (
    Backoff,
    ChildSpec,
    Restart,
    Strategy,
    Supervisor,
    SupervisorStatistics,
)

__all__ = ["Runtime", "open_runtime", "run_root"]

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")
RuntimeT = TypeVar("RuntimeT", bound="Runtime")


class Runtime:
    """A running actor tree, as yielded by :func:`open_runtime`. Its root is a one-for-one
    :class:`Supervisor`; everything spawned here is a child of it."""

    __slots__ = ("_cell", "root")

    def __init__(self, root: Supervisor, cell: _Cell) -> None:
        self.root = root
        self._cell = cell

    async def spawn(
        self,
        factory: Callable[[], Actor[MsgT, ReplyT]],
        *,
        name: str | None = None,
        restart: Restart = Restart.PERMANENT,
        shutdown: float | None = None,
        register: bool = False,
        mailbox_size: int | None = None,
    ) -> ActorRef[MsgT, ReplyT]:
        """Start an actor under the root supervisor and return its ref once it is ready.

        ``factory`` (often the actor class) is called for every incarnation, so a restart gets a
        fresh instance. The other arguments are those of :class:`ChildSpec`. Raises what the
        actor's start raised, or ``TypeError`` if given an actor instance instead of a factory.
        """
        if isinstance(factory, Actor):
            raise TypeError(
                "spawn() takes a factory (such as the actor class or a lambda), not an actor "
                "instance: restarts need a fresh instance each time"
            )
        spec = ChildSpec(
            factory,
            name=name,
            restart=restart,
            shutdown=shutdown,
            register=register,
            mailbox_size=mailbox_size,
        )
        return await self.root.start_child(spec)

    async def start(self, spec: ChildSpec) -> ActorRef[Any, Any]:
        """Start a child of the root from a full :class:`ChildSpec` (a supervisor, say)."""
        return await self.root.start_child(spec)

    def lookup(self, name: str) -> ActorRef[Any, Any] | None:
        """The actor registered as ``name`` (``register=True``) anywhere in this runtime."""
        return self.root.lookup(name)

    def statistics(self) -> SupervisorStatistics:
        """The root supervisor's statistics: its mailbox, its children, the restarts it did."""
        return self.root.statistics()


@asynccontextmanager
async def open_runtime(
    *,
    max_restarts: int = 3,
    period: float = 5.0,
    backoff: Backoff | None = None,
    rng: random.Random | None = None,
) -> AsyncIterator[Runtime]:
    """Run a core actor runtime (no agents, no event logs: :func:`actors.open_runtime` is the
    one that has them) for the duration of the ``async with`` block, with the guarantees of
    :func:`run_root`. The arguments configure the root supervisor (see :class:`Supervisor`)."""
    async with run_root(
        Runtime, max_restarts=max_restarts, period=period, backoff=backoff, rng=rng
    ) as runtime:
        yield runtime


@asynccontextmanager
async def run_root(
    make: Callable[[Supervisor, _Cell], RuntimeT],
    *,
    max_restarts: int = 3,
    period: float = 5.0,
    backoff: Backoff | None = None,
    rng: random.Random | None = None,
) -> AsyncIterator[RuntimeT]:
    """Run a root supervisor for the duration of the ``async with`` block and yield
    ``make(root, cell)`` -- a :class:`Runtime`, or a subclass of it -- over it.

    Guarantees:

    * Leaving the block stops every actor, in reverse start order, each gracefully and then
      cancelled at its shutdown deadline -- also when the block is left by an exception or a
      cancellation (the stop is shielded from it).
    * If the root supervisor gives up (a child restarted too often), the block is cancelled and
      :class:`SupervisorGaveUp` is raised to the caller, chained to the child failure.
    * ``KeyboardInterrupt`` and a cancellation from outside pass through untouched.
    * No exception group comes out for one cause: an exception raised in the block comes out
      as itself (``except ValueError`` catches it), with its own traceback; a failure of the
      runtime as its own class. Only several unrelated failures at once form a group.
    * No task started by the runtime outlives the block, and nothing is global: two runtimes in
      one process are independent.

    The other arguments configure the root supervisor (see :class:`Supervisor`).
    """
    root = Supervisor(
        strategy=Strategy.ONE_FOR_ONE,
        max_restarts=max_restarts,
        period=period,
        backoff=backoff,
        rng=rng,
    )
    cell = _Cell("root", owner=None, mailbox_size=None, shutdown=math.inf)
    one = OneCause()
    with one:
        async with trio.open_nursery() as nursery:
            await nursery.start(_run_root, cell, root)
            try:
                with one.own():
                    yield make(root, cell)
            finally:
                with trio.CancelScope(shield=True):
                    await cell.stop()
                    await cell.wait_stopped()


async def _run_root(
    cell: _Cell, root: Supervisor, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    # Shielded: a cancellation from outside must not cut the tree down mid-stop. The tree is
    # stopped through the root's cell instead (gracefully, each child bounded by its deadline).
    with trio.CancelScope(shield=True):
        await run_incarnation(cell, lambda: root, None, task_status=task_status)
