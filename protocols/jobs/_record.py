"""The run record of a job and its state machine, as pure transitions.

Every transition takes the record as the writer last read it and returns either
:class:`Applied` (the new record, its ``revision`` one higher) or :class:`Conflict` (nothing
changes, and why): a store writes the new record only if the stored revision is still the one
read -- compare-and-swap -- so of two writers racing from one revision exactly one wins. A
worker's writes also carry the :class:`Lease` of its acquisition: the ``fence`` is incremented on
every acquisition, so a worker that lost its lease (paused, partitioned, taken over) can never
write again.

States::

    queued --acquire--> running --finish--> completed | partial | failed | cancelled
       ^                  |  |  \\--suspend--> awaiting_input --answer (all)--> queued
       |                  |  \\--abandon--> abandoned
       \\----retry--------/
    queued | awaiting_input --cancel--> cancelled;   running --cancel--> (cancel requested)

A running record whose lease has expired may be acquired again (a crashed worker's run is
continued elsewhere); a terminal record never changes again, except to be purged.

A cancel, once acknowledged, is final: a record with ``cancel_requested`` keeps it, every way it
ends is ``cancelled`` (:func:`finish`, :func:`retry`, :func:`suspend`, :func:`answer` and
:func:`abandon` all end it so), and :func:`may_append` refuses it any journal entry that would
start new work (a provider call, a tool call's effect). A worker that takes such a job over
only closes its journal, the way a cut run's is closed, and ends it.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import attrs

from ..errors import ValidationError
from ..messages import AgentResult, Usage
from ..questions import Question, check_answer
from ._job import AgentJob
from ._journal import Entry, crosses

__all__ = [
    "TERMINAL",
    "Admission",
    "Applied",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Conflict",
    "JobRecord",
    "JobStatus",
    "Lease",
    "Priority",
    "Tombstone",
    "Transition",
    "abandon",
    "acquire",
    "admission",
    "admit",
    "admit_tree",
    "answer",
    "cancel",
    "checkpoint",
    "finish",
    "may_append",
    "purge",
    "renew",
    "retry",
    "runnable",
    "suspend",
]


class JobStatus(enum.StrEnum):
    """Where a job is."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"
    COMPLETED = "completed"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"


#: The states a job never leaves (but to be purged).
TERMINAL = frozenset(
    {
        JobStatus.COMPLETED,
        JobStatus.PARTIAL,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.ABANDONED,
    }
)


class Priority(enum.StrEnum):
    """``interrupt`` jobs go ahead of ``normal`` ones (first in, first out within each)."""

    NORMAL = "normal"
    INTERRUPT = "interrupt"


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"JobRecord.{attribute.name} must be an int >= 0, not {value!r}")


