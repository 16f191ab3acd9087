"""A2A (Agent2Agent, protocol 1.0): each of the relay's agents as an A2A server, so that an agent
of another framework (or the official ``a2a-sdk`` client) sends it tasks.

* ``GET /a2a/{agent}/.well-known/agent-card.json``: the agent's card (its JSON-RPC endpoint is
  ``/a2a/{agent}``);
* ``POST /a2a/{agent}``: JSON-RPC -- ``SendMessage`` (the task, once it ended; or at once with
  ``returnImmediately``), ``SendStreamingMessage`` (the task's events as Server-Sent Events),
  ``GetTask``, ``CancelTask`` and ``SubscribeToTask`` (the task's events again: its state
  now, then live to its end -- the live-run resume).

An A2A task is a run of the agent, in memory: its lifecycle is the run's (``submitted``,
``working``, ``completed``, ``canceled``, ``failed`` -- ``failed`` also for an answer cut
short) -- or, on a relay that serves durable jobs of that agent, a durable job, whose
lifecycle it follows, ``input-required`` included (:mod:`._a2a_jobs`). A task outlives the
connection that sent it (A2A clients come back to tasks); its
messages' context (``contextId``) carries the conversation: a task sent in the context of
earlier ones runs on their history. As on every route of the relay, the card and the methods
need the relay token, and a token sees only its own tasks (another's is ``TaskNotFound``,
exactly as one that never was). The codec is :mod:`protocols.serve.a2a`.
"""

from __future__ import annotations

import collections
import contextlib
import json
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from protocols._json import JSON
from protocols.jobs import JobRecord
from protocols.live import RunEvent
from protocols.messages import AgentResult, Message, Role, new_id
from protocols.serve import a2a as wire

from . import _a2a_jobs
from ._admission import _TokenState
from ._asgi import _Gone
from ._frontend_http import Call, answer_json, cors
from ._runs import _Run
from ._served import Refusal, answer_stream, read_request, start_run, wait_outcome

if TYPE_CHECKING:
    from ._server import RelayServer

#: A string as JSON text (its quotes included; non-ASCII kept as it is).
_string = json.encoder.encode_basestring

#: Tasks the relay remembers (the latest ones; an older one is ``TaskNotFound``).
TASKS_KEPT = 10_000
#: Contexts whose conversation the relay remembers (the latest ones).
CONTEXTS_KEPT = 10_000
#: Messages of one context's conversation kept (the latest ones).
CONTEXT_MESSAGES = 1_000
#: Characters of the contexts' conversations kept altogether (then the oldest contexts go).
CONTEXT_CHARS = 64_000_000


@attrs.define
class _Task:
    """An A2A task: its run (held weakly: a run the relay no longer keeps is gone for its task
    too) and what its Task object is made of."""

    id: str
    context_id: str
    agent: str
    held: weakref.ref[_Run]
    sent: wire.A2AMessage
    #: Its result went into its context's conversation.
    settled: bool = False

    def encoder(self) -> wire.TaskEncoder:
        return wire.TaskEncoder(self.id, self.context_id, history=[self.sent])

    def caught_up(self, run: _Run) -> tuple[wire.TaskEncoder, int]:
        """An encoder that has read the task's ``run``'s log as it stands (what it said is
        dropped), and the seq it read to."""
        encoder = self.encoder()
        last = 0
        for event in run.live.log.read(0, run.last + 1):
            encoder.feed(event)
            last = event.seq
        return encoder, last


