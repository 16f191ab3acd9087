"""Benchmark: streaming through the relay (``RelayServer`` + ``RelayProvider``) against streaming
straight from the provider the relay holds, on loopback Simulators.

Usage: ``python benchmarks/relay.py [--quick] [--json]``

Everything runs in this process, on one trio loop: two ``actors.testing.Simulator`` servers
(OpenAI chat completions; the user message ``count to N`` streams ``N`` content deltas, one
number per delta), two ``RelayServer`` apps served by :func:`actors.relay.serve` (hypercorn's
trio worker, port 0) in front of them, and the clients. "Direct" is ``provider.stream(...)`` on
an ``OpenAIChat`` from ``simulator.openai()``; "relayed" is ``RelayProvider(url, token=...)``
against a ``RelayServer`` holding another such ``OpenAIChat`` (same settings, its own client)
for the same simulator -- so the relayed path does all of the direct path's work (inside the
server) plus the relay's. One thread does the simulator's, the server's and the clients' work,
so a throughput ratio is a ratio of the whole CPU cost per delta. Scenarios:

* ``latency``: one stream at a time of ``N`` = 1,000 deltas (``--quick``: 150) paced by the
  simulator at ``interval=0.002`` s, so that every delta is written on its own and nothing
  queues anywhere: what is measured is the path of one delta, not a backlog. For each delta,
  its **latency** is the time from the simulator writing its frame to the socket (the
  simulator here is a subclass whose connection stream notes ``time.perf_counter()`` for each
  content frame it writes) to the client getting it from ``async for delta in stream``: the same
  clock, the same process. The ``p50`` and ``p99`` of the ``N`` latencies of a stream, direct
  and relayed, give ``relay_p50_added_ms`` and ``relay_p99_added_ms`` (relayed minus direct,
  in ms; target: p99 added <= 2 ms; ``relay_p99_added_over_target`` is it over 2 ms). For
  information, the inter-arrival times on the client (each delta's time since the previous
  one, or since the request for the first) and the time to the first delta. The inter-arrival
  times are not the added latency: a constant extra delay per delta cancels out of them (they
  stay near the pacing interval, as trio's timers round it, on both paths), which is why the
  latency above is measured from the simulator's write instead; what the relay does show in
  them is its jitter, and its work delaying the simulator's own timer on the shared loop.
* ``throughput``: 100 streams at once of 200 deltas each (``--quick``: 10), from a simulator
  with ``interval=0`` (frames as fast as the sockets take them), in total deltas per second
  (all deltas over the wall time from starting the streams to the last one ending). Relayed
  through **one** ``RelayProvider`` (all 100 streams multiplexed over its one websocket) gives
  ``relay_throughput_vs_direct`` (target >= 0.7); for information, through 100
  ``RelayProvider`` s (one stream and one websocket each). The pools are the same on both
  sides: the direct provider and the relay's upstream provider are both ``simulator.openai()``
  with the provider's default client, whose pool allows 100 connections (checked: at least
  one per stream, so no stream ever waits for a connection) and keeps 20 alive. Raising the
  keep-alive limit to 100 as well was tried and is worse, for both sides: httpcore's pool,
  on every request added or removed, scans all its connections once for each idle one, so
  100 idle connections cost it about 10,000 checks per request -- up to a few times the whole
  direct run's time in this scenario; closing the idle connections beyond 20 (and opening
  them again in the next round) is the cheaper of the two. The relay's token and limits allow
  every stream (``max_streams`` 1,000, no practical rate limit). Every client's websocket is
  opened in the untimed warm-up round. For information, the process's CPU time per delta of
  each (``time.process_time``: less disturbed than the wall time when other processes share
  the machine; one thread does all the work, so the two agree on a quiet machine).

Every stream's content is checked (``"1 2 ... N"``, ``N`` deltas): a mismatch is an error, not
a number. Results are medians over several rounds (for latency, the median over rounds of
each stream's percentiles), after an untimed warm-up round; direct and relayed alternate within
a round, their order reversing every other round. With ``--json`` the last line printed is one
JSON object ``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ``benchmarks/actors.py`` shares its name with the ``actors`` package, and a script's own
# directory comes first on ``sys.path``: put the repository root (where the package lives) first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib
import gc
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import cast

import httpx
import trio

from actors.providers import OpenAIChat, StreamingProvider
from actors.relay import RelayLimits, RelayProvider, RelayServer, RelayToken, serve
from actors.testing import Simulator
from benchmarks._common import run_main
from protocols.messages import Message

MODEL = "simulator"
#: The relay's bearer token (any 16+ characters).
TOKEN = "benchmark-relay-token-0123456789"
#: Seconds between deltas in the latency scenario.
INTERVAL = 0.002
#: Deltas per stream in the latency scenario (quick, full).
LATENCY_DELTAS = (150, 1_000)
#: Timed rounds (quick, full) of the latency scenario (one direct and one relayed stream each).
LATENCY_ROUNDS = (2, 5)
#: Concurrent streams in the throughput scenario.
STREAMS = 100
#: Deltas per stream in the throughput scenario (quick, full).
THROUGHPUT_DELTAS = (10, 200)
#: Timed rounds (quick, full) of the throughput scenario.
THROUGHPUT_ROUNDS = (2, 5)
#: Target: at most this many ms of added p99 latency per delta.
P99_ADDED_TARGET_MS = 2.0

#: One content frame of an OpenAI stream as the simulator writes it (the role frame, with its
#: empty content, does not match).
CONTENT_FRAME = re.compile(rb'"delta":\{"content":"[^"]+"\}')


def prompt(n: int) -> str:
    """The user message that makes the simulator stream ``n`` deltas."""
    return f"count to {n}"


def expected_text(n: int) -> str:
    """The content of the answer to :func:`prompt` ``(n)``."""
    return " ".join(str(i) for i in range(1, n + 1))


def check(name: str, n: int, deltas: Sequence[str]) -> None:
    """Fail loudly unless ``deltas`` say ``1 2 ... n``: in ``n`` deltas straight from the
    provider; through the relay, which sends pieces that arrived together as one frame, in
    ``n`` or fewer, each holding whole numbers."""
    pieces = sum(len(text.split()) for text in deltas)
    whole = name != "direct" or len(deltas) == n
    if not whole or pieces != n or "".join(deltas) != expected_text(n):
        got = "".join(deltas)
        raise SystemExit(
            f"{name}: wrong stream for {prompt(n)!r}: {len(deltas)} deltas, "
            f"content {got[:40]!r}...{got[-40:]!r}"
        )


def percentile(samples: Sequence[float], p: int) -> float:
    """The ``p``-th percentile of ``samples`` (linear interpolation between closest ranks)."""
    if p == 50:
        return statistics.median(samples)
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


# -- a simulator that notes when it writes each delta --------------------------------------------


class StampingStream(trio.abc.HalfCloseableStream):
    """A server connection's stream that notes ``time.perf_counter()`` just before writing each
    content frame (one per write when the simulator paces its frames)."""

    def __init__(self, inner: trio.SocketStream, stamps: list[float]) -> None:
        self.inner = inner
        self.stamps = stamps

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        frames = len(CONTENT_FRAME.findall(bytes(data)))
        if frames:
            now = time.perf_counter()
            self.stamps.extend([now] * frames)
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class StampingSimulator(Simulator):
    """A :class:`Simulator` whose content frames are time-stamped in :attr:`stamps` as written."""

    def __init__(self, *, interval: float) -> None:
        super().__init__(interval=interval)
        self.stamps: list[float] = []

    async def _handle(self, stream: trio.SocketStream) -> None:
        # The handler only sends, receives and closes: the wrapper is all of a SocketStream it
        # uses.
        await super()._handle(cast(trio.SocketStream, StampingStream(stream, self.stamps)))


# -- clients --------------------------------------------------------------------------------------


def pool_limits(provider: OpenAIChat) -> httpx.Limits:
    """The connection limits the provider's HTTP client was built with."""
    pool = getattr(getattr(provider.client, "_transport", None), "_pool", None)
    max_connections = getattr(pool, "_max_connections", None)
    max_keepalive = getattr(pool, "_max_keepalive_connections", None)
    if not isinstance(max_connections, int) or not isinstance(max_keepalive, int):
        raise SystemExit("cannot read the provider client's pool limits (httpx internals moved?)")
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive)


