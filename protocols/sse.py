"""Incremental, sans-IO decoding of ``text/event-stream`` (server-sent events).

:class:`SSEDecoder` turns the bytes of an event stream, fed in chunks of any size, into
:class:`SSEEvent` and :class:`SSEComment` items, following the event-stream interpretation rules
of the WHATWG HTML standard ("Server-sent events", section 9.2.6).

Written here rather than taken from a library for two reasons. It must be sans-IO: it sees only
bytes handed to it, never a response object, a socket or an event loop, so the same code serves
every transport and every test. And it is the hottest loop of the runtime: every token of every
streamed model reply passes through it, so it is written for speed, and for time linear in the
input whatever the chunking. Each fed chunk is split into lines once, in C; a line still arriving
is kept as a list of pieces joined once when it completes; field values stay ``bytes`` until an
event is dispatched, and an event's data is joined and decoded once; a run of ``data:`` lines
(a long multi-line event) is taken a chunk at a time rather than line by line; and the size limit
is checked per chunk, line by line only when a chunk might cross it.
"""

from __future__ import annotations

from typing import cast

import attrs

from .errors import Category, ProtocolError, SizeLimitError

__all__ = ["SSEComment", "SSEDecoder", "SSEEvent"]

_BOM = b"\xef\xbb\xbf"
_DEFAULT_MAX_EVENT_SIZE = 16 * 1024 * 1024


@attrs.frozen
class SSEEvent:
    """One dispatched server-sent event.

    ``data`` is the event's data lines joined with ``"\\n"`` (``""`` for a lone ``data:`` line);
    ``event`` its type (``"message"`` unless an ``event`` field named another); ``id`` the stream's
    last event ID when the event was dispatched (it persists across events; ``None`` while no
    ``id`` field has set it, or after one reset it to empty); ``retry`` the reconnection time in
    milliseconds given by a valid ``retry`` field of this event's block, else ``None``.
    """

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


@attrs.frozen
class SSEComment:
    """A comment line of the stream (a line starting with ``:``), such as a keep-alive.

    ``text`` is what follows the colon, with one leading space removed if there is one, so
    ``: keep-alive`` gives ``SSEComment(text="keep-alive")``.
    """

    text: str


# Writing the slots directly builds an SSEEvent identical to what ``SSEEvent(...)`` builds (it has
# no validators or converters to skip), at about half the cost of the attrs ``__init__`` of a
# frozen class; this runs once per event.
_new_event = object.__new__
_set_data = SSEEvent.__dict__["data"].__set__
_set_event = SSEEvent.__dict__["event"].__set__
_set_id = SSEEvent.__dict__["id"].__set__
_set_retry = SSEEvent.__dict__["retry"].__set__


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _tail_size(lines: list[bytes]) -> int:
    """The total length of the lines after the last blank one (there must be one)."""
    size = 0
    i = len(lines) - 1
    line = lines[i]
    while line:
        size += len(line)
        i -= 1
        line = lines[i]
    return size


