"""``PostgresRunStore``: durable jobs in PostgreSQL, for many workers on many machines.

The same queries, group commit and threads as the SQLite store (:mod:`._sql_store`), with
PostgreSQL's row locks where SQLite has its one database lock: a job is acquired with ``FOR
UPDATE SKIP LOCKED`` (two workers never wait on, nor take, the same job), a record is read for
compare-and-swap ``FOR UPDATE``, and a journal append holds its job's row ``FOR SHARE`` while
it checks the fence and writes -- so no acquisition can slip between the check and the write.

psycopg 3 is driven through its blocking API in the store's two threads (a writer and a
reader connection), never through asyncio. A call given to a thread is never abandoned, so a
connection is never left mid-query; a connection that was lost (the server restarted, the
backend was terminated) is replaced before the next call, and the call that saw it fail gets
a retryable :class:`~actors.store.StoreError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import trio

from protocols.errors import ValidationError

from .._postgres import check_url, connect, redacted, translate_error
from .._sqlite import open_in_worker
from ._sql_store import Dialect, Jobs, SQLRunStore
from ._store import DEFAULT_MAX_BYTES

__all__ = ["PostgresRunStore", "dialect"]

log = logging.getLogger("actors.store")


def _error() -> type[Exception]:
    from .._postgres import _psycopg  # noqa: PLC0415 - psycopg is optional

    error: type[Exception] = _psycopg().Error
    return error


def _rollback(conn: Any) -> None:
    if conn.closed or conn.broken:
        return
    with contextlib.suppress(Exception):
        conn.execute("ROLLBACK")


def _executemany(conn: Any, sql: str, rows: Sequence[Sequence[object]]) -> None:
    with conn.cursor() as cursor:
        cursor.executemany(sql, rows)


def _serialize(conn: Any, key: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))


def _broken(conn: Any) -> bool:
    return bool(conn.closed or conn.broken)


def dialect() -> Dialect:
    """The PostgreSQL dialect (psycopg imported: it is optional)."""
    return Dialect(
        name="postgresql",
        begin="BEGIN",
        error=_error(),
        translate=translate_error,
        rollback=_rollback,
        words=(
            ("RECORD_TEXT", "record"),
            ("ENTRY_TEXT", "entry"),
            (" FOR_UPDATE", " FOR UPDATE"),
            (" FOR_SHARE", " FOR SHARE"),
            (" SKIP_LOCKED", " FOR UPDATE SKIP LOCKED"),
            ("?", "%s"),
        ),
        executemany=_executemany,
        serialize=_serialize,
        broken=_broken,
    )


class PostgresRunStore(SQLRunStore):
    """A :class:`~actors.durable.RunStore` in PostgreSQL (see the module docstring).

    Open it with :meth:`open`; any number of stores, in any number of processes on any number of
    machines, may share one database (and ``schema``)."""

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        schema: str = "public",
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> PostgresRunStore:
        """Connect to the database at ``url`` (``postgresql://...``) and make the store's schema
        current in ``schema`` (created if missing). Raises :class:`~actors.store.StoreError`
        when the database cannot be used (``code="unsupported"`` without psycopg,
        ``"schema"`` for a schema newer than this code, ``"io"`` when it cannot be reached)."""
        target = check_url(url)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationError(f"max_bytes must be an integer >= 1, not {max_bytes!r}")
        where = redacted(target)

        def open_database() -> Jobs:
            used = dialect()
            writer = connect(target, schema)
            try:
                reader = connect(target, schema, migrate=False)
            except BaseException:
                writer.close()
                raise
            return Jobs(
                used,
                writer,
                reader,
                max_bytes,
                reconnect=lambda: connect(target, schema, migrate=False),
            )

        jobs = await open_in_worker(open_database, Jobs.close, trio.CapacityLimiter(1))
        log.debug("opened run store %s (schema %s)", where, schema)
        return cls(jobs, f"{where} ({schema})")
