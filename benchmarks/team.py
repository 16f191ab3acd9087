"""Benchmark: agents together -- delegation (``as_tool``) against direct runs and pydantic-ai,
what a closed agent leaves behind, and delegation chains over HTTP.

Usage: ``python benchmarks/team.py [--quick] [--json]``

The two-agent task, everywhere: the user asks the lead ``What does the report say?``; the
lead's first reply calls the tool ``worker`` with ``{"input": "Summarise the report."}``; the
worker answers that in one reply, ``The report says 42.``; the lead's second reply answers from
the tool's result, ``The worker says: The report says 42.``. Every run's answer is checked: a
wrong one is an error, not a number. The providers are :class:`Lead` and :class:`Worker`, tiny
``StreamingProvider``\\ s written here that give those replies for every run (a
``ScriptedProvider`` would need a fresh script per run and records every call). Scenarios:

* ``delegation``: seconds per run of the lead delegating once -- ``lead.generate(question)``,
  where the lead has ``worker.as_tool()`` (a fresh conversation per call, the default) --
  against the floor ``direct``: the same work as two ``generate`` calls in sequence on two
  agents, ``worker.generate(task)`` and then ``lead.generate(question)`` on a lead whose
  ``worker`` tool is a plain ``@tool`` answering with the worker's answer just obtained. Both
  make the same three provider calls and append the same messages (the lead's four, the
  worker's two); what differs is the orchestration: a child run inside the lead's tool call
  (its own conversation actor started and stopped, the caller's deadline, budget and stream
  inherited) instead of a run the caller sequenced by hand. Agents are started untimed and
  kept for ``RUNS_PER_AGENT`` runs, so the histories grow alike; each run is timed on its own
  and a round's time per run is their sum over the count; the two kinds alternate batch by
  batch, their order swapping every batch. Reported as ``delegation_time_vs_direct``
  (target <= 1.3).
* ``pydantic_ai``: the same two-agent task with pydantic-ai: a lead ``Agent`` on a
  ``FunctionModel`` whose ``worker`` tool runs a second ``Agent`` (its own ``FunctionModel``)
  with ``usage=ctx.usage``, through ``lead.run`` with ``message_history`` carried over the same
  ``RUNS_PER_AGENT`` runs. It runs on asyncio, so in a subprocess (this file with
  ``--pydantic-ai-worker``) that warms up, times several rounds and prints their times per run
  as JSON. Reported as ``delegation_runs_per_s_vs_pydantic_ai``: our runs per second over
  theirs (target >= 5). Without pydantic-ai installed (it is in the ``bench`` and ``test``
  extras) the scenario is reported unavailable and its ratio left out.
* ``lifecycle``: 10,000 (``--quick``: 1,000) create-run-close cycles -- ``runtime.agent(...)``,
  one ``generate`` (one reply, no tools), ``aclose()`` -- one after another in one runtime
  that also holds one resident agent. After an untimed warm-up of the same cycles,
  ``tracemalloc`` snapshots (after ``gc.collect()``, with every task blocked) are taken before
  and after; the net bytes still allocated (tracemalloc's own bookkeeping left out), over the
  number of cycles, is
  ``bytes_retained_per_closed_agent`` (target <= 64). The runtime's children are counted
  before and after (``runtime.statistics().children``): a closed agent that stays a child is
  an error, not a number. Above the target, the lines that allocated what stayed are printed.
* ``chains``: 1,000 (``--quick``: 50) depth-3 delegation chains at once against a loopback
  ``Simulator`` (``interval=0``, in this process): chain ``i``'s lead agent ``A<i>`` calls the
  agent ``B`` through ``B.as_tool()``, which calls the agent ``C`` through ``C.as_tool()``,
  which answers. The simulator's policy drives it: the lead's user message is ``call B with
  {"input": "call C with {\\"input\\": \\"chain i\\"}"}`` (the inner braces written as JSON
  ``\\u007b`` escapes, so that the simulator sees one flat JSON object), ``C`` echoes ``You
  said: chain i``, and ``B`` then ``A`` answer ``The answer is <the tool's result>.``. Each
  chain is five HTTP requests. The leads are one agent per chain (an agent's own runs take
  turns); ``B`` and ``C`` are one agent each, since a delegated run with a fresh conversation
  executes in its caller's tool task, concurrently with the others. Every agent talks to one
  ``OpenAIChat`` from ``simulator.openai()`` behind one ``ProviderConnection`` limited to the
  pool's connections (see ``benchmarks/loop.py`` on why). Agents are started untimed; every
  round reuses them. Reported as ``chains_1000_s`` (``--quick``: ``chains_50_s``), every chain
  checked, against the same number of bare ``generate`` calls (five per chain) at once
  through the same connection.

Results are medians over several rounds, after an untimed warm-up. With ``--json`` the last
line printed is one JSON object ``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ``benchmarks/actors.py`` shares its name with the ``actors`` package, and a script's own
# directory comes first on ``sys.path``: put the repository root (where the package lives) first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import dataclasses
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence

import trio
from trio.testing import wait_all_tasks_blocked

from actors import Agent, Runtime, open_runtime, tool
from actors.providers import ProviderConnection, ProviderStream, StreamingProvider
from actors.testing import Simulator
from benchmarks._common import ReadyStream, Report, print_report
from benchmarks._common import parser as benchmark_parser
from protocols.messages import (
    AgentResult,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    ToolCall,
    ToolDefinition,
    Usage,
)

#: This file: run again as pydantic-ai's worker process.
SCRIPT = Path(__file__).resolve()
QUESTION = "What does the report say?"
TASK = "Summarise the report."
WORKER_ANSWER = "The report says 42."
ANSWER = f"The worker says: {WORKER_ANSWER}"
#: What the three provider calls report, summed: the lead's two and the worker's one.
LEAD_CALL_USAGE = Usage(prompt=20, completion=10)
LEAD_ANSWER_USAGE = Usage(prompt=30, completion=8)
WORKER_USAGE = Usage(prompt=10, completion=5)
TEAM_USAGE = LEAD_CALL_USAGE + LEAD_ANSWER_USAGE + WORKER_USAGE
#: The name of the lead's tool (the worker agent, or its plain stand-in).
WORKER_TOOL = "worker"
#: Runs on one lead (and one history) before fresh agents are taken.
RUNS_PER_AGENT = 10
#: Leads per timed round (quick, full), for delegation and for direct runs.
AGENTS_PER_ROUND = (10, 20)
#: Timed rounds (quick, full).
RUN_ROUNDS = (5, 21)
#: Histories per round and timed rounds (quick, full) for pydantic-ai.
PYDANTIC_AGENTS_PER_ROUND = (2, 5)
PYDANTIC_ROUNDS = (3, 9)
#: Create-run-close cycles measured (quick, full), after the warm-up cycles; the target.
CYCLES = (1_000, 10_000)
WARMUP_CYCLES = 200
BYTES_TARGET = 64
#: Allocation sites printed when the retained bytes are above the target.
TOP_SITES = 8
#: Depth-3 chains at once (quick, full), and the timed rounds.
CHAINS = (50, 1_000)
CHAIN_ROUNDS = (3, 3)
#: HTTP requests per chain: A twice, B twice, C once.
REQUESTS_PER_CHAIN = 5


def check(name: str, content: str, expected: str = ANSWER) -> None:
    """Fail loudly unless a run answered ``expected``."""
    if content != expected:
        raise SystemExit(f"{name}: wrong answer {content!r}, expected {expected!r}")


def check_result(name: str, result: AgentResult, turns: int, expected: str = ANSWER) -> None:
    """Fail loudly unless a run answered ``expected``, complete, in ``turns`` provider calls."""
    check(name, result.content, expected)
    if result.turns != turns or result.partial:
        raise SystemExit(f"{name}: {result.turns} turns, stop {result.stop}")


# -- the providers -------------------------------------------------------------------------------


class Lead(StreamingProvider):
    """The lead's two replies, for every run: a call of ``worker`` with the task while the last
    message is not a tool result, then ``The worker says: <that result>``."""

    name = "lead"

    def __init__(self) -> None:
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
                content=f"The worker says: {last.content}", usage=LEAD_ANSWER_USAGE
            )
        else:
            call = ToolCall(f"call_{self.calls}", WORKER_TOOL, {"input": TASK})
            result = ProviderResult(calls=(call,), usage=LEAD_CALL_USAGE)
        return ReadyStream(result)


class Worker(StreamingProvider):
    """The worker's one reply, for every run: ``The report says 42.``."""

    name = "worker"

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        return ReadyStream(ProviderResult(content=WORKER_ANSWER, usage=WORKER_USAGE))


