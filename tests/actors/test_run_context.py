"""What a tool learns about the run that called it (issue 13, "Run context for tools"), and run
ids: every result, chunk and event names its run.

A ``@tool`` parameter annotated ``RunContext`` (any name, ``RunContext[Deps]`` included, as a
string annotation too) is filled by the runtime and never shown to the model. Everything runs
over ``ScriptedProvider``; deadlines use trio's autojump clock.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

import attrs
import pytest
import trio
import trio.testing

from actors import Abort, Agent, BudgetView, RunContext, RunStep, open_runtime, tool
from actors.agent import AgentEvent, Chunk
from actors.testing import Hang, Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.accounting import TokenBudget
from protocols.errors import ValidationError
from protocols.messages import Role, StopReason, ToolCall, ToolFailure, Usage


@attrs.frozen
class Deps:
    """What the tools of these tests depend on."""

    name: str


def probe_tool(seen: list[RunContext[Deps]]) -> Any:
    """A tool ``probe(note)`` that records the context it was given."""

    @tool
    async def probe(note: str, ctx: RunContext[Deps]) -> str:
        """Record the run context.

        Args:
            note: Anything.
        """
        seen.append(ctx)
        return f"probed {note}"

    return probe


def probe_call(call_id: str = "c1") -> ToolCall:
    return ToolCall(call_id, "probe", {"note": "x"})


def tool_answers(messages: Any) -> dict[str, str]:
    return {m.tool_call_id: m.content for m in messages if m.role is Role.TOOL}


# -- the parameter -----------------------------------------------------------------------------


async def test_a_run_context_parameter_is_filled_by_the_runtime_and_not_in_the_schema() -> None:
    seen: list[RunContext[Deps]] = []
    probe = probe_tool(seen)
    provider = ScriptedProvider(Reply(calls=[probe_call()]), Reply("done"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[probe])
        result = await agent.generate("go")
    assert probe.definition.parameters["properties"].keys() == {"note"}
    assert probe.definition.parameters["required"] == ["note"]
    assert provider.calls[0].tools[0].parameters == probe.definition.parameters
    assert len(seen) == 1
    assert isinstance(seen[0], RunContext)
    assert tool_answers(result.messages) == {"c1": "probed x"}


def test_run_context_annotations_may_be_strings_annotated_or_any_parameter_name() -> None:
    # This module uses ``from __future__ import annotations``: every annotation is a string.
    @tool
    async def plain(ctx: RunContext) -> str:  # type: ignore[type-arg]
        """No deps type."""
        return ""

    @tool
    async def quoted(value: int, run: "RunContext[Deps]") -> str:  # noqa: UP037
        """Explicitly quoted."""
        return ""

    @tool
    async def annotated(context: Annotated[RunContext[Deps], "the run"], value: int = 1) -> str:
        """Annotated."""
        return ""

    assert plain.definition.parameters["properties"] == {}
    assert quoted.definition.parameters["properties"].keys() == {"value"}
    assert annotated.definition.parameters["properties"].keys() == {"value"}
    assert quoted.signature is not None
    assert quoted.signature.context == "run"
    assert annotated.signature is not None
    assert annotated.signature.context == "context"


def test_a_tool_with_two_run_context_parameters_is_refused_at_definition() -> None:
    async def twice(first: RunContext[Deps], second: RunContext[Deps]) -> str:
        """Two contexts."""
        return ""

    with pytest.raises(ValidationError, match="one run context parameter"):
        tool(twice)


async def test_a_run_context_tool_called_outside_a_run_answers_not_executed() -> None:
    seen: list[RunContext[Deps]] = []
    probe = probe_tool(seen)
    result = await probe.call(probe_call("c7"))
    assert isinstance(result, ToolFailure)
    assert result.id == "c7"
    assert result.error.startswith("not executed:")
    assert "outside an agent run" in result.error
    assert seen == []
    # Called directly with a context built by hand, it runs; its progress goes nowhere.
    ctx: RunContext[Deps] = RunContext(deps=Deps("mine"), run_id="r", call_id="c", agent="a")
    ctx.progress("nobody hears this")
    assert await probe(note="y", ctx=ctx) == "probed y"
    assert seen == [ctx]
    assert (ctx.deadline, ctx.budget.spent, ctx.budget.remaining) == (math.inf, 0, None)


# -- deps --------------------------------------------------------------------------------------


async def test_deps_come_from_the_run_and_default_to_the_agents() -> None:
    seen: list[RunContext[Deps]] = []
    provider = ScriptedProvider(
        *(step for _ in range(3) for step in (Reply(calls=[probe_call()]), Reply("ok")))
    )
    agent_deps, run_deps, stream_deps = Deps("agent"), Deps("run"), Deps("stream")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[probe_tool(seen)], deps=agent_deps)
        assert agent.deps is agent_deps
        await agent.generate("default")
        await agent.generate("override", deps=run_deps)
        async with agent.stream("streamed", deps=stream_deps) as run:
            async for _chunk in run:
                pass
    assert [ctx.deps for ctx in seen] == [agent_deps, run_deps, stream_deps]
    assert seen[1].deps is run_deps


async def test_deps_are_none_when_neither_the_run_nor_the_agent_gives_any() -> None:
    seen: list[RunContext[Deps]] = []
    provider = ScriptedProvider(Reply(calls=[probe_call()]), Reply("ok"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[probe_tool(seen)])
        await agent.generate("go")
    assert seen[0].deps is None


# -- the values --------------------------------------------------------------------------------


async def test_the_context_names_the_run_call_agent_deadline_budget_abort_and_path(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[RunContext[Deps]] = []
    provider = ScriptedProvider(
        Reply(calls=[probe_call("c1")], usage=Usage(10, 5), delay=2), Reply("done")
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[probe_tool(seen)], name="scout")
        start = trio.current_time()
        result = await agent.generate("go", timeout=30, budget=TokenBudget(100, "total"))
    (ctx,) = seen
    assert ctx.run_id == result.run_id
    assert ctx.call_id == "c1"
    assert ctx.agent == "scout"
    assert ctx.deadline == pytest.approx(start + 30)
    assert ctx.path == ()
    assert isinstance(ctx.abort, Abort)
    assert not ctx.abort.cancelled
    assert isinstance(ctx.budget, BudgetView)
    # The view is live: it read 15 of 100 at the call; it reads the whole run now.
    assert (ctx.budget.max, ctx.budget.scope, ctx.budget.exhausted) == (100, "total", False)
    assert ctx.budget.spent == result.usage.total
    assert ctx.budget.remaining == 100 - result.usage.total
    with pytest.raises(AttributeError):
        ctx.budget.spent = 0  # type: ignore[misc]


async def test_the_budget_view_reads_the_spend_at_the_time_of_the_call() -> None:
    readings: list[tuple[int, int | None]] = []

    @tool
    async def meter(ctx: RunContext[None]) -> str:
        """Read the budget."""
        readings.append((ctx.budget.spent, ctx.budget.remaining))
        return "read"

    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "meter", {})], usage=Usage(10, 5)),
        Reply(calls=[ToolCall("c2", "meter", {})], usage=Usage(20, 5)),
        Reply("done", usage=Usage(30, 1)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[meter])
        result = await agent.generate("go", budget=TokenBudget(1000, "completion"))
    assert readings == [(5, 995), (10, 990)]  # the completion count, as the budget's scope
    assert result.stop is StopReason.COMPLETE


async def test_without_a_deadline_or_budget_the_context_says_so() -> None:
    seen: list[RunContext[Deps]] = []
    provider = ScriptedProvider(Reply(calls=[probe_call()]), Reply("ok"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[probe_tool(seen)])
        await agent.generate("go")
    budget = seen[0].budget
    assert seen[0].deadline == math.inf
    assert (budget.spent, budget.remaining, budget.max, budget.scope, budget.exhausted) == (
        0,
        None,
        None,
        None,
        False,
    )


async def test_a_tool_cancelling_the_contexts_abort_cuts_its_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[AgentEvent] = []

    @tool
    async def stopper(ctx: RunContext[None]) -> str:
        """Stop the run and wait."""
        ctx.abort.cancel("the tool stopped it")
        await trio.sleep_forever()
        return "unreachable"

    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "stopper", {})]), Reply("never"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[stopper], on=[events.append])
        start = trio.current_time()
        result = await agent.generate("go", timeout=100)
        assert trio.current_time() == start
    assert (result.stop, result.partial) == (StopReason.CANCELLED, True)
    assert tool_answers(result.messages) == {"c1": INTERRUPTED}
    abort = next(e for e in events if e.kind == "abort")
    assert abort.reason == "the tool stopped it"
    assert len(provider.calls) == 1


async def test_a_delegated_run_context_has_its_own_run_id_and_the_hop_in_its_path() -> None:
    seen: list[RunContext[Deps]] = []
    lead_deps = Deps("lead")
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[probe_call("w1")], usage=Usage(3, 3)), Reply("worked")),
            name="worker",
            tools=[probe_tool(seen)],
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ToolCall("c1", "worker", {"input": "x"})], usage=Usage(10, 10)),
                Reply("ok"),
            ),
            name="lead",
            tools=[worker.as_tool()],
            deps=lead_deps,
        )
        result = await lead.generate("go", budget=TokenBudget(500))
    (ctx,) = seen
    assert ctx.run_id.startswith("subagent:c1:")
    assert (ctx.call_id, ctx.agent) == ("w1", "worker")
    assert ctx.path == (RunStep(result.run_id, "c1", "worker"),)
    # A child without deps of its own reads its parent's.
    assert ctx.deps is lead_deps
    # A child without a budget of its own sees the one that bounds it: its parent's.
    assert (ctx.budget.max, ctx.budget.scope) == (500, "total")
    assert not ctx.budget.exhausted


async def test_a_delegated_run_context_budget_view_reads_the_parents_budget_at_the_call() -> None:
    readings: list[tuple[int, int | None]] = []

    @tool
    async def meter(ctx: RunContext[None]) -> str:
        """Read the budget."""
        readings.append((ctx.budget.spent, ctx.budget.remaining))
        return "read"

    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ToolCall("w1", "meter", {})], usage=Usage(3, 3)), Reply("worked")
            ),
            tools=[meter],
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ToolCall("c1", worker.name, {"input": "x"})], usage=Usage(10, 10)),
                Reply("ok"),
            ),
            tools=[worker.as_tool()],
        )
        await lead.generate("go", budget=TokenBudget(500))
    # The lead's first turn (20) and the worker's (6), charged to the lead's budget.
    assert readings == [(26, 474)]


async def test_a_delegated_run_contexts_abort_sees_the_parents_cut(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tokens: list[Abort] = []

    @tool
    async def hold(ctx: RunContext[None]) -> str:
        """Hold until cut."""
        tokens.append(ctx.abort)
        await trio.sleep_forever()
        return "unreachable"

    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, ScriptedProvider(Reply(calls=[ToolCall("w1", "hold", {})])), tools=[hold]
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("c1", worker.name, {"input": "x"})])),
            tools=[worker.as_tool()],
        )

        async def stop_later() -> None:
            await trio.sleep(2)
            assert not tokens[0].cancelled
            lead.abort("stop everything")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_later)
            result = await lead.generate("go")
    assert result.stop is StopReason.CANCELLED
    assert tokens[0].cancelled
    assert tokens[0].reason == "stop everything"


# -- progress ----------------------------------------------------------------------------------


async def test_progress_is_a_chunk_and_an_event_naming_the_reporting_call() -> None:
    events: list[AgentEvent] = []

    @tool
    async def crawl(pages: int, ctx: RunContext[None]) -> str:
        """Crawl some pages."""
        for page in range(1, pages + 1):
            ctx.progress(f"page {page} of {pages}", page=page)
        return "crawled"

    call = ToolCall("c1", "crawl", {"pages": 2})
    provider = ScriptedProvider(Reply(calls=[call]), Reply("done"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[crawl], on=[events.append])
        chunks: list[Chunk] = []
        async with agent.stream("go") as run:
            async for chunk in run:
                chunks.append(chunk)
    progress = [c for c in chunks if c.kind == "progress"]
    assert [(c.text, c.call, c.run_id, c.path) for c in progress] == [
        ("page 1 of 2", call, run.run_id, ()),
        ("page 2 of 2", call, run.run_id, ()),
    ]
    kinds = [c.kind for c in chunks]
    assert kinds.index("tool_call") < kinds.index("progress") < kinds.index("tool_result")
    reported = [e for e in events if e.kind == "progress"]
    assert [(e.text, e.data, e.call, e.run_id) for e in reported] == [
        ("page 1 of 2", {"page": 1}, call, run.run_id),
        ("page 2 of 2", {"page": 2}, call, run.run_id),
    ]


async def test_progress_of_a_delegated_run_reaches_the_parents_stream_and_listeners() -> None:
    events: list[AgentEvent] = []

    @tool
    async def step(ctx: RunContext[None]) -> str:
        """Report one step."""
        ctx.progress("child working", stage="one")
        return "stepped"

    inner = ToolCall("w1", "step", {})
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, ScriptedProvider(Reply(calls=[inner]), Reply("worked")), name="worker"
        )
        worker.registry.add(step)
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("c1", "worker", {"input": "x"})]), Reply("ok")),
            tools=[worker.as_tool()],
            on=[events.append],
        )
        chunks: list[Chunk] = []
        async with lead.stream("go") as run:
            async for chunk in run:
                chunks.append(chunk)
    hop = (RunStep(run.run_id, "c1", "worker"),)
    progress = [c for c in chunks if c.kind == "progress"]
    child = progress[0].run_id
    assert child.startswith("subagent:c1:")
    assert [(c.text, c.call, c.run_id, c.path) for c in progress] == [
        ("child working", inner, child, hop)
    ]
    reported = [e for e in events if e.kind == "progress"]
    assert [(e.text, e.data, e.path, e.run_id) for e in reported] == [
        ("child working", {"stage": "one"}, hop, child)
    ]


# -- run ids -----------------------------------------------------------------------------------


async def test_every_result_chunk_and_event_of_a_run_carries_its_run_id() -> None:
    events: list[AgentEvent] = []
    provider = ScriptedProvider(
        Reply(calls=[probe_call()], thinking="hmm", usage=Usage(1, 1)), Reply("done", chunk=2)
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[probe_tool([])], on=[events.append])
        chunks: list[Chunk] = []
        stream = agent.stream("go")
        async with stream as run:
            async for chunk in run:
                chunks.append(chunk)
        result = run.result
    assert re.fullmatch(r"[0-9a-f]{32}", result.run_id)
    assert stream.run_id == result.run_id
    assert {c.kind for c in chunks} >= {"thinking", "tool_call", "tool_result", "content", "usage"}
    assert {c.run_id for c in chunks} == {result.run_id}
    assert {e.kind for e in events} >= {"start", "turn", "usage", "tool", "finish"}
    assert {e.run_id for e in events} == {result.run_id}


async def test_runs_have_distinct_ids_and_their_events_are_told_apart_by_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[AgentEvent] = []
    provider = ScriptedProvider(Reply("one", delay=1), Reply("two", delay=1), Hang())
    token = Abort()
    token.cancel("never mind")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, on=[events.append])
        results = []
        async with trio.open_nursery() as nursery:

            async def run(text: str, at: float) -> None:
                await trio.sleep(at)
                results.append(await agent.generate(text))

            nursery.start_soon(run, "first", 0)
            nursery.start_soon(run, "second", 0.5)  # queued behind the first
        withdrawn = await agent.generate("never", abort=[token])
    ids = [r.run_id for r in (*results, withdrawn)]
    assert len(set(ids)) == 3
    for result in (*results, withdrawn):
        mine = [e.kind for e in events if e.run_id == result.run_id]
        assert mine[-1] == "finish"
    by_content = {r.content: r.run_id for r in results}
    assert next(e.kind for e in events if e.run_id == by_content["one"]) == "start"
    # A run withdrawn before it began still has an id, on its result and its events.
    assert [e.kind for e in events if e.run_id == withdrawn.run_id] == ["abort", "finish"]
    assert (withdrawn.stop, withdrawn.agent) == (StopReason.CANCELLED, agent.name)


async def test_a_result_names_the_agent_that_answered() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider("hi"), name="greeter")
        result = await agent.generate("hello")
    assert result.agent == "greeter"
    assert result.content == "hi"
