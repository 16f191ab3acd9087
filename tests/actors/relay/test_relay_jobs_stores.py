"""The relay's jobs API over real stores -- a SQLite file and PostgreSQL -- with the jobs run by a
worker in another process (``python -m actors worker --store URL --app app:registry``), by
workers in the relay's own process, and across a restart of the relay.

These run on trio's real clock: a worker in another process does not follow the mock clock, and
the SQLite store works in threads (see ``tests/actors/durable/test_job_queue.py``). Every wait
is bounded.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from jobs_app import WRITER, app
from postgres_server import drop_schemas, new_schema, postgres_url

from actors import open_runtime
from actors.durable import RunStore, open_job_queue, open_run_store
from actors.relay import RelayJobLimits, RelayJobs, RelayServer, RelayToken, serve
from actors.testing import ScriptedProvider
from protocols.jobs import JobStatus
from protocols.sse import SSEDecoder, SSEEvent

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the worker is stopped by a signal")

ALICE = "alice-secret-0123456789abcdef"
BOB = "bob-secret-fedcba9876543210xx"
ROTATED = "alice-rotated-secret-0123456789"

APP = app(WRITER)

AGENTS = ("calculator", "writer", "support")
FAST = RelayJobLimits(poll=0.05)  # SQLite tells no other process of a commit: look often


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[str]:
    """A store URL: a SQLite file in the test's folder, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/jobs.db"
        return
    schema = new_schema()
    url = postgres_url()
    try:
        yield f"{url}{'&' if '?' in url else '?'}schema={schema}"
    finally:
        drop_schemas(schema)


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path


def tokens(alice: str = ALICE) -> list[RelayToken]:
    return [RelayToken(alice, name="alice"), RelayToken(BOB, name="bob")]


@asynccontextmanager
async def relay(store: RunStore, *, secret: str = ALICE) -> AsyncIterator[httpx.AsyncClient]:
    """A relay serving jobs on ``store`` (it runs none), on a free port: an httpx client of it."""
    app = RelayServer(
        ScriptedProvider(), tokens=tokens(secret), jobs=RelayJobs(store, agents=AGENTS, limits=FAST)
    )
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=None))
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()


@asynccontextmanager
async def worker(folder: pathlib.Path, url: str) -> AsyncIterator[None]:
    """``python -m actors worker`` on ``url`` with ``app:registry``, in another process; stopped
    with SIGTERM on the way out (and it must exit 0)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "actors", "worker", "--store", url]
    command += ["--app", "app:registry", "--poll", "0.05", "--lease", "5"]
    process = await trio.lowlevel.open_process(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    printed: dict[str, bytes] = {"out": b"", "err": b""}

    async def pump(name: str, stream: trio.abc.ReceiveStream | None) -> None:
        assert stream is not None
        while data := await stream.receive_some(65536):
            printed[name] += data

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, "out", process.stdout)
            nursery.start_soon(pump, "err", process.stderr)
            try:
                yield
            finally:
                process.send_signal(signal.SIGTERM)
                with trio.fail_after(60):
                    await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    assert process.returncode == 0, printed["err"].decode()
    assert "trio-agents worker: stopped" in printed["out"].decode()


def auth(token: str = ALICE) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def submit(client: httpx.AsyncClient, agent: str, text: str) -> str:
    answer = await client.post("/v1/jobs", json={"agent": agent, "input": text}, headers=auth())
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


async def follow(client: httpx.AsyncClient, id: str, after: int = 0) -> list[dict[str, Any]]:
    """The job's events after ``after``, to the end of its stream (resuming by Last-Event-ID)."""
    headers = {**auth(), "last-event-id": str(after)}
    decoder = SSEDecoder()
    events: list[dict[str, Any]] = []
    async with client.stream("GET", f"/v1/jobs/{id}/events", headers=headers) as answer:
        assert answer.status_code == 200
        async for data in answer.aiter_bytes():
            for item in decoder.feed(data):
                if isinstance(item, SSEEvent):
                    events.append(json.loads(item.data))
                    assert item.id == str(events[-1]["seq"])
    return events


async def until_running(client: httpx.AsyncClient, id: str) -> None:
    pause = 0.01
    while (await show(client, id)).json()["status"] != "running":
        await trio.sleep(pause)
        pause = min(pause * 2, 0.2)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [event["kind"] for event in events]


