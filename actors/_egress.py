"""The egress guard's IO half: an HTTP transport whose every connection passes an
:class:`~protocols.egress.EgressPolicy` (the sans-IO half, which decides).

A connection is judged twice: its host and port before any lookup, then every address the
name resolved to (refused if any one is not allowed). It is then made to one of those judged
addresses -- never by looking the name up again, which a rebinding DNS server could answer
differently -- while the request keeps its URL, ``Host`` header and TLS server name. Proxies from
the environment are not used: a proxy would make the connection the policy judged another one.

Written on httpcore's network-backend interface (httpx's own core): it is where a connection's
host and port are known and its socket is made, so the check cannot be skipped by any request.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import httpcore
import httpx
import trio

from protocols.egress import EgressPolicy, Refusal

__all__ = [
    "GuardedBackend",
    "connect_judged",
    "guarded_transport",
    "judged_addresses",
    "open_judged_tcp",
]

_S = TypeVar("_S")


async def judged_addresses(
    policy: EgressPolicy, host: str, port: int, refuse: Callable[[Refusal], BaseException]
) -> list[str]:
    """The addresses ``host`` resolves to, once the policy has allowed the host and every one
    of them; raises what ``refuse`` makes of a refusal, ``OSError`` when the lookup fails."""
    refused = policy.check_host(host, port)
    if refused is not None:
        raise refuse(refused)
    answers = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(answer[4][0]) for answer in answers))
    refused = policy.check_addresses(host, port, addresses)
    if refused is not None:
        raise refuse(refused)
    return addresses


async def _first(
    addresses: list[str], connect: Callable[[str], Awaitable[_S]], failing: type[Exception]
) -> _S:
    """The first connection ``connect`` makes to one of ``addresses``, in order (each one
    judged already: no second lookup); the last ``failing`` error when none can be made."""
    failure: Exception | None = None
    for address in addresses:
        try:
            return await connect(address)
        except failing as error:
            failure = error
    assert failure is not None  # (judged_addresses never gives none)
    raise failure


async def connect_judged(
    policy: EgressPolicy,
    refuse: Callable[[Refusal], BaseException],
    host: str,
    port: int,
    *,
    timeout: float | None,  # noqa: ASYNC109 - an HTTP core's connect timeout, passed through
    connect: Callable[[str], Awaitable[_S]],
    failing: type[Exception],
) -> _S:
    """What ``connect`` makes to one of ``host``'s judged addresses (see
    :func:`judged_addresses`), the lookup bounded by ``timeout``; a failed or slow lookup, and
    no address that connects, raise ``failing`` (an HTTP core's ``ConnectError``)."""
    try:
        with trio.fail_after(timeout if timeout is not None else math.inf):
            addresses = await judged_addresses(policy, host, port, refuse)
    except (OSError, trio.TooSlowError) as error:
        raise failing(f"looking up {host!r}: {error}") from None
    return await _first(addresses, connect, failing)


async def open_judged_tcp(
    policy: EgressPolicy, host: str, port: int, refuse: Callable[[Refusal], BaseException]
) -> trio.SocketStream:
    """A TCP connection to ``host`` made to one of its judged addresses (see
    :func:`judged_addresses`), never through a second lookup."""
    addresses = await judged_addresses(policy, host, port, refuse)

    async def connect(address: str) -> trio.SocketStream:
        return await trio.open_tcp_stream(address, port)

    return await _first(addresses, connect, OSError)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, with every TCP connection judged by ``policy`` first. A
    refusal raises what ``refuse`` makes of it (the caller's own error type, naming the host)."""

    def __init__(self, policy: EgressPolicy, refuse: Callable[[Refusal], BaseException]) -> None:
        self._policy = policy
        self._refuse = refuse
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await connect_judged(
            self._policy,
            self._refuse,
            host,
            port,
            timeout=timeout,
            connect=lambda address: self._inner.connect_tcp(
                address, port, timeout, local_address, socket_options
            ),
            failing=httpcore.ConnectError,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise self._refuse(Refusal(path, None, "a Unix socket (the policy judges TCP only)"))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_transport(
    policy: EgressPolicy,
    refuse: Callable[[Refusal], BaseException],
    *,
    limits: httpx.Limits,
) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose connections all pass ``policy`` (see the module docstring)."""
    transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    # httpx builds its pool without a way to pass a network backend: build it again with ours,
    # with the settings httpx gave its own.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(policy, refuse),
    )
    return transport
