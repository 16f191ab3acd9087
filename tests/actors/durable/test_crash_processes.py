"""The job queue across real worker processes on one store, killed and paused (issues 14 and 15):
a SQLite file, and PostgreSQL (a schema of its own in the tests' server, ``postgres_server.py``),
where the workers' connections are also terminated now and then (``pg_terminate_backend``): a
worker rides that out -- its calls fail once, retryably, and it reconnects -- and says so on
stderr, which is all it may write there.

The workers are processes running :data:`SCRIPT` (written to the test's directory): the real
:class:`~actors.durable.SQLiteRunStore`, :class:`~actors.durable.AgentRegistry` and
:func:`~actors.durable.open_job_queue`, with a deterministic model -- its replies depend only on
the job's input, so every process gives a job the same script: first call ``pay`` (not
idempotent) and ``note`` (``idempotent=True``), then answer -- and tools whose side effect is a
line appended to the process's effects file, between two short random sleeps (so
that kills land mid-call). The script runs as a launcher that imports everything once and then
forks a worker on request: a fresh worker is working within milliseconds of a kill, not after
a second of imports, so the kills come fast and land on busy workers. A worker is signalled
through a pidfd (or by its pid, which stays reserved until the launcher reaps it on the test's
request); when the test ends, or dies, the launcher kills whatever workers it still has.

The store a worker hands its queue is the real one behind a thin wrapper that logs every
acquisition (with its fence) and every write (with the fence it carried and whether the store
took it): a tool cannot see its worker's fence (``RunContext`` has no such field), so these logs
are what tells which process held a job when.

Some kills are followed at once by a cancel of one of the dead worker's jobs, made from the test
(another process): it is acknowledged as a request while nobody can act on it, and the worker
that takes the job over must honour it (issue 23).

What is checked once the processes are gone, from the store, the journals, the effects and the
logs: every job ends completed, but those cancelled while their worker was dead, which end
cancelled having started no provider call or tool call after the cancel was acknowledged (no
effect, and no journaled request or intent, from any process after it); no acknowledged submit is
lost; no ``pay`` effect happens twice for one idempotency key, and ``note`` repeats only with its
call's key; every journal replays without drift into a well-formed conversation; calls cut
mid-effect are answered :data:`protocols.jobs.UNKNOWN_EFFECT` (``pay``) or run again with their key
(``note``); effects come only from the process holding the job, in fence order, and each holder's
journal writes precede the next holder's; a worker paused (``SIGSTOP``) past its lease and then
continued writes nothing more -- its next write is refused as fenced.

On SQLite the run is 200 jobs and 30 kills; on PostgreSQL it is 10,000 jobs, with a kill every
second or so until the last few dozen jobs are running (a hundred kills and more) and five
workers' connections terminated: about two minutes. These tests run on the real clock (real
processes, real leases of about a second) and poll for what they wait on; none takes more than
a few seconds beyond what it waits for. Set
``CRASH_SEED`` to replay a run's random choices (kills, pauses, sleeps); the scheduling of the
processes still varies.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import json
import os
import pathlib
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import attrs
import pytest
import trio
from postgres_server import drop_schemas, new_schema, postgres_url

from actors.durable import PostgresRunStore, RunStore, SQLiteRunStore
from actors.durable._ops import cancel_job
from protocols import jobs as J
from protocols.messages import Message, Role, ToolFailure, ToolSuccess

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or not hasattr(os, "waitid"), reason="fork, waitid and signals"
)

# The launcher and its workers. The launcher reads one JSON command a line on stdin and answers
# each with one line on stdout:
#   {"spawn": config} -> {"pid": P}   fork a worker (it runs the queue until it is killed)
#   {"poll": P}       -> {"state": "running" | "stopped" | "exited"}   without reaping it
#   {"reap": P}       -> {"code": C}  wait for a worker that was killed
#
# A worker's log (config["log"], one JSON object a line, each with pid and wall time t):
#   ready                         its queue is open
#   ack key id                    queue.enqueue returned id for key
#   acquire job fence now until   the store gave it the job
#   append job fence begun ok code entries   a journal append ([kind, call id] each)
#   write job begun ok status fence owner until   a record write (a renewal, an end)
#   provider ref turn             a "slow" job's provider call began (with slow_provider)
#   stats ...                     queue.statistics(), whenever they change
# Its effects (config["effects"]): a line per tool effect: kind (the tool), job, call, key.
# Its commands (config["commands"], tailed): {"keys": [...], "slow": bool} -- enqueue jobs.
SCRIPT = r'''
import faulthandler, json, os, random, signal, sys, time, traceback

import trio

from actors import RunContext, open_runtime, tool
from actors.durable import AgentRegistry, PostgresRunStore, SQLiteRunStore, open_job_queue
from actors.providers import StreamingProvider, TextStream
from actors.store import StoreError
from protocols.jobs import AgentJob
from protocols.messages import Delta, ProviderResult, Role, ToolCall

CONFIG = {}
PID = 0
rng = random.Random()


def opener(path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(kind, **fields):
        fields.update(kind=kind, pid=PID, t=time.time())
        # One write(2) of the whole line: once it returns, the line is in the file for every
        # reader, whatever kills this process next (a SIGKILL loses no completed write; only
        # a machine crash could, which these tests do not make -- hence no fsync).
        os.write(fd, (json.dumps(fields) + "\n").encode())

    return write


log = effect = None


def described(entries):
    return [
        [e.kind, e.call.id if e.kind == "intent" else e.result.id if e.kind == "result" else None]
        for e in entries
    ]


class Logged:
    """The real store; every acquisition and write is logged once the store has answered."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def acquire(self, *, owner, lease, now=None):
        record = await self._store.acquire(owner=owner, lease=lease, now=now)
        if record is not None:
            log("acquire", job=record.id, fence=record.fence, now=now,
                until=record.lease.until, takeovers=record.takeovers)
        return record

    async def acquire_many(self, *, owner, lease, now=None, limit):
        records = await self._store.acquire_many(owner=owner, lease=lease, now=now, limit=limit)
        for record in records:
            log("acquire", job=record.id, fence=record.fence, now=now,
                until=record.lease.until, takeovers=record.takeovers)
        return records

    async def append(self, id, holder, entries, *, then=None):
        begun = time.time()
        try:
            await self._store.append(id, holder, entries, then=then)
        except StoreError as error:
            log("append", job=id, fence=holder.fence, begun=begun, ok=False, code=error.code,
                entries=described(entries))
            raise
        log("append", job=id, fence=holder.fence, begun=begun, ok=True, code=None,
            entries=described(entries))

    async def write(self, transition):
        begun = time.time()
        ok = await self._store.write(transition)
        record = transition.record
        lease = record.lease
        log("write", job=record.id, begun=begun, ok=ok, status=record.status.value,
            fence=record.fence, owner=lease.owner if lease else None,
            until=lease.until if lease else None)
        return ok


