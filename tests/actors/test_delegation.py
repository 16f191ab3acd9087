"""Agents as tools and handoffs (issue 13, "Delegation"): ``agent.as_tool()`` runs a child
agent inside the calling run -- its answer is the call's result, its chunks and events reach
the parent tagged with the hop, it is bound by the parent's deadline and abort, cycles are
refused at once -- and ``handoff(agent)`` lets another agent answer the same user turn.

Every test runs over ``ScriptedProvider`` on trio's autojump clock: durations and deadlines are
exact trio seconds, and concurrency is shown by elapsed trio time, never by task order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from actors import Abort, Agent, RunContext, RunStep, handoff, open_runtime, tool
from actors.agent import AgentEvent, AgentStatus, Chunk
from actors.testing import Fail, Hang, Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.accounting import TokenBudget
from protocols.errors import ConfigError, ProviderError, ToolError
from protocols.messages import AgentResult, Message, Role, StopReason, ToolCall, Usage

# -- helpers -----------------------------------------------------------------------------------


def child_of(run_id: str | None, call_id: str) -> bool:
    """``run_id`` names a run delegated by the call ``call_id`` (unique: a suffix of its own)."""
    return re.fullmatch(rf"subagent:{re.escape(call_id)}:[0-9a-f]{{12}}", run_id or "") is not None


def ask(call_id: str, tool_name: str, text: str) -> ToolCall:
    """The model's call of an agent tool ``tool_name`` with ``input=text``."""
    return ToolCall(call_id, tool_name, {"input": text})


def answered_in_place(messages: Sequence[Message]) -> bool:
    """Every assistant tool call is answered by exactly one tool message, right after it."""
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role is Role.TOOL:
            return False
        if message.role is not Role.ASSISTANT or not message.calls:
            continue
        answers: list[str] = []
        while index < len(messages) and messages[index].role is Role.TOOL:
            answers.append(messages[index].tool_call_id or "")
            index += 1
        if sorted(answers) != sorted(call.id for call in message.calls):
            return False
    return True


def tool_answers(messages: Sequence[Message]) -> dict[str, str]:
    """The tool messages of ``messages``, by the call id they answer."""
    return {m.tool_call_id or "": m.content for m in messages if m.role is Role.TOOL}


def shape(messages: Sequence[Message]) -> list[tuple[Role, str, bool]]:
    return [(m.role, m.content, m.interrupted) for m in messages]


async def drain(agent: Agent, text: str, **options: Any) -> tuple[list[Chunk], AgentResult]:
    chunks: list[Chunk] = []
    async with agent.stream(text, **options) as run:
        async for chunk in run:
            chunks.append(chunk)
    return chunks, run.result


def content_by_path(chunks: Sequence[Chunk]) -> dict[tuple[RunStep, ...], str]:
    """The content text streamed at each delegation path."""
    out: dict[tuple[RunStep, ...], str] = {}
    for chunk in chunks:
        if chunk.kind == "content":
            out[chunk.path] = out.get(chunk.path, "") + chunk.text
    return out


# -- as_tool: the tool itself ------------------------------------------------------------------


async def test_as_tool_takes_one_input_string_and_is_named_after_the_agent() -> None:
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, ScriptedProvider(), name="field worker.1")
        default = worker.as_tool()
        named = worker.as_tool("research", "Ask the researcher.", conversation="shared")
        with pytest.raises(ConfigError, match="conversation"):
            worker.as_tool(conversation="private")  # type: ignore[arg-type]
    assert default.definition.name == "field_worker_1"  # sanitised to a valid tool name
    assert "field worker.1" in default.definition.description
    assert default.definition.parameters["required"] == ["input"]
    assert list(default.definition.parameters["properties"]) == ["input"]
    assert default.definition.parameters["additionalProperties"] is False
    assert (named.definition.name, named.definition.description) == (
        "research",
        "Ask the researcher.",
    )


async def test_as_tool_with_invalid_arguments_answers_the_model_and_runs_no_child() -> None:
    worker_provider = ScriptedProvider()
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ToolCall("c1", "worker", {"question": "wrong key"})]), Reply("ok")
            ),
            tools=[worker.as_tool()],
        )
        result = await lead.generate("go")
    assert tool_answers(result.messages)["c1"].startswith("invalid arguments")
    assert worker_provider.calls == []


# -- as_tool: fresh and shared conversations ---------------------------------------------------


