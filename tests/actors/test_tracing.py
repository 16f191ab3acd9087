"""OpenTelemetry tracing (``actors._tracing``, ``actors.tracing``): the spans a run makes, their
parents across actor hops, sub-runs, durable jobs and the relay, and nothing at all when off.

Every test gives its own SDK ``TracerProvider`` (an ``InMemorySpanExporter`` behind a
``SimpleSpanProcessor``, and a processor that remembers spans started but never ended)
explicitly: the global provider is never set, except by ``monkeypatch`` in the one test of the
global opt-in (restored afterwards). Runs are on scripted providers in trio time
(``autojump_clock``), relay tests on real loopback sockets with the mock clock jumping.
"""

from __future__ import annotations

import contextlib
import functools
import math
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import trio_websocket

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from actors import (
    Agent,
    TokenBudget,
    _tracing,
    handoff,
    open_runtime,
    tool,
)
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue, submit_job
from actors.relay import RelayProvider, RelayServer, serve
from actors.testing import Fail, Hang, Reply, ScriptedProvider, Simulator
from actors.tracing import (
    STOP_REASON,
    TRACE_METADATA_KEY,
    context_from_carrier,
    trace_carrier,
    tracing_active,
)
from protocols.errors import ProviderError
from protocols.jobs import AgentJob, JobStatus
from protocols.messages import (
    Message,
    ProviderOptions,
    StopReason,
    ToolCall,
    Usage,
)
from protocols.relay import (
    PROTOCOL_VERSION,
    HelloFrame,
    ResultFrame,
    StreamFrame,
    decode_server_frame,
    encode_frame,
)

TOKEN = "relay-token-0123456789abcdef"


