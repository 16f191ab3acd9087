"""Guardrails (issue 27, section 5): input guards (before or alongside the first provider call),
output guards on the final answer, tool guards on each call's arguments before the authority
gate. A trip ends the run ``stop="guardrail"`` with the guard's name and reason in the result,
the events and the log; nothing of a first call an input guard stopped is committed; guards run
inside the run's scope and are charged to its budget.

Every run is over ``ScriptedProvider``; the tests that wait use trio's autojump clock.
"""

from __future__ import annotations

import re

import pytest
import trio

from actors import (
    Abort,
    Agent,
    AgentEvent,
    Chunk,
    Guardrail,
    GuardrailTrip,
    TokenBudget,
    input_guardrail,
    open_runtime,
    output_guardrail,
    tool,
    tool_guardrail,
)
from actors.agent import RunOptions
from actors.guardrails import MAX_AGENT_REASON
from actors.testing import Hang, Reply, ScriptedProvider
from protocols.errors import ValidationError
from protocols.history import check_history
from protocols.messages import Role, StopReason, ToolCall, Usage

RAN: list[str] = []


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    RAN.append("add")
    return a + b


@tool
async def delete_file(path: str) -> str:
    """Delete a file."""
    RAN.append("delete_file")
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def _ran() -> None:
    RAN.clear()


CARD = re.compile(r"\b\d{4}[ -]?\d{4}[ -]?\d{4}[ -]?\d{4}\b")


@input_guardrail(when="before")
def no_card_numbers(text: str) -> str | None:
    return "the input holds a card number" if CARD.search(text) else None


async def test_an_input_guard_before_the_call_trips_and_no_provider_call_is_made(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider()
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, guardrails=[no_card_numbers], on=[events.append]
        )
        result = await agent.generate("my card is 4111 1111 1111 1111")
        history = await agent.conversation.messages()
        logged = [event async for event in runtime.watch(result.run_id)]
        # A clean input goes through the same agent untouched.
        assert provider.calls == []
        provider.extend(["fine"])
        clean = await agent.generate("hello")
    assert provider.calls[0].messages[-1].content == "hello"  # the card was never sent
    assert (result.stop, result.partial, result.turns) == (StopReason.GUARDRAIL, True, 0)
    assert result.guardrail == GuardrailTrip(
        "no_card_numbers", "input", "the input holds a card number"
    )
    assert [m.role for m in history] == [Role.USER]  # the input, and nothing answered
    (tripped,) = [event for event in events if event.kind == "guardrail"]
    assert tripped.guardrail == result.guardrail
    entry = next(event for event in logged if event.kind == "guardrail")
    assert entry.data == {
        "name": "no_card_numbers",
        "kind": "input",
        "reason": "the input holds a card number",
        "call_id": None,
    }
    assert logged[-1].kind == "finished"
    assert logged[-1].data["result"].guardrail == result.guardrail
    assert (clean.stop, clean.content, clean.guardrail) == (StopReason.COMPLETE, "fine", None)


async def test_a_parallel_input_guard_that_trips_mid_stream_voids_the_first_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_topic_check(text: str) -> str | None:
        await trio.sleep(5)  # slower than the model's first deltas
        return "off topic" if "weather" in text else None

    guard = input_guardrail(slow_topic_check)
    provider = ScriptedProvider(Reply("It is sunny and warm today.", chunk=4, delay=1))
    chunks: list[Chunk] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, guardrails=[guard])
        async with agent.stream("what is the weather?", budget=TokenBudget(10_000)) as run:
            async for chunk in run:
                chunks.append(chunk)
        result = run.result
        history = await agent.conversation.messages()
        logged = [event async for event in runtime.watch(result.run_id)]
    assert result.stop is StopReason.GUARDRAIL
    assert result.guardrail == GuardrailTrip("slow_topic_check", "input", "off topic")
    kinds = [chunk.kind for chunk in chunks]
    # The call streamed while the guard checked; then it was cut and what it showed voided.
    assert kinds[0] == "content"
    assert "rewind" in kinds
    assert kinds.index("rewind") > max(i for i, k in enumerate(kinds) if k == "content")
    # Nothing of the call is committed; the history is the input alone.
    assert [m.role for m in history] == [Role.USER]
    assert all(m.role is not Role.ASSISTANT for m in result.messages)
    rewind = next(event for event in logged if event.kind == "rewind")
    first = next(event for event in logged if event.kind == "content")
    assert rewind.data == {"to": first.seq - 1}
    # What the cut call streamed was charged, by estimate.
    assert result.usage is not None
    assert result.usage.completion > 0
    assert result.estimated


