"""The SQLite plumbing the stores share: one file, one versioned schema, owner-only, in WAL mode.

:class:`~actors.store.SQLiteConversationStore` and :class:`~actors.durable.SQLiteRunStore` may
open the same file: its schema holds the conversations (version 1) and the durable jobs (version
2). Opening migrates an older known version in one ``BEGIN IMMEDIATE`` transaction and refuses,
with :class:`StoreError` ``code="schema"``, a newer or unknown version and a partial schema.
Everything here is synchronous: the stores run it in their worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import queue
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final, TypeVar

import trio

from protocols.errors import AgentsError, Category, ValidationError

__all__ = [
    "SCHEMA_VERSION",
    "Lane",
    "StoreError",
    "check_store_path",
    "connect",
    "in_worker",
    "open_in_worker",
    "oversize",
    "stored_version",
    "translate_error",
    "translated",
    "write",
]

_T = TypeVar("_T")
_R = TypeVar("_R")

# The stores' file handling has always logged under the conversation store's name.
log = logging.getLogger("actors.store")

#: The schema version this code writes. Older known versions are migrated on open; newer or
#: unknown ones are refused.
SCHEMA_VERSION: Final = 4

_META: Final = "trio_agents_meta"
_CONVERSATIONS: Final = "trio_agents_conversations"
_PREFIX: Final = "trio_agents_"
JOBS: Final = "trio_agents_jobs"
JOURNAL: Final = "trio_agents_journal"
TOMBSTONES: Final = "trio_agents_tombstones"

# What each migration runs, by the version it produces. They run in one transaction, with the
# new version written to the meta table at its end.
_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        f"CREATE TABLE {_META} (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
        f"CREATE TABLE {_CONVERSATIONS} ("
        "id TEXT PRIMARY KEY NOT NULL, snapshot TEXT NOT NULL, updated_at REAL NOT NULL)",
    ),
    # Durable jobs (actors.durable): the record as JSON beside the columns a query needs, the
    # journal of each job, and what purged jobs leave. The counters live in the meta table.
    2: (
        f"CREATE TABLE {JOBS} ("
        "id TEXT PRIMARY KEY NOT NULL, key TEXT UNIQUE, status TEXT NOT NULL, "
        "sequence INTEGER NOT NULL UNIQUE, record TEXT NOT NULL)",
        f"CREATE INDEX {JOBS}_status ON {JOBS} (status, sequence)",
        f"CREATE TABLE {JOURNAL} ("
        "job TEXT NOT NULL, seq INTEGER NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (job, seq))",
        f"CREATE TABLE {TOMBSTONES} ("
        "id TEXT PRIMARY KEY NOT NULL, key TEXT UNIQUE, purged_at REAL NOT NULL)",
    ),
    # What the run store's hot queries read without decoding a record: the revision (compare-
    # and-swap), the holder (fencing: the lease's owner and fence while it holds a running
    # job), the lease's end, the thread, and the rank of a queued job in the order it is taken
    # (0: started and interrupting ... 3: not started, normal), indexed for acquisition.
    # Filled from the records themselves for a store of version 2.
    3: (
        f"ALTER TABLE {JOBS} ADD COLUMN revision INTEGER NOT NULL DEFAULT 0",
        f"ALTER TABLE {JOBS} ADD COLUMN holder TEXT",
        f"ALTER TABLE {JOBS} ADD COLUMN held INTEGER",
        f"ALTER TABLE {JOBS} ADD COLUMN until REAL",
        f"ALTER TABLE {JOBS} ADD COLUMN thread TEXT",
        f"ALTER TABLE {JOBS} ADD COLUMN rank INTEGER NOT NULL DEFAULT 3",
        f"UPDATE {JOBS} SET "
        "revision = COALESCE(json_extract(record, '$.revision'), 1), "
        "holder = CASE WHEN status = 'running' "
        "AND json_extract(record, '$.lease.fence') = json_extract(record, '$.fence') "
        "THEN json_extract(record, '$.lease.owner') END, "
        "held = CASE WHEN status = 'running' "
        "AND json_extract(record, '$.lease.fence') = json_extract(record, '$.fence') "
        "THEN json_extract(record, '$.fence') END, "
        "until = json_extract(record, '$.lease.until'), "
        "thread = json_extract(record, '$.job.conversation'), "
        "rank = (CASE WHEN json_extract(record, '$.execution') IS NULL THEN 2 ELSE 0 END) "
        "+ (CASE WHEN json_extract(record, '$.priority') = 'interrupt' THEN 0 ELSE 1 END)",
        f"CREATE INDEX {JOBS}_rank ON {JOBS} (status, rank, sequence)",
        f"CREATE INDEX {JOBS}_thread ON {JOBS} (thread, sequence)",
    ),
    # Whether a cancel was requested (1) -- read by a journal append, in its transaction, to
    # refuse work that would start after the cancel was acknowledged. Filled from the records.
    4: (
        f"ALTER TABLE {JOBS} ADD COLUMN cancel INTEGER NOT NULL DEFAULT 0",
        f"UPDATE {JOBS} SET cancel = 1 WHERE json_extract(record, '$.cancel_requested') = 1",
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
    JOBS: (
        ("id", "TEXT", 1, 1),
        ("key", "TEXT", 0, 0),
        ("status", "TEXT", 1, 0),
        ("sequence", "INTEGER", 1, 0),
        ("record", "TEXT", 1, 0),
        ("revision", "INTEGER", 1, 0),
        ("holder", "TEXT", 0, 0),
        ("held", "INTEGER", 0, 0),
        ("until", "REAL", 0, 0),
        ("thread", "TEXT", 0, 0),
        ("rank", "INTEGER", 1, 0),
        ("cancel", "INTEGER", 1, 0),
    ),
    JOURNAL: (
        ("job", "TEXT", 1, 1),
        ("seq", "INTEGER", 1, 2),
        ("entry", "TEXT", 1, 0),
    ),
    TOMBSTONES: (
        ("id", "TEXT", 1, 1),
        ("key", "TEXT", 0, 0),
        ("purged_at", "REAL", 1, 0),
    ),
}

# Primary SQLite result codes (the low byte of an extended code).
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_CORRUPT: Final = 11
_SQLITE_NOTADB: Final = 26


class StoreError(AgentsError):
    """A store (of conversations or of durable jobs) could not do what was asked.

    ``code`` says why: ``"closed"`` (the store was closed), ``"schema"`` (the database's schema
    is newer than this code, unknown, or partial), ``"corrupt"`` (a stored snapshot does not
    decode, or the file is not a SQLite database), ``"permissions"`` (the database file is
    readable or writable by other users), ``"too_large"`` (a snapshot above ``max_bytes``),
    ``"busy"`` (another connection held the write lock longer than the busy timeout; retryable),
    ``"io"`` (any other failure of the file or of SQLite), ``"unsupported"`` (this Python's SQLite
    cannot be used as required), ``"fenced"`` (a worker's write for a job it no longer holds),
    ``"cancelled"`` (a worker's journal entry that would start new work for a job whose cancel
    was requested), ``"purged"`` (an idempotency key whose job was purged), ``"missing"``
    (opened with ``create=False``, which creates nothing, where there is no store: no such file
    or schema, or none of the store's tables in it). ``conversation_id`` names the conversation
    concerned, when one is.
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


def translate_error(exc: sqlite3.Error, action: str) -> StoreError:
    """The :class:`StoreError` a SQLite error while doing ``action`` is reported as."""
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
def translated(action: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise translate_error(exc, action) from exc


@contextlib.contextmanager
def write(conn: sqlite3.Connection) -> Iterator[None]:
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
            f"{path} is accessible to other users (mode {mode:04o}); a trio-agents store must "
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
        log.debug("created store file %s", path)
    _check_private(path, required=True)
    for suffix in ("-wal", "-shm", "-journal"):
        _check_private(path + suffix, required=False)


def _check_existing(path: str) -> None:
    """Refuse a store file that does not exist (an open that creates nothing), or that others
    may use."""
    if not os.path.exists(path):
        raise StoreError(
            f"there is no store at {path} (no such file)", code="missing", category=Category.USER
        )
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
            "trio-agents store, or it was altered",
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
    with write(conn):
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
            log.debug("migrated store schema %d -> %d", version, SCHEMA_VERSION)
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


def connect(
    path: str,
    *,
    busy_timeout: float,
    durable: bool,
    what: str,
    migrate: bool = True,
    create: bool = True,
) -> sqlite3.Connection:
    """Open the store file at ``path`` (creating it owner-only), in WAL mode, its schema made
    current (``migrate=False``: a second connection to a file another has just migrated).
    ``create=False`` creates nothing: a file that does not exist, or holds no schema, is a
    :class:`StoreError` ``code="missing"``. ``what`` names the store in errors."""
    if create:
        _prepare_file(path)
        target, uri = path, False
    else:
        _check_existing(path)
        # mode=rw: SQLite itself never creates the file (it may vanish after the check).
        target, uri = f"{pathlib.Path(path).absolute().as_uri()}?mode=rw", True
    with translated(f"opening the {what} {path}"):
        conn = sqlite3.connect(
            target, timeout=busy_timeout, isolation_level=None, check_same_thread=False, uri=uri
        )
        try:
            if not create and migrate and _META not in _tables(conn):
                raise StoreError(
                    f"there is no store in {path} (the file holds none of its tables)",
                    code="missing",
                    category=Category.USER,
                )
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
            if migrate:
                _migrate(conn)
        except BaseException:
            conn.close()
            raise
    return conn


def stored_version(path: str) -> int:
    """The schema version of the store file at ``path`` as it is (0: no file, or none of our
    tables yet), read without changing anything."""
    if not os.path.exists(path):
        return 0
    with translated(f"reading the schema version of {path}"):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if _META not in _tables(conn):
                return 0
            row = conn.execute(f"SELECT value FROM {_META} WHERE key = 'schema_version'").fetchone()
        finally:
            conn.close()
    text = str(row[0]) if row is not None else ""
    return int(text) if text.isdecimal() else 0


def check_store_path(path: str, busy_timeout: object) -> None:
    """Refuse, before anything is opened, what no store file can be opened with."""
    if path in ("", ":memory:"):
        raise ValidationError(f"path must name a database file, not {path!r}")
    if (
        isinstance(busy_timeout, bool)
        or not isinstance(busy_timeout, int | float)
        or not 0 <= busy_timeout < float("inf")
    ):
        raise ValidationError(
            f"busy_timeout must be a number of seconds >= 0, not {busy_timeout!r}"
        )
    if sqlite3.threadsafety == 0:  # pragma: no cover - no mainstream build does this
        raise StoreError("this Python's SQLite was built without thread safety", code="unsupported")


class Lane:
    """A thread of a store's own that runs the calls it is given, one at a time, in order.

    ``trio.to_thread.run_sync`` hands each call to a cached thread through a capacity limiter;
    a run store makes several calls per job, and that hand-off was a large part of a job's cost
    (about 110 us a call against 65 us here). A lane is one queue put and one wake-up. Written
    here because it is a store's hot path and there is no library piece for it. A call that has
    started is never abandoned: a cancel is delivered once it has returned.
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            call()

    async def run(self, work: Callable[[], _R]) -> _R:
        """``work()`` in the lane's thread; what it returned, or what it raised."""
        await trio.lowlevel.checkpoint_if_cancelled()
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()
        returned: list[_R] = []
        raised: list[BaseException] = []

        def call() -> None:
            try:
                returned.append(work())
            except BaseException as exc:  # handed to the caller as it is
                raised.append(exc)
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(trio.lowlevel.reschedule, task)

        self._calls.put(call)
        # Not abandoned once given: a cancel waits for the call's end (no cancel scope needed).
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        await trio.lowlevel.checkpoint_if_cancelled()
        if raised:
            raise raised[0]
        return returned[0]

    def close(self) -> None:
        """Let the thread end once the calls given before are done (idempotent)."""
        self._calls.put(None)


async def in_worker(
    action: str, work: Callable[[_T], _R], target: _T, limiter: trio.CapacityLimiter
) -> _R:
    """``work(target)`` in the store's worker thread, its SQLite errors reported as
    :class:`StoreError` saying ``action``."""

    def call() -> _R:
        with translated(action):
            return work(target)

    return await trio.to_thread.run_sync(call, limiter=limiter)


async def open_in_worker(
    opening: Callable[[], _T], closing: Callable[[_T], object], limiter: trio.CapacityLimiter
) -> _T:
    """Run ``opening`` in the store's worker thread; if the caller is cancelled meanwhile, the
    half-opened store is closed again (``closing``) before the cancel propagates."""
    opened = await trio.to_thread.run_sync(opening, limiter=limiter)
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(closing, opened, limiter=limiter)
        raise
    return opened


def oversize(text: str, max_bytes: int) -> int | None:
    """The UTF-8 size of ``text`` when it is above ``max_bytes`` (else ``None``), measured
    exactly only when its length cannot decide (each code point is 1 to 4 bytes)."""
    if len(text) > max_bytes or (len(text) * 4 > max_bytes and not text.isascii()):
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            return size
    return None
