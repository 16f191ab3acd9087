"""Admission to the relay: its tokens (checked in constant time), the limits of a token and a
connection, the statistics, and what the server tracks per token.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict, deque

import attrs

from protocols.errors import (
    ConfigError,
)
from protocols.live import DEFAULT_CAPACITY
from protocols.relay import (
    DEFAULT_MAX_FRAME,
)

__all__ = ["RelayLimits", "RelayStatistics", "RelayToken"]

log = logging.getLogger("trio_agents.relay")


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@attrs.frozen(repr=False)
class RelayToken:
    r"""A bearer token the relay accepts, with its limits.

    ``secret``: the token itself (never shown in ``repr``, logs or frames); ``name``: how logs
    and statistics call its holder; ``max_streams``: requests open at once over all its
    connections (a run that outlives its connection counts until it ends); ``per_minute``:
    requests started in any 60 s; ``budget``: total tokens (as the upstream reported them) it
    may spend over the server's life, ``None`` for no limit.

    ``sees``: whose runs, besides its own, this token may follow and control (watch, cancel,
    answer approvals) -- the ``name``\ s of other tokens, or ``"*"`` for every token's (an
    operator's). Any other token's run is "not found" to it, exactly like a run that never
    existed. A name it lists must belong to exactly one token of the server.
    """

    secret: str
    name: str = "client"
    max_streams: int = 8
    per_minute: int = 120
    budget: int | None = None
    sees: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.secret, str) or len(self.secret) < 16:
            raise ConfigError("a relay token's secret must be a string of at least 16 characters")
        for seen in self.sees:
            if not isinstance(seen, str) or not seen:
                raise ConfigError(
                    "RelayToken.sees must name tokens (non-empty strings), or be '*' for all"
                )
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
    r"""The relay's limits: of a connection, of a request, and of the runs it keeps.

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

    Every request is a *run* whose events the relay keeps, to be followed again by id:

    * ``run_keep``: seconds an ended run stays to be followed (then it is "not found");
    * ``run_events``: events one run's log holds (a follower behind them reads a ``gap``);
    * ``max_run_bytes``: characters of text one run's log may hold: a run over it is cut
      (``run_too_large``);
    * ``max_runs`` / ``max_runs_per_token`` / ``max_kept_bytes``: ended runs kept at most,
      overall and per token, and the text they hold altogether -- over any of them, the
      runs that ended first go first (a running run is never dropped; the number of those is
      bounded by the tokens' ``max_streams``);
    * ``max_watchers``: followers of one run at once (websocket ``watch``\ es, event streams
      and polls): one more is refused (``too_many_watchers``, 429);
    * ``keepalive``: seconds an event stream (``GET /v1/runs/{id}/events``) stays silent
      before a keep-alive comment;
    * ``poll_wait``: the longest ``wait`` a polling request may ask for (a longer one is
      shortened to it); ``poll_events``: the most events one polling answer holds;
    * ``resume_grace``: seconds a run that outlives its client for the client to come back
      to it (an AI SDK chat's: a reload resumes it) goes on with nobody following it; then
      it is cancelled.
    """

    max_frame: int = DEFAULT_MAX_FRAME
    max_streams: int = 16
    idle_timeout: float = 300.0
    handshake_timeout: float = 10.0
    approval_timeout: float = 300.0
    send_timeout: float = 60.0
    max_tokens: int | None = None
    run_keep: float = 600.0
    run_events: int = DEFAULT_CAPACITY
    max_run_bytes: int = 64 * 1024 * 1024
    max_runs: int = 10_000
    max_runs_per_token: int = 1_000
    max_kept_bytes: int = 256 * 1024 * 1024
    max_watchers: int = 64
    keepalive: float = 15.0
    poll_wait: float = 30.0
    poll_events: int = 1_000
    resume_grace: float = 60.0

    def __attrs_post_init__(self) -> None:
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 1
        ):
            raise ConfigError(
                f"RelayLimits.max_tokens must be an integer >= 1 or None, not {self.max_tokens!r}"
            )
        for name in (
            "max_frame",
            "max_streams",
            "run_events",
            "max_run_bytes",
            "max_runs",
            "max_runs_per_token",
            "max_kept_bytes",
            "max_watchers",
            "poll_events",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RelayLimits.{name} must be an integer >= 1, not {value!r}")
        for name in (
            "idle_timeout",
            "handshake_timeout",
            "approval_timeout",
            "send_timeout",
            "keepalive",
            "poll_wait",
            "resume_grace",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"RelayLimits.{name} must be a number of seconds > 0")
        keep = self.run_keep
        if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0 <= keep < math.inf:
            raise ConfigError("RelayLimits.run_keep must be a number of seconds >= 0")


@attrs.define
class RelayStatistics:
    """Counters since the server was made: ``connections`` open now, ``streams`` open now,
    ``upstream_calls`` made, ``refused`` by error code; ``runs``: runs kept now (running or
    ended, to be followed), ``watchers``: followers of runs now."""

    connections: int = 0
    streams: int = 0
    upstream_calls: int = 0
    refused: dict[str, int] = attrs.field(factory=dict)
    runs: int = 0
    watchers: int = 0


class _TokenState:
    """What the server tracks per token: its open streams, recent starts and spent tokens, the
    holders whose runs it may see, and its ended runs still kept (oldest first)."""

    __slots__ = ("ended", "open", "sees", "spent", "starts", "token")

    def __init__(self, token: RelayToken) -> None:
        self.token = token
        self.open = 0
        self.starts: deque[float] = deque()
        self.spent = 0
        #: The holders whose runs this one may follow and control, besides its own; ``None``:
        #: every holder's.
        self.sees: frozenset[_TokenState] | None = frozenset()
        self.ended: OrderedDict[str, object] = OrderedDict()

    def may_see(self, owner: _TokenState) -> bool:
        """Whether this holder may follow and control a run ``owner`` started."""
        return owner is self or self.sees is None or owner in self.sees


def _grants(holders: list[_TokenState]) -> None:
    """Resolve each holder's ``sees`` to holders. Raises ConfigError for a name that belongs
    to no token, or to more than one."""
    by_name: dict[str, list[_TokenState]] = {}
    for holder in holders:
        by_name.setdefault(holder.token.name, []).append(holder)
    for holder in holders:
        if "*" in holder.token.sees:
            holder.sees = None
            continue
        seen: set[_TokenState] = set()
        for name in holder.token.sees:
            named = by_name.get(name, [])
            if len(named) != 1:
                raise ConfigError(
                    f"RelayToken.sees names {name!r}, which "
                    + ("no token has" if not named else "more than one token has")
                    + ": a token whose runs another may see needs a name of its own"
                )
            seen.add(named[0])
        holder.sees = frozenset(seen)


class _Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
