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

import attrs
import pytest
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
    """A memory store that counts the status reads (``looks``) and the worker's looks for jobs
    to take (``takes``)."""

    looks = 0
    takes = 0

    async def status(self, id: str) -> JobStatus | None:
        self.looks += 1
        return await super().status(id)

    async def acquire_many(self, **options: Any) -> list[Any]:
        self.takes += 1
        return await super().acquire_many(**options)


class CountedSQLite(SQLiteRunStore):
    """A SQLite store that counts as :class:`Counted` does."""

    looks = 0
    takes = 0

    async def status(self, id: str) -> JobStatus | None:
        self.looks += 1
        return await super().status(id)

    async def acquire_many(self, **options: Any) -> list[Any]:
        self.takes += 1
        return await super().acquire_many(**options)


def holding(
    name: str = "waiter", answer: str = "done"
) -> tuple[AgentRegistry, trio.Event, trio.Event]:
    """A registry whose agent ``name`` calls the tool ``wait_here`` (see ``held``), then answers
    ``answer``; with the events that say the tool runs and release it."""
    wait_here, running, release = held()
    registry = AgentRegistry()
    registry.add(
        name,
        ScriptedProvider(Reply(calls=[call("c1", "wait_here")]), Reply(answer)),
        tools=[wait_here],
    )
    return registry, running, release


async def per_job(store: Counted | CountedSQLite) -> list[tuple[int, int]]:
    """Five jobs, one after another, each waited for with ``result`` (and until the worker is
    idle again): for each, the status reads (``result``'s looks) and the worker's looks for
    jobs to take."""
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(*(Reply(f"done {n}") for n in range(5))))
    counts = []
    async with worker(store, registry, poll=POLL) as queue:
        for n in range(5):
            looks, takes = store.looks, store.takes
            id = await queue.enqueue(AgentJob.ask("echo", f"job {n}"))
            assert (await queue.result(id)).content == f"done {n}"
            await queue.wait_idle()
            counts.append((store.looks - looks, store.takes - takes))
    return counts


# A job that comes alone costs one status read and one look for jobs. The caller reads once on
# entry; the wake for its own admission (announced before that read) and its end here (handed
# over by the worker) read nothing. The worker does not look again after each job it ends when
# its last look left nothing.


async def test_a_job_alone_is_read_once_by_its_result_and_looked_for_once(
    autojump_clock: Any,
) -> None:
    with trio.fail_after(BOUND):
        assert await per_job(Counted()) == [(1, 1)] * 5


async def test_a_job_alone_is_read_once_by_its_result_and_looked_for_once_sqlite(
    tmp_path: pathlib.Path,
) -> None:
    # (On the real clock: the store's threads.)
    async with await CountedSQLite.open(tmp_path / "jobs.db") as store:
        with trio.fail_after(30):
            assert await per_job(store) == [(1, 1)] * 5


async def test_a_job_ended_elsewhere_wakes_its_result_at_once(autojump_clock: Any) -> None:
    # The queue's only slot is busy, so another worker (the test, on the same store) takes the
    # second job and ends it; the caller waiting for it is woken by that change, announced
    # after its look -- alone or heard together with the job's admission -- and reads it then,
    # not a poll later.
    registry, running, release = holding()
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


@pytest.mark.parametrize("then", ["handed_over", "announced"])
async def test_a_wake_that_comes_while_its_caller_is_awake_is_not_lost(
    autojump_clock: Any, then: str
) -> None:
    # The race: the caller is woken by a change its last look saw already (its job's admission,
    # heard late) and, before it runs again -- while no wait of its is there to be woken --
    # the job's run here ends with its final record handed over, or a change its look did not
    # see is announced (the job ended elsewhere, say). Either must reach it: the record taken
    # at once, the change looked at -- not a poll (1000 s) later. Driven here step by step,
    # the two in one go with no checkpoint between them.
    registry, running, release = holding()
    registry.add("echo", ScriptedProvider(Reply("never run here")))
    store = Counted()
    with trio.fail_after(BOUND):
        async with worker(store, registry, poll=POLL, concurrency=1) as queue:
            busy = await queue.enqueue(AgentJob.ask("waiter", "Go."))
            await running.wait()  # (the only slot busy: the next job stays queued)
            id = await queue.enqueue(AgentJob.ask("echo", "ended"))
            record = await store.get(id)
            assert record is not None
            ended = attrs.evolve(record, status=S.COMPLETED, result=AgentResult("handed over"))
            outcome: list[AgentResult] = []

            async def wait_for() -> None:
                outcome.append(await queue.result(id))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for)
                await trio.sleep(1)  # (its look done, it waits)
                assert queue._watching is not None
                seen = queue._watching.heard
                looks = store.looks
                queue._woke(id, seen)  # a change its look saw: no look needed for it
                if then == "handed_over":
                    queue._notify(id, ended)
                else:
                    queue._woke(id, seen + 1)  # one it did not see
                    await trio.sleep(1)
                    assert store.looks - looks == 1  # looked at once (still queued)
                    queue._notify(id, ended)
                finished_at = trio.current_time()
            assert [r.content for r in outcome] == ["handed over"]
            assert trio.current_time() - finished_at < 1  # woken, not polled
            assert store.looks - looks == (0 if then == "handed_over" else 1)
            release.set()
            assert (await queue.result(busy)).content == "done"