class Unended(SpanProcessor):
    """Remembers every span started and forgets it when it ends: what is left leaked."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self.open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.pop(span.context.span_id, None)


class Spans:
    """A tracer provider of the test's own and what it recorded."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.unended = Unended()
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.unended)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    @property
    def finished(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [span for span in self.finished if span.name.startswith(prefix)]

    def one(self, name: str) -> ReadableSpan:
        found = [span for span in self.finished if span.name == name]
        assert len(found) == 1, [span.name for span in self.finished]
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    recorded = Spans()
    yield recorded
    assert recorded.unended.open == {}, f"spans never ended: {recorded.unended.open}"
    recorded.provider.shutdown()


def sid(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def tid(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


class GPT(ScriptedProvider):
    """A scripted provider that names itself as the OpenAI adapter does, with a model."""

    name = "openai-chat"
    model = "gpt-test"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def leaky(secret: str) -> str:
    """Raise with the argument in the message."""
    raise RuntimeError(f"it went wrong holding {secret}")


def call(id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id, name, arguments)


# -- one run ------------------------------------------------------------------------------------


async def test_a_run_makes_invoke_agent_with_chat_and_execute_tool_children(
    autojump_clock: Any, spans: Spans
) -> None:
    provider = GPT(
        Reply(calls=[call("c1", "add", a=19, b=23)], usage=Usage(10, 8, cached=4, cache_write=3)),
        Reply("The answer is 42.", usage=Usage(20, 5)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, name="calc", tools=[add], tracer_provider=spans.provider
        )
        with spans.tracer.start_as_current_span("caller") as caller:
            result = await agent.generate("What is 19 + 23?")
        conversation = agent.conversation.id
    assert result.content == "The answer is 42."
    run = spans.one("invoke_agent calc")
    chats = spans.named("chat")
    (tool_span,) = spans.named("execute_tool")
    assert run.kind is SpanKind.INTERNAL
    assert parent_of(run) == caller.get_span_context().span_id
    assert tid(run) == caller.get_span_context().trace_id
    assert [span.name for span in chats] == ["chat gpt-test", "chat gpt-test"]
    assert all(span.kind is SpanKind.CLIENT and parent_of(span) == sid(run) for span in chats)
    assert tool_span.name == "execute_tool add"
    assert parent_of(tool_span) == sid(run)
    assert {tid(span) for span in spans.finished} == {tid(run)}
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "calc",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.conversation.id": conversation,
        "trio_agents.run.id": result.run_id,
        STOP_REASON: "complete",
        "trio_agents.turns": 2,
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 13,
        "gen_ai.usage.cache_read.input_tokens": 4,
        "gen_ai.usage.cache_creation.input_tokens": 3,
    }
    first, second = sorted(chats, key=lambda span: span.start_time or 0)
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "trio_agents.turn": 1,
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 8,
        "gen_ai.usage.cache_read.input_tokens": 4,
        "gen_ai.usage.cache_creation.input_tokens": 3,
    }
    assert (second.attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)
    assert "gen_ai.usage.cache_read.input_tokens" not in (second.attributes or {})
    assert "gen_ai.usage.cache_creation.input_tokens" not in (second.attributes or {})
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    # The tool ran between the two provider calls, inside the run.
    assert (first.end_time or 0) <= (tool_span.start_time or 0)
    assert (tool_span.end_time or 0) <= (second.start_time or 0)
    assert all(span.status.status_code is StatusCode.UNSET for span in spans.finished)


async def test_a_chat_span_names_the_response_model_and_id_the_provider_reported(
    autojump_clock: Any, spans: Spans
) -> None:
    provider = GPT(
        Reply("one", model="gpt-test-2025-01-01", response_id="chatcmpl-1"),
        Reply("two"),  # a provider that reports neither
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, name="namer", tracer_provider=spans.provider)
        await agent.generate("first")
        await agent.generate("second")
    first, second = sorted(spans.named("chat"), key=lambda span: span.start_time or 0)
    assert (first.attributes or {})["gen_ai.request.model"] == "gpt-test"
    assert (first.attributes or {})["gen_ai.response.model"] == "gpt-test-2025-01-01"
    assert (first.attributes or {})["gen_ai.response.id"] == "chatcmpl-1"
    assert "gen_ai.response.model" not in (second.attributes or {})
    assert "gen_ai.response.id" not in (second.attributes or {})
    # The run's span has no response of its own.
    (run, _) = sorted(spans.named("invoke_agent"), key=lambda span: span.start_time or 0)
    assert "gen_ai.response.id" not in (run.attributes or {})


@pytest.mark.parametrize(
    ("vendor", "response_id"), [("openai", "chatcmpl-sim0"), ("anthropic", "msg_sim0")]
)
async def test_a_provider_over_http_names_its_response_on_the_chat_span(
    spans: Spans, vendor: str, response_id: str
) -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        model = getattr(simulator, vendor)(model="sim-model")
        agent = await Agent.start(runtime, model, name="simulated", tracer_provider=spans.provider)
        result = await agent.generate("Say hello")
        await model.aclose()
    assert result.content == "You said: Say hello"
    chat = spans.one("chat sim-model")
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.provider.name"] == vendor
    assert attributes["gen_ai.response.model"] == "sim-model"
    assert attributes["gen_ai.response.id"] == response_id
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)


@pytest.mark.usefixtures("_jumping")
async def test_a_chat_cut_mid_stream_names_the_response_it_cut(spans: Spans) -> None:
    async with Simulator(interval=1) as simulator, open_runtime() as runtime:
        model = simulator.anthropic(model="sim-model")
        agent = await Agent.start(runtime, model, name="cut", tracer_provider=spans.provider)
        result = await agent.generate("count to 50", timeout=6.5)
        await model.aclose()
    assert result.stop is StopReason.TIMEOUT
    assert result.content  # some of the answer had streamed
    attributes = dict(spans.one("chat sim-model").attributes or {})
    assert attributes["gen_ai.response.finish_reasons"] == ("cancelled",)
    assert attributes["gen_ai.response.model"] == "sim-model"
    assert attributes["gen_ai.response.id"] == "msg_sim0"


async def test_the_parent_is_the_context_where_the_run_was_requested_not_the_actor_task(
    autojump_clock: Any, spans: Spans
) -> None:
    provider = ScriptedProvider("one", "two", "three")
    async with open_runtime() as runtime:
        # Started (its actor spawned) inside one span...
        with spans.tracer.start_as_current_span("spawned"):
            agent = await Agent.start(
                runtime, provider, name="helper", tracer_provider=spans.provider
            )
        # ...asked inside another: the run executes in the agent's actor task, yet is its child.
        with spans.tracer.start_as_current_span("asked") as asked:
            await agent.generate("hi")
        # A stream made inside a span and iterated after it ended: still that span's child.
        with spans.tracer.start_as_current_span("made") as made:
            run = agent.stream("again")
        async with run:
            async for _ in run:
                pass
        # Asked with no span current: a root, whatever the actor's task inherited.
        await agent.generate("alone")
    runs = sorted(spans.named("invoke_agent"), key=lambda span: span.start_time or 0)
    assert len(runs) == 3
    assert parent_of(runs[0]) == asked.get_span_context().span_id
    assert parent_of(runs[1]) == made.get_span_context().span_id
    assert tid(runs[1]) == made.get_span_context().trace_id
    assert runs[2].parent is None
    spawned = spans.one("spawned")
    assert all(tid(run) != tid(spawned) for run in runs)


async def test_a_run_cut_by_its_deadline_ends_its_spans_with_the_stop_reason(
    autojump_clock: Any, spans: Spans
) -> None:
    provider = ScriptedProvider(Hang("partial answer"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, name="slow", tracer_provider=spans.provider)
        result = await agent.generate("hi", timeout=5)
    assert result.stop is StopReason.TIMEOUT
    run = spans.one("invoke_agent slow")
    chat = spans.one("chat")
    assert (run.attributes or {})[STOP_REASON] == "timeout"
    assert (chat.attributes or {})["gen_ai.response.finish_reasons"] == ("cancelled",)
    assert parent_of(chat) == sid(run)
    assert run.status.status_code is StatusCode.UNSET  # a cut is not an error


async def test_a_run_whose_usage_is_partly_a_budgets_estimate_says_so(
    autojump_clock: Any, spans: Spans
) -> None:
    # 003 G20: an unreported turn charged by estimate is flagged on the run's span too.
    async with open_runtime() as runtime:
        reported = await Agent.start(
            runtime,
            ScriptedProvider(Reply("fine", usage=Usage(3, 2))),
            name="reported",
            tracer_provider=spans.provider,
        )
        guessed = await Agent.start(
            runtime,
            ScriptedProvider(Reply("a guess", usage=None)),
            name="guessed",
            tracer_provider=spans.provider,
        )
        assert not (await reported.generate("hi", budget=TokenBudget(max=1000))).estimated
        assert (await guessed.generate("hi", budget=TokenBudget(max=1000))).estimated
    assert "trio_agents.usage.estimated" not in (
        spans.one("invoke_agent reported").attributes or {}
    )
    attributes = spans.one("invoke_agent guessed").attributes or {}
    assert attributes["trio_agents.usage.estimated"] is True
    assert attributes["gen_ai.usage.output_tokens"] > 0


async def test_a_caller_cancelled_mid_tool_ends_every_span(
    autojump_clock: Any, spans: Spans
) -> None:
    started = trio.Event()

    @tool
    async def wait() -> str:
        """Wait for ever."""
        started.set()
        await trio.sleep(math.inf)
        return "never"

    provider = ScriptedProvider(Reply(calls=[call("w1", "wait")]))
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, name="waiter", tools=[wait], tracer_provider=spans.provider
        )
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.generate, "go")
                await started.wait()
                scope.cancel()
        await agent.aclose()
    run = spans.one("invoke_agent waiter")
    tool_span = spans.one("execute_tool wait")
    assert (run.attributes or {})[STOP_REASON] == "cancelled"
    assert (tool_span.attributes or {})["trio_agents.tool.interrupted"] is True
    assert parent_of(tool_span) == sid(run)


