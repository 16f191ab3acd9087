"""Benchmark: durable jobs on PostgreSQL scaled out to several worker processes, the job queue
itself against PgQueuer and DBOS's queue, and how soon an idle worker picks a submitted job up.

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
* ``queue_jobs_per_s_vs_pgqueuer`` (target >= 0.4; PgQueuer does less per job) and
  ``queue_jobs_per_s_vs_dbos`` (target >= 3): the queue itself, with no-op jobs (the model
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
  left out. DBOS likewise (``TRIO_AGENTS_DBOS_PYTHON``, by default ``/tmp/dbosvenv/bin/python``;
  :mod:`benchmarks._pg_peers`): a consumer process running a DBOS queue of
  ``worker_concurrency`` :data:`QUEUE_CONCURRENCY` on its PostgreSQL system database (a fresh
  schema), polled every :data:`~benchmarks._pg_peers.DBOS_POLL` s, whose workflow does nothing,
  and a producer process whose :data:`SUBMITTERS` threads each ``DBOSClient.enqueue`` one after
  another; the end is when no workflow is enqueued or pending, and every one must have
  succeeded. Each side's jobs/s is the median of :data:`QUEUE_ROUNDS` rounds (1 with
  ``--quick``, else 3), the sides alternating (the order reversed every round). Reported with it
  for ours: ``statements_per_job`` (target <= 8) and ``round_trips_per_job`` -- every statement
  the stores' connections ran (``PostgresRunStore.statistics()``, which counts each
  ``execute`` of its writer and reader connections; its listener's one ``LISTEN`` aside): the
  submitting store's while admitting, plus the worker's from its start until the jobs were
  done (asked for with ``SIGUSR1``; its idle looks for work included), over N.
* ``pickup_p99_ms`` (target <= 25): with 4 idle worker processes waiting (concurrency 2, a fresh
  schema, no other jobs), no-op jobs submitted one at a time (:data:`PICKUPS`: 40 with
  ``--quick``, else 200), each once the one before has completed (its record polled) and a
  random 20-270 ms later (:data:`PICKUP_GAP`: so that the submits fall at random moments of any
  periodic wait in the workers, not in step with one). A job's pickup is the time from the
  moment its ``admit`` returned in this process (committed) to the moment its model call
  started in the worker that took it -- both ``time.time()`` on this machine, the second noted
  by the provider and carried in the job's answer, so exact: it covers the worker hearing of
  the job (the notification, or its poll), acquiring it, starting its agent, and journaling its
  input and first request before the call. Reported: its p50 and p99 (nearest rank) in ms, and
  ``pickup_p99_over_target`` (the p99 over 25 ms).

Printed, a line each: jobs/s with 1 and with 4 workers and their ratio; the queue's jobs/s,
against PgQueuer's and DBOS's (or why one could not run), and its statements per job; the
pickup's p50, p99 and maximum. With ``--json`` the last line printed is one JSON object
``{"metrics": {...}, "ratios": {...}}``.
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
import signal
import statistics
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio

from actors.durable import AgentRegistry, PostgresRunStore
from actors.providers import ProviderStream, StreamingProvider
from benchmarks._common import ReadyStream, Report, run_main
from benchmarks._pg_peers import (
    DBOS_POLL,
    DRAIN_POLL,
    RUN_TIMEOUT,
    STARTUP_TIMEOUT,
    URL_ENV,
    DBOSQueue,
    PgQueuer,
    dbos_python,
    execute,
    first_line,
    new_schema,
    pgqueuer_python,
    processes,
    tail,
)
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
#: (:data:`URL_ENV` -- how the URL reaches the worker processes -- and the other shared
#: constants are :mod:`benchmarks._pg_peers`'s.)
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
#: The queue against PgQueuer and DBOS: jobs per run and rounds (quick, full), and our worker's
#: concurrency (DBOS's queue has the same).
QUEUE_JOBS = (300, 2000)
QUEUE_ROUNDS = (1, 3)
QUEUE_CONCURRENCY = 16
#: Jobs submitted one at a time to idle workers (quick, full), and the range of the random gap
#: between one's completion and the next one's submit (seconds): wider than any periodic wait in
#: a worker (its listener's 0.2 s), so that the submits do not fall into step with one.
PICKUPS = (40, 200)
PICKUP_GAP = (0.02, 0.27)
#: The targets: pickup p99 (ms), the queue's jobs/s over PgQueuer's, statements per job.
PICKUP_P99_TARGET_MS = 25.0
QUEUE_VS_PGQUEUER_TARGET = 0.4
QUEUE_VS_DBOS_TARGET = 3.0
STATEMENTS_TARGET = 8.0


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


def drop_schemas(url: str, schemas: Sequence[str]) -> None:
    """Drop ``schemas`` and what they hold (blocking)."""
    if schemas:
        execute(url, *(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE' for schema in schemas))


# -- worker processes ----------------------------------------------------------------------------

#: A worker process: the registry and a job queue of concurrency ``argv[2]`` on the store in the
#: schema ``argv[1]`` of the database :data:`URL_ENV` names; prints ``ready`` once it takes jobs.
#: On ``SIGUSR1`` it writes its store's ``statistics()`` (the statements and round trips its
#: connections made) as JSON to ``<argv[3]>-<pid>.json``.
WORKER_SCRIPT = """\
import json
import os
import signal
import sys

