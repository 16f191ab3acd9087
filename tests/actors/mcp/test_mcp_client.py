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
from hypothesis import example, given, settings
from hypothesis import strategies as st

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
#: A heartbeat often enough for a test to see several, rarely enough that a subprocess on a
#: loaded machine answers each within it (no answer within it is a death).
BEAT = 0.25


def sdk_codes() -> list[int]:
    """Every error code the SDK names, -32000 (its CONNECTION_CLOSED) among them."""
    from mcp import types

    return sorted({v for k, v in vars(types).items() if k.isupper() and type(v) is int})


#: Codes a server may answer with: JSON-RPC's own, its server-error range (-32000 is the first),
#: the SDK's, and codes outside every range.
CODES = sorted({-32000, -32001, -32050, -32099, -32700, -32603, 0, 1, 42, 2**40, *sdk_codes()})


def stdio(log: pathlib.Path, **env: str) -> StdioServer:
    env = {"MCP_TEST_LOG": str(log), "PATH": os.environ.get("PATH", ""), **env}
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
async def http_server(
    log: pathlib.Path, port: int = 0, **extra: str
) -> AsyncIterator[tuple[int, trio.Process]]:
    """The fixture server on streamable HTTP, as a subprocess; yields its port and process."""
    env = {**os.environ, "MCP_TEST_LOG": str(log), **extra}
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
                "refuse",
                "spoil_listing",
                "refuse_listing",
                "garbled",
                "drop_subscriptions",
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


@pytest.mark.parametrize("code", [-32603, -32000, -32001, -32601])
async def test_a_healthy_session_outlives_many_heartbeats(code: int) -> None:
    """The heartbeat asks for the tools (MCP 2026-07-28 has no ping): a server that answers
    -- even with an error, of any code: -32000 is the SDK's own "connection closed" -- keeps
    its session, heartbeat after heartbeat."""
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
            raise MCPError(code=code, message="not now")
        return types.ListToolsResult(tools=[])

    server = Server("probed", on_list_tools=tools)
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime, trio.open_nursery() as nursery:
            url = await nursery.start(functools.partial(serve_http, server))
            connection = await MCPConnection.start(
                # The heartbeat waits an interval for its answer, in real time: a loaded
                # machine takes longer than 20 ms for a round trip now and then.
                runtime,
                StreamableHTTPServer(url),
                tools=ToolRegistry(),
                heartbeat=0.2,
            )
            await probed.wait()
            assert connection.statistics().connected
            assert connection.statistics().restarts == 0
            await connection.aclose()
            nursery.cancel_scope.cancel()


async def _answer_with_errors(codes: list[int]) -> None:
    """One session with an in-process server that answers each call, and each heartbeat
    after the first listing, with a JSON-RPC error of the next code of ``codes``."""
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    from actors.mcp import serve_http

    listed: list[int] = []
    heard = trio.Event()

    async def tools(ctx: Any, params: Any) -> Any:
        listed.append(1)
        if len(listed) > 1:
            if len(listed) > len(codes):
                heard.set()
            code = codes[len(listed) % len(codes)]
            raise MCPError(code=code, message=f"listing refused {code}")
        schema = {"type": "object", "properties": {"code": {"type": "integer"}}}
        return types.ListToolsResult(tools=[types.Tool(name="refuse", input_schema=schema)])

    async def refuse(ctx: Any, params: Any) -> Any:
        code = params.arguments["code"]
        raise MCPError(code=code, message=f"call refused {code}")

    server = Server("refuser", on_list_tools=tools, on_call_tool=refuse)
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime, trio.open_nursery() as nursery:
            url = await nursery.start(functools.partial(serve_http, server))
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, StreamableHTTPServer(url), tools=registry, heartbeat=BEAT, backoff=QUICK
            )
            for code in codes:
                refused = await call(registry, "refuse", code=code)
                assert isinstance(refused, ToolFailure)
                assert f"call refused {code}" in refused.error
                assert "went away" not in refused.error
            await heard.wait()
            stats = connection.statistics()
            assert stats.connected
            assert stats.restarts == 0
            assert stats.lost == 0
            assert stats.tools == ("refuse",)
            await connection.aclose()
            nursery.cancel_scope.cancel()


