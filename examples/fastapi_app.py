"""An agent streaming its answer over Server-Sent Events from a FastAPI route -- ``actors.aio``.

Run:

* ``python examples/fastapi_app.py``: a demo -- serves the app on a free port, asks it one
  question over HTTP, prints the events, stops.
* ``python examples/fastapi_app.py --serve [--port 8000]``: serves it until Ctrl-C; then
  ``curl -N 'http://127.0.0.1:8000/ask?q=Count+to+20.'``.
* ``uvicorn fastapi_app:app --app-dir examples``: the same, with uvicorn's own options.

FastAPI and uvicorn are not dependencies of trio-agents (``pip install fastapi uvicorn``).

The runtime lives as long as the app (its lifespan). Each request gets an agent of its own
(cheap: an actor and a conversation) and streams its run as SSE: ``delta`` events, then
``done``. A client that goes away mid-answer cuts the run -- Starlette cancels the response's
task, and the door turns that cancel into the run's cut, which commits what was produced --
and the agent is closed. ``GET /runs`` lists how the last runs ended.

The agents answer from the offline simulator. Set ``TRIO_AGENTS_MODEL`` to a provider string
(``openai:gpt-4.1-mini``, ``ollama:qwen3:8b``; see docs/models.md) to ask a real model.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

import actors.aio
from actors import AgentEvent

#: How the last runs ended, newest last (appended from the runtime's thread).
finished: collections.deque[dict[str, Any]] = collections.deque(maxlen=100)


def record(event: AgentEvent) -> None:
    """An agent's event listener (it runs in the runtime's thread): keep how each run ended."""
    if event.kind == "finish":
        finished.append({"run_id": event.run_id, "stop": event.stop, "partial": event.partial})


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with actors.aio.Runtime() as runtime:
        model = os.environ.get("TRIO_AGENTS_MODEL")
        if model:
            app.state.provider = model
        else:
            simulator = await runtime.simulator(interval=0.02)  # a paced, visible stream
            app.state.provider = await runtime.connect(simulator.openai())
        app.state.runtime = runtime
        yield
    # Leaving the block cut what still ran, stopped every actor and ended the runtime's thread.


app = FastAPI(lifespan=lifespan)


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


async def answer(agent: actors.aio.Agent, question: str) -> AsyncIterator[str]:
    try:
        async with agent.stream(question) as run:
            async for chunk in run:
                if chunk.kind == "content":
                    yield sse("delta", {"text": chunk.text})
        yield sse("done", {"stop": run.result.stop, "content": run.result.content})
    finally:
        await agent.aclose()  # also when the client went away: then after the cut


@app.get("/ask")
async def ask(q: str) -> StreamingResponse:
    """Answer ``q``, streamed as Server-Sent Events."""
    runtime: actors.aio.Runtime = app.state.runtime
    agent = await runtime.agent(app.state.provider, system="Be terse.", on=[record])
    return StreamingResponse(answer(agent, q), media_type="text/event-stream")


@app.get("/runs")
async def runs() -> list[dict[str, Any]]:
    """How the last runs ended (``stop``, ``partial``), oldest first."""
    return list(finished)


async def demo() -> None:
    """Serve the app on a free port, ask it one question over HTTP, print the events."""
    listener = socket.create_server(("127.0.0.1", 0))  # a free port, listening already
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        params = {"q": "Count to 5."}
        async with client.stream("GET", "/ask", params=params) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    print(line)
                    # -> data: {"text": "1"}
                    # -> data: {"text": " 2"}
                    # -> data: {"text": " 3"}
                    # -> data: {"text": " 4"}
                    # -> data: {"text": " 5"}
                    # -> data: {"stop": "complete", "content": "1 2 3 4 5"}
        print((await client.get("/runs")).json())
        # -> [{'run_id': '...', 'stop': 'complete', 'partial': False}]
    server.should_exit = True
    await serving
    listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="serve until Ctrl-C")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if args.serve:
        uvicorn.run(app, host=args.host, port=args.port)
    else:
        asyncio.run(demo())


if __name__ == "__main__":
    main()
