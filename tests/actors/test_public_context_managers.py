"""Exceptions a Python developer can catch (issue 24 item 2, DESIGN.md section 16): no public
context manager lets an exception group out when one exception is the cause.

The table below has every public async context manager of ``actors`` (and the public functions
that run a nursery of their own); a test enumerates the public names of every ``actors``
package and fails for one that is not in it, so a new one cannot be forgotten. Each entry is
walked with:

* the caller's own exception raised in the block: it comes out as itself (the very object, so
  ``except ValueError`` catches it), with one traceback -- not the group it went through, nor
  two tracebacks joined by "During handling of the above exception";
* the caller's own exception group: it comes out as itself too, never unwrapped;
* a failure of the library inside the block: it comes out as its documented class;
* a cancellation from outside: it is not swallowed nor turned into anything else;
* ``KeyboardInterrupt``: it stays ``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import inspect
import os
import pathlib
import pkgutil
import socket
import subprocess
import sys
import textwrap
import traceback
import typing
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import attrs
import pytest
import trio

import actors
from actors import (
    Actor,
    ActorStopped,
    MemoryConversationStore,
    PostgresConversationStore,
    RelayProvider,
    SQLiteConversationStore,
    StoreError,
    SupervisorGaveUp,
    open_runtime,
)
from actors.durable import (
    AgentRegistry,
    MemoryRunStore,
    PostgresRunStore,
    SQLiteRunStore,
    open_job_queue,
    submit_job,
    wait_job,
)
from actors.durable._store import Announcer, Watch
from actors.providers import OpenAIChat
from actors.relay import RelayServer, serve
from actors.testing import Fail, FaultProviderServer, ScriptedProvider, Simulator
from protocols import Message, ProviderError
from protocols.errors import ConfigError
from protocols.jobs import AgentJob

ROOT = pathlib.Path(__file__).resolve().parents[2]
MCP_SERVER = ROOT / "tests" / "fixtures" / "mcp_tool_server.py"
TOKEN = "a-token-of-at-least-16-chars"
#: A bound on how long anything here may take (real time: real sockets and processes).
HANG = 60


class Mine(Exception):
    """The caller's own exception."""


class Crasher(Actor[str, None]):
    """Fails on any message it is sent."""

    async def handle(self, message: str) -> None:
        raise RuntimeError(f"crashed on {message!r}")


class Streamer(Actor[str, None]):
    """Fails while streaming its reply."""

    async def handle_stream(self, message: str, send: trio.MemorySendChannel[Any]) -> None:
        await send.send("first")
        raise RuntimeError("died mid-stream")


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class Env:
    """What an entry needs around its context manager: prerequisites entered on ``stack`` (left
    after the test), and a folder of its own."""

    def __init__(self, stack: contextlib.AsyncExitStack, folder: pathlib.Path) -> None:
        self.stack = stack
        self.folder = folder

    async def enter(self, manager: contextlib.AbstractAsyncContextManager[Any]) -> Any:
        return await self.stack.enter_async_context(manager)

    async def runtime(self) -> actors.Runtime:
        runtime: actors.Runtime = await self.enter(open_runtime())
        return runtime


#: What a table entry builds: the context manager under test, and what to do inside its block
#: to make the library fail there (given what the block's ``as`` names).
Built = tuple[contextlib.AbstractAsyncContextManager[Any], Callable[[Any], Awaitable[object]]]


@attrs.frozen
class Entry:
    #: The public name (``__qualname__``): a class, an ``asynccontextmanager`` function or
    #: method, or a public function that runs a nursery.
    name: str
    build: Callable[[Env], Awaitable[Built]]
    #: The documented class of the failure ``build``'s action makes the library raise.
    raises: type[BaseException]


# -- the entries ---------------------------------------------------------------------------------


async def _runtime(env: Env) -> Built:
    async def fail(runtime: actors.Runtime) -> None:
        ref = await runtime.spawn(Crasher)
        await ref.send("go")  # it fails; the root may not restart it, so it gives up
        await trio.sleep_forever()

    return open_runtime(max_restarts=0), fail


