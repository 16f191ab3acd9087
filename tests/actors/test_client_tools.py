"""Client tools (issue 26): tools the caller runs itself -- a frontend's, an OpenAI client's --
shown to the model beside the agent's own; a turn calling one ends the run, ``stop``
``client_tools``, after the agent's own calls of that turn ran; the caller answers the open
calls and continues with them as input. Such a run works on the caller's history only.

Every test runs over ``ScriptedProvider``; those that wait use trio's autojump clock.
"""

from __future__ import annotations

import pytest
import trio

from actors import Agent, open_runtime, tool
from actors.testing import Hang, Reply, ScriptedProvider
from protocols.errors import ValidationError
from protocols.history import check_history
from protocols.messages import Message, Role, StopReason, ToolCall, ToolDefinition

WEATHER = ToolDefinition(
    "weather", "The weather in a city.", {"type": "object", "properties": {"city": {}}}
)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def open_call_ids(messages: list[Message]) -> set[str]:
    calls = {call.id for m in messages if m.role == Role.ASSISTANT for call in m.calls}
    return calls - {m.tool_call_id for m in messages if m.role == Role.TOOL}


async def test_a_call_of_a_client_tool_ends_the_run_after_the_agents_own_calls_ran() -> None:
    provider = ScriptedProvider(
        Reply(
            calls=[
                ToolCall("c1", "add", {"a": 19, "b": 23}),
                ToolCall("c2", "weather", {"city": "Oslo"}),
            ]
        ),
        Reply("42, and sunny in Oslo."),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        first = await agent.generate("add, and the weather", history=[], client_tools=[WEATHER])
        # The model saw both kinds of tool.
        assert [d.name for d in provider.calls[0].tools] == ["add", "weather"]
        assert first.stop is StopReason.CLIENT_TOOLS
        assert first.partial
        assert [call.id for call in first.client_calls] == ["c2"]
        roles = [m.role for m in first.messages]
        assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL]  # add's result only
        assert first.messages[-1].tool_call_id == "c1"
        assert first.messages[-1].content == "42"
        assert open_call_ids(list(first.messages)) == {"c2"}
        # The caller answers and goes on: the whole exchange is its history.
        answer = Message.tool("c2", "weather", "sunny")
        second = await agent.generate([*first.messages, answer], history=[], client_tools=[WEATHER])
        assert second.stop is StopReason.COMPLETE
        assert second.client_calls == ()
        assert second.content == "42, and sunny in Oslo."
        seen = provider.calls[1].messages
        assert [m.role for m in seen][-2:] == [Role.TOOL, Role.TOOL]
        check_history([*second.messages])  # well formed: every call answered
        # The agent's own conversation was never touched.
        assert (await agent.conversation.history()).messages == ()


async def test_client_tools_need_a_history_and_names_of_their_own() -> None:
    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "weather", {})]))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        with pytest.raises(ValidationError, match="give history="):
            await agent.generate("hi", client_tools=[WEATHER])
        with pytest.raises(ValidationError, match="twice"):
            await agent.generate("hi", history=[], client_tools=[WEATHER, WEATHER])
        with pytest.raises(ValidationError, match="ToolDefinitions"):
            await agent.generate("hi", history=[], client_tools=["weather"])
        clash = ToolDefinition("add", "Not ours.", {"type": "object"})
        with pytest.raises(ValidationError, match="the agent has a tool of that name"):
            await agent.generate("hi", history=[], client_tools=[clash])
        assert provider.calls == []  # refused before any provider call


async def test_tool_choice_none_shows_no_client_tool_either() -> None:
    provider = ScriptedProvider(Reply("No tools."))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("hi", history=[], client_tools=[WEATHER], tool_choice="none")
        assert result.stop is StopReason.COMPLETE
        assert provider.calls[0].tools == ()


@pytest.mark.parametrize("at", [0.5, 1.0, 1.5, 2.0, 2.5, 3.5])
async def test_a_cut_while_the_agents_own_calls_run_leaves_every_call_answered(
    autojump_clock: trio.testing.MockClock, at: float
) -> None:
    """The run is cut (its caller's deadline) before, while or after the agent's own tool of
    the turn runs: whatever the moment, the history it leaves is well formed."""

    @tool
    async def slow(n: int) -> int:
        """Wait, then answer."""
        await trio.sleep(2)
        return n

    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "slow", {"n": 1}), ToolCall("c2", "weather", {})], delay=1),
        Hang(),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[slow])
        result = await agent.generate("go", history=[], client_tools=[WEATHER], timeout=at)
        messages = list(result.messages)
        if result.stop is StopReason.CLIENT_TOOLS:
            assert open_call_ids(messages) == {"c2"}
        else:
            assert result.stop is StopReason.TIMEOUT
            check_history(messages)
            assert open_call_ids(messages) == set()