async def read_stream(provider: StreamingProvider, n: int, arrivals: list[float]) -> list[str]:
    """Stream :func:`prompt` ``(n)`` from ``provider``, noting each delta's arrival time."""
    texts: list[str] = []
    async with provider.stream([Message.user(prompt(n))]) as stream:
        async for delta in stream:
            arrivals.append(time.perf_counter())
            texts.append(delta.text)
    if stream.result.content != expected_text(n):
        raise SystemExit(f"{provider.name}: the assembled result differs from the deltas")
    return texts


async def start_relay(nursery: trio.Nursery, upstream: StreamingProvider) -> str:
    """Serve a ``RelayServer`` for ``upstream`` on a free port; return its websocket URL."""
    app = RelayServer(
        upstream,
        tokens=[RelayToken(TOKEN, name="bench", max_streams=1_000, per_minute=10**9)],
        limits=RelayLimits(max_streams=1_000),
        page=False,
    )

    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve(app, port=0, task_status=task_status)

    bound: list[str] = await nursery.start(run)
    return bound[0].replace("http", "ws", 1) + "/v1/relay"


@contextlib.asynccontextmanager
async def relay_providers(urls: Sequence[str]) -> AsyncIterator[list[RelayProvider]]:
    """An open ``RelayProvider`` for each of ``urls``, opened and closed all at once (a close
    may wait for the websocket's closing handshake: one after the other, that adds up)."""
    providers: list[RelayProvider] = []
    done = trio.Event()

    async def hold(url: str, task_status: trio.TaskStatus[None]) -> None:
        async with RelayProvider(url, token=TOKEN) as provider:
            providers.append(provider)
            task_status.started()
            await done.wait()

    async with trio.open_nursery() as nursery:
        for url in urls:
            await nursery.start(hold, url)
        try:
            yield providers
        finally:
            done.set()


