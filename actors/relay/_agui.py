"""``POST /v1/agui`` and ``POST /v1/agui/{agent}``: AG-UI (the Agent-User Interaction protocol),
so that an AG-UI frontend (CopilotKit, ``@ag-ui/client``'s ``HttpAgent``) runs the relay's model
or one of its agents. The request is AG-UI's ``RunAgentInput`` -- the thread's whole history
(the client holds it), the frontend's tools, context and state; the answer is AG-UI's events
as Server-Sent Events. A call of a frontend tool ends the run (``pendingToolCallIds``); the
client runs it and sends the thread again with its result. A client that leaves (its abort)
cancels the run. The codec is :mod:`protocols.serve.agui`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from protocols.errors import AgentsError
from protocols.serve import agui as wire

from ._asgi import _Gone
from ._frontend_http import Call, answer_json, cors
from ._served import EventSource, Refusal, _known, answer_stream, invalid, read_request, start_run

if TYPE_CHECKING:
    from ._server import RelayServer


class _Events(EventSource):
    """AG-UI's events of a run."""

    def __init__(self, encoder: wire.AguiEncoder) -> None:
        super().__init__(encoder.start, encoder.feed, wire.encode_sse)


async def run(server: RelayServer, call: Call, params: Sequence[str]) -> None:
    """Answer one AG-UI run (see the module's docstring): refused before any event -- 401
    for the token, 400 for a malformed ``RunAgentInput`` (saying which field), 404 for an
    unknown agent, 413, 429 and 503 for the relay's limits -- with a JSON body
    ``{"error": ...}``; else 200 and the run's events."""
    extra = cors(server, call.scope, call.headers)
    try:
        holder, body = await read_request(server, call.scope, call.headers, call.receive)
        _known(server, params[0] if params else None)
        try:
            given = wire.decode_run_input(body, max_bytes=server.limits.max_frame)
        except AgentsError as error:
            raise invalid(server, error.message) from None
        if given.resume:
            raise invalid(server, "resume: this relay asks no approvals over AG-UI")
        run_ = start_run(
            server,
            holder,
            messages=given.messages,
            tools=given.tools,
            agent=params[0] if params else None,
        )
    except Refusal as refusal:
        answer = {"error": refusal.message, "code": refusal.code}
        await answer_json(call.send, refusal.status, answer, extra=extra)
        return
    except _Gone:
        return
    encoder = wire.AguiEncoder(given.thread_id, given.run_id, parent_run_id=given.parent_run_id)
    await answer_stream(server, run_, _Events(encoder), call.receive, call.send, headers=extra)
