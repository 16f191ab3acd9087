"""Seed 004's store conformance scenario, adapted to durable jobs, against both run stores.

004 checks its run store with one scenario run in a fixed order (accept, duplicate, coalesce,
reserved ids, compaction, duplicate after compaction, acquire, stale revision, requeue without
evidence, checkpoint with usage, stale fence, foreign owner, bounded reads, recoverable scan,
interrupt, terminal race, terminal read, compaction over the terminal, duplicate of the
terminal) and then its sub-scenarios (recovery-abandon, causal history, active causal order,
interrupt priority, absorption, purge). Here the same order runs against our job store: a 004
conversation's run is a job, its checkpoint and terminal commits are the pure transitions of
:mod:`protocols.jobs` written with compare-and-swap, and a conflict is ``write`` returning false
or a transition returning :class:`~protocols.jobs.Conflict`. The steps with no counterpart in a
store of immutable jobs are kept as comments saying why they do not apply.

Every time is explicit: nothing waits.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import attrs
import pytest
import trio
from run_store_helpers import (
    KINDS,
    LEASE,
    LIVE,
    T0,
    Backend,
    applied,
    ask,
    cancel,
    end,
    holder,
    open_backend,
    raises_code,
    take,
)

from actors.durable import RunStore
from protocols import jobs as J
from protocols.accounting import Usage
from protocols.codec import encode
from protocols.errors import ValidationError
from protocols.messages import AgentResult, Message, ToolCall, ToolSuccess


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Backend]:
    async with open_backend(request.param, tmp_path) as opened:
        yield opened


async def write_into(won: dict[str, bool], name: str, view: RunStore, step: J.Applied) -> None:
    won[name] = await view.write(step)


async def test_the_conformance_scenario_in_order(backend: Backend) -> None:
    store = backend.store
    job1 = ask("input-1", conversation="thread-1")

    # 1. Accept request-1: queued, revision 1, no fence yet, an admission sequence.
    accepted = await store.admit(job1, now=T0, key="request-1")
    assert accepted.created
    record = accepted.record
    assert record.status is J.JobStatus.QUEUED
    assert (record.revision, record.fence, record.attempts) == (1, 0, 0)
    assert record.sequence >= 1
    assert record.job == job1

    # 2. The same key with another input: the original job, and nothing is written.
    duplicate = await store.admit(
        ask("input-other", conversation="thread-1"), now=T0, key="request-1"
    )
    assert not duplicate.created
    assert duplicate.record == record
    assert await store.list() == [record]

    # 3. Coalescing a second input into the queued run: does not apply (a job is one immutable
    #    input, never merged). Its guarded part holds: another key is another job. That job is
    #    cancelled at once, to be the ended job the bounded reads of step 14 must not list.
    other = await store.admit(ask("input-2", conversation="thread-2"), now=T0, key="request-2")
    assert other.created
    assert other.record.id != record.id
    ended_other = await cancel(store, other.record, now=T0)
    assert ended_other.status is J.JobStatus.CANCELLED

    # 4. A reserved id reused by an input, a TypeError in 004: adapted as "a malformed admission
    #    is an exception, never an outcome", and nothing is written.
    for key in ("", "k" * 201, 7):
        with pytest.raises(ValidationError):
            await store.admit(ask("input-bad"), now=T0, key=key)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await store.admit(job1.input, now=T0, key="request-bad")  # type: ignore[arg-type]
    assert await store.list() == [record, ended_other]

    # 5-6. Compaction (a summary reusing a reserved id; compacting the inputs): does not apply,
    #    the job store holds no compactable history.
    # 7. The duplicate after compaction: with no compaction in the job store, what remains is
    #    that a duplicate carries the original input, not the new one.
    again = await store.admit(ask("input-later", conversation="thread-1"), now=T0, key="request-1")
    assert not again.created
    assert again.record.job.input == job1.input

    # 8. Acquire: running, fence 1, an execution number, a lease, one attempt.
    running = await store.acquire(owner="w1", lease=LEASE, now=T0 + 1)
    assert running is not None
    assert running.id == record.id
    assert running.status is J.JobStatus.RUNNING
    assert (running.fence, running.attempts, running.revision) == (1, 1, 2)
    assert running.execution is not None
    assert running.lease == J.Lease("w1", 1, T0 + 1 + LEASE)
    lease = holder(running)

    # 9. A checkpoint computed from a stale revision: refused, nothing changes. (The holder
    #    renewed its lease in between, from another read.)
    renewed = applied(J.renew(running, lease, now=T0 + 2, lease=LEASE))
    assert await store.write(renewed)
    stale = applied(J.checkpoint(running, lease, now=T0 + 2, turns=1, usage=Usage(1, 1)))
    assert not await store.write(stale)
    current = renewed.record
    lease = holder(current)
    assert await store.get(record.id) == current

    # 10. Requeue without replay-safe evidence, a TypeError in 004: a started job goes back to
    #    another worker only by taking it over once its lease expired; while the lease lives,
    #    neither another worker's acquisition nor an abandon applies.
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 3) is None
    taking = J.acquire(current, owner="w2", now=T0 + 3, lease=LEASE, execution=99)
    assert isinstance(taking, J.Conflict)
    assert taking.reason == "lease"
    giving_up = J.abandon(current, now=T0 + 3, error="no evidence")
    assert isinstance(giving_up, J.Conflict)
    assert giving_up.reason == "lease"
    assert await store.get(record.id) == current

    # 11. A checkpoint with usage applies; usage, turns and the fence read back from storage
    #    (a new connection, for SQLite).
    spent = Usage(1000, 100)
    checkpointed = applied(J.checkpoint(current, lease, now=T0 + 4, turns=1, usage=spent))
    assert await store.write(checkpointed)
    current = checkpointed.record
    reader = await backend.peer()
    stored = await reader.get(record.id)
    assert stored is not None
    assert (stored.usage, stored.turns, stored.fence) == (spent, 1, 1)
    assert stored.revision == running.revision + 2

    # 12-13. A stale fence, then a foreign owner: refused (the transition and the journal),
    #    nothing changes.
    for stranger in (
        J.Lease("w1", lease.fence + 1, lease.until),
        J.Lease("w2", lease.fence, lease.until),
    ):
        refused = J.checkpoint(current, stranger, now=T0 + 5, turns=2, usage=Usage(9, 9))
        assert isinstance(refused, J.Conflict)
        assert refused.reason == "fenced"
        await raises_code("fenced", store.append(record.id, stranger, [J.RequestEntry(2)]))
    assert await store.get(record.id) == current
    assert await store.journal(record.id) == []

    # 14. Bounded reads: the record as the last write left it, no result while live, nothing
    #    for an unknown id, and the active list (live jobs, in admission order) without the
    #    ended job. (Our list has no thread filter, so 004's "unknown thread lists nothing"
    #    does not apply.)
    loaded = await reader.get(record.id)
    assert loaded == current
    assert loaded.result is None
    assert await reader.get(f"{record.id}-absent") is None
    assert await reader.list(statuses=LIVE) == [current]

    # 15. The recoverable scan: a running job is recoverable once its lease expired, not
    #    before. Ours is what acquire takes: runnable() over the live records. (004 lists live
    #    running runs too and leaves them to recover(); ours does not list them.)
    active = await reader.list(statuses=LIVE)
    assert J.runnable(active, now=lease.until - 0.001) == []
    assert [r.id for r in J.runnable(active, now=lease.until)] == [record.id]

    # 16. Interrupt: a running job's cancel is a request; the job stays running with its
    #    usage, and its holder closes it (a second request is a conflict).
    interrupted = applied(J.cancel(current, now=T0 + 6))
    assert await store.write(interrupted)
    current = interrupted.record
    assert current.cancel_requested
    assert current.status is J.JobStatus.RUNNING
    assert (current.usage, current.fence, current.lease) == (spent, 1, lease)
    twice = J.cancel(current, now=T0 + 6)
    assert isinstance(twice, J.Conflict)
    assert twice.reason == "state"

    # 17. Two terminal commits from one read, on two connections: exactly one applies, and the
    #    stored usage is the terminal's. (The holder says completed; the acknowledged cancel
    #    makes it cancelled, the run's result kept.)
    final_usage = Usage(1500, 180)
    contenders = {
        name: applied(
            J.finish(
                current,
                lease,
                now=T0 + 7,
                status=J.JobStatus.COMPLETED,
                result=AgentResult(f"answer from {name}", usage=final_usage, turns=2),
            )
        )
        for name in ("first", "second")
    }
    won: dict[str, bool] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_into, won, "first", store, contenders["first"])
        nursery.start_soon(write_into, won, "second", reader, contenders["second"])
    assert sorted(won.values()) == [False, True], won
    (winner,) = (contenders[name] for name, ok in won.items() if ok)
    assert winner.record.result is not None

    # 18. The terminal read: cancelled, the winner's result byte for byte, not active.
    terminal = await reader.get(record.id)
    assert terminal == winner.record
    assert terminal.status is J.JobStatus.CANCELLED
    assert terminal.usage == final_usage
    assert terminal.lease is None
    assert terminal.result is not None
    assert encode(terminal.result) == encode(winner.record.result)
    assert await reader.list(statuses=LIVE) == []

    # 19. Compaction over the terminal: does not apply (no compaction in the job store).
    # 20. A duplicate after the end returns the terminal job with its result.
    late = await store.admit(
        ask("input-late", conversation="thread-1"), now=T0 + 9, key="request-1"
    )
    assert not late.created
    assert late.record == terminal
    assert late.record.result == winner.record.result


# ---------------------------------------------------------------------------------------------
# Sub-scenarios


async def test_recovery_abandons_a_job_only_once_its_lease_expired(backend: Backend) -> None:
    store = backend.store
    admitted = await store.admit(ask("stuck"), now=T0)
    running = await take(store, "w1", now=T0 + 1)
    lease = holder(running)
    opening = J.InputEntry((Message.user("stuck"),))
    await store.append(running.id, lease, [opening])
    checkpointed = applied(J.checkpoint(running, lease, now=T0 + 2, turns=1, usage=Usage(50, 5)))
    assert await store.write(checkpointed)
    current = checkpointed.record

    early = J.abandon(current, now=lease.until - 0.001, error="w1 is gone")
    assert isinstance(early, J.Conflict)
    assert early.reason == "lease"

    abandoned = applied(J.abandon(current, now=lease.until, error="w1 is gone"))
    assert await store.write(abandoned)
    stored = await (await backend.peer()).get(admitted.record.id)
    assert stored == abandoned.record
    # One write; the fence, usage and turns are kept, not reset; nobody holds it.
    assert stored.revision == current.revision + 1
    assert stored.status is J.JobStatus.ABANDONED
    assert (stored.fence, stored.usage, stored.turns) == (1, Usage(50, 5), 1)
    assert stored.lease is None
    assert stored.error == "w1 is gone"
    # 004 marks the run's assistant failed in the same write: our record carries no
    # conversation, and the journal is kept as it was (a continuing worker decides on open
    # calls; an abandoned job is not continued).
    assert await store.journal(stored.id) == [opening]
    # The old holder cannot write, and nobody takes an abandoned job.
    await raises_code("fenced", store.append(stored.id, lease, [J.RequestEntry(1)]))
    assert await store.acquire(owner="w2", lease=LEASE, now=lease.until + 100) is None
    again = J.abandon(stored, now=lease.until + 1, error="twice")
    assert isinstance(again, J.Conflict)
    assert again.reason == "state"


async def test_a_thread_history_is_in_causal_order(backend: Backend) -> None:
    """004 S7: job 2's input is admitted before job 1 has answered, yet the thread's history is
    ``[in1, answer1, in2, answer2]``: a thread's jobs run one at a time in execution order,
    and each job's journal holds what it added."""
    store = backend.store
    in1 = Message.user("in1", id="in1", created_at=T0)
    first = (await store.admit(J.AgentJob("echo", (in1,), conversation="T"), now=T0)).record
    running = await take(store, "w1", now=T0 + 1)
    assert running.id == first.id
    in2 = Message.user("in2", id="in2", created_at=T0 + 2)
    second = (await store.admit(J.AgentJob("echo", (in2,), conversation="T"), now=T0 + 2)).record
    # Admitted, but not runnable while the thread's first job runs.
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 2) is None

    search = ToolCall("call-1", "search", {"q": "x"})
    asked = Message.assistant("", calls=(search,), id="a1-call", created_at=T0 + 3)
    found = ToolSuccess("call-1", "search", "hit")
    answer1 = Message.assistant("answer1", id="a1", created_at=T0 + 4)
    lease = holder(running)
    await store.append(
        first.id,
        lease,
        [
            J.InputEntry((in1,)),
            J.RequestEntry(1),
            J.ResponseEntry(asked),
            J.IntentEntry(search, J.idempotency_key(first.id, 1, 0)),
            J.ResultEntry(found),
            J.RequestEntry(2),
            J.ResponseEntry(answer1),
        ],
    )
    await end(store, running, now=T0 + 5, content="answer1")

    following = await take(store, "w2", now=T0 + 6)
    assert following.id == second.id
    answer2 = Message.assistant("answer2", id="a2", created_at=T0 + 7)
    await store.append(
        second.id,
        holder(following),
        [J.InputEntry((in2,)), J.RequestEntry(1), J.ResponseEntry(answer2)],
    )
    await end(store, following, now=T0 + 8, content="answer2")

    jobs = [r for r in await store.list() if r.conversation == "T"]
    jobs.sort(key=lambda r: r.execution or 0)
    history: list[Message] = []
    for job in jobs:
        history.extend(J.replay(job.id, await store.journal(job.id)).messages)
    assert [m.id for m in history[:3]] == ["in1", "a1-call", history[2].id]
    assert history[2].tool_call_id == "call-1"
    assert [m.id for m in history[3:]] == ["a1", "in2", "a2"]
    # Not the order of the timestamps: in2 was admitted before job 1 answered.
    assert sorted(history, key=lambda m: m.created_at) != history


