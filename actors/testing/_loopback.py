"""What the testing kit's HTTP servers share: a loopback listener with a clean shutdown, and one
HTTP/1.1 exchange on h11 (the HTTP state machine httpx itself uses) with a bounded request read."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Self

import attrs
import h11
import trio

from .._core._errors import OneCause

__all__ = ["Exchange", "LoopbackServer", "Request", "RequestTooLarge"]

_RECEIVE = 65536


class RequestTooLarge(Exception):
    """The request (head and body) exceeded the server's limit."""


@attrs.frozen
class Request:
    """One request as read: method, target path (query dropped), lower-cased headers, body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Exchange:
    """One server-side HTTP/1.1 connection: read requests, send responses, keep alive."""

    def __init__(self, stream: trio.SocketStream, max_request_bytes: int) -> None:
        self.stream = stream
        self.connection = h11.Connection(h11.SERVER, max_incomplete_event_size=max_request_bytes)
        self._limit = max_request_bytes

    async def read_request(self) -> Request | None:
        """The next whole request, or ``None`` when the client closed or spoke bad HTTP.

        Raises :class:`RequestTooLarge` once more than the limit has arrived for one request.
        """
        head: h11.Request | None = None
        head_size = 0
        body = bytearray()
        while True:
            try:
                event = self.connection.next_event()
            except h11.RemoteProtocolError as error:
                if error.error_status_hint == 431:  # the head alone is over the limit
                    raise RequestTooLarge from None
                return None
            if isinstance(event, h11.Request):
                head = event
                # The head as sent, near enough: request line plus "name: value\r\n" lines.
                head_size = len(event.method) + len(event.target) + 12
                head_size += sum(len(name) + len(value) + 4 for name, value in event.headers)
                declared = 0
                for name, value in event.headers:
                    if name == b"content-length":
                        declared = int(value)
                if head_size + declared > self._limit:
                    raise RequestTooLarge  # refused before the body is read
            elif isinstance(event, h11.Data):
                body += event.data
                if head_size + len(body) > self._limit:
                    raise RequestTooLarge
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                target = head.target.decode("ascii", "replace").split("?", 1)[0]
                headers = {
                    name.decode("latin-1").lower(): value.decode("latin-1")
                    for name, value in head.headers
                }
                return Request(head.method.decode("ascii", "replace"), target, headers, bytes(body))
            elif event is h11.NEED_DATA:
                try:
                    data = await self.stream.receive_some(_RECEIVE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return None
                self.connection.receive_data(data)
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def send(self, event: Any) -> None:
        """Send one h11 event (raises ``trio.BrokenResourceError`` when the client is gone)."""
        data = self.connection.send(event)
        if data:
            await self.stream.send_all(data)

    async def send_json(
        self,
        status: int,
        body: bytes,
        *,
        close: bool = False,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """A complete JSON response (``close`` also ends the connection after it)."""
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            *headers,
        ]
        if close:
            headers.append(("connection", "close"))
        await self.send(h11.Response(status_code=status, headers=headers))
        await self.send(h11.Data(data=body))
        await self.send(h11.EndOfMessage())

    def next_cycle(self) -> bool:
        """Get ready for the next request on this connection; False if it must close instead."""
        connection = self.connection
        if connection.our_state is h11.DONE and connection.their_state is h11.DONE:
            connection.start_next_cycle()
            return True
        return False


class LoopbackServer:
    """Base of the testing kit's servers: listens on a free port, one task per connection, and
    :meth:`aclose` (or leaving the ``async with`` block) stops the listener and every handler."""

    #: What the server is called in error messages.
    kind = "server"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._want_port = port
        self._port: int | None = None
        self._stack: AsyncExitStack | None = None

    @property
    def port(self) -> int:
        """The TCP port it listens on (once started)."""
        if self._port is None:
            raise RuntimeError(f"the {self.kind} is not running")
        return self._port

    @property
    def origin(self) -> str:
        """``http://<host>:<port>``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError(f"the {self.kind} is already running")
        stack = AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        try:
            serve = functools.partial(
                trio.serve_tcp, self._handle, self._want_port, host=self._host
            )
            listeners: list[trio.SocketListener] = await nursery.start(serve)
        except BaseException:
            await stack.aclose()
            raise
        self._port = listeners[0].socket.getsockname()[1]
        stack.callback(nursery.cancel_scope.cancel)
        self._stack = stack
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # The block ran inside the listener's nursery: its exception goes through the nursery
        # (which never swallows it: only a handler's failure cancels the nursery while the
        # block runs, and that failure is raised instead) and comes out as itself, never in an
        # exception group.
        with OneCause(own=error):
            stack, self._stack = self._stack, None
            self._port = None
            if stack is not None:
                await stack.__aexit__(kind, error, traceback)

    async def aclose(self) -> None:
        """Stop listening and end every connection handler (idempotent)."""
        await self.__aexit__(None, None, None)

    async def _handle(self, stream: trio.SocketStream) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
