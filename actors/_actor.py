"""Actors: a task that owns its state and a mailbox, and the references others use to reach it."""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import attrs
import trio

from protocols.errors import AgentsError, Category

if TYPE_CHECKING:
    from ._supervisor import Supervisor

__all__ = [
    "Actor",
    "ActorExit",
    "ActorRef",
    "ActorState",
    "ActorStatistics",
    "ActorStopped",
    "ExitKind",
    "ReplyStream",
]

log = logging.getLogger(__name__)

MsgT = TypeVar("MsgT")
ReplyT = TypeVar("ReplyT")
ItemT = TypeVar("ItemT")

#: Default mailbox capacity: small, so a flooded actor pushes back on its senders quickly.
DEFAULT_MAILBOX_SIZE = 16


class ExitKind(enum.StrEnum):
    """How one incarnation of an actor ended."""

    #: It ended by itself: it called :meth:`Actor.stop` and drained its mailbox.
    NORMAL = "normal"
    #: It was stopped from outside (its ref, its supervisor, or the runtime shutting down).
    SHUTDOWN = "shutdown"
    #: It raised: a handler, a lifecycle hook or one of its background tasks failed.
    FAILED = "failed"


@attrs.frozen
class ActorExit:
    """How an actor incarnation ended. ``error`` is the failure for ``failed``, else ``None``;
    ``killed`` is true when a stop had to cancel it because its shutdown deadline passed."""

    kind: ExitKind
    error: BaseException | None = attrs.field(default=None, eq=False)
    killed: bool = False


class ActorState(enum.StrEnum):
    """Where an actor is in its life, as seen through its :class:`ActorRef`."""

    #: An incarnation is running its ``on_start`` hook.
    STARTING = "starting"
    #: An incarnation is taking messages.
    RUNNING = "running"
    #: Between incarnations: the last one ended and the supervisor is deciding or restarting.
    RESTARTING = "restarting"
    #: A stop was requested; no new messages are accepted.
    STOPPING = "stopping"
    #: Stopped for good; :meth:`ActorRef.wait_stopped` has returned.
    STOPPED = "stopped"


class ActorStopped(AgentsError):
    """The actor a message was for is stopped or stopping, or it died before replying.

    ``name`` names the actor; ``__cause__`` is the failure that killed it, when one did.
    """

    default_code = "actor_stopped"
    default_category = Category.SYSTEM

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


@attrs.frozen
class ActorStatistics:
    """A snapshot of one actor, across its incarnations."""

    name: str
    state: ActorState
    #: Messages waiting in the current mailbox.
    mailbox_depth: int
    mailbox_size: int
    #: Messages taken from the mailbox, over all incarnations.
    handled: int
    #: How many times it was restarted.
    restarts: int


# ---------------------------------------------------------------------------------------------
# Envelopes: what travels through a mailbox.


class _Reply:
    """A one-shot reply slot. Cheaper than a channel pair: an Event and two fields."""

    __slots__ = ("error", "event", "value")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def resolve(self, value: Any) -> None:
        self.value = value
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


class _StreamState:
    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: BaseException | None = None


@attrs.frozen(slots=True)
class _Cast:
    message: Any


@attrs.frozen(slots=True)
class _Call:
    message: Any
    reply: _Reply


@attrs.frozen(slots=True)
class _Stream:
    message: Any
    send: trio.MemorySendChannel[Any]
    state: _StreamState


_Envelope = _Cast | _Call | _Stream


def _stopped(name: str, why: str, cause: BaseException | None) -> ActorStopped:
    error = ActorStopped(f"actor {name!r} {why}", name=name)
    if cause is not None and not isinstance(cause, trio.Cancelled):
        error.__cause__ = cause
    return error


# ---------------------------------------------------------------------------------------------
# The cell: one supervised child, stable across restarts. Refs point at the cell, so they always
# reach the current incarnation.


class _Incarnation:
    __slots__ = ("actor", "done", "scope")

    def __init__(self, actor: Actor[Any, Any]) -> None:
        self.actor = actor
        self.scope = trio.CancelScope()
        self.done = trio.Event()


