"""The run store contract: every guarantee the module docstring of ``actors/durable/_store.py``
lists, checked against :class:`MemoryRunStore` and :class:`SQLiteRunStore` (a real file) alike.

Every time is explicit (``now=``): nothing here waits. "Another view" of a store is a second
``SQLiteRunStore`` -- its own connection -- on the same file, and the store itself for memory,
which has no other view.
"""

from __future__ import annotations

import pathlib
import time
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

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
    suspend,
    take,
    text_of,
)

from actors.durable import RunStore
from actors.store import StoreError
from protocols import jobs as J
from protocols.accounting import Usage
from protocols.errors import ValidationError
from protocols.messages import (
    AgentResult,
    Message,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolSuccess,
)


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Backend]:
    async with open_backend(request.param, tmp_path) as opened:
        yield opened


# ---------------------------------------------------------------------------------------------
# Admission


async def test_admit_returns_only_once_the_job_is_durable(backend: Backend) -> None:
    store = backend.store
    admitted = await store.admit(ask("durable", metadata={"n": 1}), now=T0, key="request-durable")
    record = admitted.record
    assert admitted.created
    assert admitted.children == ()
    assert record.status is J.JobStatus.QUEUED
    assert (record.revision, record.fence, record.attempts, record.takeovers) == (1, 0, 0, 0)
    assert record.lease is None
    assert record.execution is None
    assert record.key == "request-durable"
    assert record.created_at == T0
    assert record.sequence >= 1
    assert text_of(record) == "durable"

    other = await backend.peer()
    assert await other.get(record.id) == record
    assert await other.find("request-durable") == record
    assert await other.list() == [record]
    if backend.kind == "sqlite":
        # Nothing else is written after admit: closing the writer and opening the file anew
        # still finds the job.
        await store.aclose()
        await other.aclose()
        reopened = await backend.peer()
        assert await reopened.get(record.id) == record


async def test_children_are_admitted_before_the_parent_which_waits_for_them(
    backend: Backend,
) -> None:
    store = backend.store
    tree = ask("parent", children=[ask("child-a", children=[ask("grandchild")]), ask("child-b")])
    admitted = await store.admit(tree, now=T0, key="tree", priority=J.Priority.INTERRUPT)
    parent = admitted.record
    grandchild, child_a, child_b = admitted.children
    assert [text_of(r) for r in admitted.children] == ["grandchild", "child-a", "child-b"]
    # Each before its parent, in one admission, all stored.
    assert grandchild.sequence < child_a.sequence < child_b.sequence < parent.sequence
    assert parent.children == (child_a.id, child_b.id)
    assert child_a.children == (grandchild.id,)
    assert (grandchild.parent, child_a.parent, child_b.parent, parent.parent) == (
        child_a.id,
        parent.id,
        parent.id,
        None,
    )
    # Only the top job carries the key; the priority is the whole tree's.
    assert parent.key == "tree"
    assert parent.priority is J.Priority.INTERRUPT
    assert all(r.key is None and r.priority is J.Priority.INTERRUPT for r in admitted.children)
    other = await backend.peer()
    assert await other.list() == [grandchild, child_a, child_b, parent]
    assert await other.find("tree") == parent

    # The leaves run first; a job waits (holding no worker) until all its children ended.
    first = await take(store, "w1")
    second = await take(store, "w2")
    assert (first.id, second.id) == (grandchild.id, child_b.id)
    assert await store.acquire(owner="w3", lease=LEASE, now=T0 + 1) is None
    await end(store, first)
    third = await take(store, "w3", now=T0 + 3)
    assert third.id == child_a.id
    assert await store.acquire(owner="w4", lease=LEASE, now=T0 + 3) is None
    await end(store, second, J.JobStatus.FAILED)  # a failed child has ended too
    assert await store.acquire(owner="w4", lease=LEASE, now=T0 + 3) is None
    await end(store, third)
    last = await take(store, "w4", now=T0 + 4)
    assert last.id == parent.id
    assert last.fence == 1
    assert await store.acquire(owner="w5", lease=LEASE, now=T0 + 4) is None


async def test_admission_of_a_tree_is_all_or_nothing(backend: Backend) -> None:
    store = await backend.fresh(max_bytes=4096)
    tree = ask("parent", children=[ask("small child"), ask("x" * 5000)])
    await raises_code("too_large", store.admit(tree, now=T0, key="tree"))
    assert await store.list() == []
    assert await store.find("tree") is None
    admitted = await store.admit(ask("parent", children=[ask("small")]), now=T0, key="tree")
    assert admitted.created
    assert await store.list() == [*admitted.children, admitted.record]


async def test_a_key_names_one_job_forever(backend: Backend) -> None:
    store = backend.store
    first = await store.admit(ask("first"), now=T0, key="request-1")
    again = await store.admit(
        ask("second", children=[ask("child")]),
        now=T0 + 1,
        key="request-1",
        priority=J.Priority.INTERRUPT,
    )
    assert not again.created
    assert again.record == first.record
    assert again.children == ()
    assert await store.list() == [first.record]  # the other job and its child: not stored

    different = await store.admit(ask("second"), now=T0 + 1, key="request-2")
    assert different.created
    assert different.record.id != first.record.id

    running = await take(store)
    assert running.id == first.record.id
    while_running = await store.admit(ask("third"), now=T0 + 2, key="request-1")
    assert not while_running.created
    assert while_running.record == running
    ended = await end(store, running, content="the first answer", now=T0 + 3)

    other = await backend.peer()
    for view in (store, other):
        late = await view.admit(ask("fourth"), now=T0 + 10, key="request-1")
        assert not late.created
        assert late.record == ended
        assert late.record.status is J.JobStatus.COMPLETED
        assert late.record.result == AgentResult("the first answer")
        assert text_of(late.record) == "first"
        assert await view.find("request-1") == ended
    assert await store.find("request-never") is None
    assert len(await store.list()) == 2


