"""The run store over SQL, shared by :class:`~actors.durable.SQLiteRunStore` and
:class:`~actors.durable.PostgresRunStore`: the queries, the group commit and the record cache,
with what differs between the two databases in a :class:`Dialect`.

Writes run in a writer thread of the store's own, grouped: the writes asked for while a commit
is in progress are committed together by the next, each in a savepoint of its own (all or
nothing on its own). Reads run on a second connection, in a reader thread. Both databases are
driven through their blocking drivers (``sqlite3``, psycopg's blocking API) in those threads --
never asyncio -- and a call already given to a thread is never abandoned: it ends, and a cancel
lands afterwards, so no connection is ever left mid-statement.
"""

from __future__ import annotations

import builtins
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import attrs
import trio

from protocols.errors import ValidationError
from protocols.jobs import (
    AgentJob,
    Applied,
    Conflict,
    Entry,
    Horizon,
    JobCursor,
    JobPage,
    JobRecord,
    JobStatus,
    Lease,
    Priority,
    Tombstone,
    acquire,
    admit_tree,
    crosses,
    next_page,
    purge,
    runnable,
)
from protocols.messages import new_id

from .._sqlite import _META, JOBS, JOURNAL, TOMBSTONES, Lane, StoreError, translated
from ._store import (
    JOURNAL_GREW,
    Admitted,
    Announcer,
    Watch,
    cancelled,
    check_admission,
    check_after,
    check_cursor,
    check_id,
    check_lease,
    check_limit,
    check_position,
    check_successor,
    check_time,
    closed,
    decode_entry,
    decode_record,
    decode_timed_entry,
    encode_checked,
    encode_entry,
    fenced,
    noticeable,
    purged_key,
)

__all__ = ["Dialect", "Jobs", "SQLRunStore"]

log = logging.getLogger("actors.store")

_R = TypeVar("_R")
_S = TypeVar("_S", bound="SQLRunStore")

_LIVE = ("queued", "running", "awaiting_input")


@attrs.frozen(cache_hash=True)
class Dialect:
    """How one database does what the run store asks of it. The queries are written for
    SQLite; :meth:`sql` rewrites them: ``?`` parameters, ``RECORD_TEXT`` and ``ENTRY_TEXT``
    (the JSON columns as the driver should return them), and the row locks ``FOR_UPDATE``,
    ``FOR_SHARE`` and ``SKIP_LOCKED`` (nothing on SQLite, whose writes hold the database's one
    write lock from ``BEGIN IMMEDIATE``)."""

    name: str
    begin: str
    error: type[Exception]
    translate: Callable[[Exception, str], StoreError]
    rollback: Callable[[Any], None]
    words: tuple[tuple[str, str], ...]
    #: Make concurrent admissions of one key wait for each other (a no-op on SQLite).
    serialize: Callable[[Any, str], None] = lambda conn, key: None
    #: Whether a connection was lost (it is replaced before the next call).
    broken: Callable[[Any], bool] = lambda conn: False
    #: Whether an error is a conflict with another transaction that asking again settles (a
    #: deadlock: the database chose this write to give way). Never on SQLite, whose writes take
    #: the one database lock before they begin.
    conflict: Callable[[Exception], bool] = lambda exc: False
    #: ``count`` ascending numbers from the counter named (``job_sequence``, ``job_execution``)
    #: without a lock held to the commit (PostgreSQL's sequences); ``None``: take them from the
    #: counter's row in the meta table (SQLite, whose writes are serialized anyway).
    numbers: Callable[[Any, str, int], list[int]] | None = None
    #: Read a page of jobs in one consistent view (see :meth:`Jobs.page`): the rows numbered
    #: above a position (up to a limit, in order) and those inside the ranges given, each
    #: ``(id, text)``, and what the database knew of its running transactions then. ``None``:
    #: numbers commit in order (SQLite, whose writes are serialized), so two plain queries do.
    page: (
        Callable[
            [Any, int, Sequence[tuple[int, int]], int],
            tuple[list[tuple[Any, Any]], list[tuple[Any, Any]], Horizon],
        ]
        | None
    ) = None

    @functools.cache  # noqa: B019 - dialects are few and live for the process
    def sql(self, query: str) -> str:
        """``query`` in this dialect."""
        for word, replacement in self.words:
            query = query.replace(word, replacement)
        return query


