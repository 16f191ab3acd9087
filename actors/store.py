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
import heapq
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

import trio

from protocols.codec import decode, encode
from protocols.errors import AgentsError, Category, ValidationError
from protocols.history import ConversationSnapshot

from ._sqlite import (
    _CONVERSATIONS,
    SCHEMA_VERSION,
    StoreError,
    check_store_path,
    connect,
    in_worker,
    open_in_worker,
    oversize,
    translated,
    write,
)

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_MAX_BYTES",
    "MAX_LIST_LIMIT",
    "SCHEMA_VERSION",
    "ConversationStore",
    "MemoryConversationStore",
    "PostgresConversationStore",
    "SQLiteConversationStore",
    "StoreError",
    "open_conversation_store",
]

log = logging.getLogger(__name__)

_R = TypeVar("_R")
_S = TypeVar("_S", bound="_ThreadedConversationStore")

#: The largest encoded snapshot (UTF-8 bytes of its JSON) a store accepts by default: 64 MiB.
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024

#: The largest page :meth:`ConversationStore.list` returns.
MAX_LIST_LIMIT: Final = 1000

#: How long (seconds) a SQLite store waits for another connection's write lock by default.
DEFAULT_BUSY_TIMEOUT: Final = 5.0

_GET: Final = f"SELECT CAST(snapshot AS BLOB) FROM {_CONVERSATIONS} WHERE id = ?"
_UPSERT: Final = (
    f"INSERT INTO {_CONVERSATIONS} (id, snapshot, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET snapshot = excluded.snapshot, updated_at = excluded.updated_at"
)
_DELETE: Final = f"DELETE FROM {_CONVERSATIONS} WHERE id = ?"
_LIST_FIRST: Final = f"SELECT id FROM {_CONVERSATIONS} ORDER BY id LIMIT ?"
_LIST_AFTER: Final = f"SELECT id FROM {_CONVERSATIONS} WHERE id > ? ORDER BY id LIMIT ?"

_SURROGATE = re.compile("[\ud800-\udfff]")

#: How much of a decoder's complaint a ``corrupt`` error quotes.
_DETAIL_LIMIT: Final = 300


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
    size = oversize(text, max_bytes)
    if size is not None:
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
        conn = connect(path, busy_timeout=busy_timeout, durable=durable, what="conversation store")
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
        with write(conn):
            conn.execute(_UPSERT, (snapshot.id, text, float(self._clock())))

    def delete(self, id: str) -> bool:
        conn = self.conn
        with write(conn):
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


class _ThreadedConversationStore:
    """A :class:`ConversationStore` over a blocking database driver, called from a worker
    thread one call at a time (see :class:`SQLiteConversationStore` for what that
    guarantees); its subclasses open it on one database or another."""

    def __init__(self, database: Any, limiter: trio.CapacityLimiter, path: str) -> None:
        """Internal: use :meth:`open`."""
        self._database = database
        self._limiter = limiter
        self._closing = False
        #: The database file.
        self.path = path

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self, action: str, work: Callable[[Any], _R]) -> _R:
        if self._closing:
            raise _closed()
        return await in_worker(action, work, self._database, self._limiter)

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
            with translated(f"closing the conversation store {self.path}"):
                database.close()

        await trio.to_thread.run_sync(close, limiter=self._limiter)


class SQLiteConversationStore(_ThreadedConversationStore):
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
        check_store_path(target, busy_timeout)
        _check_max_bytes(max_bytes)
        limiter = trio.CapacityLimiter(1)

        def connect() -> _Database:
            return _Database.connect(
                target,
                busy_timeout=float(busy_timeout),
                durable=bool(durable),
                max_bytes=max_bytes,
                clock=clock,
            )

        database = await open_in_worker(connect, _Database.close, limiter)
        log.debug("opened conversation store %s", target)
        return cls(database, limiter, target)


# ---------------------------------------------------------------------------------------------
# PostgreSQL