# -- latency --------------------------------------------------------------------------------------


async def one_latency(
    name: str, provider: StreamingProvider, simulator: StampingSimulator, n: int
) -> dict[str, float]:
    """One paced ``n``-delta stream: the percentiles of its per-delta latencies and gaps."""
    simulator.stamps.clear()
    arrivals: list[float] = []
    gc.collect()
    start = time.perf_counter()
    texts = await read_stream(provider, n, arrivals)
    check(name, n, texts)
    stamps = list(simulator.stamps)
    if len(stamps) != n:
        raise SystemExit(f"{name}: the simulator wrote {len(stamps)} content frames, not {n}")
    # A relayed frame holding k numbers (pieces that reached the relay together) is the
    # arrival of each of those k deltas.
    each = [at for at, text in zip(arrivals, texts, strict=True) for _ in text.split()]
    latencies = [arrived - written for arrived, written in zip(each, stamps, strict=True)]
    gaps = [b - a for a, b in zip([start, *arrivals], arrivals, strict=False)]
    return {
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "gap_p50": percentile(gaps, 50),
        "gap_p99": percentile(gaps, 99),
        "first": arrivals[0] - start,
    }


async def bench_latency(
    direct: StreamingProvider,
    relayed: StreamingProvider,
    simulator: StampingSimulator,
    n: int,
    rounds: int,
) -> dict[str, dict[str, float]]:
    """The median over ``rounds`` of each stream's statistics, direct and relayed."""
    runs: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
        "direct": lambda: one_latency("direct", direct, simulator, n),
        "relay": lambda: one_latency("relay", relayed, simulator, n),
    }
    for run in runs.values():  # warm up
        await run()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    order = list(runs)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else reversed(order):
            samples[name].append(await runs[name]())
    return {
        name: {key: statistics.median(s[key] for s in stats) for key in stats[0]}
        for name, stats in samples.items()
    }


# -- throughput -----------------------------------------------------------------------------------


