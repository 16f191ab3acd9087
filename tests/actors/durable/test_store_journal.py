"""The store journal under cancellation: what a run hands it is written or still buffered,
whatever is cancelled and when -- never taken from the buffer and dropped."""

from __future__ import annotations

import itertools
import pathlib
import random
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import trio
import trio.testing
from run_store_helpers import KINDS, LEASE, T0, open_backend

from actors.durable import RunStore, StoreJournal
from actors.store import StoreError
from protocols import jobs as J
from protocols.messages import AgentResult, Message, ToolCall

pytestmark = pytest.mark.trio


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[RunStore]:
    async with open_backend(request.param, tmp_path) as backend:
        yield backend.store


async def test_a_barrier_cancelled_while_it_waits_loses_nothing_buffered(store: RunStore) -> None:
    # Found failing once: an intent's write (a barrier: it writes what is buffered before it)
    # cancelled while its append waited its turn in the store lost the buffered input and
    # response -- taken from the buffer, never written. Property: journals written at once by
    # several runs, each barrier cancelled at a random moment, each journal then closed: every
    # journal begins with its input and response, then at most the intent.
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    runs = 8
    for round in range(10):
        journals: list[StoreJournal] = []
        for n in range(runs):
            await store.admit(J.AgentJob.ask("a", f"{round}-{n}"), now=T0)
            record = await store.acquire(owner="w", lease=LEASE, now=T0)
            assert record is not None
            assert record.lease is not None
            journals.append(StoreJournal(store, record.id, record.lease, cut=lambda why: None))
        scopes = [trio.CancelScope() for _ in journals]

        async def run(journal: StoreJournal, scope: trio.CancelScope, n: int) -> None:
            await journal.input([Message.user(f"question {n}")])
            call = ToolCall(f"call-{n}", "pay", {"n": n})
            await journal.response(Message.assistant("", calls=(call,)), None)
            with scope:
                await journal.intent(call)

        async with trio.open_nursery() as nursery:
            for n, journal in enumerate(journals):
                nursery.start_soon(run, journal, scopes[n], n)
            for _ in range(rng.randrange(0, 20)):
                await trio.lowlevel.checkpoint()
            for scope in rng.sample(scopes, runs // 2):
                scope.cancel()
        for journal in journals:
            await journal.close()
        for n, journal in enumerate(journals):
            kinds = [entry.kind for entry in await store.journal(journal.job)]
            assert kinds in (["input", "response"], ["input", "response", "intent"]), (
                f"seed {seed}, round {round}, run {n}: {kinds}"
            )


class _LosesAnAppend:
    """The real store, but one append of the job is cut as a lost connection cuts one:
    :meth:`cut` says how (the caller cannot tell whether it was written)."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.cuts = 0
        self.taken: J.JobRecord | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def cut(self, append: Coroutine[Any, Any, None], id: str) -> None:
        raise NotImplementedError

    async def append(
        self, id: str, holder: J.Lease, entries: object, *, then: J.Applied | None = None
    ) -> None:
        append = self._store.append(id, holder, entries, then=then)  # type: ignore[arg-type]
        if self.cuts:
            return await append
        self.cuts += 1
        await self.cut(append, id)
        raise StoreError(
            "appending: the database could not be reached or went away", code="io", retryable=True
        )

    async def started(self) -> tuple[J.JobRecord, StoreJournal, list[str]]:
        """A job taken, and a journal of its run (through this store), with the reasons its
        run was cut."""
        await self._store.admit(J.AgentJob.ask("a", "question"), now=T0)
        record = await self._store.acquire(owner="w", lease=LEASE, now=T0)
        assert record is not None
        assert record.lease is not None
        cuts: list[str] = []
        journal = StoreJournal(self, record.id, record.lease, cut=cuts.append)  # type: ignore[arg-type]
        await journal.input([Message.user("mine")])
        return record, journal, cuts


class _CutAfterTakeover(_LosesAnAppend):
    """Not written: by then another worker had taken the job over (the holder's lease
    expired) and journaled."""

    async def cut(self, append: Coroutine[Any, Any, None], id: str) -> None:
        append.close()  # (never run: nothing written)
        self.taken = await self._store.acquire(owner="other", lease=LEASE, now=T0 + 2 * LEASE)
        assert self.taken is not None
        assert self.taken.lease is not None
        other = StoreJournal(self._store, id, self.taken.lease, cut=lambda why: None)
        await other.input([Message.user("the other worker's")])
        assert await other.flush()


class _CommitThenCut(_LosesAnAppend):
    """Written, then cut."""

    async def cut(self, append: Coroutine[Any, Any, None], id: str) -> None:
        await append


async def test_a_write_cut_while_the_job_was_taken_over_is_refused_as_fenced(
    store: RunStore, autojump_clock: trio.testing.MockClock
) -> None:
    # The write's outcome is unknown (the connection went); the stored journal is not this
    # holder's (another worker wrote it): asked again, the store says why -- fenced -- and
    # the run is dropped, not reported as a journal that could not be written.
    wrapped = _CutAfterTakeover(store)
    record, journal, cuts = await wrapped.started()
    assert not await journal.flush()
    assert journal.dropped
    assert journal.failure is None
    assert cuts == ["this worker no longer holds the job (fenced)"]
    stored = [entry.kind for entry in await store.journal(record.id)]
    assert stored == ["input"]  # the other worker's alone
    assert wrapped.taken is not None
    assert (await store.get(record.id)) == wrapped.taken


@pytest.mark.parametrize("ending", [False, True])
async def test_a_write_that_committed_before_its_connection_went_is_not_written_again(
    store: RunStore, autojump_clock: trio.testing.MockClock, ending: bool
) -> None:
    # Also the one that ended the job (then: the record it wrote is no longer held by anyone).
    wrapped = _CommitThenCut(store)
    record, journal, cuts = await wrapped.started()
    assert record.lease is not None
    if ending:
        result = AgentResult("done")
        ended = J.finish(
            record, record.lease, now=T0 + 1, status=J.JobStatus.COMPLETED, result=result
        )
        assert isinstance(ended, J.Applied)
        await journal.finish(J.TerminalEntry(None, result), ended)
        assert await store.get(record.id) == ended.record
        kinds = ["input", "terminal"]
    else:
        assert await journal.flush()
        kinds = ["input"]
    assert wrapped.cuts == 1
    assert (journal.dropped, journal.failure, cuts) == (False, None, [])
    assert [entry.kind for entry in await store.journal(record.id)] == kinds


class _Cut(_LosesAnAppend):
    """Any of the ways: the append written or not, then the job taken over by another worker or
    not, which journals or not."""

    def __init__(self, store: RunStore, *, written: bool, taken: bool, journals: bool) -> None:
        super().__init__(store)
        self.written, self.takes, self.journals = written, taken, journals

    async def cut(self, append: Coroutine[Any, Any, None], id: str) -> None:
        if self.written:
            await append
        else:
            append.close()
        if not self.takes:
            return
        # (Nothing to take when the written append ended the job.)
        self.taken = await self._store.acquire(owner="other", lease=LEASE, now=T0 + 2 * LEASE)
        if self.taken is not None and self.journals:
            assert self.taken.lease is not None
            other = StoreJournal(self._store, id, self.taken.lease, cut=lambda why: None)
            await other.input([Message.user("the other worker's")])
            assert await other.flush()


CASES = list(itertools.product([False, True], repeat=4))


@pytest.mark.parametrize(("written", "taken", "journals", "ending"), CASES)
async def test_a_cut_append_is_written_once_or_refused_as_fenced(
    store: RunStore,
    autojump_clock: trio.testing.MockClock,
    *,
    written: bool,
    taken: bool,
    journals: bool,
    ending: bool,
) -> None:
    # Whatever happened behind a lost connection, the journal holds this holder's entries at
    # most once -- exactly once if its run goes on -- and a job taken over meanwhile drops the
    # run as fenced (not as a journal that could not be written).
    wrapped = _Cut(store, written=written, taken=taken, journals=journals)
    record, journal, cuts = await wrapped.started()
    assert record.lease is not None
    ended: J.Applied | None = None
    refused: str | None = None
    if ending:
        result = AgentResult("done")
        finished = J.finish(
            record, record.lease, now=T0 + 1, status=J.JobStatus.COMPLETED, result=result
        )
        assert isinstance(finished, J.Applied)
        ended = finished
        try:
            await journal.finish(J.TerminalEntry(None, result), ended)
        except StoreError as error:
            refused = error.code
    else:
        await journal.flush()
    mine = [
        entry
        for entry in await store.journal(record.id)
        if isinstance(entry, J.InputEntry) and entry.messages[0].content == "mine"
    ]
    assert wrapped.cuts == 1
    assert journal.failure is None
    if wrapped.taken is not None:
        assert journal.dropped
        if ending:  # (finish raises; the worker drops the run)
            assert (refused, cuts) == ("fenced", [])
        else:
            assert cuts == ["this worker no longer holds the job (fenced)"]
        assert len(mine) == (1 if written else 0)
        assert await store.get(record.id) == wrapped.taken
    else:
        assert not journal.dropped
        assert (refused, cuts) == (None, [])
        assert len(mine) == 1
        if ended is not None:
            assert await store.get(record.id) == ended.record