async def test_a_parallel_input_guard_holds_the_first_answers_tool_calls_until_it_passes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    verdicts: list[str] = []

    async def slow(text: str) -> str | None:
        await trio.sleep(10)
        verdicts.append("ran")
        return None if "add" in text else "not about adding"

    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "add", {"a": 1, "b": 2})]),
        Reply("3"),
        Reply(calls=[ToolCall("c2", "add", {"a": 1, "b": 2})]),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[add], guardrails=[input_guardrail(slow)]
        )
        passed = await agent.generate("please add 1 and 2")
        assert RAN == ["add"]
        stopped = await agent.generate("tell me a joke")
        history = await agent.conversation.messages()
    assert (passed.stop, passed.content) == (StopReason.COMPLETE, "3")
    assert verdicts == ["ran", "ran"]
    # The second run's first answer (a call) came before the verdict: it never ran.
    assert RAN == ["add"]
    assert stopped.stop is StopReason.GUARDRAIL
    assert stopped.messages[-1].role is Role.USER
    check_history(history)


async def test_an_output_guard_trips_on_the_final_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @output_guardrail
    def no_secrets(answer: str) -> str | None:
        return "the answer names the password" if "hunter2" in answer else None

    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "add", {"a": 1, "b": 2})]),
        Reply("the password is hunter2"),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], guardrails=[no_secrets])
        result = await agent.generate("go")
        history = await agent.conversation.messages()
    assert result.stop is StopReason.GUARDRAIL
    assert result.guardrail == GuardrailTrip(
        "no_secrets", "output", "the answer names the password"
    )
    # The model said it: it is in the history, and the result says why it must not be shown.
    assert result.content == "the password is hunter2"
    assert history[-1].content == "the password is hunter2"
    assert RAN == ["add"]


async def test_a_tool_guard_stops_the_turn_before_any_of_its_calls_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tool_guardrail(tools=["delete_file"])
    def only_in_tmp(call: ToolCall) -> str | None:
        path = str(call.arguments.get("path", ""))
        return None if path.startswith("/tmp/") else f"refused to delete {path}"

    provider = ScriptedProvider(
        Reply(
            calls=[
                ToolCall("c1", "add", {"a": 1, "b": 2}),
                ToolCall("c2", "delete_file", {"path": "/tmp/x"}),
            ]
        ),
        Reply(
            calls=[
                ToolCall("c3", "add", {"a": 2, "b": 2}),
                ToolCall("c4", "delete_file", {"path": "/etc/passwd"}),
            ]
        ),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[add, delete_file], guardrails=[only_in_tmp]
        )
        result = await agent.generate("clean up")
        history = await agent.conversation.messages()
    assert RAN in (["add", "delete_file"], ["delete_file", "add"])  # the first turn's calls ran
    assert result.stop is StopReason.GUARDRAIL
    assert result.guardrail == GuardrailTrip(
        "only_in_tmp", "tool", "refused to delete /etc/passwd", "c4"
    )
    answered = {m.tool_call_id: m.content for m in history if m.role is Role.TOOL}
    assert answered["c3"] == answered["c4"]
    assert answered["c4"].startswith("not executed: guardrail 'only_in_tmp' stopped the run")
    check_history(history)


