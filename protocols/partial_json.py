"""An incremental reader of one JSON value that arrives in pieces: what has been parsed so far.

A structured answer streams as content deltas; :class:`PartialJSON` is fed each delta and says,
after every feed, which part of the value is already known (:meth:`PartialJSON.prefix`).

**What a prefix shows.** Objects keep their complete members, in order; arrays keep their
complete items; a container still open is shown with what it holds so far, down to the
innermost one being read. A number or a literal (``true``, ``false``, ``null``) still being read
is absent -- ``12`` may still become ``123`` -- and so is an object key being read, and a member
whose value has not started. A string still being read is absent too, unless the reader was
made with ``strings=True``: then it is shown with the text read so far (the final string starts
with it), so that a UI can let the text grow. Whatever a prefix shows of a complete value never
changes afterwards; so every prefix is *consistent* with the final value: each member or item
it shows is the final one's, a container it shows open is a partial of the final container,
and a growing string is a prefix of the final string.

The input is read as a structured-output run (``output=``) reads an answer: leading and
trailing whitespace is ignored, and a Markdown fence (a first line starting with three
backticks, such as ```` ```json ````) around the value is allowed -- what follows its closing
backticks is ignored. The value itself is
strict JSON, as :func:`protocols.codec.loads` reads it: ``NaN``, ``Infinity``, overflowing
numbers (``1e999``), integers longer than Python converts, duplicate keys, control characters
in strings, trailing text and nesting deeper than :data:`~protocols.MAX_DEPTH` are refused
(:class:`~protocols.errors.ProtocolError`, ``code="json"``, with the character position), and
lone surrogates are replaced by U+FFFD. A document fed whole gives the value ``loads`` gives.

**Cost.** Linear in the input: the reader keeps its state between feeds (the open containers,
the string, number or literal in progress, a ``\\u`` escape split across two feeds) and reads
every character once -- never the buffer again. Building a prefix copies the open containers
(shallowly: the complete values inside are shared, never copied); :meth:`~PartialJSON.feed`
says whether there is anything new to build. At most ``max_chars`` characters are read
(:class:`~protocols.errors.SizeLimitError` beyond).

Written by hand rather than taken from a library: it must be sans-IO and incremental -- fed
text, never a file or a socket, and never re-parsing what it has read, since it runs on every
content delta of a streamed answer. The readers that accept incomplete JSON
(``partial-json-parser``, pydantic-core's ``from_json(allow_partial=True)``) re-parse the whole
buffer on each call, and a push parser such as ``ijson`` yields events, not values, and would
be a new dependency of this sans-IO core (which imports attrs, cattrs, jsonschema and the
standard library only).
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import attrs

from ._json import MAX_DEPTH
from .errors import ProtocolError, SizeLimitError, ValidationError

__all__ = ["MAX_CHARS", "NOTHING", "JSONPrefix", "PartialJSON"]

#: The most characters a :class:`PartialJSON` reads by default (4 Mi code points).
MAX_CHARS: Final = 1 << 22


class _Nothing:
    """The type of :data:`NOTHING`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOTHING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NOTHING"


#: No value (yet): what a prefix shows before any of the value is known. Distinct from
#: ``None``, which is JSON ``null``.
NOTHING: Final[Any] = _Nothing()


@attrs.frozen
class JSONPrefix:
    """What is known of a JSON value being read (see :mod:`protocols.partial_json`).

    ``value``: the value so far (:data:`NOTHING` when nothing of it is known yet), made of
    ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``; treat it as
    read-only (its complete parts are shared with later prefixes). ``open``: how many
    containers are still open -- the value itself if it is one, then its last member or item,
    and so on down: the open containers are always that chain of last members. ``growing``:
    the last member of the innermost open container (or the value itself, when ``open`` is 0)
    is a string still being read (only with ``strings=True``). ``complete``: the value is
    whole (``open`` is 0 and nothing grows)."""

    value: Any
    open: int = 0
    growing: bool = False

    @property
    def complete(self) -> bool:
        """The value is whole: nothing in it can change any more."""
        return self.value is not NOTHING and self.open == 0 and not self.growing


