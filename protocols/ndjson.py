"""Incremental, sans-IO decoding of newline-delimited JSON (NDJSON / JSON Lines).

:class:`NDJSONDecoder` turns bytes fed in chunks of any size into the JSON values of complete
lines, each parsed strictly by :func:`protocols._json.loads`. It sees only bytes, never a
response or a socket, so every transport and test can drive it. Each fed chunk is split once, a
line still arriving is kept as pieces joined once when it completes, so work is linear in the
input whatever the chunking.
"""

from __future__ import annotations

from typing import Any

from ._json import loads
from .errors import Category, ProtocolError, SizeLimitError

__all__ = ["NDJSONDecoder"]

#: How much of a line that failed to parse the decoder keeps (bytes).
FAILED_LINE_KEPT = 1024

_DEFAULT_MAX_LINE_SIZE = 16 * 1024 * 1024
# JSON's whitespace: a line made only of these carries no value.
_JSON_SPACE = b" \t\r\n"


class NDJSONDecoder:
    """Incremental NDJSON decoder: bytes in, one parsed JSON value per non-blank line out.

    Guarantees:

    * Lines end with LF; one CR right before the LF is dropped. Lines holding only JSON
      whitespace (space, tab, CR) are skipped but still counted.
    * Every value is strict JSON as :func:`protocols._json.loads` defines it. A line that is not
      raises :class:`~protocols.errors.ProtocolError` (``code="json"``, the decoder's
      ``category``) whose message names the 1-based line number (blank lines count) and the JSON
      error.
    * A line longer than ``max_line_size`` bytes (not counting its LF) raises
      :class:`~protocols.errors.SizeLimitError` as soon as the chunk that makes it too long is fed,
      before the rest of the line arrives.
    * Splitting the same input into chunks differently never changes the output, and work is
      linear in the number of bytes fed.

    After an error or :meth:`close`, :meth:`feed` raises
    :class:`~protocols.errors.ProtocolError`. The values of the failing chunk's lines before the
    one that failed to parse are kept in :attr:`before_failure`, for a caller to whom they still
    matter (a stream whose last record came before the bad line).
    """

    __slots__ = (
        "_category",
        "_closed",
        "_failed",
        "_lines",
        "_max",
        "_pending",
        "_pending_len",
        "before_failure",
        "failed_line",
    )

    def __init__(
        self,
        *,
        max_line_size: int = _DEFAULT_MAX_LINE_SIZE,
        category: Category = Category.PROVIDER,
    ) -> None:
        """Create a decoder for one stream.

        ``max_line_size`` (bytes, >= 1) bounds each line; ``category`` is the category of the
        errors raised (``PROVIDER`` for model output, ``USER`` for client input). Raises
        :class:`ValueError` if ``max_line_size`` is less than 1.
        """
        if max_line_size < 1:
            raise ValueError(f"max_line_size must be at least 1, not {max_line_size}")
        self._max = max_line_size
        self._category = category
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._lines = 0
        self._closed = False
        self._failed = False
        #: The start (at most :data:`FAILED_LINE_KEPT` bytes) of the line that failed to parse,
        #: once one has: for an error message that shows it.
        self.failed_line: bytes | None = None
        #: The values of the lines of the failing chunk before the line that failed to parse,
        #: once one has (empty otherwise, and after a size error).
        self.before_failure: list[Any] = []

    @property
    def lines(self) -> int:
        """The number of complete lines seen so far, blank ones included (after :meth:`close`,
        also an unterminated final line)."""
        return self._lines

    def feed(self, data: bytes) -> list[Any]:
        """Decode the next chunk; return the values of the lines it completed, in order.

        Raises :class:`~protocols.errors.ProtocolError` for a malformed line,
        :class:`~protocols.errors.SizeLimitError` for a line over the size limit (both with the
        decoder's ``category``), and :class:`~protocols.errors.ProtocolError` with category
        ``SYSTEM`` if the decoder was closed or failed earlier (a caller's mistake). After an error
        the decoder is finished: nothing of the failing chunk is returned.
        """
        if self._closed or self._failed:
            state = "failed earlier" if self._failed else "is closed"
            raise ProtocolError(
                f"NDJSON decoder {state} and cannot decode more input", category=Category.SYSTEM
            )
        if not data:
            return []
        parts = data.split(b"\n")
        partial = parts.pop()
        pending = self._pending
        limit = self._max
        if self._pending_len + len(data) > limit:
            # Some line may be too long: measure each before parsing anything.
            first = self._pending_len
            for part in parts:
                if first + len(part) > limit:
                    self._fail_size(first + len(part))
                first = 0
            if first + len(partial) > limit:
                self._fail_size(first + len(partial))
        if not parts:
            pending.append(partial)
            self._pending_len += len(partial)
            return []
        if pending:
            pending.append(parts[0])
            parts[0] = b"".join(pending)
            pending.clear()
        if partial:
            pending.append(partial)
        self._pending_len = len(partial)
        return self._parse(parts)

    def close(self) -> list[Any]:
        """Signal the end of input; return the value of an unterminated final line, if any.

        A final line without LF is parsed like any other (not dropped); a malformed one raises
        :class:`~protocols.errors.ProtocolError`. Calling it again, or after an error, returns
        ``[]``.
        """
        if self._closed or self._failed:
            return []
        self._closed = True
        if not self._pending:
            return []
        line = b"".join(self._pending)
        self._pending.clear()
        self._pending_len = 0
        return self._parse([line])

    def _fail_size(self, size: int) -> None:
        self._failed = True
        raise SizeLimitError("NDJSON line", limit=self._max, size=size, category=self._category)

    def _parse(self, lines: list[bytes]) -> list[Any]:
        out: list[Any] = []
        append = out.append
        category = self._category
        number = self._lines
        for line in lines:
            number += 1
            if not line.strip(_JSON_SPACE):
                continue
            try:
                append(loads(line[:-1] if line[-1] == 13 else line, category=category))
            except ProtocolError as exc:
                self._lines = number
                self._failed = True
                self.failed_line = bytes(line[:FAILED_LINE_KEPT])
                self.before_failure = out
                raise ProtocolError(
                    f"NDJSON line {number}: {exc.message}", code="json", category=category
                ) from exc
        self._lines = number
        return out
