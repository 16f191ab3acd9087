"""What a caller does to jobs, given only their store: admit, cancel, answer, purge, wait.

:class:`~actors.durable.JobQueue` offers the same with its worker's shortcuts; the
``trio-agents jobs`` commands use these directly, from any process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from protocols.errors import ValidationError
from protocols.jobs import (
    AgentJob,
    Applied,
    ApprovalAnswer,
    Conflict,
    JobRecord,
    Priority,
    answer,
    cancel,
)

from .. import _tracing
from .._core._errors import raises_one_cause
from ._store import RunStore

__all__ = [
    "answer_job",
    "cancel_job",
    "existing_job",
    "purge_job",
    "submit_job",
    "wait_job",
]


async def submit_job(
    store: RunStore,
    job: AgentJob,
    *,
    key: str | None = None,
    priority: Priority | str = Priority.NORMAL,
    clock: Callable[[], float] = time.time,
) -> tuple[JobRecord, bool]:
    """Admit ``job`` durably; returns its record and whether it is new (``False``: the key's
    existing job). The OpenTelemetry trace context current here, if any, is recorded in the
    job's metadata (see ``docs/tracing.md``)."""
    job = _tracing.stamp_job(job)
    admitted = await store.admit(job, now=clock(), key=key, priority=Priority(priority))
    return admitted.record, admitted.created


async def existing_job(store: RunStore, id: str) -> JobRecord:
    """The job's record; :class:`~protocols.errors.ValidationError` when there is none."""
    record = await store.get(id)
    if record is None:
        raise ValidationError(f"no job {id!r} (never admitted, or purged)")
    return record


async def cancel_job(
    store: RunStore, id: str, *, clock: Callable[[], float] = time.time
) -> tuple[JobRecord, bool]:
    """Cancel the job: a waiting one ends ``cancelled`` at once, never running; a running one
    is marked, and its worker cuts its run (within a third of its lease) and ends it
    ``cancelled``. Returns the record afterwards and whether this call changed it (``False``:
    it had ended, or a cancel was already requested)."""
    while True:
        record = await existing_job(store, id)
        outcome = cancel(record, now=clock())
        if not isinstance(outcome, Applied):
            return record, False
        if await store.write(outcome):
            return outcome.record, True


async def answer_job(
    store: RunStore,
    id: str,
    call_id: str,
    allow: bool,
    reason: str = "",
    *,
    value: Any = None,
    clock: Callable[[], float] = time.time,
) -> JobRecord:
    """Answer an approval or a question the job waits for (see :meth:`JobQueue.answer
    <actors.durable.JobQueue.answer>`); an answer the question refuses raises
    :class:`~protocols.errors.ValidationError` and writes nothing."""
    given = ApprovalAnswer(call_id, bool(allow), reason, value)
    while True:
        record = await existing_job(store, id)
        outcome = answer(record, given, now=clock())
        if isinstance(outcome, Conflict):
            if outcome.reason == "duplicate":
                return record
            if outcome.reason == "revision":
                continue
            raise ValidationError(outcome.detail)
        if await store.write(outcome):
            return outcome.record


async def purge_job(store: RunStore, id: str, *, clock: Callable[[], float] = time.time) -> None:
    """Remove an ended job's record and journal, leaving a tombstone. Raises
    :class:`~protocols.errors.ValidationError` for a job that has not ended or does not
    exist."""
    outcome = await store.purge(id, now=clock())
    if outcome is None:
        raise ValidationError(f"no job {id!r}")
    if isinstance(outcome, Conflict):
        raise ValidationError(outcome.detail)


@raises_one_cause
async def wait_job(
    store: RunStore, id: str, *, poll: float = 0.5, wake: trio.Event | None = None
) -> JobRecord:
    """Wait until the job has ended and return its final record: as soon as the store says
    the job changed (:meth:`RunStore.watch`; other processes' changes too, on PostgreSQL), when
    ``wake`` is set, and every ``poll`` seconds in any case. What the store raises comes out as
    itself (a :class:`~actors.store.StoreError`), never in an exception group."""
    with store.watch() as watch:
        while True:
            record = await existing_job(store, id)
            if record.terminal:
                return record
            with trio.move_on_after(poll):
                async with trio.open_nursery() as nursery:

                    async def changed() -> None:
                        while id not in (ids := await watch.next()) and ids:
                            pass
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(changed)
                    if wake is not None:
                        await wake.wait()
                        nursery.cancel_scope.cancel()
