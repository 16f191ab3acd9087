"""Runs on a history of the caller's, and forks (issue 24, item 4).

An agent keeps one conversation. ``generate(..., history=h)`` runs on ``h`` instead -- the
agent's conversation is neither read nor changed, ``h + result.messages`` is the next call's
history -- and ``agent.fork()`` is a new agent with the same configuration and a conversation
of its own. (Cuts at random points on a history are in test_agent_cancel_property.py.)

Every test runs over ``ScriptedProvider``; those that wait use trio's autojump clock.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from actors import Abort, ActorStopped, Agent, AgentBusy, Conversation, open_runtime, tool
from actors.agent import AgentEvent
from actors.testing import Hang, Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.errors import ProviderError, ValidationError
from protocols.history import check_history
from protocols.messages import Message, Role, StopReason, ToolCall


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def children(runtime: Any) -> int:
    """The actors running under the runtime (each agent and each conversation is one)."""
    return len(runtime.statistics().children)


def shape(messages: Sequence[Message]) -> list[tuple[str, str]]:
    return [(m.role.value, m.content) for m in messages]


PAST = (
    Message.user("My name is Ada."),
    Message.assistant("Hello Ada.", calls=[ToolCall("p1", "add", {"a": 1, "b": 1})]),
    Message.tool("p1", "add", "2"),
    Message.assistant("Nice to meet you."),
)


async def test_a_run_on_a_history_goes_on_from_it_and_changes_nothing_else() -> None:
    provider = ScriptedProvider(
        "Mine.", Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]), "42, Ada.", "Ada."
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, system="Be terse.", tools=[add])
        await agent.generate("This is the agent's own conversation.")
        own = await agent.conversation.messages()
        baseline = children(runtime)

        result = await agent.generate("What is 19 + 23?", history=PAST)
        # The prompt: the agent's system prompt, the history, then the run's own messages.
        sent = provider.calls[1].messages
        assert shape(sent[:1]) == [("system", "Be terse.")]
        assert sent[1 : 1 + len(PAST)] == PAST
        assert shape(sent[1 + len(PAST) :]) == [("user", "What is 19 + 23?")]
        # What the run added, its input first; the history continues with it.
        assert shape(result.messages) == [
            ("user", "What is 19 + 23?"),
            ("assistant", ""),
            ("tool", "42"),
            ("assistant", "42, Ada."),
        ]
        assert result.content == "42, Ada."
        after = check_history([*PAST, *result.messages])
        follow = await agent.generate("And my name?", history=after)
        assert provider.calls[3].messages[1:-1] == after
        assert follow.messages[0].content == "And my name?"
        # The agent's own conversation was neither read nor changed; nothing is left behind.
        assert await agent.conversation.messages() == own
        assert not any(m in own for m in sent)
        assert children(runtime) == baseline
        assert agent.statistics()["runs"] == 3


async def test_the_agents_system_prompt_applies_and_a_system_message_in_the_history_stays() -> None:
    # A system message of the history is kept in place; every wire merges system messages
    # into one system text, the agent's first (docs/context.md).
    provider = ScriptedProvider("ok")
    history = (Message.system("Answer in French."), Message.user("hi"), Message.assistant("salut"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, system="Be terse.")
        result = await agent.generate("again", history=history)
    assert shape(provider.calls[0].messages) == [
        ("system", "Be terse."),
        ("system", "Answer in French."),
        ("user", "hi"),
        ("assistant", "salut"),
        ("user", "again"),
    ]
    assert shape(result.messages) == [("user", "again"), ("assistant", "ok")]


@pytest.mark.parametrize(
    ("history", "says"),
    [
        ("hello", "history must be a sequence of messages, not a str"),
        (Message.user("hello"), "history must be a sequence of messages, not a Message"),
        (42, "history must be a sequence of messages, not int"),
        ([Message.user("a"), "b"], r"history\[1\] must be a Message, not str"),
        (
            [Message.tool("c1", "add", "2")],
            r"history\[0\] answers the call 'c1', which is no open call",
        ),
        (
            [Message.assistant(calls=[ToolCall("c1", "add", {})])],
            r"history\[0\] made calls that have no result: 'c1'",
        ),
        (
            [
                Message.assistant(calls=[ToolCall("c1", "add", {}), ToolCall("c2", "add", {})]),
                Message.tool("c1", "add", "1"),
                Message.user("and?"),
            ],
            r"history\[0\] made calls that have no result before history\[2\]: 'c2'",
        ),
        (
            [Message.user("a", id="same"), Message.user("b", id="same")],
            r"history\[1\] has the id 'same' of an earlier message",
        ),
    ],
)
async def test_a_history_that_is_not_well_formed_is_refused_before_anything_runs(
    history: Any, says: str
) -> None:
    provider = ScriptedProvider("never")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        with pytest.raises(ValidationError, match=says):
            await agent.generate("go", history=history)
        with pytest.raises(ValidationError, match=says):
            agent.stream("go", history=history)  # refused when the stream is made
        with pytest.raises(ValidationError, match=says):
            await agent.fork(history=history)
        assert agent.statistics()["runs"] == 0
    assert provider.calls == []


async def test_an_input_message_already_in_the_history_is_refused() -> None:
    again = Message.user("once", id="m1")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider("never"))
        with pytest.raises(ValidationError, match="input message 0 has the id 'm1'"):
            await agent.generate([again], history=[again])


async def test_a_cut_run_on_a_history_leaves_it_well_formed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()

    @tool
    async def nap() -> str:
        """Sleep."""
        started.set()
        await trio.sleep_forever()
        return "rested"

    provider = ScriptedProvider(Reply("Napping.", calls=[ToolCall("n1", "nap", {})]))
    stop = Abort()
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        agent = await Agent.start(runtime, provider, tools=[nap])

        async def press_stop() -> None:
            await started.wait()
            stop.cancel("the user pressed stop")

        nursery.start_soon(press_stop)
        result = await agent.generate("nap", history=PAST, abort=[stop])
        assert await agent.conversation.messages() == ()
    assert (result.stop, result.partial) == (StopReason.CANCELLED, True)
    assert shape(result.messages) == [
        ("user", "nap"),
        ("assistant", "Napping."),
        ("tool", INTERRUPTED),
    ]
    check_history([*PAST, *result.messages])


async def test_runs_on_histories_wait_their_turn_like_any_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Hang("a long"), "second")
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        agent = await Agent.start(runtime, provider)
        nursery.start_soon(agent.generate, "first: this one hangs")
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(AgentBusy):
            await agent.generate("now", history=PAST, if_busy="reject")
        nursery.start_soon(functools.partial(agent.generate, "second", history=PAST))
        await trio.testing.wait_all_tasks_blocked()
        assert agent.statistics()["queued"] == 1  # behind the first
        assert len(provider.calls) == 1
        agent.abort("enough")
        await trio.testing.wait_all_tasks_blocked()
    # The queued run had its turn after the first, on its history.
    assert shape(provider.calls[1].messages) == [*shape(PAST), ("user", "second")]


async def test_a_withdrawn_run_on_a_history_makes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider("never"))
        baseline = children(runtime)
        stop = Abort()
        stop.cancel("before it began")
        result = await agent.generate("go", history=PAST, abort=[stop])
        assert (result.stop, result.messages) == (StopReason.CANCELLED, ())
        assert children(runtime) == baseline


class Summaries:
    """A summarizer that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: Sequence[Message]) -> str:
        self.calls += 1
        return f"summary {self.calls}"


