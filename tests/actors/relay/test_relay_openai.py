"""The relay's OpenAI-compatible endpoint (issue 26, item 3): ``POST /v1/chat/completions``,
driven by the official ``openai`` SDK with a relay token as its API key -- streamed and whole,
the relay's model or an agent (``model="agent:NAME"``), tool calls passed through, a client that
leaves, and every refusal in OpenAI's error shape (which the SDK raises as its own classes).

Real parts: ``RelayServer`` on hypercorn on loopback port 0, the SDK's blocking client in a
worker thread (so these tests run on the real clock; nothing in them sleeps).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import openai
import pytest
import trio
from test_relay import TOKEN, UPSTREAM_SECRET, Upstream, running, server, until

from actors import open_runtime, tool
from actors.durable import AgentRegistry
from actors.relay import RelayAgents, RelayLimits, RelayToken
from actors.testing import Hang, Reply, ScriptedProvider, Simulator
from protocols.messages import ToolCall

T = TypeVar("T")


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


async def in_thread(function: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(function, abandon_on_cancel=True)


_CLIENTS: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def client(url: str, key: str = TOKEN) -> openai.OpenAI:
    """The SDK's client of the relay at ``url`` (closed after the test)."""
    made = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=30)
    _CLIENTS.append(made)
    return made


@asynccontextmanager
async def relay_with_agents(
    upstream: Any, registry: AgentRegistry | None = None, **kwargs: Any
) -> AsyncIterator[str]:
    async with open_runtime() as runtime:
        agents = None if registry is None else RelayAgents(registry, runtime)
        async with running(server(upstream, agents=agents, **kwargs)) as url:
            yield url


async def test_a_streamed_completion_is_the_relayed_answer() -> None:
    upstream = Upstream()
    async with relay_with_agents(upstream) as url:

        def ask() -> tuple[str, list[str | None], Any]:
            stream = client(url).chat.completions.create(
                model="whatever",
                messages=[{"role": "user", "content": "hello relay world"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            text, finishes, usage = "", [], None
            for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finishes.append(choice.finish_reason)
                if chunk.usage is not None:
                    usage = chunk.usage
            return text, finishes, usage

        text, finishes, usage = await in_thread(ask)
    assert text == "hello relay world "
    assert [f for f in finishes if f is not None] == ["stop"]
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 4)
    assert upstream.calls == 1


async def test_a_whole_completion_passes_the_models_tool_calls_through() -> None:
    upstream = Upstream(calls=[ToolCall("c1", "weather", {"city": "Oslo"})])
    async with relay_with_agents(upstream) as url:

        def ask() -> Any:
            return client(url).chat.completions.with_raw_response.create(
                model="m",
                messages=[{"role": "user", "content": "weather please"}],
                tools=[WEATHER],
            )

        raw = await in_thread(ask)
    answer = raw.parse()
    assert raw.headers["x-relay-run-id"]
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "weather please "
    (call,) = choice.message.tool_calls
    assert (call.id, call.function.name, call.function.arguments) == (
        "c1",
        "weather",
        '{"city":"Oslo"}',
    )


async def test_an_agent_answers_by_model_name_and_stops_for_the_clients_tool() -> None:
    registry = AgentRegistry()
    provider = ScriptedProvider(
        Reply(
            calls=[
                ToolCall("a1", "add", {"a": 19, "b": 23}),
                ToolCall("w1", "weather", {"city": "Oslo"}),
            ]
        ),
        Reply("42, and sunny."),
    )
    registry.add("calc", provider, tools=[add])
    async with relay_with_agents(Upstream(), registry) as url:
        sdk = client(url)
        history: list[Any] = [{"role": "user", "content": "add, and the weather"}]

        def first() -> Any:
            return sdk.chat.completions.create(
                model="agent:calc", messages=history, tools=[WEATHER]
            )

        answer = await in_thread(first)
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        # Only the client's call comes back: the agent ran its own (add) itself.
        (call,) = choice.message.tool_calls
        assert (call.id, call.function.name) == ("w1", "weather")
        history.append(choice.message.model_dump(exclude_none=True))
        history.append({"role": "tool", "tool_call_id": "w1", "content": "sunny"})

        def second() -> Any:
            return sdk.chat.completions.create(
                model="agent:calc", messages=history, tools=[WEATHER], stream=True
            )

        stream = await in_thread(second)
        text = await in_thread(
            lambda: "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        )
    assert text == "42, and sunny."
    # The agent's model saw the whole exchange, its own tool's result included.
    seen = provider.calls[1].messages
    assert [m.role.value for m in seen[-4:]] == ["user", "assistant", "tool", "tool"]


async def test_refusals_come_in_openais_shape() -> None:
    async with relay_with_agents(Upstream(), AgentRegistry()) as url:

        def wrong_key() -> Any:
            return client(url, key="not-a-token").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )

        with pytest.raises(openai.AuthenticationError) as failed:
            await in_thread(wrong_key)
        assert failed.value.status_code == 401

        def unknown_agent() -> Any:
            return client(url).chat.completions.create(
                model="agent:nobody", messages=[{"role": "user", "content": "hi"}]
            )

        with pytest.raises(openai.NotFoundError):
            await in_thread(unknown_agent)

        def two_choices() -> Any:
            return client(url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], n=2
            )

        with pytest.raises(openai.BadRequestError) as bad:
            await in_thread(two_choices)
        assert "n" in str(bad.value.message)

        async with httpx.AsyncClient(base_url=url) as raw:
            headers = {"authorization": f"Bearer {TOKEN}"}
            broken = await raw.post("/v1/chat/completions", content=b"{", headers=headers)
            assert broken.status_code == 400
            assert broken.json()["error"]["type"] == "invalid_request_error"
            got = await raw.get("/v1/chat/completions", headers=headers)
            assert got.status_code == 405
            assert got.headers["allow"] == "POST"


async def test_an_upstream_failure_is_an_error_without_the_upstreams_words() -> None:
    async with relay_with_agents(Upstream()) as url:

        def ask() -> Any:
            return client(url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "fail"}]
            )

        with pytest.raises(openai.APIStatusError) as failed:
            await in_thread(ask)
    assert failed.value.status_code >= 500
    assert UPSTREAM_SECRET not in str(failed.value.body)


