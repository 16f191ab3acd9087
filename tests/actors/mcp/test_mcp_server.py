"""Our MCP server driven by the SDK's own client: in process, over streamable HTTP on loopback
and over stdio through ``trio-agents mcp --app``. Real clock: these wait on sockets and
subprocesses; every wait is bounded by ``fail_after``."""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys
import textwrap

import httpx
import pytest
import trio

from actors import Agent, ToolRegistry, open_runtime, tool
from actors.agent import AgentEvent
from actors.mcp import (
    PROMPT_SCHEMA,
    MCPConnection,
    StreamableHTTPServer,
    mcp_server,
    serve_http,
)
from actors.testing import Reply, ScriptedProvider, Simulator
from protocols.errors import ConfigError
from protocols.messages import StopReason, ToolCall, ToolDefinition, ToolResult, ToolSuccess

mcp = pytest.importorskip("mcp")

WITHIN = 60


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_registry_served_tool_for_tool() -> None:
    with trio.fail_after(WITHIN):
        async with mcp.Client(mcp_server(ToolRegistry([add]))) as client:
            listing = await client.list_tools()
            (served,) = listing.tools
            assert served.name == "add"
            assert served.description == "Add two integers."
            assert served.input_schema["required"] == ["a", "b"]
            answer = await client.call_tool("add", {"a": 19, "b": 23})
            assert not answer.is_error
            assert answer.content[0].text == "42"
            wrong = await client.call_tool("add", {"a": "x", "b": 1})
            assert wrong.is_error
            assert "$.a" in wrong.content[0].text
            unknown = await client.call_tool("nope", {})
            assert unknown.is_error
            assert "nope" in unknown.content[0].text


#: A one-pixel PNG, as base64.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class Draw:
    """A tool that answers with a caption and an image."""

    definition = ToolDefinition("draw", "Draw a dot.")

    async def call(self, call: ToolCall) -> ToolResult:
        return ToolSuccess(call.id, call.name, "a red dot", images=[PNG])


async def test_a_served_tools_images_are_mcp_image_parts() -> None:
    with trio.fail_after(WITHIN):
        async with mcp.Client(mcp_server(ToolRegistry([Draw()]))) as client:
            answer = await client.call_tool("draw", {})
            assert not answer.is_error
            text, picture = answer.content
            assert text.text == "a red dot"
            assert (picture.type, picture.data, picture.mime_type) == ("image", PNG, "image/png")


async def test_an_agent_served_over_http_answers_a_prompt() -> None:
    with trio.fail_after(WITHIN):
        async with Simulator() as simulator, open_runtime() as runtime:
            provider = simulator.openai()
            agent = await Agent.start(runtime, provider, tools=[add], name="calculator")
            async with trio.open_nursery() as nursery:
                url = await nursery.start(functools.partial(serve_http, mcp_server(agent)))
                assert url.startswith("http://127.0.0.1:")
                async with mcp.Client(url) as client:
                    (served,) = (await client.list_tools()).tools
                    assert served.name == "calculator"
                    assert served.input_schema == PROMPT_SCHEMA
                    answer = await client.call_tool("calculator", {"prompt": "What is 19 + 23?"})
                    assert not answer.is_error
                    assert answer.content[0].text == "The answer is 42."
                    assert answer.structured_content["stop"] == "complete"
                    empty = await client.call_tool("calculator", {"prompt": "  "})
                    assert empty.is_error
                nursery.cancel_scope.cancel()
            await provider.aclose()


async def test_a_client_cancel_cuts_the_run() -> None:
    started = trio.Event()
    cut: list[bool] = []

    @tool
    async def block() -> str:
        """Never finishes."""
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cut.append(True)
        return "unreachable"

    provider = ScriptedProvider(
        Reply(text="Let me check.", calls=[ToolCall(id="c1", name="block")]), "never asked"
    )
    events: list[AgentEvent] = []
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(
                runtime, provider, tools=[block], name="checker", on=[events.append]
            )
            async with trio.open_nursery() as nursery:
                url = await nursery.start(functools.partial(serve_http, mcp_server(agent)))
                async with mcp.Client(url) as client:
                    with trio.CancelScope() as scope:
                        async with trio.open_nursery() as calls:
                            calls.start_soon(
                                functools.partial(client.call_tool, "checker", {"prompt": "check"})
                            )
                            await started.wait()
                            scope.cancel()
                    # The cancellation crossed the wire and cut the run (in its own
                    # conversation: the served agent's is never written to; a session's
                    # conversation keeps the partial, see test_mcp_served_sessions.py).
                    await agent.aclose()  # waits for the run, which ends only if it was cut
                    assert cut == [True]
                    assert await agent.conversation.messages() == ()
                nursery.cancel_scope.cancel()
    assert len(provider.calls) == 1  # the run never went on to a second turn
    (abort,) = [e for e in events if e.kind == "abort"]
    assert abort.stop is StopReason.CANCELLED
    assert [e.partial for e in events if e.kind == "finish"] == [True]


def test_settings_that_cannot_apply_are_refused() -> None:
    with pytest.raises(ConfigError, match="agent"):
        mcp_server(ToolRegistry([add]), tool_name="x")


async def test_trio_agents_mcp_over_stdio(tmp_path: pathlib.Path) -> None:
    app = tmp_path / "served.py"
    app.write_text(
        textwrap.dedent(
            '''
            from actors import ToolRegistry, tool

            @tool
            def shout(text: str) -> str:
                """Upper-case the text."""
                return text.upper()

            registry = ToolRegistry([shout])
            '''
        )
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sys.path)}
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=["-m", "actors", "mcp", "--app", "served:registry"],
        env=env,
        cwd=str(tmp_path),
    )
    with trio.fail_after(WITHIN):
        async with mcp.Client(params) as client:
            (served,) = (await client.list_tools()).tools
            assert served.name == "shout"
            answer = await client.call_tool("shout", {"text": "quiet"})
            assert answer.content[0].text == "QUIET"


