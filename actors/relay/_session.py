"""One websocket session of the relay: reads frames, runs a task per open request, serialises
sends; and the pieces of a relayed request both routes share.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import traceback
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from protocols.errors import (
    ProtocolError,
    SizeLimitError,
)
from protocols.relay import (
    RUNS_VERSION,
    VERSIONS,
    ApproveFrame,
    CancelFrame,
    HelloFrame,
    JobAnswerFrame,
    JobCancelFrame,
    JobGetFrame,
    JobSubmitFrame,
    JobWatchFrame,
    ReadyFrame,
    RunFrame,
    ServerFrame,
    StreamFrame,
    WatchFrame,
    decode_client_frame,
    encode_frame,
    error_frame,
    loggable,
)

from ._admission import _Refused, _TokenState
from ._asgi import _GOING_AWAY, _POLICY, _TOO_BIG, OUTBOX, Receive, Send, _Gone
from ._jobs import JobClientFrame
from ._runs import _Run, frames, next_events

if TYPE_CHECKING:
    from ._server import RelayServer


__all__: list[str] = []

_JOB_FRAMES = (JobSubmitFrame, JobGetFrame, JobCancelFrame, JobAnswerFrame, JobWatchFrame)

log = logging.getLogger("trio_agents.relay")


class _Failed:
    """The request failed (the client was told): ``code`` says how."""

    def __init__(self, code: str) -> None:
        self.code = code


def _stack(error: BaseException) -> str:
    """Where ``error`` was raised: the traceback's frames, without the exception's text (a
    provider's bug may quote what a client sent)."""
    return "".join(traceback.format_tb(error.__traceback__)).rstrip()


class _Connection:
    """One websocket: reads frames, runs a task per open request, serialises sends."""

    def __init__(
        self,
        server: RelayServer,
        receive: Receive,
        send: Send,
        trace: Mapping[str, str] | None = None,
    ) -> None:
        self.server = server
        #: The trace context of the websocket's handshake headers: the parent of the spans of
        #: requests whose frame carries none.
        self.trace = trace
        self.limits = server.limits
        self._receive = receive
        self._send = send
        # Frames leave through one task, :meth:`sender`: the ASGI server's send need not be
        # cancellable (hypercorn shields its socket writes), so a request waits -- with the send
        # timeout, cancellably -- for the sender to take its frame, never inside that send.
        self.outbox, self._outgoing = trio.open_memory_channel[MutableMapping[str, Any]](OUTBOX)
        self._requests: trio.CancelScope | None = None
        #: The runs of the requests (streams and watches) open on this connection, by id.
        self._open: dict[str, _Run] = {}
        #: The durable jobs' watches open on this connection (``job_watch``), by request id:
        #: a ``cancel`` of that id ends the watch (not the job).
        self.job_watches: dict[str, trio.CancelScope] = {}
        self._closed = False
        self._idle: trio.CancelScope | None = None
        #: The protocol version the connection speaks: its hello's -- and for one whose
        #: handshake carried the token (it says no hello), the newest before runs: such a
        #: client never said which version it speaks, and a run's frames are new.
        self.version = RUNS_VERSION - 1
        #: A run cut by the shutdown is not told so per request: the connection is, once.
        self.says_shutdown = False

    def is_open(self, request_id: str) -> bool:
        """Whether a request (a stream, a watch, a job's watch) of this id is open."""
        return request_id in self._open or request_id in self.job_watches

    def open_requests(self) -> int:
        """The requests open on this connection (what its ``max_streams`` bounds)."""
        return len(self._open) + len(self.job_watches)

    def forget_job_watch(self, request_id: str) -> None:
        """The job's watch ``request_id`` is over."""
        self.job_watches.pop(request_id, None)
        self._rearm_idle()

    def _rearm_idle(self) -> None:
        if not self.open_requests() and self._idle is not None:
            # Idle counts from the end of the last request, not from the last frame read.
            self._idle.deadline = trio.current_time() + self.limits.idle_timeout

    async def _next(self) -> str | bytes | None:
        """The next frame's text, or None when the client left."""
        message = await self._receive()
        kind = message["type"]
        if kind == "websocket.disconnect":
            return None
        if kind != "websocket.receive":
            return None
        text = message.get("text")
        return text if text is not None else message.get("bytes") or b""

    async def sender(self) -> None:
        """Send what the outbox holds, in order, until it is closed."""
        async with self._outgoing:
            async for message in self._outgoing:
                try:
                    await self._send(message)
                except OSError:  # the transport is gone
                    self._cut()
                    return

    def _cut(self) -> None:
        """Stop talking to the client, and stop every request of the connection."""
        self._closed = True
        if self._requests is not None:
            self._requests.cancel()

    async def _put(self, message: MutableMapping[str, Any]) -> None:
        if self._closed:
            raise _Gone
        with trio.move_on_after(self.limits.send_timeout) as waited:
            try:
                await self.outbox.send(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._cut()
                raise _Gone from None
        if waited.cancelled_caught:  # the last frame has not left yet: a client that stops
            self._cut()  # reading is cut
            raise _Gone

    async def send(self, frame: ServerFrame) -> None:
        await self._put({"type": "websocket.send", "text": encode_frame(frame)})

    async def close(self, code: int) -> None:
        if self._closed:
            return
        with contextlib.suppress(_Gone):
            await self._put({"type": "websocket.close", "code": code})
        self._closed = True

    async def fail(self, code: str, close: int, request_id: str | None = None) -> None:
        """Refuse with an error frame, then close the connection."""
        self.server._refuse(code)
        try:
            await self.send(error_frame(code, request_id))
        except _Gone:
            return
        await self.close(close)

    async def serve(self, holder: _TokenState | None) -> None:
        server = self.server
        limits = self.limits
        if holder is None:
            # close() cuts the wait for the hello too: a shutdown's grace is not spent on it.
            with trio.move_on_after(limits.handshake_timeout) as waiting:
                server._scopes.add(waiting)
                try:
                    text = await self._next()
                    if text is None:
                        return
                    holder = await self._hello(text)
                    if holder is None:
                        return
                finally:
                    server._scopes.discard(waiting)
            if holder is None and not self.server._closing:  # no hello in time: a slow loris
                await self.fail("timeout", _POLICY)
                return
        # Read afresh (close() may run at any await; a narrowed local would not say so).
        if holder is None or self.server._closing:  # closed while saying hello: not let in
            await self.fail("shutdown", _GOING_AWAY)
            return
        # The connection speaks the hello's version: a client from before version 2 would
        # refuse a ready frame with a cap in it (it decodes strictly), so it is not told.
        version = self.version
        cap = limits.max_tokens if version >= 2 else None
        await self.send(ReadyFrame(version, limits.max_frame, limits.max_streams, cap))
        with trio.CancelScope() as everything:
            server._scopes.add(everything)
            try:
                async with trio.open_nursery() as nursery:
                    self._requests = nursery.cancel_scope
                    await self._read(holder, nursery)
                    nursery.cancel_scope.cancel()  # the client left: cut what it had open
            finally:
                server._scopes.discard(everything)
        if everything.cancelled_caught and server._closing:
            await self.fail("shutdown", _GOING_AWAY)

    async def _hello(self, text: str | bytes) -> _TokenState | None:
        try:
            frame = decode_client_frame(text, max_bytes=self.limits.max_frame)
        except SizeLimitError:
            await self.fail("too_large", _TOO_BIG)
            return None
        except ProtocolError:
            await self.fail("invalid", _POLICY)
            return None
        if not isinstance(frame, HelloFrame):
            await self.fail("invalid", _POLICY)
            return None
        if frame.version not in VERSIONS:
            await self.fail("version", _POLICY)
            return None
        self.version = frame.version
        holder = self.server._holder(frame.token)
        if holder is None:
            await self.fail("unauthorized", _POLICY)
            return None
        return holder

    async def _read(self, holder: _TokenState, nursery: trio.Nursery) -> None:
        limits = self.limits
        while True:
            with trio.CancelScope(deadline=trio.current_time() + limits.idle_timeout) as idle:
                self._idle = idle
                text = await self._next()
            if idle.cancelled_caught:
                if self.open_requests():
                    continue  # quiet, but waiting on its answers: not idle
                await self.fail("timeout", _GOING_AWAY)
                return
            if text is None:
                return
            try:
                frame = decode_client_frame(text, max_bytes=limits.max_frame)
            except SizeLimitError:
                await self.fail("too_large", _TOO_BIG)
                return
            except ProtocolError as error:
                log.info("relay client sent an invalid frame: %s", loggable(error.message))
                await self.fail("invalid", _POLICY)
                return
            if isinstance(frame, StreamFrame):
                await self._start(frame, holder, nursery)
            elif isinstance(frame, CancelFrame) and frame.id in self.job_watches:
                self.job_watches[frame.id].cancel()  # that watch ends, not its job
            elif isinstance(frame, CancelFrame):
                run = self._open.get(frame.id)
                if run is None:
                    await self._say("unknown_request", frame.id)
                else:
                    run.cancel()  # (a watched run too: the token controls its runs)
            elif isinstance(frame, ApproveFrame):
                run = self._open.get(frame.id)
                waiting = run.approvals.get(frame.call) if run is not None else None
                if waiting is None and run is not None:
                    pass  # too late: that approval timed out (denied), the request goes on
                elif waiting is None:
                    await self._say("unknown_request", frame.id)
                else:
                    event, answers = waiting
                    answers.append(frame)
                    event.set()
            elif isinstance(frame, WatchFrame) and self.version >= RUNS_VERSION:
                await self._watch(frame, holder, nursery)
            elif isinstance(frame, _JOB_FRAMES):
                await self._job(frame, holder, nursery)
            else:  # a second hello, or a watch before version 3 (whose servers knew none)
                await self.fail("invalid", _POLICY)
                return

    async def _say(self, code: str, request_id: str | None) -> None:
        self.server._refuse(code)
        await self.send(error_frame(code, request_id))

    async def _job(self, frame: JobClientFrame, holder: _TokenState, nursery: trio.Nursery) -> None:
        """A durable job's frame: answered by the relay's jobs (version 3, a relay serving
        jobs; else an ``error`` of its id: ``version``, ``no_jobs``)."""
        jobs = self.server.jobs
        if self.version < RUNS_VERSION:
            await self._say("version", frame.id)
        elif jobs is None:
            await self._say("no_jobs", frame.id)
        else:
            await jobs._on_frame(self, holder, frame, nursery)

    async def _start(self, frame: StreamFrame, holder: _TokenState, nursery: trio.Nursery) -> None:
        if self.is_open(frame.id):
            await self._say("duplicate", frame.id)
            return
        if self.open_requests() >= self.limits.max_streams:
            await self._say("too_many_streams", frame.id)
            return
        try:
            self.server._admit(holder)
        except _Refused as refused:
            await self._say(refused.code, frame.id)
            return
        # Before version 3 a request is cut with its connection, whatever its frame says.
        outlives = not frame.cancel_on_disconnect and self.version >= RUNS_VERSION
        run = self.server._runs.open(holder, request_id=frame.id, cancel_on_disconnect=not outlives)
        run.attached = self
        self._open[frame.id] = run
        if outlives:
            # Not a task of this connection: the run goes on when the connection ends.
            self.server._spawn(functools.partial(self._stream, frame, holder, run))
        else:
            nursery.start_soon(self._stream, frame, holder, run)

    async def _stream(self, frame: StreamFrame, holder: _TokenState, run: _Run) -> None:
        try:
            await self.server._run(
                run,
                holder,
                messages=frame.messages,
                tools=frame.tools,
                options=frame.options,
                ask=run.ask,
                trace=frame.trace if frame.trace is not None else self.trace,
            )
        finally:
            self._forget(frame.id, run)

    def _forget(self, request_id: str, run: _Run) -> None:
        """Request ``request_id`` (of ``run``) is over on this connection."""
        if self._open.get(request_id) is run:
            del self._open[request_id]
        self._rearm_idle()

    async def _watch(self, frame: WatchFrame, holder: _TokenState, nursery: trio.Nursery) -> None:
        if self.is_open(frame.id):
            await self._say("duplicate", frame.id)
            return
        if self.open_requests() >= self.limits.max_streams:
            await self._say("too_many_streams", frame.id)
            return
        run = self.server._runs.find(frame.run_id, holder)
        if run is None:  # never existed, no longer kept, or another token's: all the same
            await self._say("unknown_run", frame.id)
            return
        if frame.after > run.last or (run.ended and frame.after >= run.last):
            # A seq the run never had, or after its terminal event: nothing follows that.
            await self._say("invalid", frame.id)
            return
        if run.watchers >= self.limits.max_watchers:
            await self._say("too_many_watchers", frame.id)
            return
        run.watchers += 1
        self._open[frame.id] = run
        nursery.start_soon(self._follow, frame, run)

    async def _follow(self, frame: WatchFrame, run: _Run) -> None:
        """Send ``run``'s frames after ``frame.after``: what its log holds, then the rest as
        it comes, through its terminal event."""
        after = frame.after
        try:
            await self.send(RunFrame(frame.id, run.run_id))
            while True:
                events = await next_events(run, after)
                if not events:
                    return
                for out in frames(events, frame.id):
                    await self.send(out)
                after = events[-1].seq
                if events[-1].terminal:
                    return
        except _Gone:
            pass
        finally:
            run.watchers -= 1
            self._forget(frame.id, run)


def _coalesced(deltas: Sequence[Any]) -> list[tuple[str, str]]:
    """Consecutive deltas of one channel joined: (channel, text) pairs, in order."""
    if len(deltas) == 1:
        return [(deltas[0].channel, deltas[0].text)]
    out: list[tuple[str, list[str]]] = []
    for delta in deltas:
        if out and out[-1][0] == delta.channel:
            out[-1][1].append(delta.text)
        else:
            out.append((delta.channel, [delta.text]))
    return [(channel, "".join(texts)) for channel, texts in out]