async def pause(share):
    # Most of a call's time is after its effect: a kill inside a call lands there (the case
    # the test must see both ways) far more often than before the effect.
    await trio.sleep(rng.uniform(0, share * CONFIG["tool_delay"]))


@tool
async def pay(ref: str, amount: int, ctx: RunContext) -> str:
    """Pay amount for ref: not idempotent."""
    await pause(0.1)
    effect("pay", job=ctx.run_id, call=ctx.call_id, key=ctx.idempotency_key, ref=ref)
    await pause(0.9)
    return f"paid {amount}"


@tool(idempotent=True)
async def note(ref: str, text: str, ctx: RunContext) -> str:
    """Write a note about ref: idempotent by its key."""
    await pause(0.1)
    effect("note", job=ctx.run_id, call=ctx.call_id, key=ctx.idempotency_key, ref=ref)
    await pause(0.9)
    return f"noted {text}"


async def plan(spec, messages):
    """The model: its answer depends only on the job's input and the results so far."""
    ref = spec["ref"]
    if spec["slow"] and CONFIG["slow_provider"]:
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT and not m.interrupted) + 1
        log("provider", ref=ref, turn=turn)
        await trio.sleep(CONFIG["slow_provider"])
    else:
        await trio.sleep(rng.uniform(0, CONFIG["provider_delay"]))
    answered = {m.tool_call_id: m.content for m in messages if m.role is Role.TOOL}
    if not answered:
        return "", (
            ToolCall(f"pay-{ref}", "pay", {"ref": ref, "amount": spec["amount"]}),
            ToolCall(f"note-{ref}", "note", {"ref": ref, "text": f"paid {spec['amount']}"}),
        )
    pay, note = answered.get(f"pay-{ref}"), answered.get(f"note-{ref}")
    return f"done {ref}; pay: {pay}; note: {note}", ()


class Model(StreamingProvider):
    name = "crash-model"

    def stream(self, messages, *, tools=None, options=None):
        return Answer(list(messages))


class Answer(TextStream):
    """A "slow" job's answers start with a thought, streamed before the model takes its time
    (so a cut then has a partial to commit)."""

    def __init__(self, messages):
        super().__init__()
        self._messages = messages
        self._spec = json.loads(next(m.content for m in messages if m.role is Role.USER))
        self._thought = self._spec["slow"]
        self._plan = None

    async def __anext__(self):
        if self._thought:
            self._thought = False
            text = f"considering {self._spec['ref']}"
            self._thinking.append(text)
            return Delta("thinking", text)
        if self._plan is None:
            self._plan = await plan(self._spec, self._messages)
            if self._plan[0]:
                self._content.append(self._plan[0])
                return Delta("content", self._plan[0])
        if self._result is None:
            self._result = ProviderResult(
                content="".join(self._content),
                thinking="".join(self._thinking),
                calls=self._plan[1],
            )
        raise StopAsyncIteration

    async def aclose(self):
        await trio.lowlevel.checkpoint()


async def report(queue):
    last = None
    while True:
        if os.getppid() != CONFIG["launcher"]:
            os._exit(3)  # the launcher is gone: so is the test
        now = queue.statistics()
        if now != last:
            log("stats", **now)
            last = now
        await trio.sleep(0.05)


async def commands(queue):
    offset, buffer = 0, b""
    while True:
        with open(CONFIG["commands"], "rb") as file:
            file.seek(offset)
            data = file.read()
        offset += len(data)
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            command = json.loads(line)
            for key in command["keys"]:
                spec = {"ref": key, "amount": int(key[1:]) + 1, "slow": command["slow"]}
                while True:  # a lost connection fails a submit retryably: its key makes it safe
                    try:
                        id = await queue.enqueue(AgentJob.ask("crash", json.dumps(spec)), key=key)
                    except StoreError as error:
                        if not error.retryable:
                            raise
                        await trio.sleep(0.05)
                    else:
                        break
                log("ack", key=key, id=id)
                await trio.sleep(rng.uniform(0, CONFIG["submit_delay"]))
        await trio.sleep(0.02)


async def main():
    if CONFIG.get("postgres"):
        # Named after the worker: the test terminates one worker's connections by this name.
        url = CONFIG["postgres"]
        url += ("&" if "?" in url else "?") + "application_name=" + CONFIG["name"]
        inner = await PostgresRunStore.open(
            url, schema=CONFIG["schema"], stall_timeout=CONFIG.get("stall", 5.0)
        )
    else:
        inner = await SQLiteRunStore.open(CONFIG["db"], busy_timeout=30)
    store = Logged(inner)
    registry = AgentRegistry()
    registry.add("crash", Model(), tools=[pay, note], limit=40)
    async with open_runtime() as runtime, open_job_queue(
        store,
        registry,
        runtime,
        concurrency=CONFIG["concurrency"],
        lease=CONFIG["lease"],
        poll=CONFIG["poll"],
        owner=f"{CONFIG['name']}-{PID}",
        rng=random.Random(rng.random()),
    ) as queue:
        log("ready")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(report, queue)
            nursery.start_soon(commands, queue)
    print("the worker's queue ended by itself", file=sys.stderr)


