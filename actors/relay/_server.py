"""The relay server: an ASGI application that lets credential-free clients drive the model it
holds.

Routes (all others: 404; a known path with the wrong method: 405 with ``Allow``):

* ``GET /`` (and its ``/app.js`` and ``/app.css``): the browser chat page, when enabled;
* websocket ``/v1/relay``: the multiplexed frame protocol of :mod:`protocols.relay`;
* ``POST /v1/stream``: one provider call for clients without websockets; the response is NDJSON
  (one server frame per line).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.resources
import logging
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import attrs
import trio

from protocols.authority import Authority, resolve_ask
from protocols.budget import estimate_tokens
from protocols.errors import (
    AgentsError,
    ConfigError,
    ProtocolError,
    SizeLimitError,
    ValidationError,
)
from protocols.history import estimate_messages
from protocols.messages import (
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
)
from protocols.relay import (
    DEFAULT_MAX_FRAME,
    HTTP_REQUEST_ID,
    NDJSON_CONTENT_TYPE,
    PROTOCOL_VERSION,
    Abort,
    Approval,
    Approve,
    Cancel,
    Delta,
    Error,
    Hello,
    HostPolicy,
    HttpRequest,
    Ready,
    Result,
    ServerFrame,
    Stream,
    decode_client_frame,
    decode_http_request,
    encode_frame,
    error_frame,
    loggable,
)

from ..providers import ProviderInterface

__all__ = ["RelayLimits", "RelayServer", "RelayStatistics", "RelayToken"]

log = logging.getLogger("trio_agents.relay")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Frames of one connection that may wait for its sender: enough that a request reads its next
#: upstream delta while the last one is written, bounded so a slow client still parks them.
OUTBOX = 16

RELAY_PATH = "/v1/relay"
STREAM_PATH = "/v1/stream"
_PAGES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
# The page loads only its own files and talks only to its own origin.
_PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# Websocket close codes: policy violation, message too big, going away, try again later.
_POLICY, _TOO_BIG, _GOING_AWAY, _AGAIN = 1008, 1009, 1001, 1013


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@attrs.frozen(repr=False)
class RelayToken:
    """A bearer token the relay accepts, with its limits.

    ``secret``: the token itself (never shown in ``repr``, logs or frames); ``name``: how logs
    and statistics call its holder; ``max_streams``: requests open at once over all its
    connections; ``per_minute``: requests started in any 60 s; ``budget``: total tokens (as the
    upstream reported them) it may spend over the server's life, ``None`` for no limit.
    """

    secret: str
    name: str = "client"
    max_streams: int = 8
    per_minute: int = 120
    budget: int | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.secret, str) or len(self.secret) < 16:
            raise ConfigError("a relay token's secret must be a string of at least 16 characters")
        for name in ("max_streams", "per_minute"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RelayToken.{name} must be an integer >= 1, not {value!r}")
        if self.budget is not None and (
            isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 1
        ):
            raise ConfigError(
                f"RelayToken.budget must be an integer >= 1 or None, not {self.budget!r}"
            )

    def __repr__(self) -> str:
        return f"RelayToken(name={self.name!r}, secret=<redacted>)"


@attrs.frozen
class RelayLimits:
    """Per-connection limits.

    ``max_frame``: bytes of one frame (and of an HTTP request body); ``max_streams``: requests
    open at once on one connection; ``idle_timeout``: seconds a connection with no open request
    may stay silent; ``handshake_timeout``: seconds to the ``hello`` (and to a whole HTTP request
    body); ``approval_timeout``: seconds a pending approval waits for its answer (then: denied);
    ``send_timeout``: seconds one frame may take to leave (a client that stops reading is cut:
    its requests end, their upstream streams are closed, and nothing more is sent to it).
    """

    max_frame: int = DEFAULT_MAX_FRAME
    max_streams: int = 16
    idle_timeout: float = 300.0
    handshake_timeout: float = 10.0
    approval_timeout: float = 300.0
    send_timeout: float = 60.0

    def __attrs_post_init__(self) -> None:
        for name in ("max_frame", "max_streams"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RelayLimits.{name} must be an integer >= 1, not {value!r}")
        for name in ("idle_timeout", "handshake_timeout", "approval_timeout", "send_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"RelayLimits.{name} must be a number of seconds > 0")


@attrs.define
class RelayStatistics:
    """Counters since the server was made: ``connections`` open now, ``streams`` open now,
    ``upstream_calls`` made, ``refused`` by error code."""

    connections: int = 0
    streams: int = 0
    upstream_calls: int = 0
    refused: dict[str, int] = attrs.field(factory=dict)


class _TokenState:
    """What the server tracks per token: its open streams, recent starts and spent tokens."""

    __slots__ = ("open", "spent", "starts", "token")

    def __init__(self, token: RelayToken) -> None:
        self.token = token
        self.open = 0
        self.starts: deque[float] = deque()
        self.spent = 0


class _Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class RelayServer:
    """The relay, as an ASGI application: ``app = RelayServer(provider, tokens=[...])``.

    Mount it in any ASGI server or framework, or run it with :func:`serve`. It holds the
    provider (and so the credential); clients only ever see frames. Guarantees:

    * **Authentication first.** A websocket presenting ``Authorization: Bearer`` is checked
      before it is accepted; otherwise its first frame must be ``hello`` with the token, within
      ``handshake_timeout``. An HTTP request's bearer header is checked before its body is read.
      Tokens are compared in constant time. Nothing is read further, and the upstream is never
      touched, before a token is accepted.
    * **Host names.** A request whose ``Host`` header names another host than the server's
      own address (with ``localhost``, ``127.0.0.1`` and ``::1`` when that is a loopback
      address) or one of ``allowed_hosts`` is refused with 421 before anything else: a page
      whose name was rebound to this address (DNS rebinding) gets nowhere. (Its own address is
      the local end of each connection, as the ASGI server's ``scope["server"]`` says; where it
      says none -- a Unix socket -- only ``allowed_hosts`` are answered.)
    * **Origins.** A request with an ``Origin`` header is refused unless that origin is in
      ``origins``, or no list is given and it is ``http`` or ``https`` on one of those host
      names with the server's port (for an ``allowed_hosts`` entry without a port, also 80
      and 443: the public port of a reverse proxy in front). The ``Host`` header never
      decides which origin is the server's own.
    * **Limits**, each refused with a clear frame (or status) and never by entering the
      upstream: frame size, streams per connection, per-token streams, requests per minute
      and token budget.
    * **Cancellation both ways.** A ``cancel`` frame, a disconnect or :meth:`close` closes the
      upstream stream at once; the client's own ``cancel`` is answered with ``abort`` and the
      partial.
    * **Back-pressure.** At most :data:`OUTBOX` frames of a connection wait to be written; then
      its requests wait before reading the next upstream delta: a slow client parks its own
      upstream streams, nothing is buffered without bound, and other connections are not held
      up. Pieces the upstream has already decoded leave together, as one frame.
    * **Nothing leaks.** Errors cross as a fixed text per code; the upstream's own message is
      logged, never sent.

    ``authority`` (optional) decides the tool calls in each result: a denied call is named in
    the ``result`` frame's ``denied``; an "ask" is put to the client as an ``approval`` frame
    (no answer within ``approval_timeout``, or over plain HTTP: denied).
    """

    def __init__(
        self,
        provider: ProviderInterface,
        *,
        tokens: Iterable[RelayToken | str],
        origins: Iterable[str] | None = None,
        allowed_hosts: Iterable[str] = (),
        limits: RelayLimits = RelayLimits(),
        authority: Authority | None = None,
        page: bool = True,
    ) -> None:
        holders: list[tuple[bytes, _TokenState]] = []
        for item in tokens:
            token = RelayToken(item) if isinstance(item, str) else item
            if not isinstance(token, RelayToken):
                raise ConfigError("tokens must be RelayToken objects or secret strings")
            holders.append((_digest(token.secret), _TokenState(token)))
        if not holders:
            raise ConfigError("a relay needs at least one token")
        if len({digest for digest, _ in holders}) != len(holders):
            raise ConfigError("two relay tokens have the same secret")
        self.provider = provider
        self.limits = limits
        self.authority = authority
        self.page = page
        self.origins = None if origins is None else frozenset(o.rstrip("/") for o in origins)
        self.allowed_hosts = tuple(allowed_hosts)
        try:  # checked now: a malformed host or origin is a configuration error
            HostPolicy.build(None, self.allowed_hosts, self.origins)
        except ValidationError as error:
            raise ConfigError(error.message) from None
        self._policies: dict[tuple[str, int] | None, HostPolicy] = {}
        self._holders = holders
        self._statistics = RelayStatistics()
        self._closing = False
        self._scopes: set[trio.CancelScope] = set()

    def __repr__(self) -> str:
        return f"<RelayServer tokens={len(self._holders)} provider={type(self.provider).__name__}>"

    def statistics(self) -> RelayStatistics:
        """A copy of the counters."""
        stats = self._statistics
        return RelayStatistics(
            stats.connections, stats.streams, stats.upstream_calls, dict(stats.refused)
        )

    def close(self) -> None:
        """Shut down: every open request is cut at once (its upstream stream closed), each
        websocket -- also one still waiting for its ``hello`` -- gets a ``shutdown`` error and
        is closed with 1001, each NDJSON response that has begun ends with its ``shutdown``
        line, and new connections and requests are refused."""
        self._closing = True
        for scope in list(self._scopes):
            scope.cancel()

    # -- checks --------------------------------------------------------------------------------

    def _holder(self, secret: str | None) -> _TokenState | None:
        """The holder of ``secret``, comparing against every token in constant time."""
        offered = _digest(secret or "")
        found: _TokenState | None = None
        for digest, holder in self._holders:
            if hmac.compare_digest(offered, digest) and secret:
                found = holder
        return found

    def _refuse(self, code: str) -> None:
        refused = self._statistics.refused
        refused[code] = refused.get(code, 0) + 1

    def _policy(self, scope: Scope) -> HostPolicy:
        """The host policy for a connection that came in at ``scope["server"]`` (the address
        and port of its local end: for a relay bound to every interface, the one it used)."""
        server = scope.get("server")
        key: tuple[str, int] | None = None
        if isinstance(server, tuple | list) and len(server) == 2 and isinstance(server[1], int):
            key = (str(server[0]), server[1])
        policy = self._policies.get(key)
        if policy is None:
            if len(self._policies) >= 64:  # a server has few local addresses; bounded anyway
                self._policies.clear()
            policy = HostPolicy.build(key, self.allowed_hosts, self.origins)
            self._policies[key] = policy
        return policy

    def _origin_ok(self, scope: Scope, headers: Mapping[str, str]) -> bool:
        # A request without Origin is not a browser's: the bearer token is the whole story.
        return self._policy(scope).origin_ok(headers.get("origin"))

    def _admit(self, holder: _TokenState) -> None:
        """Count a new request against ``holder``'s limits, or raise :class:`_Refused`."""
        if self._closing:
            raise _Refused("shutdown")
        token = holder.token
        if token.budget is not None and holder.spent >= token.budget:
            raise _Refused("budget")
        if holder.open >= token.max_streams:
            raise _Refused("too_many_streams")
        now = trio.current_time()
        starts = holder.starts
        while starts and starts[0] <= now - 60:
            starts.popleft()
        if len(starts) >= token.per_minute:
            raise _Refused("rate_limited")
        starts.append(now)
        holder.open += 1

    def _settle(
        self,
        holder: _TokenState,
        result: ProviderResult | None,
        messages: Sequence[Message],
        streamed: Sequence[Delta],
    ) -> None:
        """The request is over: free its slot and charge what it cost -- the reported usage, or
        for a request cut or failed before reporting any, an estimate of its prompt and of
        what streamed (so cancelling just before the end does not spend nothing)."""
        holder.open -= 1
        if result is not None and result.usage is not None:
            holder.spent += result.usage.total
        else:
            holder.spent += estimate_messages(messages) + sum(
                estimate_tokens(delta.text) for delta in streamed
            )

    async def _decide(
        self,
        request_id: str,
        calls: Sequence[ToolCall],
        ask: Callable[[Approval], Awaitable[Approve | None]] | None,
    ) -> dict[str, str]:
        """The calls the authority refuses (id -> the model's text), asking where it says so."""
        authority = self.authority
        denied: dict[str, str] = {}
        if authority is None:
            return denied
        for call in calls:
            verdict = authority.decide(call)
            if verdict.decision == "ask":
                answer: Approve | None = None
                if ask is not None:
                    with trio.move_on_after(self.limits.approval_timeout):
                        answer = await ask(Approval(request_id, call, verdict.reason))
                if answer is None:
                    verdict = resolve_ask(verdict, None, None)
                else:
                    verdict = resolve_ask(verdict, answer.decision == "allow", answer.reason)
            if verdict.decision == "deny":
                denied[call.id] = verdict.model_text()
        return denied

    # -- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        path = scope.get("path", "")
        headers = _headers(scope)
        if kind in ("websocket", "http") and not self._policy(scope).host_ok(headers.get("host")):
            # Refused before anything else (the token, the body, the upstream): a name this
            # relay does not answer to is a misdirected request, or a DNS-rebinding page.
            self._refuse("misdirected")
            if kind == "websocket":
                if (await receive())["type"] == "websocket.connect":
                    await _ws_deny(scope, send, 421, body=_MISDIRECTED)
            else:
                await _plain(send, 421, body=_MISDIRECTED)
            return
        if kind == "websocket":
            if path != RELAY_PATH:
                await _ws_deny(scope, send, 404)
                return
            await self._websocket(scope, headers, receive, send)
            return
        if kind != "http":
            return
        method = scope.get("method", "GET")
        if path == STREAM_PATH:
            if method != "POST":
                await _plain(send, 405, extra=[(b"allow", b"POST")])
                return
            await self._http_stream(scope, headers, receive, send)
        elif path in _PAGES and self.page:
            if method not in ("GET", "HEAD"):
                await _plain(send, 405, extra=[(b"allow", b"GET, HEAD")])
                return
            await _page(send, path, head=method == "HEAD")
        elif path == RELAY_PATH:
            await _plain(send, 426, extra=[(b"upgrade", b"websocket")])
        else:
            await _plain(send, 404)

    # -- plain HTTP ----------------------------------------------------------------------------

    async def _http_stream(
        self, scope: Scope, headers: Mapping[str, str], receive: Receive, send: Send
    ) -> None:
        limits = self.limits
        if not self._origin_ok(scope, headers):
            self._refuse("forbidden_origin")
            await _plain(send, 403)
            return
        holder = self._holder(_bearer(headers))
        if holder is None:
            self._refuse("unauthorized")
            await _plain(send, 401, extra=[(b"www-authenticate", b"Bearer")])
            return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limits.max_frame):
            self._refuse("too_large")
            await _plain(send, 413)
            return
        body = bytearray()
        with trio.move_on_after(limits.handshake_timeout) as waited:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                if len(body) > limits.max_frame:
                    self._refuse("too_large")
                    await _plain(send, 413)
                    return
                if not message.get("more_body", False):
                    break
        if waited.cancelled_caught:
            self._refuse("timeout")
            await _plain(send, 408)
            return
        try:
            request = decode_http_request(bytes(body))
        except ProtocolError:
            self._refuse("invalid")
            await _plain(send, 400)
            return
        try:
            self._admit(holder)
        except _Refused as refused:
            self._refuse(refused.code)
            await _plain(send, 503 if refused.code == "shutdown" else 429)
            return
        result: ProviderResult | None = None
        streamed: list[Delta] = []
        out = _HttpOut(send, limits.send_timeout)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            nursery.start_soon(out.sender)
            try:
                result = await self._http_respond(request, out, streamed)
            finally:
                out.close()
                # The request is over (answered, failed, cut, or its client left): its slot is
                # free now, not once its last bytes have left -- a client that stops reading
                # may hold those forever.
                self._settle(holder, result, request.messages, streamed)
            await out.done.wait()  # what is queued has left (or the client is gone)
            nursery.cancel_scope.cancel()

    async def _http_respond(
        self, request: HttpRequest, out: _HttpOut, streamed: list[Delta]
    ) -> ProviderResult | None:
        started = False

        async def line(frame: ServerFrame) -> None:
            nonlocal started
            if not started:
                if isinstance(frame, Error):
                    return  # a failure before anything streamed is answered with a status
                started = True
                await out.put(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", NDJSON_CONTENT_TYPE.encode()),
                            (b"cache-control", b"no-store"),
                            (b"x-content-type-options", b"nosniff"),
                        ],
                    }
                )
            await out.put(
                {
                    "type": "http.response.body",
                    "body": (encode_frame(frame) + "\n").encode("utf-8"),
                    "more_body": True,
                }
            )

        end = {"type": "http.response.body", "body": b"", "more_body": False}
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                outcome = await self._relay(
                    HTTP_REQUEST_ID,
                    messages=request.messages,
                    tools=request.tools,
                    options=request.options,
                    emit=line,
                    ask=None,
                    streamed=streamed,
                )
            except _Gone:
                # The client stopped reading for send_timeout: cut. Its upstream stream was
                # closed on the way out of _relay.
                log.info("relay HTTP client stopped reading (or left); its request was cut")
                return None
            finally:
                self._scopes.discard(scope)
        if scope.cancelled_caught:
            if self._closing and started:
                # Cut by close(): the response ends properly, its last line saying why.
                with trio.CancelScope(shield=True), contextlib.suppress(_Gone):
                    await line(error_frame("shutdown", HTTP_REQUEST_ID))
                    await out.put(end)
            return None  # else the client left: nobody to answer
        if isinstance(outcome, _Failed) and not started:
            await out.put_quietly(_plain, 400 if outcome.code == "invalid" else 502)
            return None
        # Shielded: the ASGI server reports the finished response as a disconnect, which cancels
        # this call -- and the result, uncounted, would never be charged to the token.
        with trio.CancelScope(shield=True), contextlib.suppress(_Gone):
            await out.put(end)
        return outcome if isinstance(outcome, ProviderResult) else None

    # -- the shared core -----------------------------------------------------------------------

    async def _relay(
        self,
        request_id: str,
        *,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ProviderOptions | None,
        emit: Callable[[ServerFrame], Awaitable[None]],
        ask: Callable[[Approval], Awaitable[Approve | None]] | None,
        streamed: list[Delta],
    ) -> ProviderResult | _Failed:
        """Stream one upstream call to ``emit`` -- a frame per run of pieces the upstream
        decoded together, then its result (or an error frame); while ``emit`` waits, nothing
        more is read. Each delta frame is also kept in ``streamed`` (what the client was
        sent). A cancel of the caller's scope closes the upstream stream and propagates."""
        self._statistics.upstream_calls += 1
        self._statistics.streams += 1
        stream = None
        try:
            stream = self.provider.stream(messages, tools=tools or None, options=options)
            async with stream:
                async for delta in stream:
                    # What the upstream has already decoded goes out with it, consecutive
                    # pieces of one channel as one frame: a frame per network read instead of
                    # a frame per token, while a paced stream still goes out piece by piece.
                    for channel, text in _coalesced([delta, *stream.take_ready()]):
                        piece = Delta(request_id, channel, text)
                        streamed.append(piece)
                        await emit(piece)
            result = stream.result
            denied = await self._decide(request_id, result.calls, ask)
            if denied:
                result = attrs.evolve(result, denied={**result.denied, **denied})
            await emit(Result(request_id, result))
            return result
        except _Gone:
            raise
        except (ConfigError, ValidationError) as error:
            # The request as the client gave it cannot be made (e.g. ``options.extra`` naming a
            # key the provider's encoder owns): the client's mistake, refused before anything
            # reached the upstream, and the same request would fail again -- not retryable.
            log.info(
                "relay request %s refused as invalid: %s",
                loggable(request_id),
                loggable(error.message),
            )
            await emit(error_frame("invalid", request_id))
            return _Failed("invalid")
        except Exception as error:
            # The upstream's message may carry details the client must not see: log it here,
            # send the fixed text. Any exception (a provider's bug too) fails only its own
            # request, never the connection and the other requests on it. What the log shows
            # of the peers (the request id, the error's text) is escaped: no forged lines.
            log.warning(
                "relay request %s failed upstream: %s: %s%s",
                loggable(request_id),
                type(error).__name__,
                loggable(error.message if isinstance(error, AgentsError) else str(error)),
                "" if isinstance(error, AgentsError) else "\n" + _stack(error),
            )
            await emit(error_frame("upstream", request_id))
            return _Failed("upstream")
        finally:
            self._statistics.streams -= 1

    # -- websocket -----------------------------------------------------------------------------

    async def _websocket(
        self, scope: Scope, headers: Mapping[str, str], receive: Receive, send: Send
    ) -> None:
        connect = await receive()
        if connect["type"] != "websocket.connect":
            return
        if self._closing:
            self._refuse("shutdown")
            await _ws_deny(scope, send, 503)
            return
        if not self._origin_ok(scope, headers):
            self._refuse("forbidden_origin")
            await _ws_deny(scope, send, 403)
            return
        holder: _TokenState | None = None
        if "authorization" in headers:
            holder = self._holder(_bearer(headers))
            if holder is None:
                self._refuse("unauthorized")
                await _ws_deny(scope, send, 401)
                return
        await send({"type": "websocket.accept"})
        connection = _Connection(self, receive, send)
        self._statistics.connections += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.sender)
                try:
                    await connection.serve(holder)
                except* _Gone:
                    pass  # the client left, or was cut: there is nobody to tell
                finally:
                    connection.outbox.close()
        finally:
            self._statistics.connections -= 1