async def time_concurrent(
    name: str, providers: Sequence[StreamingProvider], n: int
) -> tuple[float, float]:
    """The wall time and the process's CPU time of ``STREAMS`` concurrent ``n``-delta streams
    (stream ``i`` on ``providers[i % len(providers)]``); each stream is checked."""
    results: list[list[str]] = [[] for _ in range(STREAMS)]

    async def one(index: int) -> None:
        results[index] = await read_stream(providers[index % len(providers)], n, [])

    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for index in range(STREAMS):
            nursery.start_soon(one, index)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    for deltas in results:
        check(name, n, deltas)
    return elapsed, cpu


async def medians(
    runs: dict[str, Callable[[], Awaitable[tuple[float, float]]]], rounds: int
) -> dict[str, tuple[float, float]]:
    """The median wall and CPU times of each run over ``rounds`` rounds, after one untimed
    round; the runs alternate within a round and their order reverses every other round."""
    for run in runs.values():  # warm up: connections, caches, the allocator
        await run()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    order = list(runs)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else reversed(order):
            times[name].append(await runs[name]())
    return {
        name: (statistics.median(t[0] for t in samples), statistics.median(t[1] for t in samples))
        for name, samples in times.items()
    }


# -- the benchmark --------------------------------------------------------------------------------


