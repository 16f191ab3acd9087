"""``SQLiteRunStore``: durable jobs in a SQLite file, safe for several processes on one machine.

The file is the one :mod:`actors._sqlite` manages (owner-only, WAL, a versioned schema shared
with the conversation store, migrated on open). Every call is one transaction run in the
store's worker thread; every write is ``BEGIN IMMEDIATE``, so reading a record and writing its
successor is atomic against every other connection -- other processes included -- and
compare-and-swap on the revision holds across processes. Commits survive a process crash
(``SIGKILL``) at any point; ``durable=True`` makes them survive power loss too.
"""

from __future__ import annotations

import builtins
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import TypeVar

import trio

from protocols.errors import ValidationError
from protocols.jobs import (
    AgentJob,
    Applied,
    Conflict,
    Entry,
    JobRecord,
    JobStatus,
    Lease,
    Priority,
    Tombstone,
    acquire,
    admit_tree,
    purge,
    runnable,
)
from protocols.messages import new_id

from .._sqlite import (
    _META,
    JOBS,
    JOURNAL,
    TOMBSTONES,
    check_store_path,
    connect,
    open_in_worker,
    translated,
    write,
)
from ._store import (
    DEFAULT_MAX_BYTES,
    Admitted,
    check_after,
    check_id,
    check_lease,
    check_limit,
    check_successor,
    check_time,
    closed,
    decode_entry,
    decode_record,
    encode_checked,
    encode_entry,
    fenced,
    purged_key,
)

__all__ = ["SQLiteRunStore"]

log = logging.getLogger("actors.store")

_R = TypeVar("_R")

_LIVE = ("queued", "running", "awaiting_input")