async def test_a_fresh_delegation_answers_from_a_new_conversation_it_then_discards() -> None:
    worker_provider = ScriptedProvider(Reply("Paris.", usage=Usage(4, 1)))
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker", system="Be exact.")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask("c1", "worker", "Capital of France?")]),
                Reply("It is Paris."),
            ),
            name="lead",
            tools=[worker.as_tool()],
        )
        children = runtime.statistics().children
        result = await lead.generate("Where is the Louvre?")
        assert runtime.statistics().children == children  # the fresh conversation stopped
        assert await worker.conversation.messages() == ()  # the worker's own is untouched
    sent = worker_provider.calls[0].messages
    assert [(m.role, m.content) for m in sent] == [
        (Role.SYSTEM, "Be exact."),
        (Role.USER, "Capital of France?"),
    ]
    assert tool_answers(result.messages) == {"c1": "Paris."}
    assert result.content == "It is Paris."
    assert answered_in_place(result.messages)


async def test_fresh_delegations_do_not_cross_talk_between_calls() -> None:
    worker_provider = ScriptedProvider(Reply("first answer"), Reply("second answer"))
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask("c1", "worker", "secret is 41")]),
                Reply(calls=[ask("c2", "worker", "what was the secret?")]),
                Reply("done"),
            ),
            tools=[worker.as_tool()],
        )
        result = await lead.generate("go")
    second = [m.content for m in worker_provider.calls[1].messages]
    assert second == ["what was the secret?"]  # nothing of the first delegation
    assert tool_answers(result.messages) == {"c1": "first answer", "c2": "second answer"}


async def test_a_shared_delegation_works_in_the_childs_own_conversation_and_remembers() -> None:
    worker_provider = ScriptedProvider(Reply("noted"), Reply("it was 41"))
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask("c1", "worker", "secret is 41")]),
                Reply(calls=[ask("c2", "worker", "what was the secret?")]),
                Reply("done"),
            ),
            tools=[worker.as_tool(conversation="shared")],
        )
        result = await lead.generate("go")
        stored = await worker.conversation.messages()
    second = [m.content for m in worker_provider.calls[1].messages]
    assert second == ["secret is 41", "noted", "what was the secret?"]
    assert [m.content for m in stored] == [*second, "it was 41"]
    assert tool_answers(result.messages) == {"c1": "noted", "c2": "it was 41"}


async def test_a_shared_delegation_takes_its_turn_fifo_with_the_childs_other_callers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    worker_provider = ScriptedProvider(
        Reply("direct one", delay=10), Reply("delegated", delay=10), Reply("direct two")
    )
    finished: dict[str, float] = {}
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "worker", "from the lead")]), Reply("ok")),
            tools=[worker.as_tool(conversation="shared")],
        )

        async def direct(text: str, at: float) -> None:
            await trio.sleep(at)
            result = await worker.generate(text)
            finished[result.content] = trio.current_time()

        async def delegate() -> None:
            await trio.sleep(1)
            result = await lead.generate("go")
            finished[tool_answers(result.messages)["c1"]] = trio.current_time()

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(direct, "first", 0)
            nursery.start_soon(delegate)
            nursery.start_soon(direct, "second", 2)
        stored = await worker.conversation.messages()
    # The delegation waited for the run ahead of it, and the caller after it waited for it.
    assert finished == {
        "direct one": start + 10,
        "delegated": start + 20,
        "direct two": start + 20,
    }
    assert [m.content for m in stored] == [
        "first",
        "direct one",
        "from the lead",
        "delegated",
        "second",
        "direct two",
    ]


# -- as_tool: streaming, events, usage ---------------------------------------------------------


async def test_a_childs_chunks_reach_the_parents_stream_tagged_with_the_hop() -> None:
    worker_provider = ScriptedProvider(Reply("one two three", chunk=4))
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "worker", "count")]), Reply("counted")),
            name="lead",
            tools=[worker.as_tool()],
        )
        chunks, result = await drain(lead, "go")
    hop = (RunStep(result.run_id, "c1", "worker"),)
    child = [c for c in chunks if c.path == hop]
    assert [c.text for c in child if c.kind == "content"] == ["one ", "two ", "thre", "e"]
    (child_id,) = {c.run_id for c in child}
    assert child_of(child_id, "c1")
    assert {c.run_id for c in chunks if c.path == ()} == {result.run_id}
    # In order: the child streams between the parent's call and its result.
    kinds = [(c.kind, c.path) for c in chunks]
    first_child = kinds.index(("content", hop))
    assert kinds.index(("tool_call", ())) < first_child < kinds.index(("tool_result", ()))
    assert content_by_path(chunks) == {hop: "one two three", (): "counted"}


