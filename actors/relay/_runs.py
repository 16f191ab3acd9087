"""The relay's runs: every relayed request is a *run* -- a server-minted, unguessable id and an
event log (:class:`~actors._live.LiveRun` over :class:`~protocols.live.EventLog`) -- that the
token which started it (or one its grants let see it) follows again by id: over the websocket
(``watch``), as Server-Sent Events, or by polling (002's continuation rule).

The client that starts a run is *attached* to it: the run's frames go to it as they come, and
while it is slow the run waits (the relay's back-pressure, as before runs). A run started with
``cancel_on_disconnect`` false that loses its client goes on *detached*: its events only go to
its log, which keeps what :class:`~actors.relay.RelayLimits` says, for as long as it says.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

from protocols._json import dumps
from protocols.errors import ValidationError
from protocols.live import (
    SSE_KEEPALIVE,
    TERMINAL,
    RunEvent,
)
from protocols.messages import FinishReason, ProviderResult, ToolCall
from protocols.relay import (
    MAX_RUN_ID,
    NDJSON_CONTENT_TYPE,
    RUN_ID_HEADER,
    RUN_STATE_HEADER,
    TAIL_INDEX_HEADER,
    AbortFrame,
    ApprovalFrame,
    ApproveFrame,
    DeltaFrame,
    ServerFrame,
    error_frame,
    event_frame,
    frame_events,
    parse_start_index,
    run_event_json,
    run_event_sse,
    with_seq,
)

from .._live import LiveRun
from ._admission import RelayLimits, _TokenState
from ._asgi import (
    Receive,
    Scope,
    Send,
    _body,
    _cancel_on_disconnect,
    _Gone,
    _HttpOut,
    _plain,
    _server_sent_events,
)

if TYPE_CHECKING:
    from ._server import RelayServer

__all__: list[str] = []

log = logging.getLogger("trio_agents.relay")

#: Where the run routes live: ``/v1/runs/{id}/events`` and ``/v1/runs/{id}/cancel``.
RUNS_PREFIX = "/v1/runs/"
#: Random bytes in a run id (128 bits: unguessable), which is ``run_`` and 22 characters.
RUN_ID_BYTES = 16
_RUN_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


class _Sink(Protocol):
    """Where an attached run's frames go: a websocket connection, or an NDJSON answer."""

    #: The protocol version the sink speaks (from 3: a run's frames carry their seq).
    version: int
    #: Whether a run cut by the server's shutdown tells this sink so itself (an NDJSON answer
    #: ends with that line; a websocket is told once, for the whole connection).
    says_shutdown: bool

    async def send(self, frame: ServerFrame) -> None:
        """Send ``frame``; raises :class:`_Gone` when the client is gone (or cut)."""


