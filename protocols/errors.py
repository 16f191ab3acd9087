"""The error taxonomy shared by every layer.

Every error raised on purpose by trio-agents derives from :class:`AgentsError`, which carries a
machine-readable :attr:`~AgentsError.code`, a :attr:`~AgentsError.category` (whose fault it was) and
a :attr:`~AgentsError.retryable` flag. Callers decide what to do from those attributes or from the
exception type, never from message text.

No error here ever renders a secret: messages are built by the raiser from bounded excerpts, and
:class:`ProviderError` truncates whatever vendor text it keeps.
"""

from __future__ import annotations

import enum
import itertools
import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from .messages import AgentResult, ProviderResult

__all__ = [
    "AbortError",
    "AgentsError",
    "Category",
    "ConfigError",
    "ProtocolError",
    "ProviderError",
    "SizeLimitError",
    "ToolError",
    "ValidationError",
    "excerpt",
    "redact",
    "scrub",
]

#: The most vendor text a :class:`ProviderError` keeps (characters).
EXCERPT_LIMIT = 2048


class Category(enum.StrEnum):
    """Whose fault an error is: the library user's, the provider's, or ours/the system's."""

    USER = "user"
    PROVIDER = "provider"
    SYSTEM = "system"


class AgentsError(Exception):
    """Base class of every error trio-agents raises on purpose.

    Guarantees: ``code`` is a short stable identifier suitable for metrics and branching,
    ``category`` says whose fault it was, ``retryable`` says whether repeating the same request
    may succeed. ``str(error)`` is a human-readable message without secrets.
    """

    default_code: ClassVar[str] = "error"
    default_category: ClassVar[Category] = Category.SYSTEM
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        category: Category | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code if code is not None else self.default_code
        self.category: Category = category if category is not None else self.default_category
        self.retryable: bool = retryable if retryable is not None else self.default_retryable

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ValidationError(AgentsError, ValueError):
    """A value broke an invariant of the data model (bad role/field combination, empty name, ...).

    Also a :class:`ValueError`, so code that validates with ``except ValueError`` keeps working.
    """

    default_code = "invalid"
    default_category = Category.USER


class ConfigError(AgentsError):
    """The library was configured with settings that cannot work together."""

    default_code = "config"
    default_category = Category.USER


class ProtocolError(AgentsError):
    """Bytes or JSON from a peer broke the protocol: malformed JSON, a truncated stream, an unknown
    field in one of our own wire formats, a frame of the wrong shape.

    The default category is ``provider``; decoders of client-sent data pass ``category=USER``.
    """

    default_code = "protocol"
    default_category = Category.PROVIDER


class SizeLimitError(ProtocolError):
    """An input exceeded a configured size limit (an SSE event, an NDJSON line, a frame).

    ``limit`` is the configured maximum and ``size`` the size seen when the limit was crossed (it
    may be a lower bound: decoding stops as soon as the limit is known to be exceeded).
    """

    default_code = "too_large"

    def __init__(
        self,
        what: str,
        *,
        limit: int,
        size: int,
        unit: str = "bytes",
        category: Category | None = None,
    ) -> None:
        super().__init__(
            f"{what} exceeds the limit of {limit} {unit} (at least {size} {unit})",
            category=category,
        )
        self.limit = limit
        self.size = size


class ProviderError(AgentsError):
    """A model provider failed: an HTTP error status, a transport failure, a vendor error record.

    ``status`` is the HTTP status when there was one; ``vendor_type`` and ``vendor_code`` are the
    vendor's own error classification when it sent one; ``excerpt`` is at most 2 KiB of the vendor's
    error text (never the whole body, never a request header); ``retry_after`` is the delay in
    seconds the vendor asked for, if any; ``partial`` is what the stream had produced when a
    failure ended it after output had already been shown (``None`` otherwise).
    """

    default_code = "provider_error"
    default_category = Category.PROVIDER

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        status: int | None = None,
        vendor_type: str | None = None,
        vendor_code: str | None = None,
        excerpt: str = "",
        retry_after: float | None = None,
        partial: ProviderResult | None = None,
    ) -> None:
        super().__init__(message, code=code, retryable=retryable)
        self.status = status
        self.vendor_type = vendor_type
        self.vendor_code = vendor_code
        self.excerpt = excerpt[:EXCERPT_LIMIT]
        self.retry_after = retry_after
        self.partial = partial

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, "
            f"retryable={self.retryable!r}, message={self.message!r})"
        )


class ToolError(AgentsError):
    """A tool could not be run as asked (bad arguments, failure, timeout, denial).

    ``tool`` names the tool and ``call_id`` the call, when known. The agent loop turns these into
    failure results the model sees; they reach library users only from direct tool invocation.
    """

    default_code = "tool_error"
    default_category = Category.USER

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        tool: str | None = None,
        call_id: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.tool = tool
        self.call_id = call_id


class AbortError(AgentsError):
    """Work was cut short by a cancel, a deadline or a budget, and ``partial`` is what it produced.

    ``reason`` is a short human-readable reason (``"cancelled"``, ``"timeout"``, ...). A cancel is
    not a failure, so the category is ``user`` and it is never retryable as such.
    """

    default_code = "aborted"
    default_category = Category.USER

    def __init__(
        self,
        message: str,
        *,
        partial: ProviderResult | AgentResult,
        reason: str = "cancelled",
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# Secrets in error text

#: What replaces a secret in text.
REDACTED = "[redacted]"

#: Secrets at least this long are removed wherever they appear, even inside a longer word;
#: shorter ones only where they stand as a whole token (see :func:`redact`).
ANYWHERE_LENGTH = 8

#: A mark of a cut text, before which a cut-off start of a secret is looked for.
_CUT_MARK = re.compile("\u2026|\\.\\.\\.")
#: The longest text :func:`scrub` keeps in an exception (longer ones are cut, marked).
_SCRUB_LIMIT = 64 * 1024

#: How many cut marks of one text are looked at.
_CUT_MARKS_SEEN = 64


def _variants(secret: str) -> list[str]:
    """The forms a secret may take in echoed text: as is, JSON-escaped, percent-encoded."""
    forms = [secret]
    for form in (json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe="")):
        if form not in forms:
            forms.append(form)
    return forms