async def test_the_active_order_follows_admission_not_ids(backend: Backend) -> None:
    """004's ``z-``/``a-`` ids: the store mints its ids (random), so instead of injecting them the
    test admits pairs on fresh threads, at one timestamp, until the later job's id sorts before
    the earlier one's (half of all pairs do); the other pairs are cancelled."""
    store = backend.store
    for attempt in range(64):
        thread = f"thread-{attempt}"
        z = (await store.admit(ask("z", conversation=thread), now=T0)).record
        a = (await store.admit(ask("a", conversation=thread), now=T0)).record
        if a.id < z.id:
            break
        await cancel(store, z)
        await cancel(store, a)
    else:  # pragma: no cover - once in 2**64 runs
        pytest.fail("no pair of ids sorted backwards")
    assert z.created_at == a.created_at

    active = await store.list(statuses=LIVE)
    assert active == [z, a]
    assert J.runnable(active, now=T0 + 1) == [z]  # a thread's jobs run one at a time
    assert (await take(store, "w1")).id == z.id
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 1) is None
    running = await store.get(z.id)
    assert running is not None
    await end(store, running)
    assert (await take(store, "w2", now=T0 + 3)).id == a.id


@pytest.mark.parametrize("first_ends", ["finished", "abandoned"])
async def test_an_interrupting_job_runs_next_in_its_thread(
    backend: Backend, first_ends: str
) -> None:
    """004's interrupt priority: A runs; B (normal) then C (interrupt) are admitted on its
    thread. The active order is A, C, B: nothing else runs while A does, C runs when A has
    ended (finished, or abandoned once its lease expired), B after C."""
    store = backend.store
    a = (await store.admit(ask("A", conversation="T"), now=T0)).record
    running_a = await take(store, "w1", now=T0 + 1)
    assert running_a.id == a.id
    b = (await store.admit(ask("B", conversation="T"), now=T0 + 2)).record
    c = (
        await store.admit(ask("C", conversation="T"), now=T0 + 3, priority=J.Priority.INTERRUPT)
    ).record
    assert a.sequence < b.sequence < c.sequence
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 4) is None
    # Were A's worker to die, A would be continued first.
    expired = holder(running_a).until
    assert [r.id for r in J.runnable(await store.list(statuses=LIVE), now=expired)] == [a.id]

    if first_ends == "finished":
        now = T0 + 5
        await end(store, running_a, now=now)
    else:
        now = expired
        given_up = applied(J.abandon(running_a, now=now, error="w1 lost"))
        assert await store.write(given_up)
    running_c = await take(store, "w2", now=now)
    assert running_c.id == c.id
    assert await store.acquire(owner="w3", lease=LEASE, now=now) is None  # B waits for C
    await end(store, running_c, now=now + 1)
    running_b = await take(store, "w3", now=now + 2)
    assert running_b.id == b.id
    executions = [running_a.execution, running_c.execution, running_b.execution]
    assert all(e is not None for e in executions)
    assert executions[0] < executions[1] < executions[2]  # type: ignore[operator]


