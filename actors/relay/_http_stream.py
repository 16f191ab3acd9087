"""The relay's plain HTTP stream (``POST /v1/stream``): its NDJSON answer as where an attached
run's frames go (:class:`_HttpSink`), waiting while its client is there, ending the answer, a
run that outlives its request as a task of its own, and the trace context a request carries.
:meth:`RelayServer._http_stream <actors.relay.RelayServer>` drives these."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from protocols.relay import (
    NDJSON_CONTENT_TYPE,
    RUN_ID_HEADER,
    RUNS_VERSION,
    TAIL_INDEX_HEADER,
    ErrorFrame,
    ServerFrame,
    encode_frame,
)

from .. import _tracing
from ._asgi import Receive, _cancel_on_disconnect, _Gone, _HttpOut, _plain
from ._runs import _Run
from ._session import _Failed, _stack

#: The header of a plain HTTP answer that says the server's cap on output tokens, when it has one.
MAX_TOKENS_HEADER = b"x-relay-max-tokens"

# The relay server's logger (``_server``'s).
log = logging.getLogger("trio_agents.relay")


class _HttpSink:
    """An NDJSON answer as where an attached run's frames go: its status and headers go out
    with the first frame it sends -- at once from version 3 (the ``run`` line), else with the
    first frame that is not an error (a failure before anything streamed is answered with a
    status instead)."""

    says_shutdown = True

    def __init__(
        self,
        out: _HttpOut,
        run: _Run,
        *,
        runs: bool,
        extra: Sequence[tuple[bytes, bytes]],
    ) -> None:
        self._out = out
        self._run = run
        self._extra = extra
        self.version = RUNS_VERSION if runs else RUNS_VERSION - 1
        self.started = False
        #: The client stopped reading (or left): nothing more goes to it.
        self.gone = trio.Event()

    async def send(self, frame: ServerFrame) -> None:
        try:
            if not self.started:
                if isinstance(frame, ErrorFrame) and self.version < RUNS_VERSION:
                    return  # a failure before anything streamed is answered with a status
                self.started = True
                await self._out.put(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", NDJSON_CONTENT_TYPE.encode()),
                            (b"cache-control", b"no-store"),
                            (b"x-content-type-options", b"nosniff"),
                            (RUN_ID_HEADER.encode(), self._run.run_id.encode()),
                            (TAIL_INDEX_HEADER.encode(), b"0"),
                            *self._extra,
                        ],
                    }
                )
            await self._out.put(
                {
                    "type": "http.response.body",
                    "body": (encode_frame(frame) + "\n").encode("utf-8"),
                    "more_body": True,
                }
            )
        except _Gone:
            self.gone.set()
            raise


async def _while_attached(run: _Run, sink: _HttpSink, receive: Receive) -> bool:
    """Wait until ``run`` has ended, or its HTTP client left or stopped reading (then the
    run goes on without it). Whether the run ended with its client still there."""
    left = False
    async with trio.open_nursery() as nursery:

        async def until(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(until, run.done)
        nursery.start_soon(until, sink.gone)
        await _cancel_on_disconnect(receive, nursery.cancel_scope)
        left = True  # (not reached when the run ended or the client stopped reading)
    if left and run.attached is sink:
        run.attached = None  # the client left
        log.info("relay run %s goes on without its HTTP client", run.run_id)
    return not left and run.done.is_set() and not sink.gone.is_set()


async def _http_end(run: _Run, sink: _HttpSink, out: _HttpOut) -> None:
    """End the NDJSON answer of a run that has ended: a failure before anything was sent is
    answered with its status (400 for an invalid request, 502 for the upstream)."""
    outcome = run.outcome
    if not sink.started:
        if isinstance(outcome, _Failed):
            await out.put_quietly(_plain, 400 if outcome.code == "invalid" else 502)
        return  # cut before anything was sent: nobody to answer
    # Shielded: the ASGI server reports the finished response as a disconnect, which cancels
    # this call.
    with trio.CancelScope(shield=True), contextlib.suppress(_Gone):
        await out.put({"type": "http.response.body", "body": b"", "more_body": False})


async def _contained(relay: Callable[[], Awaitable[object]]) -> None:
    """A run of its own task: whatever it raises (beyond what it handles itself) is logged,
    never raised into trio's system nursery."""
    try:
        await relay()
    except BaseException as error:
        rest = error
        if isinstance(error, BaseExceptionGroup):
            _, rest = error.split(trio.Cancelled)  # type: ignore[assignment]
        if rest is None or isinstance(rest, trio.Cancelled | KeyboardInterrupt):
            raise
        log.warning("a relay run failed: %s\n%s", type(rest).__name__, _stack(rest))


def _trace_headers(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The W3C trace context a request's headers carry (``traceparent``, ``tracestate``)."""
    if "traceparent" not in headers:
        return None
    return {key: headers[key] for key in _tracing.CARRIER_KEYS if key in headers}
