"""``trio-agents serve``: run a relay (with its browser chat page) in front of the simulator or a
real OpenAI-compatible endpoint."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TextIO

import trio

from protocols.relay import is_loopback, parse_origin, split_host

from ..providers import OpenAIChat, StreamingProvider
from ..relay import RelayLimits, RelayServer, RelayToken, serve
from ..relay._serve import GRACE
from ..testing import Simulator
from ._demo import Endpoint

__all__ = ["GRACE", "TOKEN_ENV", "main", "run"]

#: Where ``serve`` reads its bearer token when ``--token`` is not given.
TOKEN_ENV = "TRIO_AGENTS_RELAY_TOKEN"


def _token(given: str | None) -> tuple[str, bool]:
    """The token to accept, and whether it was made up here (then it is shown once)."""
    token = given or os.environ.get(TOKEN_ENV)
    if token:
        return token, False
    return secrets.token_urlsafe(24), True


@contextlib.asynccontextmanager
async def _upstream(
    endpoint: Endpoint | None, interval: float
) -> AsyncIterator[tuple[StreamingProvider, str]]:
    """The provider to relay to, and where it is. The simulator runs only when no endpoint is
    given."""
    async with contextlib.AsyncExitStack() as stack:
        if endpoint is None:
            simulator = await stack.enter_async_context(Simulator(interval=interval))
            provider: StreamingProvider = simulator.openai()
            where = "the offline simulator"
        else:
            provider, where = endpoint.provider(), endpoint.where
        try:
            yield provider, where
        finally:
            if isinstance(provider, OpenAIChat):  # its HTTP connections
                await provider.aclose()


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
    grace: float = GRACE,
    allowed_hosts: Sequence[str] | None = None,
    max_tokens: int | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, or, with ``signals``, until SIGINT or SIGTERM: then open requests
    get their ``shutdown`` frame or line (websockets close with 1001) within ``grace``
    seconds, and it returns. ``task_status`` gets the page's URL once it is up. ``max_tokens``:
    the relay's cap on a request's output tokens (see :class:`~actors.relay.RelayLimits`)."""

    async def signalled() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
            async for _ in received:
                return

    async with _upstream(endpoint, interval) as (upstream, where):
        app = RelayServer(
            upstream,
            tokens=[RelayToken(token, name="serve")],
            origins=origins,
            allowed_hosts=allowed_hosts or (),
            limits=RelayLimits(max_frame=max_frame, max_tokens=max_tokens),
        )
        async with trio.open_nursery() as nursery:
            bound: list[str] = await nursery.start(
                lambda task_status: serve(
                    app,
                    host=host,
                    port=port,
                    max_frame=max_frame,
                    shutdown=signalled if signals else None,
                    grace=grace,
                    task_status=task_status,
                )
            )
            url = bound[0] + "/"
            print(f"relay for {where} at {url}", file=out)
            print(f"websocket: {bound[0].replace('http', 'ws', 1)}/v1/relay", file=out)
            if max_tokens is not None:
                print(f"output tokens capped at {max_tokens} per request", file=out)
            if shown:
                print(f"token (made up for this run): {token}", file=out)
            out.flush()
            task_status.started(url)
        # serve() returned: a signal came, and the graceful shutdown is done.
        print("stopped", file=out)
        out.flush()


def _check(
    host: str, origins: Sequence[str] | None, allowed_hosts: Sequence[str] | None
) -> str | None:
    """What is wrong with the options, in one line (None: nothing)."""
    for origin in origins or ():
        if parse_origin(origin) is None:
            return (
                f"--origin {origin!r} is not an origin: write scheme://host[:port] "
                "with http or https and no path, e.g. https://relay.example.com"
            )
    for name in allowed_hosts or ():
        if split_host(name) is None:
            return (
                f"--allowed-host {name!r} is not a host name: write name or name:port "
                "(an IPv6 address in brackets), e.g. relay.example.com"
            )
    if not host:
        return "--host must not be empty"
    return None


def main(
    *,
    host: str,
    port: int,
    token: str | None,
    origins: Sequence[str] | None,
    endpoint: Endpoint | None,
    interval: float,
    max_frame: int,
    grace: float = GRACE,
    allowed_hosts: Sequence[str] | None = None,
    max_tokens: int | None = None,
    out: TextIO = sys.stdout,
    err: TextIO | None = None,
) -> int:
    """Run the relay until Ctrl-C or SIGTERM; returns the exit status (2: a bad option)."""
    err = sys.stderr if err is None else err
    problem = _check(host, origins, allowed_hosts)
    if problem is not None:
        print(f"trio-agents serve: {problem}", file=err)
        return 2
    chosen, shown = _token(token)
    try:
        RelayToken(chosen)
    except Exception as error:
        print(f"trio-agents serve: {error}", file=err)
        return 2
    if not is_loopback(host):
        print(
            f"trio-agents serve: warning: listening on {host}, beyond this machine, without "
            "TLS (the relay has none of its own): put a TLS reverse proxy in front "
            "(see docs/deploy-relay.md)",
            file=err,
        )
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
                grace=grace,
                allowed_hosts=allowed_hosts,
                max_tokens=max_tokens,
            )
        )
    except BaseException as error:
        failure = _bind_failure(error)
        if failure is None:
            raise
        print(f"trio-agents serve: cannot listen on {host}:{port}: {failure}", file=err)
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
