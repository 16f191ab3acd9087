"""A team end to end over HTTP (issue 13): a lead agent delegates to a worker agent through
``as_tool``, both talking to the simulator over loopback with the OpenAI-compatible provider.

The lead is told ``call worker with {"input": ...}`` (the simulator's call policy); the worker
adds with its ``add`` tool and answers; the lead answers from the worker's answer. The lead's
stream shows the worker streaming under the hop, and the lead's total usage adds the worker's.
"""

from __future__ import annotations

import trio
import trio.testing

from actors import RunContext, RunStep, open_runtime, tool
from actors.agent import AgentEvent, Chunk
from actors.testing import Simulator
from protocols.messages import Role, StopReason, ToolCall, ToolSuccess


async def test_a_lead_delegating_to_a_worker_over_http_streams_nested_chunks_and_sums_usage(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.05  # real sockets: jump only when everything is idle
    added: list[tuple[int, int]] = []

    @tool
    async def add(a: int, b: int, ctx: RunContext[None]) -> int:
        """Add two integers."""
        ctx.progress(f"adding {a} and {b}")
        added.append((a, b))
        return a + b

    events: list[AgentEvent] = []
    chunks: list[Chunk] = []
    async with Simulator() as simulator, open_runtime() as runtime:
        lead_provider, worker_provider = simulator.openai(), simulator.openai()
        try:
            worker = await runtime.agent(worker_provider, name="worker", tools=[add])
            lead = await runtime.agent(
                lead_provider, name="lead", tools=[worker.as_tool()], on=[events.append]
            )
            async with lead.stream('call worker with {"input": "What is 19 + 23?"}') as run:
                async for chunk in run:
                    chunks.append(chunk)
            result = run.result
        finally:
            await lead_provider.aclose()
            await worker_provider.aclose()
        requests = simulator.requests
    # Four requests: the lead's call, the worker's add call, the worker's answer, the lead's.
    assert [r.tools for r in requests] == [("worker",), ("add",), ("add",), ("worker",)]
    assert added == [(19, 23)]
    # The simulator answers from a tool result by quoting it: the lead quotes the worker.
    assert (result.stop, result.content, result.agent) == (
        StopReason.COMPLETE,
        "The answer is The answer is 42..",
        "lead",
    )

    (delegation,) = [c.call for c in chunks if c.kind == "tool_call" and not c.path]
    assert delegation is not None
    assert (delegation.name, delegation.arguments) == ("worker", {"input": "What is 19 + 23?"})
    hop = (RunStep(result.run_id, delegation.id, "worker"),)
    nested = [c for c in chunks if c.path == hop]
    (child_run,) = {c.run_id for c in nested}
    assert child_run.startswith(f"subagent:{delegation.id}:")
    # The worker's turn streamed through the lead's stream, piece by piece, in order.
    worker_text = [c.text for c in nested if c.kind == "content"]
    assert len(worker_text) > 1
    assert "".join(worker_text) == "The answer is 42."
    (worker_call,) = [c.call for c in nested if c.kind == "tool_call"]
    assert isinstance(worker_call, ToolCall)
    assert (worker_call.name, worker_call.arguments) == ("add", {"a": 19, "b": 23})
    (worker_result,) = [c.result for c in nested if c.kind == "tool_result"]
    assert isinstance(worker_result, ToolSuccess)
    assert worker_result.value == 42
    assert [c.text for c in nested if c.kind == "progress"] == ["adding 19 and 23"]
    order = [(c.kind, c.path) for c in chunks]
    assert order.index(("tool_call", ())) < order.index(("content", hop))
    assert order.index(("content", hop)) < order.index(("tool_result", ()))
    # The lead's tool message is the worker's answer; the lead's history is its own.
    tool_messages = [m for m in result.messages if m.role is Role.TOOL]
    assert [(m.tool_call_id, m.content) for m in tool_messages] == [
        (delegation.id, "The answer is 42.")
    ]

    # Usage: the lead's own turns, and the total with the worker's run.
    finish = next(e for e in events if e.kind == "subagent_finish")
    assert (finish.child, finish.status) == (child_run, "complete")
    assert finish.usage is not None
    assert finish.usage.total > 0
    assert result.usage.total > 0
    assert result.total_usage == result.usage + finish.usage
    worker_usage = [c.usage for c in nested if c.kind == "usage"]
    assert len(worker_usage) == 2
    assert finish.usage == worker_usage[0] + worker_usage[1]  # type: ignore[operator]
