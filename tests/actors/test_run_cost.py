"""What runs cost (issue 27, section 4): a run's provider calls priced where they settle --
from genai-prices' data or a table of the user's own -- a vendor's reported cost kept, cost
caps cut mid-stream like token caps (one run's and a team's), a cap nobody can price refused at
the start, and the cost shown in events, the run's log and spans.

Real parts: the simulator over loopback HTTP, a loopback server replaying an OpenRouter
transcript, genai-prices' own calculation as the reference (never a hard-coded price).
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from typing import Any

import genai_prices
import h11
import pytest
import trio
import trio.testing
from test_agent_fallback import IDLE, PASS, STALL, member

from actors import (
    Agent,
    AgentEvent,
    Cost,
    GenAIPrices,
    OpenAIChat,
    Prices,
    PriceTable,
    RunContext,
    TeamBudget,
    TokenBudget,
    open_runtime,
    tool,
)
from actors._pricing import price_usage, run_rates
from actors.providers import FallbackProvider
from actors.testing import FaultProviderServer, Reply, ScriptedProvider, Simulator
from actors.testing._loopback import Exchange, LoopbackServer
from protocols.accounting import estimate_tokens
from protocols.codec import dumps
from protocols.errors import ConfigError
from protocols.messages import StopReason, ToolCall, Usage

#: A made-up price for the simulator's model: one dollar per output token, prompts free -- so
#: a cap in dollars is a cap in output tokens, easy to check.
DOLLAR_PER_TOKEN = PriceTable({"simulator": Prices(input="0", output="1000000")})


def genai_reference(model: str, **counts: int) -> Decimal:
    """genai-prices' own calculation (the reference the tests compare against)."""
    total: Decimal = genai_prices.calc_price(genai_prices.Usage(**counts), model).total_price
    return total


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- pricing -----------------------------------------------------------------------------------


async def test_a_known_model_is_priced_as_genai_prices_prices_it() -> None:
    usage = Usage(1000, 500, cached=200, reasoning=100)
    provider = ScriptedProvider(
        Reply("Hello", usage=usage, model="gpt-4o"), Reply("Again", usage=Usage(40, 2))
    )
    seen: list[AgentEvent] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, pricing=GenAIPrices(), on=[seen.append])
        first = await agent.generate("hi")
        second = await agent.generate("again")  # reports no model: unpriced, never guessed
    expected = genai_reference(
        "gpt-4o",
        input_tokens=1000,
        output_tokens=500,
        cache_read_tokens=200,
        output_reasoning_tokens=100,
    )
    assert first.usage == usage.priced(Cost(expected, "USD", "computed"))
    assert first.total_usage == first.usage
    assert second.usage is not None
    assert second.usage.cost == Cost.unavailable()
    # The usage event of each turn says the same.
    costs = [event.usage.cost for event in seen if event.kind == "usage" and event.usage]
    assert costs == [Cost(expected, "USD", "computed"), Cost.unavailable()]


async def test_a_table_of_ones_own_overrides_genai_prices_and_falls_back_to_it() -> None:
    table = PriceTable(
        {"gpt-4o": Prices(input="1", output="2"), ("scripted", "made-up"): Prices(9, 9)},
        fallback=GenAIPrices(),
    )
    provider = ScriptedProvider(
        Reply("a", usage=Usage(1_000_000, 1_000_000), model="gpt-4o"),
        Reply("b", usage=Usage(1000, 500), model="gpt-4o-mini"),
        Reply("c", usage=Usage(1_000_000, 0), model="made-up"),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, pricing=table)
        overridden = await agent.generate("a")
        fallen_back = await agent.generate("b")
        own = await agent.generate("c")
    assert overridden.usage is not None
    assert fallen_back.usage is not None
    assert own.usage is not None
    assert overridden.usage.cost == Cost(Decimal(3), "USD", "computed")
    reference = genai_reference("gpt-4o-mini", input_tokens=1000, output_tokens=500)
    assert fallen_back.usage.cost == Cost(reference, "USD", "computed")
    assert own.usage.cost == Cost(Decimal(9), "USD", "computed")


