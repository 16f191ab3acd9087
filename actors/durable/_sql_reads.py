"""The reads of the run store over SQL (:class:`Reads`, a part of
:class:`~actors.durable._sql_jobs.Jobs`): each one statement on the reader connection, so one
consistent snapshot, in the store's reader thread."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from protocols.jobs import Entry, Horizon, JobRecord, JobStatus, Tombstone

from .._sqlite import _META, JOBS, JOURNAL, TOMBSTONES, StoreError
from ._sql_dialect import Dialect
from ._store import decode_entry, decode_record, decode_timed_entry

__all__ = ["Reads"]

#: Gaps one query of a page reads again (two parameters each: below SQLite's oldest limit).
_GAP_RANGES = 200
#: The meta table's key for when a worker last began taking jobs (no schema change: a row).
_WORKER_SEEN = "worker_seen"


class Reads:
    """The store's reads (and the tombstone lookup its writes share)."""

    dialect: Dialect

    if TYPE_CHECKING:

        @property
        def reader(self) -> Any: ...

        def _x(
            self,
            conn: Any,
            sql: str,
            arguments: Sequence[object] = (),
            *,
            unlocked: bool = False,
            last: bool = False,
        ) -> Any: ...

    def _tombstone(
        self, conn: Any, *, id: str | None = None, key: str | None = None
    ) -> Tombstone | None:
        column, value = ("id", id) if id is not None else ("key", key)
        row = self._x(
            conn, f"SELECT id, key, purged_at FROM {TOMBSTONES} WHERE {column} = ?", (value,)
        ).fetchone()
        return None if row is None else Tombstone(str(row[0]), row[1], float(row[2]))

    def get(self, id: str) -> JobRecord | None:
        row = self._x(self.reader, f"SELECT RECORD_TEXT FROM {JOBS} WHERE id = ?", (id,)).fetchone()
        return None if row is None else decode_record(id, row[0])

    def status(self, id: str) -> JobStatus | None:
        row = self._x(self.reader, f"SELECT status FROM {JOBS} WHERE id = ?", (id,)).fetchone()
        if row is None:
            return None
        try:
            return JobStatus(row[0])
        except ValueError:
            raise StoreError(
                f"the stored status of job {id!r} is not one a job has: {str(row[0])[:40]!r}",
                code="corrupt",
            ) from None

    def find(self, key: str) -> JobRecord | None:
        row = self._x(
            self.reader, f"SELECT id, RECORD_TEXT FROM {JOBS} WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else decode_record(str(row[0]), row[1])

    def list(
        self,
        statuses: tuple[str, ...] | None,
        after: int | None,
        limit: int,
        thread: str | None = None,
    ) -> builtins.list[JobRecord]:
        if statuses is not None and not statuses:
            return []  # (``IN ()`` is not SQL everywhere)
        query = f"SELECT id, RECORD_TEXT FROM {JOBS} WHERE sequence > ?"
        arguments: list[object] = [after if after is not None else -1]
        if statuses is not None:
            query += f" AND status IN ({', '.join('?' for _ in statuses)})"
            arguments.extend(statuses)
        if thread is not None:
            query += " AND thread = ?"  # (indexed by thread and sequence)
            arguments.append(thread)
        query += " ORDER BY sequence LIMIT ?"
        arguments.append(limit)
        rows = self._x(self.reader, query, arguments).fetchall()
        return [decode_record(str(id), text) for id, text in rows]

    def page(
        self, position: int, gaps: Sequence[tuple[int, int]], limit: int
    ) -> tuple[builtins.list[JobRecord], builtins.list[JobRecord], Horizon]:
        """The jobs numbered above ``position`` (up to ``limit``, in order), those numbered
        inside ``gaps`` (``(first, last)`` ranges), and the horizon of the read."""
        if self.dialect.page is not None:
            fresh, found, horizon = self.dialect.page(self.reader, position, gaps, limit)
        else:
            # Numbers commit in order here: what is missing below a number read never comes,
            # so the two reads need not be one view, and every jump is a hole for good.
            horizon = Horizon.in_order()
            fresh = self._x(
                self.reader,
                f"SELECT id, RECORD_TEXT FROM {JOBS} WHERE sequence > ? ORDER BY sequence LIMIT ?",
                (position, limit),
            ).fetchall()
            found = []
            for start in range(0, len(gaps), _GAP_RANGES):
                chunk = gaps[start : start + _GAP_RANGES]
                found.extend(
                    self._x(
                        self.reader,
                        f"SELECT id, RECORD_TEXT FROM {JOBS} WHERE "
                        + " OR ".join("sequence BETWEEN ? AND ?" for _ in chunk),
                        [number for gap in chunk for number in gap],
                    ).fetchall()
                )
        return (
            [decode_record(str(id), text) for id, text in fresh],
            [decode_record(str(id), text) for id, text in found],
            horizon,
        )

    def journal(self, id: str, after: int = 0) -> builtins.list[Entry]:
        rows = self._x(
            self.reader,
            f"SELECT ENTRY_TEXT FROM {JOURNAL} WHERE job = ? AND seq > ? ORDER BY seq",
            (id, after),
        ).fetchall()
        return [decode_entry(id, text) for (text,) in rows]

    def timed_journal(self, id: str, after: int = 0) -> builtins.list[tuple[Entry, float]]:
        rows = self._x(
            self.reader,
            f"SELECT ENTRY_TEXT FROM {JOURNAL} WHERE job = ? AND seq > ? ORDER BY seq",
            (id, after),
        ).fetchall()
        return [decode_timed_entry(id, text) for (text,) in rows]

    def purged(self, id: str) -> Tombstone | None:
        return self._tombstone(self.reader, id=id)

    def worker_seen(self) -> float | None:
        row = self._x(
            self.reader, f"SELECT value FROM {_META} WHERE key = ?", (_WORKER_SEEN,)
        ).fetchone()
        try:
            return None if row is None else float(row[0])
        except ValueError:
            return None
