"""A2AAgent against a real A2A server built with the official a2a-sdk, in a subprocess
(``tests/fixtures/a2a/a2a_sdk_agent.py``): its answer streams into our run as a subagent's, a
cut run cancels the remote task, input-required asks our approver, a killed server or a lost
connection gives a clear outcome (and a killed client leaves the server serving); the same
client against our own relay's A2A server, an approval going across; and the client side of
the sans-IO codec (``protocols.serve.a2a``).

These talk to another process, so they run on the real clock; every wait is for an event (a
line the server prints, a chunk of our stream), bounded by ``fail_after``.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import pathlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from actors import Agent, RunStep, TokenBudget, ToolRegistry, open_runtime, tool
from actors.a2a import A2AAgent, A2AError
from actors.agent import AgentRun
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue
from actors.relay import RelayAgents, RelayJobs, RelayServer, serve
from actors.testing import Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.authority import Authority, Rule, Verdict
from protocols.egress import EgressPolicy
from protocols.errors import ConfigError, ProtocolError, SizeLimitError, ValidationError
from protocols.live import RunEvent
from protocols.messages import AgentResult, ToolCall, ToolFailure, ToolSuccess
from protocols.serve.a2a import (
    RpcError,
    TaskState,
    agent_card,
    approvals_of,
    decode_rpc,
)
from protocols.serve.a2a_client import (
    CLIENT_HEADERS,
    RemoteTask,
    Taken,
    answer_parts,
    read_card,
    read_response,
    send_request,
    task_request,
)

pytest.importorskip("a2a")

SERVER = pathlib.Path(__file__).parents[1] / "fixtures" / "a2a" / "a2a_sdk_agent.py"
#: The most any one step may take (a subprocess starting, a task answering).
WITHIN = 60
LOOPBACK = EgressPolicy(private=["127.0.0.0/8"])
SECRET = "Bearer s3cret-token"


class Server:
    """The fixture server's process, and the lines it printed so far."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._changed = trio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def port(self) -> int:
        return int(self.lines[0].split()[1])

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for data in self.process.stdout:
            buffer += data
            *done, buffer = buffer.split(b"\n")
            self.lines += [line.decode() for line in done]
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for(self, *words: str) -> str:
        """The first line that starts with ``words`` (waiting for it to be printed)."""
        while True:
            for line in self.lines:
                if line.split()[: len(words)] == list(words):
                    return line
            assert self.process.poll() is None, "the server exited"
            await self._changed.wait()

    def said(self, *words: str) -> bool:
        return any(line.split()[: len(words)] == list(words) for line in self.lines)