async def test_chunks_at_depth_three_carry_every_hop_and_total_usage_sums_the_tree() -> None:
    async with open_runtime() as runtime:
        leaf = await Agent.start(
            runtime, ScriptedProvider(Reply("leaf text", chunk=5, usage=Usage(3, 4))), name="leaf"
        )
        mid = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask("m1", "leaf", "dig")], usage=Usage(2, 2)),
                Reply("mid text", usage=Usage(1, 1)),
            ),
            name="mid",
            tools=[leaf.as_tool()],
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask("l1", "mid", "look")], usage=Usage(10, 1)),
                Reply("lead text", usage=Usage(5, 5)),
            ),
            name="lead",
            tools=[mid.as_tool()],
        )
        chunks, result = await drain(lead, "go")
    to_mid = RunStep(result.run_id, "l1", "mid")
    (mid_id,) = {c.run_id for c in chunks if c.path == (to_mid,)}
    assert child_of(mid_id, "l1")
    to_leaf = RunStep(mid_id, "m1", "leaf")
    assert content_by_path(chunks) == {
        (to_mid, to_leaf): "leaf text",
        (to_mid,): "mid text",
        (): "lead text",
    }
    (leaf_id,) = {c.run_id for c in chunks if c.path == (to_mid, to_leaf)}
    assert child_of(leaf_id, "m1")
    # usage: the lead's own turns; total_usage: the whole tree.
    assert result.usage == Usage(15, 6)
    assert result.total_usage == Usage(15, 6) + Usage(3, 3) + Usage(3, 4)
    usage_chunks = [c.usage for c in chunks if c.kind == "usage" and c.path == (to_mid, to_leaf)]
    assert usage_chunks == [Usage(3, 4)]


async def test_total_usage_is_unknown_when_a_childs_usage_is_unknown() -> None:
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, ScriptedProvider(Reply("no usage")), name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask("c1", "worker", "x")], usage=Usage(1, 1)),
                Reply("done", usage=Usage(1, 1)),
            ),
            tools=[worker.as_tool()],
        )
        result = await lead.generate("go")
    assert result.usage == Usage(2, 2)
    assert result.total_usage is None


async def test_subagent_events_carry_the_call_child_run_status_duration_and_usage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lead_events: list[AgentEvent] = []
    worker_events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime,
            ScriptedProvider(Reply("abc", chunk=1, delay=2, usage=Usage(7, 3))),
            name="worker",
            on=[worker_events.append],
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c9", "worker", "spell")]), Reply("spelled")),
            name="lead",
            tools=[worker.as_tool()],
            on=[lead_events.append],
        )
        result = await lead.generate("go")
    start = next(e for e in lead_events if e.kind == "subagent_start")
    finish = next(e for e in lead_events if e.kind == "subagent_finish")
    assert start.call == ask("c9", "worker", "spell")
    assert (start.run_id, start.path, start.agent) == (result.run_id, (), "worker")
    assert child_of(start.child, "c9")
    assert (finish.call, finish.agent, finish.child, finish.status) == (
        start.call,
        "worker",
        start.child,
        "complete",
    )
    assert finish.duration == pytest.approx(6)  # three deltas, two trio seconds each
    assert finish.usage == Usage(7, 3)
    # The child's own events: to its listeners with an empty path, and to the parent's with
    # the hop, between subagent_start and subagent_finish.
    hop = (RunStep(result.run_id, "c9", "worker"),)
    child_kinds = [e.kind for e in worker_events]
    assert child_kinds == ["start", "turn", "usage", "finish"]
    assert {(e.run_id, e.path) for e in worker_events} == {(start.child, ())}
    forwarded = [e for e in lead_events if e.path == hop]
    assert [e.kind for e in forwarded] == child_kinds
    assert {e.run_id for e in forwarded} == {start.child}
    order = lead_events.index
    assert order(start) < order(forwarded[0])
    assert order(forwarded[-1]) < order(finish)


async def test_a_child_that_stopped_early_says_so_in_the_parents_tool_result() -> None:
    worker_provider = ScriptedProvider(Reply(calls=[ToolCall("w1", "nothing", {})]))
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker", limit=1)
        lead_events: list[AgentEvent] = []
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "worker", "x")]), Reply("ok")),
            tools=[worker.as_tool()],
            on=[lead_events.append],
        )
        result = await lead.generate("go")
    assert tool_answers(result.messages)["c1"] == "(the agent stopped early: exhausted)"
    finish = next(e for e in lead_events if e.kind == "subagent_finish")
    assert finish.status == "exhausted"