class _Cell:
    """State shared by every ref to one child. Mutated only from trio tasks, without awaiting
    between related changes, so a state and its mailbox are always consistent."""

    __slots__ = (
        "_changed",
        "exit",
        "handled",
        "incarnation",
        "mailbox",
        "mailbox_size",
        "name",
        "owner",
        "restarts",
        "shutdown",
        "state",
        "stop_kind",
        "stopped",
    )

    def __init__(
        self, name: str, *, owner: Supervisor | None, mailbox_size: int | None, shutdown: float
    ) -> None:
        self.name = name
        self.owner = owner
        self.mailbox_size = mailbox_size
        self.shutdown = shutdown
        self.state = ActorState.STARTING
        self.mailbox: trio.MemorySendChannel[_Envelope] | None = None
        self.incarnation: _Incarnation | None = None
        self.exit: ActorExit | None = None
        self.stop_kind: ExitKind | None = None
        self.handled = 0
        self.restarts = 0
        self._changed = trio.Event()
        self.stopped = trio.Event()

    def set_state(self, state: ActorState) -> None:
        self.state = state
        self._changed.set()
        self._changed = trio.Event()
        if state is ActorState.STOPPED:
            self.stopped.set()

    async def wait_changed(self) -> None:
        await self._changed.wait()

    async def deliver(self, envelope: _Envelope) -> None:
        """Put ``envelope`` in the current incarnation's mailbox, waiting for space and through a
        restart; raise :class:`ActorStopped` at once if the actor is stopping or stopped."""
        while True:
            state = self.state
            if state is ActorState.RUNNING or state is ActorState.STARTING:
                mailbox = self.mailbox
                changed = self._changed  # taken first, so a change during the send is not missed
                if mailbox is not None:
                    try:
                        await mailbox.send(envelope)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        # The incarnation is ending (it stopped itself, or died): wait until its
                        # state moves on, then look again.
                        await changed.wait()
                        continue
                    return
                await changed.wait()
            elif state is ActorState.RESTARTING:
                await self.wait_changed()
            else:
                raise _stopped(self.name, f"is {state.value}", None)

    def deliver_nowait(self, envelope: _Envelope) -> None:
        state = self.state
        if state is ActorState.STOPPING or state is ActorState.STOPPED:
            raise _stopped(self.name, f"is {state.value}", None)
        mailbox = self.mailbox
        if mailbox is None or state is ActorState.RESTARTING:
            raise trio.WouldBlock
        try:
            mailbox.send_nowait(envelope)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise trio.WouldBlock from None

    def go_down(self) -> None:
        """The incarnation is failing: refuse new messages now (senders wait for the next
        incarnation), before anyone waiting on it is told."""
        if self.state is ActorState.RUNNING or self.state is ActorState.STARTING:
            self.set_state(ActorState.RESTARTING)
        if self.mailbox is not None:
            self.mailbox.close()

    def request_stop(self, kind: ExitKind) -> None:
        """Stop accepting messages; the incarnation drains its mailbox, runs ``on_stop`` and ends.
        The first request decides the exit kind."""
        if self.stop_kind is None:
            self.stop_kind = kind
        if kind is ExitKind.SHUTDOWN and self.state is not ActorState.STOPPED:
            self.set_state(ActorState.STOPPING)
        if self.mailbox is not None:
            self.mailbox.close()

    async def stop(self, kind: ExitKind = ExitKind.SHUTDOWN) -> None:
        """Stop the current incarnation: gracefully, then by cancellation once the shutdown
        deadline passes. Returns when it has ended (at once if none is running)."""
        incarnation = self.incarnation
        self.request_stop(kind)
        if incarnation is None:
            return
        with trio.move_on_after(self.shutdown):
            await incarnation.done.wait()
            return
        incarnation.scope.cancel(reason=f"shutdown deadline of actor {self.name!r} passed")
        await incarnation.done.wait()

    def statistics(self) -> ActorStatistics:
        mailbox = self.mailbox
        depth = mailbox.statistics().current_buffer_used if mailbox is not None else 0
        size = self.mailbox_size
        if self.incarnation is not None:
            size = self.incarnation.actor.mailbox_size if size is None else size
        return ActorStatistics(
            name=self.name,
            state=self.state,
            mailbox_depth=depth,
            mailbox_size=DEFAULT_MAILBOX_SIZE if size is None else size,
            handled=self.handled,
            restarts=self.restarts,
        )


