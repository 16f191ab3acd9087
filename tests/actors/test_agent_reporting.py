"""What a run tells its user about trouble: tools that raise (the ``tool_error`` event, the
WARNING log, ``on_tool_error="raise"``) and usage nobody reported (issue 11, sections 3 and 5).
"""

from __future__ import annotations

import logging

import pytest

from actors import open_runtime, tool
from actors.agent import Agent, AgentEvent, AgentStatus
from actors.testing import Reply, ScriptedProvider
from protocols.accounting import TokenBudget
from protocols.errors import ToolError, ValidationError
from protocols.messages import Role, StopReason, ToolCall, Usage


class Boom(RuntimeError):
    pass


@tool
async def explode(where: str) -> str:
    """Fail loudly."""
    raise Boom(f"kaboom at {where}")


@tool
async def fine() -> str:
    """Work."""
    return "ok"


async def test_a_tool_that_raises_is_recorded_and_emits_tool_error_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[AgentEvent] = []
    call = ToolCall("c1", "explode", {"where": "the lab"})
    provider = ScriptedProvider(Reply(calls=[call]), Reply("sorry"))
    caplog.set_level(logging.DEBUG, logger="trio_agents")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[explode], on=[events.append])
        result = await agent.generate("go")
    assert result.stop is StopReason.COMPLETE
    answer = next(m for m in result.messages if m.role is Role.TOOL)
    assert answer.content == "Boom: kaboom at the lab"  # the model reads it, as before
    errors = [e for e in events if e.kind == "tool_error"]
    assert len(errors) == 1
    assert isinstance(errors[0].error, Boom)
    assert errors[0].call == call
    # One line at WARNING (an expected failure of a tool: no traceback), the traceback at DEBUG.
    (warning,) = [r for r in caplog.records if r.name == "trio_agents.tools" and r.levelno >= 30]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage() == "tool 'explode' raised Boom: 'kaboom at the lab' (call 'c1')"
    assert not warning.exc_info
    (debug,) = [r for r in caplog.records if r.name == "trio_agents.tools" and r.levelno < 30]
    assert debug.levelno == logging.DEBUG
    assert debug.exc_info is not None
    assert debug.exc_info[1] is errors[0].error


async def test_on_tool_error_raise_fails_the_run_after_recording_the_batch() -> None:
    calls = [ToolCall("c1", "fine", {}), ToolCall("c2", "explode", {"where": "here"})]
    provider = ScriptedProvider(Reply(calls=calls), Reply("never"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[explode, fine], on_tool_error="raise")
        with pytest.raises(ToolError) as caught:
            await agent.generate("go")
        history = await agent.conversation.messages()
        assert agent.status is AgentStatus.ERROR
        # A run may still ask for the default.
        provider2 = ScriptedProvider(Reply(calls=[calls[1]]), Reply("recorded"))
        agent.provider = provider2
        assert (await agent.generate("again", on_tool_error="record")).content == "recorded"
    assert caught.value.tool == "explode"
    assert caught.value.call_id == "c2"
    assert isinstance(caught.value.__cause__, Boom)
    assert len(provider.calls) == 1
    # The whole batch is answered: history stays well formed.
    assert [m.content for m in history if m.role is Role.TOOL] == [
        "ok",
        "Boom: kaboom at here",
    ]


def test_on_tool_error_is_validated() -> None:
    from actors.agent import RunOptions

    with pytest.raises(ValidationError, match="on_tool_error"):
        RunOptions(on_tool_error="ignore")  # type: ignore[arg-type]


async def test_usage_nobody_reported_stays_unknown() -> None:
    provider = ScriptedProvider(Reply("a", usage=Usage(2, 1)), Reply("b"))
    chunks = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        known = await agent.generate("first")
        async with agent.stream("second") as run:
            chunks = [chunk async for chunk in run if chunk.kind == "usage"]
    assert (known.usage, known.estimated) == (Usage(2, 1), False)
    assert run.result.usage is None  # never reported: not zero
    assert not run.result.estimated
    assert [(c.usage, c.estimated) for c in chunks] == [(None, False)]


async def test_a_total_that_includes_a_delegated_runs_estimate_says_so() -> None:
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        child = await Agent.start(runtime, ScriptedProvider(Reply("abcdefgh")), name="child")
        provider = ScriptedProvider(
            Reply(calls=[ToolCall("d1", "child", {"input": "go"})], usage=Usage(3, 1)),
            Reply("done", usage=Usage(4, 1)),
        )
        parent = await Agent.start(runtime, provider, tools=[child.as_tool()], on=[events.append])
        result = await parent.generate("go", budget=TokenBudget(max=100))
    # Its own turns were reported; the child's was not, and the budget charged an estimate.
    assert result.usage == Usage(7, 2)
    assert result.total_usage == Usage(7, 2) + Usage(completion=2, total=2)
    assert result.estimated
    (finished,) = [e for e in events if e.kind == "subagent_finish"]
    assert (finished.usage, finished.estimated) == (Usage(completion=2, total=2), True)


async def test_a_budget_charges_unreported_usage_by_estimate_and_says_so() -> None:
    provider = ScriptedProvider(Reply("abcdefgh"), Reply("x", usage=Usage(3, 1)))
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, on=[events.append])
        estimated = await agent.generate("one", budget=TokenBudget(max=100))
        reported = await agent.generate("two", budget=TokenBudget(max=100))
    assert (estimated.usage, estimated.estimated) == (Usage(completion=2, total=2), True)
    assert (reported.usage, reported.estimated) == (Usage(3, 1), False)
    usage_events = [(e.usage, e.estimated) for e in events if e.kind == "usage"]
    assert usage_events == [(Usage(completion=2, total=2), True), (Usage(3, 1), False)]
