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
* ``protocols``: what each protocol the relay serves besides its own adds per event, sans-IO
  (no socket, no server: the encoding alone). One relay run of ``N`` = 1,000 content deltas
  (``--quick``: 200; a model's tokens, two of them not ASCII), then the call of a client's tool
  and the end -- logged as the relay logs a relayed call (``_Run.add``: each delta's text, then
  the result frame's ``frame_events``: ``tool_call``, ``usage``, ``finished``) and read back
  from its log as its followers read it -- is written whole, an event at a time (a live
  follower's batch of one, as ``next_events`` gives it), in each encoding: the **native** ones,
  the Server-Sent Events of ``GET /v1/runs/{id}/events`` (``_Run.sse``: ``run_event_sse`` per
  event, through the run's cache) -- the baseline -- and the relay's frames as NDJSON lines
  (``frames`` of the events, ``encode_frame`` each: the frames ``POST /v1/stream`` writes); and
  each served protocol's encoder with its SSE framing, through its route's own adapter (the
  ``Encoding`` of ``actors/relay/_agui.py``, ``_ui_stream.py``, ``_openai.py``: head, feed,
  tail), its encoder made anew per stream as each request's is; A2A's ``TaskEncoder`` with
  ``sse_event(rpc_result(...))`` per stream event (its route is not in yet). The time per event
  of each (the median over rounds; the encodings' order rotates every round; a collection
  before each stream) gives ``<protocol>_per_event_vs_native`` (target <= 1.2: the native
  SSE's time per event), and for information ``<protocol>_per_event_vs_ndjson`` and each one's
  bytes per event. What a client of each reads is checked: the answer's text, the tool call,
  the end.
* ``routes``: the same run end to end, over a loopback relay (hypercorn, port 0) whose model is
  a provider in this process streaming the run's deltas (a checkpoint between them) once its
  gate opens, to one ``httpx`` client at a time on each route: ``GET /v1/runs/{id}/events`` of
  a run ``POST /v1/stream`` started (``cancel_on_disconnect`` false; its starter leaves before
  the gate opens), ``POST /v1/stream`` itself (NDJSON), ``POST /v1/agui``, ``POST /v1/chat``
  and ``POST /v1/chat/completions`` (A2A's route is not in yet), each asking the same question
  with the same tool. Timed from opening the gate (once the answer's head has come) to the
  answer's end -- the relay's, the model's and the client's work per event (``N`` = 500,
  ``--quick``: 200), wall and CPU time -- giving ``route_<protocol>_per_event_vs_native`` (and
  ``route_<protocol>_cpu_per_event_vs_native``: the steadier of the two where other processes
  share the machine, whose time slices a round's wall time counts) against the native SSE
  route. An encoding is a small part of that per-event cost, so these ratios sit nearer 1 than
  the ``protocols`` ones; the NDJSON route writes a frame per event as the run publishes it,
  where a follower writes what it reads together.

Every stream's content is checked (in ``latency`` and ``throughput``: ``"1 2 ... N"``, ``N``
deltas): a mismatch is an error, not a number. Results are medians over several rounds (for
latency, the median over rounds of each stream's percentiles), after an untimed warm-up round;
direct and relayed alternate within a round, their order reversing every other round. With
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
import re
import statistics
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import httpx
import trio

from actors.providers import OpenAIChat, ProviderStream, StreamingProvider, TextStream
from actors.relay import RelayLimits, RelayProvider, RelayServer, RelayToken, serve
from actors.relay._a2a import _Stream as A2AEvents
from actors.relay._admission import _TokenState
from actors.relay._agui import _Events as AguiEvents
from actors.relay._openai import _Chunks as OpenAIChunks
from actors.relay._runs import _Run, _Runs, frames
from actors.relay._served import Encoding
from actors.relay._ui_stream import _Chat as UIChat
from actors.relay._ui_stream import _Stream as UIStream
from actors.testing import Simulator
from benchmarks._common import run_main
from protocols.codec import to_json
from protocols.live import RunEvent
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.relay import HTTP_REQUEST_ID, ResultFrame, RunFrame, encode_frame, frame_events
from protocols.serve import a2a as a2a_wire
from protocols.serve import agui as agui_wire
from protocols.serve import openai_chat as openai_wire

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


# -- protocols: what each served protocol costs per event ----------------------------------------

#: Content deltas of the run the protocols encode (quick, full); a tool call, its usage and the
#: terminal event follow them.
PROTOCOL_DELTAS = (200, 1_000)
#: Timed rounds (quick, full): each encodes the whole run once in every encoding.
PROTOCOL_ROUNDS = (9, 31)
#: Target: a served protocol's time per event at most this many times the native SSE's.
PER_EVENT_TARGET = 1.2
#: The native encodings (the first is the baseline of the ratios) and the served protocols, by
#: the names their metrics and ratios carry.
NATIVE = ("native_sse", "native_ndjson")
PROTOCOLS = ("agui", "ui_stream", "openai_chat", "a2a")
#: A model's pieces of text, in turn: a token each (two of them not ASCII, as answers have).
PIECES = (
    "The", " relay", " serves", " every", " protocol", " from", " one", " log", ":", " a",
    " na\u00efve", " caf\u00e9", " answer", ",", " token", " by", " token", ".",
)  # fmt: skip
#: The client's tool, which the run calls at its end.
TOOL = ToolDefinition(
    "get_weather",
    "The weather in a city now.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)
CALL = ToolCall("call_0001", TOOL.name, {"city": "Paris", "unit": "celsius"})
#: The ids the clients of the served protocols give (an AG-UI thread and run, a chat, ...).
CLIENT_ID = "bench-0001"


def answer_text(n: int) -> str:
    """The answer of a run of ``n`` content deltas."""
    return "".join(PIECES[i % len(PIECES)] for i in range(n))


def run_result(n: int) -> ProviderResult:
    """The model's result at the end of a run of ``n`` content deltas: the answer and a call of
    :data:`TOOL` (finish ``tool_calls``), with its usage."""
    return ProviderResult(
        content=answer_text(n),
        calls=(CALL,),
        usage=Usage(120, n),
        finish=FinishReason.TOOL_CALLS,
    )


def logged_run(n: int) -> tuple[_Run, list[RunEvent]]:
    """A relay run of ``n`` content deltas and a tool call, logged as the relay logs a relayed
    call (:meth:`_Run.publish`: a delta's text alone, then the result frame's
    :func:`~protocols.relay.frame_events` -- ``tool_call``, ``usage``, ``finished``), and its
    events as its log reads them (each made once, then the same object for every reader)."""
    holder = _TokenState(RelayToken(TOKEN, name="bench"))
    # (Opened as the relay opens one: its id as long as the relay mints them.)
    run = _Runs(RelayLimits()).open(holder, request_id=HTTP_REQUEST_ID, cancel_on_disconnect=True)
    for index in range(n):
        run.add("content", PIECES[index % len(PIECES)])
    for kind, data in frame_events(ResultFrame(HTTP_REQUEST_ID, run_result(n))):
        run.add(kind, data)
    events = run.live.log.read(0, limit=n + 10)
    if len(events) != n + 3 or not events[-1].terminal:
        raise SystemExit(f"the run's log reads {len(events)} events, not {n + 3}")
    return run, events


class NativeSse:
    """``GET /v1/runs/{id}/events``: :meth:`_Run.sse` (each event encoded once, by the first
    follower that reads it: here the one follower; a fresh cache each stream)."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        run._sse.clear()

    def head(self) -> bytes:
        return b""

    def feed(self, events: Sequence[RunEvent]) -> bytes:
        return self.run.sse(events)

    def tail(self) -> bytes:
        return b""


class NativeNdjson:
    """The relay's frames of the run as NDJSON lines (what ``POST /v1/stream`` writes: the
    ``run`` line, then a frame per event -- :func:`~actors.relay._runs.frames`, as a
    websocket's ``watch`` has them -- each ``encode_frame`` and a line's end)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def head(self) -> bytes:
        return (encode_frame(RunFrame(HTTP_REQUEST_ID, self.run_id)) + "\n").encode()

    def feed(self, events: Sequence[RunEvent]) -> bytes:
        return b"".join(
            (encode_frame(frame) + "\n").encode() for frame in frames(events, HTTP_REQUEST_ID)
        )

    def tail(self) -> bytes:
        return b""


def encodings(run: _Run) -> dict[str, Callable[[], Encoding]]:
    """Each encoding of ``run``'s events, by name: a new stream of it (its encoder made anew,
    as each request's is). The served protocols' are their routes' own adapters
    (``actors/relay/_agui.py``, ``_ui_stream.py``, ``_openai.py``) around their encoders, as
    the relay's model answers them (its calls are the client's to run)."""
    created = int(time.time())
    chat = UIChat(
        weakref.ref(run),
        CLIENT_ID,
        executes_tools=False,
        prior=(),
        client_tools=frozenset({TOOL.name}),
    )
    made: dict[str, Callable[[], Encoding]] = {
        "native_sse": lambda: NativeSse(run),
        "native_ndjson": lambda: NativeNdjson(run.run_id),
        "agui": lambda: AguiEvents(agui_wire.AguiEncoder(CLIENT_ID, CLIENT_ID)),
        "ui_stream": lambda: UIStream(chat),
        "openai_chat": lambda: OpenAIChunks(
            openai_wire.ChunkEncoder(f"chatcmpl-{CLIENT_ID}", MODEL, created)
        ),
    }
    made["a2a"] = lambda: A2AEvents(a2a_wire.TaskEncoder(CLIENT_ID, CLIENT_ID), CLIENT_ID, b"")
    return made


def records(name: str, body: bytes) -> list[Any]:
    """The JSON records of a body in encoding ``name``: NDJSON lines, or the ``data:`` of each
    Server-Sent Event (``[DONE]`` and comments left out)."""
    if name == "native_ndjson":
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    out = []
    for event in body.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def shown(name: str, body: bytes) -> tuple[str, list[str], bool]:
    """What a client of encoding ``name`` reads in ``body``: the answer's text, the names of the
    tool calls it is given, and whether the stream ended as a finished run's does."""
    text: list[str] = []
    calls: list[str] = []
    ended = False
    for item in records(name, body):
        if name == "native_sse":
            data = item["data"]
            if item["kind"] == "content":
                text.append(data["text"])
            elif item["kind"] == "tool_call":
                calls.append(data["call"]["name"])
            ended = ended or item["kind"] == "finished"
        elif name == "native_ndjson":
            if item["type"] == "delta":
                text.append(item["text"])
            elif item["type"] == "result":
                calls += [call["name"] for call in item["result"]["calls"]]
                ended = True
        elif name == "agui":
            if item["type"] == "TEXT_MESSAGE_CONTENT":
                text.append(item["delta"])
            elif item["type"] == "TOOL_CALL_START":
                calls.append(item["toolCallName"])
            ended = ended or item["type"] == "RUN_FINISHED"
        elif name == "ui_stream":
            if item["type"] == "text-delta":
                text.append(item["delta"])
            elif item["type"] == "tool-input-available":
                calls.append(item["toolName"])
            ended = ended or item["type"] == "finish"
        elif name == "openai_chat":
            choice = item["choices"][0] if item.get("choices") else {}
            delta = choice.get("delta", {})
            text.append(delta.get("content") or "")
            calls += [call["function"]["name"] for call in delta.get("tool_calls", ())]
            ended = ended or choice.get("finish_reason") == "tool_calls"
        elif name == "a2a":
            result = item["result"]
            if "artifactUpdate" in result:
                update = result["artifactUpdate"]
                piece = "".join(part["text"] for part in update["artifact"]["parts"])
                text = [*text, piece] if update.get("append") else [piece]
            elif "statusUpdate" in result:
                status = result["statusUpdate"]["status"]
                for part in status.get("message", {}).get("parts", ()):
                    if part.get("data", {}).get("event") == "tool_call":
                        calls.append(part["data"]["call"]["name"])
                ended = ended or status["state"] == "TASK_STATE_COMPLETED"
    return "".join(text), calls, ended


def check_shown(name: str, body: bytes, n: int) -> None:
    """Fail loudly unless a client of encoding ``name`` reads the whole run in ``body``."""
    text, calls, ended = shown(name, body)
    if text != answer_text(n) or calls != [TOOL.name] or not ended:
        raise SystemExit(
            f"{name}: wrong stream: {len(text)} characters of answer (of {len(answer_text(n))}),"
            f" calls {calls}, ended {ended}"
        )


def encode_stream(
    make: Callable[[], Encoding], batches: Sequence[Sequence[RunEvent]]
) -> tuple[float, bytes]:
    """The time to write a whole stream in an encoding -- its encoder made, its head, each
    batch of events fed, its tail -- and the stream's bytes."""
    gc.collect()
    start = time.perf_counter()
    encoding = make()
    parts = [encoding.head()]
    for batch in batches:
        parts.append(encoding.feed(batch))
    parts.append(encoding.tail())
    elapsed = time.perf_counter() - start
    return elapsed, b"".join(parts)


def bench_protocols(mode: int) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """The ``protocols`` scenario: each encoding's time per event of the run (the median over
    rounds) and bytes per event, and the served protocols' ratios to the native encodings."""
    n = PROTOCOL_DELTAS[mode]
    run, events = logged_run(n)
    made = encodings(run)
    # A live follower reads each event as it comes: a batch of one (``next_events``).
    batches = [[event] for event in events]
    sizes: dict[str, int] = {}
    for name, make in made.items():  # warm up, and check what a client reads
        _, body = encode_stream(make, batches)
        check_shown(name, body, n)
        sizes[name] = len(body)
    times: dict[str, list[float]] = {name: [] for name in made}
    order = list(made)
    for round_ in range(PROTOCOL_ROUNDS[mode]):
        shift = round_ % len(order)
        for name in order[shift:] + order[:shift]:
            times[name].append(encode_stream(made[name], batches)[0])
    count = len(events)
    us = {name: statistics.median(samples) * 1e6 / count for name, samples in times.items()}
    spread = {
        name: (min(samples) * 1e6 / count, max(samples) * 1e6 / count)
        for name, samples in times.items()
    }
    metrics: dict[str, float] = {"protocol_deltas": n, "protocol_events": count}
    for name in made:
        metrics[f"{name}_us_per_event"] = us[name]
        metrics[f"{name}_bytes_per_event"] = sizes[name] / count
    served = [name for name in PROTOCOLS if name in made]
    ratios: dict[str, float] = {}
    for name in served:
        ratios[f"{name}_per_event_vs_native"] = us[name] / us["native_sse"]
        ratios[f"{name}_per_event_vs_ndjson"] = us[name] / us["native_ndjson"]
    ratios["native_ndjson_per_event_vs_native"] = us["native_ndjson"] / us["native_sse"]

    def said(name: str) -> str:
        low, high = spread[name]
        return (
            f"{name} {us[name]:.2f} us/event (rounds {low:.2f}-{high:.2f}), "
            f"{sizes[name] / count:.0f} B/event"
        )

    meeting = [n for n in served if ratios[f"{n}_per_event_vs_native"] <= PER_EVENT_TARGET]
    missing = [n for n in served if n not in meeting]
    lines = [
        f"protocols ({n:,} content deltas, a tool call, usage, finished: {count:,} events, each "
        f"fed as it comes; encoder + framing, per event): native {said('native_sse')} (SSE of "
        f"GET /v1/runs/{{id}}/events: the baseline), {said('native_ndjson')}",
        *(
            f"  {said(name)}: {ratios[f'{name}_per_event_vs_native']:.2f}x native SSE "
            f"(target <= {PER_EVENT_TARGET:g}), {ratios[f'{name}_per_event_vs_ndjson']:.2f}x "
            "NDJSON"
            for name in served
        ),
        f"protocols meeting the target (<= {PER_EVENT_TARGET:g}x native SSE per event): "
        f"{', '.join(meeting) or 'none'}; above it: {', '.join(missing) or 'none'}",
    ]
    return metrics, ratios, lines


# -- routes: the same run over each route of a loopback relay ------------------------------------

#: Content deltas of the run each route streams (quick, full).
ROUTE_DELTAS = (200, 500)
#: Timed rounds (quick, full): each streams the run once over every route.
ROUTE_ROUNDS = (5, 9)
#: The routes, by the name of their encoding: each a request the relay answers with a stream
#: of the run (the native SSE follows a run that ``POST /v1/stream`` started).
ROUTES = ("native_sse", "native_ndjson", "agui", "ui_stream", "openai_chat")


class GatedStream(TextStream):
    """The run's upstream call: waits for the gate, then streams ``n`` content deltas (a
    checkpoint between them, as deltas read from a socket have) and ends with
    :func:`run_result`."""

    def __init__(self, gate: trio.Event, n: int) -> None:
        super().__init__()
        self.gate = gate
        self.n = n
        self.sent = 0

    async def __anext__(self) -> Delta:
        if self.sent == 0:
            await self.gate.wait()
        else:
            await trio.lowlevel.checkpoint()
        if self.sent == self.n:
            if self._result is None:
                self._result = run_result(self.n)
            raise StopAsyncIteration
        text = PIECES[self.sent % len(PIECES)]
        self.sent += 1
        self._content.append(text)
        return Delta("content", text)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class GatedProvider(StreamingProvider):
    """The relay's model in the ``routes`` scenario: each call a :class:`GatedStream` of ``n``
    deltas behind :attr:`gate` (a new gate for each call: :meth:`arm`)."""

    name = "gated"

    def __init__(self, n: int) -> None:
        self.n = n
        self.gate = trio.Event()

    def arm(self) -> trio.Event:
        """A closed gate for the next call."""
        self.gate = trio.Event()
        return self.gate

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        return GatedStream(self.gate, self.n)


def route_request(name: str) -> tuple[str, dict[str, Any]]:
    """The path and JSON body of the request that streams the run over route ``name``: the
    same question and the same tool in each protocol's shape."""
    question = "What is the weather in Paris?"
    if name in NATIVE:
        body: dict[str, Any] = {
            "messages": [to_json(Message.user(question))],
            "tools": [to_json(TOOL)],
            "version": 3,
        }
        if name == "native_sse":  # started by one request, followed by another
            body["cancel_on_disconnect"] = False
        return "/v1/stream", body
    if name == "agui":
        return "/v1/agui", {
            "threadId": CLIENT_ID,
            "runId": CLIENT_ID,
            "messages": [{"id": "m1", "role": "user", "content": question}],
            "tools": [
                {"name": TOOL.name, "description": TOOL.description, "parameters": TOOL.parameters}
            ],
            "context": [],
            "state": None,
            "forwardedProps": None,
        }
    if name == "ui_stream":
        message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": question}]}
        return "/v1/chat", {"id": CLIENT_ID, "messages": [message], "tools": [to_json(TOOL)]}
    if name == "openai_chat":
        function = {
            "name": TOOL.name,
            "description": TOOL.description,
            "parameters": TOOL.parameters,
        }
        return "/v1/chat/completions", {
            "model": MODEL,
            "stream": True,
            "messages": [{"role": "user", "content": question}],
            "tools": [{"type": "function", "function": function}],
        }
    raise ValueError(f"no route {name!r}")


async def detached(app: RelayServer, run_id: str) -> None:
    """Wait until run ``run_id`` has no attached client (its starter left)."""
    with trio.fail_after(5):
        while True:
            run = app._runs._runs.get(run_id)
            if run is None or run.attached is None:
                return
            await trio.sleep(0.001)


async def stream_route(
    name: str, client: httpx.AsyncClient, app: RelayServer, provider: GatedProvider
) -> tuple[float, float, bytes]:
    """Stream the run once over route ``name``: the wall and CPU time from opening the model's
    gate (once the answer's head has come: the client waits for the run) to the end of the
    answer, and the answer's body."""
    gate = provider.arm()
    path, body = route_request(name)
    gc.collect()
    async with contextlib.AsyncExitStack() as stack:
        response = await stack.enter_async_context(client.stream("POST", path, json=body))
        if name == "native_sse":
            run_id = response.headers["x-relay-run-id"]
            await response.aclose()  # the starter leaves: the run goes on
            await detached(app, run_id)
            events = f"/v1/runs/{run_id}/events"
            headers = {"accept": "text/event-stream"}
            response = await stack.enter_async_context(
                client.stream("GET", events, headers=headers)
            )
        if response.status_code != 200:
            raise SystemExit(f"{name}: the relay answered {response.status_code}")
        chunks: list[bytes] = []
        start, cpu = time.perf_counter(), time.process_time()
        gate.set()
        async for chunk in response.aiter_raw():
            chunks.append(chunk)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return elapsed, cpu, b"".join(chunks)


async def bench_routes(mode: int) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """The ``routes`` scenario: each route's wall and CPU time per event of the run, over a
    loopback relay, and the served protocols' ratios to the native SSE route."""
    n = ROUTE_DELTAS[mode]
    count = n + 3
    provider = GatedProvider(n)
    app = RelayServer(
        provider,
        tokens=[RelayToken(TOKEN, name="bench", max_streams=1_000, per_minute=10**9)],
        limits=RelayLimits(max_streams=1_000),
        page=False,
    )
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ROUTES}
    async with trio.open_nursery() as nursery:

        async def run_server(task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(app, port=0, task_status=task_status)

        bound: list[str] = await nursery.start(run_server)
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=bound[0], headers=headers, timeout=30) as client:
            for name in ROUTES:  # warm up, and check what a client reads
                check_shown(name, (await stream_route(name, client, app, provider))[2], n)
            order = list(ROUTES)
            for round_ in range(ROUTE_ROUNDS[mode]):
                shift = round_ % len(order)
                for name in order[shift:] + order[:shift]:
                    elapsed, used, body = await stream_route(name, client, app, provider)
                    check_shown(name, body, n)
                    samples[name].append((elapsed, used))
        nursery.cancel_scope.cancel()
    wall = {
        name: statistics.median(s[0] for s in runs) * 1e6 / count for name, runs in samples.items()
    }
    cpu = {
        name: statistics.median(s[1] for s in runs) * 1e6 / count for name, runs in samples.items()
    }
    metrics: dict[str, float] = {"route_deltas": n, "route_events": count}
    ratios: dict[str, float] = {}
    for name in ROUTES:
        metrics[f"route_{name}_us_per_event"] = wall[name]
        metrics[f"route_{name}_cpu_us_per_event"] = cpu[name]
    for name in ROUTES[2:]:
        ratios[f"route_{name}_per_event_vs_native"] = wall[name] / wall["native_sse"]
        ratios[f"route_{name}_cpu_per_event_vs_native"] = cpu[name] / cpu["native_sse"]

    def said(name: str) -> str:
        low = min(s[0] for s in samples[name]) * 1e6 / count
        high = max(s[0] for s in samples[name]) * 1e6 / count
        rounds = f"rounds {low:.1f}-{high:.1f}"
        return f"{name} {wall[name]:.1f} us/event ({rounds}, CPU {cpu[name]:.1f})"

    lines = [
        f"routes (loopback relay, {n:,} deltas + 3 events, one client; gate to the answer's "
        f"end, per event): {said('native_sse')}, {said('native_ndjson')}",
        *(
            f"  {said(name)}: {ratios[f'route_{name}_per_event_vs_native']:.2f}x native SSE "
            f"(CPU {ratios[f'route_{name}_cpu_per_event_vs_native']:.2f}x)"
            for name in ROUTES[2:]
        ),
    ]
    return metrics, ratios, lines


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
    for scenario in (bench_protocols(mode), await bench_routes(mode)):
        metrics.update(scenario[0])
        ratios.update(scenario[1])
        lines += scenario[2]
    return metrics, ratios, lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    return run_main(run, argv, doc=__doc__, quick="fewer rounds and deltas")


if __name__ == "__main__":
    raise SystemExit(main())
