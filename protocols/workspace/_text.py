"""Text positions and ranges, edit and search results, and the pure search and replace."""

from __future__ import annotations

import re

import attrs

from ._model import MAX_QUERY_LENGTH, FileInfo, WorkspaceError, _to_text

# ---------------------------------------------------------------------------------------------
# Positions and ranges


def _check_coordinate(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkspaceError(
            f"Position.{attribute.name} must be an integer >= 1 (1-based), not {value!r}",
            code="range",
        )


@attrs.frozen(order=True)
class Position:
    """A place in a text: 1-based ``line`` and ``column`` (characters). Ordered as
    ``(line, column)``. Components below 1 raise :class:`WorkspaceError` (code ``"range"``)."""

    line: int = attrs.field(validator=_check_coordinate)
    column: int = attrs.field(validator=_check_coordinate)


def _check_position(instance: object, attribute: attrs.Attribute[Position], value: object) -> None:
    if not isinstance(value, Position):
        raise WorkspaceError(
            f"Range.{attribute.name} must be a Position, not {type(value).__name__}", code="range"
        )


@attrs.frozen
class Range:
    """A half-open span of a text: ``start`` included, ``end`` excluded. ``start > end`` raises
    :class:`WorkspaceError` (code ``"range"``); ``start == end`` is an empty span (an insertion
    point)."""

    start: Position = attrs.field(validator=_check_position)
    end: Position = attrs.field(validator=_check_position)

    def __attrs_post_init__(self) -> None:
        if self.start > self.end:
            raise WorkspaceError(
                f"a range must not end before it starts ({self.start.line}:{self.start.column} "
                f"> {self.end.line}:{self.end.column})",
                code="range",
            )

    @classmethod
    def of(cls, start_line: int, start_column: int, end_line: int, end_column: int) -> Range:
        """``Range(Position(start_line, start_column), Position(end_line, end_column))``."""
        return cls(Position(start_line, start_column), Position(end_line, end_column))


def end_position(text: str) -> Position:
    """The position just past the last character of ``text`` (``1:1`` for ``""``)."""
    last = text.rfind("\n") + 1
    return Position(text.count("\n") + 1, len(text) - last + 1)


def full_range(text: str) -> Range:
    """The range covering all of ``text``."""
    return Range(Position(1, 1), end_position(text))


def _locate(text: str, position: Position) -> tuple[int, Position]:
    """The 0-based offset of ``position`` in ``text`` after clamping, and the clamped position."""
    start = 0
    for _ in range(position.line - 1):
        newline = text.find("\n", start)
        if newline < 0:
            return len(text), end_position(text)
        start = newline + 1
    newline = text.find("\n", start)
    line_end = len(text) if newline < 0 else newline
    column = min(position.column, line_end - start + 1)
    return start + column - 1, Position(position.line, column)


def clamp_position(text: str, position: Position) -> Position:
    """``position`` moved onto ``text``: a column past its line's end becomes the line's end, a
    line past the last becomes the end of the text. Idempotent; never raises."""
    return _locate(text, position)[1]


def clamp_range(text: str, range: Range) -> Range:
    """``range`` with both ends clamped (:func:`clamp_position`); clamping keeps the order, so
    the result is a valid range. Idempotent; never raises."""
    return Range(clamp_position(text, range.start), clamp_position(text, range.end))


def offset_at(text: str, position: Position) -> int:
    """The 0-based character offset of ``position`` in ``text`` after clamping (between 0 and
    ``len(text)``). Monotonic in ``position``; never raises."""
    return _locate(text, position)[0]


def position_at(text: str, offset: int) -> Position:
    """The position of the 0-based character ``offset`` (clamped to ``0..len(text)``); the
    inverse of :func:`offset_at` on clamped positions. Never raises for an ``int``."""
    offset = max(0, min(offset, len(text)))
    line_start = text.rfind("\n", 0, offset) + 1
    return Position(text.count("\n", 0, offset) + 1, offset - line_start + 1)


def slice_range(text: str, range: Range) -> str:
    """The text ``range`` covers after clamping. Never raises."""
    return text[offset_at(text, range.start) : offset_at(text, range.end)]


def splice_range(text: str, range: Range, insert: str) -> str:
    """``text`` with what ``range`` covers (after clamping) replaced by ``insert``. The result
    is ``text[:a] + insert + text[b:]`` with ``a``/``b`` the clamped offsets. Never raises."""
    return text[: offset_at(text, range.start)] + insert + text[offset_at(text, range.end) :]


def advance(position: Position, text: str) -> Position:
    """The position reached by writing ``text`` starting at ``position``: after a splice at a
    clamped ``start``, ``Range(start, advance(start, insert))`` covers exactly the inserted
    text."""
    newlines = text.count("\n")
    if not newlines:
        return Position(position.line, position.column + len(text))
    return Position(position.line + newlines, len(text) - text.rfind("\n"))


# ---------------------------------------------------------------------------------------------
# Results


@attrs.frozen
class ReadResult:
    """A read of ``path``: ``text`` is what ``range`` (clamped) covers; ``lines`` is the line
    count of the whole file."""

    path: str
    text: str
    range: Range
    lines: int


@attrs.frozen
class SpliceResult:
    """A splice of ``file.path``: the file after it and ``range``, the span the inserted text now
    covers (``Range(start, advance(start, text))`` for the clamped start)."""

    file: FileInfo
    range: Range


@attrs.frozen
class Listing:
    """Files found by a listing, and whether more were left out (``truncated``)."""

    files: tuple[FileInfo, ...]
    truncated: bool = False


@attrs.frozen
class SearchMatch:
    """One match: where it starts (1-based ``line`` and ``column``), its ``length`` in
    characters (it may span lines for a regular expression) and ``text``, the whole line it
    starts on (without the newline)."""

    path: str
    line: int
    column: int
    length: int
    text: str


@attrs.frozen
class ReplaceResult:
    """What :meth:`Workspace.replace` did: ``replaced`` matches in the files ``files`` (paths, in
    workspace order)."""

    query: str
    replaced: int
    files: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# Search and replace (pure helpers shared by the in-memory and on-disk workspaces)


def compile_query(
    query: str, *, regex: bool = False, case_sensitive: bool = True
) -> re.Pattern[str]:
    """The compiled pattern for a search: ``query`` literally, or as a Python regular
    expression with ``regex=True`` (``^``/``$`` match at line boundaries; ``.`` does not match a
    newline). Raises :class:`WorkspaceError` (code ``"pattern"``) for an empty query, one longer
    than :data:`MAX_QUERY_LENGTH`, or a regular expression that does not compile.

    Regular expressions run on Python's backtracking engine: a pathological pattern can take
    very long on a large file. Callers exposing regex search to untrusted input bound the data
    (the workspace size limits) and should expect that risk.
    """
    if not isinstance(query, str) or not query:
        raise WorkspaceError("the search query must be a non-empty string", code="pattern")
    if len(query) > MAX_QUERY_LENGTH:
        raise WorkspaceError(
            f"the search query is longer than {MAX_QUERY_LENGTH} characters", code="pattern"
        )
    flags = re.MULTILINE | (0 if case_sensitive else re.IGNORECASE)
    try:
        return re.compile(query if regex else re.escape(query), flags)
    except re.error as exc:
        raise WorkspaceError(
            f"invalid regular expression {query[:80]!r}: {exc}", code="pattern"
        ) from None
    except (RecursionError, OverflowError):  # absurdly nested or huge repeat counts
        raise WorkspaceError(
            f"regular expression {query[:80]!r} is too complex", code="pattern"
        ) from None


def search_text(
    path: str, text: str, pattern: re.Pattern[str], limit: int | None = None
) -> list[SearchMatch]:
    """Every match of ``pattern`` in ``text`` (non-overlapping, left to right, as
    :meth:`re.Pattern.finditer` finds them), at most ``limit`` of them."""
    matches: list[SearchMatch] = []
    if limit is not None and limit <= 0:
        return matches
    line, line_start, scanned = 1, 0, 0
    for found in pattern.finditer(text):
        at = found.start()
        newlines = text.count("\n", scanned, at)
        if newlines:
            line += newlines
            line_start = text.rfind("\n", scanned, at) + 1
        scanned = at
        line_end = text.find("\n", at)
        if line_end < 0:
            line_end = len(text)
        matches.append(
            SearchMatch(
                path, line, at - line_start + 1, found.end() - at, text[line_start:line_end]
            )
        )
        if limit is not None and len(matches) >= limit:
            break
    return matches


def replace_text(
    text: str, pattern: re.Pattern[str], replacement: str, *, regex: bool = False
) -> tuple[str, int]:
    """``text`` with every match of ``pattern`` replaced, and the number of replacements.

    A literal search (``regex=False``) inserts ``replacement`` as is; a regular expression uses
    it as a template (``\\1``, ``\\g<name>``), and a bad template raises :class:`WorkspaceError`
    (code ``"pattern"``) whether or not anything matches.
    """
    if not isinstance(replacement, str):
        raise WorkspaceError(
            f"the replacement must be a string, not {type(replacement).__name__}", code="invalid"
        )
    replacement = _to_text(replacement)
    if not regex:
        return pattern.subn(lambda _: replacement, text)
    try:
        pattern.sub(replacement, "")  # checks the template even when nothing will match
        return pattern.subn(replacement, text)
    except (re.error, IndexError) as exc:
        raise WorkspaceError(f"invalid replacement template: {exc}", code="pattern") from None