# -- delegation and direct runs ------------------------------------------------------------------


class Pair:
    """A lead and its worker for one kind of run, started untimed."""

    def __init__(self, lead: Agent, worker: Agent, answers: list[str]) -> None:
        self.lead = lead
        self.worker = worker
        #: What the direct lead's plain ``worker`` tool answers with (the last worker answer).
        self.answers = answers

    @classmethod
    async def delegating(cls, runtime: Runtime) -> Pair:
        """A lead whose ``worker`` tool is the worker agent (``as_tool``)."""
        worker = await runtime.agent(Worker())
        lead = await runtime.agent(Lead(), tools=[worker.as_tool(WORKER_TOOL)])
        return cls(lead, worker, [])

    @classmethod
    async def direct(cls, runtime: Runtime) -> Pair:
        """A lead whose ``worker`` tool is a plain function answering the worker's answer."""
        answers: list[str] = []

        @tool(name=WORKER_TOOL)
        def stand_in(input: str) -> str:
            """Ask the worker (here: read the answer it already gave)."""
            return answers[-1]

        worker = await runtime.agent(Worker())
        lead = await runtime.agent(Lead(), tools=[stand_in])
        return cls(lead, worker, answers)

    async def aclose(self) -> None:
        """Close both agents (and the conversations they own)."""
        await self.lead.aclose()
        await self.worker.aclose()


