"""How a run runs its guardrails (:mod:`actors.guardrails`): several at once, the first to
trip ending the check, inside the run's scope; and its input guards alongside its first
provider call."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import trio

from protocols.messages import GuardrailTrip, Role, StopReason, ToolCall

if TYPE_CHECKING:
    from ._run_loop import _Run
    from .guardrails import Guardrail

#: What each call of a turn a tool guard stopped is answered with (``{name}``, ``{reason}``).
TOOL_TRIPPED = "not executed: guardrail {name!r} stopped the run: {reason}"


def input_text(run: _Run) -> str:
    """The text input guards check: the text of the user's messages the run was given, joined
    by a blank line -- for a durable job's run, which finds its input in its conversation, the
    user's messages that end it, until the run has made a provider call."""
    given = [m for m in run.request.input if m.role is Role.USER]
    if not given and run.journal is not None and run.turns_made == 0:
        for message in reversed(run.conversation._history_now().messages):
            if message.role is not Role.USER:
                break
            given.insert(0, message)
    return "\n\n".join(m.content for m in given if m.content)


async def before(run: _Run, guards: Sequence[Guardrail]) -> list[Guardrail]:
    """Run the input guards that go before the run's first provider call (``when="before"``,
    and every one in a journaled run); return those that run alongside it. On a trip the run
    is marked :func:`tripped`. A run with no input text (nothing new to check) checks none."""
    inputs = [guard for guard in guards if guard.kind == "input"]
    if not inputs:
        return []
    subject = input_text(run)
    if not subject:
        return []
    journaled = run.journal is not None
    first = [guard for guard in inputs if journaled or guard.when == "before"]
    if first:
        trip = await check(run, [(guard, subject, None) for guard in first])
        if trip is not None:
            tripped(run, trip)
            return []
    return [guard for guard in inputs if not (journaled or guard.when == "before")]


async def after(run: _Run, guards: Sequence[Guardrail]) -> StopReason:
    """The run would complete: its output guards check its final answer."""
    outputs = [guard for guard in guards if guard.kind == "output"]
    if not outputs:
        return StopReason.COMPLETE
    answer = next((m.content for m in reversed(run.appended) if m.role.value == "assistant"), "")
    trip = await check(run, [(guard, answer, None) for guard in outputs])
    return StopReason.COMPLETE if trip is None else tripped(run, trip)


async def check(
    run: _Run, checks: Sequence[tuple[Guardrail, Any, str | None]]
) -> GuardrailTrip | None:
    """Run ``checks`` (guard, subject, call id) at once inside ``run``: the first to trip ends
    the others and is the result; ``None`` when all passed. A check that raises ends the
    others and its exception is raised (itself, not in a group)."""
    if len(checks) == 1:
        guard, subject, call_id = checks[0]
        reason = await guard.verdict(run, subject)
        return None if reason is None else GuardrailTrip(guard.name, guard.kind, reason, call_id)
    tripped: list[GuardrailTrip] = []
    failed: list[Exception] = []
    async with trio.open_nursery() as nursery:

        async def one(guard: Guardrail, subject: Any, call_id: str | None) -> None:
            try:
                reason = await guard.verdict(run, subject)
            except Exception as error:
                failed.append(error)
                nursery.cancel_scope.cancel()
                return
            if reason is not None:
                tripped.append(GuardrailTrip(guard.name, guard.kind, reason, call_id))
                nursery.cancel_scope.cancel()

        for guard, subject, call_id in checks:
            nursery.start_soon(one, guard, subject, call_id)
    if failed:
        raise failed[0]
    return tripped[0] if tripped else None


class Watch:
    """Input guards running alongside a provider call: :attr:`trip` once one tripped."""

    def __init__(self) -> None:
        self.trip: GuardrailTrip | None = None
        self.failure: Exception | None = None


@contextlib.asynccontextmanager
async def alongside(run: _Run, guards: Sequence[Guardrail]) -> AsyncIterator[Watch]:
    """The block runs while ``guards`` check ``subject``; leaving it waits for them to end. A
    guard that trips cancels the block (its provider call) -- the ``async with`` then ends
    normally with :attr:`Watch.trip` set. A guard that raises cancels the block and its
    exception is raised; the block's own exception is raised as itself (never in a group)."""
    watch = Watch()
    subject = input_text(run)
    body: Exception | None = None
    async with trio.open_nursery() as nursery:

        async def guard() -> None:
            try:
                watch.trip = await check(run, [(g, subject, None) for g in guards])
            except Exception as error:
                watch.failure = error
                nursery.cancel_scope.cancel()
                return
            if watch.trip is not None:
                nursery.cancel_scope.cancel()

        nursery.start_soon(guard)
        try:
            yield watch
        except Exception as error:  # the block failed (a provider error): the guards stop
            body = error
            nursery.cancel_scope.cancel()
    if body is not None:
        raise body
    if watch.failure is not None:
        raise watch.failure


def void_first(run: _Run, trip: GuardrailTrip) -> StopReason:
    """An input guard tripped on the run's first call: nothing of that call is committed.
    What it produced is charged (cut mid-stream: its partial, by estimate with a budget), and
    what it showed is voided by a ``rewind`` (in the log and as a chunk)."""
    stream, run.stream = run.stream, None
    if stream is not None:
        run.settle_usage(stream.partial)
    run.void_shown()
    return tripped(run, trip)


def tripped(run: _Run, trip: GuardrailTrip) -> StopReason:
    """``run`` ends for ``trip``: recorded for its result, its log and its listeners."""
    run.tripped = trip
    live = run.live
    if live is not None:
        live.add(
            "guardrail",
            {"name": trip.name, "kind": trip.kind, "reason": trip.reason, "call_id": trip.call_id},
        )
    run.notify("guardrail", reason=trip.reason, guardrail=trip)
    return StopReason.GUARDRAIL


def tool_checks(
    guards: Sequence[Guardrail], calls: Sequence[ToolCall]
) -> list[tuple[Guardrail, Any, str | None]]:
    """The (guard, call, call id) checks of ``calls`` by the tool guards covering them."""
    return [(g, call, call.id) for call in calls for g in guards if g.covers(call)]
