"""Workspaces: immutable files, 1-based ranges, edits, search, snapshots -- all pure.

A :class:`Workspace` is the one place documents and images reach a model: its text files are
rendered into the system prompt (:func:`render_fenced`), its images are attached to the last user
message, and the model edits it through the workspace tools (:mod:`actors.workspace`).

Files
    A :class:`File` is a frozen value: a normalised relative POSIX ``path``, a ``content`` that is
    either :class:`TextContent` (``text`` + ``language``) or :class:`BinaryContent` (canonical
    base64 ``data`` + an image ``mime``), a ``state`` (``"created"`` or ``"modified"``) and two
    numbers computed once from the content: ``size`` (UTF-8 bytes of the text, or the decoded
    bytes of the base64, computed arithmetically) and ``lines`` (0 for ``""`` and for binaries,
    else newlines + 1). A file never changes after creation, so ``size`` and ``lines`` always
    agree with its content; they are not part of the JSON form and are recomputed on decoding.

Paths (:func:`normalize_path`)
    ``"./a//b"`` is refused (empty segment) but ``"./a/b"`` becomes ``"a/b"``. Refused with
    :class:`WorkspaceError` code ``"path"``: non-strings, empty paths, a leading ``/``, ``..``
    segments, empty segments (``a//b``, a trailing ``/``), NUL and other control characters (a
    path is printed on its own line in prompts), and paths longer than :data:`MAX_PATH_LENGTH`.

Ranges
    :class:`Position` is 1-based (line, column), counted in characters (code points); lines are
    separated by ``"\\n"`` only (a ``"\\r"`` is an ordinary character). A :class:`Range` is
    half-open: ``start`` is included, ``end`` is not. Both refuse invalid values at construction
    (code ``"range"``), so every helper taking them -- :func:`clamp_position`,
    :func:`clamp_range`, :func:`offset_at`, :func:`position_at`, :func:`slice_range`,
    :func:`splice_range`, :func:`advance` -- is total: a column past the end of its line clamps
    to the line's end, and a line past the last clamps to the end of the text.

Workspace edit rules
    Every edit stores a *new* :class:`File` (state ``"created"`` for a new path, ``"modified"``
    otherwise); a file value already held keeps its old content. An edit either happens whole or
    not at all: a failed check (size, modality, range, path) leaves the workspace unchanged.
    Listeners registered with :meth:`Workspace.subscribe` are called synchronously *after* each
    mutation; a listener that raises is logged and skipped -- it never changes the result of the
    edit nor stops other listeners.

Nothing here awaits or touches a disk; :class:`Workspace` is not thread-safe (use it from one
trio task or actor at a time).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Literal, TypeAlias, overload

import attrs

from .codec import converter
from .errors import Category, ValidationError
from .messages import new_id

__all__ = [
    "BINARY_MIMES",
    "DEFAULT_MAX_BINARY_SIZE",
    "DEFAULT_MAX_FILES",
    "DEFAULT_MAX_FILE_SIZE",
    "EXTENSION_TO_LANGUAGE",
    "MAX_PATH_LENGTH",
    "MAX_QUERY_LENGTH",
    "BinaryContent",
    "BinaryMime",
    "ClearEvent",
    "Content",
    "File",
    "FileInfo",
    "FileState",
    "Listing",
    "MoveEvent",
    "Position",
    "Range",
    "ReadResult",
    "RemoveEvent",
    "ReplaceResult",
    "SearchMatch",
    "SpliceResult",
    "TextContent",
    "Workspace",
    "WorkspaceError",
    "WorkspaceErrorCode",
    "WorkspaceEvent",
    "WorkspaceListener",
    "WorkspaceManager",
    "WorkspaceSnapshot",
    "WriteEvent",
    "advance",
    "clamp_position",
    "clamp_range",
    "compile_query",
    "end_position",
    "full_range",
    "infer_language",
    "normalize_path",
    "offset_at",
    "position_at",
    "render_fenced",
    "replace_text",
    "search_text",
    "slice_range",
    "splice_range",
]

_log = logging.getLogger(__name__)

#: The longest path accepted, in characters.
MAX_PATH_LENGTH: Final = 1024

#: The longest search query (literal or regular expression) accepted, in characters.
MAX_QUERY_LENGTH: Final = 1000

#: Default cap on one text file, in UTF-8 bytes (1 MiB).
DEFAULT_MAX_FILE_SIZE: Final = 1024 * 1024

#: Default cap on one binary file, in decoded bytes (5 MiB, what the major vendors accept).
DEFAULT_MAX_BINARY_SIZE: Final = 5 * 1024 * 1024

#: Default cap on the number of files in one workspace.
DEFAULT_MAX_FILES: Final = 1000

FileState: TypeAlias = Literal["created", "modified"]
BinaryMime: TypeAlias = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]

#: The MIME types a binary file may have (images every major vendor accepts).
BINARY_MIMES: Final[frozenset[str]] = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp"}
)

WorkspaceErrorCode: TypeAlias = Literal[
    "invalid",
    "path",
    "not_found",
    "modality",
    "range",
    "pattern",
    "size",
    "content",
    "io",
]


class WorkspaceError(ValidationError):
    """A workspace operation was refused. ``code`` says why:

    - ``"path"``: a path is malformed, or (on disk) leaves the root or names something other than
      a regular file;
    - ``"not_found"``: the operation needs a file that is not there;
    - ``"modality"``: a text operation on a binary file (or a file on disk that is not UTF-8);
    - ``"range"``: an invalid :class:`Position` / :class:`Range`;
    - ``"pattern"``: an empty or too long query, a bad regular expression or replacement template;
    - ``"size"``: a file, or the number of files, would exceed a configured limit;
    - ``"content"``: bad file content (not canonical base64, an unsupported MIME type, a bad
      language name);
    - ``"io"``: the operating system refused an operation on disk (category ``system``);
    - ``"invalid"``: any other bad argument.

    ``path`` names the file concerned, when there is one. A :class:`ValidationError` (and so a
    ``ValueError``) with category ``user``.
    """

    default_code = "invalid"

    def __init__(
        self,
        message: str,
        *,
        code: WorkspaceErrorCode,
        path: str | None = None,
        category: Category | None = None,
    ) -> None:
        super().__init__(message, code=code, category=category)
        self.path = path


# ---------------------------------------------------------------------------------------------
# Paths and languages

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def normalize_path(path: object) -> str:
    """``path`` as a normalised relative POSIX path: ``.`` segments dropped, nothing else changed.

    Raises :class:`WorkspaceError` (code ``"path"``) for anything that is not a safe relative
    path (see the module docstring). ``normalize_path(normalize_path(p)) == normalize_path(p)``.
    """
    if not isinstance(path, str):
        raise WorkspaceError(f"a path must be a string, not {type(path).__name__}", code="path")
    shown = repr(path[:80])
    if not path:
        raise WorkspaceError("a path must not be empty", code="path")
    if len(path) > MAX_PATH_LENGTH:
        raise WorkspaceError(
            f"path {shown}... is longer than {MAX_PATH_LENGTH} characters", code="path"
        )
    if _CONTROL.search(path):
        raise WorkspaceError(f"path {shown} contains a control character", code="path")
    if path.startswith("/"):
        raise WorkspaceError(
            f"path {shown} is absolute; paths are relative to the workspace", code="path"
        )
    parts: list[str] = []
    for part in path.split("/"):
        if part == "":
            raise WorkspaceError(f"path {shown} has an empty segment", code="path")
        if part == "..":
            raise WorkspaceError(f"path {shown} must not contain '..' segments", code="path")
        if part != ".":
            parts.append(part)
    if not parts:
        raise WorkspaceError(f"path {shown} names no file", code="path")
    return "/".join(parts)


#: File extension (lower case, without the dot) -> language name, for :func:`infer_language`.
EXTENSION_TO_LANGUAGE: Final[Mapping[str, str]] = {
    "bash": "bash",
    "c": "c",
    "cc": "cpp",
    "cfg": "ini",
    "clj": "clojure",
    "cpp": "cpp",
    "cs": "csharp",
    "css": "css",
    "csv": "csv",
    "cxx": "cpp",
    "dart": "dart",
    "diff": "diff",
    "erl": "erlang",
    "ex": "elixir",
    "exs": "elixir",
    "go": "go",
    "graphql": "graphql",
    "h": "c",
    "hpp": "cpp",
    "hs": "haskell",
    "htm": "html",
    "html": "html",
    "ini": "ini",
    "java": "java",
    "js": "javascript",
    "json": "json",
    "jsonl": "json",
    "jsx": "jsx",
    "kt": "kotlin",
    "kts": "kotlin",
    "lua": "lua",
    "m": "objectivec",
    "md": "markdown",
    "markdown": "markdown",
    "mjs": "javascript",
    "cjs": "javascript",
    "patch": "diff",
    "php": "php",
    "pl": "perl",
    "proto": "protobuf",
    "ps1": "powershell",
    "py": "python",
    "pyi": "python",
    "r": "r",
    "rb": "ruby",
    "rs": "rust",
    "rst": "rst",
    "scala": "scala",
    "scss": "scss",
    "sh": "bash",
    "sql": "sql",
    "svelte": "svelte",
    "svg": "xml",
    "swift": "swift",
    "tex": "latex",
    "toml": "toml",
    "ts": "typescript",
    "tsx": "tsx",
    "txt": "text",
    "vue": "vue",
    "xml": "xml",
    "yaml": "yaml",
    "yml": "yaml",
    "zig": "zig",
    "zsh": "zsh",
}

#: What a language name may look like: it becomes a Markdown fence's info string.
_LANGUAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_+#.-]{0,63}")


def infer_language(path: str) -> str:
    """The language of ``path`` from the extension of its last segment (after the last dot,
    case-insensitive) via :data:`EXTENSION_TO_LANGUAGE`; ``"text"`` when there is none or it is
    unknown. Never raises for a string."""
    name = path.rsplit("/", 1)[-1]
    _, dot, extension = name.rpartition(".")
    if not dot:
        return "text"
    return EXTENSION_TO_LANGUAGE.get(extension.lower(), "text")


# ---------------------------------------------------------------------------------------------
# Content

_SURROGATE = re.compile("[\ud800-\udfff]")
# Canonical standard base64: the alphabet, padded to a multiple of 4, and the bits a padded
# final group leaves over all zero (so decoding and re-encoding gives the same string back).
_BASE64 = re.compile(
    r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?"
)


def _to_text(value: object) -> str:
    if not isinstance(value, str):
        raise WorkspaceError(f"text must be a string, not {type(value).__name__}", code="content")
    # Lone surrogates cannot be encoded (to UTF-8, to JSON): repair them as the JSON layer does.
    return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value


def _check_language(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not _LANGUAGE.fullmatch(value):
        raise WorkspaceError(
            f"a language must be 1-64 letters, digits or _+#.- (starting with a letter or "
            f"digit), not {value!r}",
            code="content",
        )


def _check_data(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise WorkspaceError("binary data must be a non-empty base64 string", code="content")
    if len(value) % 4 or not _BASE64.fullmatch(value):
        raise WorkspaceError(
            "binary data must be canonical standard base64 (A-Z a-z 0-9 + /, '=' padded to a "
            "multiple of 4 characters, no whitespace)",
            code="content",
        )


def _check_mime(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in BINARY_MIMES:
        allowed = ", ".join(sorted(BINARY_MIMES))
        raise WorkspaceError(
            f"unsupported MIME type {value!r}; expected one of {allowed}", code="content"
        )


def _check_state(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in ("created", "modified"):
        raise WorkspaceError(
            f"a file state must be 'created' or 'modified', not {value!r}", code="invalid"
        )


@attrs.frozen
class TextContent:
    """Text content with the language it is written in (a fence info string when rendered)."""

    text: str = attrs.field(converter=_to_text)
    language: str = attrs.field(validator=_check_language)


@attrs.frozen
class BinaryContent:
    """Binary content: canonical base64 ``data`` and the image MIME type it holds."""

    data: str = attrs.field(validator=_check_data)
    mime: BinaryMime = attrs.field(validator=_check_mime)


#: What a file holds: exactly one of the two arms. Usable with ``isinstance``.
Content: TypeAlias = TextContent | BinaryContent


def _check_content(instance: object, attribute: attrs.Attribute[Content], value: object) -> None:
    if not isinstance(value, TextContent | BinaryContent):
        raise WorkspaceError(
            f"File.content must be a TextContent or BinaryContent, not {type(value).__name__}",
            code="content",
        )


def _decoded_size(data: str) -> int:
    """Bytes encoded by canonical base64 ``data`` (arithmetic; ``data`` is already checked)."""
    return len(data) // 4 * 3 - (len(data) - len(data.rstrip("=")))


def _utf8_size(text: str) -> int:
    # len(text) when ASCII (the common case) without encoding a copy.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


# The two factories run before the validators: for content of the wrong type they return 0 and
# leave the refusal to the validator.
def _size(file: File) -> int:
    content: object = file.content
    if isinstance(content, TextContent):
        return _utf8_size(content.text)
    if isinstance(content, BinaryContent):
        return _decoded_size(content.data)
    return 0


def _lines(file: File) -> int:
    content: object = file.content
    if isinstance(content, TextContent):
        return content.text.count("\n") + 1 if content.text else 0
    return 0


@attrs.frozen
class File:
    """One immutable file of a workspace (see the module docstring for the rules).

    Build one with :meth:`text` or :meth:`binary` (constructors: the text itself is
    ``file.content.text``). ``size`` and ``lines`` are computed from the content at construction
    and are always consistent with it.
    """

    path: str = attrs.field(converter=normalize_path)
    content: Content = attrs.field(validator=_check_content)
    state: FileState = attrs.field(default="created", validator=_check_state)
    size: int = attrs.field(init=False, default=attrs.Factory(_size, takes_self=True))
    lines: int = attrs.field(init=False, default=attrs.Factory(_lines, takes_self=True))

    @classmethod
    def text(
        cls,
        path: str,
        text: str,
        language: str | None = None,
        *,
        state: FileState = "created",
    ) -> File:
        """A text file; ``language`` defaults to :func:`infer_language` of ``path``."""
        path = normalize_path(path)
        language = infer_language(path) if language is None else language
        return cls(path, TextContent(text, language), state)

    @classmethod
    def binary(cls, path: str, data: str, mime: str, *, state: FileState = "created") -> File:
        """A binary file: ``data`` is canonical standard base64, ``mime`` one of
        :data:`BINARY_MIMES` (code ``"content"`` otherwise)."""
        return cls(path, BinaryContent(data, mime), state)  # type: ignore[arg-type]

    @property
    def is_text(self) -> bool:
        """Whether the content is text."""
        return isinstance(self.content, TextContent)

    @property
    def is_binary(self) -> bool:
        """Whether the content is binary (base64)."""
        return isinstance(self.content, BinaryContent)

    @property
    def is_image(self) -> bool:
        """Whether the content is binary with an ``image/*`` MIME type (every binary today)."""
        return isinstance(self.content, BinaryContent) and self.content.mime.startswith("image/")

    @property
    def language(self) -> str | None:
        """The language of a text file; ``None`` for a binary."""
        return self.content.language if isinstance(self.content, TextContent) else None

    @property
    def data(self) -> str | None:
        """The base64 data of a binary file; ``None`` for text."""
        return self.content.data if isinstance(self.content, BinaryContent) else None

    @property
    def mime(self) -> str | None:
        """The MIME type of a binary file; ``None`` for text."""
        return self.content.mime if isinstance(self.content, BinaryContent) else None

    def info(self) -> FileInfo:
        """The file's path, size, line count and state, without its content."""
        return FileInfo(self.path, self.size, self.lines, self.state)


@attrs.frozen
class FileInfo:
    """What is known about a file without its content. ``lines`` and ``state`` are ``None``
    where unknown (a listing on disk does not read files, nor know their history)."""

    path: str
    size: int
    lines: int | None = None
    state: FileState | None = None


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


# ---------------------------------------------------------------------------------------------
# Events


@attrs.frozen
class WriteEvent:
    """``file`` was stored (a write, splice, append, prepend, replace or put)."""

    workspace: str
    file: File


@attrs.frozen
class RemoveEvent:
    """The file at ``path`` was removed."""

    workspace: str
    path: str


@attrs.frozen
class MoveEvent:
    """The file at ``source`` moved to ``destination`` (overwriting what was there) and is now
    ``file``."""

    workspace: str
    source: str
    destination: str
    file: File


@attrs.frozen
class ClearEvent:
    """Every file was removed."""

    workspace: str


WorkspaceEvent: TypeAlias = WriteEvent | RemoveEvent | MoveEvent | ClearEvent
WorkspaceListener: TypeAlias = Callable[[WorkspaceEvent], object]


# ---------------------------------------------------------------------------------------------
# Snapshots


def _to_files(value: Iterable[File]) -> tuple[File, ...]:
    if isinstance(value, str | bytes | Mapping):
        raise WorkspaceError("files must be a sequence of File", code="invalid")
    items = tuple(value)
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, File):
            raise WorkspaceError(
                f"files[{index}] must be a File, not {type(item).__name__}", code="invalid"
            )
        if item.path in seen:
            raise WorkspaceError(f"two files have the path {item.path!r}", code="path")
        seen.add(item.path)
    return items


def _check_id(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise WorkspaceError("a workspace id must be a non-empty string", code="invalid")


@attrs.frozen
class WorkspaceSnapshot:
    """A workspace as plain data (JSON through :mod:`protocols.codec`): its id and its files in
    workspace order, paths unique. Limits and listeners are not part of it."""

    id: str = attrs.field(validator=_check_id)
    files: tuple[File, ...] = attrs.field(default=(), converter=_to_files)


# The file content union travels untagged, told apart by its keys ("text" or "data"); this hook
# only makes the refusal of an object with neither readable (cattrs would say "Couldn't
# disambiguate").
_structure_text = converter.get_structure_hook(TextContent)
_structure_binary = converter.get_structure_hook(BinaryContent)


def _structure_content(value: object, _: object) -> Content:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    if "text" in value:
        return _structure_text(value, TextContent)  # type: ignore[no-any-return]
    if "data" in value:
        return _structure_binary(value, BinaryContent)  # type: ignore[no-any-return]
    raise ValueError('file content needs "text" and "language", or "data" and "mime"')


converter.register_structure_hook_func(lambda cls: cls == Content, _structure_content)


# ---------------------------------------------------------------------------------------------
# Workspace


def _check_limit(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkspaceError(f"{name} must be an integer >= 1, not {value!r}", code="invalid")
    return value


class Workspace:
    """A mutable, insertion-ordered set of immutable :class:`File` values, keyed by path.

    Limits (each an ``int >= 1``; exceeding one raises :class:`WorkspaceError` code ``"size"``
    and changes nothing): ``max_file_size`` for a text file in UTF-8 bytes, ``max_binary_size``
    for a binary file in decoded bytes, ``max_files`` for the number of files. ``files`` seeds
    the workspace as given (states kept); it is how binaries are usually added, besides
    :meth:`put`.

    Every method taking a path normalises it with :func:`normalize_path` (so a malformed path
    raises code ``"path"``). See the module docstring for the edit and event rules.
    """

    __slots__ = ("_files", "_id", "_listeners", "max_binary_size", "max_file_size", "max_files")

    def __init__(
        self,
        id: str | None = None,
        files: Iterable[File] = (),
        *,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        max_binary_size: int = DEFAULT_MAX_BINARY_SIZE,
        max_files: int = DEFAULT_MAX_FILES,
    ) -> None:
        workspace_id = new_id() if id is None else id
        _check_id(self, attrs.fields(WorkspaceSnapshot).id, workspace_id)
        self._id: str = workspace_id
        self.max_file_size = _check_limit("max_file_size", max_file_size)
        self.max_binary_size = _check_limit("max_binary_size", max_binary_size)
        self.max_files = _check_limit("max_files", max_files)
        seeded = _to_files(files)
        if len(seeded) > self.max_files:
            raise self._too_many()
        for file in seeded:
            self._check_size(file)
        self._files: dict[str, File] = {file.path: file for file in seeded}
        self._listeners: list[WorkspaceListener] = []

    def __repr__(self) -> str:
        return f"<Workspace id={self._id!r} files={len(self._files)}>"

    # -- reading -------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The workspace's id (minted when not given)."""
        return self._id

    @property
    def count(self) -> int:
        """The number of files."""
        return len(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, path: object) -> bool:
        """``path in workspace``: whether a file is at ``path`` (``False`` for a malformed
        path, which can name no file)."""
        try:
            return normalize_path(path) in self._files
        except WorkspaceError:
            return False

    def has(self, paths: str | Iterable[str]) -> bool:
        """Whether the file ``paths`` names -- or any of several -- is present."""
        if isinstance(paths, str):
            return normalize_path(paths) in self._files
        return any(normalize_path(path) in self._files for path in paths)

    def file(self, path: str) -> File | None:
        """The file at ``path``, or ``None``."""
        return self._files.get(normalize_path(path))

    def files(self) -> tuple[File, ...]:
        """Every file, in insertion order (a new path goes last; an edit keeps the place)."""
        return tuple(self._files.values())

    def paths(self) -> tuple[str, ...]:
        """Every path, in insertion order."""
        return tuple(self._files)

    @overload
    def read(self, path: str) -> str | None: ...
    @overload
    def read(self, path: str, range: Range) -> ReadResult | None: ...
    def read(self, path: str, range: Range | None = None) -> str | ReadResult | None:
        """Read one file.

        - ``read(path)``: the text of a text file; ``None`` for a binary or absent file.
        - ``read(path, range)``: a :class:`ReadResult` with the clamped range and the text it
          covers; ``None`` for an absent file; a binary raises code ``"modality"``.
        """
        file = self.file(path)
        if file is None:
            return None
        if range is None:
            return file.content.text if isinstance(file.content, TextContent) else None
        text = self._text_of(file, "read a range of")
        clamped = clamp_range(text, range)
        return ReadResult(file.path, slice_range(text, clamped), clamped, file.lines)

    def read_many(self, paths: Iterable[str]) -> dict[str, str]:
        """The text of each listed text file, by normalised path (binaries and absent paths
        are left out)."""
        result: dict[str, str] = {}
        for path in paths:
            text = self.read(path)
            if text is not None:
                result[normalize_path(path)] = text
        return result

    def search(
        self,
        query: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
        limit: int | None = None,
    ) -> tuple[SearchMatch, ...]:
        """Matches of ``query`` in the text files, in workspace order then text order (see
        :func:`compile_query` and :func:`search_text`); binaries are skipped. ``limit`` (an
        ``int >= 1`` or ``None``) caps the number of matches."""
        if limit is not None:
            _check_limit("limit", limit)
        pattern = compile_query(query, regex=regex, case_sensitive=case_sensitive)
        matches: list[SearchMatch] = []
        for file in self._files.values():
            if isinstance(file.content, TextContent):
                left = None if limit is None else limit - len(matches)
                matches.extend(search_text(file.path, file.content.text, pattern, left))
                if limit is not None and len(matches) >= limit:
                    break
        return tuple(matches)

    def snapshot(self) -> WorkspaceSnapshot:
        """The workspace as plain data."""
        return WorkspaceSnapshot(self._id, tuple(self._files.values()))

    @classmethod
    def restore(
        cls,
        snapshot: WorkspaceSnapshot,
        *,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        max_binary_size: int = DEFAULT_MAX_BINARY_SIZE,
        max_files: int = DEFAULT_MAX_FILES,
    ) -> Workspace:
        """A workspace holding exactly what ``snapshot`` holds (files, order, states); its
        snapshot equals ``snapshot``. The limits apply (code ``"size"``)."""
        if not isinstance(snapshot, WorkspaceSnapshot):
            raise WorkspaceError(
                f"expected a WorkspaceSnapshot, not {type(snapshot).__name__}", code="invalid"
            )
        return cls(
            snapshot.id,
            snapshot.files,
            max_file_size=max_file_size,
            max_binary_size=max_binary_size,
            max_files=max_files,
        )

    # -- writing -------------------------------------------------------------------------------

    def write(self, path: str, text: str, range: Range | None = None) -> File:
        """Write text and return the new file.

        Without ``range`` the whole file is replaced: an existing text file keeps its language;
        a new file, or a binary retyped to text, gets :func:`infer_language`. With ``range`` the
        clamped range is replaced by ``text`` (a splice); the file must exist (code
        ``"not_found"``) and be text (code ``"modality"``).
        """
        key = normalize_path(path)
        text = _to_text(text)
        old = self._files.get(key)
        if range is None:
            if old is not None and isinstance(old.content, TextContent):
                language = old.content.language
            else:
                language = infer_language(key)
            return self._commit(self._mint(key, TextContent(text, language)))
        if not isinstance(range, Range):
            raise WorkspaceError(
                f"range must be a Range, not {type(range).__name__}", code="range", path=key
            )
        if old is None:
            raise WorkspaceError(f"no file at {key!r} to splice into", code="not_found", path=key)
        current = self._text_of(old, "splice into")
        return self._commit(self._edit(old, splice_range(current, range, text)))

    def write_many(self, texts: Mapping[str, str]) -> tuple[File, ...]:
        """Write several whole files (as :meth:`write` without a range), all or none: every
        path and limit is checked before anything changes. One write event per file."""
        staged: dict[str, File] = {}
        for path, text in texts.items():
            key = normalize_path(path)
            old = staged.get(key) or self._files.get(key)
            if old is not None and isinstance(old.content, TextContent):
                language = old.content.language
            else:
                language = infer_language(key)
            staged[key] = self._mint(key, TextContent(_to_text(text), language))
        return self._commit_many(list(staged.values()))

    def append(self, path: str, text: str) -> File:
        """Add ``text`` at the end of a text file, creating it when absent (code
        ``"modality"`` for a binary)."""
        return self._extend(path, text, at_end=True)

    def prepend(self, path: str, text: str) -> File:
        """Add ``text`` at the start of a text file, creating it when absent (code
        ``"modality"`` for a binary)."""
        return self._extend(path, text, at_end=False)

    def put(self, file: File) -> File:
        """Store ``file``'s content at its path (text or binary) and return the stored value:
        a new :class:`File` with state ``"created"`` or ``"modified"``."""
        if not isinstance(file, File):
            raise WorkspaceError(f"expected a File, not {type(file).__name__}", code="invalid")
        return self._commit(self._mint(file.path, file.content))

    def replace(
        self,
        query: str,
        replacement: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
    ) -> ReplaceResult:
        """Replace every match of ``query`` in every text file (see :func:`compile_query` and
        :func:`replace_text`), all or none: sizes are checked for every changed file before any
        is stored. One write event per changed file."""
        pattern = compile_query(query, regex=regex, case_sensitive=case_sensitive)
        replaced = 0
        changed: list[File] = []
        for file in self._files.values():
            if isinstance(file.content, TextContent):
                text, count = replace_text(file.content.text, pattern, replacement, regex=regex)
                if count:
                    replaced += count
                    changed.append(self._edit(file, text))
        self._commit_many(changed)
        return ReplaceResult(query, replaced, tuple(file.path for file in changed))

    def move(self, source: str, destination: str) -> bool:
        """Move the file at ``source`` to ``destination``, overwriting any file there (which
        keeps its place in the order; a new path goes last). ``False`` when ``source`` is
        absent. The moved file has state ``"modified"``; a language inferred from the old name
        follows the new one, a chosen language is kept. Moving a file onto itself changes
        nothing and returns ``True``."""
        src, dst = normalize_path(source), normalize_path(destination)
        old = self._files.get(src)
        if old is None:
            return False
        if src == dst:
            return True
        content = old.content
        if isinstance(content, TextContent) and content.language == infer_language(src):
            content = TextContent(content.text, infer_language(dst))
        moved = File(dst, content, "modified")
        del self._files[src]
        self._files[dst] = moved
        self._emit(MoveEvent(self._id, src, dst, moved))
        return True

    def remove(self, paths: str | Iterable[str]) -> bool:
        """Remove the file ``paths`` names, or each of several; ``True`` when anything was
        removed. Every path is checked first. One remove event per removed file."""
        keys = (
            [normalize_path(paths)] if isinstance(paths, str) else list(map(normalize_path, paths))
        )
        removed: list[str] = []
        for key in keys:
            if self._files.pop(key, None) is not None:
                removed.append(key)
        for key in removed:
            self._emit(RemoveEvent(self._id, key))
        return bool(removed)

    def clear(self) -> None:
        """Remove every file; one clear event."""
        self._files.clear()
        self._emit(ClearEvent(self._id))

    # -- events --------------------------------------------------------------------------------

    def subscribe(self, listener: WorkspaceListener) -> Callable[[], None]:
        """Call ``listener(event)`` after every mutation, in subscription order; returns a
        function that unsubscribes it (idempotent). A listener that raises is logged at error
        level and skipped."""
        if not callable(listener):
            raise WorkspaceError("a listener must be callable", code="invalid")
        entry = _Subscription(listener)
        self._listeners.append(entry)

        def unsubscribe() -> None:
            if entry in self._listeners:
                self._listeners.remove(entry)

        return unsubscribe

    def _emit(self, event: WorkspaceEvent) -> None:
        for listener in tuple(self._listeners):
            try:
                listener(event)
            except Exception:
                # The event itself is not logged: it may carry a whole file.
                _log.exception(
                    "workspace %r: a listener raised on a %s", self._id, type(event).__name__
                )

    # -- internals -----------------------------------------------------------------------------

    def _text_of(self, file: File, action: str) -> str:
        if isinstance(file.content, TextContent):
            return file.content.text
        raise WorkspaceError(
            f"cannot {action} {file.path!r}: it is a binary file ({file.content.mime})",
            code="modality",
            path=file.path,
        )

    def _extend(self, path: str, text: str, *, at_end: bool) -> File:
        key = normalize_path(path)
        text = _to_text(text)
        old = self._files.get(key)
        if old is None:
            return self._commit(self._mint(key, TextContent(text, infer_language(key))))
        current = self._text_of(old, "append to" if at_end else "prepend to")
        return self._commit(self._edit(old, current + text if at_end else text + current))

    def _mint(self, path: str, content: Content) -> File:
        return File(path, content, "modified" if path in self._files else "created")

    def _edit(self, old: File, text: str) -> File:
        assert isinstance(old.content, TextContent)
        return File(old.path, TextContent(text, old.content.language), "modified")

    def _check_size(self, file: File) -> None:
        limit = self.max_file_size if file.is_text else self.max_binary_size
        if file.size > limit:
            kind = "text" if file.is_text else "binary"
            raise WorkspaceError(
                f"{file.path!r} would be {file.size} bytes; the {kind} file limit is {limit}",
                code="size",
                path=file.path,
            )

    def _too_many(self) -> WorkspaceError:
        return WorkspaceError(
            f"the workspace would hold more than {self.max_files} files", code="size"
        )

    def _commit(self, file: File) -> File:
        self._commit_many([file])
        return file

    def _commit_many(self, files: list[File]) -> tuple[File, ...]:
        added = 0
        for file in files:
            self._check_size(file)
            added += file.path not in self._files
        if len(self._files) + added > self.max_files:
            raise self._too_many()
        for file in files:
            self._files[file.path] = file
        for file in files:
            self._emit(WriteEvent(self._id, file))
        return tuple(files)


@attrs.define(eq=False)
class _Subscription:
    """One registration (a wrapper, so subscribing the same function twice registers twice and
    each unsubscribe removes its own)."""

    listener: WorkspaceListener

    def __call__(self, event: WorkspaceEvent) -> None:
        self.listener(event)


# ---------------------------------------------------------------------------------------------
# Manager


class WorkspaceManager:
    """Many workspaces by id, one of them active (the one a prompt renders and the tools edit).

    Guarantees: whenever there is no active workspace, the next one added becomes active;
    :meth:`switch` to an unknown id returns ``None`` and leaves the active one unchanged; the
    active workspace is held by id, so re-adding a workspace with the active id makes the new one
    active; removing the active workspace leaves none active. Persistence is a seam, not a
    feature: :meth:`Workspace.snapshot` / :meth:`Workspace.restore` and :meth:`add`.
    """

    __slots__ = ("_active", "_workspaces")

    def __init__(self, workspaces: Iterable[Workspace] = ()) -> None:
        self._workspaces: dict[str, Workspace] = {}
        self._active: str | None = None
        for workspace in workspaces:
            self.add(workspace)

    def __repr__(self) -> str:
        return f"<WorkspaceManager workspaces={len(self._workspaces)} active={self._active!r}>"

    def __len__(self) -> int:
        return len(self._workspaces)

    def __contains__(self, workspace_id: object) -> bool:
        return workspace_id in self._workspaces

    def add(self, workspace: Workspace | None = None) -> Workspace:
        """Add ``workspace`` (a fresh empty one when ``None``) and return it. An existing
        workspace with the same id is replaced (keeping its place)."""
        if workspace is None:
            workspace = Workspace()
        if not isinstance(workspace, Workspace):
            raise WorkspaceError(
                f"expected a Workspace, not {type(workspace).__name__}", code="invalid"
            )
        self._workspaces[workspace.id] = workspace
        if self._active is None:
            self._active = workspace.id
        return workspace

    def get(self, workspace_id: str) -> Workspace | None:
        """The workspace with ``workspace_id``, or ``None``."""
        return self._workspaces.get(workspace_id)

    def switch(self, workspace_id: str) -> Workspace | None:
        """Make ``workspace_id`` active and return it; ``None`` (nothing changed) when unknown."""
        workspace = self._workspaces.get(workspace_id)
        if workspace is not None:
            self._active = workspace_id
        return workspace

    @property
    def active(self) -> Workspace | None:
        """The active workspace, or ``None``."""
        return None if self._active is None else self._workspaces.get(self._active)

    @property
    def active_id(self) -> str | None:
        """The active workspace's id, or ``None``."""
        return self._active

    def remove(self, workspace_id: str) -> bool:
        """Remove a workspace; ``False`` when unknown. Removing the active one leaves none
        active."""
        if self._workspaces.pop(workspace_id, None) is None:
            return False
        if self._active == workspace_id:
            self._active = None
        return True

    def clear(self) -> None:
        """Remove every workspace."""
        self._workspaces.clear()
        self._active = None

    def workspaces(self) -> tuple[Workspace, ...]:
        """Every workspace, in the order added."""
        return tuple(self._workspaces.values())


# ---------------------------------------------------------------------------------------------
# Rendering

_BACKTICKS = re.compile("`+")


def render_fenced(file: File) -> str:
    """A text file as a prompt block::

        File: <path>
        ```<language>
        <text>
        ```

    The fence is one backtick longer than the longest run of backticks in the text (and at least
    three), so no content can close it early. A binary file raises :class:`WorkspaceError`
    (code ``"modality"``): images travel as message attachments, not as text.
    """
    if not isinstance(file.content, TextContent):
        raise WorkspaceError(
            f"cannot render binary file {file.path!r} as text", code="modality", path=file.path
        )
    text = file.content.text
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    newline = "" if text.endswith("\n") else "\n"  # the closing fence on its own line
    return f"File: {file.path}\n{fence}{file.content.language}\n{text}{newline}{fence}"
