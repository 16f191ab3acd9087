"""Conversation stores: where :class:`~protocols.history.ConversationSnapshot` values are kept.

:class:`ConversationStore` is the port: ``get``, ``set`` (an upsert keyed by ``snapshot.id``),
``delete``, ``list`` (ids in ascending order, keyset-paged) and ``aclose``. Two adapters:

* :class:`MemoryConversationStore` keeps encoded JSON text in a dict. It behaves like a database:
  what it returns is decoded afresh on every ``get``, so no caller object is ever shared with it.
* :class:`SQLiteConversationStore` keeps one row per conversation in a SQLite file (stdlib
  ``sqlite3``, run through :func:`trio.to_thread.run_sync`). The snapshot is one JSON text column
  written by :func:`protocols.codec.encode`, next to ``updated_at`` (seconds since the epoch).

Guarantees shared by both (the contract suite in ``tests/actors/test_store.py`` checks them):

* ``get`` returns a snapshot equal to the one last ``set`` under that id, or ``None``; never a
  half-written one, never a stored row that fails to decode (that raises
  :class:`StoreError` ``code="corrupt"`` naming the id).
* ``list`` orders ids by code point (Python's ``str`` order, which is also SQLite's ``BINARY``
  order of UTF-8 text) and returns those strictly greater than ``after``; ``1 <= limit <= 1000``.
* Snapshots whose encoded JSON is larger than ``max_bytes`` (UTF-8) are refused with
  ``code="too_large"`` and nothing is written.
* After ``aclose`` every call raises :class:`StoreError` ``code="closed"``; ``aclose`` is
  idempotent.
* Cancellation: a call cancelled before it reaches the store does nothing. For the SQLite store,
  a call already running in its worker thread is never abandoned half-way: the worker finishes
  it (a write commits), the call returns its result, and the cancellation is delivered at the
  caller's next checkpoint. Either way the store stays usable.

Bad arguments (a non-string or empty id, a ``limit`` out of range) raise
:class:`~protocols.errors.ValidationError` before anything is touched.
"""

from __future__ import annotations

import builtins
import contextlib
import heapq
import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Final, Protocol, TypeVar, runtime_checkable

import trio

from protocols.codec import decode, encode
from protocols.errors import AgentsError, Category, ValidationError
from protocols.history import ConversationSnapshot

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_MAX_BYTES",
    "MAX_LIST_LIMIT",
    "SCHEMA_VERSION",
    "ConversationStore",
    "MemoryConversationStore",
    "SQLiteConversationStore",
    "StoreError",
]

log = logging.getLogger(__name__)

_R = TypeVar("_R")

#: The largest encoded snapshot (UTF-8 bytes of its JSON) a store accepts by default: 64 MiB.
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024

#: The largest page :meth:`ConversationStore.list` returns.
MAX_LIST_LIMIT: Final = 1000

#: How long (seconds) a SQLite store waits for another connection's write lock by default.
DEFAULT_BUSY_TIMEOUT: Final = 5.0

#: The schema version this code writes. Older known versions are migrated on open; newer or
#: unknown ones are refused.
SCHEMA_VERSION: Final = 1

_META: Final = "trio_agents_meta"
_CONVERSATIONS: Final = "trio_agents_conversations"
_PREFIX: Final = "trio_agents_"

# What each migration runs, by the version it produces. They run in one transaction, with the
# new version written to the meta table at its end.
_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        f"CREATE TABLE {_META} (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
        f"CREATE TABLE {_CONVERSATIONS} ("
        "id TEXT PRIMARY KEY NOT NULL, snapshot TEXT NOT NULL, updated_at REAL NOT NULL)",
    ),
}

# The exact columns (name, declared type, not null, primary key) the current schema has.
_COLUMNS: Final[dict[str, tuple[tuple[str, str, int, int], ...]]] = {
    _META: (("key", "TEXT", 1, 1), ("value", "TEXT", 1, 0)),
    _CONVERSATIONS: (
        ("id", "TEXT", 1, 1),
        ("snapshot", "TEXT", 1, 0),
        ("updated_at", "REAL", 1, 0),
    ),
}

