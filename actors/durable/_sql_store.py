"""The run store over SQL, shared by :class:`~actors.durable.SQLiteRunStore` and
:class:`~actors.durable.PostgresRunStore`: :class:`SQLRunStore`, its trio side -- the argument
checks, the group commit and the two threads. The queries and the record cache (:class:`Jobs`)
and what differs between the two databases (:class:`Dialect`) are in
:mod:`actors.durable._sql_jobs`, and importable from here.

Writes run in a writer thread of the store's own, grouped: the writes asked for while a commit
is in progress are committed together by the next, each in a savepoint of its own (all or
nothing on its own). Reads run on a second connection, in a reader thread. Both databases are
driven through their blocking drivers (``sqlite3``, psycopg's blocking API) in those threads --
never asyncio -- and a call already given to a thread is never abandoned: it ends, and a cancel
lands afterwards, so no connection is ever left mid-statement.
"""

from __future__ import annotations

import builtins
import logging
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
    JobCursor,
    JobPage,
    JobRecord,
    JobStatus,
    Lease,
    Priority,
    Tombstone,
    crosses,
    next_page,
)

from .._sqlite import Lane, translated
from ._sql_jobs import Dialect, Jobs, _Pending
from ._store import (
    Admitted,
    Announcer,
    Watch,
    check_acquisition,
    check_admission,
    check_after,
    check_append,
    check_cursor,
    check_id,
    check_limit,
    check_position,
    check_time,
    closed,
)

__all__ = ["Dialect", "Jobs", "SQLRunStore"]

log = logging.getLogger("actors.store")

_R = TypeVar("_R")
_S = TypeVar("_S", bound="SQLRunStore")


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
        taken = await self.acquire_many(owner=owner, lease=lease, now=now, limit=1)
        return taken[0] if taken else None

    async def acquire_many(
        self, *, owner: str, lease: float, now: float | None = None, limit: int
    ) -> builtins.list[JobRecord]:
        """See :meth:`RunStore.acquire_many <actors.durable.RunStore.acquire_many>`."""
        held, moment, count = check_acquisition(owner, lease, now, limit)
        noting = not self._worker_noted  # the first of this store: see worker_seen

        def work(jobs: Jobs) -> builtins.list[JobRecord]:
            if noting:
                jobs.note_worker(moment)
            return jobs.acquire(owner, held, moment, count)

        taken = await self._run("acquiring jobs" if count > 1 else "acquiring a job", work)
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
        texts = check_append(id, entries, then, self._jobs.max_bytes)
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
