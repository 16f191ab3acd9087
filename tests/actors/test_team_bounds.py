"""Bounds shared across agents and the lifecycle of an agent (issue 13, "Shared bounds", "A
second message while one is being answered", "Lifecycles and types").

A :class:`~actors.TeamBudget` is one meter for every run given it; a parent's budget bounds the
runs it delegates to; ``pace=`` is awaited before every provider call inside the run's scope;
``if_busy`` decides what a second message does; ``aclose`` ends an agent and what it owns; and
``runtime.agent`` / ``Agent.start`` take explicit keywords. Everything runs over
``ScriptedProvider`` on trio's autojump clock: time shows what ran when.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from actors import (
    Abort,
    ActorStopped,
    Agent,
    AgentBusy,
    Conversation,
    RunContext,
    Runtime,
    TeamBudget,
    open_runtime,
    tool,
)
from actors.agent import AgentEvent, Chunk
from actors.testing import Hang, Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.accounting import TokenBudget, estimate_tokens
from protocols.errors import ValidationError
from protocols.messages import AgentResult, Message, Role, StopReason, ToolCall, Usage

#: A long answer: 1000 characters, streamed 4 characters (one estimated token) per delta.
LONG = "word " * 200


def tool_answers(messages: Sequence[Message]) -> dict[str, str]:
    return {m.tool_call_id or "": m.content for m in messages if m.role is Role.TOOL}


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


def users(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages if m.role is Role.USER]


def children(runtime: Runtime) -> tuple[str, ...]:
    return runtime.statistics().children


# -- a team budget -----------------------------------------------------------------------------


async def test_a_team_budget_trip_cuts_every_run_drawing_on_it_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    team = TeamBudget(100)
    providers = [ScriptedProvider(Reply(LONG, chunk=4, delay=1)) for _ in range(3)]
    ended: dict[str, tuple[AgentResult, float]] = {}
    async with open_runtime() as runtime:
        agents = [
            await Agent.start(runtime, provider, name=f"member{i}", budget=team)
            for i, provider in enumerate(providers)
        ]

        async def work(agent: Agent) -> None:
            result = await agent.generate("write at length")
            ended[agent.name] = (result, trio.current_time())

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for agent in agents:
                nursery.start_soon(work, agent)
    results = [result for result, _ in ended.values()]
    assert [r.stop for r in results] == [StopReason.BUDGET] * 3
    assert all(r.partial and r.content for r in results)
    # One meter: the trip cut the three runs at the same trio instant, well before any of them
    # could have spent 100 alone (each charges one token per second).
    times = {at for _, at in ended.values()}
    assert len(times) == 1
    assert times.pop() - start < 100
    # Never above the cap by more than one delta's estimate; each run kept its own usage.
    assert 100 <= team.used <= 100 + estimate_tokens("word")
    assert sum(r.usage.total for r in results) == team.used
    assert team.exhausted
    assert team.remaining == 0


async def test_no_provider_call_starts_on_a_spent_team_budget() -> None:
    team = TeamBudget(10)
    spender = ScriptedProvider(Reply("x" * 100, chunk=4), Reply("never"))
    late = ScriptedProvider(Reply("never"))
    async with open_runtime() as runtime:
        first = await Agent.start(runtime, spender, budget=team)
        assert (await first.generate("spend")).stop is StopReason.BUDGET
        # Another run of the same agent, and a run of another agent given the team per run.
        again = await first.generate("again")
        other = await Agent.start(runtime, late)
        given = await other.generate("mine", budget=team)
    assert (again.stop, again.turns) == (StopReason.BUDGET, 0)
    assert (given.stop, given.turns) == (StopReason.BUDGET, 0)
    assert len(spender.calls) == 1
    assert late.calls == []
    assert team.used <= 10 + 1


async def test_a_team_budget_counts_a_delegated_runs_charges_once() -> None:
    team = TeamBudget(1000)
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime, ScriptedProvider(Reply("w", usage=Usage(30, 20))), name="worker", budget=team
        )
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ToolCall("c1", "worker", {"input": "x"})], usage=Usage(10, 5)),
                Reply("done", usage=Usage(10, 5)),
            ),
            tools=[worker.as_tool()],
            budget=team,
        )
        result = await lead.generate("go")
    # The worker draws on the team and on its parent, which draws on the team too: one count.
    assert result.total_usage == Usage(50, 30)
    assert team.used == 80


# -- a parent's budget bounds its children (the reported bug) ---------------------------


@pytest.mark.parametrize("conversation", ["fresh", "shared"])
async def test_a_parent_token_budget_cuts_a_worker_that_streams_too_much(
    conversation: str,
) -> None:
    worker_events: list[AgentEvent] = []
    lead_events: list[AgentEvent] = []
    lead_provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "worker", {"input": "write 500 tokens"})]),
        Reply("the lead must not get here"),
    )
    async with open_runtime() as runtime:
        worker = await Agent.start(
            runtime,
            ScriptedProvider(Reply("word " * 400, chunk=4)),  # 500 estimated tokens
            name="worker",
            on=[worker_events.append],
        )
        lead = await Agent.start(
            runtime,
            lead_provider,
            tools=[worker.as_tool(conversation=conversation)],  # type: ignore[arg-type]
            on=[lead_events.append],
        )
        chunks: list[Chunk] = []
        async with lead.stream("delegate", budget=TokenBudget(60)) as run:
            async for chunk in run:
                chunks.append(chunk)
        result = run.result
    assert (result.stop, result.partial) == (StopReason.BUDGET, True)  # not "complete"
    assert len(lead_provider.calls) == 1  # no turn after the trip
    assert result.total_usage is not None
    assert 60 <= result.total_usage.total <= 60 + 1
    streamed = "".join(c.text for c in chunks if c.kind == "content" and c.path)
    assert 0 < estimate_tokens(streamed) <= 61
    assert tool_answers(result.messages) == {"c1": INTERRUPTED}
    assert answered_in_place(result.messages)
    # The worker's own run ended on the budget it draws on, and the lead was told so.
    finish = next(e for e in worker_events if e.kind == "finish")
    assert (finish.stop, finish.partial) == (StopReason.BUDGET, True)
    delegated = next(e for e in lead_events if e.kind == "subagent_finish")
    assert delegated.status == "budget"


async def test_a_parent_budget_spent_by_one_child_stops_its_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    providers = {
        "fast": ScriptedProvider(Reply(LONG, chunk=4, delay=1)),
        "slow": ScriptedProvider(Reply(LONG, chunk=4, delay=3)),
    }
    async with open_runtime() as runtime:
        workers = [await Agent.start(runtime, p, name=n) for n, p in providers.items()]
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ToolCall(f"c{n}", n, {"input": "go"}) for n in providers]),
                Reply("never"),
            ),
            tools=[w.as_tool() for w in workers],
        )
        result = await lead.generate("fan out", budget=TokenBudget(40))
    assert result.stop is StopReason.BUDGET
    assert result.total_usage is not None
    assert result.total_usage.total <= 40 + 1
    assert tool_answers(result.messages) == {"cfast": INTERRUPTED, "cslow": INTERRUPTED}


# -- pace --------------------------------------------------------------------------------------


async def test_pace_is_awaited_before_every_provider_call_of_the_run() -> None:
    seen: list[tuple[int, str, str]] = []
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "noop", {})]),
        Reply(calls=[ToolCall("c2", "noop", {})]),
        Reply("done"),
    )

    @tool
    async def noop() -> str:
        """Nothing."""
        return "ok"

    async def pace(ctx: RunContext[Any]) -> None:
        seen.append((len(provider.calls), ctx.run_id, ctx.call_id))
        await trio.lowlevel.checkpoint()

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[noop], pace=pace)
        result = await agent.generate("go")
    assert [calls_before for calls_before, _, _ in seen] == [0, 1, 2]
    assert {(run_id, call_id) for _, run_id, call_id in seen} == {(result.run_id, "")}
    assert len(seen) == len(provider.calls) == 3


async def test_pace_also_comes_before_the_loops_own_extra_call() -> None:
    paced: list[int] = []
    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "noop", {})]), Reply("summary"))

    async def pace(ctx: RunContext[Any]) -> None:
        paced.append(len(provider.calls))
        await trio.lowlevel.checkpoint()

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, limit=1, on_exhaust="summarize")
        result = await agent.generate("go", pace=pace)
    assert result.stop is StopReason.EXHAUSTED
    assert paced == [0, 1]


async def test_a_runs_pace_overrides_the_agents() -> None:
    calls: list[str] = []

    async def agent_pace(ctx: RunContext[Any]) -> None:
        calls.append("agent")
        await trio.lowlevel.checkpoint()

    async def run_pace(ctx: RunContext[Any]) -> None:
        calls.append("run")
        await trio.lowlevel.checkpoint()

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider("a", "b"), pace=agent_pace)
        await agent.generate("one")
        await agent.generate("two", pace=run_pace)
    assert calls == ["agent", "run"]


async def test_pace_paces_provider_calls_in_trio_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[float] = []
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "noop", {})]), Reply(calls=[ToolCall("c2", "noop", {})]), "ok"
    )

    async def one_call_every_ten_seconds(ctx: RunContext[Any]) -> None:
        if started:
            await trio.sleep_until(started[-1] + 10)
        started.append(trio.current_time())

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, pace=one_call_every_ten_seconds)
        start = trio.current_time()
        await agent.generate("go")
    assert [t - start for t in started] == [pytest.approx(x) for x in (0, 10, 20)]


async def test_a_timeout_while_pacing_ends_the_run_with_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "noop", {})]), Reply("never"))

    @tool
    async def noop() -> str:
        """Nothing."""
        return "ok"

    async def slow_pace(ctx: RunContext[Any]) -> None:
        if provider.calls:
            await trio.sleep(1000)

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[noop], pace=slow_pace)
        start = trio.current_time()
        result = await agent.generate("go", timeout=5)
        assert trio.current_time() - start == pytest.approx(5)
        history = await agent.conversation.messages()
    assert (result.stop, result.partial) == (StopReason.TIMEOUT, True)
    assert len(provider.calls) == 1
    assert answered_in_place(history)
    assert tool_answers(history) == {"c1": "ok"}


async def test_an_abort_while_pacing_cancels_the_run_before_its_provider_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    token = Abort()
    events: list[AgentEvent] = []
    provider = ScriptedProvider(Reply("never"))

    async def forever(ctx: RunContext[Any]) -> None:
        await trio.sleep_forever()

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, pace=forever, on=[events.append])

        async def stop_later() -> None:
            await trio.sleep(3)
            token.cancel("no more waiting")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_later)
            result = await agent.generate("go", abort=[token])
    assert (result.stop, result.turns) == (StopReason.CANCELLED, 0)
    assert provider.calls == []
    assert [e.kind for e in events][-2:] == ["abort", "finish"]
    assert events[-2].reason == "no more waiting"


async def test_a_team_trip_while_pacing_ends_the_run_on_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    team = TeamBudget(20)
    waiting = ScriptedProvider(Reply("never"))

    async def queue_for_a_slot(ctx: RunContext[Any]) -> None:
        await trio.sleep(1000)

    async with open_runtime() as runtime:
        patient = await Agent.start(runtime, waiting, budget=team, pace=queue_for_a_slot)
        spender = await Agent.start(
            runtime, ScriptedProvider(Reply(LONG, chunk=4, delay=1)), budget=team
        )
        ended: dict[str, float] = {}

        async def run(agent: Agent, name: str) -> None:
            assert (await agent.generate("go")).stop is StopReason.BUDGET
            ended[name] = trio.current_time()

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, patient, "patient")
            nursery.start_soon(run, spender, "spender")
    assert ended["patient"] == ended["spender"] < start + 1000
    assert waiting.calls == []


# -- if_busy -----------------------------------------------------------------------------------


async def test_interrupt_cuts_the_running_run_and_goes_ahead_of_the_queued_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[AgentEvent] = []
    provider = ScriptedProvider(Hang("half an answer"), "to the interrupt", "to the queued")
    results: dict[str, AgentResult] = {}
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, on=[events.append])

        async def send(text: str, at: float, policy: Any) -> None:
            await trio.sleep(at)
            results[text] = await agent.generate(text, if_busy=policy)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "first", 0, "queue")
            nursery.start_soon(send, "queued", 1, "queue")
            nursery.start_soon(send, "urgent", 2, "interrupt")
        history = await agent.conversation.messages()
    assert (results["first"].stop, results["first"].content) == (
        StopReason.CANCELLED,
        "half an answer",
    )
    assert results["urgent"].content == "to the interrupt"
    assert results["queued"].content == "to the queued"
    assert [(m.role, m.content, m.interrupted) for m in history] == [
        (Role.USER, "first", False),
        (Role.ASSISTANT, "half an answer", True),
        (Role.USER, "urgent", False),
        (Role.ASSISTANT, "to the interrupt", False),
        (Role.USER, "queued", False),
        (Role.ASSISTANT, "to the queued", False),
    ]
    abort = next(e for e in events if e.kind == "abort")
    assert abort.run_id == results["first"].run_id
    assert abort.reason is not None
    assert "interrupt" in abort.reason


async def test_interrupting_runs_are_fifo_among_themselves_ahead_of_ordinary_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tool
    async def stubborn() -> str:
        """Finish a step that must not be cut (shielded for ten seconds)."""
        with trio.CancelScope(shield=True):
            await trio.sleep(10)
        return "finished the step"

    # The cut run reaches its next turn before the cancel lands (the step was shielded): the
    # script has a step for it, which is never streamed.
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("s1", "stubborn", {})]), "cut", "a", "b", "c", "d"
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[stubborn])

        async def send(text: str, at: float, policy: Any) -> None:
            await trio.sleep(at)
            await agent.generate(text, if_busy=policy)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "running", 0, "queue")
            nursery.start_soon(send, "queued 1", 1, "queue")
            nursery.start_soon(send, "urgent 1", 2, "interrupt")
            nursery.start_soon(send, "queued 2", 3, "queue")
            nursery.start_soon(send, "urgent 2", 4, "interrupt")
        history = await agent.conversation.messages()
    assert users(history) == ["running", "urgent 1", "urgent 2", "queued 1", "queued 2"]
    assert answered_in_place(history)


async def test_interrupt_on_an_idle_agent_just_runs() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider("hello"))
        result = await agent.generate("hi", if_busy="interrupt")
    assert (result.stop, result.content) == (StopReason.COMPLETE, "hello")


async def test_reject_raises_agent_busy_at_once_and_commits_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("slow answer", delay=10), "later")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, name="desk")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.generate, "first")
            await trio.sleep(1)
            assert agent.busy
            before = trio.current_time()
            with pytest.raises(AgentBusy) as caught:
                await agent.generate("second", if_busy="reject")
            assert trio.current_time() == before
            rejected = agent.stream("third", if_busy="reject")
            with pytest.raises(AgentBusy):
                await rejected.__anext__()
            await rejected.aclose()
            assert agent.statistics()["queued"] == 0
        assert not agent.busy
        history = await agent.conversation.messages()
        calls = len(provider.calls)
        assert (await agent.generate("fourth", if_busy="reject")).content == "later"
    assert caught.value.code == "busy"
    assert caught.value.agent == "desk"
    assert users(history) == ["first"]
    assert calls == 1


async def test_an_unknown_busy_policy_is_refused() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider())
        with pytest.raises(ValidationError, match="if_busy"):
            await agent.generate("x", if_busy="drop")  # type: ignore[arg-type]
        assert await agent.conversation.messages() == ()


# -- aclose ------------------------------------------------------------------------------------


async def test_aclose_lets_the_current_and_queued_runs_finish_and_refuses_new_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("one", delay=2), Reply("two", delay=2))
    results: list[AgentResult] = []
    refused: list[BaseException] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)

        async def run(text: str, at: float) -> None:
            await trio.sleep(at)
            results.append(await agent.generate(text))

        async def late() -> None:
            await trio.sleep(1.5)  # while the agent is closing
            try:
                await agent.generate("too late")
            except ActorStopped as error:
                refused.append(error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "first", 0)
            nursery.start_soon(run, "second", 0.5)
            nursery.start_soon(late)
            await trio.sleep(1)
            start = trio.current_time()
            await agent.aclose()
            closed_after = trio.current_time() - start
        assert agent.closed
        with pytest.raises(ActorStopped):
            await agent.generate("after")
        after = agent.stream("after")
        with pytest.raises(ActorStopped):
            await after.__anext__()
        await after.aclose()
    assert closed_after == pytest.approx(3)  # the rest of the first run, then the second
    assert sorted(r.content for r in results) == ["one", "two"]
    assert all(r.stop is StopReason.COMPLETE for r in results)
    assert len(refused) == 1
    assert len(provider.calls) == 2


async def test_aclose_cancel_cuts_the_current_run_and_withdraws_the_queued_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Hang("part of it"), Reply("never"))
    results: dict[str, AgentResult] = {}
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        agent = await Agent.start(runtime, provider, conversation=conversation)

        async def run(text: str, at: float) -> None:
            await trio.sleep(at)
            results[text] = await agent.generate(text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "first", 0)
            nursery.start_soon(run, "second", 1)
            await trio.sleep(2)
            start = trio.current_time()
            await agent.aclose(cancel=True)
            assert trio.current_time() == start
        history = await conversation.messages()
    first, second = results["first"], results["second"]
    assert (first.stop, first.content) == (StopReason.CANCELLED, "part of it")
    assert (second.stop, second.messages) == (StopReason.CANCELLED, ())
    assert len(provider.calls) == 1
    assert [(m.role, m.content, m.interrupted) for m in history] == [
        (Role.USER, "first", False),
        (Role.ASSISTANT, "part of it", True),
    ]


async def test_aclose_stops_the_conversation_it_owns_but_not_one_it_was_given() -> None:
    async with open_runtime() as runtime:
        before = children(runtime)
        owning = await Agent.start(runtime, ScriptedProvider("a"), name="owning")
        owned_name = owning.conversation.ref.name
        given = await Conversation.start(runtime, name="given")
        borrowing = await Agent.start(
            runtime, ScriptedProvider("b"), name="borrowing", conversation=given
        )
        await owning.generate("x")
        await borrowing.generate("y")
        assert {"owning", owned_name, "borrowing", "given"} <= set(children(runtime))
        await owning.aclose()
        await borrowing.aclose()
        assert children(runtime) == (*before, "given")
        # The given conversation is still running and keeps what the agent committed.
        assert [m.content for m in await given.messages()] == ["y", "b"]
        await given.add([Message.user("still here")])
        assert len(await given.messages()) == 3


async def test_async_with_closes_the_agent_and_aclose_is_idempotent() -> None:
    async with open_runtime() as runtime:
        before = children(runtime)
        agent = await Agent.start(runtime, ScriptedProvider("inside"), name="scoped")
        async with agent as entered:
            assert entered is agent
            assert (await agent.generate("hi")).content == "inside"
            assert "scoped" in children(runtime)
        assert agent.closed
        assert children(runtime) == before
        await agent.aclose()
        await agent.aclose(cancel=True)
        async with trio.open_nursery() as nursery:  # two closers at once both return
            nursery.start_soon(agent.aclose)
            nursery.start_soon(agent.aclose)
        assert children(runtime) == before


async def test_a_closed_agent_used_as_a_tool_is_a_failure_result() -> None:
    async with open_runtime() as runtime:
        worker = await Agent.start(runtime, ScriptedProvider(), name="retired")
        lead = await Agent.start(
            runtime,
            ScriptedProvider(
                Reply(calls=[ToolCall("c1", "retired", {"input": "x"})]), Reply("fine")
            ),
            tools=[worker.as_tool()],
        )
        await worker.aclose()
        result = await lead.generate("go")
    answer = tool_answers(result.messages)["c1"]
    assert answer.startswith("the agent 'retired' failed: ActorStopped")
    assert result.content == "fine"


async def test_fifty_create_run_close_cycles_leave_the_runtimes_children_where_they_were() -> None:
    async with open_runtime() as runtime:
        before = children(runtime)
        for cycle in range(50):
            agent = await runtime.agent(ScriptedProvider(f"answer {cycle}"))
            assert (await agent.generate("q")).content == f"answer {cycle}"
            await agent.aclose()
        assert children(runtime) == before
        assert runtime.statistics().child_restarts == 0


# -- typed start -------------------------------------------------------------------------------

#: The options runtime.agent() and Agent.start() document, in order.
OPTIONS = [
    "name",
    "conversation",
    "system",
    "instructions",
    "tools",
    "scope",
    "workspace",
    "authority",
    "approve",
    "answer",
    "deps",
    "limit",
    "timeout",
    "budget",
    "think",
    "tool_choice",
    "abort",
    "on_exhaust",
    "max_repeats",
    "on_tool_error",
    "pace",
    "settings",
    "guardrails",
    "pricing",
    "tool_concurrency",
    "window",
    "strict",
    "on",
    "error",
    "tracer_provider",
]


def test_runtime_agent_and_agent_start_take_the_same_explicit_typed_keywords() -> None:
    via_runtime = inspect.signature(Runtime.agent).parameters
    via_class = inspect.signature(Agent.start).parameters
    for parameters in (via_runtime, via_class):
        kinds = {p.kind for p in parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds
        assert inspect.Parameter.VAR_POSITIONAL not in kinds
        keywords = [
            name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        assert keywords == OPTIONS
        assert all(parameters[name].annotation is not inspect.Parameter.empty for name in OPTIONS)
        assert "provider" in parameters
        for name in OPTIONS:  # each is documented in Agent.start's docstring
            assert f"``{name}``" in (Agent.start.__doc__ or "")
    for name in OPTIONS:
        assert via_runtime[name].default == via_class[name].default
        assert via_runtime[name].annotation == via_class[name].annotation
    assert "TeamBudget" in str(via_class["budget"].annotation)


async def test_runtime_agent_passes_each_option_through_and_refuses_unknown_ones() -> None:
    team = TeamBudget(1000)

    async def pace(ctx: RunContext[Any]) -> None:
        await trio.lowlevel.checkpoint()

    deps = object()
    async with open_runtime() as runtime:
        agent = await runtime.agent(
            ScriptedProvider("x"),
            name="typed",
            system="S",
            deps=deps,
            limit=3,
            timeout=60,
            budget=team,
            max_repeats=2,
            on_tool_error="raise",
            pace=pace,
            tool_concurrency=2,
            window=4096,
        )
        with pytest.raises(TypeError):
            await runtime.agent(ScriptedProvider(), colour="blue")  # type: ignore[call-arg]
    assert (agent.name, agent.system, agent.deps) == ("typed", "S", deps)
    defaults = agent.defaults
    assert (defaults.limit, defaults.timeout, defaults.budget) == (3, 60, team)
    assert (defaults.max_repeats, defaults.on_tool_error, defaults.pace) == (2, "raise", pace)
    assert (agent.tool_concurrency, agent.window) == (2, 4096)


async def test_aclose_waits_for_runs_longer_than_the_actors_shutdown_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("one", delay=5), Reply("two", delay=5))
    results: list[AgentResult] = []
    errors: list[BaseException] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)

        async def run(text: str, at: float) -> None:
            await trio.sleep(at)
            try:
                results.append(await agent.generate(text))
            except Exception as error:
                errors.append(error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "first", 0)
            nursery.start_soon(run, "second", 1)
            await trio.sleep(2)
            await agent.aclose()
    # Longer than the actor's 5 s shutdown deadline: aclose waits for them, it does not cut.
    assert errors == []
    assert sorted(r.content for r in results) == ["one", "two"]
    assert all(r.stop is StopReason.COMPLETE for r in results)