@asynccontextmanager
async def a2a_server(*args: str) -> AsyncIterator[Server]:
    process = await trio.lowlevel.open_process(
        [sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    server = Server(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.read)
            with trio.fail_after(WITHIN):
                await server.wait_for("PORT")
            yield server
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.move_on_after(WITHIN):
            await process.wait()


class Proxy:
    """A TCP proxy to ``port`` whose connections :meth:`cut` breaks (new ones go through);
    ``sent`` is what its clients sent."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self.sent = bytearray()
        #: New connections wait for it before they reach the server.
        self.gate = trio.Event()
        self.gate.set()
        self._scopes: set[trio.CancelScope] = set()

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self.handle, listeners)

    async def handle(self, client: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            await self.gate.wait()
            async with (
                client,
                await trio.open_tcp_stream("127.0.0.1", self.target) as upstream,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(self.pump, client, upstream, self.sent)
                nursery.start_soon(self.pump, upstream, client, bytearray())
        self._scopes.discard(scope)

    @staticmethod
    async def pump(source: trio.SocketStream, sink: trio.SocketStream, seen: bytearray) -> None:
        try:
            async for data in source:
                seen += data
                await sink.send_all(data)
            await sink.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # (the other side went away: the connection ends)

    def cut(self) -> None:
        for scope in self._scopes:
            scope.cancel()


def ask(text: str, call_id: str = "c1", tool: str = "tester") -> ToolCall:
    return ToolCall(call_id, tool, {"input": text})


def answers(result: AgentResult) -> dict[str, str]:
    return {m.tool_call_id or "": m.content for m in result.messages if m.role.value == "tool"}


async def log_of(runtime: Any, run_id: str) -> list[RunEvent]:
    with trio.fail_after(WITHIN):
        return [event async for event in runtime.watch(run_id)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def collect(run: AgentRun, chunks: list[Any]) -> None:
    async for chunk in run:
        chunks.append(chunk)


# -- a remote agent as a tool ------------------------------------------------------------------


async def test_the_answer_streams_into_our_run_as_a_subagents() -> None:
    events: list[Any] = []
    with trio.fail_after(WITHIN):
        async with (
            a2a_server() as server,
            open_runtime() as runtime,
            A2AAgent(server.url, egress=LOOPBACK) as remote,
        ):
            tool = remote.as_tool()
            assert tool.definition.name == "tester"
            assert "Greets whoever writes to it." in tool.definition.description
            assert "greet: Greets a name." in tool.definition.description
            lead = await Agent.start(
                runtime,
                ScriptedProvider(Reply(calls=[ask("world")]), Reply("done")),
                name="lead",
                tools=[tool],
                on=[events.append],
            )
            chunks: list[Any] = []
            async with lead.stream("greet the world") as run:
                await collect(run, chunks)
            result = run.result
            lead_log = await log_of(runtime, result.run_id)
            start = next(e for e in lead_log if e.kind == "subagent_started")
            child_log = await log_of(runtime, start.data["run_id"])
    assert answers(result) == {"c1": "Hello, world!"}
    assert (result.content, result.partial) == ("done", False)
    hop = (RunStep(result.run_id, "c1", "tester"),)
    child = [c for c in chunks if c.path == hop]
    assert "".join(c.text for c in child if c.kind == "content") == "Hello, world!"
    assert len([c for c in child if c.kind == "content"]) == 3  # streamed, chunk by chunk
    child_id = start.data["run_id"]
    assert child_id.startswith("subagent:c1:")
    assert {c.run_id for c in child} == {child_id}
    kinds = [(c.kind, c.path) for c in chunks]
    assert kinds.index(("tool_call", ())) < kinds.index(("content", hop))
    assert kinds.index(("content", hop)) < kinds.index(("tool_result", ()))
    # The caller's log names the child run; the child's own log holds its stream, whose seqs
    # the chunks carry.
    finished = next(e for e in lead_log if e.kind == "subagent_finished")
    assert (start.data["agent"], finished.data["status"]) == ("tester", "complete")
    assert [e.kind for e in child_log] == ["started", "content", "content", "content", "finished"]
    assert child_log[-1].data["result"].content == "Hello, world!"
    assert [c.seq for c in child if c.kind == "content"] == [2, 3, 4]
    # The caller's listeners: subagent_start, the remote run's start and finish, subagent_finish.
    assert [e.kind for e in events if e.path == hop] == ["start", "finish"]
    finish = next(e for e in events if e.kind == "subagent_finish")
    assert (finish.child, finish.status, finish.estimated) == (child_id, "complete", True)
    assert finish.usage is not None
    assert finish.usage.completion == 4


@pytest.mark.parametrize("how", ["abort", "budget"])
async def test_a_cut_run_cancels_the_remote_task(how: str) -> None:
    events: list[Any] = []
    with trio.fail_after(WITHIN):
        async with (
            a2a_server() as server,
            open_runtime() as runtime,
            A2AAgent(server.url) as remote,
        ):
            lead = await Agent.start(
                runtime,
                ScriptedProvider(Reply(calls=[ask("hang on")]), Reply("never")),
                tools=[remote.as_tool()],
                on=[events.append],
            )
            budget = TokenBudget(max=2) if how == "budget" else None
            async with lead.stream("wait", budget=budget) as run:
                async for chunk in run:
                    if chunk.path and chunk.kind == "content" and how == "abort":
                        assert chunk.text == "working..."
                        run.abort("enough")
            result = run.result
            task = (await server.wait_for("EXECUTE")).split()[1]
            await server.wait_for("CANCEL", task)  # the remote saw the cancel ...
            await server.wait_for("STOPPED", task)  # ... and cut the task's work
            finish = next(e for e in events if e.kind == "subagent_finish")
            child_log = await log_of(runtime, finish.child or "")
    expected = "cancelled" if how == "abort" else "budget"
    assert (result.stop.value, result.partial) == (expected, True)
    assert answers(result) == {"c1": INTERRUPTED}
    assert finish.status == expected
    assert child_log[-1].kind == ("cancelled" if how == "abort" else "finished")
    assert child_log[-1].data["result"].partial


async def test_a_server_killed_mid_task_is_a_clear_failure_and_the_run_goes_on() -> None:
    with trio.fail_after(WITHIN):
        async with (
            a2a_server() as server,
            open_runtime() as runtime,
            A2AAgent(server.url) as remote,
        ):
            lead = await Agent.start(
                runtime,
                ScriptedProvider(Reply(calls=[ask("hang on")]), Reply("carried on")),
                tools=[remote.as_tool()],
            )
            async with lead.stream("wait") as run:
                async for chunk in run:
                    if chunk.path and chunk.kind == "content":
                        server.process.kill()  # SIGKILL, mid-task
            result = run.result
    assert (result.content, result.partial) == ("carried on", False)
    (failure,) = answers(result).values()
    assert "the remote agent 'tester'" in failure
    assert "resubscribing failed" in failure
    assert "is unknown" in failure


@pytest.mark.parametrize("task", ["going on", "ended"])
async def test_a_lost_connection_is_resubscribed_once(task: str) -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server() as server, open_runtime() as runtime, trio.open_nursery() as bg:
            proxy = Proxy(server.port)
            await bg.start(proxy.serve)
            url = f"http://127.0.0.1:{proxy.port}/"
            async with A2AAgent(url, endpoint=url) as remote:
                lead = await Agent.start(
                    runtime,
                    ScriptedProvider(Reply(calls=[ask("slow")]), Reply("done")),
                    tools=[remote.as_tool()],
                )
                chunks: list[Any] = []
                async with lead.stream("go") as run, trio.open_nursery() as nursery:
                    async for chunk in run:
                        chunks.append(chunk)
                        if chunk.path and chunk.text == "Hello, ":
                            if task == "ended":  # the resubscription comes once it has ended
                                proxy.gate = trio.Event()
                                nursery.start_soon(open_when_done, server, proxy.gate)
                            proxy.cut()
                result = run.result
            bg.cancel_scope.cancel()
    assert answers(result) == {"c1": "Hello, slow!"}
    assert "".join(c.text for c in chunks if c.path and c.kind == "content") == "Hello, slow!"
    assert proxy.sent.count(b'"method":"SubscribeToTask"') == 1
    if task == "ended":  # refused (the task has ended): read with GetTask instead
        assert proxy.sent.count(b'"method":"GetTask"') == 1


async def open_when_done(server: Server, gate: trio.Event) -> None:
    await server.wait_for("DONE")
    gate.set()


async def test_an_agent_that_does_not_stream_is_sent_a_blocking_message() -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server("--no-streaming") as server, A2AAgent(server.url) as remote:
            assert not remote.streaming
            (result,) = await ToolRegistry([remote.as_tool()]).execute([ask("world")])
    assert result == ToolSuccess("c1", "tester", "Hello, world!")


async def test_input_required_asks_our_approver_and_goes_on_with_its_answer() -> None:
    asked: list[tuple[ToolCall, Verdict]] = []

    async def approve(call: ToolCall, verdict: Verdict) -> tuple[bool, str]:
        asked.append((call, verdict))
        await trio.lowlevel.checkpoint()
        return True, "go ahead"

    with trio.fail_after(WITHIN):
        async with (
            a2a_server() as server,
            open_runtime() as runtime,
            A2AAgent(server.url) as remote,
        ):
            lead = await Agent.start(
                runtime,
                ScriptedProvider(Reply(calls=[ask("ask first")]), Reply("done")),
                tools=[remote.as_tool()],
                approve=approve,
            )
            result = await lead.generate("go")
            lead_log = await log_of(runtime, result.run_id)
            executed = [line for line in server.lines if line.startswith("EXECUTE")]
    assert answers(result) == {"c1": "You said: approved: go ahead"}
    ((call, verdict),) = asked
    assert call == ask("ask first")
    assert verdict.decision == "ask"
    assert "Approve the call to 'delete'?" in verdict.reason
    requested = next(e for e in lead_log if e.kind == "approval_requested")
    answered = next(e for e in lead_log if e.kind == "approval_answered")
    assert (requested.data["call_id"], answered.data["allow"]) == ("c1", True)
    assert len(executed) == 2
    assert executed[0].split()[1] == executed[1].split()[1]


async def test_input_required_without_an_approver_fails_and_cancels_the_task() -> None:
    with trio.fail_after(WITHIN):
        async with (
            a2a_server() as server,
            open_runtime() as runtime,
            A2AAgent(server.url) as remote,
        ):
            lead = await Agent.start(
                runtime,
                ScriptedProvider(Reply(calls=[ask("ask first")]), Reply("done")),
                tools=[remote.as_tool()],
            )
            result = await lead.generate("go")
            task = (await server.wait_for("EXECUTE")).split()[1]
            await server.wait_for("CANCEL", task)
    (failure,) = answers(result).values()
    assert "asked for input (Approve the call to 'delete'?)" in failure
    assert "no approver" in failure


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("fail", "the task failed: the disk is full"),
        ("reject", "the task was rejected: the disk is full"),
    ],
)
async def test_a_failed_or_rejected_task_is_a_failed_result(text: str, said: str) -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server() as server, A2AAgent(server.url) as remote:
            registry = ToolRegistry([remote.as_tool()])
            (result,) = await registry.execute([ask(text)])  # (outside any agent run)
    assert isinstance(result, ToolFailure)
    assert result.error.startswith("the remote agent 'tester' (http://127.0.0.1:")
    assert result.error.endswith(said)


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ({"max_event_bytes": 10_000}, "exceeds the limit of 10000 bytes"),
        ({"max_answer_chars": 1000}, "the answer exceeds the limit of 1000 characters"),
    ],
)
async def test_what_the_remote_sends_is_size_limited(limits: dict[str, int], said: str) -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server() as server, A2AAgent(server.url, **limits) as remote:  # type: ignore[arg-type]
            (result,) = await ToolRegistry([remote.as_tool()]).execute([ask("big")])
    assert isinstance(result, ToolFailure)
    assert said in result.error


#: Our client in a process of its own, calling the remote agent of URL ``sys.argv[1]`` as a tool.
CLIENT = """
import sys, trio
from actors import ToolRegistry
from actors.a2a import A2AAgent
from protocols.messages import ToolCall

async def main() -> None:
    async with A2AAgent(sys.argv[1]) as remote:
        call = ToolCall("c1", "tester", {"input": "hang"})
        await ToolRegistry([remote.as_tool()]).execute([call])

trio.run(main)
"""


async def test_a_client_killed_mid_task_leaves_the_server_serving() -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server() as server:
            client = await trio.lowlevel.open_process(
                [sys.executable, "-c", CLIENT, server.url],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            task = (await server.wait_for("EXECUTE")).split()[1]
            client.kill()  # SIGKILL: no CancelTask can come
            await client.wait()
            async with A2AAgent(server.url) as remote:
                (answer,) = await ToolRegistry([remote.as_tool()]).execute([ask("world")])
                state = await _state_of(remote, task)
    assert answer == ToolSuccess("c1", "tester", "Hello, world!")
    assert state == "TASK_STATE_WORKING"  # the orphaned task goes on, as the SDK keeps it
    assert not server.said("CANCEL")


async def _state_of(remote: A2AAgent, task_id: str) -> str:
    body = task_request("g", "GetTask", task_id)
    async with httpx.AsyncClient() as client:
        answer = await client.post(remote.endpoint, content=body, headers=CLIENT_HEADERS)
    result = read_response(answer.content)
    assert isinstance(result, dict)
    return str(result["status"]["state"])


# -- against our own relay's A2A server -------------------------------------------------------

RELAY_TOKEN = "relay-token-for-a2a-client-0123"


@tool
async def refund(cents: int) -> str:
    """Refund the customer."""
    return f"refunded {cents}"


@asynccontextmanager
async def own_relay(registry: AgentRegistry) -> AsyncIterator[str]:
    """Our relay serving ``registry``'s agents over A2A (their tasks durable jobs); its URL."""
    store = MemoryRunStore()
    async with (
        open_runtime() as runtime,
        open_job_queue(store, registry, runtime, concurrency=2, poll=0.05),
        trio.open_nursery() as nursery,
    ):
        app = RelayServer(
            ScriptedProvider(),
            tokens=[RELAY_TOKEN],
            agents=RelayAgents(registry, runtime),
            jobs=RelayJobs(store, agents=registry),
        )
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=None))
        yield url
        nursery.cancel_scope.cancel()


