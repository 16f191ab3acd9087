"""Benchmark: durable jobs on SQLite against the same run in memory, against DBOS (or LangGraph),
and the time a crashed worker's job waits before another worker continues it.

Usage: ``python benchmarks/durable.py [--quick] [--json]``

The task is the loop benchmark's: the user asks ``What is 19 + 23?``; turn 1, the model calls
the tool ``add(a=19, b=23)``; turn 2, it answers ``The answer is 42.`` from the tool's result.
The model is :class:`TwoTurns`, a deterministic provider written here (a tool call while the last
message is not a tool result, then ``The answer is <that result>.``). Every answer is checked: a
wrong one is an error, not a number. Scenarios:

* ``run``: seconds per job, one job at a time, through ``open_job_queue`` on a
  ``SQLiteRunStore`` (``JobQueue.enqueue`` then ``JobQueue.result``: admission, acquisition, the
  journaled run -- input, each provider call's request and settled response, the call's intent
  and result, the terminal -- and reading the outcome), against the same run in memory: a fresh
  ``Agent`` on the same provider and tools, ``agent.generate`` and ``agent.aclose`` (what a job
  does besides the store: each job gets a fresh agent). Reported as
  ``durable_run_time_vs_memory`` (target <= 4), with the store at its default setting
  (``synchronous=NORMAL`` in WAL mode: commits survive a process crash). For information: the
  same store opened ``durable=True`` (``synchronous=FULL``: commits survive power loss), the
  queue on a ``MemoryRunStore`` (the queue and journal without SQLite; each job purged once it
  is timed, as ``MemoryRunStore.acquire`` looks at every live record it holds), reported as
  ``job_memory_store_vs_memory_run`` (target <= 1.5), and ``generate`` alone on a running
  agent. Variants
  alternate batch by batch; each job is timed on its own and the figure is the median over
  every job. One over it is the rate one job at a time (``sequential_jobs_per_s``, and
  ``sequential_jobs_per_s_durable`` with ``durable=True``), for information.
* ``throughput``: jobs per second with work in flight. A job queue of concurrency
  :data:`CONCURRENCY` (16) on a ``SQLiteRunStore`` runs N jobs (:data:`THROUGHPUT_JOBS`: 200
  with ``--quick``, else 1000) submitted by :data:`SUBMITTERS` (8) concurrent tasks, each of
  which enqueues its share (N / 8) one ``JobQueue.enqueue`` after another, then waits for each
  of its jobs with ``JobQueue.result``; every answer is checked. jobs/s is N over the wall time
  from the first submit to the last result (opening the store and the queue is untimed), with
  the store at its default setting (``jobs_per_s``) and opened ``durable=True``
  (``jobs_per_s_durable``). Measured in :data:`THROUGHPUT_ROUNDS` rounds (3), after an untimed
  warm-up round of :data:`WARMUP_JOBS` jobs, each round on fresh store files; every figure is
  the median of its rounds.
* ``jobs_per_s_vs_dbos``: that throughput with ``durable=True`` against DBOS's best rate on
  the same task: DBOS workflows of two steps (model turn 1, then the tool; the answer composed
  in the workflow) on DBOS's SQLite system database. N of them run in each round, both ways:
  (a) invoked directly one after another, and (b) concurrently -- ``DBOS.start_workflow`` for
  all N, then each handle's ``get_result()``, the workflows running in DBOS's executor threads
  (unbounded by default: as many as are in flight); each way's workflows/s is N over its wall
  time, the median of its rounds, and DBOS's figure (``dbos_workflows_per_s``) is the better of
  the two (the line says which won; both are metrics). DBOS's rounds alternate with ours, the
  order reversed every round (the subprocess runs a round when told to), so both see the same
  load on the machine and its disk. DBOS leaves SQLite's defaults (a rollback journal,
  ``synchronous=FULL``: it survives power loss), so the ratio uses our store opened
  ``durable=True``: like for like. The ratio with our default setting is reported beside it
  (``default_jobs_per_s_vs_dbos``). Target >= 3. For information, the same comparison one at a
  time (``sequential_jobs_per_s_vs_dbos``, not a target): our median job with ``durable=True``
  from the ``run`` scenario against the median DBOS workflow invoked directly, run in the same
  batches as our variants there, their turn alternating with ours. DBOS is a process-wide
  singleton with threads of its own (its queue poller, its housekeeping), and not a dependency
  of this project: it runs in a subprocess -- stopped (``SIGSTOP``) except while it runs a
  batch or round it was asked for, so that its threads do not compete for the CPUs while ours
  are measured (ours sit idle, waiting, while it runs) -- of the Python named by
  ``TRIO_AGENTS_DBOS_PYTHON`` (by default
  ``/tmp/dbosvenv/bin/python`` when that exists), from a script this benchmark writes to a
  temporary directory. When it cannot run, the reason is printed and the same comparisons are
  made with LangGraph instead -- a graph of the same two nodes compiled with its
  ``SqliteSaver`` checkpointer on a file (``jobs_per_s_vs_langgraph`` and the rest), run by the
  Python named by ``TRIO_AGENTS_LANGGRAPH_PYTHON`` (by default this one), its graph invoked one
  run after another only (its best is that) -- and when that cannot run either the ratios are
  left out, with both reasons printed.
* ``recovery``: a worker process (a small script written to a temporary directory: an
  ``AgentRegistry`` and ``open_job_queue`` on a SQLite file, with a lease of :data:`LEASE`
  seconds) takes a job whose tool sleeps for an hour; once the call's intent is journaled the
  worker is killed with ``SIGKILL``. ``recovery_s`` is the time from the kill to the job's next
  journal entry, written by another worker that was already running (standby) -- the answer
  ``interrupted: ... its effect is unknown`` to the call, which is never run again -- and is
  reported with the lease it follows from (``recovery_s_over_lease``): the dead worker's lease
  must expire first (it renews every third of the lease, so between two thirds of it and all of
  it is left at the kill), then the standby worker finds the job within its poll interval
  (:data:`POLL`). For information:
  the time until the job completed, and the same recovery with the other worker started only
  after the kill (``recovery_cold_s``: its interpreter and imports overlap the lease).

Printed, a line each: the job's time with the default setting and with ``durable=True``, each
against the same run in memory; the queue on a ``MemoryRunStore`` and ``generate`` alone; jobs/s
one at a time; the jobs' p90 and maximum times; the throughput with both settings; our
throughput with ``durable=True`` against DBOS's best (which way won) and with the default
setting; DBOS's workflows/s one after another and concurrently; the one-at-a-time comparison;
then recovery with a standby worker and with a cold-started one. Each reason DBOS or LangGraph
could not run comes before the comparison. Results are medians, after an untimed warm-up. With
``--json`` the last line printed is one JSON object ``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ``benchmarks/actors.py`` shares its name with the ``actors`` package, and a script's own
# directory comes first on ``sys.path``: put the repository root (where the package lives) first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib
import gc
import json
import math
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import trio

from actors import Agent, Runtime, open_runtime, tool
from actors.durable import (
    AgentRegistry,
    JobQueue,
    MemoryRunStore,
    RunStore,
    SQLiteRunStore,
    open_job_queue,
)
from actors.providers import ProviderStream, StreamingProvider
from benchmarks._common import Lines, ReadyStream, Report, run_main
from protocols.jobs import UNKNOWN_EFFECT, AgentJob, IntentEntry, JobStatus
from protocols.messages import (
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    ToolCall,
    ToolDefinition,
    Usage,
)

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is 19 + 23?"
ARGUMENTS = {"a": 19, "b": 23}
ANSWER = "The answer is 42."
#: The name jobs give for the agent of the task.
AGENT = "adder"
#: Jobs per variant per batch, and batches (quick, full), for the run scenario.
JOBS_PER_BATCH = (30, 100)
BATCHES = (3, 11)
#: The throughput scenario: jobs the queue runs at once, the tasks that submit them, jobs per
#: round (quick, full), and rounds (quick, full), each after an untimed warm-up round of
#: :data:`WARMUP_JOBS` jobs.
CONCURRENCY = 16
SUBMITTERS = 8
THROUGHPUT_JOBS = (200, 1000)
THROUGHPUT_ROUNDS = (3, 3)
WARMUP_JOBS = 32
#: Seconds DBOS's or LangGraph's subprocess may take to start, or to run one batch or round.
FOREIGN_TIMEOUT = 120.0
#: The frameworks compared with, by their names here.
LABELS = {"dbos": "DBOS", "langgraph": "LangGraph"}
#: Where DBOS is looked for unless ``TRIO_AGENTS_DBOS_PYTHON`` names a Python.
DBOS_DEFAULT_PYTHON = "/tmp/dbosvenv/bin/python"
#: The recovery scenario's worker lease and idle poll interval (seconds), and its rounds (quick,
#: full) for each of the standby and the cold-started second worker.
LEASE = 1.0
POLL = 0.1
RECOVERY_ROUNDS = (1, 5)
#: Seconds one recovery round may take before it is an error.
RECOVERY_TIMEOUT = 60.0


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def check(name: str, content: str, expected: str = ANSWER) -> None:
    """Fail loudly unless a run answered ``expected``."""
    if content != expected:
        raise SystemExit(f"{name}: wrong answer {content!r}, expected {expected!r}")


# -- the provider --------------------------------------------------------------------------------


class TwoTurns(StreamingProvider):
    """The task's model, for every run: a call of the tool ``name`` with ``arguments`` while the
    last message is not a tool result, then ``The answer is <that result>.``."""

    name = "two-turns"

    def __init__(self, name: str = "add", arguments: dict[str, Any] | None = None) -> None:
        self.tool = name
        self.arguments = dict(ARGUMENTS if arguments is None else arguments)
        self.calls = 0

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        self.calls += 1
        last = messages[-1]
        if last.role is Role.TOOL:
            result = ProviderResult(
                content=f"The answer is {last.content}.", usage=Usage(prompt=20, completion=5)
            )
        else:
            call = ToolCall(f"call_{self.calls}", self.tool, self.arguments)
            result = ProviderResult(calls=(call,), usage=Usage(prompt=10, completion=8))
        return ReadyStream(result)


# -- durable jobs against the same run in memory ----------------------------------------------


async def job_time(queue: JobQueue, *, purge: bool = False) -> float:
    """One job through the queue, enqueued and waited for: its seconds. With ``purge``, the job
    is purged afterwards, untimed."""
    start = time.perf_counter()
    id = await queue.enqueue(AgentJob.ask(AGENT, QUESTION))
    result = await queue.result(id)
    elapsed = time.perf_counter() - start
    check("job", result.content)
    if result.turns != 2 or result.partial:
        raise SystemExit(f"job: {result.turns} turns, stop {result.stop}")
    if purge:
        await queue.store.purge(id)
    return elapsed


async def fresh_agent_time(runtime: Runtime, provider: StreamingProvider) -> float:
    """The same run in memory: a fresh agent started, ``generate``, closed; its seconds."""
    start = time.perf_counter()
    agent = await Agent.start(runtime, provider, tools=[add])
    result = await agent.generate(QUESTION)
    await agent.aclose()
    elapsed = time.perf_counter() - start
    check("memory", result.content)
    if result.turns != 2 or result.partial:
        raise SystemExit(f"memory: {result.turns} turns, stop {result.stop}")
    return elapsed


async def bench_runs(
    directory: Path, per_batch: int, batches: int, other: Foreign | None
) -> dict[str, float]:
    """The median seconds per run of each variant (see the module docstring), and of ``other``'s
    workflows (``"other"``) run in the same batches."""
    provider = TwoTurns()
    registry = AgentRegistry()
    registry.add(AGENT, provider, tools=[add])
    samples: dict[str, list[float]] = {
        "memory": [],
        "generate": [],
        "memory_store": [],
        "sqlite": [],
        "sqlite_durable": [],
        "other": [],
    }
    async with open_runtime() as runtime:
        stores: dict[str, RunStore] = {
            "memory_store": MemoryRunStore(),
            "sqlite": await SQLiteRunStore.open(directory / "jobs.db"),
            "sqlite_durable": await SQLiteRunStore.open(
                directory / "jobs-durable.db", durable=True
            ),
        }
        try:
            async with (
                open_job_queue(stores["memory_store"], registry, runtime, concurrency=1) as mq,
                open_job_queue(stores["sqlite"], registry, runtime, concurrency=1) as sq,
                open_job_queue(stores["sqlite_durable"], registry, runtime, concurrency=1) as dq,
            ):
                queues = {"memory_store": mq, "sqlite": sq, "sqlite_durable": dq}
                agent = await Agent.start(runtime, provider, tools=[add])
                agent_runs = 0

                async def generate_time() -> float:
                    # ``generate`` alone on a running agent; a fresh one every 10 runs (untimed)
                    # keeps its history short.
                    nonlocal agent, agent_runs
                    if agent_runs == 10:
                        await agent.aclose()
                        agent, agent_runs = await Agent.start(runtime, provider, tools=[add]), 0
                    agent_runs += 1
                    start = time.perf_counter()
                    result = await agent.generate(QUESTION)
                    elapsed = time.perf_counter() - start
                    check("generate", result.content)
                    return elapsed

                timers: dict[str, Callable[[], Awaitable[float]]] = {
                    "memory": partial(fresh_agent_time, runtime, provider),
                    "generate": generate_time,
                    **{
                        name: partial(job_time, queue, purge=name == "memory_store")
                        for name, queue in queues.items()
                    },
                }
                order = [*timers, "other"] if other is not None else list(timers)
                for batch in range(batches + 1):  # the first batch warms up, untimed
                    gc.collect()
                    for name in order if batch % 2 == 0 else reversed(order):
                        if name == "other":
                            assert other is not None
                            times = await other.times(per_batch)
                        else:
                            times = [await timers[name]() for _ in range(per_batch)]
                        if batch > 0:
                            samples[name].extend(times)
                await agent.aclose()
                for name, queue in queues.items():
                    await queue.wait_idle()  # (its last job counted: see queue_wall)
                    done = queue.statistics()["completed"]
                    if done != per_batch * (batches + 1):
                        raise SystemExit(f"{name}: the queue completed {done} jobs")
        finally:
            for store in stores.values():
                if isinstance(store, SQLiteRunStore):
                    await store.aclose()
    medians = {name: statistics.median(values) for name, values in samples.items() if values}
    for name in ("sqlite", "sqlite_durable"):
        ordered = sorted(samples[name])
        medians[f"{name}_p90"] = ordered[int(0.9 * len(ordered))]
        medians[f"{name}_max"] = ordered[-1]
    return medians


# -- throughput: many jobs in flight -------------------------------------------------------------


async def queue_wall(
    store: RunStore, registry: AgentRegistry, runtime: Runtime, jobs: int
) -> float:
    """``jobs`` jobs through a queue of :data:`CONCURRENCY` on ``store``, submitted by
    :data:`SUBMITTERS` tasks (each enqueues its share, then waits for each of its results): the
    seconds from the first submit to the last result."""
    answers: list[str] = []
    async with open_job_queue(store, registry, runtime, concurrency=CONCURRENCY) as queue:

        async def submitter(count: int) -> None:
            ids = [await queue.enqueue(AgentJob.ask(AGENT, QUESTION)) for _ in range(count)]
            for id in ids:
                result = await queue.result(id)
                if result.turns != 2 or result.partial:
                    raise SystemExit(f"throughput: {result.turns} turns, stop {result.stop}")
                answers.append(result.content)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for number in range(SUBMITTERS):
                nursery.start_soon(submitter, jobs // SUBMITTERS + (number < jobs % SUBMITTERS))
        elapsed = time.perf_counter() - start
        # A result is seen once its record is committed, a moment before the worker that
        # committed it counts it: wait for the worker to be done before reading its counts.
        await queue.wait_idle()
        done = queue.statistics()["completed"]
    if done != jobs or len(answers) != jobs:
        raise SystemExit(f"throughput: {done} jobs completed, {len(answers)} answered, not {jobs}")
    for answer in answers:
        check("throughput", answer)
    return elapsed


async def bench_throughput(
    directory: Path, jobs: int, rounds: int, other: Foreign | None
) -> dict[str, float]:
    """The median, over ``rounds`` rounds, of each variant's jobs (or workflows) per second:
    ``"sqlite"`` and ``"sqlite_durable"`` (see :func:`queue_wall`), and ``other``'s one after
    another (``"other_sequential"``) and, when it can, concurrently (``"other_concurrent"``).
    Their turns alternate, the order reversed every round; each round of ours on a fresh store
    file. A first round of :data:`WARMUP_JOBS` is untimed."""
    registry = AgentRegistry()
    registry.add(AGENT, TwoTurns(), tools=[add])
    samples: dict[str, list[float]] = {}
    async with open_runtime() as runtime:
        for number in range(rounds + 1):  # the first round warms up, untimed
            count = jobs if number > 0 else WARMUP_JOBS
            order = ["sqlite", "sqlite_durable"]
            if other is not None:
                order.append("other_sequential")
                if other.concurrent:
                    order.append("other_concurrent")
            gc.collect()
            for name in order if number % 2 == 0 else reversed(order):
                if name.startswith("other"):
                    assert other is not None
                    elapsed = await other.wall(count, concurrent=name == "other_concurrent")
                else:
                    path = directory / f"throughput-{number}-{name}.db"
                    durable = name == "sqlite_durable"
                    async with await SQLiteRunStore.open(path, durable=durable) as store:
                        elapsed = await queue_wall(store, registry, runtime, count)
                if number > 0:
                    samples.setdefault(name, []).append(count / elapsed)
    return {name: statistics.median(values) for name, values in samples.items()}


# -- DBOS and LangGraph, each in a subprocess of its own interpreter ----------------------------

#: DBOS workflows of the task on its SQLite system database (``argv[1]``), served batch by batch:
#: prints a JSON line of its settings (or ``{"unavailable": reason}``), then for each line read
#: from stdin: ``seq N`` runs N workflows one after another, invoked directly, and prints
#: ``{"times": [seconds, ...], "seconds": all of them}``; ``par N`` starts N workflows with
#: ``DBOS.start_workflow`` (they run at once in DBOS's executor threads), then waits for each
#: handle's result, and prints ``{"seconds": from the first start to the last result}``.
DBOS_SCRIPT = """\
import json, sqlite3, sys, time
try:
    from importlib.metadata import version
    from dbos import DBOS
