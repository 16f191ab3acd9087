"""Benchmark: durable jobs on PostgreSQL scaled out to several worker processes, the job queue
itself against PgQueuer, and how soon an idle worker picks a submitted job up.

Usage: ``python benchmarks/scaleout.py [--quick] [--json]``

PostgreSQL is the server ``TRIO_AGENTS_TEST_POSTGRES`` names (a ``postgresql://`` URL), else a
throwaway one this benchmark starts from the binaries of the ``pgserver`` package, as the tests
do (``tests/postgres_server.py``). Every measured run gets a fresh schema
(``PostgresRunStore.open(url, schema=...)``; PgQueuer's tables likewise), dropped at the end.
Workers are processes of their own: a script this benchmark writes to a temporary directory (an
``AgentRegistry`` and ``open_job_queue`` on a ``PostgresRunStore``, the default lease and poll),
started, and ready (its queue open) before anything is timed. Jobs are submitted from this
process with ``PostgresRunStore.admit`` (what ``JobQueue.enqueue`` and ``trio-agents jobs
submit`` do). A job asks an agent one question; its model is :class:`Timed`, a deterministic
provider written here, which notes ``time.time()`` as the call starts, waits its latency
(``trio.sleep``), and answers ``started at <that time>``, calling no tool. A job is thus its
admission, its acquisition, its journaled run (the input and request before the call, the
response and the end after it) and its completion. Every job is checked: completed, on its
first attempt, with that answer. Scenarios:

* ``jobs_per_s_4_workers_vs_1`` (target >= 3.2): I/O-bound jobs, whose model answers after
  :data:`LATENCY` (50 ms), run by 4 worker processes against 1, each of concurrency
  :data:`CONCURRENCY` (2). A worker process holds at most 2 jobs at once, so it completes at
  most 2 / 50 ms = 40 jobs per second however fast the database is: its slots are the bottleneck
  measured, and scaling out adds processes (4 of them: 160 jobs/s at best). Two rather than the
  worker's default of 4 so that four workers' load stays within the machine the benchmark runs
  on (2 cores, shared by the workers, PostgreSQL and this process): a job costs milliseconds of
  CPU in its worker and in PostgreSQL, and at a few hundred jobs per second those cores, not the
  workers, would be what is measured. N jobs (:data:`SCALE_JOBS`: 160 with ``--quick``, else
  1000) are submitted by :data:`SUBMITTERS` (8) tasks, each admitting its share one after
  another (admission is much faster than the workers), and jobs/s is N over the wall time from
  the first submit until no job is queued or running (``PostgresRunStore.list``, polled every
  :data:`DRAIN_POLL` s). The ratio is 4 workers' jobs/s over 1 worker's, each the median of
  :data:`SCALE_ROUNDS` rounds (1 with ``--quick``, else 2; the order of the two reversed every
  round).
* ``queue_jobs_per_s_vs_pgqueuer`` (target >= 1.0): the queue itself, with no-op jobs (the model
  answers at once): N jobs (:data:`QUEUE_JOBS`: 300 with ``--quick``, else 2000) submitted by 8
  tasks, each one job after another, then taken and completed by one worker process, jobs/s
  being N over the time from the first submit until none is left; ours against PgQueuer, on the
  same database. Ours: :data:`SUBMITTERS` trio tasks admitting from this process, and one worker
  of concurrency :data:`QUEUE_CONCURRENCY` (16; more does not go faster), the end polled as
  above. PgQueuer: a producer process
  (:data:`SUBMITTERS` asyncio tasks on an asyncpg pool of as many connections, each
  ``Queries.enqueue`` one job after another) and a consumer process (a ``QueueManager`` on one
  asyncpg connection with its defaults -- batches of 10, no concurrency limit -- and an
  entrypoint that does nothing), its tables installed in their own schema with its default
  durability (every table logged, as ours are); a job is done when PgQueuer has moved it from
  its queue table to its log, and the end is when the queue table is empty (polled every
  :data:`DRAIN_POLL` s); every job must be logged ``successful``. PgQueuer is not a dependency
  of this project: it runs in subprocesses of the Python named by
  ``TRIO_AGENTS_PGQUEUER_PYTHON`` (by default ``/tmp/pgqvenv/bin/python`` when that exists),
  from a script this benchmark writes. When it cannot run, the reason is printed and the ratio
  left out. Each side's jobs/s is the median of :data:`QUEUE_ROUNDS` rounds (1 with
  ``--quick``, else 3), the two sides alternating (the order reversed every round).
* ``pickup_p99_ms`` (target <= 50): with 4 idle worker processes waiting (concurrency 2, a fresh
  schema, no other jobs), no-op jobs submitted one at a time (:data:`PICKUPS`: 40 with
  ``--quick``, else 200), each once the one before has completed (its record polled) and a
  random 20-270 ms later (:data:`PICKUP_GAP`: so that the submits fall at random moments of any
  periodic wait in the workers, not in step with one). A job's pickup is the time from the
  moment its ``admit`` returned in this process (committed) to the moment its model call
  started in the worker that took it -- both ``time.time()`` on this machine, the second noted
  by the provider and carried in the job's answer, so exact: it covers the worker hearing of
  the job (the notification, or its poll), acquiring it, starting its agent, and journaling its
  input and first request before the call. Reported: its p50 and p99 (nearest rank) in ms, and
  ``pickup_p99_over_target`` (the p99 over 50 ms).

Printed, a line each: jobs/s with 1 and with 4 workers and their ratio; the queue's jobs/s
against PgQueuer's (or why PgQueuer could not run); the pickup's p50, p99 and maximum. With
``--json`` the last line printed is one JSON object ``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ``benchmarks/actors.py`` shares its name with the ``actors`` package, and a script's own
# directory comes first on ``sys.path``: put the repository root (where the package lives) first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib
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
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

import trio

from actors.durable import AgentRegistry, PostgresRunStore
from actors.providers import ProviderStream, StreamingProvider
from benchmarks._common import ReadyStream, Report, run_main
from protocols.jobs import AgentJob, JobRecord, JobStatus
from protocols.messages import (
    Delta,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
    Usage,
)

ROOT = Path(__file__).resolve().parent.parent
#: Names the PostgreSQL server to use (else a throwaway one is started).
POSTGRES_ENV = "TRIO_AGENTS_TEST_POSTGRES"
#: How the URL reaches the worker and PgQueuer processes (kept off their command lines).
URL_ENV = "TRIO_AGENTS_SCALEOUT_URL"
#: The agents a job may name: the model answers after :data:`LATENCY`, or at once.
IO_AGENT = "io"
NOOP_AGENT = "noop"
#: The answer every job gives, followed by the time its model call started.
STARTED = "started at "
#: Seconds the I/O-bound jobs' model takes to answer.
LATENCY = 0.05
#: Jobs a worker process runs at once in the scale-out and pickup scenarios (see the module
#: docstring for why not the worker's default of 4).
CONCURRENCY = 2
#: Worker processes scaled out to.
WORKERS = 4
#: Tasks that submit the jobs, each one after another.
SUBMITTERS = 8
#: Jobs per run (quick, full) and rounds (quick, full) of the scale-out scenario.
SCALE_JOBS = (160, 1000)
SCALE_ROUNDS = (1, 2)
#: The queue against PgQueuer: jobs per run and rounds (quick, full), and our worker's
#: concurrency.
QUEUE_JOBS = (300, 2000)
QUEUE_ROUNDS = (1, 3)
QUEUE_CONCURRENCY = 16
#: Jobs submitted one at a time to idle workers (quick, full), and the range of the random gap
#: between one's completion and the next one's submit (seconds): wider than any periodic wait in
#: a worker (its listener's 0.2 s), so that the submits do not fall into step with one.
PICKUPS = (40, 200)
PICKUP_GAP = (0.02, 0.27)
#: The pickup target (ms).
PICKUP_P99_TARGET_MS = 50.0
#: How often the end of a run is looked for (seconds).
DRAIN_POLL = 0.01
#: Seconds a worker (or PgQueuer's process) may take to start, and a run to end.
STARTUP_TIMEOUT = 60.0
RUN_TIMEOUT = 300.0
#: Where PgQueuer is looked for unless ``TRIO_AGENTS_PGQUEUER_PYTHON`` names a Python.
PGQUEUER_DEFAULT_PYTHON = "/tmp/pgqvenv/bin/python"


# -- the model -----------------------------------------------------------------------------------


class LateStream(ReadyStream):
    """A :class:`ReadyStream` that first waits ``latency`` seconds (trio time)."""

    def __init__(self, result: ProviderResult, latency: float) -> None:
        super().__init__(result)
        self._latency = latency

    async def __anext__(self) -> Delta:
        if self._latency > 0:
            latency, self._latency = self._latency, 0.0
            await trio.sleep(latency)
        return await super().__anext__()


class Timed(StreamingProvider):
    """Every job's model: notes ``time.time()`` as a call starts, waits ``latency`` seconds,
    then answers ``started at <that time>`` (no tool call)."""

    name = "timed"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        started = time.time()
        result = ProviderResult(
            content=f"{STARTED}{started!r}", usage=Usage(prompt=8, completion=8)
        )
        return LateStream(result, self.latency)


def registry() -> AgentRegistry:
    """The agents jobs name here: :data:`IO_AGENT` (answers after :data:`LATENCY`) and
    :data:`NOOP_AGENT` (answers at once)."""
    agents = AgentRegistry()
    agents.add(IO_AGENT, Timed(LATENCY))
    agents.add(NOOP_AGENT, Timed(0.0))
    return agents


# -- PostgreSQL ----------------------------------------------------------------------------------


def postgres_url() -> tuple[str, bool]:
    """The server ``TRIO_AGENTS_TEST_POSTGRES`` names, else a throwaway one from ``pgserver``'s
    binaries (stopped and deleted when this process exits): its URL, and whether it is the
    throwaway one."""
    named = os.environ.get(POSTGRES_ENV)
    if named:
        return named, False
    directory = tempfile.mkdtemp(prefix="trio-agents-scaleout-postgres-")
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.simplefilter("ignore")
        pgserver: Any = importlib.import_module("pgserver")
        server = pgserver.get_server(directory, cleanup_mode="delete")
    return str(server.get_uri()), True


def new_schema() -> str:
    """A schema name nothing else uses."""
    return f"scaleout_{uuid.uuid4().hex[:16]}"


def execute(url: str, *queries: str) -> list[tuple[Any, ...]]:
    """Run ``queries`` in one autocommit connection (blocking); the last one's rows."""
    import psycopg  # a dependency of the PostgreSQL store, imported when used

    rows: list[tuple[Any, ...]] = []
    with psycopg.connect(url, autocommit=True) as conn:
        for query in queries:
            cursor = conn.execute(query.encode())
            rows = cursor.fetchall() if cursor.description is not None else []
    return rows


