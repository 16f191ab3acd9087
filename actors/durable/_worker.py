"""The worker's side of a job queue: running one job it acquired -- its lease kept, its
journal read back and continued, its agent run journaled, and its end written (completed,
partial, failed, cancelled, abandoned, retried or suspended) under the worker's fencing token.

:class:`JobRunner` is a base of :class:`~actors.durable.JobQueue`, which holds the state it
uses (its store, registry and settings, the jobs running) and takes the jobs
(:mod:`actors.durable._queue`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from protocols.errors import AgentsError, ConfigError
from protocols.jobs import (
    AgentJob,
    Applied,
    InputEntry,
    JobRecord,
    JobStatus,
    JournalDrift,
    Lease,
    Replay,
    ResponseEntry,
    TerminalEntry,
    abandon,
    decide,
    finish,
    renew,
    replay,
    retry,
)
from protocols.messages import AgentResult, Message, Role, StopReason, Usage
from protocols.settings import ModelSettings

from .. import _tracing
from .._core._abort import Abort
from .._request import _Request
from .._run_loop import Resume
from .._runtime import Runtime
from .._sqlite import StoreError
from ..agent import Agent, RunOptions, _RunAgent
from ._journal import StoreJournal, WriteBehind
from ._registry import AgentRegistry, AgentSpec
from ._store import RunStore

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["MAX_TAKEOVERS", "JobRunner"]

log = logging.getLogger("trio_agents.jobs")

#: How many times a job may lose its worker (its lease expiring) before it is abandoned.
MAX_TAKEOVERS = 10


@attrs.define(eq=False)
class _Running:
    """A job this worker runs: its record as last written here, the token that cuts its run,
    and what the queue's lease keeper (:meth:`JobRunner._keep_leases`) needs of it."""

    record: JobRecord
    token: Abort
    #: The hold this worker acquired the job with (its fencing token).
    holder: Lease = attrs.field()
    #: When (``trio.current_time()``) its lease is renewed next.
    due: float = math.inf
    done: trio.Event = attrs.field(factory=trio.Event)
    #: Set when the store says the job's record changed (a cancel asked for elsewhere, say):
    #: the lease keeper looks at it at once instead of at its next renewal.
    look: bool = False
    #: The job's end is being written: a change the store reports now is that write's own, and
    #: needs no look from the lease keeper.
    ending: bool = False
    #: Ended here, for good (its terminal record written by this worker): its end makes no
    #: other job takeable that the queue's last look did not already see.
    ended: bool = False
    #: Cancelled when the lease keeper fails for the job (``failure`` says how): the attempt
    #: stops where it is, as a crash would leave it.
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    failure: Exception | None = None

    @holder.default
    def _held(self) -> Lease:
        assert self.record.lease is not None
        return self.record.lease


