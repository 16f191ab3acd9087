"""What the relay checks about its peers' text outside the frames: values made safe for a log line,
and the host names and origins a relay answers to (:class:`HostPolicy`); see :mod:`protocols.relay`,
which re-exports them."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from .errors import ValidationError

# -- logs ---------------------------------------------------------------------------------------


def loggable(value: object, limit: int = 200) -> str:
    """``value`` as it may go into a log line when a peer controls it (a request id, a frame's
    field, a header): quoted, every control or invisible character escaped the way ``repr``
    escapes it (so a newline or an ANSI escape cannot start a forged line or restyle the
    terminal), and at most ``limit`` characters of it shown."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text) - limit} more characters)"


# -- host names and origins ---------------------------------------------------------------------

#: What a loopback-bound relay also answers to.
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS: Final[Mapping[str, int]] = {"http": 80, "https": 443}
_LABELS: Final = re.compile(
    r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*"
)


def _name(text: str) -> str | None:
    """``text`` as a host name (lower-case, no trailing dot, an IPv6 address without brackets,
    compressed), or None when it is not one."""
    text = text.lower()
    if text.startswith("[") and text.endswith("]"):
        try:
            address = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            return None
        return address.compressed
    if text.endswith("."):
        text = text[:-1]
    if not text or len(text) > 253 or not _LABELS.fullmatch(text):
        return None
    return text


def split_host(value: object) -> tuple[str, int | None] | None:
    """The name and port of ``host[:port]`` (a ``Host`` header, or a host a relay is told to
    answer to): the name lower-case without a trailing dot, an IPv6 address (in brackets,
    ``[::1]:8000``) without its brackets; the port None when absent. None when malformed."""
    if not isinstance(value, str) or len(value) > 300:
        return None
    text = value.strip()
    port: int | None = None
    head, colon, tail = text.rpartition(":")
    if colon and not (text.startswith("[") and text.endswith("]")) and head.count(":") == 0:
        name_part = head  # name:port
    elif colon and head.startswith("[") and head.endswith("]"):
        name_part = head  # [v6]:port
    else:
        name_part, tail = text, ""
    if tail:
        if not tail.isascii() or not tail.isdigit() or not 0 < int(tail) < 65536:
            return None
        port = int(tail)
    elif colon and name_part is head:
        return None  # "name:" with no port
    name = _name(name_part)
    if name is None:
        return None
    return name, port


def parse_origin(value: object) -> tuple[str, str, int] | None:
    """``(scheme, name, port)`` of a browser origin ``http(s)://host[:port]`` (a trailing ``/``
    is tolerated; the port defaults to the scheme's), or None when it is not such an origin
    (``null``, another scheme, a path, user info...)."""
    if not isinstance(value, str):
        return None
    scheme, separator, rest = value.strip().partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in _DEFAULT_PORTS:
        return None
    rest = rest.removesuffix("/")
    if not rest or any(c in rest for c in "/?#@\\ "):
        return None
    host = split_host(rest)
    if host is None:
        return None
    name, port = host
    return scheme, name, _DEFAULT_PORTS[scheme] if port is None else port


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) surely means this
    machine: ``localhost`` or a loopback address. Any other name may resolve to anything."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@attrs.frozen
class HostPolicy:
    """Which ``Host`` a relay answers to and which browser ``Origin`` it lets in.

    ``names``: the host names it answers to -- its own address (with ``localhost``,
    ``127.0.0.1`` and ``::1`` when that is a loopback address) and the hosts it is told to;
    ``origins``: the allowed origins as ``(scheme, name, port)``. Build one with
    :meth:`build`. A missing ``Host`` passes (only browsers can be rebound, and they always
    send one); a missing ``Origin`` passes (not a browser: the token is the whole story).
    """

    names: frozenset[str]
    origins: frozenset[tuple[str, str, int]]

    @classmethod
    def build(
        cls,
        server: tuple[str, int] | None,
        allowed_hosts: Iterable[str] = (),
        origins: Iterable[str] | None = None,
    ) -> HostPolicy:
        """The policy of a relay listening on ``server`` (its address and port, as the
        connection's local end; None when unknown) that also answers to ``allowed_hosts``
        (``name`` or ``name:port``). ``origins``: the allowed origins, or None for the
        default -- ``http`` and ``https`` on each of those names with the server's port, and
        for an allowed host also with its own port if it names one, else with 80 and 443 too
        (the public port of a reverse proxy in front). Raises
        :class:`~protocols.errors.ValidationError` for a malformed host or origin."""
        names: set[str] = set()
        ports: dict[str, set[int]] = {}
        own_port = server[1] if server is not None else None
        if server is not None:
            own = split_host(server[0]) or split_host(f"[{server[0]}]")
            if own is not None:
                local = {own[0]} | (LOOPBACK_NAMES if is_loopback(own[0]) else set())
                for name in local:
                    names.add(name)
                    if own_port is not None:
                        ports.setdefault(name, set()).add(own_port)
        for entry in allowed_hosts:
            host = split_host(entry) if isinstance(entry, str) else None
            if host is None:
                raise ValidationError(
                    f"not a host name (name or name:port): {loggable(entry, 100)}"
                )
            name, port = host
            names.add(name)
            wanted = {port} if port is not None else {80, 443}
            if port is None and own_port is not None:
                wanted.add(own_port)
            ports.setdefault(name, set()).update(wanted)
        allowed: set[tuple[str, str, int]] = set()
        if origins is None:
            for name, name_ports in ports.items():
                allowed.update(
                    (scheme, name, port) for scheme in _DEFAULT_PORTS for port in name_ports
                )
        else:
            for origin in origins:
                parsed = parse_origin(origin) if isinstance(origin, str) else None
                if parsed is None:
                    raise ValidationError(
                        "not an origin (http(s)://host[:port]): " + loggable(origin, 100)
                    )
                allowed.add(parsed)
        return cls(frozenset(names), frozenset(allowed))

    def host_ok(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header (None: none) is for this relay."""
        if host is None:
            return True
        parsed = split_host(host)
        return parsed is not None and parsed[0] in self.names

    def origin_ok(self, origin: str | None) -> bool:
        """Whether a request with this ``Origin`` header (None: none) may come in."""
        if origin is None:
            return True
        parsed = parse_origin(origin)
        return parsed is not None and parsed in self.origins
