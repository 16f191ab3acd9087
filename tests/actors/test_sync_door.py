"""actors.sync: the blocking door. trio runs in one thread of its own; a call waits for its
outcome; breaking out of a stream, Ctrl-C and closing the runtime cut the run in flight, which
commits its partial; errors come out as themselves; no thread is left behind."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import threading

import pytest
import trio
from door_kit import PARTIAL, Gate, threads, trio_workers

import actors.sync
from actors import AgentEvent, tool
from actors.durable import AgentRegistry, MemoryRunStore
from actors.sync import RuntimeClosed
from actors.testing import Fail, Reply, ScriptedProvider
from protocols.errors import ConfigError, ProviderError
from protocols.jobs import AgentJob
from protocols.messages import ToolCall

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_a_script_generates_and_streams_on_the_simulator() -> None:
    before = threads()
    with actors.sync.Runtime() as runtime:
        simulator = runtime.simulator()
        provider = simulator.openai()
        agent = runtime.agent(provider, system="Be terse.")
        result = agent.generate("What is 19 + 23?")
        chunks = [chunk.text for chunk in agent.stream("Count to 5.") if chunk.kind == "content"]
        messages = agent.messages()
        assert agent.statistics()["runs"] == 2
    assert (result.content, result.stop) == ("19 + 23 = 42.", "complete")
    assert "".join(chunks) == "1 2 3 4 5"
    assert [message.role for message in messages] == ["user", "assistant"] * 2
    assert simulator.statistics().completed == 2
    assert threads() - before == set()
    # The provider the simulator made was closed with it: no connection outlives the runtime.
    assert provider.client.is_closed


def test_breaking_out_of_the_loop_cuts_the_run_and_commits_its_partial() -> None:
    gate = Gate()
    finished: list[AgentEvent] = []
    with actors.sync.Runtime() as runtime:
        agent = runtime.agent(gate, on=[finished.append])
        for chunk in agent.stream("Tell me everything."):
            assert chunk.text == PARTIAL
            break
        # The generator was closed by the break, and waited for the commit: nothing to await.
        last = agent.messages()[-1]
    assert (last.role, last.content, last.interrupted) == ("assistant", PARTIAL, True)
    assert [(e.stop, e.partial) for e in finished if e.kind == "finish"] == [("cancelled", True)]


def test_leaving_the_with_block_cuts_the_run() -> None:
    gate = Gate()
    with actors.sync.Runtime() as runtime:
        agent = runtime.agent(gate)
        with agent.stream("Tell me everything.") as run:
            first = next(iter(run))
        last = agent.messages()[-1]
        with pytest.raises(RuntimeError, match="has not finished"):
            run.result  # noqa: B018 - it raises
        with agent.stream("never started") as unused:
            pass
        assert agent.messages()[-1] == last  # a run never iterated never runs
        assert gate.calls == 1
        with pytest.raises(RuntimeError, match="iterated once"):
            iter(run)
        assert unused is not None
    assert first.text == PARTIAL
    assert (last.content, last.interrupted) == (PARTIAL, True)


def test_abort_ends_the_run_with_its_partial_result() -> None:
    with actors.sync.Runtime() as runtime:
        agent = runtime.agent(Gate())
        with agent.stream("Tell me everything.") as run:
            texts = []
            for chunk in run:
                if chunk.kind == "content":
                    texts.append(chunk.text)
                    run.abort("enough")
    assert texts == [PARTIAL]
    assert (run.result.partial, run.result.stop, run.result.content) == (True, "cancelled", PARTIAL)


def test_a_failure_in_the_runtime_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    failure = ProviderError("the model is overloaded", code="overloaded", retryable=False)
    provider = ScriptedProvider(Fail(failure), Fail(failure))
    with actors.sync.Runtime() as runtime:
        agent = runtime.agent(provider)
        with pytest.raises(ProviderError, match="overloaded") as raised:
            agent.generate("hi")
        assert raised.value is failure  # itself: no group, no wrapper
        run = agent.stream("hi")
        with pytest.raises(ProviderError, match="overloaded"):
            list(run)
        with pytest.raises(ProviderError, match="overloaded"):
            run.result  # noqa: B018 - it raises
        with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
            runtime.agent("anthropic:claude-sonnet-4-5")


def test_no_thread_is_left_behind_when_the_block_raises() -> None:
    before = threads()
    runtime = actors.sync.Runtime()

    def fail() -> None:
        with runtime:
            runtime.agent(ScriptedProvider("hi")).generate("hello")
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fail()
    assert threads() - before == set()
    with pytest.raises(RuntimeClosed):
        runtime.agent(ScriptedProvider("hi"))
    runtime.close()  # idempotent


def test_a_runtime_that_cannot_start_says_why_and_leaves_no_thread() -> None:
    before = threads()
    with pytest.raises(ConfigError, match="max_restarts"):
        actors.sync.Runtime(max_restarts=-1).start()
    assert threads() - before == set()


def test_closing_the_runtime_cuts_the_calls_still_running() -> None:
    before = threads()
    gate = Gate()
    finished: list[AgentEvent] = []
    runtime = actors.sync.Runtime().start()
    agent = runtime.agent(gate, on=[finished.append])
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            agent.generate("Tell me everything.")
        except BaseException as error:
            raised.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert gate.reached.wait(30)
    runtime.close()
    waiter.join(30)
    assert [type(error) for error in raised] == [RuntimeClosed]
    assert [(e.stop, e.partial) for e in finished if e.kind == "finish"] == [("cancelled", True)]
    assert threads() - before == set()


def test_a_tool_calling_back_into_the_door_is_refused_not_deadlocked() -> None:
    agents: list[actors.sync.Agent] = []

    @tool
    def ask_again() -> str:
        """Ask the agent from inside its own runtime."""
        return agents[0].generate("again").content

    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "ask_again", {})]), Reply("done"))
    with actors.sync.Runtime() as runtime:
        agents.append(runtime.agent(provider, tools=[ask_again]))
        result = agents[0].generate("go")
        tool_message = agents[0].messages()[2]
    assert result.content == "done"
    assert "would wait for itself" in tool_message.content


def test_a_job_queue_from_blocking_code() -> None:
    registry = AgentRegistry()
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]), Reply("It is 42.")
    )
    registry.add("calculator", provider, tools=[add])
    before = threads()
    with actors.sync.Runtime() as runtime:
        with runtime.open_job_queue(MemoryRunStore(), registry) as queue:
            job = AgentJob.ask("calculator", "What is 19 + 23?")
            id = queue.enqueue(job, key="q-1")
            assert queue.enqueue(job, key="q-1") == id
            result = queue.result(id)
            record = queue.record(id)
            queue.wait_idle()
            assert queue.statistics()["running"] == 0
            assert queue.cancel(id).status == "completed"  # an ended job is left as it is
            queue.purge(id)
            assert queue.record(id) is None
        with pytest.raises(RuntimeError, match="'with' block"):
            queue.result(id)
    assert result.content == "It is 42."
    assert record is not None
    assert record.status == "completed"
    assert threads() - before == set()


def test_a_job_queue_on_a_store_url(tmp_path: pathlib.Path) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("first", "second"))
    path = tmp_path / "jobs.db"
    before = threads()
    with (
        actors.sync.Runtime() as runtime,
        runtime.open_job_queue(f"sqlite:///{path}", registry) as queue,
    ):
        results = queue.run([AgentJob.ask("echo", "one"), AgentJob.ask("echo", "two")])
    assert sorted(result.content for result in results) == ["first", "second"]
    assert path.exists()
    # SQLite's calls run in trio's worker threads, which trio keeps a few seconds for reuse.
    left = threads() - before
    assert left == trio_workers(left)


# -- Ctrl-C ----------------------------------------------------------------------------------------

SCRIPT = """
import faulthandler, json, signal, sys, threading
faulthandler.dump_traceback_later(50, exit=True)  # a hang shows every thread's stack
# A program started from a terminal: Ctrl-C neither blocked nor ignored, whatever the test
# process that started this one had (a child inherits both).
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [{root!r}, {tests!r}]

