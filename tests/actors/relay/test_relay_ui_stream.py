"""The relay's AI SDK routes (issue 26, item 2) driven by the AI SDK itself: the ``ai``
package's ``DefaultChatTransport`` and ``readUIMessageStream`` in Node
(``tests/e2e/node/ui_stream_client.mjs``), every chunk checked against the package's own
schema -- a plain answer, a tool call the page runs and answers, an agent's own tools, an
abort, a reload that resumes the answer, and refusals.

Real parts: ``RelayServer`` on hypercorn on loopback port 0, the real package in its own
process (the real clock: nothing here sleeps; the one grace period is a tenth of a second).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from node_clients import run_node
from test_relay import OTHER, TOKEN, Upstream, running, server

from actors import open_runtime, tool
from actors.durable import AgentRegistry
from actors.providers import StreamingProvider
from actors.relay import RelayAgents, RelayLimits, RelayServer
from actors.testing import Reply, ScriptedProvider
from protocols.messages import Role, ToolCall

LONG = "One two three four five six seven eight nine ten."


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@asynccontextmanager
async def relay(
    provider: StreamingProvider, registry: AgentRegistry | None = None, **kwargs: Any
) -> AsyncIterator[tuple[str, RelayServer]]:
    async with open_runtime() as runtime:
        agents = RelayAgents(registry or AgentRegistry(), runtime)
        app = server(provider, agents=agents, **kwargs)
        async with running(app) as url:
            yield url, app


def of(lines: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("kind") == kind]


def text_of(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


def chunk_types(lines: Sequence[dict[str, Any]]) -> list[str]:
    return [line["chunk"]["type"] for line in of(lines, "chunk")]


async def test_the_sdk_reads_the_relays_answer() -> None:
    async with relay(Upstream()) as (url, _):
        done = await run_node("ui_stream_client.mjs", url + "/v1/chat", TOKEN, "plain")
    assert done.status == 0, done
    (message,) = of(done.lines, "message")
    assert text_of(message["message"]) == "Say hello. "
    types = chunk_types(done.lines)
    assert types[0] == "start"
    assert types[-1] == "finish"


async def test_the_page_runs_the_models_tool_call_and_the_answer_goes_on() -> None:
    script = ScriptedProvider(
        Reply("Checking.", calls=[ToolCall("call_1", "lookup", {"q": "weather"})]),
        Reply("The tool said so."),
    )
    async with relay(script) as (url, _):
        done = await run_node("ui_stream_client.mjs", url + "/v1/chat", TOKEN, "tool")
    assert done.status == 0, done
    (parts,) = of(done.lines, "tool_parts")
    assert [(p["toolCallId"], p["state"], p["providerExecuted"]) for p in parts["parts"]] == [
        ("call_1", "input-available", False)
    ]
    (continued,) = of(done.lines, "continued")
    assert text_of(continued["message"]) == "Checking.The tool said so."
    # The model's second call read the page's answer after its call.
    seen = script.calls[1].messages
    assert [m.role for m in seen[-2:]] == [Role.ASSISTANT, Role.TOOL]
    assert '"echo"' in seen[-1].content


async def test_an_agents_own_tool_shows_as_executed_by_the_server() -> None:
    registry = AgentRegistry()
    registry.add(
        "calc",
        ScriptedProvider(Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]), "It is 42."),
        tools=[add],
    )
    async with relay(Upstream(), registry) as (url, _):
        done = await run_node("ui_stream_client.mjs", url + "/v1/chat/calc", TOKEN, "tool")
    assert done.status == 0, done
    (parts,) = of(done.lines, "tool_parts")
    assert [(p["toolCallId"], p["state"], p["providerExecuted"]) for p in parts["parts"]] == [
        ("c1", "output-available", True)
    ]
    assert parts["parts"][0]["output"] == 42
    assert not of(done.lines, "continued")  # nothing for the page to run
    (message,) = of(done.lines, "message")
    assert text_of(message["message"]) == "It is 42."


async def test_an_abort_leaves_the_run_to_be_resumed_then_cancels_it() -> None:
    """The SDK cannot tell a stop from a reload: the run goes on after its client left, and
    is cancelled when nobody came back to it within the relay's ``resume_grace``."""
    script = ScriptedProvider(Reply(LONG, chunk=4, delay=0.05))
    limits = RelayLimits(resume_grace=0.1)
    async with relay(script, limits=limits) as (url, app):
        done = await run_node("ui_stream_client.mjs", url + "/v1/chat", TOKEN, "abort")
        assert done.status == 0, done
        (aborted,) = of(done.lines, "aborted")
        assert aborted["types"][-1] == "text-delta"
        (run,) = app._runs._runs.values()
        with trio.fail_after(10):
            await run.done.wait()
        last = run.live.log.read(run.last - 1)[-1]
    assert last.kind == "cancelled"
    assert last.data["response"].content != LONG  # cut before its end


