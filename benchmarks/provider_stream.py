"""Benchmark: ``OpenAIChat.stream`` against raw httpx and the openai SDK, on a loopback Simulator.

Usage: ``python benchmarks/provider_stream.py [--quick] [--json]``

Everything streams from one ``actors.testing.Simulator`` (OpenAI chat completions on loopback,
``interval=0``: frames as fast as the socket takes them) started in this process; the user message
``count to N`` streams ``N`` content deltas, one number per delta. Scenarios:

* ``single``: one 5,000-delta completion, in deltas per second. Ours is
  ``async with provider.stream(...) as stream: async for delta in stream`` on an ``OpenAIChat``
  from ``simulator.openai()``. The baseline is the floor under any client: raw
  ``httpx.AsyncClient.stream`` posting the very body our encoder sends (the same bytes and
  protocol headers), ``aiter_bytes`` split into lines, ``json.loads`` of each ``data:`` payload
  (decoded) and ``choices[0].delta.content``. For information, the same with ``aiter_lines``
  (httpx's text decoding and line splitting) instead of the byte split.
* ``concurrent``: 500 streams of 200 deltas each (``--quick``: 100), all started at once, in
  total wall time. The raw client gets the same ``httpx.Limits`` (and timeouts) as the
  provider's own client, so both queue on a pool of the same size.
* ``gemini``: the same 5,000-delta completion through ``GeminiChat`` (Gemini's
  ``streamGenerateContent`` SSE, one ``GenerateContentResponse`` per delta, each with its usage,
  model version and response id, as Gemini sends them), against raw httpx posting the same body
  and reading each record's ``candidates[0].content.parts`` texts with ``json.loads``.
* ``openai_sdk``: the official ``openai`` SDK (``AsyncOpenAI``, on asyncio) streaming the same
  5,000-delta completion, with ``stream_options={"include_usage": True}``. It runs in a
  subprocess (this file with ``--openai-sdk-worker``) that warms up, times several rounds and
  prints their times as JSON; the simulator keeps serving from this process meanwhile.

Ours and raw httpx both run on trio in this process, so the simulator's own work (writing the
frames) is in both of their times; the SDK runs in another process and so on another core than
the simulator, which if anything favours it. Each client warms up first; every stream's content
is checked (``"1 2 ... N"``, ``N`` deltas): a mismatch is an error, not a number.

Results are medians over several rounds; ours and raw httpx alternate within each round (their
order swapping from round to round), so a slow spell of the machine hits both alike. With
``--json`` the last line printed is one JSON object ``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ``benchmarks/actors.py`` shares its name with the ``actors`` package, and a script's own
# directory comes first on ``sys.path``: put the repository root (where the package lives) first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import gc
import json
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
import trio

from actors.providers import GeminiChat, OpenAIChat
from actors.testing import Simulator
from benchmarks._common import parser as benchmark_parser
from benchmarks._common import print_report
from protocols._json import dumpb
from protocols.messages import Message

#: This file: run again as the openai SDK's worker process.
SCRIPT = Path(__file__).resolve()
MODEL = "simulator"
#: Deltas of the single-stream scenarios.
SINGLE_DELTAS = 5_000
#: Concurrent streams (quick, full) and the deltas of each.
CONCURRENT_STREAMS = (100, 500)
CONCURRENT_DELTAS = 200
#: Timed rounds (quick, full) of the single-stream scenarios (in each process).
SINGLE_ROUNDS = (5, 21)
#: Timed rounds (quick, full) of the concurrent scenario.
CONCURRENT_ROUNDS = (3, 5)
#: Timed rounds (quick, full) of the openai SDK (about a second each), in its subprocess.
SDK_ROUNDS = (3, 9)

#: What a client reads from one stream: the content deltas, in order.
Reader = Callable[[int], Awaitable[list[str]]]


def prompt(n: int) -> str:
    """The user message that makes the simulator stream ``n`` deltas."""
    return f"count to {n}"


def expected_text(n: int) -> str:
    """The content of the answer to :func:`prompt` ``(n)``."""
    return " ".join(str(i) for i in range(1, n + 1))


def check(name: str, n: int, deltas: list[str]) -> None:
    """Fail loudly unless ``deltas`` are the ``n`` deltas of ``1 2 ... n``."""
    if len(deltas) != n or "".join(deltas) != expected_text(n):
        got = "".join(deltas)
        raise SystemExit(
            f"{name}: wrong stream for {prompt(n)!r}: {len(deltas)} deltas, "
            f"content {got[:40]!r}...{got[-40:]!r}"
        )


# -- the clients -------------------------------------------------------------------------------


def ours(provider: OpenAIChat | GeminiChat) -> Reader:
    """Read a stream through the provider's ``stream``."""

    async def read(n: int) -> list[str]:
        texts: list[str] = []
        async with provider.stream([Message.user(prompt(n))]) as stream:
            async for delta in stream:
                texts.append(delta.text)
        if stream.result.content != expected_text(n):
            raise SystemExit("ours: the assembled result differs from the deltas")
        return texts

    return read


