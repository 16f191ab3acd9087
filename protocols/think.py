"""Separate inline ``<think>...</think>`` reasoning from a model's visible answer, incrementally.

Some models write their reasoning into the ordinary text stream between ``<think>`` and
``</think>``. :class:`ThinkSplitter` takes the raw deltas of one stream, one at a time, and returns
the clean pieces as :class:`~protocols.messages.Delta` values on the ``"content"`` or
``"thinking"`` channel, in stream order. The rules:

* Text between an opening and a closing tag is thinking; all other text is content. A stream may
  hold any number of spans. Tags are matched exactly (case-sensitive, no spaces or attributes) and
  never appear in the output.
* A delta that ends with the beginning of a tag (``"<"``, ``"</th"``, ...) holds back only that
  ending until the next delta decides it. If it turns out not to be a tag it is released as
  ordinary text of the current channel, so nothing is lost and nothing is misfiled.
* Inside a span only the closing tag matters: a nested ``<think>`` is thinking text. A span the
  stream never closes is thinking up to the end.
* Qwen3-style templates put the opening tag in the prompt, so the model's output starts inside a
  span and only shows the closing tag. Hence, if a closing tag arrives before any tag has been seen,
  everything surfaced until then is reclassified as thinking and the authoritative
  :attr:`ThinkSplitter.content` restarts empty. This happens at most once per stream, and never
  after an opening tag; otherwise a closing tag outside a span is plain content text. Content
  deltas already handed out cannot be taken back, so in that one case the live deltas over-report
  content; :attr:`ThinkSplitter.reclassified` tells callers to trust the accumulated properties.
* :meth:`ThinkSplitter.flush` ends the stream: a held tag fragment that never completed is
  released as text of the channel it was held in.

The splitter is sans-IO and does linear work in the total input: each delta is scanned once, and at
most a few characters (a tag fragment) are carried to the next call.
"""

from __future__ import annotations

import itertools
import operator
from typing import Final

from .errors import ValidationError
from .messages import Channel, Delta, trusted_delta

__all__ = ["THINK_CLOSE", "THINK_OPEN", "ThinkSplitter"]

#: The tag that opens a thinking span.
THINK_OPEN: Final = "<think>"
#: The tag that closes a thinking span.
THINK_CLOSE: Final = "</think>"

_OPEN_LEN: Final = len(THINK_OPEN)
_CLOSE_LEN: Final = len(THINK_CLOSE)


