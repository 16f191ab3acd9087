"""``acquire_many``: a worker with several free slots takes several jobs in one call -- the same
jobs, in the same order, that as many ``acquire`` calls would take, each held on its own; never
one job twice, also when workers take at once."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from run_store_helpers import KINDS, LEASE, T0, Backend, ask, end, holder, open_backend

from actors import open_runtime
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue
from actors.testing import ScriptedProvider
from protocols import jobs as J
from protocols.errors import ValidationError


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Backend]:
    async with open_backend(request.param, tmp_path) as opened:
        yield opened


def many(store: Any) -> Any:
    return store.acquire_many


async def admit_mix(store: Any) -> dict[str, J.JobRecord]:
    """Jobs of every kind that decides whether a job may run: plain ones, an interrupting one,
    a thread of two (only its first may run), a parent waiting for its child, and one whose
    cancel was asked for."""
    made: dict[str, J.JobRecord] = {}
    for name in ("a", "b"):
        made[name] = (await store.admit(ask(name), now=T0)).record
    made["t1"] = (await store.admit(ask("t1", conversation="thread"), now=T0)).record
    made["t2"] = (await store.admit(ask("t2", conversation="thread"), now=T0)).record
    family = await store.admit(J.AgentJob.ask("echo", "parent", children=(ask("child"),)), now=T0)
    made["parent"], made["child"] = family.record, family.children[0]
    made["urgent"] = (
        await store.admit(ask("urgent"), now=T0, priority=J.Priority.INTERRUPT)
    ).record
    doomed = (await store.admit(ask("doomed"), now=T0)).record
    cancelled = J.cancel(doomed, now=T0)
    assert isinstance(cancelled, J.Applied)
    assert await store.write(cancelled)
    return made


async def test_it_takes_what_one_acquire_after_another_would(
    backend: Backend, tmp_path: pathlib.Path
) -> None:
    store = backend.store
    await admit_mix(store)
    taken = await many(store)(owner="w1", lease=LEASE, now=T0 + 1, limit=10)
    other = await backend.fresh()
    await admit_mix(other)
    one_by_one = []
    while (record := await other.acquire(owner="w1", lease=LEASE, now=T0 + 1)) is not None:
        one_by_one.append(record)
    texts = [record.job.input[0].content for record in taken]
    assert texts == [record.job.input[0].content for record in one_by_one]
    assert texts == ["urgent", "a", "b", "t1", "child"]
    for record in taken:
        assert record.status is J.JobStatus.RUNNING
        assert holder(record).owner == "w1"
        assert await store.get(record.id) == record
    # Distinct execution numbers, as one acquire after another gives.
    executions = [record.execution for record in taken]
    assert len(set(executions)) == len(executions)
    assert await many(store)(owner="w1", lease=LEASE, now=T0 + 1, limit=10) == []


async def test_it_takes_no_more_than_its_limit_and_the_rest_waits(backend: Backend) -> None:
    store = backend.store
    ids = [(await store.admit(ask(f"job {n}"), now=T0)).record.id for n in range(5)]
    first = await many(store)(owner="w1", lease=LEASE, now=T0 + 1, limit=2)
    assert [record.id for record in first] == ids[:2]
    second = await many(store)(owner="w2", lease=LEASE, now=T0 + 1, limit=2)
    assert [record.id for record in second] == ids[2:4]
    # A job taken by many is ended as any other; the thread's next one becomes runnable.
    await end(store, first[0])
    assert (await store.acquire(owner="w3", lease=LEASE, now=T0 + 1)) is not None


@pytest.mark.parametrize("limit", [0, -1, 1001, True, 2.0])
async def test_a_bad_limit_is_refused(backend: Backend, limit: Any) -> None:
    with pytest.raises(ValidationError):
        await many(backend.store)(owner="w1", lease=LEASE, now=T0, limit=limit)


async def test_workers_taking_at_once_never_take_one_job_twice(backend: Backend) -> None:
    # Several workers, each with its own store where the store is shared (another connection,
    # another file handle), take at once with random limits until nothing is left.
    stores = [backend.store, await backend.peer(), await backend.peer()]
    count = 40
    for n in range(count):
        await backend.store.admit(ask(f"job {n}"), now=T0)
    taken: dict[str, str] = {}

    async def worker(number: int, store: Any) -> None:
        owner = f"w{number}"
        limit = 1 + number * 2
        while True:
            got = await many(store)(owner=owner, lease=LEASE, now=T0 + 1, limit=limit)
            if not got:
                return
            for record in got:
                assert record.id not in taken, f"{record.id} taken twice"
                taken[record.id] = owner
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for number, store in enumerate(stores):
            nursery.start_soon(worker, number, store)
    assert len(taken) == count
    for id, owner in taken.items():
        record = await backend.store.get(id)
        assert record is not None
        assert holder(record).owner == owner


class CountingStore(MemoryRunStore):
    """A memory store that notes what each ``acquire_many`` call was asked and gave."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, int]] = []

    async def acquire_many(
        self, *, owner: str, lease: float, now: float | None = None, limit: int
    ) -> list[J.JobRecord]:
        taken = await super().acquire_many(owner=owner, lease=lease, now=now, limit=limit)
        self.calls.append((limit, len(taken)))
        return taken


