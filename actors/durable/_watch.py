"""Following a durable job's events from any process: its log is derived from its journal
(:class:`protocols.live.JournalEvents`), read from the store as it grows."""

from __future__ import annotations

import collections
import time
import weakref
from typing import Any, Final

import trio

from protocols.errors import ValidationError
from protocols.jobs import JobRecord, JobStatus
from protocols.live import JournalEvents, RunEvent

from .._sqlite import StoreError
from ._journal import RETRY_FOR
from ._store import RunStore

__all__ = ["JobEvents", "watch_job"]


def watch_job(store: RunStore, id: str, *, after: int = 0, poll: float = 0.5) -> JobEvents:
    """The events of job ``id`` after seq ``after`` (0: from its first), from its journal in
    ``store`` -- in any process, also after its workers restarted: the same journal gives the
    same events under the same seqs. An async iterator that replays them, then follows the job
    as its journal grows (woken by the store's notifications where it has them -- its own
    process's commits, and PostgreSQL's from other processes -- and looking every ``poll``
    seconds in any case; a store that cannot be reached for a moment is asked again, with
    backoff, for up to ten seconds), and stops after a terminal event: ``finished``, ``failed``,
    ``cancelled`` or ``awaiting_input`` (the job waits for approvals: watch again after it
    to follow the rest). A job that ended with no terminal in its journal (cancelled or
    abandoned before its run ended it) gives one, derived from its record. The followers of
    a job in one process share its derivation (for the :data:`SHARED_JOBS` jobs followed
    last, per store object): a follower that reconnects reads only what the journal gained
    since it was last read there. Raises
    :class:`~protocols.errors.ValidationError` when the job does not exist (on the first
    step)."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValidationError(f"after must be a seq (an int >= 0), not {after!r}")
    if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < float("inf"):
        raise ValidationError(f"poll must be a number of seconds > 0, not {poll!r}")
    return JobEvents(store, id, after, float(poll))


#: Jobs whose events the followers in this process share, per store (the most recently
#: followed): a follower that reconnects -- or a second one -- reads the journal from where
#: the last reading of it stopped, not from its start.
SHARED_JOBS: Final = 64


class _Shared:
    """A job's events as derived so far, for every follower of it in this process (one
    derivation: the same journal gives the same events, whoever reads it)."""

    __slots__ = ("derived", "events")

    def __init__(self, id: str) -> None:
        self.derived = JournalEvents(id)
        #: The events derived, in order: seq n is ``events[n - 1]``.
        self.events: list[RunEvent] = []


_SHARED: weakref.WeakKeyDictionary[Any, collections.OrderedDict[str, _Shared]] = (
    weakref.WeakKeyDictionary()
)


def _shared(store: RunStore, id: str) -> _Shared:
    try:
        jobs = _SHARED.setdefault(store, collections.OrderedDict())
    except TypeError:  # a store that cannot be weakly referenced: each follower derives alone
        return _Shared(id)
    shared = jobs.get(id)
    if shared is None:
        shared = jobs[id] = _Shared(id)
        while len(jobs) > SHARED_JOBS:
            jobs.popitem(last=False)
    else:
        jobs.move_to_end(id)
    return shared


def _forget() -> None:
    """Drop what the followers in this process share (a benchmark's cold reconnect)."""
    _SHARED.clear()


class JobEvents:
    """See :func:`watch_job`."""

    def __init__(self, store: RunStore, id: str, after: int, poll: float) -> None:
        self.store = store
        self.id = id
        self._after = after
        self._poll = poll
        self._shared: _Shared | None = None  # (found on the first read)
        self._queued = after  # the seq of the last event put in _pending
        self._pending: collections.deque[RunEvent] = collections.deque()
        self._done = False

    @property
    def _derived(self) -> JournalEvents:
        assert self._shared is not None
        return self._shared.derived

    @property
    def position(self) -> int:
        """The seq of the last event handed out (``after`` before the first)."""
        return self._after

    def __aiter__(self) -> JobEvents:
        return self

    async def __anext__(self) -> RunEvent:
        if self._done:
            raise StopAsyncIteration
        with self.store.watch(journals=True) as watch:
            while not self._pending:
                record = await self._read()
                if self._pending:
                    break
                if record.terminal:
                    # Ended, and its journal will grow no more: its end, from the record, if
                    # the journal does not say it (cancelled or abandoned before its run ended).
                    ending = None if self._derived.final else self._ending(record)
                    if ending is None or ending.seq <= self._after:
                        self._done = True
                        raise StopAsyncIteration
                    self._pending.append(ending)
                    break
                with trio.move_on_after(self._poll):
                    while True:
                        ids = await watch.next()
                        if not ids or self.id in ids:
                            break
        event = self._pending.popleft()
        self._after = event.seq
        if event.terminal:
            self._done = True
            self._pending.clear()
        return event

    async def _read(self) -> JobRecord:
        """:meth:`_read_once`, asked again while the store cannot be reached (a retryable
        :class:`~actors.store.StoreError`: a database restarting, a connection cut), with
        backoff, for up to :data:`~actors.durable._journal.RETRY_FOR` seconds."""
        deadline: float | None = None
        pause = 0.05
        while True:
            try:
                return await self._read_once()
            except StoreError as error:
                if not error.retryable:
                    raise
                now = trio.current_time()
                deadline = now + RETRY_FOR if deadline is None else deadline
                if now + pause > deadline:
                    raise
            await trio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _read_once(self) -> JobRecord:
        """Read the record, then what the journal holds that was not read yet (the record
        first: a terminal record read before the journal means the journal is whole)."""
        record = await self.store.get(self.id)
        if record is None:
            raise ValidationError(f"no job {self.id!r} (never admitted, or purged)")
        shared = self._shared
        if shared is None:
            shared = self._shared = _shared(self.store, self.id)
        derived, events = shared.derived, shared.events
        derived.agent = record.job.agent
        start = derived.entries
        timed = await self.store.timed_journal(self.id, after=start)
        # (Another follower may have read and derived part of it meanwhile: the journal only
        # grows, and the same entries give the same events, so what it did not is fed.)
        for entry, at in timed[derived.entries - start :]:
            # Each event at its entry's append time: the same in every reading, in any process.
            events.extend(derived.feed((entry,), at))
        if len(events) > self._queued:
            self._pending.extend(events[self._queued :])
            self._queued = len(events)
        return record

    def _ending(self, record: JobRecord) -> RunEvent:
        derived = self._derived
        seq = derived.last + 1
        data: dict[str, object]
        if record.result is not None:
            kind = "cancelled" if record.status is JobStatus.CANCELLED else "finished"
            data = {"result": record.result}
        elif record.status is JobStatus.CANCELLED:
            kind, data = "cancelled", {"result": None}
        else:
            message = record.error or f"the job ended {record.status.value}"
            kind = "failed"
            data = {"error": {"type": "JobError", "code": record.status.value, "message": message}}
        stamp = record.updated_at if record.updated_at is not None else time.time()
        return RunEvent(self.id, seq, kind, stamp, data)