async def test_our_relays_agent_answers_and_its_approval_is_ours() -> None:
    registry = AgentRegistry()
    registry.add(
        "support",
        ScriptedProvider(Reply(calls=[ToolCall("r1", "refund", {"cents": 5})]), Reply("Done.")),
        tools=[refund],
        authority=Authority(rules=(Rule("ask", tools=("refund",), reason="needs a human"),)),
    )
    asked: list[Verdict] = []

    async def approve(call: ToolCall, verdict: Verdict) -> bool:
        asked.append(verdict)
        await trio.lowlevel.checkpoint()
        return True

    bearer = {"Authorization": f"Bearer {RELAY_TOKEN}"}
    with trio.fail_after(WITHIN):
        async with (
            own_relay(registry) as url,
            open_runtime() as runtime,
            A2AAgent(url + "/a2a/support", headers=bearer) as remote,
        ):
            lead = await Agent.start(
                runtime,
                ScriptedProvider(Reply(calls=[ask("Refund me.", tool="support")]), Reply("ok")),
                tools=[remote.as_tool()],
                approve=approve,
            )
            result = await lead.generate("go")
    assert answers(result) == {"c1": "Done."}
    ((verdict),) = asked
    assert "refund (r1): needs a human" in verdict.reason  # the relay's question, ours to answer