class _State:
    """The relay's A2A tasks and contexts, by owner."""

    def __init__(self) -> None:
        self.tasks: collections.OrderedDict[tuple[_TokenState, str], _Task] = (
            collections.OrderedDict()
        )
        self.contexts: collections.OrderedDict[
            tuple[_TokenState, str, str], tuple[Message, ...]
        ] = collections.OrderedDict()

        #: Characters the contexts' conversations hold (:func:`_chars`).
        self.chars = 0
        #: Durable tasks' contexts and the messages that started them, by owner and job id.
        self.jobs: collections.OrderedDict[
            tuple[_TokenState, str], tuple[str, wire.A2AMessage, bool]
        ] = collections.OrderedDict()

    def history(self, owner: _TokenState, agent: str, context_id: str) -> tuple[Message, ...]:
        return self.contexts.get((owner, agent, context_id), ())

    def remember_job(
        self, owner: _TokenState, job_id: str, context_id: str, sent: wire.A2AMessage
    ) -> None:
        """A durable task was sent: its context and its message (the latest ones kept)."""
        self.jobs[(owner, job_id)] = (context_id, sent, False)
        while len(self.jobs) > TASKS_KEPT:
            self.jobs.popitem(last=False)

    def job_context(self, owner: _TokenState, job_id: str) -> tuple[str, wire.A2AMessage | None]:
        """A durable task's context (its own id, when this process did not see it sent) and
        the message it was sent."""
        known = self.jobs.get((owner, job_id))
        return (job_id, None) if known is None else (known[0], known[1])

    def settle_job(self, owner: _TokenState, agent: str, record: JobRecord) -> None:
        """Add an ended durable task's exchange to its context's conversation (once)."""
        known = self.jobs.get((owner, record.id))
        if known is None or known[2] or not record.terminal or record.result is None:
            return
        self.jobs[(owner, record.id)] = (known[0], known[1], True)
        self._add(owner, agent, known[0], record.result.messages)

    def _add(
        self, owner: _TokenState, agent: str, context_id: str, messages: Sequence[Message]
    ) -> None:
        key = (owner, agent, context_id)
        before = self.contexts.pop(key, ())
        self.chars -= _chars(before)
        # (a run's messages begin with its input: the message the task was sent)
        kept = self.contexts[key] = _whole((*before, *messages)[-CONTEXT_MESSAGES:])
        self.chars += _chars(kept)
        while len(self.contexts) > CONTEXTS_KEPT or self.chars > CONTEXT_CHARS:
            _, dropped = self.contexts.popitem(last=False)
            self.chars -= _chars(dropped)

    def settle(self, owner: _TokenState, task: _Task) -> None:
        """Add an ended task's exchange to its context's conversation (once)."""
        run = task.held()
        if task.settled or run is None or not run.ended:
            return
        task.settled = True
        result = run.outcome
        if isinstance(result, AgentResult):
            self._add(owner, task.agent, task.context_id, result.messages)


def _chars(messages: Sequence[Message]) -> int:
    """About how much a conversation holds: its messages' texts, and a little per message."""
    return sum(64 + len(m.content) + len(m.thinking) for m in messages)


def _whole(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """``messages`` from the first user message on (a tail cut to its length may begin with a
    tool's result, whose call it lost)."""
    for index, message in enumerate(messages):
        if message.role == Role.USER:
            return messages[index:]
    return ()


def _state(server: RelayServer) -> _State:
    state = server._a2a
    if state is None:
        state = server._a2a = _State()
    assert isinstance(state, _State)
    return state


@attrs.frozen
class _Rpc:
    """One JSON-RPC request to agent ``agent``, from ``holder``, and how to answer it."""

    server: RelayServer
    call: Call
    holder: _TokenState
    agent: str
    request: wire.A2ARequest
    extra: list[tuple[bytes, bytes]]

    def server_state(self) -> _State:
        """The relay's A2A tasks and contexts."""
        return _state(self.server)

    async def answer(self, result: JSON) -> None:
        """Answer the request with ``result``."""
        body = wire.rpc_result(self.request.id, result)
        await answer_json(self.call.send, 200, body, extra=self.extra)

    def parts(
        self,
    ) -> tuple[RelayServer, Call, _TokenState, str, wire.A2ARequest, list[tuple[bytes, bytes]]]:
        return self.server, self.call, self.holder, self.agent, self.request, self.extra

    async def error(self, code: int, text: str) -> None:
        """Answer a JSON-RPC error -- as one error event for a streaming method (the SDK's
        client raises it), else as the response."""
        body = wire.rpc_error(self.request.id, code, text)
        if not self.request.streaming:
            await answer_json(self.call.send, 200, body, extra=self.extra)
            return
        head = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-store"),
            *self.extra,
        ]
        event = wire.sse_event(body, error=True)
        with contextlib.suppress(OSError, _Gone):
            await self.call.send({"type": "http.response.start", "status": 200, "headers": head})
            await self.call.send({"type": "http.response.body", "body": event, "more_body": False})


