"""The egress policy: which outbound connections may be made (issue 16; 003 §2.2, G16).

Sans-IO: it judges a URL before any lookup, then the addresses a name resolved to, and says
why it refuses -- it never resolves, connects or raises for a refusal. A refusal is a
:class:`Refusal` returned to the caller, which turns it into its own error (naming the host).

What is refused unless allowed:

* hosts outside the allow-list, when there is one (``"api.example.com"``, ``"*.example.com"``
  -- the name's subdomains, not the name itself -- either with ``":port"`` to allow only that
  port); without an allow-list any public host is allowed;
* ports other than 443 and 80 for an allow-list entry that names no port;
* addresses that are not public: loopback, private, link-local, carrier-grade NAT
  (100.64.0.0/10), multicast, reserved, unspecified -- in IPv4, IPv6, IPv4-mapped
  (``::ffff:127.0.0.1``, ``::ffff:7f00:1``) and IPv4-compatible (``::127.0.0.1``) forms,
  the embedded IPv4 judged as IPv4 -- unless a network in ``private`` contains them
  (``("127.0.0.0/8",)`` for a model server on this machine);
* a name whose answers include *any* such address (one private answer is enough: a name
  that resolves to both is how a public-looking host reaches an internal one);
* the cloud metadata hosts, and ``localhost``, by name, before any lookup.

Written here rather than taken from a library: the standard :mod:`ipaddress` module decides
the address classes; what is ours is which classes count, the embedded-IPv4 forms (which
Python 3.11 does not unwrap), and the allow-list's grammar.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable

import attrs

from .errors import ValidationError

__all__ = ["DEFAULT_PORTS", "METADATA_HOSTS", "EgressPolicy", "Refusal", "address_class"]

#: The ports an allow-list entry without one allows.
DEFAULT_PORTS = frozenset({80, 443})

#: Names refused before any lookup: the cloud instance-metadata services, and this machine.
METADATA_HOSTS = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.com",
        "localhost",
    }
)

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@attrs.frozen
class Refusal:
    """Why a connection to ``host`` (port ``port``, address ``address`` when one was judged)
    is refused."""

    host: str
    port: int | None
    reason: str
    address: str | None = None

    def __str__(self) -> str:
        where = self.host if self.port is None else f"{self.host}:{self.port}"
        at = f" ({self.address})" if self.address is not None and self.address != self.host else ""
        return f"egress to {where}{at} refused: {self.reason}"


def _embedded(address: _IPAddress) -> _IPAddress:
    """The IPv4 address an IPv6 one carries (IPv4-mapped, IPv4-compatible), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped
        if mapped is not None:
            return mapped
        number = int(address)
        if number >> 32 == 0 and number > 1:  # ::a.b.c.d (not :: or ::1)
            return ipaddress.IPv4Address(number)
    return address


def address_class(address: str | _IPAddress) -> str | None:
    """What makes ``address`` not public (``"loopback"``, ``"private"``, ``"link-local"``,
    ``"carrier-grade NAT"``, ``"multicast"``, ``"reserved"``, ``"unspecified"``), or ``None``
    for a public one. An IPv6 address carrying an IPv4 one is judged by that."""
    parsed = ipaddress.ip_address(address) if isinstance(address, str) else address
    judged = _embedded(parsed)
    if judged.is_unspecified:
        return "unspecified"
    if judged.is_loopback:
        return "loopback"
    if judged.is_link_local:
        return "link-local"
    if judged.is_multicast:
        return "multicast"
    if judged in ipaddress.IPv4Network("100.64.0.0/10"):
        return "carrier-grade NAT"
    if judged.is_private:
        return "private"
    if judged.is_reserved or not judged.is_global:
        return "reserved"
    return None


def _literal(host: str) -> _IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _networks(value: Iterable[str]) -> tuple[_Network, ...]:
    if isinstance(value, str):
        raise ValidationError("EgressPolicy.private must be a list of networks, not one string")
    out = []
    for text in value:
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except (TypeError, ValueError):
            raise ValidationError(f"EgressPolicy.private: not a network: {text!r}") from None
    return tuple(out)


