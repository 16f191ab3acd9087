"""examples/fastapi_app.py under a real uvicorn process: an agent's answer streamed as SSE to an
HTTP client, and a client that goes away mid-answer cutting the run (actors.aio)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import httpx
import trio

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
RUNNING = re.compile(rb"Uvicorn running on (http://127\.0\.0\.1:\d+)")


@asynccontextmanager
async def served() -> AsyncIterator[tuple[str, list[bytes]]]:
    """The example app under ``uvicorn`` on a free port: its URL, and what it logged."""
    environment = {k: v for k, v in os.environ.items() if k != "TRIO_AGENTS_MODEL"}
    environment["PYTHONPATH"] = str(ROOT)
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "fastapi_app:app",
        "--app-dir",
        str(ROOT / "examples"),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    process = await trio.lowlevel.open_process(
        command, stderr=subprocess.PIPE, env=environment, cwd=ROOT
    )
    assert process.stderr is not None
    log: list[bytes] = []
    try:
        with trio.fail_after(60):
            while (found := RUNNING.search(b"".join(log))) is None:
                chunk = await process.stderr.receive_some()
                assert chunk, b"".join(log).decode(errors="replace")
                log.append(chunk)
        async with trio.open_nursery() as nursery:

            async def drain() -> None:
                assert process.stderr is not None
                while chunk := await process.stderr.receive_some():
                    log.append(chunk)

            nursery.start_soon(drain)
            yield found.group(1).decode(), log
            process.send_signal(signal.SIGINT)  # uvicorn's graceful stop: the app's lifespan ends
            with trio.fail_after(60):
                await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The SSE events of ``response``: (event, data)."""
    event = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield event, json.loads(line.removeprefix("data: "))


async def test_an_answer_streams_as_sse_and_a_disconnect_cuts_the_run() -> None:
    async with served() as (url, log), httpx.AsyncClient(base_url=url) as client:
        async with client.stream("GET", "/ask", params={"q": "Count to 5."}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            answered = [item async for item in events(response)]
        assert answered[:-1] == [("delta", {"text": t}) for t in ["1", " 2", " 3", " 4", " 5"]]
        assert answered[-1] == ("done", {"stop": "complete", "content": "1 2 3 4 5"})

        # A long answer, left after three deltas: the connection closes mid-stream.
        async with (
            client.stream("GET", "/ask", params={"q": "Count to 10000."}) as response,
            aclosing(events(response)) as stream,
        ):
            seen = []
            async for _event, data in stream:
                seen.append(data["text"])
                if len(seen) == 3:
                    break
        assert seen == ["1", " 2", " 3"]

        with trio.fail_after(30):  # the server notices the disconnect in its own time
            while len(runs := (await client.get("/runs")).json()) < 2:  # noqa: ASYNC110
                await trio.sleep(0.05)  # (another process's state: asked again)
        assert [(run["stop"], run["partial"]) for run in runs] == [
            ("complete", False),
            ("cancelled", True),  # the run was cut, not left running to its 10,000th number
        ]
    text = b"".join(log).decode(errors="replace")
    assert "Traceback" not in text, text
    assert "Application shutdown complete" in text
