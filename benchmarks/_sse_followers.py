"""The followers of ``benchmarks/live.py``'s ``sse`` scenario, in a process of their own (as a
relay's followers are: elsewhere, not in the relay's process).

Usage: ``python -m benchmarks._sse_followers PORT RUN_ID TOKEN COUNT``

Opens ``COUNT`` connections (at most :data:`CONNECTING` at once) to
``GET /v1/runs/RUN_ID/events`` on raw sockets, as cheap as a client can be (no parsing but
counting records). Prints ``ready`` once every one has its answer's head, then -- once every
answer has ended -- one JSON line: ``{"ended": [...], "counts": [...]}``, each follower's
``time.monotonic()`` at the end of its answer (the clock every process of the machine shares)
and how many events it read (negative: the terminal one was not among them).
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial

import trio

#: Connections opened at once while the followers come in (a listener's backlog is finite).
CONNECTING = 100


async def follow(
    port: int,
    run_id: str,
    token: str,
    *,
    ready: trio.Event,
    ended: list[float],
    counts: list[int],
) -> None:
    """One follower: reads its answer to the end; appends when and how many events."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    request = (
        f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    # Each record begins ``id: `` after a line's end; the answer ends with its last chunk
    # (hypercorn keeps the connection open after it, ``Connection: close`` or not).
    mark, terminal, last = b"\nid: ", b"event: finished", b"\r\n0\r\n\r\n"
    count, tail, headers, finished = 0, b"", b"", False
    async with stream:
        await stream.send_all(request)
        while b"\r\n\r\n" not in headers:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise SystemExit("the relay closed before answering")
            headers += chunk
        status, _, rest = headers.partition(b"\r\n\r\n")
        if not status.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"the relay answered {status.splitlines()[0]!r}")
        ready.set()
        chunk = b"\r\n" + rest  # the first record follows a chunk-size line as the others do
        while chunk:
            data = tail + chunk
            count += data.count(mark)
            finished = finished or terminal in data
            if last in data:
                break
            tail = data[-(len(terminal) - 1) :]
            chunk = await stream.receive_some(65536)
    ended.append(time.monotonic())
    counts.append(count if finished else -count)


async def main(port: int, run_id: str, token: str, followers: int) -> None:
    ended: list[float] = []
    counts: list[int] = []
    connect = trio.CapacityLimiter(CONNECTING)
    async with trio.open_nursery() as nursery:

        async def connected() -> None:
            async with connect:
                ready = trio.Event()
                nursery.start_soon(
                    partial(follow, port, run_id, token, ready=ready, ended=ended, counts=counts)
                )
                await ready.wait()

        async with trio.open_nursery() as connecting:
            for _ in range(followers):
                connecting.start_soon(connected)
        print("ready", flush=True)
    print(json.dumps({"ended": ended, "counts": counts}), flush=True)


if __name__ == "__main__":
    port, run_id, token, followers = sys.argv[1:]
    trio.run(main, int(port), run_id, token, int(followers))
