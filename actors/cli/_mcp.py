"""``trio-agents mcp``: an agent or a tool registry served as MCP tools, over stdio (for a
client that starts this process) or streamable HTTP."""

from __future__ import annotations

import functools
import os
import signal
import sys
from typing import Any, TextIO

import trio

from ._jobs import load_app

__all__ = ["mcp_main"]


def mcp_main(
    *, app: str, http: bool, host: str, port: int, path: str, token: str | None, out: TextIO
) -> int:
    """Serve ``app`` until the client closes stdin (stdio) or SIGINT/SIGTERM (HTTP); 0."""
    target = load_app(app)
    if token is None:
        token = os.environ.get("TRIO_AGENTS_MCP_TOKEN") or None
    return trio.run(_main, target, (http, host, port, path), token, out)


async def _main(
    target: Any, where: tuple[bool, str, int, str], token: str | None, out: TextIO
) -> int:
    http, host, port, path = where
    from actors import open_runtime  # noqa: PLC0415
    from actors.mcp import mcp_server, serve_http, serve_stdio  # noqa: PLC0415
    from actors.mcp._server import resolve_app  # noqa: PLC0415

    async with open_runtime() as runtime:
        served = await resolve_app(target, runtime)
        server = mcp_server(served)
        if not http:
            # stdout is the protocol's: what this command has to say goes to stderr.
            print("trio-agents mcp: serving over stdio", file=sys.stderr, flush=True)
            await serve_stdio(server)
            return 0
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(
                    functools.partial(
                        serve_http, server, host=host, port=port, path=path, token=token
                    )
                )
                print(f"trio-agents mcp: serving at {url}; Ctrl-C to stop", file=out, flush=True)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()
    return 0
