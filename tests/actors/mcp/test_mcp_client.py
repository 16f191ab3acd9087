"""MCPConnection against real MCP servers written with the SDK: a stdio subprocess and a
streamable-HTTP subprocess on loopback, including servers killed mid-call and restarted.

These talk to other processes, so they run on the real clock (a mock clock would jump over the
time a subprocess takes to answer); every wait is an event, bounded by ``fail_after``.
"""

from __future__ import annotations

import functools
import os
import pathlib
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actors import Abort, Agent, Backoff, ToolRegistry, open_runtime, tool
from actors.mcp import MCPConnection, StdioServer, StreamableHTTPServer
from actors.testing import Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.authority import Authority, Rule
from protocols.egress import EgressPolicy
from protocols.errors import ConfigError
from protocols.messages import ToolCall, ToolFailure, ToolSuccess

pytest.importorskip("mcp")

SERVER = pathlib.Path(__file__).parents[2] / "fixtures" / "mcp_tool_server.py"
QUICK = Backoff(initial=0.05, maximum=0.2, jitter=0.0)
#: The one-pixel PNG the fixture server's ``picture`` tool returns, as base64.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
#: The most any one step may take (a subprocess starting, a session restarting).
WITHIN = 60


def stdio(log: pathlib.Path) -> StdioServer:
    env = {"MCP_TEST_LOG": str(log), "PATH": os.environ.get("PATH", "")}
    return StdioServer(sys.executable, [str(SERVER)], env=env)


def events(log: pathlib.Path, name: str) -> int:
    return len(list(log.glob(f"{name}.*")))