async def test_a_provider_error_is_recorded_on_the_chat_and_the_run(
    autojump_clock: Any, spans: Spans
) -> None:
    failure = ProviderError("the upstream refused", code="http_401", retryable=False)
    provider = ScriptedProvider(Fail(failure))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, name="failing", tracer_provider=spans.provider)
        with pytest.raises(ProviderError):
            await agent.generate("hi")
    run = spans.one("invoke_agent failing")
    chat = spans.one("chat")
    for span in (run, chat):
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "http_401"
        (event,) = [e for e in span.events if e.name == "exception"]
        assert (event.attributes or {})["exception.message"] == "the upstream refused"


async def test_a_tool_that_raises_is_an_error_span_without_the_exception_text(
    autojump_clock: Any, spans: Spans
) -> None:
    provider = ScriptedProvider(Reply(calls=[call("l1", "leaky", secret="sk-hidden-123")]), "ok")
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, name="leaker", tools=[leaky], tracer_provider=spans.provider
        )
        result = await agent.generate("hi")
    assert result.content == "ok"
    tool_span = spans.one("execute_tool leaky")
    assert tool_span.status.status_code is StatusCode.ERROR
    assert (tool_span.attributes or {})["error.type"] == "builtins.RuntimeError"
    shown = repr(
        [
            (span.attributes, [(e.name, e.attributes) for e in span.events], span.status)
            for span in spans.finished
        ]
    )
    assert "sk-hidden-123" not in shown


