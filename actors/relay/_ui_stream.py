"""``POST /v1/chat`` and ``POST /v1/chat/{agent}``: the Vercel AI SDK's UI message stream, what
``useChat`` (with its default transport) sends and reads -- the relay's model (whose tool calls
the page runs) or one of its agents (its own tools run here; the page's tools are its client
tools). And ``GET .../{chat id}/stream``, the route the SDK reconnects to after a reload
(``resume``): the chat's answer so far, then the rest as it comes.

A chat's run outlives its connection -- the SDK cannot tell a reload from a stop, and a reload
must find its answer still going: a run nobody follows is cancelled after the relay's
``resume_grace`` seconds, and ``POST /v1/runs/{id}/cancel`` (the id is the answer's
``x-relay-run-id`` header) stops it at once. The codec is :mod:`protocols.serve.ui_stream`.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from protocols.errors import AgentsError
from protocols.messages import new_id
from protocols.serve import ui_stream as wire

from ._admission import _TokenState
from ._asgi import _Gone, _plain
from ._frontend_http import Call, cors
from ._runs import _Run
from ._served import EventSource, Refusal, _known, answer_stream, invalid, read_request, start_run

if TYPE_CHECKING:
    from ._server import RelayServer

#: The header that says a body is a UI message stream.
STREAM_HEADER = (b"x-vercel-ai-ui-message-stream", b"v1")

#: Chats whose latest run the relay remembers, to resume (the latest ones).
CHATS_KEPT = 10_000


@attrs.define
class _Chat:
    """A chat's latest run (held weakly: a run the relay no longer keeps is gone for its chat
    too), and how its stream is made (again, for a resume)."""

    held: weakref.ref[_Run]
    message_id: str
    executes_tools: bool
    prior: tuple[str, ...]
    client_tools: frozenset[str]
    #: A stream gave its client the run's end: nothing is left to resume.
    delivered: bool = False

    @property
    def run(self) -> _Run | None:
        """The chat's run, while the relay keeps it."""
        return self.held()

    def encoder(self) -> wire.UIStreamEncoder:
        return wire.UIStreamEncoder(
            self.message_id,
            executes_tools=self.executes_tools,
            prior_calls=self.prior,
            client_tools=self.client_tools,
        )


class _Stream(EventSource):
    """A chat's UI message stream; its end is its chat's answer given whole."""

    def __init__(self, chat: _Chat) -> None:
        self.chat = chat
        encoder = chat.encoder()
        super().__init__(encoder.start, encoder.feed, wire.encode_sse, wire.DONE)

    def tail(self) -> bytes:
        self.chat.delivered = True
        return super().tail()


def _key(holder: _TokenState, agent: str | None, chat_id: str) -> tuple[object, ...]:
    return (holder, agent, chat_id)


async def _refused(call: Call, refusal: Refusal, server: RelayServer) -> None:
    # The transport shows a refusal's body as the chat's error, word for word: a short text.
    body = (refusal.message + "\n").encode()
    await _plain(call.send, refusal.status, body=body, extra=cors(server, call.scope, call.headers))


async def chat(server: RelayServer, call: Call, params: Sequence[str]) -> None:
    """Answer one ``useChat`` request (see the module's docstring): refused with a short
    plain text before any chunk -- 401 for the token, 400 for a malformed request (saying
    which part), 404 for an unknown agent, 413, 429 and 503 for the relay's limits -- or 200
    and the UI message stream."""
    agent = params[0] if params else None
    try:
        holder, body = await read_request(server, call.scope, call.headers, call.receive)
        _known(server, agent)
        try:
            request = wire.decode_chat_request(body, max_bytes=server.limits.max_frame)
        except AgentsError as error:
            raise invalid(server, error.message) from None
        if request.approvals:
            raise invalid(server, "approvals: this relay asks none over the UI message stream")
        run = start_run(
            server,
            holder,
            messages=request.messages,
            tools=request.tools,
            agent=agent,
            outlives=True,
        )
    except Refusal as refusal:
        await _refused(call, refusal, server)
        return
    except _Gone:
        return
    state = _Chat(
        weakref.ref(run),
        request.continues or new_id(),
        executes_tools=agent is not None,
        prior=request.continued_calls,
        client_tools=frozenset(tool.name for tool in request.tools),
    )
    chats = server._chats
    key = _key(holder, agent, request.chat_id)
    chats.pop(key, None)
    chats[key] = state
    while len(chats) > CHATS_KEPT:
        chats.popitem(last=False)
    await _answer(server, call, state, run)


async def resume(server: RelayServer, call: Call, params: Sequence[str]) -> None:
    """Answer the SDK's reconnect to a chat: its latest run's stream from the start (the
    SDK replaces what it showed with it), live to its end -- or 204 when the chat has no
    answer to resume (none, it was given whole already, or another token's chat: the same
    204)."""
    agent, chat_id = (params[0], params[1]) if len(params) == 2 else (None, params[0])
    if server._closing:
        server._refuse("shutdown")
        await _plain(call.send, 503)
        return
    holder = await server._http_token(call.scope, call.headers, call.send)
    if holder is None:
        return
    extra = cors(server, call.scope, call.headers)
    state = server._chats.get(_key(holder, agent, chat_id))
    run = state.run if state is not None else None
    kept = run is not None and server._runs.find(run.run_id, holder) is not None
    if state is None or run is None or not kept or state.delivered:
        await _plain(call.send, 204, extra=extra)
        return
    if run.watchers >= server.limits.max_watchers:
        server._refuse("too_many_watchers")
        await _plain(call.send, 429, extra=extra)
        return
    await _answer(server, call, state, run)


async def _answer(server: RelayServer, call: Call, state: _Chat, run: _Run) -> None:
    headers = [STREAM_HEADER, *cors(server, call.scope, call.headers)]
    await answer_stream(
        server,
        run,
        _Stream(state),
        call.receive,
        call.send,
        headers=headers,
        grace=server.limits.resume_grace,
    )