async def show(client: httpx.AsyncClient, id: str, token: str = ALICE) -> httpx.Response:
    return await client.get(f"/v1/jobs/{id}", headers=auth(token))


async def test_a_worker_in_another_process_runs_the_relays_jobs(
    folder: pathlib.Path, store_url: str
) -> None:
    store = await open_run_store(store_url)
    try:
        async with relay(store) as client, worker(folder, store_url):
            with trio.fail_after(120):
                # A job to its end, followed over SSE as the other process runs it.
                added = await submit(client, "calculator", "What is 19 + 23?")
                events = await follow(client, added)
                assert kinds(events)[0] == "started"
                assert kinds(events)[-1] == "finished"
                assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
                assert (await show(client, added)).json()["result"]["content"] == "It is 42."
                # Resumed from the middle, the rest is the same events.
                middle = events[len(events) // 2]["seq"]
                rest = await follow(client, added, middle)
                assert [(e["seq"], e["kind"], e["data"]) for e in rest] == [
                    (e["seq"], e["kind"], e["data"]) for e in events[middle:]
                ]
                # An approval: the stream ends when the job waits; answered here, continued
                # there.
                asked = await submit(client, "support", "Refund order 9.")
                waiting = await follow(client, asked)
                assert kinds(waiting)[-1] == "awaiting_input"
                answer = await client.post(
                    f"/v1/jobs/{asked}/answers",
                    json={"call_id": "r1", "allow": True},
                    headers=auth(),
                )
                assert answer.status_code == 200, answer.text
                done = await follow(client, asked, waiting[-1]["seq"])
                assert "approval_answered" in kinds(done)
                assert kinds(done)[-1] == "finished"
                assert (await show(client, asked)).json()["result"]["content"] == "Done."
                # A cancel reaches the other process's running job.
                hung = await submit(client, "writer", "Tell me a story.")
                await until_running(client, hung)
                cancelled = await client.post(f"/v1/jobs/{hung}/cancel", headers=auth())
                assert cancelled.json()["cancel_requested"] is True
                assert kinds(await follow(client, hung))[-1] == "cancelled"
                assert (await show(client, hung)).json()["status"] == "cancelled"
                # None of it is another token's.
                for id in (added, asked, hung):
                    assert (await show(client, id, BOB)).status_code == 404
    finally:
        await store.aclose()


async def test_a_job_stays_its_tokens_across_a_relay_restart_and_a_rotated_secret(
    tmp_path: pathlib.Path,
) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    store = await open_run_store(url)
    try:
        async with relay(store) as client:
            id = await submit(client, "calculator", "What is 19 + 23?")
    finally:
        await store.aclose()
    # A new relay process would open the store afresh; alice's secret was rotated meanwhile.
    store = await open_run_store(url)
    try:
        async with relay(store, secret=ROTATED) as client:
            mine = await show(client, id, ROTATED)
            old = await show(client, id, ALICE)
            bobs = await show(client, id, BOB)
            record = await store.get(id)
    finally:
        await store.aclose()
    assert mine.status_code == 200
    assert mine.json()["status"] == "queued"
    assert old.status_code == 401
    assert bobs.status_code == 404
    assert record is not None
    assert ALICE not in json.dumps(record.job.metadata)


async def test_the_relays_own_workers_run_its_jobs_on_sqlite(
    folder: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    sys.path.insert(0, str(folder))
    try:
        app = importlib.import_module("app")  # the same registry the worker process loads
    finally:
        sys.path.remove(str(folder))
    url = f"sqlite:///{tmp_path}/jobs.db"
    store = await open_run_store(url)
    try:
        async with (
            open_runtime() as runtime,
            open_job_queue(store, app.registry(), runtime, poll=0.05),
            relay(store) as client,
        ):
            with trio.fail_after(120):
                id = await submit(client, "calculator", "What is 19 + 23?")
                events = await follow(client, id)
                shown = (await show(client, id)).json()
    finally:
        await store.aclose()
        sys.modules.pop("app", None)
    assert kinds(events)[-1] == "finished"
    assert shown["status"] == JobStatus.COMPLETED.value
    assert shown["result"]["content"] == "It is 42."