_GET: Final = f"SELECT CAST(snapshot AS BLOB) FROM {_CONVERSATIONS} WHERE id = ?"
_UPSERT: Final = (
    f"INSERT INTO {_CONVERSATIONS} (id, snapshot, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET snapshot = excluded.snapshot, updated_at = excluded.updated_at"
)
_DELETE: Final = f"DELETE FROM {_CONVERSATIONS} WHERE id = ?"
_LIST_FIRST: Final = f"SELECT id FROM {_CONVERSATIONS} ORDER BY id LIMIT ?"
_LIST_AFTER: Final = f"SELECT id FROM {_CONVERSATIONS} WHERE id > ? ORDER BY id LIMIT ?"

# Primary SQLite result codes (the low byte of an extended code).
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_CORRUPT: Final = 11
_SQLITE_NOTADB: Final = 26

_SURROGATE = re.compile("[\ud800-\udfff]")

#: How much of a decoder's complaint a ``corrupt`` error quotes.
_DETAIL_LIMIT: Final = 300


class StoreError(AgentsError):
    """A conversation store could not do what was asked.

    ``code`` says why: ``"closed"`` (the store was closed), ``"schema"`` (the database's schema
    is newer than this code, unknown, or partial), ``"corrupt"`` (a stored snapshot does not
    decode, or the file is not a SQLite database), ``"permissions"`` (the database file is
    readable or writable by other users), ``"too_large"`` (a snapshot above ``max_bytes``),
    ``"busy"`` (another connection held the write lock longer than the busy timeout; retryable),
    ``"io"`` (any other failure of the file or of SQLite), ``"unsupported"`` (this Python's SQLite
    cannot be used as required). ``conversation_id`` names the conversation concerned, when one is.
    """

    default_code = "store"
    default_category = Category.SYSTEM

    def __init__(
        self,
        message: str,
        *,
        code: str,
        category: Category | None = None,
        retryable: bool | None = None,
        conversation_id: str | None = None,
    ) -> None:
        super().__init__(message, code=code, category=category, retryable=retryable)
        self.conversation_id = conversation_id


@runtime_checkable
class ConversationStore(Protocol):
    """Where conversation snapshots are kept between runs (see the module docstring for the
    guarantees every implementation gives)."""

    async def get(self, id: str) -> ConversationSnapshot | None:
        """The snapshot stored under ``id`` (a fresh value), or ``None`` when there is none."""
        ...

    async def set(self, snapshot: ConversationSnapshot) -> None:
        """Store ``snapshot`` under ``snapshot.id``, replacing what was there."""
        ...

    async def delete(self, id: str) -> bool:
        """Remove the snapshot stored under ``id``; ``False`` (and nothing done) when absent."""
        ...

    async def list(self, *, after: str | None = None, limit: int = 100) -> builtins.list[str]:
        """Up to ``limit`` stored ids strictly greater than ``after``, ascending."""
        ...

    async def aclose(self) -> None:
        """Release the store; later calls raise :class:`StoreError` ``code="closed"``."""
        ...


# ---------------------------------------------------------------------------------------------
# Checks and the JSON column, shared by both stores


def _check_id(value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"a conversation id must be a str, not {type(value).__name__}")
    if not value:
        raise ValidationError("a conversation id must be a non-empty string")
    if _SURROGATE.search(value):
        raise ValidationError("a conversation id must not contain lone surrogates")
    return value


def _check_snapshot(value: object) -> ConversationSnapshot:
    if not isinstance(value, ConversationSnapshot):
        raise ValidationError(f"expected a ConversationSnapshot, not {type(value).__name__}")
    _check_id(value.id)
    return value


def _check_page(after: object, limit: object) -> None:
    if after is not None:
        if not isinstance(after, str):
            raise ValidationError(f"after must be a str or None, not {type(after).__name__}")
        if _SURROGATE.search(after):
            raise ValidationError("after must not contain lone surrogates")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise ValidationError(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}, not {limit!r}")


def _check_max_bytes(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"max_bytes must be an integer >= 1, not {value!r}")
    return value


def _encode(snapshot: ConversationSnapshot, max_bytes: int) -> str:
    """The snapshot's JSON text, refused when its UTF-8 form exceeds ``max_bytes``."""
    text = encode(snapshot)
    # Each code point is 1 to 4 UTF-8 bytes: only measure exactly when the bounds straddle.
    if len(text) > max_bytes or (len(text) * 4 > max_bytes and not text.isascii()):
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            raise StoreError(
                f"the snapshot of conversation {snapshot.id!r} is {size} bytes of JSON, above "
                f"the store's limit of {max_bytes} bytes",
                code="too_large",
                category=Category.USER,
                conversation_id=snapshot.id,
            )
    return text


