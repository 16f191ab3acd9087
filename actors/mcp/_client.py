"""``MCPConnection``: the tools of an MCP server, in a tool registry, through a supervised session.

One actor owns each session: the SDK's client (its anyio task group, its streams, its request
ids) is opened, used and closed by that actor's task and the tasks it starts, so no cancel
scope is ever left from another task. A session that dies (its process exits, its HTTP server
goes away, the heartbeat goes unanswered) fails the actor; a supervisor of its own starts a new one
after a backoff, which lists the tools again. The servers it speaks to, and the HTTP client it
opens for one at a URL, are ``_servers``'.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from protocols.egress import Refusal
from protocols.errors import ConfigError
from protocols.mcp import MAX_RESULT_CHARS, Listing, read_listing, read_result
from protocols.messages import ToolCall, ToolDefinition, ToolFailure, ToolResult
from protocols.toolschema import validate_arguments

from .._core._actor import Actor, ActorRef
from .._core._supervisor import Backoff, ChildSpec, Restart, Supervisor
from ..tools import ToolRegistry
from ._servers import (
    MCPServerSpec,
    StdioServer,
    StreamableHTTPServer,
    _http_client,
    _label,
)
from ._wire import Exchange, Wire, brief_invalid

if TYPE_CHECKING:
    from .._runtime import Runtime

__all__ = ["MCPConnection", "MCPStatistics", "MCPTool", "StdioServer", "StreamableHTTPServer"]

log = logging.getLogger("actors.mcp")

#: The most characters of a server's error message a model is shown.
_MESSAGE_LIMIT = 500


def _sdk() -> Any:
    try:
        import mcp  # noqa: PLC0415 - an optional extra, loaded when a session starts
    except ImportError:
        raise ConfigError("MCP needs the mcp package: pip install 'trio-agents[mcp]'") from None
    return mcp


@attrs.frozen
class MCPStatistics:
    """A snapshot of a connection."""

    #: Whether a session is up now (false while it restarts).
    connected: bool
    #: How many times a new session was up after one died.
    restarts: int
    #: The local names of the server's tools now in the registry.
    tools: tuple[str, ...]
    #: Tools the server listed that were left out, each with why.
    skipped: tuple[str, ...]
    #: Calls sent to the server, and those whose outcome is unknown because their session
    #: ended under them (it died, or the connection was closed).
    calls: int
    lost: int


class _SessionLost(Exception):
    """The session died: its actor fails, and its supervisor starts another one."""


class _ListingRefused(Exception):
    """The server answered ``tools/list`` with an error, or with a list that is not valid
    MCP as a whole: it is alive, but gave no tools."""


class _Live:
    """One session while it is up: the SDK client, its watched transport, and the nursery
    its calls run in."""

    def __init__(
        self, client: Any, wire: Wire, nursery: trio.Nursery, down: Callable[[], None]
    ) -> None:
        self.client = client
        self.wire = wire
        self.nursery = nursery
        self.lost = trio.Event()
        self.reason = ""
        self._down = down

    def lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.reason = reason
            self.lost.set()
            self._down()


class MCPTool:
    """One tool of an MCP server, as the registry sees it (a
    :class:`~actors.tools.CallableTool`)."""

    def __init__(self, connection: MCPConnection, definition: ToolDefinition, remote: str) -> None:
        self._connection = connection
        self._definition = definition
        self.remote = remote

    @property
    def definition(self) -> ToolDefinition:
        """The tool as the server listed it, under its local name."""
        return self._definition

    async def call(self, call: ToolCall) -> ToolResult:
        """Validate ``call``'s arguments against the tool's schema, send it, and give back
        the server's answer as a result; every failure is a result the model sees."""
        return await self._connection._call(self, call)

    def __repr__(self) -> str:
        return f"<MCPTool {self._definition.name!r} of {self._connection.name!r}>"