class _PostgresDatabase:
    """The synchronous side on PostgreSQL: one connection (replaced if it was lost), used by one
    worker call at a time; psycopg's errors reported as :class:`StoreError`."""

    def __init__(
        self, conn: Any, reconnect: Callable[[], Any], *, max_bytes: int, clock: Callable[[], float]
    ) -> None:
        self._conn: Any = conn
        self._reconnect = reconnect
        self._max_bytes = max_bytes
        self._clock = clock

    @property
    def conn(self) -> Any:
        if self._conn is None:
            raise _closed()
        if self._conn.closed or self._conn.broken:
            fresh = self._reconnect()  # a StoreError if it cannot: the old one stays, broken
            self._conn.close()
            self._conn = fresh
        return self._conn

    def _call(self, action: str, query: str, arguments: tuple[object, ...]) -> Any:
        from ._postgres import _psycopg, translate_error  # noqa: PLC0415 - psycopg is optional

        try:
            return self.conn.execute(query, arguments)
        except _psycopg().Error as exc:
            raise translate_error(exc, action) from None

    def get(self, id: str) -> ConversationSnapshot | None:
        row = self._call(f"reading conversation {id!r}", _PG_GET, (id,)).fetchone()
        return None if row is None else _decode(id, row[0])

    def set(self, snapshot: ConversationSnapshot) -> None:
        text = _encode(snapshot, self._max_bytes)
        action = f"writing conversation {snapshot.id!r}"
        self._call(action, _PG_UPSERT, (snapshot.id, text, float(self._clock())))

    def delete(self, id: str) -> bool:
        cursor = self._call(f"deleting conversation {id!r}", _PG_DELETE, (id,))
        return bool(cursor.rowcount > 0)

    def list(self, after: str | None, limit: int) -> builtins.list[str]:
        if after is None:
            rows = self._call("listing conversations", _PG_LIST_FIRST, (limit,)).fetchall()
        else:
            rows = self._call("listing conversations", _PG_LIST_AFTER, (after, limit)).fetchall()
        return [str(id) for (id,) in rows]

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# The same statements as SQLite's, in psycopg's parameter style (each one statement in
# autocommit: an upsert is atomic on its own).
_PG_GET: Final = _GET.replace("CAST(snapshot AS BLOB)", "snapshot").replace("?", "%s")
_PG_UPSERT: Final = _UPSERT.replace("?", "%s")
_PG_DELETE: Final = _DELETE.replace("?", "%s")
_PG_LIST_FIRST: Final = _LIST_FIRST.replace("?", "%s")
_PG_LIST_AFTER: Final = _LIST_AFTER.replace("?", "%s")


class PostgresConversationStore(_ThreadedConversationStore):
    """A :class:`ConversationStore` in PostgreSQL, in the tables of a schema it shares with the
    run store (``pip install 'trio-agents[postgres]'``). Open it with :meth:`open`. Calls run
    one at a time in a worker thread, through psycopg's blocking API (never asyncio), and are
    never abandoned half-way; each write is one statement, atomic on its own. A lost
    connection fails the call that met it with a retryable :class:`StoreError` and is replaced
    before the next. A password in the URL never appears in an error or a log line."""

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        schema: str = "public",
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> PostgresConversationStore:
        """Connect to the database at ``url`` (``postgresql://...``) and make the schema
        current in ``schema`` (created if missing). Raises :class:`StoreError` when the
        database cannot be used (``code="unsupported"`` without psycopg, ``"schema"`` for a
        schema newer than this code, ``"io"`` when it cannot be reached)."""
        from ._postgres import check_url, connect, redacted  # noqa: PLC0415

        target = check_url(url)
        _check_max_bytes(max_bytes)
        limiter = trio.CapacityLimiter(1)

        def open_database() -> _PostgresDatabase:
            conn = connect(target, schema)
            return _PostgresDatabase(
                conn,
                lambda: connect(target, schema, migrate=False),
                max_bytes=max_bytes,
                clock=clock,
            )

        database = await open_in_worker(open_database, _PostgresDatabase.close, limiter)
        where = f"{redacted(target)} ({schema})"
        log.debug("opened conversation store %s", where)
        return cls(database, limiter, where)


async def open_conversation_store(url: str) -> ConversationStore:
    """Open the conversation store ``url`` names: ``sqlite:///PATH`` (a
    :class:`SQLiteConversationStore`) or ``postgresql://USER@HOST/DB[?schema=NAME]`` (a
    :class:`PostgresConversationStore`; ``public`` by default). Raises
    :class:`~protocols.errors.ConfigError` for another URL."""
    from ._postgres import split_url  # noqa: PLC0415
    from .durable._open import check_store_url, store_path  # noqa: PLC0415

    check_store_url(url)
    if url.startswith("sqlite:"):
        return await SQLiteConversationStore.open(store_path(url))
    target, schema = split_url(url)
    return await PostgresConversationStore.open(target, schema=schema)
