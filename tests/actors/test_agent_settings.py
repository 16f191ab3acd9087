"""Model settings end to end (issue 24, item 1): given to ``runtime.agent(...)`` and per run to
``generate``/``stream``, merged field by field, they reach each of the four HTTP adapters'
request bodies -- as the :class:`~actors.testing.Simulator` on a loopback port records them --
and the ``chat`` span; invalid ones are refused before any call."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actors import Agent, ModelSettings, OpenAIChat, open_runtime, tool
from actors.agent import RunOptions
from actors.testing import ScriptedProvider, Simulator
from protocols.errors import ConfigError, ValidationError
from protocols.messages import Message, ProviderOptions

VENDORS = ["openai", "openai_responses", "anthropic", "ollama"]

AGENT = ModelSettings(temperature=0.3, top_p=0.8, max_tokens=8000, parallel_tool_calls=True)
RUN = {"temperature": 0.6, "reasoning_effort": "low", "extra": {"vendor_option": True}}
MERGED = ModelSettings(
    temperature=0.6,
    top_p=0.8,
    max_tokens=8000,
    parallel_tool_calls=True,
    reasoning_effort="low",
    extra={"vendor_option": True},
)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize("vendor", VENDORS)
async def test_agent_and_run_settings_reach_each_adapters_body_merged(vendor: str) -> None:
    async with Simulator() as sim, open_runtime() as runtime:
        provider = getattr(sim, vendor)()
        agent = await runtime.agent(provider, tools=[add], settings=AGENT)
        result = await agent.generate("What is 19 + 23?", settings=RUN)
        assert result.content == "The answer is 42."
        # both turns of the run (the tool call and the answer) carried the merged settings
        assert len(sim.requests) == 2
        for request in sim.requests:
            got = request.settings
            if vendor in ("anthropic", "ollama"):  # parallel calls allowed: their default
                got = got.merge({"parallel_tool_calls": True})
            if vendor == "anthropic":  # the effort is a thinking budget there
                assert request.thinking_budget == 8000 // 4
                got = got.merge({"reasoning_effort": "low"})
            assert got == MERGED
            assert request.think
        # the next run without settings of its own has the agent's alone
        async with agent.stream("Say hi") as run:
            async for _ in run:
                pass
        got = sim.requests[-1].settings
        assert got.temperature == 0.3
        assert got.reasoning_effort is None
        assert got.extra is None
        assert not sim.requests[-1].think
        await provider.aclose()


async def test_a_mapping_is_taken_and_unknown_names_are_refused() -> None:
    async with Simulator() as sim, open_runtime() as runtime:
        provider = sim.openai()
        agent = await runtime.agent(provider, settings={"seed": 11, "stop": ["STOP"]})
        await agent.generate("hello", settings={"presence_penalty": 0.5})
        assert sim.requests[-1].settings == ModelSettings(
            seed=11, stop=("STOP",), presence_penalty=0.5
        )
        with pytest.raises(ValidationError, match="ModelSettings has no field 'temprature'"):
            await agent.generate("hello", settings={"temprature": 0.5})
        with pytest.raises(ValidationError, match="ModelSettings has no field 'sede'"):
            await runtime.agent(provider, settings={"sede": 1})
        await provider.aclose()


@pytest.mark.parametrize(
    ("settings", "error", "problem"),
    [
        ({"top_p": 1.5}, ValidationError, r"ModelSettings\.top_p must be"),
        ({"max_tokens": 0}, ValidationError, r"ModelSettings\.max_tokens must be"),
        ({"stop": "END"}, ValidationError, r"ModelSettings\.stop must be a sequence"),
        ({"reasoning_effort": "max"}, ValidationError, r"reasoning_effort must be"),
        ({"extra": {"messages": []}}, ConfigError, "extra may not set 'messages'"),
        ({"temperature": 0.5, "extra": {"temperature": 1}}, ConfigError, "from temperature"),
    ],
)
async def test_invalid_settings_are_refused_before_any_call(
    settings: dict[str, Any], error: type[Exception], problem: str
) -> None:
    async with Simulator() as sim, open_runtime() as runtime:
        provider = sim.openai()
        agent = await runtime.agent(provider)
        with pytest.raises(error, match=problem):
            await agent.generate("hello", settings=settings)
        assert sim.requests == ()
        assert sim.statistics().requests == 0
        await provider.aclose()


async def test_think_false_with_an_effort_is_refused_before_the_run_is_queued() -> None:
    provider = ScriptedProvider()
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, think=False)
        with pytest.raises(ValidationError, match="think=False contradicts reasoning_effort"):
            await agent.generate("hello", settings={"reasoning_effort": "high"})
        async with agent.stream("hello", settings={"reasoning_effort": "high"}) as run:
            with pytest.raises(ValidationError, match="think=False contradicts"):
                await run.__anext__()  # the first chunk asked for submits the run
        assert await agent.conversation.messages() == ()
        assert provider.calls == []
        assert agent.statistics()["runs"] == 0
    # settings alone are checked where they are made
    with pytest.raises(ValidationError, match=r"ModelSettings\.seed"):
        RunOptions(settings={"seed": 1.5})


async def test_the_chat_span_says_the_effective_settings() -> None:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    async with Simulator() as sim, open_runtime() as runtime:
        provider = sim.openai(model="gpt-test")
        agent = await Agent.start(
            runtime, provider, settings=AGENT, tracer_provider=tracing, name="traced"
        )
        await agent.generate("hello", settings={"seed": 5, "stop": ["X"], "temperature": 0.1})
        await provider.aclose()
    (chat,) = [span for span in exporter.get_finished_spans() if span.name == "chat gpt-test"]
    attributes = dict(chat.attributes or {})
    assert {key: value for key, value in attributes.items() if "request." in key} == {
        "gen_ai.request.model": "gpt-test",
        "gen_ai.request.max_tokens": 8000,
        "gen_ai.request.temperature": 0.1,
        "gen_ai.request.top_p": 0.8,
        "gen_ai.request.seed": 5,
        "gen_ai.request.stop_sequences": ("X",),
    }
    tracing.shutdown()


def test_openai_chat_names_the_token_cap_as_the_server_wants() -> None:
    messages = [Message.user("hi")]
    options = ProviderOptions(max_tokens=9)
    openai = OpenAIChat(model="gpt-5", base_url="https://api.openai.com/v1", api_key="k")
    local = OpenAIChat(model="qwen", base_url="http://127.0.0.1:8000/v1")
    chosen = OpenAIChat(
        model="x", base_url="http://127.0.0.1:8000/v1", max_tokens_key="max_completion_tokens"
    )
    assert openai.encode(messages, (), options)["max_completion_tokens"] == 9
    assert local.encode(messages, (), options)["max_tokens"] == 9
    assert chosen.encode(messages, (), options)["max_completion_tokens"] == 9
    assert (openai.max_tokens_key, local.max_tokens_key) == ("max_completion_tokens", "max_tokens")
    with pytest.raises(ConfigError, match="max_tokens_key must be"):
        OpenAIChat(model="x", base_url="http://h/v1", max_tokens_key="num_predict")  # type: ignore[arg-type]
    trio.run(openai.aclose)
    trio.run(local.aclose)
    trio.run(chosen.aclose)