async def test_one_key_admitted_concurrently_makes_one_job(backend: Backend) -> None:
    views = [backend.store, *[await backend.peer() for _ in range(3)]]
    outcomes: list[tuple[bool, str]] = []

    async def admit(view: RunStore, n: int) -> None:
        admitted = await view.admit(ask(f"attempt {n}"), now=T0, key="contended")
        outcomes.append((admitted.created, admitted.record.id))

    async with trio.open_nursery() as nursery:
        for n in range(12):
            nursery.start_soon(admit, views[n % len(views)], n)
    assert len(outcomes) == 12
    assert sum(created for created, _ in outcomes) == 1
    assert len({id for _, id in outcomes}) == 1
    (only,) = await backend.store.list()
    assert only.id == outcomes[0][1]


async def test_a_purged_key_is_refused(backend: Backend) -> None:
    store = backend.store
    admitted = await store.admit(ask("to purge"), now=T0, key="gone")
    await cancel(store, admitted.record)
    stone = await store.purge(admitted.record.id, now=T0 + 5)
    assert stone == J.Tombstone(admitted.record.id, "gone", T0 + 5)
    other = await backend.peer()
    for view in (store, other):
        error = await raises_code("purged", view.admit(ask("again"), now=T0 + 6, key="gone"))
        assert admitted.record.id in error.message
        assert await view.find("gone") is None
        assert await view.list() == []
    # Other keys are admitted as usual.
    assert (await store.admit(ask("new"), now=T0 + 7, key="gone-2")).created


# ---------------------------------------------------------------------------------------------
# Compare-and-swap


async def test_of_two_writes_from_one_revision_exactly_one_wins(backend: Backend) -> None:
    store = backend.store
    other = await backend.peer()
    for round_ in range(8):
        await store.admit(ask(f"race {round_}"), now=T0)
        record = await take(store, now=T0 + 1)
        lease = holder(record)
        contenders = {
            "checkpoint": applied(
                J.checkpoint(record, lease, now=T0 + 2, turns=1, usage=Usage(10, 1))
            ),
            "finish": applied(
                J.finish(
                    record,
                    lease,
                    now=T0 + 2,
                    status=J.JobStatus.COMPLETED,
                    result=AgentResult(f"won {round_}"),
                )
            ),
        }
        won: dict[str, bool] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_into, won, "checkpoint", store, contenders["checkpoint"])
            nursery.start_soon(write_into, won, "finish", other, contenders["finish"])
        assert sorted(won.values()) == [False, True], won
        (winner,) = (name for name, ok in won.items() if ok)
        assert await store.get(record.id) == contenders[winner].record
        assert await other.get(record.id) == contenders[winner].record
        # Both are stale now: neither applies again.
        for transition in contenders.values():
            assert not await store.write(transition)
        assert await store.get(record.id) == contenders[winner].record
        if winner == "checkpoint":
            await end(store, contenders[winner].record, now=T0 + 3)

    # A write for a job the store does not hold applies to nothing.
    ghost = J.Applied(attrs.evolve(record, id="never-admitted", revision=9), expected=8)
    assert not await store.write(ghost)
    assert await store.get("never-admitted") is None


async def write_into(won: dict[str, bool], name: str, view: RunStore, step: J.Applied) -> None:
    won[name] = await view.write(step)


# ---------------------------------------------------------------------------------------------
# Acquisition


async def test_acquire_takes_interrupting_jobs_first_then_first_in_first_out(
    backend: Backend,
) -> None:
    store = backend.store
    assert await store.acquire(owner="w", lease=LEASE, now=T0) is None  # nothing to run
    normal = [(await store.admit(ask(f"n{i}"), now=T0)).record for i in range(12)]
    urgent = [
        (await store.admit(ask(f"i{i}"), now=T0, priority=J.Priority.INTERRUPT)).record
        for i in range(2)
    ]
    ids = [r.id for r in normal]
    # Ids are random and every timestamp is equal: neither can be what orders them
    # (sorted by chance once in 12! runs).
    assert sorted(ids) != ids
    taken = []
    for n in range(14):
        record = await take(store, f"w{n}", now=T0 + 1)
        assert record.lease == J.Lease(f"w{n}", 1, T0 + 1 + LEASE)
        assert (record.fence, record.attempts, record.takeovers) == (1, 1, 0)
        assert record.status is J.JobStatus.RUNNING
        taken.append(record)
    assert [r.id for r in taken] == [r.id for r in urgent] + ids
    executions = [r.execution for r in taken]
    assert all(e is not None for e in executions)
    assert executions == sorted(executions)
    assert len(set(executions)) == len(executions)
    assert await store.acquire(owner="w", lease=LEASE, now=T0 + 1) is None