# -- sub-runs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("conversation", ["fresh", "shared"])
async def test_a_delegated_run_is_a_child_of_the_tool_call_that_started_it(
    autojump_clock: Any, spans: Spans, conversation: str
) -> None:
    async with open_runtime() as runtime:
        child = await Agent.start(
            runtime,
            ScriptedProvider("child answer"),
            name="child",
            tracer_provider=spans.provider,
        )
        parent = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[call("d1", "ask_child", input="help")]), Reply("parent answer")
            ),
            name="parent",
            tools=[child.as_tool("ask_child", conversation=conversation)],  # type: ignore[arg-type]
            tracer_provider=spans.provider,
        )
        result = await parent.generate("go")
    assert result.content == "parent answer"
    outer = spans.one("invoke_agent parent")
    call_span = spans.one("execute_tool ask_child")
    inner = spans.one("invoke_agent child")
    inner_chat = [span for span in spans.named("chat") if parent_of(span) == sid(inner)]
    assert parent_of(call_span) == sid(outer)
    assert parent_of(inner) == sid(call_span)
    assert len(inner_chat) == 1
    assert {tid(span) for span in spans.finished} == {tid(outer)}


async def test_a_handed_to_run_is_a_child_of_the_handoff_call(
    autojump_clock: Any, spans: Spans
) -> None:
    async with open_runtime() as runtime:
        target = await Agent.start(
            runtime,
            ScriptedProvider("from billing"),
            name="billing",
            tracer_provider=spans.provider,
        )
        front = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[call("h1", "transfer_to_billing")])),
            name="front",
            tools=[handoff(target)],
            tracer_provider=spans.provider,
        )
        result = await front.generate("refund me")
    assert result.content == "from billing"
    assert result.agent == "billing"
    outer = spans.one("invoke_agent front")
    handing = spans.one("execute_tool transfer_to_billing")
    handed = spans.one("invoke_agent billing")
    assert parent_of(handing) == sid(outer)
    assert parent_of(handed) == sid(handing)
    assert (outer.attributes or {})["trio_agents.answered_by"] == "billing"


async def test_a_delegated_run_cut_with_its_parent_ends_its_span(
    autojump_clock: Any, spans: Spans
) -> None:
    async with open_runtime() as runtime:
        child = await Agent.start(
            runtime,
            ScriptedProvider(Hang("thinking")),
            name="stuck",
            tracer_provider=spans.provider,
        )
        parent = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[call("s1", "ask_stuck", input="x")])),
            name="boss",
            tools=[child.as_tool("ask_stuck")],
            tracer_provider=spans.provider,
        )
        result = await parent.generate("go", timeout=10)
    assert result.stop is StopReason.TIMEOUT
    inner = spans.one("invoke_agent stuck")
    assert (inner.attributes or {})[STOP_REASON] == "timeout"
    assert (spans.one("invoke_agent boss").attributes or {})[STOP_REASON] == "timeout"
    assert parent_of(inner) == sid(spans.one("execute_tool ask_stuck"))


# -- durable jobs -------------------------------------------------------------------------------


