"""Workspace state: its events, snapshots, the Workspace itself and the manager of several."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TypeAlias, overload

import attrs

from ..codec import converter
from ..messages import new_id
from ._model import (
    DEFAULT_MAX_BINARY_SIZE,
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MAX_FILES,
    BinaryContent,
    Content,
    File,
    TextContent,
    WorkspaceError,
    _to_text,
    infer_language,
    normalize_path,
)
from ._text import (
    Range,
    ReadResult,
    ReplaceResult,
    SearchMatch,
    clamp_range,
    compile_query,
    replace_text,
    search_text,
    slice_range,
    splice_range,
)

_log = logging.getLogger("protocols.workspace")  # the name it always logged under

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