async def test_an_expired_lease_is_taken_over_with_the_next_fence(backend: Backend) -> None:
    store = backend.store
    admitted = await store.admit(ask(), now=T0)
    first = await take(store, "w1", now=T0 + 1, lease=10)
    assert holder(first) == J.Lease("w1", 1, T0 + 11)
    # A live lease is not taken (not even a hair before it ends).
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 10.999) is None
    assert await store.get(admitted.record.id) == first

    second = await take(store, "w2", now=T0 + 11, lease=10)
    assert second.id == first.id
    assert holder(second) == J.Lease("w2", 2, T0 + 21)
    assert (second.fence, second.takeovers, second.attempts) == (2, 1, 1)
    assert second.execution == first.execution
    assert second.revision == first.revision + 1

    third = await take(store, "w3", now=T0 + 25)
    assert (third.fence, third.takeovers, third.attempts) == (3, 2, 1)
    assert third.execution == first.execution
    # Both earlier holders are fenced out.
    for stale in (first, second):
        await raises_code("fenced", store.append(first.id, holder(stale), [J.RequestEntry(1)]))
        late = applied(J.checkpoint(stale, holder(stale), now=T0 + 26, turns=1, usage=Usage()))
        assert not await store.write(late)
    assert await store.journal(first.id) == []
    assert await store.get(first.id) == third


async def test_a_thread_runs_one_job_at_a_time(backend: Backend) -> None:
    store = backend.store
    t1 = (await store.admit(ask("t1", conversation="T"), now=T0)).record
    u1 = (await store.admit(ask("u1", conversation="U"), now=T0)).record
    t2 = (await store.admit(ask("t2", conversation="T"), now=T0)).record
    free = (await store.admit(ask("free"), now=T0)).record
    t3 = (await store.admit(ask("t3", conversation="T"), now=T0)).record
    taken = [await take(store, f"w{n}") for n in range(3)]
    assert [r.id for r in taken] == [t1.id, u1.id, free.id]
    assert await store.acquire(owner="w", lease=LEASE, now=T0 + 1) is None  # t2 waits for t1
    await end(store, taken[0])
    running_t2 = await take(store, "w4", now=T0 + 3)
    assert running_t2.id == t2.id
    # A job awaiting input still holds its thread.
    waiting = await suspend(store, running_t2, now=T0 + 4)
    assert await store.acquire(owner="w", lease=LEASE, now=T0 + 5) is None
    answered = applied(J.answer(waiting, J.ApprovalAnswer("call-1", allow=True), now=T0 + 6))
    assert answered.record.status is J.JobStatus.QUEUED
    assert await store.write(answered)
    resumed = await take(store, "w5", now=T0 + 7)
    assert resumed.id == t2.id  # before t3: the thread keeps its order
    assert (resumed.fence, resumed.attempts) == (2, 2)
    await end(store, resumed, now=T0 + 8)
    assert (await take(store, "w6", now=T0 + 9)).id == t3.id


async def test_a_retried_job_waits_for_its_delay(backend: Backend) -> None:
    store = backend.store
    await store.admit(ask(), now=T0)
    first = await take(store, now=T0 + 1)
    retried = applied(J.retry(first, holder(first), now=T0 + 2, delay=5, error="provider down"))
    assert await store.write(retried)
    assert retried.record.not_before == T0 + 7
    assert await store.acquire(owner="w2", lease=LEASE, now=T0 + 6.99) is None
    again = await take(store, "w2", now=T0 + 7)
    assert again.id == first.id
    assert (again.fence, again.attempts, again.takeovers) == (2, 2, 0)
    assert again.not_before is None


async def test_concurrent_acquirers_never_take_one_job_twice(backend: Backend) -> None:
    store = backend.store
    expected = {(await store.admit(ask(f"job {n}"), now=T0)).record.id for n in range(40)}
    views = [store, *[await backend.peer() for _ in range(3)]]
    taken: dict[str, list[str]] = {}

    async def worker(owner: str, view: RunStore) -> None:
        mine = taken.setdefault(owner, [])
        while (record := await view.acquire(owner=owner, lease=LEASE, now=T0 + 1)) is not None:
            assert holder(record).owner == owner
            mine.append(record.id)

    async with trio.open_nursery() as nursery:
        for n in range(8):
            nursery.start_soon(worker, f"w{n}", views[n % len(views)])
    everything = [id for ids in taken.values() for id in ids]
    assert len(everything) == len(set(everything)), "a job was acquired twice"
    assert set(everything) == expected
    for owner, ids in taken.items():
        for id in ids:
            record = await store.get(id)
            assert record is not None
            assert holder(record).owner == owner
            assert record.fence == 1


# ---------------------------------------------------------------------------------------------
# The journal, fenced