async def until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate()`` until it holds (bounded by the caller's fail_after): the server
    process and the files it writes cannot wake a trio task."""
    while True:
        if predicate():
            return
        await trio.sleep(0.01)


async def call(registry: ToolRegistry, name: str, **arguments: Any) -> Any:
    (result,) = await registry.execute([ToolCall(id=f"c-{name}", name=name, arguments=arguments)])
    return result


async def killed_mid_call(
    registry: ToolRegistry, log: pathlib.Path, kill: Callable[[], object]
) -> ToolFailure:
    """The result of a long call whose server ``kill`` ends once the call has reached it."""
    results: list[Any] = []

    async def waiting() -> None:
        results.append(await call(registry, "wait", seconds=600))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting)
        await until(lambda: events(log, "wait-started") == 1)
        kill()
    (lost,) = results
    assert isinstance(lost, ToolFailure)
    return lost


@asynccontextmanager
async def http_server(log: pathlib.Path, port: int = 0) -> AsyncIterator[tuple[int, trio.Process]]:
    """The fixture server on streamable HTTP, as a subprocess; yields its port and process."""
    env = {**os.environ, "MCP_TEST_LOG": str(log)}
    process = await trio.lowlevel.open_process(
        [sys.executable, str(SERVER), "http", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(WITHIN):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "the server exited before listening"
                line += chunk
        yield int(line.split()[1]), process
    finally:
        if process.returncode is None:
            process.kill()
        with trio.move_on_after(WITHIN):
            await process.wait()


async def test_stdio_tools_enter_the_registry_and_answer(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(runtime, stdio(tmp_path), tools=registry)
            assert set(connection.tools) == {
                "add",
                "pid",
                "wait",
                "picture",
                "fail",
                "dotted_name",
                "grow",
                "traceparent",
            }
            add = registry.get("add")
            assert add is not None
            assert add.definition.description == "Add two integers."
            assert add.definition.parameters["required"] == ["a", "b"]

            result = await call(registry, "add", a=19, b=23)
            assert isinstance(result, ToolSuccess)
            assert result.value == "42"

            # The server's own name is used on the wire, whatever the local one is.
            assert (await call(registry, "dotted_name")).value == "dotted"

            failed = await call(registry, "fail")
            assert isinstance(failed, ToolFailure)
            assert "this tool always fails" in failed.error

            picture = await call(registry, "picture")
            assert isinstance(picture, ToolSuccess)
            assert picture.value == "a red dot"  # the image is no note in the text...
            assert picture.images == (f"data:image/png;base64,{PNG}",)  # ... but an image

            await connection.aclose()
            assert len(registry) == 0


async def test_an_mcp_tools_image_reaches_the_model_in_the_tool_message(
    tmp_path: pathlib.Path,
) -> None:
    provider = ScriptedProvider(Reply(calls=[ToolCall(id="c1", name="picture")]), "a red dot")
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            async with await MCPConnection.start(runtime, stdio(tmp_path), tools=registry):
                agent = await Agent.start(runtime, provider, tools=registry)
                result = await agent.generate("what does the picture show?")
    assert result.content == "a red dot"
    # The provider's second call -- the model's next turn -- is given the image.
    answered = provider.calls[1].messages[-1]
    assert answered.role.value == "tool"
    assert answered.tool_call_id == "c1"
    assert answered.content == "a red dot"
    assert answered.images == (f"data:image/png;base64,{PNG}",)


async def test_arguments_that_do_not_fit_are_never_sent(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            async with await MCPConnection.start(runtime, stdio(tmp_path), tools=registry):
                result = await call(registry, "add", a="nineteen", b=23)
                assert isinstance(result, ToolFailure)
                assert "the call was not sent" in result.error
                assert "$.a" in result.error
                assert (await call(registry, "add", a=1, b=2)).value == "3"
                assert events(tmp_path, "add") == 1  # only the valid call reached the server


async def test_a_cut_run_cancels_the_call_on_the_server(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            async with await MCPConnection.start(runtime, stdio(tmp_path), tools=registry):
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(functools.partial(call, registry, "wait", seconds=600))
                        await until(lambda: events(tmp_path, "wait-started") == 1)
                        scope.cancel()
                assert scope.cancelled_caught
                # MCP's cancellation notification reached the server, which cut the handler.
                await until(lambda: events(tmp_path, "wait-cancelled") == 1)
                assert (await call(registry, "add", a=2, b=2)).value == "4"


async def test_the_authority_gate_comes_before_the_server(tmp_path: pathlib.Path) -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})]), "done"
    )
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            async with await MCPConnection.start(runtime, stdio(tmp_path), tools=registry):
                agent = await Agent.start(
                    runtime,
                    provider,
                    tools=registry,
                    authority=Authority(rules=[Rule("deny", tools=["add"], reason="no adding")]),
                )
                result = await agent.generate("add one and two")
                answers = [m for m in result.messages if m.role.value == "tool"]
                assert answers
                assert answers[0].content == "denied: no adding"
                assert events(tmp_path, "add") == 0


async def test_a_killed_stdio_server_fails_calls_visibly_and_comes_back(
    tmp_path: pathlib.Path,
) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, stdio(tmp_path), tools=registry, backoff=QUICK
            )
            first = int((await call(registry, "pid")).value)
            lost = await killed_mid_call(registry, tmp_path, lambda: os.kill(first, signal.SIGKILL))
            assert "went away during the call" in lost.error
            assert "unknown" in lost.error

            await connection.wait_connected()
            assert connection.statistics().restarts == 1
            second = int((await call(registry, "pid")).value)
            assert second != first
            assert (await call(registry, "add", a=20, b=22)).value == "42"
            stats = connection.statistics()
            assert stats.lost == 1
            assert "add" in stats.tools
            await connection.aclose()


async def test_calls_while_the_server_is_down_are_refused_at_once(tmp_path: pathlib.Path) -> None:
    slow = Backoff(initial=3600, maximum=3600, jitter=0.0)
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, stdio(tmp_path), tools=registry, backoff=slow, heartbeat=0.1
            )
            os.kill(int((await call(registry, "pid")).value), signal.SIGKILL)
            # The heartbeat notices the death with no call in flight.
            await until(lambda: not connection.statistics().connected)
            with trio.move_on_after(0.5):
                await connection.wait_connected()  # not back: the backoff is an hour
            assert not connection.statistics().connected
            refused = await call(registry, "add", a=1, b=1)
            assert isinstance(refused, ToolFailure)
            assert "not connected" in refused.error
            assert "add" in registry  # the last known tools stay, answering that
            await connection.aclose()


async def test_list_changed_updates_the_registry(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            async with await MCPConnection.start(runtime, stdio(tmp_path), tools=registry):
                assert "extra" not in registry
                assert (await call(registry, "grow")).value == "grown"
                await until(lambda: "extra" in registry)
                assert (await call(registry, "extra")).value == "extra"


async def test_prefix_and_names_taken_by_other_tools(tmp_path: pathlib.Path) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Our own add."""
        return a - b

    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry([add])
            connection = await MCPConnection.start(runtime, stdio(tmp_path), tools=registry)
            assert registry.get("add") is add
            assert any(
                "'add'" in line and "taken" in line for line in connection.statistics().skipped
            )
            await connection.aclose()
            assert registry.get("add") is add  # ours stays

            prefixed = await MCPConnection.start(
                runtime, stdio(tmp_path), tools=registry, prefix="calc_"
            )
            assert "calc_add" in registry
            assert (await call(registry, "calc_add", a=5, b=3)).value == "8"
            await prefixed.aclose()


async def test_a_server_that_cannot_start_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    missing = StdioServer(sys.executable, [str(tmp_path / "no_such_server.py")])
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            with pytest.raises(ConfigError, match="could not be started"):
                await MCPConnection.start(runtime, missing, tools=registry)
            assert len(registry) == 0


async def test_http_server_killed_mid_call_and_restarted(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime, http_server(tmp_path) as (port, process):
            registry = ToolRegistry()
            server = StreamableHTTPServer(f"http://127.0.0.1:{port}/mcp")
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=QUICK, heartbeat=0.2
            )
            assert (await call(registry, "add", a=1, b=2)).value == "3"
            lost = await killed_mid_call(registry, tmp_path, process.kill)
            assert "went away during the call" in lost.error

            async with http_server(tmp_path, port):  # the same address, a new process
                await connection.wait_connected()
                assert connection.statistics().restarts >= 1
                assert (await call(registry, "add", a=2, b=3)).value == "5"
                await connection.aclose()


async def test_http_egress_refuses_loopback_unless_allowed(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime, http_server(tmp_path) as (port, _):
            registry = ToolRegistry()
            # A literal loopback address is refused as soon as the server is described.
            with pytest.raises(ConfigError, match=rf"127\.0\.0\.1:{port} refused: loopback"):
                StreamableHTTPServer(
                    f"http://127.0.0.1:{port}/mcp", egress=EgressPolicy(allow=[f"127.0.0.1:{port}"])
                )
            # A name is judged by what it resolves to, when the session connects: 2130706433
            # is 127.0.0.1 written as one number, which the resolver reads as that address.
            disguised = f"http://2130706433:{port}/mcp"
            allow = [f"2130706433:{port}"]
            with pytest.raises(ConfigError, match=rf"2130706433:{port} .*refused: loopback"):
                await MCPConnection.start(
                    runtime,
                    StreamableHTTPServer(disguised, egress=EgressPolicy(allow=allow)),
                    tools=registry,
                )
            assert len(registry) == 0
            assert events(tmp_path, "add") == 0
            allowed = EgressPolicy(allow=allow, private=["127.0.0.0/8"])
            connection = await MCPConnection.start(
                runtime, StreamableHTTPServer(disguised, egress=allowed), tools=registry
            )
            assert (await call(registry, "add", a=4, b=4)).value == "8"
            await connection.aclose()


def test_secrets_stay_out_of_reprs() -> None:
    server = StreamableHTTPServer(
        "https://mcp.example.com/mcp", headers={"Authorization": "Bearer sk-secret-123"}
    )
    local = StdioServer("server", env={"API_KEY": "sk-secret-456"})
    assert "sk-secret" not in repr(server)
    assert "sk-secret" not in repr(local)
    assert "Authorization" in repr(server)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="http"):
        StreamableHTTPServer("ftp://example.com/mcp")
    with pytest.raises(ConfigError, match="command"):
        StdioServer("")
    with pytest.raises(ConfigError, match="refused"):
        StreamableHTTPServer(
            "https://evil.example/mcp", egress=EgressPolicy(allow=["good.example"])
        )


async def test_an_aborted_agent_run_cancels_its_mcp_call(tmp_path: pathlib.Path) -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall(id="c1", name="wait", arguments={"seconds": 600})]), "unused"
    )
    abort = Abort()
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            async with await MCPConnection.start(runtime, stdio(tmp_path), tools=registry):
                agent = await Agent.start(runtime, provider, tools=registry)
                results: list[Any] = []

                async def run() -> None:
                    results.append(await agent.generate("wait a while", abort=[abort]))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(run)
                    await until(lambda: events(tmp_path, "wait-started") == 1)
                    abort.cancel("enough")
                (result,) = results
                assert result.stop.value == "cancelled"
                assert result.messages[-1].content == INTERRUPTED
                await until(lambda: events(tmp_path, "wait-cancelled") == 1)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_kills_and_cancels_at_random_never_lose_or_hang_a_call(
    tmp_path: pathlib.Path, seed: int
) -> None:
    """Many calls in flight, some cut by their callers at random moments, the server killed at
    a random moment: every call that was not cut gets exactly one result (its answer, or that
    the server went away), none hangs, and the connection comes back with its tools."""
    rng = random.Random(seed)
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, stdio(tmp_path), tools=registry, backoff=QUICK
            )
            server = int((await call(registry, "pid")).value)
            answered: dict[int, Any] = {}
            cut: set[int] = set()

            async def caller(index: int) -> None:
                seconds = rng.choice([0.0, 0.01, 0.05, 600])
                with trio.CancelScope() as scope:
                    if rng.random() < 0.3:
                        scope.deadline = trio.current_time() + rng.uniform(0, 0.2)
                    (result,) = await registry.execute(
                        [ToolCall(id=f"c{index}", name="wait", arguments={"seconds": seconds})]
                    )
                    assert index not in answered
                    answered[index] = result
                if scope.cancelled_caught:
                    cut.add(index)

            async with trio.open_nursery() as nursery:
                for index in range(20):
                    nursery.start_soon(caller, index)
                # The kill comes once a random number of calls has reached the server.
                reached = rng.randint(1, 10)
                await until(lambda: events(tmp_path, "wait-started") >= reached)
                os.kill(server, signal.SIGKILL)
            assert set(answered) | cut == set(range(20))
            for result in answered.values():
                assert isinstance(result, ToolSuccess | ToolFailure)
                if isinstance(result, ToolSuccess):
                    assert result.value == "waited"
                else:
                    assert "went away" in result.error or "not connected" in result.error
            await connection.wait_connected()
            assert (await call(registry, "add", a=1, b=1)).value == "2"
            await connection.aclose()