# Absorption (004 S9: a queued successor answered by the finishing run) does not apply: no job
# is answered by another. Its "two records land together or not at all" is the admission of a
# parent with its children, checked in test_run_store.py (all or nothing).


async def test_purge_in_the_order_of_004(backend: Backend) -> None:
    store = backend.store
    admitted = await store.admit(ask("to purge"), now=T0, key="request-purge")
    job_id = admitted.record.id
    # 1. A job that has not ended: refused (it is neither cancelled nor waited for).
    queued_outcome = await store.purge(job_id, now=T0)
    assert isinstance(queued_outcome, J.Conflict)
    assert queued_outcome.reason == "state"
    running = await take(store, "w1")
    lease = holder(running)
    await store.append(job_id, lease, [J.InputEntry((Message.user("to purge"),))])
    running_outcome = await store.purge(job_id, now=T0 + 1)
    assert isinstance(running_outcome, J.Conflict)
    assert await store.get(job_id) == running
    ended = await end(store, running, now=T0 + 2)

    # 2. An ended job: record and journal go at once, the id and key stay as a tombstone.
    stone = await store.purge(job_id, now=T0 + 3)
    assert stone == J.Tombstone(job_id, "request-purge", T0 + 3)

    async def still_purged(view: RunStore) -> None:
        assert await view.get(job_id) is None
        assert await view.journal(job_id) == []
        assert await view.list() == []
        assert await view.purged(job_id) == stone
        # 3. Purged again: the same tombstone.
        assert await view.purge(job_id, now=T0 + 50) == stone
        # 4. The key is refused, naming the purged job.
        error = await raises_code("purged", view.admit(ask(), now=T0 + 50, key="request-purge"))
        assert job_id in error.message
        assert "new key" in error.message
        # 5. Nothing can write to it, a worker with its old lease included (004 raises a
        #    "purged" error; ours: a write applies to nothing, an append is fenced).
        revived = attrs.evolve(ended, revision=ended.revision + 1)
        assert not await view.write(J.Applied(revived, ended.revision))
        await raises_code("fenced", view.append(job_id, lease, [J.RequestEntry(1)]))
        assert await view.acquire(owner="w2", lease=LEASE, now=T0 + 50) is None
        assert await view.get(job_id) is None

    await still_purged(store)
    # 6. Reopened (a new connection to the file, for SQLite): all of it still holds.
    await still_purged(await backend.peer())
    # 7. 004's guard trigger against a raw journal INSERT: does not apply (the journal is
    #    written only through append, which checks the job's record first).
    # 8. An id that never existed: None, and nothing is reserved.
    assert await store.purge("never-admitted", now=T0) is None
    assert await store.purged("never-admitted") is None


