"""``SQLiteRunStore``: durable jobs in a SQLite file, safe for several processes on one machine.

The file is the one :mod:`actors._sqlite` manages (owner-only, WAL, a versioned schema shared
with the conversation store, migrated on open). Every write is ``BEGIN IMMEDIATE``, so reading a
record and writing its successor is atomic against every other connection -- other processes
included -- and compare-and-swap on the revision holds across processes. Commits survive a
process crash (``SIGKILL``) at any point; ``durable=True`` makes them survive power loss too.
The queries, the group commit and the threads are :mod:`actors.durable._sql_store`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3

import trio

from protocols.errors import ValidationError

from .._sqlite import check_store_path, connect, open_in_worker, translate_error
from ._sql_store import Dialect, Jobs, SQLRunStore
from ._store import DEFAULT_MAX_BYTES

__all__ = ["SQLITE", "SQLiteRunStore"]

log = logging.getLogger("actors.store")


def _translate(exc: Exception, action: str) -> Exception:
    assert isinstance(exc, sqlite3.Error)
    return translate_error(exc, action)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


#: SQLite: one write lock for the database (``BEGIN IMMEDIATE``), so no row locks.
SQLITE = Dialect(
    name="sqlite",
    begin="BEGIN IMMEDIATE",
    error=sqlite3.Error,
    translate=_translate,  # type: ignore[arg-type]
    rollback=_rollback,
    words=(
        ("RECORD_TEXT", "CAST(record AS BLOB)"),
        ("ENTRY_TEXT", "CAST(entry AS BLOB)"),
        (" FOR_UPDATE", ""),
        (" FOR_SHARE", ""),
        (" SKIP_LOCKED", ""),
    ),
    counter_returning=sqlite3.sqlite_version_info >= (3, 35, 0),
)


class SQLiteRunStore(SQLRunStore):
    """A :class:`~actors.durable.RunStore` in a SQLite file (see the module docstring).

    Open it with :meth:`open`; several stores -- in one process or many -- may share the file.
    Writes are grouped: the writes asked for while one commit is in progress are committed
    together by the next (each still all-or-nothing on its own), so many jobs running at once
    share each commit's cost -- its ``fsync`` with ``durable=True``. Reads run beside the writes,
    on a second connection.
    """

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        busy_timeout: float = 5.0,
        durable: bool = False,
        create: bool = True,
    ) -> SQLiteRunStore:
        """Open (creating it owner-only if needed) the store at ``path`` and make its schema
        current (an older file is migrated). Raises :class:`~actors.store.StoreError` when the
        file cannot be used. ``create=False`` creates nothing -- neither the file nor the
        store's tables in it -- and raises :class:`~actors.store.StoreError`
        ``code="missing"`` where there is no store (so a mistyped path is an error)."""
        target = os.fspath(path)
        check_store_path(target, busy_timeout)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationError(f"max_bytes must be an integer >= 1, not {max_bytes!r}")

        def open_file() -> Jobs:
            timeout = float(busy_timeout)
            conn = connect(
                target, busy_timeout=timeout, durable=durable, what="run store", create=create
            )
            try:
                reader = connect(
                    target,
                    busy_timeout=timeout,
                    durable=durable,
                    what="run store",
                    migrate=False,
                    create=create,
                )
            except BaseException:
                conn.close()
                raise
            return Jobs(SQLITE, conn, reader, max_bytes)

        jobs = await open_in_worker(open_file, Jobs.close, trio.CapacityLimiter(1))
        log.debug("opened run store %s", target)
        return cls(jobs, target)