async def test_append_is_fenced_by_the_lease(backend: Backend) -> None:
    store = backend.store
    queued = (await store.admit(ask("queued"), now=T0)).record
    await raises_code("fenced", store.append(queued.id, J.Lease("w1", 0, T0 + 99), []))
    record = await take(store, "w1", now=T0 + 1, lease=10)
    lease = holder(record)
    opening = J.InputEntry((Message.user("queued"),))
    await store.append(record.id, lease, [opening])
    strangers = [
        J.Lease("w1", lease.fence + 1, lease.until),  # a fence from the future
        J.Lease("w1", lease.fence - 1, lease.until),  # an older acquisition
        J.Lease("w2", lease.fence, lease.until),  # another owner
    ]
    for stranger in strangers:
        error = await raises_code("fenced", store.append(record.id, stranger, [J.RequestEntry(1)]))
        assert record.id in error.message
    await raises_code("fenced", store.append("never-admitted", lease, [J.RequestEntry(1)]))
    assert await store.journal(record.id) == [opening]
    assert await store.get(record.id) == record

    # Taken over: the old holder can append nothing, with or without a transition.
    taken = await take(store, "w2", now=T0 + 11)
    assert taken.fence == lease.fence + 1
    await raises_code("fenced", store.append(record.id, lease, [J.RequestEntry(1)]))
    stale = applied(J.checkpoint(record, lease, now=T0 + 12, turns=1, usage=Usage(5, 5)))
    await raises_code("fenced", store.append(record.id, lease, [J.RequestEntry(1)], then=stale))
    assert await store.journal(record.id) == [opening]
    assert await store.get(record.id) == taken
    # The new holder writes.
    await store.append(record.id, holder(taken), [J.RequestEntry(1)])
    assert await store.journal(record.id) == [opening, J.RequestEntry(1)]
    # Once the job has ended nobody holds it.
    ended = await end(store, taken, now=T0 + 13)
    await raises_code("fenced", store.append(ended.id, holder(taken), [J.RequestEntry(2)]))
    assert await store.journal(record.id) == [opening, J.RequestEntry(1)]


async def test_no_work_starts_once_a_cancel_is_acknowledged(backend: Backend) -> None:
    # Issue 23, item 1: a cancel acknowledged while the job runs -- also while its worker is
    # dead -- is honoured by the store itself: no append that would start a provider call or a
    # tool call gets through, for the holder or for whoever takes the job over; what a cut run
    # commits (its partial, its calls' results, its terminal) still does.
    store = backend.store
    await store.admit(ask("to cancel"), now=T0)
    record = await take(store, "w1", now=T0 + 1, lease=10)
    lease = holder(record)
    call = ToolCall("c1", "pay", {"amount": 1})
    opening = [
        J.InputEntry((Message.user("to cancel"),)),
        J.RequestEntry(1),
        J.ResponseEntry(Message.assistant(calls=[call])),
    ]
    await store.append(record.id, lease, opening)
    # The cancel lands from another view (another process, a command line).
    other = await backend.peer()
    marked = await cancel(other, await other.get(record.id) or record, now=T0 + 2)
    assert marked.cancel_requested
    for crossing in ([J.IntentEntry(call, f"{record.id}:1:0")], [J.RequestEntry(2)]):
        await raises_code("cancelled", store.append(record.id, lease, crossing))
    # What came before a barrier is refused with it: nothing of the append is written.
    result = J.ResultEntry(ToolFailure("c1", "pay", "not executed: the job was cancelled"))
    await raises_code("cancelled", store.append(record.id, lease, [result, J.RequestEntry(2)]))
    assert await store.journal(record.id) == opening

    # Its worker dies; once the lease has expired another takes it over -- only to close it.
    taken = await take(store, "w2", now=T0 + 20)
    assert (taken.fence, taken.takeovers, taken.cancel_requested) == (2, 1, True)
    await raises_code("cancelled", store.append(taken.id, holder(taken), [J.RequestEntry(2)]))
    await raises_code(
        "cancelled", store.append(taken.id, holder(taken), [J.IntentEntry(call, "k")])
    )
    # The close is taken: the open call's result, and the terminal with the job's end, which
    # is cancelled whatever the holder asks for (an acknowledged cancel is final).
    await store.append(taken.id, holder(taken), [result])
    done = applied(
        J.finish(
            taken,
            holder(taken),
            now=T0 + 21,
            status=J.JobStatus.COMPLETED,
            result=AgentResult("partial", stop=StopReason.CANCELLED),
        )
    )
    assert done.record.status is J.JobStatus.CANCELLED
    await store.append(taken.id, holder(taken), [J.TerminalEntry(StopReason.CANCELLED)], then=done)
    final = await other.get(taken.id)
    assert final is not None
    assert final.status is J.JobStatus.CANCELLED
    assert await store.journal(taken.id) == [
        *opening,
        result,
        J.TerminalEntry(StopReason.CANCELLED),
    ]
    # A job never cancelled is unaffected.
    await store.admit(ask("kept"), now=T0 + 22)
    kept = await take(store, "w1", now=T0 + 23)
    await store.append(kept.id, holder(kept), [J.InputEntry((Message.user("kept"),))])
    await store.append(kept.id, holder(kept), [J.RequestEntry(1)])


