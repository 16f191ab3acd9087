"""Benchmark: the run's event log -- its cost on the agent loop, how fast a durable job's
follower resumes, and one run followed by 1,000 followers.

Usage: ``python benchmarks/live.py [--quick] [--json]``

Scenarios:

* ``log``: every run publishes its events to a log that anyone may follow
  (``runtime.watch``), whether anyone does or not. The loop benchmark's task
  (``benchmarks/loop.py``: two turns, one ``add`` tool call, each run checked) through
  ``Agent.generate`` with the log, against the same runs without it: a runtime whose registry
  of logs opens none (:class:`NoLogs`, the cheapest "off" there is -- the run loop then skips
  every publication, as a journaled run does). Batches of ``RUNS_PER_AGENT`` runs on a fresh
  agent, the modes alternating and their order swapping every batch, a collection before each;
  each run timed on its own; the median over rounds of the time per run. Reported as
  ``run_time_with_log_vs_without`` (target <= 1.05). For information, the same for a run
  streaming a long answer (:data:`STREAM_DELTAS` content deltas in one turn: the log's hot
  path, an event per delta), ``stream_time_with_log_vs_without``.
* ``resume``: a durable job's follower reconnecting: from ``watch_job(store, id, after=n)``
  (a new follower, as a client that reconnects gets) to its first replayed event, for
  :data:`RESUMES` random ``n`` over a job whose journal holds a long answer
  (:data:`RESUME_DELTAS` deltas streamed in one turn, one every :data:`RESUME_PACE` seconds,
  then an answer: run by a job queue in this process, on its own connection), read on another
  connection to the store -- cold (nothing of the job read in this process yet, as a reconnect
  to another relay process finds it: the journal read and derived from its start) and warm
  (this process's followers of the job read it before, as a reconnect to the same relay finds
  it: only what the journal gained since is read), alternating, with a collection before
  each (untimed: the collector's full passes last as long as the whole process's heap is big,
  tens of milliseconds here, whatever allocation sets them off). p50 and p99
  on a SQLite file (target p99 <= 20 ms) and on PostgreSQL (target p99 <= 50 ms; the server
  ``TRIO_AGENTS_TEST_POSTGRES`` names, else a throwaway one from ``pgserver``'s binaries, as
  the tests do; a fresh schema, dropped at the end). Reported as
  ``resume_p99_sqlite_over_target`` and ``resume_p99_postgres_over_target`` (cold), and
  ``resume_warm_p99_*_over_target``.
* ``fanout``: one run streaming :data:`FANOUT_DELTAS` content deltas, one every
  :data:`PACE` seconds (a fast model's pace: 500 deltas a second), followed by 1,000
  concurrent followers (``runtime.watch`` from its first event), against the same run followed
  by one. The run's provider waits until every follower has replayed what the log holds and is
  waiting for more; time per event is then the time until the last follower has read the
  terminal event, over the events published in it. Reported as
  ``fanout_1000_time_per_event_vs_one`` (target <= 3): the followers keeping up with the run,
  or not.
* ``sse``: the same fan-out over the relay's Server-Sent Events route: a ``RelayServer`` on
  hypercorn on loopback (its provider streams :data:`SSE_DELTAS` deltas, one every
  :data:`PACE` seconds, once the gate opens), one run started by ``POST /v1/stream`` with
  ``cancel_on_disconnect: false`` (its client leaves at once), followed by
  :data:`SSE_FOLLOWERS` concurrent ``GET /v1/runs/{id}/events`` (1,000; 200 with ``--quick``)
  on raw sockets, in a process of their own (``benchmarks/_sse_followers.py``: a relay's
  followers are never in its process; a follower only counts records, as cheap as a client
  gets), against the same run followed by one. ``RelayLimits.max_watchers`` (64 by default:
  followers of one run) is raised to the followers; nothing else limits them (there is no
  per-token limit on followers). Time per event: from the gate, once every follower has its
  answer's head and waits, to the last follower's end of the answer (``time.monotonic``, which
  both processes share), over the deltas.
  Reported as ``fanout_sse_time_per_event_vs_one`` (target <= 3).

Results are medians over rounds after an untimed warm-up (``resume``: percentiles over every
reconnect). With ``--json`` the last line printed is one JSON object
``{"metrics": {...}, "ratios": {...}}``. Nothing here asserts a speed: the targets are printed
beside what was measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ``benchmarks/actors.py`` shares its name with the ``actors`` package, and a script's own
# directory comes first on ``sys.path``: put the repository root (where the package lives) first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib
import gc
import importlib
import json
import math
import os
import random
import statistics
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import trio
import trio.lowlevel
from trio.testing import wait_all_tasks_blocked

from actors import Agent, open_runtime
from actors._live import LiveRun, LiveRuns
from actors.durable import (
    AgentRegistry,
    PostgresRunStore,
    SQLiteRunStore,
    open_job_queue,
    watch_job,
)
from actors.durable._watch import _forget as forget_shared
from actors.providers import ProviderStream, StreamingProvider, TextStream
from benchmarks._common import Report, run_main
from benchmarks.loop import QUESTION, RUNS_PER_AGENT, Replay, add, check
from protocols.jobs import AgentJob, JobStatus
from protocols.messages import (
    Delta,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
)

#: Agents (histories) per round and rounds (quick, full) of the ``log`` scenario.
LOG_AGENTS = (10, 24)
LOG_ROUNDS = (5, 15)
#: Content deltas of the streamed answer in the ``log`` scenario, and its runs per agent.
STREAM_DELTAS = 200
STREAM_RUNS = 5
#: Deltas of the resumed job's answer, their pace (seconds: its journal then holds what a
#: model streaming that fast leaves in it, a few deltas an entry), and the reconnects timed
#: (quick, full).
RESUME_DELTAS = 1_000
RESUME_PACE = 0.0005
RESUMES = (100, 500)
#: The fan-out run's deltas (quick, full), their pace (seconds), the followers, and rounds.
FANOUT_DELTAS = (300, 1_000)
PACE = 0.002
FOLLOWERS = 1_000
FANOUT_ROUNDS = (3, 5)
#: Targets.
LOG_TARGET = 1.05
RESUME_TARGET_SQLITE = 0.020
RESUME_TARGET_POSTGRES = 0.050
FANOUT_TARGET = 3.0

#: The repository (the followers' process runs ``benchmarks._sse_followers`` from it).
ROOT = str(Path(__file__).resolve().parent.parent)

POSTGRES_ENV = "TRIO_AGENTS_TEST_POSTGRES"

Store = SQLiteRunStore | PostgresRunStore


class NoLogs(LiveRuns):
    """A registry that opens no log: the runs of a runtime given it publish nothing (the
    baseline of the ``log`` scenario)."""

    def open(self, run_id: str) -> LiveRun:
        return None  # type: ignore[return-value]


class Deltas(StreamingProvider):
    """Answers every call with ``count`` content deltas (``w<i> ``), one every ``pace``
    seconds (0: no wait) once ``gate`` is set (``None``: at once)."""

    name = "deltas"

    def __init__(self, count: int, pace: float = 0.0, gate: trio.Event | None = None) -> None:
        self.count = count
        self.pace = pace
        self.gate = gate

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        return _DeltaStream(self)


class _DeltaStream(TextStream):
    def __init__(self, provider: Deltas) -> None:
        super().__init__()
        self._provider = provider
        self._sent = 0

    async def __anext__(self) -> Delta:
        provider = self._provider
        if self._sent == 0 and provider.gate is not None:
            await provider.gate.wait()
        if self._sent < provider.count:
            if provider.pace:
                await trio.sleep(provider.pace)
            else:
                await trio.lowlevel.checkpoint()
            text = f"w{self._sent} "
            self._sent += 1
            self._content.append(text)
            return Delta("content", text)
        if self._result is None:
            self._result = ProviderResult(content="".join(self._content))
        raise StopAsyncIteration

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def expected(count: int) -> str:
    return "".join(f"w{i} " for i in range(count))


# -- the log's cost --------------------------------------------------------------------------------


async def timed_runs(make: Callable[[], Awaitable[Agent]], runs: int) -> float:
    """The seconds of ``runs`` runs on one fresh agent (each timed on its own)."""
    agent = await make()
    total = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        result = await agent.generate(QUESTION)
        total += time.perf_counter() - start
        if result.partial:
            raise SystemExit(f"log: a run stopped {result.stop}")
        check_answer(agent, result.content)
    await agent.aclose()
    return total


def check_answer(agent: Agent, content: str) -> None:
    if agent.name.startswith("stream"):
        check("stream", content, expected(STREAM_DELTAS))
    else:
        check("loop", content)


async def bench_log(agents: int, rounds: int) -> dict[str, float]:
    """The median seconds per run with and without the log: the loop task and the streamed
    answer."""
    replay = Replay()
    deltas = Deltas(STREAM_DELTAS)
    modes = ("log", "nolog")

    async def one_round() -> dict[str, float]:
        totals = dict.fromkeys(("loop_log", "loop_nolog", "stream_log", "stream_nolog"), 0.0)
        async with open_runtime() as with_log, open_runtime() as without:
            without.live = NoLogs()
            runtimes = {"log": with_log, "nolog": without}
            for batch in range(agents):
                order = modes if batch % 2 == 0 else modes[::-1]
                for mode in order:
                    runtime = runtimes[mode]
                    gc.collect()
                    totals[f"loop_{mode}"] += await timed_runs(
                        partial(Agent.start, runtime, replay, tools=[add], name="loop"),
                        RUNS_PER_AGENT,
                    )
                    gc.collect()
                    totals[f"stream_{mode}"] += await timed_runs(
                        partial(Agent.start, runtime, deltas, name="stream"), STREAM_RUNS
                    )
            if with_log.live.statistics()["runs"] == 0 or without.live.statistics()["runs"]:
                raise SystemExit("log: the runs with the log kept none, or those without did")
        return {
            name: total / (agents * (RUNS_PER_AGENT if name.startswith("loop") else STREAM_RUNS))
            for name, total in totals.items()
        }

    await one_round()  # warm up
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, seconds in (await one_round()).items():
            samples.setdefault(name, []).append(seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


# -- resuming a durable job ------------------------------------------------------------------------


def postgres_url() -> tuple[str, bool]:
    """The server ``TRIO_AGENTS_TEST_POSTGRES`` names, else a throwaway one from ``pgserver``'s
    binaries: its URL, and whether it is the throwaway one."""
    named = os.environ.get(POSTGRES_ENV)
    if named:
        return named, False
    directory = tempfile.mkdtemp(prefix="trio-agents-live-postgres-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        pgserver: Any = importlib.import_module("pgserver")
        server = pgserver.get_server(directory, cleanup_mode="delete")
    return str(server.get_uri()), True


def drop_schema(url: str, schema: str) -> None:
    import psycopg  # a dependency of the PostgreSQL store

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


async def bench_resume(connect: Callable[[], Awaitable[Store]], resumes: int) -> dict[str, float]:
    """Seconds from a new follower to its first replayed event (p50, p99), over ``resumes``
    random positions of one long job, cold (nothing of the job read in this process yet: as
    a reconnect to another process finds it) and warm (the process's followers of the job
    read it before: as a reconnect to the same relay finds it), alternating; with the job's
    size."""
    registry = AgentRegistry()
    registry.add("long", Deltas(RESUME_DELTAS, RESUME_PACE))
    async with await connect() as store, open_runtime() as runtime:
        async with open_job_queue(store, registry, runtime, poll=0.05) as queue:
            id = await queue.enqueue(AgentJob.ask("long", "Go on."))
            result = await queue.result(id)
        check("resume", result.content, expected(RESUME_DELTAS))
        entries = len(await store.journal(id))
    rng = random.Random(25)
    samples: dict[str, list[float]] = {"cold": [], "warm": []}
    async with await connect() as follower:
        last = 0
        async for event in watch_job(follower, id):
            last = event.seq
        for number in range(2 * resumes + 10):
            mode = "cold" if number % 2 == 0 else "warm"
            if mode == "cold":
                forget_shared()  # (untimed)
            # A collection first (untimed): a full pass of the collector lasts as long as the
            # whole process's heap is big, whatever set it off -- it is not the resume's.
            gc.collect()
            after = rng.randrange(last)
            start = time.perf_counter()
            events = watch_job(follower, id, after=after)
            event = await events.__anext__()
            took = time.perf_counter() - start
            if event.seq != after + 1:
                raise SystemExit(f"resume: after {after} came {event.seq}")
            if number >= 10:  # (the first few warm the connection up)
                samples[mode].append(took)
        record = await follower.get(id)
    if record is None or record.status is not JobStatus.COMPLETED:
        raise SystemExit(f"resume: the job ended {record}")
    return {
        "cold_p50": percentile(samples["cold"], 0.5),
        "cold_p99": percentile(samples["cold"], 0.99),
        "warm_p50": percentile(samples["warm"], 0.5),
        "warm_p99": percentile(samples["warm"], 0.99),
        "events": last,
        "entries": entries,
    }


@contextlib.asynccontextmanager
async def postgres() -> AsyncIterator[Callable[[], Awaitable[Store]]]:
    url, throwaway = await trio.to_thread.run_sync(postgres_url)
    schema = f"live_{uuid.uuid4().hex[:16]}"
    try:
        yield lambda: PostgresRunStore.open(url, schema=schema)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(drop_schema, url, schema)
            if throwaway:
                await trio.sleep(0.3)  # a closed store's listener stops before the server does


# -- fan-out ---------------------------------------------------------------------------------------


async def fanout_round(followers: int, deltas: int) -> float:
    """Seconds per event of one paced run followed by ``followers`` (see the module
    docstring)."""
    gate = trio.Event()
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, Deltas(deltas, PACE, gate), name="fan")
        run = agent.stream("Go on.")
        ended: list[float] = []
        counts: list[int] = []

        async def drive() -> None:
            async with run:
                async for _ in run:
                    pass
            check("fanout", run.result.content, expected(deltas))

        async def follow() -> None:
            count = 0
            async for _ in runtime.watch(run.run_id):
                count += 1
            ended.append(time.perf_counter())
            counts.append(count)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            while runtime.live.get(run.run_id) is None:
                await trio.lowlevel.checkpoint()
            for _ in range(followers):
                nursery.start_soon(follow)
            await wait_all_tasks_blocked()  # every follower replayed the log and waits
            before = runtime.live.get(run.run_id)
            assert before is not None
            published = before.log.last
            start = time.perf_counter()
            gate.set()
        total = before.log.last
    if len(counts) != followers or set(counts) != {total}:
        raise SystemExit(f"fanout: followers read {sorted(set(counts))} events, not {total}")
    return (max(ended) - start) / (total - published)


async def one_against_many(
    round: Callable[[int, int], Awaitable[float]], followers: int, deltas: int, rounds: int
) -> dict[str, float]:
    """The median seconds per event of ``round(followers, deltas)`` with one follower
    (``one``) and with ``followers`` (``many``), the two alternating and their order swapping
    every round, a collection before each."""
    samples: dict[str, list[float]] = {"one": [], "many": []}
    for number in range(rounds):
        order = ("one", "many") if number % 2 == 0 else ("many", "one")
        for name in order:
            gc.collect()
            samples[name].append(await round(1 if name == "one" else followers, deltas))
    return {name: statistics.median(values) for name, values in samples.items()}


async def bench_fanout(deltas: int, rounds: int) -> dict[str, float]:
    """The median seconds per event with one follower and with :data:`FOLLOWERS`."""
    await fanout_round(FOLLOWERS, min(deltas, 100))  # warm up
    return await one_against_many(fanout_round, FOLLOWERS, deltas, rounds)


# -- fan-out over the relay's SSE route ------------------------------------------------------------

#: The relay's token in the ``sse`` fan-out.
SSE_TOKEN = "live-bench-token-0123456789abcdef"
#: Followers over the relay's event stream (quick, full): the full run holds 1,000 connections.
SSE_FOLLOWERS = (200, 1_000)
#: Deltas of the SSE fan-out's run (quick, full) and its rounds: each holds as many
#: connections as followers (fewer deltas than in-process: a round of 1,000 connections is slow).
SSE_DELTAS = (100, 300)
SSE_ROUNDS = (1, 3)


async def sse_fanout_round(followers: int, deltas: int) -> float:
    """Seconds per event of one paced run of a relay followed by ``followers`` over its
    Server-Sent Events route (see the module docstring), the followers in a process of their
    own (:mod:`benchmarks._sse_followers`)."""
    from actors.relay import RelayLimits, RelayServer, serve  # (only this scenario needs them)

    gate = trio.Event()
    limits = RelayLimits(max_watchers=followers + 1)
    relay = RelayServer(Deltas(deltas, PACE, gate), tokens=[SSE_TOKEN], limits=limits)
    async with trio.open_nursery() as nursery:
        (address,) = await nursery.start(partial(serve, relay, port=0, ping_interval=None))
        port = int(address.rsplit(":", 1)[1])
        # The run: its client leaves once it has the run's id; the run goes on (it waits
        # for the gate before its first delta).
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        body = (
            b'{"messages":[{"role":"user","content":"Go on."}],"version":3,'
            b'"cancel_on_disconnect":false}'
        )
        await stream.send_all(
            (
                f"POST /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {SSE_TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            + body
        )
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += await stream.receive_some(65536)
        await stream.aclose()
        head = answer.partition(b"\r\n\r\n")[0].decode("latin-1")
        run_id = next(
            value.strip()
            for name, _, value in (line.partition(":") for line in head.splitlines())
            if name.lower() == "x-relay-run-id"
        )
        command = [sys.executable, "-m", "benchmarks._sse_followers", str(port), run_id]
        command += [SSE_TOKEN, str(followers)]
        root = ROOT
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
        }
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, cwd=root, env=env
        )
        assert process.stdout is not None
        lines = LineReader(process.stdout)
        try:
            if await lines.next() != "ready":
                raise SystemExit("fanout (SSE): the followers did not all connect")
            if relay.statistics().watchers != followers:
                raise SystemExit(f"fanout (SSE): {relay.statistics().watchers} watchers")
            await wait_all_tasks_blocked(0.01)  # every follower read what there was and waits
            start = time.monotonic()
            gate.set()
            report = json.loads(await lines.next())
        finally:
            with trio.CancelScope(shield=True):
                await process.wait()
        if process.returncode != 0:
            raise SystemExit(f"fanout (SSE): the followers' process exited {process.returncode}")
        nursery.cancel_scope.cancel()
    ended: list[float] = report["ended"]
    counts: list[int] = report["counts"]
    total = deltas + 2  # the deltas, the usage, the terminal event
    if len(counts) != followers or set(counts) != {total}:
        raise SystemExit(f"fanout (SSE): followers read {sorted(set(counts))} events, not {total}")
    return (max(ended) - start) / deltas


class LineReader:
    """The lines of a process's output, one at a time."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> str:
        """The next line, without its end (raises SystemExit at the end of the output)."""
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some(1 << 20)
            if not chunk:
                raise SystemExit("fanout (SSE): the followers' process ended early")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


