"""Where the relay's served protocols are routed: the paths of AG-UI, the AI SDK's UI message
stream, OpenAI's chat completions and A2A, and a browser's CORS preflight.

* ``POST /v1/chat/completions``: OpenAI's chat completions (:mod:`._openai`);
* ``POST /v1/agui`` and ``POST /v1/agui/{agent}``: AG-UI (:mod:`._agui`);
* ``POST /v1/chat`` and ``POST /v1/chat/{agent}``, and ``GET`` of either's
  ``/{chat id}/stream``: the AI SDK's UI message stream and its resume (:mod:`._ui_stream`);
* ``/a2a/{agent}``: A2A's JSON-RPC, and its agent card (:mod:`._a2a`).

What they share (the request, CORS, answers in JSON) is ``_frontend_http``; this module imports
the protocols' modules only when a request for one comes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ._asgi import Receive, Scope, Send
from ._frontend_http import Call, answer_json, cors

if TYPE_CHECKING:
    from ._server import RelayServer


#: A route: given the server, the request, and the path's parameters (its segments after the
#: route's prefix).
Route = Callable[["RelayServer", Call, Sequence[str]], Awaitable[None]]

#: The path prefixes served here, each with the module that answers them.
PREFIXES = ("/v1/chat", "/v1/agui", "/a2a/")

#: How long a browser may keep a preflight's answer (seconds).
_PREFLIGHT_AGE = b"600"


def served(path: str) -> bool:
    """Whether ``path`` is one of the served protocols'."""
    return path.startswith(PREFIXES)


async def preflight(
    server: RelayServer, scope: Scope, headers: Mapping[str, str], send: Send
) -> None:
    """Answer a CORS preflight: 204 allowing ``POST``/``GET`` with the bearer and JSON
    headers for an allowed origin; 403 for any other."""
    if headers.get("origin") is None or not server._origin_ok(scope, headers):
        server._refuse("forbidden_origin")
        await answer_json(send, 403, {"error": "this origin may not use the relay"})
        return
    extra = [
        *cors(server, scope, headers),
        (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
        (b"access-control-allow-headers", b"authorization, content-type, last-event-id"),
        (b"access-control-max-age", _PREFLIGHT_AGE),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": extra})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def http_served(
    server: RelayServer, scope: Scope, headers: Mapping[str, str], receive: Receive, send: Send
) -> None:
    """Answer a request to one of the served protocols' paths (404 for a path none has; 405
    with ``Allow`` for a method its route does not take)."""
    path: str = scope.get("path", "")
    method: str = scope.get("method", "GET")
    if method == "OPTIONS":
        await preflight(server, scope, headers, send)
        return
    parts = [part for part in path.split("/") if part]
    route: Route | None = None
    allowed = b"POST"
    params: list[str] = []
    if parts[:3] == ["v1", "chat", "completions"] and len(parts) == 3:
        from ._openai import completions  # noqa: PLC0415

        route = completions
    elif parts[:2] == ["v1", "chat"] and len(parts) <= 3:
        from ._ui_stream import chat  # noqa: PLC0415

        route, params = chat, parts[2:]
    elif parts[:2] == ["v1", "chat"] and len(parts) in (4, 5) and parts[-1] == "stream":
        from ._ui_stream import resume  # noqa: PLC0415

        route, params, allowed = resume, parts[2:-1], b"GET"
    elif parts[:2] == ["v1", "agui"] and len(parts) <= 3:
        from ._agui import run  # noqa: PLC0415

        route, params = run, parts[2:]
    elif parts[:1] == ["a2a"] and len(parts) >= 2:
        from ._a2a import route as a2a  # noqa: PLC0415

        route, params, allowed = a2a, parts, b"GET, POST"
    if route is None:
        await answer_json(send, 404, {"error": "not found"}, extra=cors(server, scope, headers))
        return
    if method.encode() not in allowed.split(b", "):
        await answer_json(
            send,
            405,
            {"error": "method not allowed"},
            extra=[(b"allow", allowed), *cors(server, scope, headers)],
        )
        return
    await route(server, Call(scope, headers, receive, send), params)