async def test_append_with_a_transition_writes_both_or_neither(backend: Backend) -> None:
    store = backend.store
    await store.admit(ask(), now=T0)
    record = await take(store, now=T0 + 1)
    lease = holder(record)
    response = J.ResponseEntry(Message.assistant("thinking aloud"), Usage(7, 3))
    checkpointed = applied(J.checkpoint(record, lease, now=T0 + 2, turns=1, usage=Usage(7, 3)))
    # Computed from the same read: it conflicts once the checkpoint is in.
    renewed = applied(J.renew(record, lease, now=T0 + 2, lease=60))

    await store.append(record.id, lease, [J.RequestEntry(1), response], then=checkpointed)
    other = await backend.peer()
    assert await other.get(record.id) == checkpointed.record
    assert await other.journal(record.id) == [J.RequestEntry(1), response]

    late = J.CheckpointEntry(2, "never written")
    await raises_code("fenced", store.append(record.id, lease, [late], then=renewed))
    assert await other.get(record.id) == checkpointed.record
    assert await other.journal(record.id) == [J.RequestEntry(1), response]

    # A transition for another job, or for another holder, is refused and writes nothing (the
    # stores differ in how: SQLite raises ValidationError before reading, memory code "fenced").
    second = (await store.admit(ask("second"), now=T0)).record
    with pytest.raises((ValidationError, StoreError)):
        await store.append(second.id, lease, [late], then=checkpointed)
    with pytest.raises((ValidationError, StoreError)):
        await store.append(
            record.id, J.Lease("w9", lease.fence, lease.until), [late], then=checkpointed
        )
    assert await other.get(record.id) == checkpointed.record
    assert await other.journal(record.id) == [J.RequestEntry(1), response]
    assert await other.journal(second.id) == []

    # From the current revision it applies.
    renewed = applied(J.renew(checkpointed.record, lease, now=T0 + 3, lease=60))
    await store.append(record.id, lease, [J.RequestEntry(2)], then=renewed)
    assert await other.get(record.id) == renewed.record
    assert holder(renewed.record).until == T0 + 63
    assert await other.journal(record.id) == [J.RequestEntry(1), response, J.RequestEntry(2)]


def every_kind_of_entry(job: str) -> list[J.Entry]:
    """A well-formed journal using every kind of entry, with unicode, nested JSON, images,
    continuation data and usage in it."""
    search = ToolCall("call-1", "search", {"query": "naïve café ☕", "n": [1, 2.5, None, True]})
    write = ToolCall("call-2", "write", {"path": "/tmp/x", "text": 'a "quoted"\n\\ line'})
    delete = ToolCall("call-3", "delete", {"path": "/"})
    answer = Message.assistant("Done: two hits.", id="m-done", created_at=T0 + 9.25)
    entries: list[J.Entry] = [
        J.InputEntry(
            (
                Message.system("Be brief.", id="m-sys", created_at=T0),
                Message.user("héllo 👋 \u2028", images=("iVBORw0KGgo=",), id="m-u", created_at=T0),
            )
        ),
        J.RequestEntry(1),
        J.StreamEntry(1, (("thinking", "hm…"), ("content", "Let"), ("content", " me ✓"))),
        J.CheckpointEntry(1, content="Let me", thinking="hm…"),
        J.ResponseEntry(
            Message.assistant(
                "",
                calls=(search, write, delete),
                thinking="three calls",
                continuation={"signature": "c2ln", "blocks": [{"type": "thinking"}]},
                id="m-a1",
                created_at=T0 + 1.5,
            ),
            Usage(100, 20, cached=40),
        ),
        J.IntentEntry(search, J.idempotency_key(job, 1, 0)),
        J.ResultEntry(ToolSuccess("call-1", "search", {"hits": ["a", "b"], "more": None})),
        J.IntentEntry(
            attrs.evolve(write, arguments={"path": "/tmp/y"}), J.idempotency_key(job, 1, 1)
        ),
        J.ResultEntry(ToolFailure("call-2", "write", "disk full")),
        J.AskEntry(("call-3",), reasons={"call-3": "deletes everything"}),
        J.AttemptEntry(2, "answered"),
        J.AnswerEntry("call-3", allow=False, reason="no ✋"),
        J.ResultEntry(ToolFailure("call-3", "delete", "denied: no ✋")),
        J.RequestEntry(2),
        J.ResponseEntry(answer, None),
    ]
    message_entry = getattr(J, "MessageEntry", None)  # a kind being added (issue 14)
    if message_entry is not None:
        entries += [
            message_entry(Message.user("Answer in JSON, please.", id="m-fb", created_at=T0 + 10)),
            J.RequestEntry(3),
            J.ResponseEntry(Message.assistant('{"hits": 2}', id="m-json", created_at=T0 + 11)),
        ]
    entries.append(
        J.TerminalEntry(
            StopReason.COMPLETE,
            AgentResult(
                '{"hits": 2}',
                messages=(answer,),
                usage=Usage(100, 20, cached=40),
                turns=2,
                output={"hits": 2},
                run_id="run-1",
                agent="echo",
            ),
        )
    )
    return entries


async def test_the_journal_keeps_every_kind_of_entry_in_order(backend: Backend) -> None:
    store = backend.store
    first = (await store.admit(ask("first"), now=T0)).record
    second = (await store.admit(ask("second"), now=T0)).record
    one = await take(store, "w1")
    two = await take(store, "w2")
    assert (one.id, two.id) == (first.id, second.id)
    entries = every_kind_of_entry(one.id)
    assert {type(e) for e in entries} == set(typing.get_args(J.Entry)), "a kind is missing"
    # In batches of different sizes, the two jobs' appends interleaved.
    batches: list[Sequence[J.Entry]] = [entries[:1], [], entries[1:4], entries[4:9], entries[9:]]
    for batch in batches:
        await store.append(one.id, holder(one), batch)
        await store.append(two.id, holder(two), [J.RequestEntry(len(batch))])
    await store.append(two.id, holder(two), [J.TerminalEntry(error="boom ✗")])

    other = await backend.peer()
    for view in (store, other):
        assert await view.journal(one.id) == entries
        assert await view.journal(two.id) == [
            *(J.RequestEntry(len(b)) for b in batches),
            J.TerminalEntry(error="boom ✗"),
        ]
        assert await view.journal("never-admitted") == []
    made = J.replay(one.id, await other.journal(one.id))
    assert made.terminal == entries[-1]
    assert made.open == ()


