"""The job queue: workers that take durable jobs from a :class:`RunStore` and run them as
journaled agent runs, leased and fenced, continuing where a crashed worker stopped.

One queue is one worker (``owner``) with up to ``concurrency`` jobs at once; several queues --
in one process or in many, on one store -- share the jobs between them. A job is acquired with
a lease the worker renews while it runs; a worker that dies stops renewing, and once the lease
has expired another takes the job over and continues its run from the journal
(:func:`protocols.jobs.replay` and :func:`protocols.jobs.decide`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import trio

from protocols.errors import AgentsError, Category, ValidationError
from protocols.jobs import (
    TERMINAL,
    AgentJob,
    JobCursor,
    JobPage,
    JobRecord,
    JobStatus,
    Priority,
    prepare_codec,
)
from protocols.messages import AgentResult, new_id

from .. import _tracing
from .._core._abort import Abort
from .._core._errors import OneCause
from .._runtime import Runtime
from .._sqlite import StoreError
from ._feed import JobFeed, feed_jobs
from ._journal import WriteBehind
from ._ops import answer_job, cancel_job, existing_job, purge_job
from ._registry import AgentRegistry
from ._store import RunStore, Watch, check_seconds
from ._watch import JobEvents, watch_job
from ._worker import MAX_TAKEOVERS, JobRunner, _lost_store, _Running

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["MAX_TAKEOVERS", "JobError", "JobQueue", "open_job_queue"]

log = logging.getLogger("trio_agents.jobs")

#: How long a worker's hold on a job lasts without renewal, by default (seconds).
DEFAULT_LEASE = 30.0
#: How often an idle worker looks for new jobs, by default (seconds).
DEFAULT_POLL = 0.5
#: How many of the jobs that ended here the taker remembers (their ends are no news to it).
_DONE_KEPT = 1024


class JobError(AgentsError):
    """A job did not give a result: it ``failed`` (``error`` says why), was ``cancelled`` or
    ``abandoned``, or ended ``partial`` on a queue that does not accept partial results.
    ``record`` is the job's final record."""

    def __init__(self, record: JobRecord) -> None:
        detail = f": {record.error}" if record.error else ""
        super().__init__(
            f"job {record.id} ended {record.status.value}{detail}",
            code=f"job_{record.status.value}",
            category=Category.USER if record.status is JobStatus.CANCELLED else Category.SYSTEM,
            retryable=False,
        )
        self.record = record


