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

from ._model import BINARY_MIMES as BINARY_MIMES
from ._model import DEFAULT_MAX_BINARY_SIZE as DEFAULT_MAX_BINARY_SIZE
from ._model import DEFAULT_MAX_FILE_SIZE as DEFAULT_MAX_FILE_SIZE
from ._model import DEFAULT_MAX_FILES as DEFAULT_MAX_FILES
from ._model import EXTENSION_TO_LANGUAGE as EXTENSION_TO_LANGUAGE
from ._model import MAX_PATH_LENGTH as MAX_PATH_LENGTH
from ._model import MAX_QUERY_LENGTH as MAX_QUERY_LENGTH
from ._model import BinaryContent as BinaryContent
from ._model import BinaryMime as BinaryMime
from ._model import Content as Content
from ._model import File as File
from ._model import FileInfo as FileInfo
from ._model import FileState as FileState
from ._model import TextContent as TextContent
from ._model import WorkspaceError as WorkspaceError
from ._model import WorkspaceErrorCode as WorkspaceErrorCode
from ._model import infer_language as infer_language
from ._model import normalize_path as normalize_path
from ._render import render_fenced as render_fenced
from ._state import ClearEvent as ClearEvent
from ._state import MoveEvent as MoveEvent
from ._state import RemoveEvent as RemoveEvent
from ._state import Workspace as Workspace
from ._state import WorkspaceEvent as WorkspaceEvent
from ._state import WorkspaceListener as WorkspaceListener
from ._state import WorkspaceManager as WorkspaceManager
from ._state import WorkspaceSnapshot as WorkspaceSnapshot
from ._state import WriteEvent as WriteEvent
from ._text import Listing as Listing
from ._text import Position as Position
from ._text import Range as Range
from ._text import ReadResult as ReadResult
from ._text import ReplaceResult as ReplaceResult
from ._text import SearchMatch as SearchMatch
from ._text import SpliceResult as SpliceResult
from ._text import advance as advance
from ._text import clamp_position as clamp_position
from ._text import clamp_range as clamp_range
from ._text import compile_query as compile_query
from ._text import end_position as end_position
from ._text import full_range as full_range
from ._text import offset_at as offset_at
from ._text import position_at as position_at
from ._text import replace_text as replace_text
from ._text import search_text as search_text
from ._text import slice_range as slice_range
from ._text import splice_range as splice_range

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