class _Run:
    """One relayed request's run: its id, owner, log, cancel scope and pending approvals."""

    def __init__(
        self,
        run_id: str,
        owner: _TokenState,
        limits: RelayLimits,
        *,
        request_id: str,
        cancel_on_disconnect: bool,
    ) -> None:
        self.run_id = run_id
        self.owner = owner
        self.live = LiveRun(run_id, capacity=limits.run_events)
        #: The starter's request id: what the frames to the attached client say.
        self.request_id = request_id
        self.cancel_on_disconnect = cancel_on_disconnect
        #: Where the frames go as they come; ``None``: detached (the log alone).
        self.attached: _Sink | None = None
        self.scope = trio.CancelScope()
        #: A client asked to cancel the run.
        self.cancelled = False
        #: The run's log grew over ``max_run_bytes``: it was cut.
        self.too_large = False
        #: The run has ended (its terminal event is in the log, its slot is free).
        self.done = trio.Event()
        self.watchers = 0
        #: Approvals asked and not answered yet, by tool-call id.
        self.approvals: dict[str, tuple[trio.Event, list[ApproveFrame]]] = {}
        self.ended_at: float | None = None
        #: How the run ended, once it has: its result, its failure, or ``None`` for a cut.
        self.outcome: Any = None
        self._max_bytes = limits.max_run_bytes
        self._sizes: collections.deque[int] = collections.deque()
        self._capacity = limits.run_events
        #: Characters of text the log holds now (each event's, as sized by :func:`_size`).
        self.bytes = 0
        #: Its followers take turns to read it (see :class:`_Turns`).
        self.turns = _Turns(TURNS)
        # Each event as a Server-Sent Event, by seq: encoded once for all its followers.
        self._sse: dict[int, bytes] = {}

    @property
    def ended(self) -> bool:
        """The terminal event is in the log."""
        return self.live.ended is not None

    @property
    def last(self) -> int:
        """The seq of the latest event (0: none yet)."""
        return self.live.log.last

    def cancel(self) -> None:
        """Cancel the run (a client's ``cancel``): it ends ``cancelled``, with its partial."""
        if not self.ended:
            self.cancelled = True
            self.scope.cancel()

    def add(self, kind: str, data: Any) -> int | None:
        """Log an event; its seq. An event that would take the log over the byte limit is
        not logged (``None``): the run is cut instead. A terminal event is always logged."""
        if self.ended or (self.too_large and kind not in TERMINAL):
            return None  # (a cut run's late frame: it ends, and nothing follows its end)
        size = _size(kind, data)
        sizes = self._sizes
        dropped = sizes[0] if len(sizes) == self._capacity else 0
        if self.bytes - dropped + size > self._max_bytes and kind not in TERMINAL:
            self.too_large = True
            self.scope.cancel()
            return None
        if len(sizes) == self._capacity:
            sizes.popleft()  # the log drops its oldest event too
        sizes.append(size)
        self.bytes += size - dropped
        seq = self.live.add(kind, data)
        self.turns.added()
        return seq

    def sse(self, events: Sequence[RunEvent]) -> bytes:
        """``events`` (read from the log) as Server-Sent Events: each encoded once, whichever
        of the run's followers asks first."""
        cache = self._sse
        parts: list[bytes] = []
        for event in events:
            if event.kind == "gap":  # (not the log's: its seq is of an event that is gone)
                parts.append(run_event_sse(event))
                continue
            record = cache.get(event.seq)
            if record is None:
                record = cache[event.seq] = run_event_sse(event)
                if len(cache) > 2 * self._capacity:
                    first = self.live.log.first
                    for seq in [seq for seq in cache if seq < first]:
                        del cache[seq]
            parts.append(record)
        return b"".join(parts)

    async def publish(self, frame: ServerFrame, *, send: bool = True) -> None:
        """Log the events ``frame`` stands for, then send it (with its seq, from version 3)
        to the attached client, if any -- unless the log refused it (the run is being cut:
        the client gets what the log holds, never more). An attached client that is gone
        detaches from a run that outlives its connection; for one that does not,
        :class:`_Gone` propagates (the run is cut)."""
        seq: int | None = None
        if type(frame) is DeltaFrame:  # the hot path
            seq = self.add(frame.channel, frame.text)
            if seq is None:
                return
        else:
            for kind, data in frame_events(frame):
                seq = self.add(kind, data)
                if seq is None:
                    return
        sink = self.attached
        if sink is None or not send:
            return
        out = frame if seq is None or sink.version < 3 else with_seq(frame, seq)
        try:
            await sink.send(out)
        except _Gone:
            if self.cancel_on_disconnect:
                raise
            log.info("relay run %s goes on without its client", self.run_id)
            if self.attached is sink:
                self.attached = None

    async def ask(self, approval: ApprovalFrame) -> ApproveFrame | None:
        """Put an approval to whoever follows the run (its attached client, its watchers);
        the first answer counts. Cancelled (the approval timeout) -> logged as denied."""
        key = approval.call.id
        event, answers = trio.Event(), list[ApproveFrame]()
        self.approvals[key] = (event, answers)
        try:
            await self.publish(approval)
            await event.wait()
            answer = answers[0]
        finally:
            del self.approvals[key]
            if not answers:
                self.add(
                    "approval_answered",
                    {"call_id": key, "allow": False, "reason": "no answer in time"},
                )
        self.add(
            "approval_answered",
            {"call_id": key, "allow": answer.decision == "allow", "reason": answer.reason},
        )
        return answer

    def cut_frame(self, streamed: Sequence[DeltaFrame], closing: bool) -> ServerFrame:
        """The frame that ends a run cut before its end: ``abort`` (with what streamed) for a
        client's cancel, else the error saying why."""
        if self.too_large:
            return error_frame("run_too_large", self.request_id)
        if closing and not self.cancelled:
            return error_frame("shutdown", self.request_id)
        return AbortFrame(self.request_id, _partial(streamed))

    def seal(self, streamed: Sequence[DeltaFrame], closing: bool) -> None:
        """Give a run cut without a word (its client left, its task was cancelled) its
        terminal event, so that its followers see how it ended."""
        if not self.ended:
            for kind, data in frame_events(self.cut_frame(streamed, closing)):
                self.add(kind, data)


