"""Benchmark: ``protocols.sse.SSEDecoder`` against httpx-sse's decoding pipeline.

Usage: ``python benchmarks/sse_decode.py [--quick] [--json]``

Scenarios, each fed in seeded random chunk sizes (the same chunks to both decoders):

* ``chat``: 3,000 OpenAI-style ``chat.completion.chunk`` events (``data: {...}\\n\\n``, about
  270 bytes each) with a few ``: keep-alive`` comments, ending with ``data: [DONE]``; chunks of
  1..4096 bytes.
* ``mib8`` / ``mib4``: one event of 8 MiB / 4 MiB made of 64-byte ``data:`` lines; chunks of
  1..65536 bytes. Their time ratio shows whether decoding is linear.
* ``line8``: one event whose data is a single 8 MiB line (a line arriving in many pieces).

The baseline is what httpx-sse does when ``EventSource.iter_sse`` consumes a response: httpx's
``TextDecoder`` (the incremental UTF-8 decoder behind ``Response.iter_text``), httpx-sse's
``SSELineDecoder`` and its ``SSEDecoder``, driven exactly as ``iter_sse`` drives them
(``line.rstrip("\\n")``, ``decode``, skip ``None``). The transport layer (``iter_raw`` and
friends) is left out of both sides. For information, ``chat`` is also run end to end through a
real ``httpx.Response`` over an in-memory stream and ``EventSource.iter_sse``.

Results are medians over several rounds. With ``--json`` the last line printed is one JSON object
``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repository root, so that ``benchmarks._common`` imports when run as a script.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gc
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from httpx._decoders import TextDecoder
from httpx_sse import EventSource
from httpx_sse._decoders import SSEDecoder as BaselineSSEDecoder
from httpx_sse._decoders import SSELineDecoder

from benchmarks._common import parser as benchmark_parser
from benchmarks._common import print_report
from protocols.sse import SSEComment, SSEDecoder, SSEEvent

MIB = 1024 * 1024
SEED = 20240611

_WORDS = (
    " the",
    " model",
    " streams",
    " tokens",
    " quickly",
    ",",
    " and",
    " each",
    " chunk",
    " carries",
    " a",
    " small",
    " delta",
    ".",
    " Hello",
    " world",
    " 😀",
    " café",
    " naïve",
    "\n",
)


def chat_stream(n_events: int, rng: random.Random) -> tuple[bytes, list[str]]:
    """Return an OpenAI-style chat stream and the data of each of its events, in order."""
    datas: list[str] = []
    parts: list[bytes] = []
    base = {
        "id": "chatcmpl-AbCdEfGhIjKlMnOpQrStUvWxYz012",
        "object": "chat.completion.chunk",
        "created": 1718000000,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_5050236cbd",
    }
    for i in range(n_events - 1):
        if i == 0:
            delta: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
            finish: str | None = None
        elif i == n_events - 2:
            delta = {}
            finish = "stop"
        else:
            delta = {"content": "".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))}
            finish = None
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        data = json.dumps({**base, "choices": [choice]}, ensure_ascii=False, separators=(",", ":"))
        datas.append(data)
        parts.append(b"data: " + data.encode() + b"\n\n")
        if i % 700 == 350:
            parts.append(b": keep-alive\n\n")
    datas.append("[DONE]")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts), datas


def big_event(size: int, *, line_length: int) -> tuple[bytes, str]:
    """Return a stream holding one event of about ``size`` bytes of ``line_length``-byte lines."""
    sentence = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. "
    value_length = line_length - len("data: ")
    n_lines = max(size // line_length, 1)
    text = sentence * (value_length // len(sentence) + 2)
    values = [text[i % 64 : i % 64 + value_length] for i in range(n_lines)]
    stream = b"".join(b"data: " + v.encode() + b"\n" for v in values) + b"\n"
    return stream, "\n".join(values)


def chunked(stream: bytes, rng: random.Random, max_chunk: int) -> list[bytes]:
    """Split ``stream`` into chunks of random sizes in ``1..max_chunk``."""
    chunks: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rng.randint(1, max_chunk)
        chunks.append(stream[pos : pos + step])
        pos += step
    return chunks


def decode_ours(chunks: list[bytes]) -> list[str]:
    """Decode with ``SSEDecoder``; return the data of each event."""
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        for item in decoder.feed(chunk):
            if not isinstance(item, SSEComment):
                events.append(item)
    events.extend(item for item in decoder.close() if not isinstance(item, SSEComment))
    return [event.data for event in events]


def decode_httpx_sse(chunks: list[bytes]) -> list[str]:
    """Decode the way ``httpx_sse.EventSource.iter_sse`` does; return the data of each event."""
    text_decoder = TextDecoder(encoding="utf-8")
    line_decoder = SSELineDecoder()
    decoder = BaselineSSEDecoder()
    events: list[Any] = []

    def lines() -> Iterator[str]:
        # The same shape as httpx_sse._api._iter_sse_lines over Response.iter_text.
        for chunk in chunks:
            text = text_decoder.decode(chunk)
            if text:  # httpx's TextChunker passes only non-empty text on
                yield from line_decoder.decode(text)
        text = text_decoder.flush()
        if text:
            yield from line_decoder.decode(text)
        yield from line_decoder.flush()

    for raw_line in lines():
        line = raw_line.rstrip("\n")
        sse = decoder.decode(line)
        if sse is not None:
            events.append(sse)
    return [event.data for event in events]


def decode_httpx_sse_response(chunks: list[bytes]) -> list[str]:
    """Decode through a real ``httpx.Response`` and ``EventSource`` (no network)."""
    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=iter(chunks)
    )
    return [event.data for event in EventSource(response).iter_sse()]


def median_times(
    runs: dict[str, tuple[Callable[[list[bytes]], list[str]], list[bytes]]], rounds: int
) -> dict[str, float]:
    """Return the median wall time of each ``fn(chunks)`` in ``runs`` over ``rounds`` rounds.

    One untimed round comes first. The runs are interleaved within each round, so a slow spell
    of the machine hits all of them alike instead of skewing their ratio.
    """
    for run, chunks in runs.values():  # warm up: let the allocator settle to these sizes
        run(chunks)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, (run, chunks) in runs.items():
            gc.collect()
            start = time.perf_counter()
            run(chunks)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(samples) for name, samples in times.items()}


def check_same(name: str, ours: list[str], theirs: list[str], expected: list[str]) -> None:
    """Fail loudly unless both decoders produced the expected events."""
    if len(ours) != len(expected) or len(theirs) != len(expected):
        raise SystemExit(
            f"{name}: event counts differ: ours {len(ours)}, httpx-sse {len(theirs)}, "
            f"expected {len(expected)}"
        )
    for index in {0, len(expected) // 2, len(expected) - 1}:
        if not ours[index] == theirs[index] == expected[index]:
            raise SystemExit(f"{name}: event {index} differs between the decoders")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    args = benchmark_parser(__doc__, "fewer rounds (a few seconds)").parse_args(argv)
    chat_rounds, big_rounds = (7, 5) if args.quick else (31, 15)

    rng = random.Random(SEED)
    chat, chat_datas = chat_stream(3000, rng)
    chat_chunks = chunked(chat, rng, 4096)
    mib8, mib8_data = big_event(8 * MIB, line_length=64)
    mib8_chunks = chunked(mib8, rng, 65536)
    mib4, mib4_data = big_event(4 * MIB, line_length=64)
    mib4_chunks = chunked(mib4, rng, 65536)
    line8, line8_data = big_event(8 * MIB, line_length=8 * MIB)
    line8_chunks = chunked(line8, rng, 65536)

    scenarios = {
        "chat": (chat_chunks, chat_datas),
        "mib8": (mib8_chunks, [mib8_data]),
        "mib4": (mib4_chunks, [mib4_data]),
        "line8": (line8_chunks, [line8_data]),
    }
    for name, (chunks, expected) in scenarios.items():
        check_same(name, decode_ours(chunks), decode_httpx_sse(chunks), expected)
    if decode_httpx_sse_response(chat_chunks) != chat_datas:
        raise SystemExit("chat: httpx-sse EventSource gave different events")

    chat_t = median_times(
        {
            "ours": (decode_ours, chat_chunks),
            "httpx_sse": (decode_httpx_sse, chat_chunks),
            "eventsource": (decode_httpx_sse_response, chat_chunks),
        },
        chat_rounds,
    )
    # The 8 MiB and 4 MiB runs of each decoder are interleaved with each other only. Mixed with
    # other big runs, glibc's malloc returns the freed 8 MiB buffers to the OS and every 8 MiB
    # run then pays a few thousand page faults the 4 MiB runs do not (its mmap threshold adapts
    # to the sizes freed), which would make the time ratio show the allocator, not the decoder.
    ours_t: dict[str, float] = {}
    theirs_t: dict[str, float] = {}
    for group in (("mib8", "mib4"), ("line8",)):
        for run, into in ((decode_ours, ours_t), (decode_httpx_sse, theirs_t)):
            into.update(
                median_times({name: (run, scenarios[name][0]) for name in group}, big_rounds)
            )
    ours_t["chat"] = chat_t["ours"]
    theirs_t["chat"] = chat_t["httpx_sse"]
    response_t = chat_t["eventsource"]

    n_chat = len(chat_datas)
    events_ours = n_chat / ours_t["chat"]
    events_theirs = n_chat / theirs_t["chat"]
    events_response = n_chat / response_t
    metrics: dict[str, float] = {
        "chat_events_per_s": events_ours,
        "chat_events_per_s_httpx_sse": events_theirs,
        "chat_events_per_s_httpx_sse_eventsource": events_response,
        "chat_mib_per_s": len(chat) / MIB / ours_t["chat"],
    }
    for name in ("mib8", "mib4", "line8"):
        metrics[f"{name}_s"] = ours_t[name]
        metrics[f"{name}_s_httpx_sse"] = theirs_t[name]
    metrics["mib8_over_mib4_time_httpx_sse"] = theirs_t["mib8"] / theirs_t["mib4"]
    ratios = {
        "events_per_s_vs_httpx_sse": events_ours / events_theirs,
        "mib8_over_mib4_time": ours_t["mib8"] / ours_t["mib4"],
    }

    print(f"chunks: chat {len(chat_chunks)}, mib8 {len(mib8_chunks)}, mib4 {len(mib4_chunks)}")
    print(
        f"chat: {events_ours:,.0f} events/s ({events_ours / events_theirs:.2f}x vs httpx-sse "
        f"{events_theirs:,.0f} events/s)"
    )
    print(
        f"chat via httpx.Response + EventSource (httpx-sse end to end): {events_response:,.0f} "
        f"events/s ({events_ours / events_response:.2f}x)"
    )
    print(f"chat: {metrics['chat_mib_per_s']:.1f} MiB/s")
    for name in ("mib8", "mib4", "line8"):
        print(
            f"{name}: {ours_t[name] * 1000:.1f} ms ({theirs_t[name] / ours_t[name]:.2f}x faster "
            f"than httpx-sse {theirs_t[name] * 1000:.1f} ms)"
        )
    print(
        f"mib8/mib4 time: {ratios['mib8_over_mib4_time']:.2f} "
        f"(httpx-sse {metrics['mib8_over_mib4_time_httpx_sse']:.2f}; linear is 2.0)"
    )
    print_report((metrics, ratios, []), as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
