"""The model-facing workspace tools, over any workspace backend (on disk: ``_workspace_fs``).

The workspace tools (:func:`workspace_tools`) expose read, write, splice, search, replace, move,
remove and list to a model over any :class:`WorkspaceBackend`: a :class:`FileSystemWorkspace`,
or an in-memory :class:`~protocols.workspace.Workspace` or
:class:`~protocols.workspace.WorkspaceManager` (through :class:`MemoryBackend`). A tool never
raises for bad input or a refused operation: it returns a
:class:`~protocols.messages.ToolFailure` with a message the model can act on.
``trio.Cancelled`` always propagates.
"""

from __future__ import annotations

import logging
from collections.abc import (
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from protocols.codec import JSON
from protocols.messages import (
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    new_id,
)
from protocols.toolschema import validate_arguments
from protocols.workspace import (
    MAX_PATH_LENGTH,
    MAX_QUERY_LENGTH,
    FileInfo,
    Listing,
    Range,
    ReadResult,
    ReplaceResult,
    SearchMatch,
    SpliceResult,
    TextContent,
    Workspace,
    WorkspaceError,
    WorkspaceManager,
    advance,
    clamp_range,
    full_range,
    normalize_path,
    slice_range,
)

from ._workspace_fs import (
    DEFAULT_IGNORE,
    DEFAULT_MAX_DISK_FILES,
    DEFAULT_MAX_READ_BYTES,
    DEFAULT_MAX_WRITE_BYTES,
    TEMP_PREFIX,
    FileSystemWorkspace,
    _lines,
)

__all__ = [
    "DEFAULT_IGNORE",
    "DEFAULT_MAX_DISK_FILES",
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_MAX_WRITE_BYTES",
    "TEMP_PREFIX",
    "FileSystemWorkspace",
    "MemoryBackend",
    "WorkspaceBackend",
    "WorkspaceTool",
    "workspace_tools",
]

_log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# What the tools need, and the in-memory workspace behind it


class WorkspaceBackend(Protocol):
    """The async surface the workspace tools drive. :class:`FileSystemWorkspace` and
    :class:`MemoryBackend` implement it; every method raises
    :class:`~protocols.workspace.WorkspaceError` to refuse."""

    async def read(self, path: str, range: Range | None = None) -> ReadResult: ...

    async def write(self, path: str, text: str) -> FileInfo: ...

    async def splice(self, path: str, range: Range, text: str) -> SpliceResult: ...

    async def search(
        self,
        query: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
        limit: int | None = None,
    ) -> tuple[SearchMatch, ...]: ...

    async def replace(
        self,
        query: str,
        replacement: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
    ) -> ReplaceResult: ...

    async def move(self, source: str, destination: str) -> bool: ...

    async def remove(self, paths: Sequence[str]) -> tuple[str, ...]: ...

    async def list(self, directory: str | None = None, *, limit: int | None = None) -> Listing: ...


class MemoryBackend:
    """An in-memory :class:`~protocols.workspace.Workspace` behind :class:`WorkspaceBackend`.

    Directories exist only as path prefixes of files: listing a directory no file is under is
    code ``"not_found"`` (code ``"path"`` when it names a file), as on disk.

    Given a :class:`~protocols.workspace.WorkspaceManager`, every call acts on the workspace
    active at that moment (code ``"not_found"`` when there is none). Each method is one
    synchronous workspace operation after a checkpoint, so it is atomic with respect to other
    trio tasks; events fire as for direct edits.
    """

    def __init__(self, source: Workspace | WorkspaceManager) -> None:
        if not isinstance(source, Workspace | WorkspaceManager):
            raise WorkspaceError(
                f"expected a Workspace or WorkspaceManager, not {type(source).__name__}",
                code="invalid",
            )
        self._source = source

    def __repr__(self) -> str:
        return f"<MemoryBackend {self._source!r}>"

    def workspace(self) -> Workspace:
        """The workspace calls act on now."""
        if isinstance(self._source, Workspace):
            return self._source
        active = self._source.active
        if active is None:
            raise WorkspaceError("there is no active workspace", code="not_found")
        return active

    def _text(self, path: str) -> tuple[Workspace, str, str]:
        workspace = self.workspace()
        file = workspace.file(path)
        if file is None:
            key = normalize_path(path)
            raise WorkspaceError(f"no file at {key!r}", code="not_found", path=key)
        if not isinstance(file.content, TextContent):
            raise WorkspaceError(
                f"{file.path!r} is a binary file ({file.content.mime}); it has no text",
                code="modality",
                path=file.path,
            )
        return workspace, file.path, file.content.text

    async def read(self, path: str, range: Range | None = None) -> ReadResult:
        await trio.lowlevel.checkpoint()
        _, key, text = self._text(path)
        span = full_range(text) if range is None else clamp_range(text, range)
        return ReadResult(key, slice_range(text, span), span, _lines(text))

    async def write(self, path: str, text: str) -> FileInfo:
        await trio.lowlevel.checkpoint()
        return self.workspace().write(path, text).info()

    async def splice(self, path: str, range: Range, text: str) -> SpliceResult:
        await trio.lowlevel.checkpoint()
        workspace, key, current = self._text(path)
        start = clamp_range(current, range).start
        stored = workspace.write(key, text, range)
        return SpliceResult(stored.info(), Range(start, advance(start, text)))

    async def search(
        self,
        query: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
        limit: int | None = None,
    ) -> tuple[SearchMatch, ...]:
        await trio.lowlevel.checkpoint()
        return self.workspace().search(
            query, regex=regex, case_sensitive=case_sensitive, limit=limit
        )

    async def replace(
        self,
        query: str,
        replacement: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
    ) -> ReplaceResult:
        await trio.lowlevel.checkpoint()
        return self.workspace().replace(
            query, replacement, regex=regex, case_sensitive=case_sensitive
        )

    async def move(self, source: str, destination: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self.workspace().move(source, destination)

    async def remove(self, paths: Sequence[str]) -> tuple[str, ...]:
        await trio.lowlevel.checkpoint()
        workspace = self.workspace()
        keys = list(dict.fromkeys(normalize_path(path) for path in paths))
        present = tuple(key for key in keys if workspace.has(key))
        if present:
            workspace.remove(present)
        return present

    async def list(self, directory: str | None = None, *, limit: int | None = None) -> Listing:
        await trio.lowlevel.checkpoint()
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise WorkspaceError(f"limit must be an integer >= 1, not {limit!r}", code="invalid")
        workspace = self.workspace()
        prefix = None if directory is None else normalize_path(directory) + "/"
        files = [
            file.info()
            for file in workspace.files()
            if prefix is None or file.path.startswith(prefix)
        ]
        if prefix is not None and not files:
            # Directories exist only through their files here; answer as a disk would.
            key = prefix[:-1]
            if workspace.has(key):
                raise WorkspaceError(f"{key!r} is a file, not a directory", code="path", path=key)
            raise WorkspaceError(f"no directory {key!r}", code="not_found", path=key)
        if limit is not None and len(files) > limit:
            return Listing(tuple(files[:limit]), truncated=True)
        return Listing(tuple(files))


# ---------------------------------------------------------------------------------------------
# The tools

#: The longest line excerpt a search result shows, in characters.
_EXCERPT: Final = 240

_Handler = Callable[[WorkspaceBackend, dict[str, Any]], Awaitable[JSON]]


class WorkspaceTool:
    """One model-facing workspace operation: its :class:`~protocols.messages.ToolDefinition`
    and :meth:`run`.

    Guarantees: :meth:`run` validates the arguments against ``definition.parameters`` (JSON
    Schema) before doing anything, and returns a :class:`~protocols.messages.ToolSuccess` with
    a JSON value or a :class:`~protocols.messages.ToolFailure` whose message names the problem
    (``"<code>: <message>"`` for a refused operation). It never raises for bad input, a refused
    operation or an OS error; an unexpected exception is logged and reported as an internal
    error. ``trio.Cancelled`` (like every ``BaseException``) propagates.
    """

    __slots__ = ("_backend", "_handler", "definition")

    def __init__(
        self, definition: ToolDefinition, handler: _Handler, backend: WorkspaceBackend
    ) -> None:
        self.definition = definition
        self._handler = handler
        self._backend = backend

    def __repr__(self) -> str:
        return f"<WorkspaceTool {self.definition.name}>"

    @property
    def name(self) -> str:
        """The tool's name (``definition.name``)."""
        return self.definition.name

    def problems(self, arguments: object) -> list[str]:
        """What is wrong with ``arguments`` for this tool (empty when they are valid), in the
        same words as every tool's validation (:func:`~protocols.toolschema.validate_arguments`)."""
        return validate_arguments(self.definition.parameters, arguments)

    async def run(self, arguments: Mapping[str, Any], *, call_id: str | None = None) -> ToolResult:
        """Run the tool with ``arguments``; the result carries ``call_id`` (minted if absent)."""
        call_id = call_id or new_id()
        name = self.definition.name
        problems = self.problems(arguments)
        if problems:
            return ToolFailure(call_id, name, f"invalid arguments: {'; '.join(problems)}")
        try:
            value = await self._handler(self._backend, dict(arguments))
        except WorkspaceError as exc:
            return ToolFailure(call_id, name, f"{exc.code}: {exc.message}")
        except OSError as exc:
            return ToolFailure(call_id, name, f"io: {exc.strerror or type(exc).__name__}")
        except Exception:
            _log.exception("workspace tool %s failed unexpectedly", name)
            return ToolFailure(call_id, name, f"{name} failed with an internal error")
        return ToolSuccess(call_id, name, value)

    async def call(self, call: ToolCall) -> ToolResult:
        """Run the tool for a model's ``call`` (its id and arguments); a call naming another tool
        is a failure."""
        if call.name != self.definition.name:
            return ToolFailure(
                call.id, call.name, f"this tool is {self.definition.name!r}, not {call.name!r}"
            )
        return await self.run(call.arguments, call_id=call.id)


def _range_arguments(arguments: Mapping[str, Any], *, required: bool) -> Range | None:
    keys = ("start_line", "start_column", "end_line", "end_column")
    given = [key for key in keys if key in arguments]
    if not given and not required:
        return None
    if len(given) != len(keys):
        missing = ", ".join(key for key in keys if key not in arguments)
        raise WorkspaceError(
            f"a range needs all of start_line, start_column, end_line, end_column (missing: "
            f"{missing})",
            code="range",
        )
    return Range.of(*(int(arguments[key]) for key in keys))


def _flat(span: Range) -> dict[str, int]:
    return {
        "start_line": span.start.line,
        "start_column": span.start.column,
        "end_line": span.end.line,
        "end_column": span.end.column,
    }


def _info(info: FileInfo) -> dict[str, JSON]:
    value: dict[str, JSON] = {"path": info.path, "size": info.size}
    if info.lines is not None:
        value["lines"] = info.lines
    if info.state is not None:
        value["state"] = info.state
    return value


def _excerpt(line: str, column: int) -> str:
    if len(line) <= _EXCERPT:
        return line
    start = max(0, min(column - 1 - _EXCERPT // 4, len(line) - _EXCERPT))
    text = line[start : start + _EXCERPT]
    return ("..." if start else "") + text + ("..." if start + _EXCERPT < len(line) else "")


async def _read(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    result = await backend.read(arguments["path"], _range_arguments(arguments, required=False))
    return {
        "path": result.path,
        "content": result.text,
        "lines": result.lines,
        **_flat(result.range),
    }


async def _write(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    return _info(await backend.write(arguments["path"], arguments["content"]))


async def _splice(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    span = _range_arguments(arguments, required=True)
    assert span is not None
    result = await backend.splice(arguments["path"], span, arguments["content"])
    return {**_info(result.file), "inserted": _flat(result.range)}


async def _search(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    limit = int(arguments.get("limit", 50))
    matches = await backend.search(
        arguments["query"],
        regex=bool(arguments.get("regex", False)),
        case_sensitive=bool(arguments.get("case_sensitive", True)),
        limit=limit + 1,
    )
    return {
        "matches": [
            {
                "path": match.path,
                "line": match.line,
                "column": match.column,
                "length": match.length,
                "text": _excerpt(match.text, match.column),
            }
            for match in matches[:limit]
        ],
        "truncated": len(matches) > limit,
    }


async def _replace(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    result = await backend.replace(
        arguments["query"],
        arguments["replacement"],
        regex=bool(arguments.get("regex", False)),
        case_sensitive=bool(arguments.get("case_sensitive", True)),
    )
    return {"replaced": result.replaced, "files": list(result.files)}


async def _move(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    source, destination = arguments["source"], arguments["destination"]
    if not await backend.move(source, destination):
        key = normalize_path(source)
        raise WorkspaceError(f"no file at {key!r} to move", code="not_found", path=key)
    return {
        "moved": True,
        "source": normalize_path(source),
        "destination": normalize_path(destination),
    }


async def _remove(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    paths = [normalize_path(path) for path in arguments["paths"]]
    removed = await backend.remove(paths)
    gone = set(removed)
    return {"removed": list(removed), "missing": [p for p in dict.fromkeys(paths) if p not in gone]}


async def _list(backend: WorkspaceBackend, arguments: dict[str, Any]) -> JSON:
    listing = await backend.list(arguments.get("directory"), limit=int(arguments.get("limit", 200)))
    return {"files": [_info(info) for info in listing.files], "truncated": listing.truncated}


_PATH: Final[dict[str, JSON]] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_PATH_LENGTH,
    "description": "A relative path inside the workspace, '/'-separated (no '..', no leading '/').",
}
_POSITIVE: Final[dict[str, JSON]] = {"type": "integer", "minimum": 1}
_RANGE: Final[dict[str, JSON]] = {
    "start_line": {**_POSITIVE, "description": "1-based line where the range starts."},
    "start_column": {**_POSITIVE, "description": "1-based column (character) where it starts."},
    "end_line": {**_POSITIVE, "description": "1-based line where the range ends."},
    "end_column": {
        **_POSITIVE,
        "description": "1-based column where it ends; the end position itself is excluded.",
    },
}
_QUERY: Final[dict[str, JSON]] = {
    "query": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_QUERY_LENGTH,
        "description": "Text to find (literal unless regex is true).",
    },
    "regex": {
        "type": "boolean",
        "description": "Treat query as a Python regular expression ('^'/'$' match at line "
        "boundaries). Default false.",
    },
    "case_sensitive": {"type": "boolean", "description": "Match case exactly. Default true."},
}


def _schema(properties: Mapping[str, JSON], required: Sequence[str]) -> dict[str, JSON]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


_RANGE_NOTE = (
    "Positions are 1-based (line, column); a range is half-open: it includes its start and "
    "excludes its end, so lines 3 to 5 are start 3:1, end 6:1. Positions past the end of a line "
    "or of the file are clamped to it."
)

_TOOLS: Final[tuple[tuple[ToolDefinition, _Handler], ...]] = (
    (
        ToolDefinition(
            "workspace_read",
            "Read a text file of the workspace, whole or a range of it. Give all four range "
            f"fields or none. {_RANGE_NOTE} Returns the content and the range it covers.",
            _schema({"path": _PATH, **_RANGE}, ["path"]),
        ),
        _read,
    ),
    (
        ToolDefinition(
            "workspace_write",
            "Create a text file or replace its whole content. Returns its size and line count.",
            _schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
        ),
        _write,
    ),
    (
        ToolDefinition(
            "workspace_splice",
            "Replace a range of an existing text file with new content (an empty range inserts; "
            f"empty content deletes). {_RANGE_NOTE} Returns the range the new content covers.",
            _schema(
                {"path": _PATH, **_RANGE, "content": {"type": "string"}},
                ["path", "start_line", "start_column", "end_line", "end_column", "content"],
            ),
        ),
        _splice,
    ),
    (
        ToolDefinition(
            "workspace_search",
            "Search the text files of the workspace. Returns matches with path, 1-based line "
            "and column, length and the line's text; truncated is true when more were found "
            "than the limit.",
            _schema(
                {
                    **_QUERY,
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 500,
                        "description": "Most matches to return. Default 50.",
                    },
                },
                ["query"],
            ),
        ),
        _search,
    ),
    (
        ToolDefinition(
            "workspace_replace",
            "Replace every match of a query in every text file of the workspace. With regex, "
            "the replacement may refer to groups (\\1, \\g<name>). Returns the number of "
            "replacements and the files changed.",
            _schema({**_QUERY, "replacement": {"type": "string"}}, ["query", "replacement"]),
        ),
        _replace,
    ),
    (
        ToolDefinition(
            "workspace_move",
            "Move or rename a file, replacing any file at the destination.",
            _schema({"source": _PATH, "destination": _PATH}, ["source", "destination"]),
        ),
        _move,
    ),
    (
        ToolDefinition(
            "workspace_remove",
            "Remove files. Returns the paths removed and those that were not there.",
            _schema(
                {
                    "paths": {
                        "type": "array",
                        "items": _PATH,
                        "minItems": 1,
                        "maxItems": 100,
                    }
                },
                ["paths"],
            ),
        ),
        _remove,
    ),
    (
        ToolDefinition(
            "workspace_list",
            "List the files of the workspace (or of one directory) with their sizes.",
            _schema(
                {
                    "directory": {**_PATH, "description": "Only list files under this directory."},
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 1000,
                        "description": "Most files to list. Default 200.",
                    },
                },
                [],
            ),
        ),
        _list,
    ),
)


def workspace_tools(
    workspace: Workspace | WorkspaceManager | WorkspaceBackend,
) -> list[WorkspaceTool]:
    """The eight workspace tools (``workspace_read``, ``_write``, ``_splice``, ``_search``,
    ``_replace``, ``_move``, ``_remove``, ``_list``) over ``workspace``: an in-memory workspace,
    a manager (the tools then act on whichever workspace is active at each call), or any
    :class:`WorkspaceBackend` such as a :class:`FileSystemWorkspace`. A fresh list each call."""
    backend: WorkspaceBackend
    if isinstance(workspace, Workspace | WorkspaceManager):
        backend = MemoryBackend(workspace)
    else:
        backend = workspace
    return [WorkspaceTool(definition, handler, backend) for definition, handler in _TOOLS]


if TYPE_CHECKING:
    # Both backends satisfy the protocol (mypy checks these assignments).
    _FILE_SYSTEM: type[WorkspaceBackend] = FileSystemWorkspace
    _MEMORY: type[WorkspaceBackend] = MemoryBackend
