"""The relay server: an ASGI application that lets credential-free clients drive the model it
holds.

Routes (all others: 404; a known path with the wrong method: 405 with ``Allow``):

* ``GET /`` (and its ``/app.js`` and ``/app.css``): the browser chat page, when enabled;
* websocket ``/v1/relay``: the multiplexed frame protocol of :mod:`protocols.relay`;
* ``POST /v1/stream``: one provider call for clients without websockets; the response is NDJSON
  (one server frame per line);
* ``GET /v1/runs/{id}/events``: a run's events, as Server-Sent Events -- or, with ``startIndex``,
  as one polling answer (002's continuation rule); ``POST /v1/runs/{id}/cancel``: cancel it.

The plain HTTP stream's answer and the runs that outlive their request are ``_http_stream``'s;
the served protocols' paths, ``_frontends``'.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from protocols.accounting import estimate_tokens
from protocols.authority import Authority, resolve_ask
from protocols.errors import (
    AgentsError,
    ConfigError,
    ProtocolError,
    ValidationError,
)
from protocols.history import estimate_messages
from protocols.messages import (
    CUT_SHORT,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
)
from protocols.relay import (
    HTTP_REQUEST_ID,
    RUNS_VERSION,
    ApprovalFrame,
    ApproveFrame,
    DeltaFrame,
    ErrorFrame,
    HostPolicy,
    ResultFrame,
    RunFrame,
    ServerFrame,
    decode_http_request,
    error_frame,
    loggable,
)

from .. import _tracing
from .._core._errors import raises_one_cause
from ..providers import ProviderInterface
from ._admission import (
    RelayLimits,
    RelayStatistics,
    RelayToken,
    _digest,
    _grants,
    _Refused,
    _TokenState,
)
from ._asgi import (
    _MISDIRECTED,
    _PAGES,
    RELAY_PATH,
    STREAM_PATH,
    Receive,
    Scope,
    Send,
    _bearer,
    _cancel_on_disconnect,
    _Gone,
    _headers,
    _HttpOut,
    _lifespan,
    _page,
    _plain,
    _ws_deny,
)
from ._frontends import http_served, served
from ._http_stream import (
    MAX_TOKENS_HEADER,
    _contained,
    _http_end,
    _HttpSink,
    _trace_headers,
    _while_attached,
)
from ._jobs import JOBS_PATH, RelayJobs
from ._runs import RUNS_PREFIX, _Run, _Runs, http_runs
from ._served import Refusal, RelayAgents, read_body
from ._session import _coalesced, _Connection, _Failed, _stack

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["RelayLimits", "RelayServer", "RelayStatistics", "RelayToken"]

log = logging.getLogger("trio_agents.relay")


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
      and token budget. A cap on output tokens (``RelayLimits.max_tokens``) lowers or sets each
      request's ``max_tokens`` and is said in ``ready`` (protocol version 2) and in the
      ``x-relay-max-tokens`` header of an HTTP answer.
    * **Protocol versions.** A ``hello`` of version 1, 2 or 3 is accepted and the connection
      speaks it: a client never gets a frame or a field its version would refuse (a connection
      whose handshake carried the token says no hello, and speaks 2).
    * **Runs.** Every request is a run: a server-minted, unguessable id (told to clients of
      version 3 first, in a ``run`` frame, and in the ``x-relay-run-id`` header of an HTTP
      answer) and a log of its events, numbered, ending with one terminal event however the
      request ends. It is followed again by id -- a websocket ``watch``, ``GET
      /v1/runs/{id}/events`` as Server-Sent Events (from ``Last-Event-ID``) or polled with
      ``startIndex`` (002's continuation rule) -- replayed, then live, a ``gap`` where the log
      no longer holds some, through the terminal event. A request whose
      ``cancel_on_disconnect`` is false outlives its connection (its run is a task of its own
      until it ends, or until :meth:`close`); otherwise a dropped connection cuts it, as
      before runs. Kept runs, their sizes and their followers are bounded
      (:class:`RelayLimits`).
    * **Tenancy.** A token follows and controls (cancels, answers approvals of) only its own
      runs and those its ``sees`` grants; any other run id is answered exactly as one that
      does not exist (``unknown_run``, 404).
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
    (no answer within ``approval_timeout``, or over plain HTTP: denied). A call the result
    refuses already -- every call of a reply the upstream cut short (finish ``length`` or
    ``content_filter``) -- is not decided: it keeps its ``denied`` text and never runs, in any
    client that honours ``denied`` (which every client version does).

    ``jobs`` (optional): a :class:`~actors.relay.RelayJobs` -- the relay also serves durable
    jobs under ``/v1/jobs`` (see ``docs/relay.md``).

    ``tracer_provider`` (optional; default: the global one, if configured): each relayed call
    is an OpenTelemetry span ``chat {model}`` (SERVER), a child of the trace context the client
    sent -- its ``stream`` frame's ``trace``, else its websocket handshake's or HTTP request's
    ``traceparent`` header (see ``docs/tracing.md``).
    """

    def __init__(
        self,
        provider: ProviderInterface,
        *,
        tokens: Iterable[RelayToken | str],
        origins: Iterable[str] | None = None,
        allowed_hosts: Iterable[str] = (),
        limits: RelayLimits = RelayLimits(),  # noqa: B008 - frozen: one shared value is safe
        authority: Authority | None = None,
        page: bool = True,
        tracer_provider: TracerProvider | None = None,
        jobs: RelayJobs | None = None,
        agents: RelayAgents | None = None,
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
        self._tracer = _tracing.tracer_for(tracer_provider)
        self.origins = None if origins is None else frozenset(o.rstrip("/") for o in origins)
        self.allowed_hosts = tuple(allowed_hosts)
        try:  # checked now: a malformed host or origin is a configuration error
            HostPolicy.build(None, self.allowed_hosts, self.origins)
        except ValidationError as error:
            raise ConfigError(error.message) from None
        self._policies: dict[tuple[str, int] | None, HostPolicy] = {}
        self._holders = holders
        _grants([holder for _, holder in holders])
        self._statistics = RelayStatistics()
        self._closing = False
        self._scopes: set[trio.CancelScope] = set()
        #: Every request's run, while it runs and then as long as the limits keep it.
        self._runs = _Runs(limits)
        self.jobs = jobs  # the durable jobs API (actors/relay/_jobs.py), when given
        #: The agents the relay runs itself, for the protocols that name one (``_served.py``).
        self.agents = agents
        #: AI SDK chats by owner, agent and chat id: their latest runs, to resume.
        self._chats: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        #: A2A tasks and contexts (``_a2a.py``), once one is sent.
        self._a2a: Any = None
        if jobs is not None:
            jobs._attach(self)

    def __repr__(self) -> str:
        return f"<RelayServer tokens={len(self._holders)} provider={type(self.provider).__name__}>"

    def statistics(self) -> RelayStatistics:
        """A copy of the counters."""
        stats = self._statistics
        self._runs.expire()
        return RelayStatistics(
            stats.connections,
            stats.streams,
            stats.upstream_calls,
            dict(stats.refused),
            len(self._runs),
            self._runs.watchers(),
        )

    def close(self) -> None:
        """Shut down: every open request is cut at once (its upstream stream closed) -- a run
        that outlived its connection too, its log ending ``failed`` (``shutdown``) -- each
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

    async def _http_token(
        self, scope: Scope, headers: Mapping[str, str], send: Send
    ) -> _TokenState | None:
        """The holder of an HTTP request's bearer token, its ``Origin`` allowed: or ``None``,
        the request refused (403 for the origin, 401 for the token) and answered here."""
        if not self._origin_ok(scope, headers):
            self._refuse("forbidden_origin")
            await _plain(send, 403)
            return None
        holder = self._holder(_bearer(headers))
        if holder is None:
            self._refuse("unauthorized")
            await _plain(send, 401, extra=[(b"www-authenticate", b"Bearer")])
            return None
        return holder

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
        streamed: Sequence[DeltaFrame],
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
        ask: Callable[[ApprovalFrame], Awaitable[ApproveFrame | None]] | None,
    ) -> dict[str, str]:
        """The calls the authority refuses (id -> the model's text), asking where it says so."""
        authority = self.authority
        denied: dict[str, str] = {}
        if authority is None:
            return denied
        for call in calls:
            verdict = authority.decide(call)
            if verdict.decision == "ask":
                answer: ApproveFrame | None = None
                if ask is not None:
                    with trio.move_on_after(self.limits.approval_timeout):
                        answer = await ask(ApprovalFrame(request_id, call, verdict.reason))
                if answer is None:
                    verdict = resolve_ask(verdict, None, None)
                else:
                    verdict = resolve_ask(verdict, answer.decision == "allow", answer.reason)
            if verdict.decision == "deny":
                denied[call.id] = verdict.model_text()
        return denied

    # -- ASGI ----------------------------------------------------------------------------------

    @raises_one_cause
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
        if self.jobs is not None and (path == JOBS_PATH or path.startswith(JOBS_PATH + "/")):
            await self.jobs._serve(self, scope, headers, receive, send)
        elif path == STREAM_PATH:
            if method != "POST":
                await _plain(send, 405, extra=[(b"allow", b"POST")])
                return
            await self._http_stream(scope, headers, receive, send)
        elif path.startswith(RUNS_PREFIX):
            await http_runs(self, scope, headers, receive, send)
        elif path in _PAGES and self.page:
            if method not in ("GET", "HEAD"):
                await _plain(send, 405, extra=[(b"allow", b"GET, HEAD")])
                return
            await _page(send, path, head=method == "HEAD")
        elif path == RELAY_PATH:
            await _plain(send, 426, extra=[(b"upgrade", b"websocket")])
        elif served(path):
            await http_served(self, scope, headers, receive, send)
        else:
            await _plain(send, 404)

    # -- plain HTTP ----------------------------------------------------------------------------

    async def _http_stream(
        self, scope: Scope, headers: Mapping[str, str], receive: Receive, send: Send
    ) -> None:
        limits = self.limits
        holder = await self._http_token(scope, headers, send)
        if holder is None:
            return
        try:
            body = await read_body(self, headers, receive)
        except Refusal as refusal:
            await _plain(send, refusal.status)
            return
        except _Gone:
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
        outlives = not request.cancel_on_disconnect
        run = self._runs.open(holder, request_id=HTTP_REQUEST_ID, cancel_on_disconnect=not outlives)
        out = _HttpOut(send, limits.send_timeout)
        cap = limits.max_tokens
        sink = _HttpSink(
            out,
            run,
            runs=request.version is not None and request.version >= RUNS_VERSION,
            extra=[] if cap is None else [(MAX_TOKENS_HEADER, str(cap).encode())],
        )
        run.attached = sink
        relay = functools.partial(
            self._run,
            run,
            holder,
            messages=request.messages,
            tools=request.tools,
            options=request.options,
            ask=None,  # no approvals over plain HTTP: an "ask" is denied
            trace=_trace_headers(headers),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(out.sender)
            try:
                if outlives:
                    # The run is not this request's task: it goes on if the client leaves.
                    self._spawn(relay)
                    there = await _while_attached(run, sink, receive)
                else:
                    # The request is over (answered, failed, cut, or its client left) when
                    # _run returns: its slot is free then, not once its last bytes have left --
                    # a client that stops reading may hold those forever.
                    nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
                    await relay()
                    there = True
                if there:
                    await _http_end(run, sink, out)
            finally:
                out.close()
            await out.done.wait()  # what is queued has left (or the client is gone)
            nursery.cancel_scope.cancel()

    # -- runs ----------------------------------------------------------------------------------

    def _spawn(self, relay: Callable[[], Awaitable[object]]) -> None:
        """Run ``relay`` (a run that outlives its connection) as a task of its own, which no
        connection's end cancels: :meth:`close` does, and the end of the trio run."""
        trio.lowlevel.spawn_system_task(
            _contained, relay, name="relay run", context=contextvars.copy_context()
        )

    async def _run(
        self,
        run: _Run,
        holder: _TokenState,
        *,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ProviderOptions | None,
        ask: Callable[[ApprovalFrame], Awaitable[ApproveFrame | None]] | None,
        trace: Mapping[str, str] | None,
    ) -> ProviderResult | _Failed | None:
        """Relay ``run``'s call: every frame logged as the run's events and sent to its
        attached client (from version 3 after a ``run`` frame, each with its seq). However it
        ends -- answered, failed, cancelled, cut by its client leaving, by its size or by the
        shutdown -- its log ends with its terminal event, its slot is freed and its cost
        charged, and the run is kept to be followed. The outcome: the result, the failure, or
        ``None`` for a cut."""
        streamed: list[DeltaFrame] = []
        outcome: ProviderResult | _Failed | None = None
        self._scopes.add(run.scope)
        if self._closing:
            run.scope.cancel()
        try:
            try:
                with run.scope:
                    attached = run.attached
                    if attached is not None and attached.version >= RUNS_VERSION:
                        await run.publish(RunFrame(run.request_id, run.run_id))
                    outcome = await self._relay(
                        run.request_id,
                        messages=messages,
                        tools=tools,
                        options=options,
                        emit=run.publish,
                        ask=ask,
                        streamed=streamed,
                        trace=trace,
                    )
                if not run.ended:  # cut: by a client's cancel, by its size, by the shutdown
                    frame = run.cut_frame(streamed, self._closing)
                    attached = run.attached
                    tell = (
                        attached is None
                        or attached.says_shutdown
                        or not (isinstance(frame, ErrorFrame) and frame.code == "shutdown")
                    )
                    await run.publish(frame, send=tell)
            except _Gone:
                pass  # its client left (or was cut), and the run went with it
        finally:
            self._scopes.discard(run.scope)
            run.seal(streamed, self._closing)
            run.outcome = outcome
            run.attached = None  # (a kept run holds no connection)
            result = outcome if isinstance(outcome, ProviderResult) else None
            self._settle(holder, result, messages, streamed)
            self._runs.end(run)
            run.done.set()
        return outcome

    # -- the shared core -----------------------------------------------------------------------

    async def _relay(
        self,
        request_id: str,
        *,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ProviderOptions | None,
        emit: Callable[[ServerFrame], Awaitable[None]],
        ask: Callable[[ApprovalFrame], Awaitable[ApproveFrame | None]] | None,
        streamed: list[DeltaFrame],
        trace: Mapping[str, str] | None = None,
    ) -> ProviderResult | _Failed:
        """:meth:`_upstream`, traced when the relay traces: a span per call, a child of
        ``trace`` (the client's W3C trace context), ended however the call ends. The server's
        cap on output tokens applies first (a request it refuses is answered ``invalid``)."""
        try:
            options = self._capped(options)
        except ConfigError as error:
            log.info(
                "relay request %s refused as invalid: %s",
                loggable(request_id),
                loggable(error.message),
            )
            await emit(error_frame("invalid", request_id))
            return _Failed("invalid")
        upstream = functools.partial(
            self._upstream,
            request_id,
            messages=messages,
            tools=tools,
            options=options,
            emit=emit,
            ask=ask,
            streamed=streamed,
        )
        tracer = self._tracer if self._tracer is not None else _tracing.global_tracer()
        if tracer is None:
            return await upstream()
        span = _tracing.ServeSpan(tracer, trace, self.provider, request_id, options)
        try:
            outcome = await upstream()
        except BaseException as error:
            span.failed(error)
            raise
        if isinstance(outcome, _Failed):
            span.done(None, outcome.code)
        else:
            span.done(outcome, None)
        return outcome

    def _capped(self, options: ProviderOptions | None) -> ProviderOptions | None:
        """``options`` under the server's cap on output tokens (see :class:`RelayLimits`)."""
        cap = self.limits.max_tokens
        if cap is None:
            return options
        if options is None:
            return ProviderOptions(max_tokens=cap)
        if options.extra:
            raise ConfigError(
                "this relay caps output tokens: vendor options in extra are refused (they could "
                "lift the cap under another name)"
            )
        if options.max_tokens is not None and options.max_tokens <= cap:
            return options
        return attrs.evolve(options, max_tokens=cap)

    async def _upstream(
        self,
        request_id: str,
        *,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ProviderOptions | None,
        emit: Callable[[ServerFrame], Awaitable[None]],
        ask: Callable[[ApprovalFrame], Awaitable[ApproveFrame | None]] | None,
        streamed: list[DeltaFrame],
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
                        piece = DeltaFrame(request_id, channel, text)
                        streamed.append(piece)
                        await emit(piece)
            result = stream.result
            cut = CUT_SHORT.get(result.finish)
            if cut is not None and result.calls:
                # A reply cut short: every call refused, whichever provider gave it (a client
                # honouring ``denied`` never runs one).
                refused = dict.fromkeys((call.id for call in result.calls), cut)
                result = attrs.evolve(result, denied={**refused, **result.denied})
            # A call the result already refuses is never put to the policy, nor to a human:
            # it will not run whatever they say.
            undecided = [call for call in result.calls if call.id not in result.denied]
            denied = await self._decide(request_id, undecided, ask)
            if denied:
                result = attrs.evolve(result, denied={**result.denied, **denied})
            await emit(ResultFrame(request_id, result))
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
        connection = _Connection(self, receive, send, _trace_headers(headers))
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