async def test_trio_agents_mcp_with_a_bad_app_says_why(tmp_path: pathlib.Path) -> None:
    async def command(app: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            [sys.executable, "-m", "actors", "mcp", "--app", app],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=str(tmp_path),
        )

    result = await command("no_such_module:thing")
    assert result.returncode == 1
    assert b"cannot import 'no_such_module'" in result.stderr
    assert result.stdout == b""
    wrong = await command("json:dumps")
    assert wrong.returncode == 1
    [line] = wrong.stderr.decode().splitlines()
    assert line.startswith(
        "trio-agents mcp: --app json:dumps: calling dumps() failed: TypeError: Object of type "
        "Runtime is not JSON serializable (",  # (then the file and line that raised it)
    )


def test_the_public_names_are_pinned() -> None:
    import actors.mcp
    import protocols.mcp

    assert sorted(actors.mcp.__all__) == sorted(
        [
            "PROMPT_SCHEMA",
            "MCPConnection",
            "MCPStatistics",
            "MCPTool",
            "StdioServer",
            "StreamableHTTPServer",
            "mcp_server",
            "serve_http",
            "serve_stdio",
        ]
    )
    assert sorted(protocols.mcp.__all__) == sorted(
        [
            "MAX_PROBLEM_CHARS",
            "MAX_RESULT_CHARS",
            "MAX_RESULT_IMAGES",
            "MAX_RESULT_IMAGE_CHARS",
            "MAX_TOOLS",
            "Listing",
            "content_text",
            "describe_problems",
            "local_name",
            "read_listing",
            "read_result",
            "shown_name",
            "write_result",
        ]
    )


def test_without_the_sdk_the_error_says_what_to_install() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["mcp"] = None  # as if the package were not installed
        import trio
        from actors import ToolRegistry, open_runtime
        from actors.mcp import MCPConnection, StdioServer, mcp_server
        from protocols.errors import ConfigError

        async def main():
            async with open_runtime() as runtime:
                try:
                    await MCPConnection.start(runtime, StdioServer("x"), tools=ToolRegistry())
                except ConfigError as error:
                    print(error)
            try:
                mcp_server(ToolRegistry())
            except ConfigError as error:
                print(error)

        trio.run(main)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.splitlines()
        == ["MCP needs the mcp package: pip install 'trio-agents[mcp]'"] * 2
    )


async def test_a_token_gates_every_request_and_is_needed_beyond_loopback() -> None:
    token = "a-long-enough-test-token"
    server = mcp_server(ToolRegistry([add]))
    with pytest.raises(ConfigError, match="needs a token"):
        await serve_http(server, host="0.0.0.0")
    with pytest.raises(ConfigError, match="at least 16"):
        await serve_http(server, token="short")
    with trio.fail_after(WITHIN):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(functools.partial(serve_http, server, token=token))
            async with httpx.AsyncClient() as http:
                refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                assert refused.status_code == 401
                wrong = await http.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    headers={"Authorization": "Bearer not-the-token-at-all"},
                )
                assert wrong.status_code == 401
            async with open_runtime() as runtime:
                registry = ToolRegistry()
                remote = StreamableHTTPServer(url, headers={"Authorization": f"Bearer {token}"})
                async with await MCPConnection.start(runtime, remote, tools=registry):
                    (answer,) = await registry.execute(
                        [ToolCall(id="c1", name="add", arguments={"a": 2, "b": 40})]
                    )
                    assert answer.render() == "42"
                with pytest.raises(ConfigError, match="could not be started"):
                    await MCPConnection.start(runtime, StreamableHTTPServer(url), tools=registry)
            nursery.cancel_scope.cancel()


async def test_an_overlong_prompt_is_refused() -> None:
    provider = ScriptedProvider("never asked")
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, name="short")
            async with mcp.Client(mcp_server(agent, max_prompt_chars=10)) as client:
                answer = await client.call_tool("short", {"prompt": "x" * 11})
                assert answer.is_error
                assert "at most 10" in answer.content[0].text
    assert provider.calls == []
    with pytest.raises(ConfigError, match="max_prompt_chars"):
        mcp_server(ToolRegistry([add]), max_prompt_chars=0)


async def test_a_served_run_is_a_child_of_the_clients_span() -> None:
    """The SDK's client sends its current trace context in the request's _meta, and the SDK's
    server makes it current in the handler (even with no global tracing configured: the API's
    no-op tracer carries a parent on); the served run's invoke_agent span is its child."""
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider = sdk_trace.TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider = ScriptedProvider("traced")
    with trio.fail_after(WITHIN):
        async with open_runtime() as runtime:
            agent = await Agent.start(
                runtime, provider, name="traced", tracer_provider=tracer_provider
            )
            async with trio.open_nursery() as nursery:
                url = await nursery.start(functools.partial(serve_http, mcp_server(agent)))
                async with mcp.Client(url) as client:
                    tracer = tracer_provider.get_tracer("client")
                    with tracer.start_as_current_span("client call") as caller:
                        answer = await client.call_tool("traced", {"prompt": "hi"})
                nursery.cancel_scope.cancel()
    assert answer.content[0].text == "traced"
    (run,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent traced"]
    assert run.parent is not None
    assert run.parent.span_id == caller.get_span_context().span_id
    assert run.context.trace_id == caller.get_span_context().trace_id
