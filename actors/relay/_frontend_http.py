"""What every protocol the relay serves shares: the request (:class:`Call`), CORS for a browser
frontend on an allowed origin, and answers in JSON. The protocols' modules (``_openai``,
``_agui``, ``_ui_stream``, ``_a2a``, ``_a2a_jobs``) build on this one; ``_frontends`` routes
requests to them."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from protocols._json import dumpb

from ._asgi import Receive, Scope, Send, _Gone

if TYPE_CHECKING:
    from ._server import RelayServer

__all__ = ["Call", "answer_json", "cors"]


@attrs.frozen
class Call:
    """One HTTP request to a served protocol: its ASGI scope, headers (lower-case names) and
    channel."""

    scope: Scope
    headers: Mapping[str, str]
    receive: Receive
    send: Send


def cors(
    server: RelayServer, scope: Scope, headers: Mapping[str, str]
) -> list[tuple[bytes, bytes]]:
    """The CORS headers of an answer to a request from an allowed browser origin (none for a
    request without ``Origin``: not a browser's; a refused origin never gets this far)."""
    origin = headers.get("origin")
    if origin is None or not server._origin_ok(scope, headers):
        return []
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", b"x-relay-run-id, x-vercel-ai-ui-message-stream"),
        (b"vary", b"origin"),
    ]


async def answer_json(
    send: Send,
    status: int,
    document: Any,
    *,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer ``status`` with ``document`` as JSON (a client that left is not an error)."""
    body = dumpb(document) if not isinstance(document, bytes) else document
    head = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        *extra,
    ]
    with contextlib.suppress(OSError, _Gone):
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body, "more_body": False})
