"""``FaultProviderServer``: an OpenAI-compatible streaming endpoint that misbehaves on purpose,
in chat-completions or Responses API shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import h11
import trio

from protocols.codec import dumpb
from protocols.errors import ValidationError
from protocols.faults import (
    FAULT_WIRES,
    BadJson,
    ConnectionRefused,
    FaultStep,
    FaultWire,
    HttpError,
    Pass,
    Slow,
    StreamCut,
    StreamError,
    TimeoutBeforeFirstByte,
    UsageMissing,
    done_event,
    error_event,
    gemini_error_body,
    gemini_error_event,
    gemini_finish_event,
    gemini_text_event,
    parse_plan,
    responses_completed_event,
    responses_error_event,
    responses_start_events,
    responses_text_event,
    slow_tokens,
    text_event,
    usage_event,
)

from ._loopback import Exchange, LoopbackServer, RequestTooLarge

__all__ = ["FaultProviderServer"]

#: The most request bytes read (the server never needs the body; a bigger request is dropped).
MAX_REQUEST_BYTES = 1024 * 1024

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"connection", b"close"),
]


class _Frames:
    """The bytes of each part of an answer on one wire."""

    def __init__(self, wire: FaultWire) -> None:
        self.responses = wire == "openai-responses"
        self.gemini = wire == "gemini"

    def start(self) -> bytes:
        return responses_start_events() if self.responses else b""

    def text(self, text: str) -> bytes:
        if self.gemini:
            return gemini_text_event(text)
        return responses_text_event(text) if self.responses else text_event(text)

    def end(self, *, usage: bool) -> bytes:
        """The finish, the usage (when ``usage``) and the terminal record."""
        if self.gemini:
            return gemini_finish_event(usage=usage)
        if self.responses:
            return responses_completed_event(usage=usage)
        return text_event("", "stop") + (usage_event() if usage else b"") + done_event()

    def terminal(self) -> bytes:
        """The terminal record alone (after a record that is not JSON)."""
        if self.gemini:
            return gemini_finish_event(usage=False)
        return responses_completed_event(usage=False) if self.responses else done_event()

    def error(self, message: str) -> bytes:
        if self.gemini:
            return gemini_error_event(message)
        return responses_error_event(message) if self.responses else error_event(message)

    def error_body(self, status: int, message: str) -> bytes:
        """An error response's body in the wire's shape."""
        if self.gemini:
            return dumpb(gemini_error_body(status, message))
        return dumpb({"error": {"message": message}})


class FaultProviderServer(LoopbackServer):
    """A loopback HTTP server speaking OpenAI chat-completions SSE (or, with
    ``wire="openai-responses"``, OpenAI Responses API SSE; with ``wire="gemini"``, Gemini's
    ``streamGenerateContent`` SSE), failing as its plan says.

    Use it as an async context manager::

        async with FaultProviderServer([{"kind": "http-error", "status": 503}, {"kind": "pass"}])
                as server:
            ...  # point a client at server.base_url; server.calls() counts requests

    Guarantees: it listens on 127.0.0.1 on a free port; request ``n`` (0-based, refused
    connections included) is handled by step ``min(n, len(plan) - 1)``, so the last step repeats;
    any method and path are accepted and the body is ignored; partial bytes before a cut are sent
    deterministically; leaving the block (or :meth:`aclose`) stops the server and every
    connection handler -- nothing keeps running. Step semantics are those of
    :mod:`protocols.faults`, in the shape of ``wire`` (a :data:`~protocols.faults.FaultWire`,
    ``"openai-chat"`` by default); an unknown wire raises
    :class:`~protocols.errors.ValidationError`.
    """

    kind = "fault server"

    def __init__(
        self, plan: Sequence[FaultStep | Mapping[str, Any]], *, wire: FaultWire = "openai-chat"
    ) -> None:
        if wire not in FAULT_WIRES:
            raise ValidationError(f"wire must be one of {', '.join(FAULT_WIRES)}, not {wire!r}")
        super().__init__()
        self.plan = parse_plan(plan)
        self.wire: FaultWire = wire
        self._frames = _Frames(wire)
        self._calls = 0

    @property
    def base_url(self) -> str:
        """What a client of its wire takes as base URL: ``http://127.0.0.1:<port>/v1`` for an
        OpenAI-compatible one, ``http://127.0.0.1:<port>`` for Gemini."""
        return self.origin if self.wire == "gemini" else f"{self.origin}/v1"

    @property
    def url(self) -> str:
        """The full endpoint URL of its wire: ``.../v1/chat/completions``, ``.../v1/responses``
        or ``.../v1beta/models/fault:streamGenerateContent?alt=sse`` (any path is answered
        the same)."""
        if self.wire == "gemini":
            return f"{self.origin}/v1beta/models/fault:streamGenerateContent?alt=sse"
        path = "/responses" if self.wire == "openai-responses" else "/chat/completions"
        return f"{self.base_url}{path}"

    def calls(self) -> int:
        """How many requests (connections) it has received so far."""
        return self._calls

    # -- one connection ------------------------------------------------------------------------

    async def _handle(self, stream: trio.SocketStream) -> None:
        step = self.plan[min(self._calls, len(self.plan) - 1)]
        self._calls += 1
        async with stream:
            if isinstance(step, ConnectionRefused):
                return  # accepted and closed at once: no status line
            exchange = Exchange(stream, MAX_REQUEST_BYTES)
            try:
                if await exchange.read_request() is None:
                    return
            except RequestTooLarge:
                return
            await self._respond(exchange, step)

    async def _respond(self, exchange: Exchange, step: FaultStep) -> None:
        send = exchange.send

        async def sse_start() -> None:
            await send(h11.Response(status_code=200, headers=_SSE_HEADERS))

        async def sse_end() -> None:
            await send(h11.EndOfMessage())

        frames = self._frames
        if isinstance(step, TimeoutBeforeFirstByte):
            await trio.sleep(step.milliseconds / 1000)
            step = Pass("late")
        if isinstance(step, Pass | UsageMissing):
            await sse_start()
            body = frames.start() + frames.text(step.text)
            await send(h11.Data(data=body + frames.end(usage=isinstance(step, Pass))))
            await sse_end()
        elif isinstance(step, StreamCut):
            await sse_start()
            partial = frames.text("partial response")[: step.after_bytes]
            if partial:
                await send(h11.Data(data=partial))
            # Closing here (the `async with stream` exit) cuts the body mid-chunk.
        elif isinstance(step, HttpError):
            body = frames.error_body(step.status, step.text)
            headers = [] if step.retry_after is None else [("retry-after", step.retry_after)]
            await exchange.send_json(step.status, body, close=True, headers=headers)
        elif isinstance(step, BadJson):
            await sse_start()
            record = b"data: " + step.record.encode("utf-8", "replace") + b"\n\n"
            await send(h11.Data(data=record + frames.terminal()))
            await sse_end()
        elif isinstance(step, StreamError):
            await sse_start()
            body = frames.start() + (frames.text(step.text) if step.text else b"")
            await send(h11.Data(data=body + frames.error(step.message)))
            await sse_end()
        elif isinstance(step, Slow):
            await sse_start()
            if frames.responses:
                await send(h11.Data(data=frames.start()))
            for token in slow_tokens(step.text):
                await trio.sleep(step.tick)
                await send(h11.Data(data=frames.text(token)))
            await send(h11.Data(data=frames.end(usage=False)))
            await sse_end()