# ---------------------------------------------------------------------------------------------
# Public classes


class Actor(Generic[MsgT, ReplyT]):
    """Base class of actors: state owned by one task, reached only through its mailbox.

    Subclass it and override :meth:`handle` (and optionally :meth:`on_start`, :meth:`on_stop`,
    :meth:`handle_stream`). The runtime guarantees:

    * Messages are handled one at a time, in mailbox order, by a single task: no locks needed.
    * :meth:`on_start` completes before the actor is reported ready and takes its first message.
    * An exception from a handler, a hook or a task in :attr:`nursery` ends the incarnation as
      ``failed``; its supervisor decides whether to restart it (with a fresh instance built by
      the spec's factory and a fresh mailbox). A caller waiting on that message gets
      :class:`ActorStopped` chained to the exception.
    * :meth:`on_stop` runs after the last message of every incarnation that ends by a stop or a
      failure (not after a hard kill at the shutdown deadline), bounded by the shutdown deadline.

    ``mailbox_size`` (class attribute, default 16) bounds the mailbox; senders wait when it is full.
    """

    mailbox_size: ClassVar[int] = DEFAULT_MAILBOX_SIZE

    _cell: _Cell | None = None
    _nursery: trio.Nursery | None = None

    @property
    def name(self) -> str:
        """The name this actor runs under (set when it starts)."""
        return self._cell.name if self._cell is not None else type(self).__name__

    @property
    def nursery(self) -> trio.Nursery:
        """A nursery for this incarnation's background tasks; they are cancelled when it ends,
        and one that raises fails the actor."""
        if self._nursery is None:
            raise RuntimeError(f"actor {self.name!r} is not running")
        return self._nursery

    async def on_start(self) -> None:
        """Called in the actor's task before it is reported ready. Raising fails the start."""

    async def handle(self, message: MsgT) -> ReplyT:
        """Handle one message; the return value is the reply to :meth:`ActorRef.call`."""
        raise NotImplementedError(f"{type(self).__name__} does not handle messages")

    async def handle_stream(self, message: MsgT, send: trio.MemorySendChannel[Any]) -> None:
        """Handle a message whose reply is a stream: send items on ``send`` (the runtime closes it
        afterwards). When the consumer closes its end, sends raise ``BrokenResourceError``; letting
        that propagate out of this method ends the stream quietly."""
        raise NotImplementedError(f"{type(self).__name__} does not stream replies")

    async def on_stop(self, exit: ActorExit) -> None:
        """Called when the incarnation ends (see the class docstring). Errors are logged only."""

    def stop(self) -> None:
        """Ask this actor to end by itself (``normal`` exit) after the messages already queued.

        Whether it is then restarted is its restart type's decision (``permanent`` restarts even
        after a normal exit).
        """
        if self._cell is not None:
            self._cell.request_stop(ExitKind.NORMAL)

    def statistics(self) -> ActorStatistics:
        """A snapshot of this actor (see :class:`ActorStatistics`)."""
        if self._cell is None:
            raise RuntimeError(f"actor {self.name!r} has not been started")
        return self._cell.statistics()


class ReplyStream(Generic[ItemT]):
    """The consumer's end of a streamed reply: an async iterator of the actor's items.

    Iteration ends when the actor finishes the stream; if the actor dies first, it raises
    :class:`ActorStopped`. Leaving the ``async with ref.stream(...)`` block closes this end, which
    tells the actor to stop producing.
    """

    __slots__ = ("_name", "_receive", "_state")

    def __init__(
        self, receive: trio.MemoryReceiveChannel[ItemT], state: _StreamState, name: str
    ) -> None:
        self._receive = receive
        self._state = state
        self._name = name

    def __aiter__(self) -> ReplyStream[ItemT]:
        return self

    async def __anext__(self) -> ItemT:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            if self._state.error is not None:
                raise _stopped(self._name, "died while streaming", self._state.error) from None
            raise StopAsyncIteration from None