async def test_guards_are_added_per_run_on_top_of_the_agents(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []

    @output_guardrail
    def agents(answer: str) -> str | None:
        seen.append("agent's")
        return None

    @output_guardrail
    def runs(answer: str) -> str | None:
        seen.append("run's")
        return "no" if answer == "bad" else None

    provider = ScriptedProvider("good", "bad")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, guardrails=[agents])
        first = await agent.generate("a")
        second = await agent.generate("b", guardrails=[runs])
    assert first.stop is StopReason.COMPLETE
    assert second.guardrail == GuardrailTrip("runs", "output", "no")
    assert sorted(seen) == sorted(["agent's", "agent's", "run's"])


async def test_a_guard_that_raises_fails_the_run_with_its_own_exception(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Broken(Exception):
        pass

    @input_guardrail
    async def broken(text: str) -> str | None:
        await trio.sleep(1)
        raise Broken("the classifier is down")

    @input_guardrail
    async def slow(text: str) -> str | None:
        await trio.sleep(100)
        return None

    provider = ScriptedProvider(Reply("an answer", delay=2))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, guardrails=[broken, slow])
        with pytest.raises(Broken, match="the classifier is down"):
            await agent.generate("hi")
        history = await agent.conversation.messages()
    assert [m.role for m in history] == [Role.USER]
    check_history(history)


async def test_a_check_must_return_none_or_a_reason(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider("an answer")
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime,
            provider,
            guardrails=[output_guardrail(lambda answer: True, name="yes")],  # type: ignore[arg-type,return-value]
        )
        with pytest.raises(ValidationError, match="returns None to pass"):
            await agent.generate("hi")


async def test_a_runs_cut_cuts_its_guards_and_they_leave_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @input_guardrail(when="before")
    async def forever(text: str) -> str | None:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    provider = ScriptedProvider("never")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, guardrails=[forever])
        timed = await agent.generate("hi", timeout=3)
        token = Abort()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_later, token)
            cancelled = await agent.generate("again", abort=[token])
        history = await agent.conversation.messages()
    assert (timed.stop, timed.partial, timed.guardrail) == (StopReason.TIMEOUT, True, None)
    assert (cancelled.stop, cancelled.guardrail) == (StopReason.CANCELLED, None)
    assert provider.calls == []
    assert [m.role for m in history] == [Role.USER, Role.USER]


async def _cancel_later(token: Abort) -> None:
    await trio.sleep(1)
    token.cancel("the user left")


async def test_an_agent_guards_and_is_charged_to_the_runs_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    judge_model = ScriptedProvider(
        Reply('{"tripped": false, "reason": "on topic"}', usage=Usage(20, 5)),
        Reply('{"tripped": true, "reason": "asks about cooking"}', usage=Usage(30, 6)),
    )
    provider = ScriptedProvider(
        Reply("Trio has nurseries.", usage=Usage(10, 4)),
        Reply("Knead the dough.", delay=60),  # (cut: the judge decides first)
    )
    async with open_runtime() as runtime:
        judge = await Agent.start(
            runtime, judge_model, name="topic-judge", system="Only questions about trio pass."
        )
        agent = await Agent.start(runtime, provider, guardrails=[input_guardrail(judge)])
        budget = TokenBudget(1_000)
        on_topic = await agent.generate("What is a nursery in trio?", budget=budget)
        off_topic = await agent.generate("How do I bake bread?", budget=budget)
    assert on_topic.stop is StopReason.COMPLETE
    assert on_topic.usage == Usage(10, 4)  # the run's own calls
    assert on_topic.total_usage == Usage(10, 4) + Usage(20, 5)  # and the guard's
    assert off_topic.guardrail == GuardrailTrip("topic-judge", "input", "asks about cooking")
    # The judge saw the text it checked, and nothing of the guarded agent's conversation.
    assert "How do I bake bread?" in judge_model.calls[1].messages[-1].content
    assert [m.role for m in judge_model.calls[1].messages if m.role is not Role.SYSTEM] == [
        Role.USER
    ]