async def test_a_client_that_leaves_mid_stream_cancels_its_run() -> None:
    upstream = Upstream()
    async with relay_with_agents(upstream) as url:

        def leave() -> str:
            stream = client(url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hang"}], stream=True
            )
            text = ""
            for chunk in stream:
                text += chunk.choices[0].delta.content or "" if chunk.choices else ""
                if text:
                    break
            stream.close()  # the SDK's abort: the connection goes
            return text

        assert await in_thread(leave) == "partial"
        await until(lambda: upstream.closed == 1, within=10)
    assert upstream.parked == 0


async def test_an_agent_run_cut_by_its_client_is_cancelled() -> None:
    registry = AgentRegistry()
    registry.add("slow", ScriptedProvider(Hang("thinking...")))
    async with relay_with_agents(Upstream(), registry) as url:

        def leave() -> str:
            stream = client(url).chat.completions.create(
                model="agent:slow", messages=[{"role": "user", "content": "go"}], stream=True
            )
            run_id: str = stream.response.headers["x-relay-run-id"]
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break
            stream.close()
            return run_id

        run_id = await in_thread(leave)
        async with httpx.AsyncClient(base_url=url) as raw:
            headers = {"authorization": f"Bearer {TOKEN}"}
            events = (await raw.get(f"/v1/runs/{run_id}/events", headers=headers, timeout=10)).text
    lines = [line for line in events.splitlines() if line.startswith("data:")]
    last = lines[-1].replace(" ", "")
    assert '"kind":"cancelled"' in last
    assert '"stop":"cancelled"' in last  # the agent's own partial result: it committed
    assert '"agent":"slow"' in last  # (the agent's name, not its actor's)


async def test_the_relays_limits_apply() -> None:
    tight = RelayToken(TOKEN, per_minute=1)
    async with relay_with_agents(Upstream(), tokens=[tight]) as url:

        def ask() -> Any:
            return client(url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )

        await in_thread(ask)
        with pytest.raises(openai.RateLimitError):
            await in_thread(ask)
    small = RelayLimits(max_frame=2048)
    async with relay_with_agents(Upstream(), limits=small) as url:

        def big() -> Any:
            return client(url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x" * 4096}]
            )

        with pytest.raises(openai.APIStatusError) as failed:
            await in_thread(big)
        assert failed.value.status_code == 413


async def test_trio_agents_chat_is_a_relay_client_through_the_endpoint() -> None:
    """``trio-agents chat --base-url`` (its own process) pointed at the relay, the relay token
    its API key: its agent (and its add tool) runs there, the relay's model answers -- the
    tool call and its result crossing the endpoint both ways."""
    async with Simulator(interval=0) as simulator:
        upstream = simulator.openai()
        async with relay_with_agents(upstream) as url:
            argv = ["chat", "--model", "m", "--base-url", url + "/v1", "--api-key", TOKEN]
            with trio.fail_after(60):
                done = await trio.run_process(
                    [sys.executable, "-m", "actors", *argv, "--no-think"],
                    stdin=b"What is 19 + 23?\n",
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
        await upstream.aclose()
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "-> add(a=19, b=23)\n<- add: 42\n" in out
    assert "The answer is 42." in out
    assert TOKEN not in out


async def test_runs_of_one_agent_go_on_at_once() -> None:
    """Each request runs a fresh agent of the spec: a second run of the same agent while the
    first streams is not refused (nor queued behind it)."""
    registry = AgentRegistry()
    registry.add("busy", ScriptedProvider(Hang("first, still going"), Reply("second")))
    async with (
        relay_with_agents(Upstream(), registry) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as raw,
    ):
        headers = {"authorization": f"Bearer {TOKEN}"}
        body = {"model": "agent:busy", "messages": [{"role": "user", "content": "go"}]}
        async with raw.stream(
            "POST", "/v1/chat/completions", json={**body, "stream": True}, headers=headers
        ) as first:
            async for line in first.aiter_lines():
                if "first, still going" in line:
                    break
            second = await raw.post("/v1/chat/completions", json=body, headers=headers)
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "second"


def test_turns_kept_for_the_clients_answers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the relay keeps to put a turn back whole is bounded by count and by characters:
    the latest turns stay, the oldest go."""
    from actors.relay import _served
    from actors.relay._admission import _TokenState
    from protocols.messages import AgentResult, Message, StopReason

    monkeypatch.setattr(_served, "STOPPED_CHARS", 10_000)
    agents = RelayAgents(AgentRegistry(), runtime=None)  # type: ignore[arg-type]
    owner = _TokenState(RelayToken(TOKEN))
    for n in range(100):
        call = ToolCall(f"w{n}", "weather", {"city": "x" * 500})
        turn = (Message.assistant("", calls=[call]),)
        result = AgentResult(messages=turn, stop=StopReason.CLIENT_TOOLS)
        agents._keep(owner, result)
        assert agents._stopped_chars <= 10_000
    assert agents._stopped_chars == sum(_served._chars(t) for t in agents._stopped.values())
    kept = [key[1][0] for key in agents._stopped]
    assert kept[-1] == "w99"  # the latest stays
    assert "w0" not in kept  # the oldest went
