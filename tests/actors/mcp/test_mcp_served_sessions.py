"""An agent served over MCP keeps its clients apart (issue 24, item 6): by default every call
is a run on a fresh conversation; with ``session_history=True`` one conversation per MCP
session, freed when the session ends -- never one shared by two sessions. Driven by the SDK's
own client, over streamable HTTP on loopback and in process. Real clock: these wait on
sockets; every wait is bounded by ``fail_after``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from actors import Agent, ToolRegistry, open_runtime, tool
from actors.mcp import mcp_server, serve_http
from actors.testing import Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.errors import ConfigError
from protocols.messages import Message, Role, ToolCall

mcp = pytest.importorskip("mcp")

WITHIN = 60
SECRET = "the vault code is 7431"


def said(prompt: Sequence[Message]) -> list[str]:
    """What the users said in a prompt, in order."""
    return [m.content for m in prompt if m.role is Role.USER]


def children(runtime: Any) -> int:
    """The actors running under the runtime (each conversation is one)."""
    return len(runtime.statistics().children)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_one_clients_words_never_reach_another_clients_run(mode: str) -> None:
    """The regression: client B's run reached the model with client A's secret in its
    history, because every call ran in the served agent's one conversation. (``auto``
    speaks MCP 2026-07-28, ``legacy`` the 2025 handshake with its sessions.)"""
    provider = ScriptedProvider("Noted.", "I know no code.", "Still nothing.")
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, name="keeper")
            async with trio.open_nursery() as nursery:
                url = await nursery.start(functools.partial(serve_http, mcp_server(agent)))
                async with mcp.Client(url, mode=mode) as alice, mcp.Client(url, mode=mode) as bob:
                    await alice.call_tool("keeper", {"prompt": SECRET})
                    answer = await bob.call_tool("keeper", {"prompt": "What is the code?"})
                    # Nor does a second call of the same client see its first: by default
                    # each call is a conversation of its own.
                    await alice.call_tool("keeper", {"prompt": "And the code?"})
                nursery.cancel_scope.cancel()
            kept = await agent.conversation.messages()
    first, second, third = (call.messages for call in provider.calls)
    assert not any(SECRET in m.content for m in (*second, *third))
    assert said(first) == [SECRET]
    assert said(second) == ["What is the code?"]
    assert said(third) == ["And the code?"]
    assert answer.content[0].text == "I know no code."
    assert kept == ()  # the served agent's own conversation is never written to


async def test_with_session_history_each_session_keeps_its_own_conversation() -> None:
    provider = ScriptedProvider("Noted.", "I know no code.", "It is 7431.")
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, name="keeper")
            server = mcp_server(agent, session_history=True)
            async with trio.open_nursery() as nursery:
                url = await nursery.start(functools.partial(serve_http, server))
                async with (
                    mcp.Client(url, mode="legacy") as alice,
                    mcp.Client(url, mode="legacy") as bob,
                ):
                    await alice.call_tool("keeper", {"prompt": SECRET})
                    await bob.call_tool("keeper", {"prompt": "What is the code?"})
                    answer = await alice.call_tool("keeper", {"prompt": "And the code?"})
                nursery.cancel_scope.cancel()
            kept = await agent.conversation.messages()
    first, second, third = (call.messages for call in provider.calls)
    assert said(first) == [SECRET]
    assert not any(SECRET in m.content for m in second)
    assert said(second) == ["What is the code?"]
    # Alice's session remembers her first call, and nothing of Bob's.
    assert [(m.role, m.content) for m in third] == [
        (Role.USER, SECRET),
        (Role.ASSISTANT, "Noted."),
        (Role.USER, "And the code?"),
    ]
    assert answer.content[0].text == "It is 7431."
    assert kept == ()


async def test_a_sessions_conversation_is_freed_when_the_session_ends() -> None:
    """Many sessions, some open at once: each one's conversation is made at its first call
    and stopped when the session ends, so nothing grows with the number of sessions served."""
    sessions, at_once = 24, 4
    provider = ScriptedProvider(*(f"answer {n}" for n in range(2 * sessions)))
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, name="keeper")
            server = mcp_server(agent, session_history=True)
            baseline = children(runtime)
            for group in range(sessions // at_once):
                leave = trio.Event()
                async with trio.open_nursery() as nursery:
                    clients = [mcp.Client(server, mode="legacy") for _ in range(at_once)]
                    for client in clients:
                        await nursery.start(_hold, client, leave)
                    for number, client in enumerate(clients):
                        await client.call_tool("keeper", {"prompt": f"{group}.{number} first"})
                        await client.call_tool("keeper", {"prompt": f"{group}.{number} second"})
                    # One conversation per open session, and no more.
                    assert children(runtime) == baseline + at_once
                    leave.set()  # the clients leave: their sessions end
                assert children(runtime) == baseline
    # Every second call saw its own session's first, and only that.
    for index in range(1, 2 * sessions, 2):
        first, second = said(provider.calls[index].messages)
        assert second.endswith(" second")
        assert first == second.replace(" second", " first")


async def _hold(
    client: Any, leave: trio.Event, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Keep ``client`` open (its session too) until ``leave`` is set."""
    async with client:
        task_status.started()
        await leave.wait()