class _Jobs:
    """The synchronous side: one connection, used by one worker call at a time."""

    def __init__(self, conn: sqlite3.Connection, max_bytes: int) -> None:
        self._conn: sqlite3.Connection | None = conn
        self.max_bytes = max_bytes

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise closed()
        return self._conn

    def _counter(self, name: str, take: int) -> int:
        """Take ``take`` numbers from the counter ``name`` (in the meta table); the first."""
        conn = self.conn
        row = conn.execute(f"SELECT value FROM {_META} WHERE key = ?", (name,)).fetchone()
        first = int(row[0]) if row is not None else 1
        conn.execute(
            f"INSERT INTO {_META} (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (name, str(first + take)),
        )
        return first

    def _load(self, id: str) -> JobRecord | None:
        row = self.conn.execute(
            f"SELECT CAST(record AS BLOB) FROM {JOBS} WHERE id = ?", (id,)
        ).fetchone()
        return None if row is None else decode_record(id, row[0])

    def _store(self, record: JobRecord, *, insert: bool = False) -> None:
        text = encode_checked(record, self.max_bytes, f"the record of job {record.id!r}")
        if insert:
            self.conn.execute(
                f"INSERT INTO {JOBS} (id, key, status, sequence, record) VALUES (?, ?, ?, ?, ?)",
                (record.id, record.key, record.status.value, record.sequence, text),
            )
        else:
            self.conn.execute(
                f"UPDATE {JOBS} SET status = ?, record = ? WHERE id = ?",
                (record.status.value, text, record.id),
            )

    def _tombstone(self, *, id: str | None = None, key: str | None = None) -> Tombstone | None:
        column, value = ("id", id) if id is not None else ("key", key)
        row = self.conn.execute(
            f"SELECT id, key, purged_at FROM {TOMBSTONES} WHERE {column} = ?", (value,)
        ).fetchone()
        return None if row is None else Tombstone(str(row[0]), row[1], float(row[2]))

    def admit(self, job: AgentJob, now: float, key: str | None, priority: Priority) -> Admitted:
        conn = self.conn
        with write(conn):
            if key is not None:
                stone = self._tombstone(key=key)
                if stone is not None:
                    raise purged_key(key, stone)
                row = conn.execute(f"SELECT id FROM {JOBS} WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    existing = self._load(str(row[0]))
                    assert existing is not None
                    return Admitted(existing, False)
            size = _size(job)
            first = self._counter("job_sequence", size)
            records = admit_tree(
                job,
                ids=iter(new_id, None),
                first_sequence=first,
                now=now,
                key=key,
                priority=priority,
            )
            for record in records:
                self._store(record, insert=True)
        return Admitted(records[-1], True, tuple(records[:-1]))

    def get(self, id: str) -> JobRecord | None:
        return self._load(id)

    def find(self, key: str) -> JobRecord | None:
        row = self.conn.execute(f"SELECT id FROM {JOBS} WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._load(str(row[0]))

    def list(
        self, statuses: tuple[str, ...] | None, after: int | None, limit: int
    ) -> builtins.list[JobRecord]:
        query = f"SELECT id, CAST(record AS BLOB) FROM {JOBS} WHERE sequence > ?"
        arguments: list[object] = [after if after is not None else -1]
        if statuses is not None:
            query += f" AND status IN ({', '.join('?' for _ in statuses)})"
            arguments.extend(statuses)
        query += " ORDER BY sequence LIMIT ?"
        arguments.append(limit)
        rows = self.conn.execute(query, arguments).fetchall()
        return [decode_record(str(id), text) for id, text in rows]

    def write(self, transition: Applied) -> bool:
        conn = self.conn
        with write(conn):
            stored = self._load(transition.record.id)
            if stored is None or stored.revision != transition.expected:
                return False
            check_successor(stored, transition.record)
            self._store(transition.record)
        return True

    def acquire(self, owner: str, lease: float, now: float) -> JobRecord | None:
        conn = self.conn
        with write(conn):
            rows = conn.execute(
                f"SELECT id, CAST(record AS BLOB) FROM {JOBS} WHERE status IN (?, ?, ?) "
                "ORDER BY sequence",
                _LIVE,
            ).fetchall()
            live = [decode_record(str(id), text) for id, text in rows]
            for candidate in runnable(live, now=now):
                execution = self._counter("job_execution", 0)
                taken = acquire(candidate, owner=owner, now=now, lease=lease, execution=execution)
                if isinstance(taken, Applied):
                    if candidate.execution is None:
                        self._counter("job_execution", 1)
                    self._store(taken.record)
                    return taken.record
        return None

    def append(self, id: str, holder: Lease, texts: Sequence[str], then: Applied | None) -> None:
        conn = self.conn
        with write(conn):
            stored = self._load(id)
            if stored is None or not stored.held_by(holder):
                raise fenced(id, holder, stored)
            if then is not None:
                if stored.revision != then.expected:
                    raise fenced(id, holder, stored)
                check_successor(stored, then.record)
                self._store(then.record)
            row = conn.execute(
                f"SELECT COALESCE(MAX(seq), 0) FROM {JOURNAL} WHERE job = ?", (id,)
            ).fetchone()
            seq = int(row[0])
            conn.executemany(
                f"INSERT INTO {JOURNAL} (job, seq, entry) VALUES (?, ?, ?)",
                [(id, seq + offset, text) for offset, text in enumerate(texts, start=1)],
            )

    def journal(self, id: str) -> builtins.list[Entry]:
        rows = self.conn.execute(
            f"SELECT CAST(entry AS BLOB) FROM {JOURNAL} WHERE job = ? ORDER BY seq", (id,)
        ).fetchall()
        return [decode_entry(id, text) for (text,) in rows]

    def purge(self, id: str, now: float) -> Tombstone | Conflict | None:
        conn = self.conn
        with write(conn):
            record = self._load(id)
            if record is None:
                return self._tombstone(id=id)
            outcome = purge(record, now=now)
            if isinstance(outcome, Tombstone):
                conn.execute(f"DELETE FROM {JOURNAL} WHERE job = ?", (id,))
                conn.execute(f"DELETE FROM {JOBS} WHERE id = ?", (id,))
                conn.execute(
                    f"INSERT INTO {TOMBSTONES} (id, key, purged_at) VALUES (?, ?, ?)",
                    (outcome.id, outcome.key, outcome.purged_at),
                )
        return outcome

    def purged(self, id: str) -> Tombstone | None:
        return self._tombstone(id=id)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _size(job: AgentJob) -> int:
    return 1 + sum(_size(child) for child in job.children)


class SQLiteRunStore:
    """A :class:`~actors.durable.RunStore` in a SQLite file (see the module docstring).

    Open it with :meth:`open`; several stores -- in one process or many -- may share the file.
    Every call runs in the store's worker thread, one at a time; a call already running there
    is never abandoned half-way (a write commits and the cancellation is delivered afterwards).
    """

    def __init__(self, jobs: _Jobs, limiter: trio.CapacityLimiter, path: str) -> None:
        """Use :meth:`open`."""
        self._jobs = jobs
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
        busy_timeout: float = 5.0,
        durable: bool = False,
    ) -> SQLiteRunStore:
        """Open (creating it owner-only if needed) the store at ``path`` and make its schema
        current (a conversation store's file of schema version 1 is migrated). Raises
        :class:`~actors.store.StoreError` when the file cannot be used."""
        target = os.fspath(path)
        check_store_path(target, busy_timeout)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationError(f"max_bytes must be an integer >= 1, not {max_bytes!r}")
        limiter = trio.CapacityLimiter(1)

        def open_file() -> _Jobs:
            conn = connect(
                target, busy_timeout=float(busy_timeout), durable=durable, what="run store"
            )
            return _Jobs(conn, max_bytes)

        jobs = await open_in_worker(open_file, _Jobs.close, limiter)
        log.debug("opened run store %s", target)
        return cls(jobs, limiter, target)

    async def __aenter__(self) -> SQLiteRunStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self, action: str, work: Callable[[_Jobs], _R]) -> _R:
        if self._closing:
            raise closed()
        jobs = self._jobs

        def call() -> _R:
            with translated(action):
                return work(jobs)

        return await trio.to_thread.run_sync(call, limiter=self._limiter)

    async def admit(
        self,
        job: AgentJob,
        *,
        now: float | None = None,
        key: str | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> Admitted:
        """See :meth:`RunStore.admit <actors.durable.RunStore.admit>`."""
        if not isinstance(job, AgentJob):
            raise ValidationError(f"admit takes an AgentJob, not {type(job).__name__}")
        if key is not None:
            check_id(key, "a key")
        moment = time.time() if now is None else check_time(now)
        chosen = Priority(priority)
        return await self._run("admitting a job", lambda jobs: jobs.admit(job, moment, key, chosen))

    async def get(self, id: str) -> JobRecord | None:
        """See :meth:`RunStore.get <actors.durable.RunStore.get>`."""
        check_id(id)
        return await self._run(f"reading job {id}", lambda jobs: jobs.get(id))

    async def find(self, key: str) -> JobRecord | None:
        """See :meth:`RunStore.find <actors.durable.RunStore.find>`."""
        check_id(key, "a key")
        return await self._run("finding a job by key", lambda jobs: jobs.find(key))

    async def list(
        self,
        *,
        statuses: Iterable[JobStatus] | None = None,
        after: int | None = None,
        limit: int = 100,
    ) -> builtins.list[JobRecord]:
        """See :meth:`RunStore.list <actors.durable.RunStore.list>`."""
        wanted = None if statuses is None else tuple(JobStatus(s).value for s in statuses)
        check_limit(limit)
        check_after(after)
        return await self._run("listing jobs", lambda jobs: jobs.list(wanted, after, limit))

    async def write(self, transition: Applied) -> bool:
        """See :meth:`RunStore.write <actors.durable.RunStore.write>`."""
        if not isinstance(transition, Applied):
            raise ValidationError(f"write takes an Applied transition, not {transition!r}")
        return await self._run(
            f"writing job {transition.record.id}", lambda jobs: jobs.write(transition)
        )

    async def acquire(
        self, *, owner: str, lease: float, now: float | None = None
    ) -> JobRecord | None:
        """See :meth:`RunStore.acquire <actors.durable.RunStore.acquire>`."""
        check_id(owner, "an owner")
        held = check_lease(lease)
        moment = time.time() if now is None else check_time(now)
        return await self._run("acquiring a job", lambda jobs: jobs.acquire(owner, held, moment))

    async def append(
        self,
        id: str,
        holder: Lease,
        entries: Sequence[Entry],
        *,
        then: Applied | None = None,
    ) -> None:
        """See :meth:`RunStore.append <actors.durable.RunStore.append>`."""
        check_id(id)
        if then is not None and then.record.id != id:
            raise ValidationError("append's transition must be for the same job")
        max_bytes = self._jobs.max_bytes
        texts = [encode_entry(entry, max_bytes) for entry in entries]
        await self._run(
            f"appending to the journal of job {id}",
            lambda jobs: jobs.append(id, holder, texts, then),
        )

    async def journal(self, id: str) -> builtins.list[Entry]:
        """See :meth:`RunStore.journal <actors.durable.RunStore.journal>`."""
        check_id(id)
        return await self._run(f"reading the journal of job {id}", lambda jobs: jobs.journal(id))

    async def purge(self, id: str, *, now: float | None = None) -> Tombstone | Conflict | None:
        """See :meth:`RunStore.purge <actors.durable.RunStore.purge>`."""
        check_id(id)
        moment = time.time() if now is None else check_time(now)
        return await self._run(f"purging job {id}", lambda jobs: jobs.purge(id, moment))

    async def purged(self, id: str) -> Tombstone | None:
        """See :meth:`RunStore.purged <actors.durable.RunStore.purged>`."""
        check_id(id)
        return await self._run(f"reading the tombstone of job {id}", lambda jobs: jobs.purged(id))

    async def aclose(self) -> None:
        """Refuse new calls, let waiting ones finish, then close the connection. Idempotent."""
        if self._closing:
            await trio.lowlevel.checkpoint()
            return
        self._closing = True
        jobs = self._jobs

        def close() -> None:
            with translated(f"closing the run store {self.path}"):
                jobs.close()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(close, limiter=self._limiter)
        log.debug("closed run store %s", self.path)