class JobRunner:
    """Runs the jobs a :class:`~actors.durable.JobQueue` acquired (its base: the queue sets
    every attribute declared here)."""

    store: RunStore
    registry: AgentRegistry
    runtime: Runtime
    retries: int
    timeout: float | None
    allow_partial: bool
    lease: float
    tracer_provider: TracerProvider | None
    _clock: Callable[[], float]
    _backoff: Callable[[int], float]
    _running: dict[str, _Running]
    _look: trio.Event
    _behind: WriteBehind
    _finished: dict[str, trio.Event]
    _ended: dict[str, JobRecord]
    _waiters: dict[str, int]
    _woken: dict[str, float]
    _leaving: bool
    _statistics: dict[str, int]
    #: Has the queue look for jobs that many seconds from now.
    _look_in: Callable[[float], None]

    def _store_failed(self, doing: str, error: StoreError) -> None:
        self._statistics["store_errors"] += 1
        log.warning("%s: the store failed (%s); trying again", doing, error.message)

    def _notify(self, id: str, record: JobRecord | None = None) -> None:
        """Job ``id`` ended here, or its run here stopped: hand its final ``record`` (if it
        ended) to the :meth:`JobQueue.result` callers waiting for it, or have them look at the
        store."""
        if id not in self._waiters:
            return
        if record is not None:
            self._ended[id] = record
        self._woke(id, None)

    def _woke(self, id: str, number: int | None) -> None:
        """Wake the :meth:`JobQueue.result` callers waiting for job ``id`` for a change
        announced as ``number`` (``None``: one they must look at the store for). Kept until
        they have taken it -- also when it comes while they are awake, between two waits."""
        if number is None:
            self._woken[id] = math.inf
        else:
            self._woken[id] = max(self._woken.get(id, 0), number)
        event = self._finished.pop(id, None)
        if event is not None:
            event.set()

    # -- the worker's side ---------------------------------------------------------------------

    async def _attempt(self, running: _Running) -> None:
        record = running.record
        holder = record.lease
        assert holder is not None
        if record.cancel_requested:
            # Taken over after its cancel was acknowledged (its worker died first): it starts no
            # more work. Its run is continued already cut -- the journal closed as a cut run's
            # is -- and it ends cancelled.
            running.token.cancel("the job was cancelled")
        if record.takeovers > MAX_TAKEOVERS:
            await self._end(
                record,
                abandon(
                    record,
                    now=self._clock(),
                    error=f"its worker died {record.takeovers} times while running it",
                    holder=holder,
                ),
            )
            return
        try:
            spec = self.registry.get(record.job.agent)
        except ConfigError as error:
            await self._end(
                record, abandon(record, now=self._clock(), error=error.message, holder=holder)
            )
            return
        failed = await self._failed_child(record)
        if failed is not None:
            await self._finish(record, holder, JobStatus.FAILED, None, failed)
            return
        # The job's first acquisition (fence 1) finds an empty journal: nobody held it before.
        entries = await self.store.journal(record.id) if record.fence > 1 else []
        try:
            made = replay(record.id, entries)
        except JournalDrift as error:
            log.error("job %s: %s", record.id, error.message)
            await self._end(
                record, abandon(record, now=self._clock(), error=error.message, holder=holder)
            )
            return
        # What earlier attempts added after the input: the job's result covers the whole job.
        given = len(entries[0].messages) if entries and isinstance(entries[0], InputEntry) else 0
        earlier = made.messages[given:]
        # The last thing journaled is a final answer (a response with no calls): the run had
        # ended when its worker died.
        final = entries[-1] if entries else None
        answered = isinstance(final, ResponseEntry) and not final.message.calls
        await self._run(
            running, spec, made, holder, earlier, answered=answered, journaled=len(entries)
        )

    async def _keep_leases(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the leases of the jobs running here, one task for all of them: renew each every
        third of the lease, and look at one at once when the store says its record changed
        (``_Running.look``, with ``_look`` set). A job whose lease this worker lost (fenced) has
        its run cut; one whose cancel was requested elsewhere too. A store that cannot be
        reached is asked again at the next renewal; any other failure stops that job's attempt
        where it is (``_Running.failure``), as a crash would."""
        interval = self.lease / 3
        task_status.started()
        while True:
            self._look = trio.Event()
            now = trio.current_time()
            for running in list(self._running.values()):
                renewing = running.due <= now
                if (renewing or running.look) and not running.done.is_set():
                    if renewing:
                        running.due = now + interval
                    running.look = False
                    try:
                        await self._check_lease(running, renewing=renewing)
                    except Exception as exc:
                        running.failure = exc
                        running.scope.cancel()
            # Every job started from here on is due a whole interval after it started: waking
            # at least that often never misses one.
            first = min((r.due for r in self._running.values()), default=math.inf)
            with trio.move_on_at(min(first, now + interval)):
                await self._look.wait()

    async def _check_lease(self, running: _Running, *, renewing: bool) -> None:
        """Look at the job's stored record: cut its run if this worker no longer holds it
        (fenced) or its cancel was requested; with ``renewing``, renew the lease."""
        record = running.record
        holder = running.holder
        try:
            current = await self.store.get(record.id)
        except StoreError as error:
            if not error.retryable:
                raise
            self._store_failed(f"renewing the lease of job {record.id}", error)
            return
        if current is None or not current.held_by(holder):
            running.token.cancel("this worker no longer holds the job (fenced)")
            return
        if current.cancel_requested:
            running.token.cancel("the job was cancelled")
        if not renewing:
            return  # looked early, on a change: the lease needs no renewal yet
        renewed = renew(current, holder, now=self._clock(), lease=self.lease)
        try:
            if isinstance(renewed, Applied) and await self.store.write(renewed):
                running.record = renewed.record
        except StoreError as error:
            if not error.retryable:
                raise
            self._store_failed(f"renewing the lease of job {record.id}", error)

    async def _run(
        self,
        running: _Running,
        spec: AgentSpec,
        made: Replay,
        holder: Lease,
        earlier: tuple[Message, ...] = (),
        *,
        answered: bool = False,
        journaled: int = 0,
    ) -> None:
        record = running.record
        job = record.job
        last = made.messages[-1] if made.messages else None
        if answered and last is not None and last.role is Role.ASSISTANT:
            # Its worker died after journaling the final answer, before the end: that answer
            # stands (asking the model again would answer twice).
            done = AgentResult(
                content=last.content,
                thinking=last.thinking,
                messages=earlier,
                usage=made.usage,
                turns=made.turns,
                run_id=record.id,
                agent=job.agent,
            )
            await self._finish(record, holder, JobStatus.COMPLETED, done, None)
            return
        journal = StoreJournal(
            self.store,
            record.id,
            holder,
            cut=running.token.cancel,
            replay=made if made.started else None,
            journaled=journaled,
            answers=record.answers,
            clock=self._clock,
            leaving=lambda: self._leaving,
            behind=self._behind,
        )
        try:
            await self._journaled(running, spec, made, holder, earlier, journal=journal)
        finally:
            await journal.close()

    async def _journaled(
        self,
        running: _Running,
        spec: AgentSpec,
        made: Replay,
        holder: Lease,
        earlier: tuple[Message, ...],
        *,
        journal: StoreJournal,
    ) -> None:
        record = running.record
        job = record.job
        agent = await self._agent(spec, job, journal)
        try:
            if made.started:
                # A continued attempt: said first in the journal (its log shows a rewind), with
                # the approvals its batch waited for, now answered.
                answers = [a for a in record.answers if a.call_id not in made.answers]
                reason: Literal["takeover", "retry", "answered"]
                if made.asked and record.answers:
                    reason = "answered"
                elif record.takeovers > made.takeovers:
                    reason = "takeover"
                else:
                    reason = "retry"
                await journal.attempt(record.fence, reason, answers)
                await agent.conversation.add(made.messages)
                resume: Resume | None = Resume(
                    made.turns,
                    made.usage,
                    made.unsettled,
                    tuple(decide(record.id, made, idempotent=spec.idempotent)),
                    known=made.known,
                    estimate=made.estimate,
                )
            else:
                history, results = await self._background(record)
                messages = (*history, *job.input, *results)
                await journal.input(messages)
                await agent.conversation.add(messages)
                resume = None
            if not journal.holds():
                self._statistics["dropped"] += 1
                return
            request = _Request(
                agent,
                (),
                RunOptions(abort=(running.token,)),
                None,
                run_id=record.id,
                journal=journal,
                resume=resume,
            )
            # Traced as a child of the context the job was enqueued in (in whichever process),
            # never of this worker's task.
            source = job.metadata.get(_tracing.TRACE_METADATA_KEY)
            agent._traced(
                request,
                _tracing.extract(source if isinstance(source, dict) else None)
                or _tracing.root_context(),
            )
            error: BaseException | None = None
            result: AgentResult | None = None
            timed_out = False
            try:
                if self.timeout is None:  # (no scope of its own: the run has one)
                    result = await agent._execute_here(request)
                else:
                    with trio.move_on_after(self.timeout) as attempt:
                        result = await agent._execute_here(request)
                    timed_out = attempt.cancelled_caught
            except Exception as exc:
                error = exc
            if journal.suspended:
                # Waiting for approvals (the record says so): any worker continues it once
                # every answer is in.
                self._statistics["suspended"] += 1
                return
            if journal.failure is not None:
                # Another attempt continues it from the journal once its lease expires.
                self._store_failed(f"journaling job {record.id}", journal.failure)
            if not journal.holds():
                self._statistics["dropped"] += 1
                return
            # What the run spent, for a job that ends without a result: its turns, and its
            # usage when all of it is known and none of it estimated (the record has no flag).
            run = request.run
            spent = None
            if run is not None:
                spent = (run.turns_made, None if run.estimated else run.total())
            if timed_out:
                await self._retry_or_fail(
                    running, holder, "the attempt timed out", journal, spent=spent
                )
            elif error is not None:
                if isinstance(error, AgentsError) and error.retryable:
                    await self._retry_or_fail(
                        running, holder, _describe(error), journal, spent=spent
                    )
                else:
                    await self._finish(
                        running.record,
                        holder,
                        JobStatus.FAILED,
                        None,
                        _describe(error),
                        journal=journal,
                        spent=spent,
                    )
            else:
                assert result is not None
                # The job's result: the whole job (what earlier attempts added too), answered by
                # the agent the job named; its content the last assistant message's of the whole
                # job (a run continued already cut adds none: its partial is an earlier one).
                messages = (*earlier, *result.messages)
                last = next((m for m in reversed(messages) if m.role is Role.ASSISTANT), None)
                whole = attrs.evolve(
                    result,
                    messages=messages,
                    agent=record.job.agent,
                    content=last.content if last is not None else result.content,
                )
                await self._finish(
                    running.record,
                    holder,
                    self._status(running, whole),
                    whole,
                    None,
                    journal=journal,
                )
        finally:
            with trio.CancelScope(shield=True):
                await agent.aclose(cancel=True)

    async def _agent(self, spec: AgentSpec, job: AgentJob, journal: StoreJournal) -> Agent:
        options = dict(spec.options)
        if job.limit is not None:
            options["limit"] = job.limit
        if job.timeout is not None:
            options["timeout"] = job.timeout
        if job.budget is not None:
            options["budget"] = job.budget
        if job.settings is not None:
            options["settings"] = ModelSettings.of(options.get("settings")).merge(job.settings)
        if self.tracer_provider is not None:
            options.setdefault("tracer_provider", self.tracer_provider)  # a spec's own wins
        # No actor for it, nor for its conversation: the worker runs the job in its own task
        # (an agent's actor and a conversation's would be started and stopped per job).
        options.setdefault("name", job.agent)
        return await _RunAgent.start(
            self.runtime,
            spec.provider,
            system=spec.system,
            tools=spec.tools,
            authority=spec.authority,
            approve=journal.approve,
            answer=journal.answer,
            **options,
        )

    async def _background(
        self, record: JobRecord
    ) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """What a job starts from besides its input: the history of the jobs before it in its
        thread (before the input), and the results of its children (after it)."""
        out: list[Message] = []
        thread = record.conversation
        if thread is not None and record.execution is not None:
            # The thread's jobs only (the store finds them by index): not every job there is.
            earlier = [
                r
                for r in await self._all(thread=thread)
                if r.id != record.id
                and r.execution is not None
                and r.execution < record.execution
                and r.terminal
            ]
            if earlier:
                # The latest one's journal holds the whole thread before it (its input began
                # with the thread's history).
                latest = max(earlier, key=lambda r: r.execution or 0)
                out.extend(replay(latest.id, await self.store.journal(latest.id)).messages)
        history = tuple(out)
        out = []
        if record.children:
            lines = []
            for position, child_id in enumerate(record.children, start=1):
                child = await self.store.get(child_id)
                if child is None:
                    lines.append(f"{position}. (purged)")
                    continue
                text = child.result.content if child.result is not None else child.error or ""
                lines.append(f"{position}. {child.job.agent} ({child.status.value}): {text}")
            out.append(Message.user("Results of the sub-jobs, in order:\n" + "\n".join(lines)))
        return history, tuple(out)

    async def _failed_child(self, record: JobRecord) -> str | None:
        """Why the job cannot run because of a child (one failed, was cancelled or abandoned, or
        ended partial on a queue without ``allow_partial``), if it cannot."""
        for position, child_id in enumerate(record.children, start=1):
            child = await self.store.get(child_id)
            if child is None:
                continue
            bad = child.status in (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.ABANDONED)
            if bad or (child.status is JobStatus.PARTIAL and not self.allow_partial):
                return (
                    f"sub-job {position} ({child.job.agent}, {child.id}) ended {child.status.value}"
                )
        return None

    async def _all(self, *, thread: str | None = None) -> list[JobRecord]:
        records: list[JobRecord] = []
        after: int | None = None
        while True:
            page = await self.store.list(after=after, limit=1000, thread=thread)
            records.extend(page)
            if len(page) < 1000:
                return records
            after = page[-1].sequence

    def _status(self, running: _Running, result: AgentResult) -> JobStatus:
        if result.stop is StopReason.COMPLETE:
            return JobStatus.COMPLETED
        if result.stop is StopReason.CANCELLED and running.token.cancelled:
            return JobStatus.CANCELLED
        return JobStatus.PARTIAL

    async def _finish(
        self,
        record: JobRecord,
        holder: Lease,
        status: JobStatus,
        result: AgentResult | None,
        error: str | None,
        *,
        journal: StoreJournal | None = None,
        spent: tuple[int, Usage | None] | None = None,
    ) -> None:
        """End the job ``status`` with its terminal journaled (with what ``journal`` still
        holds): first from ``record`` as this worker last wrote it, and once more from the
        stored record if that changed meanwhile (a cancel asked for elsewhere). ``spent``: what
        a run that ended without a result spent (see :func:`protocols.jobs.finish`)."""
        terminal = TerminalEntry(result.stop if result else None, result, error)
        running = self._running.get(record.id)
        if running is not None:
            running.ending = True
        current: JobRecord | None = record
        for fresh in (False, True):
            if fresh:
                current = await self.store.get(record.id)
            if current is None or not current.held_by(holder):
                break
            chosen = status
            if chosen is JobStatus.PARTIAL and current.cancel_requested:
                chosen = JobStatus.CANCELLED
            ended = finish(
                current,
                holder,
                now=self._clock(),
                status=chosen,
                result=result,
                error=error,
                spent=spent,
            )
            if not isinstance(ended, Applied):
                break
            try:
                if journal is not None:
                    await journal.finish(terminal, ended)
                else:
                    await self.store.append(record.id, holder, [terminal], then=ended)
            except StoreError as exc:
                if exc.code != "fenced":
                    raise
                continue
            self._statistics[ended.record.status.value] += 1
            if running is not None:
                running.ended = ended.record.terminal
            self._notify(record.id, ended.record)
            return
        self._statistics["dropped"] += 1

    async def _retry_or_fail(
        self,
        running: _Running,
        holder: Lease,
        error: str,
        journal: StoreJournal,
        *,
        spent: tuple[int, Usage | None] | None = None,
    ) -> None:
        record = running.record
        if not await journal.flush():
            self._statistics["dropped"] += 1
            return
        current = await self.store.get(record.id) or record
        if current.cancel_requested or current.attempts > self.retries:
            status = JobStatus.CANCELLED if current.cancel_requested else JobStatus.FAILED
            await self._finish(current, holder, status, None, error, journal=journal, spent=spent)
            return
        delay = self._backoff(current.attempts)
        again = retry(current, holder, now=self._clock(), delay=delay, error=error)
        if isinstance(again, Applied) and await self.store.write(again):
            self._statistics["retried"] += 1
            self._look_in(delay)
            log.warning(
                "job %s: attempt %d failed (%s); retrying", record.id, current.attempts, error
            )
        else:
            self._statistics["dropped"] += 1

    async def _end(self, record: JobRecord, outcome: Any) -> None:
        if isinstance(outcome, Applied) and await self.store.write(outcome):
            self._statistics[outcome.record.status.value] += 1
            self._notify(record.id, outcome.record)


def _lost_store(error: BaseException) -> StoreError | None:
    """The retryable :class:`StoreError` ``error`` is (or, for a group, every error in it is
    one of: the first), else ``None``."""
    if isinstance(error, StoreError):
        return error if error.retryable else None
    if isinstance(error, BaseExceptionGroup):
        found = [_lost_store(inner) for inner in error.exceptions]
        if found and all(item is not None for item in found):
            return found[0]
    return None


def _describe(error: BaseException) -> str:
    text = error.message if isinstance(error, AgentsError) else str(error)
    return f"{type(error).__name__}: {text}"[:2000]
