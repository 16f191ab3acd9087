"""The MCP servers an :class:`~actors.mcp.MCPConnection` speaks to -- a subprocess over stdio
(:class:`StdioServer`) or a URL over streamable HTTP (:class:`StreamableHTTPServer`) -- and the
HTTP client a session opens for the latter, every connection judged by the server's egress
policy."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from protocols.egress import EgressPolicy, Refusal
from protocols.errors import ConfigError, ProviderError

from .._egress import connect_judged

if TYPE_CHECKING:
    import httpcore2
    import httpx2

    from ._client import MCPConnection
    from ._wire import Wire

__all__ = ["MCPServerSpec", "StdioServer", "StreamableHTTPServer"]

# The MCP client's logger (``_client``'s): a refused connection is logged under it.
log = logging.getLogger("actors.mcp")


def _hidden(values: Mapping[str, str] | None) -> str:
    return "None" if values is None else "{" + ", ".join(f"{k!r}: '***'" for k in values) + "}"


def _frozen_map(value: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if value is None else dict(value)


@attrs.frozen
class StdioServer:
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    ``env`` replaces the SDK's default environment for it (a few safe variables such as
    ``PATH``) when given; its values never appear in a ``repr``. The server's stderr goes to
    ``stderr`` (this process's by default)."""

    command: str
    args: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    env: dict[str, str] | None = attrs.field(default=None, converter=_frozen_map, repr=_hidden)
    cwd: str | None = None
    stderr: TextIO | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise ConfigError("StdioServer needs a command to run")

    def describe(self) -> str:
        """The command line, for messages (without the environment)."""
        return " ".join([self.command, *self.args])


@attrs.frozen
class StreamableHTTPServer:
    """An MCP server at ``url``, spoken to over streamable HTTP.

    ``headers`` (an ``Authorization`` one, say) go with every request and never appear in a
    ``repr`` or an error. ``egress`` judges every connection, redirects included, as it does a
    provider's (see the providers guide); a refusal fails the session's start with an error
    naming the host."""

    url: str
    headers: dict[str, str] | None = attrs.field(default=None, converter=_frozen_map, repr=_hidden)
    egress: EgressPolicy | None = None
    timeout: float = 30.0

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise ConfigError(
                f"an MCP server URL must start with http:// or https://: {self.url!r}"
            )
        if self.egress is not None:
            refused = self.egress.check_url(self.url)
            if refused is not None:
                raise ConfigError(str(refused))

    def describe(self) -> str:
        """The URL, without any query (which could hold a key)."""
        return self.url.split("?", 1)[0]


MCPServerSpec = StdioServer | StreamableHTTPServer


def _label(server: MCPServerSpec) -> str:
    if isinstance(server, StdioServer):
        stem = server.command.replace("\\", "/").rsplit("/", 1)[-1]
        return "".join(c if c.isalnum() else "-" for c in stem) or "stdio"
    host = server.url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    return "".join(c if c.isalnum() else "-" for c in host) or "http"


@asynccontextmanager
async def _http_client(
    server: StreamableHTTPServer, connection: MCPConnection, wire: Wire
) -> AsyncIterator[httpx2.AsyncClient]:
    """The SDK's HTTP client for ``server``: its timeouts, the server's headers, no proxies
    from the environment, every connection judged by the server's egress policy, and every
    exchange watched by the session's ``wire``."""
    import httpx2  # noqa: PLC0415 - the mcp SDK's HTTP client

    timeout = httpx2.Timeout(server.timeout, read=max(server.timeout, 300.0))
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    if server.egress is not None:
        _guard(transport, server.egress, connection)
    async with httpx2.AsyncClient(
        transport=wire.http_transport(transport),
        headers=server.headers or {},
        timeout=timeout,
        trust_env=False,
        follow_redirects=False,
    ) as client:
        yield client


def _guard(
    transport: httpx2.AsyncHTTPTransport, policy: EgressPolicy, connection: MCPConnection
) -> None:
    import httpcore2  # noqa: PLC0415
    import httpx2  # noqa: PLC0415

    def refuse(refusal: Refusal) -> BaseException:
        connection.refusal = refusal
        log.warning("MCP server %r: %s", connection.name, refusal)
        return ProviderError(
            f"MCP server {connection.name!r}: {refusal}",
            code="egress",
            retryable=False,
        )

    class GuardedBackend(httpcore2.AsyncNetworkBackend):
        """The same guard as the providers' (actors._egress), on httpcore2's interface: the
        mcp SDK speaks HTTP through httpx2."""

        def __init__(self) -> None:
            self._inner = httpcore2.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            return await connect_judged(
                policy,
                refuse,
                host,
                port,
                timeout=timeout,
                connect=lambda address: self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                ),
                failing=httpcore2.ConnectError,
            )

        async def connect_unix_socket(
            self,
            path: str,
            timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            raise refuse(Refusal(path, None, "a Unix socket (the policy judges TCP only)"))

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    limits = httpx2.Limits()
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(),
    )
