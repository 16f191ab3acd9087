"""What a durable job's result and record say about how its run ended and what it spent
(issue 23): a run whose reply the provider cut short ends the job ``partial`` with the result's
stop and finish stored, and a usage that is partly unknown -- a response reported none, a call
was lost in a crash -- is never stored or continued as if it were the whole.

Jobs run on :class:`~actors.testing.ScriptedProvider` agents over a
:class:`~actors.durable.MemoryRunStore`, in trio time (see ``test_job_queue``).
"""

from __future__ import annotations

from typing import Any

import trio
from test_job_queue import lookup, until, worker

from actors import tool
from actors.durable import AgentRegistry, MemoryRunStore
from actors.testing import Fail, Reply, ScriptedProvider
from protocols.accounting import TokenBudget, estimate_tokens
from protocols.errors import ProviderError
from protocols.jobs import (
    AgentJob,
    CheckpointEntry,
    InputEntry,
    JobStatus,
    RequestEntry,
    ResponseEntry,
    ResultEntry,
)
from protocols.messages import (
    CUT_SHORT,
    FinishReason,
    Message,
    Role,
    StopReason,
    ToolCall,
    ToolSuccess,
    Usage,
)

BOUND = 600  # trio seconds; a job should end long before


async def test_a_job_whose_reply_was_cut_short_ends_partial_with_its_stop_and_finish(
    autojump_clock: Any,
) -> None:
    call = ToolCall("c1", "lookup", {"name": "x"})
    registry = AgentRegistry()
    registry.add(
        "cut",
        ScriptedProvider(Reply("Let me", calls=[call], finish="length", usage=Usage(4, 2))),
        tools=[lookup],
    )
    store = MemoryRunStore()
    with trio.fail_after(BOUND):
        async with worker(store, registry, allow_partial=True) as queue:
            id = await queue.enqueue(AgentJob.ask("cut", "look x up"))
            result = await queue.result(id)
    record = await store.get(id)
    assert record is not None
    assert record.status is JobStatus.PARTIAL
    assert record.result == result
    assert (result.stop, result.partial, result.finish) == (
        StopReason.MAX_TOKENS,
        True,
        FinishReason.LENGTH,
    )
    assert record.usage == Usage(4, 2)
    # The cut call did not run: it is answered in the stored conversation.
    assert [(m.role, m.content) for m in result.messages[-2:]] == [
        (Role.ASSISTANT, "Let me"),
        (Role.TOOL, CUT_SHORT[FinishReason.LENGTH]),
    ]


async def test_a_job_whose_usage_is_partly_unknown_stores_no_usage(autojump_clock: Any) -> None:
    call = ToolCall("c1", "lookup", {"name": "x"})
    registry = AgentRegistry()
    registry.add(
        "mixed",
        ScriptedProvider(Reply(calls=[call], usage=Usage(10, 5)), Reply("found x")),
        tools=[lookup],
    )
    store = MemoryRunStore()
    with trio.fail_after(BOUND):
        async with worker(store, registry) as queue:
            id = await queue.enqueue(AgentJob.ask("mixed", "look x up"))
            result = await queue.result(id)
    record = await store.get(id)
    assert record is not None
    assert (result.usage, result.total_usage) == (None, None)
    assert record.usage is None  # not Usage(): the first turn's 15 are not the whole


async def _lost_call(budget: TokenBudget | None) -> tuple[Any, Any]:
    """A job whose first worker settled one response (usage reported), answered its call, and
    died while the second call streamed: continued by a worker with ``budget``."""
    call = ToolCall("c1", "lookup", {"name": "x"})
    provider = ScriptedProvider(Reply("found x", usage=Usage(7, 3)))
    registry = AgentRegistry()
    registry.add("looker", provider, tools=[lookup])
    store = MemoryRunStore()
    job = AgentJob.ask("looker", "look x up", budget=budget)
    id = (await store.admit(job, now=trio.current_time())).record.id
    ghost = await store.acquire(owner="ghost", lease=1.0, now=trio.current_time())
    assert ghost is not None
    assert ghost.lease is not None
    await store.append(
        id,
        ghost.lease,
        [
            InputEntry(job.input),
            RequestEntry(1),
            ResponseEntry(Message.assistant(calls=[call]), Usage(100, 20)),
            ResultEntry(ToolSuccess("c1", "lookup", "found x")),
            RequestEntry(2),
            CheckpointEntry(2, "I found"),
        ],
    )
    await trio.sleep(2)
    with trio.fail_after(BOUND):
        async with worker(store, registry) as queue:
            result = await queue.result(id)
    return result, await store.get(id)


async def test_a_run_continued_after_a_lost_call_says_its_usage_is_unknown(
    autojump_clock: Any,
) -> None:
    result, record = await _lost_call(None)
    assert result.content == "found x"
    # 120 + 10 was reported; what the lost call cost was not: neither is passed off as all.
    assert (result.usage, result.estimated, record.usage) == (None, False, None)


async def test_a_run_continued_after_a_lost_call_charges_its_budget_an_estimate(
    autojump_clock: Any,
) -> None:
    result, record = await _lost_call(TokenBudget(max=10_000))
    lost = estimate_tokens("I found")
    assert result.estimated
    assert result.usage == Usage(100, 20) + Usage(completion=lost) + Usage(7, 3)
    assert record.usage == result.usage


async def test_a_failed_job_records_what_its_run_spent(autojump_clock: Any) -> None:
    # A job that ends without a result (its run failed) stores the turns and usage its run
    # had: before, it kept the record's untouched zero -- a silent undercount. A call that
    # failed reported nothing, so a run that made one spent what is not all known.
    call = ToolCall("c1", "explode", {})
    spent = Usage(10, 5)

    @tool
    async def explode() -> str:
        """Fail."""
        raise RuntimeError("boom")

    registry = AgentRegistry()
    registry.add(
        "tool_fails",
        ScriptedProvider(Reply(calls=[call], usage=spent)),
        tools=[explode],
        on_tool_error="raise",
    )
    registry.add(
        "call_fails",
        ScriptedProvider(
            Reply(calls=[ToolCall("c1", "lookup", {"name": "x"})], usage=spent),
            Fail(ProviderError("refused", code="refused", retryable=False)),
        ),
        tools=[lookup],
    )
    store = MemoryRunStore()
    with trio.fail_after(BOUND):
        async with worker(store, registry) as queue:
            ids = [
                await queue.enqueue(AgentJob.ask(name, "go"))
                for name in ("tool_fails", "call_fails")
            ]
            records = [await until(store, id, JobStatus.FAILED) for id in ids]
    assert [(r.turns, r.usage) for r in records] == [(1, spent), (2, None)]
