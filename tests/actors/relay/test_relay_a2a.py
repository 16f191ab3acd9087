"""The relay's A2A server (issue 26, item 4): each registered agent's card and A2A 1.0's
JSON-RPC methods, driven by the official ``a2a-sdk`` client in a process of its own
(``tests/fixtures/a2a_sdk_client.py``) -- a streamed task and its Task, a blocking send, a
cancel, a resubscribe after leaving, a context that carries the conversation, a task that is
not there -- and the refusals every route of the relay makes.

Real parts: ``RelayServer`` on hypercorn on loopback port 0, the SDK's client in its own
process (the real clock: nothing here sleeps).
"""

from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from test_relay import OTHER, TOKEN, Upstream, running, server

from actors import open_runtime, tool
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue
from actors.relay import RelayAgents, RelayJobs, RelayLimits, RelayServer
from actors.relay._a2a import _Stream
from actors.testing import Hang, Reply, ScriptedProvider
from protocols.authority import Authority, Rule
from protocols.live import RunEvent
from protocols.messages import Role, ToolCall
from protocols.serve import a2a as a2a_wire

CLIENT = pathlib.Path(__file__).parents[2] / "fixtures" / "a2a_sdk_client.py"


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def refund(cents: int) -> str:
    """Refund the customer."""
    return f"refunded {cents}"


@asynccontextmanager
async def relay(registry: AgentRegistry, **kwargs: Any) -> AsyncIterator[tuple[str, RelayServer]]:
    async with open_runtime() as runtime:
        app = server(Upstream(), agents=RelayAgents(registry, runtime), **kwargs)
        async with running(app) as url:
            yield url, app


async def sdk(url: str, mode: str, text: str = "hello", token: str = TOKEN) -> list[dict[str, Any]]:
    """What the SDK's client did against ``url`` (its JSON lines)."""
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(CLIENT), url, token, mode, text],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line]
    assert lines, done.stderr.decode()[-3000:]
    return lines


def of(lines: list[dict[str, Any]], key: str) -> list[Any]:
    return [line[key] for line in lines if key in line]


def states(lines: list[dict[str, Any]]) -> list[str]:
    return [
        event["statusUpdate"]["status"]["state"]
        for event in of(lines, "event")
        if "statusUpdate" in event
    ]


def calculator() -> tuple[AgentRegistry, ScriptedProvider]:
    registry = AgentRegistry()
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]),
        Reply("It is 42.", chunk=3),
    )
    registry.add("calc", provider, system="Adds numbers.", tools=[add])
    return registry, provider


async def test_the_sdk_streams_a_task_to_its_end_and_gets_it() -> None:
    registry, provider = calculator()
    async with relay(registry) as (url, _):
        lines = await sdk(url + "/a2a/calc", "stream", "What is 19 + 23?")
    assert not of(lines, "error"), lines
    assert of(lines, "answer") == ["It is 42."]
    first = of(lines, "event")[0]
    assert "task" in first  # the stream opens with the Task
    assert states(lines)[-1] == "TASK_STATE_COMPLETED"
    (task,) = of(lines, "task")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "It is 42."
    # The agent's tool ran on the relay: the task showed it as it went.
    notes = json.dumps(of(lines, "event"))
    assert '"tool_call"' in notes
    assert '"tool_result"' in notes
    assert provider.calls[0].messages[-1].content == "What is 19 + 23?"


async def test_a_blocking_send_answers_the_ended_task() -> None:
    registry, _ = calculator()
    async with relay(registry) as (url, _):
        lines = await sdk(url + "/a2a/calc", "send")
    assert not of(lines, "error"), lines
    assert of(lines, "answer") == ["It is 42."]
    (task,) = of(lines, "task")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_cancel_ends_the_task_canceled_with_its_partial() -> None:
    registry = AgentRegistry()
    registry.add("slow", ScriptedProvider(Hang("partial answer")))
    async with relay(registry) as (url, app):
        lines = await sdk(url + "/a2a/slow", "cancel")
        (run,) = app._runs._runs.values()
        assert run.done.is_set()
    assert not of(lines, "error"), lines
    (cancelled, got) = of(lines, "task")
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    assert got["artifacts"][0]["parts"][0]["text"] == "partial answer"


async def test_a_client_that_left_resubscribes_and_reads_the_task_to_its_end() -> None:
    registry = AgentRegistry()
    registry.add(
        "writer", ScriptedProvider(Reply("one two three four five six", chunk=4, delay=0.05))
    )
    async with relay(registry) as (url, _):
        lines = await sdk(url + "/a2a/writer", "resubscribe")
    assert not of(lines, "error"), lines
    assert of(lines, "answer") == ["one two three four five six"]
    assert states(lines)[-1] == "TASK_STATE_COMPLETED"


