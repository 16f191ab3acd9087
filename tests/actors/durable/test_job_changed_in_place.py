"""What a job is, checked on every write, whatever a caller did to the objects it wrote: every
store compares a write's job with the stored one by value (the memory store compares texts
first and decodes the stored job only when they differ)."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import attrs
import pytest
from run_store_helpers import KINDS, open_backend

from actors.durable import RunStore
from protocols import jobs as J
from protocols.errors import ValidationError

pytestmark = pytest.mark.trio


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[RunStore]:
    async with open_backend(request.param, tmp_path) as backend:
        yield backend.store


async def _refused(store: RunStore, transition: J.Applied) -> bool:
    try:
        return not await store.write(transition)
    except ValidationError:
        return True


async def test_a_nested_value_changed_in_place_in_a_taken_job_is_refused(store: RunStore) -> None:
    # The worker's record (from acquire) is its own; a value deep in its job's metadata changed
    # in place, then a successor of that record written: a change of the job, refused.
    job = J.AgentJob.ask("a", "1", metadata={"deep": {"n": [1, 2]}})
    await store.admit(job, now=1.0)
    taken = await store.acquire(owner="w", lease=30, now=2.0)
    assert taken is not None
    assert taken.lease is not None
    taken.job.metadata["deep"]["n"].append(3)
    renewed = J.renew(taken, taken.lease, now=3.0, lease=30)
    assert isinstance(renewed, J.Applied)
    assert await _refused(store, renewed)
    stored = await store.get(taken.id)
    assert stored is not None
    assert stored.revision == taken.revision
    assert stored.job.metadata == {"deep": {"n": [1, 2]}}


async def test_the_admitting_callers_job_changed_in_place_changes_nothing_taken(
    store: RunStore,
) -> None:
    # The caller changes the job it admitted (and the record admit returned) in place: the
    # worker takes the job as stored, and its writes go on.
    job = J.AgentJob.ask("a", "1", metadata={"tag": "x"})
    admitted = (await store.admit(job, now=1.0)).record
    job.metadata["tag"] = "changed"
    admitted.job.metadata["more"] = 1
    taken = await store.acquire(owner="w", lease=30, now=2.0)
    assert taken is not None
    assert taken.lease is not None
    assert taken.job.metadata == {"tag": "x"}
    renewed = J.renew(taken, taken.lease, now=3.0, lease=30)
    assert isinstance(renewed, J.Applied)
    assert await store.write(renewed)
    assert await store.status(taken.id) is J.JobStatus.RUNNING


async def test_a_job_equal_by_value_but_written_otherwise_is_the_same_job(store: RunStore) -> None:
    # 1.0 == 1 in Python, not in JSON: the job is the same by value (as the SQL stores compare
    # it), so the write goes through in every store alike.
    admitted = (await store.admit(J.AgentJob.ask("a", "1", metadata={"n": 1}), now=1.0)).record
    same = attrs.evolve(admitted.job, metadata={"n": 1.0})
    moved = attrs.evolve(admitted, job=same, revision=admitted.revision + 1, updated_at=2.0)
    assert await store.write(J.Applied(moved, admitted.revision))
    other = attrs.evolve(admitted.job, metadata={"n": 2})
    changed = attrs.evolve(moved, job=other, revision=moved.revision + 1, updated_at=3.0)
    assert await _refused(store, J.Applied(changed, moved.revision))
