"""actors.aio: the asyncio door. Each test runs its own asyncio loop (``asyncio.run``); the
runtime runs in a thread of its own. A cancelled asyncio task cuts the run it awaits (its
partial committed before ``CancelledError`` is seen), a trio-side failure is raised as itself,
runtimes are independent, and no thread is left behind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import trio
from door_kit import PARTIAL, Gate, Paced, threads
from hypothesis import given, settings
from hypothesis import strategies as st

import actors.aio
from actors import AgentEvent
from actors.aio import RuntimeClosed
from actors.durable import AgentRegistry, MemoryRunStore
from actors.testing import Fail, ScriptedProvider
from protocols.errors import ProviderError
from protocols.jobs import AgentJob


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main`` on a fresh asyncio loop; no thread may be left behind."""
    before = threads()
    asyncio.run(main())
    assert threads() - before == set()


class Signals:
    """Tells the loop, from the runtime's thread, that a gate was reached and runs finished."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.reached = asyncio.Event()
        self.finished: list[AgentEvent] = []
        self.finish = asyncio.Event()

    def gate(self) -> Gate:
        return Gate(notify=lambda: self.loop.call_soon_threadsafe(self.reached.set))

    def listen(self, event: AgentEvent) -> None:
        if event.kind == "finish":
            self.finished.append(event)
            self.loop.call_soon_threadsafe(self.finish.set)

    def cuts(self) -> list[tuple[str | None, bool | None]]:
        return [(event.stop, event.partial) for event in self.finished]


def test_an_asyncio_program_generates_and_streams_on_the_simulator() -> None:
    async def main() -> None:
        async with actors.aio.Runtime() as runtime:
            simulator = await runtime.simulator()
            connection = await runtime.connect(simulator.openai(), limit=4)
            agent = await runtime.agent(connection, system="Be terse.")
            result = await agent.generate("What is 19 + 23?")
            texts = []
            async with agent.stream("Count to 5.") as streamed:
                async for chunk in streamed:
                    texts.append(chunk.text if chunk.kind == "content" else "")
            messages = await agent.messages()
            assert (await agent.statistics())["runs"] == 2
        assert (result.content, result.stop) == ("19 + 23 = 42.", "complete")
        assert "".join(texts) == "1 2 3 4 5"
        assert streamed.result.content == "1 2 3 4 5"
        assert [message.role for message in messages] == ["user", "assistant"] * 2

    run(main)


def test_a_cancelled_task_cuts_its_run_and_commits_the_partial_first() -> None:
    async def main() -> None:
        signals = Signals()
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(signals.gate(), on=[signals.listen])
            task = asyncio.create_task(agent.generate("Tell me everything."))
            await signals.reached.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Committed before CancelledError reached us: read it at once.
            last = (await agent.messages())[-1]
            assert signals.cuts() == [("cancelled", True)]
        assert (last.role, last.content, last.interrupted) == ("assistant", PARTIAL, True)

    run(main)


def test_a_timeout_cuts_the_run_as_a_cancel_does() -> None:
    async def main() -> None:
        signals = Signals()
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(signals.gate(), on=[signals.listen])

            async def ask() -> None:
                async with asyncio.timeout(None) as deadline:
                    call = asyncio.ensure_future(agent.generate("Tell me everything."))
                    await signals.reached.wait()
                    deadline.reschedule(asyncio.get_running_loop().time())
                    await call

            with pytest.raises(TimeoutError):
                await ask()
            last = (await agent.messages())[-1]
            assert signals.cuts() == [("cancelled", True)]
        assert (last.content, last.interrupted) == (PARTIAL, True)

    run(main)


def test_leaving_the_stream_block_early_cuts_the_run() -> None:
    async def main() -> None:
        signals = Signals()
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(signals.gate(), on=[signals.listen])
            async with agent.stream("Tell me everything.") as streamed:
                async for chunk in streamed:
                    assert chunk.text == PARTIAL
                    break
            last = (await agent.messages())[-1]
            assert signals.cuts() == [("cancelled", True)]
            with pytest.raises(RuntimeError, match="has not finished"):
                streamed.result  # noqa: B018 - it raises
        assert (last.content, last.interrupted) == (PARTIAL, True)

    run(main)


def test_breaking_out_of_a_bare_async_for_cuts_the_run_soon_after() -> None:
    async def main() -> None:
        signals = Signals()
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(signals.gate(), on=[signals.listen])
            async for chunk in agent.stream("Tell me everything."):
                assert chunk.text == PARTIAL
                break
            await signals.finish.wait()  # asyncio closes the abandoned iterator: the run is cut
            last = (await agent.messages())[-1]
            assert signals.cuts() == [("cancelled", True)]
        assert (last.content, last.interrupted) == (PARTIAL, True)

    run(main)


def test_a_cancelled_consumer_of_a_stream_cuts_the_run() -> None:
    async def main() -> None:
        signals = Signals()
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(signals.gate(), on=[signals.listen])

            async def consume() -> None:
                async for _chunk in agent.stream("Tell me everything."):
                    pass

            task = asyncio.create_task(consume())
            await signals.reached.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert signals.cuts() == [("cancelled", True)]
            last = (await agent.messages())[-1]
        assert (last.content, last.interrupted) == (PARTIAL, True)

    run(main)


def test_abort_ends_the_run_with_its_partial_result() -> None:
    async def main() -> None:
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(Gate())
            async with agent.stream("Tell me everything.") as streamed:
                async for chunk in streamed:
                    if chunk.kind == "content":
                        streamed.abort("enough")
        result = streamed.result
        assert (result.partial, result.stop, result.content) == (True, "cancelled", PARTIAL)

    run(main)


def test_a_trio_side_failure_is_raised_as_itself() -> None:
    failure = ProviderError("the model is overloaded", code="overloaded", retryable=False)

    async def main() -> None:
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(ScriptedProvider(Fail(failure), Fail(failure)))
            with pytest.raises(ProviderError) as raised:
                await agent.generate("hi")
            assert raised.value is failure  # the same object: no group, no wrapper
            streamed = agent.stream("hi")
            with pytest.raises(ProviderError, match="overloaded"):
                async for _chunk in streamed:
                    pass
            with pytest.raises(ProviderError, match="overloaded"):
                streamed.result  # noqa: B018 - it raises

    run(main)


def test_runtimes_are_independent_and_nest() -> None:
    async def main() -> None:
        async with actors.aio.Runtime() as outer:
            outer_agent = await outer.agent(ScriptedProvider("outer 1", "outer 2"))
            async with actors.aio.Runtime() as inner:
                inner_agent = await inner.agent(ScriptedProvider("inner"))
                both = await asyncio.gather(outer_agent.generate("a"), inner_agent.generate("b"))
            with pytest.raises(RuntimeClosed):
                await inner_agent.generate("again")
            after = await outer_agent.generate("c")  # the outer one goes on
        assert [result.content for result in both] == ["outer 1", "inner"]
        assert after.content == "outer 2"

    run(main)


def test_no_thread_is_left_behind_when_the_block_raises() -> None:
    async def main() -> None:
        runtime = actors.aio.Runtime()

        async def fail() -> None:
            async with runtime:
                await (await runtime.agent(ScriptedProvider("hi"))).generate("hello")
                raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await fail()
        with pytest.raises(RuntimeClosed):
            await runtime.agent(ScriptedProvider("hi"))
        await runtime.aclose()  # idempotent

    run(main)


def test_a_cancelled_task_that_owns_the_runtime_still_joins_its_thread() -> None:
    async def main() -> None:
        signals = Signals()

        async def owner() -> None:
            async with actors.aio.Runtime() as runtime:
                agent = await runtime.agent(signals.gate(), on=[signals.listen])
                await agent.generate("Tell me everything.")

        task = asyncio.create_task(owner())
        await signals.reached.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert signals.cuts() == [("cancelled", True)]

    run(main)  # and no thread is left


def test_cells_of_a_notebook_share_a_runtime() -> None:
    async def main() -> None:
        runtime = await actors.aio.Runtime().start()  # one cell
        simulator = await runtime.simulator()
        agent = await asyncio.create_task(runtime.agent(simulator.openai()))  # another task
        result = await asyncio.create_task(agent.generate("What is 2 + 2?"))
        await runtime.aclose()  # the last cell
        assert result.content == "2 + 2 = 4."

    run(main)


def test_a_job_queue_from_asyncio() -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("It is done.", "Done again."))

    async def main() -> None:
        async with (
            actors.aio.Runtime() as runtime,
            runtime.open_job_queue(MemoryRunStore(), registry) as queue,
        ):
            id = await queue.enqueue(AgentJob.ask("echo", "Do it."), key="k")
            assert await queue.enqueue(AgentJob.ask("echo", "Do it."), key="k") == id
            result = await queue.result(id)
            record = await queue.record(id)
            results = await queue.run([AgentJob.ask("echo", "Again.")])
            await queue.wait_idle()
            assert (await queue.statistics())["running"] == 0
            await queue.purge(id)
            assert await queue.record(id) is None
        assert result.content == "It is done."
        assert [r.content for r in results] == ["Done again."]
        assert record is not None
        assert record.status == "completed"

    run(main)


def test_a_group_with_one_cause_comes_out_as_that_cause() -> None:
    async def two_tasks() -> None:
        async def fail() -> None:
            raise KeyError("the one cause")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail)
            nursery.start_soon(trio.sleep_forever)

    async def main() -> None:
        async with actors.aio.Runtime() as runtime:
            with pytest.raises(KeyError, match="the one cause"):
                await runtime.call(two_tasks)
            assert await runtime.call(trio.sleep, 0) is None

    run(main)


def test_a_cancelled_close_still_closes_the_agent() -> None:
    async def main() -> None:
        signals = Signals()
        async with actors.aio.Runtime() as runtime:
            before = await runtime.call(_children, runtime.trio)
            agent = await runtime.agent(signals.gate(), on=[signals.listen])
            running = asyncio.create_task(agent.generate("Tell me everything."))
            await signals.reached.wait()
            closing = asyncio.create_task(agent.aclose())  # waits for the run to end
            await asyncio.sleep(0)
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
            assert signals.cuts() == [("cancelled", True)]  # the run was cut to close
            assert (await running).stop == "cancelled"  # its caller gets the partial result
            assert await runtime.call(_children, runtime.trio) == before

    run(main)


async def _children(runtime: actors.Runtime) -> tuple[str, ...]:
    return runtime.statistics().children


PIECES = [f"word{i} " for i in range(30)]
ANSWER = "".join(PIECES)


@settings(max_examples=60, deadline=None)
@given(
    at=st.integers(min_value=-1, max_value=len(PIECES) + 1),
    stream=st.booleans(),
)
def test_a_cancel_at_any_point_leaves_a_well_formed_history(at: int, stream: bool) -> None:
    # The cancel lands once the agent has taken `at` pieces (-1: at once, before the call has
    # crossed; past the end: after the run) -- and then, the pieces being paced, within a few
    # more. Wherever it lands, the caller sees CancelledError or the whole answer, the history
    # is the user's message and at most one answer, a prefix of the whole one that is marked
    # interrupted when cut, and the agent goes on.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reached = asyncio.Event()
        provider = Paced(
            PIECES, pace=0.0005, notify_at=at, notify=lambda: loop.call_soon_threadsafe(reached.set)
        )
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(provider)

            async def ask() -> str:
                if not stream:
                    return (await agent.generate("Go.")).content
                async with agent.stream("Go.") as run:
                    async for _chunk in run:
                        pass
                return run.result.content

            task = asyncio.create_task(ask())
            if 0 <= at <= len(PIECES):
                await reached.wait()
            elif at > len(PIECES):
                await asyncio.wait([task])
            task.cancel()
            try:
                content: str | None = await task
            except asyncio.CancelledError:
                content = None
            messages = await agent.messages()
            assert content in (None, ANSWER)
            assert [m.role for m in messages] in ([], ["user"], ["user", "assistant"])
            if at >= 1:  # what the agent took is committed before the caller sees the cancel
                assert len(messages) == 2
            if len(messages) == 2:
                answer = messages[1]
                assert ANSWER.startswith(answer.content)
                assert len(answer.content) >= len("".join(PIECES[: max(at, 0)]))
                # Cut: the caller saw the cancel. Not cut: the whole answer (the caller may have
                # been cancelled as it was coming back: it still sees CancelledError).
                assert content is None if answer.interrupted else answer.content == ANSWER
            if content is not None:
                assert messages[-1].content == ANSWER
            provider.notify = None
            assert (await agent.generate("And?")).content == ANSWER  # it goes on

    run(main)