# ---------------------------------------------------------------------------------------------
# The issue's additions to 004's plan (renewal, approvals across store instances)


async def test_a_lease_is_renewed_only_by_its_holder(backend: Backend) -> None:
    store = backend.store
    await store.admit(ask(), now=T0)
    running = await take(store, "w1", now=T0 + 1, lease=10)
    lease = holder(running)
    renewed = applied(J.renew(running, lease, now=T0 + 9, lease=10))
    assert await store.write(renewed)
    assert holder(renewed.record).until == T0 + 19
    # The old end has passed, the new one not: nobody takes it.
    assert await store.acquire(owner="w2", lease=10, now=T0 + 12) is None
    # After expiry, while nobody took it, the holder may still renew (the model allows it).
    late = applied(J.renew(renewed.record, lease, now=T0 + 20, lease=10))
    assert await store.write(late)
    assert await store.acquire(owner="w2", lease=10, now=T0 + 29) is None
    taken = await take(store, "w2", now=T0 + 30, lease=10)
    assert taken.fence == 2
    refused = J.renew(taken, lease, now=T0 + 31, lease=10)
    assert isinstance(refused, J.Conflict)
    assert refused.reason == "fenced"


async def test_approvals_are_answered_from_another_store_instance(backend: Backend) -> None:
    store = backend.store
    await store.admit(ask(), now=T0)
    running = await take(store, "w1")
    lease = holder(running)
    requests = [
        J.ApprovalRequest("call-1", "delete", "deletes"),
        J.ApprovalRequest("call-2", "pay"),
    ]
    suspended = applied(J.suspend(running, lease, now=T0 + 2, pending=requests))
    await store.append(running.id, lease, [J.AskEntry(("call-1", "call-2"))])
    assert await store.write(suspended)
    waiting = suspended.record
    assert waiting.status is J.JobStatus.AWAITING_INPUT
    assert waiting.lease is None
    await raises_code("fenced", store.append(running.id, lease, [J.RequestEntry(2)]))
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 100) is None

    other = await backend.peer()
    seen = await other.get(running.id)
    assert seen == waiting
    first = applied(J.answer(seen, J.ApprovalAnswer("call-1", allow=True), now=T0 + 3))
    assert await other.write(first)
    same = J.answer(first.record, J.ApprovalAnswer("call-1", allow=True), now=T0 + 4)
    assert isinstance(same, J.Conflict)
    assert same.reason == "duplicate"
    differs = J.answer(first.record, J.ApprovalAnswer("call-1", allow=False), now=T0 + 4)
    assert isinstance(differs, J.Conflict)
    assert differs.reason == "waiting"
    # Still waiting for call-2: not runnable.
    assert first.record.status is J.JobStatus.AWAITING_INPUT
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 5) is None
    # The last answer queues it again; the next acquisition has the next fence.
    last = applied(J.answer(first.record, J.ApprovalAnswer("call-2", allow=False), now=T0 + 6))
    assert await other.write(last)
    assert last.record.status is J.JobStatus.QUEUED
    resumed = await take(store, "w2", now=T0 + 7)
    assert resumed.id == running.id
    assert (resumed.fence, resumed.attempts) == (2, 2)
    assert resumed.answers == (
        J.ApprovalAnswer("call-1", allow=True),
        J.ApprovalAnswer("call-2", allow=False),
    )