async def test_a_history_is_never_compacted_and_the_window_still_guards() -> None:
    # The caller owns a history: the agent never folds it (its own conversation would be
    # compacted), and a prompt over the window is still never sent.
    summaries = Summaries()
    provider = ScriptedProvider("never")
    long = (Message.user("x" * 800), Message.assistant("y" * 800))
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=1)
        agent = await Agent.start(runtime, provider, conversation=conversation, window=200)
        with pytest.raises(ProviderError) as refused:
            await agent.generate("and now?", history=long)
        assert refused.value.code == "context_overflow"
        assert summaries.calls == 0
        assert provider.calls == []
        assert await conversation.messages() == ()


# -- fork() ------------------------------------------------------------------------------------


async def test_a_fork_has_the_configuration_and_a_conversation_of_its_own() -> None:
    events: list[AgentEvent] = []
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "add", {"a": 2, "b": 3})]), "5.", "Agent.", "Fork."
    )
    summaries = Summaries()
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=2)
        agent = await Agent.start(
            runtime,
            provider,
            conversation=conversation,
            system="Be terse.",
            tools=[add],
            limit=3,
            deps={"db": "x"},
            window=10_000,
            on=[events.append],
        )
        await agent.generate("2 + 3?")
        baseline = children(runtime)
        fork = await agent.fork(name="forked")
        assert children(runtime) == baseline + 2  # the fork and its conversation
        assert fork.name == "forked"
        assert (fork.system, fork.registry, fork.defaults, fork.window, fork.provider) == (
            agent.system,
            agent.registry,
            agent.defaults,
            agent.window,
            agent.provider,
        )
        assert fork.conversation is not agent.conversation
        assert fork.conversation.summarizable  # it compacts as the agent's does
        assert await fork.conversation.messages() == ()

        await agent.generate("agent only")
        await fork.generate("fork only")
        assert said(provider.calls[-1].messages) == ["fork only"]
        assert "fork only" not in said(await agent.conversation.messages())
        assert shape(provider.calls[-1].messages[:1]) == [("system", "Be terse.")]
        assert [e.run for e in events if e.kind == "finish"] == [1, 2, 1]  # its own count
        assert (agent.statistics()["runs"], fork.statistics()["runs"]) == (2, 1)

        await fork.aclose()
        assert fork.closed
        assert children(runtime) == baseline
        with pytest.raises(ActorStopped):
            await fork.generate("closed")


def said(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages if m.role is Role.USER]


async def test_a_fork_can_start_from_a_history() -> None:
    provider = ScriptedProvider("Ada.")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        async with await agent.fork(history=PAST) as fork:
            result = await fork.generate("My name?")
            assert await fork.conversation.messages() == (*PAST, *result.messages)
    assert provider.calls[0].messages[:-1] == PAST


async def test_a_fork_runs_side_by_side_with_its_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The agent's run waits in a tool until the fork has answered: were the fork's runs
    # queued behind the agent's, it would wait for ever.
    answered = trio.Event()

    @tool
    async def wait_for_the_fork() -> str:
        """Wait for the fork's answer."""
        await answered.wait()
        return "it answered"

    provider = ScriptedProvider(
        Reply(calls=[ToolCall("w", "wait_for_the_fork", {})]), "Fork here.", "Done."
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[wait_for_the_fork])
        fork = await agent.fork()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.generate, "wait")
                await trio.testing.wait_all_tasks_blocked()  # in its tool
                assert (await fork.generate("answer")).content == "Fork here."
                answered.set()
        assert (await agent.conversation.messages())[-1].content == "Done."
        await fork.aclose()


async def test_a_closed_agent_makes_no_fork() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider())
        await agent.aclose()
        with pytest.raises(ActorStopped):
            await agent.fork()
