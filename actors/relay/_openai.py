"""``POST /v1/chat/completions``: OpenAI's chat completions, streamed and whole, so that any
OpenAI-compatible client (the official SDK, ``trio-agents chat --base-url``) is a credential-free
relay client, its API key a relay token. ``model`` is any name (the relay's own model answers)
or ``agent:NAME`` (a run of that agent of the relay's :class:`~actors.relay.RelayAgents`; the
client's tools are the run's client tools). The codec is :mod:`protocols.serve.openai_chat`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from protocols.errors import AgentsError
from protocols.serve import openai_chat as wire

from ._asgi import Send, _Gone
from ._frontend_http import Call, answer_json, cors
from ._served import (
    EventSource,
    Refusal,
    answer_stream,
    invalid,
    read_request,
    start_run,
    terminal_of,
)
from ._served import wait_outcome as _wait

if TYPE_CHECKING:
    from ._server import RelayServer


class _Chunks(EventSource):
    """The chunks of a streamed completion, ``[DONE]`` last (the encoder gives nothing after
    its final chunk or error)."""

    def __init__(self, encoder: wire.ChunkEncoder) -> None:
        super().__init__(list, encoder.feed, wire.encode_sse, wire.DONE)


async def _refuse(
    send: Send, refusal: Refusal, extra: list[tuple[bytes, bytes]], *, code: str | None = None
) -> None:
    status, headers, body = wire.error_response(code or refusal.code, refusal.message)
    await answer_json(send, status, body, extra=[*_bytes(headers), *extra])


def _bytes(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in headers.items()
        if name.lower() != "content-type"
    ]


async def completions(server: RelayServer, call: Call, params: Sequence[str]) -> None:
    """Answer one chat completion request (see the module's docstring): refused in OpenAI's
    error shape -- 401 for the token, 400 for a malformed request (saying which field), 404
    for an unknown agent, 413, 429 and 503 for the relay's limits -- or answered streamed
    (Server-Sent Events ending ``[DONE]``) or whole. A client that leaves cancels its run."""
    scope, headers, receive, send = call.scope, call.headers, call.receive, call.send
    extra = cors(server, scope, headers)
    try:
        holder, body = await read_request(server, scope, headers, receive)
        try:
            request = wire.decode_request(body)
        except AgentsError as error:
            # (a request over the codec's counts is malformed too: 400, naming the limit)
            refusal = invalid(server, error.message)
            code = "json" if error.code == "json" else "invalid"
            await _refuse(send, refusal, extra, code=code)
            return
        run = start_run(
            server,
            holder,
            messages=request.messages,
            tools=request.tools,
            options=request.options,
            agent=request.agent,
        )
    except Refusal as refusal:
        await _refuse(send, refusal, extra)
        return
    except _Gone:
        return
    completion_id = wire.new_completion_id()
    created = int(time.time())
    if request.stream:
        encoder = wire.ChunkEncoder(completion_id, request.model, created, request.include_usage)
        await answer_stream(server, run, _Chunks(encoder), receive, send, headers=extra)
        return
    if not await _wait(run, receive):
        return  # its client left: nobody to answer
    terminal = terminal_of(run)
    assert terminal is not None  # (an ended run's log ends with its terminal event)
    status, head, answer = wire.answer(
        terminal, completion_id=completion_id, model=request.model, created=created
    )
    run_header = (b"x-relay-run-id", run.run_id.encode())
    await answer_json(send, status, answer, extra=[*_bytes(head), run_header, *extra])