async def _job_queue(env: Env) -> Built:
    runtime = await env.runtime()
    store = MemoryRunStore()

    async def fail(queue: Any) -> None:
        await store.aclose()  # the worker's next look for jobs fails for good
        await trio.sleep_forever()

    return open_job_queue(store, AgentRegistry(), runtime, poll=0.01), fail


async def _simulator(env: Env) -> Built:
    async def fail(simulator: Simulator) -> None:
        provider = simulator.openai(api_key="sk-not-the-simulators-key")
        try:
            await provider.generate([Message.user("hi")])
        finally:
            await provider.aclose()

    return Simulator(api_key="sk-the-simulators-own-key"), fail


async def _fault_server(env: Env) -> Built:
    async def fail(server: FaultProviderServer) -> None:
        provider = OpenAIChat(model="m", base_url=server.base_url, api_key="k")
        try:
            await provider.generate([Message.user("hi")])
        finally:
            await provider.aclose()

    return FaultProviderServer([{"kind": "http-error", "status": 400}]), fail


async def _relay_provider(env: Env) -> Built:
    async def fail(model: RelayProvider) -> None:
        await model.generate([Message.user("hi")])  # nothing listens there

    url = f"ws://127.0.0.1:{closed_port()}/v1/relay"
    return RelayProvider(url, token=TOKEN, reconnects=0), fail


async def _mcp_connection(env: Env) -> Built:
    from actors.mcp import MCPConnection, StdioServer

    runtime = await env.runtime()
    registry = actors.ToolRegistry()
    environment = {"PATH": os.environ.get("PATH", ""), "MCP_TEST_LOG": str(env.folder)}
    server = StdioServer(sys.executable, [str(MCP_SERVER)], env=environment)
    connection = await MCPConnection.start(runtime, server, tools=registry)

    async def fail(connection: MCPConnection) -> None:
        missing = StdioServer(str(env.folder / "no-such-server"))
        await MCPConnection.start(runtime, missing, tools=registry, name="missing")

    return connection, fail


async def _agent(env: Env) -> Built:
    runtime = await env.runtime()
    agent = await runtime.agent(ScriptedProvider(Fail()))

    async def fail(agent: actors.Agent) -> None:
        await agent.generate("hi")

    return agent, fail


async def _agent_run(env: Env) -> Built:
    runtime = await env.runtime()
    agent = await runtime.agent(ScriptedProvider(Fail()))

    async def fail(run: actors.AgentRun) -> None:
        async for _ in run:
            pass

    return agent.stream("hi"), fail


async def _provider_stream(env: Env) -> Built:
    server = await env.enter(FaultProviderServer([{"kind": "http-error", "status": 400}]))
    provider = OpenAIChat(model="m", base_url=server.base_url, api_key="k")
    env.stack.push_async_callback(provider.aclose)

    async def fail(stream: Any) -> None:
        async for _ in stream:
            pass

    return provider.stream([Message.user("hi")]), fail


async def _text_stream(env: Env) -> Built:
    async def fail(stream: Any) -> None:
        async for _ in stream:
            pass

    return ScriptedProvider(Fail()).stream([Message.user("hi")]), fail


async def _actor_stream(env: Env) -> Built:
    runtime = await env.runtime()
    ref = await runtime.spawn(Streamer)

    async def fail(stream: Any) -> None:
        async for _ in stream:
            pass

    return ref.stream("go"), fail


def _store(opener: Callable[[Env], Awaitable[Any]]) -> Callable[[Env], Awaitable[Built]]:
    async def build(env: Env) -> Built:
        store = await opener(env)

        async def fail(store: Any) -> None:
            await store.aclose()
            await store.get("any")  # a closed store refuses

        return store, fail

    return build


async def _postgres_conversations(env: Env) -> Any:
    from postgres_server import drop_schemas, new_schema, postgres_url

    schema = new_schema()
    env.stack.push_async_callback(trio.to_thread.run_sync, drop_schemas, schema)
    return await PostgresConversationStore.open(postgres_url(), schema=schema)


async def _postgres_runs(env: Env) -> Any:
    from postgres_server import drop_schemas, new_schema, postgres_url

    schema = new_schema()
    env.stack.push_async_callback(trio.to_thread.run_sync, drop_schemas, schema)
    return await PostgresRunStore.open(postgres_url(), schema=schema)