async def six_jobs_run(admitting: Any, store: Any) -> list[str]:
    """Six jobs admitted to ``admitting``, then run by a queue of 8 slots on ``store``: their
    answers."""
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(*(f"answer {n}" for n in range(6))))
    ids = [(await admitting.admit(ask(f"job {n}"))).record.id for n in range(6)]
    async with (
        open_runtime() as runtime,
        open_job_queue(store, registry, runtime, concurrency=8) as queue,
    ):
        return sorted([(await queue.result(id)).content for id in ids])


async def test_a_queue_with_free_slots_takes_its_jobs_in_one_call(autojump_clock: Any) -> None:
    store = CountingStore()
    assert await six_jobs_run(store, store) == sorted(f"answer {n}" for n in range(6))
    assert store.calls[0] == (8, 6)


class AddsToAcquire(MemoryRunStore):
    """A store of a user's, adding to ``acquire`` alone (``acquire_many`` is inherited)."""

    def __init__(self) -> None:
        super().__init__()
        self.acquired = 0

    async def acquire(
        self, *, owner: str, lease: float, now: float | None = None
    ) -> J.JobRecord | None:
        record = await super().acquire(owner=owner, lease=lease, now=now)
        self.acquired += record is not None
        return record


class PassesOn:
    """A store of a user's that adds to ``acquire`` and passes every other call on."""

    def __init__(self, store: MemoryRunStore) -> None:
        self._store = store
        self.acquired = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def acquire(
        self, *, owner: str, lease: float, now: float | None = None
    ) -> J.JobRecord | None:
        record = await self._store.acquire(owner=owner, lease=lease, now=now)
        self.acquired += record is not None
        return record


@pytest.mark.parametrize("kind", ["subclass", "proxy"])
async def test_a_store_whose_own_acquire_comes_first_has_it_called(
    kind: str, autojump_clock: Any
) -> None:
    # Its acquire is never bypassed by an acquire_many that knows nothing of it.
    inner = AddsToAcquire() if kind == "subclass" else MemoryRunStore()
    store: Any = inner if kind == "subclass" else PassesOn(inner)
    assert await six_jobs_run(inner, store) == sorted(f"answer {n}" for n in range(6))
    assert store.acquired == 6


async def test_it_says_whether_its_look_left_a_job_a_later_look_might_take(
    backend: Backend,
) -> None:
    # ``rest``: false only when the look saw nothing but what it took -- no other queued job
    # (runnable or not yet: a thread's second), no job held past its lease.
    store = backend.store
    nothing = await many(store)(owner="w1", lease=LEASE, now=T0, limit=1)
    assert (list(nothing), nothing.rest) == ([], False)
    only = (await store.admit(ask("only"), now=T0)).record
    took = await many(store)(owner="w1", lease=LEASE, now=T0 + 1, limit=1)
    assert ([r.id for r in took], took.rest) == ([only.id], False)
    first = (await store.admit(ask("t1", conversation="thread"), now=T0 + 2)).record
    second = (await store.admit(ask("t2", conversation="thread"), now=T0 + 2)).record
    took = await many(store)(owner="w1", lease=LEASE, now=T0 + 3, limit=5)
    assert ([r.id for r in took], took.rest) == ([first.id], True)  # its second waits
    # Held by w1 until T0 + 1 + LEASE (the first job): past that, it may be taken over.
    late = T0 + 1 + LEASE + 1
    await end(store, took[0], now=T0 + 4)
    took = await many(store)(owner="w2", lease=LEASE, now=late, limit=1)
    assert took.rest is True  # two left: the expired hold and the thread's second; one taken
    took = await many(store)(owner="w2", lease=LEASE, now=late, limit=1)
    assert len(took) == 1
    assert took.rest is False
    assert {second.id, only.id} >= {r.id for r in took}
