"""Benchmark: the agent loop (``Agent.generate``) against a minimal trio loop and pydantic-ai.

Usage: ``python benchmarks/loop.py [--quick] [--json]``

The task, everywhere: the user asks ``What is 19 + 23?``; turn 1, the model calls the tool
``add(a=19, b=23)``; turn 2, it answers ``The answer is 42.`` from the tool's result. Every
run's answer is checked: a wrong one is an error, not a number. Scenarios:

* ``run``: seconds per run through ``Agent.generate`` (``Agent.start(runtime, provider,
  tools=[add])``, ``add`` made with ``@tool``) against the floor: a hand-written trio loop
  doing the same work with no actors -- ``provider.generate`` twice on the same provider, the
  raw ``add`` function called with the call's arguments, the messages appended to a list
  that is the next call's prompt. The provider is :class:`Replay`, a tiny
  ``StreamingProvider`` written here that answers the two replies of the task for every run
  (a tool call while the last message is not a tool result, then the answer built from that
  result, one content delta) -- a ``ScriptedProvider`` would need a fresh script per run and
  records every call. Both keep a history for ``RUNS_PER_AGENT`` runs (a fresh agent, with
  its own conversation, started untimed; for the floor a fresh list), so both prompts grow
  alike; each run is timed on its own and a round's time per run is their sum over the
  count. Agents and floor alternate batch by batch, their order swapping every batch.
* ``pydantic_ai``: pydantic-ai's ``Agent`` with a ``FunctionModel`` answering the same two
  replies and the same ``add`` tool (``tool_plain``), through ``agent.run`` with
  ``message_history`` carried over the same ``RUNS_PER_AGENT`` runs. It runs on asyncio, so
  in a subprocess (this file with ``--pydantic-ai-worker``) that warms up, times several
  rounds and prints their times per run as JSON. Without pydantic-ai installed (it is in the
  ``bench`` and ``test`` extras) the scenario is reported unavailable and its ratio left out.
* ``tracing``: the ``run`` scenario's agent runs (not the floor) in three modes, batch by
  batch (a fresh agent each), the modes in every order in turn, with a collection before each
  batch: ``off`` -- ``opentelemetry-api`` taken as absent (the runtime's cached lookup says so:
  what an install without the ``tracing`` extra runs); ``unconfigured`` -- the API imported and
  no tracer provider set (the default: one cached check per run, no span work); ``noop`` --
  every agent given ``tracer_provider=NoOpTracerProvider()`` (what a disabled SDK,
  ``OTEL_SDK_DISABLED=true``, hands out), run with no span current: nothing to record and
  nothing to carry, so each run makes one check and no span; ``sampled_out`` -- the SDK's
  ``TracerProvider(sampler=ALWAYS_OFF)``, run inside a current span: every run starts and
  ends its ``invoke_agent`` span (not recorded), and its model and tool calls carry the
  context on without spans of their own. Reported as ratios to ``off`` (target for ``noop``:
  at most 1.03; ``sampled_out`` has none: it is the price of the instrumentation itself).
  Without ``opentelemetry-api`` the scenario is reported unavailable; without the SDK (in
  the ``test`` extra) ``sampled_out`` is left out.
* ``memory``: bytes per idle agent (an ``Agent`` with its own ``Conversation`` actor and the
  ``add`` tool, sharing one provider), from ``tracemalloc`` snapshots taken before and after
  starting 10,000 (``--quick``: 1,000) with nothing else running -- as
  ``benchmarks/actors.py`` measures an idle actor -- against the bytes per bare idle actor
  measured the same way. Target: at most 16,384 bytes per agent.
* ``concurrent``: 2,000 agents (``--quick``: 200) each run one streamed turn (no tools:
  ``What is i + 1?``, answered ``i + 1 = i+1.``) from a loopback ``Simulator``
  (``interval=0``, in this process), all at once, in wall time. They share one ``OpenAIChat``
  from ``simulator.openai()`` with its default pool (100 connections, 20 kept alive), behind
  one ``ProviderConnection`` whose limit is the pool's 100 connections: the other calls wait
  on the connection's trio limiter. (Handed straight to the provider, 2,000 calls at once
  queue in httpcore's pool, whose assignment pass rescans every queued request against every
  connection on each change -- quadratic -- and, with more connections than the keep-alive
  limit, closes idle ones instead of reusing them: here the calls then starve past the
  provider's 60 s first-event timeout.) The agents are started untimed, and every round reuses
  them (one more turn each). Reported as ``concurrent_2000_s`` (``--quick``:
  ``concurrent_200_s``). For information, the same number of bare ``generate`` calls at once
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
import gc
import itertools
import json
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
import trio
from trio.testing import wait_all_tasks_blocked

from actors import Actor, Agent, Runtime, _tracing, open_runtime, tool
from actors.providers import OpenAIChat, ProviderConnection, ProviderStream, StreamingProvider
from actors.testing import Simulator
from benchmarks._common import ReadyStream, print_report
from benchmarks._common import parser as benchmark_parser
from protocols._json import dumps
from protocols.messages import (
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
QUESTION = "What is 19 + 23?"
ARGUMENTS = {"a": 19, "b": 23}
ANSWER = "The answer is 42."
#: Runs on one agent (and one history) before a fresh one is taken.
RUNS_PER_AGENT = 10
#: Agents (histories) per timed round (quick, full), for ours and the floor.
AGENTS_PER_ROUND = (10, 20)
#: Timed rounds (quick, full), for ours and the floor.
RUN_ROUNDS = (5, 21)
#: Histories per round and timed rounds (quick, full) for pydantic-ai (a few ms per run).
PYDANTIC_AGENTS_PER_ROUND = (2, 5)
PYDANTIC_ROUNDS = (3, 9)
#: Idle agents started for the memory scenario (quick, full); the target per agent.
MEMORY_AGENTS = (1_000, 10_000)
BYTES_TARGET = 16_384
#: Agents running one turn at once (quick, full), and the timed rounds.
CONCURRENT_AGENTS = (200, 2_000)
CONCURRENT_ROUNDS = (3, 3)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def check(name: str, content: str, expected: str = ANSWER) -> None:
    """Fail loudly unless a run answered ``expected``."""
    if content != expected:
        raise SystemExit(f"{name}: wrong answer {content!r}, expected {expected!r}")


# -- the provider --------------------------------------------------------------------------------


class Replay(StreamingProvider):
    """Answers the task's two replies for every run: ``add(19, 23)`` while the last message is
    not a tool result, then ``The answer is <that result>.``."""

    name = "replay"

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
                content=f"The answer is {last.content}.", usage=Usage(prompt=20, completion=5)
            )
        else:
            call = ToolCall(f"call_{self.calls}", "add", ARGUMENTS)
            result = ProviderResult(calls=(call,), usage=Usage(prompt=10, completion=8))
        return ReadyStream(result)


# -- ours and the floor --------------------------------------------------------------------------


async def floor_run(provider: StreamingProvider, history: list[Message]) -> str:
    """The floor: the task by hand, no actors -- two provider calls, the tool function."""
    definitions = (add.definition,)
    history.append(Message.user(QUESTION))
    result = await provider.generate(history, tools=definitions)
    history.append(Message.assistant(result.content, calls=result.calls))
    for call in result.calls:
        value = add.function(**call.arguments)
        history.append(Message.tool(call.id, call.name, dumps(value)))
    result = await provider.generate(history, tools=definitions)
    history.append(Message.assistant(result.content))
    return result.content


async def time_floor(provider: StreamingProvider, runs: int) -> float:
    """The seconds of ``runs`` floor runs on one fresh history (each run timed on its own)."""
    history: list[Message] = []
    total = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        content = await floor_run(provider, history)
        total += time.perf_counter() - start
        check("floor", content)
    return total


async def time_agent(
    runtime: Runtime, provider: StreamingProvider, runs: int, tracer_provider: Any = None
) -> float:
    """The seconds of ``runs`` runs through ``Agent.generate`` on one fresh agent (started
    untimed; each run timed on its own)."""
    agent = await Agent.start(runtime, provider, tools=[add], tracer_provider=tracer_provider)
    total = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        result = await agent.generate(QUESTION)
        total += time.perf_counter() - start
        check("agent", result.content)
        if result.turns != 2 or result.partial:
            raise SystemExit(f"agent: {result.turns} turns, stop {result.stop}")
    return total


async def bench_runs(agents: int, rounds: int) -> dict[str, float]:
    """The median seconds per run of ours and of the floor."""
    provider = Replay()
    runs = agents * RUNS_PER_AGENT

    async def one_round() -> dict[str, float]:
        totals = {"agent": 0.0, "floor": 0.0}
        gc.collect()
        async with open_runtime() as runtime:
            for batch in range(agents):
                order = ("agent", "floor") if batch % 2 == 0 else ("floor", "agent")
                for name in order:
                    if name == "agent":
                        totals[name] += await time_agent(runtime, provider, RUNS_PER_AGENT)
                    else:
                        totals[name] += await time_floor(provider, RUNS_PER_AGENT)
        return {name: total / runs for name, total in totals.items()}

    await one_round()  # warm up
    samples: dict[str, list[float]] = {"agent": [], "floor": []}
    for _ in range(rounds):
        for name, seconds in (await one_round()).items():
            samples[name].append(seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


# -- tracing ---------------------------------------------------------------------------------------

#: Agents (histories) per timed round and timed rounds (quick, full) of the tracing scenario.
TRACING_AGENTS_PER_ROUND = (12, 24)
TRACING_ROUNDS = (7, 21)


async def bench_tracing(agents: int, rounds: int) -> dict[str, float] | str:
    """The median seconds per agent run with tracing off (the API taken as absent), with the API
    and no provider configured, with a no-op tracer provider, and (with the SDK installed)
    sampled out inside a current span; or why it is unavailable."""
    try:
        from opentelemetry.trace import NoOpTracerProvider
    except ImportError as error:
        return f"opentelemetry-api is not installed ({error}); pip install 'trio-agents[tracing]'"
    tracer_providers: dict[str, Any] = {"off": None, "unconfigured": None}
    tracer_providers["noop"] = NoOpTracerProvider()
    caller: Any = None
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
    except ImportError:
        pass
    else:
        tracer_providers["sampled_out"] = TracerProvider(sampler=ALWAYS_OFF)
        # The runs are requested inside a recorded span, as a traced service's would be.
        caller = TracerProvider(sampler=ALWAYS_ON).get_tracer("benchmark")
    provider = Replay()
    modes = tuple(tracer_providers)
    orders = list(itertools.permutations(modes))
    runs = agents * RUNS_PER_AGENT

    def set_mode(mode: str) -> None:
        _tracing._reset()
        if mode == "off":
            _tracing._lookup.api = None  # what the lookup caches when the import fails
        elif _tracing.global_tracer() is not None:
            raise SystemExit("tracing: a global tracer provider is configured")

    async def timed(runtime: Runtime, mode: str) -> float:
        if mode != "sampled_out":
            return await time_agent(runtime, provider, RUNS_PER_AGENT, tracer_providers[mode])
        with caller.start_as_current_span("caller"):
            return await time_agent(runtime, provider, RUNS_PER_AGENT, tracer_providers[mode])

    async def one_round() -> dict[str, float]:
        totals = dict.fromkeys(modes, 0.0)
        async with open_runtime() as runtime:
            for batch in range(agents):
                # A fresh agent per mode, the modes in every order in turn, a collection before
                # each: no mode always follows another (and pays for the garbage it left).
                for mode in orders[batch % len(orders)]:
                    set_mode(mode)
                    gc.collect()
                    totals[mode] += await timed(runtime, mode)
        return {mode: total / runs for mode, total in totals.items()}

    try:
        await one_round()  # warm up
        samples: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(rounds):
            for mode, seconds in (await one_round()).items():
                samples[mode].append(seconds)
    finally:
        _tracing._reset()
    return {mode: statistics.median(values) for mode, values in samples.items()}


# -- pydantic-ai -----------------------------------------------------------------------------------


async def pydantic_ai(agents: int, rounds: int) -> float | str:
    """The median seconds per run of pydantic-ai, from a subprocess; or why it is unavailable."""
    command = [
        sys.executable,
        str(SCRIPT),
        "--pydantic-ai-worker",
        str(agents),
        str(rounds),
    ]
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
    """In the subprocess: the task through pydantic-ai's ``Agent.run`` with a ``FunctionModel``,
    on asyncio; one untimed round, then ``rounds``; print ``{"times": [seconds per run, ...]}``
    (or ``{"unavailable": reason}`` when pydantic-ai is not installed)."""
    import asyncio

    try:
        from pydantic_ai import Agent as PydanticAgent
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

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(
                        parts=[TextPart(f"The answer is {part.model_response_str()}.")]
                    )
        return ModelResponse(parts=[ToolCallPart("add", dict(ARGUMENTS))])

    agent = PydanticAgent(FunctionModel(model))

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    async def one_round() -> float:
        gc.collect()
        total = 0.0
        for _ in range(agents):
            history: list[ModelMessage] | None = None
            for _ in range(RUNS_PER_AGENT):
                start = time.perf_counter()
                result = await agent.run(QUESTION, message_history=history)
                total += time.perf_counter() - start
                check("pydantic-ai", result.output)
                history = result.all_messages()
        return total / (agents * RUNS_PER_AGENT)

    async def main() -> list[float]:
        await one_round()  # warm up
        return [await one_round() for _ in range(rounds)]

    print(json.dumps({"times": asyncio.run(main())}))
    return 0


# -- memory ----------------------------------------------------------------------------------------


class Idle(Actor[None, None]):
    """An actor with no state that is never sent anything."""


def traced_bytes(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> int:
    """Return the net bytes allocated between two snapshots."""
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


async def traced(n: int, start_one: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """The bytes and GC-tracked objects per thing ``start_one`` starts (idle), over ``n`` of them
    started with nothing else running; the first, started untimed, builds a few things once."""
    keep = [await start_one()]
    await wait_all_tasks_blocked()
    gc.collect()
    objects = len(gc.get_objects())
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(n):
        keep.append(await start_one())
    await wait_all_tasks_blocked()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    objects = len(gc.get_objects()) - objects
    if len(keep) != n + 1:
        raise SystemExit("memory: not everything started")
    return traced_bytes(before, after) / n, objects / n


async def bench_memory(n: int) -> dict[str, float]:
    """Bytes and GC objects per idle agent and per bare idle actor."""
    provider = Replay()
    async with open_runtime() as runtime:
        agent_bytes, agent_objects = await traced(
            n, lambda: Agent.start(runtime, provider, tools=[add])
        )
        children = len(runtime.root.children())
        if children != 2 * (n + 1):
            raise SystemExit(f"memory: {children} actors for {n + 1} agents, not two each")
    async with open_runtime() as runtime:
        actor_bytes, actor_objects = await traced(n, lambda: runtime.spawn(Idle))
    return {
        "agent_bytes": agent_bytes,
        "agent_objects": agent_objects,
        "actor_bytes": actor_bytes,
        "actor_objects": actor_objects,
    }


# -- concurrent agents on the simulator ----------------------------------------------------------


def sum_question(i: int) -> tuple[str, str]:
    """Agent ``i``'s question and the simulator's answer to it."""
    return f"What is {i} + 1?", f"{i} + 1 = {i + 1}."


async def bench_concurrent(n: int, rounds: int) -> dict[str, float]:
    """The median wall time of ``n`` agents running one streamed turn at once, and of ``n`` bare
    calls at once through the same connection; plus the untimed start of the agents."""
    simulator: Simulator
    async with Simulator(interval=0) as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        limits = pool_limits(provider)
        # At most max_connections calls in flight: the others wait in trio, not in httpcore's
        # pool (whose queue handling is quadratic: see the module docstring).
        connection = await ProviderConnection.start(
            runtime, provider, limit=limits.max_connections or 100
        )
        try:
            start = time.perf_counter()
            agents = [await Agent.start(runtime, connection) for _ in range(n)]
            started = time.perf_counter() - start

            async def run_agents() -> float:
                contents = [""] * n

                async def one(i: int) -> None:
                    result = await agents[i].generate(sum_question(i)[0])
                    if result.partial or result.turns != 1:
                        raise SystemExit(f"concurrent: agent {i} stopped {result.stop}")
                    contents[i] = result.content

                return await timed_all(n, one, contents)

            async def run_provider() -> float:
                contents = [""] * n

                async def one(i: int) -> None:
                    result = await connection.generate([Message.user(sum_question(i)[0])])
                    contents[i] = result.content

                return await timed_all(n, one, contents)

            runs = {"agents": run_agents, "provider": run_provider}
            for run in runs.values():  # warm up: connections, caches
                await run()
            samples: dict[str, list[float]] = {name: [] for name in runs}
            order = list(runs)
            for round_ in range(rounds):
                for name in order if round_ % 2 == 0 else reversed(order):
                    samples[name].append(await runs[name]())
        finally:
            await connection.aclose()
        stats = simulator.statistics()
    if stats.abandoned:
        raise SystemExit(f"concurrent: the simulator saw {stats.abandoned} abandoned streams")
    return {
        **{name: statistics.median(values) for name, values in samples.items()},
        "start": started,
        "requests": stats.requests,
        "connections": stats.connections,
        "max_connections": limits.max_connections or 0,
        "max_keepalive_connections": limits.max_keepalive_connections or 0,
    }


def pool_limits(provider: OpenAIChat) -> httpx.Limits:
    """The connection limits the provider's HTTP client was built with."""
    pool = getattr(getattr(provider.client, "_transport", None), "_pool", None)
    max_connections = getattr(pool, "_max_connections", None)
    max_keepalive = getattr(pool, "_max_keepalive_connections", None)
    if not isinstance(max_connections, int) or not isinstance(max_keepalive, int):
        raise SystemExit("cannot read the provider client's pool limits (httpx internals moved?)")
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive)