class SSEDecoder:
    """Incremental event-stream decoder: bytes in, events and comments out, no I/O.

    Guarantees:

    * Splitting the same stream into chunks differently never changes the output: lines end at
      LF, CR or CRLF, also when the CR ends one chunk and the LF starts the next; a UTF-8 byte order
      mark at the very start of the stream is removed even when split across chunks.
    * Fields follow the WHATWG rules: ``data`` lines are joined with ``"\\n"``; ``event`` sets the
      type (default ``"message"``); ``id`` sets the last event ID unless it contains NUL, and the
      ID persists across events; ``retry`` counts only if it is all ASCII digits; other fields
      are ignored; a line without a colon is a field with an empty value; one space after the
      colon is removed; a blank line dispatches the event, unless no ``data`` line was seen
      (``data:`` alone does dispatch, with ``data=""``).
    * Text is decoded as UTF-8 with invalid bytes replaced by U+FFFD.
    * Memory is bounded: the size of an event is the number of bytes of all its lines since the
      previous blank line (any field, comment or ignored line, not counting line terminators),
      including a line still arriving; when it exceeds ``max_event_size``
      :class:`~protocols.errors.SizeLimitError` is raised as soon as the chunk that crosses the
      limit is fed, before the rest of the line or event arrives.
    * Work is linear in the number of bytes fed.

    After an error or :meth:`close`, :meth:`feed` raises
    :class:`~protocols.errors.ProtocolError`.
    """

    __slots__ = (
        "_closed",
        "_data",
        "_event",
        "_failed",
        "_head",
        "_id",
        "_last_event_id",
        "_max",
        "_pending",
        "_pending_len",
        "_reconnect",
        "_retry",
        "_size",
        "_skip_lf",
    )

    def __init__(self, *, max_event_size: int = _DEFAULT_MAX_EVENT_SIZE) -> None:
        """Create a decoder for one stream; ``max_event_size`` (bytes, >= 1) bounds each event.

        Raises :class:`ValueError` if ``max_event_size`` is less than 1.
        """
        if max_event_size < 1:
            raise ValueError(f"max_event_size must be at least 1, not {max_event_size}")
        self._max = max_event_size
        # The first bytes of the stream while they may still be the start of a BOM; None after.
        self._head: bytes | None = b""
        # The line still arriving, as pieces joined once it completes.
        self._pending: list[bytes] = []
        # Bytes of the current event's complete lines since the last blank line, and of the
        # pending piece.
        self._size = 0
        self._pending_len = 0
        # The previous chunk ended with CR, so an LF starting the next one ends no line.
        self._skip_lf = False
        # The event being built: data lines, type, retry of this block.
        self._data: list[bytes] = []
        self._event = "message"
        self._retry: int | None = None
        # The spec's "last event ID buffer" (None when empty) and the ID as of the last dispatch.
        self._id: str | None = None
        self._last_event_id: str | None = None
        # The latest valid reconnection time seen anywhere in the stream.
        self._reconnect: int | None = None
        self._closed = False
        self._failed = False

    @property
    def last_event_id(self) -> str | None:
        """The stream's last event ID as of the last blank line: what a reconnecting client sends
        as ``Last-Event-ID`` (``None`` if no ``id`` field set it, or one reset it to empty).

        An ``id`` field counts from the blank line that ends its block, whether or not that block
        dispatched an event.
        """
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The latest valid ``retry`` value (milliseconds) seen anywhere in the stream, or ``None``.

        Unlike :attr:`SSEEvent.retry` this also reflects ``retry`` fields of blocks that carried
        no data (and so dispatched no event), which is how servers usually send it.
        """
        return self._reconnect

    def feed(self, data: bytes) -> list[SSEEvent | SSEComment]:
        """Decode the next chunk of the stream; return the events and comments it completed,
        in stream order.

        Raises :class:`~protocols.errors.SizeLimitError` when an event exceeds the size limit, and
        :class:`~protocols.errors.ProtocolError` with category ``SYSTEM`` if the decoder was closed
        or failed earlier (a caller's mistake). After an error the decoder is finished: nothing of
        the failing chunk is returned.
        """
        if self._closed or self._failed:
            raise self._finished_error()
        if self._head is not None:
            head = self._head + data
            if len(head) < 3 and _BOM.startswith(head):
                self._head = head
                return []
            self._head = None
            data = head[3:] if head.startswith(_BOM) else head
        if not data:
            return []
        if self._skip_lf or 13 in data or self._size + self._pending_len + len(data) > self._max:
            return self._feed_lines(data)
        # The common case: LF line endings only, far from the size limit.
        pending = self._pending
        end = data.rfind(10)
        if end < 0:
            pending.append(data)
            self._pending_len += len(data)
            return []
        first = data.find(10)
        if data[first + 1 : first + 7] == b"data: " and self._take_data_run(data, end):
            return []
        pieces = data.split(b"\n\ndata: ")
        if len(pieces) == 1:
            lines = data.split(b"\n")
            partial = lines.pop()
            # Lengths of the completed lines: the chunk's bytes without LFs, and the pending piece.
            completed = self._pending_len + end - len(lines) + 1
            if pending:
                self._complete_pending(lines)
            if partial:
                pending.append(partial)
            self._pending_len = len(partial)
            out, blank = self._run([lines])
            self._size = _tail_size(lines) if blank else self._size + completed
            return out
        # The chunk holds blank lines followed by "data: " lines (typical of LLM streams): the
        # pieces between those splits are mostly the values of one-line events, which _run
        # takes whole. The first piece ends before the blank line; the last one starts after the
        # "data: " and ends with the partial line.
        head_lines = pieces[0].split(b"\n")
        if pending:
            self._complete_pending(head_lines)
        head_lines.append(b"")
        tail_lines = (b"data: " + pieces[-1]).split(b"\n")
        partial = tail_lines.pop()
        if partial:
            pending.append(partial)
        self._pending_len = len(partial)
        segments = cast("list[list[bytes] | bytes]", pieces)
        segments[0] = head_lines
        segments[-1] = tail_lines
        out, _ = self._run(segments)
        self._size = _tail_size(tail_lines) if b"" in tail_lines else sum(map(len, tail_lines))
        return out

    def _complete_pending(self, lines: list[bytes]) -> None:
        """Join the pending pieces and ``lines[0]`` into the line they complete.

        A "data: " line goes straight to the data buffer (and out of ``lines``), sparing a copy
        of its value, which matters when it is a huge line that arrived in many pieces. Only for
        the LF fast path, whose size accounting does not look at that line.
        """
        pending = self._pending
        pending.append(lines[0])
        first = pending[0]
        if first[:6] == b"data: ":
            pending[0] = first[6:]
            self._data.append(b"".join(pending))
            del lines[0]
        else:
            lines[0] = b"".join(pending)
        pending.clear()

    def _take_data_run(self, data: bytes, end: int) -> bool:
        """If the lines ``data`` completes are all "data: " lines (a long multi-line event),
        buffer their values at once and return True; else change nothing and return False."""
        pending = self._pending
        region = b"".join([*pending, data[:end]]) if pending else data[:end]
        if region[:6] != b"data: ":
            return False
        values = region.split(b"\ndata: ")
        values[0] = values[0][6:]
        joined = b"\n".join(values)
        if joined.count(10) != len(values) - 1:  # some value holds a line ending
            return False
        self._data.append(joined)
        self._size += len(region) - len(values) + 1
        pending.clear()
        self._pending_len = len(data) - end - 1
        if self._pending_len:
            pending.append(data[end + 1 :])
        return True

    def _feed_lines(self, data: bytes) -> list[SSEEvent | SSEComment]:
        """:meth:`feed` for chunks with a CR, after a chunk that ended with CR, or near the size
        limit: lines split at CR, LF and CRLF, the event size measured line by line when the chunk
        might cross the limit."""
        lines = data.splitlines()
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == 10:
                # This LF completes the CRLF that ended the previous chunk's last line.
                del lines[0]
        last = data[-1]
        if last == 13:
            self._skip_lf = True
            partial = b""
        elif last == 10:
            partial = b""
        else:
            partial = lines.pop()
        pending = self._pending
        if self._size + self._pending_len + len(data) > self._max:
            # The chunk may cross the limit: measure exactly before interpreting anything.
            self._check_size(lines, partial)
            exact = True
        else:
            exact = False
        if not lines:
            if partial:
                pending.append(partial)
                self._pending_len += len(partial)
            return []
        if pending:
            pending.append(lines[0])
            lines[0] = b"".join(pending)
            pending.clear()
        if partial:
            pending.append(partial)
        self._pending_len = len(partial)
        out, blank = self._run([lines])
        if not exact:
            self._size = _tail_size(lines) if blank else self._size + sum(map(len, lines))
        return out

    def close(self) -> list[SSEEvent | SSEComment]:
        """Signal the end of the stream; return the items its last, unterminated line gives.

        A final line without a line terminator is processed as a line (so a trailing comment is
        returned and a trailing ``id`` or ``retry`` field takes effect on the decoder's buffers),
        and then, as the standard requires, the incomplete event -- one not ended by a blank line
        -- is discarded, never dispatched. :attr:`last_event_id` keeps the value of the last
        blank line. Calling it again, or after an error, returns ``[]``.
        """
        if self._closed or self._failed:
            return []
        self._closed = True
        pending = self._pending
        if self._head:
            pending.append(self._head)
        self._head = None
        out: list[SSEEvent | SSEComment] = []
        if pending:
            line = b"".join(pending)
            pending.clear()
            out, _ = self._run([[line]])
        self._data = []
        self._event = "message"
        self._retry = None
        self._size = 0
        self._pending_len = 0
        return out

    def _finished_error(self) -> ProtocolError:
        state = "failed earlier" if self._failed else "is closed"
        return ProtocolError(
            f"SSE decoder {state} and cannot decode more input", category=Category.SYSTEM
        )

    def _check_size(self, lines: list[bytes], partial: bytes) -> None:
        """Set the event size after ``lines`` and ``partial`` exactly; raise when over the limit.

        Called before the pending piece is joined to ``lines[0]``.
        """
        limit = self._max
        size = self._size
        carry = self._pending_len
        for line in lines:
            if line or carry:
                size += carry + len(line)
                carry = 0
                if size > limit:
                    self._fail_size(size)
            else:
                size = 0
        if size + carry + len(partial) > limit:
            self._fail_size(size + carry + len(partial))
        self._size = size

    def _fail_size(self, size: int) -> None:
        self._failed = True
        raise SizeLimitError("SSE event", limit=self._max, size=size)

    def _run(self, segments: list[list[bytes] | bytes]) -> tuple[list[SSEEvent | SSEComment], bool]:
        """Interpret complete lines; return the items and whether any line was blank.

        ``segments`` holds lists of lines, and between them may hold ``bytes`` standing for the
        lines ``b"data: " + segment`` then a blank line, right after a blank line.
        """
        out: list[SSEEvent | SSEComment] = []
        append = out.append
        data = self._data
        add = data.append
        event = self._event
        id_ = self._id
        retry = self._retry
        committed = self._last_event_id
        blank = False
        for segment in segments:
            if isinstance(segment, bytes):
                if 10 not in segment:
                    # One data line between blank lines: an event with only data (the blank line
                    # before it reset the type and retry and committed the ID).
                    ev = _new_event(SSEEvent)
                    _set_data(ev, segment.decode("utf-8", "replace"))
                    _set_event(ev, "message")
                    _set_id(ev, id_)
                    _set_retry(ev, None)
                    append(ev)
                    continue
                lines = (b"data: " + segment).split(b"\n")
                lines.append(b"")
            else:
                lines = segment
            for line in lines:
                if not line:
                    # Dispatch. Step 1 commits the ID buffer, even for a block without data.
                    blank = True
                    committed = id_
                    if data:
                        ev = _new_event(SSEEvent)
                        _set_data(ev, b"\n".join(data).decode("utf-8", "replace"))
                        _set_event(ev, event)
                        _set_id(ev, id_)
                        _set_retry(ev, retry)
                        append(ev)
                        del data[:]
                    event = "message"
                    retry = None
                    continue
                if line[:6] == b"data: ":
                    add(line[6:])
                    continue
                colon = line.find(58)
                if colon == 0:
                    text = line[2:] if line[1:2] == b" " else line[1:]
                    append(SSEComment(_decode(text)))
                    continue
                if colon < 0:
                    name = line
                    value = b""
                else:
                    name = line[:colon]
                    value = line[colon + 1 :]
                    if value[:1] == b" ":
                        value = value[1:]
                if name == b"data":
                    add(value)
                elif name == b"event":
                    event = _decode(value) or "message"
                elif name == b"id":
                    if 0 not in value:
                        id_ = _decode(value) or None
                elif name == b"retry" and value.isdigit():
                    try:
                        retry = int(value)
                    except ValueError:  # more digits than int() accepts: no sane delay
                        continue
                    self._reconnect = retry
        self._data = data
        self._event = event
        self._retry = retry
        self._id = id_
        self._last_event_id = committed
        return out, blank