async def run(quick: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    mode = 0 if quick else 1
    n_latency = LATENCY_DELTAS[mode]
    n_throughput = THROUGHPUT_DELTAS[mode]
    paced: StampingSimulator
    fast: Simulator
    async with StampingSimulator(interval=INTERVAL) as paced, Simulator(interval=0) as fast:
        providers = {
            "paced_direct": paced.openai(model=MODEL),
            "paced_upstream": paced.openai(model=MODEL),
            "fast_direct": fast.openai(model=MODEL),
            "fast_upstream": fast.openai(model=MODEL),
        }
        try:
            limits = pool_limits(providers["fast_direct"])
            if (limits.max_connections or 0) < STREAMS:
                raise SystemExit(f"the provider's pool is smaller than {STREAMS} connections")
            async with trio.open_nursery() as nursery:
                paced_url = await start_relay(nursery, providers["paced_upstream"])
                fast_url = await start_relay(nursery, providers["fast_upstream"])
                urls = [paced_url, fast_url] + [fast_url] * STREAMS
                async with relay_providers(urls) as relays:
                    paced_relay, shared, own = relays[0], relays[1], relays[2:]
                    latency = await bench_latency(
                        providers["paced_direct"],
                        paced_relay,
                        paced,
                        n_latency,
                        LATENCY_ROUNDS[mode],
                    )
                    direct_provider = providers["fast_direct"]
                    throughput = await medians(
                        {
                            "direct": lambda: time_concurrent(
                                "direct", [direct_provider], n_throughput
                            ),
                            "relay": lambda: time_concurrent("relay", [shared], n_throughput),
                            "relay_connections": lambda: time_concurrent(
                                "relay (a connection each)", own, n_throughput
                            ),
                        },
                        THROUGHPUT_ROUNDS[mode],
                    )
                nursery.cancel_scope.cancel()
        finally:
            for provider in providers.values():
                await provider.aclose()
        paced_stats, fast_stats = paced.statistics(), fast.statistics()
    for stats in (paced_stats, fast_stats):
        if stats.abandoned:
            raise SystemExit(f"the simulator saw {stats.abandoned} abandoned streams")

    ms = 1000.0
    direct, relay = latency["direct"], latency["relay"]
    total = STREAMS * n_throughput
    rate = {name: total / wall for name, (wall, _) in throughput.items()}
    cpu_us = {name: cpu * 1e6 / total for name, (_, cpu) in throughput.items()}
    added_p50 = (relay["p50"] - direct["p50"]) * ms
    added_p99 = (relay["p99"] - direct["p99"]) * ms
    metrics: dict[str, float] = {
        "latency_interval_ms": INTERVAL * ms,
        "latency_deltas": n_latency,
        "direct_p50_ms": direct["p50"] * ms,
        "direct_p99_ms": direct["p99"] * ms,
        "relay_p50_ms": relay["p50"] * ms,
        "relay_p99_ms": relay["p99"] * ms,
        "relay_p50_added_ms": added_p50,
        "relay_p99_added_ms": added_p99,
        "direct_gap_p50_ms": direct["gap_p50"] * ms,
        "direct_gap_p99_ms": direct["gap_p99"] * ms,
        "relay_gap_p50_ms": relay["gap_p50"] * ms,
        "relay_gap_p99_ms": relay["gap_p99"] * ms,
        "direct_first_delta_ms": direct["first"] * ms,
        "relay_first_delta_ms": relay["first"] * ms,
        "throughput_streams": STREAMS,
        "throughput_deltas_per_stream": n_throughput,
        "direct_deltas_per_s": rate["direct"],
        "relay_deltas_per_s": rate["relay"],
        "relay_connections_deltas_per_s": rate["relay_connections"],
        "direct_s": throughput["direct"][0],
        "relay_s": throughput["relay"][0],
        "relay_connections_s": throughput["relay_connections"][0],
        "direct_cpu_us_per_delta": cpu_us["direct"],
        "relay_cpu_us_per_delta": cpu_us["relay"],
        "relay_connections_cpu_us_per_delta": cpu_us["relay_connections"],
        "max_connections": limits.max_connections or 0,
        "max_keepalive_connections": limits.max_keepalive_connections or 0,
        "simulator_requests": paced_stats.requests + fast_stats.requests,
    }
    ratios = {
        "relay_throughput_vs_direct": rate["relay"] / rate["direct"],
        "relay_p99_added_over_target": added_p99 / P99_ADDED_TARGET_MS,
        "relay_connections_throughput_vs_direct": rate["relay_connections"] / rate["direct"],
        "relay_p99_vs_direct": relay["p99"] / direct["p99"],
        "relay_cpu_per_delta_vs_direct": cpu_us["relay"] / cpu_us["direct"],
    }
    lines = [
        f"latency ({n_latency:,} deltas, interval {INTERVAL * ms:g} ms; simulator write -> "
        f"client): direct p50 {metrics['direct_p50_ms']:.3f} ms, p99 "
        f"{metrics['direct_p99_ms']:.3f} ms; relayed p50 {metrics['relay_p50_ms']:.3f} ms, p99 "
        f"{metrics['relay_p99_ms']:.3f} ms",
        f"latency added by the relay: p50 {added_p50:.3f} ms, p99 {added_p99:.3f} ms "
        f"(target <= {P99_ADDED_TARGET_MS:g} ms)",
        f"inter-arrival on the client: direct p50 {metrics['direct_gap_p50_ms']:.3f} ms, p99 "
        f"{metrics['direct_gap_p99_ms']:.3f} ms; relayed p50 {metrics['relay_gap_p50_ms']:.3f} "
        f"ms, p99 {metrics['relay_gap_p99_ms']:.3f} ms (p99 added "
        f"{metrics['relay_gap_p99_ms'] - metrics['direct_gap_p99_ms']:.3f} ms)",
        f"first delta: direct {metrics['direct_first_delta_ms']:.2f} ms, relayed "
        f"{metrics['relay_first_delta_ms']:.2f} ms",
        f"throughput ({STREAMS} streams x {n_throughput} deltas, interval 0): relayed over one "
        f"websocket {rate['relay']:,.0f} deltas/s ({ratios['relay_throughput_vs_direct']:.2f}x "
        f"vs direct {rate['direct']:,.0f} deltas/s; target >= 0.7)",
        f"throughput, a websocket per stream ({STREAMS} RelayProviders): "
        f"{rate['relay_connections']:,.0f} deltas/s "
        f"({ratios['relay_connections_throughput_vs_direct']:.2f}x vs direct)",
        f"throughput, CPU time per delta (the whole process): relayed over one websocket "
        f"{cpu_us['relay']:.1f} us ({ratios['relay_cpu_per_delta_vs_direct']:.1f}x direct "
        f"{cpu_us['direct']:.1f} us), a websocket per stream {cpu_us['relay_connections']:.1f} us",
    ]
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    return run_main(run, argv, doc=__doc__, quick="fewer rounds and deltas")


if __name__ == "__main__":
    raise SystemExit(main())