async def test_a_durable_job_keeps_its_trace_across_a_worker_that_died(
    autojump_clock: Any, spans: Spans
) -> None:
    started = trio.Event()

    @tool(idempotent=True)
    async def slow() -> str:
        """Take a while."""
        started.set()
        await trio.sleep(100)
        return "done"

    provider = ScriptedProvider(Reply(calls=[call("t1", "slow")]), Reply("finished"))
    registry = AgentRegistry()
    registry.add("worker", provider, tools=[slow])
    store = MemoryRunStore()
    # Enqueued in the caller's span, with no worker running ("another process" runs it).
    with spans.tracer.start_as_current_span("enqueue") as enqueued:
        record, created = await submit_job(
            store, AgentJob.ask("worker", "go"), clock=trio.current_time
        )
    assert created
    carried = record.job.metadata[TRACE_METADATA_KEY]
    assert carried["traceparent"].split("-")[1] == f"{enqueued.get_span_context().trace_id:032x}"
    options: dict[str, Any] = {"lease": 30.0, "clock": trio.current_time}
    async with open_runtime() as runtime:
        async with open_job_queue(
            store, registry, runtime, tracer_provider=spans.provider, **options
        ):
            await started.wait()  # the first worker dies mid-tool
        async with open_job_queue(
            store, registry, runtime, tracer_provider=spans.provider, **options
        ) as second:
            result = await second.result(record.id)
            final = await second.record(record.id)
    assert result.content == "finished"
    assert final is not None
    assert final.status is JobStatus.COMPLETED
    runs = spans.named("invoke_agent")
    assert len(runs) == 2  # the dead worker's attempt and the one that finished it
    for run in runs:
        assert tid(run) == enqueued.get_span_context().trace_id
        assert parent_of(run) == enqueued.get_span_context().span_id
        assert (run.attributes or {})["trio_agents.run.id"] == record.id
    assert sorted(str((run.attributes or {})[STOP_REASON]) for run in runs) == [
        "cancelled",
        "complete",
    ]


async def test_a_job_enqueued_outside_any_span_is_not_stamped(autojump_clock: Any) -> None:
    store = MemoryRunStore()
    record, _ = await submit_job(store, AgentJob.ask("worker", "go"), clock=trio.current_time)
    assert TRACE_METADATA_KEY not in record.job.metadata
    assert trace_carrier() == {}


# -- the relay ----------------------------------------------------------------------------------


class Recording(RelayServer):
    """A relay that remembers the headers of each connection (to see the handshake's)."""

    seen: list[dict[str, str]]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") in ("websocket", "http"):
            self.seen.append({k.decode(): v.decode() for k, v in scope.get("headers", ())})
        await super().__call__(scope, receive, send)


@contextlib.asynccontextmanager
async def relay_server(
    provider: Any, tracer: TracerProvider
) -> AsyncIterator[tuple[str, Recording]]:
    app = Recording(provider, tokens=[TOKEN], tracer_provider=tracer)
    app.seen = []
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=None))
        try:
            yield url, app
        finally:
            nursery.cancel_scope.cancel()