def _size(kind: str, data: Any) -> int:
    """About how much text an event holds (characters): a delta's text; for any other event,
    the strings in its data (a result's text, a call's arguments), plus a little per item."""
    if isinstance(data, str):
        return len(data)
    return _weight(data)


def _weight(data: Any) -> int:
    if isinstance(data, str):
        return len(data)
    if isinstance(data, dict):
        return 16 + sum(len(key) + _weight(value) for key, value in data.items())
    if isinstance(data, list | tuple):
        return 16 + sum(_weight(value) for value in data)
    if isinstance(data, ToolCall):
        return 64 + len(data.id) + len(data.name) + _weight(data.arguments)
    if isinstance(data, ProviderResult):
        calls = sum(_weight(call) for call in data.calls)
        return 128 + len(data.content) + len(data.thinking) + calls + _weight(data.denied)
    return 8


def _partial(deltas: Sequence[DeltaFrame]) -> ProviderResult:
    content = "".join(d.text for d in deltas if d.channel == "content")
    thinking = "".join(d.text for d in deltas if d.channel == "thinking")
    return ProviderResult(content=content, thinking=thinking, finish=FinishReason.CANCELLED)


class _Runs:
    """The runs a relay keeps, by id: running ones, and ended ones for ``run_keep`` seconds
    (within the counts and sizes of :class:`~actors.relay.RelayLimits`)."""

    def __init__(self, limits: RelayLimits) -> None:
        self.limits = limits
        self._runs: dict[str, _Run] = {}
        self._ended: collections.OrderedDict[str, _Run] = collections.OrderedDict()
        self._kept_bytes = 0  # the ended runs' text

    def __len__(self) -> int:
        return len(self._runs)

    def open(self, owner: _TokenState, *, request_id: str, cancel_on_disconnect: bool) -> _Run:
        """A new run of ``owner``, with a fresh unguessable id."""
        self.expire()
        while True:
            run_id = "run_" + secrets.token_urlsafe(RUN_ID_BYTES)
            if run_id not in self._runs:  # (128 random bits: never taken, but checked)
                break
        run = _Run(
            run_id,
            owner,
            self.limits,
            request_id=request_id,
            cancel_on_disconnect=cancel_on_disconnect,
        )
        self._runs[run_id] = run
        return run

    def end(self, run: _Run) -> None:
        """``run`` has ended: kept ``run_keep`` seconds more, within the limits."""
        if self._runs.get(run.run_id) is not run or run.ended_at is not None:
            return
        run.ended_at = trio.current_time()
        self._ended[run.run_id] = run
        self._kept_bytes += run.bytes
        kept = run.owner.ended
        kept[run.run_id] = run
        while len(kept) > self.limits.max_runs_per_token:
            oldest = next(iter(kept))
            self._drop(self._runs[oldest])
        self.expire()

    def find(self, run_id: object, holder: _TokenState) -> _Run | None:
        """The run ``run_id`` if ``holder`` may see it; ``None`` -- the same ``None`` -- for a
        run that does not exist, is no longer kept, or is another token's."""
        self.expire()
        if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_RUN_ID:
            return None
        run = self._runs.get(run_id)
        if run is None or not holder.may_see(run.owner):
            return None
        return run

    def expire(self) -> None:
        """Drop the ended runs kept too long, or over the counts and sizes."""
        ended = self._ended
        if not ended:
            return
        limits = self.limits
        horizon = trio.current_time() - limits.run_keep
        while ended:
            run = next(iter(ended.values()))
            assert run.ended_at is not None
            if (
                run.ended_at > horizon
                and len(ended) <= limits.max_runs
                and self._kept_bytes <= limits.max_kept_bytes
            ):
                break
            self._drop(run)

    def _drop(self, run: _Run) -> None:
        self._runs.pop(run.run_id, None)
        if self._ended.pop(run.run_id, None) is not None:
            self._kept_bytes -= run.bytes
        run.owner.ended.pop(run.run_id, None)

    def watchers(self) -> int:
        """Followers of every run now."""
        return sum(run.watchers for run in self._runs.values())


