"""Tests for the job record and its state machine (protocols.jobs._record), without an event loop.

Named tests for every transition (admission, acquisition, renewal, checkpoint, suspension and
answers, finish, retry, cancel, abandon, purge), fencing, and the order ``runnable`` gives; then a
stateful property (hypothesis.stateful) of a tiny in-test store that applies transitions with
compare-and-swap, driven by admissions, acquisitions by several workers at random times, writes,
crashes, cancels, answers and purges, with the record invariants checked after every step.

The store's rule is modelled exactly as the module states it: an ``Applied`` transition is
written only if the stored revision is still ``Applied.expected``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from protocols.codec import decode, encode
from protocols.errors import ValidationError
from protocols.jobs import (
    TERMINAL,
    AgentJob,
    Applied,
    ApprovalAnswer,
    ApprovalRequest,
    CheckpointEntry,
    Conflict,
    IntentEntry,
    JobRecord,
    JobStatus,
    Lease,
    Priority,
    RequestEntry,
    ResultEntry,
    TerminalEntry,
    Tombstone,
    Transition,
    abandon,
    acquire,
    admission,
    admit,
    admit_tree,
    answer,
    cancel,
    checkpoint,
    finish,
    may_append,
    purge,
    renew,
    retry,
    runnable,
    suspend,
)
from protocols.messages import AgentResult, FinishReason, StopReason, ToolCall, ToolFailure, Usage

T0 = 1_000.0
LEASE = 30.0
FINISHES = (JobStatus.COMPLETED, JobStatus.PARTIAL, JobStatus.FAILED, JobStatus.CANCELLED)


# --------------------------------------------------------------------------- helpers


def job(conversation: str | None = None) -> AgentJob:
    return AgentJob.ask("agent", "hi", conversation=conversation)


def queued(
    id: str = "j1",
    sequence: int = 1,
    *,
    conversation: str | None = None,
    now: float = T0,
    **fields: object,
) -> JobRecord:
    return admit(id, job(conversation), sequence=sequence, now=now, **fields)  # type: ignore[arg-type]


def applied(transition: Transition) -> JobRecord:
    assert isinstance(transition, Applied), transition
    assert transition.record.revision == transition.expected + 1
    return transition.record


def conflict(transition: Transition | Tombstone, reason: str) -> Conflict:
    assert isinstance(transition, Conflict), transition
    assert transition.reason == reason, transition
    assert transition.detail
    return transition


def take(
    record: JobRecord, owner: str = "w1", *, now: float = T0, execution: int = 1
) -> tuple[JobRecord, Lease]:
    """``owner`` acquires ``record``: the new record and the lease the worker holds."""
    new = applied(acquire(record, owner=owner, now=now, lease=LEASE, execution=execution))
    assert new.lease is not None
    return new, new.lease


def ended(status: JobStatus, id: str = "j1", **fields: object) -> JobRecord:
    record, lease = take(queued(id, **fields))  # type: ignore[arg-type]
    if status is JobStatus.ABANDONED:
        return applied(abandon(record, now=lease.until, error="gone"))
    return applied(finish(record, lease, now=T0 + 1, status=status))


def ids(records: Iterable[JobRecord]) -> list[str]:
    return [record.id for record in records]


class Store:
    """The smallest store: records by id, tombstones by id, keys to ids, writes by CAS."""

    def __init__(self) -> None:
        self.records: dict[str, JobRecord] = {}
        self.tombstones: dict[str, Tombstone] = {}
        self.keys: dict[str, str] = {}

    def insert(self, record: JobRecord) -> None:
        assert record.id not in self.records
        assert record.id not in self.tombstones
        self.records[record.id] = record
        if record.key is not None:
            assert record.key not in self.keys
            self.keys[record.key] = record.id

    def under_key(self, key: str) -> JobRecord | Tombstone | None:
        id = self.keys.get(key)
        if id is None:
            return None
        return self.records.get(id) or self.tombstones[id]

    def write(self, transition: Transition) -> JobRecord | None:
        """Apply only if the stored revision is still the one the transition was made from."""
        if isinstance(transition, Conflict):
            return None
        stored = self.records[transition.record.id]
        if stored.revision != transition.expected:
            return None
        self.records[stored.id] = transition.record
        return transition.record

    def remove(self, tombstone: Tombstone) -> None:
        del self.records[tombstone.id]
        self.tombstones[tombstone.id] = tombstone


# --------------------------------------------------------------------------- admission


def test_admit_makes_a_queued_record_at_revision_one() -> None:
    record = admit(
        "j1",
        job("t"),
        sequence=7,
        now=T0,
        key="k",
        priority=Priority.INTERRUPT,
        parent="p",
        children=["c1", "c2"],
    )
    assert record.status is JobStatus.QUEUED
    assert (record.revision, record.fence, record.attempts, record.lease) == (1, 0, 0, None)
    assert (record.sequence, record.key, record.priority) == (7, "k", Priority.INTERRUPT)
    assert (record.parent, record.children) == ("p", ("c1", "c2"))
    assert record.created_at == record.updated_at == T0
    assert record.conversation == "t"
    assert record.execution is None
    assert not record.terminal


def test_admission_without_anything_under_the_key_is_new() -> None:
    decision = admission(None, job())
    assert decision.decision == "new"
    assert decision.existing is None


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RUNNING, *sorted(TERMINAL)])
def test_admission_with_a_used_key_returns_the_existing_job(status: JobStatus) -> None:
    existing = attrs.evolve(queued(key="k"), status=status)
    decision = admission(existing, job())
    assert decision.decision == "duplicate"
    assert decision.existing is existing


def test_admission_with_a_purged_key_is_refused() -> None:
    tombstone = purge(ended(JobStatus.COMPLETED, key="k"), now=T0 + 5)
    assert isinstance(tombstone, Tombstone)
    decision = admission(tombstone, job())
    assert decision.decision == "refused"
    assert decision.existing is None
    assert "j1" in decision.detail
    assert "purged" in decision.detail


def test_admit_tree_puts_children_first_and_the_parent_waits_for_them() -> None:
    leaf = AgentJob.ask("agent", "leaf")
    tree = AgentJob.ask(
        "agent",
        "top",
        children=[AgentJob.ask("agent", "a", children=[leaf]), AgentJob.ask("agent", "b")],
    )
    records = admit_tree(
        tree,
        ids=iter(["top", "a", "leaf", "b"]),
        first_sequence=10,
        now=T0,
        key="k",
        priority=Priority.INTERRUPT,
    )
    by_id = {record.id: record for record in records}
    assert [record.sequence for record in records] == [10, 11, 12, 13]
    # Each child comes before its parent (a smaller sequence).
    for record in records:
        for child in record.children:
            assert by_id[child].sequence < record.sequence
            assert by_id[child].parent == record.id
    assert by_id["top"].children == ("a", "b")
    assert by_id["a"].children == ("leaf",)
    assert by_id["top"].parent is None
    # Only the top job carries the key; the priority is the whole tree's (a child must never
    # wait behind the parent that waits for it).
    assert [(r.id, r.key) for r in records if r.key] == [("top", "k")]
    assert {r.priority for r in records} == {Priority.INTERRUPT}
    assert all(record.status is JobStatus.QUEUED for record in records)


# --------------------------------------------------------------------------- acquire


def test_admit_tree_takes_given_sequence_numbers_in_order() -> None:
    # A store whose numbers come from a database sequence gives them, with gaps, as they come.
    tree = AgentJob.ask("agent", "top", children=[AgentJob.ask("agent", "a")])
    records = admit_tree(tree, ids=iter(["top", "a"]), sequences=[7, 40], now=T0)
    assert [(record.id, record.sequence) for record in records] == [("a", 7), ("top", 40)]
    for wrong in ({}, {"first_sequence": 1, "sequences": [1, 2]}):
        with pytest.raises(ValidationError, match="exactly one of"):
            admit_tree(tree, ids=iter(["top", "a"]), now=T0, **wrong)  # type: ignore[arg-type]


def test_acquire_a_queued_job() -> None:
    record = queued()
    transition = acquire(record, owner="w1", now=T0 + 2, lease=LEASE, execution=4)
    assert isinstance(transition, Applied)
    assert transition.expected == 1
    taken = transition.record
    assert taken.status is JobStatus.RUNNING
    assert taken.revision == 2
    assert taken.fence == 1
    assert taken.lease == Lease("w1", 1, T0 + 2 + LEASE)
    assert (taken.attempts, taken.execution, taken.updated_at) == (1, 4, T0 + 2)
    assert taken.held_by(Lease("w1", 1, 0.0))
    # The input is unchanged.
    assert record.status is JobStatus.QUEUED
    assert record.revision == 1


def test_acquire_a_due_retry() -> None:
    record, lease = take(queued())
    waiting = applied(retry(record, lease, now=T0 + 1, delay=10, error="boom"))
    taken = applied(acquire(waiting, owner="w2", now=T0 + 11, lease=LEASE, execution=9))
    assert taken.not_before is None
    assert taken.attempts == 2
    assert taken.fence == 2
    # The execution number is kept from the first acquisition.
    assert taken.execution == 1


def test_acquire_refuses_a_job_not_yet_due() -> None:
    record, lease = take(queued())
    waiting = applied(retry(record, lease, now=T0 + 1, delay=10, error="boom"))
    conflict(acquire(waiting, owner="w2", now=T0 + 10.5, lease=LEASE, execution=2), "not_due")


def test_acquire_takes_over_a_running_job_whose_lease_expired() -> None:
    record, first = take(queued(), "w1")
    again = applied(acquire(record, owner="w2", now=first.until, lease=LEASE, execution=99))
    assert again.fence == 2
    assert again.lease == Lease("w2", 2, first.until + LEASE)
    assert again.execution == 1
    assert not again.held_by(first)
    assert again.held_by(Lease("w2", 2, 0.0))


def test_acquire_refuses_a_held_job() -> None:
    record, lease = take(queued(), "w1")
    conflict(
        acquire(record, owner="w2", now=lease.until - 0.001, lease=LEASE, execution=2), "lease"
    )
    # Not even its own holder takes it twice.
    conflict(acquire(record, owner="w1", now=T0 + 1, lease=LEASE, execution=2), "lease")


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_acquire_refuses_a_terminal_job(status: JobStatus) -> None:
    conflict(acquire(ended(status), owner="w2", now=T0 + 99, lease=LEASE, execution=2), "state")


def test_acquire_refuses_a_job_awaiting_input() -> None:
    record, lease = take(queued())
    waiting = applied(suspend(record, lease, now=T0, pending=[ApprovalRequest("c1", "tool")]))
    conflict(acquire(waiting, owner="w2", now=T0 + 99, lease=LEASE, execution=2), "state")


def test_acquire_refuses_a_queued_job_with_a_cancel_requested() -> None:
    record = attrs.evolve(queued(), cancel_requested=True)
    conflict(acquire(record, owner="w1", now=T0, lease=LEASE, execution=1), "state")


def test_acquire_with_a_stale_revision_conflicts() -> None:
    conflict(
        acquire(queued(), owner="w1", now=T0, lease=LEASE, execution=1, expected=7), "revision"
    )
    assert isinstance(
        acquire(queued(), owner="w1", now=T0, lease=LEASE, execution=1, expected=1), Applied
    )


@pytest.mark.parametrize("lease", [0, -1, float("nan"), float("inf")])
def test_acquire_needs_a_positive_finite_lease(lease: float) -> None:
    with pytest.raises(ValidationError, match="lease"):
        acquire(queued(), owner="w1", now=T0, lease=lease, execution=1)


# --------------------------------------------------------------------------- holder's writes


def test_renew_extends_the_lease() -> None:
    record, lease = take(queued())
    renewed = applied(renew(record, lease, now=T0 + 20, lease=LEASE))
    assert renewed.lease == Lease("w1", 1, T0 + 20 + LEASE)
    assert renewed.fence == 1
    # The old lease object still names the holder: owner and fence, not the deadline.
    assert renewed.held_by(lease)
    conflict(acquire(renewed, owner="w2", now=T0 + 40, lease=LEASE, execution=2), "lease")


def test_renew_after_expiry_is_allowed_while_nobody_took_the_job() -> None:
    record, lease = take(queued())
    renewed = applied(renew(record, lease, now=lease.until + 100, lease=LEASE))
    assert renewed.lease is not None
    assert renewed.lease.until == lease.until + 100 + LEASE


def test_renew_by_another_owner_or_fence_is_fenced() -> None:
    record, lease = take(queued())
    conflict(renew(record, Lease("w2", 1, lease.until), now=T0, lease=LEASE), "fenced")
    conflict(renew(record, Lease("w1", 0, lease.until), now=T0, lease=LEASE), "fenced")
    conflict(renew(record, Lease("w1", 2, lease.until), now=T0, lease=LEASE), "fenced")


def test_checkpoint_records_what_the_run_spent_and_it_is_kept_across_attempts() -> None:
    record, lease = take(queued())
    spent = Usage(prompt=10, completion=5)
    marked = applied(checkpoint(record, lease, now=T0 + 1, turns=3, usage=spent))
    assert (marked.turns, marked.usage, marked.status) == (3, spent, JobStatus.RUNNING)
    # Another worker continues after a crash: the spending carries over.
    again, _ = take(marked, "w2", now=lease.until + 1)
    assert (again.turns, again.usage) == (3, spent)
    assert again.lease is not None
    queued_again = applied(retry(again, again.lease, now=lease.until + 2, delay=0, error="x"))
    assert (queued_again.turns, queued_again.usage) == (3, spent)


def test_suspend_waits_for_humans_without_a_holder() -> None:
    record, lease = take(queued())
    requests = [ApprovalRequest("c1", "rm", "deletes"), ApprovalRequest("c2", "rm")]
    waiting = applied(suspend(record, lease, now=T0 + 1, pending=requests))
    assert waiting.status is JobStatus.AWAITING_INPUT
    assert waiting.lease is None
    assert waiting.pending == tuple(requests)
    assert waiting.answers == ()
    assert not waiting.terminal
    # The holder lost it: the run waits for answers, not for a worker.
    conflict(renew(waiting, lease, now=T0 + 2, lease=LEASE), "fenced")


def test_suspend_needs_a_request() -> None:
    record, lease = take(queued())
    with pytest.raises(ValidationError, match="approval request"):
        suspend(record, lease, now=T0, pending=[])


def suspended(*calls: str, conversation: str | None = None) -> JobRecord:
    record, lease = take(queued(conversation=conversation))
    return applied(
        suspend(record, lease, now=T0, pending=[ApprovalRequest(c, "tool") for c in calls])
    )


def test_partial_answers_keep_the_job_awaiting_input() -> None:
    waiting = suspended("c1", "c2", "c3")
    once = applied(answer(waiting, ApprovalAnswer("c2", True), now=T0 + 1))
    twice = applied(answer(once, ApprovalAnswer("c1", False, "no"), now=T0 + 2))
    assert once.status is twice.status is JobStatus.AWAITING_INPUT
    assert twice.answers == (ApprovalAnswer("c2", True), ApprovalAnswer("c1", False, "no"))
    conflict(acquire(twice, owner="w2", now=T0 + 3, lease=LEASE, execution=2), "state")


def test_all_answers_requeue_the_job_and_a_worker_continues_it() -> None:
    waiting = suspended("c1", "c2")
    once = applied(answer(waiting, ApprovalAnswer("c1", True), now=T0 + 1))
    done = applied(answer(once, ApprovalAnswer("c2", False), now=T0 + 2))
    assert done.status is JobStatus.QUEUED
    assert done.lease is None
    assert ids(runnable([done], now=T0 + 2)) == ["j1"]
    taken, _ = take(done, "w2", now=T0 + 3)
    # The continuing worker sees the requests and their answers.
    assert {a.call_id: a.allow for a in taken.answers} == {"c1": True, "c2": False}
    assert [r.call_id for r in taken.pending] == ["c1", "c2"]
    assert (taken.fence, taken.attempts, taken.execution) == (2, 2, 1)


def test_a_second_answer_to_a_call_conflicts() -> None:
    once = applied(answer(suspended("c1", "c2"), ApprovalAnswer("c1", True), now=T0 + 1))
    # The same answer again is a no-op duplicate; a different one is refused.
    conflict(answer(once, ApprovalAnswer("c1", True), now=T0 + 2), "duplicate")
    conflict(answer(once, ApprovalAnswer("c1", False), now=T0 + 2), "waiting")


def test_an_answer_to_an_unknown_call_conflicts() -> None:
    conflict(answer(suspended("c1"), ApprovalAnswer("c9", True), now=T0), "waiting")


def test_an_answer_to_a_job_not_awaiting_input_conflicts() -> None:
    conflict(answer(queued(), ApprovalAnswer("c1", True), now=T0), "state")
    conflict(answer(ended(JobStatus.COMPLETED), ApprovalAnswer("c1", True), now=T0), "state")


def test_an_answer_from_a_stale_read_conflicts() -> None:
    waiting = suspended("c1")
    conflict(
        answer(waiting, ApprovalAnswer("c1", True), now=T0, expected=waiting.revision - 1),
        "revision",
    )


@pytest.mark.parametrize("status", FINISHES)
def test_finish_ends_the_job(status: JobStatus) -> None:
    record, lease = take(queued())
    result = AgentResult(
        "done",
        usage=Usage(3, 4),
        stop=StopReason.COMPLETE if status == "completed" else "cancelled",
    )
    done = applied(finish(record, lease, now=T0 + 5, status=status, result=result))
    assert done.status is status
    assert done.terminal
    assert done.lease is None
    assert done.result == result
    assert done.usage == Usage(3, 4)
    assert done.updated_at == T0 + 5


def test_finish_without_a_result_keeps_the_checkpointed_usage_and_the_error() -> None:
    record, lease = take(queued())
    marked = applied(checkpoint(record, lease, now=T0, turns=2, usage=Usage(5, 5)))
    failed = applied(finish(marked, lease, now=T0 + 1, status=JobStatus.FAILED, error="boom"))
    assert (failed.usage, failed.error, failed.result, failed.turns) == (
        Usage(5, 5),
        "boom",
        None,
        2,
    )


def test_finish_with_a_result_whose_usage_is_unknown_leaves_the_jobs_usage_unknown() -> None:
    # What was checkpointed is a part: shown as the job's usage it would be an undercount.
    record, lease = take(queued())
    marked = applied(checkpoint(record, lease, now=T0, turns=1, usage=Usage(5, 5)))
    result = AgentResult("cut", usage=None, stop=StopReason.MAX_TOKENS, finish="length")
    ended = applied(finish(marked, lease, now=T0 + 1, status=JobStatus.PARTIAL, result=result))
    assert ended.usage is None
    assert ended.result == result
    assert (ended.result.stop, ended.result.finish) == (StopReason.MAX_TOKENS, FinishReason.LENGTH)
    # And it is stored as such: the record's JSON reads back the same.
    assert decode(JobRecord, encode(ended)) == ended


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.ABANDONED])
def test_finish_only_to_a_finishing_state(status: JobStatus) -> None:
    record, lease = take(queued())
    with pytest.raises(ValidationError):
        finish(record, lease, now=T0, status=status)


def test_of_two_finishes_racing_from_one_revision_exactly_one_applies() -> None:
    store = Store()
    record, lease = take(queued())
    store.insert(record)
    first = finish(record, lease, now=T0 + 1, status=JobStatus.COMPLETED)
    second = finish(record, lease, now=T0 + 1, status=JobStatus.FAILED, error="x")
    # Both were made from one read; the store's compare-and-swap lets exactly one through.
    assert isinstance(first, Applied)
    assert isinstance(second, Applied)
    assert first.expected == second.expected == record.revision
    assert store.write(second) is not None
    assert store.write(first) is None
    assert store.records["j1"].status is JobStatus.FAILED
    # Read again, the loser sees a terminal job held by nobody.
    conflict(finish(store.records["j1"], lease, now=T0 + 2, status=JobStatus.COMPLETED), "fenced")


def test_a_finish_racing_a_cancel_from_one_revision() -> None:
    store = Store()
    record, lease = take(queued())
    store.insert(record)
    requested = cancel(record, now=T0 + 1)
    done = finish(record, lease, now=T0 + 1, status=JobStatus.COMPLETED)
    assert store.write(requested) is not None
    assert store.write(done) is None
    # The worker reads again: still its job, now with a cancel requested.
    fresh = store.records["j1"]
    assert fresh.cancel_requested
    assert store.write(finish(fresh, lease, now=T0 + 2, status=JobStatus.CANCELLED)) is not None
    assert store.records["j1"].status is JobStatus.CANCELLED


def test_retry_requeues_with_a_delay() -> None:
    record, lease = take(queued())
    waiting = applied(retry(record, lease, now=T0 + 3, delay=7, error="provider down"))
    assert waiting.status is JobStatus.QUEUED
    assert waiting.lease is None
    assert waiting.not_before == T0 + 10
    assert waiting.error == "provider down"
    assert ids(runnable([waiting], now=T0 + 9.99)) == []
    assert ids(runnable([waiting], now=T0 + 10)) == ["j1"]
    # The old holder cannot write any more.
    conflict(renew(waiting, lease, now=T0 + 4, lease=LEASE), "fenced")


@pytest.mark.parametrize("delay", [-1, float("nan"), float("inf")])
def test_retry_needs_a_finite_delay(delay: float) -> None:
    record, lease = take(queued())
    with pytest.raises(ValidationError, match="delay"):
        retry(record, lease, now=T0, delay=delay, error="x")


# --------------------------------------------------------------------------- anyone's writes


def test_cancel_a_queued_job_at_once() -> None:
    done = applied(cancel(queued(), now=T0 + 1))
    assert done.status is JobStatus.CANCELLED
    assert done.terminal
    assert runnable([done], now=T0 + 2) == []


def test_cancel_a_job_awaiting_input_at_once() -> None:
    done = applied(cancel(suspended("c1"), now=T0 + 1))
    assert done.status is JobStatus.CANCELLED
    assert done.pending  # kept for the record


def test_cancel_a_running_job_requests_it_of_its_worker() -> None:
    record, lease = take(queued())
    marked = applied(cancel(record, now=T0 + 1))
    assert marked.status is JobStatus.RUNNING
    assert marked.cancel_requested
    assert marked.held_by(lease)
    conflict(cancel(marked, now=T0 + 2), "state")
    done = applied(finish(marked, lease, now=T0 + 3, status=JobStatus.CANCELLED))
    assert done.status is JobStatus.CANCELLED


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_cancel_a_terminal_job_conflicts(status: JobStatus) -> None:
    conflict(cancel(ended(status), now=T0 + 9), "state")


def test_cancel_from_a_stale_read_conflicts() -> None:
    conflict(cancel(queued(), now=T0, expected=5), "revision")


def test_abandon_a_queued_or_waiting_job() -> None:
    done = applied(abandon(queued(), now=T0 + 1, error="unknown agent"))
    assert (done.status, done.error) == (JobStatus.ABANDONED, "unknown agent")
    assert applied(abandon(suspended("c1"), now=T0, error="x")).status is JobStatus.ABANDONED


def test_abandon_a_running_job_only_after_its_lease_expired() -> None:
    record, lease = take(queued())
    conflict(abandon(record, now=lease.until - 0.5, error="dead?"), "lease")
    done = applied(abandon(record, now=lease.until, error="worker gone"))
    assert done.status is JobStatus.ABANDONED
    assert done.lease is None
    conflict(renew(done, lease, now=lease.until, lease=LEASE), "fenced")


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_abandon_a_terminal_job_conflicts(status: JobStatus) -> None:
    conflict(abandon(ended(status), now=T0 + 99, error="x"), "state")


def test_abandon_from_a_stale_read_conflicts() -> None:
    conflict(abandon(queued(), now=T0, error="x", expected=3), "revision")


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_purge_a_terminal_job_leaves_a_tombstone(status: JobStatus) -> None:
    tombstone = purge(ended(status, key="k"), now=T0 + 50)
    assert tombstone == Tombstone("j1", "k", T0 + 50)


def test_purge_a_job_that_has_not_ended_conflicts() -> None:
    conflict(purge(queued(), now=T0), "state")
    conflict(purge(take(queued())[0], now=T0), "state")
    conflict(purge(suspended("c1"), now=T0), "state")


# --------------------------------------------------------------------------- fencing


def every_write(record: JobRecord, lease: Lease, now: float) -> dict[str, Transition]:
    return {
        "renew": renew(record, lease, now=now, lease=LEASE),
        "checkpoint": checkpoint(record, lease, now=now, turns=1, usage=Usage()),
        "suspend": suspend(record, lease, now=now, pending=[ApprovalRequest("c", "t")]),
        "retry": retry(record, lease, now=now, delay=0, error="x"),
        **{
            f"finish-{status.value}": finish(record, lease, now=now, status=status)
            for status in FINISHES
        },
    }


def test_a_worker_whose_job_was_taken_over_is_fenced_on_every_write() -> None:
    record, old = take(queued(), "w1")
    late = old.until + 1
    record, new = take(record, "w2", now=late)
    for name, transition in every_write(record, old, late + 1).items():
        assert isinstance(transition, Conflict), name
        assert transition.reason == "fenced", name
    # The new holder can do every one of them.
    for name, transition in every_write(record, new, late + 1).items():
        assert isinstance(transition, Applied), name


def test_the_same_owner_restarted_is_fenced_with_its_old_lease() -> None:
    record, old = take(queued(), "w1")
    record, new = take(record, "w1", now=old.until)
    assert new.owner == old.owner
    assert new.fence == old.fence + 1
    for name, transition in every_write(record, old, old.until + 1).items():
        assert isinstance(transition, Conflict), name
        assert transition.reason == "fenced", name


def test_a_lease_from_before_a_requeue_is_fenced() -> None:
    record, old = take(queued(), "w1")
    record = applied(retry(record, old, now=T0 + 1, delay=0, error="x"))
    for transition in every_write(record, old, T0 + 2).values():
        conflict(transition, "fenced")
    record, new = take(record, "w1", now=T0 + 2)
    for transition in every_write(record, old, T0 + 3).values():
        conflict(transition, "fenced")
    assert isinstance(renew(record, new, now=T0 + 3, lease=LEASE), Applied)


def test_fenced_writes_name_the_job_and_the_fence() -> None:
    record, old = take(queued(), "w1")
    record, _ = take(record, "w2", now=old.until)
    refused = conflict(renew(record, old, now=old.until, lease=LEASE), "fenced")
    assert "j1" in refused.detail
    assert "'w1'" in refused.detail
    assert "fence 1" in refused.detail


# --------------------------------------------------------------------------- runnable


def test_interrupting_jobs_go_before_normal_ones() -> None:
    records = [
        queued("n1", 1),
        queued("i1", 2, priority=Priority.INTERRUPT),
        queued("n2", 3),
        queued("i2", 4, priority=Priority.INTERRUPT),
    ]
    assert ids(runnable(records, now=T0)) == ["i1", "i2", "n1", "n2"]


def test_order_is_by_sequence_never_by_id_or_timestamp() -> None:
    # Ids sort the other way, and so do the admission timestamps.
    records = [
        queued("a-3", 3, now=T0 - 30),
        queued("z-1", 1, now=T0),
        queued("m-2", 2, now=T0 - 10),
        queued("a-5", 5, priority=Priority.INTERRUPT, now=T0 - 50),
        queued("z-4", 4, priority=Priority.INTERRUPT, now=T0),
    ]
    assert ids(runnable(records, now=T0)) == ["z-4", "a-5", "z-1", "m-2", "a-3"]
    assert ids(runnable(reversed(records), now=T0)) == ["z-4", "a-5", "z-1", "m-2", "a-3"]


def test_a_job_whose_lease_expired_is_continued_first() -> None:
    crashed, lease = take(queued("late", 9))
    records = [queued("i", 1, priority=Priority.INTERRUPT), queued("n", 2), crashed]
    assert ids(runnable(records, now=lease.until - 1)) == ["i", "n"]
    assert ids(runnable(records, now=lease.until)) == ["late", "i", "n"]


def test_a_thread_runs_one_job_at_a_time_in_order() -> None:
    store = Store()
    for id, seq in (("z-1", 1), ("a-2", 2), ("m-3", 3)):
        store.insert(queued(id, seq, conversation="t"))
    store.insert(queued("other", 4))
    assert ids(runnable(store.records.values(), now=T0)) == ["z-1", "other"]
    order = []
    now = T0
    while any(not r.terminal for r in store.records.values() if r.conversation == "t"):
        head = next(r for r in runnable(store.records.values(), now=now) if r.conversation)
        record, lease = take(head, now=now)
        store.records[record.id] = record
        # While it runs, nothing else of its thread is runnable.
        assert [r.id for r in runnable(store.records.values(), now=now) if r.conversation] == []
        store.records[record.id] = applied(
            finish(record, lease, now=now, status=JobStatus.COMPLETED)
        )
        order.append(record.id)
        now += 1
    assert order == ["z-1", "a-2", "m-3"]


def test_a_thread_waits_while_one_of_its_jobs_awaits_input() -> None:
    waiting = suspended("c1", conversation="t")
    later = queued("j2", 2, conversation="t")
    free = queued("j3", 3, conversation="u")
    assert ids(runnable([waiting, later, free], now=T0 + 99)) == ["j3"]


def test_a_held_back_job_holds_back_its_thread() -> None:
    first, lease = take(queued("j1", 1, conversation="t"))
    delayed = applied(retry(first, lease, now=T0, delay=60, error="x"))
    later = queued("j2", 2, conversation="t")
    elsewhere = queued("j3", 3)
    assert ids(runnable([delayed, later, elsewhere], now=T0 + 30)) == ["j3"]
    assert ids(runnable([delayed, later, elsewhere], now=T0 + 60)) == ["j1", "j3"]


def test_a_parent_waiting_for_its_children_holds_back_its_thread() -> None:
    child = queued("child", 1)
    parent = queued("parent", 2, conversation="t", children=["child"])
    later = queued("later", 3, conversation="t")
    assert ids(runnable([child, parent, later], now=T0)) == ["child"]


def test_children_run_before_their_parent() -> None:
    tree = AgentJob.ask(
        "agent", "top", children=[AgentJob.ask("agent", "a"), AgentJob.ask("agent", "b")]
    )
    records = {r.id: r for r in admit_tree(tree, ids=["p", "c1", "c2"], first_sequence=1, now=T0)}
    assert ids(runnable(records.values(), now=T0)) == ["c1", "c2"]
    record, lease = take(records["c1"])
    records["c1"] = applied(finish(record, lease, now=T0, status=JobStatus.FAILED))
    assert ids(runnable(records.values(), now=T0)) == ["c2"]
    records["c2"] = applied(cancel(records["c2"], now=T0))
    # Every child ended (whichever way): the parent runs.
    assert ids(runnable(records.values(), now=T0)) == ["p"]


def test_a_purged_child_counts_as_ended() -> None:
    parent = queued("p", 2, children=["gone"])
    assert ids(runnable([parent], now=T0)) == ["p"]


def test_runnable_leaves_out_what_cannot_be_taken() -> None:
    held, _ = take(queued("held", 1))
    records = [
        held,
        suspended("c1"),
        ended(JobStatus.COMPLETED, "done"),
        attrs.evolve(queued("cancelling", 4), cancel_requested=True),
        queued("ok", 5),
    ]
    assert ids(runnable(records, now=T0 + 1)) == ["ok"]


# --------------------------------------------------------------------------- state machine


WORKERS = ("w1", "w2", "w3")
THREADS = (None, None, "t1", "t2")
KEYS = (None, None, "k1", "k2", "k3")


def order(record: JobRecord) -> tuple[int, int, int, int]:
    """The order documented for ``runnable``: continuing, then started before (queued again),
    then interrupting, then FIFO."""
    return (
        0 if record.status is JobStatus.RUNNING else 1,
        0 if record.execution is not None else 1,
        0 if record.priority is Priority.INTERRUPT else 1,
        record.sequence,
    )


class JobMachine(RuleBasedStateMachine):
    """Random admissions, acquisitions, writes and crashes against a CAS store."""

    def __init__(self) -> None:
        super().__init__()
        self.store = Store()
        self.now = T0
        self.next_id = 0
        self.next_sequence = 1
        self.next_execution = 1
        # What each worker believes it holds: job id -> (its lease, the record as it last read it).
        self.holds: dict[str, dict[str, tuple[Lease, JobRecord]]] = {w: {} for w in WORKERS}
        # Every lease ever given out, by job (for writes by stale holders).
        self.leases: dict[str, list[Lease]] = {}
        self.acquisitions: dict[str, int] = {}
        self.revisions: dict[str, int] = {}
        self.frozen: dict[str, JobRecord] = {}
        self.key_of: dict[str, str] = {}  # key -> the id it was first admitted as
        self.purged: set[str] = set()
        # Jobs whose cancel was acknowledged (written): from then on, no more work.
        self.cancelled: set[str] = set()

    # ----------------------------------------------------------------- helpers

    def live(self) -> list[JobRecord]:
        return sorted(self.store.records.values(), key=lambda r: r.sequence)

    def pick(self, index: int, predicate: Callable[[JobRecord], bool]) -> JobRecord | None:
        candidates = [r for r in self.live() if predicate(r)]
        return candidates[index % len(candidates)] if candidates else None

    def write(self, transition: Transition, writer: Lease | None = None) -> JobRecord | None:
        """Write through the store's CAS, checking what a successful write implies."""
        before = None
        if isinstance(transition, Applied):
            before = self.store.records[transition.record.id]
        written = self.store.write(transition)
        if written is not None:
            assert before is not None
            assert written.revision == before.revision + 1
            assert before.id not in self.frozen, "a terminal record changed"
            if writer is not None:
                # Only the current holder ever writes.
                assert before.held_by(writer)
                assert before.lease is not None
                assert (before.lease.owner, before.lease.fence) == (writer.owner, writer.fence)
        return written

    def stale(self) -> list[tuple[str, Lease]]:
        """Leases given out whose holders lost them, with their jobs."""
        return [
            (id, lease)
            for id, leases in sorted(self.leases.items())
            if id in self.store.records
            for lease in leases
            if not self.store.records[id].held_by(lease)
        ]

    def unfinished(self) -> bool:
        return any(not r.terminal for r in self.store.records.values())

    def awaiting(self) -> bool:
        return any(r.status is JobStatus.AWAITING_INPUT for r in self.store.records.values())

    def ended(self) -> bool:
        return any(r.terminal for r in self.store.records.values())

    def new_ids(self, count: int) -> list[str]:
        out = []
        for _ in range(count):
            self.next_id += 1
            # Ids that sort against admission order, so that nothing can order by them.
            out.append(f"{'zyxwvutsrq'[self.next_id % 10]}-{self.next_id}")
        return out

    # ----------------------------------------------------------------- rules

    @rule(
        thread=st.sampled_from(THREADS),
        key=st.sampled_from(KEYS),
        interrupt=st.booleans(),
        children=st.integers(0, 2),
        child_threads=st.sampled_from(THREADS),
    )
    def admit(
        self,
        thread: str | None,
        key: str | None,
        interrupt: bool,
        children: int,
        child_threads: str | None,
    ) -> None:
        new = AgentJob.ask(
            "agent",
            "hi",
            conversation=thread,
            children=[AgentJob.ask("agent", "c", conversation=child_threads)] * children,
        )
        if key is not None:
            decision = admission(self.store.under_key(key), new)
            if key not in self.key_of:
                assert decision.decision == "new"
            elif self.key_of[key] in self.purged:
                assert decision.decision == "refused"
                return
            else:
                assert decision.decision == "duplicate"
                assert decision.existing is not None
                assert decision.existing.id == self.key_of[key]
                assert decision.existing == self.store.records[self.key_of[key]]
                return
        records = admit_tree(
            new,
            ids=self.new_ids(1 + children),
            first_sequence=self.next_sequence,
            now=self.now,
            key=key,
            priority=Priority.INTERRUPT if interrupt else Priority.NORMAL,
        )
        self.next_sequence += len(records)
        for record in records:
            self.store.insert(record)
            self.revisions[record.id] = record.revision
            self.acquisitions[record.id] = 0
            self.leases[record.id] = []
        if key is not None:
            self.key_of[key] = records[-1].id

    @rule(worker=st.sampled_from(WORKERS), index=st.integers(0, 20), dt=st.integers(0, 40))
    def acquire(self, worker: str, index: int, dt: int) -> None:
        self.now += dt
        candidates = runnable(self.store.records.values(), now=self.now)
        if not candidates:
            return
        record = candidates[min(index, len(candidates) - 1) if index < 10 else 0]
        transition = acquire(
            record,
            owner=worker,
            now=self.now,
            lease=LEASE,
            execution=self.next_execution,
            expected=record.revision,
        )
        written = self.write(transition)
        assert written is not None, transition  # runnable now means takeable now
        self.next_execution += 1
        self.acquisitions[record.id] += 1
        assert written.fence == record.fence + 1
        assert written.lease is not None
        assert written.lease.owner == worker
        self.leases[record.id].append(written.lease)
        self.holds[worker][record.id] = (written.lease, written)

    @precondition(lambda self: any(self.holds.values()))
    @rule(
        index=st.integers(0, 20),
        action=st.sampled_from(
            ["renew", "checkpoint", "suspend", "retry", *(s.value for s in FINISHES)]
        ),
        stale_read=st.booleans(),
        dt=st.integers(0, 40),
    )
    def work(self, index: int, action: str, stale_read: bool, dt: int) -> None:
        """A worker writes for a job it believes it holds (from a fresh or an old read)."""
        self.now += dt
        held = sorted((w, id) for w, jobs in self.holds.items() for id in jobs)
        if not held:
            return
        worker, id = held[index % len(held)]
        lease, seen = self.holds[worker][id]
        stored = self.store.records.get(id)
        if stored is None:  # purged meanwhile
            del self.holds[worker][id]
            return
        base = seen if stale_read else stored
        transition = self.transition(action, base, lease, index)
        if not stored.held_by(lease):
            # Whatever it read, a worker that lost its hold never writes.
            assert self.write(transition, lease) is None
            if not stale_read:
                conflict(transition, "fenced")
            del self.holds[worker][id]
            return
        written = self.write(transition, lease)
        if base.revision == stored.revision:
            assert written is not None, transition
        else:
            # A stale read fails the CAS; the worker reads again (and still holds the job).
            assert written is None
            written = self.write(self.transition(action, stored, lease, index), lease)
            assert written is not None
        if written.status is JobStatus.RUNNING:
            self.holds[worker][id] = (lease, written)
        else:
            del self.holds[worker][id]

    def transition(self, action: str, record: JobRecord, lease: Lease, salt: int) -> Transition:
        if action == "renew":
            return renew(record, lease, now=self.now, lease=LEASE)
        if action == "checkpoint":
            return checkpoint(
                record, lease, now=self.now, turns=record.turns + 1, usage=Usage(salt, 1)
            )
        if action == "suspend":
            calls = [ApprovalRequest(f"c{i}", "tool") for i in range(1 + salt % 2)]
            return suspend(record, lease, now=self.now, pending=calls)
        if action == "retry":
            return retry(record, lease, now=self.now, delay=salt % 3 * 10, error="again")
        return finish(record, lease, now=self.now, status=JobStatus(action))

    @precondition(lambda self: any(self.holds.values()))
    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        """The worker stops where it is; time passes beyond every lease it had."""
        if not self.holds[worker]:
            return
        self.holds[worker].clear()
        self.now += LEASE + 1

    @precondition(lambda self: self.stale())
    @rule(
        index=st.integers(0, 20),
        dt=st.integers(0, 40),
        action=st.sampled_from(
            ["renew", "checkpoint", "suspend", "retry", *(s.value for s in FINISHES)]
        ),
    )
    def zombie(self, index: int, dt: int, action: str) -> None:
        """A holder that lost its lease (paused, partitioned) comes back and writes."""
        self.now += dt
        stale = self.stale()
        id, lease = stale[index % len(stale)]
        transition = self.transition(action, self.store.records[id], lease, index)
        conflict(transition, "fenced")
        assert self.write(transition, lease) is None

    @precondition(lambda self: self.unfinished())
    @rule(index=st.integers(0, 20), stale_read=st.booleans(), rarely=st.integers(0, 2))
    def cancel(self, index: int, stale_read: bool, rarely: int) -> None:
        record = self.pick(index, lambda r: True)
        if record is None or rarely:
            return
        expected = record.revision - 1 if stale_read and record.revision > 1 else None
        transition = cancel(record, now=self.now, expected=expected)
        if expected is not None:
            conflict(transition, "revision")
            return
        if record.terminal or (record.status is JobStatus.RUNNING and record.cancel_requested):
            conflict(transition, "state")
            return
        written = self.write(transition)
        assert written is not None
        self.cancelled.add(record.id)
        if record.status is JobStatus.RUNNING:
            assert written.status is JobStatus.RUNNING
            assert written.cancel_requested
            assert written.lease == record.lease
        else:
            assert written.status is JobStatus.CANCELLED

    @precondition(
        lambda self: any(
            r.status is JobStatus.RUNNING and not r.cancel_requested
            for r in self.store.records.values()
        )
    )
    @rule(index=st.integers(0, 20))
    def cancel_running(self, index: int) -> None:
        """A cancel that lands on a running job (often: the case a takeover must honour)."""
        record = self.pick(
            index, lambda r: r.status is JobStatus.RUNNING and not r.cancel_requested
        )
        assert record is not None
        written = self.write(cancel(record, now=self.now, expected=record.revision))
        assert written is not None
        assert written.cancel_requested
        self.cancelled.add(record.id)

    @precondition(lambda self: self.awaiting())
    @rule(index=st.integers(0, 20), allow=st.booleans(), call=st.integers(0, 3))
    def answer(self, index: int, allow: bool, call: int) -> None:
        record = self.pick(index, lambda r: r.status is JobStatus.AWAITING_INPUT)
        if record is None:
            return
        given = ApprovalAnswer(f"c{call}", allow)
        transition = answer(record, given, now=self.now, expected=record.revision)
        asked = {request.call_id for request in record.pending}
        previous = {a.call_id: a.allow for a in record.answers}
        if given.call_id not in asked:
            conflict(transition, "waiting")
        elif given.call_id in previous:
            conflict(transition, "duplicate" if previous[given.call_id] == allow else "waiting")
        else:
            written = self.write(transition)
            assert written is not None
            everything = len(written.answers) == len(written.pending)
            expect = JobStatus.QUEUED if everything else JobStatus.AWAITING_INPUT
            assert written.status is expect

    @precondition(lambda self: self.unfinished())
    @rule(index=st.integers(0, 20), rarely=st.integers(0, 3))
    def abandon(self, index: int, rarely: int) -> None:
        record = self.pick(index, lambda r: not r.terminal)
        if record is None or rarely:
            return
        transition = abandon(record, now=self.now, error="given up", expected=record.revision)
        if (
            record.status is JobStatus.RUNNING
            and record.lease is not None
            and self.now < record.lease.until
        ):
            conflict(transition, "lease")
            return
        written = self.write(transition)
        assert written is not None
        cancelled = JobStatus.CANCELLED if record.cancel_requested else JobStatus.ABANDONED
        assert written.status is cancelled

    @precondition(lambda self: self.ended())
    @rule(index=st.integers(0, 20))
    def purge(self, index: int) -> None:
        record = self.pick(index, lambda r: True)
        if record is None:
            return
        outcome = purge(record, now=self.now)
        if not record.terminal:
            conflict(outcome, "state")
            return
        assert outcome == Tombstone(record.id, record.key, self.now)
        assert isinstance(outcome, Tombstone)
        self.store.remove(outcome)
        self.purged.add(record.id)
        self.frozen.pop(record.id, None)
        self.revisions.pop(record.id, None)

    # ----------------------------------------------------------------- invariants

    @invariant()
    def revisions_only_go_up_and_terminal_records_never_change(self) -> None:
        for id, record in self.store.records.items():
            assert record.revision >= self.revisions[id]
            self.revisions[id] = record.revision
            if id in self.frozen:
                assert record == self.frozen[id]
            elif record.terminal:
                self.frozen[id] = record
                assert record.lease is None

    @invariant()
    def one_fence_per_acquisition_and_one_holder(self) -> None:
        for id, record in self.store.records.items():
            assert record.fence == self.acquisitions[id]
            holders = [lease for lease in self.leases[id] if record.held_by(lease)]
            if record.status is JobStatus.RUNNING:
                assert record.lease is not None
                assert record.lease.fence == record.fence
                assert len(holders) == 1
            else:
                assert record.lease is None
                assert holders == []

    @invariant()
    def an_acknowledged_cancel_leads_to_no_more_work(self) -> None:
        """Once a cancel is written, no transition out of the record leads to more work: the
        request stays, the job ends only ``cancelled``, and whoever holds it (a worker that
        took it over included) may close its journal but never start a provider call or a
        tool call."""
        call = ToolCall("c0", "tool", {})
        starting = [
            [RequestEntry(1)],
            [IntentEntry(call, "k")],
            [ResultEntry(ToolFailure("c0", "tool", "x")), IntentEntry(call, "k")],
        ]
        closing = [CheckpointEntry(1, "partial"), ResultEntry(ToolFailure("c0", "tool", "x"))]
        for id in self.cancelled:
            record = self.store.records.get(id)
            if record is None:  # purged
                continue
            assert record.cancel_requested
            if record.terminal:
                assert record.status is JobStatus.CANCELLED, record
            for lease in self.leases[id]:
                for entries in starting:
                    refused = may_append(record, lease, entries)
                    assert refused is not None
                    assert refused.reason == ("cancelled" if record.held_by(lease) else "fenced")
                if record.held_by(lease):
                    assert may_append(record, lease, [*closing, TerminalEntry()]) is None

    @invariant()
    def a_key_names_one_job_forever(self) -> None:
        for key, id in self.key_of.items():
            found = self.store.under_key(key)
            assert found is not None
            assert found.id == id
            assert isinstance(found, Tombstone) == (id in self.purged)
            assert found.key == key

    @invariant()
    def runnable_respects_threads_children_and_order(self) -> None:
        records = list(self.store.records.values())
        out = runnable(records, now=self.now)
        assert out == sorted(out, key=order)
        assert len({r.id for r in out}) == len(out)
        threads = [r.conversation for r in out if r.conversation is not None]
        assert len(threads) == len(set(threads)), "two jobs of one thread at once"
        for record in out:
            if record.status is JobStatus.QUEUED:
                assert not record.cancel_requested
                assert record.not_before is None or record.not_before <= self.now
                for child in record.children:
                    if child in self.store.records:
                        assert self.store.records[child].terminal, "a parent before its child"
            else:
                assert record.status is JobStatus.RUNNING
                assert record.lease is not None
                assert record.lease.until <= self.now
            # And it can be taken now.
            taken = acquire(record, owner="probe", now=self.now, lease=LEASE, execution=0)
            assert isinstance(taken, Applied), taken
            if record.conversation is None:
                continue
            for other in records:
                if other is record or other.conversation != record.conversation:
                    continue
                if other.terminal:
                    continue
                assert other.status is not JobStatus.AWAITING_INPUT
                assert other.status is not JobStatus.RUNNING
                assert order(other) > order(record), "a job of a thread before an earlier one"


def test_the_state_machine_keeps_its_invariants() -> None:
    run_state_machine_as_test(
        JobMachine,
        settings=settings(
            max_examples=200,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