except ImportError as error:
    print(json.dumps({"unavailable": f"dbos cannot be imported ({error})"}), flush=True)
    raise SystemExit(0)

path = sys.argv[1]
DBOS(config={
    "name": "trio-agents-durable-benchmark",
    "system_database_url": f"sqlite:///{path}",
    "run_admin_server": False,
    "log_level": "WARNING",
})

@DBOS.step()
def model_turn(history: list) -> dict:
    return {"role": "assistant", "content": "",
            "calls": [{"id": "call_1", "name": "add", "arguments": {"a": 19, "b": 23}}]}

@DBOS.step()
def run_tool(call: dict) -> dict:
    result = call["arguments"]["a"] + call["arguments"]["b"]
    return {"role": "tool", "id": call["id"], "content": json.dumps(result)}

@DBOS.workflow()
def task(text: str) -> str:
    history = [{"role": "user", "content": text}]
    reply = model_turn(history)
    history.append(reply)
    history.append(run_tool(reply["calls"][0]))
    return f"The answer is {history[-1]['content']}."

DBOS.launch()
try:
    db = sqlite3.connect(path)  # DBOS sets neither pragma: its connections have these too
    modes = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    print(json.dumps({
        "version": version("dbos"),
        "journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0],
        "synchronous": modes.get(db.execute("PRAGMA synchronous").fetchone()[0], "?"),
        "concurrent": True,
    }), flush=True)
    db.close()
    for line in sys.stdin:
        kind, runs = line.split()
        if kind == "seq":
            times = []
            first = time.perf_counter()
            for _ in range(int(runs)):
                start = time.perf_counter()
                answer = task("What is 19 + 23?")
                times.append(time.perf_counter() - start)
                if answer != "The answer is 42.":
                    raise SystemExit(f"DBOS answered {answer!r}")
            print(json.dumps({"times": times, "seconds": time.perf_counter() - first}), flush=True)
        elif kind == "par":
            start = time.perf_counter()
            handles = [DBOS.start_workflow(task, "What is 19 + 23?") for _ in range(int(runs))]
            answers = [handle.get_result() for handle in handles]
            seconds = time.perf_counter() - start
            for answer in answers:
                if answer != "The answer is 42.":
                    raise SystemExit(f"DBOS answered {answer!r}")
            print(json.dumps({"seconds": seconds}), flush=True)
        else:
            raise SystemExit(f"unknown command {line!r}")