async def test_an_mcp_call_carries_its_tool_span_to_the_server(tmp_path: pathlib.Path) -> None:
    """The call runs in the session's task, yet the request the server gets carries the trace
    context of the tool call's own span (the SDK puts it in the request's _meta)."""
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider = sdk_trace.TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider = ScriptedProvider(Reply(calls=[ToolCall(id="c1", name="traceparent")]), "done")
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            async with await MCPConnection.start(runtime, stdio(tmp_path), tools=registry):
                agent = await Agent.start(
                    runtime, provider, tools=registry, tracer_provider=tracer_provider
                )
                result = await agent.generate("which trace?")
    received = result.messages[2].content
    (tool_span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    context = tool_span.context
    assert received.split("-")[1:3] == [f"{context.trace_id:032x}", f"{context.span_id:016x}"]


async def test_a_healthy_session_outlives_many_heartbeats() -> None:
    """The heartbeat asks for the tools (MCP 2026-07-28 has no ping): a server that answers
    -- even with an error -- keeps its session, heartbeat after heartbeat."""
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    from actors.mcp import serve_http

    probed = trio.Event()
    count = 0

    async def tools(ctx: Any, params: Any) -> Any:
        nonlocal count
        count += 1
        if count == 6:
            probed.set()
        if count % 2 == 0:  # every other answer an error: still an answer
            raise MCPError(code=types.INTERNAL_ERROR, message="not now")
        return types.ListToolsResult(tools=[])

    server = Server("probed", on_list_tools=tools)
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime, trio.open_nursery() as nursery:
            url = await nursery.start(functools.partial(serve_http, server))
            connection = await MCPConnection.start(
                runtime, StreamableHTTPServer(url), tools=ToolRegistry(), heartbeat=0.02
            )
            await probed.wait()
            assert connection.statistics().connected
            assert connection.statistics().restarts == 0
            await connection.aclose()
            nursery.cancel_scope.cancel()
