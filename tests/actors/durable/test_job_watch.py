"""Following durable jobs (issue 25, section 1): a job's events, derived from its journal, read
from any seq and from any process -- on a real SQLite file and on PostgreSQL.

A worker runs in this process on the real clock (the watcher in another process cannot follow
trio's mock clock); every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from postgres_server import drop_schemas, new_schema, postgres_url

from actors import open_runtime, tool
from actors.durable import AgentRegistry, RunStore, open_job_queue, open_run_store, watch_job
from actors.testing import Reply, ScriptedProvider
from protocols.authority import Authority, Rule
from protocols.errors import ValidationError
from protocols.jobs import AgentJob, JobStatus
from protocols.live import RunEvent, event_from_json, event_to_json
from protocols.messages import ToolCall, Usage

ROOT = pathlib.Path(__file__).resolve().parents[3]


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def refund(cents: int) -> str:
    """Refund an order."""
    return f"refunded {cents}"


def registry(delay: float = 0.0) -> AgentRegistry:
    agents = AgentRegistry()
    agents.add(
        "calculator",
        ScriptedProvider(
            Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})], usage=Usage(12, 4)),
            Reply("The answer is 42.", chunk=2, delay=delay, usage=Usage(20, 6)),
        ),
        tools=[add],
    )
    asks = Authority(rules=(Rule("ask", tools=("refund",), reason="needs a human"),))
    agents.add(
        "support",
        ScriptedProvider(
            Reply(calls=[ToolCall("r1", "refund", {"cents": 5})]), Reply("Refunded.", chunk=3)
        ),
        tools=[refund],
        authority=asks,
    )
    return agents


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
        return
    schema = new_schema()
    try:
        url = postgres_url()
        yield f"{url}{'&' if '?' in url else '?'}schema={schema}"
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[RunStore]:
    store = await open_run_store(url)
    try:
        yield store
    finally:
        await store.aclose()


def shown(events: list[RunEvent]) -> list[dict[str, Any]]:
    """The events as a wire carries them, without their times (an event's time is when it was
    read from the journal: a display's, never part of what a seq stands for)."""
    out = []
    for event in events:
        data = event_to_json(event)
        data.pop("time", None)
        out.append(data)
    return out


async def collect(store: RunStore, id: str, after: int = 0) -> list[RunEvent]:
    with trio.fail_after(30):
        return [event async for event in watch_job(store, id, after=after, poll=0.05)]


async def test_watching_from_zero_and_from_any_seq_gives_the_same_events(store_url: str) -> None:
    async with opened(store_url) as store, open_runtime() as runtime:
        async with open_job_queue(store, registry(0.01), runtime, poll=0.05) as queue:
            id = await queue.enqueue(AgentJob.ask("calculator", "What is 19 + 23?"))
            # A watcher from before the job began, following it live.
            live = await collect(store, id)
            result = await queue.result(id)
        everything = await collect(store, id)
        # Another connection to the same store (another process would be the same).
        async with opened(store_url) as peer:
            elsewhere = await collect(peer, id)
            suffixes = [await collect(peer, id, after) for after in range(len(everything) + 1)]
    assert shown(live) == shown(everything) == shown(elsewhere)
    assert [e.seq for e in everything] == list(range(1, len(everything) + 1))
    assert {e.run_id for e in everything} == {id} == {result.run_id}
    for after, suffix in enumerate(suffixes):
        assert shown(suffix) == shown(everything[after:])
    kinds = [e.kind for e in everything]
    assert kinds[0] == "started"
    assert kinds[-1] == "finished"
    assert sum(e.terminal for e in everything) == 1
    assert "".join(e.data["text"] for e in everything if e.kind == "content") == (
        "The answer is 42."
    )
    assert everything[-1].data["result"].content == result.content


async def test_a_job_awaiting_input_is_watched_again_after_its_answer(store_url: str) -> None:
    async with opened(store_url) as store, open_runtime() as runtime:
        async with open_job_queue(store, registry(), runtime, poll=0.05) as queue:
            id = await queue.enqueue(AgentJob.ask("support", "Refund order 9."))
            asked = await collect(store, id)
            record = await queue.record(id)
            assert record is not None
            assert record.status is JobStatus.AWAITING_INPUT
            await queue.answer(id, "r1", True, "fine")
            rest = await collect(store, id, after=asked[-1].seq)
            await queue.result(id)
        from_zero = await collect(store, id)
        resumed = await collect(store, id, after=from_zero[-1].seq)
        whole = await collect(store, id, after=0) + resumed
    assert [e.kind for e in asked] == [
        "started",
        "turn",
        "tool_call",
        "usage",
        "approval_requested",
        "awaiting_input",
    ]
    assert asked[-1].data == {
        "calls": [{"call_id": "r1", "tool": "refund", "reason": "needs a human"}]
    }
    # Watching from the start stops where the job waited, as it did then.
    assert shown(from_zero) == shown(asked)
    assert [e.kind for e in rest[:4]] == ["rewind", "takeover", "approval_answered", "tool_result"]
    assert rest[0].data == {"to": asked[-1].seq}
    assert rest[1].data["reason"] == "answered"
    assert rest[2].data == {"call_id": "r1", "allow": True, "reason": "fine"}
    assert rest[-1].kind == "finished"
    assert [e.seq for e in asked + rest] == list(range(1, len(asked) + len(rest) + 1))
    assert shown(whole) == shown(asked + rest)


WATCHER = """
import json, sys
import trio
from actors.durable import open_run_store, watch_job
from protocols.live import event_to_json

async def main(url, id):
    async with await open_run_store(url, create=False) as store:
        print("watching", flush=True)
        async for event in watch_job(store, id, poll=0.05):
            print(json.dumps(event_to_json(event)), flush=True)

trio.run(main, sys.argv[1], sys.argv[2])
"""


async def test_a_watcher_in_another_process_follows_a_job_a_worker_runs(
    store_url: str, tmp_path: pathlib.Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    async with opened(store_url) as store, open_runtime() as runtime:
        id = (await store.admit(AgentJob.ask("calculator", "What is 19 + 23?"), now=0.0)).record.id
        watcher = await trio.lowlevel.open_process(
            [sys.executable, "-c", WATCHER, store_url, id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env=env,
        )
        assert watcher.stdout is not None
        assert watcher.stderr is not None
        try:
            received = b""
            with trio.fail_after(60):
                while b"watching\n" not in received:  # it has the store open and follows
                    chunk = await watcher.stdout.receive_some()
                    assert chunk, (await watcher.stderr.receive_some()).decode()
                    received += chunk
            # Only now does a worker take the job (it waited, queued, until here).
            async with open_job_queue(store, registry(0.05), runtime, poll=0.05) as queue:
                result = await queue.result(id)
                with trio.fail_after(60):
                    while True:
                        chunk = await watcher.stdout.receive_some()
                        if not chunk:
                            break
                        received += chunk
                    await watcher.wait()
        finally:
            if watcher.returncode is None:
                watcher.kill()
                await watcher.wait()
        here = await collect(store, id)
    assert watcher.returncode == 0, (await watcher.stderr.receive_some()).decode()
    lines = received.decode().splitlines()
    assert lines[0] == "watching"
    followed = [event_from_json(json.loads(line)) for line in lines[1:]]
    assert shown(followed) == shown(here)
    assert followed[-1].kind == "finished"
    assert followed[-1].data["result"].content == result.content


async def test_an_unknown_job_and_bad_arguments_are_refused(store_url: str) -> None:
    async with opened(store_url) as store:
        with pytest.raises(ValidationError, match="no job"):
            await collect(store, "nope")
        with pytest.raises(ValidationError, match="after"):
            watch_job(store, "nope", after=-1)
        with pytest.raises(ValidationError, match="poll"):
            watch_job(store, "nope", poll=0)