@settings(max_examples=6, deadline=None)
@example(codes=[-32000])  # JSON-RPC's first server error, and the SDK's CONNECTION_CLOSED
@example(codes=sdk_codes())
@given(
    codes=st.lists(
        st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.sampled_from(sdk_codes()),
        min_size=1,
        max_size=5,
    )
)
def test_no_error_answer_from_a_live_server_counts_as_its_death(codes: list[int]) -> None:
    """Whatever code a live server answers a call or a heartbeat with -- any integer, the
    SDK's own codes among them -- it is an answer: no restart, nothing lost."""
    trio.run(_answer_with_errors, codes)


# -- an answer is an answer: only the transport says a server is dead --------------------------


@asynccontextmanager
async def fixture_server(
    log: pathlib.Path, transport: str, **env: str
) -> AsyncIterator[StdioServer | StreamableHTTPServer]:
    """The fixture server over ``transport`` ("stdio" or "http"), with ``env`` for it."""
    if transport == "stdio":
        yield stdio(log, **env)
        return
    async with http_server(log, **env) as (port, _):
        yield StreamableHTTPServer(f"http://127.0.0.1:{port}/mcp")


async def heartbeats(log: pathlib.Path, count: int) -> None:
    """Return once the fixture server has answered ``count`` more tool lists."""
    start = events(log, "list")
    await until(lambda: events(log, "list") >= start + count)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_error_answer_is_not_a_dead_server(tmp_path: pathlib.Path, transport: str) -> None:
    """A tool answered with a JSON-RPC error -- -32000, which the SDK also uses for a closed
    connection, or any other code -- gets a result saying what the server said; the session,
    and the server's process, stay."""
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime, fixture_server(tmp_path, transport) as server:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            first = (await call(registry, "pid")).value
            for code in CODES:
                refused = await call(registry, "refuse", code=code, message=f"not today {code}")
                assert isinstance(refused, ToolFailure)
                assert f"not today {code}" in refused.error
                assert "went away" not in refused.error
                assert "restart" not in refused.error
            assert events(tmp_path, "refuse") >= len(CODES)  # HEADER_MISMATCH is resent once
            await heartbeats(tmp_path, 3)
            stats = connection.statistics()
            assert stats.connected
            assert stats.restarts == 0
            assert stats.lost == 0
            assert (await call(registry, "pid")).value == first  # the same process
            await connection.aclose()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_heartbeat_answered_with_32000_keeps_the_session(
    tmp_path: pathlib.Path, transport: str
) -> None:
    """A server that answers every ``tools/list`` with -32000 ("busy") is alive: heartbeat
    after heartbeat, no restart."""
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime, fixture_server(tmp_path, transport) as server:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            first = (await call(registry, "pid")).value
            assert (await call(registry, "refuse_listing", code=-32000)).value == "refusing"
            await until(lambda: events(tmp_path, "list-refused") >= 5)
            stats = connection.statistics()
            assert stats.connected
            assert stats.restarts == 0
            assert (await call(registry, "pid")).value == first
            assert "add" in stats.tools  # the last tools it listed stay
            await connection.aclose()


async def test_a_refused_change_subscription_is_not_a_dead_server(tmp_path: pathlib.Path) -> None:
    """A server that answers ``subscriptions/listen`` with -32000 is alive: no restart."""
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            server = stdio(tmp_path, MCP_TEST_REFUSE_LISTEN="-32000")
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            first = (await call(registry, "pid")).value
            await until(lambda: events(tmp_path, "listen-refused") >= 1)
            await heartbeats(tmp_path, 3)
            assert connection.statistics().restarts == 0
            assert (await call(registry, "pid")).value == first
            await connection.aclose()


async def test_a_change_subscription_the_server_drops_is_opened_again(
    tmp_path: pathlib.Path,
) -> None:
    """A server that ends the change subscription with an error (-32000) after it began is
    alive: the subscription is opened again (after the backoff), with no restart, and the
    registry still follows the server's tools."""
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, stdio(tmp_path), tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            first = (await call(registry, "pid")).value
            await until(lambda: events(tmp_path, "listen") == 1)
            assert (await call(registry, "drop_subscriptions")).value == "dropped"
            await until(lambda: events(tmp_path, "listen") == 2)
            assert connection.statistics().restarts == 0
            assert (await call(registry, "pid")).value == first
            assert (await call(registry, "grow")).value == "grown"
            await until(lambda: "extra" in registry)
            assert connection.statistics().restarts == 0
            await connection.aclose()


