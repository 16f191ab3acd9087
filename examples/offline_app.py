"""An app module for ``trio-agents worker --app`` and ``trio-agents mcp --app``, offline.

Its agents talk to an OpenAI-compatible endpoint: ``$OPENAI_BASE_URL`` if set, else the
offline simulator as ``trio-agents simulator`` serves it (http://127.0.0.1:8100/v1). So the
whole recipe runs with no network and no API key -- and pointing it at a real model is one
variable (with ``$OPENAI_API_KEY`` and ``$MODEL``)::

    trio-agents simulator &                                   # the model, on port 8100
    cd examples
    trio-agents worker --store sqlite:///jobs.db --app offline_app:registry &
    trio-agents jobs submit --store sqlite:///jobs.db --agent calculator "What is 19 + 23?"
    trio-agents jobs wait --store sqlite:///jobs.db ID        # -> The answer is 42.

    trio-agents mcp --app offline_app:add                     # one tool, over stdio
    trio-agents mcp --app offline_app:calculator --http       # the agent, as one MCP tool

What ``--app`` may name: ``registry`` (a function given the worker's runtime, returning an
``AgentRegistry``), ``add`` (a ``@tool``), ``tools`` (a list of them) and ``calculator`` (a
function starting an ``Agent``).

Run as a script (``python examples/offline_app.py``), it starts a simulator of its own and does
what the worker would: runs a job of the registry's agent, on a job store in memory.
"""

from __future__ import annotations

import os

import trio

from actors import Agent, OpenAIChat, Runtime, open_runtime, tool
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue
from actors.testing import Simulator
from protocols.jobs import AgentJob

#: Where ``trio-agents simulator`` serves, unless told otherwise.
SIMULATOR = "http://127.0.0.1:8100/v1"
SYSTEM = "You are a careful calculator: use the add tool for sums."


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def shout(text: str) -> str:
    """Say a text in capitals."""
    return text.upper()


tools = [add, shout]


def model() -> OpenAIChat:
    """The model the agents use: $OPENAI_BASE_URL's (default: the simulator), $MODEL."""
    base_url = os.environ.get("OPENAI_BASE_URL") or SIMULATOR
    return OpenAIChat(model=os.environ.get("MODEL", "simulator"), base_url=base_url)


async def registry(runtime: Runtime) -> AgentRegistry:
    """The agents jobs may name (``trio-agents worker --app offline_app:registry``)."""
    agents = AgentRegistry()
    # One supervised connection for the worker's jobs: a concurrency limit and a breaker.
    connection = await runtime.connect(model, name="model")
    agents.add("calculator", connection, system=SYSTEM, tools=[add], limit=6)
    return agents


async def calculator(runtime: Runtime) -> Agent:
    """An agent, served as one MCP tool (``trio-agents mcp --app offline_app:calculator``)."""
    connection = await runtime.connect(model, name="model")
    return await Agent.start(
        runtime, connection, system=SYSTEM, tools=[add], limit=6, name="calculator"
    )


async def main() -> None:
    async with Simulator() as simulator:
        os.environ["OPENAI_BASE_URL"] = simulator.openai_base_url
        async with open_runtime() as runtime:
            agents = await registry(runtime)
            async with open_job_queue(MemoryRunStore(), agents, runtime) as queue:
                id = await queue.enqueue(AgentJob.ask("calculator", "What is 19 + 23?"))
                result = await queue.result(id)
        print(result.content, f"({result.turns} turns)")  # -> The answer is 42. (2 turns)
        print(await add(a=2, b=3), await shout(text="done"))  # -> 5 DONE


if __name__ == "__main__":
    trio.run(main)