# -- as_tool: a cut parent cuts its child ------------------------------------------------------


@pytest.mark.parametrize("conversation", ["fresh", "shared"])
@pytest.mark.parametrize("how", ["abort token", "agent.abort", "timeout"])
async def test_a_cut_parent_cuts_its_child_mid_stream_and_records_the_call_interrupted(
    how: str, conversation: str, autojump_clock: trio.testing.MockClock
) -> None:
    token = Abort()
    lead_events: list[AgentEvent] = []
    worker_events: list[AgentEvent] = []
    worker_provider = ScriptedProvider(Hang("partial child"))
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, worker_provider, name="worker", on=[worker_events.append]
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "worker", "work")]), Reply("never")),
            name="lead",
            tools=[worker.as_tool(conversation=conversation)],  # type: ignore[arg-type]
            on=[lead_events.append],
        )

        async def cut() -> None:
            await trio.sleep(3)
            if how == "abort token":
                token.cancel("user stop")
            elif how == "agent.abort":
                lead.abort("user stop")

        start = trio.current_time()
        options: dict[str, Any] = {"timeout": 3} if how == "timeout" else {"abort": [token]}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cut)
            chunks, result = await drain(lead, "go", **options)
        assert trio.current_time() == start + 3
        lead_history = await lead.conversation.messages()
        worker_history = await worker.conversation.messages()
    expected = StopReason.TIMEOUT if how == "timeout" else StopReason.CANCELLED
    assert (result.stop, result.partial) == (expected, True)
    hop = (RunStep(result.run_id, "c1", "worker"),)
    assert content_by_path(chunks) == {hop: "partial child"}  # the child streamed, then was cut
    assert tool_answers(lead_history) == {"c1": INTERRUPTED}
    assert answered_in_place(lead_history)
    assert len(worker_provider.calls) == 1
    finish = next(e for e in lead_events if e.kind == "subagent_finish")
    assert finish.status == expected.value  # why the child stopped: its parent's cut
    assert finish.duration == pytest.approx(3)
    # The child's listeners hear it end, cut: abort, then a partial finish.
    assert [e.kind for e in worker_events][-2:] == ["abort", "finish"]
    assert worker_events[-1].partial
    if conversation == "fresh":  # cut inside the parent's scope: the parent's reason
        assert worker_events[-1].stop is expected
    if conversation == "shared":
        # The child commits its partial, interrupted, to its own conversation.
        assert shape(worker_history) == [
            (Role.USER, "work", False),
            (Role.ASSISTANT, "partial child", True),
        ]
    else:
        assert worker_history == ()


@pytest.mark.parametrize("conversation", ["fresh", "shared"])
async def test_a_cancel_of_the_parents_caller_cuts_the_child_and_both_commit(
    conversation: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, ScriptedProvider(Hang("half")), name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "worker", "work")]), Reply("never")),
            tools=[worker.as_tool(conversation=conversation)],  # type: ignore[arg-type]
        )
        with trio.move_on_after(2) as scope:
            await lead.generate("go")
        assert scope.cancelled_caught
        lead_history = await lead.conversation.messages()
        worker_history = await worker.conversation.messages()
        assert not worker.busy
        assert not lead.busy
    assert tool_answers(lead_history) == {"c1": INTERRUPTED}
    assert answered_in_place(lead_history)
    if conversation == "shared":
        assert shape(worker_history) == [
            (Role.USER, "work", False),
            (Role.ASSISTANT, "half", True),
        ]


async def test_a_child_inherits_the_parents_deadline_and_cannot_extend_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deadlines: list[float] = []

    @tool
    async def probe(ctx: RunContext[None]) -> str:
        """Report the run's deadline."""
        deadlines.append(ctx.deadline)
        return "probed"

    worker_provider = ScriptedProvider(Reply(calls=[ToolCall("p1", "probe", {})]), Hang("slow"))
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, worker_provider, name="worker", tools=[probe], timeout=1000
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "worker", "work")], delay=1), Reply("never")),
            tools=[worker.as_tool(conversation="shared")],
        )
        start = trio.current_time()
        result = await lead.generate("go", timeout=10)
        elapsed = trio.current_time() - start
        worker_history = await worker.conversation.messages()
    # The worker's own timeout is 1000 s: only the inherited deadline can end it at 10 s.
    assert deadlines == [pytest.approx(start + 10)]
    assert elapsed == pytest.approx(10)
    assert result.stop is StopReason.TIMEOUT
    assert shape(worker_history)[-1] == (Role.ASSISTANT, "slow", True)


