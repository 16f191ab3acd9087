"""Workspace values: limits, the error, paths and languages, file contents and files."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal, TypeAlias

import attrs

from ..errors import Category, ValidationError

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