import trio

sys.path.insert(0, {root!r})

from actors import open_runtime
from actors.durable import PostgresRunStore, open_job_queue
from benchmarks.scaleout import URL_ENV, registry


async def counts(store: PostgresRunStore, prefix: str) -> None:
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            path = f"{{prefix}}-{{os.getpid()}}.json"
            with open(path + ".tmp", "w") as file:
                json.dump(store.statistics(), file)
            os.replace(path + ".tmp", path)


async def main(schema: str, concurrency: int, prefix: str) -> None:
    url = os.environ[URL_ENV]
    async with open_runtime() as runtime, await PostgresRunStore.open(url, schema=schema) as store:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(counts, store, prefix)
            async with open_job_queue(store, registry(), runtime, concurrency=concurrency):
                print("ready", flush=True)
                await trio.sleep_forever()


trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3])
"""


#: What :func:`statements` adds up from the stores' statistics.
COUNTED = ("statements", "round_trips")


async def worker_counts(started: Sequence[trio.Process], prefix: Path) -> dict[str, int]:
    """The sum of the worker processes' store statistics :data:`COUNTED` (asked for with
    ``SIGUSR1``; each answers in a file); zeros for what a store does not count."""
    for process in started:
        with contextlib.suppress(FileNotFoundError):
            await trio.Path(f"{prefix}-{process.pid}.json").unlink()
        process.send_signal(signal.SIGUSR1)
    total = dict.fromkeys(COUNTED, 0)
    for process in started:
        path = trio.Path(f"{prefix}-{process.pid}.json")
        with trio.fail_after(STARTUP_TIMEOUT):
            while not await path.exists():  # noqa: ASYNC110 - another process writes it
                await trio.sleep(DRAIN_POLL)
        said = json.loads(await path.read_text())
        for name in COUNTED:
            total[name] += int(said.get(name, 0))
    return total


def own_counts(store: PostgresRunStore) -> dict[str, int]:
    """This process's store's statistics :data:`COUNTED` (zeros for what it does not count)."""
    said = store.statistics()
    return {name: int(said.get(name, 0)) for name in COUNTED}


@contextlib.asynccontextmanager
async def workers(
    directory: Path, url: str, schema: str, count: int, concurrency: int
) -> AsyncIterator[list[trio.Process]]:
    """``count`` worker processes of ``concurrency`` on the store in ``schema``, ready, for the
    block (given it)."""
    script = directory / "worker.py"
    if not script.exists():
        script.write_text(WORKER_SCRIPT.format(root=str(ROOT)))
    prefix = directory / f"counts-{schema}"
    command = [sys.executable, str(script), schema, str(concurrency), str(prefix)]
    log = directory / f"workers-{schema}.log"
    env = {**os.environ, URL_ENV: url}
    async with processes([command] * count, log, env) as started:
        for process in started:
            if await first_line(process, log, "a worker") != b"ready":
                raise SystemExit(f"a worker did not start: {tail(log)}")
        yield started


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
    counted: dict[str, list[float]] | None = None,
) -> float:
    """``jobs`` jobs for ``agent`` through ``count`` worker processes of ``concurrency`` on a
    fresh schema: jobs per second from the first submit until none is queued or running. With
    ``counted``, each of :data:`COUNTED` per job is appended to its list there: what the
    submitting store did while it admitted them, plus what the workers' stores did from their
    start until the end (their idle looks for work included)."""
    schema = new_schema()
    schemas.append(schema)
    # Opened first, so the schema exists before the workers start.
    async with await PostgresRunStore.open(url, schema=schema) as store:
        async with workers(directory, url, schema, count, concurrency) as started:
            start = time.perf_counter()
            before = own_counts(store)
            ids = await submit(store, agent, jobs)
            admitting = own_counts(store)
            await drained(store)
            elapsed = time.perf_counter() - start
            if counted is not None:
                working = await worker_counts(started, directory / f"counts-{schema}")
                for name in COUNTED:
                    spent = admitting[name] - before[name] + working[name]
                    counted.setdefault(name, []).append(spent / jobs)
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


class Queued:
    """The queue scenario's outcome: each side's median jobs/s (``"ours"``, ``"pgqueuer"``,
    ``"dbos"``; a peer that could not run is absent, with its reason in :attr:`unavailable`),
    what each peer said of itself (its version), and our median statements and round trips per
    job."""

    def __init__(self) -> None:
        self.rates: dict[str, float] = {}
        self.unavailable: dict[str, str] = {}
        self.info: dict[str, dict[str, Any]] = {}
        self.per_job: dict[str, float] = {}


async def bench_queue(directory: Path, url: str, schemas: list[str], mode: int) -> Queued:
    """No-op jobs through our queue, PgQueuer's and DBOS's, their rounds alternating (the order
    reversed every round)."""
    outcome = Queued()
    peers: dict[str, PgQueuer] = {}
    for name, python in (("pgqueuer", pgqueuer_python()), ("dbos", dbos_python())):
        if python is None:
            outcome.unavailable[name] = "no Python to run it with"
        elif name == "pgqueuer":
            peers[name] = PgQueuer(python, directory, url, SUBMITTERS)
        else:
            peers[name] = DBOSQueue(python, directory, url, SUBMITTERS, QUEUE_CONCURRENCY)
    samples: dict[str, list[float]] = {"ours": [], "pgqueuer": [], "dbos": []}
    counted: dict[str, list[float]] = {}
    jobs = QUEUE_JOBS[mode]
    for number in range(QUEUE_ROUNDS[mode]):
        order = ["ours", "pgqueuer", "dbos"]
        for name in order if number % 2 == 0 else order[::-1]:
            if name == "ours":
                rate = await jobs_per_s(
                    directory,
                    url,
                    schemas,
                    agent=NOOP_AGENT,
                    jobs=jobs,
                    count=1,
                    concurrency=QUEUE_CONCURRENCY,
                    counted=counted,
                )
                samples["ours"].append(rate)
            elif name in peers and name not in outcome.unavailable:
                measured = await peers[name].jobs_per_s(schemas, jobs)
                if isinstance(measured, str):
                    outcome.unavailable[name] = f"{measured} (with {peers[name].python})"
                else:
                    samples[name].append(measured)
    outcome.rates = {
        name: statistics.median(values)
        for name, values in samples.items()
        if values and name not in outcome.unavailable
    }
    outcome.info = {name: peer.info for name, peer in peers.items()}
    outcome.per_job = {name: statistics.median(values) for name, values in counted.items()}
    return outcome


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
            queued = await bench_queue(directory, url, schemas, mode)
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
    ours = queued.rates["ours"]
    metrics: dict[str, float] = {
        "jobs_per_s_1_worker": one,
        f"jobs_per_s_{WORKERS}_workers": many,
        "scale_jobs": SCALE_JOBS[mode],
        "scale_concurrency": CONCURRENCY,
        "scale_latency_ms": LATENCY * ms,
        "scale_ceiling_jobs_per_s_1_worker": CONCURRENCY / LATENCY,
        "queue_jobs_per_s": ours,
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
    for name, value in queued.per_job.items():
        if value > 0:  # (a store that does not count them reports none)
            metrics[f"{name}_per_job"] = value
    rounds = SCALE_ROUNDS[mode]
    lines = [
        f"scale-out ({SCALE_JOBS[mode]} jobs whose model answers after {LATENCY * ms:.0f} ms; "
        f"worker processes of concurrency {CONCURRENCY}, at most {CONCURRENCY / LATENCY:.0f} "
        f"jobs/s each; first submit to last completion, median of {rounds} rounds): "
        f"{one:,.1f} jobs/s with 1 worker, {many:,.1f} with {WORKERS} "
        f"({ratios[f'jobs_per_s_{WORKERS}_workers_vs_1']:.2f}x; target >= 3.2)",
    ]
    lines.append(
        f"the queue ({QUEUE_JOBS[mode]} no-op jobs submitted by {SUBMITTERS} tasks, one worker "
        f"process of concurrency {QUEUE_CONCURRENCY}; median of {QUEUE_ROUNDS[mode]} rounds): "
        f"{ours:,.0f} jobs/s"
    )
    dbos = f"DBOS's queue (concurrency {QUEUE_CONCURRENCY}, polled every {DBOS_POLL:g} s)"
    for name, label, target in (
        ("pgqueuer", "PgQueuer", QUEUE_VS_PGQUEUER_TARGET),
        ("dbos", dbos, QUEUE_VS_DBOS_TARGET),
    ):
        if name in queued.rates:
            theirs = queued.rates[name]
            version = queued.info.get(name, {}).get("version")
            metrics[f"{name}_jobs_per_s"] = theirs
            ratio = ratios[f"queue_jobs_per_s_vs_{name}"] = ours / theirs
            lines.append(
                f"  vs {label} {version}: {theirs:,.0f} jobs/s ({ratio:.2f}x; target >= {target:g})"
            )
        else:
            lines.append(f"  vs {label}: no ratio, unavailable: {queued.unavailable.get(name)}")
    if "statements_per_job" in metrics:
        lines.append(
            f"  statements per job on PostgreSQL (every statement our stores' connections ran: "
            f"admitting, and the worker's from its start to the end): "
            f"{metrics['statements_per_job']:.1f} (target <= {STATEMENTS_TARGET:g}), in "
            f"{metrics.get('round_trips_per_job', 0):.1f} round trips"
        )
    else:
        lines.append("  statements per job: not counted (the store does not count them)")
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