finally:
    DBOS.destroy()
"""

#: The same task as a LangGraph graph of two nodes with its SQLite checkpointer, served alike
#: (``seq N`` only: one run after another).
LANGGRAPH_SCRIPT = """\
import json, sqlite3, sys, time
from typing import TypedDict
try:
    from importlib.metadata import version
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
except ImportError as error:
    print(json.dumps({"unavailable": "langgraph with its SQLite checkpointer cannot be "
                      f"imported ({error})"}), flush=True)
    raise SystemExit(0)

class State(TypedDict):
    messages: list

def model(state: State) -> dict:
    call = {"id": "call_1", "name": "add", "arguments": {"a": 19, "b": 23}}
    return {"messages": [*state["messages"], {"role": "assistant", "content": "", "calls": [call]}]}

def run_tool(state: State) -> dict:
    call = state["messages"][-1]["calls"][0]
    result = call["arguments"]["a"] + call["arguments"]["b"]
    return {"messages": [*state["messages"],
                         {"role": "tool", "id": call["id"], "content": json.dumps(result)}]}

builder = StateGraph(State)
builder.add_node("model", model)
builder.add_node("tool", run_tool)
builder.add_edge(START, "model")
builder.add_edge("model", "tool")
builder.add_edge("tool", END)
db = sqlite3.connect(sys.argv[1], check_same_thread=False)
saver = SqliteSaver(db)
saver.setup()  # its tables, and the journal mode it chooses
graph = builder.compile(checkpointer=saver)
modes = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
print(json.dumps({
    "version": version("langgraph"),
    "journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0],
    "synchronous": modes.get(db.execute("PRAGMA synchronous").fetchone()[0], "?"),
}), flush=True)
runs = 0
for line in sys.stdin:
    kind, count = line.split()
    if kind != "seq":
        raise SystemExit(f"unknown command {line!r}")
    times = []
    first = time.perf_counter()
    for _ in range(int(count)):
        runs += 1
        start = time.perf_counter()
        state = graph.invoke({"messages": [{"role": "user", "content": "What is 19 + 23?"}]},
                             {"configurable": {"thread_id": f"run-{runs}"}})
        answer = f"The answer is {state['messages'][-1]['content']}."
        times.append(time.perf_counter() - start)
        if answer != "The answer is 42.":
            raise SystemExit(f"LangGraph answered {answer!r}")
    print(json.dumps({"times": times, "seconds": time.perf_counter() - first}), flush=True)