async def bench_sse_fanout(followers: int, deltas: int, rounds: int) -> dict[str, float]:
    """The median seconds per event with one SSE follower and with ``followers``."""
    await sse_fanout_round(followers, min(deltas, 50))  # warm up
    return await one_against_many(sse_fanout_round, followers, deltas, rounds)


# -- the benchmark ---------------------------------------------------------------------------------


async def run(quick: bool) -> Report:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    mode = 0 if quick else 1
    log = await bench_log(LOG_AGENTS[mode], LOG_ROUNDS[mode])
    with tempfile.TemporaryDirectory(prefix="live-bench-") as temporary:
        path = Path(temporary) / "jobs.db"
        sqlite = await bench_resume(partial(SQLiteRunStore.open, path), RESUMES[mode])
    async with postgres() as connect:
        pg = await bench_resume(connect, RESUMES[mode])
    fanout = await bench_fanout(FANOUT_DELTAS[mode], FANOUT_ROUNDS[mode])
    sse = await bench_sse_fanout(SSE_FOLLOWERS[mode], SSE_DELTAS[mode], SSE_ROUNDS[mode])

    us, ms = 1e6, 1e3
    metrics: dict[str, float] = {
        "run_with_log_us": log["loop_log"] * us,
        "run_without_log_us": log["loop_nolog"] * us,
        "stream_run_with_log_us": log["stream_log"] * us,
        "stream_run_without_log_us": log["stream_nolog"] * us,
        "stream_deltas": STREAM_DELTAS,
        "resume_sqlite_p50_ms": sqlite["cold_p50"] * ms,
        "resume_sqlite_p99_ms": sqlite["cold_p99"] * ms,
        "resume_sqlite_warm_p50_ms": sqlite["warm_p50"] * ms,
        "resume_sqlite_warm_p99_ms": sqlite["warm_p99"] * ms,
        "resume_postgres_p50_ms": pg["cold_p50"] * ms,
        "resume_postgres_p99_ms": pg["cold_p99"] * ms,
        "resume_postgres_warm_p50_ms": pg["warm_p50"] * ms,
        "resume_postgres_warm_p99_ms": pg["warm_p99"] * ms,
        "resume_job_events": sqlite["events"],
        "resume_job_entries": sqlite["entries"],
        "resumes": RESUMES[mode],
        "fanout_one_us_per_event": fanout["one"] * us,
        f"fanout_{FOLLOWERS}_us_per_event": fanout["many"] * us,
        "fanout_pace_us": PACE * us,
        "fanout_deltas": FANOUT_DELTAS[mode],
        "fanout_sse_one_us_per_event": sse["one"] * us,
        "fanout_sse_many_us_per_event": sse["many"] * us,
        "fanout_sse_followers": SSE_FOLLOWERS[mode],
        "fanout_sse_deltas": SSE_DELTAS[mode],
    }
    ratios = {
        "run_time_with_log_vs_without": log["loop_log"] / log["loop_nolog"],
        "stream_time_with_log_vs_without": log["stream_log"] / log["stream_nolog"],
        "resume_p99_sqlite_over_target": sqlite["cold_p99"] / RESUME_TARGET_SQLITE,
        "resume_p99_postgres_over_target": pg["cold_p99"] / RESUME_TARGET_POSTGRES,
        "resume_warm_p99_sqlite_over_target": sqlite["warm_p99"] / RESUME_TARGET_SQLITE,
        "resume_warm_p99_postgres_over_target": pg["warm_p99"] / RESUME_TARGET_POSTGRES,
        f"fanout_{FOLLOWERS}_time_per_event_vs_one": fanout["many"] / fanout["one"],
        "fanout_sse_time_per_event_vs_one": sse["many"] / sse["one"],
    }
    lines = [
        f"run (two turns, one tool call) with the event log: {metrics['run_with_log_us']:.0f} us "
        f"({ratios['run_time_with_log_vs_without']:.3f}x vs without it, "
        f"{metrics['run_without_log_us']:.0f} us; target <= {LOG_TARGET})",
        f"for information, a run streaming {STREAM_DELTAS} deltas with the log: "
        f"{metrics['stream_run_with_log_us']:.0f} us "
        f"({ratios['stream_time_with_log_vs_without']:.3f}x vs without it, "
        f"{metrics['stream_run_without_log_us']:.0f} us)",
        f"resume (a new follower of a job of {sqlite['events']:.0f} events, {sqlite['entries']:.0f}"
        f" journal entries, to its first replayed event; {RESUMES[mode]} reconnects each way), "
        f"cold (nothing of the job read in the process yet): SQLite p99 "
        f"{metrics['resume_sqlite_p99_ms']:.2f} ms (target <= {RESUME_TARGET_SQLITE * ms:.0f} ms; "
        f"p50 {metrics['resume_sqlite_p50_ms']:.2f} ms), PostgreSQL p99 "
        f"{metrics['resume_postgres_p99_ms']:.2f} ms (target <= "
        f"{RESUME_TARGET_POSTGRES * ms:.0f} ms; p50 {metrics['resume_postgres_p50_ms']:.2f} ms)",
        f"resume, warm (the process's followers read the job before): SQLite p99 "
        f"{metrics['resume_sqlite_warm_p99_ms']:.2f} ms (p50 "
        f"{metrics['resume_sqlite_warm_p50_ms']:.2f} ms), PostgreSQL p99 "
        f"{metrics['resume_postgres_warm_p99_ms']:.2f} ms (p50 "
        f"{metrics['resume_postgres_warm_p50_ms']:.2f} ms)",
        f"fan-out (a run streaming {FANOUT_DELTAS[mode]} deltas, one every {PACE * ms:g} ms): "
        f"{metrics[f'fanout_{FOLLOWERS}_us_per_event']:.0f} us per event with {FOLLOWERS:,} "
        f"followers ({ratios[f'fanout_{FOLLOWERS}_time_per_event_vs_one']:.2f}x vs one "
        f"follower, {metrics['fanout_one_us_per_event']:.0f} us; target <= {FANOUT_TARGET:g})",
        f"fan-out over the relay's SSE route (a run of {SSE_DELTAS[mode]} deltas at that pace, "
        "GET /v1/runs/{id}/events on loopback): "
        f"{metrics['fanout_sse_many_us_per_event']:.0f} us per event with "
        f"{SSE_FOLLOWERS[mode]:,} followers "
        f"({ratios['fanout_sse_time_per_event_vs_one']:.2f}x vs one follower, "
        f"{metrics['fanout_sse_one_us_per_event']:.0f} us; target <= {FANOUT_TARGET:g})",
    ]
    for name, value in {**metrics, **ratios}.items():
        if not (math.isfinite(value) and value > 0):
            raise SystemExit(f"{name}: {value} is not a positive number")
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    return run_main(run, argv, doc=__doc__, quick="fewer runs, reconnects and rounds")


if __name__ == "__main__":
    raise SystemExit(main())