# -- errors, limits, secrets -------------------------------------------------------------------


def test_bad_urls_and_settings_are_refused_at_once() -> None:
    for url in ("ftp://example.com/", "not a url", "http://", "http://host:port/"):
        with pytest.raises(ConfigError):
            A2AAgent(url)
    with pytest.raises(ConfigError, match="loopback"):
        A2AAgent("http://127.0.0.1:9/", egress=EgressPolicy())
    with pytest.raises(ConfigError, match="timeout"):
        A2AAgent("http://example.com/", timeout=0)
    with pytest.raises(ConfigError, match="max_card_bytes"):
        A2AAgent("http://example.com/", max_card_bytes=0)
    with pytest.raises(ConfigError, match="A2A-Version"):
        A2AAgent("http://example.com/", headers={"a2a-version": "0.3"})


async def test_no_server_is_a_clear_error_and_a_clear_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{free_port()}/a2a?key=hidden"
    with trio.fail_after(WITHIN):
        with pytest.raises(A2AError) as raised:
            async with A2AAgent(url, headers={"Authorization": SECRET}):
                pass  # pragma: no cover
        remote = A2AAgent(url, name="nobody", headers={"Authorization": SECRET})
        try:
            (result,) = await ToolRegistry([remote.as_tool()]).execute([ask("hi", tool="nobody")])
        finally:
            await remote.aclose()
        (late,) = await ToolRegistry([remote.as_tool()]).execute([ask("hi", tool="nobody")])
    assert raised.value.code == "unreachable"
    assert "could not fetch the agent card from http://127.0.0.1:" in raised.value.message
    assert isinstance(result, ToolFailure)
    assert "the remote agent 'nobody'" in result.error
    assert "could not be reached" in result.error
    assert isinstance(late, ToolFailure)
    assert "closed" in late.error
    shown = [raised.value.message, repr(raised.value), result.error, repr(remote)]
    shown += [record.getMessage() for record in caplog.records]
    assert not [text for text in shown if "s3cret" in text or "hidden" in text]


