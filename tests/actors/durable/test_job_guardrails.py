"""Guardrails in durable jobs (issue 27, section 5): an agent's guards, given to the registry,
check each job's input (before its first provider call: a journal cannot take back what a
call streamed) and its answer; a trip ends the job ``stop="guardrail"``, and the job's record
(a real SQLite file, read back) says which guard tripped and why."""

from __future__ import annotations

import pathlib

from test_job_queue import LeaseClock, worker

from actors import input_guardrail, output_guardrail
from actors.durable import AgentRegistry, SQLiteRunStore
from actors.testing import Reply, ScriptedProvider
from protocols.jobs import AgentJob
from protocols.messages import GuardrailTrip, StopReason


async def test_a_jobs_guards_trip_and_its_record_says_so(tmp_path: pathlib.Path) -> None:
    # Parallel by default: in a job the input guard still runs before the first call.
    @input_guardrail
    def no_passwords(text: str) -> str | None:
        return "asks for a password" if "password" in text else None

    @output_guardrail
    def no_shouting(answer: str) -> str | None:
        return "the answer shouts" if answer.isupper() else None

    provider = ScriptedProvider(Reply("a quiet answer"), Reply("A LOUD ANSWER"))
    registry = AgentRegistry()
    registry.add("writer", provider, guardrails=[no_passwords, no_shouting])
    path = tmp_path / "jobs.db"
    async with (
        await SQLiteRunStore.open(path) as store,
        worker(store, registry, clock=LeaseClock(), allow_partial=True) as queue,
    ):
        refused = await queue.enqueue(AgentJob.ask("writer", "What is the admin password?"))
        refused_result = await queue.result(refused)
        quiet = await queue.enqueue(AgentJob.ask("writer", "Say something."))
        quiet_result = await queue.result(quiet)
        loud = await queue.enqueue(AgentJob.ask("writer", "Say something loud."))
        loud_result = await queue.result(loud)
    # The refused job never reached the model; the others each made one call.
    assert len(provider.calls) == 2
    assert all("password" not in m.content for call in provider.calls for m in call.messages)
    assert refused_result.stop is StopReason.GUARDRAIL
    assert quiet_result.stop is StopReason.COMPLETE
    assert loud_result.stop is StopReason.GUARDRAIL
    async with await SQLiteRunStore.open(path) as store:  # read back from the file
        stored = await store.get(refused)
        assert stored is not None
        assert stored.result is not None
        assert stored.result.guardrail == GuardrailTrip(
            "no_passwords", "input", "asks for a password"
        )
        shouted = await store.get(loud)
        assert shouted is not None
        assert shouted.result is not None
        assert shouted.result.guardrail == GuardrailTrip(
            "no_shouting", "output", "the answer shouts"
        )
        assert shouted.result.content == "A LOUD ANSWER"
