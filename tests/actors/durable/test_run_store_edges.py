"""Run stores alike at their edges: a transition for another job, a bad lease with nothing to
run, a bad ``after``, a write that would change what a job is (each found failing once, and
fixed)."""

from __future__ import annotations

import pathlib
import random
from collections.abc import AsyncIterator

import attrs
import pytest
import trio
from run_store_helpers import KINDS, T0, open_backend

from actors.durable import Admitted, RunStore
from protocols import jobs as J
from protocols.accounting import Usage
from protocols.errors import ValidationError

pytestmark = pytest.mark.trio


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[RunStore]:
    async with open_backend(request.param, tmp_path) as backend:
        yield backend.store


async def test_a_then_for_another_job_is_a_validation_error_in_both_stores(store: RunStore) -> None:
    # SQLite: ValidationError (checked before any IO). Memory: StoreError code="fenced" (it
    # checks the named job's holder first). The message of the ValidationError is what the
    # caller needs: "append's transition must be for the same job and holder".
    await store.admit(J.AgentJob.ask("a", "one"), now=1.0)
    other = (await store.admit(J.AgentJob.ask("a", "two"), now=1.0)).record
    record = await store.acquire(owner="w", lease=30, now=2.0)
    assert record is not None
    assert record.lease is not None
    then = J.checkpoint(record, record.lease, now=3.0, turns=1, usage=Usage(1, 1))
    assert isinstance(then, J.Applied)
    with pytest.raises(ValidationError):
        await store.append(other.id, record.lease, [J.RequestEntry(1)], then=then)


async def test_an_invalid_lease_is_refused_even_with_nothing_to_run(store: RunStore) -> None:
    # Today acquire(lease=-1) returns None on a store with nothing runnable, and raises
    # ValidationError only once a job is runnable (the check is in protocols.jobs.acquire).
    with pytest.raises(ValidationError):
        await store.acquire(owner="w", lease=-1, now=1.0)


async def test_list_after_is_validated_alike(store: RunStore) -> None:
    # Memory raises TypeError (int > str), SQLite answers as if after were 1.
    with pytest.raises(ValidationError):
        await store.list(after="1")  # type: ignore[arg-type]


async def test_write_keeps_what_never_changes(store: RunStore) -> None:
    # A transition that changes the sequence (or key, id, job) is written as given; SQLite
    # then keeps the old value in its columns (list order, find) and the new one in the JSON,
    # so the two stores list differently. Expected: refused (ValidationError or False).
    a = (await store.admit(J.AgentJob.ask("a", "1"), now=1.0)).record
    await store.admit(J.AgentJob.ask("a", "2"), now=1.0)
    moved = J.Applied(attrs.evolve(a, sequence=99, revision=a.revision + 1), a.revision)
    try:
        written = await store.write(moved)
    except ValidationError:
        written = False
    assert not written


async def test_a_record_changed_in_place_after_it_was_written_changes_nothing_stored(
    store: RunStore,
) -> None:
    # Records are frozen, but the JSON inside one (its job's metadata) is a dict: a caller that
    # changes it in place after writing, then writes a successor of that same object, is
    # changing the job -- refused as any change of the job is, whatever the store kept of it.
    admitted = (await store.admit(J.AgentJob.ask("a", "1", metadata={"tag": "x"}), now=1.0)).record
    nudged = attrs.evolve(admitted, revision=admitted.revision + 1, updated_at=2.0)
    assert await store.write(J.Applied(nudged, admitted.revision))
    nudged.job.metadata["tag"] = "changed in place"
    after = J.Applied(attrs.evolve(nudged, revision=nudged.revision + 1), nudged.revision)
    try:
        written = await store.write(after)
    except ValidationError:
        written = False
    assert not written
    stored = await store.get(admitted.id)
    assert stored is not None
    assert stored.job.metadata == {"tag": "x"}


async def test_a_caller_not_cancelled_gets_its_own_outcome_when_others_are(
    store: RunStore,
) -> None:
    # Found failing once (on the SQL stores): the task that ran a group commit, cancelled while
    # the commit was in the writer thread, handed its own Cancelled to every write of the
    # batch -- writes that had committed were reported to their callers as cancelled, in tasks
    # nothing had cancelled (a worker's queue then stopped as if asked to). Property: whatever
    # is cancelled, and when, a caller whose own scope is not cancelled gets its write's
    # outcome; a cancelled one gets that outcome or Cancelled; nobody gets anything else.
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    writers = 8
    for round in range(40):
        scopes = [trio.CancelScope() for _ in range(writers)]
        outcomes: dict[int, object] = {}

        async def write(
            n: int,
            scope: trio.CancelScope,
            round: int = round,
            outcomes: dict[int, object] = outcomes,
        ) -> None:
            with scope:
                try:
                    outcomes[n] = await store.admit(
                        J.AgentJob.ask("a", f"{round}-{n}"), now=T0, key=f"{round}-{n}"
                    )
                except BaseException as exc:
                    outcomes[n] = exc
                    raise

        async with trio.open_nursery() as nursery:
            for n in range(writers):
                nursery.start_soon(write, n, scopes[n])
            for _ in range(rng.randrange(0, 30)):
                await trio.lowlevel.checkpoint()
            cut = set(rng.sample(range(writers), writers // 2))
            for n in cut:
                scopes[n].cancel()
        where = f"seed {seed}, round {round}"
        for n in range(writers):
            outcome = outcomes[n]
            if n in cut and isinstance(outcome, trio.Cancelled):
                continue
            assert isinstance(outcome, Admitted), (where, n, outcome)
            found = await store.find(f"{round}-{n}")
            assert found is not None, (where, n)
            assert found.id == outcome.record.id, (where, n)
