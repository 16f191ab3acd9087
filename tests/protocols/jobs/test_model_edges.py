"""protocols.jobs at its edges: refusals of malformed jobs, a parent and child sharing a thread,
a started job's place in its thread, a cancel requested while running, a checkpoint inside an
open batch (each found failing once, and fixed)."""

from __future__ import annotations

import pytest

from protocols.errors import ValidationError
from protocols.jobs import (
    AgentJob,
    ApprovalAnswer,
    ApprovalRequest,
    CheckpointEntry,
    Conflict,
    InputEntry,
    JobStatus,
    JournalDrift,
    Priority,
    ResponseEntry,
    acquire,
    admit,
    admit_tree,
    answer,
    cancel,
    replay,
    retry,
    runnable,
    suspend,
)
from protocols.messages import Message, ToolCall


# 1. AgentJob promises "every refusal is a ValidationError naming the field".
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("input", 5),
        ("input", None),
        ("children", 5),
        ("children", None),
        ("children", AgentJob("b")),
    ],
)
def test_agent_job_non_iterable_input_or_children_is_a_validation_error(
    field: str, value: object
) -> None:
    with pytest.raises(ValidationError, match=rf"AgentJob\.{field}"):
        AgentJob("a", **{field: value})  # type: ignore[arg-type]


# 2. An interrupting job whose declared child names the same conversation: the parent heads its
#    thread (interrupt first) but waits for its child, and the child (normal priority, only the
#    top job carries it) is behind the parent in that thread: nothing ever runs.
def test_an_interrupting_parent_does_not_deadlock_its_own_childs_thread() -> None:
    child = AgentJob.ask("agent", "child", conversation="t")
    parent = AgentJob.ask("agent", "parent", conversation="t", children=[child])
    records = admit_tree(
        parent, ids=["p", "c"], first_sequence=1, now=0.0, priority=Priority.INTERRUPT
    )
    assert [r.id for r in runnable(records, now=1.0)] == ["c"]


# 3. A thread's job that started, then went back to the queue (an answered approval, a retry),
#    is overtaken by an interrupting job admitted later: that job runs in the middle of the
#    first one's run, whose assistant message with calls is already in the thread (004 S7/S8:
#    a persisted execution order comes first).
def started_then_requeued(how: str) -> list:
    a = admit("a", AgentJob.ask("agent", "1", conversation="t"), sequence=1, now=0.0)
    a = acquire(a, owner="w", now=0.0, lease=30, execution=1).record  # type: ignore[union-attr]
    assert a.lease is not None
    if how == "answer":
        a = suspend(a, a.lease, now=1.0, pending=[ApprovalRequest("c1", "rm")]).record  # type: ignore[union-attr]
        a = answer(a, ApprovalAnswer("c1", True), now=3.0).record  # type: ignore[union-attr]
    else:
        a = retry(a, a.lease, now=1.0, delay=0, error="provider").record  # type: ignore[union-attr]
    i = admit(
        "i",
        AgentJob.ask("agent", "2", conversation="t"),
        sequence=2,
        now=2.0,
        priority=Priority.INTERRUPT,
    )
    return [a, i]


@pytest.mark.parametrize("how", ["answer", "retry"])
def test_a_started_job_keeps_its_place_in_its_thread(how: str) -> None:
    records = started_then_requeued(how)
    assert records[0].status is JobStatus.QUEUED
    assert records[0].execution == 1
    assert [r.id for r in runnable(records, now=5.0)] == ["a"]


# 4. A cancel requested while a job runs survives a retry (or a suspension and its answers):
#    the job is then queued with the cancel requested, which acquire refuses and runnable
#    leaves out -- it never runs and never ends (and holds its thread back for good).
@pytest.mark.parametrize("how", ["retry", "answer"])
def test_a_requested_cancel_ends_the_job_instead_of_requeueing_it(how: str) -> None:
    job = admit("c", AgentJob.ask("agent", "1", conversation="t"), sequence=1, now=0.0)
    job = acquire(job, owner="w", now=0.0, lease=30, execution=1).record  # type: ignore[union-attr]
    job = cancel(job, now=1.0).record  # type: ignore[union-attr]
    assert job.lease is not None
    if how == "retry":
        job = retry(job, job.lease, now=2.0, delay=0, error="x").record  # type: ignore[union-attr]
    else:
        job = suspend(job, job.lease, now=2.0, pending=[ApprovalRequest("c1", "rm")]).record  # type: ignore[union-attr]
        if not job.terminal:
            job = answer(job, ApprovalAnswer("c1", True), now=3.0).record  # type: ignore[union-attr]
    later = admit("d", AgentJob.ask("agent", "2", conversation="t"), sequence=2, now=0.0)
    # Either it ended cancelled, or a worker can take it to end it; never stuck in between.
    assert job.terminal or [r.id for r in runnable([job, later], now=100.0)] == ["c"]


def test_a_checkpoint_inside_an_open_batch_is_drift() -> None:
    c1 = ToolCall("c1", "search")
    with pytest.raises(JournalDrift, match="entry 3"):
        replay(
            "j",
            [
                InputEntry((Message.user("x"),)),
                ResponseEntry(Message.assistant("", calls=[c1])),
                CheckpointEntry(2, "half an answer"),
            ],
        )


# An answer sent again after it landed and the job went on (queued again) is a duplicate, not
# an error: a client unsure its answer landed can simply send it again.
def test_an_answer_sent_again_after_the_job_went_on_is_a_duplicate() -> None:
    job = admit("a", AgentJob.ask("agent", "1"), sequence=1, now=0.0)
    job = acquire(job, owner="w", now=0.0, lease=30, execution=1).record  # type: ignore[union-attr]
    assert job.lease is not None
    job = suspend(job, job.lease, now=1.0, pending=[ApprovalRequest("c1", "rm")]).record  # type: ignore[union-attr]
    job = answer(job, ApprovalAnswer("c1", True), now=2.0).record  # type: ignore[union-attr]
    assert job.status is JobStatus.QUEUED
    again = answer(job, ApprovalAnswer("c1", True), now=3.0)
    assert isinstance(again, Conflict)
    assert again.reason == "duplicate"
    other = answer(job, ApprovalAnswer("c1", False), now=3.0)
    assert isinstance(other, Conflict)
    assert other.reason == "state"
