"""Running a relay: :func:`serve` puts any ASGI application (a :class:`RelayServer`) on
hypercorn's trio worker."""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = ["serve"]

#: Seconds between websocket pings the server sends (a dead peer is noticed by the next one).
PING_INTERVAL = 20.0


async def serve(
    app: Callable[..., Awaitable[None]],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ping_interval: float | None = PING_INTERVAL,
    max_frame: int | None = None,
    shutdown: Callable[[], Awaitable[Any]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` over HTTP/1.1 and websockets on ``host:port`` (127.0.0.1 unless told
    otherwise; port 0 picks a free one) until cancelled, or until ``shutdown`` returns.

    ``task_status.started`` receives the bound addresses (``["http://127.0.0.1:PORT"]``).
    Websocket keep-alive pings go out every ``ping_interval`` seconds; messages over
    ``max_frame`` bytes are refused by the server itself (the application checks too).
    """
    # hypercorn (~0.3 s to import) loads only when a relay is served: `import actors` stays light.
    from hypercorn.config import Config  # noqa: PLC0415
    from hypercorn.trio import serve as hypercorn_serve  # noqa: PLC0415

    # The listening socket is made here, not by hypercorn, so a refused bind (the port is
    # taken) closes it again and raises a plain OSError; hypercorn then owns the descriptor.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(1024)
    except BaseException:
        listener.close()
        raise
    config = Config()
    config.bind = [f"fd://{listener.detach()}"]
    config.websocket_ping_interval = ping_interval
    config.accesslog = None
    # hypercorn's own messages (and an application's crash) go through the logging module,
    # silent unless the application configures logging.
    config.errorlog = logging.getLogger("trio_agents.relay.server")
    if max_frame is not None:
        config.websocket_max_message_size = max_frame + 1  # one more: the app answers it
    await hypercorn_serve(
        app,
        config,
        shutdown_trigger=shutdown,
        task_status=task_status,
        mode="asgi",
    )