async def time_delegation(pair: Pair, runs: int) -> float:
    """The seconds of ``runs`` delegating runs (each timed on its own)."""
    total = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        result = await pair.lead.generate(QUESTION)
        total += time.perf_counter() - start
        check_result("delegation", result, 2)
        if result.total_usage != TEAM_USAGE:
            raise SystemExit(f"delegation: total usage {result.total_usage}, not {TEAM_USAGE}")
    return total


async def time_direct(pair: Pair, runs: int) -> float:
    """The seconds of ``runs`` direct runs: the worker's run, then the lead's (each pair of
    runs timed on its own)."""
    total = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        answer = await pair.worker.generate(TASK)
        pair.answers.append(answer.content)
        result = await pair.lead.generate(QUESTION)
        total += time.perf_counter() - start
        check_result("direct worker", answer, 1, WORKER_ANSWER)
        check_result("direct lead", result, 2)
    return total


async def bench_runs(agents: int, rounds: int) -> dict[str, float]:
    """The median seconds per run of delegating runs and of direct runs."""
    runs = agents * RUNS_PER_AGENT
    kinds: dict[str, tuple[Callable[[Runtime], Awaitable[Pair]], Callable[..., Awaitable[float]]]]
    kinds = {
        "delegation": (Pair.delegating, time_delegation),
        "direct": (Pair.direct, time_direct),
    }

    async def one_round() -> dict[str, float]:
        totals = dict.fromkeys(kinds, 0.0)
        gc.collect()
        async with open_runtime() as runtime:
            for batch in range(agents):
                order = list(kinds) if batch % 2 == 0 else list(reversed(kinds))
                for name in order:
                    make, timed = kinds[name]
                    pair = await make(runtime)
                    totals[name] += await timed(pair, RUNS_PER_AGENT)
                    await pair.aclose()
        return {name: total / runs for name, total in totals.items()}

    await one_round()  # warm up
    samples: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, seconds in (await one_round()).items():
            samples[name].append(seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


# -- pydantic-ai -----------------------------------------------------------------------------------


async def pydantic_ai(agents: int, rounds: int) -> float | str:
    """The median seconds per run of pydantic-ai, from a subprocess; or why it is unavailable."""
    command = [sys.executable, str(SCRIPT), "--pydantic-ai-worker", str(agents), str(rounds)]
    process = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    if process.returncode != 0:
        stderr = process.stderr.decode("utf-8", "replace")
        raise SystemExit(f"pydantic-ai worker failed ({process.returncode}):\n{stderr}")
    report = json.loads(process.stdout.decode().strip().splitlines()[-1])
    if "unavailable" in report:
        return str(report["unavailable"])
    times = report["times"]
    if len(times) != rounds:
        raise SystemExit(f"pydantic-ai worker timed {len(times)} rounds, not {rounds}")
    return float(statistics.median(times))


def pydantic_worker(agents: int, rounds: int) -> int:
    """In the subprocess: the two-agent task through pydantic-ai, a lead ``Agent`` whose tool
    runs a worker ``Agent`` with ``usage=ctx.usage``, both on ``FunctionModel``\\ s; prints
    ``{"times": [...]}`` (seconds per run, one per round) or ``{"unavailable": ...}``."""
    import asyncio

    try:
        from pydantic_ai import Agent as PydanticAgent
        from pydantic_ai import RunContext
        from pydantic_ai.messages import (
            ModelMessage,
            ModelRequest,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
        )
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError as error:
        print(
            json.dumps(
                {
                    "unavailable": f"pydantic-ai is not installed ({error}); "
                    "pip install 'trio-agents[bench]'"
                }
            )
        )
        return 0

    def lead_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(
                        parts=[TextPart(f"The worker says: {part.model_response_str()}")]
                    )
        return ModelResponse(parts=[ToolCallPart(WORKER_TOOL, {"input": TASK})])

    def worker_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(WORKER_ANSWER)])

    worker = PydanticAgent(FunctionModel(worker_model))
    lead = PydanticAgent(FunctionModel(lead_model))

    async def ask_worker(ctx: RunContext[object], input: str) -> str:
        """Ask the worker to do a task and get its answer."""
        result = await worker.run(input, usage=ctx.usage)
        return result.output

    # This module's annotations are strings (``from __future__ import annotations``) and
    # ``RunContext`` is not a module global: give pydantic-ai the evaluated ones to read.
    ask_worker.__annotations__ = {"ctx": RunContext[object], "input": str, "return": str}
    lead.tool(name=WORKER_TOOL)(ask_worker)

    async def one_round() -> float:
        gc.collect()
        total = 0.0
        for _ in range(agents):
            history: list[ModelMessage] | None = None
            for _ in range(RUNS_PER_AGENT):
                start = time.perf_counter()
                result = await lead.run(QUESTION, message_history=history)
                total += time.perf_counter() - start
                check("pydantic-ai", result.output)
                if result.usage().requests != 3:
                    raise SystemExit(f"pydantic-ai: {result.usage().requests} requests, not 3")
                history = result.all_messages()
        return total / (agents * RUNS_PER_AGENT)

    async def main() -> list[float]:
        await one_round()  # warm up
        return [await one_round() for _ in range(rounds)]

    print(json.dumps({"times": asyncio.run(main())}))
    return 0