async def test_a_card_too_large_is_a_clear_error() -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server("--card-padding", "300000") as server:
            with pytest.raises(A2AError, match="exceeds the limit of 262144 bytes") as raised:
                async with A2AAgent(server.url):
                    pass  # pragma: no cover
    assert raised.value.code == "too_large"


async def test_a_card_of_a_0_3_agent_and_a_wrong_path_are_clear_errors() -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server("--v03-only") as server:
            with pytest.raises(A2AError, match=r"no A2A 1.0 JSON-RPC interface.*JSONRPC 0.3"):
                async with A2AAgent(server.url):
                    pass  # pragma: no cover
            with pytest.raises(A2AError, match=r"no agent card at .*: HTTP 404") as missing:
                async with A2AAgent(server.url + "elsewhere/"):
                    pass  # pragma: no cover
            wrong = server.url + "elsewhere/"
            remote = A2AAgent(server.url, name="tester", endpoint=wrong)  # (no card fetched)
            try:
                (result,) = await ToolRegistry([remote.as_tool()]).execute([ask("hi")])
            finally:
                await remote.aclose()
    assert missing.value.status == 404
    assert isinstance(result, ToolFailure)
    assert f"the remote agent 'tester' ({wrong}) answered HTTP 404" in result.error


async def test_headers_never_go_to_an_endpoint_of_another_origin() -> None:
    with trio.fail_after(WITHIN):
        async with a2a_server() as server, trio.open_nursery() as background:
            proxy = Proxy(server.port)
            await background.start(proxy.serve)
            url = f"http://127.0.0.1:{proxy.port}/"
            with pytest.raises(A2AError, match="another origin") as raised:
                async with A2AAgent(url, headers={"X-Api-Key": SECRET}):
                    pass  # pragma: no cover
            async with A2AAgent(url) as remote:  # no headers: the card's endpoint is taken
                assert remote.endpoint == server.url
            background.cancel_scope.cancel()
    assert "s3cret" not in str(raised.value)


