"""@tool and ToolRegistry.execute: isolation, order, scope, authority, cancellation."""

from __future__ import annotations

import enum
import logging
import math
import os
import pathlib
import subprocess
import sys
import threading

import attrs
import pytest
import trio
import trio.testing

from actors.tools import INTERRUPTED, NOT_EXECUTED, Tool, ToolBatch, ToolRegistry, tool
from protocols.authority import Authority, Rule, Verdict
from protocols.context import Scope
from protocols.errors import ConfigError, ValidationError
from protocols.messages import ToolCall, ToolDefinition, ToolFailure, ToolResult, ToolSuccess


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


@attrs.frozen
class Point:
    x: int
    y: int = 0


@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


@tool
def convert(value: float, unit: Unit = Unit.CELSIUS) -> dict[str, object]:
    """Convert a temperature."""
    return {"value": value * 9 / 5 + 32 if unit is Unit.CELSIUS else value, "unit": unit.value}


@tool
def shift(point: Point, by: int = 1) -> Point:
    """Move a point right."""
    return Point(point.x + by, point.y)


@tool
def boom() -> None:
    """Always fails."""
    raise RuntimeError("the disk is on fire")


@tool
def not_json() -> object:
    """Returns something JSON cannot hold."""
    return {"x": math.nan}


@tool(timeout=1.0)
async def slow(seconds: float) -> str:
    """Sleeps."""
    await trio.sleep(seconds)
    return "done"


def call(name: str, arguments: dict[str, object] | None = None, id: str = "c1") -> ToolCall:
    return ToolCall(id, name, arguments or {})


async def test_the_decorator_describes_the_function() -> None:
    assert isinstance(add, Tool)
    assert add.definition.name == "add"
    assert add.definition.description == "Add two integers."
    assert add.definition.parameters["required"] == ["a", "b"]
    assert add.definition.parameters["properties"]["a"]["description"] == "The first."
    assert await add(a=1, b=2) == 3  # still callable directly


async def test_arguments_are_validated_and_structured() -> None:
    assert await convert.call(call("convert", {"value": 100})) == ToolSuccess(
        "c1", "convert", {"value": 212.0, "unit": "celsius"}
    )
    moved = await shift.call(call("shift", {"point": {"x": 1, "y": 2}}))
    assert moved == ToolSuccess("c1", "shift", {"x": 2, "y": 2})  # attrs results are unstructured
    bad = await add.call(call("add", {"a": 1, "b": "2", "c": 3}))
    assert isinstance(bad, ToolFailure)
    assert bad.error.startswith("invalid arguments: ")
    assert "'c'" in bad.error
    assert "allowed: a, b" in bad.error


