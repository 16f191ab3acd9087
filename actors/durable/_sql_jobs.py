"""The synchronous side of the run store over SQL (see :mod:`actors.durable._sql_store`):
:class:`Jobs`, the queries a store runs on its two connections -- the writes, inside a group
commit's transaction (admission, compare-and-swap writes, acquisition, journal appends,
purges; each in a savepoint of its own only once one of the batch has failed), the reads
(:mod:`._sql_reads`), one statement each, and the cache of records writes are checked against.
What differs between SQLite and PostgreSQL is a :class:`~._sql_dialect.Dialect`. Everything
here runs in the store's writer or reader thread, never in trio's."""

from __future__ import annotations

import builtins
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
import trio

from protocols.errors import ValidationError
from protocols.jobs import (
    AgentJob,
    Applied,
    Conflict,
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

from .._sqlite import _META, JOBS, JOURNAL, TOMBSTONES, StoreError
from ._sql_dialect import Dialect
from ._sql_reads import _WORKER_SEEN, Reads
from ._store import (
    JOURNAL_GREW,
    Admitted,
    Taken,
    cancelled,
    check_successor,
    closed,
    decode_record,
    encode_checked,
    fenced,
    noticeable,
    purged_key,
)

__all__ = ["Dialect", "Jobs"]

log = logging.getLogger("actors.store")

_R = TypeVar("_R")

_LIVE = ("queued", "running", "awaiting_input")


#: Live jobs examined per query when looking for one to acquire: the first page (read with the
#: expired leases, and their records' texts), and each one after it.
_FIRST_PAGE = 8
_PAGE = 64
#: Decoded records kept to check writes against (by id, with their revision).
_CACHED = 4096
#: Journal entries a single INSERT carries (three parameters each: far below both databases'
#: limits on parameters).
_INSERT_ROWS = 500
#: How many times one write of a group commit is run when it conflicts with another
#: transaction (a deadlock), before its caller gets the (retryable) error.
_TRIES = 4


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


class Jobs(Reads):
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
    ) -> None:
        self.dialect = dialect
        self._announcing: list[str] = []
        self._writer: Any = writer
        self._reader: Any = reader
        self._reconnect = reconnect
        self.max_bytes = max_bytes
        # A record kept decoded, or as the text this store wrote (decoded when first needed).
        self._cache: OrderedDict[str, tuple[int, JobRecord | bytes | str]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._staged: list[tuple[str, int, JobRecord | bytes | str | None]] = []
        # The group commit's transaction is still to begin (see Dialect.late_begin); and, if
        # so, whether one statement may be the whole batch's transaction.
        self._late = False
        self._alone = False
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

    def _x(
        self,
        conn: Any,
        sql: str,
        arguments: Sequence[object] = (),
        *,
        unlocked: bool = False,
        last: bool = False,
    ) -> Any:
        """Execute ``sql`` (written for SQLite, with the dialect's words for the rest) on
        ``conn``; the cursor. On the writer, inside the group commit's transaction -- begun
        now if it was left to begin late, unless ``sql`` is a read that takes no lock
        (``unlocked``), or the last statement of the batch's only write (``last``: it is a
        transaction on its own)."""
        alone = last and self._alone
        if self._late and conn is self._writer and not unlocked and not alone:
            self._begin()
        return conn.execute(self.dialect.sql(sql), arguments)

    def _begin(self) -> None:
        """Begin the group commit's transaction, if it was left to begin late."""
        if self._late:
            self._late = False
            self._writer.execute(self.dialect.sql(self.dialect.begin))

    # -- the record cache (only ever read inside a write transaction) ---------------------------

    def _cached(self, id: str, revision: int, text: bytes | str) -> JobRecord:
        """Job ``id``'s record at ``revision``, whose stored text is ``text``: the one kept, or
        ``text`` decoded (and kept once the transaction commits)."""
        with self._cache_lock:
            hit = self._cache.get(id)
        if hit is not None and hit[0] == revision:
            if isinstance(hit[1], JobRecord):
                return hit[1]
            text = hit[1]  # (the same as stored: a revision names one content)
        record = decode_record(id, text)
        self._staged.append((id, revision, record))
        return record

    def _known(self, id: str, revision: int) -> JobRecord | None:
        """Job ``id``'s record at ``revision`` if it is kept (nothing read), else ``None``."""
        with self._cache_lock:
            hit = self._cache.get(id)
        if hit is None or hit[0] != revision:
            return None
        return self._cached(id, revision, hit[1]) if not isinstance(hit[1], JobRecord) else hit[1]

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
        """Run ``batch``'s writes in one transaction: all of them commit together, and one that
        fails is rolled back alone and gets its error.

        The writes are run first as they are, one after another (no savepoint: a write
        succeeds nearly always). Only when one fails is the transaction rolled back and the
        batch run again, each write in a savepoint of its own -- so the one that fails again
        is undone alone (a write that fails no more the second time commits)."""
        if self._attempt(batch, guarded=False):
            return
        for item in batch:
            item.value, item.error = None, None
            item.announced.clear()
        self._attempt(batch, guarded=True)

    def _attempt(self, batch: Sequence[_Pending], *, guarded: bool) -> bool:
        """One transaction of ``batch``'s writes (each in a savepoint when ``guarded``); whether
        it ended (committed, or every write given its error). ``False``: unguarded, a write
        failed and everything was rolled back -- to be run again, guarded."""
        self._staged.clear()
        self._late = False
        try:
            conn = self.conn
            if guarded or not self.dialect.late_begin:
                self._x(conn, self.dialect.begin)
            else:
                self._late, self._alone = True, len(batch) == 1
        except StoreError as exc:  # the connection was lost and cannot be made again yet
            for item in batch:
                item.error = exc
            return True
        except self.dialect.error as exc:
            for item in batch:
                item.error = self.dialect.translate(exc, item.action)
            return True
        try:
            for item in batch:
                self._announcing = item.announced
                if guarded:
                    self._one(conn, item)
                else:
                    try:
                        item.value = item.work(self)
                    except Exception as exc:
                        if not self._late:
                            self.dialect.rollback(conn)
                        self._late = False
                        self._staged.clear()
                        conflict = isinstance(exc, self.dialect.error) and self.dialect.conflict(
                            exc
                        )
                        self.conflicts += conflict
                        if len(batch) > 1 or conflict:
                            return False  # (run again, guarded: the others must commit)
                        # Alone in its batch: its error is the batch's, and nothing is left.
                        item.announced.clear()
                        item.value = None
                        item.error = (
                            self.dialect.translate(exc, item.action)
                            if isinstance(exc, self.dialect.error)
                            else exc
                        )
                        return True
            if self._late:
                self._late = False  # nothing to commit (or written on its own)
            else:
                self._x(conn, "COMMIT")
        except BaseException as exc:
            if not self._late:
                self.dialect.rollback(conn)
            self._late = False
            self._staged.clear()
            if not isinstance(exc, self.dialect.error):  # pragma: no cover - not past savepoints
                raise
            for item in batch:
                item.value, item.error = None, self.dialect.translate(exc, item.action)
                item.announced.clear()
            return True
        self._apply_staged()
        return True

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
            self._begin()  # (the numbers' transaction is the one that uses them)
            return self.dialect.numbers(self.conn, name, count)
        first = self._counter(name, count)
        return list(range(first, first + count))

    def _counter(self, name: str, take: int) -> int:
        """Take ``take`` numbers from the counter ``name`` (in the meta table); the first."""
        conn = self.conn
        if take and self.dialect.counter_returning:
            (last,) = self._x(
                conn,
                f"INSERT INTO {_META} (key, value) VALUES (?, ?) ON CONFLICT (key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + ? RETURNING value",
                (name, str(1 + take), take),
            ).fetchone()
            return int(last) - take
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

    def _columns(self, record: JobRecord) -> tuple[str, tuple[object, ...]]:
        """``record``'s text and the columns stored beside it (``status`` to ``cancel``)."""
        text = encode_checked(record, self.max_bytes, f"the record of job {record.id!r}")
        lease = record.lease
        held = (
            record.status is JobStatus.RUNNING and lease is not None and lease.fence == record.fence
        )
        return text, (
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

    def _store(
        self,
        record: JobRecord,
        *,
        insert: bool = False,
        announce: bool = True,
        expected: int | None = None,
        skip_locked: bool = False,
        last: bool = False,
    ) -> bool:
        """Write ``record`` (a new row with ``insert``); whether it was written. With
        ``expected``, only over the row at that revision -- and with ``skip_locked`` only if no
        other transaction holds the row (never waiting for one): the compare-and-swap and the
        row's lock in the one statement. ``last``: the write's last statement."""
        text, columns = self._columns(record)
        if insert:
            self._x(
                self.conn,
                f"INSERT INTO {JOBS} (status, record, revision, holder, held, until, thread, "
                "rank, cancel, id, key, sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*columns, record.id, record.key, record.sequence),
            )
        else:
            query = (
                f"UPDATE {JOBS} SET status = ?, record = ?, revision = ?, holder = ?, held = ?, "
                "until = ?, thread = ?, rank = ?, cancel = ? WHERE id = ?"
            )
            arguments: tuple[object, ...] = (*columns, record.id)
            if expected is not None:
                query += " AND revision = ?"
                arguments += (expected,)
            if skip_locked:
                query += f" AND id IN (SELECT id FROM {JOBS} WHERE id = ? SKIP_LOCKED)"
                arguments += (record.id,)
            cursor = self._x(self.conn, query, arguments, last=last)
            if expected is not None and cursor.rowcount != 1:
                return False
            # Kept as text (``record`` may share parts with the caller's objects): a later
            # write of this job is checked against it without reading it back.
            self._staged.append((record.id, record.revision, text))
        if announce:
            self._announcing.append(record.id)
        return True

    def admit(self, job: AgentJob, now: float, key: str | None, priority: Priority) -> Admitted:
        conn = self.conn
        if key is not None:
            self._begin()
            self.dialect.serialize(conn, key)  # two admissions of one key, one after the other
            stone = self._tombstone(conn, key=key)
            if stone is not None:
                raise purged_key(key, stone)
            row = self._x(
                conn, f"SELECT id, RECORD_TEXT FROM {JOBS} WHERE key = ?", (key,)
            ).fetchone()
            if row is not None:
                return Admitted(decode_record(str(row[0]), row[1]), False)
        elif self.dialect.take_number is not None and _size(job) == 1:
            numbered = self._admit_numbered(job, now, priority)
            if numbered is not None:
                return Admitted(numbered, True)
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

    def _admit_numbered(self, job: AgentJob, now: float, priority: Priority) -> JobRecord | None:
        """Admit ``job`` (no key, no children) in one statement that takes its number too (a
        transaction of its own when it is the batch's only write); the record. Its text is
        the one it encodes to with the number in place: encoded with number 0 and with 1,
        the two texts differ in that one digit alone, which the statement replaces with the
        number taken. ``None`` (nothing written) if they differ otherwise."""
        assert self.dialect.take_number is not None
        (record,) = admit_tree(
            job, ids=(new_id(),), sequences=(0,), now=now, key=None, priority=priority
        )
        text, columns = self._columns(record)
        other = self._columns(attrs.evolve(record, sequence=1))[0]
        at = next((i for i, (a, b) in enumerate(zip(text, other, strict=False)) if a != b), -1)
        if len(text) != len(other) or text[at] != "0" or text[at + 1 :] != other[at + 1 :]:
            return None
        row = self._x(
            self.conn,
            f"INSERT INTO {JOBS} (status, record, revision, holder, held, until, thread, rank, "
            "cancel, id, sequence) SELECT ?, overlay(?::text PLACING n::text FROM ?::integer "
            "FOR 1), ?, ?, ?, ?, ?, ?, ?, ?, n "
            f"FROM {self.dialect.take_number} AS n RETURNING sequence",
            (columns[0], text, at + 1, *columns[2:], record.id),
            last=True,
        ).fetchone()
        self._announcing.append(record.id)
        return attrs.evolve(record, sequence=int(row[0]))

    def write(self, transition: Applied) -> bool:
        new = transition.record
        kept = self._known(new.id, transition.expected)
        if kept is not None:
            # The record at the revision expected is known: the compare-and-swap is the write
            # (no read first). Not written: the revision moved on (or the job is gone).
            try:
                check_successor(kept, new)
            except ValidationError:
                pass  # (said as before: if the job did not move on, below)
            else:
                return self._store(
                    new, announce=noticeable(kept, new), expected=transition.expected, last=True
                )
        stored = self._stored(transition.record.id)
        if stored is None or stored.revision != transition.expected:
            return False
        check_successor(stored, transition.record)
        self._store(transition.record, announce=noticeable(stored, transition.record))
        return True

    def acquire(
        self, owner: str, lease: float, now: float, limit: int = 1
    ) -> builtins.list[JobRecord]:
        """Take up to ``limit`` jobs (fewer if fewer may run), in the order to take them."""
        conn = self.conn
        # A running job whose lease expired comes first (its worker is presumed dead), then the
        # queued ones by rank and admission order: a page at a time (the first read with the
        # expired ones, in one statement), each page looked at with what decides whether its
        # jobs may run (their children, their threads' other jobs). Pages are read without
        # locks; a job chosen is written only if no other worker has it locked nor changed it
        # since -- one statement, which skips a locked row (so a worker holds no row it does
        # not take, and waits on none). The candidates of one look are independent (one job
        # of a thread at most): taking one never makes another unfit to run.
        number_sql = self.dialect.execution
        numbers: builtins.list[int] = []
        taken = Taken(rest=True)
        seen = 0  # the jobs the look read: expired and queued
        offset, size = 0, max(_FIRST_PAGE, limit)
        while True:
            if offset == 0:
                rows = self._x(
                    conn,
                    f"SELECT 0, id, revision, RECORD_TEXT FROM {JOBS} "
                    "WHERE status = 'running' AND (until IS NULL OR until <= ?) "
                    "UNION ALL SELECT 1, id, revision, RECORD_TEXT FROM ("
                    f"SELECT id, revision, record, rank, sequence FROM {JOBS} "
                    "WHERE status = 'queued' ORDER BY rank, sequence LIMIT ?) AS page"
                    + (
                        f" UNION ALL SELECT 2, NULL, {number_sql}, NULL FROM generate_series(1, ?)"
                        if number_sql
                        else ""
                    ),
                    (now, size, limit) if number_sql else (now, size),
                    unlocked=True,
                ).fetchall()
            else:
                rows = self._x(
                    conn,
                    f"SELECT 1, id, revision, RECORD_TEXT FROM {JOBS} WHERE status = 'queued' "
                    "ORDER BY rank, sequence LIMIT ? OFFSET ?",
                    (size, offset),
                    unlocked=True,
                ).fetchall()
            page: builtins.list[JobRecord] = []
            queued = 0
            for part, id, revision, text in rows:
                if part == 2:
                    numbers.append(int(revision))  # (new execution numbers, read with the page)
                    continue
                queued += part
                page.append(self._cached(str(id), int(revision), text))
            seen += len(page)
            numbers.sort(reverse=True)  # (used smallest first)
            if page:
                mine = {record.id for record in page}
                candidates = [c for c in runnable(self._context(page), now=now) if c.id in mine]
                # A transaction of its own when at most one of its statements can write: one
                # job wanted, or one candidate and no page after this one.
                alone = limit == 1 or (len(candidates) == 1 and queued < size)
                for candidate in candidates:
                    if candidate.execution is not None:
                        execution = 0
                    elif numbers and candidate.conversation is None:
                        execution = numbers.pop()
                    else:
                        # A thread's history follows the order of its jobs' numbers: taken
                        # now, after the read that showed the jobs before it had ended.
                        execution = self._numbers("job_execution", 1)[0]
                    chosen = acquire(
                        candidate, owner=owner, now=now, lease=lease, execution=execution
                    )
                    if isinstance(chosen, Applied) and self._store(
                        chosen.record,
                        announce=False,
                        expected=candidate.revision,
                        skip_locked=True,
                        last=alone,
                    ):
                        taken.append(chosen.record)
                        if len(taken) == limit:
                            # (Anything else read, or a page after this one: a rest.)
                            taken.rest = seen > len(taken) or queued >= size
                            return taken
            if queued < size:
                taken.rest = seen > len(taken) or queued >= size  # (queued < size: all read)
                return taken
            offset += size
            size = _PAGE

    def note_worker(self, now: float) -> None:
        """Record that a worker began taking jobs at ``now``."""
        self._x(
            self.conn,
            f"INSERT INTO {_META} (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (_WORKER_SEEN, repr(now)),
        )

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
                unlocked=True,
            ).fetchall()
        for thread in threads:
            rows += self._x(
                conn,
                f"SELECT id, revision, RECORD_TEXT FROM {JOBS} "
                "WHERE thread = ? AND status IN (?, ?, ?)",
                (thread, *_LIVE),
                unlocked=True,
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
        if (
            texts
            and len(texts) <= _INSERT_ROWS
            and self._append_checked(id, holder, texts, then, crossing)
        ):
            return
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

    def _append_checked(
        self, id: str, holder: Lease, texts: Sequence[str], then: Applied | None, crossing: bool
    ) -> bool:
        """The journal append as one statement, its checks in it: the entries are inserted
        only while ``holder`` holds the job (its row locked as :meth:`append` locks it) and,
        for entries that would start new work, no cancel was requested -- and, with ``then``
        (where the dialect allows it, and the record at its expected revision is kept), only
        together with the record's compare-and-swap. Whether it was done: if not, nothing was
        written, and :meth:`append` looks at why (and raises)."""
        values = ", ".join(f"({n}, ?)" for n in range(1, len(texts) + 1))
        insert = (
            f"INSERT INTO {JOURNAL} (job, seq, entry) "
            f"SELECT ?, (SELECT COALESCE(MAX(seq), 0) FROM {JOURNAL} WHERE job = ?) + column1, "
            f"column2 FROM (VALUES {values}) AS entries"
        )
        if then is None:
            cursor = self._x(
                self.conn,
                insert + f" WHERE EXISTS (SELECT 1 FROM {JOBS} WHERE id = ? AND holder = ? "
                "AND held = ? AND NOT (cancel AND ?) FOR_SHARE)",
                (id, id, *texts, id, holder.owner, holder.fence, crossing),
                last=True,  # (all or nothing: when it writes nothing, append goes on)
            )
            if cursor.rowcount != len(texts):
                return False
        else:
            if not self.dialect.modifying_with:
                return False
            stored = self._known(id, then.expected)
            if stored is None:
                return False
            try:
                check_successor(stored, then.record)
            except ValidationError:
                return False  # (said by append, after its checks of the holder)
            text, columns = self._columns(then.record)
            cursor = self._x(
                self.conn,
                f"WITH changed AS (UPDATE {JOBS} SET status = ?, record = ?, revision = ?, "
                "holder = ?, held = ?, until = ?, thread = ?, rank = ?, cancel = ? "
                "WHERE id = ? AND revision = ? AND holder = ? AND held = ? "
                "AND NOT (cancel AND ?) RETURNING id) "
                + insert.replace("SELECT ?,", "SELECT changed.id,", 1).replace(
                    "AS entries", "AS entries, changed"
                ),
                (*columns, id, then.expected, holder.owner, holder.fence, crossing, id, *texts),
                last=True,
            )
            if cursor.rowcount != len(texts):
                return False
            self._staged.append((id, then.record.revision, text))
            if noticeable(stored, then.record):
                self._announcing.append(id)
        self._announcing.append(JOURNAL_GREW + id)  # (for the watchers of journals)
        return True

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

    def close(self) -> None:
        for name in ("_reader", "_writer"):
            conn = getattr(self, name)
            setattr(self, name, None)
            if conn is not None:
                conn.close()


def _size(job: AgentJob) -> int:
    return 1 + sum(_size(child) for child in job.children)