# -- the codec's client side (sans-IO) ---------------------------------------------------------


def test_send_request_is_what_our_own_server_reads() -> None:
    first = decode_rpc(send_request("r1", [{"text": "hi"}], message_id="m1"))
    assert not isinstance(first, RpcError)
    assert (first.id, first.method, first.task_id, first.streaming) == (
        "r1",
        "SendStreamingMessage",
        None,
        True,
    )
    assert first.message is not None
    assert first.message.parts[0].text == "hi"
    parts = answer_parts([{"event": "awaiting_input", "calls": [{"call_id": "x1"}]}], False, "no")
    going_on = decode_rpc(
        send_request(2, parts, message_id="m2", task_id="t1", context_id="k1", streaming=False)
    )
    assert not isinstance(going_on, RpcError)
    assert going_on.message is not None
    assert (going_on.method, going_on.task_id, going_on.context_id) == ("SendMessage", "t1", "k1")
    (approval,) = approvals_of(going_on.message)
    assert (approval.call_id, approval.allow, approval.reason) == ("x1", False, "no")
    assert going_on.message.parts[0].text == "denied: no"
    assert answer_parts([], True) == [{"text": "approved"}]
    for method in ("GetTask", "CancelTask", "SubscribeToTask"):
        asked = decode_rpc(task_request(7, method, "t9"))
        assert not isinstance(asked, RpcError)
        assert (asked.method, asked.task_id) == (method, "t9")
    with pytest.raises(ValidationError):
        send_request(1, [], message_id="m")
    with pytest.raises(ValidationError):
        task_request(1, "SendMessage", "t")  # type: ignore[arg-type]