# -- following a run ----------------------------------------------------------------------------


#: Followers of one run reading it at once (see :class:`_Turns`). Few: the run's producer
#: goes on between every few followers' writes (``benchmarks/live.py``'s ``sse`` scenario,
#: 1,000 followers: 4 -> 1.9x the time per event of one follower, 16 -> 3.1x, 64 -> 6.6x;
#: every one woken at each event, as before turns: 49x).
TURNS = 4


class _Turns:
    """The followers of one run take turns to read it: at most ``width`` of them hold a turn
    at once; the others wait in line, first come first served, each given its turn once the
    log holds something it has not read. A follower reads, in its turn, all it has not read
    yet. One follower, or a few, read each event as it comes; a thousand followers of a fast
    run each read many events at a time -- rather than each event waking every one of them
    at once, the run starved between (the scheduler runs every task woken before it again)."""

    __slots__ = ("_active", "_behind", "_current", "_width")

    def __init__(self, width: int) -> None:
        self._width = width
        self._active = 0  # turns held
        self._behind: collections.deque[trio.lowlevel.Task] = collections.deque()  # in line
        self._current: list[trio.lowlevel.Task] = []  # read all there is: wait for more

    def added(self) -> None:
        """The log has a new event (the terminal one included): every follower waiting for
        one is now in line."""
        if self._current:
            self._behind.extend(self._current)
            self._current.clear()
        if self._behind:
            self._give()

    def _give(self) -> None:
        behind = self._behind
        while self._active < self._width and behind:
            self._active += 1
            trio.lowlevel.reschedule(behind.popleft())

    async def take(self, unread: bool) -> None:
        """Wait for a turn (``unread``: the log holds events the caller has not read; if not,
        it waits for the next one first), then hold it until :meth:`done`. Cancellable
        until the turn is given."""
        if unread and self._active < self._width and not self._behind:
            self._active += 1
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                self.done()
                raise
            return
        task = trio.lowlevel.current_task()
        line = self._behind if unread else self._current
        line.append(task)

        def abort(_: Any) -> trio.lowlevel.Abort:
            # Not given its turn yet (reschedule() and abort are never both called): leave.
            if task in self._current:
                self._current.remove(task)
            else:
                self._behind.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def done(self) -> None:
        """Give back the turn :meth:`take` gave."""
        self._active -= 1
        if self._behind:
            self._give()


async def next_events(run: _Run, after: int) -> list[RunEvent]:
    """The run's events after ``after`` the log holds (a ``gap`` first where it dropped some),
    waiting for the next one when it holds none -- and for its turn (:class:`_Turns`);
    ``[]`` once there is nothing more to wait for (the run has ended and ``after`` is its
    last event)."""
    turns = run.turns
    while True:
        await turns.take(run.last > after or run.ended)
        try:
            events = run.live.log.read(after, now=time.time())
        finally:
            turns.done()
        if events or run.ended:
            return events


