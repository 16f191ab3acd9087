"""Questions for the human in process: the ``ask_user`` tool and ``RunContext.ask``, answered by
the agent's ``answer=`` hook -- valid answers reach the model checked, everything else is a
clear "not answered" result; a cut run cancels its open question."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio
import trio.testing

from actors import Question, RunContext, Unanswered, ask_user, open_runtime, question_tool, tool
from actors._questions import CANCELLED, NO_ANSWERER
from actors.testing import Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.live import event_from_json, event_to_json
from protocols.messages import Message, Role, StopReason, ToolCall


def _asks(arguments: dict[str, Any], call_id: str = "q1", name: str = "ask_user") -> Reply:
    return Reply(calls=[ToolCall(call_id, name, arguments)])


def _tool_message(messages: Sequence[Message], call_id: str = "q1") -> Message:
    return next(m for m in messages if m.role is Role.TOOL and m.tool_call_id == call_id)


async def test_ask_user_gets_the_answer_the_answerer_gives_checked() -> None:
    seen: list[tuple[ToolCall, Question]] = []

    async def answer(call: ToolCall, question: Question) -> Any:
        seen.append((call, question))
        await trio.lowlevel.checkpoint()
        return 3.0  # a whole float for an integer question: given back as the int 3

    provider = ScriptedProvider(
        _asks({"question": "How many?", "kind": "number", "min": 1, "max": 5, "integer": True}),
        Reply("Three it is."),
    )
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[ask_user], answer=answer)
        result = await agent.generate("Order some apples.")
    assert result.content == "Three it is."
    [(call, question)] = seen
    assert call.id == "q1"
    assert question == Question("How many?", kind="number", min=1, max=5, integer=True)
    assert _tool_message(result.messages).content == "3"
    # The model read the answer in its second call.
    assert provider.calls[1].messages[-1].content == "3"


async def test_every_kind_of_question_round_trips() -> None:
    cases: list[tuple[dict[str, Any], Any, str]] = [
        ({"question": "Name?"}, "Ada", "Ada"),
        ({"question": "Size?", "kind": "choice", "options": ["S", "M", "L"]}, "M", "M"),
        (
            {"question": "Toppings?", "kind": "choices", "options": ["a", "b", "c"]},
            ["c", "a"],
            '["a","c"]',  # canonical: in the options' order
        ),
        ({"question": "Tip?", "kind": "number"}, 2.5, "2.5"),
    ]
    for arguments, given, shown in cases:

        async def answer(call: ToolCall, question: Question, given: Any = given) -> Any:
            await trio.lowlevel.checkpoint()
            return given

        async with open_runtime() as runtime:
            agent = await runtime.agent(
                ScriptedProvider(_asks(arguments), Reply("ok")), tools=[ask_user], answer=answer
            )
            result = await agent.generate("go")
        message = _tool_message(result.messages)
        assert message.content == shown, (arguments, message)


async def test_a_refused_answer_is_not_answered_and_says_why() -> None:
    async def answer(call: ToolCall, question: Question) -> Any:
        await trio.lowlevel.checkpoint()
        return "XL"

    provider = ScriptedProvider(
        _asks({"question": "Size?", "kind": "choice", "options": ["S", "M"]}), Reply("ok")
    )
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[ask_user], answer=answer)
        result = await agent.generate("go")
    text = _tool_message(result.messages).content
    assert text.startswith("not answered: the answer was refused: answer refused: 'XL'")
    assert "one of 'S', 'M'" in text


async def test_without_an_answerer_the_question_is_refused_never_invented() -> None:
    provider = ScriptedProvider(_asks({"question": "Name?"}), Reply("ok"))
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[ask_user])
        result = await agent.generate("go")
    assert _tool_message(result.messages).content == f"not answered: {NO_ANSWERER}"


async def test_declining_failing_and_invalid_questions() -> None:
    async def declines(call: ToolCall, question: Question) -> Any:
        await trio.lowlevel.checkpoint()
        return None

    async def explains(call: ToolCall, question: Question) -> Any:
        await trio.lowlevel.checkpoint()
        raise Unanswered("the user is away")

    async def breaks(call: ToolCall, question: Question) -> Any:
        await trio.lowlevel.checkpoint()
        raise KeyError("bug")

    expected = {
        declines: "not answered: the user declined to answer",
        explains: "not answered: the user is away",
        breaks: "not answered: the answerer failed (KeyError)",
    }
    for answerer, text in expected.items():
        async with open_runtime() as runtime:
            agent = await runtime.agent(
                ScriptedProvider(_asks({"question": "Name?"}), Reply("ok")),
                tools=[ask_user],
                answer=answerer,
            )
            result = await agent.generate("go")
        assert _tool_message(result.messages).content == text
    # A question the model cannot ask (options on a number) never reaches the answerer.
    asked: list[Question] = []

    async def records(call: ToolCall, question: Question) -> Any:
        asked.append(question)
        await trio.lowlevel.checkpoint()
        return 1

    async with open_runtime() as runtime:
        agent = await runtime.agent(
            ScriptedProvider(
                _asks({"question": "n?", "kind": "number", "options": ["1"]}), Reply("ok")
            ),
            tools=[ask_user],
            answer=records,
        )
        result = await agent.generate("go")
    assert _tool_message(result.messages).content == (
        "invalid question: a 'number' question takes no options"
    )
    assert asked == []


async def test_a_tool_asks_through_its_run_context() -> None:
    @tool
    async def book(ctx: RunContext[None], city: str) -> str:
        """Book a trip."""
        nights = await ctx.ask(Question(f"How many nights in {city}?", kind="number"))
        return f"booked {nights} nights in {city}"

    async def answer(call: ToolCall, question: Question) -> Any:
        assert call.name == "book"
        await trio.lowlevel.checkpoint()
        return 2

    provider = ScriptedProvider(
        Reply(calls=[ToolCall("b1", "book", {"city": "Oslo"})]), Reply("Done.")
    )
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[book], answer=answer)
        result = await agent.generate("go")
    assert _tool_message(result.messages, "b1").content == "booked 2 nights in Oslo"


async def test_run_context_ask_unanswered_is_the_tools_failure_unless_caught() -> None:
    @tool
    async def book(ctx: RunContext[None]) -> str:
        """Book."""
        try:
            await ctx.ask(Question("Where?"))
        except Unanswered as error:
            return f"booked nothing ({error.reason})"
        return "booked"

    provider = ScriptedProvider(Reply(calls=[ToolCall("b1", "book", {})]), Reply("ok"))
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[book])
        result = await agent.generate("go")
    assert _tool_message(result.messages, "b1").content == f"booked nothing ({NO_ANSWERER})"


async def test_a_cut_run_cancels_its_open_question(autojump_clock: trio.abc.Clock) -> None:
    waiting = trio.Event()
    cancelled = trio.Event()

    async def answer(call: ToolCall, question: Question) -> Any:
        waiting.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    provider = ScriptedProvider(_asks({"question": "Name?"}))
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[ask_user], answer=answer, timeout=30)
        async with agent.stream("go") as run:
            events = [(e.kind, dict(e.data)) async for e in run.events()]
        result = run.result
    assert waiting.is_set()
    assert cancelled.is_set()
    assert result.partial
    assert result.stop is StopReason.TIMEOUT
    assert _tool_message(result.messages).content == INTERRUPTED
    # History stays well formed: the call has its result.
    calls = [c.id for m in result.messages for c in m.calls]
    results = [m.tool_call_id for m in result.messages if m.role is Role.TOOL]
    assert calls == results == ["q1"]
    # Followers see the question open, then cancelled.
    asked = [data for kind, data in events if kind.startswith("approval_")]
    assert asked == [
        {
            "call_id": "q1",
            "tool": "ask_user",
            "reason": "Name?",
            "question": {"prompt": "Name?"},
        },
        {"call_id": "q1", "allow": False, "reason": CANCELLED},
    ]


async def test_the_run_log_shows_the_question_and_its_answer() -> None:
    async def answer(call: ToolCall, question: Question) -> Any:
        await trio.lowlevel.checkpoint()
        return ["b"]

    provider = ScriptedProvider(
        _asks({"question": "Which?", "kind": "choices", "options": ["a", "b"]}),
        Reply("You chose b."),
    )
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[ask_user], answer=answer)
        async with agent.stream("go") as run:
            events = [e async for e in run.events()]
    assert run.result.content == "You chose b."
    asked = [e for e in events if e.kind.startswith("approval_")]
    assert [e.kind for e in asked] == ["approval_requested", "approval_answered"]
    assert asked[0].data["question"] == {
        "prompt": "Which?",
        "kind": "choices",
        "options": ["a", "b"],
    }
    assert dict(asked[1].data) == {"call_id": "q1", "allow": True, "reason": "", "answer": ["b"]}
    # On a wire the events are valid, question and answer included.
    for event in asked:
        assert event_from_json(event_to_json(event)) == event


async def test_a_renamed_question_tool() -> None:
    asks = question_tool(name="ask_human", description="Ask the human.")
    assert asks.definition.name == "ask_human"
    assert asks.definition.description == "Ask the human."

    async def answer(call: ToolCall, question: Question) -> Any:
        await trio.lowlevel.checkpoint()
        return "yes"

    provider = ScriptedProvider(_asks({"question": "Sure?"}, name="ask_human"), Reply("ok"))
    async with open_runtime() as runtime:
        agent = await runtime.agent(provider, tools=[asks], answer=answer)
        result = await agent.generate("go")
    assert _tool_message(result.messages).content == "yes"
    assert CANCELLED.startswith("cancelled")