# -- as_tool: cycles ---------------------------------------------------------------------------


async def test_an_agent_delegating_to_itself_is_refused_at_once_with_a_model_visible_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply(calls=[ask("c1", "me", "again")]), Reply("gave up"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, name="me")
        agent.registry.add(agent.as_tool())
        start = trio.current_time()
        result = await agent.generate("go", timeout=100)
        assert trio.current_time() == start  # refused at once, no wait on itself
    answer = tool_answers(result.messages)["c1"]
    assert answer.startswith("refused:")
    assert "me -> me" in answer
    assert provider.calls[1].messages[-1].content == answer  # the model read it
    assert result.content == "gave up"
    assert len(provider.calls) == 2


@pytest.mark.parametrize("conversation", ["fresh", "shared"])
async def test_a_to_b_to_a_delegation_is_refused_at_once_and_both_runs_complete(
    conversation: str, autojump_clock: trio.testing.MockClock
) -> None:
    a_provider = ScriptedProvider(Reply(calls=[ask("a1", "b", "hi b")]), Reply("a done"))
    b_provider = ScriptedProvider(Reply(calls=[ask("b1", "a", "hi a")]), Reply("b done"))
    async with open_runtime() as runtime:
        a = await Agent.start(runtime, a_provider, name="a")
        b = await Agent.start(runtime, b_provider, name="b")
        mode: Any = conversation
        a.registry.add(b.as_tool(conversation=mode))
        b.registry.add(a.as_tool(conversation=mode))
        start = trio.current_time()
        result = await a.generate("start", timeout=100)
        assert trio.current_time() == start
        a_history = await a.conversation.messages()
    assert result.stop is StopReason.COMPLETE
    refusal = b_provider.calls[1].messages[-1]
    assert refusal.role is Role.TOOL
    assert refusal.content.startswith("refused:")
    assert "a -> b -> a" in refusal.content
    assert tool_answers(a_history) == {"a1": "b done"}
    assert [m.content for m in a_history if m.role is Role.USER] == ["start"]  # nothing of b->a
    assert len(a_provider.calls) == 2


# -- as_tool: parallel delegation --------------------------------------------------------------


async def test_parallel_delegations_in_one_batch_run_concurrently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        workers = [
            await Agent.start(
                runtime, ScriptedProvider(Reply(f"w{i} done", delay=10)), name=f"w{i}"
            )
            for i in range(3)
        ]
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask(f"c{i}", f"w{i}", "go") for i in range(3)]), Reply("all done")
            ),
            tools=[w.as_tool() for w in workers],
        )
        start = trio.current_time()
        result = await lead.generate("fan out")
        elapsed = trio.current_time() - start
    assert elapsed == pytest.approx(10)  # not 30: the three children overlapped
    assert tool_answers(result.messages) == {"c0": "w0 done", "c1": "w1 done", "c2": "w2 done"}
    assert answered_in_place(result.messages)


async def test_parallel_fresh_delegations_to_one_agent_run_concurrently_under_the_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    worker_provider = ScriptedProvider(*(Reply("answer", delay=10) for _ in range(3)))
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, worker_provider, name="worker")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask(f"c{i}", "worker", f"task {i}") for i in range(3)]),
                Reply("done"),
            ),
            tools=[worker.as_tool()],
            tool_concurrency=2,
        )
        start = trio.current_time()
        result = await lead.generate("fan out")
        elapsed = trio.current_time() - start
        assert await worker.conversation.messages() == ()
    assert elapsed == pytest.approx(20)  # two at once, then the third
    assert tool_answers(result.messages) == {f"c{i}": "answer" for i in range(3)}
    # Each child saw only its own task: fresh conversations, no cross-talk.
    assert sorted(tuple(m.content for m in c.messages) for c in worker_provider.calls) == [
        ("task 0",),
        ("task 1",),
        ("task 2",),
    ]


