"""How often ``JobQueue.result`` reads the store: once on entry, and again only when it is
woken by a change its last read cannot have seen -- never for a change announced before that
read began (the job's own admission), and always for one announced after it (the job ended by
another worker).

Jobs run on :class:`~actors.testing.ScriptedProvider` agents over a
:class:`~actors.durable.MemoryRunStore`, in trio time (see ``test_job_queue``).
"""

from __future__ import annotations

import pathlib
from typing import Any

import trio
from test_job_queue import call, held, worker

from actors.durable import AgentRegistry, MemoryRunStore, SQLiteRunStore
from actors.testing import Reply, ScriptedProvider
from protocols.jobs import AgentJob, Applied, JobStatus, finish
from protocols.jobs import JobStatus as S
from protocols.messages import AgentResult

BOUND = 600  # trio seconds; a job should end long before
POLL = 1_000.0  # trio seconds: a wake missed would wait this long


class Counted(MemoryRunStore):
    """A memory store that counts the status reads."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    async def status(self, id: str) -> JobStatus | None:
        self.looks += 1
        return await super().status(id)


class CountedSQLite(SQLiteRunStore):
    """A SQLite store that counts the status reads."""

    looks = 0

    async def status(self, id: str) -> JobStatus | None:
        self.looks += 1
        return await super().status(id)


async def looks_per_job(store: Counted | CountedSQLite) -> list[int]:
    """Five jobs, one after another, each waited for with ``result``: its status reads."""
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(*(Reply(f"done {n}") for n in range(5))))
    looks = []
    async with worker(store, registry, poll=POLL) as queue:
        for n in range(5):
            id = await queue.enqueue(AgentJob.ask("echo", f"job {n}"))
            before = store.looks
            result = await queue.result(id)
            assert result.content == f"done {n}"
            looks.append(store.looks - before)
    return looks


# Once on entry; the wake for its own admission (announced before that read) and its end here
# (handed over by the worker) read nothing.


async def test_a_job_run_here_is_looked_at_once_by_its_result(autojump_clock: Any) -> None:
    with trio.fail_after(BOUND):
        assert await looks_per_job(Counted()) == [1] * 5


async def test_a_job_run_here_is_looked_at_once_by_its_result_sqlite(
    tmp_path: pathlib.Path,
) -> None:
    # (On the real clock: the store's threads.)
    async with await CountedSQLite.open(tmp_path / "jobs.db") as store:
        with trio.fail_after(30):
            assert await looks_per_job(store) == [1] * 5


async def test_a_job_ended_elsewhere_wakes_its_result_at_once(autojump_clock: Any) -> None:
    # The queue's only slot is busy, so another worker (the test, on the same store) takes the
    # second job and ends it; the caller waiting for it is woken by that change, announced
    # after its look -- alone or heard together with the job's admission -- and reads it then,
    # not a poll later.
    wait_here, running, release = held()
    registry = AgentRegistry()
    registry.add(
        "waiter",
        ScriptedProvider(Reply(calls=[call("c1", "wait_here")]), Reply("done")),
        tools=[wait_here],
    )
    registry.add("echo", ScriptedProvider(Reply("never run here")))
    store = Counted()
    with trio.fail_after(BOUND):
        async with worker(store, registry, poll=POLL, concurrency=1) as queue:
            busy = await queue.enqueue(AgentJob.ask("waiter", "Go."))
            await running.wait()
            for together in (False, True):
                id = await queue.enqueue(AgentJob.ask("echo", "elsewhere"))
                outcome: list[AgentResult] = []

                async def wait_for(id: str = id, outcome: list[AgentResult] = outcome) -> None:
                    outcome.append(await queue.result(id))

                async with trio.open_nursery() as nursery:
                    if not together:
                        nursery.start_soon(wait_for)
                        await trio.sleep(1)  # (its look done, it waits)
                    taken = await store.acquire(
                        owner="elsewhere", lease=30.0, now=trio.current_time()
                    )
                    assert taken is not None
                    assert taken.id == id
                    assert taken.lease is not None
                    ended = finish(
                        taken,
                        taken.lease,
                        now=trio.current_time(),
                        status=S.COMPLETED,
                        result=AgentResult("done elsewhere"),
                    )
                    assert isinstance(ended, Applied)
                    assert await store.write(ended)
                    if together:
                        nursery.start_soon(wait_for)
                    finished_at = trio.current_time()
                assert [r.content for r in outcome] == ["done elsewhere"]
                assert trio.current_time() - finished_at < 1  # woken, not polled
            release.set()
            assert (await queue.result(busy)).content == "done"
