"""``trio-agents mcp``: an agent or a tool registry served as MCP tools, over stdio (for a
client that starts this process) or streamable HTTP."""

from __future__ import annotations

import functools
import os
import signal
import sys
from typing import Any, TextIO

import trio

from protocols.errors import ConfigError

from ._jobs import call_app, load_app

__all__ = ["mcp_main"]


def mcp_main(
    *,
    app: str,
    http: bool,
    host: str,
    port: int,
    path: str,
    token: str | None,
    out: TextIO,
    session_history: bool = False,
) -> int:
    """Serve ``app`` until the client closes stdin (stdio) or SIGINT/SIGTERM (HTTP); 0.
    ``session_history``: a served agent keeps one conversation per MCP session."""
    target = load_app(app)
    if token is None:
        token = os.environ.get("TRIO_AGENTS_MCP_TOKEN") or None
    return trio.run(_main, (app, target), (http, host, port, path), token, out, session_history)


async def _main(
    app: tuple[str, Any],
    where: tuple[bool, str, int, str],
    token: str | None,
    out: TextIO,
    session_history: bool,
) -> int:
    http, host, port, path = where
    from actors._runtime import open_runtime  # noqa: PLC0415
    from actors.agent import Agent  # noqa: PLC0415
    from actors.mcp import mcp_server, serve_http, serve_stdio  # noqa: PLC0415
    from actors.mcp._server import resolve_app  # noqa: PLC0415
    from actors.tools import CallableTool, ToolRegistry  # noqa: PLC0415

    spec, target = app
    async with open_runtime() as runtime:
        if callable(target) and not isinstance(target, Agent | ToolRegistry | CallableTool):
            target = await call_app(spec, target, runtime)  # what it raises names the app
        served = await resolve_app(target, runtime)
        if session_history and not isinstance(served, Agent):
            raise ConfigError(
                f"--session-history applies to an agent; --app {spec} serves tools, which keep "
                "no conversation"
            )
        server = mcp_server(served, session_history=True) if session_history else mcp_server(served)
        if not http:
            # stdout is the protocol's: what this command has to say goes to stderr.
            print("trio-agents mcp: serving over stdio", file=sys.stderr, flush=True)
            await serve_stdio(server)
            return 0
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    url = await nursery.start(
                        functools.partial(
                            serve_http, server, host=host, port=port, path=path, token=token
                        )
                    )
                except BaseException as error:  # a port taken, an address not this host's
                    _cannot_listen(error, host, port)
                    raise
                print(f"trio-agents mcp: serving at {url}; Ctrl-C to stop", file=out, flush=True)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()
    return 0


def _cannot_listen(error: BaseException, host: str, port: int) -> None:
    """Raise the one line saying why the server could not listen, if ``error`` (alone or
    grouped) says it; else return."""
    from ._errors import _leaves  # noqa: PLC0415 - loaded: it runs this command

    leaves = list(_leaves(error))
    if leaves and all(isinstance(leaf, OSError) for leaf in leaves):
        reason = leaves[0].strerror if isinstance(leaves[0], OSError) else None
        raise ConfigError(f"cannot listen on {host}:{port}: {reason or leaves[0]}") from None