class JobQueue(JobRunner):
    """A worker of a durable job queue (see :func:`open_job_queue`)."""

    def __init__(
        self,
        store: RunStore,
        registry: AgentRegistry,
        runtime: Runtime,
        *,
        owner: str,
        concurrency: int,
        retries: int,
        timeout: float | None,
        allow_partial: bool,
        lease: float,
        poll: float,
        clock: Callable[[], float],
        backoff: Callable[[int], float],
        approval_timeout: float | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.runtime = runtime
        #: This worker's name in the store (leases name it).
        self.owner = owner
        self.concurrency = concurrency
        self.retries = retries
        self.timeout = timeout
        self.allow_partial = allow_partial
        self.lease = lease
        self.poll = poll
        self._many = _many(store)
        self._clock = clock
        self._backoff = backoff
        self.approval_timeout = approval_timeout
        self.tracer_provider = tracer_provider
        self._running: dict[str, _Running] = {}
        self._wake = trio.Event()
        # Whether a look for jobs may find one: the last look left some (or could not tell), or
        # something happened since that may have made one takeable (news). Neither: the taker
        # waits for news or its next poll instead of looking after each job it ends.
        self._more = True
        self._news = True
        self._done_here: dict[str, None] = {}  # jobs that ended for good here (the latest)
        self._looked_at: int | None = None  # the announcements heard when the last look began
        self._look = trio.Event()  # a running job's record changed: its lease keeper looks
        self._behind = WriteBehind()  # writes what the jobs' journals buffer, for all of them
        self._finished: dict[str, trio.Event] = {}
        self._ended: dict[str, JobRecord] = {}  # final records for result() callers waiting
        self._waiters: dict[str, int] = {}  # how many result() callers wait for each job
        # The latest announcement that woke the result() callers of a job since they last took
        # it (see Watch.last; infinite: they must look), and the queue's watch (see
        # Watch.heard): a caller woken only by changes its last look saw already need not look
        # again.
        self._woken: dict[str, float] = {}
        self._watching: Watch | None = None
        self._taking = True
        self._leaving = False  # the block is being left: running jobs are being cut
        self._taker: trio.Nursery | None = None  # the taker's, while it takes jobs
        self._statistics = {
            "acquired": 0,
            "completed": 0,
            "partial": 0,
            "failed": 0,
            "cancelled": 0,
            "abandoned": 0,
            "retried": 0,
            "dropped": 0,
            "suspended": 0,
            "store_errors": 0,
        }

    # -- the caller's side ---------------------------------------------------------------------

    async def enqueue(
        self,
        job: AgentJob,
        *,
        key: str | None = None,
        priority: Priority | str = Priority.NORMAL,
    ) -> str:
        """Admit ``job`` and return its id -- only once it is durable. With ``key``, the
        job admitted under that key before (if any) is returned instead: submitting twice is
        safe. Raises :class:`~actors.store.StoreError` ``code="purged"`` for the key of a purged
        job. The OpenTelemetry trace context current here, if any, is recorded in the job's
        metadata (see ``docs/tracing.md``): the worker's run is traced as its child."""
        job = _tracing.stamp_job(job)
        admitted = await self.store.admit(
            job, now=self._clock(), key=key, priority=Priority(priority)
        )
        self._heard()
        return admitted.record.id

    async def record(self, id: str) -> JobRecord | None:
        """The job's record as stored now."""
        return await self.store.get(id)

    async def result(self, id: str) -> AgentResult:
        """Wait until the job ends and return its result. Raises :class:`JobError` when it
        failed, was cancelled or abandoned, or ended partial on a queue without
        ``allow_partial``; :class:`~protocols.errors.ValidationError` for an unknown id."""
        look = True
        seen: int | None = None  # the announcements heard before the last look began
        self._waiters[id] = self._waiters.get(id, 0) + 1
        try:
            while True:
                event = self._finished.setdefault(id, trio.Event())
                if look:
                    seen = self._watching.heard if self._watching is not None else None
                    status = await self.store.status(id)
                    if status is None:
                        raise ValidationError(f"no job {id!r} (never admitted, or purged)")
                    if status in TERMINAL:
                        return self._outcome(await existing_job(self.store, id))
                if id in self._running:
                    # Running here: its end here wakes this caller (the worker hands the final
                    # record over, or has it look) -- no poll needed while it runs.
                    await event.wait()
                else:
                    with trio.move_on_after(self.poll):
                        await event.wait()
                # A job running in this worker needs no look at the store until its run here
                # ends: the worker then hands its final record over, or wakes this caller to
                # look. Nor does a job whose change that woke this caller was announced before
                # the last look began (its own admission, say): that look saw it.
                woken = self._woken.pop(id, None)
                look = id not in self._running and (woken is None or seen is None or woken > seen)
                # Ended in this worker, which handed the final record over: no need to read it.
                ended = self._ended.pop(id, None)
                if ended is not None:
                    return self._outcome(ended)
        finally:
            left = self._waiters[id] - 1
            if left:
                self._waiters[id] = left
            else:
                del self._waiters[id]
                self._woken.pop(id, None)
                self._ended.pop(id, None)
                self._finished.pop(id, None)

    async def run(
        self, jobs: Sequence[AgentJob], *, priority: Priority | str = Priority.NORMAL
    ) -> list[AgentResult]:
        """Run ``jobs`` as one batch and return their results in order: the declared jobs',
        then those of the children each spawned (each job's ``children``, job by job, in the
        order declared; a child's own children are in its result). Every job -- its children
        first -- is durable before any result is awaited.

        Fail-fast: the first job in that order that gives no result raises its
        :class:`JobError`, and the declared jobs that have not ended are cancelled. Cancelling
        the caller does not cancel the jobs: they are durable, and go on."""
        batch = list(jobs)
        for job in batch:
            if not isinstance(job, AgentJob):
                raise ValidationError(f"run takes AgentJobs, not {type(job).__name__}")
        ids = [await self.enqueue(job, priority=priority) for job in batch]
        try:
            results = [await self.result(id) for id in ids]
            for id in ids:
                record = await existing_job(self.store, id)
                results.extend([await self.result(child) for child in record.children])
        except JobError:
            with trio.CancelScope(shield=True):
                for id in ids:
                    with contextlib.suppress(ValidationError):
                        await self.cancel(id)
            raise
        return results

    def _outcome(self, record: JobRecord) -> AgentResult:
        if record.status is JobStatus.COMPLETED or (
            record.status is JobStatus.PARTIAL and self.allow_partial
        ):
            assert record.result is not None
            return record.result
        raise JobError(record)

    async def cancel(self, id: str) -> JobRecord:
        """Cancel the job: a waiting one ends ``cancelled`` at once, never running; a running
        one has its run cut wherever it runs (at once in this worker, within a third of its
        lease in another; its partial committed) and then ends ``cancelled``. Once this returns
        with the cancel recorded, the job starts no other provider call or tool call, in any
        process -- also when its worker dies and another takes it over -- and it ends
        ``cancelled``. Returns the record as it is afterwards; a job that already ended is left
        as it is."""
        record, changed = await cancel_job(self.store, id, clock=self._clock)
        if changed:
            running = self._running.get(id)
            if running is not None:
                running.token.cancel("the job was cancelled")
            if record.terminal:
                self._notify(id, record)
        return record

    async def page(self, cursor: JobCursor | None = None, *, limit: int = 100) -> JobPage:
        """The jobs after ``cursor`` (``None``: from the first), in admission order: up to
        ``limit`` new ones and those found in the cursor's gaps (committed late), with the
        cursor to read the next page from (see :meth:`RunStore.page
        <actors.durable.RunStore.page>`). Chained, pages return every job exactly once."""
        return await self.store.page(cursor, limit=limit, now=self._clock())

    def feed(self, *, after: JobCursor | int | None = None, limit: int = 100) -> JobFeed:
        """Every job of the store after ``after`` (a cursor, a job's number, or ``None``: from
        the first), then each new one as it commits -- from any process -- as an endless async
        iterator of records that never skips a job committed late (see
        :func:`~actors.durable.feed_jobs`); looks every ``poll`` seconds of the queue's when
        nothing wakes it."""
        return feed_jobs(self.store, after=after, poll=self.poll, limit=limit, clock=self._clock)

    def watch(self, id: str, *, after: int = 0) -> JobEvents:
        """Follow job ``id``: its :class:`~protocols.live.RunEvent` objects after seq ``after``, as
        its journal holds them (the same seqs in any process, also after a takeover) and then
        as it grows, until a terminal event (see :func:`~actors.durable.watch_job`)."""
        return watch_job(self.store, id, after=after, poll=self.poll)

    async def answer(
        self, id: str, call_id: str, allow: bool, reason: str = "", *, value: Any = None
    ) -> JobRecord:
        """Answer an approval the job waits for (from any process): ``allow`` or deny, with a
        ``reason`` the model reads -- or a question it waits for: ``allow=True`` with the
        answer in ``value`` (checked against the question: one it refuses raises and nothing
        is written), or ``allow=False`` to decline. Once every request has its answer the job
        is queued again and any worker continues it. An answer repeated as given is accepted
        again; a different answer to an answered call, an answer to a call the job does not
        wait for, or to a job that does not wait, raises
        :class:`~protocols.errors.ValidationError`."""
        record = await answer_job(
            self.store, id, call_id, allow, reason, value=value, clock=self._clock
        )
        if record.status is JobStatus.QUEUED:
            self._heard()
        return record

    async def purge(self, id: str) -> None:
        """Remove an ended job's record and journal, leaving a tombstone (its key is never
        admitted again). Raises :class:`~protocols.errors.ValidationError` for a job that has
        not ended or does not exist."""
        await purge_job(self.store, id, clock=self._clock)

    def stop_taking(self) -> None:
        """Take no more jobs (those running go on)."""
        self._taking = False
        self._wake.set()

    async def wait_idle(self) -> None:
        """Wait until no job runs in this worker."""
        while self._running:
            running = next(iter(self._running.values()))
            await running.done.wait()

    def statistics(self) -> dict[str, int]:
        """What this worker did: jobs acquired, ended by status, retried, dropped (lost to
        another worker), store failures it rode out (``store_errors``: the store could not be
        reached; it asked again with backoff), and jobs running now -- with the store's own
        counts, when it keeps some (``listener_reconnects`` on PostgreSQL)."""
        counts = getattr(self.store, "statistics", None)
        extra = counts() if callable(counts) else {}
        return {**self._statistics, **extra, "running": len(self._running)}

    def _heard(self) -> None:
        """Something happened that may have made a job takeable: the taker looks."""
        self._news = True
        self._wake.set()

    async def _watch(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Hear of the store's changes as they commit (other processes' too, where the store
        can tell): look for jobs to take, wake the callers waiting for those jobs, and have the
        lease keepers of those running here look at them at once (a cancel asked for
        elsewhere)."""
        with self.store.watch() as watch, self._numbering(watch):
            task_status.started()
            while True:
                ids = await watch.next()
                heard = watch.last if isinstance(watch, Watch) else {}
                # No news to the taker: a change to a job of its own, or one announced before
                # its last look began (committed before it: that look saw it).
                mine, done, looked = self._running, self._done_here, self._looked_at
                if not ids or any(
                    id not in mine
                    and id not in done
                    and (looked is None or heard.get(id, looked + 1) > looked)
                    for id in ids
                ):
                    self._news = True
                self._wake.set()
                for id in ids or list(self._waiters):
                    if id in self._running:
                        # Running here: its end hands the final record to the callers waiting
                        # (or, if it ends otherwise, wakes them): no read of the store needed.
                        continue
                    if id in self._waiters:
                        self._woke(id, heard.get(id) if ids else None)
                for id in ids or list(self._running):
                    running = self._running.get(id)
                    if running is not None and not running.ending:
                        running.look = True
                        self._look.set()

    @contextlib.contextmanager
    def _numbering(self, watch: object) -> Iterator[None]:
        """``watch`` is the queue's, for :meth:`result` to know what it heard (a store of
        another kind may give a watch that does not number it)."""
        self._watching = watch if isinstance(watch, Watch) else None
        try:
            yield
        finally:
            self._watching = None

    async def _work(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Take jobs while there is room, until the queue closes."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._keep_leases)
            await nursery.start(self._behind.run)
            nursery.start_soon(self._tick)
            self._taker = nursery
            task_status.started()
            pause = 0.0  # after a store failure: how long to wait before asking again
            while self._taking:
                # Made before looking: an enqueue while the store is asked still wakes us.
                self._wake = trio.Event()
                free = self.concurrency - len(self._running)
                if free > 0 and (self._more or self._news):
                    self._news = False  # (news while the store is asked: looked at again)
                    watching = self._watching
                    self._looked_at = watching.heard if watching is not None else None
                    try:
                        records = await self._acquire(free)
                    except StoreError as error:
                        if not error.retryable:
                            raise
                        self._news = True
                        pause = min(max(pause * 2, 0.05), max(self.poll, 1.0))
                        self._store_failed("looking for jobs", error)
                        await trio.sleep(pause)
                        continue
                    pause = 0.0
                    self._more = getattr(records, "rest", True)
                    for record in records:
                        self._statistics["acquired"] += 1
                        stale = self._running.get(record.id)
                        if stale is not None:
                            # This worker was paused past its own lease and took the job
                            # again: its first run of it is fenced; cut it.
                            stale.token.cancel("this worker's older hold on the job expired")
                        running = _Running(record, Abort())
                        running.due = trio.current_time() + self.lease / 3
                        self._running[record.id] = running
                        nursery.start_soon(self._job, running)
                    if records:
                        continue
                if self.approval_timeout is not None:
                    await self._deny_overdue()
                await self._wake.wait()  # (set at the latest by the next tick)

    def _look_in(self, delay: float) -> None:
        """Have the taker look for jobs ``delay`` seconds from now: a job this worker queued
        again (a retry after its backoff) falls due then, which nothing announces -- taken on
        time, not at the first poll after it."""
        if self._taker is not None:
            self._taker.start_soon(self._look_after, delay)

    async def _look_after(self, delay: float) -> None:
        await trio.sleep(delay)
        self._heard()

    async def _tick(self) -> None:
        """Wake the taker every ``poll`` seconds: it looks at the store at least that often
        (for jobs no announcement tells of -- a lease that expired, a retry that fell due --
        and another process's, where the store cannot tell). One timer for every look,
        instead of a deadline of its own around each wait between them."""
        while True:
            await trio.sleep(self.poll)
            self._heard()

    async def _acquire(self, free: int) -> list[JobRecord]:
        """Take up to ``free`` jobs: in one call where the store can take several
        (``acquire_many``: one look at the queue and one transaction for them all), else one."""
        many = self._many
        if many is not None:  # (also for one: it says whether it left any)
            taken: list[JobRecord] = await many(
                owner=self.owner, lease=self.lease, now=self._clock(), limit=free
            )
            return taken
        record = await self.store.acquire(owner=self.owner, lease=self.lease, now=self._clock())
        return [] if record is None else [record]

    async def _deny_overdue(self) -> None:
        """Deny the approvals a job has waited for longer than ``approval_timeout``."""
        assert self.approval_timeout is not None
        now = self._clock()
        waiting = await self.store.list(statuses=[JobStatus.AWAITING_INPUT], limit=1000)
        for record in waiting:
            since = record.updated_at if record.updated_at is not None else record.created_at
            if now - since < self.approval_timeout:
                continue
            answered = {a.call_id for a in record.answers}
            for request in record.pending:
                if request.call_id not in answered:
                    with contextlib.suppress(ValidationError):
                        await self.answer(
                            record.id,
                            request.call_id,
                            False,
                            "no answer came before the approval timeout",
                        )

    async def _job(self, running: _Running) -> None:
        record = running.record
        try:
            with running.scope:
                await self._attempt(running)
            if running.failure is not None:
                raise running.failure  # its lease keeper failed: stopped as a crash would
        except Exception as exc:
            failure = _lost_store(exc)
            if failure is None:
                log.exception("job %s: the worker failed running it", record.id)
            else:
                # The store went away mid-job: the job stays held until its lease expires,
                # then it is continued from its journal (by this worker or another).
                self._store_failed(f"running job {record.id}", failure)
        finally:
            if running.ended:
                # Its end (announced, maybe heard only after this) is no news to the taker.
                done = self._done_here
                done[record.id] = None
                if len(done) > _DONE_KEPT:
                    del done[next(iter(done))]
            else:
                self._news = True  # (queued again, suspended, lost: a look may take it)
            if self._running.get(record.id) is running:
                del self._running[record.id]
                # A caller still waiting (the job did not end here with a record handed over:
                # suspended, dropped, or lost to the store) looks at the store again.
                self._notify(record.id)
            running.done.set()
            self._wake.set()


def _many(store: RunStore) -> Callable[..., Awaitable[list[JobRecord]]] | None:
    """``store.acquire_many`` when it takes what ``store.acquire`` would: defined by the class
    that defines ``acquire``, or by a subclass of it. A store whose ``acquire`` is overridden
    below its ``acquire_many`` (a subclass adding to ``acquire`` alone), or that passes other
    calls on to another store (``__getattr__``), has its ``acquire`` called, one job at a time."""
    mro = type(store).__mro__
    defines = [type_ for type_ in mro if "acquire" in vars(type_)]
    many = [type_ for type_ in mro if "acquire_many" in vars(type_)]
    if not defines or not many or mro.index(many[0]) > mro.index(defines[0]):
        return None
    found: Callable[..., Awaitable[list[JobRecord]]] = store.acquire_many  # type: ignore[attr-defined]
    return found


def _backoff(rng: random.Random) -> Callable[[int], float]:
    def delay(attempt: int) -> float:
        return float(min(60.0, 0.5 * 2 ** max(attempt - 1, 0)) * (0.5 + rng.random() / 2))

    return delay


@contextlib.asynccontextmanager
async def open_job_queue(
    store: RunStore,
    registry: AgentRegistry,
    runtime: Runtime,
    *,
    concurrency: int = 4,
    retries: int = 3,
    timeout: float | None = None,  # noqa: ASYNC109 - a job attempt's, not this call's
    allow_partial: bool = False,
    lease: float = DEFAULT_LEASE,
    poll: float = DEFAULT_POLL,
    owner: str | None = None,
    approval_timeout: float | None = None,
    clock: Callable[[], float] = time.time,
    rng: random.Random | None = None,
    tracer_provider: TracerProvider | None = None,
) -> AsyncIterator[JobQueue]:
    """Run a worker of the job queue on ``store`` for the ``async with`` block.

    It takes up to ``concurrency`` jobs at once, each run as a journaled run of the agent its
    job names in ``registry``, under ``runtime``. A failed attempt (a provider error after its
    own retries, the per-attempt ``timeout``) is tried again, continuing from its journal, up to
    ``retries`` times, with backoff; a partial result counts as a failure for :meth:`JobQueue.
    result` unless ``allow_partial``. ``lease`` (seconds) bounds how long a dead worker's jobs
    wait before another worker takes them over; ``poll`` how often an idle worker looks for
    jobs; ``approval_timeout`` (seconds) how long a job waits for an approval before it is
    denied (``None``: as long as it takes). Leaving the block stops taking jobs and cuts the
    running ones as a crash would -- what they streamed is journaled, the calls they had in
    flight are left open -- and another worker continues them once their leases expire.
    ``tracer_provider``: the OpenTelemetry provider the jobs' runs are traced with (default: the
    global one, if configured); each attempt's ``invoke_agent`` span is a child of the trace
    context the job was enqueued in. An exception raised in the block comes out as itself, and
    a failure of the worker (its store refusing it for good) as its own class, never in an
    exception group."""
    for name, value, low in (("concurrency", concurrency, 1), ("retries", retries, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValidationError(f"{name} must be an integer >= {low}, not {value!r}")
    for name, number in (("lease", lease), ("poll", poll)):
        check_seconds(number, name)
    queue = JobQueue(
        store,
        registry,
        runtime,
        owner=owner or f"worker-{new_id()[:12]}",
        concurrency=concurrency,
        retries=retries,
        timeout=timeout,
        allow_partial=allow_partial,
        lease=float(lease),
        poll=float(poll),
        clock=clock,
        backoff=_backoff(rng or random.Random()),
        approval_timeout=approval_timeout,
        tracer_provider=tracer_provider,
    )
    # What the first job would otherwise do on its way (milliseconds, once a process): make
    # the codec's encoders of the durable types, and look up whether runs are traced.
    prepare_codec()
    if tracer_provider is None:
        _tracing.global_tracer()
    one = OneCause()  # what the block raises comes out as itself, never in a group
    with one:
        async with trio.open_nursery() as nursery:
            await nursery.start(queue._watch)
            await nursery.start(queue._work)
            try:
                with one.own():
                    yield queue
            finally:
                queue._taking = False
                queue._leaving = True
                nursery.cancel_scope.cancel()
