"""The relay's ASGI plumbing: its routes and limits of one response, the HTTP response outbox,
the page, and the small answers (refusals, lifespan) every route shares.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

import trio

__all__: list[str] = []

log = logging.getLogger("trio_agents.relay")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Frames of one connection that may wait for its sender: enough that a request reads its next
#: upstream delta while the last one is written, bounded so a slow client still parks them.
OUTBOX = 16

RELAY_PATH = "/v1/relay"
STREAM_PATH = "/v1/stream"
_PAGES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
# The page loads only its own files and talks only to its own origin.
_PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# Websocket close codes: policy violation, message too big, going away, try again later.
_POLICY, _TOO_BIG, _GOING_AWAY, _AGAIN = 1008, 1009, 1001, 1013


class _Gone(Exception):
    """The client disconnected."""


class _HttpOut:
    """The response of one plain HTTP request. Its messages leave through one task,
    :meth:`sender`: the ASGI server's send need not be cancellable (hypercorn shields its
    socket writes), so the request waits -- with the send timeout, cancellably -- for the
    sender to take each message, never inside that send. A client that stops reading is cut
    (:meth:`put` raises :class:`_Gone`) once a message has waited ``send_timeout``."""

    def __init__(self, send: Send, send_timeout: float) -> None:
        self._send = send
        self._timeout = send_timeout
        self._in, self._out = trio.open_memory_channel[MutableMapping[str, Any]](OUTBOX)
        self.cut = False
        self.done = trio.Event()

    async def put(self, message: MutableMapping[str, Any]) -> None:
        if self.cut:
            raise _Gone
        with trio.move_on_after(self._timeout) as waited:
            try:
                await self._in.send(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.cut = True
                raise _Gone from None
        if waited.cancelled_caught:
            self.cut = True  # nothing more goes to a client that stops reading
            raise _Gone

    async def put_quietly(
        self, respond: Callable[[Send, int], Awaitable[None]], status: int
    ) -> None:
        """``respond(put, status)``, a client that is gone being no error."""
        with contextlib.suppress(_Gone):
            await respond(self.put, status)

    def close(self) -> None:
        self._in.close()

    async def sender(self) -> None:
        try:
            async with self._out:
                async for message in self._out:
                    if self.cut:
                        return
                    try:
                        await self._send(message)
                    except OSError:  # the transport is gone
                        self.cut = True
                        return
        finally:
            self.done.set()


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    """Cancel ``scope`` once the client has disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _body(data: bytes) -> dict[str, Any]:
    """A part of a streamed response's body (more follows)."""
    return {"type": "http.response.body", "body": data, "more_body": True}


#: The head of every Server-Sent Events answer (with the route's own headers after it).
SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-accel-buffering", b"no"),  # a proxy in front must not hold events back
]


async def _server_sent_events(
    send: Send,
    receive: Receive,
    send_timeout: float,
    headers: Sequence[tuple[bytes, bytes]],
    pump: Callable[[_HttpOut], Awaitable[None]],
) -> None:
    """Answer 200 with Server-Sent Events: the head (:data:`SSE_HEADERS`, then ``headers``),
    then what ``pump`` puts to the outbox, then the body's end -- also when ``pump`` stopped
    because the client stopped reading (:class:`_Gone`), and never after the client left (the
    pump is cancelled then)."""
    out = _HttpOut(send, send_timeout)
    start = {"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *headers]}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
        nursery.start_soon(out.sender)
        try:
            await out.put(start)
            await pump(out)
            with trio.CancelScope(shield=True):
                await out.put({"type": "http.response.body", "body": b"", "more_body": False})
        except _Gone:
            pass  # the client stopped reading: cut
        finally:
            out.close()
        await out.done.wait()
        nursery.cancel_scope.cancel()


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        if key not in headers:  # the first of a repeated header wins
            headers[key] = value.decode("latin-1")
    return headers


def _bearer(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, secret = value.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return secret.strip()


_MISDIRECTED = b"misdirected request: this relay does not answer to that host name\n"


def _text_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"text/plain; charset=utf-8"))
    return headers


async def _plain(
    send: Send, status: int, *, extra: Sequence[tuple[bytes, bytes]] = (), body: bytes = b""
) -> None:
    """A refusal: the status, and no body or a short plain-text one."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*_text_headers(body), (b"cache-control", b"no-store"), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _ws_deny(scope: Scope, send: Send, status: int, *, body: bytes = b"") -> None:
    """Refuse a websocket handshake: with ``status`` (and ``body``) where the server can say
    it, else with a plain close (which ASGI servers answer with 403)."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": _text_headers(body),
            }
        )
        await send({"type": "websocket.http.response.body", "body": body, "more_body": False})
    else:
        await send({"type": "websocket.close", "code": _POLICY})


_STATIC: dict[str, bytes] = {}


async def _page(send: Send, path: str, *, head: bool) -> None:
    name, content_type = _PAGES[path]
    body = _STATIC.get(name)
    if body is None:
        body = importlib.resources.files(__package__).joinpath("static", name).read_bytes()
        _STATIC[name] = body
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"content-security-policy", _PAGE_POLICY.encode()),
                (b"x-content-type-options", b"nosniff"),
                (b"referrer-policy", b"no-referrer"),
                (b"cache-control", b"no-cache"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