async def test_a_cut_call_leaves_its_partial_in_its_sessions_conversation() -> None:
    started = trio.Event()

    @tool
    async def block() -> str:
        """Never finishes."""
        started.set()
        await trio.sleep_forever()
        return "unreachable"

    provider = ScriptedProvider(
        Reply(text="Let me check.", calls=[ToolCall(id="c1", name="block")]), "Sorry."
    )
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, tools=[block], name="checker")
            server = mcp_server(agent, session_history=True)
            async with mcp.Client(server, mode="legacy") as client:
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as calls:
                        calls.start_soon(
                            functools.partial(client.call_tool, "checker", {"prompt": "check"})
                        )
                        await started.wait()
                        scope.cancel()
                answer = await client.call_tool("checker", {"prompt": "again"})
    assert answer.content[0].text == "Sorry."
    user, assistant, result, again = provider.calls[1].messages
    assert (user.role, user.content, again.content) == (Role.USER, "check", "again")
    assert assistant.content == "Let me check."
    assert [c.name for c in assistant.calls] == ["block"]
    assert (result.role, result.content) == (Role.TOOL, INTERRUPTED)


@pytest.mark.parametrize("session_history", [False, True])
async def test_calls_of_different_sessions_never_wait_for_each_other(session_history: bool) -> None:
    """A call waits in a tool until a call of another session has been answered: were
    served calls taken one at a time, the first would wait for ever."""
    waiting, answered = trio.Event(), trio.Event()

    @tool
    async def wait_for_the_other() -> str:
        """Wait."""
        waiting.set()
        await answered.wait()
        return "done waiting"

    provider = ScriptedProvider(
        Reply(calls=[ToolCall(id="w1", name="wait_for_the_other")]), "Quick.", "Waited."
    )
    slow_answers: list[str] = []
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, tools=[wait_for_the_other], name="agent")
            server = mcp_server(agent, session_history=session_history)
            async with (
                mcp.Client(server, mode="legacy") as slow,
                mcp.Client(server, mode="legacy") as quick,
            ):

                async def slow_call() -> None:
                    answer = await slow.call_tool("agent", {"prompt": "slow"})
                    slow_answers.append(answer.content[0].text)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(slow_call)
                    await waiting.wait()  # the slow call's run is in its tool
                    answer = await quick.call_tool("agent", {"prompt": "quick"})
                    answered.set()
    assert answer.content[0].text == "Quick."
    assert slow_answers == ["Waited."]


def test_session_history_applies_to_an_agent_only() -> None:
    with pytest.raises(ConfigError, match="session_history"):
        mcp_server(ToolRegistry(), session_history=True)


async def test_a_call_whose_session_cannot_be_told_gets_a_fresh_conversation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Were an SDK version not to show a call's connection, ``session_history`` could not
    keep a conversation per session: the call then runs on a fresh one (never on a shared
    one), and the log says so once."""
    provider = ScriptedProvider("Noted.", "I know no code.")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, name="keeper")
        handler = mcp_server(agent, session_history=True).get_request_handler("tools/call")
        for prompt in (SECRET, "What is the code?"):
            params = handler.params_type(name="keeper", arguments={"prompt": prompt})
            answer = await handler.handler(object(), params)  # a context without a session
            assert not answer.is_error
    assert said(provider.calls[1].messages) == ["What is the code?"]
    warnings = [r for r in caplog.records if "fresh conversation" in r.getMessage()]
    assert len(warnings) == 1


async def test_closing_the_agent_waits_for_its_served_runs() -> None:
    in_tool, release = trio.Event(), trio.Event()

    @tool
    async def hold() -> str:
        """Hold until released."""
        in_tool.set()
        await release.wait()
        return "released"

    provider = ScriptedProvider(Reply(calls=[ToolCall("h1", "hold", {})]), "Done.")
    answers: list[str] = []
    closed = trio.Event()
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, tools=[hold], name="agent")
            async with mcp.Client(mcp_server(agent)) as client, trio.open_nursery() as nursery:

                async def call() -> None:
                    answer = await client.call_tool("agent", {"prompt": "hold"})
                    answers.append(answer.content[0].text)

                async def close() -> None:
                    await agent.aclose()
                    closed.set()

                nursery.start_soon(call)
                await in_tool.wait()
                nursery.start_soon(close)
                await trio.testing.wait_all_tasks_blocked()
                assert not closed.is_set(), "aclose() did not wait for the served run"
                refused = await client.call_tool("agent", {"prompt": "one more"})
                assert refused.is_error
                assert "closed" in refused.content[0].text
                release.set()
                await closed.wait()
    assert answers == ["Done."]
