"""Admission to the relay: its tokens (checked in constant time), the limits of a token and a
connection, the statistics, and what the server tracks per token.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque

import attrs

from protocols.errors import (
    ConfigError,
)
from protocols.relay import (
    DEFAULT_MAX_FRAME,
)

__all__ = ["RelayLimits", "RelayStatistics", "RelayToken"]

log = logging.getLogger("trio_agents.relay")


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@attrs.frozen(repr=False)
class RelayToken:
    """A bearer token the relay accepts, with its limits.

    ``secret``: the token itself (never shown in ``repr``, logs or frames); ``name``: how logs
    and statistics call its holder; ``max_streams``: requests open at once over all its
    connections; ``per_minute``: requests started in any 60 s; ``budget``: total tokens (as the
    upstream reported them) it may spend over the server's life, ``None`` for no limit.
    """

    secret: str
    name: str = "client"
    max_streams: int = 8
    per_minute: int = 120
    budget: int | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.secret, str) or len(self.secret) < 16:
            raise ConfigError("a relay token's secret must be a string of at least 16 characters")
        for name in ("max_streams", "per_minute"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RelayToken.{name} must be an integer >= 1, not {value!r}")
        if self.budget is not None and (
            isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 1
        ):
            raise ConfigError(
                f"RelayToken.budget must be an integer >= 1 or None, not {self.budget!r}"
            )

    def __repr__(self) -> str:
        return f"RelayToken(name={self.name!r}, secret=<redacted>)"


@attrs.frozen
class RelayLimits:
    """Per-connection limits.

    ``max_frame``: bytes of one frame (and of an HTTP request body); ``max_streams``: requests
    open at once on one connection; ``idle_timeout``: seconds a connection with no open request
    may stay silent; ``handshake_timeout``: seconds to the ``hello`` (and to a whole HTTP request
    body); ``approval_timeout``: seconds a pending approval waits for its answer (then: denied);
    ``send_timeout``: seconds one frame may take to leave (a client that stops reading is cut:
    its requests end, their upstream streams are closed, and nothing more is sent to it);
    ``max_tokens``: the most output tokens one request may ask for (``None``, the default: no
    cap). With a cap, a request asking for more -- or for no limit -- is sent upstream with
    ``max_tokens`` lowered (or set) to it, a request carrying ``extra`` vendor options is
    refused as ``invalid`` (they could lift the cap under another name), and ``ready`` says the
    cap to clients of protocol version 2.
    """

    max_frame: int = DEFAULT_MAX_FRAME
    max_streams: int = 16
    idle_timeout: float = 300.0
    handshake_timeout: float = 10.0
    approval_timeout: float = 300.0
    send_timeout: float = 60.0
    max_tokens: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 1
        ):
            raise ConfigError(
                f"RelayLimits.max_tokens must be an integer >= 1 or None, not {self.max_tokens!r}"
            )
        for name in ("max_frame", "max_streams"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RelayLimits.{name} must be an integer >= 1, not {value!r}")
        for name in ("idle_timeout", "handshake_timeout", "approval_timeout", "send_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"RelayLimits.{name} must be a number of seconds > 0")


@attrs.define
class RelayStatistics:
    """Counters since the server was made: ``connections`` open now, ``streams`` open now,
    ``upstream_calls`` made, ``refused`` by error code."""

    connections: int = 0
    streams: int = 0
    upstream_calls: int = 0
    refused: dict[str, int] = attrs.field(factory=dict)


class _TokenState:
    """What the server tracks per token: its open streams, recent starts and spent tokens."""

    __slots__ = ("open", "spent", "starts", "token")

    def __init__(self, token: RelayToken) -> None:
        self.token = token
        self.open = 0
        self.starts: deque[float] = deque()
        self.spent = 0


class _Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