async def _memory_conversations(env: Env) -> Any:
    return MemoryConversationStore()


async def _sqlite_conversations(env: Env) -> Any:
    return await SQLiteConversationStore.open(env.folder / "conversations.db")


async def _memory_runs(env: Env) -> Any:
    return MemoryRunStore()


@contextlib.asynccontextmanager
async def _relay_of(agent: str, runtime: actors.Runtime) -> AsyncIterator[str]:
    """A relay serving ``agent`` (on a scripted model), on a free port: its address."""
    from actors.relay import RelayAgents, RelayServer, serve
    from actors.testing import ScriptedProvider

    registry = AgentRegistry()
    registry.add(agent, ScriptedProvider())
    app = RelayServer(ScriptedProvider(), tokens=[TOKEN], agents=RelayAgents(registry, runtime))
    async with trio.open_nursery() as nursery:
        (address,) = await nursery.start(
            lambda task_status: serve(app, port=0, task_status=task_status)
        )
        yield address
        nursery.cancel_scope.cancel()


async def _a2a_agent(env: Env) -> Built:
    address = await env.enter(_relay_of("helper", await env.runtime()))

    async def fail(remote: actors.A2AAgent) -> None:
        remote.url += "/nothing-here"  # (its card is not there)
        await remote.fetch_card()

    auth = {"Authorization": f"Bearer {TOKEN}"}
    return actors.A2AAgent(address + "/a2a/helper", headers=auth), fail


async def _sqlite_runs(env: Env) -> Any:
    return await SQLiteRunStore.open(env.folder / "runs.db")


TABLE = [
    Entry("open_runtime", _runtime, SupervisorGaveUp),
    Entry("open_job_queue", _job_queue, StoreError),
    Entry("Simulator", _simulator, ProviderError),
    Entry("FaultProviderServer", _fault_server, ProviderError),
    Entry("RelayProvider", _relay_provider, ProviderError),
    Entry("MCPConnection", _mcp_connection, ConfigError),
    Entry("A2AAgent", _a2a_agent, actors.A2AError),
    Entry("Agent", _agent, ProviderError),
    Entry("AgentRun", _agent_run, ProviderError),
    Entry("ProviderStream", _provider_stream, ProviderError),
    Entry("TextStream", _text_stream, ProviderError),
    Entry("ActorRef.stream", _actor_stream, ActorStopped),
    Entry("MemoryConversationStore", _store(_memory_conversations), StoreError),
    Entry("SQLiteConversationStore", _store(_sqlite_conversations), StoreError),
    Entry("PostgresConversationStore", _store(_postgres_conversations), StoreError),
    Entry("MemoryRunStore", _store(_memory_runs), StoreError),
    Entry("SQLiteRunStore", _store(_sqlite_runs), StoreError),
    Entry("PostgresRunStore", _store(_postgres_runs), StoreError),
]
#: Public functions that run a nursery of their own: not context managers, tested below.
FUNCTIONS = {"serve", "serve_http", "serve_stdio", "wait_job"}
#: Public async context managers that are not in TABLE, and why.
NOT_HERE: dict[str, str] = {
    # ASGI applications have no block: RelayServer's __call__ is tested below.
    # The asyncio door's context managers are entered from asyncio, not trio: the same
    # promises (a caller's exception as itself, a library failure as its class, no group)
    # are tested in tests/actors/test_aio_door.py.
    "Runtime": "actors.aio.Runtime: asyncio door, tested in tests/actors/test_aio_door.py",
    "Run": "actors.aio.Run: asyncio door, tested in tests/actors/test_aio_door.py",
    "JobQueue": "actors.aio.JobQueue: asyncio door, tested in tests/actors/test_aio_door.py",
}


# -- what a caller sees --------------------------------------------------------------------------


