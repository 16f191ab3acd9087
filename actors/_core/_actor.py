"""Actors: a task that owns its state and a mailbox, and the references others use to reach it."""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import attrs
import trio

from protocols.errors import AgentsError, Category

from ._mailbox import Mailbox

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
    __slots__ = ("_done", "actor", "finished", "killed", "scope")

    def __init__(self, actor: Actor[Any, Any]) -> None:
        self.actor = actor
        # The scope a kill cancels: the actor's nursery scope while it runs (no separate scope:
        # memory per idle actor), a short-lived one around on_stop after a failure.
        self.scope: trio.CancelScope | None = None
        self.killed = False
        self.finished = False
        self._done: trio.Event | None = None  # made only if somebody waits (memory per actor)

    def kill(self, reason: str) -> None:
        """Cancel the incarnation now (a shutdown deadline passed)."""
        self.killed = True
        if self.scope is not None:
            self.scope.cancel(reason=reason)

    def enter(self, scope: trio.CancelScope) -> None:
        """Make ``scope`` the one a kill cancels (cancelled at once if a kill came first)."""
        self.scope = scope
        if self.killed:
            scope.cancel(reason="actor killed at its shutdown deadline")

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()

    async def wait_finished(self) -> None:
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = trio.Event()
        await self._done.wait()


class _Cell:
    """State shared by every ref to one child. Mutated only from trio tasks, without awaiting
    between related changes, so a state and its mailbox are always consistent."""

    __slots__ = (
        "_changed",
        "_stopped",
        "child",
        "exit",
        "handled",
        "incarnation",
        "mailbox",
        "mailbox_size",
        "name",
        "owner",
        "restarts",
        "shutdown",
        "shutdown_override",
        "state",
        "stop_kind",
    )

    def __init__(
        self,
        name: str,
        *,
        owner: Supervisor | None,
        mailbox_size: int | None,
        shutdown: float | None,
    ) -> None:
        self.name = name
        self.owner = owner
        self.mailbox_size = mailbox_size
        # The spec's shutdown, if it gave one; otherwise each incarnation's class default applies.
        self.shutdown_override = shutdown
        self.shutdown = shutdown if shutdown is not None else Actor.default_shutdown
        self.state = ActorState.STARTING
        self.mailbox: Mailbox[_Envelope] | None = None
        self.incarnation: _Incarnation | None = None
        self.exit: ActorExit | None = None
        self.stop_kind: ExitKind | None = None
        self.handled = 0
        self.restarts = 0
        # The owning supervisor's record of this child (opaque here).
        self.child: Any = None
        # Events are made only when somebody waits on them: most actors are never waited on,
        # and an Event per actor per state is memory a runtime of 100,000 actors notices.
        self._changed: trio.Event | None = None
        self._stopped: trio.Event | None = None

    def set_state(self, state: ActorState) -> None:
        self.state = state
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        if state is ActorState.STOPPED and self._stopped is not None:
            self._stopped.set()

    def let_go(self) -> None:
        """The actor has stopped for good: the cell lets go of its last incarnation once that
        has finished (which holds the actor, which holds the cell), so that a stopped actor is
        freed when its last ref goes rather than left in a cycle for the garbage collector.
        What the cell reports stays the same (its mailbox size is kept)."""
        incarnation = self.incarnation
        if incarnation is None or not incarnation.finished:
            return
        if self.mailbox_size is None:
            self.mailbox_size = incarnation.actor.mailbox_size
        self.incarnation = None

    def changed_event(self) -> trio.Event:
        """An event set at the next state change."""
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    async def wait_stopped(self) -> None:
        if self.state is ActorState.STOPPED:
            await trio.lowlevel.checkpoint()
            return
        if self._stopped is None:
            self._stopped = trio.Event()
        await self._stopped.wait()

    async def deliver(self, envelope: _Envelope) -> None:
        """Put ``envelope`` in the current incarnation's mailbox, waiting for space and through a
        restart; raise :class:`ActorStopped` at once if the actor is stopping or stopped."""
        while True:
            state = self.state
            if state is ActorState.RUNNING or state is ActorState.STARTING:
                mailbox = self.mailbox
                changed = self.changed_event()  # taken first: a change during the send is seen
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
                await self.changed_event().wait()
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
            self.mailbox.close_sending()

    def request_stop(self, kind: ExitKind) -> None:
        """Stop accepting messages; the incarnation drains its mailbox, runs ``on_stop`` and ends.
        The first request decides the exit kind."""
        if self.stop_kind is None:
            self.stop_kind = kind
        if kind is ExitKind.SHUTDOWN and self.state is not ActorState.STOPPED:
            self.set_state(ActorState.STOPPING)
        if self.mailbox is not None:
            self.mailbox.close_sending()

    async def stop(self, kind: ExitKind = ExitKind.SHUTDOWN) -> None:
        """Stop the current incarnation: gracefully, then by cancellation once the shutdown
        deadline passes. Returns when it has ended (at once if none is running)."""
        incarnation = self.incarnation
        self.request_stop(kind)
        if incarnation is None:
            return
        with trio.move_on_after(self.shutdown):
            await incarnation.wait_finished()
            return
        incarnation.kill(f"shutdown deadline of actor {self.name!r} passed")
        await incarnation.wait_finished()

    def statistics(self) -> ActorStatistics:
        mailbox = self.mailbox
        depth = len(mailbox) if mailbox is not None else 0
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

    Class attributes: ``mailbox_size`` (default 16) bounds the mailbox, senders wait when it is
    full; ``default_shutdown`` (default 5 s) is how long a stop may take; ``reply_errors`` lists
    exceptions that are answers to the caller rather than failures.
    """

    mailbox_size: ClassVar[int] = DEFAULT_MAILBOX_SIZE
    #: Seconds a stop may take before the actor is cancelled, unless its ChildSpec says otherwise.
    default_shutdown: ClassVar[float] = 5.0
    #: Exception types that :meth:`handle` may raise *to the caller*: they are delivered to the
    #: caller of :meth:`ActorRef.call` (logged for a send) and the actor keeps running. Any other
    #: exception fails the actor.
    reply_errors: ClassVar[tuple[type[Exception], ...]] = ()

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

    def undelivered(self, message: MsgT, error: ActorStopped) -> None:
        """Called, synchronously, for each message sent with :meth:`ActorRef.send` that this
        incarnation took but will never handle to its end, or that was still queued when it
        ended (a call or a stream is refused to its caller instead). ``error`` says why. The
        default does nothing; an actor whose senders wait on an outcome of their own answers
        them here, so nobody waits for ever. It must not raise."""

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
            cause = self._state.error
            if cause is None:
                raise StopAsyncIteration from None
            if isinstance(cause, ActorStopped):
                raise cause from cause.__cause__
            error = _stopped(self._name, "died while streaming", cause)
            raise error from error.__cause__


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
        await self._cell.wait_stopped()
        assert self._cell.exit is not None
        return self._cell.exit

    def statistics(self) -> ActorStatistics:
        """A snapshot of the actor (see :class:`ActorStatistics`)."""
        return self._cell.statistics()
