"""Provider strings wherever a provider is taken: ``runtime.agent("openai:MODEL")``,
``runtime.connect(...)``, ``Agent.start`` and ``AgentRegistry.add`` build the adapter from the
environment variables it documents, against real simulators on 127.0.0.1."""

from __future__ import annotations

import pytest
import trio

from actors import Agent, open_runtime
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue
from actors.providers import (
    AnthropicMessages,
    OllamaChat,
    OpenAIChat,
    OpenAIResponses,
    ProviderConnection,
    provider_from_string,
)
from actors.testing import Simulator
from protocols.errors import ConfigError
from protocols.jobs import AgentJob

KEY = "sk-strings-test-0123456789"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "OLLAMA_HOST"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("text", "vendor"),
    [("openai:simulator", "openai"), ("openai-responses:simulator", "openai-responses")],
)
async def test_an_openai_string_reads_its_key_and_base_url(
    text: str, vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Simulator(api_key=KEY) as simulator, open_runtime() as runtime:
        monkeypatch.setenv("OPENAI_BASE_URL", simulator.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the simulator refuses a call without it
        agent = await runtime.agent(text, system="Be terse.")
        result = await agent.generate("What is 19 + 23?")
    assert result.content == "19 + 23 = 42."
    assert [(r.vendor, r.model) for r in simulator.requests] == [(vendor, "simulator")]


async def test_an_ollama_string_reads_its_host(monkeypatch: pytest.MonkeyPatch) -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        monkeypatch.setenv("OLLAMA_HOST", simulator.base_url.removeprefix("http://"))
        agent = await Agent.start(runtime, "ollama:qwen3:8b")
        result = await agent.generate("What is 19 + 23?")
    assert result.content == "19 + 23 = 42."
    assert [(r.vendor, r.model) for r in simulator.requests] == [("ollama", "qwen3:8b")]


def test_each_vendor_builds_its_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    built = {
        text: provider_from_string(text)
        for text in ("openai:a", "openai-responses:b", "anthropic:c", "ollama:d")
    }
    assert [type(provider) for provider in built.values()] == [
        OpenAIChat,
        OpenAIResponses,
        AnthropicMessages,
        OllamaChat,
    ]
    assert [provider.model for provider in built.values()] == ["a", "b", "c", "d"]
    anthropic = built["anthropic:c"]
    assert anthropic.base_url == "https://api.anthropic.com"
    assert anthropic.auth_headers()["x-api-key"] == KEY
    assert KEY not in repr(anthropic)


async def test_a_missing_key_is_one_error_naming_the_variable() -> None:
    async with open_runtime() as runtime:
        before = runtime.statistics().children
        with pytest.raises(ConfigError, match="set the environment variable OPENAI_API_KEY"):
            await runtime.agent("openai:gpt-4.1-mini")
        with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
            await runtime.connect("anthropic:claude-sonnet-4-5")
        with pytest.raises(ConfigError, match="unknown provider 'azure'"):
            await runtime.agent("azure:gpt-4")
        assert runtime.statistics().children == before  # nothing left started


async def test_an_agent_made_from_a_string_closes_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        monkeypatch.setenv("OPENAI_BASE_URL", simulator.openai_base_url)  # local: no key
        before = runtime.statistics().children
        agent = await runtime.agent("openai:simulator")
        assert len(runtime.statistics().children) == len(before) + 3  # its connection too
        await agent.generate("hello")
        await agent.aclose()
        assert runtime.statistics().children == before


async def test_connect_takes_a_string(monkeypatch: pytest.MonkeyPatch) -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        monkeypatch.setenv("OPENAI_BASE_URL", simulator.openai_base_url)
        connection = await runtime.connect("openai:simulator", limit=2)
        assert isinstance(connection, ProviderConnection)
        agent = await runtime.agent(connection)
        assert (await agent.generate("What is 1 + 2?")).content == "1 + 2 = 3."
        await agent.aclose()
        assert connection.statistics().limit == 2  # an agent given one does not close it
        assert (await connection.generate([])).content.startswith("Hello!")


async def test_a_registry_takes_a_string(monkeypatch: pytest.MonkeyPatch) -> None:
    async with Simulator(api_key=KEY) as simulator:
        monkeypatch.setenv("OPENAI_BASE_URL", simulator.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        registry = AgentRegistry()
        spec = registry.add("calculator", "openai:simulator", system="Be terse.")
        assert isinstance(spec.provider, OpenAIChat)
        with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
            registry.add("writer", "anthropic:claude-sonnet-4-5")
        assert "writer" not in registry
        async with (
            open_runtime() as runtime,
            open_job_queue(MemoryRunStore(), registry, runtime, clock=trio.current_time) as queue,
        ):
            id = await queue.enqueue(AgentJob.ask("calculator", "What is 19 + 23?"))
            result = await queue.result(id)
        await spec.provider.aclose()
    assert result.content == "19 + 23 = 42."