# -- create-run-close cycles -----------------------------------------------------------------------


async def cycle(runtime: Runtime, provider: StreamingProvider) -> None:
    """One create-run-close cycle: a new agent, one run, closed."""
    agent = await runtime.agent(provider)
    result = await agent.generate(TASK)
    check_result("cycle", result, 1, WORKER_ANSWER)
    await agent.aclose()


async def settled() -> None:
    """Let every task block, then collect garbage."""
    await wait_all_tasks_blocked()
    gc.collect()


@dataclasses.dataclass(frozen=True)
class Lifecycle:
    """What the create-run-close cycles left behind."""

    #: Net bytes still allocated after the cycles, per cycle.
    bytes: float
    #: The runtime's children before and after the cycles.
    children_before: int
    children_after: int
    #: Seconds per cycle, under tracemalloc.
    cycle_s: float
    #: The allocation sites (file:line) of most of the retained bytes, largest first.
    sites: list[str]


async def bench_lifecycle(n: int) -> Lifecycle:
    """Bytes retained per create-run-close cycle, the runtime's children before and after, the
    seconds per cycle (traced), and the top allocation sites of what stayed."""
    provider = Worker()
    async with open_runtime() as runtime:
        resident = await runtime.agent(provider, name="resident")
        check_result("resident", await resident.generate(TASK), 1, WORKER_ANSWER)
        for _ in range(WARMUP_CYCLES):
            await cycle(runtime, provider)
        await settled()
        children_before = len(runtime.statistics().children)
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        start = time.perf_counter()
        for _ in range(n):
            await cycle(runtime, provider)
        elapsed = time.perf_counter() - start
        await settled()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        children_after = len(runtime.statistics().children)
        await resident.aclose()
    if children_after != children_before:
        raise SystemExit(
            f"lifecycle: the runtime had {children_before} children before {n} "
            f"create-run-close cycles and {children_after} after"
        )
    # Not tracemalloc's own bookkeeping (the first snapshot's traces, kept while tracing).
    ours = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = after.filter_traces(ours).compare_to(before.filter_traces(ours), "lineno")
    # Memory trio's own loop gave back between the snapshots is not a negative retention.
    retained = max(sum(stat.size_diff for stat in diff), 0)
    sites = [
        f"  {stat.size_diff:+,} B in {stat.count_diff:+,} blocks: {stat.traceback}"
        for stat in sorted(diff, key=lambda stat: stat.size_diff, reverse=True)[:TOP_SITES]
        if stat.size_diff > 0
    ]
    return Lifecycle(retained / n, children_before, children_after, elapsed / n, sites)