class _HttpOut:
    """The response of one plain HTTP request. Its messages leave through one task,
    :meth:`sender`: the ASGI server's send need not be cancellable (hypercorn shields its
    socket writes), so the request waits -- with the send timeout, cancellably -- for the
    sender to take each message, never inside that send. A client that stops reading is cut
    (:meth:`put` raises :class:`_Gone`) once a message has waited ``send_timeout``."""

    def __init__(self, send: Send, send_timeout: float) -> None:
        self._send = send
        self._timeout = send_timeout
        self._in, self._out = trio.open_memory_channel[MutableMapping[str, Any]](OUTBOX)
        self.cut = False
        self.done = trio.Event()

    async def put(self, message: MutableMapping[str, Any]) -> None:
        if self.cut:
            raise _Gone
        with trio.move_on_after(self._timeout) as waited:
            try:
                await self._in.send(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.cut = True
                raise _Gone from None
        if waited.cancelled_caught:
            self.cut = True  # nothing more goes to a client that stops reading
            raise _Gone

    async def put_quietly(
        self, respond: Callable[[Send, int], Awaitable[None]], status: int
    ) -> None:
        """``respond(put, status)``, a client that is gone being no error."""
        with contextlib.suppress(_Gone):
            await respond(self.put, status)

    def close(self) -> None:
        self._in.close()

    async def sender(self) -> None:
        try:
            async with self._out:
                async for message in self._out:
                    if self.cut:
                        return
                    try:
                        await self._send(message)
                    except OSError:  # the transport is gone
                        self.cut = True
                        return
        finally:
            self.done.set()


class _Failed:
    """The request failed (the client was told): ``code`` says how."""

    def __init__(self, code: str) -> None:
        self.code = code


def _stack(error: BaseException) -> str:
    """Where ``error`` was raised: the traceback's frames, without the exception's text (a
    provider's bug may quote what a client sent)."""
    return "".join(traceback.format_tb(error.__traceback__)).rstrip()


class _Gone(Exception):
    """The client disconnected."""


class _Connection:
    """One websocket: reads frames, runs a task per open request, serialises sends."""

    def __init__(self, server: RelayServer, receive: Receive, send: Send) -> None:
        self.server = server
        self.limits = server.limits
        self._receive = receive
        self._send = send
        # Frames leave through one task, :meth:`sender`: the ASGI server's send need not be
        # cancellable (hypercorn shields its socket writes), so a request waits -- with the send
        # timeout, cancellably -- for the sender to take its frame, never inside that send.
        self.outbox, self._outgoing = trio.open_memory_channel[MutableMapping[str, Any]](OUTBOX)
        self._requests: trio.CancelScope | None = None
        self._open: dict[str, trio.CancelScope] = {}
        self._cancelled: set[str] = set()
        self._approvals: dict[tuple[str, str], tuple[trio.Event, list[Approve]]] = {}
        self._closed = False
        self._idle: trio.CancelScope | None = None

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
        await self.send(Ready(PROTOCOL_VERSION, limits.max_frame, limits.max_streams))
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
        if not isinstance(frame, Hello):
            await self.fail("invalid", _POLICY)
            return None
        if frame.version != PROTOCOL_VERSION:
            await self.fail("version", _POLICY)
            return None
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
                if self._open:
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
            if isinstance(frame, Stream):
                await self._start(frame, holder, nursery)
            elif isinstance(frame, Cancel):
                scope = self._open.get(frame.id)
                if scope is None:
                    await self._say("unknown_request", frame.id)
                else:
                    self._cancelled.add(frame.id)
                    scope.cancel()
            elif isinstance(frame, Approve):
                waiting = self._approvals.get((frame.id, frame.call))
                if waiting is None and frame.id in self._open:
                    pass  # too late: that approval timed out (denied), the request goes on
                elif waiting is None:
                    await self._say("unknown_request", frame.id)
                else:
                    event, answers = waiting
                    answers.append(frame)
                    event.set()
            else:  # a second hello
                await self.fail("invalid", _POLICY)
                return

    async def _say(self, code: str, request_id: str | None) -> None:
        self.server._refuse(code)
        await self.send(error_frame(code, request_id))

    async def _start(self, frame: Stream, holder: _TokenState, nursery: trio.Nursery) -> None:
        if frame.id in self._open:
            await self._say("duplicate", frame.id)
            return
        if len(self._open) >= self.limits.max_streams:
            await self._say("too_many_streams", frame.id)
            return
        try:
            self.server._admit(holder)
        except _Refused as refused:
            await self._say(refused.code, frame.id)
            return
        scope = trio.CancelScope()
        self._open[frame.id] = scope
        nursery.start_soon(self._stream, frame, holder, scope)

    async def _ask(self, approval: Approval) -> Approve | None:
        key = (approval.id, approval.call.id)
        event, answers = trio.Event(), list[Approve]()
        self._approvals[key] = (event, answers)
        try:
            await self.send(approval)
            await event.wait()
            return answers[0]
        finally:
            del self._approvals[key]

    async def _stream(self, frame: Stream, holder: _TokenState, scope: trio.CancelScope) -> None:
        server = self.server
        result: ProviderResult | None = None
        streamed: list[Delta] = []
        try:
            with scope:
                outcome = await server._relay(
                    frame.id,
                    messages=frame.messages,
                    tools=frame.tools,
                    options=frame.options,
                    emit=self.send,
                    ask=self._ask,
                    streamed=streamed,
                )
                if isinstance(outcome, ProviderResult):
                    result = outcome
            if scope.cancelled_caught and frame.id in self._cancelled:
                await self.send(Abort(frame.id, _partial(streamed)))
        except _Gone:
            pass
        finally:
            self._open.pop(frame.id, None)
            self._cancelled.discard(frame.id)
            server._settle(holder, result, frame.messages, streamed)
            if not self._open and self._idle is not None:
                # Idle counts from the end of the last request, not from the last frame read.
                self._idle.deadline = trio.current_time() + self.limits.idle_timeout


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


def _partial(deltas: Sequence[Delta]) -> ProviderResult:
    content = "".join(d.text for d in deltas if d.channel == "content")
    thinking = "".join(d.text for d in deltas if d.channel == "thinking")
    return ProviderResult(content=content, thinking=thinking, finish=FinishReason.CANCELLED)


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        if key not in headers:  # the first of a repeated header wins
            headers[key] = value.decode("latin-1")
    return headers


def _bearer(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, secret = value.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return secret.strip()


_MISDIRECTED = b"misdirected request: this relay does not answer to that host name\n"


def _text_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"text/plain; charset=utf-8"))
    return headers


async def _plain(
    send: Send, status: int, *, extra: Sequence[tuple[bytes, bytes]] = (), body: bytes = b""
) -> None:
    """A refusal: the status, and no body or a short plain-text one."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*_text_headers(body), (b"cache-control", b"no-store"), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _ws_deny(scope: Scope, send: Send, status: int, *, body: bytes = b"") -> None:
    """Refuse a websocket handshake: with ``status`` (and ``body``) where the server can say
    it, else with a plain close (which ASGI servers answer with 403)."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": _text_headers(body),
            }
        )
        await send({"type": "websocket.http.response.body", "body": body, "more_body": False})
    else:
        await send({"type": "websocket.close", "code": _POLICY})


_STATIC: dict[str, bytes] = {}


async def _page(send: Send, path: str, *, head: bool) -> None:
    name, content_type = _PAGES[path]
    body = _STATIC.get(name)
    if body is None:
        body = importlib.resources.files(__package__).joinpath("static", name).read_bytes()
        _STATIC[name] = body
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"content-security-policy", _PAGE_POLICY.encode()),
                (b"x-content-type-options", b"nosniff"),
                (b"referrer-policy", b"no-referrer"),
                (b"cache-control", b"no-cache"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