def short_and_human(line: str) -> bool:
    return len(line) < 200 and not any(
        noise in line for noise in ("pydantic", "input_value", "validation error", "\n")
    )


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_tool_the_protocol_does_not_allow_costs_that_tool_only(
    tmp_path: pathlib.Path, transport: str
) -> None:
    """A listing with a tool whose input schema is an array's (and one whose name is not a
    string, and one with an x-mcp-header on an object): the session starts, the other tools
    work, the bad ones are left out and said why in a line a person reads."""
    with trio.fail_after(WITHIN):
        async with (
            open_runtime() as runtime,
            fixture_server(tmp_path, transport, MCP_TEST_BAD_TOOLS="1") as server,
        ):
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            assert "add" in registry
            assert "broken" not in registry
            skipped = connection.statistics().skipped
            assert any(line.startswith("'broken':") for line in skipped), skipped
            assert any(line.startswith("42:") for line in skipped), skipped
            assert any(line.startswith("'headed':") for line in skipped), skipped
            assert all(short_and_human(line) for line in skipped), skipped
            assert (await call(registry, "add", a=2, b=3)).value == "5"
            await heartbeats(tmp_path, 3)  # each heartbeat's listing has them too
            assert connection.statistics().restarts == 0
            await connection.aclose()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_tool_whose_schema_is_a_union_of_argument_sets_is_kept(
    tmp_path: pathlib.Path, transport: str
) -> None:
    """A root anyOf of object schemas without "type" (common in MCP servers, refused by the
    SDK's own check) is given "type": "object" and kept (002 G10, issue 23): its calls are
    checked against the union and sent."""
    with trio.fail_after(WITHIN):
        async with (
            open_runtime() as runtime,
            fixture_server(tmp_path, transport, MCP_TEST_UNION_TOOL="1") as server,
        ):
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            assert "lookup" in registry
            assert connection.statistics().skipped == ()
            (definition,) = [d for d in registry.definitions() if d.name == "lookup"]
            assert definition.parameters["type"] == "object"
            assert len(definition.parameters["anyOf"]) == 2
            assert (await call(registry, "lookup", id=7)).value == 'found {"id": 7}'
            (by_name,) = await registry.execute(
                [ToolCall(id="c-by-name", name="lookup", arguments={"name": "Ada"})]
            )
            assert by_name.value == 'found {"name": "Ada"}'
            # Arguments that fit no argument set are refused before anything is sent.
            refused = await call(registry, "lookup", id="seven")
            assert isinstance(refused, ToolFailure)
            await connection.aclose()


async def test_a_re_list_that_meets_a_bad_tool_skips_it_without_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, stdio(tmp_path), tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            first = (await call(registry, "pid")).value
            assert connection.statistics().skipped == ()
            assert (await call(registry, "spoil_listing")).value == "spoiled"
            await until(lambda: any("'broken'" in s for s in connection.statistics().skipped))
            await heartbeats(tmp_path, 3)
            stats = connection.statistics()
            assert stats.restarts == 0
            assert all(short_and_human(line) for line in stats.skipped), stats.skipped
            assert "broken" not in registry
            assert (await call(registry, "pid")).value == first
            assert (await call(registry, "add", a=1, b=1)).value == "2"
            await connection.aclose()


async def test_calls_after_aclose_are_told_the_connection_is_closed(
    tmp_path: pathlib.Path,
) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(runtime, stdio(tmp_path), tools=registry)
            add = registry.get("add")
            assert add is not None
            results: list[Any] = []

            async def waiting() -> None:
                results.append(await call(registry, "wait", seconds=600))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiting)
                await until(lambda: events(tmp_path, "wait-started") == 1)
                await connection.aclose()
            (in_flight,) = results
            assert isinstance(in_flight, ToolFailure)
            assert "closed" in in_flight.error
            assert "unknown" in in_flight.error  # it had reached the server
            assert "restart" not in in_flight.error

            later = await add.call(ToolCall(id="c-late", name="add", arguments={"a": 1, "b": 1}))
            assert isinstance(later, ToolFailure)
            assert "closed" in later.error
            assert "not sent" in later.error
            assert "restart" not in later.error
            assert "try again" not in later.error