class _SessionActor(Actor[None, None]):
    """Owns one session (one incarnation): opens it, keeps it, and fails when it dies."""

    def __init__(self, connection: MCPConnection) -> None:
        self._connection = connection

    async def on_start(self) -> None:
        await self.nursery.start(self._serve)

    async def handle(self, message: None) -> None:
        return None

    async def _serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        connection = self._connection
        from mcp.types import ToolListChangedNotification  # noqa: PLC0415

        changed_send, changed = trio.open_memory_channel[None](1)

        async def on_message(message: Any) -> None:
            if isinstance(message, ToolListChangedNotification):
                with contextlib.suppress(trio.WouldBlock):  # a re-list is already due
                    changed_send.send_nowait(None)
            await trio.lowlevel.checkpoint()

        # The start (the process or the connection, the handshake, the tool list) must be
        # done within `timeout`; the deadline is lifted once it is.
        with trio.CancelScope(deadline=trio.current_time() + connection.timeout) as starting:
            async with connection._open(on_message) as (client, wire):
                await connection._relist(client, wire)
                starting.deadline = math.inf
                connection._sessions += 1
                await self._keep(client, wire, changed, task_status)
        if starting.cancelled_caught:
            raise _SessionLost(
                f"MCP server {connection.name!r} did not answer within {connection.timeout:g} s"
            )

    async def _keep(
        self,
        client: Any,
        wire: Wire,
        changed: trio.MemoryReceiveChannel[None],
        task_status: trio.TaskStatus[None],
    ) -> None:
        connection = self._connection
        try:
            async with trio.open_nursery() as nursery:
                live = _Live(client, wire, nursery, connection._down)
                # The transport ending is the session's death, noticed at once: with a call
                # in flight or not, with a heartbeat or not.
                wire.when_ended(live.lose)
                connection._live = live
                connection._up.set()
                task_status.started()
                nursery.start_soon(self._heartbeat, live)
                nursery.start_soon(self._watch_list, live, changed)
                await live.lost.wait()
                raise _SessionLost(f"MCP server {connection.name!r}: {live.reason}")
        finally:
            if connection._live is not None and connection._live.client is client:
                connection._live = None
                connection._down()

    async def _heartbeat(self, live: _Live) -> None:
        """Every ``heartbeat`` seconds, ask the server for its tools (MCP 2026-07-28 has no
        ping; every server answers ``tools/list``). No answer within the interval, or a
        transport that failed (see :class:`~actors.mcp._wire.Wire`), means the session died;
        an answer -- an error of any code too -- means the server is alive."""
        interval = self._connection.heartbeat
        if interval is None:
            return
        while True:
            await trio.sleep(interval)
            with live.wire.exchange() as exchange:
                try:
                    with trio.fail_after(interval):
                        await live.client.list_tools()
                except trio.TooSlowError:
                    live.lose(f"no answer within {interval:g} s")
                    return
                except Exception as error:
                    if exchange.answered:
                        continue  # the server answered: it refused, or listed nonsense
                    why = live.wire.failure(exchange) or _describe(error)
                    live.lose(f"it stopped answering: {why}")
                    return

    async def _watch_list(self, live: _Live, changed: trio.MemoryReceiveChannel[None]) -> None:
        """List the tools again whenever the server says they changed: through a
        ``subscriptions/listen`` stream (MCP 2026-07-28), else through the
        ``notifications/tools/list_changed`` the message handler hears (earlier versions).

        A subscription the server refuses (an error answer, of any code) means it has none:
        its notifications are heard instead. One that the server ends without its graceful
        close while the transport is up is opened again after the connection's backoff, and
        the tools listed again (what changed in between would be missed otherwise). Only the
        transport failing ends the session."""
        from mcp.client.subscriptions import ListenNotSupportedError  # noqa: PLC0415

        connection = self._connection
        rng = random.Random()
        attempt = 0
        while True:
            acked = False
            reason = ""
            try:
                async with live.client.listen(tools_list_changed=True) as subscription:
                    acked = True
                    if attempt:
                        await self._relist_live(live)
                    async for _ in subscription:
                        attempt = 0
                        await self._relist_live(live)
                break  # closed gracefully: what it says now comes as notifications
            except ListenNotSupportedError:
                break  # a handshake-era server: its notifications come to the handler
            except Exception as error:
                if live.wire.ended is not None or live.lost.is_set():
                    why = live.wire.ended or _describe(error)
                    live.lose(f"its change notifications stopped: {why}")
                    return
                if not acked:
                    log.debug(
                        "MCP server %r: no subscriptions/listen (%s)",
                        connection.name,
                        _describe(error),
                    )
                    break
                reason = _describe(error)
            delay = connection.backoff.delay(attempt, rng)
            attempt += 1
            log.info(
                "MCP server %r ended its change subscription (%s); listening again in %.2g s",
                connection.name,
                reason,
                delay,
            )
            await trio.sleep(delay)
        async for _ in changed:
            await self._relist_live(live)

    async def _relist_live(self, live: _Live) -> None:
        """List the tools again; a server that answers with an error keeps its session and
        its last tools, and only a failed transport ends it."""
        try:
            await self._connection._relist(live.client, live.wire)
        except _ListingRefused as refused:
            log.warning(
                "MCP server %r: listing its tools again failed, the last list stays: %s",
                self._connection.name,
                refused,
            )
        except Exception as error:
            live.lose(f"listing its tools failed: {live.wire.ended or _describe(error)}")


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    if _invalid(error):
        return f"an answer that is not valid MCP ({brief_invalid(error)})"
    text = str(error).strip() or type(error).__name__
    return text[:_MESSAGE_LIMIT]