class ActorRef(Generic[MsgT, ReplyT]):
    """How everyone else reaches an actor. Cheap to copy around; compares equal per actor.

    A ref always resolves to the actor's *current* incarnation: after a restart, the same ref
    reaches the new instance (messages queued in the dead incarnation's mailbox are lost, and
    their callers get :class:`ActorStopped`). While the actor is restarting, :meth:`send` and
    :meth:`call` wait for it; once it is stopping or stopped, they raise :class:`ActorStopped`
    at once. No method takes a timeout: bound waits with your own cancel scope.
    """

    __slots__ = ("_cell",)

    def __init__(self, cell: _Cell) -> None:
        self._cell = cell

    def __repr__(self) -> str:
        return f"<ActorRef {self._cell.name!r} {self._cell.state.value}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorRef) and other._cell is self._cell

    def __hash__(self) -> int:
        return id(self._cell)

    @property
    def name(self) -> str:
        """The actor's name."""
        return self._cell.name

    @property
    def state(self) -> ActorState:
        """Where the actor is in its life right now."""
        return self._cell.state

    async def send(self, message: MsgT) -> None:
        """Queue ``message`` without waiting for it to be handled (waits while the mailbox is full
        or the actor is restarting). Raises :class:`ActorStopped` if it is stopping or stopped."""
        await self._cell.deliver(_Cast(message))

    def send_nowait(self, message: MsgT) -> None:
        """Queue ``message`` if that needs no waiting. Raises :class:`trio.WouldBlock` when the
        mailbox is full or the actor is between incarnations, :class:`ActorStopped` when it is
        stopping or stopped."""
        self._cell.deliver_nowait(_Cast(message))

    async def call(self, message: MsgT) -> ReplyT:
        """Send ``message`` and wait for the actor's reply (the return value of its ``handle``).

        Raises :class:`ActorStopped` if the actor is stopping or stopped, or dies before replying
        (chained to the failure). If the caller is cancelled while waiting, the actor is not
        affected: it still handles the message and its reply is dropped.
        """
        reply = _Reply()
        await self._cell.deliver(_Call(message, reply))
        await reply.event.wait()
        if reply.error is not None:
            raise reply.error
        return reply.value  # type: ignore[no-any-return]

    @asynccontextmanager
    async def stream(self, message: MsgT, *, buffer: int = 0) -> AsyncIterator[ReplyStream[Any]]:
        """Send ``message`` to :meth:`Actor.handle_stream` and iterate over the items it sends.

        ``buffer`` is how many items the actor may produce ahead of the consumer (0: each send
        waits for the consumer). Leaving the block early tells the actor to stop producing.
        """
        send, receive = trio.open_memory_channel[Any](buffer)
        state = _StreamState()
        try:
            await self._cell.deliver(_Stream(message, send, state))
        except BaseException:
            send.close()
            receive.close()
            raise
        with receive:
            yield ReplyStream(receive, state, self._cell.name)

    async def stop(self) -> ActorExit:
        """Stop the actor for good (no restart) and return how its last incarnation ended.

        Graceful first (queued messages are handled, ``on_stop`` runs), cancelled once its
        shutdown deadline passes. Stopping a stopped actor returns its exit at once.
        """
        owner = self._cell.owner
        if owner is not None:
            return await owner.terminate_child(self)
        await self._cell.stop()
        return await self.wait_stopped()

    async def wait_stopped(self) -> ActorExit:
        """Wait until the actor is stopped for good and return how its last incarnation ended."""
        await self._cell.stopped.wait()
        assert self._cell.exit is not None
        return self._cell.exit

    def statistics(self) -> ActorStatistics:
        """A snapshot of the actor (see :class:`ActorStatistics`)."""
        return self._cell.statistics()


# ---------------------------------------------------------------------------------------------
# Running one incarnation


def failure_of(error: BaseException) -> BaseException:
    """The failure to report for ``error``: a group holding exactly one real (non-Cancelled)
    exception is reduced to that exception, recursively; anything else is returned as it is."""
    while isinstance(error, BaseExceptionGroup):
        real = [leaf for leaf in _leaves(error) if not isinstance(leaf, trio.Cancelled)]
        if len(real) != 1:
            return error
        error = real[0]
    return error


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            leaves.extend(_leaves(error))
        else:
            leaves.append(error)
    return leaves


