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