@attrs.frozen
class Positive:
    n: int = attrs.field()

    @n.validator
    def _positive(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value <= 0:
            raise ValueError("n must be positive")


@tool
def halve(amount: Positive) -> float:
    """Halve an amount."""
    return amount.n / 2


async def test_a_refusal_the_schema_could_not_foresee_reads_like_the_schemas_own() -> None:
    # A class's validator refused after the schema check passed: one "invalid arguments:"
    # prefix, then the path and the reason, as for a schema problem (it was said twice).
    refused = await halve.call(call("halve", {"amount": {"n": -2}}))
    assert refused == ToolFailure(
        "c1", "halve", "invalid arguments: $.amount: Positive refused the value: n must be positive"
    )


async def test_failures_are_results_the_model_sees(autojump_clock: trio.testing.MockClock) -> None:
    raised = await boom.call(call("boom"))
    assert raised == ToolFailure("c1", "boom", "RuntimeError: the disk is on fire")
    nan = await not_json.call(call("not_json"))
    assert isinstance(nan, ToolFailure)
    assert nan.error.startswith("the tool returned a non-JSON value")
    late = await slow.call(call("slow", {"seconds": 5}))
    assert late == ToolFailure("c1", "slow", "timed out after 1 s")
    quick = await slow.call(call("slow", {"seconds": 0.5}))
    assert quick == ToolSuccess("c1", "slow", "done")


async def test_an_explicit_schema_passes_plain_json() -> None:
    seen: list[object] = []

    @tool(name="echo", schema={"type": "object", "properties": {"v": {"type": "array"}}})
    def echo(**arguments: object) -> object:
        """Echo."""
        seen.append(arguments)
        return arguments

    result = await echo.call(call("echo", {"v": [1, "x"]}))
    assert result == ToolSuccess("c1", "echo", {"v": [1, "x"]})
    assert seen == [{"v": [1, "x"]}]
    assert echo.definition.description == "Echo."


def test_bad_tools_are_refused_when_made() -> None:
    def idle() -> None:
        """Nothing."""

    with pytest.raises(ConfigError, match="timeout"):
        tool(timeout=0)(idle)
    with pytest.raises(ConfigError, match="blocking=True is for sync"):
        tool(blocking=True)(add.function)
    registry = ToolRegistry([add])
    with pytest.raises(ConfigError, match="already registered"):
        registry.add(add)
    with pytest.raises(ConfigError, match="use @tool"):
        registry.add(add.function)  # type: ignore[arg-type]


async def test_execute_keeps_call_order_and_isolates_each_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = ToolRegistry([add, boom, slow])
    calls = [
        call("slow", {"seconds": 0.9}, id="c1"),
        call("boom", id="c2"),
        call("add", {"a": 2, "b": 3}, id="c3"),
        call("ad", {"a": 2, "b": 3}, id="c4"),
    ]
    results = await registry.execute(calls)
    assert [r.id for r in results] == ["c1", "c2", "c3", "c4"]
    assert results[0] == ToolSuccess("c1", "slow", "done")
    assert isinstance(results[1], ToolFailure)
    assert results[2] == ToolSuccess("c3", "add", 5)
    # An unknown name is skipped, named, never aliased to the similar 'add'.
    assert results[3] == ToolFailure(
        "c4", "ad", "skipped: there is no tool named 'ad'; available tools: add, boom, slow"
    )


async def test_the_concurrency_limit_holds(autojump_clock: trio.testing.MockClock) -> None:
    running = peak = 0

    @tool
    async def work(n: int) -> int:
        """Work."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return n

    registry = ToolRegistry([work])
    results = await registry.execute(
        [call("work", {"n": i}, id=f"c{i}") for i in range(7)], limit=3
    )
    assert [r.value for r in results if isinstance(r, ToolSuccess)] == list(range(7))
    assert peak == 3


async def test_scope_hides_and_refuses_tools() -> None:
    registry = ToolRegistry([add, boom])
    scope = Scope(tools=["add"])
    assert [d.name for d in registry.definitions(scope)] == ["add"]
    (result,) = await registry.execute([call("boom")], scope=scope)
    assert result == ToolFailure(
        "c1", "boom", "skipped: there is no tool named 'boom'; available tools: add"
    )


async def test_the_authority_decides_before_anything_runs() -> None:
    runs: list[str] = []

    @tool
    def remove(path: str) -> str:
        """Delete a file."""
        runs.append(path)
        return "removed"

    registry = ToolRegistry([remove])
    authority = Authority(
        (
            Rule("deny", tools=("remove",), arguments={"path": "/etc/*"}, reason="system files"),
            Rule("ask", tools=("remove",)),
        )
    )
    asked: list[tuple[str, str]] = []

    async def approve(request: ToolCall, verdict: Verdict) -> tuple[bool, str]:
        asked.append((request.arguments["path"], verdict.decision))
        return request.arguments["path"] == "tmp/a", "only tmp/a"

    calls = [
        call("remove", {"path": "/etc/passwd"}, id="c1"),
        call("remove", {"path": "tmp/a"}, id="c2"),
        call("remove", {"path": "home/b"}, id="c3"),
    ]
    results = await registry.execute(calls, authority=authority, approve=approve)
    assert results[0] == ToolFailure("c1", "remove", "denied: system files")
    assert results[1] == ToolSuccess("c2", "remove", "removed")
    assert isinstance(results[2], ToolFailure)
    assert results[2].error.startswith("denied: ")
    assert runs == ["tmp/a"]  # a denied call never runs
    assert sorted(asked) == [("home/b", "ask"), ("tmp/a", "ask")]
    # With no approver attached an "ask" is a deny.
    (unasked,) = await registry.execute([calls[1]], authority=authority)
    assert isinstance(unasked, ToolFailure)
    assert unasked.error.startswith("denied: ")
    assert runs == ["tmp/a"]


async def test_approvals_are_asked_together_and_fence_the_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[tuple[str, float]] = []

    @tool
    def act(name: str) -> str:
        """Do something."""
        runs.append((name, trio.current_time()))
        return name

    registry = ToolRegistry([act])
    authority = Authority((Rule("ask", tools=("act",), arguments={"name": "risky*"}),))
    asked: list[float] = []

    async def approve(request: ToolCall, verdict: Verdict) -> bool:
        asked.append(trio.current_time())
        await trio.sleep(5)  # a human thinking
        return request.arguments["name"] != "risky-no"

    calls = [
        call("act", {"name": "safe"}, id="c1"),
        call("act", {"name": "risky-yes"}, id="c2"),
        call("act", {"name": "risky-no"}, id="c3"),
    ]
    start = trio.current_time()
    batch = ToolBatch(calls)
    results = await registry.execute(calls, authority=authority, approve=approve, batch=batch)
    assert asked == [start, start]  # both approvals were pending at once
    assert [r.id for r in results] == ["c1", "c2", "c3"]
    assert sorted(name for name, _ in runs) == ["risky-yes", "safe"]
    assert all(at == start + 5 for _, at in runs)  # nothing ran before both answers were in
    assert batch.denied == {2}
    assert isinstance(results[2], ToolFailure)
    assert results[2].error.startswith("denied: ")
    # Cancelled while an approval is pending: nothing of the batch ever ran.
    runs.clear()
    batch = ToolBatch(calls)
    with trio.move_on_after(2):
        await registry.execute(calls, authority=authority, approve=approve, batch=batch)
    assert runs == []
    assert batch.settled() == [ToolFailure(c.id, "act", NOT_EXECUTED) for c in calls]


async def test_calls_refused_upstream_are_answered_and_never_run() -> None:
    runs: list[str] = []

    @tool
    def act(name: str) -> str:
        """Do something."""
        runs.append(name)
        return name

    registry = ToolRegistry([act])
    calls = [call("act", {"name": "a"}, id="c1"), call("act", {"name": "b"}, id="c2")]
    batch = ToolBatch(calls)
    results = await registry.execute(
        calls, batch=batch, refused={"c2": "denied: the relay's policy"}
    )
    assert results == [
        ToolSuccess("c1", "act", "a"),
        ToolFailure("c2", "act", "denied: the relay's policy"),
    ]
    assert runs == ["a"]
    assert batch.denied == {1}


async def test_a_cancel_interrupts_running_calls_and_skips_queued_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @tool
    async def wait(seconds: float) -> str:
        """Wait."""
        await trio.sleep(seconds)
        return "ok"

    registry = ToolRegistry([wait])
    # Two slots, four long calls: whichever two start first are running at the cancel.
    calls = [call("wait", {"seconds": 10}, id=f"c{i}") for i in range(4)]
    batch = ToolBatch(calls)
    with trio.move_on_after(5):
        await registry.execute(calls, limit=2, batch=batch)
    assert not batch.done
    settled = batch.settled()
    assert len(batch.started) == 2
    for index, result in enumerate(settled):
        expected = INTERRUPTED if index in batch.started else NOT_EXECUTED
        assert result == ToolFailure(f"c{index}", "wait", expected)
    # A call that finished before the cancel keeps its result.
    quick_first = [call("wait", {"seconds": s}, id=f"c{i}") for i, s in enumerate([1, 10])]
    batch = ToolBatch(quick_first)
    with trio.move_on_after(5):
        await registry.execute(quick_first, batch=batch)
    assert batch.settled() == [
        ToolSuccess("c0", "wait", "ok"),
        ToolFailure("c1", "wait", INTERRUPTED),
    ]


async def test_blocking_tools_run_in_a_thread_and_others_on_the_loop() -> None:
    threads: dict[str, int] = {}

    @tool(blocking=True)
    def disk() -> str:
        """Blocking."""
        threads["disk"] = threading.get_ident()
        return "read"

    @tool
    def quick() -> str:
        """Not blocking."""
        threads["quick"] = threading.get_ident()
        return "fast"

    results = await ToolRegistry([disk, quick]).execute([call("disk"), call("quick", id="c2")])
    assert [r.value for r in results if isinstance(r, ToolSuccess)] == ["read", "fast"]
    assert threads["quick"] == threading.get_ident()
    assert threads["disk"] != threading.get_ident()


async def test_registry_bookkeeping() -> None:
    registry = ToolRegistry()
    registry.add(add, boom)
    assert len(registry) == 2
    assert "add" in registry
    assert registry.get("add") is add
    assert registry.remove("boom", "nope") is False
    assert [t.definition.name for t in registry.tools()] == ["add"]
    registry.add(tool(name="add")(add.function), replace=True)
    assert registry.get("add") is not add
    with pytest.raises(ValidationError, match="limit"):
        await registry.execute([], limit=0)
    with pytest.raises(ValidationError, match="other calls"):
        await registry.execute([call("add")], batch=ToolBatch([]))


async def test_workspace_tools_register_like_any_other() -> None:
    from actors import workspace_tools
    from protocols.workspace import Workspace

    workspace = Workspace()
    registry = ToolRegistry(workspace_tools(workspace))
    assert "workspace_write" in registry
    (result,) = await registry.execute(
        [call("workspace_write", {"path": "a.md", "content": "# A"})]
    )
    assert result.ok
    assert workspace.read("a.md") == "# A"


#: A plain script: no logging configured, so Python shows WARNING records on stderr.
PLAIN_SCRIPT = """
import trio

from actors import Agent, open_runtime, tool
from actors.testing import Reply, ScriptedProvider
from protocols import ToolCall


@tool
def divide(a: int, b: int) -> float:
    \"\"\"Divide a by b.\"\"\"
    return a / b


async def main() -> None:
    call = ToolCall("c1", "divide", {"a": 1, "b": 0})
    model = ScriptedProvider(Reply(calls=[call]), Reply("I cannot divide by 0."))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, model, tools=[divide])
        print((await agent.generate("What is 1 / 0?")).content)