async def test_each_entry_keeps_the_time_it_was_appended_for_every_reader(
    backend: Backend,
) -> None:
    """A durable job's events show their entries' append times: the same on every read, from
    any view of the store, from any position."""
    store = backend.store
    record = (await store.admit(ask("timed"), now=T0)).record
    job = await take(store, "w1")
    stamps: list[tuple[float, float]] = []
    for turn in (1, 2, 3):
        before = time.time()
        await store.append(job.id, holder(job), [J.RequestEntry(turn), J.RequestEntry(turn + 10)])
        stamps += [(before, time.time())] * 2
    timed = await store.timed_journal(record.id)
    assert [entry for entry, _ in timed] == await store.journal(record.id)
    for (_, at), (low, high) in zip(timed, stamps, strict=True):
        assert low <= at <= high
    other = await backend.peer()
    for view in (store, other):
        assert await view.timed_journal(record.id) == timed
        assert await view.timed_journal(record.id, after=3) == timed[3:]
    assert await store.timed_journal("never-admitted") == []


# ---------------------------------------------------------------------------------------------
# Purge


async def test_purge_removes_an_ended_job_and_leaves_a_tombstone(backend: Backend) -> None:
    store = backend.store
    queued = (await store.admit(ask("queued"), now=T0, key="k-queued")).record
    running = (await store.admit(ask("running"), now=T0)).record
    waiting = (await store.admit(ask("waiting"), now=T0)).record
    completed = (await store.admit(ask("completed"), now=T0, key="k-done")).record
    failed = (await store.admit(ask("failed"), now=T0)).record
    abandoned = (await store.admit(ask("abandoned"), now=T0)).record
    cancelled = (await store.admit(ask("cancelled"), now=T0)).record

    taken = [await take(store, f"w{n}") for n in range(6)]
    assert [r.id for r in taken] == [
        queued.id,
        running.id,
        waiting.id,
        completed.id,
        failed.id,
        abandoned.id,
    ]
    retried = applied(J.retry(taken[0], holder(taken[0]), now=T0 + 2, delay=0, error="again"))
    assert await store.write(retried)
    queued = retried.record
    running = taken[1]
    waiting = await suspend(store, taken[2])
    await store.append(completed.id, holder(taken[3]), [J.RequestEntry(1)])
    completed = await end(store, taken[3])
    failed = await end(store, taken[4], J.JobStatus.FAILED)
    given_up = applied(J.abandon(taken[5], now=T0 + 1 + LEASE, error="worker lost"))
    assert await store.write(given_up)
    abandoned = given_up.record
    cancelled = await cancel(store, cancelled)

    # A job that has not ended is not purged: it is neither cancelled nor waited for.
    for live in (queued, running, waiting):
        outcome = await store.purge(live.id, now=T0 + 50)
        assert isinstance(outcome, J.Conflict)
        assert outcome.reason == "state"
        assert await store.get(live.id) == live
        assert await store.purged(live.id) is None
    assert await store.journal(completed.id) == [J.RequestEntry(1)]

    other = await backend.peer()
    for ended in (completed, failed, abandoned, cancelled):
        stone = await store.purge(ended.id, now=T0 + 50)
        assert stone == J.Tombstone(ended.id, ended.key, T0 + 50)
        for view in (store, other):
            assert await view.get(ended.id) is None
            assert await view.journal(ended.id) == []
            assert await view.purged(ended.id) == stone
            assert ended.id not in [r.id for r in await view.list()]
        # Purged twice: the first tombstone.
        assert await store.purge(ended.id, now=T0 + 99) == stone
    assert await store.find("k-done") is None
    await raises_code("purged", store.admit(ask(), now=T0 + 60, key="k-done"))
    # Nothing names the purged jobs any more: a stale write applies to nothing.
    revived = attrs.evolve(completed, revision=completed.revision + 1, status="queued")
    assert not await store.write(J.Applied(revived, completed.revision))
    assert await store.get(completed.id) is None

    assert await store.purge("never-admitted", now=T0 + 50) is None
    assert await store.purged("never-admitted") is None
    assert [r.id for r in await store.list()] == [queued.id, running.id, waiting.id]


# ---------------------------------------------------------------------------------------------
# Reads


async def test_list_filters_by_thread_with_status_and_paging(backend: Backend) -> None:
    # A threaded job reads the history of its thread's earlier jobs: the store finds them
    # without listing every job it holds.
    store = backend.store
    made = [
        (await store.admit(ask(f"job {n}", conversation=thread), now=T0)).record
        for n, thread in enumerate(["a", "b", "a", None, "a", "b"])
    ]
    a = [r.id for r in made if r.conversation == "a"]
    assert [r.id for r in await store.list(thread="a")] == a
    assert [r.id for r in await store.list(thread="b")] == [made[1].id, made[5].id]
    assert await store.list(thread="nobody") == []
    assert [r.id for r in await store.list(thread="a", after=made[0].sequence, limit=1)] == [
        made[2].id
    ]
    taken = await take(store, "w")
    assert taken.id == made[0].id
    assert [r.id for r in await store.list(thread="a", statuses=[J.JobStatus.QUEUED])] == a[1:]
    for bad in ("", 7):
        with pytest.raises(ValidationError):
            await store.list(thread=bad)  # type: ignore[arg-type]