async def test_a_call_to_an_http_server_that_died_idle_says_it_was_not_sent(
    tmp_path: pathlib.Path,
) -> None:
    """With no heartbeat and no change subscription (whose stream breaking would say it
    died), a call is what finds the server gone: it could not connect, so the call was not
    sent, and says so."""
    slow = Backoff(initial=3600, maximum=3600, jitter=0.0)
    with trio.fail_after(WITHIN):
        async with (
            open_runtime() as runtime,
            http_server(tmp_path, MCP_TEST_REFUSE_LISTEN="-32601") as (port, process),
        ):
            registry = ToolRegistry()
            server = StreamableHTTPServer(f"http://127.0.0.1:{port}/mcp")
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=slow, heartbeat=None
            )
            assert (await call(registry, "add", a=1, b=2)).value == "3"
            process.kill()
            await process.wait()
            unsent = await call(registry, "add", a=2, b=2)
            assert isinstance(unsent, ToolFailure)
            assert "not sent" in unsent.error
            assert "unknown" not in unsent.error
            assert connection.statistics().lost == 0
            await connection.aclose()


async def test_a_call_to_a_stdio_server_that_died_idle_says_it_was_not_sent(
    tmp_path: pathlib.Path,
) -> None:
    """With no heartbeat (and no change subscription, as with a server from before them),
    the end of the server's output is what says it died: a call after that is never sent,
    and says so."""
    slow = Backoff(initial=3600, maximum=3600, jitter=0.0)
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            server = stdio(tmp_path, MCP_TEST_REFUSE_LISTEN="-32601")  # method not found
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=slow, heartbeat=None
            )
            os.kill(int((await call(registry, "pid")).value), signal.SIGKILL)
            with trio.move_on_after(10):
                await until(lambda: not connection.statistics().connected)
            unsent = await call(registry, "add", a=2, b=2)
            assert isinstance(unsent, ToolFailure)
            assert "not sent" in unsent.error
            assert "unknown" not in unsent.error
            assert connection.statistics().lost == 0
            await connection.aclose()


async def test_an_answer_that_is_not_valid_mcp_is_an_answer(tmp_path: pathlib.Path) -> None:
    """A call answered with a result that is not valid MCP: the server answered, so the call
    gets a result saying the answer could not be used, and the session stays."""
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            connection = await MCPConnection.start(
                runtime, stdio(tmp_path), tools=registry, backoff=QUICK, heartbeat=BEAT
            )
            first = (await call(registry, "pid")).value
            garbled = await call(registry, "garbled")
            assert isinstance(garbled, ToolFailure)
            assert "could not be used" in garbled.error
            assert short_and_human(garbled.error), garbled.error
            assert "went away" not in garbled.error
            await heartbeats(tmp_path, 2)
            assert connection.statistics().restarts == 0
            assert (await call(registry, "pid")).value == first
            await connection.aclose()


async def test_a_tool_list_not_valid_as_a_whole_fails_the_start_in_a_line(
    tmp_path: pathlib.Path,
) -> None:
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            registry = ToolRegistry()
            server = stdio(tmp_path, MCP_TEST_GARBLED_LISTING="1")
            with pytest.raises(ConfigError, match="not valid MCP") as raised:
                await MCPConnection.start(runtime, server, tools=registry)
            message = str(raised.value)
            assert "tools: " in message
            assert short_and_human(message.split("could not be started: ", 1)[1]), message
            assert len(registry) == 0


async def test_an_http_server_that_forgot_the_session_gets_a_new_one(
    tmp_path: pathlib.Path,
) -> None:
    """A handshake-era server restarted at the same address answers the old session's
    requests with HTTP 404: the session is gone (whatever the JSON-RPC error says), so the
    call says it was not run, and a new session starts."""
    with trio.fail_after(WITHIN):
        async with (
            open_runtime() as runtime,
            http_server(tmp_path, MCP_TEST_LEGACY="1") as (port, process),
        ):
            registry = ToolRegistry()
            server = StreamableHTTPServer(f"http://127.0.0.1:{port}/mcp")
            connection = await MCPConnection.start(
                runtime, server, tools=registry, backoff=QUICK, heartbeat=None
            )
            assert (await call(registry, "add", a=1, b=2)).value == "3"
            process.kill()
            await process.wait()
            async with http_server(tmp_path, port, MCP_TEST_LEGACY="1"):
                forgotten = await call(registry, "add", a=2, b=2)
                assert isinstance(forgotten, ToolFailure)
                assert "not sent" in forgotten.error
                await connection.wait_connected()
                assert connection.statistics().restarts == 1
                assert (await call(registry, "add", a=2, b=3)).value == "5"
                assert events(tmp_path, "add") == 2  # the forgotten call never ran
            await connection.aclose()
