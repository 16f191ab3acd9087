"""Benchmark: the doors from outside trio -- what a call and a streamed chunk cost through
``actors.aio`` (trio in a thread, a portal to asyncio), through trio's guest mode on asyncio's
loop (the other way to build that door), and through ``actors.sync``, against trio itself.

Usage: ``python benchmarks/doors.py [--quick] [--json]``

This is the evidence behind the choice of mechanism recorded in docs/from-asyncio.md ("Why a
thread"). The same agent work is done four ways:

* ``trio``: the baseline -- the calls awaited in ``trio.run``, no door.
* ``thread``: ``actors.aio`` as shipped -- ``asyncio.run``; the runtime runs in a thread of its
  own, each call crosses into it (``TrioToken.run_sync_soon``) and its outcome (or a stream's
  chunks, batched per wake-up) back (``loop.call_soon_threadsafe``).
* ``guest``: a minimal door on ``trio.lowlevel.start_guest_run`` written here for the
  comparison -- ``asyncio.run``; trio runs as guest on asyncio's loop thread, calls are spawned
  straight into a trio nursery from the loop (the cheapest entry guest mode allows: no re-entry
  queue), results and chunks are handed to asyncio futures directly (same thread, no crossing).
  When trio has nothing to run, guest mode waits for I/O in a worker thread of its own and
  wakes the loop with ``call_soon_threadsafe``; that is its cost.
* ``sync``: ``actors.sync`` -- the calling thread blocks on a queue the runtime's thread fills.

Scenarios (each agent has its own conversation; a fresh agent every ``BATCH`` runs, started
untimed, so every variant's prompts grow alike):

* ``generate``: microseconds per ``agent.generate()`` on an in-process provider answering one
  delta at once: the door's overhead per call, nothing else.
* ``stream``: microseconds per chunk of one streamed run of ``DELTAS`` deltas from an in-process
  provider: the door's overhead per chunk.
* ``simulator``: milliseconds per ``agent.generate("Count to 100.")`` (100 deltas) from a
  ``Simulator`` on loopback HTTP in the same runtime: a call with real I/O in it, where guest
  mode pays its I/O thread on every wait.

Every result is checked (a wrong answer is an error, not a number). Reported: medians over the
rounds of three passes, the variants' order rotated between passes; ratios are each door's time
over ``trio``'s (1.0 = no overhead). With ``--json`` the last line printed is one JSON object
``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import collections
import functools
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

import actors.aio
import actors.sync
from actors import Agent, Runtime, open_runtime
from actors.providers import ProviderStream, StreamingProvider
from actors.testing import Simulator
from benchmarks._common import ReadyStream, print_report
from benchmarks._common import parser as benchmark_parser
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
    Usage,
)

#: Runs on one agent before a fresh one is taken (its history grows meanwhile).
BATCH = 20
#: Deltas of the streamed run (quick, full).
DELTAS = (500, 2_000)
#: Timed rounds per pass (quick, full); three passes.
ROUNDS = (3, 7)
PASSES = 3
#: Batches per generate round, simulator runs per round (quick, full).
GENERATE_BATCHES = (2, 5)
SIMULATOR_RUNS = (5, 20)
VARIANTS = ("trio", "thread", "guest", "sync")
COUNTED = " ".join(str(i) for i in range(1, 101))


# -- providers -----------------------------------------------------------------------------------


class One(StreamingProvider):
    """Answers ``ok`` in one delta."""

    name = "one"

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        return ReadyStream(ProviderResult(content="ok", usage=Usage(prompt=5, completion=1)))


class ManyStream(ProviderStream):
    def __init__(self, count: int) -> None:
        self._left = count
        self._count = count
        self._done: ProviderResult | None = None

    async def __anext__(self) -> Delta:
        await trio.lowlevel.checkpoint()
        if self._left:
            self._left -= 1
            return Delta("content", "x")
        self._done = ProviderResult(content="x" * self._count, usage=Usage(prompt=5, completion=1))
        raise StopAsyncIteration

    @property
    def result(self) -> ProviderResult:
        assert self._done is not None
        return self._done

    @property
    def partial(self) -> ProviderResult:
        return self._done or ProviderResult(content="", finish=FinishReason.CANCELLED)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class Many(StreamingProvider):
    """Answers ``count`` deltas of one character each."""

    name = "many"

    def __init__(self, count: int) -> None:
        self.count = count

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        return ManyStream(self.count)


def check(name: str, got: object, expected: object) -> None:
    if got != expected:
        raise SystemExit(f"{name}: got {got!r}, expected {expected!r}")


# -- the guest-mode door (for the comparison only) -----------------------------------------------


class GuestDoor:
    """trio as a guest on the running asyncio loop, with an open runtime: ``call`` and
    ``stream`` run trio functions from asyncio code."""

    def __init__(self, *, simulator: bool = False) -> None:
        self._with_simulator = simulator
        self.simulator: Simulator | None = None
        self.runtime: Runtime | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None

    async def __aenter__(self) -> GuestDoor:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()

        async def main() -> None:
            async with open_runtime() as runtime, trio.open_nursery() as nursery:
                self.runtime, self._nursery, self._stop = runtime, nursery, trio.Event()
                if self._with_simulator:
                    async with Simulator() as self.simulator:
                        ready.set_result(None)
                        await self._stop.wait()
                else:
                    ready.set_result(None)
                    await self._stop.wait()
                nursery.cancel_scope.cancel()

        def done(result: Any) -> None:
            self._done.set_result(result.unwrap())

        trio.lowlevel.start_guest_run(
            main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=done,
            host_uses_signal_set_wakeup_fd=True,
        )
        await ready
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._stop is not None
        self._stop.set()  # from the loop's thread, between guest ticks: the run is ours
        await self._done

    async def call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def task() -> None:
            try:
                future.set_result(await fn())
            except Exception as error:
                future.set_exception(error)

        assert self._nursery is not None
        self._nursery.start_soon(task)
        return await future

    async def stream(self, agent: Agent, prompt: str) -> int:
        """Stream a run; the number of chunks."""
        loop = asyncio.get_running_loop()
        items: collections.deque[Any] = collections.deque()
        waiter: list[asyncio.Future[None] | None] = [None]
        end = object()

        def put(item: Any) -> None:
            items.append(item)
            future = waiter[0]
            if future is not None and not future.done():
                future.set_result(None)

        async def pump() -> None:
            async with agent.stream(prompt) as run:
                async for chunk in run:
                    put(chunk)
            put(end)

        assert self._nursery is not None
        self._nursery.start_soon(pump)
        count = 0
        while True:
            while not items:
                future = waiter[0] = loop.create_future()
                await future
            item = items.popleft()
            if item is end:
                return count
            count += item.kind == "content"


# -- the variants --------------------------------------------------------------------------------


async def _trio_session(scenario: str, quick: bool) -> list[float]:
    rounds = ROUNDS[not quick]
    async with open_runtime() as runtime:
        if scenario == "simulator":
            async with Simulator() as simulator:
                out = []
                for _ in range(rounds):
                    agent = await runtime.agent(simulator.openai())
                    out.append(await _trio_simulator(agent, quick))
                    await agent.aclose()
                return out
        if scenario == "stream":
            agent = await runtime.agent(Many(DELTAS[not quick]))
            out = []
            for _ in range(rounds):
                start = time.perf_counter()
                count = 0
                async with agent.stream("go") as run:
                    async for chunk in run:
                        count += chunk.kind == "content"
                out.append((time.perf_counter() - start) / count)
                check("trio stream", count, DELTAS[not quick])
            return out
        out = []
        for _ in range(rounds):
            total = 0.0
            for _ in range(GENERATE_BATCHES[not quick]):
                agent = await runtime.agent(One())
                start = time.perf_counter()
                for _ in range(BATCH):
                    check("trio generate", (await agent.generate("hi")).content, "ok")
                total += time.perf_counter() - start
                await agent.aclose()
            out.append(total / (BATCH * GENERATE_BATCHES[not quick]))
        return out


async def _trio_simulator(agent: Agent, quick: bool) -> float:
    runs = SIMULATOR_RUNS[not quick]
    start = time.perf_counter()
    for _ in range(runs):
        check("trio simulator", (await agent.generate("Count to 100.")).content, COUNTED)
    return (time.perf_counter() - start) / runs


async def _thread_session(scenario: str, quick: bool) -> list[float]:
    rounds = ROUNDS[not quick]
    async with actors.aio.Runtime() as runtime:
        if scenario == "simulator":
            simulator = await runtime.simulator()
            out = []
            for _ in range(rounds):
                agent = await runtime.agent(simulator.openai())
                runs = SIMULATOR_RUNS[not quick]
                start = time.perf_counter()
                for _ in range(runs):
                    result = await agent.generate("Count to 100.")
                    check("thread simulator", result.content, COUNTED)
                out.append((time.perf_counter() - start) / runs)
                await agent.aclose()
            return out
        if scenario == "stream":
            agent = await runtime.agent(Many(DELTAS[not quick]))
            out = []
            for _ in range(rounds):
                start = time.perf_counter()
                count = 0
                async with agent.stream("go") as run:
                    async for chunk in run:
                        count += chunk.kind == "content"
                out.append((time.perf_counter() - start) / count)
                check("thread stream", count, DELTAS[not quick])
            return out
        out = []
        for _ in range(rounds):
            total = 0.0
            for _ in range(GENERATE_BATCHES[not quick]):
                agent = await runtime.agent(One())
                start = time.perf_counter()
                for _ in range(BATCH):
                    check("thread generate", (await agent.generate("hi")).content, "ok")
                total += time.perf_counter() - start
                await agent.aclose()
            out.append(total / (BATCH * GENERATE_BATCHES[not quick]))
        return out


async def _guest_session(scenario: str, quick: bool) -> list[float]:
    rounds = ROUNDS[not quick]
    async with GuestDoor(simulator=scenario == "simulator") as door:
        runtime = door.runtime
        assert runtime is not None
        if scenario == "simulator":
            simulator = door.simulator
            assert simulator is not None
            out = []
            for _ in range(rounds):
                agent = await door.call(lambda: runtime.agent(simulator.openai()))
                runs = SIMULATOR_RUNS[not quick]
                start = time.perf_counter()
                for _ in range(runs):
                    result = await door.call(functools.partial(agent.generate, "Count to 100."))
                    check("guest simulator", result.content, COUNTED)
                out.append((time.perf_counter() - start) / runs)
                await door.call(agent.aclose)
            return out
        if scenario == "stream":
            agent = await door.call(lambda: runtime.agent(Many(DELTAS[not quick])))
            out = []
            for _ in range(rounds):
                start = time.perf_counter()
                count = await door.stream(agent, "go")
                out.append((time.perf_counter() - start) / count)
                check("guest stream", count, DELTAS[not quick])
            return out
        out = []
        for _ in range(rounds):
            total = 0.0
            for _ in range(GENERATE_BATCHES[not quick]):
                agent = await door.call(lambda: runtime.agent(One()))
                start = time.perf_counter()
                for _ in range(BATCH):
                    result = await door.call(functools.partial(agent.generate, "hi"))
                    check("guest generate", result.content, "ok")
                total += time.perf_counter() - start
                await door.call(agent.aclose)
            out.append(total / (BATCH * GENERATE_BATCHES[not quick]))
        return out


def _sync_session(scenario: str, quick: bool) -> list[float]:
    rounds = ROUNDS[not quick]
    with actors.sync.Runtime() as runtime:
        if scenario == "simulator":
            simulator = runtime.simulator()
            out = []
            for _ in range(rounds):
                agent = runtime.agent(simulator.openai())
                runs = SIMULATOR_RUNS[not quick]
                start = time.perf_counter()
                for _ in range(runs):
                    check("sync simulator", agent.generate("Count to 100.").content, COUNTED)
                out.append((time.perf_counter() - start) / runs)
                agent.close()
            return out
        if scenario == "stream":
            agent = runtime.agent(Many(DELTAS[not quick]))
            out = []
            for _ in range(rounds):
                start = time.perf_counter()
                count = sum(chunk.kind == "content" for chunk in agent.stream("go"))
                out.append((time.perf_counter() - start) / count)
                check("sync stream", count, DELTAS[not quick])
            return out
        out = []
        for _ in range(rounds):
            total = 0.0
            for _ in range(GENERATE_BATCHES[not quick]):
                agent = runtime.agent(One())
                start = time.perf_counter()
                for _ in range(BATCH):
                    check("sync generate", agent.generate("hi").content, "ok")
                total += time.perf_counter() - start
                agent.close()
            out.append(total / (BATCH * GENERATE_BATCHES[not quick]))
        return out


# -- a stalled host loop -------------------------------------------------------------------------

#: How long the probe runs, its timer's period, and how long the asyncio loop is blocked.
PROBE_FOR, PROBE_PERIOD, STALL = 0.3, 0.01, 0.2


async def lateness_probe() -> float:
    """In trio: the worst lateness (seconds) of a periodic timer over ``PROBE_FOR``."""
    worst = 0.0
    end = trio.current_time() + PROBE_FOR
    while trio.current_time() < end:
        before = trio.current_time()
        await trio.sleep(PROBE_PERIOD)
        worst = max(worst, trio.current_time() - before - PROBE_PERIOD)
    return worst


async def _stall(variant: str) -> float:
    """The probe's worst lateness while the asyncio loop is blocked for ``STALL`` seconds (as
    a slow handler or a blocking call in an asyncio program would)."""
    if variant == "thread":
        async with actors.aio.Runtime() as runtime:
            probe = asyncio.ensure_future(runtime.call(lateness_probe))
            await asyncio.sleep(PROBE_PERIOD * 2)
            time.sleep(STALL)  # noqa: ASYNC251 - the stall being measured
            return await probe
    async with GuestDoor() as door:
        probe = asyncio.ensure_future(door.call(lateness_probe))
        await asyncio.sleep(PROBE_PERIOD * 2)
        time.sleep(STALL)  # noqa: ASYNC251 - the stall being measured
        late: float = await probe
        return late


def measure(variant: str, scenario: str, quick: bool) -> list[float]:
    """One session of ``variant``: the seconds per op of each of its rounds."""
    if variant == "trio":
        return trio.run(_trio_session, scenario, quick)
    if variant == "thread":
        return asyncio.run(_thread_session(scenario, quick))
    if variant == "guest":
        return asyncio.run(_guest_session(scenario, quick))
    return _sync_session(scenario, quick)


def run(quick: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    scenarios = {
        "generate": (1e6, "us/call"),
        "stream": (1e6, "us/chunk"),
        "simulator": (1e3, "ms/call"),
    }
    samples: dict[tuple[str, str], list[float]] = {}
    for scenario in scenarios:
        for variant in VARIANTS:  # warm-up, untimed
            measure(variant, scenario, True)
        for turn in range(PASSES):
            order = VARIANTS[turn:] + VARIANTS[:turn]
            for variant in order:
                samples.setdefault((scenario, variant), []).extend(
                    measure(variant, scenario, quick)
                )
    metrics: dict[str, float] = {}
    ratios: dict[str, float] = {}
    lines: list[str] = []
    for scenario, (scale, unit) in scenarios.items():
        base = statistics.median(samples[scenario, "trio"])
        for variant in VARIANTS:
            value = statistics.median(samples[scenario, variant])
            metrics[f"{scenario}_{variant}_{unit.split('/')[0]}"] = value * scale
            ratio = value / base
            if variant != "trio":
                ratios[f"{scenario}_{variant}_vs_trio"] = ratio
            lines.append(f"{scenario} {variant}: {value * scale:.1f} {unit} ({ratio:.2f}x trio)")
        guest = statistics.median(samples[scenario, "guest"])
        thread = statistics.median(samples[scenario, "thread"])
        ratios[f"{scenario}_thread_vs_guest"] = thread / guest
        lines.append(f"{scenario}: thread door / guest mode = {thread / guest:.2f}")
    stalls = {
        variant: statistics.median(asyncio.run(_stall(variant)) for _ in range(PASSES))
        for variant in ("thread", "guest")
    }
    for variant, late in stalls.items():
        metrics[f"stall_{variant}_ms"] = late * 1e3
        lines.append(
            f"stall {variant}: a trio timer fires {late * 1e3:.1f} ms late while the asyncio "
            f"loop is blocked for {STALL * 1e3:.0f} ms"
        )
    ratios["stall_guest_vs_thread"] = stalls["guest"] / stalls["thread"]
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    args = benchmark_parser(__doc__, "fewer rounds and deltas").parse_args(argv)
    print_report(run(args.quick), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