async def _dispatch(actor: Actor[Any, Any], envelope: _Envelope, cell: _Cell) -> None:
    if type(envelope) is _Call:
        reply = envelope.reply
        try:
            value = await actor.handle(envelope.message)
        except BaseException as error:
            cell.go_down()
            reply.fail(_stopped(cell.name, "failed while handling the call", error))
            raise
        reply.resolve(value)
    elif type(envelope) is _Cast:
        await actor.handle(envelope.message)
    else:
        assert isinstance(envelope, _Stream)
        send = envelope.send
        try:
            async with send:
                await actor.handle_stream(envelope.message, send)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if send.statistics().open_receive_channels:
                raise  # not our consumer leaving: a real failure
        except BaseException as error:
            cell.go_down()
            envelope.state.error = error
            raise


def _refuse_pending(receive: trio.MemoryReceiveChannel[_Envelope], error: ActorStopped) -> None:
    """Resolve every envelope still queued in a dead mailbox, so no caller waits forever."""
    while True:
        try:
            envelope = receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return
        if type(envelope) is _Call:
            envelope.reply.fail(error)
        elif type(envelope) is _Stream:
            envelope.state.error = error
            envelope.send.close()


async def run_incarnation(
    cell: _Cell,
    factory: Callable[[], Actor[Any, Any]],
    on_exit: Callable[[ActorExit], Awaitable[None]] | None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one incarnation of the actor in ``cell``: build it, start it, serve its mailbox.

    Reports ready through ``task_status`` after ``on_start``; an error before that propagates to
    the starter. Afterwards every outcome is recorded in ``cell.exit`` and passed to ``on_exit``
    (the supervisor's decision); with no ``on_exit``, a failure is raised instead. A cancellation
    from outside is never swallowed.
    """
    actor = factory()
    if not isinstance(actor, Actor):
        raise TypeError(f"the factory of {cell.name!r} returned {actor!r}, not an Actor")
    size = actor.mailbox_size if cell.mailbox_size is None else cell.mailbox_size
    send, receive = trio.open_memory_channel[_Envelope](size)
    incarnation = _Incarnation(actor)
    actor._cell = cell
    cell.incarnation = incarnation
    cell.mailbox = send
    cell.stop_kind = None  # a new incarnation starts with a clean slate
    cell.exit = None
    cell.set_state(ActorState.STARTING)
    started = False
    exit: ActorExit | None = None
    try:
        with incarnation.scope:
            try:
                async with trio.open_nursery() as nursery:
                    actor._nursery = nursery
                    await actor.on_start()
                    if cell.state is ActorState.STARTING:
                        cell.set_state(ActorState.RUNNING)
                    started = True
                    task_status.started()
                    async for envelope in receive:
                        cell.handled += 1
                        await _dispatch(actor, envelope, cell)
                    nursery.cancel_scope.cancel(reason="actor stopped")
                exit = ActorExit(cell.stop_kind or ExitKind.NORMAL)
            except Exception as error:
                exit = ActorExit(ExitKind.FAILED, failure_of(error))
                if not started:
                    raise
            actor._nursery = None
            with trio.move_on_after(cell.shutdown):
                try:
                    await actor.on_stop(exit)
                except Exception:
                    log.exception("on_stop of actor %r raised", cell.name)
        if incarnation.scope.cancelled_caught:
            if not started:
                raise _stopped(cell.name, "was stopped while starting", None)
            kind = exit.kind if exit is not None else ExitKind.SHUTDOWN
            exit = ActorExit(kind, exit.error if exit is not None else None, killed=True)
    finally:
        cell.exit = exit if exit is not None else ActorExit(ExitKind.SHUTDOWN)
        if exit is None:
            # Cancelled from outside (its supervisor is being torn down): nobody will restart it.
            cell.set_state(ActorState.STOPPED)
        elif cell.state is not ActorState.STOPPING:
            cell.set_state(ActorState.RESTARTING)
        _refuse_pending(receive, _stopped(cell.name, "stopped before replying", cell.exit.error))
        receive.close()
        send.close()
        cell.mailbox = None
        incarnation.done.set()
    assert exit is not None
    if on_exit is not None:
        await on_exit(exit)
        return
    cell.set_state(ActorState.STOPPED)
    if exit.kind is ExitKind.FAILED and exit.error is not None:
        raise exit.error