async def test_an_agent_guard_that_cannot_decide_trips(
    autojump_clock: trio.testing.MockClock,
) -> None:
    judge_model = ScriptedProvider(Reply("not json"), Reply("still not"), Reply("nope"))
    provider = ScriptedProvider(Hang())
    async with open_runtime() as runtime:
        judge = await Agent.start(runtime, judge_model, name="judge")
        agent = await Agent.start(
            runtime, provider, guardrails=[input_guardrail(judge, when="before")]
        )
        with pytest.raises(Exception, match="did not match the schema"):
            await agent.generate("anything")
    assert provider.calls == []


def test_bad_guardrails_are_refused_clearly() -> None:
    with pytest.raises(ValidationError, match="Guardrail objects"):
        RunOptions(guardrails=(object(),))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="kind is 'input'"):
        Guardrail("inputs", lambda text: None, "x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="only an input guard"):
        Guardrail("output", lambda text: None, "x", when="before")
    with pytest.raises(ValidationError, match="only a tool guard"):
        Guardrail("input", lambda text: None, "x", tools=["add"])
    with pytest.raises(ValidationError, match="name the guardrail"):
        input_guardrail(lambda text: None)
    with pytest.raises(ValidationError, match="a function or an agent"):
        Guardrail("input", "not callable", "x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="list of tool names"):
        tool_guardrail(lambda call: None, name="x", tools="add")  # type: ignore[call-overload]
    assert repr(no_card_numbers) == "<Guardrail input 'no_card_numbers'>"


async def test_an_agent_guard_spending_the_runs_budget_cuts_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The judge's answer streams slowly and costs more than the run may spend.
    verdict = '{"tripped": false, "reason": "' + "fine " * 60 + '"}'
    judge_model = ScriptedProvider(Reply(verdict, chunk=8, delay=1, usage=Usage(10, 90)))
    provider = ScriptedProvider(Reply("never shown", delay=1_000))
    async with open_runtime() as runtime:
        judge = await Agent.start(runtime, judge_model, name="judge")
        agent = await Agent.start(runtime, provider, guardrails=[input_guardrail(judge)])
        result = await agent.generate("hello", budget=TokenBudget(20))
        history = await agent.conversation.messages()
    assert (result.stop, result.partial, result.guardrail) == (StopReason.BUDGET, True, None)
    check_history(history)
    assert [m.role for m in history] == [Role.USER]  # the cut call had shown nothing
    assert result.total_usage is None or result.total_usage.total >= 20


async def test_runtime_agent_takes_guardrails_as_agent_start_does() -> None:
    provider = ScriptedProvider("a SHOUTED answer")

    @output_guardrail
    def no_shouting(answer: str) -> str | None:
        return (
            "shouts" if any(word.isupper() and len(word) > 1 for word in answer.split()) else None
        )

    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, guardrails=[no_shouting])
        result = await agent.generate("hi")
    assert agent.defaults.guardrails == (no_shouting,)
    assert result.guardrail == GuardrailTrip("no_shouting", "output", "shouts")


async def test_an_agent_guards_reason_is_kept_to_a_bounded_size() -> None:
    long_reason = "x" * 50_000
    judge_model = ScriptedProvider(Reply('{"tripped": true, "reason": "' + long_reason + '"}'))
    async with open_runtime() as runtime:
        judge = await Agent.start(runtime, judge_model, name="judge")
        agent = await Agent.start(
            runtime, ScriptedProvider(), guardrails=[input_guardrail(judge, when="before")]
        )
        result = await agent.generate("anything")
    assert result.guardrail is not None
    assert len(result.guardrail.reason) == MAX_AGENT_REASON
    assert result.guardrail.reason.endswith("…")
