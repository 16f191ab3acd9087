"""Runs waiting their turn, callers going away, runs that would wait on themselves, and the
budget over the loop's own extra calls (issue 11, section 1; DESIGN sections 4 and 12).

Runs on one agent are FIFO: a run waits ("queued") while an earlier one runs. These tests
hold the first run with a ``Hang`` so the second is provably queued, then cut the second.
"""

from __future__ import annotations

import trio
import trio.testing

from actors import (
    Abort,
    ActorStopped,
    Conversation,
    CycleError,
    Runtime,
    open_runtime,
    summarizer_for,
    tool,
)
from actors.agent import (
    FALLBACK_SUMMARY,
    UNKNOWN_TOOLS_FALLBACK,
    Agent,
    AgentEvent,
    AgentStatus,
)
from actors.testing import Hang, Reply, ScriptedProvider
from protocols.accounting import TokenBudget
from protocols.messages import Message, Role, StopReason, ToolCall, Usage

#: Trio seconds after which a test that deadlocked fails instead of hanging (mock clock).
WATCHDOG = 10_000


def _restarts(runtime: Runtime) -> int:
    return runtime.statistics().child_restarts


async def _busy_agent(runtime: Runtime, *later: Reply) -> tuple[Agent, ScriptedProvider]:
    """An agent whose first run hangs (streaming "held"), so that later runs are queued."""
    provider = ScriptedProvider(Hang("held"), *later)
    agent = await Agent.start(runtime, provider)
    return agent, provider


async def _hold(agent: Agent, task_status: trio.TaskStatus[None]) -> None:
    async with agent.stream("first") as run:
        async for chunk in run:
            if chunk.kind == "content":
                task_status.started()  # the first run is running: the agent is busy
        assert run.result.stop is StopReason.CANCELLED


async def test_a_caller_cancelled_while_its_run_is_queued_gets_control_back_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        agent, provider = await _busy_agent(runtime, Reply("second"))
        async with trio.open_nursery() as nursery:
            await nursery.start(_hold, agent)
            with trio.move_on_after(3) as scope:
                await agent.generate("queued")
            assert scope.cancelled_caught
            # Returned at the deadline itself: the queued run was withdrawn, not waited for.
            assert trio.current_time() == scope.deadline
            assert agent.statistics()["queued"] == 0
            assert agent.statistics()["withdrawn"] == 1
            agent.abort("done holding")
        history = [m.content for m in await agent.conversation.messages()]
        # The withdrawn run committed nothing, also after the first run ended.
        assert "queued" not in history
        assert history[0] == "first"
        assert len(provider.calls) == 1
        assert _restarts(runtime) == 0


async def test_a_queued_stream_left_early_is_withdrawn_and_the_agent_survives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(WATCHDOG):
        async with open_runtime() as runtime:
            agent, provider = await _busy_agent(runtime, Reply("behind"))
            results = []
            async with trio.open_nursery() as nursery:
                await nursery.start(_hold, agent)
                # Many consumers abandon their queued streams: none may crash the agent later.
                for index in range(20):
                    with trio.move_on_after(1):
                        async with agent.stream(f"abandoned {index}") as run:
                            async for _chunk in run:
                                pass

                async def behind() -> None:
                    results.append(await agent.generate("behind"))

                nursery.start_soon(behind)
                await trio.testing.wait_all_tasks_blocked()
                agent.abort("let the next one go")
            assert [r.content for r in results] == ["behind"]
            assert results[0].stop is StopReason.COMPLETE
            history = [m.content for m in await agent.conversation.messages()]
            assert not [text for text in history if text.startswith("abandoned")]
            assert len(provider.calls) == 2
            assert _restarts(runtime) == 0
            assert agent.statistics()["withdrawn"] == 20