async def test_a_reload_resumes_the_answer_from_its_start_to_its_end() -> None:
    for route in ("model", "agent"):
        script = ScriptedProvider(Reply(LONG, chunk=4, delay=0.02))
        registry = AgentRegistry()
        if route == "agent":
            registry.add("writer", script)
        path = "/v1/chat" if route == "model" else "/v1/chat/writer"
        async with relay(script if route == "model" else Upstream(), registry) as (url, _):
            done = await run_node("ui_stream_client.mjs", url + path, TOKEN, "resume")
            (chat,) = of(done.lines, "chat")
            async with httpx.AsyncClient(base_url=url) as client:
                headers = {"authorization": f"Bearer {TOKEN}"}
                stream = f"{path}/{chat['chatId']}/stream"
                # Given whole once: nothing is left to resume (204, as the SDK expects) --
                # and another token's reconnect to it is answered the same.
                again = await client.get(stream, headers=headers)
        assert done.status == 0, (route, done)
        (dropped,) = of(done.lines, "dropped")
        assert dropped["types"][-1] == "text-delta"
        (resumed,) = of(done.lines, "resumed")
        assert text_of(resumed["message"]) == LONG, route
        assert chunk_types(done.lines)[-1] == "finish"
        assert again.status_code == 204


async def test_nothing_to_resume_is_204_and_refusals_are_plain_text() -> None:
    async with relay(Upstream(), AgentRegistry()) as (url, _):
        async with httpx.AsyncClient(base_url=url) as client:
            headers = {"authorization": f"Bearer {TOKEN}"}
            missing = await client.get("/v1/chat/nochat/stream", headers=headers)
            assert missing.status_code == 204
            unknown = await client.post(
                "/v1/chat/nobody",
                json={"id": "c1", "messages": [], "trigger": "submit-message"},
                headers=headers,
            )
            assert unknown.status_code in (400, 404)
            bad = await client.post("/v1/chat", content=b"{", headers=headers)
            assert bad.status_code == 400
            assert bad.headers["content-type"].startswith("text/plain")
        done = await run_node("ui_stream_client.mjs", url + "/v1/chat", "wrong-token", "plain")
    assert done.status == 1
    assert of(done.lines, "failure")
    assert TOKEN not in done.stdout


async def test_a_chat_is_its_tokens_alone_and_stops_by_its_run_id() -> None:
    body = {
        "id": "chat-1",
        "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hang"}]}],
    }
    upstream = Upstream()
    async with (
        relay(upstream, tokens=[TOKEN, OTHER]) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        mine = {"authorization": f"Bearer {TOKEN}"}
        theirs = {"authorization": f"Bearer {OTHER}"}
        async with client.stream("POST", "/v1/chat", json=body, headers=mine) as answer:
            assert answer.headers["x-vercel-ai-ui-message-stream"] == "v1"
            run_id = answer.headers["x-relay-run-id"]
            async for line in answer.aiter_lines():
                if '"text-delta"' in line:
                    break
        # Left: the run goes on, for its token's reload only.
        other = await client.get("/v1/chat/chat-1/stream", headers=theirs)
        assert other.status_code == 204
        assert upstream.parked == 1
        stopped = await client.post(f"/v1/runs/{run_id}/cancel", headers=mine)
        assert stopped.status_code == 202
        resumed = await client.get("/v1/chat/chat-1/stream", headers=mine)
    assert resumed.status_code == 200
    chunks = [line for line in resumed.text.splitlines() if line.startswith("data: {")]
    assert '"type":"abort"' in chunks[-1]
    assert resumed.text.rstrip().endswith("data: [DONE]")
    assert upstream.closed == 1