# -- chains over HTTP ------------------------------------------------------------------------------


def chain_message(i: int) -> str:
    """Chain ``i``'s lead message: the simulator calls ``B`` with an input that makes it call
    ``C`` with ``chain i`` (the inner object's braces escaped inside the outer JSON string)."""
    inner = json.dumps({"input": f"chain {i}"})
    outer = json.dumps({"input": f"call C with {inner}"})
    body = outer[1:-1].replace("{", "\\u007b").replace("}", "\\u007d")
    return "call B with {" + body + "}"


def chain_answer(i: int) -> str:
    """What chain ``i``'s lead answers: ``C`` echoes, ``B`` and then ``A`` report the result."""
    return f"The answer is The answer is You said: chain {i}.."


async def timed_all(n: int, one: Callable[[int], Awaitable[str]], expected: Sequence[str]) -> float:
    """The wall time of ``one(0) ... one(n-1)`` all at once; every answer is checked."""
    contents = [""] * n

    async def run(i: int) -> None:
        contents[i] = await one(i)

    gc.collect()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(run, i)
    elapsed = time.perf_counter() - start
    for i, content in enumerate(contents):
        check(f"chain #{i}", content, expected[i])
    return elapsed


async def bench_chains(n: int, rounds: int) -> dict[str, float]:
    """The median wall time of ``n`` depth-3 chains at once, and of ``5 n`` bare calls at once
    through the same connection; plus the untimed start of the agents."""
    simulator: Simulator
    async with Simulator(interval=0) as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        pool = getattr(getattr(provider.client, "_transport", None), "_pool", None)
        limit = getattr(pool, "_max_connections", None)
        if not isinstance(limit, int):
            raise SystemExit(
                "cannot read the provider client's pool limit (httpx internals moved?)"
            )
        connection = await ProviderConnection.start(runtime, provider, limit=limit)
        try:
            start = time.perf_counter()
            c = await runtime.agent(connection, name="C")
            b = await runtime.agent(connection, name="B", tools=[c.as_tool()])
            to_b = b.as_tool()
            leads = [await runtime.agent(connection, name=f"A{i}", tools=[to_b]) for i in range(n)]
            started = time.perf_counter() - start

            async def chain(i: int) -> str:
                result = await leads[i].generate(chain_message(i))
                if result.partial or result.turns != 2:
                    raise SystemExit(f"chain #{i}: {result.turns} turns, stop {result.stop}")
                return result.content

            calls = n * REQUESTS_PER_CHAIN

            async def bare(i: int) -> str:
                result = await connection.generate([Message.user(f"bare {i}")])
                return result.content

            runs = {
                "chains": (n, chain, [chain_answer(i) for i in range(n)]),
                "provider": (calls, bare, [f"You said: bare {i}" for i in range(calls)]),
            }
            for count, one, expected in runs.values():  # warm up: connections, caches
                await timed_all(count, one, expected)
            samples: dict[str, list[float]] = {name: [] for name in runs}
            order = list(runs)
            for round_ in range(rounds):
                for name in order if round_ % 2 == 0 else reversed(order):
                    count, one, expected = runs[name]
                    samples[name].append(await timed_all(count, one, expected))
            for agent in (*leads, b, c):
                await agent.aclose()
        finally:
            await connection.aclose()
        stats = simulator.statistics()
    if stats.abandoned:
        raise SystemExit(f"chains: the simulator saw {stats.abandoned} abandoned streams")
    expected_requests = (rounds + 1) * 2 * n * REQUESTS_PER_CHAIN
    if stats.requests != expected_requests:
        raise SystemExit(f"chains: {stats.requests} requests, expected {expected_requests}")
    return {
        **{name: statistics.median(values) for name, values in samples.items()},
        "start": started,
        "requests": stats.requests,
        "limit": limit,
    }


# -- the benchmark -------------------------------------------------------------------------------