async def pump_events(
    run: _Run,
    after: int,
    out: _HttpOut,
    keepalive: float,
    encode: Callable[[Sequence[RunEvent]], bytes],
) -> None:
    """Put the run's events after ``after`` to ``out`` as they come, each batch as ``encode``
    writes it, through the terminal event; a keep-alive comment after ``keepalive`` seconds
    of silence."""
    last = after
    while True:
        with trio.move_on_after(keepalive) as quiet:
            events = await next_events(run, last)
        if quiet.cancelled_caught:
            await out.put(_body(SSE_KEEPALIVE))
            continue
        if not events:
            return
        data = encode(events)
        if data:
            await out.put(_body(data))
        last = events[-1].seq
        if events[-1].terminal:
            return


def frames(events: Sequence[RunEvent], request_id: str) -> list[ServerFrame]:
    """The version 3 frames a websocket follower gets for ``events``: consecutive deltas of
    one channel travel as one frame (whose seq is its last piece's), as the upstream's
    pieces do; events no frame stands for are skipped."""
    out: list[ServerFrame] = []
    pieces: list[str] = []
    channel = ""
    seq = 0

    def flush() -> None:
        if pieces:
            out.append(DeltaFrame(request_id, channel, "".join(pieces), seq))
            pieces.clear()

    for event in events:
        kind = event.kind
        if kind == "content" or kind == "thinking":  # noqa: PLR1714
            text = event.data.get("text")
            if not isinstance(text, str) or not text:
                continue
            if kind != channel:
                flush()
                channel = kind
            pieces.append(text)
            seq = event.seq
            continue
        frame = event_frame(event, request_id)
        if frame is not None:
            flush()
            out.append(frame)
    flush()
    return out


# -- the HTTP routes of runs --------------------------------------------------------------------


def _query(scope: Scope) -> dict[str, str]:
    """The request's query parameters (the first of a repeated one)."""
    raw = scope.get("query_string", b"")
    text = raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)
    out: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(text, keep_blank_values=True):
        out.setdefault(key, value)
    return out


def _seconds(value: str | None, most: float) -> float:
    """A ``wait`` in seconds (0 when absent), at most ``most``; ValidationError otherwise."""
    if value is None or value == "":
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        raise ValidationError("wait must be a number of seconds") from None
    if not 0 <= seconds < math.inf:
        raise ValidationError("wait must be a number of seconds >= 0")
    return min(seconds, most)


def _count(value: str | None, most: int) -> int:
    if value is None or value == "":
        return most
    if not (value.isascii() and value.isdigit()) or len(value) > 9 or int(value) < 1:
        raise ValidationError("limit must be an integer >= 1")
    return min(int(value), most)


def _run_id_of(path: str) -> tuple[str, str] | None:
    """``(run id, action)`` of ``/v1/runs/{id}/{action}``, or None when malformed."""
    rest = path[len(RUNS_PREFIX) :]
    run_id, slash, action = rest.partition("/")
    if not slash or not run_id or len(run_id) > MAX_RUN_ID or "/" in action:
        return None
    if not set(run_id) <= _RUN_ID_CHARS:
        return None
    return run_id, action