def _invalid(error: BaseException) -> bool:
    """Whether ``error`` is pydantic's: something the SDK read is not valid MCP."""
    try:
        from pydantic import ValidationError  # noqa: PLC0415 - the optional SDK's
    except ImportError:  # pragma: no cover - installed with the SDK
        return False
    return isinstance(error, ValidationError)


class MCPConnection:
    """An MCP server's tools in a :class:`~actors.tools.ToolRegistry`, over a session kept up
    by a supervised actor.

    Guarantees:

    * :meth:`start` returns once the first session is up and its tools are registered (under
      ``prefix`` + their names; tools whose names clash with the registry's other tools are
      left out and named in :meth:`statistics`). It raises if the server cannot be started or
      reached, or refuses the handshake.
    * A call's arguments are checked against the tool's input schema first: a call that does
      not fit is answered with the problems and never sent.
    * The agent's authority decides each call before it is sent, as for any tool.
    * A call whose run is cut (a cancel, a deadline, a budget) is cancelled on the server too:
      MCP's cancellation notification is sent.
    * A server's answer is an answer: a call it answers with a JSON-RPC error -- of any
      code, -32000 (which the SDK also uses for a closed connection) among them -- gets a
      result saying what the server said, and its session stays. Whether a server died is
      decided from its transport, never from what it sends: its process's output ended, a
      write to it failed, an HTTP exchange with it failed or it no longer knows the session
      (HTTP 404), or it left the heartbeat's ``tools/list`` unanswered.
    * When the session dies, every call in flight is answered with an error saying the
      server went away and the call's outcome is unknown -- or, for a call the transport
      knows never reached the server (it could not connect), that it was not sent; calls
      made while it is down are answered at once that it is not connected (never sent, never
      waiting for ever). A new session is started after a backoff, for as long as the
      connection is open, and lists the tools again: the registry follows.
    * A tool the protocol does not allow (an input schema that is not an object's, a name
      that is not a string) costs that tool only: it is left out and named, with why, in
      :meth:`statistics`, at the start and at every new listing.
    * ``notifications/tools/list_changed`` makes the session list the tools again and the
      registry follow: new tools added, changed ones replaced, gone ones removed.
    * :meth:`aclose` stops the session (ending a stdio server's process) and removes the
      tools from the registry; a call in flight then, or made later through a tool kept
      from the registry, is answered that the connection is closed.
    """

    def __init__(
        self,
        server: MCPServerSpec,
        registry: ToolRegistry,
        *,
        name: str,
        prefix: str,
        heartbeat: float | None,
        timeout: float,
        max_result_chars: int,
        backoff: Backoff | None = None,
    ) -> None:
        self.server = server
        #: How restarts (and re-opened change subscriptions) are spaced.
        self.backoff = backoff or Backoff(initial=0.5, maximum=30.0, reset_after=60.0)
        self.timeout = timeout
        self.registry = registry
        self.name = name
        self.prefix = prefix
        self.heartbeat = heartbeat
        self.max_result_chars = max_result_chars
        self._live: _Live | None = None
        self._up = trio.Event()  # set while a session is up; a new one after each loss
        self._tools: dict[str, MCPTool] = {}
        self._skipped: tuple[str, ...] = ()
        self._ref: ActorRef[Any, Any] | None = None
        self._sessions = 0
        self._calls = 0
        self._lost = 0
        self._closed = False
        # The egress guard's last refusal: the SDK answers a failed request with an error of its
        # own, and this is what the error really was.
        self.refusal: Refusal | None = None

    @classmethod
    async def start(
        cls,
        runtime: Runtime,
        server: MCPServerSpec,
        *,
        tools: ToolRegistry,
        name: str | None = None,
        prefix: str = "",
        backoff: Backoff | None = None,
        heartbeat: float | None = 15.0,
        timeout: float = 30.0,  # noqa: ASYNC109 - each session's start, not start()'s
        max_result_chars: int = MAX_RESULT_CHARS,
    ) -> MCPConnection:
        """Start a session with ``server`` under ``runtime`` and put its tools into ``tools``.

        ``backoff`` spaces the restarts of a dead session (default: 0.5 s doubling to 30 s);
        ``heartbeat`` is how often a session asks for the tools to find out it died (``None``:
        never; a dead session is then noticed at its next call); ``timeout`` bounds each
        session's start (the process or the connection, the handshake and the tool list).
        """
        if not isinstance(server, StdioServer | StreamableHTTPServer):
            raise ConfigError(
                "an MCP server is a StdioServer or a StreamableHTTPServer, "
                f"not {type(server).__name__}"
            )
        if heartbeat is not None and not (heartbeat > 0 and math.isfinite(heartbeat)):
            raise ConfigError(f"heartbeat must be a number of seconds > 0, not {heartbeat!r}")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ConfigError(f"timeout must be a number of seconds > 0, not {timeout!r}")
        if isinstance(max_result_chars, bool) or not isinstance(max_result_chars, int):
            raise ConfigError("max_result_chars must be an integer >= 1")
        if max_result_chars < 1:
            raise ConfigError("max_result_chars must be an integer >= 1")
        if prefix and not all(c.isalnum() or c in "_-" for c in prefix):
            raise ConfigError(f"a tool-name prefix holds letters, digits, _ and - only: {prefix!r}")
        _sdk()
        label = name or f"mcp-{_label(server)}"
        connection = cls(
            server,
            tools,
            name=label,
            prefix=prefix,
            heartbeat=heartbeat,
            timeout=timeout,
            max_result_chars=max_result_chars,
            backoff=backoff,
        )

        def session() -> _SessionActor:
            return _SessionActor(connection)

        session.__name__ = f"{label}-session"
        spec = ChildSpec(session, name=f"{label}-session", restart=Restart.PERMANENT, shutdown=5.0)

        def supervisor() -> Supervisor:
            # The session restarts for as long as the connection is open: the backoff bounds
            # how often, so the intensity limit is never what stops it.
            return Supervisor(
                [spec],
                max_restarts=sys.maxsize,
                period=1.0,
                backoff=connection.backoff,
            )

        supervisor.__name__ = label
        try:
            connection._ref = await runtime.spawn(
                supervisor, name=name, restart=Restart.TRANSIENT, shutdown=10.0
            )
        except Exception as error:
            connection._unregister()
            why = str(connection.refusal) if connection.refusal is not None else _describe(error)
            raise ConfigError(
                f"MCP server {label!r} ({server.describe()}) could not be started: {why}"
            ) from None
        return connection

    @asynccontextmanager
    async def _open(self, on_message: Callable[[Any], Any]) -> AsyncIterator[tuple[Any, Wire]]:
        """The SDK client of one session and its watched transport, entered and left in the
        calling task."""
        mcp = _sdk()
        server = self.server
        wire = Wire()
        if isinstance(server, StdioServer):
            from mcp.client.stdio import stdio_client  # noqa: PLC0415

            params = mcp.StdioServerParameters(
                command=server.command, args=list(server.args), env=server.env, cwd=server.cwd
            )
            transport = wire.watch(stdio_client(params, errlog=server.stderr or sys.stderr))
            async with mcp.Client(transport, message_handler=on_message, cache=None) as client:
                wire.version = client.protocol_version
                yield client, wire
            return
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        async with _http_client(server, self, wire) as http:
            transport = wire.watch(streamable_http_client(server.url, http_client=http))
            async with mcp.Client(transport, message_handler=on_message, cache=None) as client:
                wire.version = client.protocol_version
                yield client, wire

    async def _relist(self, client: Any, wire: Wire) -> None:
        """List the server's tools (every page) and make the registry match. Raises
        :class:`_ListingRefused` when the server answered with an error (or with a list that
        is not valid MCP as a whole); a tool it may not list is left out, and said why."""
        entries: list[dict[str, Any]] = []
        invalid: list[str] = []
        cursor: str | None = None
        for _ in range(1000):  # a server whose pages never end cannot hold a session for ever
            with wire.exchange() as exchange:
                try:
                    page = await client.list_tools(cursor=cursor)
                except Exception as error:
                    if exchange.answered:
                        if _invalid(error):
                            why = f"its tool list is not valid MCP ({brief_invalid(error)})"
                        else:
                            why = f"it refused to list its tools: {_describe(error)}"
                        raise _ListingRefused(why) from None
                    raise
            invalid.extend(exchange.skipped)
            entries.extend(
                tool.model_dump(by_alias=True, mode="json", exclude_none=True)
                for tool in page.tools
            )
            cursor = page.next_cursor
            if not cursor:
                break
        taken = [name for name in _names(self.registry) if name not in self._tools]
        listing = read_listing(entries, prefix=self.prefix, taken=taken)
        self._install(attrs.evolve(listing, skipped=(*invalid, *listing.skipped)))

    def _install(self, listing: Listing) -> None:
        if self._closed:
            return
        fresh = {
            name: MCPTool(self, definition, listing.remote[name])
            for name, definition in listing.tools.items()
        }
        gone = [name for name in self._tools if name not in fresh]
        if gone:
            self.registry.remove(*gone)
        for tool in fresh.values():
            self.registry.add(tool, replace=True)
        self._tools = fresh
        self._skipped = listing.skipped
        for reason in listing.skipped:
            log.warning("MCP server %r: tool left out: %s", self.name, reason)

    def _unregister(self) -> None:
        if self._tools:
            self.registry.remove(
                *[n for n in self._tools if self.registry.get(n) is self._tools[n]]
            )
        self._tools = {}

    async def _call(self, tool: MCPTool, call: ToolCall) -> ToolResult:
        problems = validate_arguments(tool.definition.parameters, call.arguments)
        if problems:
            return ToolFailure(
                id=call.id,
                name=call.name,
                error="invalid arguments, the call was not sent: " + "; ".join(problems),
            )
        if self._closed:
            return self._closed_result(call, sent=False)
        live = self._live
        if live is None or live.lost.is_set():
            return self._not_connected(call)
        outcome: list[Any] = []
        finished = trio.Event()
        cancel = trio.CancelScope()
        exchange = Exchange()

        async def attempt() -> None:
            try:
                with live.wire.exchange(exchange), cancel:
                    outcome.append(await live.client.call_tool(tool.remote, dict(call.arguments)))
            except Exception as error:
                outcome.append(error)
            finally:
                finished.set()

        try:
            live.nursery.start_soon(attempt)
        except RuntimeError:  # the session's nursery is closing: it is going down
            if self._is_closed():
                return self._closed_result(call, sent=False)
            return self._not_connected(call)
        self._calls += 1
        try:
            await finished.wait()
        finally:
            if not finished.is_set():
                cancel.cancel()  # the caller was cut: the SDK tells the server to stop
        answer = outcome[0] if outcome else None
        if answer is not None and not isinstance(answer, Exception):
            return read_result(
                call.id,
                call.name,
                answer.model_dump(by_alias=True, mode="json", exclude_none=True),
                limit=self.max_result_chars,
            )
        if answer is not None and exchange.answered:
            return self._answered_with(call, answer)
        # No answer came: what the transport saw decides, never the error's code.
        sent = exchange.sent
        if self._is_closed():
            return self._closed_result(call, sent=sent)
        if live.wire.ended is not None or answer is None or live.lost.is_set():
            reason = live.wire.failure(exchange) or live.reason or "the session ended"
            live.lose(reason)
            return self._went_away(call, reason, sent=sent)
        # The transport is up, and the server said nothing: the call's own exchange broke
        # off (its answer went quiet), or the SDK failed the call itself.
        why = exchange.why or _describe(answer)
        return ToolFailure(
            id=call.id,
            name=call.name,
            error=(
                f"the MCP call failed{'' if sent else ' before it was sent'}: {why}"
                + ("; whether the call had an effect is unknown" if sent else "")
            ),
        )

    def _answered_with(self, call: ToolCall, error: Exception) -> ToolFailure:
        """The result of a call the server answered with a JSON-RPC error, or with an answer
        the SDK could not read or use."""
        from mcp import MCPError  # noqa: PLC0415 - loaded with the session that raised it

        if isinstance(error, MCPError):
            text = (
                f"the MCP server answered with an error: {_describe(error)} "
                f"(JSON-RPC error {error.code})"
            )
        else:
            text = f"the MCP server's answer could not be used: {_describe(error)}"
        return ToolFailure(id=call.id, name=call.name, error=text)

    def _not_connected(self, call: ToolCall) -> ToolFailure:
        return ToolFailure(
            id=call.id,
            name=call.name,
            error=(
                f"the MCP server {self.name!r} is not connected (it is being restarted); "
                "the call was not sent: try again later"
            ),
        )

    def _closed_result(self, call: ToolCall, *, sent: bool) -> ToolFailure:
        if sent:
            self._lost += 1
            error = (
                f"the MCP connection {self.name!r} was closed during the call; whether the "
                "call had an effect is unknown"
            )
        else:
            error = f"the MCP connection {self.name!r} is closed; the call was not sent"
        return ToolFailure(id=call.id, name=call.name, error=error)

    def _went_away(self, call: ToolCall, reason: str, *, sent: bool = True) -> ToolFailure:
        if not sent:
            return ToolFailure(
                id=call.id,
                name=call.name,
                error=(
                    f"the MCP server {self.name!r} went away before the call was sent "
                    f"({reason}); the call was not sent. The server is being restarted: try "
                    "again later."
                ),
            )
        self._lost += 1
        return ToolFailure(
            id=call.id,
            name=call.name,
            error=(
                f"the MCP server {self.name!r} went away during the call ({reason}); whether "
                "the call had an effect is unknown. The server is being restarted."
            ),
        )

    def _is_closed(self) -> bool:
        return self._closed

    def _down(self) -> None:
        if self._up.is_set():
            self._up = trio.Event()

    async def wait_connected(self) -> None:
        """Return once a session is up (at once if one is): after a server died, once it is
        back and its tools are listed again. Bounded only by the caller's scope."""
        while True:
            await self._up.wait()  # a lost session replaces it with an unset one at once
            live = self._live
            if live is not None and not live.lost.is_set():
                return

    @property
    def tools(self) -> tuple[str, ...]:
        """The local names of the server's tools now in the registry."""
        return tuple(self._tools)

    def statistics(self) -> MCPStatistics:
        """A snapshot (see :class:`MCPStatistics`)."""
        live = self._live
        return MCPStatistics(
            connected=live is not None and not live.lost.is_set(),
            restarts=max(0, self._sessions - 1),
            tools=tuple(self._tools),
            skipped=self._skipped,
            calls=self._calls,
            lost=self._lost,
        )

    async def aclose(self) -> None:
        """Stop the session (and its restarts) and take the server's tools out of the
        registry. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._ref is not None:
                await self._ref.stop()
        finally:
            self._live = None
            self._unregister()

    async def __aenter__(self) -> MCPConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<MCPConnection {self.name!r} {self.server.describe()!r} tools={len(self._tools)}>"


def _names(registry: ToolRegistry) -> Iterable[str]:
    return (tool.definition.name for tool in registry.tools())