@pytest.fixture
def _jumping(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.05


@pytest.mark.usefixtures("_jumping")
async def test_the_relay_carries_the_trace_from_the_client_run_to_the_server_span(
    spans: Spans,
) -> None:
    server_spans = Spans()
    upstream = GPT(
        Reply("relayed", usage=Usage(3, 4), model="gpt-test-2025", response_id="chatcmpl-r")
    )
    async with (
        relay_server(upstream, server_spans.provider) as (url, app),
        open_runtime() as runtime,
    ):
        ws = url.replace("http://", "ws://") + "/v1/relay"
        async with RelayProvider(ws, token=TOKEN) as model:
            agent = await Agent.start(runtime, model, name="client", tracer_provider=spans.provider)
            result = await agent.generate("hello")
    assert result.content == "relayed"
    chat = spans.one("chat")
    served = server_spans.one("chat gpt-test")
    assert served.kind is SpanKind.SERVER
    assert tid(served) == tid(chat)
    assert parent_of(served) == sid(chat)
    assert (served.attributes or {})["gen_ai.provider.name"] == "openai"
    assert (served.attributes or {})["gen_ai.usage.output_tokens"] == 4
    # The server's span names the upstream's response; result frames do not carry it (relay
    # clients from before the fields would refuse them), so the client's span does not.
    assert (served.attributes or {})["gen_ai.response.model"] == "gpt-test-2025"
    assert (served.attributes or {})["gen_ai.response.id"] == "chatcmpl-r"
    assert "gen_ai.response.id" not in (chat.attributes or {})
    assert "gen_ai.response.model" not in (chat.attributes or {})
    # The handshake the request opened carried the same context.
    (handshake,) = app.seen
    assert handshake["traceparent"].startswith(f"00-{tid(chat):032x}-{sid(chat):016x}-")
    assert server_spans.unended.open == {}


@pytest.mark.usefixtures("_jumping")
async def test_the_relay_server_prefers_the_frame_and_falls_back_to_the_handshake(
    spans: Spans,
) -> None:
    upstream = GPT(Reply("a", usage=Usage(1, 1)), Reply("b", usage=Usage(1, 1)))
    with spans.tracer.start_as_current_span("handshake") as shaken:
        handshake = trace_carrier()
    with spans.tracer.start_as_current_span("frame") as framed:
        carried = trace_carrier()
    async with relay_server(upstream, spans.provider) as (url, _):
        ws = url.replace("http://", "ws://") + "/v1/relay"
        headers = [(key.encode(), value.encode()) for key, value in handshake.items()]
        async with trio_websocket.open_websocket_url(ws, extra_headers=headers) as socket:
            await socket.send_message(encode_frame(HelloFrame(PROTOCOL_VERSION, TOKEN)))
            await socket.get_message()  # ready
            messages = [Message.user("x")]
            options = ProviderOptions(max_tokens=64, temperature=0.5)
            await socket.send_message(encode_frame(StreamFrame("r1", messages, (), options)))
            await socket.send_message(encode_frame(StreamFrame("r2", messages, trace=carried)))
            done = 0
            while done < 2:
                if isinstance(decode_server_frame(await socket.get_message()), ResultFrame):
                    done += 1
    served = {
        (span.attributes or {})["trio_agents.relay.request_id"]: span
        for span in spans.named("chat gpt-test")
    }
    assert parent_of(served["r1"]) == shaken.get_span_context().span_id
    assert parent_of(served["r2"]) == framed.get_span_context().span_id
    assert (served["r1"].attributes or {})["gen_ai.request.max_tokens"] == 64
    assert (served["r1"].attributes or {})["gen_ai.request.temperature"] == 0.5


@pytest.mark.usefixtures("_jumping")
async def test_the_relay_http_endpoint_reads_traceparent_and_records_failures(
    spans: Spans,
) -> None:
    upstream = ScriptedProvider(Fail())
    with spans.tracer.start_as_current_span("http caller") as caller:
        headers = trace_carrier()
    async with relay_server(upstream, spans.provider) as (url, _), httpx.AsyncClient() as client:
        response = await client.post(
            url + "/v1/stream",
            json={"messages": [{"role": "user", "content": "x"}]},
            headers={"authorization": f"Bearer {TOKEN}", **headers},
        )
    assert response.status_code == 502
    served = spans.one("chat")
    assert parent_of(served) == caller.get_span_context().span_id
    assert served.status.status_code is StatusCode.ERROR
    assert (served.attributes or {})["error.type"] == "upstream"


# -- off ------------------------------------------------------------------------------------------


def test_carriers_round_trip_and_refuse_garbage(spans: Spans) -> None:
    with spans.tracer.start_as_current_span("here") as here:
        carried = trace_carrier()
    restored = context_from_carrier(carried)
    assert restored is not None
    assert trace.get_current_span(restored).get_span_context().span_id == (
        here.get_span_context().span_id
    )
    assert context_from_carrier({"traceparent": "not a traceparent"}) is None
    assert context_from_carrier(None) is None
    assert context_from_carrier({}) is None


async def test_with_no_provider_configured_a_run_does_no_span_work(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if trace.get_tracer_provider().__class__ is not trace.ProxyTracerProvider:
        pytest.skip("a global tracer provider was set by something else in this process")

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("span work while tracing is off")

    monkeypatch.setattr(_tracing, "RunTrace", refused)
    monkeypatch.setattr(_tracing, "ServeSpan", refused)
    monkeypatch.setattr(_tracing, "current_context", refused)
    assert not tracing_active()
    provider = ScriptedProvider(Reply(calls=[call("c1", "add", a=1, b=2)]), "3")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        run = agent.stream("hi")
        assert run._request.tracer is None
        async with run:
            async for _ in run:
                pass
    assert run.result.content == "3"


async def test_a_global_provider_opts_every_agent_in(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch, spans: Spans
) -> None:
    # Set as set_tracer_provider would, and restored after the test by monkeypatch.
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", spans.provider)
    assert tracing_active()
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider("hi"), name="global")
        await agent.generate("hello")
    assert spans.one("invoke_agent global").parent is None


def test_without_opentelemetry_everything_runs_and_nothing_imports_it() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # any import of it now fails
        import trio
        from actors import Agent, open_runtime, tool
        from actors.durable import MemoryRunStore, submit_job
        from actors.relay import RelayProvider
        from actors.testing import Reply, ScriptedProvider
        from actors.tracing import context_from_carrier, trace_carrier, tracing_active
        from protocols.jobs import AgentJob
        from protocols.messages import Message, ToolCall

        @tool
        def add(a: int, b: int) -> int:
            "Add."
            return a + b

        async def main():
            provider = ScriptedProvider(Reply(calls=[ToolCall("c", "add", {"a": 1, "b": 2})]), "3")
            async with open_runtime() as runtime:
                agent = await Agent.start(runtime, provider, tools=[add])
                result = await agent.generate("hi")
            record, _ = await submit_job(MemoryRunStore(), AgentJob.ask("a", "b"))
            frame = RelayProvider("ws://127.0.0.1:1/v1/relay", token="t").stream(
                [Message.user("x")]
            )._frame
            print(result.content, tracing_active(), trace_carrier(), context_from_carrier(
                {"traceparent": "x"}), record.job.metadata, frame.trace)

        trio.run(main)
        print(sorted(name for name in sys.modules if name.startswith("opentelemetry.")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["3 False {} None {} None", "[]"]


def test_the_carrier_of_an_unsampled_context_is_still_sent(spans: Spans) -> None:
    # A context the caller decided not to sample still travels (flags 00): downstream spans
    # honour that decision instead of starting a new trace.
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT)
        )
    )
    token = otel_context.attach(trace.set_span_in_context(parent))
    try:
        carried = trace_carrier()
    finally:
        otel_context.detach(token)
    assert carried == {"traceparent": f"00-{0x1234:032x}-{0x5678:016x}-00"}


