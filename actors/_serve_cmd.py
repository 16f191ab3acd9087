"""``trio-agents serve``: run a relay (with its browser chat page) in front of the simulator or a
real OpenAI-compatible endpoint."""

from __future__ import annotations

import os
import secrets
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

import trio

from ._demo import Endpoint
from .providers import OpenAIChat, StreamingProvider
from .relay import RelayLimits, RelayServer, RelayToken, serve
from .testing import Simulator

__all__ = ["TOKEN_ENV", "main", "run"]

#: Where ``serve`` reads its bearer token when ``--token`` is not given.
TOKEN_ENV = "TRIO_AGENTS_RELAY_TOKEN"


def _token(given: str | None) -> tuple[str, bool]:
    """The token to accept, and whether it was made up here (then it is shown once)."""
    token = given or os.environ.get(TOKEN_ENV)
    if token:
        return token, False
    return secrets.token_urlsafe(24), True


async def run(
    *,
    host: str,
    port: int,
    token: str,
    origins: Sequence[str] | None,
    endpoint: Endpoint | None,
    interval: float,
    max_frame: int,
    out: TextIO,
    shown: bool,
    signals: bool = False,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled (or, with ``signals``, until SIGINT or SIGTERM: then open requests
    are cut and their upstream streams closed before it returns); ``task_status`` gets the
    page's URL once it is up."""
    async with Simulator(interval=interval) as simulator:
        upstream: StreamingProvider = (
            endpoint.provider() if endpoint is not None else simulator.openai()
        )
        try:
            app = RelayServer(
                upstream,
                tokens=[RelayToken(token, name="serve")],
                origins=origins,
                limits=RelayLimits(max_frame=max_frame),
            )
            async with trio.open_nursery() as nursery:
                bound: list[str] = await nursery.start(
                    lambda task_status: serve(
                        app, host=host, port=port, max_frame=max_frame, task_status=task_status
                    )
                )
                url = bound[0] + "/"
                where = endpoint.where if endpoint is not None else "the offline simulator"
                print(f"relay for {where} at {url}", file=out)
                print(f"websocket: {bound[0].replace('http', 'ws', 1)}/v1/relay", file=out)
                if shown:
                    print(f"token (made up for this run): {token}", file=out)
                out.flush()
                task_status.started(url)
                if signals:
                    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                        async for _ in received:
                            break
                    app.close()
                    nursery.cancel_scope.cancel()
                    print("stopped", file=out)
        finally:
            if isinstance(upstream, OpenAIChat):
                await upstream.aclose()


def main(
    *,
    host: str,
    port: int,
    token: str | None,
    origins: Sequence[str] | None,
    endpoint: Endpoint | None,
    interval: float,
    max_frame: int,
    out: TextIO = sys.stdout,
) -> int:
    """Run the relay until Ctrl-C; returns the exit status."""
    chosen, shown = _token(token)
    try:
        RelayToken(chosen)
    except Exception as error:
        print(f"trio-agents serve: {error}", file=sys.stderr)
        return 2
    try:
        trio.run(
            lambda: run(
                host=host,
                port=port,
                token=chosen,
                origins=origins,
                endpoint=endpoint,
                interval=interval,
                max_frame=max_frame,
                out=out,
                shown=shown,
                signals=True,
            )
        )
    except BaseException as error:
        failure = _bind_failure(error)
        if failure is None:
            raise
        print(f"trio-agents serve: cannot listen on {host}:{port}: {failure}", file=sys.stderr)
        return 1
    return 0


def _bind_failure(error: BaseException) -> str | None:
    """Why the server could not listen, if that is what ``error`` (or a group of it) says."""
    if isinstance(error, BaseExceptionGroup):
        reasons = [_bind_failure(member) for member in error.exceptions]
        return reasons[0] if reasons and all(reasons) else None
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return None
