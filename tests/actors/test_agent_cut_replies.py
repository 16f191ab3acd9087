"""A reply the provider cut short -- at its output token limit, or by its content filter --
ends the run partial, says why, and none of its tool calls runs (issue 23 item 3; seed 002's
"finish_reason length/content_filter is not a complete answer").

End to end first: an :class:`~actors.agent.Agent` on each of the four HTTP adapters against
the :class:`~actors.testing.Simulator` on a loopback port, which cuts its answers the way each
vendor does -- OpenAI chat ``finish_reason: length | content_filter``, the Responses API's
``response.incomplete`` for ``max_output_tokens`` / ``content_filter``, Anthropic's
``stop_reason: max_tokens | refusal``, Ollama's ``done_reason: length`` -- tool-call arguments
included. Then the rules for the runs' other calls, on a :class:`~actors.testing.ScriptedProvider`.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import handoff, open_runtime, tool
from actors.agent import Agent, AgentEvent, Chunk
from actors.testing import Reply, ScriptedProvider, Simulator
from actors.tools import NOT_EXECUTED
from protocols.messages import (
    CUT_SHORT,
    AgentResult,
    FinishReason,
    Message,
    Role,
    StopReason,
    ToolCall,
    Usage,
)

VENDORS = ["openai", "openai_responses", "anthropic", "ollama"]
#: Ollama's native API has no content filter.
FILTERING = ["openai", "openai_responses", "anthropic"]

TOKEN_LIMIT = CUT_SHORT[FinishReason.LENGTH]
FILTERED = CUT_SHORT[FinishReason.CONTENT_FILTER]


@attrs.define
class Seen:
    result: AgentResult
    events: list[AgentEvent]
    chunks: list[Chunk]
    ran: list[dict[str, Any]]
    history: list[Message]


async def run_on(vendor: str, prompt: str, **simulator: Any) -> Seen:
    """One run of ``prompt`` on ``vendor``'s adapter against a simulator configured so."""
    ran: list[dict[str, Any]] = []

    @tool
    async def lookup(q: str) -> str:
        """Look something up."""
        ran.append({"q": q})
        return "found it"

    events: list[AgentEvent] = []
    async with Simulator(**simulator) as sim, open_runtime() as runtime:
        provider = getattr(sim, vendor)()
        agent = await Agent.start(runtime, provider, tools=[lookup], on=[events.append])
        async with agent.stream(prompt) as run:
            chunks = [chunk async for chunk in run]
        history = list(await agent.conversation.messages())
        await provider.aclose()
    return Seen(run.result, events, chunks, ran, history)


def assert_well_formed(history: list[Message]) -> None:
    """Every assistant tool call has exactly one result, right after it."""
    for index, message in enumerate(history):
        if message.calls:
            answers = history[index + 1 : index + 1 + len(message.calls)]
            assert [m.tool_call_id for m in answers] == [call.id for call in message.calls]


def assert_ended(seen: Seen, stop: StopReason, finish: FinishReason) -> None:
    result = seen.result
    assert (result.stop, result.partial, result.finish) == (stop, True, finish)
    ends = [e for e in seen.events if e.kind == "finish"]
    assert [(e.stop, e.partial, e.finish) for e in ends] == [(stop, True, finish)]
    turns = [e.finish for e in seen.events if e.kind == "usage"]
    assert turns[-1] is finish
    assert_well_formed(seen.history)


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_answer_cut_by_the_token_limit_ends_the_run_max_tokens(vendor: str) -> None:
    seen = await run_on(vendor, "Please count to 10.", max_tokens=3)
    assert_ended(seen, StopReason.MAX_TOKENS, FinishReason.LENGTH)
    result = seen.result
    assert result.content == "1 2 3"  # kept as it came
    assert result.turns == 1
    assert result.usage is not None
    assert result.usage.completion == 3  # what was reported
    assert [(m.role, m.content, m.interrupted) for m in result.messages] == [
        (Role.USER, "Please count to 10.", False),
        (Role.ASSISTANT, "1 2 3", False),
    ]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_tool_call_cut_by_the_token_limit_never_runs(vendor: str) -> None:
    # The cap falls inside the call's arguments: the client gets them cut (not JSON).
    seen = await run_on(vendor, 'call lookup with {"q": "a rather long query"}', max_tokens=2)
    assert_ended(seen, StopReason.MAX_TOKENS, FinishReason.LENGTH)
    assert seen.ran == []
    assistant, answer = seen.result.messages[1:]
    (call,) = assistant.calls
    assert (call.name, call.arguments) == ("lookup", {})  # what parsed: nothing
    assert (answer.role, answer.tool_call_id, answer.content) == (Role.TOOL, call.id, TOKEN_LIMIT)
    shown = [
        (c.kind, c.call or (c.result and c.result.id)) for c in seen.chunks if c.kind[:4] == "tool"
    ]
    assert shown == [("tool_call", call), ("tool_result", call.id)]
    assert seen.result.turns == 1  # the run ends there: the model is not asked again


