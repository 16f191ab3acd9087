"""Following durable jobs across a worker killed with SIGKILL mid-stream (issue 25, section 4).

Each round: jobs that stream (a turn of thinking deltas and a tool call, then a turn of content
deltas, a delta every few milliseconds) run on a worker process; a second worker process stands
by on the same store (a SQLite file, or a PostgreSQL schema from ``postgres_server.py``). The
first worker is killed (``SIGKILL``) at a random event of the first job -- mostly mid-stream,
with deltas streamed that were not journaled yet -- and the standby takes the jobs over once
their leases lapse. Meanwhile followers in this process leave at random points -- after a
number of events, after a while, or at the kill itself, staying away until the takeover or after
it -- and resume: some through the store (:func:`~actors.durable.watch_job`, on a connection of
their own, ``after=`` their last seq), the others over the relay's event stream (``GET
/v1/jobs/{id}/events``: a relay in this process serving the store's jobs, which were submitted
through it), dropping the connection in the middle of an SSE record -- only a random prefix of
the bytes that came is read -- and resuming with ``Last-Event-ID``, the id of the last whole
record.

Checked afterwards, per job: every follower saw the same events, under the same seqs and with
the same content, as one reading the whole journal at the end -- each once, in order, the
terminal once and last; the first job's log has the takeover's ``rewind`` (to the seq before
it, followed by its ``takeover``); what each worker's attempt published (the deltas up to a
rewind, and after it) is, in order, a prefix of what that worker's provider streamed -- the
deltas a dead worker streamed and did not journal were never published, and nothing published
was taken back.

The workers are real processes running :data:`WORKER` (written to the test's directory) with
the real store, registry and queue, and a deterministic model (its deltas depend only on the
job and the turn). Set ``CRASH_SEED`` to replay a run's random choices; the processes'
scheduling still varies.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import pathlib
import random
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any, Literal

import attrs
import httpx
import pytest
import trio
from postgres_server import drop_schemas, new_schema, postgres_url

from actors.durable import PostgresRunStore, RunStore, SQLiteRunStore, watch_job
from actors.relay import RelayJobLimits, RelayJobs, RelayServer, RelayToken, serve
from actors.testing import ScriptedProvider
from protocols.jobs import AttemptEntry, JobStatus, StreamEntry
from protocols.live import TERMINAL, RunEvent, event_from_json
from protocols.sse import SSEDecoder, SSEEvent

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL")

ROOT = pathlib.Path(__file__).resolve().parents[3]
#: Rounds per backend, jobs per round, followers per job (through the store, and over the
#: relay's event stream).
ROUNDS = 2
JOBS = 3
FOLLOWERS = 3
SSE_FOLLOWERS = 2
#: Deltas per turn, and the seconds between two.
DELTAS = 60
DELAY = 0.006
#: The workers' lease (seconds): how long the killed worker's jobs wait for the standby.
LEASE = 1.0

WORKER = r'''
import json, os, sys, time

import trio

from actors import open_runtime, tool
from actors.durable import AgentRegistry, PostgresRunStore, SQLiteRunStore, open_job_queue
from actors.providers import StreamingProvider, TextStream
from protocols.messages import Delta, ProviderResult, Role, ToolCall

CONFIG = json.loads(open(sys.argv[1]).read())
SHOWN = os.open(CONFIG["shown"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


@tool
async def tick(n: int) -> str:
    """Count one."""
    await trio.sleep(0.01)
    return f"tick {n}"


class Answer(TextStream):
    """Turn 0: thinking deltas, then a call of tick; turn 1: content deltas. Each delta is
    written to the shown file (one write(2): in the file whatever kills this process next)
    before the run gets it."""

    def __init__(self, messages):
        super().__init__()
        self.key = next(m.content for m in messages if m.role is Role.USER)
        self.turn = sum(1 for m in messages if m.role is Role.ASSISTANT and not m.interrupted)
        channel = "thinking" if self.turn == 0 else "content"
        self.queue = [(channel, f"{self.key}/{self.turn}/{i} ") for i in range(CONFIG["deltas"])]

    async def __anext__(self):
        if self.queue:
            await trio.sleep(CONFIG["delay"])
            channel, text = self.queue.pop(0)
            line = json.dumps({"key": self.key, "channel": channel, "text": text}) + "\n"
            os.write(SHOWN, line.encode())
            (self._thinking if channel == "thinking" else self._content).append(text)
            return Delta(channel, text)
        if self._result is None:
            calls = (ToolCall(f"tick-{self.key}", "tick", {"n": 1}),) if self.turn == 0 else ()
            self._result = ProviderResult(
                content="".join(self._content), thinking="".join(self._thinking), calls=calls
            )
        raise StopAsyncIteration

    async def aclose(self):
        await trio.lowlevel.checkpoint()


class Model(StreamingProvider):
    name = "streamer"

    def stream(self, messages, *, tools=None, options=None):
        return Answer(list(messages))


async def orphaned():
    # The test is gone (or has run far too long): so is this worker.
    deadline = time.monotonic() + 120
    while os.getppid() == CONFIG["parent"] and time.monotonic() < deadline:
        await trio.sleep(0.1)
    os._exit(3)


async def main():
    if CONFIG.get("postgres"):
        store = await PostgresRunStore.open(CONFIG["postgres"], schema=CONFIG["schema"])
    else:
        store = await SQLiteRunStore.open(CONFIG["db"], busy_timeout=30)
    registry = AgentRegistry()
    registry.add("streamer", Model(), tools=[tick])
    async with store, open_runtime() as runtime, open_job_queue(
        store, registry, runtime, concurrency=16, lease=CONFIG["lease"], poll=0.05,
        owner=CONFIG["name"],
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(orphaned)


trio.run(main)
'''


Backend = Literal["sqlite", "postgres"]


@attrs.frozen
class Leave:
    """A follower leaves after ``events`` more events, ``seconds`` after it came, or at the
    kill (whichever comes first; ``None`` / ``False``: not that way), then stays away
    ``away`` seconds."""

    events: int | None
    seconds: float | None
    at_kill: bool
    away: float


def plans(rng: random.Random) -> list[Leave]:
    out = []
    for _ in range(rng.randint(1, 8)):
        out.append(
            Leave(
                events=rng.choice([None, 0, 1, 2, 5, 10, 30]),
                seconds=rng.choice([None, None, 0.0, 0.01, 0.05, 0.3]),
                at_kill=rng.random() < 0.4,
                away=rng.choice([0.0, 0.005, 0.05, 0.3, 1.2]),
            )
        )
    return out


async def follow(
    store: RunStore, id: str, leaves: list[Leave], killed: trio.Event, seen: list[RunEvent]
) -> int:
    """Follow job ``id`` to its terminal event, leaving and coming back as ``leaves`` say;
    how many times it came."""
    visits = 0
    while True:
        plan = leaves.pop(0) if leaves else Leave(None, None, False, 0.0)
        visits += 1
        count = 0
        async with trio.open_nursery() as nursery:
            if plan.seconds is not None:
                nursery.cancel_scope.deadline = trio.current_time() + plan.seconds
            if plan.at_kill and not killed.is_set():
                nursery.start_soon(_cancel_at, killed, nursery.cancel_scope)
            position = seen[-1].seq if seen else 0
            async for event in watch_job(store, id, after=position, poll=0.05):
                seen.append(event)
                if event.terminal:
                    nursery.cancel_scope.cancel()
                    return visits
                count += 1
                if plan.events is not None and count >= plan.events:
                    break
            else:
                if not nursery.cancel_scope.cancel_called:
                    raise AssertionError("a job's events ended without a terminal event")
            nursery.cancel_scope.cancel()
        await trio.sleep(plan.away)


SECRET = "watcher-secret-0123456789abcdef"


@contextlib.asynccontextmanager
async def relay(store: RunStore) -> AsyncIterator[httpx.AsyncClient]:
    """The relay serving the jobs of ``store`` (it runs none) on a free port: a client of it
    with the token the jobs are submitted and followed with."""
    app = RelayServer(
        ScriptedProvider(),
        tokens=[RelayToken(SECRET, name="watcher")],
        jobs=RelayJobs(
            store, agents=["streamer"], limits=RelayJobLimits(poll=0.05, max_streams=64)
        ),
    )
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=None))
        headers = {"authorization": f"Bearer {SECRET}"}
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as client:
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()


async def _submitted(client: httpx.AsyncClient, key: str) -> str:
    answer = await client.post("/v1/jobs", json={"agent": "streamer", "input": key})
    assert answer.status_code in (200, 201, 202), answer.text
    id = answer.json()["id"]
    assert isinstance(id, str)
    return id


async def follow_sse(
    client: httpx.AsyncClient,
    id: str,
    leaves: list[Leave],
    killed: trio.Event,
    seen: list[RunEvent],
    *,
    rng: random.Random,
) -> int:
    """Follow job ``id`` over the relay's event stream (``GET /v1/jobs/{id}/events``) to its
    terminal event, dropping the connection as ``leaves`` say -- when it does so after some
    events, in the middle of the next SSE record: of the bytes that came, only a random prefix
    is read -- and coming back with ``Last-Event-ID``: the id of the last whole record read (a
    browser's ``EventSource`` does the same). How many times it came."""
    visits = 0
    while True:
        plan = leaves.pop(0) if leaves else Leave(None, None, False, 0.0)
        visits += 1
        count = 0
        headers = {"last-event-id": str(seen[-1].seq)} if seen else {}
        decoder = SSEDecoder()  # a new connection: what the last one left unfinished is gone
        async with trio.open_nursery() as nursery:
            if plan.seconds is not None:
                nursery.cancel_scope.deadline = trio.current_time() + plan.seconds
            if plan.at_kill and not killed.is_set():
                nursery.start_soon(_cancel_at, killed, nursery.cancel_scope)
            path = f"/v1/jobs/{id}/events"
            async with client.stream("GET", path, headers=headers) as answer:
                assert answer.status_code == 200
                async for chunk in answer.aiter_bytes():
                    leaving = plan.events is not None and count >= plan.events
                    # Leaving: mid-record (or wherever the cut falls), a prefix only.
                    data = chunk[: rng.randrange(len(chunk) + 1)] if leaving else chunk
                    if leaving:
                        CUTS.append(len(data) < len(chunk))
                    for item in decoder.feed(data):
                        if isinstance(item, SSEEvent):
                            event = event_from_json(json.loads(item.data))
                            assert item.id == str(event.seq)
                            assert item.event == event.kind
                            seen.append(event)
                            count += 1
                            if event.terminal:
                                nursery.cancel_scope.cancel()
                                return visits
                    if leaving:
                        break  # the connection is dropped
            nursery.cancel_scope.cancel()
        await trio.sleep(plan.away)


#: How many times each follower came, in the round going on (reported, not asserted).
VISITS: list[int] = []
#: Whether each dropped SSE connection was dropped inside what had come (a record, mostly).
CUTS: list[bool] = []


async def _counted(*args: Any) -> None:
    VISITS.append(await follow(*args))


async def _counted_sse(*args: Any, rng: random.Random) -> None:
    VISITS.append(await follow_sse(*args, rng=rng))


async def _cancel_at(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


@contextlib.asynccontextmanager
async def worker(directory: pathlib.Path, name: str, base: dict[str, Any]) -> AsyncIterator[Any]:
    """A worker process (killed when the block ends, if it still runs)."""
    command = _written(directory, name, base)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with (directory / f"{name}.stderr").open("wb") as stderr:
        process = await trio.lowlevel.open_process(command, stderr=stderr, env=env)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


def _written(directory: pathlib.Path, name: str, base: dict[str, Any]) -> list[str]:
    """Write the worker's script and its configuration; the command that runs it."""
    shown = str(directory / f"{name}.shown")
    config = {**base, "name": name, "parent": os.getpid(), "shown": shown}
    path = directory / f"{name}.json"
    path.write_text(json.dumps(config))
    script = directory / "worker.py"
    script.write_text(WORKER)
    return [sys.executable, str(script), str(path)]


def shown(directory: pathlib.Path, name: str) -> dict[str, list[str]]:
    """What worker ``name``'s provider streamed, per job key, in order."""
    path = directory / f"{name}.shown"
    out: dict[str, list[str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            item = json.loads(line)
            out.setdefault(item["key"], []).append(item["text"])
    return out


@contextlib.asynccontextmanager
async def backend_store(
    backend: Backend, directory: pathlib.Path
) -> AsyncIterator[tuple[RunStore, dict[str, Any]]]:
    """The test's own connection to a fresh store, and what the workers need to open it."""
    if backend == "sqlite":
        db = directory / "jobs.db"
        async with await SQLiteRunStore.open(db) as store:
            yield store, {"db": str(db)}
        return
    schema = new_schema()
    try:
        async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
            yield store, {"postgres": postgres_url(), "schema": schema}
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


async def one_round(backend: Backend, directory: pathlib.Path, rng: random.Random) -> None:
    await trio.Path(directory).mkdir()
    base = {"deltas": DELTAS, "delay": DELAY, "lease": LEASE}
    async with backend_store(backend, directory) as (store, opening):
        base.update(opening)
        keys = [f"job{number}" for number in range(JOBS)]
        killed = trio.Event()
        # Kill at a random event of the first job: mostly mid-stream (two turns of DELTAS
        # deltas, a tool call between), never after its last delta was shown to the killer.
        kill_at = rng.randint(3, 2 * DELTAS - 20)
        with trio.fail_after(90):
            async with relay(store) as client, worker(directory, "first", base) as first:
                # Submitted over the relay (its token owns them: it may follow them there).
                ids = [await _submitted(client, key) for key in keys]
                seen: dict[str, list[list[RunEvent]]] = {id: [] for id in ids}
                await _until_running(store, ids)
                async with worker(directory, "standby", base), trio.open_nursery() as nursery:
                    for id in ids:
                        for number in range(FOLLOWERS + SSE_FOLLOWERS):
                            events: list[RunEvent] = []
                            seen[id].append(events)
                            if number < FOLLOWERS:
                                nursery.start_soon(_counted, store, id, plans(rng), killed, events)
                            else:
                                follower = functools.partial(
                                    _counted_sse, rng=random.Random(rng.random())
                                )
                                nursery.start_soon(follower, client, id, plans(rng), killed, events)
                    count = 0
                    async for _ in watch_job(store, ids[0], poll=0.02):
                        count += 1
                        if count >= kill_at:
                            break
                    first.send_signal(signal.SIGKILL)
                    await first.wait()
                    killed.set()
                    await _until_ended(store, ids)
                    # (the followers end by themselves, after their terminal events)
                assert first.returncode == -signal.SIGKILL
        streamed = {"first": shown(directory, "first"), "standby": shown(directory, "standby")}
        lost = 0
        for number, (id, key) in enumerate(zip(ids, keys, strict=True)):
            record = await store.get(id)
            journal = await store.journal(id)
            whole = [event async for event in watch_job(store, id)]
            assert record is not None
            assert record.status is JobStatus.COMPLETED, record
            check(whole, seen[id], journal)
            rewinds = [event.seq for event in whole if event.kind == "rewind"]
            if number == 0:
                assert record.takeovers >= 1
                assert rewinds, "the job killed mid-stream was continued from a rewind"
            # Each attempt's deltas are what its worker streamed, in order, up to where its
            # journal stopped: the first worker's before the rewind, the standby's after it.
            attempts = _split(whole, rewinds)
            owners: list[str | None] = [None]  # (not taken over: either may have run it)
            if rewinds:
                owners = ["first", *["standby"] * len(rewinds)]
            for events, owner in zip(attempts, owners, strict=True):
                texts = [e.data["text"] for e in events if e.kind in ("content", "thinking")]
                candidates = [streamed[owner][key]] if owner else list(_of(streamed, key))
                assert any(texts == c[: len(texts)] for c in candidates), (owner, texts)
                if owner == "first":
                    lost += len(streamed["first"][key]) - len(texts)
        # What the round did (shown with -s, and when it fails): not asserted, as it depends
        # on the processes' timing.
        print(
            f"{backend}: killed at event {kill_at} of the first job; {lost} deltas streamed "
            f"and not journaled were voided; followers came {sum(VISITS)} times "
            f"({len(VISITS)} followers); {sum(CUTS)} SSE connections dropped inside a record"
        )
        VISITS.clear()
        CUTS.clear()


def _of(streamed: dict[str, dict[str, list[str]]], key: str) -> list[list[str]]:
    return [texts[key] for texts in streamed.values() if key in texts]


def _split(events: list[RunEvent], rewinds: list[int]) -> list[list[RunEvent]]:
    parts, start = [], 0
    for seq in rewinds:
        parts.append(events[start : seq - 1])
        start = seq
    parts.append(events[start:])
    return parts


def check(whole: list[RunEvent], followers: list[list[RunEvent]], journal: list[Any]) -> None:
    """Every follower saw the journal's events: each once, in order, the same content under
    each seq, the terminal once and last; each rewind goes back to the seq before it."""
    assert [event.seq for event in whole] == list(range(1, len(whole) + 1))
    assert [event.kind in TERMINAL for event in whole] == [False] * (len(whole) - 1) + [True]
    assert whole[-1].kind == "finished"
    assert all(math.isfinite(event.time) for event in whole)  # its entry's append time
    for events in followers:
        assert events == whole  # the same events, times included
    rewinds = [event for event in whole if event.kind == "rewind"]
    assert len(rewinds) == sum(isinstance(entry, AttemptEntry) for entry in journal)
    for rewind in rewinds:
        assert rewind.data == {"to": rewind.seq - 1}
        assert whole[rewind.seq].kind == "takeover"
    deltas = [
        text for entry in journal if isinstance(entry, StreamEntry) for _, text in entry.deltas
    ]
    assert [e.data["text"] for e in whole if e.kind in ("content", "thinking")] == deltas


async def _until_running(store: RunStore, ids: list[str]) -> None:
    while True:
        records = [await store.get(id) for id in ids]
        if all(r is not None and r.status is JobStatus.RUNNING for r in records):
            return
        await trio.sleep(0.01)


async def _until_ended(store: RunStore, ids: list[str]) -> None:
    while True:
        records = [await store.get(id) for id in ids]
        if all(r is not None and r.terminal for r in records):
            return
        await trio.sleep(0.02)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_followers_resume_across_a_worker_killed_mid_stream(
    backend: Backend, tmp_path: pathlib.Path
) -> None:
    seed = int(os.environ.get("CRASH_SEED") or random.randrange(10**9))
    print(f"CRASH_SEED={seed}")
    rng = random.Random(seed)
    for number in range(ROUNDS):
        await one_round(backend, tmp_path / f"round{number}", rng)
