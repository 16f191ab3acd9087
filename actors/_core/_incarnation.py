"""Running one incarnation of an actor: its mailbox loop, each message dispatched to its
handler, the stop hook, and what is left in the mailbox refused when it ends.

A supervisor (or the runtime, for the root) calls :func:`run_incarnation` once per start; the
cell it is given outlives incarnations, so references reach whichever one is current.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ._actor import (
    Actor,
    ActorExit,
    ActorState,
    ExitKind,
    _Call,
    _Cast,
    _Cell,
    _Envelope,
    _Incarnation,
    _stopped,
    _Stream,
)
from ._mailbox import Mailbox

__all__ = ["failure_of", "run_incarnation"]

# Logged under the actor module's name, where the actor core has always logged.
log = logging.getLogger("actors._core._actor")


def failure_of(error: BaseException) -> BaseException:
    """The failure to report for ``error``: groups are unwrapped as long as they hold exactly
    one member that is not a cancellation; anything else is returned as it is (several real
    failures stay a group)."""
    while isinstance(error, BaseExceptionGroup):
        real = [member for member in error.exceptions if not _only_cancelled(member)]
        if len(real) != 1:
            return error
        error = real[0]
    return error


def _is_failure(error: BaseException) -> bool:
    """Whether ``error`` holds a real failure (an ``Exception`` that is not a cancellation) and
    no interrupt (``KeyboardInterrupt``, ``SystemExit``) that must propagate as it is."""
    leaves = _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    if any(not isinstance(leaf, Exception | trio.Cancelled) for leaf in leaves):
        return False
    return any(isinstance(leaf, Exception) for leaf in leaves)


def _only_cancelled(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_only_cancelled(member) for member in error.exceptions)
    return isinstance(error, trio.Cancelled)


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            leaves.extend(_leaves(error))
        else:
            leaves.append(error)
    return leaves


async def _dispatch(actor: Actor[Any, Any], envelope: _Envelope, cell: _Cell) -> None:
    """Handle one envelope. A handler's own failure is reported to its caller here, after the
    cell stops taking messages; a cancellation leaves the envelope for the incarnation's cleanup
    to refuse with the real cause (a failing background task, a kill)."""
    if type(envelope) is _Call:
        reply = envelope.reply
        try:
            value = await actor.handle(envelope.message)
        except actor.reply_errors as error:
            reply.fail(error)  # an answer, not a failure: the actor carries on
            return
        except Exception as error:
            cell.go_down()
            reply.fail(_stopped(cell.name, "failed while handling the call", failure_of(error)))
            raise
        reply.resolve(value)
    elif type(envelope) is _Cast:
        try:
            await actor.handle(envelope.message)
        except actor.reply_errors:
            log.warning("actor %r refused a message", cell.name, exc_info=True)
    else:
        assert isinstance(envelope, _Stream)
        send = envelope.send
        try:
            await actor.handle_stream(envelope.message, send)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            if send.statistics().open_receive_channels:
                # Not our consumer leaving: a real failure.
                cell.go_down()
                envelope.state.error = error
                raise
        except Exception as error:
            cell.go_down()
            envelope.state.error = failure_of(error)
            raise
        finally:
            # Synchronous close, after any error is recorded: a waiting consumer must never see
            # a clean end of a stream that failed.
            send.close()


def _refuse(
    envelope: _Envelope, name: str, cause: BaseException | None, actor: Actor[Any, Any]
) -> None:
    """Tell whoever waits on ``envelope`` that the actor is gone (no-op if already answered)."""
    if type(envelope) is _Cast:
        try:
            actor.undelivered(envelope.message, _stopped(name, "stopped before handling it", cause))
        except Exception:
            log.exception("undelivered() of actor %r raised", name)
    elif type(envelope) is _Call:
        if not envelope.reply.event.is_set():
            envelope.reply.fail(_stopped(name, "stopped before replying", cause))
    elif type(envelope) is _Stream:
        if envelope.state.error is None and envelope.send.statistics().open_receive_channels:
            envelope.state.error = cause if cause is not None else _stopped(name, "stopped", None)
        envelope.send.close()


def _refuse_pending(
    mailbox: Mailbox[_Envelope], name: str, cause: BaseException | None, actor: Actor[Any, Any]
) -> None:
    """Refuse every envelope still queued in a dead mailbox, so no caller waits forever."""
    while True:
        try:
            envelope = mailbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return
        _refuse(envelope, name, cause, actor)


async def _stop_hook(actor: Actor[Any, Any], exit: ActorExit, cell: _Cell) -> None:
    # When the actor is being stopped, the stopper enforces the shutdown deadline (and records
    # the kill); otherwise nobody does, so bound the hook here.
    stopper = cell.stop_kind is ExitKind.SHUTDOWN
    with trio.move_on_after(math.inf if stopper else cell.shutdown):
        try:
            await actor.on_stop(exit)
        except Exception:
            log.exception("on_stop of actor %r raised", cell.name)


async def run_incarnation(
    cell: _Cell,
    factory: Callable[[], Actor[Any, Any]],
    on_exit: Callable[[_Cell, ActorExit], Awaitable[None]] | None,
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
    mailbox = Mailbox[_Envelope](size)
    incarnation = _Incarnation(actor)
    actor._cell = cell
    cell.incarnation = incarnation
    cell.shutdown = (
        cell.shutdown_override if cell.shutdown_override is not None else actor.default_shutdown
    )
    cell.mailbox = mailbox
    cell.stop_kind = None  # a new incarnation starts with a clean slate
    cell.exit = None
    cell.set_state(ActorState.STARTING)
    started = stop_hook_ran = False
    current: _Envelope | None = None
    exit: ActorExit | None = None
    try:
        try:
            async with trio.open_nursery() as nursery:
                incarnation.enter(nursery.cancel_scope)
                actor._nursery = nursery
                await actor.on_start()
                if cell.state is ActorState.STARTING:
                    cell.set_state(ActorState.RUNNING)
                started = True
                task_status.started()
                # Let go of the starter's bookkeeping (~1 KB per idle actor otherwise).
                task_status = trio.TASK_STATUS_IGNORED
                while True:  # not `async for`: its __anext__ frame costs every idle actor 200 B
                    try:
                        envelope = await mailbox.receive()
                    except trio.EndOfChannel:
                        break
                    current = envelope
                    cell.handled += 1
                    await _dispatch(actor, envelope, cell)
                    current = None
                # on_stop runs while background tasks (a supervisor's children) still live,
                # so it can stop them gracefully; then whatever is left is cancelled.
                exit = ActorExit(cell.stop_kind or ExitKind.NORMAL)
                stop_hook_ran = True
                await _stop_hook(actor, exit, cell)
                nursery.cancel_scope.cancel(reason=f"actor {cell.name!r} stopped")
        except BaseException as error:
            if not _is_failure(error):
                raise  # a cancellation or an interrupt: never turned into an exit
            # (A failure racing a cancellation from outside arrives grouped with Cancelled;
            # dropping that Cancelled is safe: cancellation is level-triggered and recurs.)
            cell.go_down()
            failure = failure_of(error)
            exit = ActorExit(ExitKind.FAILED, failure)
            if not started:
                raise failure from failure.__cause__
            if not stop_hook_ran:
                stop_hook_ran = True
                actor._nursery = None
                with trio.CancelScope() as scope:
                    incarnation.enter(scope)
                    await _stop_hook(actor, exit, cell)
        actor._nursery = None
        if incarnation.killed:
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
        if current is not None:
            _refuse(current, cell.name, cell.exit.error, actor)
        mailbox.close_sending()
        mailbox.close_receiving()
        _refuse_pending(mailbox, cell.name, cell.exit.error, actor)
        cell.mailbox = None
        incarnation.finish()
    assert exit is not None
    if on_exit is not None:
        await on_exit(cell, exit)
        return
    cell.set_state(ActorState.STOPPED)
    cell.let_go()
    if exit.kind is ExitKind.FAILED and exit.error is not None:
        raise exit.error
