"""An agent made for one run in its caller's task (a durable job's worker makes one per job):
configured as any agent, with no actor of its own and a conversation without one -- nothing
started in the runtime, the run's steps and guarantees an agent's."""

from __future__ import annotations

import pytest
import trio

from actors import ActorStopped, open_runtime, tool
from actors._request import _Request
from actors._run_options import RunOptions
from actors.agent import _RunAgent
from actors.testing import Hang, Reply, ScriptedProvider
from protocols.messages import Message, StopReason, ToolCall


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_run_agent_runs_in_the_callers_task_and_starts_no_actor() -> None:
    async with open_runtime() as runtime:
        before = runtime.statistics().children
        provider = ScriptedProvider(
            Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]), Reply("42")
        )
        agent = await _RunAgent.start(runtime, provider, tools=[add], name="adder")
        assert runtime.statistics().children == before  # no actor, no conversation actor
        assert agent.name == "adder"
        request = _Request(agent, (Message.user("19 + 23?"),), RunOptions(), None)
        result = await agent._execute_here(request)
        assert result.content == "42"
        assert result.turns == 2
        assert result.agent == "adder"
        history = await agent.conversation.history()
        assert history.messages[0].content == "19 + 23?"
        assert len(history.messages) == 4  # the input, the call, its result, the answer
        with pytest.raises(RuntimeError, match="no actor"):
            await agent.generate("again")
        await agent.aclose()
        with pytest.raises(ActorStopped):
            await agent.conversation.add([Message.user("after")])
        assert runtime.statistics().children == before


async def test_a_run_agent_is_cut_as_any_run_and_commits_its_partial(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        agent = await _RunAgent.start(runtime, ScriptedProvider(Hang("Once upon a")))
        request = _Request(agent, (Message.user("tell me"),), RunOptions(timeout=5), None)
        result = await agent._execute_here(request)
        assert result.stop is StopReason.TIMEOUT
        assert result.partial
        history = await agent.conversation.history()
        assert history.messages[-1].content == "Once upon a"
        assert history.messages[-1].interrupted
        await agent.aclose()