"""


def interpreter(variable: str, default: str | None) -> str | None:
    """The Python named by the environment variable, else ``default`` when it exists."""
    named = os.environ.get(variable)
    if named:
        return named
    return default if default is not None and os.path.exists(default) else None


class Foreign:
    """Another framework's subprocess that runs the task batch by batch (see ``DBOS_SCRIPT``)."""

    def __init__(self, name: str, process: trio.Process, log: Path, info: dict[str, Any]) -> None:
        self.name = name
        self.label = LABELS.get(name, name)
        self.process = process
        self.log = log
        #: Its version and its SQLite settings, as it reported them.
        self.info = info
        #: Whether it runs the task concurrently too (``par N``).
        self.concurrent = info.get("concurrent") is True
        assert process.stdout is not None
        self._lines = Lines(process.stdout)

    def _signal(self, number: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(number)

    async def _ask(self, command: str) -> dict[str, Any]:
        """Send one command line; its JSON answer. The process runs only while it is asked
        (stopped with ``SIGSTOP`` once it answered, continued before it is asked again): its
        background threads -- DBOS's queue poller and housekeeping -- must not compete for
        the CPUs while ours are measured, as ours sit idle, waiting, while it runs."""
        assert self.process.stdin is not None
        self._signal(signal.SIGCONT)
        with trio.fail_after(FOREIGN_TIMEOUT):
            await self.process.stdin.send_all(f"{command}\n".encode())
            line = await self._lines.next()
        self._signal(signal.SIGSTOP)
        if line is None:
            said = await trio.Path(self.log).read_text()
            raise SystemExit(f"{self.label} exited while running the task: {said[-2000:]}")
        answer = json.loads(line)
        if not isinstance(answer, dict) or not isinstance(answer.get("seconds"), int | float):
            raise SystemExit(f"{self.label} answered {command!r} with {line[:200]!r}")
        return answer

    async def times(self, runs: int) -> list[float]:
        """Run the task ``runs`` times, one after another: each one's seconds."""
        times = (await self._ask(f"seq {runs}")).get("times")
        if not isinstance(times, list) or len(times) != runs:
            raise SystemExit(f"{self.label} timed {times!r}, not {runs} runs")
        return [float(seconds) for seconds in times]

    async def wall(self, runs: int, *, concurrent: bool) -> float:
        """Run the task ``runs`` times, one after another or (``concurrent``) all at once: the
        seconds they all took."""
        if concurrent and not self.concurrent:
            raise SystemExit(f"{self.label} here runs the task only one after another")
        return float((await self._ask(f"{'par' if concurrent else 'seq'} {runs}"))["seconds"])


@contextlib.asynccontextmanager
async def open_foreign(
    name: str, python: str | None, script: str, directory: Path
) -> AsyncIterator[Foreign | str]:
    """Start ``script`` with ``python`` (in ``directory``, on a SQLite file there) for the
    block: the ready :class:`Foreign`, or why it could not start."""
    if python is None:
        yield "no Python to run it with"
        return
    path = directory / f"{name}_task.py"
    path.write_text(script)
    log = directory / f"{name}.log"
    command = [python, str(path), str(directory / f"{name}.sqlite")]
    try:
        with log.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                command, cwd=directory, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
            )
    except OSError as error:
        yield f"{python} cannot be run ({error})"
        return
    try:
        assert process.stdout is not None
        with trio.move_on_after(FOREIGN_TIMEOUT):
            first = await Lines(process.stdout).next()
        said = (await trio.Path(log).read_text()).strip()
        try:
            info = json.loads(first or b"{}")
        except ValueError:
            info = {"unavailable": f"it printed {(first or b'')[:200]!r}"}
        if not isinstance(info, dict) or not info:
            last = said.splitlines()[-1] if said else "no output"
            yield f"{python} did not start ({last})"
        elif "unavailable" in info:
            yield f"{info['unavailable']} with {python}"
        else:
            foreign = Foreign(name, process, log, info)
            foreign._signal(signal.SIGSTOP)  # (runs only while asked: see Foreign._ask)
            yield foreign
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)  # (stopped between batches: see Foreign._ask)
        with trio.CancelScope(shield=True):
            assert process.stdin is not None
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await process.stdin.aclose()  # its loop ends, and so does it
            with trio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


