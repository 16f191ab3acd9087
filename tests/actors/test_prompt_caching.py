"""Prompt caching end to end (issue 27, section 3): an agent's long conversation against the
simulator over real HTTP, with AnthropicMessages and OpenAIChat -- the second turn reports the
prefix as cached (and the first, on Anthropic, as written), in the run's usage and on its spans.
Also the official SDKs of both vendors reading the simulator's cache counts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actors import Agent, open_runtime
from actors.testing import Simulator
from protocols.errors import ConfigError, ValidationError
from protocols.messages import AgentResult, Message, Usage

READ = "gen_ai.usage.cache_read.input_tokens"
WRITE = "gen_ai.usage.cache_creation.input_tokens"
WORDS = " ".join(["lorem"] * 200)


def conversation(exchanges: int) -> list[Message]:
    """A long conversation: ``exchanges`` user/assistant pairs of about 300 tokens each."""
    messages: list[Message] = []
    for number in range(exchanges):
        messages.append(Message.user(f"{number}: {WORDS}"))
        messages.append(Message.assistant(f"{number}: {WORDS}"))
    return messages


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    yield provider, exported
    provider.shutdown()


def usage_of(result: AgentResult) -> Usage:
    assert result.usage is not None
    return result.usage


def by_start(spans: tuple[ReadableSpan, ...], prefix: str) -> list[dict[str, object]]:
    chosen = [span for span in spans if span.name.startswith(prefix)]
    chosen.sort(key=lambda span: span.start_time or 0)
    return [dict(span.attributes or {}) for span in chosen]


async def test_anthropic_writes_the_prefix_on_the_first_turn_and_reads_it_on_the_second(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tracer_provider, spans = exporter
    past = conversation(4)  # about 2,400 tokens: past Anthropic's minimum of 1,024
    async with Simulator() as simulator, open_runtime() as runtime:
        model = simulator.anthropic(model="claude-sim")
        agent = await Agent.start(runtime, model, name="reader", tracer_provider=tracer_provider)
        first = await agent.generate("First question?", history=past)
        second = await agent.generate("Second question?", history=[*past, *first.messages])
        await model.aclose()
    one, two = usage_of(first), usage_of(second)
    assert one.cache_write is not None
    assert one.cache_write >= 2400  # the whole history, written
    assert one.cached == 0
    assert two.cached == one.cache_write  # ... and read back
    assert two.cached is not None
    assert two.cache_write is not None
    assert 0 < two.cache_write < 50  # only the first turn's question and answer
    assert two.cached + two.cache_write < two.prompt
    # the marks were on the wire (no system, no tools): the end of the history up to the last
    # turn, and three turns back -- where the second request reads what the first wrote
    first_request, second_request = simulator.requests
    assert len(first_request.prefixes) == 2
    assert len(second_request.prefixes) == 2
    assert second_request.prefixes[0] == first_request.prefixes[1]
    # and on the spans: each chat, and the run's sums
    chats = by_start(spans.get_finished_spans(), "chat")
    assert [(chat.get(READ), chat.get(WRITE)) for chat in chats] == [
        (0, one.cache_write),
        (two.cached, two.cache_write),
    ]
    runs = by_start(spans.get_finished_spans(), "invoke_agent")
    assert runs[1][READ] == two.cached
    assert runs[1][WRITE] == two.cache_write


async def test_with_the_cache_off_nothing_is_marked_nor_cached(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tracer_provider, spans = exporter
    past = conversation(4)
    async with Simulator() as simulator, open_runtime() as runtime:
        model = simulator.anthropic()
        agent = await Agent.start(
            runtime, model, settings={"cache": "off"}, tracer_provider=tracer_provider
        )
        first = await agent.generate("First?", history=past)
        second = await agent.generate("Second?", history=[*past, *first.messages])
        await model.aclose()
    two = usage_of(second)
    assert [request.prefixes for request in simulator.requests] == [(), ()]
    assert (two.cached, two.cache_write) == (None, None)
    assert all(READ not in chat for chat in by_start(spans.get_finished_spans(), "chat"))


async def test_a_mark_by_hand_from_generate_caches_the_named_document() -> None:
    document = Message.user(f"Read this: {WORDS} {WORDS} {WORDS} {WORDS}", id="document")
    past = [document, Message.assistant("Read.")]
    async with Simulator() as simulator, open_runtime() as runtime:
        model = simulator.anthropic()
        agent = await runtime.agent(model, system="Answer from the document.")
        settings = {"cache_breakpoints": ["document"]}
        first = await agent.generate("What is it about?", history=past, settings=settings)
        second = await agent.generate("And its length?", history=past, settings=settings)
        await model.aclose()
    one, two = usage_of(first), usage_of(second)
    assert [len(request.prefixes) for request in simulator.requests] == [1, 1]
    assert one.cache_write == two.cached
    assert two.cached is not None
    assert two.cached > 1024
    assert two.cache_write == 0


async def test_openai_reads_a_repeated_prefix_by_itself_and_takes_a_cache_key(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tracer_provider, spans = exporter
    past = conversation(4)
    async with Simulator() as simulator, open_runtime() as runtime:
        model = simulator.openai(model="gpt-sim")
        agent = await Agent.start(
            runtime,
            model,
            settings={"cache_key": "tenant-7", "cache_retention": "24h"},
            tracer_provider=tracer_provider,
        )
        first = await agent.generate("First question?", history=past)
        second = await agent.generate("Second question?", history=[*past, *first.messages])
        with pytest.raises(ConfigError, match="cache='off' cannot be honoured"):
            await agent.generate("Third?", settings={"cache": "off"})
        await model.aclose()
    one, two = usage_of(first), usage_of(second)
    assert one.cached == 0
    assert one.cache_write is None  # OpenAI reports no writes
    assert two.cached is not None
    assert two.cached >= 2048  # the history, in 128-token steps
    assert (two.cached - 1024) % 128 == 0
    assert {request.settings.cache_key for request in simulator.requests} == {"tenant-7"}
    assert {request.settings.cache_retention for request in simulator.requests} == {"24h"}
    chats = by_start(spans.get_finished_spans(), "chat")
    assert [chat.get(READ) for chat in chats[:2]] == [0, two.cached]
    assert all(WRITE not in chat for chat in chats)


async def test_the_official_sdks_read_the_cache_counts() -> None:
    anthropic_sdk = pytest.importorskip("anthropic")  # (a test dependency: pyproject.toml)
    openai_sdk = pytest.importorskip("openai")
    past = conversation(4)
    turns = [{"role": message.role.value, "content": message.content} for message in past]
    marked = [
        *turns[:-1],
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": past[-1].content, "cache_control": {"type": "ephemeral"}}
            ],
        },
        {"role": "user", "content": "q"},
    ]
    async with Simulator() as simulator:
        claude = anthropic_sdk.AsyncAnthropic(api_key="k", base_url=simulator.base_url)
        usages = []
        for _ in range(2):
            async with claude.messages.stream(model="m", max_tokens=100, messages=marked) as stream:
                usages.append((await stream.get_final_message()).usage)
        await claude.close()
        assert usages[0].cache_creation_input_tokens > 2400
        assert usages[1].cache_read_input_tokens == usages[0].cache_creation_input_tokens
        assert usages[1].cache_creation_input_tokens == 0
        gpt = openai_sdk.AsyncOpenAI(api_key="k", base_url=simulator.openai_base_url)
        chat = [*turns, {"role": "user", "content": "q"}]
        counts = []
        for _ in range(2):
            completion = await gpt.chat.completions.create(model="m", messages=chat)
            counts.append(completion.usage)
        await gpt.close()
        assert counts[0].prompt_tokens_details.cached_tokens == 0
        assert counts[1].prompt_tokens_details.cached_tokens >= 2048


async def test_the_simulators_minimum_is_its_own_to_set() -> None:
    with pytest.raises(ValidationError, match="min_tokens must be an int >= 1"):
        Simulator(cache_min_tokens=0)
    past = [Message.user("A short note."), Message.assistant("Noted.")]
    for minimum, expected in ((1024, None), (2, 6)):  # "A short note." and "Noted.": 4 + 2
        async with Simulator(cache_min_tokens=minimum) as simulator:
            model = simulator.anthropic()
            result = await model.generate([*past, Message.user("q")])
            await model.aclose()
        assert result.usage is not None
        assert result.usage.cache_write == expected