def test_read_response_gives_the_result_or_the_error() -> None:
    assert read_response(b'{"jsonrpc":"2.0","id":1,"result":{"task":{}}}') == {"task": {}}
    refused = read_response('{"jsonrpc":"2.0","id":"a","error":{"code":-32001,"message":"gone"}}')
    assert refused == RpcError("a", -32001, "gone")
    long = read_response('{"id":null,"error":{"code":"x","message":"' + "m" * 900 + '"}}')
    assert isinstance(long, RpcError)
    assert (long.code, len(long.message)) == (0, 500)
    for bad in (b"[]", b'{"result": 3}', b"{", b'{"a":1,"a":2}'):
        with pytest.raises(ProtocolError):
            read_response(bad)


def _dump(card: Any) -> bytes:
    return json.dumps(card).encode()


def test_read_card_takes_the_json_rpc_1_0_interface() -> None:
    ours = agent_card("helper", "Helps.", "/rpc", skills=[{"id": "s", "name": "sum"}])
    card = read_card(_dump(ours), "https://agents.example/base/")
    assert (card.name, card.description, card.url) == (
        "helper",
        "Helps.",
        "https://agents.example/rpc",
    )
    assert (card.streaming, card.skills) == (True, (("sum", "Helps."),))
    mixed = {
        "name": "x",
        "supportedInterfaces": [
            {"url": "https://a.example/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {
                "url": "https://a.example/v03",
                "protocolBinding": "JSONRPC",
                "protocolVersion": "0.3",
            },
            {"url": "https://a.example/v1", "protocolBinding": "JSONRPC"},
        ],
    }
    assert read_card(_dump(mixed), "https://a.example/").url == "https://a.example/v1"
    assert read_card(_dump(mixed), "https://a.example/").streaming is False
    legacy = {"name": "old", "url": "https://a.example/", "protocolVersion": "0.3.0"}
    with pytest.raises(ProtocolError, match=r"no A2A 1.0 JSON-RPC interface .*JSONRPC 0.3.0"):
        read_card(_dump(legacy), "https://a.example/")
    ftp = {"name": "x", "supportedInterfaces": [{"url": "ftp://a/", "protocolBinding": "JSONRPC"}]}
    bad: Sequence[Any] = [[], {"description": "no name"}, ftp]
    for each in bad:
        with pytest.raises(ProtocolError):
            read_card(_dump(each), "https://a.example/")


