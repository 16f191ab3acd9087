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

Each connection is a :class:`_Connection`, which counts the statements it runs (one round
trip each): :meth:`PostgresRunStore.statistics`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import trio

from protocols.errors import ValidationError
from protocols.jobs import Horizon
from protocols.messages import new_id

from .._postgres import STALL_TIMEOUT, check_url, connect, redacted, translate_error
from .._sqlite import JOBS, open_in_worker
from ._sql_store import Dialect, Jobs, SQLRunStore
from ._store import DEFAULT_MAX_BYTES, check_seconds

__all__ = ["PostgresRunStore", "dialect"]

log = logging.getLogger("actors.store")


#: Seconds ``open`` waits for the store's listener to listen.
LISTENING = 10.0


class _Counts:
    """Statements run and round trips made, by one thread (its only writer)."""

    __slots__ = ("round_trips", "statements")

    def __init__(self) -> None:
        self.statements = 0
        self.round_trips = 0


class _Tally:
    """A store's :class:`_Counts`, one per thread that runs statements (so none is lost to two
    threads adding at once), and their sums."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[_Counts] = []

    def mine(self) -> _Counts:
        """The calling thread's counts."""
        counts: _Counts | None = getattr(self._local, "counts", None)
        if counts is None:
            counts = self._local.counts = _Counts()
            with self._lock:
                self._all.append(counts)
        return counts

    def total(self) -> dict[str, int]:
        """Statements and round trips so far, by every thread."""
        with self._lock:
            every = list(self._all)
        return {
            "statements": sum(counts.statements for counts in every),
            "round_trips": sum(counts.round_trips for counts in every),
        }


class _Connection:
    """A psycopg connection that counts the statements it runs (each its own round trip) in
    ``tally``; the rest is psycopg's. Only ever used by one thread at a time (the store's
    writer, or its reader)."""

    __slots__ = ("_conn", "tally")

    def __init__(self, conn: Any, tally: _Tally) -> None:
        self._conn = conn
        self.tally = tally

    def execute(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """Run ``query``: psycopg's cursor."""
        counts = self.tally.mine()
        counts.statements += 1
        counts.round_trips += 1
        return self._conn.execute(query, params)

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    @property
    def broken(self) -> bool:
        return bool(self._conn.broken)

    def close(self) -> None:
        self._conn.close()


def _error() -> type[Exception]:
    from .._postgres import _psycopg  # noqa: PLC0415 - psycopg is optional

    error: type[Exception] = _psycopg().Error
    return error


def _rollback(conn: Any) -> None:
    if conn.closed or conn.broken:
        return
    with contextlib.suppress(Exception):
        conn.execute("ROLLBACK")


def _serialize(conn: Any, key: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))


def _broken(conn: Any) -> bool:
    return bool(conn.closed or conn.broken)


def _numbers(conn: Any, name: str, count: int) -> list[int]:
    # A sequence takes no lock that lasts to the commit: concurrent workers' transactions never
    # wait on one another for a number (the counter row they once shared was the usual party
    # to their deadlocks). Numbers are ascending and never given twice; a rolled-back
    # transaction leaves a hole, and two transactions may commit theirs out of order -- which
    # a page of jobs copes with (_page). The schema's function gives the transaction its id
    # before it takes the numbers: what _page's proof rests on.
    rows = conn.execute(
        "SELECT trio_agents_take_numbers(%s::regclass, %s)", (f"trio_agents_{name}", count)
    ).fetchall()
    return sorted(int(row[0]) for row in rows)


# One statement, so one snapshot: the jobs after the position, those in the gaps, and the
# snapshot's xmin (every transaction below it had ended) and xmax (every transaction that had
# begun is below it).
_PAGE_QUERY = (
    "SELECT 0, sequence, id, record FROM ("
    f"SELECT sequence, id, record FROM {JOBS} WHERE sequence > %s ORDER BY sequence LIMIT %s"
    ") AS fresh "
    f"UNION ALL SELECT 1, j.sequence, j.id, j.record FROM {JOBS} AS j "
    "JOIN unnest(%s::bigint[], %s::bigint[]) AS g(lo, hi) ON j.sequence BETWEEN g.lo AND g.hi "
    "UNION ALL SELECT 2, pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text, NULL "
    "FROM pg_current_snapshot() AS s"
)


