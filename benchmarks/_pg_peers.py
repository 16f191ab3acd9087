"""What ``benchmarks/scaleout.py`` runs beside our queue on the same PostgreSQL database: the
other queues it is compared with (PgQueuer, and DBOS's queue on its PostgreSQL system
database), each in subprocesses of a Python of its own, and the plumbing the benchmark's
processes share (starting them, reading their lines, polling a table until it is empty).

Neither PgQueuer nor DBOS is a dependency of this project: each runs from a script written here
to a temporary directory, by the Python an environment variable names
(``TRIO_AGENTS_PGQUEUER_PYTHON``, ``TRIO_AGENTS_DBOS_PYTHON``; by default
:data:`PGQUEUER_DEFAULT_PYTHON` and :data:`DBOS_DEFAULT_PYTHON` when they exist). When one
cannot run, its round says why (a string) instead of a rate, and the benchmark leaves its ratio
out. Not a benchmark itself (its name starts with ``_``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import trio

from benchmarks._common import Lines

#: How the database URL reaches the worker, PgQueuer and DBOS processes (kept off their
#: command lines).
URL_ENV = "TRIO_AGENTS_SCALEOUT_URL"
#: How often the end of a run is looked for (seconds).
DRAIN_POLL = 0.01
#: Seconds a worker (or another queue's process) may take to start, and a run to end.
STARTUP_TIMEOUT = 60.0
RUN_TIMEOUT = 300.0
#: Where PgQueuer and DBOS are looked for unless ``TRIO_AGENTS_PGQUEUER_PYTHON`` or
#: ``TRIO_AGENTS_DBOS_PYTHON`` names a Python.
PGQUEUER_DEFAULT_PYTHON = "/tmp/pgqvenv/bin/python"
DBOS_DEFAULT_PYTHON = "/tmp/dbosvenv/bin/python"
#: How often DBOS's queue looks for workflows to start (seconds). Its default is 1 s, at which
#: a queue of concurrency 16 starts at most 16 workflows a second: the interval, not DBOS, would
#: be measured. Measured here with 300 no-op workflows: 127 workflows/s at 0.1 s, 354 at 0.01 s,
#: 333 at 0.001 s -- so 0.01 s, its best (it polls its database 100 times a second for it).
DBOS_POLL = 0.01


# -- PostgreSQL ----------------------------------------------------------------------------------


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


async def emptied(url: str, table: str, where: str = "TRUE") -> None:
    """Return once ``table`` has no rows matching ``where`` (polled every :data:`DRAIN_POLL` s,
    on one connection)."""
    import psycopg

    conn = await trio.to_thread.run_sync(partial(psycopg.connect, url, autocommit=True))
    query = f"SELECT 1 FROM {table} WHERE {where} LIMIT 1".encode()
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


# -- processes -----------------------------------------------------------------------------------


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


# -- PgQueuer ------------------------------------------------------------------------------------

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


def interpreter(variable: str, default: str) -> str | None:
    """The Python named by the environment variable, else ``default`` when it exists."""
    named = os.environ.get(variable)
    if named:
        return named
    return default if os.path.exists(default) else None


def pgqueuer_python() -> str | None:
    """The Python to run PgQueuer with: ``TRIO_AGENTS_PGQUEUER_PYTHON``, else
    :data:`PGQUEUER_DEFAULT_PYTHON` when it exists."""
    return interpreter("TRIO_AGENTS_PGQUEUER_PYTHON", PGQUEUER_DEFAULT_PYTHON)


class PgQueuer:
    """PgQueuer's processes (see :data:`PGQUEUER_SCRIPT`), one round at a time."""

    #: Its name in files and messages, and the script its processes run.
    NAME = "pgqueuer"
    SCRIPT = PGQUEUER_SCRIPT

    def __init__(self, python: str, directory: Path, url: str, submitters: int) -> None:
        self.python = python
        self.submitters = submitters
        self.directory = directory
        self.url = url
        self.script = directory / f"{self.NAME}_bench.py"
        self.script.write_text(self.SCRIPT)
        #: What it said of itself (its version).
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
        log = self.directory / f"{self.NAME}-{schema}.log"
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
            produced = await self._run(schema, "produce", str(jobs), str(self.submitters))
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


# -- DBOS ----------------------------------------------------------------------------------------