# -- recovery after a worker's SIGKILL ---------------------------------------------------------

#: A worker process: the registry and a job queue on the SQLite file ``argv[1]``, leased for
#: ``argv[2]`` seconds and polling every ``argv[3]``; prints ``ready`` once it takes jobs.
WORKER_SCRIPT = """\
import sys

import trio

sys.path.insert(0, {root!r})

from actors import open_runtime, tool
from actors.durable import AgentRegistry, SQLiteRunStore, open_job_queue
from benchmarks.durable import TwoTurns


@tool
async def wait(seconds: float) -> str:
    \"\"\"Wait, then say so.\"\"\"
    await trio.sleep(seconds)
    return "waited"


async def main(path: str, lease: float, poll: float) -> None:
    registry = AgentRegistry()
    registry.add("waiter", TwoTurns("wait", {{"seconds": 3600}}), tools=[wait])
    async with open_runtime() as runtime, await SQLiteRunStore.open(path) as store:
        async with open_job_queue(store, registry, runtime, lease=lease, poll=poll):
            print("ready", flush=True)
            await trio.sleep_forever()


trio.run(main, sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
"""


async def start_worker(
    nursery: trio.Nursery, script: Path, store: Path, log: Path, *, ready: bool
) -> trio.Process:
    """Start a worker process (ended when ``nursery`` is cancelled); with ``ready``, return only
    once it takes jobs."""
    with log.open("ab") as stderr:
        command = [sys.executable, str(script), str(store), str(LEASE), str(POLL)]
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                command,
                stdout=subprocess.PIPE,
                stderr=stderr,
                check=False,
            )
        )
    if ready:
        assert process.stdout is not None
        seen = b""
        while b"ready\n" not in seen:
            chunk = await process.stdout.receive_some()
            if not chunk:
                said = await trio.Path(log).read_text()
                raise SystemExit(f"a worker exited before it was ready: {said[-2000:]}")
            seen += chunk
    return process