async def http_runs(
    server: RelayServer,
    scope: Scope,
    headers: Mapping[str, str],
    receive: Receive,
    send: Send,
) -> None:
    """``GET /v1/runs/{id}/events`` (Server-Sent Events, or with ``startIndex`` a polling
    answer) and ``POST /v1/runs/{id}/cancel``."""
    path = scope.get("path", "")
    method = scope.get("method", "GET")
    parsed = _run_id_of(path)
    if parsed is None or parsed[1] not in ("events", "cancel"):
        await _plain(send, 404)
        return
    run_id, action = parsed
    allowed = "GET" if action == "events" else "POST"
    if method != allowed:
        await _plain(send, 405, extra=[(b"allow", allowed.encode())])
        return
    if server._closing:
        server._refuse("shutdown")
        await _plain(send, 503)
        return
    holder = await server._http_token(scope, headers, send)
    if holder is None:
        return
    run = server._runs.find(run_id, holder)
    if run is None:
        # Another token's run is answered exactly as one that never existed.
        server._refuse("unknown_run")
        await _plain(send, 404)
        return
    if action == "cancel":
        if run.ended:
            await _plain(send, 409)
            return
        run.cancel()
        await _plain(send, 202, extra=_run_headers(run))
        return
    query = _query(scope)
    try:
        if "startIndex" in query:
            start = parse_start_index(query["startIndex"])
            wait = _seconds(query.get("wait"), server.limits.poll_wait)
            limit = _count(query.get("limit"), server.limits.poll_events)
        else:
            # The header wins: a browser's EventSource sends it when it reconnects to the
            # same URL (whose ``after`` is where it first began).
            mark = headers.get("last-event-id")
            start = parse_start_index(mark if mark is not None else query.get("after"))
    except ValidationError:
        server._refuse("invalid")
        await _plain(send, 400)
        return
    if start > run.last:
        server._refuse("invalid")  # a seq the run never had
        await _plain(send, 400)
        return
    if run.watchers >= server.limits.max_watchers:
        server._refuse("too_many_watchers")
        await _plain(send, 429)
        return
    if "startIndex" in query:
        await _poll(
            server,
            run,
            start=start,
            wait=wait,
            limit=limit,
            headers=headers,
            receive=receive,
            send=send,
        )
    elif run.ended and start >= run.last:
        # Nothing follows the terminal event: 204 is also what stops an EventSource from
        # reconnecting.
        await _plain(send, 204, extra=_run_headers(run))
    else:
        await _sse(server, run, start, receive, send)


def _run_headers(run: _Run) -> list[tuple[bytes, bytes]]:
    return [(RUN_ID_HEADER.encode(), run.run_id.encode())]


async def _sse(server: RelayServer, run: _Run, after: int, receive: Receive, send: Send) -> None:
    """The run's events after ``after`` as Server-Sent Events (``id:`` the seq), through the
    terminal one; a keep-alive comment after ``keepalive`` seconds of silence."""
    limits = server.limits

    async def pump(out: _HttpOut) -> None:
        await pump_events(run, after, out, limits.keepalive, run.sse)

    headers = [*_run_headers(run), (TAIL_INDEX_HEADER.encode(), str(after).encode())]
    run.watchers += 1
    try:
        await _server_sent_events(send, receive, limits.send_timeout, headers, pump)
    finally:
        run.watchers -= 1


async def _poll(
    server: RelayServer,
    run: _Run,
    *,
    start: int,
    wait: float,
    limit: int,
    headers: Mapping[str, str],
    receive: Receive,
    send: Send,
) -> None:
    """002's continuation answer: the run's events after ``start`` (at most ``limit``),
    waiting up to ``wait`` seconds for the first; an empty answer of a running run is a
    polling gap (ask again with the same ``startIndex``). The tail index header is
    ``start``: the body's events come after it."""
    events: list[RunEvent] = []
    left = False
    run.watchers += 1
    try:
        if run.last > start or run.ended or wait <= 0:
            events = run.live.log.read(start, limit, now=time.time())
        else:
            async with trio.open_nursery() as nursery:

                async def leave() -> None:
                    nonlocal left
                    await _cancel_on_disconnect(receive, nursery.cancel_scope)
                    left = True

                nursery.start_soon(leave)
                with trio.move_on_after(wait):
                    await run.live.wait_after(start)
                nursery.cancel_scope.cancel()
            events = run.live.log.read(start, limit, now=time.time())
    finally:
        run.watchers -= 1
    if left:
        return
    accept = headers.get("accept", "")
    as_json = "application/json" in accept and "ndjson" not in accept
    if as_json:
        document = {
            "run_id": run.run_id,
            "tail_index": start,
            "state": "ended" if run.ended else "running",
            "events": [run_event_json(event) for event in events],
        }
        body = (dumps(document) + "\n").encode()
        content_type = b"application/json"
    else:
        body = b"".join((dumps(run_event_json(event)) + "\n").encode() for event in events)
        content_type = NDJSON_CONTENT_TYPE.encode()
    with contextlib.suppress(OSError):
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-store"),
                    (b"x-content-type-options", b"nosniff"),
                    *_run_headers(run),
                    (TAIL_INDEX_HEADER.encode(), str(start).encode()),
                    (RUN_STATE_HEADER.encode(), b"ended" if run.ended else b"running"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