async def test_a_context_carries_the_conversation_to_its_next_task() -> None:
    registry = AgentRegistry()
    provider = ScriptedProvider("First answer.", "Second answer.")
    registry.add("chat", provider)
    async with relay(registry) as (url, _):
        lines = await sdk(url + "/a2a/chat", "context", "First question?")
    assert not of(lines, "error"), lines
    assert of(lines, "answer") == ["First answer.", "Second answer."]
    seen = provider.calls[1].messages
    assert [(m.role, m.content) for m in seen] == [
        (Role.USER, "First question?"),
        (Role.ASSISTANT, "First answer."),
        (Role.USER, "And again?"),
    ]


async def test_a_task_is_its_tokens_alone() -> None:
    registry, _ = calculator()
    async with relay(registry, tokens=[TOKEN, OTHER]) as (url, _):
        mine = await sdk(url + "/a2a/calc", "stream")
        (task,) = of(mine, "task")
        async with httpx.AsyncClient(base_url=url) as client:
            body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}}
            theirs = await client.post(
                "/a2a/calc", json=body, headers={"authorization": f"Bearer {OTHER}"}
            )
            missing = await client.post(
                "/a2a/calc",
                json={**body, "params": {"id": "never"}},
                headers={"authorization": f"Bearer {OTHER}"},
            )
        unknown = await sdk(url + "/a2a/calc", "unknown")
    # Another token's task is answered exactly as one that never was.
    assert theirs.json()["error"] == missing.json()["error"]
    assert theirs.json()["error"]["code"] == -32001
    (error,) = of(unknown, "error")
    assert "TaskNotFound" in error["type"] or "not found" in error["text"].lower()


async def test_the_card_and_the_refusals() -> None:
    registry, _ = calculator()
    async with relay(registry) as (url, _):
        async with httpx.AsyncClient(base_url=url) as client:
            auth = {"authorization": f"Bearer {TOKEN}"}
            card = await client.get("/a2a/calc/.well-known/agent-card.json", headers=auth)
            anonymous = await client.get("/a2a/calc/.well-known/agent-card.json")
            nobody = await client.get("/a2a/nobody/.well-known/agent-card.json", headers=auth)
            broken = await client.post("/a2a/calc", content=b"{", headers=auth)
            odd = await client.post(
                "/a2a/calc", json={"jsonrpc": "2.0", "id": 7, "method": "Nope"}, headers=auth
            )
            got = await client.get("/a2a/calc", headers=auth)
        wrong = await sdk(url + "/a2a/calc", "stream", token="not-the-token")
    assert card.status_code == 200
    assert card.json()["name"] == "calc"
    assert card.json()["description"] == "Adds numbers."
    assert card.json()["supportedInterfaces"][0]["url"] == url + "/a2a/calc"
    assert anonymous.status_code == 401
    assert nobody.status_code == 404
    assert broken.json()["error"]["code"] == -32700
    assert odd.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32601, "message": "no method 'Nope'"},
    }
    assert got.status_code == 405
    (error,) = of(wrong, "error")
    assert "401" in error["text"]
    assert TOKEN not in json.dumps(wrong)


async def lines_until(process: trio.Process, wanted: str) -> list[dict[str, Any]]:
    """``process``'s JSON lines, read as they come, up to the first holding ``wanted``."""
    assert process.stdout is not None
    got: list[dict[str, Any]] = []
    buffer = b""
    with trio.fail_after(60):
        while not any(wanted in json.dumps(line) for line in got):
            chunk = await process.stdout.receive_some()
            assert chunk, got  # it ended before
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            got += [json.loads(line) for line in complete if line]
    return got


