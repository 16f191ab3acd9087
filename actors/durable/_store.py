"""Run stores: where durable jobs -- their records and journals -- are kept.

:class:`RunStore` is the port every store implements; :class:`MemoryRunStore` (tests, processes
that keep nothing) and :class:`~actors.durable.SQLiteRunStore` (the embedded default, safe for
several processes on one file) are the adapters. The state machine itself is pure and lives in
:mod:`protocols.jobs`; a store applies its transitions with compare-and-swap.

Guarantees of every store (the contract suite in ``tests/actors/durable/test_run_store.py``
checks them against each):

* ``admit`` returns only once the job -- and its declared children, admitted before it -- is
  durable. A key names one job forever: admitting with a key already used returns that job
  (``created=False``), whatever its state; a key whose job was purged is refused
  (:class:`~actors.store.StoreError` ``code="purged"``).
* ``write`` applies a transition only if the stored revision is the one it was computed from: of
  two writers racing from one revision exactly one wins; the loser changes nothing.
* ``acquire`` takes the first job :func:`protocols.jobs.runnable` orders first, atomically: two
  workers never acquire one job at once.
* ``append`` adds journal entries only while the writer's lease holds the job (its fence is the
  job's): otherwise it raises ``code="fenced"`` and nothing is written. Entries that would start
  new work (a provider call, a tool call's effect: :func:`protocols.jobs.crosses`) are refused
  with ``code="cancelled"`` once a cancel was requested, checked in the append's own
  transaction (:func:`protocols.jobs.may_append`): no work starts after a cancel is
  acknowledged, in any process. With ``then``, the record's transition is written in the same
  transaction.
* ``purge`` removes an ended job's record and journal at once, leaving a tombstone.
* ``page`` returns every job committed exactly once to a chain of cursors
  (:class:`protocols.jobs.JobCursor`), also a job whose number committed after a higher one was
  read (PostgreSQL): the page says what it knows of the transactions still running
  (:class:`protocols.jobs.Horizon`) in the same consistent read as its rows.
* Records and entries come back decoded afresh: no caller object is ever shared with the store.
"""

from __future__ import annotations

import builtins
import math
import time
from collections.abc import Iterable, Sequence
from typing import Final, Protocol, runtime_checkable

import attrs
import trio

from protocols._json import dumps_own
from protocols.codec import decode, from_json, loads, to_json
from protocols.errors import AgentsError, Category, ProtocolError, ValidationError
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
    entry_from_json,
    entry_to_json,
)

from .._sqlite import StoreError, oversize

__all__ = ["DEFAULT_MAX_BYTES", "Admitted", "Announcer", "RunStore", "Watch"]

#: The largest encoded record or journal entry a store accepts by default: 16 MiB.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


@attrs.frozen
class Admitted:
    """What ``admit`` did: the job's ``record`` (the existing one when ``created`` is false)
    and the records of its declared children, in the order they were admitted."""

    record: JobRecord
    created: bool
    children: tuple[JobRecord, ...] = ()