class ThinkSplitter:
    """Split one stream of raw model text into content and thinking; see the module docstring.

    Use one instance per stream: call :meth:`feed` with each raw delta, then :meth:`flush` once at
    the end. Guarantees:

    * The Deltas returned by :meth:`feed` and :meth:`flush` are in stream order, never empty, and
      consecutive Deltas within one returned list are on different channels (pieces of the same
      channel are merged).
    * A tag that takes effect (an open, a close, the implicit-open close) never appears in the
      output; all other text, including tag-like text that is inert, is never dropped.
    * At most a proper prefix of a tag (under 8 characters) is held back between calls, and only
      when it could still become a tag that matters in the current state.
    * Unless :attr:`reclassified` is true, the concatenated content Deltas of all calls equal
      :attr:`content` and the concatenated thinking Deltas equal :attr:`thinking`.
    * The final :attr:`content`, :attr:`thinking` and :attr:`reclassified` depend only on the
      concatenated input, not on how it was split into deltas.
    """

    __slots__ = (
        "_content_parts",
        "_flushed",
        "_held",
        "_inside",
        "_reclassified",
        "_seen_tag",
        "_thinking_parts",
    )

    def __init__(self) -> None:
        self._content_parts: list[str] = []
        self._thinking_parts: list[str] = []
        # A trailing fragment of the input that may still become a tag (never a whole tag).
        self._held = ""
        self._inside = False
        # True once an opening tag or the implicit-open reclassification has happened.
        self._seen_tag = False
        self._reclassified = False
        self._flushed = False

    @property
    def content(self) -> str:
        """All content so far, authoritative (includes the qwen3 correction); final after flush.

        Does not include a held tag fragment. Cheap to read repeatedly: pieces are joined only when
        new ones arrived since the last read.
        """
        parts = self._content_parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    @property
    def thinking(self) -> str:
        """All thinking so far, authoritative (includes reclassified text); final after flush.

        Does not include a held tag fragment. Cheap to read repeatedly, like :attr:`content`.
        """
        parts = self._thinking_parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    @property
    def reclassified(self) -> bool:
        """Whether a bare ``</think>`` before any other tag turned earlier content into thinking.

        When true, the content Deltas emitted before that point over-report: :attr:`content` and
        :attr:`thinking` are the corrected values.
        """
        return self._reclassified

    def feed(self, text: str) -> list[Delta]:
        """Consume one raw delta and return the pieces it settles, in stream order.

        Returns an empty list when ``text`` is empty or is entirely a held tag fragment.

        Raises:
            ValidationError: if called after :meth:`flush` (it is also a :class:`ValueError`).
        """
        if self._flushed:
            raise ValidationError("ThinkSplitter.feed() called after flush()")
        if not self._held and "<" not in text:
            # Fast path: no tag can start or complete here, so the whole delta is one piece.
            if not text:
                return []
            if self._inside:
                self._thinking_parts.append(text)
                return [trusted_delta("thinking", text)]
            self._content_parts.append(text)
            return [trusted_delta("content", text)]
        buf = self._held + text
        self._held = ""
        return self._scan(buf)

    def flush(self) -> list[Delta]:
        """End the stream and return what was still held back (at most one Delta).

        A held tag fragment that never completed is returned as thinking if the stream was inside a
        span, else as content. After this, :attr:`content` and :attr:`thinking` are final. Calling
        it again returns an empty list.
        """
        if self._flushed:
            return []
        self._flushed = True
        held = self._held
        self._held = ""
        if not held:
            return []
        if self._inside:
            self._thinking_parts.append(held)
            return [Delta("thinking", held)]
        self._content_parts.append(held)
        return [Delta("content", held)]

    def _scan(self, buf: str) -> list[Delta]:
        """Slow path of :meth:`feed`: process ``buf`` (held fragment + new delta)."""
        out: list[tuple[Channel, str]] = []
        pos = 0
        end = len(buf)
        while pos < end:
            if self._inside:
                i = buf.find(THINK_CLOSE, pos)
                if i < 0:
                    cut = self._hold_point(buf, pos, close_only=True)
                    self._emit(out, "thinking", buf[pos:cut])
                    self._held = buf[cut:]
                    return _merge(out)
                self._emit(out, "thinking", buf[pos:i])
                pos = i + _CLOSE_LEN
                self._inside = False
                continue
            i = buf.find(THINK_OPEN, pos)
            if not self._seen_tag:
                # A close cannot overlap an open that follows it (a tag has '<' only first), so
                # looking for one strictly before the open is enough.
                j = buf.find(THINK_CLOSE, pos, i if i >= 0 else end)
                if j >= 0:
                    self._reclassify(out, buf[pos:j])
                    pos = j + _CLOSE_LEN
                    continue
            if i < 0:
                cut = self._hold_point(buf, pos, close_only=False)
                self._emit(out, "content", buf[pos:cut])
                self._held = buf[cut:]
                return _merge(out)
            self._emit(out, "content", buf[pos:i])
            pos = i + _OPEN_LEN
            self._inside = True
            self._seen_tag = True
        return _merge(out)

    def _hold_point(self, buf: str, pos: int, *, close_only: bool) -> int:
        """Return where the held suffix of ``buf[pos:]`` starts (``len(buf)`` if nothing held).

        The held suffix is the one that is a proper prefix of a tag that still matters: the close
        inside a span; outside, the open, plus the close while it could still trigger the
        implicit-open reclassification. A tag has '<' only as its first character, so the only
        candidate is the suffix starting at the last '<'.
        """
        end = len(buf)
        k = buf.rfind("<", max(pos, end - (_CLOSE_LEN - 1)), end)
        if k < 0:
            return end
        tail = buf[k:]
        if close_only:
            return k if THINK_CLOSE.startswith(tail) else end
        if THINK_OPEN.startswith(tail):
            return k
        if not self._seen_tag and THINK_CLOSE.startswith(tail):
            return k
        return end

    def _reclassify(self, out: list[tuple[Channel, str]], before: str) -> None:
        """Apply the qwen3 implicit open: everything so far plus ``before`` becomes thinking.

        No tag was seen before, so there is no thinking yet: all earlier text is content.
        """
        self._thinking_parts = [*self._content_parts, before]
        self._content_parts = []
        self._seen_tag = True
        self._reclassified = True
        if before:
            out.append(("thinking", before))

    def _emit(self, out: list[tuple[Channel, str]], channel: Channel, text: str) -> None:
        """Record ``text`` on ``channel`` and queue it in ``out`` (skipping empty text)."""
        if not text:
            return
        if channel == "thinking":
            self._thinking_parts.append(text)
        else:
            self._content_parts.append(text)
        out.append((channel, text))


def _merge(pieces: list[tuple[Channel, str]]) -> list[Delta]:
    """Turn queued pieces into Deltas, joining runs on the same channel (linear time)."""
    if len(pieces) == 1:
        channel, text = pieces[0]
        return [Delta(channel, text)]
    return [
        Delta(channel, "".join(text for _, text in run))
        for channel, run in itertools.groupby(pieces, key=operator.itemgetter(0))
    ]