# While a job runs in this worker, its end here wakes the caller: the caller is not woken every
# poll to find it still running. And the worker's taker looks at the store once a poll while
# idle -- no more (no spinning), no less (a job no announcement tells of is found).


class Steps(trio.abc.Instrument):
    """Counts the steps of one task."""

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def test_a_caller_waiting_for_a_job_running_here_is_not_woken_by_polls(
    autojump_clock: Any,
) -> None:
    poll = 1.0
    registry, running, release = holding("slow")
    steps = Steps()
    with trio.fail_after(BOUND):
        async with worker(Counted(), registry, poll=poll) as queue:
            id = await queue.enqueue(AgentJob.ask("slow", "Take your time."))
            await running.wait()  # (taken: it runs here)
            outcome: list[AgentResult] = []

            async def wait_for() -> None:
                steps.task = trio.lowlevel.current_task()
                outcome.append(await queue.result(id))

            trio.lowlevel.add_instrument(steps)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(wait_for)
                    await trio.sleep(100 * poll)
                    release.set()
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert [r.content for r in outcome] == ["done"]
            # Its first step, a look, and its wake at the end: a poll's wake each would be ~100.
            assert steps.steps <= 5, steps.steps


async def test_an_idle_worker_looks_once_a_poll_and_finds_a_job_no_one_announced(
    autojump_clock: Any,
) -> None:
    poll = 1.0
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(Reply("found")))
    store = Counted()
    with trio.fail_after(BOUND):
        async with worker(store, registry, poll=poll) as queue:
            await trio.sleep(poll / 2)
            before = store.takes
            await trio.sleep(20 * poll)
            assert 19 <= store.takes - before <= 21
            # Admitted behind the worker's back: no announcement reaches it (a store of
            # another process would not tell it either); its next poll finds the job.
            store._announcer = type(store._announcer)()  # (the watch hears the old one)
            admitted = await store.admit(AgentJob.ask("echo", "quietly"), now=trio.current_time())
            start = trio.current_time()
            result = await queue.result(admitted.record.id)
            assert result.content == "found"
            assert trio.current_time() - start <= poll + 0.01


# The worker's looks for jobs: never a poll late for a job that some change made takeable.


async def test_no_job_waits_for_a_poll_after_the_change_that_made_it_takeable(
    autojump_clock: Any,
) -> None:
    # A worker of one slot whose looks leave nothing behind: each way a job becomes takeable
    # -- admitted while the slot is busy, next in its thread once the one before ends -- is
    # taken without waiting out the (very long) poll.
    registry, running, release = holding(answer="released")
    registry.add("chat", ScriptedProvider(Reply("one", delay=1), Reply("two", delay=1)))
    store = Counted()
    with trio.fail_after(BOUND):
        async with worker(store, registry, poll=POLL, concurrency=1) as queue:
            start = trio.current_time()
            busy = await queue.enqueue(AgentJob.ask("waiter", "Go."))
            await running.wait()
            behind = await queue.enqueue(AgentJob.ask("chat", "q1", conversation="t"))
            after = await queue.enqueue(AgentJob.ask("chat", "q2", conversation="t"))
            release.set()
            assert (await queue.result(busy)).content == "released"
            assert (await queue.result(behind)).content == "one"
            assert (await queue.result(after)).content == "two"
            assert trio.current_time() - start < POLL / 10
