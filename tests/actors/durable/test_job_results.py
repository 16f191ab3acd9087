"""What a durable job's result and record say about how its run ended (issue 23): a run whose
reply the provider cut short ends the job ``partial`` with the result's stop and finish stored.

Jobs run on :class:`~actors.testing.ScriptedProvider` agents over a
:class:`~actors.durable.MemoryRunStore`, in trio time (see ``test_job_queue``).
"""

from __future__ import annotations

from typing import Any

import trio
from test_job_queue import lookup, worker

from actors.durable import AgentRegistry, MemoryRunStore
from actors.testing import Reply, ScriptedProvider
from protocols.jobs import (
    AgentJob,
    JobStatus,
)
from protocols.messages import (
    CUT_SHORT,
    FinishReason,
    Role,
    StopReason,
    ToolCall,
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
