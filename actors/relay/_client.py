"""``RelayProvider``: a provider whose model lives behind a relay server.

It holds a bearer token for the relay, never the model's credential. One websocket carries
every request of the provider, multiplexed by id; it is opened on first use and, when it drops,
opened again (with backoff) for the next request -- and, for a request whose run outlives its
connection, to follow that run again from the last event it had.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import random
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio
import trio_websocket

from protocols.egress import EgressPolicy, Refusal
from protocols.errors import ConfigError, ProtocolError, ProviderError
from protocols.messages import (
    Delta,
    Message,
    ProviderOptions,
    ToolCall,
    ToolDefinition,
)
from protocols.relay import (
    DEFAULT_MAX_FRAME,
    MAX_RUN_ID,
    PROTOCOL_VERSION,
    RUNS_VERSION,
    VERSIONS,
    AbortFrame,
    ApprovalFrame,
    ApproveFrame,
    CancelFrame,
    ErrorFrame,
    GapFrame,
    HelloFrame,
    ReadyFrame,
    ResultFrame,
    RunFrame,
    ServerFrame,
    StreamFrame,
    WatchFrame,
    decode_server_frame,
    encode_frame,
    loggable,
    unsupported_options,
)
from protocols.relay import Delta as DeltaFrame

from .. import _tracing
from .._core._errors import OneCause
from .._egress import open_judged_tcp
from ..providers import ProviderStream, StreamingProvider, TextStream

__all__ = ["RelayApprover", "RelayProvider"]

log = logging.getLogger("trio_agents.relay.client")

#: Decides an approval the relay asks for: the tool call and the server's reason in, allow or
#: not (optionally with a reason) out.
RelayApprover = Callable[[ToolCall, "str | None"], Awaitable["bool | tuple[bool, str]"]]

#: Frames one request may have waiting for its reader before the connection's reader waits too
#: (and, through the websocket, the server's upstream stream).
REQUEST_BUFFER = 256

_GONE = object()

#: The relay's refusals of a websocket handshake, by HTTP status.
_REFUSED = {401: "unauthorized", 403: "forbidden_origin", 503: "shutdown"}


def _egress_refused(refusal: Refusal) -> ProviderError:
    return ProviderError(f"relay: {refusal}", code="egress", retryable=False)


@attrs.frozen
class _Backoff:
    attempts: int
    initial: float
    maximum: float

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.maximum, self.initial * 2**attempt))


class _Connection:
    """One open websocket and the requests waiting on it."""

    def __init__(self, socket: trio_websocket.WebSocketConnection, ready: ReadyFrame) -> None:
        self.socket = socket
        self.ready = ready
        self.requests: dict[str, trio.MemorySendChannel[Any]] = {}
        self.closed = False
        self.send_lock = trio.Lock()

    async def send(self, text: str) -> None:
        async with self.send_lock:
            await self.socket.send_message(text)

    def drop(self) -> None:
        """The connection is gone: every waiting request hears so."""
        self.closed = True
        for channel in self.requests.values():
            with_close(channel)
        self.requests.clear()


def with_close(channel: trio.MemorySendChannel[Any]) -> None:
    with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
        channel.send_nowait(_GONE)
    channel.close()


class RelayProvider(StreamingProvider):
    """A provider that streams through a relay server (see :mod:`actors.relay`).

    Use it as an async context manager (it owns the connection's background task)::

        async with RelayProvider("ws://127.0.0.1:8000/v1/relay", token=token) as model:
            agent = await Agent.start(runtime, model, tools=[...])

    Guarantees:

    * It is a provider like any other: an :class:`~actors.agent.Agent` runs over it unchanged,
      its tools running here, the model and its credential staying with the server.
    * ``token`` is sent once per connection, in the ``hello`` frame; it never appears in
      ``repr``, errors or logs.
    * Leaving a stream early or being cancelled sends ``cancel``: the server closes its
      upstream stream at once. ``stream.partial`` holds what had arrived.
    * A request that has received nothing yet when the connection drops is sent again on a new
      connection (reconnecting with backoff, at most ``reconnects`` times); one that has
      streamed anything fails with a :class:`~protocols.errors.ProviderError` (``code``
      ``disconnected``) carrying its partial -- it is never replayed.
    * ``cancel_on_disconnect=False`` (here for every request, or per request in
      :meth:`stream`) asks the relay (protocol version 3) to let the request's run go on when
      the connection drops: the stream then reconnects (with the same backoff) and follows the
      run again from the last event it had, so its caller gets every delta once, none missing
      and none twice. It fails ``disconnected`` only when no connection comes back (at most
      ``reconnects`` tries without progress), ``unknown_run`` when the relay no longer keeps
      the run, ``gap`` when the relay's log dropped events this stream had not had. A relay
      from before version 3 cuts the request with its connection, as before; and a request
      whose connection drops before the relay named its run is sent again, as before (the
      first run, if it began, goes on to its end unfollowed). The stream's ``run_id`` is the
      relay's id of its run (``None`` before version 3, or before it is known);
      :meth:`watch` follows a run by that id, from anywhere the token is held.
    * The server's refusals and failures arrive as :class:`~protocols.errors.ProviderError`
      with the relay's code (``unauthorized``, ``rate_limited``, ``upstream``, ...) and its
      retry hint -- out of the ``async with`` block too, never in an exception group; an
      exception raised in the block comes out as itself.
    * An ``approval`` the server asks for goes to ``approve`` (none given, or no answer within
      ``approval_timeout`` seconds: denied), and the calls the server's policy refused come
      back in the result's ``denied``.
    * A frame from the server over ``max_frame`` bytes (default 16 MiB: a ``result`` repeats
      the whole answer) is refused; what is sent is bounded by the limit the server announces.
    * It says hello with the newest protocol version (:data:`~protocols.relay.PROTOCOL_VERSION`)
      and, refused with ``version``, with the one before, on a new connection (a relay from
      before version 2 speaks 1). On a connection of version 1 a request setting a model
      setting that version cannot carry (``top_p``, ``seed``, the penalties,
      ``reasoning_effort``, ``parallel_tool_calls``, the prompt-cache controls) fails with a
      :class:`~protocols.errors.ConfigError` naming them, before anything is sent -- never
      sent without them. :attr:`ready` holds what the relay said, its ``max_tokens`` cap
      included.
    * With OpenTelemetry tracing active, the trace context current when a request is made (the
      agent's ``chat`` span) travels with it: in its ``stream`` frame's ``trace``, and in the
      ``traceparent`` header of the websocket handshake the request opens (see
      ``docs/tracing.md``). Without it, neither is sent.
    """

    name = "relay"

    def __init__(
        self,
        url: str,
        *,
        token: str,
        approve: RelayApprover | None = None,
        connect_timeout: float = 10.0,
        approval_timeout: float = 300.0,
        reconnects: int = 3,
        backoff: tuple[float, float] = (0.25, 4.0),
        max_frame: int = 16 * DEFAULT_MAX_FRAME,
        egress: EgressPolicy | None = None,
        cancel_on_disconnect: bool = True,
    ) -> None:
        if not url.startswith(("ws://", "wss://")):
            raise ConfigError(f"a relay url starts with ws:// or wss://, not {url[:20]!r}")
        if egress is not None:
            refused = egress.check_url(url)
            if refused is not None:
                raise ConfigError(f"relay: {refused}")
        if not isinstance(token, str) or not token:
            raise ConfigError("token must be the relay's bearer token (a non-empty string)")
        if not connect_timeout > 0:
            raise ConfigError("connect_timeout must be a number of seconds > 0")
        if not approval_timeout > 0:
            raise ConfigError("approval_timeout must be a number of seconds > 0")
        if isinstance(reconnects, bool) or not isinstance(reconnects, int) or reconnects < 0:
            raise ConfigError(f"reconnects must be an integer >= 0, not {reconnects!r}")
        if not isinstance(cancel_on_disconnect, bool):
            raise ConfigError("cancel_on_disconnect must be True or False")
        if isinstance(max_frame, bool) or not isinstance(max_frame, int) or max_frame < 1024:
            raise ConfigError(f"max_frame must be a number of bytes >= 1024, not {max_frame!r}")
        low, high = backoff
        if not 0 <= low <= high:
            raise ConfigError(
                "backoff must be (initial, maximum) seconds with 0 <= initial <= maximum"
            )
        self.url = url
        self.egress = egress
        self._token = token
        self.approve = approve
        self.connect_timeout = connect_timeout
        self.approval_timeout = approval_timeout
        self.max_frame = max_frame
        #: Whether requests are cut when their connection drops (``stream`` may say otherwise
        #: per request).
        self.cancel_on_disconnect = cancel_on_disconnect
        self._backoff = _Backoff(reconnects, *backoff)
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: Any = None
        self._connection: _Connection | None = None
        self._connecting = trio.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        #: The protocol version said in hello: the newest, until a relay refuses it.
        self._version = PROTOCOL_VERSION
        self._ready: ReadyFrame | None = None

    def __repr__(self) -> str:
        return f"RelayProvider(url={self.url!r}, token=<redacted>)"

    @property
    def ready(self) -> ReadyFrame | None:
        """What the relay said when the latest connection opened: the protocol version it
        speaks and its limits, ``max_tokens`` (its cap on a request's output tokens) included;
        ``None`` before the first connection."""
        return self._ready

    async def __aenter__(self) -> RelayProvider:
        manager = trio.open_nursery()
        self._nursery = await manager.__aenter__()
        self._nursery_manager = manager
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        # What the block raised comes out as itself, a failure of the connection's task as
        # its own class: never in an exception group. (The nursery never swallows what the
        # block raised: only a failure of its task cancels it while the block runs, and that
        # failure is raised instead.)
        with OneCause(own=exc_info[1]):
            await self.aclose()
            manager, self._nursery_manager = self._nursery_manager, None
            nursery, self._nursery = self._nursery, None
            if manager is not None and nursery is not None:
                nursery.cancel_scope.cancel()  # the connection's task: the block has ended
                await manager.__aexit__(*exc_info)

    async def aclose(self) -> None:
        """Close the connection; requests still open fail with ``disconnected``. Inside the
        ``async with`` block, the rest of the block still runs (a request made after this is
        refused)."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.drop()
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await connection.socket.aclose()

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
        cancel_on_disconnect: bool | None = None,
    ) -> ProviderStream:
        """Stream one completion through the relay (see :class:`ProviderStream`).
        ``cancel_on_disconnect`` (default: the provider's): ``False`` lets the request's run
        go on when the connection drops, and the stream resumes it (see the class). The
        stream's ``run_id`` names the run once the relay said it."""
        if cancel_on_disconnect is None:
            cancel_on_disconnect = self.cancel_on_disconnect
        elif not isinstance(cancel_on_disconnect, bool):
            raise ConfigError("cancel_on_disconnect must be True, False or None")
        # The caller's trace context, taken now: where the request is made.
        frame = StreamFrame(
            f"r{next(self._ids)}",
            messages,
            tools or (),
            options,
            _tracing.carrier() or None,
            cancel_on_disconnect,
        )
        return _RelayStream(self, frame)

    def watch(self, run_id: str, *, after: int = 0) -> ProviderStream:
        """Follow run ``run_id`` of the relay (one this token started -- from this process or
        any other -- or one its grants let it see): a stream of its deltas after the event
        ``after`` (a seq; 0: from its start), whose ``result`` is the run's result. It resumes
        after a dropped connection like a stream that outlives its connection; leaving it early
        leaves the run running. A run the relay does not keep for this token fails
        ``unknown_run``; a relay from before protocol version 3 fails ``version``."""
        if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_RUN_ID:
            raise ConfigError(f"run_id must be a relay's run id (1 to {MAX_RUN_ID} characters)")
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ConfigError(f"after must be a seq (an integer >= 0), not {after!r}")
        return _RelayStream(self, WatchFrame(f"r{next(self._ids)}", run_id, after))

    # -- the connection ------------------------------------------------------------------------

    async def _connect(self, trace: dict[str, str] | None = None) -> _Connection:
        """The open connection, or a new one (whose handshake carries ``trace``, the W3C trace
        context of the request that opens it)."""
        async with self._connecting:
            connection = self._connection
            if connection is not None and not connection.closed:
                return connection
            if self._closed or self._nursery is None:
                raise ConfigError(
                    "use the RelayProvider as 'async with RelayProvider(...) as provider:'"
                )
            last: Exception | None = None
            for attempt in range(self._backoff.attempts + 1):
                if attempt:
                    await trio.sleep(self._backoff.delay(attempt - 1))
                try:
                    connection = await self._open_speaking(trace)
                except ProviderError as error:
                    if not error.retryable:
                        raise
                    last = error
                    continue
                self._connection = connection
                return connection
            assert last is not None
            raise last

    async def _open_speaking(self, trace: dict[str, str] | None) -> _Connection:
        """:meth:`_open`, saying hello again with the version before as long as the relay
        refuses the version (a relay from before protocol version 2 knows only 1); the
        version it accepted is kept for the connections after."""
        while True:
            try:
                return await self._open(trace)
            except ProviderError as error:
                older = [version for version in VERSIONS if version < self._version]
                if error.code != "version" or not older:
                    raise
                log.info(
                    "the relay does not speak protocol version %d; saying hello with %d",
                    self._version,
                    older[-1],
                )
                self._version = older[-1]

    async def _open(self, trace: dict[str, str] | None = None) -> _Connection:
        assert self._nursery is not None
        try:
            with trio.fail_after(self.connect_timeout):
                # Started as a task of the provider's nursery, so that what goes wrong before
                # the connection is ready (a refused handshake included) is raised here, to the
                # request, and never into that nursery.
                connection: _Connection = await self._nursery.start(
                    functools.partial(self._run, trace=trace)
                )
        except trio.TooSlowError:
            raise ProviderError(
                "the relay did not answer in time", code="timeout", retryable=True
            ) from None
        except trio_websocket.ConnectionRejected as error:
            status = error.status_code
            raise ProviderError(
                f"the relay refused the connection (HTTP {status})",
                code=_REFUSED.get(status, "transport"),
                retryable=status >= 500,
                status=status,
            ) from None
        except trio_websocket.ConnectionClosed as error:
            raise _closed_error(error) from None
        except (trio_websocket.HandshakeError, OSError) as error:
            raise ProviderError(
                f"cannot reach the relay ({type(error).__name__})",
                code="transport",
                retryable=True,
            ) from None
        return connection

    async def _run(
        self, task_status: trio.TaskStatus[_Connection], *, trace: dict[str, str] | None = None
    ) -> None:
        """Open the websocket (``trace`` in its handshake headers) and say hello; once the
        relay is ready, route its frames until the connection closes."""
        parts = urllib.parse.urlsplit(self.url)
        secure = parts.scheme == "wss"
        host = parts.hostname or ""
        port = parts.port or (443 if secure else 80)
        resource = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]
        if self.egress is not None:
            # Judged, and connected to a judged address (TLS still names the host).
            stream = await open_judged_tcp(self.egress, host, port, _egress_refused)
        else:
            stream = await trio.open_tcp_stream(host, port)
        if secure:
            stream = trio.SSLStream(
                stream, ssl.create_default_context(), server_hostname=host, https_compatible=True
            )
        # The stream is ours to close: trio-websocket leaves it open when the handshake is
        # refused.
        closing = False
        failure: BaseException | None = None
        async with stream:
            try:
                async with trio.open_nursery() as nursery:
                    socket = await trio_websocket.wrap_client_stream(
                        nursery,
                        stream,
                        parts.netloc,
                        resource,
                        extra_headers=[
                            (key.encode("ascii"), value.encode("ascii"))
                            for key, value in (trace or {}).items()
                            if value.isascii()
                        ]
                        or None,
                        max_message_size=self.max_frame,
                        message_queue_size=REQUEST_BUFFER,
                        receive_buffer_size=65536,  # a read per burst of frames, not per 4 KiB
                    )
                    try:
                        await self._greet(socket, task_status)
                    except BaseException as error:
                        failure = error
                        raise
                    finally:
                        closing = True
                        with (
                            trio.CancelScope(shield=True),
                            trio.move_on_after(2),
                            contextlib.suppress(trio_websocket.ConnectionClosed),
                        ):
                            await socket.aclose()
                        # Not cancelled at once: trio-websocket's reader ends by itself once the
                        # close handshake is done, and a close begun elsewhere (aclose) waits
                        # for that handshake. Bounded all the same.
                        nursery.cancel_scope.deadline = min(
                            nursery.cancel_scope.deadline, trio.current_time() + 2
                        )
            except BaseExceptionGroup as group:
                if closing:
                    # Once this side is closing, what the websocket library's reader raises
                    # is about a connection that is going away: e.g. trio-websocket answering
                    # a ping that crossed our close frame raises wsproto's LocalProtocolError.
                    # It must not fail the caller's close; cancellation still propagates.
                    dropped, rest = group.split(
                        lambda e: (
                            isinstance(e, Exception)
                            and not isinstance(e, BaseExceptionGroup)
                            and e is not failure
                        )
                    )
                    if dropped is not None:
                        log.debug(
                            "the relay connection raised while closing: %s",
                            ", ".join(sorted({type(e).__name__ for e in _leaves(dropped)})),
                        )
                    if rest is None:
                        return
                    group = rest
                if len(group.exceptions) == 1:  # e.g. the refused handshake, raised by its reader
                    raise group.exceptions[0] from None
                raise group from None

    async def _greet(
        self, socket: trio_websocket.WebSocketConnection, task_status: trio.TaskStatus[_Connection]
    ) -> None:
        await socket.send_message(encode_frame(HelloFrame(self._version, self._token)))
        frame = decode_server_frame(await socket.get_message(), max_bytes=self.max_frame)
        if isinstance(frame, ErrorFrame):
            raise ProviderError(
                f"relay: {frame.message}", code=frame.code, retryable=frame.retryable
            )
        if not isinstance(frame, ReadyFrame):
            raise ProtocolError("the relay did not answer hello with ready")
        connection = _Connection(socket, frame)
        self._ready = frame
        task_status.started(connection)
        await self._read(connection)

    async def _read(self, connection: _Connection) -> None:
        """Route every frame of ``connection`` to its request, until it closes."""
        try:
            while True:
                text = await connection.socket.get_message()
                try:
                    frame = decode_server_frame(text, max_bytes=self.max_frame)
                except ProtocolError as error:
                    log.warning("the relay sent an invalid frame: %s", loggable(error.message))
                    break
                request: str | None = getattr(frame, "id", None)
                channel = connection.requests.get(request) if request is not None else None
                if request is None or channel is None:
                    if isinstance(frame, ErrorFrame) and frame.id is None:
                        log.info("the relay closed the connection: %s", loggable(frame.code))
                    continue
                try:
                    try:
                        channel.send_nowait(frame)  # the usual case: room, and no yield
                    except trio.WouldBlock:
                        await channel.send(frame)  # a slow reader: wait, and so does the relay
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    connection.requests.pop(request, None)  # the reader left
        except trio_websocket.ConnectionClosed:
            pass
        finally:
            connection.drop()
            if self._connection is connection:
                self._connection = None


def _closed_error(error: trio_websocket.ConnectionClosed) -> ProviderError:
    reason = getattr(error, "reason", None)
    code = getattr(reason, "code", None)
    return ProviderError(
        f"the relay closed the connection (code {code})",
        code="disconnected",
        retryable=True,
    )


class _RelayStream(TextStream):
    """One request (a ``stream`` frame) or one ``watch`` of a run, as a provider stream."""

    def __init__(self, provider: RelayProvider, frame: StreamFrame | WatchFrame) -> None:
        super().__init__()
        self._provider = provider
        self._frame = frame
        self._id = frame.id
        self._connection: _Connection | None = None
        self._receive: trio.MemoryReceiveChannel[Any] | None = None
        self._done = False
        self._shown = False
        self._resent = 0
        #: The relay's id of the run (version 3), once it said it.
        self.run_id: str | None = frame.run_id if isinstance(frame, WatchFrame) else None
        #: The seq of the last event of the run this stream had (what a resume goes on after).
        self.seq = frame.after if isinstance(frame, WatchFrame) else 0
        #: The run goes on when the connection drops: the stream follows it again.
        self._resumable = isinstance(frame, WatchFrame)
        self._stalled = 0  # resumes since the last frame that moved the stream on

    async def _submit(self) -> trio.MemoryReceiveChannel[Any]:
        provider = self._provider
        frame = self._frame
        trace = frame.trace if isinstance(frame, StreamFrame) else None
        for attempt in range(provider._backoff.attempts + 1):
            connection = await provider._connect(trace)
            text = self._text(connection.ready)
            send, receive = trio.open_memory_channel[Any](REQUEST_BUFFER)
            connection.requests[self._id] = send
            try:
                await connection.send(text)
            except trio_websocket.ConnectionClosed as error:
                connection.requests.pop(self._id, None)
                receive.close()
                if attempt == provider._backoff.attempts:
                    raise _closed_error(error) from None
                continue
            self._connection = connection
            self._receive = receive
            return receive
        raise AssertionError("unreachable")  # pragma: no cover

    def _text(self, ready: ReadyFrame) -> str:
        """The frame to send on a connection that said ``ready``, checked against its limits."""
        frame = self._frame
        version = ready.version
        if isinstance(frame, WatchFrame):
            if version < RUNS_VERSION:
                self._done = True
                raise ProviderError(
                    f"the relay speaks protocol version {version}, from before runs: it cannot "
                    "follow a run by id",
                    code="version",
                    retryable=False,
                )
            return encode_frame(frame)
        unsupported = unsupported_options(frame.options, version)
        if unsupported:
            # The server would refuse the frame by closing the whole connection (and every
            # other request on it): refused here, never silently sent without them.
            self._done = True
            raise ConfigError(
                f"the relay speaks protocol version {version}, from before "
                f"these model settings: it cannot take {', '.join(unsupported)}; upgrade the "
                "relay server or leave them unset"
            )
        if version < RUNS_VERSION and not frame.cancel_on_disconnect:
            # A relay from before runs would refuse the field (by closing the connection):
            # there, a request is cut with its connection, as it always was.
            log.info(
                "the relay speaks protocol version %d: its requests end with their connection",
                version,
            )
            frame = attrs.evolve(frame, cancel_on_disconnect=True)
        self._resumable = not frame.cancel_on_disconnect
        text = encode_frame(frame)
        if len(text.encode("utf-8", "surrogatepass")) > ready.max_frame:
            # The server would refuse it by closing the whole connection (and every other
            # request on it), and a resend would meet the same refusal.
            self._done = True
            raise ProviderError(
                "the request is larger than the relay's frame limit",
                code="too_large",
                retryable=False,
            )
        return text

    async def _resume(self) -> trio.MemoryReceiveChannel[Any]:
        """Follow the run again on a new connection, after the last event this stream had."""
        provider = self._provider
        assert self.run_id is not None
        watch = WatchFrame(self._id, self.run_id, self.seq)
        text = encode_frame(watch)
        while True:
            self._stalled += 1
            if self._stalled > provider._backoff.attempts + 1 or provider._closed:
                raise self._lost()
            try:
                connection = await provider._connect(None)
            except ProviderError as error:
                if not error.retryable:
                    raise self._lost() from None
                continue
            if connection.ready.version < RUNS_VERSION:
                raise self._lost()
            send, receive = trio.open_memory_channel[Any](REQUEST_BUFFER)
            connection.requests[self._id] = send
            try:
                await connection.send(text)
            except trio_websocket.ConnectionClosed:
                connection.requests.pop(self._id, None)
                receive.close()
                continue
            log.info("relay run %s: resumed after event %d", loggable(self.run_id), self.seq)
            self._connection = connection
            self._receive = receive
            return receive

    def _lost(self) -> ProviderError:
        self._done = True
        return ProviderError(
            "the relay connection dropped mid-stream",
            code="disconnected",
            retryable=True,
            partial=self.partial,
        )

    def _moved(self, seq: int | None) -> bool:
        """Take a frame's seq: False for a frame this stream already had (it skips it)."""
        if seq is None:
            return True
        if seq <= self.seq:
            return False
        self.seq = seq
        self._stalled = 0
        return True

    async def __anext__(self) -> Delta:
        if self._done:
            raise StopAsyncIteration
        receive = self._receive
        if receive is None:
            receive = await self._submit()
        while True:
            frame: ServerFrame | object = await receive.receive()
            if frame is _GONE:
                provider = self._provider
                if self._resumable and self.run_id is not None and not provider._closed:
                    # The run goes on at the relay: follow it again from where this stream is.
                    receive = await self._resume()
                    continue
                if (
                    not (self._shown or provider._closed or isinstance(self._frame, WatchFrame))
                    and self._resent < provider._backoff.attempts
                ):
                    # Nothing of this request arrived: it may be sent again, on a new connection.
                    self._resent += 1
                    receive = await self._submit()
                    continue
                raise self._lost()
            if isinstance(frame, RunFrame):
                self.run_id = frame.run_id
                continue
            if isinstance(frame, DeltaFrame):
                if not self._moved(frame.seq):
                    continue
                self._shown = True
                (self._content if frame.channel == "content" else self._thinking).append(frame.text)
                return Delta("content" if frame.channel == "content" else "thinking", frame.text)
            if isinstance(frame, ApprovalFrame):
                if not self._moved(frame.seq):
                    continue
                self._shown = True  # a human has been asked: the request is never sent again
                await self._answer(frame)
                continue
            self._done = True
            self._forget()
            if isinstance(frame, ResultFrame):
                self._result = frame.result
                raise StopAsyncIteration
            if isinstance(frame, AbortFrame):
                raise ProviderError(
                    "the relay aborted the request", code="aborted", partial=frame.partial
                )
            if isinstance(frame, GapFrame):
                raise ProviderError(
                    "the relay no longer holds part of this run's answer",
                    code="gap",
                    retryable=False,
                    partial=self.partial,
                )
            assert isinstance(frame, ErrorFrame)
            raise ProviderError(
                f"relay: {frame.message}",
                code=frame.code,
                retryable=frame.retryable,
                partial=self.partial if self._shown else None,
            )

    async def _answer(self, approval: ApprovalFrame) -> None:
        approve = self._provider.approve
        allowed, reason = False, "no approver is attached to the relay client"
        if approve is not None:
            answer: bool | tuple[bool, str] = (False, "no answer in time")
            try:
                with trio.move_on_after(self._provider.approval_timeout):
                    answer = await approve(approval.call, approval.reason)
            except Exception:
                log.warning("the relay approver raised; denying", exc_info=True)
                answer = (False, "the approver failed")
            allowed, reason = answer if isinstance(answer, tuple) else (bool(answer), "")
        decision = "allow" if allowed else "deny"
        assert self._connection is not None
        frame = ApproveFrame(self._id, approval.call.id, decision, reason or None)
        with contextlib.suppress(trio_websocket.ConnectionClosed):  # the next frame says so
            await self._connection.send(encode_frame(frame))

    def _forget(self) -> None:
        connection = self._connection
        if connection is not None:
            channel = connection.requests.pop(self._id, None)
            if channel is not None:
                channel.close()
        if self._receive is not None:
            self._receive.close()

    async def aclose(self) -> None:
        """Leave early: tell the server to stop (it closes its upstream stream at once) -- but
        leaving a :meth:`RelayProvider.watch` early leaves the run running."""
        if self._done or self._receive is None:
            self._done = True
            self._forget()
            await trio.lowlevel.checkpoint()
            return
        self._done = True
        connection = self._connection
        self._forget()
        if isinstance(self._frame, WatchFrame):
            await trio.lowlevel.checkpoint()
            return
        if connection is not None and not connection.closed:
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(2),
                contextlib.suppress(trio_websocket.ConnectionClosed),
            ):
                await connection.send(encode_frame(CancelFrame(self._id)))


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for member in error.exceptions for leaf in _leaves(member)]
    return [error]