async def test_one_failing_and_one_cut_child_leave_the_others_results_and_every_call_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        failing = await Agent.start(
            runtime,
            ScriptedProvider(Fail(ProviderError("upstream down", code="down"), delay=1)),
            name="failing",
        )
        cut = await Agent.start(runtime, ScriptedProvider(Hang("cut short")), name="cut")
        fine = await Agent.start(runtime, ScriptedProvider(Reply("fine", delay=5)), name="fine")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(
                    calls=[ask("c1", "failing", "x"), ask("c2", "cut", "y"), ask("c3", "fine", "z")]
                ),
                Reply("summary"),
            ),
            tools=[failing.as_tool(), cut.as_tool(), fine.as_tool()],
        )

        async def abort_cut() -> None:
            await trio.sleep(2)
            cut.abort("enough")  # cancels the delegated run of that agent only

        async with trio.open_nursery() as nursery:
            nursery.start_soon(abort_cut)
            result = await lead.generate("fan out")
    answers = tool_answers(result.messages)
    assert answers["c1"].startswith("the agent 'failing' failed: ProviderError")
    assert "upstream down" in answers["c1"]
    assert answers["c2"] == "cut short\n\n(the agent stopped early: cancelled)"
    assert answers["c3"] == "fine"
    assert result.stop is StopReason.COMPLETE
    assert result.content == "summary"
    assert answered_in_place(result.messages)


async def test_a_cut_parent_cuts_every_parallel_child_and_answers_every_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        done = await Agent.start(runtime, ScriptedProvider(Reply("early", delay=1)), name="done")
        slow = [
            await Agent.start(runtime, ScriptedProvider(Hang(f"slow {i}")), name=f"s{i}")
            for i in range(2)
        ]
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ask("c0", "done", "a"), ask("c1", "s0", "b"), ask("c2", "s1", "c")]),
            ),
            tools=[done.as_tool(), *(s.as_tool(conversation="shared") for s in slow)],
        )
        result = await lead.generate("fan out", timeout=5)
        histories = [await s.conversation.messages() for s in slow]
    assert result.stop is StopReason.TIMEOUT
    assert tool_answers(result.messages) == {"c0": "early", "c1": INTERRUPTED, "c2": INTERRUPTED}
    assert answered_in_place(result.messages)
    for i, history in enumerate(histories):
        assert shape(history)[-1] == (Role.ASSISTANT, f"slow {i}", True)


# -- as_tool: a child that raises --------------------------------------------------------------


async def test_a_child_that_raises_is_a_failure_result_a_tool_error_event_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lead_events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, ScriptedProvider(Fail(ProviderError("model gone", code="gone"))), name="w"
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "w", "x")]), Reply("recovered")),
            tools=[worker.as_tool()],
            on=[lead_events.append],
        )
        with caplog.at_level(logging.WARNING, logger="trio_agents.agent"):
            result = await lead.generate("go")
    assert result.content == "recovered"
    answer = tool_answers(result.messages)["c1"]
    assert answer == "the agent 'w' failed: ProviderError: model gone"
    errors = [e for e in lead_events if e.kind == "tool_error"]
    assert len(errors) == 1
    assert errors[0].call == ask("c1", "w", "x")
    assert isinstance(errors[0].error, ProviderError)
    finish = next(e for e in lead_events if e.kind == "subagent_finish")
    assert finish.status == "error"
    warnings = [r for r in caplog.records if r.name == "trio_agents.agent"]
    assert any("'w' failed" in r.getMessage() and r.exc_info for r in warnings)


async def test_a_child_that_raises_fails_the_parent_under_on_tool_error_raise() -> None:
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, ScriptedProvider(Fail(ProviderError("model gone", code="gone"))), name="w"
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ask("c1", "w", "x")]), Reply("never")),
            tools=[worker.as_tool()],
            on_tool_error="raise",
        )
        with pytest.raises(ToolError) as caught:
            await lead.generate("go")
        history = await lead.conversation.messages()
    assert isinstance(caught.value.__cause__, ProviderError)
    assert tool_answers(history)["c1"].startswith("the agent 'w' failed")  # committed first
    assert answered_in_place(history)


# -- handoff -----------------------------------------------------------------------------------