async def emptied(url: str, table: str) -> None:
    """Return once ``table`` has no rows (polled every :data:`DRAIN_POLL` s, on one
    connection)."""
    import psycopg

    conn = await trio.to_thread.run_sync(partial(psycopg.connect, url, autocommit=True))
    query = f"SELECT 1 FROM {table} LIMIT 1".encode()
    try:
        with trio.move_on_after(RUN_TIMEOUT):
            # Other processes empty it: the table is all there is to look at.
            while await trio.to_thread.run_sync(lambda: conn.execute(query).fetchone()):  # noqa: ASYNC110
                await trio.sleep(DRAIN_POLL)
            return
    finally:
        await trio.to_thread.run_sync(conn.close)
    raise SystemExit(f"{table} was not emptied within {RUN_TIMEOUT:.0f} s")


def drop_schemas(url: str, schemas: Sequence[str]) -> None:
    """Drop ``schemas`` and what they hold (blocking)."""
    if schemas:
        execute(url, *(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE' for schema in schemas))


# -- worker processes ----------------------------------------------------------------------------

#: A worker process: the registry and a job queue of concurrency ``argv[2]`` on the store in the
#: schema ``argv[1]`` of the database :data:`URL_ENV` names; prints ``ready`` once it takes jobs.
WORKER_SCRIPT = """\
import os
import sys

import trio

sys.path.insert(0, {root!r})

from actors import open_runtime
from actors.durable import PostgresRunStore, open_job_queue
from benchmarks.scaleout import URL_ENV, registry


async def main(schema: str, concurrency: int) -> None:
    url = os.environ[URL_ENV]
    async with open_runtime() as runtime, await PostgresRunStore.open(url, schema=schema) as store:
        async with open_job_queue(store, registry(), runtime, concurrency=concurrency):
            print("ready", flush=True)
            await trio.sleep_forever()


trio.run(main, sys.argv[1], int(sys.argv[2]))
"""


class Lines:
    """The lines a process writes to a pipe, one at a time."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> bytes | None:
        """The next line, without its end; ``None`` once the pipe has closed."""
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some()
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line


def tail(log: Path) -> str:
    """The end of a log file, for an error message."""
    return log.read_text(errors="replace")[-2000:] if log.exists() else "(no output)"


@contextlib.asynccontextmanager
async def processes(
    commands: Sequence[Sequence[str]], log: Path, env: dict[str, str]
) -> AsyncIterator[list[trio.Process]]:
    """Start ``commands`` (stdout piped, stderr to ``log``) for the block; once each has
    printed its first line (returned with it), the block runs; then they are terminated."""
    async with trio.open_nursery() as nursery:
        started: list[trio.Process] = []
        with log.open("ab") as stderr:
            for command in commands:
                run = partial(
                    trio.run_process,
                    list(command),
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    env=env,
                    check=False,
                )
                started.append(await nursery.start(run))
        try:
            yield started
        finally:
            nursery.cancel_scope.cancel()  # each is terminated (SIGTERM), and waited for


async def first_line(process: trio.Process, log: Path, what: str) -> bytes:
    """The first line ``process`` prints (within :data:`STARTUP_TIMEOUT`)."""
    assert process.stdout is not None
    with trio.move_on_after(STARTUP_TIMEOUT):
        line = await Lines(process.stdout).next()
        if line is None:
            raise SystemExit(f"{what} exited before it was ready: {tail(log)}")
        return line
    raise SystemExit(f"{what} was not ready within {STARTUP_TIMEOUT:.0f} s: {tail(log)}")


@contextlib.asynccontextmanager
async def workers(
    directory: Path, url: str, schema: str, count: int, concurrency: int
) -> AsyncIterator[None]:
    """``count`` worker processes of ``concurrency`` on the store in ``schema``, ready, for the
    block."""
    script = directory / "worker.py"
    if not script.exists():
        script.write_text(WORKER_SCRIPT.format(root=str(ROOT)))
    command = [sys.executable, str(script), schema, str(concurrency)]
    log = directory / f"workers-{schema}.log"
    env = {**os.environ, URL_ENV: url}
    async with processes([command] * count, log, env) as started:
        for process in started:
            if await first_line(process, log, "a worker") != b"ready":
                raise SystemExit(f"a worker did not start: {tail(log)}")
        yield


# -- submitting jobs and waiting for them --------------------------------------------------------


async def submit(store: PostgresRunStore, agent: str, jobs: int) -> list[str]:
    """Admit ``jobs`` jobs for ``agent``, by :data:`SUBMITTERS` tasks each admitting its share
    one after another; their ids."""
    ids: list[str] = []

    async def submitter(count: int) -> None:
        for _ in range(count):
            admitted = await store.admit(AgentJob.ask(agent, "Go."))
            ids.append(admitted.record.id)

    async with trio.open_nursery() as nursery:
        for number in range(SUBMITTERS):
            nursery.start_soon(submitter, jobs // SUBMITTERS + (number < jobs % SUBMITTERS))
    return ids


async def drained(store: PostgresRunStore) -> None:
    """Return once no job is queued or running (polled every :data:`DRAIN_POLL` s)."""
    live = [JobStatus.QUEUED, JobStatus.RUNNING]
    with trio.move_on_after(RUN_TIMEOUT):
        # Other processes run the jobs: the store is all there is to look at.
        while await store.list(statuses=live, limit=1):  # noqa: ASYNC110
            await trio.sleep(DRAIN_POLL)
        return
    raise SystemExit(f"the jobs did not end within {RUN_TIMEOUT:.0f} s")


def started_at(record: JobRecord) -> float:
    """When the job's model call started (from its answer); fails loudly unless the job
    completed on its first attempt with the expected answer."""
    result = record.result
    if record.status is not JobStatus.COMPLETED or result is None:
        raise SystemExit(f"job {record.id} ended {record.status.value}: {record.error}")
    if record.attempts != 1 or record.takeovers or not result.content.startswith(STARTED):
        raise SystemExit(
            f"job {record.id}: {record.attempts} attempts, {record.takeovers} takeovers, "
            f"answer {result.content!r}"
        )
    return float(result.content[len(STARTED) :])


async def check_all(store: PostgresRunStore, ids: Sequence[str]) -> None:
    """Fail loudly unless the store holds exactly the jobs ``ids``, each as
    :func:`started_at` requires."""
    seen: list[str] = []
    after: int | None = None
    while True:
        page = await store.list(after=after, limit=1000)
        for record in page:
            started_at(record)
            seen.append(record.id)
        if len(page) < 1000:
            break
        after = page[-1].sequence
    if sorted(seen) != sorted(ids):
        raise SystemExit(f"the store holds {len(seen)} jobs, not the {len(ids)} submitted")


async def jobs_per_s(
    directory: Path,
    url: str,
    schemas: list[str],
    *,
    agent: str,
    jobs: int,
    count: int,
    concurrency: int,
) -> float:
    """``jobs`` jobs for ``agent`` through ``count`` worker processes of ``concurrency`` on a
    fresh schema: jobs per second from the first submit until none is queued or running."""
    schema = new_schema()
    schemas.append(schema)
    # Opened first, so the schema exists before the workers start.
    async with await PostgresRunStore.open(url, schema=schema) as store:
        async with workers(directory, url, schema, count, concurrency):
            start = time.perf_counter()
            ids = await submit(store, agent, jobs)
            await drained(store)
            elapsed = time.perf_counter() - start
        await check_all(store, ids)
    return jobs / elapsed


async def bench_scale(directory: Path, url: str, schemas: list[str], mode: int) -> dict[str, float]:
    """The median jobs/s of I/O-bound jobs with 1 worker process and with :data:`WORKERS`."""
    samples: dict[int, list[float]] = {1: [], WORKERS: []}
    for number in range(SCALE_ROUNDS[mode]):
        order = [1, WORKERS] if number % 2 == 0 else [WORKERS, 1]
        for count in order:
            rate = await jobs_per_s(
                directory,
                url,
                schemas,
                agent=IO_AGENT,
                jobs=SCALE_JOBS[mode],
                count=count,
                concurrency=CONCURRENCY,
            )
            samples[count].append(rate)
    return {f"{count}": statistics.median(values) for count, values in samples.items()}


# -- the queue against PgQueuer -----------------------------------------------------------------

#: PgQueuer, by role (``argv[1]``), on the database :data:`URL_ENV` names, its tables in the schema
#: ``PGQUEUER_SCHEMA`` names: ``install`` installs them and prints a JSON line of its version (or
#: ``{"unavailable": reason}``); ``consume`` runs a QueueManager whose entrypoint ``noop`` does
#: nothing, printing ``ready`` once its listener hears notifications; ``produce N K`` enqueues N
#: jobs for ``noop`` from K tasks on a pool of K connections, each one job after another, and
#: prints ``{"first": time.time() as the first was submitted, "done": ... as the last was}``.
PGQUEUER_SCRIPT = """\
import asyncio, json, os, sys, time
from datetime import timedelta

try:
    from importlib.metadata import version
    import asyncpg
    from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
except ImportError as error:
    print(json.dumps({"unavailable": f"pgqueuer cannot be imported ({error})"}), flush=True)
    raise SystemExit(0)

URL = os.environ[sys.argv[-1]]


async def install() -> None:
    connection = await asyncpg.connect(URL)
    try:
        await Queries(AsyncpgDriver(connection)).install()
    finally:
        await connection.close()
    print(json.dumps({"version": version("pgqueuer"), "asyncpg": version("asyncpg")}), flush=True)


async def consume() -> None:
    connection = await asyncpg.connect(URL)
    qm = QueueManager(Queries(AsyncpgDriver(connection)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        pass

    async def ready() -> None:
        while True:
            await asyncio.sleep(0.05)
            try:
                await qm.listener_healthy(timeout=timedelta(seconds=1))
            except Exception:
                continue
            print("ready", flush=True)
            return

    task = asyncio.create_task(ready())
    await qm.run()
    await task


async def produce(jobs: int, tasks: int) -> None:
    pool = await asyncpg.create_pool(URL, min_size=tasks, max_size=tasks)
    queries = Queries(AsyncpgPoolDriver(pool))
    first = []

    async def submitter(count: int) -> None:
        for _ in range(count):
            first.append(time.time())
            await queries.enqueue("noop", None)

    await asyncio.gather(
        *(submitter(jobs // tasks + (number < jobs % tasks)) for number in range(tasks))
    )
    done = time.time()
    await pool.close()
    print(json.dumps({"first": min(first), "done": done}), flush=True)


role = sys.argv[1]
if role == "install":
    asyncio.run(install())
elif role == "consume":
    asyncio.run(consume())
elif role == "produce":
    asyncio.run(produce(int(sys.argv[2]), int(sys.argv[3])))
else:
    raise SystemExit(f"unknown role {role!r}")
"""


def pgqueuer_python() -> str | None:
    """The Python to run PgQueuer with: ``TRIO_AGENTS_PGQUEUER_PYTHON``, else the default when
    it exists."""
    named = os.environ.get("TRIO_AGENTS_PGQUEUER_PYTHON")
    if named:
        return named
    return PGQUEUER_DEFAULT_PYTHON if os.path.exists(PGQUEUER_DEFAULT_PYTHON) else None


class PgQueuer:
    """PgQueuer's processes (see :data:`PGQUEUER_SCRIPT`), one round at a time."""

    def __init__(self, python: str, directory: Path, url: str) -> None:
        self.python = python
        self.directory = directory
        self.url = url
        self.script = directory / "pgqueuer_bench.py"
        self.script.write_text(PGQUEUER_SCRIPT)
        self.info: dict[str, Any] = {}

    def _env(self, schema: str) -> dict[str, str]:
        return {
            **os.environ,
            URL_ENV: self.url,
            "PGQUEUER_SCHEMA": schema,
            # NOTIFY channels are the database's, not the schema's: one of its own.
            "PGQUEUER_CHANNEL": f"ch_{schema}",
        }

    def _command(self, *arguments: str) -> list[str]:
        return [self.python, str(self.script), *arguments, URL_ENV]

    async def _run(self, schema: str, *arguments: str) -> dict[str, Any] | str:
        """Run a role to its end: its JSON line, or why it failed."""
        log = self.directory / f"pgqueuer-{schema}.log"
        try:
            with log.open("ab") as stderr, trio.fail_after(RUN_TIMEOUT):
                done = await trio.run_process(
                    self._command(*arguments),
                    capture_stdout=True,
                    stderr=stderr,
                    env=self._env(schema),
                    check=False,
                )
        except OSError as error:
            return f"{self.python} cannot be run ({error})"
        except trio.TooSlowError:
            return f"{' '.join(arguments)} did not end within {RUN_TIMEOUT:.0f} s"
        lines = done.stdout.decode(errors="replace").strip().splitlines()
        if done.returncode != 0 or not lines:
            last = tail(log).strip().splitlines()
            return f"{arguments[0]} exited {done.returncode} ({last[-1] if last else 'no output'})"
        try:
            answer = json.loads(lines[-1])
        except ValueError:
            return f"{arguments[0]} printed {lines[-1][:200]!r}"
        if not isinstance(answer, dict):
            return f"{arguments[0]} printed {lines[-1][:200]!r}"
        if "unavailable" in answer:
            return str(answer["unavailable"])
        return answer

    async def jobs_per_s(self, schemas: list[str], jobs: int) -> float | str:
        """One round: ``jobs`` no-op jobs enqueued by the producer process and completed by the
        consumer process, on fresh tables; jobs per second, or why PgQueuer could not run."""
        schema = new_schema()
        schemas.append(schema)
        installed = await self._run(schema, "install")
        if isinstance(installed, str):
            return installed
        self.info = installed
        log = self.directory / f"pgqueuer-{schema}.log"
        async with processes([self._command("consume")], log, self._env(schema)) as (consumer,):
            if await first_line(consumer, log, "PgQueuer's consumer") != b"ready":
                return f"its consumer did not start ({tail(log).strip()[-200:]})"
            produced = await self._run(schema, "produce", str(jobs), str(SUBMITTERS))
            if isinstance(produced, str):
                return produced
            await emptied(self.url, f'"{schema}".pgqueuer')
            end = time.time()
        logged = await trio.to_thread.run_sync(
            execute,
            self.url,
            f'SELECT status::text, count(*) FROM "{schema}".pgqueuer_log GROUP BY status',
        )
        counts = {str(status): int(count) for status, count in logged}
        if counts.get("successful") != jobs:
            raise SystemExit(f"PgQueuer logged {counts}, not {jobs} successful jobs")
        return jobs / (end - float(produced["first"]))


async def bench_queue(
    directory: Path, url: str, schemas: list[str], mode: int
) -> tuple[dict[str, float], str | None, dict[str, Any]]:
    """The median jobs/s of no-op jobs through our queue (``"ours"``) and PgQueuer's
    (``"pgqueuer"``, absent when it could not run: then the reason), and what PgQueuer said of
    itself (its version)."""
    python = pgqueuer_python()
    other = PgQueuer(python, directory, url) if python is not None else None
    unavailable = None if python is not None else "no Python to run it with"
    samples: dict[str, list[float]] = {"ours": [], "pgqueuer": []}
    jobs = QUEUE_JOBS[mode]
    for number in range(QUEUE_ROUNDS[mode]):
        order = ["ours", "pgqueuer"] if number % 2 == 0 else ["pgqueuer", "ours"]
        for name in order:
            if name == "ours":
                rate = await jobs_per_s(
                    directory,
                    url,
                    schemas,
                    agent=NOOP_AGENT,
                    jobs=jobs,
                    count=1,
                    concurrency=QUEUE_CONCURRENCY,
                )
                samples["ours"].append(rate)
            elif other is not None and unavailable is None:
                measured = await other.jobs_per_s(schemas, jobs)
                if isinstance(measured, str):
                    unavailable = f"{measured} (with {python})"
                else:
                    samples["pgqueuer"].append(measured)
    medians = {name: statistics.median(values) for name, values in samples.items() if values}
    if unavailable is not None:
        medians.pop("pgqueuer", None)
        return medians, unavailable, {}
    assert other is not None
    return medians, None, other.info


# -- pickup by idle workers ----------------------------------------------------------------------


async def bench_pickup(directory: Path, url: str, schemas: list[str], mode: int) -> list[float]:
    """Each pickup's seconds (see the module docstring), in the order submitted."""
    schema = new_schema()
    schemas.append(schema)
    pickups: list[float] = []
    rng = random.Random(15)
    async with (
        await PostgresRunStore.open(url, schema=schema) as store,
        workers(directory, url, schema, WORKERS, CONCURRENCY),
    ):
        await trio.sleep(0.5)  # every worker is listening and idle
        for _ in range(PICKUPS[mode]):
            admitted = await store.admit(AgentJob.ask(NOOP_AGENT, "Go."))
            submitted = time.time()
            id = admitted.record.id
            with trio.fail_after(RUN_TIMEOUT):
                # Another process runs it: the store is all there is to look at.
                while True:
                    record = await store.get(id)
                    if record is not None and record.terminal:
                        break
                    await trio.sleep(DRAIN_POLL)
            pickups.append(started_at(record) - submitted)
            await trio.sleep(rng.uniform(*PICKUP_GAP))
    return pickups


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


# -- the benchmark -------------------------------------------------------------------------------


async def run(quick: bool) -> Report:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    mode = 0 if quick else 1
    url, throwaway = await trio.to_thread.run_sync(postgres_url)
    schemas: list[str] = []
    with tempfile.TemporaryDirectory(prefix="scaleout-bench-") as temporary:
        directory = Path(temporary)
        try:
            scale = await bench_scale(directory, url, schemas, mode)
            queue, unavailable, info = await bench_queue(directory, url, schemas, mode)
            pickups = await bench_pickup(directory, url, schemas, mode)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(drop_schemas, url, schemas)
                if throwaway:
                    # A closed store's listener thread stops within 0.2 s: before the server
                    # does (at exit), or it warns that it lost its connection.
                    await trio.sleep(0.3)

    ms = 1e3
    one, many = scale["1"], scale[str(WORKERS)]
    metrics: dict[str, float] = {
        "jobs_per_s_1_worker": one,
        f"jobs_per_s_{WORKERS}_workers": many,
        "scale_jobs": SCALE_JOBS[mode],
        "scale_concurrency": CONCURRENCY,
        "scale_latency_ms": LATENCY * ms,
        "scale_ceiling_jobs_per_s_1_worker": CONCURRENCY / LATENCY,
        "queue_jobs_per_s": queue["ours"],
        "queue_jobs": QUEUE_JOBS[mode],
        "queue_concurrency": QUEUE_CONCURRENCY,
        "pickup_p50_ms": percentile(pickups, 0.5) * ms,
        "pickup_p99_ms": percentile(pickups, 0.99) * ms,
        "pickup_max_ms": max(pickups) * ms,
        "pickups": len(pickups),
    }
    ratios: dict[str, float] = {
        f"jobs_per_s_{WORKERS}_workers_vs_1": many / one,
        "pickup_p99_over_target": metrics["pickup_p99_ms"] / PICKUP_P99_TARGET_MS,
    }
    rounds = SCALE_ROUNDS[mode]
    lines = [
        f"scale-out ({SCALE_JOBS[mode]} jobs whose model answers after {LATENCY * ms:.0f} ms; "
        f"worker processes of concurrency {CONCURRENCY}, at most {CONCURRENCY / LATENCY:.0f} "
        f"jobs/s each; first submit to last completion, median of {rounds} rounds): "
        f"{one:,.1f} jobs/s with 1 worker, {many:,.1f} with {WORKERS} "
        f"({ratios[f'jobs_per_s_{WORKERS}_workers_vs_1']:.2f}x; target >= 3.2)",
    ]
    if "pgqueuer" in queue:
        theirs = queue["pgqueuer"]
        metrics["pgqueuer_jobs_per_s"] = theirs
        ratios["queue_jobs_per_s_vs_pgqueuer"] = queue["ours"] / theirs
        lines.append(
            f"the queue ({QUEUE_JOBS[mode]} no-op jobs submitted by {SUBMITTERS} tasks, one "
            f"worker process; median of {QUEUE_ROUNDS[mode]} rounds): {queue['ours']:,.0f} "
            f"jobs/s (concurrency {QUEUE_CONCURRENCY}) vs PgQueuer {info.get('version')} "
            f"{theirs:,.0f} jobs/s ({ratios['queue_jobs_per_s_vs_pgqueuer']:.2f}x; target >= 1)"
        )
    else:
        lines += [
            f"vs PgQueuer: unavailable: {unavailable}",
            f"the queue ({QUEUE_JOBS[mode]} no-op jobs, one worker process of concurrency "
            f"{QUEUE_CONCURRENCY}): {queue['ours']:,.0f} jobs/s; no ratio (PgQueuer could not run)",
        ]
    lines.append(
        f"pickup by {WORKERS} idle workers ({len(pickups)} jobs one at a time; admit returned to "
        f"the model call starting in a worker): p50 {metrics['pickup_p50_ms']:.1f} ms, p99 "
        f"{metrics['pickup_p99_ms']:.1f} ms (target <= {PICKUP_P99_TARGET_MS:g}), max "
        f"{metrics['pickup_max_ms']:.1f} ms"
    )
    for name, value in {**metrics, **ratios}.items():
        if not (math.isfinite(value) and value > 0):
            raise SystemExit(f"{name}: {value} is not a positive number")
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    return run_main(run, argv, doc=__doc__, quick="fewer jobs, rounds and pickups")


if __name__ == "__main__":
    raise SystemExit(main())
