"""``JobQueue.result`` under every order of events a store's timing can give: a store whose calls
each yield a random number of times before and after doing their work shuffles the caller's
looks, the taker's acquisitions, the journal's appends and the watch's announcements against
one another. Whatever the order, each caller gets its job's result as the job ends -- never a
poll (1000 s) later, which would mean a wake was lost -- and the looks stay bounded.

Jobs run on :class:`~actors.testing.ScriptedProvider` agents over a
:class:`~actors.durable.MemoryRunStore`, in trio time (see ``test_job_queue``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_job_queue import worker
from trio.testing import MockClock

from actors.durable import AgentRegistry, MemoryRunStore
from actors.testing import Reply, ScriptedProvider
from protocols.jobs import AgentJob, Entry, JobStatus, Lease
from protocols.messages import AgentResult

POLL = 1_000.0  # trio seconds: a lost wake waits this long
BOUND = 100.0  # trio seconds: every job ends long before


class Shuffled(MemoryRunStore):
    """A memory store whose calls yield a random number of times before and after their work
    (up to 50: a whole job can run meanwhile), and that counts the status reads."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._rng = random.Random(seed)
        self.looks = 0

    async def _yield(self) -> None:
        # Mostly a few, sometimes many: long enough for a whole job to run meanwhile.
        for _ in range(self._rng.choice((0, 0, 1, 2, 3, 10, 50))):
            await trio.lowlevel.checkpoint()

    async def status(self, id: str) -> JobStatus | None:
        self.looks += 1
        await self._yield()
        found = await super().status(id)
        await self._yield()
        return found

    async def admit(self, job: AgentJob, **options: Any) -> Any:
        await self._yield()
        admitted = await super().admit(job, **options)
        await self._yield()
        return admitted

    async def write(self, transition: Any) -> bool:
        await self._yield()
        written = await super().write(transition)
        await self._yield()
        return written

    async def acquire_many(self, **options: Any) -> list[Any]:
        await self._yield()
        taken = await super().acquire_many(**options)
        await self._yield()
        return taken

    async def append(
        self, id: str, holder: Lease, entries: Sequence[Entry], *, then: Any = None
    ) -> None:
        await self._yield()
        await super().append(id, holder, entries, then=then)
        await self._yield()


async def run_jobs(seed: int, jobs: int, concurrency: int, callers: int) -> tuple[float, int]:
    """``jobs`` jobs, enqueued one after another by each of ``callers`` tasks and each waited
    for with ``result``: the longest wait past a job's end (trio seconds), and the looks."""
    registry = AgentRegistry()
    total = jobs * callers
    registry.add("echo", ScriptedProvider(*(Reply(f"done {n}") for n in range(total))))
    store = Shuffled(seed)
    late = 0.0

    async def caller(number: int) -> None:
        nonlocal late
        for n in range(jobs):
            id = await queue.enqueue(AgentJob.ask("echo", f"{number}.{n}"))
            result: AgentResult = await queue.result(id)
            returned = trio.current_time()
            assert result.content.startswith("done ")
            record = await store.get(id)
            assert record is not None
            assert record.updated_at is not None
            late = max(late, returned - record.updated_at)

    with trio.fail_after(BOUND):
        async with (
            worker(store, registry, poll=POLL, concurrency=concurrency) as queue,
            trio.open_nursery() as nursery,
        ):
            for number in range(callers):
                nursery.start_soon(caller, number)
    return late, store.looks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    concurrency=st.integers(1, 3),
    callers=st.integers(1, 3),
)
def test_every_result_comes_as_its_job_ends_whatever_the_order(
    seed: int, concurrency: int, callers: int
) -> None:
    jobs = 4
    late, looks = trio.run(
        run_jobs,
        seed,
        jobs,
        concurrency,
        callers,
        clock=MockClock(autojump_threshold=0),
    )
    assert late < 1.0  # (a lost wake: a poll, 1000 s)
    assert looks <= 3 * jobs * callers