@pytest.mark.parametrize("kind", ["sampled_out", "noop"])
async def test_a_run_that_is_not_recorded_makes_no_spans_but_carries_the_trace(
    autojump_clock: Any, spans: Spans, kind: str
) -> None:
    seen: list[dict[str, str]] = []

    @tool
    def look() -> str:
        """Report the trace context the tool runs in."""
        seen.append(trace_carrier())
        return "looked"

    quiet = Spans()
    if kind == "sampled_out":
        quiet.provider = TracerProvider(sampler=ALWAYS_OFF)
        quiet.provider.add_span_processor(SimpleSpanProcessor(quiet.exporter))
    tracer_provider: Any = quiet.provider if kind == "sampled_out" else trace.NoOpTracerProvider()
    provider = ScriptedProvider(Reply(calls=[call("k1", "look")]), "done")
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, name="quiet", tools=[look], tracer_provider=tracer_provider
        )
        with spans.tracer.start_as_current_span("caller") as caller:
            result = await agent.generate("hi")
    assert result.content == "done"
    assert quiet.finished == ()
    (carried,) = seen
    context = caller.get_span_context()
    assert carried["traceparent"].split("-")[1] == f"{context.trace_id:032x}"
    if kind == "noop":  # a no-op tracer makes no span: the caller's own context is carried
        assert carried["traceparent"].split("-")[2] == f"{context.span_id:016x}"
    else:  # a span sampled out is still the parent downstream, flagged not sampled
        assert int(carried["traceparent"].split("-")[3], 16) & 1 == 0
        assert carried["traceparent"].split("-")[2] != f"{context.span_id:016x}"