@pytest.mark.parametrize("vendor", VENDORS)
async def test_complete_calls_of_a_reply_cut_by_the_token_limit_do_not_run_either(
    vendor: str,
) -> None:
    # '{"q":"a"}' is 3 tokens: the cap ends exactly after the first call, before the second.
    seen = await run_on(
        vendor, 'call lookup with {"q": "a"} and call lookup with {"q": "b"}', max_tokens=3
    )
    assert_ended(seen, StopReason.MAX_TOKENS, FinishReason.LENGTH)
    assert seen.ran == []
    assistant, answer = seen.result.messages[1:]
    assert [(c.name, c.arguments) for c in assistant.calls] == [("lookup", {"q": "a"})]
    assert answer.content == TOKEN_LIMIT


@pytest.mark.parametrize("vendor", FILTERING)
async def test_an_answer_cut_by_the_content_filter_ends_the_run_content_filter(
    vendor: str,
) -> None:
    seen = await run_on(vendor, "Say the forbidden word.", content_filter=["forbidden"])
    assert_ended(seen, StopReason.CONTENT_FILTER, FinishReason.CONTENT_FILTER)
    assert seen.result.content == "You said: Say the"
    # A call the filter cut does not run either.
    seen = await run_on(
        vendor, 'call lookup with {"q": "the forbidden word"}', content_filter=["forbidden"]
    )
    assert_ended(seen, StopReason.CONTENT_FILTER, FinishReason.CONTENT_FILTER)
    assert seen.ran == []
    assert seen.result.messages[-1].content == FILTERED


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_answer_that_fits_still_completes(vendor: str) -> None:
    seen = await run_on(vendor, 'call lookup with {"q": "a"}', max_tokens=50)
    result = seen.result
    assert (result.stop, result.partial, result.finish) == (
        StopReason.COMPLETE,
        False,
        FinishReason.STOP,
    )
    assert seen.ran == [{"q": "a"}]
    assert [e.finish for e in seen.events if e.kind == "usage"] == [
        FinishReason.TOOL_CALLS,
        FinishReason.STOP,
    ]


# -- the rules for the run's other calls --------------------------------------------------------


@tool
async def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


async def generate(provider: ScriptedProvider, text: str = "go", **options: Any) -> AgentResult:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[lookup])
        result = await agent.generate(text, **options)
        assert_well_formed(list(await agent.conversation.messages()))
        return result


async def test_a_structured_answer_cut_short_is_not_read_and_spends_no_retry() -> None:
    provider = ScriptedProvider(Reply('{"answer": 4', finish="length"), Reply('{"answer": 42}'))
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    result = await generate(provider, schema=schema)
    assert (result.stop, result.finish, result.output) == (
        StopReason.MAX_TOKENS,
        FinishReason.LENGTH,
        None,
    )
    assert len(provider.calls) == 1, "no retry against the same limit"
    # Even a cut answer that happens to parse is not taken as the structured answer.
    provider = ScriptedProvider(Reply('{"answer": 4}', finish="content_filter"))
    result = await generate(provider, schema=schema)
    assert (result.stop, result.output) == (StopReason.CONTENT_FILTER, None)


async def test_an_earlier_reply_cut_short_ends_the_run_there() -> None:
    # The model would go on (a second reply is scripted); the run never asks it.
    call = ToolCall("c1", "lookup", {"q": "x"})
    provider = ScriptedProvider(
        Reply("checking", calls=[call], finish="length", usage=Usage(5, 5)), Reply("done")
    )
    result = await generate(provider)
    assert (result.stop, result.finish, result.turns) == (
        StopReason.MAX_TOKENS,
        FinishReason.LENGTH,
        1,
    )
    assert result.usage == Usage(5, 5)
    assert result.messages[-1].content == TOKEN_LIMIT
    assert len(provider.calls) == 1