import actors.sync
from door_kit import Gate, threads

gate = Gate()
before = threads()
events = []
def ready():
    gate.reached.wait()
    print("READY", flush=True)
    if {to_runtime}:  # Ctrl-C as the kernel may deliver it: to the runtime's thread
        (runtime_thread,) = [t for t in threads() - before if t.name.startswith("trio-agents")]
        signal.pthread_kill(runtime_thread.ident, signal.SIGINT)


signal_ready = threading.Thread(target=ready, name="ready")
try:
    with actors.sync.Runtime() as runtime:
        agent = runtime.agent(gate, on=[events.append])
        signal_ready.start()
        try:
            {call}
        except KeyboardInterrupt:
            last = agent.messages()[-1]
            print(json.dumps([last.content, last.interrupted]), flush=True)
            raise
except KeyboardInterrupt:
    signal_ready.join()
    finished = [[e.stop, e.partial] for e in events if e.kind == "finish"]
    print(json.dumps([sorted(t.name for t in threads() - before), finished]), flush=True)
    raise
print("NOT INTERRUPTED", flush=True)
"""


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "the script did not get going"
    return process.stdout.readline().strip()


@pytest.mark.parametrize(
    "call",
    ['agent.generate("Tell me everything.")', 'for chunk in agent.stream("Go on."): pass'],
    ids=["generate", "stream"],
)
@pytest.mark.parametrize("to_runtime", [False, True], ids=["to-the-process", "to-the-runtime"])
def test_ctrl_c_cuts_the_run_commits_its_partial_and_is_raised(
    call: str, to_runtime: bool, tmp_path: pathlib.Path
) -> None:
    """Ctrl-C, sent to the process -- or taken by the runtime's thread, as the kernel may
    deliver a process's signal to any thread (seen under load: before, the main thread slept
    on and Ctrl-C did nothing) -- cuts the call the main thread waits for."""
    if to_runtime and not hasattr(signal, "pthread_kill"):
        pytest.skip("no signals to one thread here")
    script = tmp_path / "interrupted.py"
    script.write_text(
        SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"), call=call, to_runtime=to_runtime)
    )
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert read_line(process, 60) == "READY"
        if not to_runtime:
            process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    lines = out.splitlines()
    assert process.returncode == -signal.SIGINT, err
    assert err.rstrip().endswith("KeyboardInterrupt")
    assert json.loads(lines[0]) == [PARTIAL, True]  # committed, marked interrupted
    assert json.loads(lines[1]) == [[], [["cancelled", True]]]  # no thread left; one cut run


def test_a_group_with_one_cause_comes_out_as_that_cause() -> None:
    async def two_tasks() -> None:
        async def fail() -> None:
            raise KeyError("the one cause")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail)
            nursery.start_soon(trio.sleep_forever)

    with actors.sync.Runtime() as runtime:
        with pytest.raises(KeyError, match="the one cause"):
            runtime.call(two_tasks)
        assert runtime.call(trio.sleep, 0) is None


def test_it_works_inside_a_running_asyncio_loop_and_inside_trio() -> None:
    # A notebook cell using the blocking door, or a trio program that does: the runtime has a
    # thread of its own, so the caller's loop only waits (it is blocked meanwhile).
    def ask() -> str:
        with actors.sync.Runtime() as runtime:
            return runtime.agent(ScriptedProvider("Hi.")).generate("Hello?").content

    async def from_asyncio() -> str:
        asyncio.get_running_loop()
        return ask()

    async def from_trio() -> str:
        await trio.lowlevel.checkpoint()
        return ask()

    before = threads()
    assert asyncio.run(from_asyncio()) == "Hi."
    assert trio.run(from_trio) == "Hi."
    assert threads() - before == set()