class _Stream:
    """A task's stream events as Server-Sent Events (see
    :class:`~actors.relay._served.Encoding`): JSON-RPC results of request ``rid``. A delta
    that only appends to the answer is framed as the one before it (one per delta: the hot
    path), its text alone encoded."""

    def __init__(self, encoder: wire.TaskEncoder, rid: str | int | None, head: bytes) -> None:
        self.encoder = encoder
        self.rid = rid
        self._head = head
        framed = wire.sse_event(wire.rpc_result(rid, encoder.appended("\x00")))
        before, _, after = framed.partition(b"\\u0000")
        self._around = (before[:-1], after[1:])  # (the quotes go with the text)

    def head(self) -> bytes:
        return self._head

    def feed(self, events: Sequence[RunEvent]) -> bytes:
        encoder, rid = self.encoder, self.rid
        before, after = self._around
        out: list[bytes] = []
        for event in events:
            text = encoder.append_text(event)
            if text is not None:
                try:
                    out.append(before + _string(text).encode("utf-8") + after)
                except UnicodeEncodeError:  # a lone surrogate: the codec repairs it
                    out.append(wire.sse_event(wire.rpc_result(rid, encoder.appended(text))))
                continue
            out += [wire.sse_event(wire.rpc_result(rid, item)) for item in encoder.feed(event)]
        return b"".join(out)

    def tail(self) -> bytes:
        return b""


def _sse(rid: str | int | None, items: Sequence[dict[str, JSON]]) -> bytes:
    return b"".join(wire.sse_event(wire.rpc_result(rid, item)) for item in items)


async def route(server: RelayServer, call: Call, params: Sequence[str]) -> None:
    """``/a2a/{agent}`` and its card (see the module's docstring); anything else: 404."""
    extra = cors(server, call.scope, call.headers)
    method = call.scope.get("method", "GET")
    agents = server.agents
    if len(params) < 2 or params[0] != "a2a":
        await answer_json(call.send, 404, {"error": "not found"}, extra=extra)
        return
    agent, rest = params[1], params[2:]
    card = rest == [".well-known", "agent-card.json"]
    if (rest and not card) or (card and method != "GET") or (not card and method != "POST"):
        allow = b"GET" if card else b"POST"
        status = 405 if (card or not rest) else 404
        await answer_json(
            call.send, status, {"error": "not found"}, extra=[(b"allow", allow), *extra]
        )
        return
    if card:
        await _card(server, call, agent, extra)
        return
    try:
        holder, body = await read_request(server, call.scope, call.headers, call.receive)
        durable = _a2a_jobs.serves(server.jobs, agent)
        if not durable and (agents is None or agent not in agents):
            server._refuse("unknown_agent")
            raise Refusal("unknown_agent")
    except Refusal as refusal:
        await answer_json(call.send, refusal.status, {"error": refusal.message}, extra=extra)
        return
    except _Gone:
        return
    request = wire.decode_rpc(body, max_bytes=server.limits.max_frame)
    if isinstance(request, wire.RpcError):
        server._refuse("invalid")
        await answer_json(call.send, 200, request.body, extra=extra)
        return
    rpc = _Rpc(server, call, holder, agent, request, extra)
    if durable:
        assert server.jobs is not None
        await _DURABLE[request.method](rpc, server.jobs)
        return
    await _METHODS[request.method](rpc)


async def _card(
    server: RelayServer, call: Call, agent: str, extra: list[tuple[bytes, bytes]]
) -> None:
    """The agent's card -- for the relay's tokens alone, like everything it serves."""
    holder = await server._http_token(call.scope, call.headers, call.send)
    if holder is None:
        return
    agents = server.agents
    known = agents is not None and agent in agents
    if not known and not _a2a_jobs.serves(server.jobs, agent):
        server._refuse("unknown_agent")
        await answer_json(call.send, 404, {"error": "no agent of that name"}, extra=extra)
        return
    spec = agents.registry.get(agent) if agents is not None and known else None
    host = call.headers.get("host") or "127.0.0.1"
    scheme = call.scope.get("scheme", "http")
    url = f"{scheme}://{host}{call.scope.get('root_path', '')}/a2a/{agent}"
    system = spec.system if spec is not None else None
    description = (system or f"The agent {agent}").strip().splitlines()[0][:500]
    await answer_json(call.send, 200, wire.agent_card(agent, description, url), extra=extra)