async def until(what: str, condition: Callable[[], Awaitable[bool]]) -> float:
    """Poll ``condition`` every 2 ms until it holds; the ``perf_counter`` time it was seen."""
    with trio.move_on_after(RECOVERY_TIMEOUT) as scope:
        # Another process writes the store: there is nothing to wait on but the file.
        while not await condition():  # noqa: ASYNC110
            await trio.sleep(0.002)
    if scope.cancelled_caught:
        raise SystemExit(f"recovery: {what} did not happen within {RECOVERY_TIMEOUT:.0f} s")
    return time.perf_counter()


async def recovery_round(directory: Path, number: int, *, standby: bool) -> dict[str, float]:
    """One kill and takeover; seconds from the kill to the job's next journal entry, to its
    completion, and the lease the dead worker still held at the kill."""
    script = directory / "worker.py"
    script.write_text(WORKER_SCRIPT.format(root=str(ROOT)))
    path = directory / f"recovery-{number}.db"
    log = directory / f"recovery-{number}.log"
    async with await SQLiteRunStore.open(path) as store, trio.open_nursery() as nursery:
        first = await start_worker(nursery, script, path, log, ready=True)
        admitted = await store.admit(AgentJob.ask("waiter", "Wait for an hour, please."))
        id = admitted.record.id

        async def intent() -> bool:
            return any(isinstance(entry, IntentEntry) for entry in await store.journal(id))

        await until("the call's intent", intent)
        if standby:
            await start_worker(nursery, script, path, log, ready=True)
        journaled = len(await store.journal(id))
        record = await store.get(id)
        if record is None or record.lease is None:
            raise SystemExit("recovery: the running job has no lease")
        held = record.lease.until - time.time()
        killed = time.perf_counter()
        first.kill()  # SIGKILL
        if not standby:
            await start_worker(nursery, script, path, log, ready=False)

        async def moved() -> bool:
            return len(await store.journal(id)) > journaled

        async def ended() -> bool:
            current = await store.get(id)
            return current is not None and current.terminal

        running_again = await until("the job's next journal entry", moved)
        completed = await until("the job's completion", ended)
        nursery.cancel_scope.cancel()
    async with await SQLiteRunStore.open(path) as store:
        record = await store.get(id)
    if first.returncode != -9:
        raise SystemExit(f"recovery: the first worker exited {first.returncode}, not by SIGKILL")
    if record is None or record.status is not JobStatus.COMPLETED or record.result is None:
        raise SystemExit(f"recovery: the job ended {record}")
    check("recovery", record.result.content, f"The answer is {UNKNOWN_EFFECT}.")
    if record.takeovers != 1:
        raise SystemExit(f"recovery: the job was taken over {record.takeovers} times, not once")
    return {
        "running_again": running_again - killed,
        "completed": completed - killed,
        "lease_left": held,
    }


