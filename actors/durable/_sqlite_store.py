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
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
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
    Lane,
    StoreError,
    check_store_path,
    connect,
    open_in_worker,
    translate_error,
    translated,
)
from ._store import (
    DEFAULT_MAX_BYTES,
    Admitted,
    check_admission,
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


#: Live jobs examined per query when looking for one to acquire.
_PAGE = 64
#: Decoded records kept to check writes against (by id, with their revision).
_CACHED = 4096


class _Pending:
    """A write waiting for (or in) a group commit: what to run, and what it gave."""

    __slots__ = ("action", "done", "error", "taken", "value", "work")

    def __init__(self, action: str, work: Callable[[_Jobs], object]) -> None:
        self.action = action
        self.work = work
        self.taken = False
        self.done = trio.Event()
        self.value: object = None
        self.error: BaseException | None = None


class _Jobs:
    """The synchronous side: a connection that writes (one group commit at a time, in the
    writer thread) and one that reads (in the reader thread), on one file.

    Records are decoded once and kept, by id and revision, to check later writes against --
    never handed out: every record returned is decoded afresh. A revision names one content
    for good (writes are compare-and-swap on it, and a purged job's id is never reused), so a
    kept record is valid exactly while the stored revision is its own."""

    def __init__(
        self, writer: sqlite3.Connection, reader: sqlite3.Connection, max_bytes: int
    ) -> None:
        self._writer: sqlite3.Connection | None = writer
        self._reader: sqlite3.Connection | None = reader
        self.max_bytes = max_bytes
        self._cache: OrderedDict[str, tuple[int, JobRecord]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._staged: list[tuple[str, int, JobRecord | None]] = []

    @property
    def conn(self) -> sqlite3.Connection:
        if self._writer is None:
            raise closed()
        return self._writer

    @property
    def reader(self) -> sqlite3.Connection:
        if self._reader is None:
            raise closed()
        return self._reader

    # -- the record cache (only ever read inside a write transaction) ---------------------------

    def _cached(self, id: str, revision: int, text: bytes | str) -> JobRecord:
        with self._cache_lock:
            hit = self._cache.get(id)
        if hit is not None and hit[0] == revision:
            return hit[1]
        record = decode_record(id, text)
        self._staged.append((id, revision, record))
        return record

    def _apply_staged(self) -> None:
        with self._cache_lock:
            for id, revision, record in self._staged:
                if record is None:
                    self._cache.pop(id, None)
                else:
                    self._cache[id] = (revision, record)
                    self._cache.move_to_end(id)
            while len(self._cache) > _CACHED:
                self._cache.popitem(last=False)
        self._staged.clear()

    # -- group commit ---------------------------------------------------------------------------

    def commit(self, batch: Sequence[_Pending]) -> None:
        """Run ``batch``'s writes in one transaction, each in a savepoint of its own: one that
        fails is rolled back alone and gets its error; the others commit together."""
        conn = self.conn
        self._staged.clear()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for item in batch:
                item.error = translate_error(exc, item.action)
            return
        try:
            for item in batch:
                staged = len(self._staged)
                conn.execute("SAVEPOINT op")
                try:
                    item.value = item.work(self)
                except Exception as exc:
                    del self._staged[staged:]
                    conn.execute("ROLLBACK TO op")
                    item.error = (
                        translate_error(exc, item.action) if isinstance(exc, sqlite3.Error) else exc
                    )
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            self._staged.clear()
            if not isinstance(exc, sqlite3.Error):  # pragma: no cover - not raised past savepoints
                raise
            for item in batch:
                item.value, item.error = None, translate_error(exc, item.action)
            return
        self._apply_staged()

    # -- writes (each runs inside a group commit's transaction) ---------------------------------

    def _counter(self, name: str, take: int) -> int:
        """Take ``take`` numbers from the counter ``name`` (in the meta table); the first."""
        conn = self.conn
        row = conn.execute(f"SELECT value FROM {_META} WHERE key = ?", (name,)).fetchone()
        first = int(row[0]) if row is not None else 1
        if take:
            conn.execute(
                f"INSERT INTO {_META} (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (name, str(first + take)),
            )
        return first

    def _stored(self, id: str) -> JobRecord | None:
        row = self.conn.execute(
            f"SELECT revision, CAST(record AS BLOB) FROM {JOBS} WHERE id = ?", (id,)
        ).fetchone()
        return None if row is None else self._cached(id, int(row[0]), row[1])

    def _store(self, record: JobRecord, *, insert: bool = False) -> str:
        text = encode_checked(record, self.max_bytes, f"the record of job {record.id!r}")
        lease = record.lease
        held = (
            record.status is JobStatus.RUNNING and lease is not None and lease.fence == record.fence
        )
        columns = (
            record.status.value,
            text,
            record.revision,
            lease.owner if held and lease is not None else None,
            record.fence if held else None,
            lease.until if lease is not None else None,
            record.conversation,
            (0 if record.execution is not None else 2)
            + (0 if record.priority is Priority.INTERRUPT else 1),
        )
        if insert:
            self.conn.execute(
                f"INSERT INTO {JOBS} (status, record, revision, holder, held, until, thread, "
                "rank, id, key, sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*columns, record.id, record.key, record.sequence),
            )
        else:
            self.conn.execute(
                f"UPDATE {JOBS} SET status = ?, record = ?, revision = ?, holder = ?, held = ?, "
                "until = ?, thread = ?, rank = ? WHERE id = ?",
                (*columns, record.id),
            )
        # (Not kept: ``record`` may share parts with the caller's objects. The next check of
        # this job decodes what was stored.)
        return text

    def _tombstone(
        self, conn: sqlite3.Connection, *, id: str | None = None, key: str | None = None
    ) -> Tombstone | None:
        column, value = ("id", id) if id is not None else ("key", key)
        row = conn.execute(
            f"SELECT id, key, purged_at FROM {TOMBSTONES} WHERE {column} = ?", (value,)
        ).fetchone()
        return None if row is None else Tombstone(str(row[0]), row[1], float(row[2]))

    def admit(self, job: AgentJob, now: float, key: str | None, priority: Priority) -> Admitted:
        conn = self.conn
        if key is not None:
            stone = self._tombstone(conn, key=key)
            if stone is not None:
                raise purged_key(key, stone)
            row = conn.execute(
                f"SELECT id, CAST(record AS BLOB) FROM {JOBS} WHERE key = ?", (key,)
            ).fetchone()
            if row is not None:
                return Admitted(decode_record(str(row[0]), row[1]), False)
        first = self._counter("job_sequence", _size(job))
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

    def write(self, transition: Applied) -> bool:
        stored = self._stored(transition.record.id)
        if stored is None or stored.revision != transition.expected:
            return False
        check_successor(stored, transition.record)
        self._store(transition.record)
        return True

    def acquire(self, owner: str, lease: float, now: float) -> JobRecord | None:
        conn = self.conn
        # A running job whose lease expired comes first (its worker is presumed dead), then the
        # queued ones by rank and admission order: a page at a time, each page looked at with
        # what decides whether its jobs may run (their children, their threads' other jobs).
        expired = conn.execute(
            f"SELECT id, revision, CAST(record AS BLOB) FROM {JOBS} "
            "WHERE status = 'running' AND (until IS NULL OR until <= ?) ORDER BY sequence",
            (now,),
        ).fetchall()
        pages = [expired]
        offset = 0
        while pages:
            rows = pages.pop()
            page = [self._cached(str(id), int(revision), text) for id, revision, text in rows]
            if page:
                for candidate in runnable(self._context(page), now=now):
                    if candidate not in page:
                        continue
                    execution = self._counter("job_execution", 0)
                    taken = acquire(
                        candidate, owner=owner, now=now, lease=lease, execution=execution
                    )
                    if isinstance(taken, Applied):
                        if candidate.execution is None:
                            self._counter("job_execution", 1)
                        self._store(taken.record)
                        # The caller's alone from here: the kept copy it was made from goes.
                        self._staged.append((candidate.id, 0, None))
                        return taken.record
            queued = conn.execute(
                f"SELECT id, revision, CAST(record AS BLOB) FROM {JOBS} WHERE status = 'queued' "
                "ORDER BY rank, sequence LIMIT ? OFFSET ?",
                (_PAGE, offset),
            ).fetchall()
            offset += _PAGE
            if queued:
                pages.append(queued)
        return None

    def _context(self, page: builtins.list[JobRecord]) -> builtins.list[JobRecord]:
        """``page`` with the live jobs that decide whether its jobs may run: their children and
        the other jobs of their threads."""
        conn = self.conn
        seen = {record.id for record in page}
        extra: builtins.list[JobRecord] = []
        children = [c for record in page for c in record.children if c not in seen]
        threads = {record.conversation for record in page if record.conversation is not None}
        rows: builtins.list[tuple[object, object, bytes]] = []
        for start in range(0, len(children), 500):
            chunk = children[start : start + 500]
            rows += conn.execute(
                f"SELECT id, revision, CAST(record AS BLOB) FROM {JOBS} "
                f"WHERE id IN ({', '.join('?' for _ in chunk)})",
                chunk,
            ).fetchall()
        for thread in threads:
            rows += conn.execute(
                f"SELECT id, revision, CAST(record AS BLOB) FROM {JOBS} "
                "WHERE thread = ? AND status IN (?, ?, ?)",
                (thread, *_LIVE),
            ).fetchall()
        for id, revision, text in rows:
            if str(id) not in seen:
                seen.add(str(id))
                extra.append(self._cached(str(id), int(str(revision)), text))
        return [*page, *extra]

    def append(self, id: str, holder: Lease, texts: Sequence[str], then: Applied | None) -> None:
        conn = self.conn
        row = conn.execute(
            f"SELECT revision, holder, held FROM {JOBS} WHERE id = ?", (id,)
        ).fetchone()
        if row is None or row[1] != holder.owner or row[2] != holder.fence:
            raise fenced(id, holder, self._stored(id) if row is not None else None)
        if then is not None:
            stored = self._stored(id)
            assert stored is not None
            if stored.revision != then.expected:
                raise fenced(id, holder, stored)
            check_successor(stored, then.record)
            self._store(then.record)
        last = conn.execute(
            f"SELECT COALESCE(MAX(seq), 0) FROM {JOURNAL} WHERE job = ?", (id,)
        ).fetchone()
        seq = int(last[0])
        conn.executemany(
            f"INSERT INTO {JOURNAL} (job, seq, entry) VALUES (?, ?, ?)",
            [(id, seq + offset, text) for offset, text in enumerate(texts, start=1)],
        )

    def purge(self, id: str, now: float) -> Tombstone | Conflict | None:
        conn = self.conn
        row = conn.execute(
            f"SELECT CAST(record AS BLOB) FROM {JOBS} WHERE id = ?", (id,)
        ).fetchone()
        if row is None:
            return self._tombstone(conn, id=id)
        outcome = purge(decode_record(id, row[0]), now=now)
        if isinstance(outcome, Tombstone):
            conn.execute(f"DELETE FROM {JOURNAL} WHERE job = ?", (id,))
            conn.execute(f"DELETE FROM {JOBS} WHERE id = ?", (id,))
            conn.execute(
                f"INSERT INTO {TOMBSTONES} (id, key, purged_at) VALUES (?, ?, ?)",
                (outcome.id, outcome.key, outcome.purged_at),
            )
            self._staged.append((id, 0, None))
        return outcome

    # -- reads (each one statement: one consistent snapshot) ------------------------------------

    def get(self, id: str) -> JobRecord | None:
        row = self.reader.execute(
            f"SELECT CAST(record AS BLOB) FROM {JOBS} WHERE id = ?", (id,)
        ).fetchone()
        return None if row is None else decode_record(id, row[0])

    def status(self, id: str) -> JobStatus | None:
        row = self.reader.execute(f"SELECT status FROM {JOBS} WHERE id = ?", (id,)).fetchone()
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
        row = self.reader.execute(
            f"SELECT id, CAST(record AS BLOB) FROM {JOBS} WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else decode_record(str(row[0]), row[1])

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
        rows = self.reader.execute(query, arguments).fetchall()
        return [decode_record(str(id), text) for id, text in rows]

    def journal(self, id: str) -> builtins.list[Entry]:
        rows = self.reader.execute(
            f"SELECT CAST(entry AS BLOB) FROM {JOURNAL} WHERE job = ? ORDER BY seq", (id,)
        ).fetchall()
        return [decode_entry(id, text) for (text,) in rows]

    def purged(self, id: str) -> Tombstone | None:
        return self._tombstone(self.reader, id=id)

    def close(self) -> None:
        for name in ("_reader", "_writer"):
            conn = getattr(self, name)
            setattr(self, name, None)
            if conn is not None:
                conn.close()


def _size(job: AgentJob) -> int:
    return 1 + sum(_size(child) for child in job.children)


class SQLiteRunStore:
    """A :class:`~actors.durable.RunStore` in a SQLite file (see the module docstring).

    Open it with :meth:`open`; several stores -- in one process or many -- may share the file.
    Writes run in the store's writer thread, grouped: the writes asked for while one commit is
    in progress are committed together by the next (each still all-or-nothing on its own), so
    many jobs running at once share each commit's cost -- its ``fsync`` with ``durable=True``.
    Reads run in a reader thread of their own, beside the writes. A write already taken by a
    commit is never abandoned half-way: it commits, and a cancellation is delivered afterwards.
    """

    def __init__(self, jobs: _Jobs, path: str) -> None:
        """Use :meth:`open`."""
        self._jobs = jobs
        self._writer = Lane(f"run store writer {path}")
        self._reader = Lane(f"run store reader {path}")
        self._closing = False
        self._pending: list[_Pending] = []
        self._committing = False
        self._committed = trio.Event()
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

        def open_file() -> _Jobs:
            timeout = float(busy_timeout)
            conn = connect(target, busy_timeout=timeout, durable=durable, what="run store")
            try:
                reader = connect(
                    target, busy_timeout=timeout, durable=durable, what="run store", migrate=False
                )
            except BaseException:
                conn.close()
                raise
            return _Jobs(conn, reader, max_bytes)

        jobs = await open_in_worker(open_file, _Jobs.close, trio.CapacityLimiter(1))
        log.debug("opened run store %s", target)
        return cls(jobs, target)

    async def __aenter__(self) -> SQLiteRunStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _read(self, action: str, work: Callable[[_Jobs], _R]) -> _R:
        if self._closing:
            raise closed()
        jobs = self._jobs

        def call() -> _R:
            with translated(action):
                return work(jobs)

        return await self._reader.run(call)

    async def _run(self, action: str, work: Callable[[_Jobs], _R]) -> _R:
        """Run the write ``work`` in the next group commit and return what it gave."""
        if self._closing:
            raise closed()
        await trio.lowlevel.checkpoint_if_cancelled()
        item = _Pending(action, work)
        self._pending.append(item)
        try:
            while not item.done.is_set():
                if self._committing:
                    await self._committed.wait()
                    continue
                await self._commit()
        except BaseException:
            if not item.taken:
                self._pending.remove(item)
                raise
            with trio.CancelScope(shield=True):
                await item.done.wait()
            raise
        if item.error is not None:
            raise item.error
        return item.value  # type: ignore[return-value]

    async def _commit(self) -> None:
        """Commit every write waiting now, together, in the writer thread."""
        self._committing = True
        batch, self._pending = self._pending, []
        for item in batch:
            item.taken = True
        try:
            # (A lane's call is never abandoned: a cancel lands after the commit.)
            await self._writer.run(lambda: self._jobs.commit(batch))
        except BaseException as exc:  # pragma: no cover - commit() reports through the items
            for item in batch:
                item.error = exc
            raise
        finally:
            self._committing = False
            committed, self._committed = self._committed, trio.Event()
            for item in batch:
                item.done.set()
            committed.set()

    async def admit(
        self,
        job: AgentJob,
        *,
        now: float | None = None,
        key: str | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> Admitted:
        """See :meth:`RunStore.admit <actors.durable.RunStore.admit>`."""
        moment = check_admission(job, key, now)
        chosen = Priority(priority)
        return await self._run("admitting a job", lambda jobs: jobs.admit(job, moment, key, chosen))

    async def get(self, id: str) -> JobRecord | None:
        """See :meth:`RunStore.get <actors.durable.RunStore.get>`."""
        check_id(id)
        return await self._read(f"reading job {id}", lambda jobs: jobs.get(id))

    async def status(self, id: str) -> JobStatus | None:
        """See :meth:`RunStore.status <actors.durable.RunStore.status>`."""
        check_id(id)
        return await self._read(f"reading the status of job {id}", lambda jobs: jobs.status(id))

    async def find(self, key: str) -> JobRecord | None:
        """See :meth:`RunStore.find <actors.durable.RunStore.find>`."""
        check_id(key, "a key")
        return await self._read("finding a job by key", lambda jobs: jobs.find(key))

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
        return await self._read("listing jobs", lambda jobs: jobs.list(wanted, after, limit))

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
        return await self._read(f"reading the journal of job {id}", lambda jobs: jobs.journal(id))

    async def purge(self, id: str, *, now: float | None = None) -> Tombstone | Conflict | None:
        """See :meth:`RunStore.purge <actors.durable.RunStore.purge>`."""
        check_id(id)
        moment = time.time() if now is None else check_time(now)
        return await self._run(f"purging job {id}", lambda jobs: jobs.purge(id, moment))

    async def purged(self, id: str) -> Tombstone | None:
        """See :meth:`RunStore.purged <actors.durable.RunStore.purged>`."""
        check_id(id)
        return await self._read(f"reading the tombstone of job {id}", lambda jobs: jobs.purged(id))

    async def aclose(self) -> None:
        """Refuse new calls, let waiting ones finish, then close the connections. Idempotent."""
        if self._closing:
            await trio.lowlevel.checkpoint()
            return
        self._closing = True
        jobs = self._jobs

        def close() -> None:
            with translated(f"closing the run store {self.path}"):
                jobs.close()

        with trio.CancelScope(shield=True):
            while self._pending or self._committing:
                if self._committing:
                    await self._committed.wait()
                else:
                    await self._commit()
            await self._reader.run(lambda: None)  # the reads given before are done
            await self._writer.run(close)
            self._reader.close()
            self._writer.close()
        log.debug("closed run store %s", self.path)