async def timed_all(n: int, one: Callable[[int], Awaitable[None]], contents: list[str]) -> float:
    """The wall time of ``one(0) ... one(n-1)`` all at once; every content is checked."""
    gc.collect()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    elapsed = time.perf_counter() - start
    for i, content in enumerate(contents):
        check(f"concurrent #{i}", content, sum_question(i)[1])
    return elapsed


# -- the benchmark -------------------------------------------------------------------------------


async def run(quick: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    mode = 0 if quick else 1
    runs = await bench_runs(AGENTS_PER_ROUND[mode], RUN_ROUNDS[mode])
    tracing = await bench_tracing(TRACING_AGENTS_PER_ROUND[mode], TRACING_ROUNDS[mode])
    pydantic = await pydantic_ai(PYDANTIC_AGENTS_PER_ROUND[mode], PYDANTIC_ROUNDS[mode])
    memory = await bench_memory(MEMORY_AGENTS[mode])
    n_concurrent = CONCURRENT_AGENTS[mode]
    concurrent = await bench_concurrent(n_concurrent, CONCURRENT_ROUNDS[mode])

    us = 1e6
    metrics: dict[str, float] = {
        "run_us": runs["agent"] * us,
        "floor_run_us": runs["floor"] * us,
        "runs_per_s": 1 / runs["agent"],
        "floor_runs_per_s": 1 / runs["floor"],
        "runs_per_agent": RUNS_PER_AGENT,
        "idle_agents": MEMORY_AGENTS[mode],
        "bytes_per_idle_agent": memory["agent_bytes"],
        "bytes_per_idle_actor": memory["actor_bytes"],
        "gc_objects_per_idle_agent": memory["agent_objects"],
        "gc_objects_per_idle_actor": memory["actor_objects"],
        "concurrent_agents": n_concurrent,
        f"concurrent_{n_concurrent}_s": concurrent["agents"],
        "concurrent_provider_only_s": concurrent["provider"],
        "concurrent_agents_start_s": concurrent["start"],
        "max_connections": concurrent["max_connections"],
        "max_keepalive_connections": concurrent["max_keepalive_connections"],
        "simulator_requests": concurrent["requests"],
        "simulator_connections": concurrent["connections"],
    }
    ratios = {
        "run_time_vs_floor": runs["agent"] / runs["floor"],
        "bytes_per_idle_agent_over_target": memory["agent_bytes"] / BYTES_TARGET,
        "agent_bytes_vs_idle_actor": memory["agent_bytes"] / memory["actor_bytes"],
        "concurrent_time_vs_provider_only": concurrent["agents"] / concurrent["provider"],
    }
    lines = [
        f"run (two turns, one tool call): {metrics['run_us']:.0f} us "
        f"({ratios['run_time_vs_floor']:.2f}x vs the minimal trio loop "
        f"{metrics['floor_run_us']:.0f} us; target <= 2.2)",
        f"run: {metrics['runs_per_s']:,.0f} runs/s (floor {metrics['floor_runs_per_s']:,.0f} "
        "runs/s)",
    ]
    if isinstance(tracing, str):
        lines.append(f"tracing overhead: unavailable: {tracing}")
    else:
        metrics["tracing_off_run_us"] = tracing["off"] * us
        metrics["tracing_unconfigured_run_us"] = tracing["unconfigured"] * us
        metrics["tracing_noop_run_us"] = tracing["noop"] * us
        ratios["run_time_tracing_unconfigured_vs_off"] = tracing["unconfigured"] / tracing["off"]
        ratios["run_time_tracing_noop_vs_off"] = tracing["noop"] / tracing["off"]
        lines.append(
            f"tracing overhead per run: no-op tracer provider "
            f"{ratios['run_time_tracing_noop_vs_off']:.3f}x (target <= 1.03), opentelemetry "
            f"installed but unconfigured {ratios['run_time_tracing_unconfigured_vs_off']:.3f}x, "
            f"vs off ({metrics['tracing_off_run_us']:.0f} us; "
            f"{metrics['tracing_noop_run_us']:.0f} us and "
            f"{metrics['tracing_unconfigured_run_us']:.0f} us)"
        )
        if "sampled_out" in tracing:
            metrics["tracing_sampled_out_run_us"] = tracing["sampled_out"] * us
            ratios["run_time_tracing_sampled_out_vs_off"] = tracing["sampled_out"] / tracing["off"]
            lines.append(
                "tracing overhead per run, sampled out inside a current span (the "
                "instrumentation's own price, no target): "
                f"{ratios['run_time_tracing_sampled_out_vs_off']:.3f}x "
                f"({metrics['tracing_sampled_out_run_us']:.0f} us)"
            )
    if isinstance(pydantic, str):
        lines.append(f"vs pydantic-ai: unavailable: {pydantic}")
    else:
        metrics["pydantic_ai_run_us"] = pydantic * us
        metrics["pydantic_ai_runs_per_s"] = 1 / pydantic
        ratios["runs_per_s_vs_pydantic_ai"] = pydantic / runs["agent"]
        lines.append(
            f"vs pydantic-ai (Agent.run + FunctionModel, asyncio, subprocess): "
            f"{metrics['runs_per_s']:,.0f} runs/s ({ratios['runs_per_s_vs_pydantic_ai']:.2f}x vs "
            f"{metrics['pydantic_ai_runs_per_s']:,.0f} runs/s, {metrics['pydantic_ai_run_us']:.0f} "
            "us per run; target >= 10)"
        )
    lines += [
        f"memory: {memory['agent_bytes']:,.0f} bytes per idle agent, {MEMORY_AGENTS[mode]:,} "
        f"agents ({ratios['bytes_per_idle_agent_over_target']:.2f}x the target "
        f"{BYTES_TARGET:,}; {ratios['agent_bytes_vs_idle_actor']:.2f}x a bare idle actor "
        f"{memory['actor_bytes']:,.0f} bytes)",
        f"gc objects: {memory['agent_objects']:.1f} per idle agent "
        f"(bare idle actor {memory['actor_objects']:.1f})",
        f"concurrent ({n_concurrent:,} agents, one streamed turn each, one shared OpenAIChat "
        f"behind a ProviderConnection, limit = max_connections = "
        f"{concurrent['max_connections']:.0f}, keep-alive "
        f"{concurrent['max_keepalive_connections']:.0f}): {concurrent['agents']:.2f} s, all "
        f"succeeded ({ratios['concurrent_time_vs_provider_only']:.2f}x vs {n_concurrent:,} bare "
        f"generate calls through the connection {concurrent['provider']:.2f} s)",
        f"concurrent: starting the {n_concurrent:,} agents took {concurrent['start']:.2f} s",
    ]
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    parser = benchmark_parser(__doc__, "fewer rounds and agents")
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