async def run(quick: bool) -> Report:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    mode = 0 if quick else 1
    runs = await bench_runs(AGENTS_PER_ROUND[mode], RUN_ROUNDS[mode])
    pydantic = await pydantic_ai(PYDANTIC_AGENTS_PER_ROUND[mode], PYDANTIC_ROUNDS[mode])
    cycles = CYCLES[mode]
    lifecycle = await bench_lifecycle(cycles)
    n_chains = CHAINS[mode]
    chains = await bench_chains(n_chains, CHAIN_ROUNDS[mode])

    us = 1e6
    retained = lifecycle.bytes
    metrics: dict[str, float] = {
        "delegation_run_us": runs["delegation"] * us,
        "direct_run_us": runs["direct"] * us,
        "delegation_runs_per_s": 1 / runs["delegation"],
        "runs_per_agent": RUNS_PER_AGENT,
        "cycles": cycles,
        "bytes_retained_per_closed_agent": retained,
        "runtime_children_before_cycles": lifecycle.children_before,
        "runtime_children_after_cycles": lifecycle.children_after,
        "cycle_traced_us": lifecycle.cycle_s * us,
        "chains": n_chains,
        f"chains_{n_chains}_s": chains["chains"],
        "chains_provider_calls_s": chains["provider"],
        "chains_agents_start_s": chains["start"],
        "chains_simulator_requests": chains["requests"],
        "connection_limit": chains["limit"],
    }
    ratios = {
        "delegation_time_vs_direct": runs["delegation"] / runs["direct"],
        "bytes_retained_per_closed_agent_over_target": retained / BYTES_TARGET,
        "chains_time_vs_provider_calls": chains["chains"] / chains["provider"],
    }
    lines = [
        f"delegation (lead -> worker.as_tool(), three provider calls): "
        f"{metrics['delegation_run_us']:.0f} us per run "
        f"({ratios['delegation_time_vs_direct']:.2f}x vs two direct generate calls in sequence "
        f"{metrics['direct_run_us']:.0f} us; target <= 1.3)",
    ]
    if isinstance(pydantic, str):
        lines.append(f"vs pydantic-ai: unavailable: {pydantic}")
    else:
        metrics["pydantic_ai_run_us"] = pydantic * us
        metrics["pydantic_ai_runs_per_s"] = 1 / pydantic
        ratios["delegation_runs_per_s_vs_pydantic_ai"] = pydantic / runs["delegation"]
        lines.append(
            "vs pydantic-ai (lead.run, a tool running the worker with usage=ctx.usage, "
            f"FunctionModels, asyncio, subprocess): {metrics['delegation_runs_per_s']:,.0f} runs/s "
            f"({ratios['delegation_runs_per_s_vs_pydantic_ai']:.2f}x vs "
            f"{metrics['pydantic_ai_runs_per_s']:,.0f} runs/s, "
            f"{metrics['pydantic_ai_run_us']:.0f} us per run; target >= 5)"
        )
    lines += [
        f"lifecycle ({cycles:,} create-run-close cycles): {retained:,.1f} bytes retained per "
        f"closed agent ({ratios['bytes_retained_per_closed_agent_over_target']:.2f}x the target "
        f"{BYTES_TARGET}); runtime children {lifecycle.children_before} before, "
        f"{lifecycle.children_after} after; {metrics['cycle_traced_us']:.0f} us per cycle "
        "(traced)",
    ]
    if retained > BYTES_TARGET and lifecycle.sites:
        lines.append("lifecycle: where the retained bytes were allocated:")
        lines += lifecycle.sites
    lines += [
        f"chains ({n_chains:,} depth-3 delegation chains at once, A -> B -> C over HTTP, "
        f"{REQUESTS_PER_CHAIN} requests each, connection limit {chains['limit']:.0f}): "
        f"{chains['chains']:.2f} s, all succeeded "
        f"({ratios['chains_time_vs_provider_calls']:.2f}x vs "
        f"{n_chains * REQUESTS_PER_CHAIN:,} bare generate calls at once through the connection "
        f"{chains['provider']:.2f} s)",
        f"chains: starting the {n_chains + 2:,} agents took {chains['start']:.2f} s",
    ]
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    parser = benchmark_parser(__doc__, "fewer rounds, cycles and chains")
    parser.add_argument(
        "--pydantic-ai-worker",
        nargs=2,
        metavar=("AGENTS", "ROUNDS"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    if args.pydantic_ai_worker:
        agents, rounds = args.pydantic_ai_worker
        return pydantic_worker(int(agents), int(rounds))

    print_report(trio.run(run, args.quick), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