def printed(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def assert_no_group_around(error: BaseException) -> None:
    """``error`` is no group, and no group is in the chain Python prints with it."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        assert not isinstance(current, BaseExceptionGroup), printed(error)
        seen.append(current)
        context = None if current.__suppress_context__ else current.__context__
        current = current.__cause__ or context
    text = printed(error)
    assert "Exception Group" not in text
    assert "During handling of the above exception" not in text


@contextlib.asynccontextmanager
async def entered(entry: Entry, tmp_path: pathlib.Path) -> AsyncIterator[Built]:
    if entry.name == "MCPConnection":
        pytest.importorskip("mcp")
    async with contextlib.AsyncExitStack() as stack:
        try:
            yield await entry.build(Env(stack, tmp_path))
        except trio.Cancelled:
            # pytest-trio passes a test that a Cancelled escapes: none may get this far.
            pytest.fail("a trio.Cancelled escaped the test's own scopes")


@pytest.fixture(params=TABLE, ids=lambda entry: entry.name)
def entry(request: pytest.FixtureRequest) -> Entry:
    return typing.cast(Entry, request.param)


async def test_a_users_exception_comes_out_as_itself(entry: Entry, tmp_path: pathlib.Path) -> None:
    raised = Mine("from the caller's block")
    with trio.fail_after(HANG):
        async with entered(entry, tmp_path) as (manager, _):
            with pytest.raises(Mine) as caught:
                async with manager:
                    raise raised
    assert caught.value is raised
    assert raised.__context__ is None  # not the group it went through
    text = printed(caught.value)
    assert text.count("Traceback (most recent call last)") == 1, text
    assert_no_group_around(caught.value)
    # The traceback still ends where the caller raised it.
    last = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert last.filename == __file__
    assert last.line == "raise raised"


def mine_while_handling_a_key_error() -> None:
    found: dict[str, int] = {}
    try:
        found["missing"]
    except KeyError:
        raise Mine("while handling a KeyError")  # noqa: B904 - the implicit context, on purpose


async def test_a_users_exception_keeps_its_own_context(
    entry: Entry, tmp_path: pathlib.Path
) -> None:
    with trio.fail_after(HANG):
        async with entered(entry, tmp_path) as (manager, _):
            with pytest.raises(Mine) as caught:
                async with manager:
                    mine_while_handling_a_key_error()
    assert isinstance(caught.value.__context__, KeyError)  # its own, not the group's
    assert not caught.value.__suppress_context__


async def test_a_users_exception_group_comes_out_as_itself(
    entry: Entry, tmp_path: pathlib.Path
) -> None:
    raised = ExceptionGroup("the caller's own", [Mine("one")])
    with trio.fail_after(HANG):
        async with entered(entry, tmp_path) as (manager, _):
            with pytest.raises(ExceptionGroup) as caught:
                async with manager:
                    raise raised
    assert caught.value is raised


async def test_a_library_failure_comes_out_as_its_documented_class(
    entry: Entry, tmp_path: pathlib.Path
) -> None:
    with trio.fail_after(HANG):
        async with entered(entry, tmp_path) as (manager, fail):
            with pytest.raises(entry.raises) as caught:
                async with manager as value:
                    await fail(value)
    assert_no_group_around(caught.value)


async def test_a_cancel_from_outside_is_not_swallowed_or_changed(
    entry: Entry, tmp_path: pathlib.Path
) -> None:
    reached = []
    with trio.fail_after(HANG):
        async with entered(entry, tmp_path) as (manager, _):
            with trio.CancelScope() as outside:
                async with manager:
                    outside.cancel()
                    await trio.sleep(10 * HANG)
                    reached.append("the end of the block")
                reached.append("past the block")
    assert outside.cancelled_caught
    assert reached == []


async def test_keyboard_interrupt_stays_keyboard_interrupt(
    entry: Entry, tmp_path: pathlib.Path
) -> None:
    raised = KeyboardInterrupt()
    with trio.fail_after(HANG):
        async with entered(entry, tmp_path) as (manager, _):
            with pytest.raises(KeyboardInterrupt) as caught:
                async with manager:
                    raise raised
    assert caught.value is raised


async def test_a_relay_provider_closed_inside_its_block_lets_the_block_finish() -> None:
    """``aclose()`` inside the block used to cancel the block's own scope: the rest of the
    block never ran, and a ``trio.Cancelled`` nobody had asked for escaped the block."""
    reached = []
    url = f"ws://127.0.0.1:{closed_port()}/v1/relay"
    escaped: list[trio.Cancelled] = []
    with trio.fail_after(HANG):
        try:
            async with RelayProvider(url, token=TOKEN, reconnects=0) as model:
                await model.aclose()
                await trio.lowlevel.checkpoint()
                reached.append("the rest of the block")
                with pytest.raises(ConfigError):  # closed: it takes no more requests
                    await model.generate([Message.user("hi")])
        except trio.Cancelled as error:  # (pytest-trio passes a test a Cancelled escapes)
            escaped.append(error)
    assert escaped == []
    assert reached == ["the rest of the block"]


# -- no public context manager is left out -------------------------------------------------------


def public_modules() -> list[Any]:
    modules = [actors]
    for info in pkgutil.walk_packages(actors.__path__, "actors."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            modules.append(importlib.import_module(info.name))
    return modules


def _is_async_context_manager_function(function: Any) -> bool:
    wrapped = getattr(function, "__wrapped__", None)
    return wrapped is not None and inspect.isasyncgenfunction(wrapped)


def _returned_manager(function: Any) -> type | None:
    try:
        hints = typing.get_type_hints(function)
    except Exception:
        return None
    returned = hints.get("return")
    if inspect.isclass(returned) and hasattr(returned, "__aenter__"):
        return returned
    return None


def public_context_managers() -> set[str]:
    """The ``__qualname__`` of every public async context manager: classes that are one,
    ``asynccontextmanager`` functions and methods, and the classes public functions and methods
    are annotated to return."""
    found: set[str] = set()
    for module in public_modules():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if inspect.isclass(value):
                if hasattr(value, "__aenter__"):
                    found.add(value.__qualname__)
                for attribute, member in vars(value).items():
                    if attribute.startswith("_") and attribute != "__call__":
                        continue
                    function = getattr(member, "__func__", member)
                    if _is_async_context_manager_function(function):
                        found.add(f"{value.__qualname__}.{attribute}")
                    returned = _returned_manager(function) if callable(function) else None
                    if returned is not None:
                        found.add(returned.__qualname__)
            elif callable(value):
                if _is_async_context_manager_function(value):
                    found.add(value.__qualname__)
                returned = _returned_manager(value)
                if returned is not None:
                    found.add(returned.__qualname__)
    return found


def test_every_public_context_manager_is_in_the_table() -> None:
    found = public_context_managers()
    assert {"open_runtime", "RelayProvider", "ActorRef.stream", "ProviderStream"} <= found
    missing = found - {entry.name for entry in TABLE} - set(NOT_HERE)
    assert not missing, f"add these to TABLE in {__file__}: {sorted(missing)}"
    stale = {entry.name for entry in TABLE} - found
    assert not stale, f"no longer public context managers: {sorted(stale)}"


# -- public functions that run a nursery ---------------------------------------------------------


async def test_a_users_exception_from_serves_shutdown_comes_out_as_itself() -> None:
    raised = Mine("from the caller's shutdown callable")

    async def shutdown() -> None:
        raise raised

    relay = RelayServer(ScriptedProvider("hi"), tokens=[TOKEN])
    with trio.fail_after(HANG), pytest.raises(Mine) as caught:
        await serve(relay, port=0, shutdown=shutdown)
    assert caught.value is raised
    assert_no_group_around(caught.value)


async def test_serve_http_on_a_taken_port_raises_the_os_error() -> None:
    pytest.importorskip("mcp")
    from actors.mcp import mcp_server, serve_http

    with socket.socket() as taken, warnings.catch_warnings():
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with trio.fail_after(HANG), pytest.raises(OSError, match=r"(?i)address") as caught:
            await serve_http(mcp_server(actors.ToolRegistry()), port=port)
        assert_no_group_around(caught.value)
        # hypercorn leaves the socket it could not bind open (Config._create_sockets): it is
        # closed when collected, which warns.
        warnings.simplefilter("ignore", ResourceWarning)
        del caught
        gc.collect()


async def test_a_relay_servers_failing_send_comes_out_as_itself() -> None:
    """An ASGI server's ``send`` that raises (its client went away, say) gets its exception
    back from the relay application, not a group of it."""
    raised = Mine("the ASGI server's send failed")
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    incoming = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await trio.sleep_forever()
        raise AssertionError

    async def send(message: MutableMapping[str, Any]) -> None:
        raise raised

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/stream",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 8000),
        "scheme": "http",
    }
    relay = RelayServer(ScriptedProvider("hi"), tokens=[TOKEN])
    with trio.fail_after(HANG), pytest.raises(Mine) as caught:
        await relay(scope, receive, send)
    assert caught.value is raised
    assert_no_group_around(caught.value)


class LostConnectionStore(MemoryRunStore):
    """A run store whose change notifications fail as a PostgreSQL store's do when its
    listening connection is lost."""

    def watch(self) -> Any:
        class Lost(Watch):
            async def next(self) -> frozenset[str]:
                await trio.lowlevel.checkpoint()
                raise StoreError("the listening connection was lost", code="io", retryable=True)

        return Lost(Announcer())


async def test_wait_job_raises_what_the_store_raised() -> None:
    store = LostConnectionStore()
    record, _ = await submit_job(store, AgentJob("echo", (Message.user("hi"),)))
    with trio.fail_after(HANG), pytest.raises(StoreError) as caught:
        await wait_job(store, record.id)
    assert caught.value.code == "io"
    assert_no_group_around(caught.value)


def test_public_functions_that_run_a_nursery_are_covered() -> None:
    """Every public function whose own code opens a nursery is tested above (FUNCTIONS)."""
    found = set()
    for module in public_modules():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if inspect.iscoroutinefunction(value):
                source = inspect.getsource(inspect.unwrap(value))
                if "open_nursery" in source or "task group" in source or "stdio_server" in source:
                    found.add(value.__qualname__)
    assert found == FUNCTIONS


# -- a script's uncaught error: one traceback ----------------------------------------------------

SCRIPT = """
import trio
{imports}


class Mine(Exception):
    pass


async def main() -> None:
    {enter}
        raise Mine("the script's own error")


trio.run(main)
"""

SCRIPTS = {
    "open_runtime": ("from actors import open_runtime", "async with open_runtime():"),
    "RelayProvider": (
        "from actors import RelayProvider",
        f"async with RelayProvider('ws://127.0.0.1:1/v1/relay', token={TOKEN!r}):",
    ),
    "Simulator": ("from actors.testing import Simulator", "async with Simulator():"),
    "open_job_queue": (
        "from actors import open_runtime\n"
        "from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue",
        "async with open_runtime() as runtime, open_job_queue(\n"
        "        MemoryRunStore(), AgentRegistry(), runtime\n"
        "    ):",
    ),
}


def run_script(code: str, tmp_path: pathlib.Path, *, stdin: bytes = b"") -> str:
    script = tmp_path / "script.py"
    script.write_text(code)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)],
        input=stdin,
        capture_output=True,
        env=environment,
        timeout=HANG,
        check=False,
    )
    assert done.returncode == 1, done.stderr.decode()
    return done.stderr.decode()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_an_uncaught_error_in_a_script_prints_one_traceback(
    name: str, tmp_path: pathlib.Path
) -> None:
    imports, enter = SCRIPTS[name]
    code = SCRIPT.format(imports=imports, enter=enter)
    stderr = run_script(code, tmp_path)
    assert stderr.count("Traceback (most recent call last)") == 1, stderr
    assert "During handling of the above exception" not in stderr
    assert stderr.rstrip().splitlines()[-1] == "Mine: the script's own error"
    assert 'raise Mine("the script\'s own error")' in stderr


def test_serve_stdio_raises_what_the_server_raised(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("mcp")
    code = textwrap.dedent(
        """
        import trio
        from actors.mcp import serve_stdio


        class Mine(Exception):
            pass


        class Broken:
            def create_initialization_options(self) -> None:
                return None

            async def run(self, read: object, write: object, options: object) -> None:
                raise Mine("the server's own error")


        trio.run(serve_stdio, Broken())
        """
    )
    stderr = run_script(code, tmp_path)
    assert stderr.count("Traceback (most recent call last)") == 1, stderr
    assert stderr.rstrip().splitlines()[-1] == "Mine: the server's own error"