def _event(result: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": "1", "result": result})


def _task(state: str, artifacts: Sequence[tuple[str, str]] = (), text: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"state": f"TASK_STATE_{state}"}
    if text:
        status["message"] = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    shown = [{"artifactId": a, "parts": [{"text": t}]} for a, t in artifacts]
    return {"id": "t1", "contextId": "k1", "status": status, "artifacts": shown}


def _chunk(text: str, *, append: bool = True, artifact: str = "a") -> str:
    update = {"taskId": "t1", "contextId": "k1", "append": append}
    return _event(
        {
            "artifactUpdate": {
                **update,
                "artifact": {"artifactId": artifact, "parts": [{"text": text}]},
            }
        }
    )


def _status(state: str, text: str = "", data: Any = None) -> str:
    parts: list[Any] = [{"text": text}] if text else []
    parts += [{"data": data}] if data is not None else []
    status: dict[str, Any] = {"state": f"TASK_STATE_{state}"}
    if parts:
        status["message"] = {"messageId": "m", "role": "ROLE_AGENT", "parts": parts}
    return _event({"statusUpdate": {"taskId": "t1", "contextId": "k1", "status": status}})


def test_a_remote_task_shows_each_delta_once_across_a_resubscription() -> None:
    task = RemoteTask()
    assert task.take(_event({"task": _task("SUBMITTED")})) == Taken()
    assert (task.task_id, task.context_id) == ("t1", "k1")
    assert task.take(_status("WORKING", "thinking")) == Taken(progress="thinking")
    assert task.take(_chunk("Hel", append=False)) == Taken(("Hel",))
    assert task.take(_chunk("lo")) == Taken(("lo",))
    # A resubscription opens with the task as it is now: only what is new shows.
    assert task.take(_event({"task": _task("WORKING", [("a", "Hello, w")])})) == Taken((", w",))
    assert task.take(_chunk("orld")) == Taken(("orld",))
    assert task.take(_chunk("notes", append=False, artifact="b")) == Taken(("\n\nnotes",))
    assert task.take(_chunk("Hi", append=False)) == Taken(("Hi",))  # replaced: shown anew
    assert task.take(_status("COMPLETED")) == Taken(final=True)
    assert (task.view.text, task.failure()) == ("Hi\n\nnotes", None)


def test_a_remote_task_reads_whole_answers_errors_and_questions() -> None:
    task = RemoteTask()
    asked = {"event": "awaiting_input", "calls": [{"call_id": "x"}]}
    assert task.take(_event({"task": _task("WORKING")})) == Taken()
    assert task.take(_status("INPUT_REQUIRED", "sure?", asked)) == Taken(final=True)
    assert (task.asked, task.view.message, task.failure()) == ((asked,), "sure?", None)
    refused = task.take('{"jsonrpc":"2.0","id":"1","error":{"code":-32004,"message":"ended"}}')
    assert refused == RpcError("1", -32004, "ended")
    # GetTask's answer is the Task itself; a whole answer ends the exchange once it ended.
    whole = json.dumps({"jsonrpc": "2.0", "id": 2, "result": _task("FAILED", text="disk full")})
    assert task.take(whole, stream=False) == Taken(final=True)
    assert task.failure() == ("task_failed", "the task failed: disk full")
    reply = {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}
    other = RemoteTask()
    assert other.take(json.dumps({"id": 1, "result": reply}), stream=False) == Taken(
        ("hi",), final=True
    )
    assert (other.view.state, other.view.text) == (TaskState.COMPLETED, "hi")
    lost = RemoteTask()
    lost.take(_event({"task": _task("WORKING")}), stream=False)
    assert lost.failure() == (
        "lost",
        "task t1 stopped in TASK_STATE_WORKING: its outcome is unknown",
    )
    nameless = RemoteTask()
    nameless.take(_status("INPUT_REQUIRED", "who?"))
    assert nameless.failure() == ("protocol", "it asked for input without naming its task")
    for state, code in [
        ("REJECTED", "task_rejected"),
        ("CANCELED", "task_cancelled"),
        ("AUTH_REQUIRED", "auth_required"),  # (no question the approver could answer)
    ]:
        ended = RemoteTask()
        ended.take(_event({"task": _task("WORKING")}))
        ended.take(_status(state, "why"))
        failure = ended.failure()
        assert failure is not None
        assert failure[0] == code
        assert failure[1].endswith(": why")


def test_a_remote_task_is_size_limited_and_strict() -> None:
    small = RemoteTask(max_answer_chars=5, max_artifacts=2)
    small.take(_chunk("12345", append=False))
    with pytest.raises(SizeLimitError, match="the answer exceeds the limit of 5 characters"):
        small.take(_chunk("6"))
    many = RemoteTask(max_artifacts=2)
    many.take(_chunk("a", append=False, artifact="1"))
    many.take(_chunk("b", append=False, artifact="2"))
    with pytest.raises(SizeLimitError, match="number of artifacts"):
        many.take(_chunk("c", append=False, artifact="3"))
    for bad in ("{", '{"result": {"nothing": {}}}', '{"result": {"statusUpdate": {"status": {}}}}'):
        with pytest.raises(ProtocolError):
            RemoteTask().take(bad)


@given(
    text=st.text(min_size=1, max_size=60),
    cuts=st.lists(st.integers(min_value=1, max_value=59), max_size=8),
    resubscribe_at=st.integers(min_value=0, max_value=9),
)
def test_the_shown_text_is_the_answer_however_it_is_chunked(
    text: str, cuts: list[int], resubscribe_at: int
) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    task = RemoteTask()
    shown: list[str] = []
    for index, piece in enumerate(pieces):
        if index == resubscribe_at:  # the stream broke: the task as it is now
            taken = task.take(_event({"task": _task("WORKING", [("a", "".join(pieces[:index]))])}))
            assert isinstance(taken, Taken)
            shown += taken.text
        taken = task.take(_chunk(piece, append=index > 0))
        assert isinstance(taken, Taken)
        shown += taken.text
    assert "".join(shown) == task.view.text == text