#: Live jobs examined per query when looking for one to acquire.
_PAGE = 64
#: Decoded records kept to check writes against (by id, with their revision).
_CACHED = 4096
#: Journal entries a single INSERT carries (three parameters each: far below both databases'
#: limits on parameters).
_INSERT_ROWS = 500
#: Gaps one query of a page reads again (two parameters each: below SQLite's oldest limit).
_GAP_RANGES = 200
#: How many times one write of a group commit is run when it conflicts with another
#: transaction (a deadlock), before its caller gets the (retryable) error.
_TRIES = 4
#: The meta table's key for when a worker last began taking jobs (no schema change: a row).
_WORKER_SEEN = "worker_seen"


class _Pending:
    """A write waiting for (or in) a group commit: what to run, and what it gave."""

    __slots__ = ("action", "announced", "done", "error", "taken", "value", "work")

    def __init__(self, action: str, work: Callable[[Jobs], object]) -> None:
        self.action = action
        self.work = work
        self.announced: list[str] = []  # the jobs whose records it changed
        self.taken = False
        self.done = trio.Event()
        self.value: object = None
        self.error: BaseException | None = None


class Jobs:
    """The synchronous side: a connection that writes (one group commit at a time, in the
    writer thread) and one that reads (in the reader thread), on one file.

    Records are decoded once and kept, by id and revision, to check later writes against --
    never handed out: every record returned is decoded afresh. A revision names one content
    for good (writes are compare-and-swap on it, and a purged job's id is never reused), so a
    kept record is valid exactly while the stored revision is its own."""

    def __init__(
        self,
        dialect: Dialect,
        writer: Any,
        reader: Any,
        max_bytes: int,
        *,
        reconnect: Callable[[], Any] | None = None,
        notify: Callable[[Any, Sequence[str]], None] | None = None,
    ) -> None:
        self.dialect = dialect
        # Tells other processes which records changed (in the transaction, once a batch's
        # writes are done: one statement for all of them).
        self._notify = notify
        self._announcing: list[str] = []
        self._writer: Any = writer
        self._reader: Any = reader
        self._reconnect = reconnect
        self.max_bytes = max_bytes
        self._cache: OrderedDict[str, tuple[int, JobRecord]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._staged: list[tuple[str, int, JobRecord | None]] = []
        #: Writes run again after conflicting with another transaction (a deadlock).
        self.conflicts = 0

    @property
    def conn(self) -> Any:
        if self._writer is None:
            raise closed()
        self._writer = self._usable(self._writer, "writer")
        return self._writer

    @property
    def reader(self) -> Any:
        if self._reader is None:
            raise closed()
        self._reader = self._usable(self._reader, "reader")
        return self._reader

    def _usable(self, conn: Any, which: str) -> Any:
        """``conn``, or a new connection in its place if it was lost (a :class:`StoreError` if
        none can be made yet: the lost one stays, and the next call tries again)."""
        if self._reconnect is None or not self.dialect.broken(conn):
            return conn
        fresh = self._reconnect()
        conn.close()
        log.warning("run store: reconnected its %s connection", which)
        return fresh

    def _x(self, conn: Any, sql: str, arguments: Sequence[object] = ()) -> Any:
        """Execute ``sql`` (written for SQLite, with the dialect's words for the rest) on
        ``conn``; the cursor."""
        return conn.execute(self.dialect.sql(sql), arguments)

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
        self._staged.clear()
        try:
            conn = self.conn
            self._x(conn, self.dialect.begin)
        except StoreError as exc:  # the connection was lost and cannot be made again yet
            for item in batch:
                item.error = exc
            return
        except self.dialect.error as exc:
            for item in batch:
                item.error = self.dialect.translate(exc, item.action)
            return
        try:
            for item in batch:
                self._announcing = item.announced
                self._one(conn, item)
            if self._notify is not None:
                changed = [id for item in batch if item.error is None for id in item.announced]
                if changed:
                    self._notify(conn, changed)
            self._x(conn, "COMMIT")
        except BaseException as exc:
            self.dialect.rollback(conn)
            self._staged.clear()
            if not isinstance(exc, self.dialect.error):  # pragma: no cover - not past savepoints
                raise
            for item in batch:
                item.value, item.error = None, self.dialect.translate(exc, item.action)
                item.announced.clear()
            return
        self._apply_staged()

    def _one(self, conn: Any, item: _Pending) -> None:
        """Run ``item``'s write in a savepoint: all of it, or (rolled back) none with its error.
        A write that conflicts with another transaction (a deadlock: the rows of a group commit
        are locked in no global order) is run again, a few times."""
        staged = len(self._staged)
        for attempt in range(1, _TRIES + 1):
            self._x(conn, "SAVEPOINT op")
            try:
                item.value = item.work(self)
            except Exception as exc:
                item.announced.clear()
                del self._staged[staged:]
                self._x(conn, "ROLLBACK TO op")
                self._x(conn, "RELEASE op")
                if not isinstance(exc, self.dialect.error):
                    item.error = exc
                    return
                if self.dialect.conflict(exc) and attempt < _TRIES:
                    self.conflicts += 1
                    continue
                item.error = self.dialect.translate(exc, item.action)
                return
            # (Not released: a savepoint of the same name is made for the next write, and
            # ROLLBACK TO always finds the latest. One round trip fewer a write; the commit
            # ends them all.)
            return

    # -- writes (each runs inside a group commit's transaction) ---------------------------------

    def _numbers(self, name: str, count: int) -> list[int]:
        """``count`` new ascending numbers from the counter ``name``, never given before."""
        if self.dialect.numbers is not None:
            return self.dialect.numbers(self.conn, name, count)
        first = self._counter(name, count)
        return list(range(first, first + count))

    def _counter(self, name: str, take: int) -> int:
        """Take ``take`` numbers from the counter ``name`` (in the meta table); the first."""
        conn = self.conn
        row = self._x(
            conn, f"SELECT value FROM {_META} WHERE key = ? FOR_UPDATE", (name,)
        ).fetchone()
        first = int(row[0]) if row is not None else 1
        if take:
            self._x(
                conn,
                f"INSERT INTO {_META} (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (name, str(first + take)),
            )
        return first

    def _stored(self, id: str) -> JobRecord | None:
        row = self._x(
            self.conn, f"SELECT revision, RECORD_TEXT FROM {JOBS} WHERE id = ? FOR_UPDATE", (id,)
        ).fetchone()
        return None if row is None else self._cached(id, int(row[0]), row[1])

    def _store(self, record: JobRecord, *, insert: bool = False, announce: bool = True) -> str:
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
            record.cancel_requested,
        )
        if insert:
            self._x(
                self.conn,
                f"INSERT INTO {JOBS} (status, record, revision, holder, held, until, thread, "
                "rank, cancel, id, key, sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*columns, record.id, record.key, record.sequence),
            )
        else:
            self._x(
                self.conn,
                f"UPDATE {JOBS} SET status = ?, record = ?, revision = ?, holder = ?, held = ?, "
                "until = ?, thread = ?, rank = ?, cancel = ? WHERE id = ?",
                (*columns, record.id),
            )
        # (Not kept: ``record`` may share parts with the caller's objects. The next check of
        # this job decodes what was stored.)
        if announce:
            self._announcing.append(record.id)
        return text

    def _tombstone(
        self, conn: Any, *, id: str | None = None, key: str | None = None
    ) -> Tombstone | None:
        column, value = ("id", id) if id is not None else ("key", key)
        row = self._x(
            conn, f"SELECT id, key, purged_at FROM {TOMBSTONES} WHERE {column} = ?", (value,)
        ).fetchone()
        return None if row is None else Tombstone(str(row[0]), row[1], float(row[2]))

    def admit(self, job: AgentJob, now: float, key: str | None, priority: Priority) -> Admitted:
        conn = self.conn
        if key is not None:
            self.dialect.serialize(conn, key)  # two admissions of one key, one after the other
            stone = self._tombstone(conn, key=key)
            if stone is not None:
                raise purged_key(key, stone)
            row = self._x(
                conn, f"SELECT id, RECORD_TEXT FROM {JOBS} WHERE key = ?", (key,)
            ).fetchone()
            if row is not None:
                return Admitted(decode_record(str(row[0]), row[1]), False)
        records = admit_tree(
            job,
            ids=iter(new_id, None),
            sequences=self._numbers("job_sequence", _size(job)),
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
        self._store(transition.record, announce=noticeable(stored, transition.record))
        return True

    def acquire(self, owner: str, lease: float, now: float) -> JobRecord | None:
        conn = self.conn
        # A running job whose lease expired comes first (its worker is presumed dead), then the
        # queued ones by rank and admission order: a page at a time, each page looked at with
        # what decides whether its jobs may run (their children, their threads' other jobs).
        # Pages are read without locks; only the job chosen is locked, skipped when another
        # worker has it locked or changed it since (so a worker holds no row it does not take,
        # and waits on none).
        expired = self._x(
            conn,
            f"SELECT id, revision, RECORD_TEXT FROM {JOBS} "
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
                    if candidate not in page or not self._lock(candidate):
                        continue
                    execution = (
                        self._numbers("job_execution", 1)[0] if candidate.execution is None else 0
                    )
                    taken = acquire(
                        candidate, owner=owner, now=now, lease=lease, execution=execution
                    )
                    if isinstance(taken, Applied):
                        self._store(taken.record, announce=False)
                        # The caller's alone from here: the kept copy it was made from goes.
                        self._staged.append((candidate.id, 0, None))
                        return taken.record
            queued = self._rows(
                self._x(
                    conn,
                    f"SELECT id, revision FROM {JOBS} WHERE status = 'queued' "
                    "ORDER BY rank, sequence LIMIT ? OFFSET ?",
                    (_PAGE, offset),
                ).fetchall()
            )
            offset += _PAGE
            if queued:
                pages.append(queued)
        return None

    def note_worker(self, now: float) -> None:
        """Record that a worker began taking jobs at ``now``."""
        self._x(
            self.conn,
            f"INSERT INTO {_META} (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (_WORKER_SEEN, repr(now)),
        )

    def _rows(self, keys: Sequence[tuple[object, object]]) -> list[tuple[object, object, Any]]:
        """``(id, revision, text)`` for each ``(id, revision)``: the text read only for those
        not kept decoded at that revision (a page of queued jobs is mostly ones looked at
        before; their records need not cross the wire again). ``text`` is ``None`` for a kept
        one (:meth:`_cached` does not read it then)."""
        with self._cache_lock:
            missing = [
                str(id)
                for id, revision in keys
                if (hit := self._cache.get(str(id))) is None or hit[0] != int(str(revision))
            ]
        texts: dict[str, tuple[object, Any]] = {}
        if missing:
            rows = self._x(
                self.conn,
                f"SELECT id, revision, RECORD_TEXT FROM {JOBS} "
                f"WHERE id IN ({', '.join('?' for _ in missing)})",
                missing,
            ).fetchall()
            texts = {str(id): (revision, text) for id, revision, text in rows}
        out: list[tuple[object, object, Any]] = []
        for id, revision in keys:
            if str(id) in texts:
                out.append((id, *texts[str(id)]))  # (as read now: it may have moved on)
            elif str(id) not in missing:
                out.append((id, revision, None))
        return out

    def _lock(self, record: JobRecord) -> bool:
        """Lock ``record``'s row for this transaction, if no other holds it and it is still at
        ``record``'s revision."""
        row = self._x(
            self.conn, f"SELECT revision FROM {JOBS} WHERE id = ? SKIP_LOCKED", (record.id,)
        ).fetchone()
        return row is not None and int(row[0]) == record.revision

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
            rows += self._x(
                conn,
                f"SELECT id, revision, RECORD_TEXT FROM {JOBS} "
                f"WHERE id IN ({', '.join('?' for _ in chunk)})",
                chunk,
            ).fetchall()
        for thread in threads:
            rows += self._x(
                conn,
                f"SELECT id, revision, RECORD_TEXT FROM {JOBS} "
                "WHERE thread = ? AND status IN (?, ?, ?)",
                (thread, *_LIVE),
            ).fetchall()
        for id, revision, text in rows:
            if str(id) not in seen:
                seen.add(str(id))
                extra.append(self._cached(str(id), int(str(revision)), text))
        return [*page, *extra]

    def append(
        self, id: str, holder: Lease, texts: Sequence[str], then: Applied | None, crossing: bool
    ) -> None:
        conn = self.conn
        # One query checks the fence (and, for entries that would start new work, that no
        # cancel was requested: protocols.jobs.may_append), learns where the journal ends, and
        # locks the job's row: shared while only the journal grows (no acquisition or cancel
        # can slip between the check and the write), for update at once when the record
        # changes too (a shared lock upgraded later is how two transactions deadlock).
        lock, record = ("FOR_SHARE", "NULL") if then is None else ("FOR_UPDATE", "RECORD_TEXT")
        row = self._x(
            conn,
            f"SELECT revision, holder, held, {record}, "
            f"(SELECT COALESCE(MAX(seq), 0) FROM {JOURNAL} WHERE job = ?), cancel "
            f"FROM {JOBS} WHERE id = ? {lock}",
            (id, id),
        ).fetchone()
        if row is None:
            raise fenced(id, holder, None)
        if row[1] != holder.owner or row[2] != holder.fence:
            raise fenced(id, holder, self._stored(id))
        if crossing and row[5]:
            raise cancelled(id)
        if then is not None:
            stored = self._cached(id, int(row[0]), row[3])
            if stored.revision != then.expected:
                raise fenced(id, holder, stored)
            check_successor(stored, then.record)
            self._store(then.record, announce=noticeable(stored, then.record))
        seq = int(row[4])
        if texts:
            self._announcing.append(JOURNAL_GREW + id)  # (for the watchers of journals)
        # One multi-row INSERT a chunk: one round trip, and no driver pipeline (psycopg's
        # executemany pipelines, and a pipeline cut by a lost connection logs on its own).
        rows = [(id, seq + offset, text) for offset, text in enumerate(texts, start=1)]
        for start in range(0, len(rows), _INSERT_ROWS):
            chunk = rows[start : start + _INSERT_ROWS]
            self._x(
                conn,
                f"INSERT INTO {JOURNAL} (job, seq, entry) VALUES "
                + ", ".join("(?, ?, ?)" for _ in chunk),
                [value for row_ in chunk for value in row_],
            )

    def purge(self, id: str, now: float) -> Tombstone | Conflict | None:
        conn = self.conn
        row = self._x(conn, f"SELECT RECORD_TEXT FROM {JOBS} WHERE id = ? FOR_UPDATE", (id,))
        row = row.fetchone()
        if row is None:
            return self._tombstone(conn, id=id)
        outcome = purge(decode_record(id, row[0]), now=now)
        if isinstance(outcome, Tombstone):
            self._x(conn, f"DELETE FROM {JOURNAL} WHERE job = ?", (id,))
            self._x(conn, f"DELETE FROM {JOBS} WHERE id = ?", (id,))
            self._x(
                conn,
                f"INSERT INTO {TOMBSTONES} (id, key, purged_at) VALUES (?, ?, ?)",
                (outcome.id, outcome.key, outcome.purged_at),
            )
            self._staged.append((id, 0, None))
            self._announcing.append(id)
        return outcome

    # -- reads (each one statement: one consistent snapshot) ------------------------------------

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

    def close(self) -> None:
        for name in ("_reader", "_writer"):
            conn = getattr(self, name)
            setattr(self, name, None)
            if conn is not None:
                conn.close()


def _size(job: AgentJob) -> int:
    return 1 + sum(_size(child) for child in job.children)


class SQLRunStore:
    """A :class:`~actors.durable.RunStore` over SQL (see the module docstring); its subclasses
    open it on one database or the other.

    Writes run in the store's writer thread, grouped: the writes asked for while one commit is
    in progress are committed together by the next (each still all-or-nothing on its own), so
    many jobs running at once share each commit's cost -- its ``fsync`` with ``durable=True``.
    Reads run in a reader thread of their own, beside the writes. A write already taken by a
    commit is never abandoned half-way: it commits, and a cancellation is delivered afterwards.
    """

    def __init__(self, jobs: Jobs, path: str) -> None:
        """Use the subclass's ``open``."""
        self._jobs = jobs
        self._writer = Lane(f"run store writer {path}")
        self._reader = Lane(f"run store reader {path}")
        self._closing = False
        self._pending: list[_Pending] = []
        self._announcer = Announcer()
        self._committing = False
        self._committed = trio.Event()
        self._worker_noted = False
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

    async def _read(self, action: str, work: Callable[[Jobs], _R]) -> _R:
        if self._closing:
            raise closed()
        jobs = self._jobs

        dialect = jobs.dialect

        def call() -> _R:
            try:
                return work(jobs)
            except dialect.error as exc:
                raise dialect.translate(exc, action) from exc

        return await self._reader.run(call)

    async def _run(self, action: str, work: Callable[[Jobs], _R]) -> _R:
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
        """Commit every write waiting now, together, in the writer thread. Each write's outcome
        goes to its own caller; only this task's own cancellation is raised here (once the
        commit has ended), never handed to the others of the batch."""
        self._committing = True
        batch, self._pending = self._pending, []
        for item in batch:
            item.taken = True

        def commit() -> None:
            try:
                self._jobs.commit(batch)
            except BaseException as exc:  # commit() reports through the items; a bug, if here
                for item in batch:
                    item.value, item.error = None, exc
                    item.announced.clear()

        try:
            # Shielded: a cancel of this task must not stop the commit from being handed to the
            # writer (the lane checks for one before it takes a call) -- the batch holds other
            # callers' writes, which would end with no outcome. The cancel lands afterwards.
            with trio.CancelScope(shield=True):
                await self._writer.run(commit)
            await trio.lowlevel.checkpoint_if_cancelled()
        finally:
            self._committing = False
            committed, self._committed = self._committed, trio.Event()
            for item in batch:
                item.done.set()
            committed.set()
            self._announcer.announce(
                id for item in batch if item.error is None for id in item.announced
            )

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
        thread: str | None = None,
    ) -> builtins.list[JobRecord]:
        """See :meth:`RunStore.list <actors.durable.RunStore.list>`."""
        wanted = None if statuses is None else tuple(JobStatus(s).value for s in statuses)
        check_limit(limit)
        check_after(after)
        if thread is not None:
            check_id(thread, "a thread")
        return await self._read(
            "listing jobs", lambda jobs: jobs.list(wanted, after, limit, thread)
        )

    async def page(
        self, cursor: JobCursor | None = None, *, limit: int = 100, now: float | None = None
    ) -> JobPage:
        """See :meth:`RunStore.page <actors.durable.RunStore.page>`: one read (one snapshot)
        for the rows after the cursor, those in its gaps, and the horizon."""
        start = check_cursor(cursor)
        check_limit(limit)
        moment = time.time() if now is None else check_time(now)
        gaps = [(gap.first, gap.last) for gap in start.gaps]
        fresh, found, horizon = await self._read(
            "reading a page of jobs", lambda jobs: jobs.page(start.position, gaps, limit)
        )
        return next_page(start, fresh, found, now=moment, limit=limit, horizon=horizon)

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
        noting = not self._worker_noted  # the first of this store: see worker_seen

        def work(jobs: Jobs) -> JobRecord | None:
            if noting:
                jobs.note_worker(moment)
            return jobs.acquire(owner, held, moment)

        taken = await self._run("acquiring a job", work)
        self._worker_noted = True
        return taken

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
        crossing = crosses(entries)
        await self._run(
            f"appending to the journal of job {id}",
            lambda jobs: jobs.append(id, holder, texts, then, crossing),
        )

    async def journal(self, id: str, *, after: int = 0) -> builtins.list[Entry]:
        """See :meth:`RunStore.journal <actors.durable.RunStore.journal>`."""
        check_id(id)
        check_position(after)
        return await self._read(
            f"reading the journal of job {id}", lambda jobs: jobs.journal(id, after)
        )

    async def timed_journal(self, id: str, *, after: int = 0) -> builtins.list[tuple[Entry, float]]:
        """See :meth:`RunStore.timed_journal <actors.durable.RunStore.timed_journal>`."""
        check_id(id)
        check_position(after)
        return await self._read(
            f"reading the journal of job {id}", lambda jobs: jobs.timed_journal(id, after)
        )

    async def purge(self, id: str, *, now: float | None = None) -> Tombstone | Conflict | None:
        """See :meth:`RunStore.purge <actors.durable.RunStore.purge>`."""
        check_id(id)
        moment = time.time() if now is None else check_time(now)
        return await self._run(f"purging job {id}", lambda jobs: jobs.purge(id, moment))

    async def purged(self, id: str) -> Tombstone | None:
        """See :meth:`RunStore.purged <actors.durable.RunStore.purged>`."""
        check_id(id)
        return await self._read(f"reading the tombstone of job {id}", lambda jobs: jobs.purged(id))

    async def worker_seen(self) -> float | None:
        """When a worker last began taking jobs from this store (UNIX time), or ``None`` if
        none ever has: the first :meth:`acquire` of each store opened on the database records
        its time, in the transaction that acquires -- a job queue's worker acquires as it
        starts. (``trio-agents jobs submit`` warns when it is ``None``.)"""
        return await self._read("reading the store's meta data", lambda jobs: jobs.worker_seen())

    def watch(self, *, journals: bool = False) -> Watch:
        """See :meth:`RunStore.watch <actors.durable.RunStore.watch>`: this store's own
        commits (a subclass may add other processes')."""
        return self._announcer.watch(journals=journals)

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
