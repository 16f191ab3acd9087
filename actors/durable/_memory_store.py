"""``MemoryRunStore``: the run store that keeps everything in the process's memory (tests, and
processes that keep nothing) -- the same contract as every store (:mod:`._store`)."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Sequence
from types import TracebackType

import trio

from protocols._json import dumps_own
from protocols.codec import to_json
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
    admission,
    admit_tree,
    may_append,
    next_page,
    purge,
    runnable,
)
from protocols.messages import new_id

from ._store import (
    DEFAULT_MAX_BYTES,
    JOURNAL_GREW,
    Admitted,
    Announcer,
    Taken,
    Watch,
    cancelled,
    check_acquisition,
    check_admission,
    check_after,
    check_append,
    check_cursor,
    check_id,
    check_limit,
    check_position,
    check_successor,
    check_time,
    closed,
    decode_entry,
    decode_job,
    decode_record,
    decode_timed_entry,
    encode_admitted,
    encode_checked,
    fenced,
    noticeable,
    purged_key,
)

__all__ = ["MemoryRunStore"]


class MemoryRunStore:
    """A :class:`RunStore` in dicts, for tests and for processes that keep nothing.

    Rows are encoded JSON, exactly what the SQLite store writes, so the two behave alike. Each
    call checkpoints first and then runs without awaiting, so it happens entirely or (when
    cancelled) not at all. Its checks read a record as last written (as its stored text says:
    a caller that changes the JSON inside a written record in place changes nothing stored).
    They read the record this store last wrote for the job (an object its caller may hold) for
    its immutable parts only -- its status, revision, lease, fence and the like, and its job's
    thread; the one part whose JSON a caller can change in place that a check reads, what the
    job is (a write may not change it), is compared with the job the stored text holds.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValidationError(f"max_bytes must be an integer >= 1, not {max_bytes!r}")
        self._max_bytes = max_bytes
        self._records: dict[str, str] = {}
        # Each record's view for the store's own checks, by the text it stands for: the record
        # the text was encoded from when this store wrote it, else decoded. Never handed out
        # (callers get records decoded afresh), and never the base of a record this store
        # writes itself (acquire decodes its candidate afresh); only its immutable fields are
        # read (see _checked).
        self._decoded: dict[str, tuple[str, JobRecord]] = {}
        # Each job's AgentJob as its stored text held it (JSON) when it was admitted: what a
        # write may not change (see _successor). Every write keeps the job equal to it by
        # value (a write may only give it another text for an equal value: 1.0 for 1).
        self._jobs: dict[str, str] = {}
        self._live: dict[str, None] = {}  # the ids of jobs that have not ended, in order
        self._keys: dict[str, str] = {}
        self._sequences: dict[str, int] = {}  # each job's number, in admission order
        self._journals: dict[str, list[str]] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._purged_keys: dict[str, Tombstone] = {}
        self._next_sequence = 1
        self._next_execution = 1
        self._closed = False
        self._announcer = Announcer()

    async def __aenter__(self) -> MemoryRunStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _enter(self) -> None:
        if self._closed:
            raise closed()
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise closed()

    def _load(self, id: str) -> JobRecord | None:
        text = self._records.get(id)
        return None if text is None else decode_record(id, text)

    def _checked(self, id: str) -> JobRecord | None:
        """The stored record's view, for the store's own checks only (decoded at most once
        per write, and not at all after a write of this store). Only its immutable fields may
        be read -- its status, revision, fence, lease, cancel flag, times, priority, numbers,
        key, parent, children, its job's thread (each of an immutable type: see
        :meth:`_view`): the view may be the object a caller wrote, and a caller may change the
        JSON inside that in place (its job's metadata, say); what the job is, the one such
        part a check reads, is compared by :meth:`_successor` with the stored text's."""
        text = self._records.get(id)
        if text is None:
            return None
        cached = self._decoded.get(id)
        if cached is not None and cached[0] is text:
            return cached[1]
        record = decode_record(id, text)
        self._decoded[id] = (text, record)
        return record

    def _view(self, record: JobRecord, text: str) -> None:
        """Keep ``record`` (just encoded to ``text``) as the view of its stored text, if every
        field a check reads is of an immutable type (the fields no validator types, checked
        here): a record that holds something else there is decoded from its text when next
        checked instead."""
        lease = record.lease
        if (
            type(record.id) is str
            and type(record.cancel_requested) is bool
            and isinstance(record.priority, Priority)
            and (record.key is None or type(record.key) is str)
            and (record.parent is None or type(record.parent) is str)
            and (record.execution is None or type(record.execution) is int)
            and type(record.children) is tuple
            and all(type(child) is str for child in record.children)
            and (lease is None or (type(lease) is Lease and type(lease.owner) is str))
        ):
            self._decoded[record.id] = (text, record)
        else:
            self._decoded.pop(record.id, None)

    def _successor(self, stored: JobRecord, new: JobRecord) -> None:
        """:func:`check_successor`, the job compared with the stored text's: never with a
        caller's object, whose JSON may have been changed in place since it was written. A
        new job that encodes to the text kept for the job (see ``_jobs``) equals the stored
        one (the codec decodes a job's encoding to an equal job); otherwise the stored job is
        decoded and compared as the SQL stores compare it."""
        id = stored.id
        if dumps_own(to_json(new.job)) == self._jobs[id]:
            check_successor(stored, new, job=new.job)
        else:
            check_successor(stored, new, job=decode_job(id, self._records[id]))

    def _store(self, record: JobRecord, *, announce: bool = True) -> None:
        text = encode_checked(record, self._max_bytes, f"the record of job {record.id!r}")
        self._records[record.id] = text
        self._view(record, text)
        if announce:
            self._announcer.announce((record.id,))
        if record.terminal:
            self._live.pop(record.id, None)
        else:
            self._live[record.id] = None

    async def admit(
        self,
        job: AgentJob,
        *,
        now: float | None = None,
        key: str | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> Admitted:
        """See :meth:`RunStore.admit`."""
        now = check_admission(job, key, now)
        await self._enter()
        if key is not None:
            stone = self._purged_keys.get(key)
            existing = self._keys.get(key)
            decided = admission(
                stone if stone is not None else (self._load(existing) if existing else None), job
            )
            if decided.decision == "refused":
                assert stone is not None
                raise purged_key(key, stone)
            if decided.decision == "duplicate":
                assert decided.existing is not None
                return Admitted(decided.existing, False)
        first = self._next_sequence
        records = admit_tree(
            job,
            ids=iter(new_id, None),
            first_sequence=first,
            now=now,
            key=key,
            priority=priority,
        )
        # Each job's text kept now, from its record's encoding: the first write checked
        # against it (see _successor) need not decode the stored record for it.
        texts = [encode_admitted(r, self._max_bytes) for r in records]
        self._next_sequence += len(records)
        for record, (text, job_text) in zip(records, texts, strict=True):
            self._records[record.id] = text
            self._jobs[record.id] = job_text
            self._view(record, text)
            self._sequences[record.id] = record.sequence
            self._live[record.id] = None
            self._journals[record.id] = []
        top = records[-1]
        if key is not None:
            self._keys[key] = top.id
        self._announcer.announce(record.id for record in records)
        return Admitted(top, True, tuple(records[:-1]))

    async def get(self, id: str) -> JobRecord | None:
        """See :meth:`RunStore.get`."""
        check_id(id)
        await self._enter()
        return self._load(id)

    async def status(self, id: str) -> JobStatus | None:
        """See :meth:`RunStore.status`."""
        check_id(id)
        await self._enter()
        record = self._checked(id)
        return None if record is None else record.status

    async def find(self, key: str) -> JobRecord | None:
        """See :meth:`RunStore.find`."""
        check_id(key, "a key")
        await self._enter()
        id = self._keys.get(key)
        return None if id is None else self._load(id)

    async def list(
        self,
        *,
        statuses: Iterable[JobStatus] | None = None,
        after: int | None = None,
        limit: int = 100,
        thread: str | None = None,
    ) -> builtins.list[JobRecord]:
        """See :meth:`RunStore.list`."""
        wanted = None if statuses is None else {JobStatus(s) for s in statuses}
        check_limit(limit)
        check_after(after)
        if thread is not None:
            check_id(thread, "a thread")
        await self._enter()
        records = [decode_record(id, text) for id, text in self._records.items()]
        chosen = sorted(
            (
                r
                for r in records
                if (wanted is None or r.status in wanted)
                and (after is None or r.sequence > after)
                and (thread is None or r.conversation == thread)
            ),
            key=lambda r: r.sequence,
        )
        return chosen[:limit]

    async def page(
        self, cursor: JobCursor | None = None, *, limit: int = 100, now: float | None = None
    ) -> JobPage:
        """See :meth:`RunStore.page`. Numbers are given and committed at once, in order: a
        jump is a purged job, never a gap (:meth:`~protocols.jobs.Horizon.in_order`)."""
        start = check_cursor(cursor)
        check_limit(limit)
        moment = time.time() if now is None else check_time(now)
        await self._enter()
        rows: list[JobRecord] = []
        found: list[JobRecord] = []
        # (Kept in admission order: a dict keeps the order of insertion.)
        for id, sequence in self._sequences.items():
            if sequence > start.position:
                rows.append(decode_record(id, self._records[id]))
                if len(rows) >= limit:
                    break
            elif start.gaps and any(sequence in gap for gap in start.gaps):
                found.append(decode_record(id, self._records[id]))
        return next_page(start, rows, found, now=moment, limit=limit, horizon=Horizon.in_order())

    async def write(self, transition: Applied) -> bool:
        """See :meth:`RunStore.write`."""
        if not isinstance(transition, Applied):
            raise ValidationError(f"write takes an Applied transition, not {transition!r}")
        await self._enter()
        return self._write_now(transition)

    def _write_now(self, transition: Applied) -> bool:
        record = transition.record
        stored = self._checked(record.id)
        if stored is None or stored.revision != transition.expected:
            return False
        self._successor(stored, record)
        self._store(record, announce=noticeable(stored, record))
        return True

    async def acquire(
        self, *, owner: str, lease: float, now: float | None = None
    ) -> JobRecord | None:
        """See :meth:`RunStore.acquire`."""
        taken = await self.acquire_many(owner=owner, lease=lease, now=now, limit=1)
        return taken[0] if taken else None

    async def acquire_many(
        self, *, owner: str, lease: float, now: float | None = None, limit: int
    ) -> builtins.list[JobRecord]:
        """Take up to ``limit`` jobs for ``owner`` at once: those that as many :meth:`acquire`
        calls would take, in that order (fewer when fewer may run). A job queue's worker with
        several free slots uses it where a store has it (the SQL stores do too)."""
        lease, now, count = check_acquisition(owner, lease, now, limit)
        await self._enter()
        live = [record for id in self._live if (record := self._checked(id)) is not None]
        out = Taken(rest=False)
        # (The candidates of one look are independent: one job of a thread at most.)
        for candidate in runnable(live, now=now):
            # Taken from the stored text, decoded afresh: the view may be a caller's object.
            fresh = decode_record(candidate.id, self._records[candidate.id])
            taken = acquire(
                fresh, owner=owner, now=now, lease=lease, execution=self._next_execution
            )
            if isinstance(taken, Applied):
                if candidate.execution is None:
                    self._next_execution += 1
                self._store(taken.record, announce=False)
                out.append(taken.record)
                if len(out) == count:
                    break
        took = {record.id for record in out}
        out.rest = any(
            record.id not in took
            and (
                record.status is JobStatus.QUEUED
                or (
                    record.status is JobStatus.RUNNING
                    and (record.lease is None or now >= record.lease.until)
                )
            )
            for record in live
        )
        return out

    async def append(
        self,
        id: str,
        holder: Lease,
        entries: Sequence[Entry],
        *,
        then: Applied | None = None,
    ) -> None:
        """See :meth:`RunStore.append`."""
        texts = check_append(id, entries, then, self._max_bytes)
        await self._enter()
        stored = self._checked(id)
        if stored is None:
            raise fenced(id, holder, stored)
        refused = may_append(stored, holder, entries)
        if refused is not None:
            raise cancelled(id) if refused.reason == "cancelled" else fenced(id, holder, stored)
        if then is not None:
            if stored.revision != then.expected:
                raise fenced(id, holder, stored)
            self._successor(stored, then.record)
            self._store(then.record, announce=noticeable(stored, then.record))
        self._journals.setdefault(id, []).extend(texts)
        if texts:
            self._announcer.announce((JOURNAL_GREW + id,))

    async def journal(self, id: str, *, after: int = 0) -> builtins.list[Entry]:
        """See :meth:`RunStore.journal`."""
        check_id(id)
        check_position(after)
        await self._enter()
        return [decode_entry(id, text) for text in self._journals.get(id, [])[after:]]

    async def timed_journal(self, id: str, *, after: int = 0) -> builtins.list[tuple[Entry, float]]:
        """See :meth:`RunStore.timed_journal`."""
        check_id(id)
        check_position(after)
        await self._enter()
        return [decode_timed_entry(id, text) for text in self._journals.get(id, [])[after:]]

    async def purge(self, id: str, *, now: float | None = None) -> Tombstone | Conflict | None:
        """See :meth:`RunStore.purge`."""
        check_id(id)
        now = time.time() if now is None else check_time(now)
        await self._enter()
        record = self._checked(id)
        if record is None:
            return self._tombstones.get(id)
        outcome = purge(record, now=now)
        if isinstance(outcome, Tombstone):
            del self._records[id]
            del self._sequences[id]
            self._decoded.pop(id, None)
            self._jobs.pop(id, None)
            self._live.pop(id, None)
            self._journals.pop(id, None)
            self._tombstones[id] = outcome
            self._announcer.announce((id,))
            if record.key is not None:
                self._keys.pop(record.key, None)
                self._purged_keys[record.key] = outcome
        return outcome

    async def purged(self, id: str) -> Tombstone | None:
        """See :meth:`RunStore.purged`."""
        check_id(id)
        await self._enter()
        return self._tombstones.get(id)

    def watch(self, *, journals: bool = False) -> Watch:
        """See :meth:`RunStore.watch`."""
        return self._announcer.watch(journals=journals)

    async def aclose(self) -> None:
        """Forget everything and refuse further calls (idempotent)."""
        self._closed = True
        self._records.clear()
        self._sequences.clear()
        self._decoded.clear()
        self._jobs.clear()
        self._live.clear()
        self._journals.clear()
        await trio.lowlevel.checkpoint()