async def test_list_filters_by_status_and_pages_in_admission_order(backend: Backend) -> None:
    store = backend.store
    records = [(await store.admit(ask(f"job {n}"), now=T0)).record for n in range(7)]
    # 0 queued, 1 running, 2 completed, 3 cancelled, 4 queued, 5 awaiting input, 6 failed
    held = [await take(store, f"w{n}") for n in range(3)]
    await end(store, held[2])
    await cancel(store, records[3])
    # Put job 0 back in the queue (a retry), so the next three acquisitions are 4, 5, 6.
    retried = applied(J.retry(held[0], holder(held[0]), now=T0 + 2, delay=100, error="later"))
    assert await store.write(retried)
    more = [await take(store, f"w{n}", now=T0 + 3) for n in range(3, 6)]
    assert [r.id for r in more] == [records[4].id, records[5].id, records[6].id]
    retried_4 = applied(J.retry(more[0], holder(more[0]), now=T0 + 4, delay=100, error="later"))
    assert await store.write(retried_4)
    await suspend(store, more[1])
    await end(store, more[2], J.JobStatus.FAILED)

    everything = await store.list()
    assert [r.id for r in everything] == [r.id for r in records]
    assert [r.status.value for r in everything] == [
        "queued",
        "running",
        "completed",
        "cancelled",
        "queued",
        "awaiting_input",
        "failed",
    ]
    for record in everything:
        assert await store.get(record.id) == record

    def ids(found: list[J.JobRecord]) -> list[str]:
        return [r.id for r in found]

    assert ids(await store.list(statuses=[J.JobStatus.QUEUED])) == ids([records[0], records[4]])
    live = ids(await store.list(statuses=LIVE))
    assert live == ids([records[0], records[1], records[4], records[5]])
    assert ids(await store.list(statuses=["completed", "failed"])) == ids([records[2], records[6]])
    assert await store.list(statuses=[]) == []

    # Pages, resumed after the last sequence seen, add up to the whole list.
    pages = []
    after = None
    while page := await store.list(after=after, limit=3):
        pages.append(ids(page))
        after = page[-1].sequence
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [id for page in pages for id in page] == ids(everything)
    live_pages = []
    after = None
    while page := await store.list(statuses=LIVE, after=after, limit=2):
        live_pages.append(ids(page))
        after = page[-1].sequence
    assert live_pages == [live[:2], live[2:]]
    assert await store.list(after=everything[-1].sequence) == []
    assert len(await store.list(limit=1000)) == 7
    for limit in (0, 1001, -1, True, 2.0, "3"):
        with pytest.raises(ValidationError):
            await store.list(limit=limit)  # type: ignore[arg-type]


async def test_records_and_entries_come_back_decoded_afresh(backend: Backend) -> None:
    store = backend.store
    metadata: dict[str, Any] = {"tags": ["a"], "nested": {"n": 1}}
    admitted = await store.admit(ask(metadata=metadata), now=T0, key="fresh")
    id = admitted.record.id
    expected = {"tags": ["a"], "nested": {"n": 1}}
    reads: list[Callable[[], Awaitable[J.JobRecord | None]]] = [
        lambda: store.get(id),
        lambda: store.find("fresh"),
        lambda: _first(store.list()),
        lambda: _admitted_again(store),
    ]
    # Neither the caller's dict nor anything a read returned is the stored record.
    metadata["tags"].append("caller")
    metadata["nested"]["n"] = 2
    admitted.record.job.metadata["added"] = True
    for read in reads:
        record = await read()
        assert record is not None
        assert record.job.metadata == expected
        record.job.metadata["tags"].append("reader")
        record.job.metadata["nested"]["n"] = 3
        record.job.metadata["added"] = True
    running = await take(store)
    running.job.metadata["tags"].clear()
    assert (await _first(store.list())).job.metadata == expected

    ask_entry = J.AskEntry(("call-1",), reasons={"call-1": "why"})
    await store.append(id, holder(running), [ask_entry])
    ask_entry.reasons["call-1"] = "changed by the caller"
    (read_back,) = await store.journal(id)
    assert isinstance(read_back, J.AskEntry)
    assert read_back.reasons == {"call-1": "why"}
    read_back.reasons["call-1"] = "changed by a reader"
    assert await store.journal(id) == [J.AskEntry(("call-1",), reasons={"call-1": "why"})]


async def _first(found: Awaitable[list[J.JobRecord]]) -> J.JobRecord:
    records = await found
    return records[0]


async def _admitted_again(store: RunStore) -> J.JobRecord:
    again = await store.admit(ask("other"), now=T0, key="fresh")
    assert not again.created
    return again.record


# ---------------------------------------------------------------------------------------------
# Limits, validation, closing