def raw_httpx(
    client: httpx.AsyncClient, url: str, body: Callable[[int], bytes], headers: dict[str, str]
) -> Reader:
    """The floor: raw httpx streaming, a byte split into lines, ``json.loads`` of each payload.

    (Decoding each payload before ``json.loads`` is faster than handing it bytes, which makes
    ``json`` sniff the encoding; ``aiter_lines`` measured no faster than this byte split.)
    """

    async def read(n: int) -> list[str]:
        texts: list[str] = []
        content = body(n)
        async with client.stream("POST", url, content=content, headers=headers) as response:
            if response.status_code != 200:
                raise SystemExit(f"raw httpx: status {response.status_code}")
            rest = b""
            async for chunk in response.aiter_bytes():
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line.startswith(b"data: ") and line != b"data: [DONE]":
                        choices = json.loads(line[6:].decode())["choices"]
                        if choices:
                            text = choices[0]["delta"].get("content")
                            if text:
                                texts.append(text)
        return texts

    return read


def raw_httpx_gemini(
    client: httpx.AsyncClient, url: str, body: Callable[[int], bytes], headers: dict[str, str]
) -> Reader:
    """The floor for Gemini's stream: raw httpx, a byte split into lines (CRLF-framed events),
    ``json.loads`` of each payload and the text of each part of its first candidate."""

    async def read(n: int) -> list[str]:
        texts: list[str] = []
        content = body(n)
        async with client.stream("POST", url, content=content, headers=headers) as response:
            if response.status_code != 200:
                raise SystemExit(f"raw httpx (gemini): status {response.status_code}")
            rest = b""
            async for chunk in response.aiter_bytes():
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line.startswith(b"data: "):
                        record = json.loads(line[6:].decode())
                        for part in record["candidates"][0]["content"].get("parts", ()):
                            text = part.get("text")
                            if text and not part.get("thought"):
                                texts.append(text)
        return texts

    return read


def raw_httpx_lines(
    client: httpx.AsyncClient, url: str, body: Callable[[int], bytes], headers: dict[str, str]
) -> Reader:
    """Raw httpx streaming with ``aiter_lines`` (for information)."""

    async def read(n: int) -> list[str]:
        texts: list[str] = []
        content = body(n)
        async with client.stream("POST", url, content=content, headers=headers) as response:
            if response.status_code != 200:
                raise SystemExit(f"raw httpx (lines): status {response.status_code}")
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    choices = json.loads(line[6:])["choices"]
                    if choices:
                        text = choices[0]["delta"].get("content")
                        if text:
                            texts.append(text)
        return texts

    return read