async def test_a_client_killed_mid_task_leaves_the_task_to_end_and_be_shown() -> None:
    registry = AgentRegistry()
    text = "one two three four five six seven eight"
    registry.add("writer", ScriptedProvider(Reply(text, chunk=4, delay=0.05)))
    async with relay(registry) as (url, app):
        client = await trio.lowlevel.open_process(
            [sys.executable, str(CLIENT), url + "/a2a/writer", TOKEN, "stream"],
            stdout=subprocess.PIPE,
        )
        got = await lines_until(client, "artifactUpdate")
        client.kill()  # kill -9, mid-task
        await client.wait()
        (run,) = app._runs._runs.values()
        with trio.fail_after(10):
            await run.done.wait()
        task_id = of(got, "event")[0]["task"]["id"]
        async with httpx.AsyncClient(base_url=url) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
            shown = await http.post(
                "/a2a/writer", json=body, headers={"authorization": f"Bearer {TOKEN}"}
            )
    task = shown.json()["result"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == text


async def test_a_relay_killed_mid_task_is_a_clear_error_for_the_sdk(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "app.py").write_text(
        "from actors.durable import AgentRegistry\n"
        "from actors.testing import Hang, ScriptedProvider\n"
        "registry = AgentRegistry()\n"
        'registry.add("writer", ScriptedProvider(Hang("Once upon a time")))\n'
    )
    relay_process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "actors", "serve", "--port", "0", "--token", TOKEN,
         "--app", "app:registry"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert relay_process.stdout is not None
        said = b""
        with trio.fail_after(60):
            while b"\n" not in said.partition(b" at ")[2]:
                said += await relay_process.stdout.receive_some()
        base = said.partition(b" at ")[2].split()[0].decode().rstrip("/")
        client = await trio.lowlevel.open_process(
            [sys.executable, str(CLIENT), base + "/a2a/writer", TOKEN, "stream"],
            stdout=subprocess.PIPE,
        )
        got = await lines_until(client, "artifactUpdate")
        relay_process.kill()  # kill -9 of the server, mid-task
        got += await lines_until(client, '"error"')
        with trio.fail_after(30):
            status = await client.wait()
    finally:
        relay_process.kill()
        await relay_process.wait()
    assert status == 1
    (error,) = of(got, "error")
    assert error["type"]  # the SDK raised, saying the connection broke: no hang, no answer
    assert not of(got, "answer")


@asynccontextmanager
async def durable_relay(registry: AgentRegistry) -> AsyncIterator[tuple[str, MemoryRunStore]]:
    """A relay whose agents' A2A tasks are durable jobs, with a job queue working them."""
    store = MemoryRunStore()
    async with (
        open_runtime() as runtime,
        open_job_queue(store, registry, runtime, concurrency=4, poll=0.05),
    ):
        app = server(
            Upstream(),
            agents=RelayAgents(registry, runtime),
            jobs=RelayJobs(store, agents=registry),
        )
        async with running(app) as url:
            yield url, store


async def test_a_durable_task_is_a_job_and_asks_for_input_as_the_job_does() -> None:
    registry, _ = calculator()
    asks = Authority(rules=(Rule("ask", tools=("refund",), reason="needs a human"),))
    registry.add(
        "support",
        ScriptedProvider(Reply(calls=[ToolCall("r1", "refund", {"cents": 5})]), Reply("Done.")),
        tools=[refund],
        authority=asks,
    )
    async with durable_relay(registry) as (url, store):
        streamed = await sdk(url + "/a2a/calc", "stream", "What is 19 + 23?")
        approved = await sdk(url + "/a2a/support", "approve", "Refund me.")
        jobs = await store.list()
    assert not of(streamed, "error"), streamed
    assert of(streamed, "answer") == ["It is 42."]
    (task,) = of(streamed, "task")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    # The tasks are the store's jobs: same ids, same ends.
    by_id = {record.id: record for record in jobs}
    assert by_id[task["id"]].status.value == "completed"
    assert not of(approved, "error"), approved
    (asked,) = of(approved, "asked")
    assert [call["call_id"] for call in asked] == ["r1"]
    assert "TASK_STATE_INPUT_REQUIRED" in states(approved)
    assert states(approved)[-1] == "TASK_STATE_COMPLETED"
    assert of(approved, "answer") == ["Done."]
    (done,) = of(approved, "task")
    assert by_id[done["id"]].status.value == "completed"
    assert by_id[done["id"]].answers[0].allow


async def test_a_durable_task_is_cancelled_through_its_job() -> None:
    registry = AgentRegistry()
    registry.add("slow", ScriptedProvider(Hang("partial answer")))
    async with durable_relay(registry) as (url, store):
        lines = await sdk(url + "/a2a/slow", "cancel")
        (record,) = await store.list()
    assert not of(lines, "error"), lines
    cancelled, got = of(lines, "task")
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    assert record.status.value == "cancelled"


TEXTS = st.text(alphabet=st.characters(codec=None, blacklist_categories=()), max_size=8)
EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("content"), st.fixed_dictionaries({"text": TEXTS})),
        st.tuples(st.just("turn"), st.fixed_dictionaries({"turn": st.integers(1, 3)})),
        st.tuples(st.just("gap"), st.fixed_dictionaries({"first": st.just(1)})),
        st.tuples(st.just("rewind"), st.fixed_dictionaries({"to": st.just(0)})),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_the_streams_fast_framing_of_a_delta_is_the_codecs_bytes(
    items: list[tuple[str, dict[str, Any]]],
) -> None:
    """The route frames an appending delta itself (its text alone encoded): byte for byte what
    the codec's own framing gives, lone surrogates and control characters included."""
    events = [RunEvent("run", seq, kind, 0.0, data) for seq, (kind, data) in enumerate(items, 1)]
    fast = _Stream(a2a_wire.TaskEncoder("t", "c"), 7, b"")
    slow = a2a_wire.TaskEncoder("t", "c")
    expected = b"".join(
        a2a_wire.sse_event(a2a_wire.rpc_result(7, item)) for e in events for item in slow.feed(e)
    )
    assert fast.feed(events) == expected
    assert fast.encoder.task() == slow.task()


