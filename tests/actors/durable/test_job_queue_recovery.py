"""The job queue where a run had gone wrong or far: abandoning (an unknown agent, a drifted
journal, workers dying too often), threads of three jobs and more, where the children's results
go, a run whose worker died after its final answer, a worker that takes its own job over.

Every test runs under ``trio.fail_after`` in trio time, so a job that never ends fails the test
instead of hanging it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from test_job_queue import (
    _exhausting,
    _ghost_takeovers,
    _retryable,
    lookup,
    until,
    user_texts,
    worker,
)

from actors.durable import AgentRegistry, JobError, MemoryRunStore
from actors.durable._queue import MAX_TAKEOVERS
from actors.testing import Fail, Hang, Reply, ScriptedProvider
from protocols.jobs import AgentJob, InputEntry, JobStatus, ResultEntry
from protocols.messages import Message, Role, ToolFailure

BOUND = 600  # trio seconds; a job should end long before


# --- Abandoning a job the worker itself holds (unknown agent, drift, takeovers)


async def test_result_of_an_abandoned_job_raises_job_error(autojump_clock: Any) -> None:
    with trio.fail_after(BOUND):
        async with worker(MemoryRunStore(), AgentRegistry()) as queue:
            id = await queue.enqueue(AgentJob.ask("nobody", "hi"))
            with pytest.raises(JobError) as raised:
                await queue.result(id)
    assert raised.value.record.status is JobStatus.ABANDONED
    assert raised.value.code == "job_abandoned"


async def test_an_unknown_agent_abandons_the_job_without_retrying(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("unused"))
    with trio.fail_after(BOUND):
        async with worker(MemoryRunStore(), registry, retries=3) as queue:
            id = await queue.enqueue(AgentJob.ask("ghost", "hi"))
            with pytest.raises(JobError) as raised:
                await queue.result(id)
            statistics = queue.statistics()
    record = raised.value.record
    assert record.status is JobStatus.ABANDONED
    assert record.error is not None
    assert record.error.startswith("unknown agent: ghost")
    assert record.attempts == 1
    assert record.takeovers == 0
    assert statistics["retried"] == 0
    assert statistics["abandoned"] == 1


async def test_a_drifted_journal_abandons_the_job_with_the_drift(autojump_clock: Any) -> None:
    provider = ScriptedProvider("never")
    registry = AgentRegistry()
    registry.add("echo", provider)
    store = MemoryRunStore()
    id = (await store.admit(AgentJob.ask("echo", "hi"), now=trio.current_time())).record.id
    # A worker that journaled a result for a call nobody made, and died.
    ghost = await store.acquire(owner="ghost", lease=1.0, now=trio.current_time())
    assert ghost is not None
    assert ghost.lease is not None
    await store.append(
        id,
        ghost.lease,
        [InputEntry((Message.user("hi"),)), ResultEntry(ToolFailure("zz", "lookup", "made up"))],
    )
    await trio.sleep(2)
    with trio.fail_after(BOUND):
        async with worker(store, registry) as queue:
            with pytest.raises(JobError) as raised:
                await queue.result(id)
    record = raised.value.record
    assert record.status is JobStatus.ABANDONED
    assert record.error == (
        f"the journal of job {id} does not match its history: entry 2: a result for call "
        "'zz', which the last response did not make"
    )
    assert provider.calls == []
    assert len(await store.journal(id)) == 2  # refused, never overwritten


async def test_more_than_max_takeovers_abandons_the_job(autojump_clock: Any) -> None:
    provider = ScriptedProvider("never")
    registry = AgentRegistry()
    registry.add("echo", provider)
    store = MemoryRunStore()
    id = (await store.admit(AgentJob.ask("echo", "hi"), now=trio.current_time())).record.id
    await _ghost_takeovers(store, id, MAX_TAKEOVERS + 1)  # 1 acquisition + MAX_TAKEOVERS
    with trio.fail_after(BOUND):
        async with worker(store, registry) as queue:
            with pytest.raises(JobError) as raised:
                await queue.result(id)
    record = raised.value.record
    assert record.status is JobStatus.ABANDONED
    assert record.takeovers == MAX_TAKEOVERS + 1
    assert record.error == f"its worker died {MAX_TAKEOVERS + 1} times while running it"
    assert provider.calls == []


async def test_statistics_count_abandoned_jobs(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("a"))
    with trio.fail_after(BOUND):
        async with worker(MemoryRunStore(), registry) as queue:
            done = await queue.enqueue(AgentJob.ask("echo", "1"))
            unknown = await queue.enqueue(AgentJob.ask("ghost", "x"))
            await queue.result(done)
            with pytest.raises(JobError):
                await queue.result(unknown)
            await queue.wait_idle()
            statistics = queue.statistics()
    assert statistics["acquired"] == 2
    assert statistics["completed"] == 1
    assert statistics["abandoned"] == 1
    assert statistics["running"] == 0


# --- A thread of three jobs: each sees the whole thread before it, once


async def test_a_thread_runs_one_job_at_a_time_in_order_each_seeing_the_ones_before(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(Reply("one", delay=2), Reply("two", delay=2), "three")
    registry = AgentRegistry()
    registry.add("chat", provider)
    store = MemoryRunStore()
    with trio.fail_after(BOUND):
        async with worker(store, registry, concurrency=4) as queue:
            ids = [
                await queue.enqueue(AgentJob.ask("chat", f"q{n}", conversation="t"))
                for n in (1, 2, 3)
            ]
            results = [await queue.result(id) for id in ids]
    assert [r.content for r in results] == ["one", "two", "three"]
    assert [
        (m.role.value, m.content) for m in provider.calls[2].messages if m.role is not Role.SYSTEM
    ] == [
        ("user", "q1"),
        ("assistant", "one"),
        ("user", "q2"),
        ("assistant", "two"),
        ("user", "q3"),
    ]


async def test_an_interrupt_job_goes_ahead_of_the_waiting_ones_of_its_thread(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(Reply("first", delay=5), "urgent answer", "second")
    registry = AgentRegistry()
    registry.add("chat", provider)
    store = MemoryRunStore()
    with trio.fail_after(BOUND):
        async with worker(store, registry, concurrency=4) as queue:
            first = await queue.enqueue(AgentJob.ask("chat", "q1", conversation="t"))
            await until(store, first, JobStatus.RUNNING)
            second = await queue.enqueue(AgentJob.ask("chat", "q2", conversation="t"))
            urgent = await queue.enqueue(
                AgentJob.ask("chat", "urgent", conversation="t"), priority="interrupt"
            )
            results = {id: await queue.result(id) for id in (first, second, urgent)}
    assert results[urgent].content == "urgent answer"
    assert results[second].content == "second"
    assert user_texts(provider, 2) == ["q1", "urgent", "q2"]


# --- The sub-jobs' results come after the parent's input (as docs/durable.md says)


async def test_the_sub_jobs_results_message_comes_after_the_parents_input(
    autojump_clock: Any,
) -> None:
    parent = ScriptedProvider("Summed up.")
    registry = AgentRegistry()
    registry.add("lead", parent)
    registry.add("north", ScriptedProvider("north is cold"))
    job = AgentJob.ask("lead", "Report.", children=[AgentJob.ask("north", "How is it?")])
    with trio.fail_after(BOUND):
        async with worker(MemoryRunStore(), registry) as queue:
            await queue.result(await queue.enqueue(job))
    assert user_texts(parent, 0) == [
        "Report.",
        "Results of the sub-jobs, in order:\n1. north (completed): north is cold",
    ]


# Keep imports used (helpers some pending variants may need).
_ = (_exhausting, _retryable, lookup, Fail, Hang)


# --- A run whose worker died after its final answer ends with that answer


async def test_a_run_continued_after_its_final_response_ends_with_that_response(
    autojump_clock: Any,
) -> None:
    from protocols.jobs import RequestEntry, ResponseEntry

    provider = ScriptedProvider("a second answer nobody asked for")
    registry = AgentRegistry()
    registry.add("echo", provider)
    store = MemoryRunStore()
    job = AgentJob.ask("echo", "hi")
    id = (await store.admit(job, now=trio.current_time())).record.id
    # A worker journaled the run's final answer (no calls) and died before the terminal.
    ghost = await store.acquire(owner="ghost", lease=1.0, now=trio.current_time())
    assert ghost is not None
    assert ghost.lease is not None
    await store.append(
        id,
        ghost.lease,
        [InputEntry(job.input), RequestEntry(1), ResponseEntry(Message.assistant("the answer"))],
    )
    await trio.sleep(2)
    with trio.fail_after(BOUND):
        async with worker(store, registry) as queue:
            result = await queue.result(id)
    assert provider.calls == []
    assert result.content == "the answer"
    assert result.turns == 1


# --- A worker that takes its own job over (paused past its lease) keeps running


async def test_a_worker_taking_its_own_job_over_keeps_running(autojump_clock: Any) -> None:
    from actors import open_runtime, tool
    from actors.durable import open_job_queue
    from protocols.messages import ToolCall

    @tool
    async def slow() -> str:
        """Slow."""
        await trio.sleep(5)
        return "ok"

    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "slow", {})]), "done", "spare")
    registry = AgentRegistry()
    registry.add("slowpoke", provider, tools=[slow])
    store = MemoryRunStore()
    skew = [0.0]
    with trio.fail_after(BOUND):
        async with (
            open_runtime() as runtime,
            open_job_queue(
                store, registry, runtime, lease=30, clock=lambda: trio.current_time() + skew[0]
            ) as queue,
        ):
            id = await queue.enqueue(AgentJob.ask("slowpoke", "go"))
            await trio.sleep(1)
            skew[0] = 100.0  # the worker "was paused" past its own lease
            result = await queue.result(id)
            await queue.wait_idle()
            statistics = queue.statistics()
    # Today: KeyError from `del self._running[record.id]` in JobQueue._job, out of the block.
    assert result.content == "done"
    assert statistics["running"] == 0