async def test_a_queued_run_whose_token_trips_returns_cancelled_with_no_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[AgentEvent] = []
    with trio.fail_after(WATCHDOG):
        async with open_runtime() as runtime:
            agent, provider = await _busy_agent(runtime)
            agent.subscribe(events.append)
            token = Abort()
            async with trio.open_nursery() as nursery:
                await nursery.start(_hold, agent)

                async def stop_later() -> None:
                    await trio.sleep(2)
                    token.cancel("the user pressed stop")

                nursery.start_soon(stop_later)
                start = trio.current_time()
                result = await agent.generate("queued", abort=[token])
                assert trio.current_time() == start + 2
                assert (result.stop, result.partial, result.messages) == (
                    StopReason.CANCELLED,
                    True,
                    (),
                )
                # The same through stream(): its run.abort() while queued ends the iteration.
                async with agent.stream("queued too") as run:
                    nursery.start_soon(_abort_soon, run)
                    chunks = [chunk async for chunk in run]
                assert chunks == []
                assert (run.result.stop, run.result.messages) == (StopReason.CANCELLED, ())
                agent.abort("done holding")
            history = [m.content for m in await agent.conversation.messages()]
            assert "queued" not in history
            assert "queued too" not in history
            assert len(provider.calls) == 1
        withdrawn = [e for e in events if e.kind == "abort" and e.reason == "the user pressed stop"]
        assert len(withdrawn) == 1


async def _abort_soon(run: object) -> None:
    await trio.sleep(1)
    run.abort("stop")  # type: ignore[attr-defined]


