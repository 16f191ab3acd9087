"""What a Jupyter notebook's cells do with trio-agents: ``await`` at the top level of a cell, on
the kernel's asyncio loop, which is already running -- through ``actors.aio``.

Run: ``python examples/notebook.py``

In a notebook, each ``# %%`` section of ``cells()`` below is one cell, and its body is written at
the top level of the cell (``runtime = await actors.aio.Runtime().start()``). Here
``asyncio.run`` stands in for the kernel: the cells run as one coroutine on a running loop.

The runtime spans the cells, so it is started with ``start()`` and closed with ``aclose()``
in the last cell instead of an ``async with`` block (which would end with its cell). Until then
it runs in a thread of its own, and the kernel's loop stays free between cells. (``actors.sync``
works in a notebook too, but each call then blocks the kernel's loop while it waits.)
"""

from __future__ import annotations

import asyncio

import actors.aio


async def cells() -> None:
    # %% The first cell: a runtime for the session, an offline model server, an agent.
    runtime = await actors.aio.Runtime().start()
    simulator = await runtime.simulator(interval=0.005)  # or: a provider string, docs/models.md
    agent = await runtime.agent(simulator.openai(), system="Be terse.")

    # %% Ask.
    result = await agent.generate("What is 19 + 23?")
    print(result.content)  # -> 19 + 23 = 42.

    # %% Stream into the cell's output.
    async with agent.stream("Count to 5.") as run:
        async for chunk in run:
            if chunk.kind == "content":
                print(chunk.text, end="")  # -> 1 2 3 4 5
    print()
    print(run.result.stop)  # -> complete

    # %% A cell given a time limit: the run is cut when it expires, and what it produced stays.
    try:
        async with asyncio.timeout(0.1):
            await agent.generate("Count to 1000.")
    except TimeoutError:
        last = (await agent.messages())[-1]
        print("cut:", last.interrupted, last.content.startswith("1 2"))  # -> cut: True True

    # %% The conversation goes on from there.
    result = await agent.generate("What is 2 + 3?")
    print(result.content)  # -> 2 + 3 = 5.

    # %% The last cell: stop the runtime (its thread ends).
    await runtime.aclose()


if __name__ == "__main__":
    asyncio.run(cells())