async def test_the_summary_of_an_exhausted_run_cut_short_keeps_exhausted() -> None:
    # The limit ended the run first; its courtesy summary was cut: finish says so.
    call = ToolCall("c1", "lookup", {"q": "x"})
    provider = ScriptedProvider(Reply(calls=[call]), Reply("So far I", finish="length"))
    result = await generate(provider, limit=1, on_exhaust="summarize")
    assert (result.stop, result.finish, result.content) == (
        StopReason.EXHAUSTED,
        FinishReason.LENGTH,
        "So far I",
    )


async def test_the_final_answer_after_unknown_tools_cut_short_ends_max_tokens() -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("u1", "nope", {})]),
        Reply(calls=[ToolCall("u2", "nope", {})]),
        Reply("I could", finish="length"),
    )
    result = await generate(provider)
    assert (result.stop, result.finish, result.content) == (
        StopReason.MAX_TOKENS,
        FinishReason.LENGTH,
        "I could",
    )


async def test_a_cut_reply_of_a_handed_to_agent_ends_the_run_max_tokens() -> None:
    async with open_runtime() as runtime:
        expert = await Agent.start(
            runtime, ScriptedProvider(Reply("The long answer is", finish="length")), name="expert"
        )
        front = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("h1", "transfer_to_expert", {})])),
            tools=[handoff(expert)],
            name="front",
        )
        result = await front.generate("help")
    assert (result.stop, result.finish, result.agent) == (
        StopReason.MAX_TOKENS,
        FinishReason.LENGTH,
        "expert",
    )


async def test_a_delegated_runs_cut_reply_is_its_partial_and_the_parent_goes_on() -> None:
    async with open_runtime() as runtime:
        child = await Agent.start(
            runtime, ScriptedProvider(Reply("half an ans", finish="length")), name="child"
        )
        parent_provider = ScriptedProvider(
            Reply(calls=[ToolCall("d1", "child", {"input": "explain"})]), Reply("Summed up.")
        )
        parent = await Agent.start(runtime, parent_provider, tools=[child.as_tool()])
        result = await parent.generate("go")
    assert (result.stop, result.finish) == (StopReason.COMPLETE, FinishReason.STOP)
    told = [m.content for m in parent_provider.calls[1].messages if m.role is Role.TOOL]
    assert told == ["half an ans\n\n(the agent stopped early: max_tokens)"]


# -- the property: no call of a cut reply ever runs ---------------------------------------------

FINISHES = st.sampled_from([None, *FinishReason.__members__.values()]).filter(
    lambda finish: finish is not FinishReason.CANCELLED
)


@st.composite
def replies(draw: st.DrawFn) -> list[Reply]:
    out = []
    for turn in range(draw(st.integers(1, 4))):
        count = draw(st.integers(0, 2))
        calls = [ToolCall(f"t{turn}c{i}", "lookup", {"q": f"{turn}.{i}"}) for i in range(count)]
        out.append(
            Reply(draw(st.sampled_from(["", "some text"])), calls=calls, finish=draw(FINISHES))
        )
    out.append(Reply("the end"))
    return out


@settings(max_examples=150, deadline=None)
@given(script=replies())
def test_a_call_runs_exactly_when_its_reply_was_not_cut_short(script: list[Reply]) -> None:
    ran: list[str] = []

    @tool
    async def lookup(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return "ok"

    async def main() -> tuple[AgentResult, list[Message]]:
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, ScriptedProvider(*script), tools=[lookup], limit=10)
            result = await agent.generate("go")
            return result, list(await agent.conversation.messages())

    result, history = trio.run(main)
    # The run ends at the first reply that was cut short, or that makes no call.
    end = next(i for i, r in enumerate(script) if r.finish in CUT_SHORT or not r.calls)
    last = script[end]
    # (A batch's calls run concurrently: in any order.)
    assert sorted(ran) == sorted(c.arguments["q"] for reply in script[:end] for c in reply.calls)
    assert result.turns == end + 1
    assert_well_formed(history)
    if last.finish not in CUT_SHORT:
        assert result.stop is StopReason.COMPLETE
        assert result.finish is (last.finish or FinishReason.STOP)
    else:
        assert result.finish is last.finish
        assert result.stop is (
            StopReason.MAX_TOKENS
            if last.finish is FinishReason.LENGTH
            else StopReason.CONTENT_FILTER
        )
        answers = {m.tool_call_id: m.content for m in history if m.role is Role.TOOL}
        for call in last.calls:
            assert answers[call.id] == CUT_SHORT[last.finish]
    # Nothing else was skipped: no call of a reply that was not cut short went unrun.
    assert NOT_EXECUTED not in {m.content for m in history}