def _time(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        raise ValidationError(f"{attribute.name} must be a finite time, not {value!r}")


@attrs.frozen
class Lease:
    """A worker's hold on a running job: who, with which fencing token, until when (wall-clock
    seconds). Every write a worker makes for the job carries it."""

    owner: str
    fence: int = attrs.field(validator=_count)
    until: float = attrs.field(validator=_time)


@attrs.frozen
class ApprovalRequest:
    """A tool call the authority put to a human (``reason``: its verdict's text) -- or, with
    ``question``, a question a tool asks the human (``reason``: the question's prompt), whose
    answer is the call's result."""

    call_id: str
    tool: str
    reason: str = ""
    question: Question | None = None


@attrs.frozen
class ApprovalAnswer:
    """A human's answer to an :class:`ApprovalRequest`: ``allow`` or not, and for a question
    the answer itself in ``value`` (``allow=False``: the human declined to answer, ``reason``
    saying why)."""

    call_id: str
    allow: bool
    reason: str = ""
    value: Any = None


def _statuses(value: JobStatus | str) -> JobStatus:
    return value if isinstance(value, JobStatus) else JobStatus(value)


@attrs.frozen
class JobRecord:
    """The durable state of one job (see the module docstring for its life).

    ``revision`` counts writes (compare-and-swap on it); ``fence`` counts acquisitions;
    ``sequence`` is the admission order, ``execution`` the order of first acquisition (a thread's
    history follows it); ``attempts`` counts acquisitions that started or continued the run;
    ``turns`` and ``usage`` are what its attempts spent, carried across them (``usage`` is
    ``None`` once part of it is unknown: a job that ended with a result whose ``total_usage``
    is unknown -- never the known part passed off as the whole); ``children`` are the
    ids of the jobs it waits for, in order; ``pending`` the approvals it waits for and
    ``answers`` the ones given; ``not_before`` holds a retry back.
    """

    id: str
    job: AgentJob
    sequence: int = attrs.field(validator=_count)
    created_at: float = attrs.field(validator=_time)
    status: JobStatus = attrs.field(default=JobStatus.QUEUED, converter=_statuses)
    revision: int = attrs.field(default=1, validator=_count)
    fence: int = attrs.field(default=0, validator=_count)
    lease: Lease | None = None
    priority: Priority = Priority.NORMAL
    key: str | None = None
    parent: str | None = None
    children: tuple[str, ...] = ()
    execution: int | None = None
    attempts: int = attrs.field(default=0, validator=_count)
    takeovers: int = attrs.field(default=0, validator=_count)
    turns: int = attrs.field(default=0, validator=_count)
    usage: Usage | None = attrs.field(factory=Usage)
    cancel_requested: bool = False
    pending: tuple[ApprovalRequest, ...] = ()
    answers: tuple[ApprovalAnswer, ...] = ()
    not_before: float | None = attrs.field(default=None, validator=_time)
    result: AgentResult | None = None
    error: str | None = None
    updated_at: float | None = attrs.field(default=None, validator=_time)

    @property
    def terminal(self) -> bool:
        """The job has ended for good."""
        return self.status in TERMINAL

    @property
    def conversation(self) -> str | None:
        """The thread the job belongs to, if any."""
        return self.job.conversation

    def held_by(self, lease: Lease) -> bool:
        """``lease`` is the current holder's (same owner and fence) on a running job."""
        current = self.lease
        return (
            self.status is JobStatus.RUNNING
            and current is not None
            and current.owner == lease.owner
            and current.fence == lease.fence
            and self.fence == lease.fence
        )


@attrs.frozen
class Tombstone:
    """What a purged job leaves: its id and key, forever (a purged key is never admitted
    again)."""

    id: str
    key: str | None
    purged_at: float


@attrs.frozen
class Applied:
    """The transition applies: write ``record`` if the stored revision is still ``expected``."""

    record: JobRecord
    expected: int


@attrs.frozen
class Conflict:
    """The transition does not apply; nothing changes. ``reason`` says why."""

    reason: Literal[
        "revision",
        "fenced",
        "state",
        "lease",
        "not_due",
        "waiting",
        "duplicate",
        "cancelled",
        "invalid",
    ]
    detail: str


Transition = Applied | Conflict


def _write(record: JobRecord, now: float, **changes: Any) -> Applied:
    changed = attrs.evolve(record, revision=record.revision + 1, updated_at=now, **changes)
    return Applied(changed, record.revision)


def _revision(record: JobRecord, expected: int | None) -> Conflict | None:
    if expected is not None and record.revision != expected:
        return Conflict(
            "revision", f"job {record.id} is at revision {record.revision}, not {expected}"
        )
    return None


def _holder(record: JobRecord, lease: Lease) -> Conflict | None:
    if record.held_by(lease):
        return None
    return Conflict(
        "fenced",
        f"job {record.id} is no longer held by {lease.owner!r} with fence {lease.fence} "
        f"(its fence is {record.fence}, status {record.status.value})",
    )


# ---------------------------------------------------------------------------------------------
# Admission


@attrs.frozen
class Admission:
    """What admitting a job with a key decides: ``new`` (admit it), ``duplicate`` (the key's
    job, which is returned instead), or ``refused`` (the key's job was purged)."""

    decision: Literal["new", "duplicate", "refused"]
    existing: JobRecord | None = None
    detail: str = ""


def admission(existing: JobRecord | Tombstone | None, job: AgentJob) -> Admission:
    """Decide an admission given what the store holds under its key (nothing without a key).

    A key names one job for good: the same key returns the existing job (whatever its state,
    also after it ended), and a purged key is refused, never reused."""
    if existing is None:
        return Admission("new")
    if isinstance(existing, Tombstone):
        return Admission(
            "refused",
            detail=f"the key was used by job {existing.id}, which was purged; use a new key",
        )
    return Admission("duplicate", existing)


def admit(
    id: str,
    job: AgentJob,
    *,
    sequence: int,
    now: float,
    key: str | None = None,
    priority: Priority = Priority.NORMAL,
    parent: str | None = None,
    children: Sequence[str] = (),
) -> JobRecord:
    """A newly admitted job's record (queued, revision 1)."""
    return JobRecord(
        id,
        job,
        sequence,
        now,
        key=key,
        priority=priority,
        parent=parent,
        children=tuple(children),
        updated_at=now,
    )


def admit_tree(
    job: AgentJob,
    *,
    ids: Iterable[str],
    first_sequence: int | None = None,
    sequences: Iterable[int] | None = None,
    now: float,
    key: str | None = None,
    priority: Priority = Priority.NORMAL,
) -> list[JobRecord]:
    """The records of ``job`` and its declared children (theirs too), to be admitted together:
    children first, each before its parent (which waits for them, listing them in declared
    order), every record with the next id from ``ids`` and the next sequence number -- counted
    from ``first_sequence``, or the next of ``sequences`` (ascending; exactly one of the two is
    given). Only the top job carries ``key``; ``priority`` is the whole tree's (a child must
    never wait behind the parent that waits for it)."""
    if sequences is not None and first_sequence is None:
        numbers = iter(sequences)
    elif sequences is None and first_sequence is not None:
        numbers = itertools.count(first_sequence)
    else:
        raise ValidationError("admit_tree needs exactly one of first_sequence and sequences")
    fresh = iter(ids)
    records: list[JobRecord] = []

    def visit(node: AgentJob, parent: str | None, top: bool) -> str:
        own = next(fresh)
        children = [visit(child, own, False) for child in node.children]
        records.append(
            admit(
                own,
                node,
                sequence=next(numbers),
                now=now,
                key=key if top else None,
                priority=priority,
                parent=parent,
                children=children,
            )
        )
        return own

    visit(job, None, True)
    return records


# ---------------------------------------------------------------------------------------------
# The worker's side


def acquire(
    record: JobRecord,
    *,
    owner: str,
    now: float,
    lease: float,
    execution: int,
    expected: int | None = None,
) -> Transition:
    """A worker takes the job: a queued one that is due, or a running one whose lease expired
    (its worker is presumed dead and the run is continued). The fence goes up by one, so the
    previous holder can no longer write. ``execution`` is the next execution number (kept only
    the first time). A queued job with a cancel requested is not taken; a running one whose
    lease expired is (someone must close its journal and end it ``cancelled``), and the record
    keeps the request: :func:`may_append` lets its new holder start no work. Taking a queued
    job counts an ``attempt``; taking over an expired one counts a ``takeover`` (a worker died:
    bounded apart from retries, so neither a crashing job nor crashing workers exhaust the
    other)."""
    if (conflict := _revision(record, expected)) is not None:
        return conflict
    if not lease > 0 or not math.isfinite(lease):
        raise ValidationError(f"a lease must be a number of seconds > 0, not {lease!r}")
    if record.status is JobStatus.QUEUED:
        if record.cancel_requested:
            return Conflict("state", f"job {record.id} has a cancel requested")
        if record.not_before is not None and now < record.not_before:
            return Conflict("not_due", f"job {record.id} waits until {record.not_before}")
    elif record.status is JobStatus.RUNNING:
        current = record.lease
        if current is not None and now < current.until:
            return Conflict("lease", f"job {record.id} is held by {current.owner!r}")
    else:
        return Conflict("state", f"job {record.id} is {record.status.value}")
    fence = record.fence + 1
    taking_over = record.status is JobStatus.RUNNING
    return _write(
        record,
        now,
        status=JobStatus.RUNNING,
        fence=fence,
        lease=Lease(owner, fence, now + lease),
        attempts=record.attempts + (0 if taking_over else 1),
        takeovers=record.takeovers + (1 if taking_over else 0),
        execution=record.execution if record.execution is not None else execution,
        not_before=None,
    )


def renew(record: JobRecord, holder: Lease, *, now: float, lease: float) -> Transition:
    """The holder extends its lease. Fenced if it is not the holder any more (also after its
    lease expired and another worker took the job); allowed after expiry while nobody has."""
    if (conflict := _holder(record, holder)) is not None:
        return conflict
    return _write(record, now, lease=Lease(holder.owner, holder.fence, now + lease))


def may_append(record: JobRecord, holder: Lease, entries: Iterable[Entry]) -> Conflict | None:
    """Whether ``holder`` may append ``entries`` to the job's journal: ``None`` when it may;
    ``Conflict("fenced")`` when it does not hold the job; ``Conflict("cancelled")`` when a cancel
    was requested and the entries would start new work (a provider call or a tool call's effect:
    see :func:`protocols.jobs.crosses`) -- what a cut run commits (its partial, its calls'
    results, its terminal) is still taken. Every store applies this check in the transaction of
    the append, so no work starts once a cancel is acknowledged, in any process."""
    if (conflict := _holder(record, holder)) is not None:
        return conflict
    if record.cancel_requested and crosses(entries):
        return Conflict(
            "cancelled", f"job {record.id} has a cancel requested: it may start no more work"
        )
    return None


def checkpoint(
    record: JobRecord, holder: Lease, *, now: float, turns: int, usage: Usage
) -> Transition:
    """The holder records what the run has spent so far (kept across attempts)."""
    if (conflict := _holder(record, holder)) is not None:
        return conflict
    return _write(record, now, turns=turns, usage=usage)


def suspend(
    record: JobRecord, holder: Lease, *, now: float, pending: Iterable[ApprovalRequest]
) -> Transition:
    """The run waits for humans: ``awaiting_input`` with the requests, held by no worker (a
    job with a cancel requested ends ``cancelled`` instead)."""
    requests = tuple(pending)
    if not requests:
        raise ValidationError("suspend needs at least one approval request")
    if (conflict := _holder(record, holder)) is not None:
        return conflict
    if record.cancel_requested:  # it would wait for answers nobody needs: it ends here
        return _write(record, now, status=JobStatus.CANCELLED, lease=None)
    return _write(
        record, now, status=JobStatus.AWAITING_INPUT, lease=None, pending=requests, answers=()
    )


def answer(
    record: JobRecord, given: ApprovalAnswer, *, now: float, expected: int | None = None
) -> Transition:
    """A human answers one pending request (from any process). When every request has its
    answer the job is queued again, to be continued by any worker. A second answer to the same
    call is ``Conflict("duplicate")`` when it says the same (a no-op: callers may treat it as
    done) and ``Conflict("waiting")`` when it differs, as is an answer to no pending call.

    An answer to a question (a request with a ``question``) that allows must carry the answer
    in ``value``, checked with :func:`~protocols.questions.check_answer` and kept in its
    canonical form: one the question refuses is ``Conflict("invalid")`` (nothing changes); one
    to an approval carries no ``value``. ``allow=False`` declines a question."""
    if (conflict := _revision(record, expected)) is not None:
        return conflict
    if record.status is not JobStatus.AWAITING_INPUT:
        landed = next((a for a in record.answers if a.call_id == given.call_id), None)
        if landed is not None and _same(landed, given):
            # An answer sent again after it landed (and the job went on): nothing to do.
            return Conflict("duplicate", f"call {given.call_id!r} of job {record.id} was answered")
        return Conflict("state", f"job {record.id} is {record.status.value}, not awaiting input")
    request = next((r for r in record.pending if r.call_id == given.call_id), None)
    if request is None:
        return Conflict("waiting", f"job {record.id} does not wait for call {given.call_id!r}")
    if request.question is None:
        if given.value is not None:
            return Conflict(
                "invalid",
                f"call {given.call_id!r} of job {record.id} asks for an approval, "
                "not an answer: allow or deny it",
            )
    elif given.allow:
        try:
            value = check_answer(request.question, given.value)
        except ValidationError as error:
            return Conflict(
                "invalid", f"call {given.call_id!r} of job {record.id}: {error.message}"
            )
        given = attrs.evolve(given, value=value)
    elif given.value is not None:
        return Conflict("invalid", "an answer that declines carries no value")
    for previous in record.answers:
        if previous.call_id == given.call_id:
            same = _same(previous, given)
            return Conflict(
                "duplicate" if same else "waiting",
                f"call {given.call_id!r} of job {record.id} was already answered "
                f"({'allow' if previous.allow else 'deny'})",
            )
    answers = (*record.answers, given)
    if len(answers) == len(record.pending):
        if record.cancel_requested:
            return _write(record, now, status=JobStatus.CANCELLED, answers=answers)
        return _write(record, now, status=JobStatus.QUEUED, answers=answers)
    return _write(record, now, answers=answers)


def _same(first: ApprovalAnswer, second: ApprovalAnswer) -> bool:
    """Two answers say the same (allow or not, and the same value)."""
    return first.allow == second.allow and first.value == second.value


def finish(
    record: JobRecord,
    holder: Lease,
    *,
    now: float,
    status: JobStatus,
    result: AgentResult | None = None,
    error: str | None = None,
    spent: tuple[int, Usage | None] | None = None,
) -> Transition:
    """The holder ends the job: ``completed``, ``partial``, ``failed`` or ``cancelled``, with its
    result or error. Of two racing finishes from one revision, exactly one applies. A job with
    a cancel requested ends ``cancelled`` whatever ``status`` says (its result, if its run had
    produced one, is kept): an acknowledged cancel is final. The job's ``turns`` and ``usage``
    become the result's; without a result, ``spent`` -- the turns and usage of the run that
    ended without one (``None`` usage: not all of it is known) -- when the holder knows them."""
    if status not in (
        JobStatus.COMPLETED,
        JobStatus.PARTIAL,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
    ):
        raise ValidationError(
            f"a job finishes completed, partial, failed or cancelled, not {status}"
        )
    if (conflict := _holder(record, holder)) is not None:
        return conflict
    if record.cancel_requested:
        status = JobStatus.CANCELLED
    usage, turns = record.usage, record.turns
    if result is not None:
        turns = max(turns, result.turns)
        usage = result.total_usage  # unknown stays unknown: not what was checkpointed before
    elif spent is not None:
        turns = max(turns, spent[0])
        usage = spent[1]
    return _write(
        record,
        now,
        status=status,
        lease=None,
        result=result,
        error=error,
        usage=usage,
        turns=turns,
    )


def retry(record: JobRecord, holder: Lease, *, now: float, delay: float, error: str) -> Transition:
    """The holder gives the attempt up (``error``) to be tried again after ``delay`` seconds,
    continuing from its journal (a job with a cancel requested ends ``cancelled`` instead)."""
    if (conflict := _holder(record, holder)) is not None:
        return conflict
    if not delay >= 0 or not math.isfinite(delay):
        raise ValidationError(f"a retry delay must be a number of seconds >= 0, not {delay!r}")
    if record.cancel_requested:  # a cancelled job is not tried again: it ends here
        return _write(record, now, status=JobStatus.CANCELLED, lease=None, error=error)
    return _write(
        record, now, status=JobStatus.QUEUED, lease=None, not_before=now + delay, error=error
    )


# ---------------------------------------------------------------------------------------------
# Anyone's side


def cancel(record: JobRecord, *, now: float, expected: int | None = None) -> Transition:
    """Cancel the job: a queued or waiting one ends ``cancelled`` at once (it never runs); a
    running one is marked, and its worker cuts the run and finishes it ``cancelled``. A
    terminal job is a conflict."""
    if (conflict := _revision(record, expected)) is not None:
        return conflict
    if record.terminal:
        return Conflict("state", f"job {record.id} has already ended ({record.status.value})")
    if record.status is JobStatus.RUNNING:
        if record.cancel_requested:
            return Conflict("state", f"job {record.id} has a cancel requested already")
        return _write(record, now, cancel_requested=True)
    return _write(record, now, status=JobStatus.CANCELLED, lease=None, cancel_requested=True)


def abandon(
    record: JobRecord,
    *,
    now: float,
    error: str,
    expected: int | None = None,
    holder: Lease | None = None,
) -> Transition:
    """Give up a job no worker can run (its agent is unknown, its journal drifted, its workers
    keep dying): ``abandoned`` -- ``cancelled`` when a cancel was requested (it is final). A
    running job only by its ``holder``, or once its lease has expired (the holder is presumed
    dead: that is the evidence)."""
    if (conflict := _revision(record, expected)) is not None:
        return conflict
    if record.terminal:
        return Conflict("state", f"job {record.id} has already ended ({record.status.value})")
    current = record.lease
    if holder is not None:
        if (conflict := _holder(record, holder)) is not None:
            return conflict
    elif record.status is JobStatus.RUNNING and current is not None and now < current.until:
        return Conflict("lease", f"job {record.id} is held by {current.owner!r}")
    status = JobStatus.CANCELLED if record.cancel_requested else JobStatus.ABANDONED
    return _write(record, now, status=status, lease=None, error=error)


def purge(record: JobRecord, *, now: float) -> Tombstone | Conflict:
    """Remove an ended job, leaving its :class:`Tombstone`. A job that has not ended is a
    conflict (purge never interrupts)."""
    if not record.terminal:
        return Conflict("state", f"job {record.id} is {record.status.value}: not ended")
    return Tombstone(record.id, record.key, now)


# ---------------------------------------------------------------------------------------------
# Order


def runnable(records: Iterable[JobRecord], *, now: float) -> list[JobRecord]:
    """The jobs a worker may acquire now, in the order to take them.

    Interrupting jobs before normal ones, each class in admission order (``sequence``; never
    ids or timestamps); before both, a running job whose lease expired (its worker is presumed
    dead), then a job that had started and was queued again (by a retry or answered
    approvals). A job waits for its children to end and for its retry delay. Of the jobs naming
    one ``conversation`` (a thread) only the first in that order may run, and none while
    another of them runs or awaits input: a thread's jobs run one at a time, in order, and a
    job held back (a retry delay, its children) holds back the ones after it."""
    everything = list(records)
    by_id = {record.id: record for record in everything}

    def order(record: JobRecord) -> tuple[int, int, int, int]:
        # A run to continue (its worker died) first; then one that had started and went back
        # to the queue (a retry, answered approvals) -- its messages are already in its thread;
        # then the priority classes, each in admission order.
        continuing = 0 if record.status is JobStatus.RUNNING else 1
        started = 0 if record.execution is not None else 1
        interrupting = 0 if record.priority is Priority.INTERRUPT else 1
        return (continuing, started, interrupting, record.sequence)

    def due(record: JobRecord) -> bool:
        if record.status is JobStatus.QUEUED:
            if record.cancel_requested:
                return False
            if record.not_before is not None and now < record.not_before:
                return False
            return all(child not in by_id or by_id[child].terminal for child in record.children)
        if record.status is JobStatus.RUNNING:
            current = record.lease
            return current is None or now >= current.until
        return False

    heads: dict[str, JobRecord] = {}
    busy: set[str] = set()
    for record in everything:
        thread = record.conversation
        if thread is None or record.terminal:
            continue
        if record.status is JobStatus.AWAITING_INPUT or (
            record.status is JobStatus.RUNNING and not due(record)
        ):
            busy.add(thread)
        head = heads.get(thread)
        if head is None or order(record) < order(head):
            heads[thread] = record
    out = [
        record
        for record in everything
        if due(record)
        and (
            record.conversation is None
            or (record.conversation not in busy and heads[record.conversation] is record)
        )
    ]
    out.sort(key=order)
    return out
