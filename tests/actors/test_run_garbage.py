"""A finished run leaves no reference cycle behind: what it made is freed by reference counting
the moment its last reader lets go, never left for the garbage collector (whose passes the
run loop would pay for, in proportion to everything the process holds).

Found by the loop's profile: every run left about twenty objects in cycles (the request and
its run holding each other, the run's chain holding its own request, the run's fallback
observer holding the run). The property: whatever the run did -- answered, called tools, had
a tool fail, was delegated to, streamed -- ``gc.collect()`` after it finds no garbage made by
this library."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import Abort, Agent, open_runtime, tool
from actors.testing import Reply, ScriptedProvider
from protocols.messages import ToolCall


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def broken(a: int) -> int:
    """A tool that raises."""
    raise RuntimeError(f"broken {a}")


@contextmanager
def saved_garbage() -> Iterator[list[object]]:
    """Inside: the collector off, and a collection keeps every unreachable object it finds
    (``gc.garbage``)."""
    enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def ours(garbage: list[object]) -> list[str]:
    """The garbage objects whose class this library defines."""
    return sorted(
        {
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in garbage
            if type(o).__module__.split(".")[0] in ("actors", "protocols")
        }
    )


def script(steps: list[str]) -> list[Reply]:
    """Replies for the steps: a call of ``add`` or of ``broken`` each, then the answer."""
    replies = []
    for index, step in enumerate(steps):
        name = "add" if step == "add" else "broken"
        arguments = {"a": index, "b": 1} if step == "add" else {"a": index}
        replies.append(Reply(calls=[ToolCall(f"c{index}", name, arguments)]))
    replies.append(Reply("done"))
    return replies


async def garbage_of_one_run(steps: list[str], streamed: bool, delegated: bool) -> list[str]:
    """Our garbage left by one run (after a first run of the same kind, which warms what is
    made once)."""
    async with open_runtime() as runtime:
        provider = ScriptedProvider(*script(steps), *script(steps))
        worker = await Agent.start(runtime, provider, tools=[add, broken], name="worker")
        agent = worker
        if delegated:
            call = Reply(calls=[ToolCall("d1", "worker", {"input": "go"})])
            boss = ScriptedProvider(call, Reply("relayed"), call, Reply("relayed"))
            agent = await Agent.start(runtime, boss, tools=[worker.as_tool()], name="boss")
        found: list[str] = []
        for attempt in range(2):
            with saved_garbage() as garbage:
                if streamed:
                    async with agent.stream("go") as run:
                        async for _chunk in run:
                            pass
                    content = run.result.content
                    del run
                else:
                    content = (await agent.generate("go")).content
                assert content == ("relayed" if delegated else "done")
                gc.collect()
                if attempt == 1:
                    found = ours(garbage)
        await agent.aclose()
        if delegated:
            await worker.aclose()
    return found


@settings(max_examples=15, deadline=None)
@given(
    steps=st.lists(st.sampled_from(["add", "broken"]), max_size=3),
    streamed=st.booleans(),
    delegated=st.booleans(),
)
def test_a_finished_run_leaves_no_cycle(steps: list[str], streamed: bool, delegated: bool) -> None:
    assert trio.run(garbage_of_one_run, steps, streamed, delegated) == []


def test_the_check_sees_a_cycle() -> None:
    # The check itself: an object of ours left in a cycle is found.
    with saved_garbage() as garbage:
        token = Abort()
        holder = [token]
        token.on_cancel(lambda _reason, held=holder: held)  # it holds what holds it
        del token, holder
        gc.collect()
        assert ours(garbage) == ["actors._core._abort.Abort"]