async def test_a_local_server_genai_prices_does_not_know_is_unavailable_not_guessed() -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        # gpt-4o by name, but served by a local server: not OpenAI's price.
        provider = OpenAIChat(model="gpt-4o", base_url=simulator.openai_base_url)
        agent = await Agent.start(runtime, provider, pricing=GenAIPrices())
        result = await agent.generate("Please count to 3.")
        await provider.aclose()
    assert result.usage is not None
    assert result.usage.total > 0
    assert result.usage.cost == Cost.unavailable()


async def test_without_pricing_usage_carries_no_cost() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, ScriptedProvider(Reply("x", usage=Usage(3, 4), model="gpt-4o"))
        )
        result = await agent.generate("hi")
    assert result.usage == Usage(3, 4)
    assert result.usage.cost is None


async def test_a_turn_that_reports_no_usage_makes_the_runs_cost_unavailable_for_good() -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    provider = ScriptedProvider(
        Reply(calls=[call], usage=Usage(10, 5), model="gpt-4o"),
        Reply("3", model="gpt-4o"),  # no usage reported
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[add], pricing=GenAIPrices(), budget=TokenBudget(10_000)
        )
        result = await agent.generate("1 + 2?")
    # The budget charged the unreported turn by estimate: its tokens are estimated, its cost
    # unknown -- and so is the run's, although the first turn was priced (004 S13).
    assert result.estimated
    assert result.usage is not None
    assert result.usage.cost == Cost.unavailable()


# -- a vendor that reports cost ----------------------------------------------------------------

#: What OpenRouter streams with usage accounting on: the usage chunk carries ``cost`` (USD).
OPENROUTER: list[dict[str, Any]] = [
    {
        "id": "gen-1",
        "model": "openai/gpt-4o",
        "choices": [{"index": 0, "delta": {"content": "Hi"}}],
    },
    {
        "id": "gen-1",
        "model": "openai/gpt-4o",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    },
    {
        "id": "gen-1",
        "model": "openai/gpt-4o",
        "choices": [],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "cost": 6.2e-05},
    },
]


class Transcript(LoopbackServer):
    """Answers every request with one recorded SSE transcript."""

    kind = "transcript server"

    def __init__(self, records: list[dict[str, Any]]) -> None:
        super().__init__()
        self.body = b"".join(b"data: " + dumps(r).encode() + b"\n\n" for r in records)
        self.body += b"data: [DONE]\n\n"
        self.calls = 0

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            exchange = Exchange(stream, 1 << 20)
            if await exchange.read_request() is None:
                return
            self.calls += 1
            headers = [("content-type", "text/event-stream"), ("connection", "close")]
            await exchange.send(h11.Response(status_code=200, headers=headers))
            await exchange.send(h11.Data(data=self.body))
            await exchange.send(h11.EndOfMessage())


async def test_a_cost_the_vendor_reported_is_kept_as_reported() -> None:
    async with Transcript(OPENROUTER) as server, open_runtime() as runtime:
        provider = OpenAIChat(model="openai/gpt-4o", base_url=f"{server.origin}/v1")
        plain = await Agent.start(runtime, provider)
        reported = await plain.generate("hi")
        # With pricing too, the vendor's own figure wins over a computed one.
        priced = await Agent.start(
            runtime, provider, pricing=PriceTable({"openai/gpt-4o": Prices(100, 100)})
        )
        kept = await priced.generate("hi")
        await provider.aclose()
    assert server.calls == 2
    expected = Usage(12, 3, 15, cost=Cost(Decimal("0.000062"), "USD", "reported"))
    assert reported.usage == expected
    assert kept.usage == expected


# -- cost caps ---------------------------------------------------------------------------------


async def test_a_cost_cap_cuts_a_run_mid_stream_and_commits_the_partial(
    autojump_clock: Any,
) -> None:
    seen: list[AgentEvent] = []
    async with Simulator(interval=0.5) as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        agent = await Agent.start(runtime, provider, pricing=DOLLAR_PER_TOKEN, on=[seen.append])
        result = await agent.generate("Please count to 2000.", budget=TokenBudget(max_cost=5))
        history = await agent.conversation.messages()
        await provider.aclose()
    assert (result.stop, result.partial) == (StopReason.BUDGET, True)
    # Cut at the delta whose estimate reached $5: five tokens' worth of text, not the count.
    assert estimate_tokens(result.content) == 5
    assert len(result.content.split()) < 2000
    assert history[-1].interrupted
    assert history[-1].content == result.content
    # The cut turn reported nothing: its tokens are the budget's estimate, its cost unknown.
    assert result.estimated
    assert result.usage is not None
    assert result.usage.cost == Cost.unavailable("USD")
    usage_events = [event for event in seen if event.kind == "usage"]
    assert [event.usage.cost for event in usage_events if event.usage] == [Cost.unavailable("USD")]