def _page(
    conn: Any, position: int, gaps: Sequence[tuple[int, int]], limit: int
) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]], Horizon]:
    """A page's read, safe against numbers that commit out of order.

    A number missing below a row this read returns was taken before that row's number (a
    sequence gives them in time order), so by a transaction that had its id by then
    (``trio_agents_take_numbers``), before this snapshot: below its xmax. Once a later read's
    xmin passes that xmax, the transaction has ended, and a number still missing is a hole for
    good (rolled back, or purged) -- :class:`~protocols.jobs.Horizon`. The rows are never held
    back for a transaction still running (it could be anyone's, for hours): the cursor passes
    them and keeps the missing numbers as gaps, read again by the next page.
    """
    rows = conn.execute(
        _PAGE_QUERY,
        (position, limit, [gap[0] for gap in gaps], [gap[1] for gap in gaps]),
    ).fetchall()
    fresh: list[tuple[int, Any, Any]] = []
    found: list[tuple[Any, Any]] = []
    horizon = None
    for part, sequence, id, record in rows:
        if part == 0:
            fresh.append((int(sequence), id, record))
        elif part == 1:
            found.append((id, record))
        else:
            horizon = Horizon(int(sequence), int(id))
    assert horizon is not None  # (the snapshot's row is always there)
    fresh.sort()  # (UNION ALL promises no order)
    return [(id, record) for _, id, record in fresh], found, horizon


def _conflict(exc: Exception) -> bool:
    from .._postgres import _psycopg  # noqa: PLC0415 - psycopg is optional

    errors = _psycopg().errors
    return isinstance(exc, errors.DeadlockDetected | errors.SerializationFailure)


def channel(schema: str) -> str:
    """The notification channel of the store in ``schema`` (at most 63 bytes)."""
    name = f"trio_agents_{schema}"
    if len(name) <= 63:
        return name
    return "trio_agents_" + hashlib.sha256(schema.encode()).hexdigest()[:32]