_EMPTY: Final = JSONPrefix(NOTHING)

# States.
_START: Final = 0  # before the value: whitespace, or the backticks of a fence
_TICKS: Final = 1  # reading the opening backticks
_HEADER: Final = 2  # the rest of the fence's first line
_VALUE: Final = 3  # a value is expected (``]`` too, right after ``[``)
_FIRST_KEY: Final = 4  # after ``{``: a key or ``}``
_KEY: Final = 5  # after ``,`` in an object: a key
_COLON: Final = 6
_AFTER: Final = 7  # after a member or an item: ``,`` or the closing bracket
_STRING: Final = 8
_NUMBER: Final = 9
_LITERAL: Final = 10
_END: Final = 11  # the value is whole: whitespace, or a closing fence
_CLOSE_TICKS: Final = 12
_DONE: Final = 13  # after the closing fence: the rest is ignored

_WS: Final = re.compile(r"[ \t\n\r]*")
_STRING_RUN: Final = re.compile(r'[^"\\\x00-\x1f]+')
_NUMBER_RUN: Final = re.compile(r"[-+0-9.eE]+")
_NUMBER_FORM: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_LITERALS: Final = {"t": ("true", True), "f": ("false", False), "n": ("null", None)}


class _Bad(Exception):
    """Invalid JSON at ``at`` (an index into the text being fed)."""

    def __init__(self, at: int, message: str) -> None:
        super().__init__(message)
        self.at = at
        self.message = message


class _Frame:
    """An open container: what it holds so far, and (an object) the key of the member being
    read."""

    __slots__ = ("container", "key")

    def __init__(self, container: dict[str, Any] | list[Any]) -> None:
        self.container = container
        self.key: str | None = None