async def test_a_turns_reported_cost_that_reaches_the_cap_starts_no_further_turn() -> None:
    prompt_priced = PriceTable({"simulator": Prices(input="1000000", output="0")})
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        agent = await Agent.start(runtime, provider, tools=[add], pricing=prompt_priced)
        result = await agent.generate("What is 19 + 23?", budget=TokenBudget(max_cost=5))
        await provider.aclose()
    # The tool-call turn's prompt cost $5 (its five tokens, charged when it is reconciled at
    # its end -- nothing mid-stream, output being free): its call was answered, and no second
    # turn started.
    assert (result.stop, result.turns) == (StopReason.BUDGET, 1)
    assert result.usage is not None
    cost = result.usage.cost
    assert cost is not None
    assert cost.amount is not None
    assert cost == Cost(Decimal(result.usage.prompt), "USD", "computed")
    assert cost.amount >= 5
    assert [m.role.value for m in result.messages] == ["user", "assistant", "tool"]


async def test_a_team_cost_budget_cuts_every_run_drawing_on_it(autojump_clock: Any) -> None:
    team = TeamBudget(max_cost=8)
    async with Simulator(interval=0.5) as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        agents = [
            await Agent.start(runtime, provider, pricing=DOLLAR_PER_TOKEN, budget=team)
            for _ in range(2)
        ]
        results = {}

        async def ask(index: int) -> None:
            results[index] = await agents[index].generate("Please count to 2000.")

        async with trio.open_nursery() as nursery:
            for index in range(2):
                nursery.start_soon(ask, index)
        await provider.aclose()
    assert {result.stop for result in results.values()} == {StopReason.BUDGET}
    assert team.exhausted
    assert team.cost >= 8
    spent = sum(estimate_tokens(result.content) for result in results.values())
    assert 8 <= spent <= 9  # the two estimates together reached the cap (one delta over at most)


async def test_a_cost_cap_with_no_price_for_the_model_is_refused_before_any_call() -> None:
    provider = ScriptedProvider(Reply("never", usage=Usage(1, 1)))
    async with open_runtime() as runtime:
        unpriced = await Agent.start(runtime, provider)
        with pytest.raises(ConfigError, match="no price is known"):
            await unpriced.generate("hi", budget=TokenBudget(max_cost="0.01"))
        # Priced, but not this model: refused too (the scripted provider names no model).
        priced = await Agent.start(runtime, provider, pricing=GenAIPrices())
        with pytest.raises(ConfigError, match="no price is known"):
            await priced.generate("hi", budget=TeamBudget(max_cost=1))
    assert provider.calls == []


# -- where a run's model is priced -------------------------------------------------------------


def test_a_fallback_is_capped_at_its_dearest_member_and_priced_as_the_one_that_answered() -> None:
    cheap = OpenAIChat(model="cheap", base_url="http://127.0.0.1:9/v1")
    dear = OpenAIChat(model="dear", base_url="http://127.0.0.1:9/v1")
    table = PriceTable({"cheap": Prices(1, 1), "dear": Prices(2, 5)})
    both = FallbackProvider([cheap, dear])
    assert run_rates(table, both) == Prices(2, 5)
    assert run_rates(table, FallbackProvider([cheap, ScriptedProvider()])) is None
    usage = Usage(1_000_000, 0)
    assert price_usage(table, both, usage, member=both.names[1]) == Cost(
        Decimal(2), "USD", "computed"
    )
    # The model the vendor says answered comes first, the provider's own after it.
    assert price_usage(table, cheap, usage, model="dear") == Cost(Decimal(2), "USD", "computed")
    assert price_usage(table, cheap, usage, model="unknown") == Cost(Decimal(1), "USD", "computed")


# -- shown where usage is shown ----------------------------------------------------------------