def _entries(value: Iterable[str] | None) -> tuple[tuple[str, int | None], ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise ValidationError("EgressPolicy.allow must be a list of hosts, not one string")
    out = []
    for entry in value:
        if not isinstance(entry, str) or not entry or entry != entry.strip():
            raise ValidationError(f"EgressPolicy.allow: not a host: {entry!r}")
        host, port = entry.lower(), None
        if host.count(":") == 1 or (host.startswith("[") and "]:" in host):
            host, _, number = host.rpartition(":")
            if not number.isdecimal() or not 0 < int(number) < 65536:
                raise ValidationError(f"EgressPolicy.allow: not a port in {entry!r}")
            port = int(number)
        host = host.strip("[]")
        name = host[2:] if host.startswith("*.") else host
        if not name or "*" in name or "/" in name:
            raise ValidationError(f"EgressPolicy.allow: not a host: {entry!r}")
        out.append((host, port))
    return tuple(out)


@attrs.frozen
class EgressPolicy:
    """Which outbound connections may be made (see the module docstring). The default allows
    every public host on any port and refuses every address that is not public."""

    allow: tuple[tuple[str, int | None], ...] | None = attrs.field(default=None, converter=_entries)
    private: tuple[_Network, ...] = attrs.field(default=(), converter=_networks)

    def _listed(self, host: str, port: int) -> bool:
        if self.allow is None:
            return True
        for pattern, allowed in self.allow:
            if pattern.startswith("*."):
                matches = host.endswith(pattern[1:]) and host != pattern[2:]
            else:
                matches = host == pattern
            if matches and (port in DEFAULT_PORTS if allowed is None else port == allowed):
                return True
        return False

    def _address(self, host: str, port: int, address: _IPAddress) -> Refusal | None:
        kind = address_class(address)
        if kind is None:
            return None
        judged = _embedded(address)
        if any(judged in network or address in network for network in self.private):
            return None
        return Refusal(host, port, f"{kind} address", str(address))

    def check_url(self, url: str) -> Refusal | None:
        """Judge ``url`` before any lookup: its scheme, its host (by name, or the address it
        spells) and its port. ``None``: go on, and judge the addresses the name resolves to
        with :meth:`check_addresses`."""
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as error:
            return Refusal(str(url)[:200], None, f"not a URL ({error})")
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https", "ws", "wss"):
            return Refusal(parts.hostname or str(url)[:200], None, f"scheme {scheme!r}")
        host = (parts.hostname or "").rstrip(".").lower()
        if not host:
            return Refusal(str(url)[:200], None, "no host")
        if port is None:
            port = 443 if scheme in ("https", "wss") else 80
        return self.check_host(host, port)

    def check_host(self, host: str, port: int) -> Refusal | None:
        """Judge a host (a name or an address literal) and port before any lookup."""
        host = host.strip("[]").rstrip(".").lower()
        if not self._listed(host, port):
            return Refusal(host, port, "not in the allow-list")
        literal = _literal(host)
        if literal is not None:
            return self._address(host, port, literal)
        if host in METADATA_HOSTS or host.endswith(".localhost"):
            if self.private:  # allowed by name only through an address in ``private``
                return None
            return Refusal(host, port, "a metadata or local host name")
        return None

    def check_addresses(self, host: str, port: int, addresses: Iterable[str]) -> Refusal | None:
        """Judge every address ``host`` resolved to: refused when *any* is not public (and
        not in ``private``), or when there is none."""
        seen = False
        for text in addresses:
            seen = True
            try:
                address = ipaddress.ip_address(text.split("%", 1)[0])  # (a zone id is not ours)
            except ValueError:
                return Refusal(host, port, f"an answer that is not an address: {text!r}")
            refused = self._address(host, port, address)
            if refused is not None:
                return refused
        if not seen:
            return Refusal(host, port, "the name resolved to no address")
        return None