@runtime_checkable
class RunStore(Protocol):
    """Where durable jobs are kept (see the module docstring for what every store
    guarantees). Times are wall-clock seconds (``time.time()``), read by the store when the
    caller passes none."""

    async def admit(
        self,
        job: AgentJob,
        *,
        now: float | None = None,
        key: str | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> Admitted:
        """Admit ``job`` (and its children), durably, or return the key's job."""
        ...

    async def get(self, id: str) -> JobRecord | None:
        """The job's record, or ``None`` (never admitted, or purged)."""
        ...

    async def status(self, id: str) -> JobStatus | None:
        """The job's status alone (``None``: never admitted, or purged), without its record."""
        ...

    async def find(self, key: str) -> JobRecord | None:
        """The job admitted with ``key``, or ``None``."""
        ...

    async def list(
        self,
        *,
        statuses: Iterable[JobStatus] | None = None,
        after: int | None = None,
        limit: int = 100,
        thread: str | None = None,
    ) -> builtins.list[JobRecord]:
        """Up to ``limit`` records in admission order, with a sequence above ``after``, in one
        of ``statuses`` (any, when ``None``), of the conversation ``thread`` (any, when
        ``None``)."""
        ...

    async def page(
        self, cursor: JobCursor | None = None, *, limit: int = 100, now: float | None = None
    ) -> JobPage:
        """The jobs after ``cursor`` (``None``: from the first), in admission order, up to
        ``limit`` new ones -- with those found in the cursor's gaps, committed late -- and the
        cursor the next page starts from (see :func:`protocols.jobs.next_page`). Chained,
        pages return every job committed exactly once, whatever order their numbers committed
        in. ``now`` (default: ``time.time()``) times the gaps."""
        ...

    async def write(self, transition: Applied) -> bool:
        """Write the transition's record if the stored revision is still its ``expected``."""
        ...

    async def acquire(
        self, *, owner: str, lease: float, now: float | None = None
    ) -> JobRecord | None:
        """Take the first runnable job for ``owner`` (``None``: nothing to run). A store may
        also have ``acquire_many(*, owner, lease, now=None, limit)``, taking up to ``limit``
        jobs at once (what as many ``acquire`` calls would take, in that order): a job queue
        with free slots uses it where it exists. It may return a :class:`Taken`, which also
        says whether its look left anything a later look might take."""
        ...

    async def append(
        self,
        id: str,
        holder: Lease,
        entries: Sequence[Entry],
        *,
        then: Applied | None = None,
    ) -> None:
        """Append to the job's journal while ``holder`` holds it (else ``code="fenced"``), and
        no entry starts new work after a cancel was requested (else ``code="cancelled"``)."""
        ...

    async def journal(self, id: str, *, after: int = 0) -> builtins.list[Entry]:
        """The job's journal, in order: its entries after the first ``after``."""
        ...

    async def timed_journal(self, id: str, *, after: int = 0) -> builtins.list[tuple[Entry, float]]:
        """:meth:`journal` with each entry's append time (seconds since the epoch; ``nan``
        for an entry stored before times were): the same on every read, in any process."""
        ...

    async def purge(self, id: str, *, now: float | None = None) -> Tombstone | Conflict | None:
        """Remove an ended job, leaving a tombstone (``None``: no such job)."""
        ...

    async def purged(self, id: str) -> Tombstone | None:
        """The tombstone of a purged job, or ``None``."""
        ...

    def watch(self, *, journals: bool = False) -> Watch:
        """Changes to the store's jobs as they commit (see :class:`Watch`): their records, and
        with ``journals=True`` their journals' growth too."""
        ...

    async def aclose(self) -> None:
        """Release the store; later calls raise ``code="closed"``."""
        ...


# ---------------------------------------------------------------------------------------------
# Changes, as they commit


class Watch:
    """One watcher's view of the changes to a store's jobs: :meth:`next` waits for the next
    ones and returns the ids of the jobs whose records changed since the last call -- an empty
    set when the store cannot tell which (more changed than it keeps, or a notification may
    have been lost): look at everything then. A store sees its own changes, and a store that
    other processes share may see theirs too (PostgreSQL does; SQLite does not, and a worker
    polls it). Leave with :meth:`close` (or ``with``)."""

    #: Ids kept for a watcher between two calls before it is told "everything" instead.
    LIMIT = 10_000

    def __init__(self, announcer: Announcer, *, journals: bool = False) -> None:
        self._announcer = announcer
        #: Also told of jobs whose journals grew.
        self.journals = journals
        #: How many announcements of changes have reached this watch so far. A change is
        #: announced once it is committed: one announced by the time this read ``n`` was
        #: committed before any read begun after it.
        self.heard = 0
        #: The ids :meth:`next` returned last, each with the number (as :attr:`heard` counts)
        #: of its latest announcement among them (none when it returned "everything").
        self.last: dict[str, int] = {}
        self._ids: dict[str, int] = {}
        self._everything = False
        self._event = trio.Event()

    def _add(self, ids: Iterable[str] | None) -> None:
        self.heard += 1
        if ids is None:
            self._everything = True
        elif not self._everything:
            for id in ids:
                self._ids[id] = self.heard
            if len(self._ids) > self.LIMIT:
                self._everything = True
        if self._everything:
            self._ids.clear()
        self._event.set()

    async def next(self) -> frozenset[str]:
        """Wait for changes; the ids of the jobs that changed (empty: any may have)."""
        await self._event.wait()
        self._event = trio.Event()
        ids = frozenset(self._ids)
        self.last, self._ids = self._ids, {}
        self._everything = False
        return ids

    def close(self) -> None:
        """Stop watching (idempotent)."""
        self._announcer._watches.discard(self)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: How an announced id says that the job's journal grew (not its record): ``~`` before it.
JOURNAL_GREW: Final = "~"


class Taken(builtins.list[JobRecord]):
    """The jobs an acquisition took, in order (a list), and ``rest``: whether its look saw
    any job besides them that is queued (runnable or not yet) or held past its lease. When it
    saw none, a later look can find something only after a change a store announces (an
    admission, a job queued again, answers) or after time passes (a lease running out):
    a job queue then waits for one of those, or its next poll, before it looks again."""

    __slots__ = ("rest",)

    def __init__(self, records: Iterable[JobRecord] = (), *, rest: bool) -> None:
        super().__init__(records)
        self.rest = rest


class Announcer:
    """Hands the changes a store commits to its watchers (in the event loop's thread): the
    jobs whose records changed, and -- to the watchers of journals -- those whose journals grew
    (announced as ``~`` and the id)."""

    def __init__(self) -> None:
        self._watches: set[Watch] = set()

    def watch(self, *, journals: bool = False) -> Watch:
        watch = Watch(self, journals=journals)
        self._watches.add(watch)
        return watch

    def announce(self, ids: Iterable[str] | None) -> None:
        """``ids`` changed (``None``: anything may have)."""
        if ids is None:
            for watch in self._watches:
                watch._add(None)
            return
        records: list[str] = []
        grown: list[str] = []
        for id in ids:
            if id.startswith(JOURNAL_GREW):
                grown.append(id[1:])
            else:
                records.append(id)
        if not records and not grown:
            return
        for watch in self._watches:
            if watch.journals:
                watch._add((*records, *grown))
            elif records:
                watch._add(records)


# ---------------------------------------------------------------------------------------------
# Checks and encodings shared by the stores


def check_id(value: object, what: str = "a job id") -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ValidationError(f"{what} must be a non-empty str of at most 200 characters")
    return value


def check_admission(job: object, key: str | None, now: float | None) -> float:
    """Refuse what ``admit`` cannot take; the admission's time (read now when ``None``)."""
    if not isinstance(job, AgentJob):
        raise ValidationError(f"admit takes an AgentJob, not {type(job).__name__}")
    if key is not None:
        check_id(key, "a key")
    return time.time() if now is None else check_time(now)


def check_time(value: object, what: str = "now") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{what} must be a time in seconds, not {value!r}")
    return float(value)


def check_position(after: object) -> int:
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValidationError(f"after must be a count of entries (an int >= 0), not {after!r}")
    return after


def check_after(after: object) -> int | None:
    if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
        raise ValidationError(f"after must be a sequence number (int) or None, not {after!r}")
    return after


def check_cursor(cursor: object) -> JobCursor:
    if cursor is None:
        return JobCursor()
    if not isinstance(cursor, JobCursor):
        raise ValidationError(f"page takes a JobCursor or None, not {type(cursor).__name__}")
    return cursor


def check_seconds(value: object, what: str) -> float:
    """``value`` as a float, if it is a finite number of seconds > 0; else a
    :class:`ValidationError` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValidationError(f"{what} must be a number of seconds > 0, not {value!r}")
    return float(value)


def check_lease(lease: object) -> float:
    return check_seconds(lease, "a lease")


def noticeable(stored: JobRecord, new: JobRecord) -> bool:
    """Whether a write from ``stored`` to ``new`` is a change watchers hear of: a new status
    or a cancel asked for (not a renewed lease, nor a run's progress)."""
    return stored.status is not new.status or stored.cancel_requested != new.cancel_requested


def check_successor(stored: JobRecord, new: JobRecord, *, job: AgentJob | None = None) -> None:
    """A write may change a job's state, never what the job is or where it was admitted.
    ``job``: the stored job, when the store holds it apart from ``stored`` (whose own is then
    not read)."""
    for name in ("id", "job", "sequence", "created_at", "key", "parent", "children"):
        kept = job if name == "job" and job is not None else getattr(stored, name)
        if kept != getattr(new, name):
            raise ValidationError(f"a write may not change a job's {name} (job {stored.id})")


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationError(f"limit must be an integer from 1 to 1000, not {limit!r}")
    return limit


def check_acquisition(
    owner: object, lease: object, now: object, limit: object
) -> tuple[float, float, int]:
    """``acquire_many``'s arguments checked: its lease, its moment (the clock's when ``now`` is
    ``None``) and its limit."""
    check_id(owner, "an owner")
    held = check_lease(lease)
    moment = time.time() if now is None else check_time(now)
    return held, moment, check_limit(limit)


def check_append(
    id: object, entries: Sequence[Entry], then: Applied | None, max_bytes: int
) -> builtins.list[str]:
    """``append``'s arguments checked: the entries' stored texts (each within ``max_bytes``)."""
    check_id(id)
    if then is not None and then.record.id != id:
        raise ValidationError("append's transition must be for the same job")
    return [encode_entry(entry, max_bytes) for entry in entries]


def _checked(text: str, max_bytes: int, what: str) -> str:
    size = oversize(text, max_bytes)
    if size is not None:
        raise StoreError(
            f"{what} is {size} bytes of JSON, above the store's limit of {max_bytes}",
            code="too_large",
            category=Category.USER,
        )
    return text


def encode_checked(value: object, max_bytes: int, what: str) -> str:
    """``value`` (a data-model object) as stored: :func:`protocols.codec.encode`'s text,
    refused (``code="too_large"``) above ``max_bytes``."""
    return _checked(dumps_own(to_json(value)), max_bytes, what)


def encode_admitted(record: JobRecord, max_bytes: int) -> tuple[str, str]:
    """A record being admitted as stored (:func:`encode_checked`), and its job's own encoding
    (the text ``dumps_own(to_json(record.job))`` gives) -- from the one encoding."""
    data = to_json(record)
    text = _checked(dumps_own(data), max_bytes, f"the record of job {record.id!r}")
    return text, dumps_own(data["job"])


def encode_entry(entry: Entry, max_bytes: int, at: float | None = None) -> str:
    """The entry as stored: its JSON, with ``at`` (when it was appended, seconds since the
    epoch; the time its events show, the same on every read)."""
    data = entry_to_json(entry)
    data["at"] = time.time() if at is None else at
    return _checked(dumps_own(data), max_bytes, "a journal entry")


def decode_record(id: str, text: str | bytes) -> JobRecord:
    try:
        record = decode(JobRecord, text, category=Category.SYSTEM)
    except AgentsError as exc:
        raise StoreError(
            f"the stored record of job {id!r} is corrupt: {exc.message[:300]}", code="corrupt"
        ) from exc
    if record.id != id:
        raise StoreError(f"the stored record of job {id!r} holds job {record.id!r}", code="corrupt")
    return record


def _stored_job(id: str, text: str | bytes) -> object:
    """The JSON of the job a stored record (its text) holds."""
    try:
        data = loads(text, category=Category.SYSTEM)
    except AgentsError as exc:
        raise StoreError(
            f"the stored record of job {id!r} is corrupt: {exc.message[:300]}", code="corrupt"
        ) from exc
    if not isinstance(data, dict) or "job" not in data:
        raise StoreError(f"the stored record of job {id!r} holds no job", code="corrupt")
    return data["job"]


def decode_job(id: str, text: str | bytes) -> AgentJob:
    """The job a stored record (its text) holds, decoded alone."""
    try:
        return from_json(AgentJob, _stored_job(id, text), category=Category.SYSTEM)
    except AgentsError as exc:
        raise StoreError(
            f"the stored record of job {id!r} is corrupt: {exc.message[:300]}", code="corrupt"
        ) from exc


def decode_entry(id: str, text: str | bytes) -> Entry:
    return decode_timed_entry(id, text)[0]


def decode_timed_entry(id: str, text: str | bytes) -> tuple[Entry, float]:
    """A stored entry and when it was appended (``nan`` for an entry stored before times
    were)."""
    try:
        data = loads(text, category=Category.SYSTEM)
        at = data.pop("at", math.nan) if isinstance(data, dict) else math.nan
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise ProtocolError("a journal entry's 'at' must be a number", code="decode")
        return entry_from_json(data), float(at)
    except AgentsError as exc:
        raise StoreError(
            f"a journal entry of job {id!r} is corrupt: {exc.message[:300]}", code="corrupt"
        ) from exc


def purged_key(key: str, stone: Tombstone) -> StoreError:
    return StoreError(
        f"the key {key!r} belonged to job {stone.id}, which was purged; use a new key",
        code="purged",
        category=Category.USER,
    )


def fenced(id: str, holder: Lease, record: JobRecord | None) -> StoreError:
    where = "is gone" if record is None else f"has fence {record.fence}, {record.status.value}"
    return StoreError(
        f"job {id}: the write of {holder.owner!r} with fence {holder.fence} is refused (the job "
        f"{where}): this worker no longer holds it",
        code="fenced",
    )


def cancelled(id: str) -> StoreError:
    """What an append that would start new work for a job with a cancel requested raises."""
    return StoreError(
        f"job {id} has a cancel requested: no provider call or tool call may start",
        code="cancelled",
    )


def closed() -> StoreError:
    return StoreError("the run store is closed", code="closed", category=Category.USER)


# ---------------------------------------------------------------------------------------------
# The in-memory store