def _pattern(secret: str) -> re.Pattern[str]:
    body = re.escape(secret)
    if len(secret) >= ANYWHERE_LENGTH:
        return re.compile(body)
    # A whole token: not next to a letter, a digit, "_" or any character of the secret itself.
    near = "".join(sorted({re.escape(char) for char in secret}))
    return re.compile(rf"(?<![\w{near}]){body}(?![\w{near}])")


def _cut_tail(text: str, secret: str) -> str:
    """``text`` with a cut-off start of ``secret`` (at least :data:`ANYWHERE_LENGTH` characters)
    replaced where the text ends or a cut mark follows it (the first :data:`_CUT_MARKS_SEEN`
    marks: a cut this library makes is one of them, and the work stays bounded)."""
    if len(secret) <= ANYWHERE_LENGTH:
        return text
    ends = {len(text)}
    ends.update(
        match.start() for match in itertools.islice(_CUT_MARK.finditer(text), _CUT_MARKS_SEEN)
    )
    for end in sorted(ends, reverse=True):
        for size in range(min(len(secret) - 1, end), ANYWHERE_LENGTH - 1, -1):
            if text.startswith(secret[:size], end - size):
                text = text[: end - size] + REDACTED + text[end:]
                break
    return text


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret of ``secrets`` replaced by ``[redacted]``.

    The rule, for each secret (``None``, empty and all-blank secrets are skipped):

    * A secret of at least :data:`ANYWHERE_LENGTH` (8) characters -- every real API key -- is
      removed wherever it appears, also inside a longer word, and so is its cut-off start (8
      characters or more) where the text ends or a cut mark (``...`` or ``\u2026``) follows it,
      which is how a truncated excerpt would show part of it.
    * A shorter secret (``"x"``, ``"none"``, ``"ollama"``: what local servers are given) is
      removed only where it stands as a whole token: not next to a letter, a digit, ``_`` or a
      character of the secret itself. So ``api_key="x"`` leaves ``"expected"`` readable but
      turns ``"bad key x"`` into ``"bad key [redacted]"``. A key that is an ordinary word is
      removed where that word stands alone, even when the text meant the word: the guarantee
      comes first.
    * The secret's JSON-escaped and percent-encoded forms are removed the same way.

    Guarantees: every standalone occurrence of each secret is gone, and of a secret of 8
    characters or more every occurrence at all; text already redacted stays as it is
    (``redact(redact(t, s), s) == redact(t, s)``); text without a secret is returned unchanged.
    """
    kept = [secret for secret in secrets if secret and secret.strip()]
    if not kept or not text:
        return text
    forms = sorted({form for secret in kept for form in _variants(secret)}, key=len, reverse=True)
    pieces = text.split(REDACTED)
    for form in forms:
        pattern = _pattern(form)
        pieces = [pattern.sub(REDACTED, piece) if form in piece else piece for piece in pieces]
    redacted = REDACTED.join(pieces)
    for form in forms:
        redacted = _cut_tail(redacted, form)
    return redacted


def excerpt(text: str, limit: int = 200) -> str:
    """At most ``limit`` characters of ``text`` for an error message, on one line: control
    characters become spaces and a cut is marked with ``\u2026`` (which :func:`redact` knows)."""
    flat = "".join(char if char.isprintable() else " " for char in text[: limit + 1])
    if len(text) <= limit:
        return flat
    return flat[: max(0, limit - 1)] + "\u2026"


def scrub(error: BaseException, secrets: Iterable[str | None]) -> None:
    """Redact ``secrets`` (see :func:`redact`) from ``error`` in place, and from every exception
    it was raised from or during (``__cause__``, ``__context__``): its string ``args`` and every
    string attribute (an :class:`AgentsError`'s ``message``; a :class:`ProviderError`'s
    ``excerpt``, ``vendor_type`` and ``vendor_code``; the document a ``json.JSONDecodeError``
    keeps; a text over 64 KiB is cut to its start). Redaction is idempotent, so it may be
    applied on every path an error takes."""
    kept = tuple(secret for secret in secrets if secret and secret.strip())
    seen: set[int] = set()
    current: BaseException | None = error
    stack: list[BaseException] = []
    while current is not None or stack:
        if current is None:
            current = stack.pop()
        if id(current) in seen:
            current = None
            continue
        seen.add(id(current))
        if kept:
            _scrub_one(current, kept)
        if current.__context__ is not None:
            stack.append(current.__context__)
        current = current.__cause__


def _scrub_one(error: BaseException, secrets: tuple[str, ...]) -> None:
    error.args = tuple(
        _scrub_text(arg, secrets) if isinstance(arg, str) else arg for arg in error.args
    )
    # Every text attribute: an AgentsError's message, a ProviderError's excerpt and vendor
    # labels, and what other exceptions keep (json.JSONDecodeError keeps the whole document).
    attributes = getattr(error, "__dict__", {})
    for name, value in list(attributes.items()):
        if isinstance(value, str):
            attributes[name] = _scrub_text(value, secrets)


def _scrub_text(text: str, secrets: tuple[str, ...]) -> str:
    # A text kept by an exception may be a whole record of megabytes: its start is enough.
    if len(text) > _SCRUB_LIMIT:
        text = text[:_SCRUB_LIMIT] + "\u2026"
    return redact(text, secrets)