async def bench_recovery(directory: Path, rounds: int) -> dict[str, float]:
    """Median seconds from the kill to the job running again (standby and cold second worker),
    to its completion (standby), and of the lease left at the kill (standby)."""
    samples: dict[str, list[float]] = {}
    number = 0
    for _ in range(rounds):
        for standby in (True, False):
            number += 1
            measured = await recovery_round(directory, number, standby=standby)
            prefix = "standby" if standby else "cold"
            for name, value in measured.items():
                samples.setdefault(f"{prefix}_{name}", []).append(value)
    return {name: statistics.median(values) for name, values in samples.items()}


# -- the benchmark -------------------------------------------------------------------------------


async def run(quick: bool) -> Report:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    mode = 0 if quick else 1
    with tempfile.TemporaryDirectory(prefix="durable-bench-") as temporary:
        directory = Path(temporary)
        unavailable: list[str] = []
        async with contextlib.AsyncExitStack() as stack:
            other: Foreign | None = None
            for name, variable, default, script in (
                ("dbos", "TRIO_AGENTS_DBOS_PYTHON", DBOS_DEFAULT_PYTHON, DBOS_SCRIPT),
                ("langgraph", "TRIO_AGENTS_LANGGRAPH_PYTHON", sys.executable, LANGGRAPH_SCRIPT),
            ):
                python = interpreter(variable, default)
                started = await stack.enter_async_context(
                    open_foreign(name, python, script, directory)
                )
                if isinstance(started, Foreign):
                    other = started
                    break
                unavailable.append(f"vs {LABELS[name]}: unavailable: {started}")
            runs = await bench_runs(directory, JOBS_PER_BATCH[mode], BATCHES[mode], other)
            throughput = await bench_throughput(
                directory, THROUGHPUT_JOBS[mode], THROUGHPUT_ROUNDS[mode], other
            )
        recovery = await bench_recovery(directory, RECOVERY_ROUNDS[mode])

    us = 1e6
    metrics: dict[str, float] = {
        "job_us": runs["sqlite"] * us,
        "job_durable_us": runs["sqlite_durable"] * us,
        "job_memory_store_us": runs["memory_store"] * us,
        "memory_run_us": runs["memory"] * us,
        "memory_generate_only_us": runs["generate"] * us,
        "sequential_jobs_per_s": 1 / runs["sqlite"],
        "sequential_jobs_per_s_durable": 1 / runs["sqlite_durable"],
        "jobs_per_s": throughput["sqlite"],
        "jobs_per_s_durable": throughput["sqlite_durable"],
        "throughput_jobs": THROUGHPUT_JOBS[mode],
        "throughput_concurrency": CONCURRENCY,
        "throughput_submitters": SUBMITTERS,
        "recovery_s": recovery["standby_running_again"],
        "recovery_completed_s": recovery["standby_completed"],
        "recovery_lease_left_s": recovery["standby_lease_left"],
        "recovery_cold_s": recovery["cold_running_again"],
        "recovery_lease_s": LEASE,
        "recovery_poll_s": POLL,
    }
    ratios = {
        "durable_run_time_vs_memory": runs["sqlite"] / runs["memory"],
        "durable_run_time_durable_true_vs_memory": runs["sqlite_durable"] / runs["memory"],
        "job_memory_store_vs_memory_run": runs["memory_store"] / runs["memory"],
        "recovery_s_over_lease": recovery["standby_running_again"] / LEASE,
    }
    lines = [
        f"run (two turns, one tool call) as a durable job on SQLite (default, synchronous=NORMAL): "
        f"{metrics['job_us']:.0f} us ({ratios['durable_run_time_vs_memory']:.2f}x vs the same "
        f"run in memory, a fresh agent's generate, {metrics['memory_run_us']:.0f} us; "
        "target <= 4)",
        f"run as a durable job on SQLite with durable=True (synchronous=FULL): "
        f"{metrics['job_durable_us']:.0f} us "
        f"({ratios['durable_run_time_durable_true_vs_memory']:.2f}x vs memory)",
        f"the job queue on a MemoryRunStore {metrics['job_memory_store_us']:.0f} us "
        f"({ratios['job_memory_store_vs_memory_run']:.2f}x the run in memory; target <= 1.5); "
        f"for information: generate alone on a running agent "
        f"{metrics['memory_generate_only_us']:.0f} us",
        f"jobs/s, one at a time (enqueue + result): {metrics['sequential_jobs_per_s']:,.0f} "
        f"with the default setting, {metrics['sequential_jobs_per_s_durable']:,.0f} with "
        "durable=True",
        f"job time p90 / max: {runs['sqlite_p90'] * us:.0f} / {runs['sqlite_max'] * us:.0f} us "
        f"(default), {runs['sqlite_durable_p90'] * us:.0f} / {runs['sqlite_durable_max'] * us:.0f}"
        " us (durable=True)",
    ]
    rounds = THROUGHPUT_ROUNDS[mode]
    lines.append(
        f"throughput ({THROUGHPUT_JOBS[mode]} jobs submitted by {SUBMITTERS} tasks to a queue of "
        f"concurrency {CONCURRENCY}, first submit to last result; median of {rounds} rounds): "
        f"{metrics['jobs_per_s']:,.0f} jobs/s with the default setting, "
        f"{metrics['jobs_per_s_durable']:,.0f} with durable=True"
    )
    lines += unavailable
    if other is None:
        lines.append("vs DBOS / LangGraph: no ratio (neither could run; reasons above)")
    else:
        name, info = other.name, other.info
        one_after_another = throughput["other_sequential"]
        concurrent = throughput.get("other_concurrent")
        best = max(one_after_another, concurrent or 0.0)
        won = "concurrently" if best == concurrent else "one after another"
        metrics[f"{name}_workflows_per_s"] = best
        metrics[f"{name}_workflows_per_s_one_after_another"] = one_after_another
        if concurrent is not None:
            metrics[f"{name}_workflows_per_s_concurrent"] = concurrent
        metrics[f"{name}_workflow_us"] = runs["other"] * us
        metrics[f"sequential_{name}_workflows_per_s"] = 1 / runs["other"]
        ratios[f"jobs_per_s_vs_{name}"] = metrics["jobs_per_s_durable"] / best
        ratios[f"default_jobs_per_s_vs_{name}"] = metrics["jobs_per_s"] / best
        ratios[f"sequential_jobs_per_s_vs_{name}"] = runs["other"] / runs["sqlite_durable"]
        concurrently = (
            f", {concurrent:,.0f} concurrently (start_workflow for all, then each result)"
            if concurrent is not None
            else " (not run concurrently here)"
        )
        lines += [
            f"vs {other.label} {info.get('version')} (two steps on its SQLite database, "
            f"journal_mode={info.get('journal_mode')}, synchronous={info.get('synchronous')}; "
            f"subprocess, its rounds alternating with ours): {metrics['jobs_per_s_durable']:,.0f}"
            f" jobs/s with durable=True ({ratios[f'jobs_per_s_vs_{name}']:.2f}x vs its best, "
            f"{best:,.0f} workflows/s {won}; target >= 3); with our default setting "
            f"{ratios[f'default_jobs_per_s_vs_{name}']:.2f}x",
            f"{other.label} workflows/s for {THROUGHPUT_JOBS[mode]}: {one_after_another:,.0f} one "
            f"after another{concurrently}",
            f"for information, one at a time: {metrics['sequential_jobs_per_s_durable']:,.0f} "
            f"jobs/s with durable=True, {ratios[f'sequential_jobs_per_s_vs_{name}']:.2f}x vs "
            f"{metrics[f'sequential_{name}_workflows_per_s']:,.0f} {other.label} workflows/s "
            f"({metrics[f'{name}_workflow_us']:.0f} us each, in the same batches)",
        ]
    lines += [
        f"recovery: {metrics['recovery_s']:.2f} s from a worker's SIGKILL to its job running "
        f"again on a standby worker ({ratios['recovery_s_over_lease']:.2f}x the lease of "
        f"{LEASE:g} s, {metrics['recovery_lease_left_s']:.2f} s of it left at the kill; idle "
        f"poll every {POLL:g} s); completed {metrics['recovery_completed_s']:.2f} s after the "
        "kill; the interrupted call was not run again",
        f"recovery with the second worker started after the kill: {metrics['recovery_cold_s']:.2f}"
        " s (its start overlaps the lease)",
    ]
    for name, value in {**metrics, **ratios}.items():
        if not (math.isfinite(value) and value > 0):
            raise SystemExit(f"{name}: {value} is not a positive number")
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    return run_main(run, argv, doc=__doc__, quick="fewer jobs, workflows and recovery rounds")


if __name__ == "__main__":
    raise SystemExit(main())