class _Listener:
    r"""A thread of its own, on a connection of its own, that ``LISTEN``\ s to the store's
    channel and hands each committed change (a job id) to the store's watchers. When its
    connection is lost it reconnects with backoff and then tells the watchers that anything
    may have changed meanwhile (notifications sent while it was away are lost)."""

    #: Longest pause between two reconnection attempts (seconds).
    BACKOFF = 5.0

    def __init__(
        self, connect: Callable[[], Any], name: str, deliver: Callable[[list[str] | None], None]
    ) -> None:
        self._connect = connect
        self._name = name
        self._deliver = deliver
        self._stop = threading.Event()
        #: Set once it first listens: every change committed after that is heard.
        self.listening = threading.Event()
        self.reconnects = 0
        self._thread = threading.Thread(target=self._serve, name=f"listener {name}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        pause = 0.05
        first = True
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                conn.execute(f'LISTEN "{self._name}"')
                self.listening.set()
                if not first:
                    # What was sent while it was away is lost: anything may have changed.
                    self.reconnects += 1
                    log.warning("run store: its listener reconnected; looking at every job")
                    self._deliver(None)
                first, pause = False, 0.05
                while not self._stop.is_set():
                    # Handed over as each arrives (the timeout only bounds how long a stop
                    # waits to be seen).
                    ids = [note.payload for note in conn.notifies(timeout=0.2, stop_after=1)]
                    if ids:
                        self._deliver(ids)
            except Exception as exc:  # a lost connection, a server restarting: try again
                log.warning("run store: its listener lost its connection (%s)", type(exc).__name__)
                self._stop.wait(pause)
                pause = min(pause * 2, self.BACKOFF)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()

    def close(self) -> None:
        """Stop listening (within a fraction of a second)."""
        self._stop.set()


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
        serialize=_serialize,
        broken=_broken,
        conflict=_conflict,
        numbers=_numbers,
        page=_page,
        execution="nextval('trio_agents_job_execution')",
        take_number="trio_agents_take_numbers('trio_agents_job_sequence'::regclass, 1)",
        modifying_with=True,
        late_begin=True,
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
        create: bool = True,
        stall_timeout: float = STALL_TIMEOUT,
    ) -> PostgresRunStore:
        """Connect to the database at ``url`` (``postgresql://...``) and make the store's schema
        current in ``schema`` (created if missing). Raises :class:`~actors.store.StoreError`
        when the database cannot be used (``code="unsupported"`` without psycopg,
        ``"schema"`` for a schema newer than this code, ``"io"`` when it cannot be reached).
        ``create=False`` creates nothing -- neither ``schema`` nor the store's tables in it --
        and raises ``code="missing"`` where there is no store (a mistyped schema name).

        ``stall_timeout``: the longest this process may leave one of the store's transactions
        waiting on it between statements -- stopped (``SIGSTOP``, a debugger), frozen or
        swapped out -- before the database ends that transaction and its connection. Until
        then the rows it locked stay locked, and no other worker can take over the jobs they
        are (its leases expired or not); so a job held by a stopped process is taken over at
        most ``stall_timeout`` seconds after its lease expires. The process, once it goes on,
        finds its connection gone, connects again, and its writes for jobs taken over are
        refused as fenced. (A transaction of the store's waits on it only for the Python
        between two statements.)"""
        target = check_url(url)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationError(f"max_bytes must be an integer >= 1, not {max_bytes!r}")
        stall = check_seconds(stall_timeout, "stall_timeout")
        where = redacted(target)

        name = channel(schema)
        # A notification says which store sent it: a store hears its own changes as it
        # commits them, and its listener skips them.
        sender = new_id()[:12]

        def open_database() -> Jobs:
            used = dialect()
            # The database announces what the writer changes (its triggers), as sent by it.
            writer = connect(target, schema, create=create, sender=sender, stall_timeout=stall)
            try:
                reader = connect(target, schema, migrate=False, sender=sender, stall_timeout=stall)
            except BaseException:
                writer.close()
                raise
            return Jobs(
                used,
                _Connection(writer, tally),
                _Connection(reader, tally),
                max_bytes,
                reconnect=lambda: _Connection(
                    connect(target, schema, migrate=False, sender=sender, stall_timeout=stall),
                    tally,
                ),
            )

        tally = _Tally()

        jobs = await open_in_worker(open_database, Jobs.close, trio.CapacityLimiter(1))
        log.debug("opened run store %s (schema %s)", where, schema)
        store = cls(jobs, f"{where} ({schema})")
        store._tally = tally
        token = trio.lowlevel.current_trio_token()

        def deliver(payloads: list[str] | None) -> None:
            ids = None
            if payloads is not None:
                ids = [
                    id
                    for by, _, rest in (p.partition(" ") for p in payloads)
                    if by != sender
                    for id in rest.split()
                ]
                if not ids:
                    return
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(store._announcer.announce, ids)

        store._listener = listener = _Listener(
            lambda: connect(target, schema, migrate=False), name, deliver
        )
        # Returned once it listens (every change committed from then on is heard), or -- when
        # the listener cannot connect yet -- after LISTENING seconds, the poll covering for it
        # until it does (it goes on trying).
        try:
            await trio.to_thread.run_sync(
                listener.listening.wait, LISTENING, abandon_on_cancel=True
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await store.aclose()
            raise
        return store

    _listener: _Listener | None = None
    _tally: _Tally | None = None

    def statistics(self) -> dict[str, int]:
        """How often the listener for other processes' changes had to reconnect
        (``listener_reconnects``), how many writes were run again after a deadlock with
        another worker's transaction (``write_conflicts``), and how many statements the store's
        writer and reader connections ran (``statements``) in how many round trips
        (``round_trips``) since it was opened (its listener's aside)."""
        counted = self._tally.total() if self._tally is not None else {}
        return {
            "listener_reconnects": self._listener.reconnects if self._listener else 0,
            "write_conflicts": self._jobs.conflicts,
            "statements": counted.get("statements", 0),
            "round_trips": counted.get("round_trips", 0),
        }

    async def aclose(self) -> None:
        """Stop listening, then close as every SQL store does (idempotent)."""
        if self._listener is not None:
            self._listener.close()
        await super().aclose()