async def test_a_handoff_lets_the_target_answer_the_same_turn_in_the_same_conversation() -> None:
    billing_provider = ScriptedProvider(Reply("Refund issued.", chunk=7, usage=Usage(6, 3)))
    triage_provider = ScriptedProvider(
        Reply(calls=[ToolCall("h1", "transfer_to_billing", {})], usage=Usage(4, 1))
    )
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        billing = await Agent.start(runtime, billing_provider, name="billing", system="Billing.")
        triage = await Agent.start(
            runtime, triage_provider, name="triage", tools=[handoff(billing)], on=[events.append]
        )
        chunks, result = await drain(triage, "I want a refund")
        stored = await triage.conversation.messages()
        assert await billing.conversation.messages() == ()
    assert result.agent == "billing"
    assert result.content == "Refund issued."
    assert result.stop is StopReason.COMPLETE
    assert (result.turns, result.usage) == (2, Usage(10, 4))
    assert shape(stored) == shape(result.messages)
    assert [(m.role, m.content) for m in stored] == [
        (Role.USER, "I want a refund"),
        (Role.ASSISTANT, ""),
        (Role.TOOL, "handed to billing; it answers from here"),
        (Role.ASSISTANT, "Refund issued."),
    ]
    # The target read the whole turn, with its own system prompt.
    sent = billing_provider.calls[0].messages
    assert (sent[0].role, sent[0].content) == (Role.SYSTEM, "Billing.")
    assert [m.content for m in sent[1:]][:1] == ["I want a refund"]
    # One run: every chunk carries its id; the target's text streams at the top level.
    assert {c.run_id for c in chunks} == {result.run_id}
    assert [c.text for c in chunks if c.kind == "content"] == ["Refund ", "issued."]
    assert {c.path for c in chunks} == {()}
    hand = next(e for e in events if e.kind == "handoff")
    assert (hand.agent, hand.run_id, hand.call) == (
        "billing",
        result.run_id,
        ToolCall("h1", "transfer_to_billing", {}),
    )
    assert len(triage_provider.calls) == 1  # the caller made no further turn


async def test_a_handoff_stays_inside_the_runs_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        slow = await Agent.start(runtime, ScriptedProvider(Hang("thinking")), name="slow")
        triage = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("h1", "transfer_to_slow", {})], delay=1)),
            tools=[handoff(slow)],
        )
        start = trio.current_time()
        result = await triage.generate("hi", timeout=4)
        assert trio.current_time() == start + 4
        stored = await triage.conversation.messages()
    assert (result.stop, result.content) == (StopReason.TIMEOUT, "thinking")
    assert shape(stored)[-1] == (Role.ASSISTANT, "thinking", True)


async def test_a_handoff_draws_on_the_runs_budget_and_reads_its_deps() -> None:
    seen: list[object] = []

    @tool
    async def whoami(ctx: RunContext[object]) -> str:
        """Read the deps."""
        seen.append(ctx.deps)
        return "checked"

    deps = object()
    writer_provider = ScriptedProvider(
        Reply(calls=[ToolCall("w1", "whoami", {})]), Reply("word " * 200, chunk=4)
    )
    async with open_runtime() as runtime:
        writer = await Agent.start(runtime, writer_provider, name="writer", tools=[whoami])
        triage = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("h1", "transfer_to_writer", {})])),
            tools=[handoff(writer)],
        )
        result = await triage.generate("write", budget=TokenBudget(30), deps=deps)
    assert seen == [deps]
    assert result.stop is StopReason.BUDGET
    assert result.content.startswith("word word")  # the target's partial answer
    assert result.usage is not None
    assert 30 <= result.usage.total <= 31  # the target's turns are the run's, on its budget


async def test_a_handoff_to_itself_or_back_up_the_chain_is_refused() -> None:
    async with open_runtime() as runtime:
        a_provider = ScriptedProvider(
            Reply(calls=[ToolCall("a1", "transfer_to_a", {})]),
            Reply(calls=[ToolCall("a2", "transfer_to_b", {})]),
        )
        b_provider = ScriptedProvider(
            Reply(calls=[ToolCall("b1", "transfer_to_a", {})]), Reply("b answers")
        )
        a = await Agent.start(runtime, a_provider, name="a")
        b = await Agent.start(runtime, b_provider, name="b")
        a.registry.add(handoff(a), handoff(b))
        b.registry.add(handoff(a))
        result = await a.generate("hello")
    answers = tool_answers(result.messages)
    assert answers["a1"] == "refused: this agent is already answering"
    assert answers["a2"] == "handed to b; it answers from here"
    assert answers["b1"].startswith("refused:")
    assert "a -> b -> a" in answers["b1"]
    assert (result.agent, result.content) == ("b", "b answers")


async def test_two_handoffs_in_one_batch_hand_to_one_agent_and_refuse_the_other() -> None:
    providers = {name: ScriptedProvider(Reply(f"{name} here")) for name in ("first", "second")}
    async with open_runtime() as runtime:
        targets = [await Agent.start(runtime, providers[n], name=n) for n in providers]
        triage = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(
                    calls=[
                        ToolCall("h1", "transfer_to_first", {}),
                        ToolCall("h2", "transfer_to_second", {}),
                    ]
                )
            ),
            tools=[handoff(target) for target in targets],
        )
        result = await triage.generate("hi")
    # The first handoff in call order is taken, whichever call's task runs first.
    answers = tool_answers(result.messages)
    assert result.agent == "first"
    assert answers["h1"] == "handed to first; it answers from here"
    assert answers["h2"] == "refused: this turn is already handed to 'first'"
    assert result.content == "first here"
    assert providers["second"].calls == []
    assert answered_in_place(result.messages)


