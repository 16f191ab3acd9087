"""A remote A2A agent as a model (``A2AAgent.as_provider``), so that an agent on it is the remote
agent in our runtime -- a handoff target (issue 26, item 4). Against the a2a-sdk's own server
(``tests/fixtures/a2a/a2a_sdk_agent.py``, in its own process: the real clock)."""

from __future__ import annotations

import pytest
import trio
from test_a2a_client import WITHIN, a2a_server

from actors import A2AAgent, Agent, handoff, open_runtime
from actors.testing import Reply, ScriptedProvider
from protocols.errors import ProviderError
from protocols.messages import Message, StopReason, ToolCall, ToolDefinition


async def test_an_agent_on_a_remote_streams_its_answer() -> None:
    async with a2a_server() as server, A2AAgent(server.url) as remote, open_runtime() as runtime:
        agent = await Agent.start(runtime, remote.as_provider(), name="remote")
        pieces: list[str] = []
        async with agent.stream("world", history=[]) as run:
            async for chunk in run:
                if chunk.kind == "content":
                    pieces.append(chunk.text)
        assert run.result.content == "Hello, world!"
        assert len(pieces) > 1  # streamed, not given whole
        assert "".join(pieces) == "Hello, world!"
        assert server.said("EXECUTE")


async def test_a_handoff_to_a_remote_agent_lets_it_answer_the_turn() -> None:
    async with a2a_server() as server, A2AAgent(server.url) as remote, open_runtime() as runtime:
        far = await Agent.start(runtime, remote.as_provider(), name="far")
        front = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("h1", "transfer_to_far", {})])),
            tools=[handoff(far)],
        )
        result = await front.generate("Where is my parcel?")
        line = await server.wait_for("EXECUTE")
    assert result.agent == "far"
    assert result.stop is StopReason.COMPLETE
    assert result.content.startswith("Hello, ")
    # The remote agent was told the conversation: the user's question came with it.
    assert "Where is my parcel?" in line
    assert "Where is my parcel?" in result.content


async def test_a_cut_call_cancels_the_remote_task() -> None:
    async with a2a_server() as server, A2AAgent(server.url) as remote, open_runtime() as runtime:
        agent = await Agent.start(runtime, remote.as_provider(), name="remote")
        async with agent.stream("hang", history=[]) as run:
            async for chunk in run:
                if chunk.kind == "content":
                    assert chunk.text == "working..."
                    run.abort()
        assert run.result.stop is StopReason.CANCELLED
        assert run.result.content == "working..."
        with trio.fail_after(WITHIN):
            await server.wait_for("CANCEL")


async def test_what_a_model_cannot_do_is_a_clear_provider_error() -> None:
    async with a2a_server() as server, A2AAgent(server.url) as remote:
        provider = remote.as_provider()
        tool = ToolDefinition("t", "A tool.", {"type": "object"})
        with pytest.raises(ProviderError, match="takes no tools"):
            provider.stream([Message.user("hi")], tools=[tool])
        with pytest.raises(ProviderError, match="asked for input"):
            await provider.generate([Message.user("ask me")])
        with pytest.raises(ProviderError, match="fail"):
            await provider.generate([Message.user("fail now")])
        assert "s3cret" not in repr(provider)