async def test_a_consumer_leaving_a_running_stream_cuts_it_and_commits_the_partial(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("one two three four", chunk=4, delay=1), Reply("next"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        async with agent.stream("go") as run:
            async for chunk in run:
                if chunk.kind == "content":
                    break
        history = await agent.conversation.messages()
        assert history[-1].interrupted
        assert history[-1].content == "one "
        assert (await agent.generate("again")).content == "next"
        assert agent.status is AgentStatus.DONE
        assert _restarts(runtime) == 0


async def test_a_pre_cancelled_stream_ends_at_once_and_commits_nothing() -> None:
    token = Abort()
    token.cancel("no")
    provider = ScriptedProvider(Reply("never"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        async with agent.stream("hi", abort=[token]) as run:
            assert [chunk async for chunk in run] == []
        assert (run.result.stop, run.result.partial) == (StopReason.CANCELLED, True)
        assert await agent.conversation.messages() == ()
    assert provider.calls == []


# -- a run that would wait on itself -------------------------------------------------------


async def test_a_tool_calling_its_own_agent_fails_at_once_naming_the_agents(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agents: dict[str, Agent] = {}

    @tool
    async def ask_myself(question: str) -> str:
        """Ask the same agent."""
        return (await agents["a"].generate(question)).content

    call = ToolCall("c1", "ask_myself", {"question": "again?"})
    provider = ScriptedProvider(Reply(calls=[call]), Reply("done"))
    async with open_runtime() as runtime:
        agents["a"] = agent = await Agent.start(runtime, provider, tools=[ask_myself], name="a")
        start = trio.current_time()
        result = await agent.generate("go", timeout=100)
        assert trio.current_time() == start  # refused at once: no stall until the deadline
        history = await agent.conversation.messages()
    assert result.stop is StopReason.COMPLETE
    answer = next(m for m in history if m.role is Role.TOOL)
    assert "CycleError" in answer.content
    assert "a -> a" in answer.content
    # Nothing of the refused inner run: no orphan user message after the tool result.
    assert [m.content for m in history if m.role is Role.USER] == ["go"]


async def test_a_to_b_to_a_is_refused_and_b_commits_nothing_of_the_refused_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agents: dict[str, Agent] = {}

    @tool
    async def ask(agent: str, question: str) -> str:
        """Ask another agent."""
        return (await agents[agent].generate(question)).content

    a_provider = ScriptedProvider(
        Reply(calls=[ToolCall("a1", "ask", {"agent": "b", "question": "hi b"})]), Reply("a done")
    )
    b_provider = ScriptedProvider(
        Reply(calls=[ToolCall("b1", "ask", {"agent": "a", "question": "hi a"})]),
        Reply("b done"),
        Reply("b again"),
    )
    async with open_runtime() as runtime:
        agents["a"] = await Agent.start(runtime, a_provider, tools=[ask], name="a")
        agents["b"] = await Agent.start(runtime, b_provider, tools=[ask], name="b")
        start = trio.current_time()
        result = await agents["a"].generate("start", timeout=100)
        assert trio.current_time() == start
        a_history = await agents["a"].conversation.messages()
        b_history = await agents["b"].conversation.messages()
        # The cycle is refused; later runs of the same agents still work.
        assert (await agents["b"].generate("plain")).content == "b again"
    assert result.content == "a done"
    b_answer = next(m for m in b_history if m.role is Role.TOOL)
    assert "a -> b -> a" in b_answer.content
    assert [m.content for m in a_history if m.role is Role.USER] == ["start"]
    assert [m.content for m in a_history if m.role is Role.TOOL] == ["b done"]


async def test_a_cycle_through_stream_raises_cycle_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agents: dict[str, Agent] = {}
    errors: list[BaseException] = []

    @tool
    async def again() -> str:
        """Stream the same agent."""
        try:
            async with agents["a"].stream("inner") as run:
                async for _chunk in run:
                    pass
        except CycleError as error:
            errors.append(error)
            raise
        return "unreachable"

    provider = ScriptedProvider(Reply(calls=[ToolCall("c", "again", {})]), Reply("ok"))
    with trio.fail_after(WATCHDOG):
        async with open_runtime() as runtime:
            agents["a"] = await Agent.start(runtime, provider, tools=[again], name="a")
            await agents["a"].generate("outer")
    assert len(errors) == 1
    assert errors[0].code == "cycle"  # type: ignore[attr-defined]
    assert errors[0].chain == ("a", "a")  # type: ignore[attr-defined]


# -- the budget bounds the loop's own extra calls --------------------------------------------


async def test_a_spent_budget_stops_the_final_call_after_unknown_tools() -> None:
    ghost = [ToolCall("g1", "ghost", {}), ToolCall("g2", "ghost", {})]
    provider = ScriptedProvider(
        Reply(calls=[ghost[0]], usage=Usage(5, 5)),
        Reply(calls=[ghost[1]], usage=Usage(10, 10)),
        Reply("final answer", usage=Usage(50, 50)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("go", budget=TokenBudget(max=20))
        history = await agent.conversation.messages()
    assert len(provider.calls) == 2  # the extra, tool-less call never ran: the budget is spent
    assert result.stop is StopReason.BUDGET
    assert result.usage == Usage(15, 15)
    assert history[-1].role is Role.TOOL


async def test_a_spent_budget_stops_the_summarize_call() -> None:
    call = ToolCall("c1", "noop", {})
    provider = ScriptedProvider(
        Reply(calls=[call], usage=Usage(30, 10)), Reply("summary", usage=Usage(50, 50))
    )

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[noop], on_exhaust="summarize")
        result = await agent.generate("go", limit=1, budget=TokenBudget(max=20))
    assert len(provider.calls) == 1
    assert result.stop is StopReason.BUDGET
    assert FALLBACK_SUMMARY not in [m.content for m in result.messages]


async def test_the_extra_calls_are_cut_by_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    call = ToolCall("c1", "noop", {})

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    provider = ScriptedProvider(Reply(calls=[call]), Hang("summar"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[noop], on_exhaust="summarize")
        result = await agent.generate("go", limit=1, timeout=5)
    assert result.stop is StopReason.TIMEOUT
    assert result.content == "summar"
    assert result.messages[-1].interrupted


async def test_an_empty_answer_after_unknown_tools_does_not_claim_a_turn_limit() -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("g1", "ghost", {})]),
        Reply(calls=[ToolCall("g2", "ghost", {})]),
        Reply(""),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("go")
    assert result.stop is StopReason.COMPLETE
    assert result.content == UNKNOWN_TOOLS_FALLBACK.format(names="ghost")
    assert "turn limit" not in result.content


async def test_a_message_input_is_not_committed_when_withdrawn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        agent, _ = await _busy_agent(runtime)
        async with trio.open_nursery() as nursery:
            await nursery.start(_hold, agent)
            with trio.move_on_after(1):
                await agent.generate([Message.user("one"), Message.user("two")])
            agent.abort("release")
        contents = [m.content for m in await agent.conversation.messages()]
    assert "one" not in contents
    assert "two" not in contents


# -- the agent stopping under its callers ------------------------------------------------------


async def test_callers_of_an_agent_that_stops_get_actor_stopped_not_a_hang(
    autojump_clock: trio.testing.MockClock,
) -> None:
    outcomes: list[str] = []
    tool_call = ToolCall("c1", "nap", {})

    @tool
    async def nap() -> str:
        """Sleep for ever."""
        await trio.sleep_forever()
        return "never"

    with trio.fail_after(WATCHDOG):
        async with trio.open_nursery() as callers, open_runtime() as runtime:
            provider = ScriptedProvider(Reply("thinking it over", calls=[tool_call]))
            agent = await Agent.start(runtime, provider, tools=[nap])

            async def call(index: int) -> None:
                try:
                    await agent.generate(f"run {index}")
                except ActorStopped:
                    outcomes.append("stopped")

            for index in range(4):  # one runs (its tool never returns), three wait
                callers.start_soon(call, index)
            await trio.testing.wait_all_tasks_blocked()
            assert agent.statistics()["queued"] == 3
            # Leaving the runtime stopped the agent: its shutdown deadline killed the run.
    assert outcomes == ["stopped"] * 4
    # The killed run still left its history well formed: its call is answered (interrupted).
    history = agent.conversation._history_now().messages
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert history[1].calls == (tool_call,)
    assert history[2].content.startswith("interrupted")


async def test_a_task_started_from_a_run_may_use_the_agent_once_the_run_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A tool hands work to a long-lived nursery; that task inherits the run's chain, but the
    # run is over when the task asks the same agent: no cycle, the request is served.
    later: list[str] = []
    agents: dict[str, Agent] = {}
    answered = trio.Event()

    async with trio.open_nursery() as background, open_runtime() as runtime:

        async def follow_up() -> None:
            await trio.sleep(10)
            later.append((await agents["a"].generate("follow-up")).content)
            answered.set()

        @tool
        async def schedule() -> str:
            """Schedule a follow-up."""
            background.start_soon(follow_up)
            return "scheduled"

        provider = ScriptedProvider(
            Reply(calls=[ToolCall("c1", "schedule", {})]), Reply("done"), Reply("followed up")
        )
        agents["a"] = await Agent.start(runtime, provider, tools=[schedule], name="a")
        assert (await agents["a"].generate("go")).content == "done"
        with trio.fail_after(WATCHDOG):
            await answered.wait()
    assert later == ["followed up"]


# -- the run's compaction is the run's too ------------------------------------------------------


async def _long_conversation(runtime: Runtime, summarizer: ScriptedProvider) -> Conversation:
    conversation = await Conversation.start(runtime, summarize=summarizer_for(summarizer), keep=1)
    await conversation.add([Message.user("x" * 800), Message.assistant("y" * 800)])
    return conversation


async def test_a_compactions_summaries_are_charged_to_the_runs_budget() -> None:
    summaries = ScriptedProvider(*(Reply("short", usage=Usage(40, 10)) for _ in range(3)))
    provider = ScriptedProvider(Reply("never"))
    async with open_runtime() as runtime:
        conversation = await _long_conversation(runtime, summaries)
        agent = await Agent.start(runtime, provider, conversation=conversation, window=300)
        result = await agent.generate("go", budget=TokenBudget(max=60))
        sections = (await conversation.history()).sections
    assert len(summaries.calls) >= 1
    assert len(sections) == 1  # the compaction happened, and cost the run 50 a call
    assert provider.calls == []  # ... which spent the budget: no turn starts
    assert result.stop is StopReason.BUDGET


async def test_an_unreported_summary_is_charged_by_estimate() -> None:
    summaries = ScriptedProvider(*(Reply("s" * 200) for _ in range(3)))
    provider = ScriptedProvider(Reply("ok"))
    async with open_runtime() as runtime:
        conversation = await _long_conversation(runtime, summaries)
        agent = await Agent.start(runtime, provider, conversation=conversation, window=300)
        result = await agent.generate("go", budget=TokenBudget(max=100))
    assert provider.calls == []  # 50 tokens estimated per summary: the budget is spent
    assert (result.stop, result.estimated) == (StopReason.BUDGET, True)


async def test_a_run_cut_during_its_compaction_cuts_the_compaction(
    autojump_clock: trio.testing.MockClock,
) -> None:
    summaries = ScriptedProvider(Hang("a summ"))
    provider = ScriptedProvider(Reply("never"))
    async with open_runtime() as runtime:
        conversation = await _long_conversation(runtime, summaries)
        agent = await Agent.start(runtime, provider, conversation=conversation, window=300)
        start = trio.current_time()
        result = await agent.generate("go", timeout=5)
        assert trio.current_time() == start + 5
        with trio.fail_after(1):  # the conversation is free again: its compaction job ended
            await conversation.add([Message.user("after")])  # (queues behind a running job)
        history = await conversation.history()
    assert result.stop is StopReason.TIMEOUT
    assert history.sections == ()  # cut: nothing changed
    assert provider.calls == []