async def test_spans_and_the_runs_log_show_the_cost() -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = memory.InMemorySpanExporter()
    tracer_provider = sdk.TracerProvider()
    tracer_provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    reply = Reply("Hello", usage=Usage(1_000_000, 0), model="m")
    provider = ScriptedProvider(reply, reply)
    table = PriceTable({"m": Prices(input="2.5", output="10")})
    priced = Usage(1_000_000, 0, cost=Cost(Decimal("2.5"), "USD", "computed"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, pricing=table, tracer_provider=tracer_provider)
        async with agent.stream("hi") as run:
            chunks = [chunk async for chunk in run]
        async with agent.stream("again") as logged:
            events = [event async for event in logged.events()]
    spans = [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]
    runs = [span for span in exporter.get_finished_spans() if span.name.startswith("invoke")]
    for span in (*spans, *runs):
        assert span.attributes is not None
        assert span.attributes["trio_agents.usage.cost"] == 2.5
        assert span.attributes["trio_agents.usage.cost.currency"] == "USD"
        assert span.attributes["trio_agents.usage.cost.provenance"] == "computed"
    assert (len(spans), len(runs)) == (2, 2)
    assert [chunk.usage for chunk in chunks if chunk.kind == "usage"] == [priced]
    assert [event.data["usage"] for event in events if event.kind == "usage"] == [priced]
    tracer_provider.shutdown()


async def test_a_tool_sees_the_money_its_run_has_left() -> None:
    seen: list[tuple[Decimal | None, Decimal | None]] = []

    @tool
    async def add(ctx: RunContext[None], a: int, b: int) -> int:
        """Add two integers."""
        seen.append((ctx.budget.cost, ctx.budget.remaining_cost))
        return a + b

    async with Simulator() as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        events: list[AgentEvent] = []
        agent = await Agent.start(
            runtime, provider, tools=[add], pricing=DOLLAR_PER_TOKEN, on=[events.append]
        )
        result = await agent.generate("What is 19 + 23?", budget=TokenBudget(max_cost=100))
        await provider.aclose()
    assert result.stop is StopReason.COMPLETE
    # What the first turn cost (its completion tokens at $1) is what was charged when the
    # tool ran, and the rest of the $100 is left.
    first = next(event.usage for event in events if event.kind == "usage")
    assert first is not None
    assert first.cost is not None
    assert first.cost.amount == first.completion > 0
    assert seen == [(first.cost.amount, 100 - first.cost.amount)]


def test_genai_prices_is_imported_only_when_used(monkeypatch: pytest.MonkeyPatch) -> None:
    code = "import sys, actors; print('genai_prices' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "False"
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # as if the extra were missing
    with pytest.raises(ConfigError, match=r"trio-agents\[prices\]"):
        GenAIPrices()


async def test_each_fallback_member_is_priced_as_itself_and_a_voided_attempt_is_unknown(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    pricing = PriceTable({"a": Prices(input="1000000", output="0"), "b": Prices(2_000_000, 0)})
    async with (
        FaultProviderServer([{"kind": "http-error", "status": 503}]) as refusing,
        FaultProviderServer(STALL) as stalling,
        FaultProviderServer(PASS) as passing,
        open_runtime() as runtime,
    ):
        plain = FallbackProvider([member(refusing.base_url, "a"), member(passing.base_url, "b")])
        voiding = FallbackProvider(
            [member(stalling.base_url, "a", idle=5), member(passing.base_url, "b")], rewind=True
        )
        try:
            agent = await Agent.start(runtime, plain, pricing=pricing)
            answered = await agent.generate("hi")
            rewound = await Agent.start(runtime, voiding, pricing=pricing)
            team = TeamBudget(max_cost=1000)
            voided = await rewound.generate("hi", budget=team)
        finally:
            await plain.aclose()
            await voiding.aclose()
    # b answered (one prompt token at $2): priced as b, not as a.
    assert answered.usage == Usage(1, 1, 2, cost=Cost(Decimal(2), "USD", "computed"))
    # a streamed, then was voided, having reported nothing: the run's cost is unknown, while
    # its budget charged that attempt's estimate (at the dearest member's rates) and b's cost.
    assert voided.content == "second"
    assert voided.usage is not None
    assert voided.usage.cost == Cost.unavailable("USD")
    assert team.cost == 2
    assert team.estimated
