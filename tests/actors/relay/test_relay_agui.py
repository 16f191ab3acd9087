"""The relay's AG-UI routes (issue 26, item 1) driven by AG-UI's own client: ``HttpAgent`` of
``@ag-ui/client`` in Node (``tests/e2e/node/agui_client.mjs``), every event it receives
checked against ``@ag-ui/core``'s schema, and the client's own verifier -- for a run of the
relay's model, a run of an agent whose tool runs on the server, a frontend tool the run stops
for and the browser answers, and an abort.

Real parts: ``RelayServer`` on hypercorn on loopback port 0, the real client package in its own
process (the real clock: nothing here sleeps).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio
from node_clients import run_node
from test_relay import TOKEN, Upstream, _UpstreamStream, running, server, until

from actors import open_runtime, tool
from actors.durable import AgentRegistry
from actors.providers import ProviderStream, StreamingProvider
from actors.relay import RelayAgents
from actors.testing import Hang, Reply, ScriptedProvider
from protocols.messages import Message, Role, ToolCall


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@asynccontextmanager
async def relay(
    provider: StreamingProvider, registry: AgentRegistry | None = None
) -> AsyncIterator[str]:
    async with open_runtime() as runtime:
        agents = RelayAgents(registry or AgentRegistry(), runtime)
        async with running(server(provider, agents=agents)) as url:
            yield url


def events(lines: list[dict[str, Any]], run: int = 1) -> list[dict[str, Any]]:
    return [line["event"] for line in lines if line.get("run") == run and "event" in line]


def kinds(lines: list[dict[str, Any]], run: int = 1) -> list[str]:
    return [event["type"] for event in events(lines, run)]


async def test_the_client_runs_the_relays_model() -> None:
    async with relay(Upstream()) as url:
        done = await run_node("agui_client.mjs", url + "/v1/agui", TOKEN, "plain")
    assert done.status == 0, done
    got = kinds(done.lines)
    assert got[0] == "RUN_STARTED"
    assert got[-1] == "RUN_FINISHED"
    text = "".join(e["delta"] for e in events(done.lines) if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Say hello. "  # the upstream says the prompt back
    assert not [line for line in done.lines if "invalid" in line or "warning" in line]


async def test_an_agents_own_tool_runs_on_the_server_and_the_client_sees_it() -> None:
    registry = AgentRegistry()
    registry.add(
        "calc",
        ScriptedProvider(Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]), "It is 42."),
        tools=[add],
    )
    async with relay(Upstream(), registry) as url:
        done = await run_node("agui_client.mjs", url + "/v1/agui/calc", TOKEN, "plain")
    assert done.status == 0, done
    got = events(done.lines)
    assert [e["type"] for e in got if e["type"].startswith("TOOL_CALL")] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    (result,) = [e for e in got if e["type"] == "TOOL_CALL_RESULT"]
    assert (result["toolCallId"], result["content"]) == ("c1", "42")
    text = "".join(e["delta"] for e in got if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "It is 42."


async def test_a_frontend_tool_ends_the_run_and_its_answer_continues_the_thread() -> None:
    for route in ("model", "agent"):
        script = ScriptedProvider(
            Reply(calls=[ToolCall("w1", "get_weather", {"city": "Paris"})]),
            "Sunny in Paris.",
        )
        registry = AgentRegistry()
        if route == "agent":
            registry.add("weather", script, tools=[add])
        provider = script if route == "model" else Upstream()
        path = "/v1/agui" if route == "model" else "/v1/agui/weather"
        async with relay(provider, registry) as url:
            done = await run_node("agui_client.mjs", url + path, TOKEN, "frontend_tool")
        assert done.status == 0, (route, done)
        first = [
            line["finished"] for line in done.lines if line.get("run") == 1 and "finished" in line
        ]
        assert first, done.lines
        (tool_line,) = [line["tool"] for line in done.lines if "tool" in line]
        assert tool_line["id"] == "w1"
        text = "".join(
            e["delta"] for e in events(done.lines, 2) if e["type"] == "TEXT_MESSAGE_CONTENT"
        )
        assert text == "Sunny in Paris.", route
        # The second call saw the frontend tool's answer after the call.
        seen = script.calls[1].messages
        assert [m.role for m in seen[-2:]] == [Role.ASSISTANT, Role.TOOL]
        assert "Paris" in seen[-1].content
        assert [d.name for d in script.calls[0].tools][-1] == "get_weather"


class Hanging(Upstream):
    """An upstream that says "partial", then waits until its stream is closed."""

    def stream(self, messages: Sequence[Message], **kwargs: Any) -> ProviderStream:
        self.calls += 1
        return _UpstreamStream(self, "hang")


async def test_an_abort_cancels_the_run_on_the_relay() -> None:
    upstream = Hanging()
    async with relay(upstream) as url:
        done = await run_node("agui_client.mjs", url + "/v1/agui", TOKEN, "abort")
        await until(lambda: upstream.closed == 1, within=10)
    assert done.status == 0, done
    assert upstream.parked == 0
    assert [line["aborted"] for line in done.lines if "aborted" in line] == [{"contents": 1}]


async def test_an_agent_run_aborted_by_the_client_ends_cancelled() -> None:
    registry = AgentRegistry()
    registry.add("slow", ScriptedProvider(Hang("one two")))
    async with open_runtime() as runtime:
        app = server(Upstream(), agents=RelayAgents(registry, runtime))
        async with running(app) as url:
            done = await run_node("agui_client.mjs", url + "/v1/agui/slow", TOKEN, "abort")
            assert done.status == 0, done
            # The run ended cancelled (the agent's partial committed), not left running.
            (run,) = app._runs._runs.values()
            with trio.fail_after(10):
                await run.done.wait()
            last = run.live.log.read(run.last - 1)[-1]
    assert last.kind == "cancelled"
    assert last.data["result"].content == "one two"