def _corrupt(conversation_id: str, detail: str) -> StoreError:
    return StoreError(
        f"the stored snapshot of conversation {conversation_id!r} is corrupt: {detail}",
        code="corrupt",
        conversation_id=conversation_id,
    )


def _decode(conversation_id: str, data: object) -> ConversationSnapshot:
    """The snapshot a stored value holds; anything else is reported, never dropped."""
    if not isinstance(data, str | bytes):
        raise _corrupt(conversation_id, f"the column holds {type(data).__name__}, not JSON text")
    try:
        snapshot = decode(ConversationSnapshot, data, category=Category.SYSTEM)
    except AgentsError as exc:
        detail = exc.message
        if len(detail) > _DETAIL_LIMIT:
            detail = detail[:_DETAIL_LIMIT] + "..."
        raise _corrupt(conversation_id, detail) from exc
    if snapshot.id != conversation_id:
        raise _corrupt(conversation_id, f"it holds conversation {snapshot.id!r}")
    return snapshot


def _closed() -> StoreError:
    return StoreError("the conversation store is closed", code="closed", category=Category.USER)


# ---------------------------------------------------------------------------------------------
# The in-memory store


class MemoryConversationStore:
    """A :class:`ConversationStore` in a dict, for tests and for processes that keep nothing.

    Rows are the encoded JSON text, exactly what the SQLite store writes, so the two behave
    alike: a caller mutating an object after ``set`` (a tool call's ``arguments`` dict, say)
    changes nothing stored, every ``get`` returns a new equal value, and ``max_bytes`` applies.
    Each call checkpoints first and then runs without awaiting, so it happens entirely or (when
    cancelled) not at all.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_bytes = _check_max_bytes(max_bytes)
        self._rows: dict[str, str] = {}
        self._closed = False

    async def __aenter__(self) -> MemoryConversationStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _enter(self) -> None:
        if self._closed:
            raise _closed()
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise _closed()

    async def get(self, id: str) -> ConversationSnapshot | None:
        """The snapshot stored under ``id`` (decoded afresh), or ``None``."""
        _check_id(id)
        await self._enter()
        text = self._rows.get(id)
        return None if text is None else _decode(id, text)

    async def set(self, snapshot: ConversationSnapshot) -> None:
        """Store ``snapshot`` under its id, replacing what was there."""
        _check_snapshot(snapshot)
        await self._enter()
        self._rows[snapshot.id] = _encode(snapshot, self._max_bytes)

    async def delete(self, id: str) -> bool:
        """Remove ``id``; ``False`` when it was not stored."""
        _check_id(id)
        await self._enter()
        return self._rows.pop(id, None) is not None

    async def list(self, *, after: str | None = None, limit: int = 100) -> builtins.list[str]:
        """Up to ``limit`` stored ids strictly greater than ``after``, ascending."""
        _check_page(after, limit)
        await self._enter()
        keys = self._rows.keys() if after is None else (k for k in self._rows if k > after)
        return heapq.nsmallest(limit, keys)

    async def aclose(self) -> None:
        """Forget every row and refuse further calls (idempotent)."""
        self._closed = True
        self._rows.clear()
        await trio.lowlevel.checkpoint()


# ---------------------------------------------------------------------------------------------
# SQLite: the synchronous side, run in the worker thread


def _translate(exc: sqlite3.Error, action: str) -> StoreError:
    primary = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return StoreError(
            f"{action}: the database stayed locked by another connection ({exc})",
            code="busy",
            retryable=True,
        )
    if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return StoreError(f"{action}: the database file is damaged ({exc})", code="corrupt")
    return StoreError(f"{action}: {exc}", code="io")


@contextlib.contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise _translate(exc, action) from exc


@contextlib.contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: ``BEGIN IMMEDIATE`` takes the write lock up front (waiting up to
    the busy timeout), so it never fails half-way to upgrade a read lock; any failure rolls
    back."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def _check_private(path: str, *, required: bool) -> None:
    """Refuse a file other users may read or write (POSIX only; see the class docstring)."""
    if os.name != "posix":  # pragma: no cover - modes mean something else elsewhere
        return
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if required:
            raise StoreError(
                f"the database file {path} vanished while opening", code="io"
            ) from None
        return
    except OSError as exc:
        raise StoreError(f"cannot inspect {path}: {exc.strerror}", code="io") from exc
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"{path} is not a regular file", code="io")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise StoreError(
            f"{path} is accessible to other users (mode {mode:04o}); a conversation store must "
            "be owner-only: check who could have read it, then chmod 600 it",
            code="permissions",
            category=Category.USER,
        )


def _prepare_file(path: str) -> None:
    """Create the database file owner-only before SQLite touches it, or check an existing one.

    SQLite creates the ``-wal`` and ``-shm`` companions with the mode of the database file, so a
    0600 database gets 0600 companions; existing companions are checked too.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(
            f"cannot create the database file {path}: {exc.strerror}", code="io"
        ) from exc
    else:
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o600)  # a umask may have taken bits the owner needs
        finally:
            os.close(fd)
        log.debug("created conversation store file %s", path)
    _check_private(path, required=True)
    for suffix in ("-wal", "-shm", "-journal"):
        _check_private(path + suffix, required=False)


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for (name,) in rows if isinstance(name, str) and name.startswith(_PREFIX)}