trio.run(main)
"""


def test_a_raising_tool_in_a_plain_script_is_one_line_without_a_traceback(
    tmp_path: pathlib.Path,
) -> None:
    """An expected failure of a tool is reported as one line (issue 24 item 2): the model got
    the error as the call's result; the traceback is logged at DEBUG, which a plain script does
    not show."""
    script = tmp_path / "script.py"
    script.write_text(PLAIN_SCRIPT)
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
        check=True,
    )
    assert done.stdout == "I cannot divide by 0.\n"
    assert done.stderr.splitlines() == [
        "tool 'divide' raised ZeroDivisionError: 'division by zero' (call 'c1')"
    ]


async def test_a_tools_error_is_logged_on_one_line_whatever_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A message with line breaks and control characters (a model chose the arguments) cannot
    start a forged log line."""

    @tool
    def echo(text: str) -> str:
        """Fails with the text it was given."""
        raise ValueError(text)

    caplog.set_level(logging.WARNING, logger="trio_agents.tools")
    result = await echo.call(ToolCall("c1", "echo", {"text": "bad\nERROR forged line\x1b[31m"}))
    assert isinstance(result, ToolFailure)
    (record,) = caplog.records
    assert "\n" not in record.getMessage()
    assert "\x1b" not in record.getMessage()
    assert record.getMessage().startswith("tool 'echo' raised ValueError: 'bad\\nERROR forged")


async def test_a_tool_that_breaks_its_contract_by_raising_comes_out_as_itself() -> None:
    """``CallableTool.call`` answers every failure with a result; one that raises anyway (a
    bug) has its exception come out of ``execute`` as itself -- also when the calls ran
    concurrently, in a nursery -- not in an exception group."""
    raised = RuntimeError("a bug in a hand-written tool")

    class Broken:
        definition = ToolDefinition("broken", "Raises.", {"type": "object", "properties": {}})

        async def call(self, call: ToolCall) -> ToolResult:
            await trio.lowlevel.checkpoint()
            raise raised

    @tool
    async def fine() -> str:
        """Works."""
        await trio.lowlevel.checkpoint()
        return "ok"

    registry = ToolRegistry([Broken(), fine])
    calls = [ToolCall("c1", "broken", {}), ToolCall("c2", "fine", {})]
    with pytest.raises(RuntimeError) as caught:
        await registry.execute(calls)
    assert caught.value is raised