def _repair(text: str) -> str:
    """Surrogate pairs joined, lone surrogates replaced by U+FFFD (as ``loads`` reads them)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _describe(char: str) -> str:
    return repr(char) if char.isprintable() else f"U+{ord(char):04X}"


class PartialJSON:
    """Reads one JSON value fed in pieces; after each :meth:`feed`, :meth:`prefix` is what is
    known of it so far (see :mod:`protocols.partial_json` for what a prefix shows).

    ``strings``: show a string value still being read, with its text so far (default: a
    string is shown once it is complete). ``max_chars``: the most characters it reads.

    Guarantees: linear in the input; every prefix is consistent with the final value, and
    each shows at least what the one before it showed; the last prefix of a complete
    document is its value, equal to what :func:`protocols.codec.loads` gives (fenced or
    padded as the module says). Invalid input raises :class:`~protocols.errors.ProtocolError`
    (``code="json"``) naming the character position; so does every later feed. Not
    thread-safe; not reusable across documents (:meth:`reset` starts over).
    """

    __slots__ = (
        "_changed",
        "_error",
        "_escape",
        "_fed",
        "_fenced",
        "_frames",
        "_key",
        "_literal",
        "_matched",
        "_number",
        "_pieces",
        "_prefix",
        "_root",
        "_state",
        "_surrogates",
        "_ticks",
        "max_chars",
        "strings",
    )

    def __init__(self, *, strings: bool = False, max_chars: int = MAX_CHARS) -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValidationError(f"max_chars must be an int >= 1, not {max_chars!r}")
        self.strings = bool(strings)
        self.max_chars = max_chars
        self.reset()

    def reset(self) -> None:
        """Forget everything read: the next feed starts a new document."""
        self._state = _START
        self._frames: list[_Frame] = []
        self._root: Any = NOTHING
        self._pieces: list[str] = []  # the string being read
        self._key = False  # ... is an object key
        self._surrogates = False  # ... has a \\u escape of a surrogate
        self._escape = ""  # an escape split across feeds
        self._number: list[str] = []
        self._literal = ""
        self._matched = 0
        self._ticks = 0
        self._fenced = False
        self._fed = 0
        self._error: ProtocolError | None = None
        self._prefix: JSONPrefix | None = _EMPTY
        self._changed = False

    # -- reading --------------------------------------------------------------------------------

    @property
    def fed(self) -> int:
        """How many characters were fed (since the last :meth:`reset`)."""
        return self._fed

    @property
    def complete(self) -> bool:
        """The value is whole (what follows it can only be whitespace or a closing fence)."""
        return self._state >= _END

    def feed(self, text: str) -> bool:
        """Read ``text``, the next piece of the document. True when :meth:`prefix` shows
        something new since the feed before (a member or an item complete, a container opened
        or closed, a growing string longer).

        Raises :class:`~protocols.errors.ProtocolError` (``code="json"``) when the document
        cannot be valid JSON any more, and :class:`~protocols.errors.SizeLimitError` past
        ``max_chars``; the reader then refuses every later feed the same way."""
        if self._error is not None:
            raise self._error
        if not isinstance(text, str):
            raise ValidationError(f"feed takes text (a str), not {type(text).__name__}")
        size = self._fed + len(text)
        if size > self.max_chars:
            self._error = SizeLimitError(
                "the streamed JSON value", limit=self.max_chars, size=size, unit="characters"
            )
            raise self._error
        try:
            self._read(text)
        except _Bad as bad:
            self._error = ProtocolError(
                f"invalid JSON at character {self._fed + bad.at}: {bad.message}", code="json"
            )
            raise self._error from None
        self._fed = size
        changed, self._changed = self._changed, False
        if changed:
            self._prefix = None
        return changed

    def close(self) -> Any:
        """The input has ended: the complete value (a number at the very end of the document
        is complete now). Raises :class:`~protocols.errors.ProtocolError` (``code="json"``)
        when the document is not a complete value."""
        if self._error is not None:
            raise self._error
        if self._state == _NUMBER and not self._frames:
            try:
                self._finish_number(0)
            except _Bad as bad:
                self._error = ProtocolError(
                    f"invalid JSON at character {self._fed}: {bad.message}", code="json"
                )
                raise self._error from None
            self._changed = False
            self._prefix = None
        if self._state < _END:
            empty = self._root is NOTHING and not self._frames
            what = "nothing" if empty else "an incomplete value"
            raise ProtocolError(f"invalid JSON: the document ends with {what}", code="json")
        return self._root

    def prefix(self) -> JSONPrefix:
        """What is known of the value so far (the same object until something new is read)."""
        known = self._prefix
        if known is not None:
            return known
        child: Any = NOTHING
        growing = False
        if self.strings and self._state == _STRING and not self._key:
            child = self._growing()
            growing = True
        frames = self._frames
        for frame in reversed(frames):
            container = frame.container
            if isinstance(container, dict):
                copy: Any = dict(container)
                if child is not NOTHING:
                    copy[frame.key] = child
            else:
                copy = list(container)
                if child is not NOTHING:
                    copy.append(child)
            child = copy
        if not frames and self._root is not NOTHING:
            child = self._root
        known = self._prefix = JSONPrefix(child, len(frames), growing)
        return known

    @property
    def value(self) -> Any:
        """The value so far: ``prefix().value`` (:data:`NOTHING` when nothing is known)."""
        return self.prefix().value

    def _growing(self) -> str:
        text = "".join(self._pieces)
        self._pieces = [text] if text else []  # (joined once: the next join starts here)
        if self._surrogates or (not text.isascii() and _SURROGATE.search(text)):
            if text and "\ud800" <= text[-1] <= "\udbff":
                text = text[:-1]  # its low half may still come
            text = _repair(text)
        return text

    # -- the state machine ----------------------------------------------------------------------

    def _read(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            state = self._state
            if state == _STRING:
                i = self._string(text, i)
            elif state == _AFTER:
                i = _WS.match(text, i).end()  # type: ignore[union-attr]
                if i == n:
                    break
                i = self._after(text[i], i)
            elif state == _VALUE:
                i = _WS.match(text, i).end()  # type: ignore[union-attr]
                if i == n:
                    break
                i = self._value(text[i], i)
            elif state == _NUMBER:
                match = _NUMBER_RUN.match(text, i)
                if match is not None:
                    self._number.append(match.group())
                    i = match.end()
                if i < n:
                    self._finish_number(i)
            elif state in (_FIRST_KEY, _KEY):
                i = _WS.match(text, i).end()  # type: ignore[union-attr]
                if i == n:
                    break
                char = text[i]
                if char == '"':
                    self._open_string(key=True)
                elif char == "}" and state == _FIRST_KEY:
                    self._close()
                else:
                    raise _Bad(i, f"expected an object key, got {_describe(char)}")
                i += 1
            elif state == _COLON:
                i = _WS.match(text, i).end()  # type: ignore[union-attr]
                if i == n:
                    break
                if text[i] != ":":
                    raise _Bad(i, f"expected ':' after an object key, got {_describe(text[i])}")
                self._state = _VALUE
                i += 1
            elif state == _LITERAL:
                i = self._literal_run(text, i)
            elif state == _START:
                while i < n and text[i].isspace():
                    i += 1
                if i == n:
                    break
                if text[i] == "`":
                    self._state = _TICKS
                else:
                    self._state = _VALUE
            elif state == _TICKS:
                while i < n and self._ticks < 3:
                    if text[i] != "`":
                        raise _Bad(i, "expected a JSON value, or a fence of three backticks")
                    self._ticks += 1
                    i += 1
                if self._ticks == 3:
                    self._state = _HEADER
                    self._fenced = True
                    self._ticks = 0
            elif state == _HEADER:
                end = text.find("\n", i)
                if end < 0:
                    break
                self._state = _VALUE
                i = end + 1
            elif state == _END:
                while i < n and text[i].isspace():
                    i += 1
                if i == n:
                    break
                if text[i] != "`" or not self._fenced:
                    raise _Bad(i, f"unexpected {_describe(text[i])} after the JSON value")
                self._state = _CLOSE_TICKS
            elif state == _CLOSE_TICKS:
                while i < n and self._ticks < 3:
                    if text[i] != "`":
                        raise _Bad(i, "expected the closing fence (three backticks)")
                    self._ticks += 1
                    i += 1
                if self._ticks == 3:
                    self._state = _DONE
            else:  # _DONE: what follows the closing fence is not read
                break

    def _value(self, char: str, i: int) -> int:
        """A value starts with ``char`` (at ``i``); the index to go on from."""
        if char == '"':
            self._open_string(key=False)
            return i + 1
        if char in ("{", "["):
            if len(self._frames) >= MAX_DEPTH:
                raise _Bad(i, f"nested deeper than {MAX_DEPTH}")
            frame = _Frame({} if char == "{" else [])
            self._frames.append(frame)
            self._state = _FIRST_KEY if char == "{" else _VALUE
            self._changed = True
            return i + 1
        if char == "-" or "0" <= char <= "9":
            self._state = _NUMBER
            self._number = []
            return i
        literal = _LITERALS.get(char)
        if literal is not None:
            self._state = _LITERAL
            self._literal = char
            self._matched = 0
            return i
        frames = self._frames
        if char == "]" and frames and isinstance(frames[-1].container, list):
            if not frames[-1].container:
                self._close()
                return i + 1
            raise _Bad(i, "expected a value after ',', got ']'")
        raise _Bad(i, f"expected a JSON value, got {_describe(char)}")

    def _after(self, char: str, i: int) -> int:
        frame = self._frames[-1]
        is_object = isinstance(frame.container, dict)
        if char == ",":
            self._state = _KEY if is_object else _VALUE
        elif char == ("}" if is_object else "]"):
            self._close()
        else:
            expected = "',' or '}'" if is_object else "',' or ']'"
            raise _Bad(i, f"expected {expected}, got {_describe(char)}")
        return i + 1

    def _open_string(self, *, key: bool) -> None:
        self._state = _STRING
        self._key = key
        self._pieces = []
        self._surrogates = False
        if self.strings and not key:
            self._changed = True  # an empty string, shown growing

    def _string(self, text: str, i: int) -> int:
        n = len(text)
        pieces = self._pieces
        before = len(pieces)
        while i < n:
            if self._escape:
                i = self._escaped(text, i)
                continue
            match = _STRING_RUN.match(text, i)
            if match is not None:
                pieces.append(match.group())
                i = match.end()
                if i == n:
                    break
            char = text[i]
            if char == '"':
                self._end_string(i)
                return i + 1
            if char == "\\":
                self._escape = "\\"
                i += 1
                continue
            raise _Bad(i, f"control character {_describe(char)} in a string")
        if self.strings and not self._key and len(pieces) > before:
            self._changed = True
        return i

    def _escaped(self, text: str, i: int) -> int:
        """Go on with the escape sequence in progress; the index after what it took."""
        escape = self._escape
        need = 6 if escape[1:2] == "u" else 2
        if len(escape) == 1:
            escape += text[i]
            i += 1
            need = 6 if escape[1] == "u" else 2
        if len(escape) < need:
            take = text[i : i + need - len(escape)]
            escape += take
            i += len(take)
        if len(escape) < need:
            self._escape = escape
            return i
        self._escape = ""
        if need == 2:
            decoded = _ESCAPES.get(escape[1])
            if decoded is None:
                raise _Bad(i - 1, f"invalid escape {escape!r} in a string")
        else:
            digits = escape[2:]
            if _HEX4.fullmatch(digits) is None:
                raise _Bad(i - 1, f"invalid escape {escape!r} in a string")
            code = int(digits, 16)
            if 0xD800 <= code <= 0xDFFF:
                self._surrogates = True
            decoded = chr(code)
        self._pieces.append(decoded)
        return i

    def _end_string(self, i: int) -> None:
        text = "".join(self._pieces)
        self._pieces = []
        if self._surrogates or (not text.isascii() and _SURROGATE.search(text)):
            text = _repair(text)
        if self._key:
            frame = self._frames[-1]
            if text in frame.container:
                raise _Bad(i, f"duplicate object key {text[:80]!r}")
            frame.key = text
            self._state = _COLON
        else:
            self._complete(text)

    def _finish_number(self, i: int) -> None:
        text = "".join(self._number)
        self._number = []
        match = _NUMBER_FORM.fullmatch(text)
        if match is None:
            raise _Bad(i, f"invalid number {text[:40]!r}")
        value: Any
        if match.group(1) is None and match.group(2) is None:
            try:
                value = int(text)
            except ValueError:  # longer than Python converts (sys.get_int_max_str_digits)
                raise _Bad(i, f"integer {text[:40]}... is too long") from None
        else:
            value = float(text)
            if math.isinf(value):
                raise _Bad(i, f"number {text[:40]} overflows to infinity")
        self._complete(value)

    def _literal_run(self, text: str, i: int) -> int:
        word, value = _LITERALS[self._literal]
        n = len(text)
        matched = self._matched
        while i < n and matched < len(word):
            if text[i] != word[matched]:
                raise _Bad(i, f"expected {word!r}, got {_describe(text[i])}")
            matched += 1
            i += 1
        self._matched = matched
        if matched == len(word):
            self._complete(value)
        return i

    def _close(self) -> None:
        frame = self._frames.pop()
        self._complete(frame.container)

    def _complete(self, value: Any) -> None:
        """A value is whole: a member or an item of the innermost container, or the root."""
        self._changed = True
        frames = self._frames
        if frames:
            frame = frames[-1]
            container = frame.container
            if isinstance(container, dict):
                assert frame.key is not None
                container[frame.key] = value
                frame.key = None
            else:
                container.append(value)
            self._state = _AFTER
        else:
            self._root = value
            self._state = _END
