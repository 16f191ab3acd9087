"""A2A tasks as durable jobs: on a relay that serves jobs (``RelayServer(..., jobs=...)``,
``trio-agents serve --store URL``), an A2A task sent to an agent the jobs run is a durable job
of that agent -- it survives the relay's restarts and its workers' crashes, and its lifecycle
is the job's: ``submitted`` while queued, ``working``, ``input-required`` while it waits for
approvals (the client answers with a message on the same task, a data part ``{"answers":
[{"call_id", "allow", "reason"}]}``) or for the answer to a question its agent asks (the
status's text is the question; the next message's text answers it, read and checked against
the question -- or a data part ``{"answers": [{"call_id", "answer"}]}``), then ``completed``,
``canceled`` or ``failed``. Its
events are the job's, derived from its journal (``SubscribeToTask`` reads them from any
point, in any relay process on the store). The in-memory side is :mod:`._a2a`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING

import trio

from protocols._json import JSON
from protocols.codec import to_json
from protocols.errors import ValidationError
from protocols.jobs import ApprovalAnswer, JobRecord, JobStatus
from protocols.live import JournalEvents, RunEvent
from protocols.messages import new_id
from protocols.questions import parse_answer
from protocols.serve import a2a as wire

from .._sqlite import StoreError
from ..durable import watch_job
from ._asgi import _body, _HttpOut, _server_sent_events
from ._frontend_http import answer_json
from ._jobs import _Refusal

if TYPE_CHECKING:
    from ._a2a import _Rpc
    from ._jobs import RelayJobs

#: Seconds a ``CancelTask`` waits for the job to say it ended (a worker elsewhere stops it).
CANCEL_WAIT = 10.0

#: What each job status is shown as, when the journal has not said it.
_FINAL: Mapping[JobStatus, wire.TaskState] = {
    JobStatus.COMPLETED: wire.TaskState.COMPLETED,
    JobStatus.PARTIAL: wire.TaskState.FAILED,
    JobStatus.FAILED: wire.TaskState.FAILED,
    JobStatus.ABANDONED: wire.TaskState.FAILED,
    JobStatus.CANCELLED: wire.TaskState.CANCELED,
}


def serves(jobs: RelayJobs | None, agent: str) -> bool:
    """Whether ``jobs`` run ``agent`` (then its A2A tasks are jobs)."""
    return jobs is not None and (jobs.agents is None or agent in jobs.agents)


async def _record(rpc: _Rpc, jobs: RelayJobs) -> JobRecord | None:
    """The job the request names, if it is the caller's and this agent's; else ``None``,
    answered ``TaskNotFound`` (another token's job exactly as no job)."""
    try:
        record = await jobs._owned(rpc.request.task_id or "", rpc.holder)
    except _Refusal:
        record = None
    if record is None or record.job.agent != rpc.agent:
        await rpc.error(wire.RpcCode.TASK_NOT_FOUND, "no task has this id")
        return None
    return record


async def _so_far(jobs: RelayJobs, record: JobRecord) -> list[RunEvent]:
    """The job's events as its journal says now (without waiting)."""
    derived = JournalEvents(record.id, agent=record.job.agent)
    return derived.feed(await jobs.store.journal(record.id))


def _encoder(rpc: _Rpc, record: JobRecord) -> wire.TaskEncoder:
    context_id, sent = rpc.server_state().job_context(rpc.holder, record.id)
    return wire.TaskEncoder(record.id, context_id, history=[] if sent is None else [sent])


async def _caught_up(rpc: _Rpc, jobs: RelayJobs, record: JobRecord) -> tuple[wire.TaskEncoder, int]:
    """An encoder that has read the job's events so far (what it said is dropped), and the
    seq it read to."""
    encoder = _encoder(rpc, record)
    last = 0
    for event in await _so_far(jobs, record):
        encoder.feed(event)
        last = event.seq
    return encoder, last


def _task(encoder: wire.TaskEncoder, record: JobRecord, rpc: _Rpc) -> dict[str, JSON]:
    """The Task of ``record`` as ``encoder`` knows it; a job that ended without its journal
    saying so (cancelled or abandoned before it ran) in the state its record says."""
    task = encoder.task(history_length=rpc.request.history_length)
    final = _FINAL.get(record.status)
    status = task.get("status")
    if final is not None and isinstance(status, dict) and status.get("state") != final.value:
        task["status"] = {**status, "state": final.value}
    return task


def _typed_answer(record: JobRecord, message: wire.A2AMessage) -> tuple[ApprovalAnswer, ...]:
    """A message's text as the answer to the one question the job waits for (read as
    :func:`~protocols.questions.parse_answer` reads text; a refused one raises
    :class:`~protocols.errors.ValidationError`): none unless the job waits for exactly one
    thing, a question, and the message has text."""
    answered = {answer.call_id for answer in record.answers}
    waiting = [request for request in record.pending if request.call_id not in answered]
    if len(waiting) != 1 or waiting[0].question is None:
        return ()
    text = "\n".join(part.text or "" for part in message.parts if part.kind == "text")
    if not text.strip():
        return ()
    request = waiting[0]
    assert request.question is not None
    value = parse_answer(request.question, text)
    return (ApprovalAnswer(request.call_id, True, "", value),)


def _answer_body(answer: ApprovalAnswer) -> dict[str, JSON]:
    """``answer`` as ``POST .../answers`` takes it (a question's with its ``answer``)."""
    body: dict[str, JSON] = {
        "call_id": answer.call_id,
        "allow": answer.allow,
        "reason": answer.reason,
    }
    if answer.value is not None:
        body["answer"] = to_json(answer.value)
    return body


async def send(rpc: _Rpc, jobs: RelayJobs) -> None:
    """``SendMessage`` / ``SendStreamingMessage``: a new job of the agent -- or, naming a task
    that waits for input, the answers to its approvals (then it goes on)."""
    request, holder = rpc.request, rpc.holder
    message = request.message
    assert message is not None
    state = rpc.server_state()
    if request.task_id is not None:
        record = await _record(rpc, jobs)
        if record is None:
            return
        if record.status is not JobStatus.AWAITING_INPUT:
            ended = "has ended" if record.terminal else "is working: it asks for nothing"
            await rpc.error(wire.RpcCode.UNSUPPORTED_OPERATION, f"the task {ended}")
            return
        try:
            answers = wire.approvals_of(message) or _typed_answer(record, message)
        except ValidationError as error:
            await rpc.error(wire.RpcCode.INVALID_PARAMS, error.message)
            return
        if not answers:
            await rpc.error(
                wire.RpcCode.INVALID_PARAMS,
                'the task waits for approvals: answer them with a data part {"answers": '
                '[{"call_id": ..., "allow": true or false, "reason": ...}]}',
            )
            return
        body = {"answers": [_answer_body(answer) for answer in answers]}
        try:
            record = await jobs._answer_job(holder, record.id, body)
        except _Refusal as refusal:
            await rpc.error(wire.RpcCode.INVALID_PARAMS, refusal.message or refusal.code)
            return
        encoder, last = await _caught_up(rpc, jobs, record)
        encoder.add_message(message)
    else:
        context_id = request.context_id or new_id()
        history = state.history(holder, rpc.agent, context_id)
        messages = [*history, *wire.message_to_messages(message)]
        job = {"agent": rpc.agent, "input": [to_json(m) for m in messages]}
        try:
            record, _ = await jobs._submit_job(rpc.server, holder, job)
        except _Refusal as refusal:
            await rpc.error(wire.RpcCode.INVALID_PARAMS, refusal.message or refusal.code)
            return
        state.remember_job(holder, record.id, context_id, message)
        encoder, last = _encoder(rpc, record), 0
    if request.streaming:
        await _stream(rpc, jobs, record, encoder, last, head=encoder.resume())
        return
    if request.blocking:
        async with contextlib.aclosing(_follow(jobs, record.id, last)) as events:
            async for event in events:
                encoder.feed(event)
        record = await jobs.store.get(record.id) or record
    await rpc.answer({"task": _task(encoder, record, rpc)})


async def get(rpc: _Rpc, jobs: RelayJobs) -> None:
    """``GetTask``: the job as it stands."""
    record = await _record(rpc, jobs)
    if record is None:
        return
    encoder, _ = await _caught_up(rpc, jobs, record)
    rpc.server_state().settle_job(rpc.holder, rpc.agent, record)
    await rpc.answer(_task(encoder, record, rpc))


async def cancel(rpc: _Rpc, jobs: RelayJobs) -> None:
    """``CancelTask``: the job is cancelled and shown once it says it ended (its worker,
    perhaps in another process, stops it; at most :data:`CANCEL_WAIT` seconds)."""
    record = await _record(rpc, jobs)
    if record is None:
        return
    if record.terminal:
        await rpc.error(wire.RpcCode.TASK_NOT_CANCELABLE, "the task has ended")
        return
    encoder, last = await _caught_up(rpc, jobs, record)
    await jobs._cancel_job(rpc.holder, record.id)
    with trio.move_on_after(CANCEL_WAIT):
        async with contextlib.aclosing(_follow(jobs, record.id, last)) as events:
            async for event in events:
                encoder.feed(event)
    record = await jobs.store.get(record.id) or record
    await rpc.answer(_task(encoder, record, rpc))


async def subscribe(rpc: _Rpc, jobs: RelayJobs) -> None:
    """``SubscribeToTask``: the Task as it stands, then its events to its end or to its next
    wait for input (a task that has ended is ``UnsupportedOperation``)."""
    record = await _record(rpc, jobs)
    if record is None:
        return
    if record.terminal:
        await rpc.error(wire.RpcCode.UNSUPPORTED_OPERATION, "the task has ended: GetTask shows it")
        return
    encoder, last = await _caught_up(rpc, jobs, record)
    await _stream(rpc, jobs, record, encoder, last, head=encoder.resume())


def _ended(encoder: wire.TaskEncoder) -> bool:
    """The task's stream has had its final event (a call: it changes as events are fed)."""
    return encoder.ended


async def _follow(jobs: RelayJobs, id: str, after: int) -> AsyncGenerator[RunEvent, None]:
    """The job's events after ``after`` as they come, to the next terminal one (a store
    that fails ends them: the client subscribes again)."""
    try:
        async for event in watch_job(jobs.store, id, after=after, poll=jobs.limits.poll):
            yield event
            if event.terminal:
                return
    except (ValidationError, StoreError):
        return


async def _stream(
    rpc: _Rpc,
    jobs: RelayJobs,
    record: JobRecord,
    encoder: wire.TaskEncoder,
    after: int,
    *,
    head: list[dict[str, JSON]],
) -> None:
    """Answer with the task's stream: ``head``, then the job's events after ``after``,
    through its next terminal event (keep-alive comments between)."""
    server, rid = rpc.server, rpc.request.id
    owner = rpc.holder.token.name
    try:
        jobs._take_stream(owner)
    except _Refusal:
        server._refuse("too_many_streams")
        await answer_json(rpc.call.send, 429, {"error": "too many event streams"}, extra=rpc.extra)
        return

    def sse(items: list[dict[str, JSON]]) -> bytes:
        return b"".join(wire.sse_event(wire.rpc_result(rid, item)) for item in items)

    async def pump(out: _HttpOut) -> None:
        await out.put(_body(sse(head)))
        if _ended(encoder):
            return
        with trio.CancelScope() as cut:
            server._scopes.add(cut)  # (the relay's close cuts it; the answer still ends)
            if server._closing:
                cut.cancel()
            try:
                async with contextlib.aclosing(_follow(jobs, record.id, after)) as events:
                    async for event in events:
                        data = sse(encoder.feed(event))
                        if data:
                            await out.put(_body(data))
                        if _ended(encoder):
                            return
            finally:
                server._scopes.discard(cut)

    try:
        await _server_sent_events(
            rpc.call.send, rpc.call.receive, server.limits.send_timeout, rpc.extra, pump
        )
    finally:
        jobs._give_stream(owner)
        with contextlib.suppress(StoreError):
            latest = await jobs.store.get(record.id)
            if latest is not None:
                rpc.server_state().settle_job(rpc.holder, rpc.agent, latest)
