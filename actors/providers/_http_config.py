"""What configures the HTTP engine of ``_http``: a call's time limits (:class:`Timeouts`), its
retries (:class:`RetryPolicy`, the ``Retry-After`` a vendor asks for, the retry listeners), a
vendor's :class:`WireFormat`, and the checks of a provider's extra headers and query. Nothing
here is on the path of a streamed delta."""

from __future__ import annotations

import datetime
import email.utils
import logging
import math
import random
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs
import httpx

from protocols.errors import ConfigError
from protocols.wire.schema import Vendor

from ._interface import _RETRY_OBSERVERS, RetryEvent

__all__ = ["RetryPolicy", "Timeouts", "WireFormat", "parse_retry_after"]

# The engine's logger: a retry listener that raised is logged under the engine's name.
log = logging.getLogger("actors.providers._http")

#: Words in a header name that mark its value as a credential (redacted from errors).
_CREDENTIAL_WORDS = ("auth", "key", "token", "secret", "password", "cookie", "signature")

#: How many credential values supplied by an ``auth=`` hook are remembered for redaction.
_REMEMBERED_CREDENTIALS = 16

#: Headers the engine sets itself; ``headers=`` may not override them.
PROTECTED_HEADERS = frozenset(
    {"content-type", "accept", "authorization", "x-api-key", "anthropic-version", "host"}
)


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{type(instance).__name__}.{attribute.name} must be > 0, not {value!r}")


@attrs.frozen
class Timeouts:
    """Per-call time limits, in seconds (``math.inf`` for none).

    - ``deadline``: the whole call, from the first byte sent to the last delta.
    - ``first_event``: from sending the request to the first *event* (a status line alone, or
      keep-alive comments, do not count).
    - ``idle``: between two events; SSE comments and keep-alives do not reset it.
    - ``connect``: establishing the connection.
    """

    deadline: float = attrs.field(default=120.0, validator=_positive)
    first_event: float = attrs.field(default=60.0, validator=_positive)
    idle: float = attrs.field(default=30.0, validator=_positive)
    connect: float = attrs.field(default=10.0, validator=_positive)


@attrs.frozen
class RetryPolicy:
    """Retries before the first delta reaches the caller (never after: a stream the caller has
    seen is never replayed). ``retries`` extra attempts, waiting a random time up to
    ``min(maximum, initial * 2**n)`` (full jitter), or what the vendor's ``Retry-After`` (or
    ``retry-after-ms``) asks for when that is at most ``max_retry_after`` seconds -- the cap: a
    longer ask (``Retry-After: 86400``) is not waited for, the jittered backoff applies
    instead, as for a header that is not a number of seconds or an HTTP date. A wait that would
    pass the call's deadline (``Timeouts.deadline``) is not begun: the failure is raised at
    once, with no retry reported."""

    retries: int = 2
    initial: float = attrs.field(default=0.5, validator=_positive)
    maximum: float = attrs.field(default=8.0, validator=_positive)
    max_retry_after: float = attrs.field(default=60.0, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.retries < 0:
            raise ConfigError(f"RetryPolicy.retries must be >= 0, not {self.retries!r}")

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None) -> float:
        """The wait before retry number ``attempt`` (0-based)."""
        if retry_after is not None and 0 <= retry_after <= self.max_retry_after:
            return retry_after
        return rng.uniform(0, min(self.maximum, self.initial * 2 ** min(attempt, 32)))


def _report_retry(event: RetryEvent, own: Callable[[RetryEvent], object] | None, name: str) -> None:
    for listener in (own, *_RETRY_OBSERVERS.get()):
        if listener is None:
            continue
        try:
            listener(event)
        except Exception:
            log.exception("a retry listener of %s raised", name)


#: A delay in seconds as a ``Retry-After`` (RFC 9110: digits) or ``retry-after-ms`` header
#: gives it; a fraction is tolerated. ASCII only: ``float`` would also take ``-5``, ``nan``,
#: ``inf``, ``1e3``, ``1_0`` and digits of other scripts.
_DELAY = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")


def _retry_after(headers: httpx.Headers) -> float | None:
    return parse_retry_after(
        headers.get("retry-after-ms"),
        headers.get("retry-after"),
        now=datetime.datetime.now(datetime.UTC),
    )


def parse_retry_after(
    milliseconds: str | None, value: str | None, *, now: datetime.datetime
) -> float | None:
    """The wait, in seconds, a response's ``retry-after-ms`` (OpenAI's, tried first) or
    ``Retry-After`` header asks for: a number of seconds, or an HTTP date (a date without a
    zone, as the obsolete asctime form writes it, is in GMT) less ``now``, and 0 for a date
    already past. ``None`` for a header that is absent or not one of those -- a negative
    number, ``nan``, garbage: the ordinary backoff applies then. Never raises, and never
    returns anything but ``None`` or a finite number >= 0."""
    if milliseconds is not None and _DELAY.fullmatch(milliseconds.strip()):
        return float(milliseconds.strip()) / 1000
    if value is None:
        return None
    value = value.strip()
    if _DELAY.fullmatch(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    try:
        wait = (when - now).total_seconds()
    except OverflowError:  # pragma: no cover - both dates are within datetime's range
        return None
    return max(0.0, wait) if math.isfinite(wait) else None


def _query(name: str, query: Mapping[str, str] | None) -> dict[str, str]:
    """``query=`` checked: string names and values (a ConfigError names the first that is not)."""
    checked = dict(query or {})
    for key, value in checked.items():
        if not (isinstance(key, str) and key and isinstance(value, str)):
            raise ConfigError(
                f"{name}: query= maps parameter names to string values; {str(key)[:40]!r} "
                f"is given {type(value).__name__}"
            )
    return checked


@attrs.frozen
class WireFormat:
    """A vendor's wire format, as the engine needs it: where to post, how the response is
    framed, and the pure functions of its ``protocols.wire`` module."""

    path: str
    framing: Literal["sse", "ndjson"]
    #: Whose tool-schema rules apply (see ``protocols.wire.schema.project``).
    schema_vendor: Vendor
    encode_request: Callable[..., dict[str, Any]]
    new_reader: Callable[[], Any]
    error_details: Callable[[str], tuple[str | None, str | None, str]]