#: DBOS's queue, by role (``argv[1]``), its system database the one :data:`URL_ENV` names, its
#: tables in the schema ``DBOS_BENCH_SCHEMA`` names (DBOS creates and migrates them as it
#: launches): ``consume C P`` launches DBOS with a workflow ``noop`` that does nothing and a
#: queue of ``worker_concurrency`` C polled every P seconds, prints a JSON line of its version
#: (or ``{"unavailable": reason}``) and runs until terminated; ``produce N K`` enqueues N
#: ``noop`` workflows with a ``DBOSClient`` (a pool of K connections) from K threads, each one
#: after another, and prints ``{"first": time.time() as the first was submitted, "done": ...}``.
DBOS_SCRIPT = """\
import json, os, sys, threading, time
try:
    from importlib.metadata import version
    from dbos import DBOS, DBOSClient
except ImportError as error:
    print(json.dumps({"unavailable": f"dbos cannot be imported ({error})"}), flush=True)
    raise SystemExit(0)

URL = os.environ[sys.argv[-1]]
SCHEMA = os.environ["DBOS_BENCH_SCHEMA"]
APP = "trio-agents-scaleout-benchmark"
QUEUE = "bench"


def consume(concurrency: int, poll: float) -> None:
    DBOS(config={
        "name": APP,
        "system_database_url": URL,
        "dbos_system_schema": SCHEMA,
        "application_version": "1",
        "run_admin_server": False,
        "log_level": "WARNING",
    })

    @DBOS.workflow(name="noop")
    def noop() -> None:
        pass

    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=poll)
    print(json.dumps({"version": version("dbos")}), flush=True)
    threading.Event().wait()  # until terminated


def produce(jobs: int, tasks: int) -> None:
    client = DBOSClient(system_database_url=URL, dbos_system_schema=SCHEMA,
                        system_database_pool_size=tasks, application_name=APP)
    options = {"queue_name": QUEUE, "workflow_name": "noop", "app_version": "1"}
    first = []
    failed = []

    def submitter(count: int) -> None:
        try:
            for _ in range(count):
                first.append(time.time())
                client.enqueue(options)
        except BaseException as error:
            failed.append(repr(error)[:300])

    threads = [threading.Thread(target=submitter, args=(jobs // tasks + (n < jobs % tasks),))
               for n in range(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = time.time()
    client.destroy()
    if failed:
        raise SystemExit(f"enqueueing failed: {failed[0]}")
    print(json.dumps({"first": min(first), "done": done}), flush=True)


role = sys.argv[1]
if role == "consume":
    consume(int(sys.argv[2]), float(sys.argv[3]))
elif role == "produce":
    produce(int(sys.argv[2]), int(sys.argv[3]))
else:
    raise SystemExit(f"unknown role {role!r}")
"""


def dbos_python() -> str | None:
    """The Python to run DBOS with: ``TRIO_AGENTS_DBOS_PYTHON``, else
    :data:`DBOS_DEFAULT_PYTHON` when it exists."""
    return interpreter("TRIO_AGENTS_DBOS_PYTHON", DBOS_DEFAULT_PYTHON)


class DBOSQueue(PgQueuer):
    """DBOS's processes (see :data:`DBOS_SCRIPT`), one round at a time: a consumer process
    running a DBOS queue of the concurrency given, and a producer process enqueueing."""

    NAME = "dbos"
    SCRIPT = DBOS_SCRIPT

    def __init__(
        self, python: str, directory: Path, url: str, submitters: int, concurrency: int
    ) -> None:
        super().__init__(python, directory, url, submitters)
        self.concurrency = concurrency

    def _env(self, schema: str) -> dict[str, str]:
        return {**os.environ, URL_ENV: self.url, "DBOS_BENCH_SCHEMA": schema}

    async def jobs_per_s(self, schemas: list[str], jobs: int) -> float | str:
        """One round: ``jobs`` no-op workflows enqueued by the producer process and run by the
        consumer's queue, in a fresh schema; workflows per second from the first enqueue until
        none is enqueued or pending, or why DBOS could not run."""
        schema = new_schema()
        schemas.append(schema)
        log = self.directory / f"{self.NAME}-{schema}.log"
        command = self._command("consume", str(self.concurrency), repr(DBOS_POLL))
        async with processes([command], log, self._env(schema)) as (consumer,):
            try:
                with trio.fail_after(STARTUP_TIMEOUT):
                    line = await Lines(consumer.stdout).next() if consumer.stdout else None
            except trio.TooSlowError:
                return f"its consumer did not start within {STARTUP_TIMEOUT:.0f} s"
            if line is None:
                last = tail(log).strip().splitlines()
                return f"its consumer exited ({last[-1] if last else 'no output'})"
            try:
                info = json.loads(line)
            except ValueError:
                return f"its consumer printed {line[:200]!r}"
            if not isinstance(info, dict) or "unavailable" in info:
                return str(info.get("unavailable") if isinstance(info, dict) else info)
            self.info = info
            produced = await self._run(schema, "produce", str(jobs), str(self.submitters))
            if isinstance(produced, str):
                return produced
            await emptied(
                self.url, f'"{schema}".workflow_status', "status IN ('ENQUEUED', 'PENDING')"
            )
            end = time.time()
        ended = await trio.to_thread.run_sync(
            execute,
            self.url,
            f'SELECT status, count(*) FROM "{schema}".workflow_status GROUP BY status',
        )
        counts = {str(status): int(count) for status, count in ended}
        if counts.get("SUCCESS") != jobs:
            raise SystemExit(f"DBOS ended {counts}, not {jobs} successful workflows")
        return jobs / (end - float(produced["first"]))
