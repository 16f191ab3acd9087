"""What a session's transport did, seen from below the SDK: whether it ended, and what became
of each request we sent.

The SDK answers a request whose connection closed with an ``MCPError`` of code -32000
(``CONNECTION_CLOSED``) -- the very code, the first of JSON-RPC's "server error" range, that
many servers use for an ordinary refusal. So whether a server is gone is never read from an
error's code (or from anything else a server can send): a :class:`Wire` sits between the SDK
and its transport and sees for itself whether the server's stream ended, whether a write
failed, whether an HTTP exchange broke or never reached the server, and which of our requests
the server answered. An error that comes with an answer of the server's is an answer, whatever
its code.

Each SDK call of ours (a tool call, a listing, a heartbeat, a subscription) runs inside an
:class:`Exchange` (:meth:`Wire.exchange`); the wire's write side learns from a context variable
which exchange a request belongs to, so a call knows what happened to its own request without
the SDK telling it the request's id.

On the way in, the wire also sifts ``tools/list`` answers: a tool the protocol does not allow
(an input schema that is not an object's, a name that is not a string) would make the SDK
refuse the whole list, and one with an ``x-mcp-header`` annotation MCP 2026-07-28 forbids
would vanish without a word, so it is taken out before the SDK sees the list, and the
exchange is told which tool and why, in a line a person reads.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, Final

from protocols._schema_root import object_root
from protocols.errors import ProviderError
from protocols.mcp import describe_problems, shown_name

__all__ = ["Exchange", "Wire", "brief_invalid"]

log = logging.getLogger("actors.mcp")

#: The most characters of a reason (a transport error's text) kept.
_REASON_LIMIT: Final = 300

# What the transport saw of one request.
_QUEUED: Final = "queued"  # given to an HTTP transport, which has not begun to post it
_HANDED: Final = "handed"  # given to the transport; whether it reached the server is not known
_ANSWERED: Final = "answered"  # the server's answer (a result or an error) came back for it
_BROKEN: Final = "broken"  # its HTTP exchange broke after it may have reached the server
_UNSENT: Final = "unsent"  # the transport knows it never reached the server (or was not run)

_current: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar(
    "trio_agents_mcp_exchange", default=None
)


def _typed(entry: Any) -> Any:
    """A listed tool whose ``inputSchema`` root is a typeless ``anyOf``/``oneOf`` of object
    schemas, with ``"type": "object"`` added there (:func:`protocols._schema_root.object_root`);
    any other entry as it is."""
    if not isinstance(entry, dict):
        return entry
    schema = entry.get("inputSchema")
    if not isinstance(schema, dict) or "type" in schema:
        return entry
    typed = object_root(schema)
    return entry if typed is None else {**entry, "inputSchema": typed}


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."


def _reason(error: BaseException) -> str:
    return _cut(str(error) or type(error).__name__)


def brief_invalid(error: Any, *, skip: int = 0) -> str:
    """A pydantic ``ValidationError`` in a line a person reads (see
    :func:`protocols.mcp.describe_problems`): never the offending values."""
    return describe_problems(error.errors(include_url=False, include_input=False), skip=skip)


class Exchange:
    """Our side of one SDK call: the requests it sent and what the transport saw of each;
    the tools a ``tools/list`` answer to it had that were taken out, and why."""

    __slots__ = ("_last", "_states", "skipped", "why")

    def __init__(self) -> None:
        self._states: dict[Any, str] = {}
        self._last: Any = None
        #: Why the transport failed this exchange (it broke, or never reached the server).
        self.why: str | None = None
        #: One line per tool a listing had that the protocol does not allow.
        self.skipped: list[str] = []

    @property
    def answered(self) -> bool:
        """Whether the server answered the last request (with a result or an error)."""
        return self._last is not None and self._states.get(self._last) == _ANSWERED

    @property
    def sent(self) -> bool:
        """Whether a request may have reached the server without being answered: if the
        exchange fails, whether what it asked for happened is unknown."""
        return any(state in (_HANDED, _BROKEN) for state in self._states.values())

    def _handed(self, key: Any, state: str) -> None:
        self._states[key] = state
        self._last = key

    def _posting(self, key: Any) -> None:
        if self._states.get(key) == _QUEUED:
            self._states[key] = _HANDED

    def _settle(self, key: Any, state: str, why: str | None = None) -> None:
        # The first word after "queued" or "handed" is final: an answer the SDK makes up for
        # an exchange that broke is no answer of the server's.
        if self._states.get(key) in (_QUEUED, _HANDED):
            self._states[key] = state
            if why is not None:
                self.why = why


class Wire:
    """One session's transport, watched (see the module's docstring).

    :meth:`watch` wraps the SDK transport the session is opened with; :meth:`http_transport`
    wraps the HTTP transport of a streamable-HTTP session. ``ended`` is why the transport
    ended (``None`` while it has not): its stream from the server ended, a write to it
    failed, an HTTP exchange with it failed, or it no longer knows the session.
    """

    def __init__(self) -> None:
        from mcp.shared.dispatcher import coerce_request_id  # noqa: PLC0415 - the optional SDK
        from mcp.shared.inbound import find_invalid_x_mcp_header  # noqa: PLC0415
        from mcp.shared.message import SessionMessage  # noqa: PLC0415
        from mcp.types import (  # noqa: PLC0415
            JSONRPCError,
            JSONRPCRequest,
            JSONRPCResponse,
        )
        from mcp_types.methods import validate_server_result  # noqa: PLC0415
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS  # noqa: PLC0415
        from pydantic import ValidationError  # noqa: PLC0415

        self._key = coerce_request_id
        self._message = SessionMessage
        self._request = JSONRPCRequest
        self._response = JSONRPCResponse
        self._error = JSONRPCError
        self._validate = validate_server_result
        self._header_problem = find_invalid_x_mcp_header
        self._modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        self._invalid = ValidationError
        #: Why the transport ended, once it has.
        self.ended: str | None = None
        #: The protocol version the session speaks, once it is known (for the tool sieve).
        self.version: str | None = None
        # Over HTTP a request handed to the SDK's transport is only queued until it is
        # posted: a request never posted never reached the server.
        self._http = False
        self._pending: dict[Any, tuple[Exchange | None, str]] = {}
        self._on_end: Callable[[str], None] | None = None

    # -- the session's side --------------------------------------------------------------

    @contextlib.contextmanager
    def exchange(self, exchange: Exchange | None = None) -> Iterator[Exchange]:
        """An exchange (``exchange``, or a new one) for the SDK calls made inside the block
        (in this task, and in the tasks it starts)."""
        exchange = exchange if exchange is not None else Exchange()
        token = _current.set(exchange)
        try:
            yield exchange
        finally:
            _current.reset(token)
            for key in exchange._states:
                entry = self._pending.get(key)
                if entry is not None and entry[0] is exchange:
                    del self._pending[key]

    def failure(self, exchange: Exchange) -> str | None:
        """Why the transport failed ``exchange`` -- its own HTTP request broke or never
        reached the server, or the transport ended -- or ``None`` if it did not."""
        return exchange.why or self.ended

    def when_ended(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` when the transport ends (at once if it has)."""
        self._on_end = callback
        if self.ended is not None:
            callback(self.ended)

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
            log.debug("MCP transport ended: %s", reason)
            if self._on_end is not None:
                self._on_end(reason)

    # -- below the SDK ---------------------------------------------------------------------

    def watch(self, transport: Any) -> Any:
        """``transport`` (an SDK transport: an async context manager of a read and a write
        stream), with both streams watched."""
        wire = self

        @asynccontextmanager
        async def watched() -> AsyncIterator[tuple[_Reader, _Writer]]:
            async with transport as (read, write):
                yield _Reader(read, wire), _Writer(write, wire)

        return watched()

    def _sent(self, item: Any) -> Any:
        """Note a request we are about to hand to the transport; its key, if it is ours."""
        message = getattr(item, "message", None)
        if not isinstance(message, self._request):
            return None
        exchange = _current.get()
        if exchange is None and message.method != "tools/list":
            return None
        key = self._key(message.id)
        self._pending[key] = (exchange, message.method)
        if exchange is not None:
            exchange._handed(key, _QUEUED if self._http else _HANDED)
        return key

    def _not_sent(self, key: Any, reason: str) -> None:
        entry = self._pending.get(key)
        if entry is not None and entry[0] is not None:
            entry[0]._settle(key, _UNSENT, reason)

    def _received(self, item: Any) -> Any:
        """Note what came from the transport: the answer to a request of ours (a tools/list
        answer sifted); anything else passes as it is."""
        if not isinstance(item, self._message):
            return item
        message = item.message
        if not isinstance(message, self._response | self._error) or message.id is None:
            return item
        entry = self._pending.pop(self._key(message.id), None)
        if entry is None:
            return item
        exchange, method = entry
        if exchange is not None:
            exchange._settle(self._key(message.id), _ANSWERED)
        if method == "tools/list" and isinstance(message, self._response):
            return self._sift(item, exchange)
        return item

    def _sift(self, item: Any, exchange: Exchange | None) -> Any:
        """A ``tools/list`` answer without the tools the protocol does not allow, each
        noted on ``exchange``: those the SDK would refuse the whole list for, and -- at
        MCP 2026-07-28 -- those with an ``x-mcp-header`` annotation the SDK would drop
        without a word. An answer that is invalid as a whole passes as it is (the SDK
        refuses it, saying why)."""
        result = item.message.result
        listed = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(listed, list):
            return item
        # A union of argument sets at a schema's root, written without ``"type": "object"``
        # (as many servers do), is given it: it admits only objects already, and the SDK
        # refuses a root without it.
        tools = [_typed(entry) for entry in listed]
        retyped = any(new is not old for new, old in zip(tools, listed, strict=True))
        result = {**result, "tools": tools}
        whole = self._problem(result)
        if whole is not None and self._problem({**result, "tools": []}) is not None:
            return item  # (invalid as a whole: the SDK says why)
        modern = self.version in self._modern
        kept: list[Any] = []
        lines: list[str] = []
        for entry in tools:
            problem = self._problem({**result, "tools": [entry]}) if whole is not None else None
            if problem is None and modern and isinstance(entry, dict):
                problem = self._header_problem(entry.get("inputSchema"))
            if problem is None:
                kept.append(entry)
                continue
            name = entry.get("name") if isinstance(entry, dict) else None
            lines.append(f"{shown_name(name)}: not a valid MCP tool ({_cut(problem)})")
        if not lines and not retyped:
            return item
        if exchange is not None:
            exchange.skipped.extend(lines)
        sifted = self._response(jsonrpc="2.0", id=item.message.id, result={**result, "tools": kept})
        return self._message(sifted, metadata=item.metadata)

    def _problem(self, result: dict[str, Any]) -> str | None:
        """What is wrong with a ``tools/list`` result at the session's protocol version (as
        the SDK will check it), or ``None``."""
        try:
            self._validate("tools/list", self.version or "2025-11-25", result)
        except self._invalid as error:
            return brief_invalid(error, skip=2)
        except (KeyError, ValueError):  # a version the SDK does not check a listing at
            return None
        return None

    # -- streamable HTTP ---------------------------------------------------------------------

    def http_transport(self, inner: Any) -> Any:
        """``inner`` (an ``httpx2`` transport) with every POST watched: a POST that fails
        ends the transport -- before it reached the server (it could not connect) its
        request is known not to have been sent -- and so does a 404 to a request that
        named a session (the server no longer knows it: its request was not run). A
        response that goes quiet for the read timeout breaks off that exchange only."""
        import httpx2  # noqa: PLC0415 - the mcp SDK's HTTP client

        wire = self
        self._http = True
        unsent = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, ProviderError)
        # A response that went quiet for the client's read timeout (a subscription with
        # nothing to say, a slow tool) broke off that exchange; it says nothing of the server.
        idle = httpx2.ReadTimeout

        class Body(httpx2.AsyncByteStream):
            """A response's body: an error reading it ends the transport."""

            def __init__(self, stream: Any, key: Any) -> None:
                self._stream = stream
                self._key = key

            def __aiter__(self) -> AsyncIterator[bytes]:
                return _Chunks(
                    self._stream.__aiter__(),
                    lambda error: wire._http_failed(
                        self._key, error, sent=True, ends=not isinstance(error, idle)
                    ),
                )

            async def aclose(self) -> None:
                await self._stream.aclose()

        class Watched(httpx2.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
                if request.method != "POST":
                    passed: httpx2.Response = await inner.handle_async_request(request)
                    return passed
                key = wire._request_key(request)
                wire._posting(key)
                try:
                    response = await inner.handle_async_request(request)
                except Exception as error:
                    wire._http_failed(key, error, sent=not isinstance(error, unsent))
                    raise
                if response.status_code == 404 and request.headers.get("mcp-session-id"):
                    why = "it no longer knows this session (HTTP 404)"
                    wire._not_sent(key, why)
                    wire.end(why)
                return httpx2.Response(
                    response.status_code,
                    headers=response.headers,
                    stream=Body(response.stream, key),
                    extensions=response.extensions,
                )

            async def aclose(self) -> None:
                await inner.aclose()

        return Watched()

    def _posting(self, key: Any) -> None:
        entry = self._pending.get(key) if key is not None else None
        if entry is not None and entry[0] is not None:
            entry[0]._posting(key)

    def _request_key(self, request: Any) -> Any:
        """The key of the JSON-RPC request a POST carries, if it is one of ours."""
        if not self._pending:
            return None
        try:
            body = json.loads(request.content)
        except (ValueError, TypeError, AttributeError, RuntimeError):
            return None
        if isinstance(body, dict) and "method" in body and isinstance(body.get("id"), str | int):
            key = self._key(body["id"])
            return key if key in self._pending else None
        return None

    def _http_failed(
        self, key: Any, error: BaseException, *, sent: bool, ends: bool = True
    ) -> None:
        reason = _reason(error)
        entry = self._pending.get(key) if key is not None else None
        if entry is not None and entry[0] is not None:
            entry[0]._settle(key, _BROKEN if sent else _UNSENT, reason)
        if ends:
            self.end(reason)


class _Chunks:
    """An HTTP body's chunks; ``failed(error)`` is told of an error reading them."""

    def __init__(self, chunks: Any, failed: Callable[[BaseException], None]) -> None:
        self._chunks = chunks
        self._failed = failed

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk: bytes = await self._chunks.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as error:
            self._failed(error)
            raise
        return chunk


class _Reader:
    """The SDK's read stream, watched: its end ends the wire; answers are noted."""

    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner = inner
        self._wire = wire

    @property
    def last_context(self) -> contextvars.Context | None:
        # The SDK runs what it receives in the sender's context, when the stream has it.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        import anyio  # noqa: PLC0415

        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._wire.end("its connection closed")
            raise
        return self._wire._received(item)

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Any:
        import anyio  # noqa: PLC0415

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Reader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Writer:
    """The SDK's write stream, watched: a failed write ends the wire; our requests are
    noted with the exchange they belong to."""

    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner = inner
        self._wire = wire

    async def send(self, item: Any, /) -> None:
        import anyio  # noqa: PLC0415

        key = self._wire._sent(item)
        try:
            await self._inner.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            if key is not None:
                self._wire._not_sent(key, "its connection closed")
            self._wire.end("its connection closed")
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Writer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