async def test_what_is_above_the_size_limit_is_refused_and_nothing_is_written(
    backend: Backend,
) -> None:
    store = await backend.fresh(max_bytes=4096)
    await raises_code("too_large", store.admit(ask("x" * 5000), now=T0))
    # The limit counts UTF-8 bytes: 2100 characters of two bytes each are above it.
    await raises_code("too_large", store.admit(ask("é" * 2100), now=T0))
    assert await store.list() == []

    await store.admit(ask("small"), now=T0)
    record = await take(store)
    lease = holder(record)
    big = J.InputEntry((Message.user("y" * 5000),))
    await raises_code("too_large", store.append(record.id, lease, [big]))
    await raises_code("too_large", store.append(record.id, lease, [J.RequestEntry(1), big]))
    assert await store.journal(record.id) == []

    huge_answer = J.finish(
        record, lease, now=T0 + 2, status=J.JobStatus.COMPLETED, result=AgentResult("z" * 5000)
    )
    await raises_code("too_large", store.write(applied(huge_answer)))
    assert await store.get(record.id) == record
    # A transition written with an append: the record too large, the entries not written.
    swollen = J.Applied(
        attrs.evolve(record, revision=record.revision + 1, error="e" * 5000), record.revision
    )
    await raises_code(
        "too_large", store.append(record.id, lease, [J.RequestEntry(1)], then=swollen)
    )
    assert await store.get(record.id) == record
    assert await store.journal(record.id) == []
    # Below the limit all is well.
    await store.append(record.id, lease, [J.RequestEntry(1)])
    await end(store, record)
    assert len(await store.journal(record.id)) == 1


async def test_malformed_calls_are_refused_before_anything_is_written(backend: Backend) -> None:
    store = backend.store
    bad_calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.admit("not a job", now=T0),  # type: ignore[arg-type]
        lambda: store.admit(ask(), now=T0, key=""),
        lambda: store.admit(ask(), now=T0, key="k" * 201),
        lambda: store.admit(ask(), now=T0, key=5),  # type: ignore[arg-type]
        lambda: store.admit(ask(), now=float("nan")),
        lambda: store.get(""),
        lambda: store.find(""),
        lambda: store.acquire(owner="", lease=LEASE, now=T0),
        lambda: store.acquire(owner="w", lease=LEASE, now=float("inf")),
        lambda: store.write(J.Conflict("state", "no")),  # type: ignore[arg-type]
        lambda: store.journal(""),
        lambda: store.purge("", now=T0),
    ]
    for call in bad_calls:
        with pytest.raises(ValidationError):
            await call()
    assert await store.list() == []


async def test_a_closed_store_refuses_every_call(backend: Backend) -> None:
    store = backend.store
    admitted = await store.admit(ask(), now=T0)
    record = await take(store)
    lease = holder(record)
    done = applied(J.finish(record, lease, now=T0 + 2, status=J.JobStatus.FAILED, error="x"))
    await store.aclose()
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.admit(ask(), now=T0),
        lambda: store.get(record.id),
        lambda: store.find("key"),
        store.list,
        lambda: store.write(done),
        lambda: store.acquire(owner="w2", lease=LEASE, now=T0 + 100),
        lambda: store.append(record.id, lease, [J.RequestEntry(1)]),
        lambda: store.journal(record.id),
        lambda: store.purge(record.id, now=T0),
        lambda: store.purged(record.id),
    ]
    for call in calls:
        await raises_code("closed", call())
    await store.aclose()  # idempotent
    if backend.kind == "sqlite":
        # Closing wrote nothing and lost nothing.
        reopened = await backend.peer()
        assert await reopened.get(admitted.record.id) == record
        assert await reopened.journal(record.id) == []


async def test_status_follows_the_record_without_reading_it(backend: Backend) -> None:
    store = backend.store
    assert await store.status("nobody") is None
    admitted = (await store.admit(ask(), now=T0)).record
    assert await store.status(admitted.id) is J.JobStatus.QUEUED
    running = await take(store)
    assert await store.status(running.id) is J.JobStatus.RUNNING
    ended = await end(store, running)
    assert await store.status(ended.id) is J.JobStatus.COMPLETED
    assert (await store.get(ended.id)) == ended
    await store.purge(ended.id, now=T0 + 3)
    assert await store.status(ended.id) is None
    with pytest.raises(ValidationError):
        await store.status("")


async def test_a_watch_hears_new_jobs_and_new_statuses_not_renewals(backend: Backend) -> None:
    store = backend.store
    with store.watch() as watch:
        admitted = (await store.admit(ask(), now=T0)).record
        assert await watch.next() == {admitted.id}
        running = await take(store)
        renewed = applied(J.renew(running, holder(running), now=T0 + 5, lease=LEASE))
        assert await store.write(renewed)
        ended = await end(store, renewed.record)
        # Taking the job and renewing its lease are not heard of; its end is.
        assert await watch.next() == {ended.id}
        await store.purge(ended.id, now=T0 + 9)
        assert await watch.next() == {ended.id}
    # Once closed, a watch hears nothing more (and closing again is harmless).
    watch.close()
    await store.admit(ask("later"), now=T0)
    with trio.move_on_after(0.05) as quiet:
        await watch.next()
    assert quiet.cancelled_caught


def test_an_entry_stored_before_times_were_reads_with_no_time() -> None:
    import math

    from actors.durable._store import decode_timed_entry

    entry, at = decode_timed_entry("j", '{"kind": "request", "turn": 1}')
    assert entry == J.RequestEntry(1)
    assert math.isnan(at)
    assert decode_timed_entry("j", '{"kind": "request", "turn": 1, "at": 5}') == (entry, 5.0)
    for bad in ('"x"', "true", "null"):
        with pytest.raises(StoreError, match="corrupt") as raised:
            decode_timed_entry("j", '{"kind": "request", "turn": 1, "at": ' + bad + "}")
        assert raised.value.code == "corrupt"
