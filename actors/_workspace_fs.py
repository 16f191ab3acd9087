"""A workspace on disk: :class:`FileSystemWorkspace` and what keeps its paths inside its root.

:class:`FileSystemWorkspace` is a workspace rooted at a directory. Its methods are async; each
does its disk work in one call to :func:`trio.to_thread.run_sync` (a cancel waits for that call
to finish -- every call is bounded by the size limits -- so an operation is never left half
done).

What it guarantees about paths:

* Every path goes through :func:`~protocols.workspace.normalize_path`: absolute paths, ``..``
  segments, empty segments and control characters are refused (code ``"path"``).
* A path is resolved with its symbolic links (``os.path.realpath``) and must resolve to
  something strictly inside the root's real path; a symlink (file or directory, dangling or not)
  leading outside is refused (code ``"path"``). Symlinks that stay inside the root are followed
  by reads and writes; :meth:`~FileSystemWorkspace.move` and
  :meth:`~FileSystemWorkspace.remove` act on the entry itself and refuse symlinks.
* The resolved path is then *opened* component by component from a descriptor of the root with
  ``O_NOFOLLOW`` at every step. A directory or file swapped for a symlink after the resolution
  (the classic check-then-use race) makes the operation fail with code ``"path"`` instead of
  escaping the root.
* Only regular files are read or written: directories, FIFOs, sockets and device files are
  refused (code ``"path"``), checked with ``lstat`` before opening (so a FIFO is never opened)
  and again with ``fstat`` after (so what is read is the file that was checked). Files are opened
  with ``O_NONBLOCK`` so even a swapped-in FIFO cannot block.
* Reads over ``max_read_bytes`` and writes over ``max_write_bytes`` are refused (code
  ``"size"``) -- a file growing while read is caught too. Files that are not UTF-8 are refused
  for text operations (code ``"modality"``) and skipped by search and replace.
* Writes are atomic: the bytes go to a temporary file (``.trio-agents-<random>.tmp``, created
  with ``O_EXCL`` in the target's directory), are flushed with ``fsync``, and replace the target
  with ``os.replace``. A reader sees the old content or the new, never a mix. The permission bits
  of a replaced file are kept (owner and ACLs are not); missing parent directories are created.

What it does not guarantee: hard links are not detected (a hard link inside the root to a file
outside it is an ordinary file); a directory moved out of the root by another process while an
operation holds it open is not noticed; read-modify-write operations (splice, append, replace)
are serialised within one :class:`FileSystemWorkspace` but not against other processes (a
concurrent writer's change can be lost, though never torn); mount points inside the root are
crossed. POSIX only (it needs ``dir_fd`` support and ``O_NOFOLLOW``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
import stat
from collections.abc import (
    Callable,
    Generator,
    Iterable,
    Iterator,
    Sequence,
)
from typing import Final, TypeVar

import attrs
import trio

from protocols.errors import Category
from protocols.workspace import (
    FileInfo,
    Listing,
    Range,
    ReadResult,
    ReplaceResult,
    SearchMatch,
    SpliceResult,
    WorkspaceError,
    advance,
    clamp_range,
    compile_query,
    full_range,
    normalize_path,
    replace_text,
    search_text,
    slice_range,
    splice_range,
)

__all__ = [
    "DEFAULT_IGNORE",
    "DEFAULT_MAX_DISK_FILES",
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_MAX_WRITE_BYTES",
    "TEMP_PREFIX",
    "FileSystemWorkspace",
]

T = TypeVar("T")

#: Default cap on a read from disk (1 MiB).
DEFAULT_MAX_READ_BYTES: Final = 1024 * 1024
#: Default cap on a write to disk (1 MiB).
DEFAULT_MAX_WRITE_BYTES: Final = 1024 * 1024
#: Default cap on the files a search or replace on disk may walk.
DEFAULT_MAX_DISK_FILES: Final = 10_000
#: Directory names listing, search and replace skip by default (version-control metadata).
DEFAULT_IGNORE: Final = (".git", ".hg", ".svn")
#: The name prefix of the temporary files of atomic writes (skipped by listings).
TEMP_PREFIX: Final = ".trio-agents-"

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK: Final = 1 << 16
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


# ---------------------------------------------------------------------------------------------
# The on-disk workspace: synchronous core (runs in a worker thread)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file"


def _require_regular(mode: int, rel: str) -> None:
    if not stat.S_ISREG(mode):
        raise WorkspaceError(
            f"{rel!r} is {_kind(mode)}; only regular files can be used", code="path", path=rel
        )


def _os_error(exc: OSError, rel: str | None) -> WorkspaceError:
    """A WorkspaceError for an OS error, naming the workspace path (never the absolute one)."""
    what = f"{rel!r}: " if rel else ""
    reason = exc.strerror or type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        return WorkspaceError(f"{what}no such file or directory", code="not_found", path=rel)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG):
        return WorkspaceError(f"{what}{reason}", code="path", path=rel)
    return WorkspaceError(f"{what}{reason}", code="io", path=rel, category=Category.SYSTEM)


def _read_all(fd: int, limit: int) -> bytes:
    buffer = bytearray()
    while len(buffer) < limit:
        chunk = os.read(fd, min(_CHUNK, limit - len(buffer)))
        if not chunk:
            break
        buffer += chunk
    return bytes(buffer)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _encode(text: str) -> bytes:
    # Lone surrogates become U+FFFD, as in the in-memory workspace (they have no UTF-8 form).
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    return text.encode("utf-8")


def _lines(text: str) -> int:
    return text.count("\n") + 1 if text else 0


@attrs.frozen
class _Root:
    real: str
    fd: int


@attrs.frozen
class _Entry:
    """A regular file found by a walk; ``dir_fd`` is valid only while the walk is at it."""

    rel: str
    name: str
    dir_fd: int
    size: int


class _Disk:
    """The blocking half of :class:`FileSystemWorkspace`: every method runs in a worker thread."""

    def __init__(
        self,
        root: str,
        *,
        max_read_bytes: int,
        max_write_bytes: int,
        max_files: int,
        ignore: frozenset[str],
    ) -> None:
        self.root = root
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_files = max_files
        self.ignore = ignore

    # -- resolution ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _open_root(self) -> Iterator[_Root]:
        real = os.path.realpath(self.root)
        try:
            fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise WorkspaceError("the workspace root does not exist", code="not_found") from None
        except OSError as exc:
            raise WorkspaceError(
                f"the workspace root cannot be opened: {exc.strerror}",
                code="io",
                category=Category.SYSTEM,
            ) from None
        try:
            yield _Root(real, fd)
        finally:
            os.close(fd)

    def _target(self, root: _Root, path: str, *, follow: bool) -> tuple[str, list[str]]:
        """The normalised path and the components of its real location under the root
        (``follow=False``: the last component itself, not what a symlink there points to)."""
        rel = normalize_path(path)
        joined = os.path.join(root.real, *rel.split("/"))
        if follow:
            real = os.path.realpath(joined)
        else:
            head, name = os.path.split(joined)
            real = os.path.join(os.path.realpath(head), name)
            # The entry itself stays inside, but refuse a symlink there that leads outside too.
            self._inside(root, os.path.realpath(joined), rel)
        self._inside(root, real, rel)
        return rel, os.path.relpath(real, root.real).split(os.sep)

    @staticmethod
    def _inside(root: _Root, real: str, rel: str) -> None:
        if real == root.real or os.path.commonpath([root.real, real]) != root.real:
            raise WorkspaceError(
                f"{rel!r} resolves outside the workspace root", code="path", path=rel
            )

    def _open_dir(self, root: _Root, parts: Sequence[str], rel: str, *, create: bool) -> int:
        """A descriptor of the directory ``parts`` under the root, reached with ``O_NOFOLLOW``
        at every step (creating missing directories when ``create``)."""
        fd = os.dup(root.fd)
        try:
            for name in parts:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise WorkspaceError(
                            f"{rel!r}: directory {name!r} does not exist",
                            code="not_found",
                            path=rel,
                        ) from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fd)
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise WorkspaceError(
                    f"{rel!r} does not lead through directories inside the workspace (a "
                    "component is a file, or was replaced by a symbolic link)",
                    code="path",
                    path=rel,
                ) from None
            raise
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _parent(self, path: str, *, follow: bool, create: bool) -> Iterator[tuple[str, int, str]]:
        """(normalised path, parent directory descriptor, final name), with OS errors mapped."""
        rel: str | None = None
        try:
            with self._open_root() as root:
                rel, parts = self._target(root, path, follow=follow)
                parent = self._open_dir(root, parts[:-1], rel, create=create)
                try:
                    yield rel, parent, parts[-1]
                finally:
                    os.close(parent)
        except OSError as exc:
            raise _os_error(exc, rel) from None

    # -- files ---------------------------------------------------------------------------------

    def _read_at(self, dir_fd: int, name: str, rel: str) -> str:
        try:
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise WorkspaceError(f"no file at {rel!r}", code="not_found", path=rel) from None
        _require_regular(before.st_mode, rel)
        self._check_read_size(before.st_size, rel)
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        try:
            after = os.fstat(fd)
            if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (
                before.st_dev,
                before.st_ino,
            ):
                raise WorkspaceError(
                    f"{rel!r} changed while it was being opened", code="path", path=rel
                )
            data = _read_all(fd, self.max_read_bytes + 1)
        finally:
            os.close(fd)
        self._check_read_size(len(data), rel)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkspaceError(f"{rel!r} is not UTF-8 text", code="modality", path=rel) from None

    def _check_read_size(self, size: int, rel: str) -> None:
        if size > self.max_read_bytes:
            raise WorkspaceError(
                f"{rel!r} is larger than the read limit of {self.max_read_bytes} bytes",
                code="size",
                path=rel,
            )

    def _check_write_size(self, size: int, rel: str) -> None:
        if size > self.max_write_bytes:
            raise WorkspaceError(
                f"{rel!r} would be {size} bytes; the write limit is {self.max_write_bytes}",
                code="size",
                path=rel,
            )

    def _write_at(self, dir_fd: int, name: str, data: bytes, rel: str) -> bool:
        """Atomically replace ``name`` in ``dir_fd`` with ``data``; whether it existed."""
        self._check_write_size(len(data), rel)
        try:
            before: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            before = None
        if before is not None:
            _require_regular(before.st_mode, rel)
        temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
        fd = os.open(temp, _TEMP_FLAGS, 0o666, dir_fd=dir_fd)
        try:
            try:
                _write_all(fd, data)
                if before is not None:
                    os.fchmod(fd, before.st_mode & 0o777)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
        with contextlib.suppress(OSError):  # not every file system syncs directories
            os.fsync(dir_fd)
        return before is not None

    def _entries(self, dir_fd: int, base: str) -> Generator[_Entry, None, None]:
        """The regular files under ``dir_fd`` (symlinks neither followed nor listed; ignored
        directories, temporary files and unaddressable names skipped), in a stable order."""
        for dirpath, dirnames, filenames, walk_fd in os.fwalk(".", dir_fd=dir_fd):
            dirnames[:] = sorted(d for d in dirnames if d not in self.ignore)
            prefix = dirpath[2:] if dirpath.startswith("./") else ""
            for name in sorted(filenames):
                if name.startswith(TEMP_PREFIX):
                    continue
                try:
                    rel = normalize_path("/".join(p for p in (base, prefix, name) if p))
                    info = os.stat(name, dir_fd=walk_fd, follow_symlinks=False)
                except (WorkspaceError, OSError):
                    continue
                if stat.S_ISREG(info.st_mode):
                    yield _Entry(rel, name, walk_fd, info.st_size)

    def _scan(self, root: _Root) -> Generator[tuple[_Entry, str], None, None]:
        """(entry, text) for each readable UTF-8 file under the root; code ``"size"`` when the
        walk meets more than ``max_files`` files."""
        fd = os.dup(root.fd)
        try:
            with contextlib.closing(self._entries(fd, "")) as entries:
                for count, entry in enumerate(entries, 1):
                    if count > self.max_files:
                        raise WorkspaceError(
                            f"the workspace holds more than {self.max_files} files to scan",
                            code="size",
                        )
                    if entry.size > self.max_read_bytes:
                        continue
                    try:
                        text = self._read_at(entry.dir_fd, entry.name, entry.rel)
                    except (WorkspaceError, OSError):
                        continue
                    yield entry, text
        finally:
            os.close(fd)

    # -- operations ----------------------------------------------------------------------------

    def read(self, path: str, range: Range | None) -> ReadResult:
        with self._parent(path, follow=True, create=False) as (rel, parent, name):
            text = self._read_at(parent, name, rel)
        span = full_range(text) if range is None else clamp_range(text, range)
        return ReadResult(rel, slice_range(text, span), span, _lines(text))

    def write(self, path: str, text: str) -> FileInfo:
        data = _encode(text)
        self._check_write_size(len(data), normalize_path(path))
        with self._parent(path, follow=True, create=True) as (rel, parent, name):
            existed = self._write_at(parent, name, data, rel)
        return FileInfo(rel, len(data), _lines(text), "modified" if existed else "created")

    def splice(self, path: str, range: Range, text: str) -> SpliceResult:
        with self._parent(path, follow=True, create=False) as (rel, parent, name):
            current = self._read_at(parent, name, rel)
            span = clamp_range(current, range)
            updated = splice_range(current, span, text)
            data = _encode(updated)
            self._write_at(parent, name, data, rel)
        info = FileInfo(rel, len(data), _lines(updated), "modified")
        return SpliceResult(info, Range(span.start, advance(span.start, text)))

    def append(self, path: str, text: str) -> FileInfo:
        with self._parent(path, follow=True, create=True) as (rel, parent, name):
            try:
                current = self._read_at(parent, name, rel)
            except WorkspaceError as exc:
                if exc.code != "not_found":
                    raise
                current = None
            updated = (current or "") + text
            data = _encode(updated)
            self._write_at(parent, name, data, rel)
        return FileInfo(
            rel, len(data), _lines(updated), "created" if current is None else "modified"
        )

    def list(self, directory: str | None, limit: int) -> Listing:
        files: list[FileInfo] = []
        try:
            with self._open_root() as root:
                if directory is None:
                    fd, base = os.dup(root.fd), ""
                else:
                    rel, parts = self._target(root, directory, follow=True)
                    fd, base = self._open_dir(root, parts, rel, create=False), "/".join(parts)
                try:
                    with contextlib.closing(self._entries(fd, base)) as entries:
                        for entry in entries:
                            if len(files) == limit:
                                return Listing(tuple(files), truncated=True)
                            files.append(FileInfo(entry.rel, entry.size))
                finally:
                    os.close(fd)
        except OSError as exc:
            raise _os_error(exc, directory) from None
        return Listing(tuple(files))

    def search(self, pattern: re.Pattern[str], limit: int | None) -> tuple[SearchMatch, ...]:
        matches: list[SearchMatch] = []
        try:
            with self._open_root() as root, contextlib.closing(self._scan(root)) as scan:
                for entry, text in scan:
                    left = None if limit is None else limit - len(matches)
                    matches.extend(search_text(entry.rel, text, pattern, left))
                    if limit is not None and len(matches) >= limit:
                        break
        except OSError as exc:
            raise _os_error(exc, None) from None
        return tuple(matches)

    def replace(
        self, query: str, replacement: str, pattern: re.Pattern[str], regex: bool
    ) -> ReplaceResult:
        replace_text("", pattern, replacement, regex=regex)  # a bad template fails up front
        try:
            with self._open_root() as root:
                # First pass: check every limit, so a refusal changes nothing.
                for entry, text in self._scan(root):
                    updated, count = replace_text(text, pattern, replacement, regex=regex)
                    if count:
                        self._check_write_size(len(_encode(updated)), entry.rel)
                replaced, files = 0, []
                for entry, text in self._scan(root):
                    updated, count = replace_text(text, pattern, replacement, regex=regex)
                    if count:
                        self._write_at(entry.dir_fd, entry.name, _encode(updated), entry.rel)
                        replaced += count
                        files.append(entry.rel)
        except OSError as exc:
            raise _os_error(exc, None) from None
        return ReplaceResult(query, replaced, tuple(files))

    def move(self, source: str, destination: str) -> bool:
        src_key, dst_rel = normalize_path(source), normalize_path(destination)
        try:
            with self._parent(source, follow=False, create=False) as (src_rel, src_dir, src):
                try:
                    found = os.stat(src, dir_fd=src_dir, follow_symlinks=False)
                except FileNotFoundError:
                    return False
                _require_regular(found.st_mode, src_rel)
                with self._parent(dst_rel, follow=False, create=True) as (_, dst_dir, dst):
                    if os.path.samestat(os.fstat(src_dir), os.fstat(dst_dir)) and src == dst:
                        return True
                    try:
                        there = os.stat(dst, dir_fd=dst_dir, follow_symlinks=False)
                    except FileNotFoundError:
                        pass
                    else:
                        _require_regular(there.st_mode, dst_rel)
                    try:
                        os.replace(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
                    except OSError as exc:
                        raise _os_error(exc, dst_rel) from None
                    for fd in (src_dir, dst_dir):
                        with contextlib.suppress(OSError):
                            os.fsync(fd)
        except WorkspaceError as exc:
            if exc.code == "not_found" and exc.path == src_key:
                return False  # the source's directory does not exist
            raise
        return True

    def _removable(self, key: str, *, unlink: bool) -> bool:
        """Whether a regular file is at ``key`` (refusing anything else), unlinking it if asked;
        ``False`` when absent (its directory included)."""
        try:
            with self._parent(key, follow=False, create=False) as (rel, parent, name):
                try:
                    found = os.stat(name, dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    return False
                _require_regular(found.st_mode, rel)
                if unlink:
                    try:
                        os.unlink(name, dir_fd=parent)
                    except FileNotFoundError:
                        return False
        except WorkspaceError as exc:
            if exc.code != "not_found" or exc.path != key:
                raise  # refused, or the root itself is missing
            return False
        return True

    def remove(self, paths: Sequence[str]) -> tuple[str, ...]:
        keys = list(dict.fromkeys(normalize_path(path) for path in paths))
        # Check every path before removing anything, so one refusal removes nothing.
        present = [key for key in keys if self._removable(key, unlink=False)]
        return tuple(key for key in present if self._removable(key, unlink=True))


class FileSystemWorkspace:
    """A workspace rooted at the directory ``root`` (see the module docstring for the
    guarantees). Paths are relative POSIX paths; results name files by those paths, never by
    absolute ones. Implements :class:`WorkspaceBackend`.

    ``max_read_bytes`` / ``max_write_bytes`` cap one file read / written; ``max_files`` caps how
    many files a search or replace may walk (code ``"size"`` beyond it); directories named in
    ``ignore`` are skipped by listing, search and replace (they can still be read and written by
    path). The root need not exist yet; operations fail with code ``"not_found"`` until it does.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES,
        max_files: int = DEFAULT_MAX_DISK_FILES,
        ignore: Iterable[str] = DEFAULT_IGNORE,
    ) -> None:
        for name, value in (
            ("max_read_bytes", max_read_bytes),
            ("max_write_bytes", max_write_bytes),
            ("max_files", max_files),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkspaceError(
                    f"{name} must be an integer >= 1, not {value!r}", code="invalid"
                )
        self._root = os.path.abspath(os.fspath(root))
        self._disk = _Disk(
            self._root,
            max_read_bytes=max_read_bytes,
            max_write_bytes=max_write_bytes,
            max_files=max_files,
            ignore=frozenset(ignore),
        )
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"<FileSystemWorkspace root={self._root!r}>"

    @property
    def root(self) -> str:
        """The root directory (absolute, as given; symlinks in it are resolved per operation)."""
        return self._root

    async def _run(self, function: Callable[[], T]) -> T:
        return await trio.to_thread.run_sync(function)

    async def _run_locked(self, function: Callable[[], T]) -> T:
        async with self._lock:
            return await trio.to_thread.run_sync(function)

    async def read(self, path: str, range: Range | None = None) -> ReadResult:
        """The text of the file at ``path`` (UTF-8), whole or the clamped ``range``."""
        return await self._run(functools.partial(self._disk.read, path, range))

    async def write(self, path: str, text: str) -> FileInfo:
        """Replace (or create) the file at ``path`` with ``text``, atomically; parent
        directories are created."""
        return await self._run_locked(functools.partial(self._disk.write, path, text))

    async def splice(self, path: str, range: Range, text: str) -> SpliceResult:
        """Replace the clamped ``range`` of the existing text file at ``path`` with ``text``."""
        return await self._run_locked(functools.partial(self._disk.splice, path, range, text))

    async def append(self, path: str, text: str) -> FileInfo:
        """Add ``text`` at the end of the file at ``path``, creating it when absent."""
        return await self._run_locked(functools.partial(self._disk.append, path, text))

    async def list(self, directory: str | None = None, *, limit: int | None = None) -> Listing:
        """The regular files under the root (or under ``directory``), by path in a stable order,
        at most ``limit`` of them (``truncated`` says whether more were left out)."""
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise WorkspaceError(f"limit must be an integer >= 1, not {limit!r}", code="invalid")
        cap = self._disk.max_files if limit is None else limit
        return await self._run(functools.partial(self._disk.list, directory, cap))

    async def search(
        self,
        query: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
        limit: int | None = None,
    ) -> tuple[SearchMatch, ...]:
        """Matches of ``query`` in the UTF-8 files under the root (larger than the read limit
        or not UTF-8: skipped), as :meth:`protocols.workspace.Workspace.search`."""
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise WorkspaceError(f"limit must be an integer >= 1, not {limit!r}", code="invalid")
        pattern = compile_query(query, regex=regex, case_sensitive=case_sensitive)
        return await self._run(functools.partial(self._disk.search, pattern, limit))

    async def replace(
        self,
        query: str,
        replacement: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
    ) -> ReplaceResult:
        """Replace every match of ``query`` in the UTF-8 files under the root. Every size limit
        is checked before anything is written; each file is then replaced atomically."""
        pattern = compile_query(query, regex=regex, case_sensitive=case_sensitive)
        call = functools.partial(self._disk.replace, query, replacement, pattern, regex)
        return await self._run_locked(call)

    async def move(self, source: str, destination: str) -> bool:
        """Move the regular file at ``source`` to ``destination`` (replacing a regular file
        there; parent directories created). ``False`` when ``source`` is absent."""
        return await self._run_locked(functools.partial(self._disk.move, source, destination))

    async def remove(self, paths: str | Iterable[str]) -> tuple[str, ...]:
        """Remove the regular files named and return the paths actually removed (absent ones
        are left out). Every path is checked first: a malformed path, or one naming a
        directory, a symlink or another non-regular file, refuses the whole call."""
        listed = [paths] if isinstance(paths, str) else list(paths)
        return await self._run_locked(functools.partial(self._disk.remove, listed))