async def _send(rpc: _Rpc) -> None:
    """``SendMessage`` / ``SendStreamingMessage``: a new task on the agent (a message naming
    a task goes on with it only while it waits for input, which no in-memory task does)."""
    server, call, holder, agent, request, extra = rpc.parts()
    state = _state(server)
    message = request.message
    assert message is not None
    rid = request.id
    if request.task_id is not None:
        known = state.tasks.get((holder, request.task_id))
        code, text = (
            (wire.RpcCode.TASK_NOT_FOUND, "no task has this id")
            if known is None
            else (wire.RpcCode.UNSUPPORTED_OPERATION, "the task has ended: send a new one")
        )
        await rpc.error(code, text)
        return
    context_id = request.context_id or new_id()
    messages = [*state.history(holder, agent, context_id), *wire.message_to_messages(message)]
    try:
        run = start_run(server, holder, messages=messages, agent=agent, outlives=True)
    except Refusal as refusal:
        await answer_json(call.send, refusal.status, {"error": refusal.message}, extra=extra)
        return
    task = _Task(new_id(), context_id, agent, weakref.ref(run), message)
    key = (holder, task.id)
    state.tasks[key] = task
    while len(state.tasks) > TASKS_KEPT:
        state.tasks.popitem(last=False)
    if request.streaming:
        encoder = task.encoder()
        try:
            await answer_stream(
                server, run, _Stream(encoder, rid, _sse(rid, encoder.resume())), call.receive,
                call.send, headers=extra,
            )  # fmt: skip
        finally:
            state.settle(holder, task)
        return
    if request.blocking and await wait_outcome(run, call.receive):
        state.settle(holder, task)
    elif request.blocking:
        return  # its client left (the task goes on)
    encoder, _ = task.caught_up(run)
    answer = wire.rpc_result(rid, {"task": encoder.task(history_length=request.history_length)})
    await answer_json(call.send, 200, answer, extra=extra)


async def _get(rpc: _Rpc) -> None:
    """``GetTask``: the task as it stands."""
    found = await _found(rpc)
    if found is not None:
        await _shown(rpc, *found)


async def _cancel(rpc: _Rpc) -> None:
    """``CancelTask``: the task is cancelled (its partial answer kept) and shown once it has
    ended; a task that had ended already is ``TaskNotCancelable``."""
    found = await _found(rpc)
    if found is None:
        return
    run = found[1]
    if run.ended:
        await rpc.error(wire.RpcCode.TASK_NOT_CANCELABLE, "the task has ended")
        return
    run.cancel()
    if await wait_outcome(run, rpc.call.receive):
        await _shown(rpc, *found)


async def _shown(rpc: _Rpc, task: _Task, run: _Run) -> None:
    """Answer with the Task as its run's log shows it now (an ended task's exchange goes
    into its context first)."""
    _state(rpc.server).settle(rpc.holder, task)
    encoder, _ = task.caught_up(run)
    await rpc.answer(encoder.task(history_length=rpc.request.history_length))


async def _subscribe(rpc: _Rpc) -> None:
    """``SubscribeToTask``: the Task as it stands, then its events live to its end (a task
    that has ended is ``UnsupportedOperation``, as A2A says)."""
    server, call, holder, _agent, request, extra = rpc.parts()
    found = await _found(rpc)
    if found is None:
        return
    task, run = found
    if run.ended:
        code, text = wire.RpcCode.UNSUPPORTED_OPERATION, "the task has ended: GetTask shows it"
        await rpc.error(code, text)
        return
    if run.watchers >= server.limits.max_watchers:
        server._refuse("too_many_watchers")
        await answer_json(call.send, 429, {"error": "too many watchers of this task"}, extra=extra)
        return
    encoder, last = task.caught_up(run)
    head = _sse(request.id, encoder.resume())
    try:
        await answer_stream(
            server, run, _Stream(encoder, request.id, head), call.receive, call.send,
            after=last, headers=extra,
        )  # fmt: skip
    finally:
        _state(server).settle(holder, task)


async def _found(rpc: _Rpc) -> tuple[_Task, _Run] | None:
    """The task the request names and its run, if ``holder`` owns it on this agent and the
    relay keeps its run; else answered ``TaskNotFound`` (the same answer for another token's
    task as for none)."""
    server, holder, request = rpc.server, rpc.holder, rpc.request
    task = _state(server).tasks.get((holder, request.task_id or ""))
    run = task.held() if task is not None else None
    if (
        task is None
        or run is None
        or task.agent != rpc.agent
        or server._runs.find(run.run_id, holder) is None
    ):
        await rpc.error(wire.RpcCode.TASK_NOT_FOUND, "no task has this id")
        return None
    return task, run


_DURABLE = {
    "SendMessage": _a2a_jobs.send,
    "SendStreamingMessage": _a2a_jobs.send,
    "GetTask": _a2a_jobs.get,
    "CancelTask": _a2a_jobs.cancel,
    "SubscribeToTask": _a2a_jobs.subscribe,
}

_METHODS = {
    "SendMessage": _send,
    "SendStreamingMessage": _send,
    "GetTask": _get,
    "CancelTask": _cancel,
    "SubscribeToTask": _subscribe,
}