def worker(config):
    global CONFIG, PID, log, effect
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(os.open(config["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), 2)
        faulthandler.enable()  # a crash in C (a driver) says where, on stderr
        CONFIG, PID = config, os.getpid()
        rng.seed(f"{config['seed']}-{config['name']}")
        log, effect = opener(config["log"]), opener(config["effects"])
        trio.run(main)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def launcher():
    def answer(**fields):
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    children = set()
    answer(ready=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "spawn" in command:
            pid = os.fork()
            if pid == 0:
                worker({**command["spawn"], "launcher": os.getppid()})
            children.add(pid)
            answer(pid=pid)
        elif "poll" in command:
            pid = command["poll"]
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                answer(state="exited")
            elif os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT) is not None:
                answer(state="stopped")
            else:
                answer(state="running")
        elif "reap" in command:
            _, status = os.waitpid(command["reap"], 0)
            children.discard(command["reap"])
            answer(code=os.waitstatus_to_exitcode(status))
    for pid in children:  # the test is done (or gone): none outlives the launcher
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


launcher()
'''


class Worker:
    """One forked worker: its pid (reserved until the launcher reaps it) and its files, read
    incrementally -- what the kill loop asks of a worker costs what is new since it last asked,
    not the whole log, which a run of 10,000 jobs makes long."""

    def __init__(self, name: str, pid: int, directory: pathlib.Path) -> None:
        self.name = name
        self.pid = pid
        # Signals go through a pidfd where there is one: it names this process even if the
        # launcher were gone and the pid reused.
        self.pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
        self.log_path = directory / f"{name}.log"
        self.effects_path = directory / f"{name}.effects"
        self.stderr_path = directory / f"{name}.stderr"
        self.commands_path = directory / f"{name}.commands"
        self.killed_at: float | None = None
        self.sent: list[list[str]] = []  # the chunks of keys it was told to enqueue
        self._unacked: set[str] = set()  # keys sent and not acknowledged (yet)
        self._offsets: dict[pathlib.Path, int] = {}
        self._log: list[dict[str, Any]] = []
        self._kinds: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        self._acked: dict[str, str] = {}
        self._effects: list[dict[str, Any]] = []
        self._journaled: set[tuple[str, str]] = set()  # (job, call) results appended
        self._open: set[tuple[str, str]] = set()  # (job, call) effects not journaled (yet)

    @property
    def alive(self) -> bool:
        return self.killed_at is None

    def submit(self, keys: list[str], *, slow: bool = False) -> None:
        self.sent.append(keys)
        self._unacked.update(keys)
        with self.commands_path.open("ab") as file:
            file.write(json.dumps({"keys": keys, "slow": slow}).encode() + b"\n")

    def _new(self, path: pathlib.Path) -> list[dict[str, Any]]:
        offset = self._offsets.get(path, 0)
        try:
            with path.open("rb") as file:
                file.seek(offset)
                data = file.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line counts once its newline is written
        self._offsets[path] = offset + end
        return [json.loads(line) for line in data[:end].splitlines()]

    def _read(self) -> None:
        for line in self._new(self.log_path):
            self._log.append(line)
            self._kinds[line["kind"]].append(line)
            if line["kind"] == "ack":
                self._acked[line["key"]] = line["id"]
                self._unacked.discard(line["key"])
            elif line["kind"] == "append" and line["ok"]:
                for kind, call in line["entries"]:
                    if kind == "result":
                        self._journaled.add((line["job"], call))
                        self._open.discard((line["job"], call))
        for line in self._new(self.effects_path):
            self._effects.append(line)
            if (line["job"], line["call"]) not in self._journaled:
                self._open.add((line["job"], line["call"]))

    def log(self, kind: str | None = None) -> list[dict[str, Any]]:
        self._read()
        return list(self._log if kind is None else self._kinds[kind])

    def effects(self) -> list[dict[str, Any]]:
        self._read()
        return list(self._effects)

    def acked(self) -> dict[str, str]:
        self._read()
        return dict(self._acked)

    def unacknowledged(self) -> bool:
        """Whether a key it was sent is not acknowledged yet."""
        self._read()
        return bool(self._unacked)

    def mid_effect(self) -> bool:
        """Whether it has a tool call whose effect happened and whose result it has not
        journaled (as far as its files say now)."""
        self._read()
        return bool(self._open)

    def stats(self) -> dict[str, Any]:
        self._read()
        lines = self._kinds["stats"]
        return lines[-1] if lines else {}

    def reconnects(self) -> int:
        """How many times this worker said it rode out a store failure."""
        return sum(1 for line in self.errors().splitlines() if RIDDEN_OUT.search(line))

    def errors(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class Pool:
    """The launcher and the workers it forked for one test."""

    def __init__(self, directory: pathlib.Path, config: dict[str, Any]) -> None:
        self.directory = directory
        self.config = config
        self.workers: list[Worker] = []
        self._process: trio.Process | None = None
        self._buffer = b""

    async def open(self) -> None:
        script = self.directory / "crash_workers.py"
        script.write_text(SCRIPT, encoding="utf-8")
        with (self.directory / "launcher.stderr").open("wb") as stderr:
            self._process = await trio.lowlevel.open_process(
                [sys.executable, str(script)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        assert await self._answer() == {"ready": True}

    async def _answer(self) -> dict[str, Any]:
        assert self._process is not None
        assert self._process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self._process.stdout.receive_some()
            if not chunk:
                errors = (self.directory / "launcher.stderr").read_text(errors="replace")
                pytest.fail(f"the launcher exited:\n{errors[-3000:]}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def _ask(self, **command: Any) -> dict[str, Any]:
        assert self._process is not None
        assert self._process.stdin is not None
        await self._process.stdin.send_all(json.dumps(command).encode() + b"\n")
        return await self._answer()

    async def start(self, **overrides: Any) -> Worker:
        name = f"w{len(self.workers):03d}"
        config = {
            **self.config,
            **overrides,
            "name": name,
            **{
                part: str(self.directory / f"{name}.{part}")
                for part in ("log", "effects", "stderr", "commands")
            },
        }
        (self.directory / f"{name}.commands").touch()
        worker = Worker(name, (await self._ask(spawn=config))["pid"], self.directory)
        self.workers.append(worker)
        return worker

    def active(self) -> list[Worker]:
        return [w for w in self.workers if w.alive]

    async def state(self, worker: Worker) -> str:
        state: str = (await self._ask(poll=worker.pid))["state"]
        return state

    async def check_alive(self) -> None:
        for worker in self.active():
            if await self.state(worker) == "exited":
                worker.killed_at = time.time()
                code = (await self._ask(reap=worker.pid))["code"]
                pytest.fail(
                    f"worker {worker.name} exited by itself (code {code}):\n"
                    + worker.errors()[-3000:]
                )

    async def signal(self, worker: Worker, signum: int) -> None:
        """Send ``signum`` to a worker not reaped yet (so its pid is still its own)."""
        assert worker.alive
        if worker.pidfd is not None:
            signal.pidfd_send_signal(worker.pidfd, signum)
        else:
            assert self._process is not None
            assert self._process.poll() is None  # its workers are not reaped by another
            os.kill(worker.pid, signum)

    async def kill(self, worker: Worker) -> int:
        """SIGKILL the worker and reap it; its exit code (-SIGKILL unless it had ended)."""
        await self.signal(worker, signal.SIGKILL)
        worker.killed_at = time.time()
        code: int = (await self._ask(reap=worker.pid))["code"]
        return code

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            process = self._process
            if process is None:
                return
            if process.poll() is None:
                for worker in self.active():
                    await self.kill(worker)
            # Its stdin closed, the launcher kills and reaps whatever it still has, and exits.
            if process.stdin is not None:
                await process.stdin.aclose()
            with trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()
            for worker in self.workers:
                if worker.pidfd is not None:
                    os.close(worker.pidfd)


def sqlite_write_locked(path: str) -> bool:
    """Whether a process holds the SQLite file's write lock (is inside a write transaction)."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        return True
    finally:
        conn.close()  # (a transaction it began ends with it)
    return False


async def until(read: Callable[[], Any], wanted: Any = True) -> None:
    """Poll ``read()`` (awaited if it returns an awaitable) until it gives ``wanted``: the
    processes and files watched here cannot wake a trio task."""
    while True:
        value = read()
        if inspect.isawaitable(value):
            value = await value
        if value == wanted:
            return
        await trio.sleep(0.01)


async def everything(store: RunStore) -> list[J.JobRecord]:
    records: list[J.JobRecord] = []
    after: int | None = None
    while page := await store.list(after=after, limit=1000):
        records.extend(page)
        after = page[-1].sequence
    return records


LIVE = [J.JobStatus.QUEUED, J.JobStatus.RUNNING, J.JobStatus.AWAITING_INPUT]

#: What a worker says when it rides out a lost database connection (and only then).
RIDDEN_OUT = re.compile(
    r"the store failed \(.*\); trying again$|run store: (its listener |reconnected its )"
)
#: Connection cuts (PostgreSQL): at least this many workers have every connection terminated.
MIN_CUTS = 5


def conversation_problems(messages: Iterable[Message]) -> list[str]:
    """How a conversation is not well formed: every assistant call is answered exactly once,
    by the tool messages right after it, and nothing else is answered."""
    problems: list[str] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.role is Role.TOOL:
            if message.tool_call_id not in open_calls:
                problems.append(
                    f"message {index}: an answer to {message.tool_call_id!r}, not an open call"
                )
            open_calls.discard(message.tool_call_id or "")
            continue
        if open_calls:
            problems.append(f"message {index}: calls {sorted(open_calls)} were never answered")
        open_calls = {call.id for call in message.calls if message.role is Role.ASSISTANT}
    if open_calls:
        problems.append(f"the conversation ends with calls {sorted(open_calls)} unanswered")
    return problems


def described(entries: Iterable[J.Entry]) -> list[list[str | None]]:
    """Entries as the workers log them: [kind, call id]."""
    out: list[list[str | None]] = []
    for entry in entries:
        if isinstance(entry, J.IntentEntry):
            out.append([entry.kind, entry.call.id])
        elif isinstance(entry, J.ResultEntry):
            out.append([entry.kind, entry.result.id])
        else:
            out.append([entry.kind, None])
    return out


def seeded() -> int:
    return int(os.environ.get("CRASH_SEED") or random.randrange(2**32))


# -- SIGKILL at random moments -----------------------------------------------------------------

ACTIVE = 4
MIN_KILLS = 30
LEASE = 1.0


@attrs.frozen
class Scale:
    """How big a crash run is: its jobs, submitted in chunks (one a worker's enqueues, every
    0.1-0.25 s), each worker running ``concurrency`` at once; a kill every ``kill_every``
    seconds (a random share of it) until at most ``tail`` jobs are live, and at least
    :data:`MIN_KILLS`."""

    jobs: int
    chunk: int
    concurrency: int
    kill_every: tuple[float, float]
    tail: int
    deadline: float


#: SQLite: the run of issue 14. PostgreSQL: the 10,000 jobs of issue 15, with kills spread
#: over all of them (a hundred or so).
SCALES = {
    "sqlite": Scale(200, 5, 2, (0.1, 0.45), 0, 50),
    "postgres": Scale(10_000, 60, 6, (0.3, 1.5), 40, 600),
}


def cutter(where: dict[str, str]) -> Callable[[str], int] | None:
    """For PostgreSQL: what terminates every connection of the worker named so (blocking), and
    says how many it ended."""
    if "postgres" not in where:
        return None

    def cut(name: str) -> int:
        import psycopg

        with psycopg.connect(where["postgres"], autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            ).fetchall()
        return sum(1 for (ended,) in rows if ended)

    return cut


@contextlib.asynccontextmanager
async def shared_store(
    kind: str, path: pathlib.Path
) -> AsyncIterator[tuple[RunStore, dict[str, str]]]:
    """The store the workers share (its schema made before any worker opens it), and what a
    worker's config needs to open it: a SQLite file, or a PostgreSQL schema of its own."""
    if kind == "sqlite":
        yield await SQLiteRunStore.open(path), {"db": str(path)}
        return
    schema = new_schema()
    try:
        store = await PostgresRunStore.open(postgres_url(), schema=schema)
        yield store, {"postgres": postgres_url(), "schema": schema}
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_workers_killed_at_random_lose_no_job_and_repeat_no_effect(
    tmp_path: pathlib.Path, kind: str
) -> None:
    async with shared_store(kind, tmp_path / "runs.db") as (store, where):
        tag, problems = await _killed_at_random(tmp_path, store, where, kind)
    assert not problems, f"{tag}: " + "\n".join(problems[:40])


async def _killed_at_random(
    tmp_path: pathlib.Path, store: RunStore, where: dict[str, str], kind: str
) -> tuple[str, list[str]]:
    """The run's tag (its seed) and every problem :func:`check_crash_run` found (the run's own
    bounds -- kills, cancels, connection cuts -- are checked here)."""
    seed = seeded()
    rng = random.Random(seed)
    scale = SCALES[kind]
    tag = f"CRASH_SEED={seed} ({kind}, {scale.jobs} jobs)"
    pool = Pool(
        tmp_path,
        {
            **where,
            "seed": seed,
            "lease": LEASE,
            "poll": 0.05,
            "concurrency": scale.concurrency,
            "tool_delay": 0.08,
            "provider_delay": 0.01,
            "submit_delay": 0.02 if scale.chunk <= 5 else 0,
            "slow_provider": 0,
        },
    )
    keys = [f"k{n:05d}" for n in range(scale.jobs)]
    pending = collections.deque(
        keys[i : i + scale.chunk] for i in range(0, scale.jobs, scale.chunk)
    )
    acked: dict[str, set[str]] = collections.defaultdict(set)  # key -> every id returned
    # Jobs cancelled while their worker was dead: id -> when the cancel was acknowledged.
    cancels: dict[str, float] = {}
    kills = 0
    try:
        await pool.open()
        for _ in range(ACTIVE):
            await pool.start()
        deadline = trio.current_time() + scale.deadline
        next_kill = trio.current_time() + rng.uniform(0.2, 0.5)
        next_feed = next_check = trio.current_time()
        tail = scale.tail == 0

        def submitted() -> bool:
            # Every chunk went to a living worker that acknowledged all of its keys.
            return not pending and not any(w.unacknowledged() for w in pool.active())

        cut = cutter(where)
        cuts = 0
        next_cut = trio.current_time() + rng.uniform(0.2, 0.5)
        while (
            kills < MIN_KILLS
            or len(cancels) < MIN_CANCELS
            or (cut is not None and cuts < MIN_CUTS)
            or not submitted()
            or not tail
        ):
            now = trio.current_time()
            if now > deadline:
                pytest.fail(
                    f"{tag}: the kill phase did not end ({kills} kills, {len(cancels)} cancels)"
                )
            if now >= next_check:
                await pool.check_alive()
                next_check = now + 0.5
                if submitted() and not tail:
                    live = await store.list(statuses=LIVE, limit=scale.tail)
                    tail = len(live) < scale.tail
            if pending and now >= next_feed:
                rng.choice(pool.active()).submit(pending.popleft())
                next_feed = now + rng.uniform(0.1, 0.25)
            if cut is not None and now >= next_cut and cuts < MIN_CUTS:
                victim = rng.choice(pool.active())
                ended = await trio.to_thread.run_sync(cut, victim.name)
                cuts += ended > 0
                next_cut = now + rng.uniform(0.3, 0.8)
            if now >= next_kill and (kills < MIN_KILLS or len(cancels) < MIN_CANCELS or not tail):
                # Half the kills go, when one is, to a worker with a call past its effect and
                # its result not yet journaled: both ways of continuing such a call are then
                # seen in every run, not only when the timing happens to allow.
                cutting = [w for w in pool.active() if w.mid_effect()]
                chosen = cutting if cutting and rng.random() < 0.5 else pool.active()
                behind = len(cancels) < MIN_CANCELS
                if behind:
                    # Cancels while the holder is dead are owed: kill a worker holding a job.
                    holding = await holders(store, pool)
                    chosen = holding or chosen
                victim = rng.choice(chosen)
                code = await pool.kill(victim)
                assert code == -signal.SIGKILL, f"{victim.name} had ended: {victim.errors()}"
                kills += 1
                if behind or rng.random() < 0.5:
                    await cancel_one_of(store, victim, cancels, rng)
                done = victim.acked()
                # What it did not acknowledge is submitted again by another (with the keys it
                # did acknowledge in the same chunk: a key must name the same job again).
                for chunk in victim.sent:
                    if not set(chunk) <= done.keys():
                        pending.appendleft(chunk)
                await pool.start()
                next_kill = now + rng.uniform(*scale.kill_every)
            await trio.sleep(0.01)

        while await store.list(statuses=LIVE):
            if trio.current_time() > deadline:
                live = await store.list(statuses=LIVE)
                pytest.fail(f"{tag}: {len(live)} jobs still live at the deadline: {live[:2]}")
            await pool.check_alive()
            await trio.sleep(0.05)
    finally:
        await pool.aclose()
        records = {record.id: record for record in await everything(store)}
        journals = {id: await store.journal(id) for id in records}
        await store.aclose()

    for worker in pool.workers:
        for key, id in worker.acked().items():
            acked[key].add(id)
    problems, summary = check_crash_run(
        pool=pool,
        keys=keys,
        acked=acked,
        records=records,
        journals=journals,
        cancels=cancels,
    )
    assert kills >= MIN_KILLS
    assert len(cancels) >= MIN_CANCELS, f"{tag}: only {len(cancels)} cancels landed"
    if cut is not None:
        assert cuts >= MIN_CUTS
        reconnected = sum(worker.reconnects() for worker in pool.workers)
        assert reconnected > 0, "no worker said it rode out a lost connection"
    print(f"{tag}: {kills} kills, {cuts} connection cuts, {summary}")
    return tag, problems


#: Cancels landing while the job's worker is dead: at least this many per run.
MIN_CANCELS = 5


async def holders(store: RunStore, pool: Pool) -> list[Worker]:
    """The living workers that hold a running job now."""
    running = await store.list(statuses=[J.JobStatus.RUNNING], limit=1000)
    owners = {r.lease.owner.rsplit("-", 1)[0] for r in running if r.lease is not None}
    return [worker for worker in pool.active() if worker.name in owners]


async def cancel_one_of(
    store: RunStore, victim: Worker, cancels: dict[str, float], rng: random.Random
) -> None:
    """Cancel one of the jobs the killed ``victim`` held, if it held one (from the test's
    process, as ``trio-agents jobs cancel`` would), noting when the cancel was acknowledged."""
    running = await store.list(statuses=[J.JobStatus.RUNNING], limit=1000)
    held = [
        r for r in running if r.lease is not None and r.lease.owner.startswith(f"{victim.name}-")
    ]
    if not held:
        return
    record, changed = await cancel_job(store, rng.choice(held).id)
    if changed and record.status is J.JobStatus.RUNNING:
        cancels[record.id] = time.time()


def cancel_problems(
    id: str,
    record: J.JobRecord,
    *,
    acknowledged: float,
    journal: list[J.Entry],
    effects: list[dict[str, Any]],
    appends: list[dict[str, Any]],
) -> list[str]:
    """How a job cancelled while its worker was dead broke the promise: it ends cancelled,
    its journal closed (one terminal, every call answered), and nothing started after the
    cancel was acknowledged -- no effect, no journaled provider call or intent."""
    problems: list[str] = []
    where = f"job {id} ({record.key}), cancelled at {acknowledged:.3f}"
    if record.status is not J.JobStatus.CANCELLED or not record.cancel_requested:
        problems.append(f"{where} ended {record.status.value}: {record.error}")
    try:
        made = J.replay(id, journal)
    except J.JournalDrift as drift:
        return [*problems, f"{where}: {drift.message}"]
    terminals = [e for e in journal if isinstance(e, J.TerminalEntry)]
    if len(terminals) != 1 or made.terminal is None or made.terminal.result != record.result:
        problems.append(f"{where}: {len(terminals)} terminal entries, not the record's one")
    problems.extend(f"{where}: {p}" for p in conversation_problems(made.messages))
    problems.extend(
        f"{where}: effect after the cancel: {e}" for e in effects if e["t"] > acknowledged
    )
    problems.extend(
        f"{where}: work journaled after the cancel: {a}"
        for a in appends
        if a["begun"] > acknowledged
        and any(kind in ("request", "intent") for kind, _ in a["entries"])
    )
    return problems


def check_crash_run(
    *,
    pool: Pool,
    keys: list[str],
    acked: dict[str, set[str]],
    records: dict[str, J.JobRecord],
    journals: dict[str, list[J.Entry]],
    cancels: dict[str, float],
) -> tuple[list[str], str]:
    """Every problem the checks of the crash run found, and a summary of what happened."""
    problems: list[str] = []
    problem = problems.append

    # No acknowledged submit is lost, a key names one job, and nothing else was admitted.
    for key in keys:
        ids = acked.get(key, set())
        if len(ids) != 1:
            problem(f"key {key}: enqueue returned {sorted(ids) or 'nothing'}")
        for id in ids:
            record = records.get(id)
            if record is None or record.key != key:
                problem(f"key {key}: the acknowledged job {id} is not in the store under it")
    if sorted(r.key or "" for r in records.values()) != keys:
        problem(f"the store holds {len(records)} jobs, not one for each of {len(keys)} keys")

    effects: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for worker in pool.workers:
        for line in worker.effects():
            effects[line["job"], line["call"]].append(line)
    appends: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for worker in pool.workers:
        for line in worker.log("append"):
            if line["ok"]:
                appends[line["job"]].append(line)

    unknown = unknown_paid = reruns = reran_effects = 0
    for id, record in records.items():
        where = f"job {id} ({record.key})"
        journal = journals[id]
        if id in cancels:
            pays = effects.pop((id, f"pay-{record.key}"), [])
            notes = effects.pop((id, f"note-{record.key}"), [])
            problems.extend(
                cancel_problems(
                    id,
                    record,
                    acknowledged=cancels[id],
                    journal=journal,
                    effects=pays + notes,
                    appends=appends[id],
                )
            )
            problems.extend(f"{where}: {p}" for p in block_problems(journal, appends[id]))
            if len(pays) > 1:
                problem(f"{where}: pay has {len(pays)} effects")
            continue
        # Ended, completed, its journal replaying into a well-formed conversation.
        if record.status is not J.JobStatus.COMPLETED:
            problem(f"{where} ended {record.status.value}: {record.error}")
            continue
        try:
            made = J.replay(id, journal)
        except J.JournalDrift as drift:
            problem(f"{where}: {drift.message}")
            continue
        terminals = [e for e in journal if isinstance(e, J.TerminalEntry)]
        if len(terminals) != 1 or made.terminal is None or made.terminal.result != record.result:
            problem(f"{where}: {len(terminals)} terminal entries, not one with the record's result")
        problems.extend(f"{where}: {p}" for p in conversation_problems(made.messages))
        # Each fence's appends are blocks of the journal, in fence order: nothing a holder
        # wrote lands after what a later holder wrote.
        problems.extend(f"{where}: {p}" for p in block_problems(journal, appends[id]))

        intents = collections.Counter(e.call.id for e in journal if isinstance(e, J.IntentEntry))
        key_of = {e.call.id: e.key for e in journal if isinstance(e, J.IntentEntry)}
        results = {e.result.id: e.result for e in journal if isinstance(e, J.ResultEntry)}
        pay_call, note_call = f"pay-{record.key}", f"note-{record.key}"
        pays, notes = effects.pop((id, pay_call), []), effects.pop((id, note_call), [])

        # pay: its intent before its effect, at most one of each, whatever the crashes.
        if intents[pay_call] > 1 or len(pays) > 1:
            problem(f"{where}: pay has {intents[pay_call]} intents and {len(pays)} effects")
        if pays and {p["key"] for p in pays} != {key_of.get(pay_call)}:
            problem(f"{where}: a pay effect without its intent, or under another key: {pays}")
        paid = results.get(pay_call)
        if isinstance(paid, ToolSuccess):
            if len(pays) != 1:
                problem(f"{where}: pay succeeded with {len(pays)} effects")
        elif isinstance(paid, ToolFailure) and paid.error == J.UNKNOWN_EFFECT:
            unknown += 1
            unknown_paid += len(pays)
            if intents[pay_call] != 1:
                problem(f"{where}: pay answered unknown though it never started")
            if record.result is None or J.UNKNOWN_EFFECT not in record.result.content:
                problem(f"{where}: the model was not told that pay's effect is unknown")
        else:
            problem(f"{where}: pay was answered {paid!r}")

        # note: it may run again after a crash, always under its call's one key.
        noted = results.get(note_call)
        note_key = key_of.get(note_call)
        if not isinstance(noted, ToolSuccess) or not notes:
            problem(f"{where}: note was answered {noted!r} after {len(notes)} effects")
        elif {n["key"] for n in notes} != {note_key} or not str(note_key).startswith(f"{id}:"):
            problem(f"{where}: note ran under keys {sorted({str(n['key']) for n in notes})}")
        if intents[note_call] > 1 + record.takeovers:
            problem(f"{where}: note has {intents[note_call]} intents, {record.takeovers} takeovers")
        if intents[note_call] > 1:
            reruns += 1
            reran_effects += len(notes) > 1
    for (id, call), lines in effects.items():
        problem(f"effects for job {id} call {call}, which it never made: {lines}")

    holders, late = holder_problems(pool)
    problems.extend(holders)
    for worker in pool.workers:
        # (A worker whose connections were terminated says once per failure that the store
        # failed and that it tries again: that, and nothing else, it may write.)
        said = [line for line in worker.errors().splitlines() if not RIDDEN_OUT.search(line)]
        if said:
            problem(f"worker {worker.name} wrote to stderr:\n" + "\n".join(said)[-2000:])
    # Kills landed between an effect and its result: both ways of continuing were taken.
    if unknown_paid == 0 or reran_effects == 0:
        problem(
            f"too few calls cut mid-effect: {unknown} pays answered unknown ({unknown_paid} "
            f"had paid), {reruns} notes run again ({reran_effects} twice in effect)"
        )
    return problems, (
        f"{len(records)} jobs ({len(cancels)} cancelled while their worker was dead), "
        f"{len(pool.workers)} worker processes, "
        f"{sum(r.takeovers for r in records.values())} takeovers, {unknown} pays answered "
        f"unknown ({unknown_paid} of them had paid), {reruns} notes run again "
        f"({reran_effects} twice in effect), {late} effects of a worker after its lease expired"
    )


def block_problems(journal: list[J.Entry], appends: list[dict[str, Any]]) -> list[str]:
    """The logged appends, in fence order (then the order they were asked for: a store
    commits one holder's appends in that order, several in one commit when they overlap), must
    be consecutive runs of the journal, in that order (an append committed by a worker killed
    before it logged it is a gap), and no holder journals two intents for one call."""
    intents = collections.Counter(
        (append["fence"], call)
        for append in appends
        for kind, call in append["entries"]
        if kind == "intent"
    )
    twice = sorted(at for at, count in intents.items() if count > 1)
    if twice:
        return [f"fences journaled a call's intent twice: {twice}"]
    kinds = described(journal)
    position = 0
    for append in sorted(appends, key=lambda a: (a["fence"], a["begun"])):
        block = append["entries"]
        found = next(
            (
                start
                for start in range(position, len(kinds) - len(block) + 1)
                if kinds[start : start + len(block)] == block
            ),
            None,
        )
        if found is None:
            return [f"the append {append} of fence {append['fence']} is out of fence order"]
        position = found + len(block)
    return []


def holder_problems(pool: Pool) -> tuple[list[str], int]:
    """Effects come only from the process holding the job, in fence order: an effect of fence
    F after fence F + 1 was acquired is allowed only if F's lease (as last written) had expired
    by then -- the takeover of a worker that fell behind, not of a live lease. Also how many
    such late effects there were."""
    problems: list[str] = []
    late = 0
    acquired: dict[str, dict[int, dict[str, Any]]] = collections.defaultdict(dict)
    expiry: dict[tuple[str, int], float] = {}
    for worker in pool.workers:
        for line in worker.log():
            if line["kind"] == "acquire":
                if line["fence"] in acquired[line["job"]]:
                    problems.append(f"job {line['job']}: fence {line['fence']} acquired twice")
                acquired[line["job"]][line["fence"]] = line
                expiry[line["job"], line["fence"]] = line["until"]
            elif line["kind"] == "write" and line["ok"] and line["until"] is not None:
                at = (line["job"], line["fence"])
                expiry[at] = max(expiry.get(at, 0.0), line["until"])
    for worker in pool.workers:
        for effect in worker.effects():
            fences = acquired[effect["job"]]
            held = [
                fence
                for fence, taken in fences.items()
                if taken["pid"] == effect["pid"] and taken["t"] <= effect["t"]
            ]
            if not held:
                problems.append(f"an effect from a process that never held its job: {effect}")
                continue
            fence = max(held)
            later = fences.get(fence + 1)
            if later is not None and later["now"] < effect["t"]:
                late += 1
                if later["now"] < expiry[effect["job"], fence]:
                    problems.append(
                        f"an effect of fence {fence} after fence {fence + 1} took over a live "
                        f"lease: {effect}, {later}"
                    )
    return problems, late


# -- SIGSTOP past the lease ----------------------------------------------------------------------

PAUSED_JOBS = 3


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_worker_paused_past_its_lease_writes_nothing_once_continued(
    tmp_path: pathlib.Path, kind: str
) -> None:
    async with shared_store(kind, tmp_path / "runs.db") as (store, where):
        late, effects = await _paused_past_its_lease(tmp_path, store, where, kind)
    # Continued, the paused worker tried to write for each job, and each write was refused as
    # fenced; it had no effect.
    assert len(late) >= PAUSED_JOBS, late
    assert all((line["ok"], line["code"]) == (False, "fenced") for line in late), late
    assert effects == []


async def _paused_past_its_lease(
    tmp_path: pathlib.Path, store: RunStore, where: dict[str, str], kind: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The paused worker's writes once continued, and its effects (the rest checked here)."""
    seed = seeded()
    tag = f"CRASH_SEED={seed} ({kind})"
    lease = 1.0
    pool = Pool(
        tmp_path,
        {
            **where,
            "seed": seed,
            "lease": lease,
            "poll": 0.05,
            "concurrency": PAUSED_JOBS,
            "tool_delay": 0.02,
            "provider_delay": 0.01,
            "submit_delay": 0,
            "slow_provider": 0,
            # (Stopped inside a transaction of its store, A holds its jobs' rows until the
            # database ends the transaction: well before A's provider calls would return.)
            "stall": lease / 2,
        },
    )
    keys = [f"s{n:03d}" for n in range(PAUSED_JOBS)]
    try:
        await pool.open()
        with trio.fail_after(30):
            # A's provider calls for these jobs stream a thought, then take longer than A will
            # stay paused: continued, A learns it lost the jobs, cuts their runs, and tries to
            # write each run's partial (the thought).
            paused = await pool.start(slow_provider=5 * lease)
            paused.submit(keys, slow=True)
            await until(
                lambda: len({line["ref"] for line in paused.log("provider")}) == PAUSED_JOBS
            )
            await pool.signal(paused, signal.SIGSTOP)
            await until(lambda: pool.state(paused), "stopped")
            if kind == "sqlite":
                # Stopped inside a write transaction, A would hold the file's one write lock
                # for as long as it stays stopped: nothing can take it from a process (a limit
                # of SQLite, docs/deploy-workers.md). Stopped again, until it is outside one.
                # (PostgreSQL ends such a transaction after stall_timeout: tested as is.)
                while await trio.to_thread.run_sync(sqlite_write_locked, where["db"]):
                    await pool.signal(paused, signal.SIGCONT)
                    await trio.sleep(0.005)  # (a moment to go on: it is another process)
                    await pool.signal(paused, signal.SIGSTOP)
                    await until(lambda: pool.state(paused), "stopped")
            stopped_at = time.time()
            # B takes the jobs over once A's leases expired, and completes them.
            taker = await pool.start()
            await until(lambda: store.list(statuses=LIVE), [])
            continued_at = time.time()
            await pool.signal(paused, signal.SIGCONT)
            await until(lambda: paused.stats().get("dropped"), PAUSED_JOBS)
            stats = paused.stats()
    finally:
        await pool.aclose()
        records = await everything(store)
        journals = {record.id: await store.journal(record.id) for record in records}
        await store.aclose()

    assert sorted(r.key or "" for r in records) == keys
    a_took = {line["job"]: line for line in paused.log("acquire")}
    b_took = {line["job"]: line for line in taker.log("acquire")}
    a_until = [line["until"] for line in paused.log("write") if line["ok"] and line["until"]]
    # A's writes answered once it was continued -- also one it had begun before the pause
    # and that the store decided after it (it was in flight across the pause) -- but for one
    # the store had committed before the pause (answered late: A was stopped before it logged).
    late = [
        line
        for line in paused.log()
        if line["kind"] in ("append", "write")
        and line["t"] >= continued_at
        and not (line["ok"] and line["begun"] < stopped_at)
    ]
    # On PostgreSQL, A may have been stopped inside a transaction of its store's: the database
    # ended it (and A's connection) after stall_timeout, and the write in flight failed as a
    # lost connection does -- A then asked again, and was refused (as every other late write).
    cut = [line for line in late if line.get("code") == "io"]
    assert all(kind == "postgres" and line["begun"] < stopped_at for line in cut), cut
    for line in cut:
        refused = [o for o in late if o.get("code") == "fenced" and o["job"] == line["job"]]
        assert any(other["t"] >= line["t"] for other in refused), (line, late)
    late = [line for line in late if line not in cut]
    for record in records:
        where = f"{tag}: job {record.key}"
        journal = journals[record.id]
        assert record.status is J.JobStatus.COMPLETED, f"{where}: {record}"
        assert (record.fence, record.takeovers, record.attempts) == (2, 1, 1), where
        assert record.result is not None
        assert record.result.content.startswith(f"done {record.key}; pay: paid"), where
        made = J.replay(record.id, journal)
        assert made.terminal is not None
        assert made.terminal.result == record.result
        assert [e for e in journal if isinstance(e, J.TerminalEntry)] == [made.terminal]
        assert conversation_problems(made.messages) == [], where
        # A held fence 1; B took fence 2 over only once A's lease (as last written) expired.
        a, b = a_took[record.id], b_took[record.id]
        assert (a["fence"], b["fence"]) == (1, 2), where
        expiry = max([a["until"], *a_until])
        assert stopped_at < expiry <= b["now"], (where, stopped_at, expiry, b)
        # The journal is A's appends (fence 1), all before the pause, then B's (fence 2).
        # (In the order they were asked for: the order a store commits one holder's appends.)
        a_lines = sorted(
            (line for line in paused.log("append") if line["job"] == record.id),
            key=lambda line: line["begun"],
        )
        a_entries = [e for line in a_lines if line["ok"] for e in line["entries"]]
        b_entries = [
            e
            for line in sorted(taker.log("append"), key=lambda line: line["begun"])
            if line["job"] == record.id and line["ok"]
            for e in line["entries"]
        ]
        # (The thought A's provider streamed before the pause is journaled behind the run: it
        # may have been written before the pause, or be among the writes refused after it.)
        assert a_entries in (
            [["input", None], ["request", None]],
            [["input", None], ["request", None], ["stream", None]],
        ), where
        assert all(line["begun"] < stopped_at for line in a_lines if line["ok"]), where
        assert described(journal) == a_entries + b_entries, where

    # Once continued, A tried to write for each job (its streamed thought, if it had not been
    # written yet, and its partial with the terminal of its end), and the store refused each
    # write as fenced; A dropped every job without finishing one or running a tool. B paid and
    # noted each job once.
    assert sorted({line["job"] for line in late}) == sorted(r.id for r in records), late
    assert all(line["entries"][0][0] in ("stream", "checkpoint") for line in late), late
    assert all((line["ok"], line["code"]) == (False, "fenced") for line in late), late
    assert (stats["acquired"], stats["dropped"], stats["completed"]) == (PAUSED_JOBS,) * 2 + (0,)
    assert paused.effects() == []
    effects = collections.Counter((e["kind"], e["ref"]) for e in taker.effects())
    assert effects == {(kind, key): 1 for kind in ("pay", "note") for key in keys}
    # (On PostgreSQL, A's connection may have been ended by the database while A was stopped,
    # as above: A says it made a new one, and that a call it asks again had failed.)
    said = [
        line
        for line in paused.errors().splitlines()
        if not (
            kind == "postgres"
            and (
                line.startswith("run store: reconnected its ")
                or "the database could not be reached or went away" in line
            )
        )
    ]
    assert not said, paused.errors()
    assert not taker.errors(), taker.errors()
    return late, paused.effects()