def rpc(method: str, params: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def sent(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": list(parts)}}


async def test_hostile_requests_are_refused_before_any_run() -> None:
    registry, provider = calculator()
    limits = RelayLimits(max_frame=4096)
    async with (
        relay(registry, limits=limits) as (url, app),
        httpx.AsyncClient(base_url=url) as client,
    ):
        auth = {"authorization": f"Bearer {TOKEN}"}
        big = await client.post(
            "/a2a/calc", json=rpc("SendMessage", sent({"text": "x" * 5000})), headers=auth
        )
        anonymous = await client.post("/a2a/calc", json=rpc("SendMessage", sent({"text": "hi"})))
        foreign = await client.post(
            "/a2a/calc",
            json=rpc("SendMessage", sent({"text": "hi"})),
            headers={**auth, "host": "evil.example"},
        )
        parts = [{"text": "a"}] * 65
        many = await client.post("/a2a/calc", json=rpc("SendMessage", sent(*parts)), headers=auth)
        linked = await client.post(
            "/a2a/calc",
            json=rpc("SendMessage", sent({"url": "http://169.254.169.254/x"})),
            headers=auth,
        )
        agent_says = await client.post(
            "/a2a/calc",
            json=rpc(
                "SendMessage",
                {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}},
            ),
            headers=auth,
        )
        nobody = await client.post(
            "/a2a/nobody", json=rpc("SendMessage", sent({"text": "hi"})), headers=auth
        )
        batch = await client.post("/a2a/calc", json=[rpc("GetTask", {"id": "x"})], headers=auth)
    assert big.status_code == 413
    assert anonymous.status_code == 401
    assert foreign.status_code == 421
    assert many.json()["error"]["code"] == -32602
    assert linked.json()["error"]["code"] == -32005
    assert agent_says.json()["error"]["code"] == -32602
    assert nobody.status_code == 404
    assert batch.json()["error"]["code"] == -32600
    assert provider.calls == []  # nothing reached the agent's model
    assert not app._runs._runs  # and no run began
    assert TOKEN not in big.text + anonymous.text + many.text


async def test_a_task_lives_as_long_as_the_relay_keeps_its_run(
    mock_clock: trio.testing.MockClock,
) -> None:
    """The relay's A2A tasks hold their runs weakly: once the relay no longer keeps a run
    (``run_keep`` after its end), its task is gone too -- ``TaskNotFound``, and nothing of it
    held in memory."""
    mock_clock.autojump_threshold = 0.05  # (real sockets: a jump once all is still a moment)
    registry, _ = calculator()
    async with (
        relay(registry, limits=RelayLimits(run_keep=60)) as (url, app),
        httpx.AsyncClient(base_url=url) as client,
    ):
        auth = {"authorization": f"Bearer {TOKEN}"}
        done = await client.post(
            "/a2a/calc", json=rpc("SendMessage", sent({"text": "19 + 23?"})), headers=auth
        )
        task_id = done.json()["result"]["task"]["id"]
        shown = await client.post("/a2a/calc", json=rpc("GetTask", {"id": task_id}), headers=auth)
        assert shown.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        (run,) = app._runs._runs.values()
        held = weakref.ref(run)
        del run
        await trio.sleep(61)
        app.statistics()  # (the relay lets go of the runs it keeps no longer)
        gc.collect()
        gone = await client.post("/a2a/calc", json=rpc("GetTask", {"id": task_id}), headers=auth)
    assert held() is None
    assert gone.json()["error"]["code"] == -32001