def _check_columns(conn: sqlite3.Connection, table: str) -> None:
    expected = _COLUMNS[table]
    found = tuple(
        (str(name), str(kind).upper(), int(notnull), int(pk))
        for (_cid, name, kind, notnull, _default, pk) in conn.execute(f"PRAGMA table_info({table})")
    )
    if found != expected:
        names = ", ".join(f"{c[0]} {c[1]}" for c in found) or "none"
        raise StoreError(
            f"the database's {table} table has unexpected columns ({names}); this is not a "
            "trio-agents conversation store, or it was altered",
            code="schema",
        )


def _schema_version(conn: sqlite3.Connection) -> int:
    """The schema version the database holds (0: none of our tables yet). Refuses partial and
    unknown schemas. Called inside the open transaction, so no other migrator races it."""
    tables = _tables(conn)
    if _META not in tables:
        if tables:
            raise StoreError(
                f"the database holds trio-agents tables ({', '.join(sorted(tables))}) but no "
                f"{_META} table: a partial schema, refused",
                code="schema",
            )
        return 0
    _check_columns(conn, _META)
    row = conn.execute(f"SELECT value FROM {_META} WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise StoreError(
            f"the database's {_META} table has no schema_version: a partial schema, refused",
            code="schema",
        )
    text = str(row[0])
    if not text.isdecimal() or not 1 <= int(text) <= SCHEMA_VERSION:
        newer = text.isdecimal() and int(text) > SCHEMA_VERSION
        raise StoreError(
            f"the database has schema version {text[:40]!r}, "
            + (
                f"newer than this trio-agents supports ({SCHEMA_VERSION}); upgrade trio-agents"
                if newer
                else f"which is not a version trio-agents knows (1 to {SCHEMA_VERSION})"
            ),
            code="schema",
        )
    version = int(text)
    if version == SCHEMA_VERSION:
        missing = set(_COLUMNS) - tables
        if missing:
            raise StoreError(
                f"the database is at schema version {version} but lacks "
                f"{', '.join(sorted(missing))}: a partial schema, refused",
                code="schema",
            )
    return version


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION` in one transaction, then verify it."""
    with _write(conn):
        version = _schema_version(conn)
        if version < SCHEMA_VERSION:
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[target]:
                    conn.execute(statement)
            conn.execute(
                f"INSERT INTO {_META} (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
            log.debug("migrated conversation store schema %d -> %d", version, SCHEMA_VERSION)
        for table in _COLUMNS:
            _check_columns(conn, table)


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> object:
    """Switch to WAL and return the journal mode SQLite reports.

    Two connections switching a fresh file at once can deadlock on the lock upgrade, and SQLite
    then answers ``SQLITE_BUSY`` at once instead of calling the busy handler; so the switch is
    retried here, with a short growing pause, until the busy timeout is spent. This runs in the
    store's worker thread, so the pause blocks no event loop."""
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    while True:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return mode
        except sqlite3.OperationalError as exc:
            busy = (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)
            if not busy or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class _Database:
    """The synchronous side of a SQLite store: one connection, used by one worker call at a time
    (the store's limiter guarantees it). Every write is one ``BEGIN IMMEDIATE`` transaction that
    starts and ends inside a single call, so no transaction spans an ``await``."""

    def __init__(
        self, conn: sqlite3.Connection, *, max_bytes: int, clock: Callable[[], float]
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._max_bytes = max_bytes
        self._clock = clock

    @classmethod
    def connect(
        cls,
        path: str,
        *,
        busy_timeout: float,
        durable: bool,
        max_bytes: int,
        clock: Callable[[], float],
    ) -> _Database:
        _prepare_file(path)
        with _translated(f"opening the conversation store {path}"):
            conn = sqlite3.connect(
                path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            try:
                mode = _enable_wal(conn, busy_timeout)
                if str(mode).lower() != "wal":
                    raise StoreError(
                        f"SQLite refused WAL mode for {path} (it kept {mode!r}); the store "
                        "needs a local file system",
                        code="unsupported",
                    )
                # NORMAL in WAL mode: commits are atomic and survive a process crash; only an
                # OS crash or power loss can lose the last commits (never corrupt the file).
                conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
                _migrate(conn)
            except BaseException:
                conn.close()
                raise
        return cls(conn, max_bytes=max_bytes, clock=clock)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise _closed()
        return self._conn

    def get(self, id: str) -> ConversationSnapshot | None:
        # CAST to BLOB: bytes that are not UTF-8 reach the strict decoder (and are reported as
        # corrupt) instead of failing inside sqlite3's text conversion.
        row = self.conn.execute(_GET, (id,)).fetchone()
        return None if row is None else _decode(id, row[0])

    def set(self, snapshot: ConversationSnapshot) -> None:
        text = _encode(snapshot, self._max_bytes)
        conn = self.conn
        with _write(conn):
            conn.execute(_UPSERT, (snapshot.id, text, float(self._clock())))

    def delete(self, id: str) -> bool:
        conn = self.conn
        with _write(conn):
            cursor = conn.execute(_DELETE, (id,))
        return cursor.rowcount > 0

    def list(self, after: str | None, limit: int) -> builtins.list[str]:
        if after is None:
            rows = self.conn.execute(_LIST_FIRST, (limit,)).fetchall()
        else:
            rows = self.conn.execute(_LIST_AFTER, (after, limit)).fetchall()
        return [str(id) for (id,) in rows]

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# ---------------------------------------------------------------------------------------------
# SQLite: the async side


class SQLiteConversationStore:
    """A :class:`ConversationStore` in a SQLite file. Open it with :meth:`open`::

        async with await SQLiteConversationStore.open(path) as store:
            await store.set(snapshot)

    Guarantees, beyond the port's:

    * **One worker.** Every database call runs through :func:`trio.to_thread.run_sync` with a
      ``trio.CapacityLimiter(1)`` owned by this store, so calls run one at a time, in the order
      they were made (the limiter is FIFO), and the event loop never blocks on disk. Trio's
      thread cache may run consecutive calls on different OS threads; the connection is opened
      with ``check_same_thread=False``, which is sound because SQLite (built thread-safe, as
      Python's ``sqlite3`` is) allows a connection on any thread as long as two threads never
      use it at once -- exactly what the limiter guarantees -- and every transaction begins and
      ends inside one call. A hand-rolled dedicated thread would give the same ordering at the
      cost of our own queue and a thread the runtime cannot see.
    * **Transactions.** WAL mode (readers never block the writer); every write is one
      ``BEGIN IMMEDIATE`` transaction; a SIGKILL at any point leaves the file readable with the
      old or the new row, never a torn one. Several stores (processes) may share a file: a
      writer waits up to ``busy_timeout`` seconds for another's lock, then fails with
      :class:`StoreError` ``code="busy"`` (``retryable``); a raw "database is locked" never
      escapes. ``durable=True`` sets ``synchronous=FULL`` so a commit also survives power loss
      (the default ``NORMAL`` survives any process crash).
    * **Schema.** Tables ``trio_agents_meta`` (holding ``schema_version``) and
      ``trio_agents_conversations`` (``id``, ``snapshot`` JSON text, ``updated_at`` REAL), so the
      file may also hold an application's own tables. Opening checks and migrates the schema in
      one transaction and refuses, with ``code="schema"``, a newer or unknown version and a
      partial schema (tables without the meta table, a version without its tables, wrong
      columns). A refused database is left as it was.
    * **Owner-only file.** A new database file is created with mode 0600 before SQLite opens it
      (its ``-wal``/``-shm`` companions inherit that mode). An existing file, or companion, that
      other users may read or write is refused (``code="permissions"``) rather than silently
      fixed: it may already have leaked, and changing a file's mode behind its owner's back
      would hide that. ``chmod 600`` it to proceed. (POSIX; elsewhere modes are not checked.)
    * **Encoding off the event loop.** ``set`` encodes and ``get`` decodes in the worker too, so
      a large snapshot does not stall other tasks. Do not mutate a snapshot's dicts while its
      ``set`` is in flight; once ``set`` returns, the row is independent of the object.
    * **Cancellation.** The worker call is never abandoned (``abandon_on_cancel=False``): a
      cancel that arrives while a write runs waits for it to commit, the call returns, and the
      cancellation is delivered at the caller's next checkpoint. A cancel while the call waits
      for the worker (behind other calls) cancels it before anything is written. A lock wait
      (up to ``busy_timeout``) is part of the write and is waited out too.
    """

    def __init__(self, database: _Database, limiter: trio.CapacityLimiter, path: str) -> None:
        """Internal: use :meth:`open`."""
        self._database = database
        self._limiter = limiter
        self._closing = False
        #: The database file.
        self.path = path

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        durable: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> SQLiteConversationStore:
        """Open (creating if needed) the store at ``path`` and make its schema current.

        ``max_bytes`` caps one encoded snapshot; ``busy_timeout`` (seconds, >= 0) is how long a
        call waits for another connection's write lock; ``durable`` trades commit speed for
        surviving power loss; ``clock`` gives ``updated_at`` (seconds since the epoch).
        Raises :class:`StoreError` (``schema``, ``corrupt``, ``permissions``, ``io``, ...) when
        the file cannot be used. If cancelled, the half-opened database is closed again.
        """
        target = os.fspath(path)
        if target in ("", ":memory:"):
            raise ValidationError(f"path must name a database file, not {target!r}")
        _check_max_bytes(max_bytes)
        if (
            isinstance(busy_timeout, bool)
            or not isinstance(busy_timeout, int | float)
            or not 0 <= busy_timeout < float("inf")
        ):
            raise ValidationError(
                f"busy_timeout must be a number of seconds >= 0, not {busy_timeout!r}"
            )
        if sqlite3.threadsafety == 0:  # pragma: no cover - no mainstream build does this
            raise StoreError(
                "this Python's SQLite was built without thread safety", code="unsupported"
            )
        limiter = trio.CapacityLimiter(1)

        def connect() -> _Database:
            return _Database.connect(
                target,
                busy_timeout=float(busy_timeout),
                durable=bool(durable),
                max_bytes=max_bytes,
                clock=clock,
            )

        database = await trio.to_thread.run_sync(connect, limiter=limiter)
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(database.close, limiter=limiter)
            raise
        log.debug("opened conversation store %s", target)
        return cls(database, limiter, target)

    async def __aenter__(self) -> SQLiteConversationStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self, action: str, work: Callable[[_Database], _R]) -> _R:
        if self._closing:
            raise _closed()
        database = self._database

        def call() -> _R:
            with _translated(action):
                return work(database)

        return await trio.to_thread.run_sync(call, limiter=self._limiter)

    async def get(self, id: str) -> ConversationSnapshot | None:
        """The snapshot stored under ``id`` (decoded afresh), or ``None``. A row that does not
        decode raises :class:`StoreError` ``code="corrupt"`` naming ``id``."""
        _check_id(id)
        return await self._run(f"reading conversation {id!r}", lambda db: db.get(id))

    async def set(self, snapshot: ConversationSnapshot) -> None:
        """Store ``snapshot`` under its id in one transaction, replacing what was there, and
        stamp ``updated_at``."""
        _check_snapshot(snapshot)
        await self._run(f"writing conversation {snapshot.id!r}", lambda db: db.set(snapshot))

    async def delete(self, id: str) -> bool:
        """Remove ``id``; ``False`` when it was not stored."""
        _check_id(id)
        return await self._run(f"deleting conversation {id!r}", lambda db: db.delete(id))

    async def list(self, *, after: str | None = None, limit: int = 100) -> builtins.list[str]:
        """Up to ``limit`` stored ids strictly greater than ``after``, ascending."""
        _check_page(after, limit)
        return await self._run("listing conversations", lambda db: db.list(after, limit))

    async def aclose(self) -> None:
        """Refuse new calls, let calls already waiting for the worker finish, then close the
        connection. Idempotent; completes even when the caller is being cancelled."""
        if self._closing:
            await trio.lowlevel.checkpoint()
            return
        self._closing = True
        with trio.CancelScope(shield=True):
            await self._run_close()
        log.debug("closed conversation store %s", self.path)

    async def _run_close(self) -> None:
        database = self._database

        def close() -> None:
            with _translated(f"closing the conversation store {self.path}"):
                database.close()

        await trio.to_thread.run_sync(close, limiter=self._limiter)
