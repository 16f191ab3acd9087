"""Model settings of durable jobs (issue 24, item 1): ``AgentRegistry.add(settings=...)`` gives
an agent's, a job's own are stored in the job (a real SQLite file) and override them field by
field when a worker runs it."""

from __future__ import annotations

import pathlib

import pytest
from test_job_queue import LeaseClock, worker

from actors.durable import AgentRegistry, SQLiteRunStore
from actors.testing import Reply, ScriptedProvider
from protocols.errors import ValidationError
from protocols.jobs import AgentJob
from protocols.settings import ModelSettings


async def test_a_job_stores_its_settings_and_they_override_the_agents(
    tmp_path: pathlib.Path,
) -> None:
    provider = ScriptedProvider(Reply("one"), Reply("two"))
    registry = AgentRegistry()
    registry.add("writer", provider, settings={"temperature": 0.2, "max_tokens": 50})
    job = AgentJob.ask("writer", "Write.", settings={"max_tokens": 10, "seed": 4})
    plain = AgentJob.ask("writer", "Write again.")
    path = tmp_path / "jobs.db"
    async with (
        await SQLiteRunStore.open(path) as store,
        worker(store, registry, clock=LeaseClock()) as queue,
    ):
        first = await queue.enqueue(job)
        await queue.result(first)
        second = await queue.enqueue(plain)
        await queue.result(second)
    async with await SQLiteRunStore.open(path) as store:  # read back from the file
        stored = await store.get(first)
        assert stored is not None
        assert stored.job.settings == ModelSettings(max_tokens=10, seed=4)
        other = await store.get(second)
        assert other is not None
        assert other.job.settings is None
    sent = [call.options.settings for call in provider.calls if call.options is not None]
    assert sent == [
        ModelSettings(temperature=0.2, max_tokens=10, seed=4),
        ModelSettings(temperature=0.2, max_tokens=50),
    ]


def test_invalid_settings_are_refused_when_registered_or_described() -> None:
    registry = AgentRegistry()
    with pytest.raises(ValidationError, match=r"ModelSettings\.top_p must be"):
        registry.add("bad", ScriptedProvider(), settings={"top_p": 0})
    assert "bad" not in registry
    with pytest.raises(ValidationError, match="ModelSettings has no field 'temp'"):
        AgentJob.ask("writer", "x", settings={"temp": 1})