async def test_a_handoff_outside_a_run_or_to_a_closed_agent_is_refused() -> None:
    async with open_runtime() as runtime:
        target = await Agent.start(runtime, ScriptedProvider(), name="target")
        transfer = handoff(target, name="escalate", description="Escalate.")
        assert (transfer.definition.name, transfer.definition.description) == (
            "escalate",
            "Escalate.",
        )
        outside = await transfer.call(ToolCall("x", "escalate", {}))
        assert outside.error.startswith("not executed")  # type: ignore[union-attr]
        await target.aclose()
        triage = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("h1", "escalate", {})]), Reply("kept it")),
            tools=[transfer],
        )
        result = await triage.generate("hi")
    assert tool_answers(result.messages)["h1"] == "refused: agent 'target' is closed"
    assert (result.agent, result.content) == (triage.name, "kept it")


async def test_a_handoff_cut_by_the_runs_deadline_names_the_target_as_the_answering_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        slow = await Agent.start(runtime, ScriptedProvider(Hang("thinking")), name="slow")
        triage = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("h1", "transfer_to_slow", {})], delay=1)),
            name="triage",
            tools=[handoff(slow)],
        )
        result = await triage.generate("hi", timeout=4)
        stored = await triage.conversation.messages()
    assert (stored[-1].role, stored[-1].content, stored[-1].interrupted) == (
        Role.ASSISTANT,
        "thinking",
        True,
    )
    assert (result.stop, result.content) == (StopReason.TIMEOUT, "thinking")
    assert result.agent == "slow"


# A *fresh* delegated run cut together with its parent (its abort, its timeout) ends as a run
# does: its agent is done, not left running, the run is counted, its listeners hear the end.
@pytest.mark.parametrize("how", ["abort", "timeout"])
async def test_a_fresh_child_cut_with_its_parent_ends_done_with_abort_and_finish(
    how: str, autojump_clock: trio.testing.MockClock
) -> None:
    worker_events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, ScriptedProvider(Hang("half")), name="worker", on=[worker_events.append]
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("c1", "worker", {"input": "x"})])),
            tools=[worker.as_tool()],
        )

        async def later() -> None:
            await trio.sleep(2)
            lead.abort("stop")

        async with trio.open_nursery() as nursery:
            if how == "abort":
                nursery.start_soon(later)
                await lead.generate("go")
            else:
                await lead.generate("go", timeout=2)
    assert [e.kind for e in worker_events][-2:] == ["abort", "finish"]
    assert worker.status is AgentStatus.DONE
    assert worker.statistics()["runs"] == 1


# The same through the run's budget: the target's partial answer is the target's.
async def test_a_handoff_cut_by_the_runs_budget_names_the_target() -> None:
    async with open_runtime() as runtime:
        writer = await Agent.start(
            runtime, ScriptedProvider(Reply("word " * 200, chunk=4)), name="writer"
        )
        triage = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("h1", "transfer_to_writer", {})])),
            name="triage",
            tools=[handoff(writer)],
        )
        result = await triage.generate("write", budget=TokenBudget(30))
    assert result.stop is StopReason.BUDGET
    assert result.content.startswith("word word")
    assert result.agent == "writer"


@tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return "rested"


async def test_a_child_cut_while_its_own_tools_run_at_once_still_reports_its_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The cut leaves the child's tool batch as a group of Cancelled, not a bare Cancelled.
    events: list[str] = []
    async with open_runtime() as runtime:
        naps = [ToolCall(f"n{i}", "nap", {"seconds": 5.0 + i}) for i in range(2)]
        child = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=naps)),
            name="child",
            tools=[nap],
            on=[lambda e: events.append(e.kind)],
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[ToolCall("c1", "child", {"input": "go"})])),
            name="lead",
            tools=[child.as_tool()],
        )
        token = Abort()
        async with trio.open_nursery() as nursery:

            async def cut() -> None:
                await trio.sleep(1)
                token.cancel("stop")

            nursery.start_soon(cut)
            result = await lead.generate("go", abort=[token])
    assert result.stop is StopReason.CANCELLED
    assert result.messages[-1].content == INTERRUPTED
    assert events[-2:] == ["abort", "finish"]
    assert child.statistics()["runs"] == 1
    assert child.status is AgentStatus.DONE