def pool_limits(client: httpx.AsyncClient) -> httpx.Limits:
    """The connection limits ``client``'s pool was built with."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    max_connections = getattr(pool, "_max_connections", None)
    max_keepalive = getattr(pool, "_max_keepalive_connections", None)
    expiry = getattr(pool, "_keepalive_expiry", None)
    if not isinstance(max_connections, int) or not isinstance(max_keepalive, int):
        raise SystemExit("cannot read the provider client's pool limits (httpx internals moved?)")
    return httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive,
        keepalive_expiry=expiry if isinstance(expiry, int | float) else 5.0,
    )


# -- timing --------------------------------------------------------------------------------------


async def time_single(name: str, read: Reader, n: int) -> float:
    """The wall time of one ``n``-delta stream; its content is checked."""
    gc.collect()
    start = time.perf_counter()
    deltas = await read(n)
    elapsed = time.perf_counter() - start
    check(name, n, deltas)
    return elapsed


async def time_concurrent(name: str, read: Reader, streams: int, n: int) -> float:
    """The wall time of ``streams`` concurrent ``n``-delta streams; each stream is checked."""
    results: list[list[str]] = [[] for _ in range(streams)]

    async def one(index: int) -> None:
        results[index] = await read(n)

    gc.collect()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(streams):
            nursery.start_soon(one, index)
    elapsed = time.perf_counter() - start
    for deltas in results:
        check(name, n, deltas)
    return elapsed


async def medians(runs: dict[str, Callable[[], Awaitable[float]]], rounds: int) -> dict[str, float]:
    """The median of each timed run over ``rounds`` rounds, after one untimed round.

    The runs alternate within a round and their order reverses every other round.
    """
    for run in runs.values():  # warm up: connections, caches, the allocator
        await run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else reversed(order):
            times[name].append(await runs[name]())
    return {name: statistics.median(samples) for name, samples in times.items()}


async def openai_sdk(base_url: str, n: int, rounds: int) -> float:
    """The median time of an ``n``-delta stream through the openai SDK, from a subprocess."""
    command = [
        sys.executable,
        str(SCRIPT),
        "--openai-sdk-worker",
        base_url,
        str(n),
        str(rounds),
    ]
    process = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    if process.returncode != 0:
        stderr = process.stderr.decode("utf-8", "replace")
        raise SystemExit(f"openai SDK worker failed ({process.returncode}):\n{stderr}")
    report = json.loads(process.stdout.decode().strip().splitlines()[-1])
    times = report["times"]
    if len(times) != rounds:
        raise SystemExit(f"openai SDK worker timed {len(times)} rounds, not {rounds}")
    return float(statistics.median(times))


def sdk_worker(base_url: str, n: int, rounds: int) -> int:
    """In the subprocess: stream ``n`` deltas through ``AsyncOpenAI`` on asyncio, once untimed and
    then ``rounds`` times; print ``{"times": [...]}``."""
    import asyncio

    from openai import AsyncOpenAI

    async def stream_once(client: AsyncOpenAI) -> float:
        texts: list[str] = []
        gc.collect()
        start = time.perf_counter()
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt(n)}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.choices:
                text = chunk.choices[0].delta.content
                if text:
                    texts.append(text)
        elapsed = time.perf_counter() - start
        check("openai SDK", n, texts)
        return elapsed

    async def main() -> list[float]:
        client = AsyncOpenAI(base_url=base_url, api_key="sk-simulator", max_retries=0)
        try:
            await stream_once(client)  # warm up
            return [await stream_once(client) for _ in range(rounds)]
        finally:
            await client.close()

    print(json.dumps({"times": asyncio.run(main())}))
    return 0


# -- the benchmark -------------------------------------------------------------------------------


async def run(quick: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    mode = 0 if quick else 1
    streams = CONCURRENT_STREAMS[mode]
    simulator: Simulator
    async with Simulator(interval=0) as simulator:
        provider = simulator.openai(model=MODEL)
        # The raw client posts what our encoder posts, with the same protocol headers, limits
        # and timeouts as the provider's own client.
        bodies = {
            n: dumpb(provider.encode([Message.user(prompt(n))], (), None))
            for n in (SINGLE_DELTAS, CONCURRENT_DELTAS)
        }
        headers = await provider.request_headers()
        limits = pool_limits(provider.client)
        raw_client = httpx.AsyncClient(
            timeout=provider.client.timeout, limits=limits, follow_redirects=False
        )
        try:
            read_ours = ours(provider)
            read_raw = raw_httpx(raw_client, provider.url, bodies.__getitem__, headers)
            read_lines = raw_httpx_lines(raw_client, provider.url, bodies.__getitem__, headers)
            single = await medians(
                {
                    "ours": lambda: time_single("ours", read_ours, SINGLE_DELTAS),
                    "raw": lambda: time_single("raw httpx", read_raw, SINGLE_DELTAS),
                    "lines": lambda: time_single("raw httpx (lines)", read_lines, SINGLE_DELTAS),
                },
                SINGLE_ROUNDS[mode],
            )
            concurrent = await medians(
                {
                    "ours": lambda: time_concurrent("ours", read_ours, streams, CONCURRENT_DELTAS),
                    "raw": lambda: time_concurrent(
                        "raw httpx", read_raw, streams, CONCURRENT_DELTAS
                    ),
                },
                CONCURRENT_ROUNDS[mode],
            )
            gemini = simulator.gemini(model="gemini-2.5-flash")
            gemini_body = dumpb(gemini.encode([Message.user(prompt(SINGLE_DELTAS))], (), None))
            read_gemini = ours(gemini)
            read_raw_gemini = raw_httpx_gemini(
                raw_client, gemini.url, lambda n: gemini_body, await gemini.request_headers()
            )
            gemini_single = await medians(
                {
                    "ours": lambda: time_single("gemini", read_gemini, SINGLE_DELTAS),
                    "raw": lambda: time_single(
                        "raw httpx (gemini)", read_raw_gemini, SINGLE_DELTAS
                    ),
                },
                SINGLE_ROUNDS[mode],
            )
            await gemini.aclose()
            sdk = await openai_sdk(simulator.openai_base_url, SINGLE_DELTAS, SDK_ROUNDS[mode])
        finally:
            await raw_client.aclose()
            await provider.aclose()
        stats = simulator.statistics()
    if stats.abandoned:
        raise SystemExit(f"the simulator saw {stats.abandoned} abandoned streams")

    rate = {name: SINGLE_DELTAS / seconds for name, seconds in single.items()}
    rate["sdk"] = SINGLE_DELTAS / sdk
    gemini_rate = {name: SINGLE_DELTAS / seconds for name, seconds in gemini_single.items()}
    total_deltas = streams * CONCURRENT_DELTAS
    metrics: dict[str, float] = {
        "deltas_per_s": rate["ours"],
        "raw_httpx_deltas_per_s": rate["raw"],
        "raw_httpx_lines_deltas_per_s": rate["lines"],
        "openai_sdk_deltas_per_s": rate["sdk"],
        "single_ms": single["ours"] * 1000,
        "raw_httpx_single_ms": single["raw"] * 1000,
        "openai_sdk_single_ms": sdk * 1000,
        "concurrent_streams": streams,
        "concurrent_s": concurrent["ours"],
        "raw_httpx_concurrent_s": concurrent["raw"],
        "concurrent_deltas_per_s": total_deltas / concurrent["ours"],
        "raw_httpx_concurrent_deltas_per_s": total_deltas / concurrent["raw"],
        "max_connections": limits.max_connections or 0,
        "max_keepalive_connections": limits.max_keepalive_connections or 0,
        "simulator_requests": stats.requests,
        "gemini_deltas_per_s": gemini_rate["ours"],
        "raw_httpx_gemini_deltas_per_s": gemini_rate["raw"],
    }
    ratios = {
        "deltas_per_s_vs_raw_httpx": rate["ours"] / rate["raw"],
        "concurrent_time_vs_raw_httpx": concurrent["ours"] / concurrent["raw"],
        "deltas_per_s_vs_openai_sdk": rate["ours"] / rate["sdk"],
        "gemini_deltas_per_s_vs_raw_httpx": gemini_rate["ours"] / gemini_rate["raw"],
    }
    lines = [
        f"single ({SINGLE_DELTAS:,} deltas): {rate['ours']:,.0f} deltas/s "
        f"({ratios['deltas_per_s_vs_raw_httpx']:.2f}x vs raw httpx {rate['raw']:,.0f} deltas/s; "
        "target >= 0.85)",
        f"single via raw httpx aiter_lines: {rate['lines']:,.0f} deltas/s "
        f"({rate['ours'] / rate['lines']:.2f}x)",
        f"concurrent ({streams} streams x {CONCURRENT_DELTAS} deltas, "
        f"max_connections={limits.max_connections}): {concurrent['ours']:.2f} s "
        f"({ratios['concurrent_time_vs_raw_httpx']:.2f}x vs raw httpx {concurrent['raw']:.2f} s; "
        "target <= 1.25)",
        f"concurrent: {metrics['concurrent_deltas_per_s']:,.0f} deltas/s "
        f"(raw httpx {metrics['raw_httpx_concurrent_deltas_per_s']:,.0f} deltas/s)",
        f"single vs openai SDK (asyncio, subprocess): {rate['ours']:,.0f} deltas/s "
        f"({ratios['deltas_per_s_vs_openai_sdk']:.2f}x vs {rate['sdk']:,.0f} deltas/s; "
        "target >= 1.5)",
        f"gemini single ({SINGLE_DELTAS:,} deltas, GeminiChat): {gemini_rate['ours']:,.0f} "
        f"deltas/s ({ratios['gemini_deltas_per_s_vs_raw_httpx']:.2f}x vs raw httpx "
        f"{gemini_rate['raw']:,.0f} deltas/s; target >= 0.85)",
    ]
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    parser = benchmark_parser(__doc__, "fewer rounds and streams")
    parser.add_argument(
        "--openai-sdk-worker",
        nargs=3,
        metavar=("BASE_URL", "DELTAS", "ROUNDS"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    if args.openai_sdk_worker:
        base_url, n, rounds = args.openai_sdk_worker
        return sdk_worker(base_url, int(n), int(rounds))

    print_report(trio.run(run, args.quick), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
