"""The relay: ``RelayServer`` on hypercorn and ``RelayProvider``, over real loopback sockets.

The upstream is always a real provider: the :class:`~actors.testing.Simulator` (through
``OpenAIChat``), a :class:`~actors.testing.FaultProviderServer`, or :class:`Upstream` below -- a
small provider that counts what the relay does to it (calls, deltas pulled, streams closed) and
that the tests steer through the prompt. Raw websocket clients are :class:`Raw` (wsproto over a
plain TCP stream, so a test decides when it reads and can cut the socket without a close frame);
raw HTTP is httpx, or a bare TCP stream where the test must hold the body back.

Everything runs on trio's mock clock with a small autojump threshold: no real sleeps.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing
import trio_websocket
import wsproto
import wsproto.events as ws_events

from actors import open_runtime, tool
from actors.agent import Agent
from actors.providers import OpenAIChat, ProviderStream, RetryPolicy, StreamingProvider
from actors.relay import RelayLimits, RelayProvider, RelayServer, RelayToken, serve
from actors.testing import FaultProviderServer, Reply, ScriptedProvider, Simulator
from protocols.authority import NO_APPROVER_REASON, Authority, Rule
from protocols.codec import to_json
from protocols.egress import EgressPolicy
from protocols.errors import ConfigError, ProviderError
from protocols.messages import (
    CUT_SHORT,
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.relay import (
    HTTP_REQUEST_ID,
    PROTOCOL_VERSION,
    AbortFrame,
    ApprovalFrame,
    ApproveFrame,
    CancelFrame,
    ErrorFrame,
    HelloFrame,
    ReadyFrame,
    ResultFrame,
    ServerFrame,
    StreamFrame,
    decode_server_frame,
    encode_frame,
    error_frame,
)
from protocols.relay import Delta as DeltaFrame

TOKEN = "relay-token-0123456789abcdef"
OTHER = "other-token-fedcba9876543210"
WRONG = "wrong-token-0000000000000000"
SECRETS = (TOKEN, OTHER, WRONG)
UPSTREAM_SECRET = "sk-upstream-never-shown"
USAGE = Usage(3, 4)

ADD = ToolDefinition(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


def joined(deltas: Sequence[Any]) -> list[tuple[str, str]]:
    """A stream's text per run of one channel: what it says, whatever its pieces."""
    out: list[tuple[str, str]] = []
    for delta in deltas:
        if out and out[-1][0] == delta.channel:
            out[-1] = (delta.channel, out[-1][1] + delta.text)
        else:
            out.append((delta.channel, delta.text))
    return out


# -- the upstream -------------------------------------------------------------------------------


class Upstream(StreamingProvider):
    """A provider that counts what is done to it. The last message's text steers it:

    * ``hang``: streams ``partial``, then waits until cancelled;
    * ``silent``: streams nothing until :attr:`gate` is set, then ``second``, and finishes;
    * ``gate``: streams ``first``, waits for :attr:`gate`, streams ``second``, finishes;
    * ``flood``: streams :data:`FLOOD` pieces forever;
    * ``fail``: raises a ``ProviderError`` whose message holds a secret;
    * ``break``: streams ``partial``, then fails like ``fail``;
    * ``crash``: raises a plain ``RuntimeError`` (a provider bug);
    * ``quiet``: streams nothing and finishes (as below);
    * anything else: streams its words back, then finishes with :attr:`usage` and
      :attr:`tool_calls`.
    """

    name = "upstream"
    FLOOD = "x" * 32768

    def __init__(self, *, usage: Usage | None = USAGE, calls: Sequence[ToolCall] = ()) -> None:
        self.usage = usage
        self.tool_calls = tuple(calls)
        self.calls = 0  # stream() calls: the upstream was entered
        self.pulled = 0  # deltas handed to the relay
        self.closed = 0  # streams released (aclose)
        self.parked = 0  # streams now waiting (hang, silent, gate)
        self.gate = trio.Event()
        self.prompts: list[str] = []

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        self.calls += 1
        prompt = messages[-1].content
        self.prompts.append(prompt)
        return _UpstreamStream(self, prompt)


class _UpstreamStream(ProviderStream):
    def __init__(self, upstream: Upstream, prompt: str) -> None:
        self._up = upstream
        self._mode = (
            prompt
            if prompt in ("hang", "silent", "gate", "flood", "fail", "break", "crash")
            else ""
        )
        pieces = {"hang": ["partial"], "break": ["partial"], "gate": ["first"], "silent": []}
        words = [] if prompt == "quiet" else [f"{word} " for word in prompt.split()]
        self._pieces = pieces.get(self._mode, words)
        self._content: list[str] = []
        self._result: ProviderResult | None = None
        self._closed = False

    async def __anext__(self) -> Delta:
        up = self._up
        await trio.lowlevel.checkpoint()
        if self._mode == "fail" or (self._mode == "break" and not self._pieces):
            raise ProviderError(f"upstream said no to key {UPSTREAM_SECRET}", code="http_500")
        if self._mode == "crash":
            raise RuntimeError(f"bug holding {UPSTREAM_SECRET}")
        if self._mode == "flood":
            return self._give(Upstream.FLOOD)
        if self._pieces:
            return self._give(self._pieces.pop(0))
        if self._result is None and self._mode in ("hang", "silent", "gate"):
            up.parked += 1
            try:
                if self._mode == "hang":
                    await trio.sleep_forever()
                await up.gate.wait()
            finally:
                up.parked -= 1
            self._mode = ""
            return self._give("second")
        if self._result is None:
            finish = FinishReason.TOOL_CALLS if up.tool_calls else FinishReason.STOP
            self._result = ProviderResult(
                content="".join(self._content),
                calls=up.tool_calls,
                usage=up.usage,
                finish=finish,
            )
        raise StopAsyncIteration

    def _give(self, text: str) -> Delta:
        self._up.pulled += 1
        self._content.append(text)
        return Delta("content", text)

    @property
    def result(self) -> ProviderResult:
        if self._result is None:
            raise RuntimeError("not finished")
        return self._result

    @property
    def partial(self) -> ProviderResult:
        return self._result or ProviderResult(
            content="".join(self._content), finish=FinishReason.CANCELLED
        )

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._up.closed += 1
        await trio.lowlevel.checkpoint()


# -- the server ---------------------------------------------------------------------------------


@asynccontextmanager
async def running(app: RelayServer) -> AsyncIterator[str]:
    """``app`` served on hypercorn on a free port; yields its ``http://127.0.0.1:PORT``."""
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=None))
        try:
            yield url
        finally:
            nursery.cancel_scope.cancel()


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/v1/relay"


def server(provider: Any, **kwargs: Any) -> RelayServer:
    kwargs.setdefault("tokens", [TOKEN])
    return RelayServer(provider, **kwargs)


async def until(predicate: Callable[[], bool], *, within: float = 60, most: float = 1.0) -> None:
    """Wait (in trio time, at most ``within`` s) until ``predicate()`` holds. Each sleep costs a
    moment of real time (the clock jumps only once everything is blocked), so the polls grow
    further apart, up to ``most`` seconds."""
    pause = 0.001
    with trio.fail_after(within):
        while not predicate():
            await trio.sleep(pause)
            pause = min(pause * 2, most)


#: The version the raw clients of this file speak: the newest before runs (the frames of a run,
#: version 3, are tested in test_relay_runs.py). A relay speaks it exactly as before.
BEFORE_RUNS = 2


def hello(token: str = TOKEN, version: int = BEFORE_RUNS) -> str:
    return encode_frame(HelloFrame(version, token))


def stream(request_id: str, text: str, **kwargs: Any) -> str:
    return encode_frame(StreamFrame(request_id, [Message.user(text)], **kwargs))


def no_secret(*texts: object) -> bool:
    return not any(secret in str(text) for text in texts for secret in (*SECRETS, UPSTREAM_SECRET))


# -- a raw websocket client ---------------------------------------------------------------------


class Raw:
    """A websocket client on wsproto over a plain TCP stream: it reads only when asked to, and
    :meth:`abort` drops the TCP connection without a close frame."""

    def __init__(self, tcp: trio.SocketStream, ws: wsproto.WSConnection) -> None:
        self.tcp = tcp
        self.ws = ws
        self.texts: list[str] = []  # every message received, for the secret checks
        self.close_code: int | None = None
        self.status: int | None = None  # the HTTP status of a refused handshake
        self._events: list[ws_events.Event] = []
        self._parts: list[str] = []
        self.pings = 0  # keep-alive pings the server sent (each answered)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, url: str, *, path: str = "/v1/relay", headers: Sequence[tuple[str, str]] = ()
    ) -> AsyncIterator[Raw]:
        """Connect; a ``host`` among ``headers`` replaces the URL's own."""
        host, port = url.removeprefix("http://").split(":")
        tcp = await trio.open_tcp_stream(host, int(port))
        async with tcp:
            ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
            named = dict(headers).get("host", f"{host}:{port}")
            extra = [(name.encode(), value.encode()) for name, value in headers if name != "host"]
            request = ws_events.Request(host=named, target=path, extra_headers=extra)
            await tcp.send_all(ws.send(request))
            raw = cls(tcp, ws)
            event = await raw._event()
            if isinstance(event, ws_events.RejectConnection):
                raw.status = event.status_code
            else:
                assert isinstance(event, ws_events.AcceptConnection), event
            yield raw

    async def _event(self) -> ws_events.Event | None:
        while not self._events:
            data = await self.tcp.receive_some(65536)
            if not data:
                return None
            self.ws.receive_data(data)
            self._events.extend(self.ws.events())
        return self._events.pop(0)

    async def send(self, text: str) -> None:
        await self.tcp.send_all(self.ws.send(ws_events.TextMessage(text)))

    async def receive(self) -> str | None:
        """The next text message, or None once the server closed (:attr:`close_code`)."""
        while True:
            event = await self._event()
            if event is None:
                return None
            if isinstance(event, ws_events.TextMessage):
                self._parts.append(event.data)
                if event.message_finished:
                    text = "".join(self._parts)
                    self._parts.clear()
                    self.texts.append(text)
                    return text
            elif isinstance(event, ws_events.CloseConnection):
                self.close_code = event.code
                with_reply = self.ws.state is wsproto.connection.ConnectionState.REMOTE_CLOSING
                if with_reply:
                    await self.tcp.send_all(self.ws.send(event.response()))
                return None
            elif isinstance(event, ws_events.Ping):
                self.pings += 1
                await self.tcp.send_all(self.ws.send(event.response()))

    async def frame(self) -> ServerFrame:
        text = await self.receive()
        assert text is not None, f"the server closed the connection ({self.close_code})"
        # As RelayProvider does: an abort or a result repeats all that streamed.
        return decode_server_frame(text, max_bytes=16 * 1024 * 1024)

    async def frames_until(self, request_id: str) -> list[ServerFrame]:
        """Frames up to and including the one that ends ``request_id``."""
        frames: list[ServerFrame] = []
        while True:
            frame = await self.frame()
            frames.append(frame)
            if getattr(frame, "id", None) == request_id and not isinstance(
                frame, DeltaFrame | ApprovalFrame
            ):
                return frames

    async def closed(self) -> int | None:
        """Read to the end; the close code (None: the TCP connection ended without one)."""
        while await self.receive() is not None:
            pass
        return self.close_code

    async def ready(self, token: str = TOKEN) -> ReadyFrame:
        await self.send(hello(token))
        frame = await self.frame()
        assert isinstance(frame, ReadyFrame), frame
        return frame

    async def abort(self) -> None:
        await self.tcp.aclose()


class Proxy:
    """A TCP forwarder in front of the relay: :meth:`cut` drops every connection through it
    (both sides see the TCP connection end, without a websocket close) while the relay and the
    proxy itself stay up -- the network failing, not the server."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        self._target = (host, int(port))
        self._cuts: set[trio.CancelScope] = set()
        self.connections = 0
        self.url = ""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Proxy]:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, self._pipe, 0))
            self.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
            try:
                yield self
            finally:
                nursery.cancel_scope.cancel()

    async def _pipe(self, client: trio.SocketStream) -> None:
        self.connections += 1
        async with client, await trio.open_tcp_stream(*self._target) as upstream:
            with trio.CancelScope() as cut:
                self._cuts.add(cut)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump, client, upstream, cut)
                        nursery.start_soon(self._pump, upstream, client, cut)
                finally:
                    self._cuts.discard(cut)

    @staticmethod
    async def _pump(
        source: trio.SocketStream, sink: trio.SocketStream, cut: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        cut.cancel()  # one side ended: end the other

    def cut(self) -> None:
        for scope in list(self._cuts):
            scope.cancel()


def relay(url: str, **kwargs: Any) -> RelayProvider:
    kwargs.setdefault("token", TOKEN)
    return RelayProvider(ws_url(url), **kwargs)


async def drain(provider: Any, text: str, **kwargs: Any) -> tuple[list[Delta], ProviderResult]:
    deltas: list[Delta] = []
    async with provider.stream([Message.user(text)], **kwargs) as s:
        async for delta in s:
            deltas.append(delta)
    return deltas, s.result


@pytest.fixture(autouse=True)
def _autojump(mock_clock: trio.testing.MockClock) -> None:
    """Every test takes ``mock_clock`` (so trio runs on it); this makes it jump whenever every
    task has been blocked a moment (real sockets are involved, so not at once)."""
    mock_clock.autojump_threshold = 0.05


# -- configuration and secrets ------------------------------------------------------------------


def test_configuration_is_checked_and_no_repr_shows_a_secret() -> None:
    with pytest.raises(ConfigError):
        RelayServer(Upstream(), tokens=[])
    with pytest.raises(ConfigError):
        RelayServer(Upstream(), tokens=[TOKEN, RelayToken(TOKEN, name="twin")])
    with pytest.raises(ConfigError) as short:
        RelayToken("short")
    assert "short" not in str(short.value)
    with pytest.raises(ConfigError):
        RelayProvider("http://127.0.0.1:1/v1/relay", token=TOKEN)
    with pytest.raises(ConfigError):
        RelayLimits(max_frame=0)
    app = RelayServer(Upstream(), tokens=[TOKEN, RelayToken(OTHER, name="bob")])
    shown = [
        repr(app),
        repr(RelayToken(TOKEN)),
        repr(HelloFrame(1, TOKEN)),
        repr(RelayProvider("ws://127.0.0.1:1/v1/relay", token=TOKEN)),
        repr(app.statistics()),
    ]
    assert no_secret(*shown), shown


async def test_a_provider_outside_its_block_refuses_to_connect(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    async with running(server(up)) as url:
        provider = relay(url)
        with pytest.raises(ConfigError):
            await drain(provider, "hello")
    assert up.calls == 0


async def test_the_relay_client_connects_only_where_its_egress_policy_allows(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url:
        # Judged when made: a loopback relay with no network allowed.
        with pytest.raises(ConfigError, match=r"relay: egress to 127\.0\.0\.1:\d+ .*loopback"):
            relay(url, egress=EgressPolicy())
        # Judged at the connection: "localhost" passes by name, its answer is not allowed --
        # refused before any connection, and not retried.
        named = url.replace("127.0.0.1", "localhost")
        async with relay(named, egress=EgressPolicy(private=["10.0.0.0/8"])) as provider:
            with pytest.raises(ProviderError) as refused:
                await drain(provider, "hello")
        assert refused.value.code == "egress"
        assert not refused.value.retryable
        assert "relay: egress to localhost:" in refused.value.message
        assert app.statistics().connections == 0
        # Its network allowed: connected to the judged address, answered.
        async with relay(url, egress=EgressPolicy(private=["127.0.0.0/8"])) as provider:
            _, result = await drain(provider, "hello")
        assert result.content
    assert up.calls == 1


# -- refusals over the websocket: none of them enters the upstream ------------------------------


@pytest.mark.parametrize("token", [WRONG, "", TOKEN + "x", TOKEN[:-1]])
async def test_a_hello_with_a_wrong_or_missing_token_is_refused(
    mock_clock: trio.testing.MockClock, token: str
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.send(hello(token))
        frame = await raw.frame()
        assert frame == ErrorFrame("unauthorized", "unauthorized", False)
        assert await raw.closed() == 1008
        assert no_secret(*raw.texts)
    assert up.calls == 0
    assert app.statistics().refused == {"unauthorized": 1}
    assert app.statistics().connections == 0


async def test_the_relay_provider_with_a_wrong_token_fails_once_without_the_token(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, relay(url, token=WRONG) as provider:
        with pytest.raises(ProviderError) as failed:
            await drain(provider, "hello")
    assert failed.value.code == "unauthorized"
    assert not failed.value.retryable
    assert no_secret(str(failed.value), repr(failed.value))
    assert app.statistics().refused == {"unauthorized": 1}  # not retried
    assert up.calls == 0


@pytest.mark.parametrize(
    "authorization", [f"Bearer {WRONG}", "Bearer", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"]
)
async def test_a_wrong_authorization_header_refuses_the_websocket_handshake(
    mock_clock: trio.testing.MockClock,
    authorization: str,
) -> None:
    up = Upstream()
    app = server(up)
    async with (
        running(app) as url,
        Raw.connect(url, headers=[("authorization", authorization)]) as raw,
    ):
        assert raw.status == 401
    assert up.calls == 0
    assert app.statistics().refused == {"unauthorized": 1}


async def test_a_right_authorization_header_needs_no_hello_and_a_hello_then_is_invalid(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    headers = [("authorization", f"Bearer {TOKEN}")]
    async with running(app) as url:
        async with Raw.connect(url, headers=headers) as raw:
            assert isinstance(await raw.frame(), ReadyFrame)  # accepted before any frame was sent
            await raw.send(stream("a", "one two"))
            frames = await raw.frames_until("a")
            assert [type(f) for f in frames] == [DeltaFrame, DeltaFrame, ResultFrame]
        async with Raw.connect(url, headers=headers) as raw:
            assert isinstance(await raw.frame(), ReadyFrame)
            await raw.send(hello())  # hello only ever opens a connection without the header
            assert await raw.frame() == ErrorFrame("invalid", "invalid frame", False)
            assert await raw.closed() == 1008
    assert up.calls == 1


@pytest.mark.parametrize(
    ("first", "code"),
    [
        ("{not json", "invalid"),
        ("[1, 2]", "invalid"),
        ('"hello"', "invalid"),
        ('{"type": "nope"}', "invalid"),
        (json.dumps({"version": 1, "token": TOKEN}), "invalid"),  # no type
        (json.dumps({"type": "hello", "version": 1, "token": TOKEN, "x": 1}), "invalid"),
        ('{"type": "hello", "version": 1}', "invalid"),
        (json.dumps({"type": "hello", "version": "1", "token": TOKEN}), "invalid"),
        (
            json.dumps({"type": "hello", "version": PROTOCOL_VERSION + 1, "token": TOKEN}),
            "version",
        ),
        (json.dumps({"type": "hello", "version": 99, "token": WRONG}), "version"),
        ('{"type": "stream", "id": "a", "messages": []}', "invalid"),
        ('{"type": "cancel", "id": "a"}', "invalid"),
        ('{"type": "ready", "version": 1, "max_frame": 9, "max_streams": 9}', "invalid"),
    ],
)
async def test_a_first_frame_that_is_not_a_good_hello_is_refused(
    mock_clock: trio.testing.MockClock, first: str, code: str
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.send(first)
        frame = await raw.frame()
        assert isinstance(frame, ErrorFrame)
        assert (frame.code, frame.id, frame.retryable) == (code, None, False)
        assert await raw.closed() == 1008
        assert no_secret(*raw.texts)
    assert up.calls == 0
    assert app.statistics().refused == {code: 1}


@pytest.mark.parametrize(
    "frame",
    [
        "{not json",
        '{"type": "nope", "id": "a"}',
        '{"type": "stream", "id": "a", "messages": [], "tools": []}',
        '{"type": "stream", "id": "", "messages": [{"role": "user", "content": "hi"}]}',
        '{"type": "stream", "id": "a", "messages": [{"role": "user", "content": "hi"}], "x": 1}',
        '{"type": "stream", "id": "a", "messages": [{"role": "user", "content": "hi", "x": 1}]}',
        '{"type": "stream", "id": "%s", "messages": [{"role": "user", "content": "hi"}]}'
        % ("i" * 129),
        '{"type": "approve", "id": "a", "call": "c", "decision": "maybe"}',
        '{"type": "delta", "id": "a", "channel": "content", "text": "hi"}',
        hello(),  # a second hello
    ],
)
async def test_an_invalid_frame_after_hello_closes_the_connection(
    mock_clock: trio.testing.MockClock, frame: str
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(frame)
        assert await raw.frame() == ErrorFrame("invalid", "invalid frame", False)
        assert await raw.closed() == 1008
    assert up.calls == 0
    assert app.statistics().refused == {"invalid": 1}


def sized_stream(request_id: str, size: int) -> str:
    """A valid ``stream`` frame of exactly ``size`` bytes."""

    def frame(text: str) -> str:
        message = Message.user(text, id="m1", created_at=1.0)
        return encode_frame(StreamFrame(request_id, [message]))

    text = frame("y" * (size - len(frame("y").encode()) + 1))
    assert len(text.encode()) == size
    return text


async def test_an_oversize_frame_is_refused_and_one_at_the_limit_is_not(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(max_frame=4096))
    async with running(app) as url:
        async with Raw.connect(url) as raw:
            assert (await raw.ready()).max_frame == 4096
            await raw.send(sized_stream("a", 4096))
            frames = await raw.frames_until("a")
            assert isinstance(frames[-1], ResultFrame)
            assert up.calls == 1
            await raw.send(sized_stream("b", 4097))
            assert await raw.frame() == ErrorFrame("too_large", "frame too large", False)
            assert await raw.closed() == 1009
        async with Raw.connect(url) as raw:  # before the hello too
            await raw.send(hello() + " " * 5000)
            assert await raw.frame() == ErrorFrame("too_large", "frame too large", False)
            assert await raw.closed() == 1009
    assert up.calls == 1
    assert app.statistics().refused == {"too_large": 2}


async def test_the_relay_provider_refuses_a_request_over_the_servers_frame_limit(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(max_frame=4096))
    async with running(app) as url, relay(url) as provider:
        with pytest.raises(ProviderError) as failed:
            await drain(provider, "z" * 5000)
        assert failed.value.code == "too_large"
        assert not failed.value.retryable
        # The connection is still good for the next request.
        _, result = await drain(provider, "still here")
    assert result.content == "still here "
    assert up.calls == 1


async def test_too_many_streams_on_one_connection_are_refused_per_request(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(max_streams=2))
    async with running(app) as url, Raw.connect(url) as raw:
        assert (await raw.ready()).max_streams == 2
        await raw.send(stream("a", "silent"))
        await raw.send(stream("b", "silent"))
        await raw.send(stream("c", "silent"))
        refused = await raw.frame()
        assert refused == ErrorFrame("too_many_streams", "too many concurrent streams", True, "c")
        await until(lambda: up.parked == 2)
        assert up.calls == 2
        await raw.send(encode_frame(CancelFrame("a")))
        assert await raw.frame() == AbortFrame("a", ProviderResult(finish=FinishReason.CANCELLED))
        await raw.send(stream("c", "now it fits"))  # the slot was freed
        frames = await raw.frames_until("c")
        assert isinstance(frames[-1], ResultFrame)
        assert frames[-1].result.content == "now it fits "
    assert up.calls == 3
    assert app.statistics().refused == {"too_many_streams": 1}


async def test_too_many_streams_of_one_token_are_refused_across_its_connections(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    tokens = [RelayToken(TOKEN, max_streams=2), RelayToken(OTHER, name="other")]
    app = server(up, tokens=tokens)
    async with (
        running(app) as url,
        Raw.connect(url) as one,
        Raw.connect(url) as two,
        Raw.connect(url) as other,
    ):
        await one.ready()
        await two.ready()
        await other.ready(OTHER)
        await one.send(stream("a", "silent"))
        await two.send(stream("a", "silent"))
        await until(lambda: up.parked == 2)
        await two.send(stream("b", "silent"))
        assert await two.frame() == ErrorFrame(
            "too_many_streams", "too many concurrent streams", True, "b"
        )
        assert up.calls == 2
        await other.send(stream("a", "another token is not held back"))
        assert isinstance((await other.frames_until("a"))[-1], ResultFrame)
        async with relay(url) as provider:
            with pytest.raises(ProviderError) as failed:
                await drain(provider, "hello")
        assert (failed.value.code, failed.value.retryable) == ("too_many_streams", True)
        assert up.calls == 3
        await one.abort()  # its stream ends, and its slot is the token's again
        await until(lambda: up.parked == 1)
        await two.send(stream("b", "fits again"))
        assert isinstance((await two.frames_until("b"))[-1], ResultFrame)
    assert up.calls == 4
    assert app.statistics().refused == {"too_many_streams": 2}


async def test_requests_per_minute_are_limited_per_token(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, tokens=[RelayToken(TOKEN, per_minute=2), OTHER])
    async with running(app) as url, relay(url) as provider, relay(url, token=OTHER) as other:
        await drain(provider, "one")
        await drain(provider, "two")
        with pytest.raises(ProviderError) as failed:
            await drain(provider, "three")
        assert (failed.value.code, failed.value.retryable) == ("rate_limited", True)
        assert up.calls == 2
        await drain(other, "other tokens are not limited by it")
        await trio.sleep(61)
        _, result = await drain(provider, "a minute later")
    assert result.content == "a minute later "
    assert up.prompts == ["one", "two", "other tokens are not limited by it", "a minute later"]
    assert app.statistics().refused == {"rate_limited": 1}


async def test_a_spent_token_budget_refuses_further_requests(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream(usage=Usage(3, 4))  # 7 tokens a call
    app = server(up, tokens=[RelayToken(TOKEN, budget=10), OTHER])
    async with running(app) as url, relay(url) as provider, relay(url, token=OTHER) as other:
        await drain(provider, "one")  # 7 of 10
        await drain(provider, "two")  # 14: over now
        with pytest.raises(ProviderError) as failed:
            await drain(provider, "three")
        assert (failed.value.code, failed.value.retryable) == ("budget", False)
        async with httpx.AsyncClient() as client:
            refused = await client.post(
                f"{url}/v1/stream",
                headers={"authorization": f"Bearer {TOKEN}"},
                json={"messages": [{"role": "user", "content": "four"}]},
            )
        assert refused.status_code == 429
        assert up.calls == 2
        await drain(other, "the other token still has its budget")
    assert up.calls == 3
    assert app.statistics().refused == {"budget": 2}


async def test_serve_keeps_a_quiet_connection_alive_with_pings(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=5))
        async with Raw.connect(url) as raw:
            await raw.ready()
            await raw.send(stream("a", "silent"))  # nothing comes for a while...
            await until(lambda: up.parked == 1)
            with trio.move_on_after(12):
                await raw.receive()  # ...but pings do, and are answered while waiting here
            assert raw.pings >= 2
            up.gate.set()
            frames = await raw.frames_until("a")
            assert isinstance(frames[-1], ResultFrame)
        nursery.cancel_scope.cancel()


async def test_closing_the_provider_completes_the_close_handshake_without_waiting_out_a_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    app = server(Upstream())
    async with running(app) as url:
        provider = relay(url)
        async with provider:
            await drain(provider, "hello")
            assert app.statistics().connections == 1
            start = trio.current_time()
        # Virtual time: a close that waited for its 2 s fallback would show here.
        assert trio.current_time() - start < 1
        await until(lambda: app.statistics().connections == 0)


async def test_a_cut_request_is_charged_an_estimate_of_its_prompt_and_what_streamed(
    mock_clock: trio.testing.MockClock,
) -> None:
    from protocols.accounting import estimate_tokens
    from protocols.history import estimate_messages

    up = Upstream()
    prompt = [Message.user("hang")]
    cost = estimate_messages(prompt) + estimate_tokens("partial")
    app = server(up, tokens=[RelayToken(TOKEN, budget=cost + 1)])
    async with running(app) as url, relay(url) as provider:
        async with provider.stream(prompt) as cut:
            async for _ in cut:
                break  # leave after the first delta: the request is cancelled, unreported
        assert cut.partial.content == "partial"
        # Cancelling did not make it free: one more token of budget is left, so one more
        # request may start, and the one after that is refused.
        await drain(provider, "two")
        with pytest.raises(ProviderError) as failed:
            await drain(provider, "three")
        assert failed.value.code == "budget"
    assert up.calls == 2


async def test_a_duplicate_request_id_is_refused_and_the_open_request_goes_on(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(stream("a", "gate"))
        assert await raw.frame() == DeltaFrame("a", "content", "first")
        await raw.send(stream("a", "again"))
        assert await raw.frame() == ErrorFrame(
            "duplicate", "a request with this id is already open", False, "a"
        )
        assert up.calls == 1
        up.gate.set()
        frames = await raw.frames_until("a")
        assert frames[0] == DeltaFrame("a", "content", "second")
        assert isinstance(frames[-1], ResultFrame)
        assert frames[-1].result.content == "firstsecond"
        await raw.send(stream("a", "reused once closed"))  # a closed id may be used again
        assert isinstance((await raw.frames_until("a"))[-1], ResultFrame)
    assert up.calls == 2
    assert app.statistics().refused == {"duplicate": 1}


async def test_cancel_or_approve_of_an_unknown_request_is_answered_and_harmless(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(encode_frame(CancelFrame("ghost")))
        assert await raw.frame() == ErrorFrame(
            "unknown_request", "no open request has this id", False, "ghost"
        )
        await raw.send(encode_frame(ApproveFrame("ghost", "call-1", "allow")))
        assert await raw.frame() == ErrorFrame(
            "unknown_request", "no open request has this id", False, "ghost"
        )
        assert up.calls == 0
        await raw.send(stream("a", "the connection is fine"))
        assert isinstance((await raw.frames_until("a"))[-1], ResultFrame)
    assert up.calls == 1
    assert app.statistics().refused == {"unknown_request": 2}


async def test_a_slow_loris_handshake_is_cut_at_the_handshake_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(handshake_timeout=5))
    async with running(app) as url, Raw.connect(url) as raw:
        start = trio.current_time()
        frame = await raw.frame()  # no hello sent
        waited = trio.current_time() - start
        assert frame == ErrorFrame("timeout", "the connection was idle for too long", False)
        assert await raw.closed() == 1008
    assert 5 <= waited < 6
    assert up.calls == 0
    assert app.statistics().refused == {"timeout": 1}


async def test_an_idle_connection_is_closed_but_one_waiting_on_a_request_is_not(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(idle_timeout=30))
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(stream("a", "gate"))
        assert await raw.frame() == DeltaFrame("a", "content", "first")
        await trio.sleep(100)  # quiet, but a request is open
        up.gate.set()
        assert isinstance((await raw.frames_until("a"))[-1], ResultFrame)
        start = trio.current_time()
        frame = await raw.frame()
        assert frame == ErrorFrame("timeout", "the connection was idle for too long", False)
        assert 30 <= trio.current_time() - start < 31
        assert await raw.closed() == 1001
    assert app.statistics().connections == 0


@pytest.mark.parametrize(
    ("origins", "origin", "allowed"),
    [
        (None, "http://evil.example", False),
        (None, "https://evil.example", False),
        (None, "SAME", True),
        (None, "SAME/", True),
        (None, None, True),  # not a browser
        (["https://app.example"], "https://app.example", True),
        (["https://app.example/"], "https://app.example", True),
        (["https://app.example"], "http://app.example", False),
        (["https://app.example"], "SAME", False),  # a list replaces the same-origin default
    ],
)
async def test_the_origin_allow_list(
    mock_clock: trio.testing.MockClock, origins: list[str] | None, origin: str | None, allowed: bool
) -> None:
    up = Upstream()
    app = server(up, origins=origins)
    async with running(app) as url:
        if origin is not None:
            origin = origin.replace("SAME", url)
        headers = [] if origin is None else [("origin", origin)]
        async with Raw.connect(url, headers=headers) as raw:
            if allowed:
                await raw.ready()
                await raw.send(stream("a", "hi"))
                assert isinstance((await raw.frames_until("a"))[-1], ResultFrame)
            else:
                assert raw.status == 403
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{url}/v1/stream",
                headers={"authorization": f"Bearer {TOKEN}", **dict(headers)},
                json={"messages": [{"role": "user", "content": "hi"}]},
            )
        assert response.status_code == (200 if allowed else 403)
    assert up.calls == (2 if allowed else 0)
    assert app.statistics().refused == ({} if allowed else {"forbidden_origin": 2})


# -- through the relay: the same as the provider itself -----------------------------------------


@asynccontextmanager
async def simulated(**kwargs: Any) -> AsyncIterator[tuple[Simulator, OpenAIChat]]:
    async with Simulator(**kwargs) as simulator:
        provider = simulator.openai(api_key=UPSTREAM_SECRET)
        try:
            yield simulator, provider
        finally:
            await provider.aclose()


@pytest.mark.parametrize(
    ("prompt", "think", "tools"),
    [
        ("What is 19 + 23 and 1 + 2?", True, True),
        ('call add with {"a": 5, "b": 6}', False, True),
        ("count to 12", True, False),
        ("Please repeat after me, word by word.", False, False),
    ],
)
async def test_a_round_trip_equals_the_same_provider_driven_directly(
    mock_clock: trio.testing.MockClock, prompt: str, think: bool, tools: bool
) -> None:
    # The OpenAI format has no switch for think: the simulator reasons when asked this way.
    options = ProviderOptions(extra={"reasoning_effort": "low"}) if think else None
    definitions = [ADD] if tools else None
    async with simulated() as (direct_sim, direct), simulated() as (relayed_sim, upstream):
        want = await drain(direct, prompt, tools=definitions, options=options)
        app = server(upstream)
        async with running(app) as url, relay(url) as provider:
            got = await drain(provider, prompt, tools=definitions, options=options)
        assert relayed_sim.requests == direct_sim.requests  # the upstream was asked the same
    # The same stream: the relay may join pieces that arrived together, never reorder or
    # change them; the result is identical -- but for the upstream's model and response id,
    # which result frames never carry (relay clients from before them would refuse them).
    assert got[1] == unnamed(want[1])
    assert (want[1].model, got[1].model, got[1].response_id) == ("simulator", None, None)
    assert joined(got[0]) == joined(want[0])
    assert len(got[0]) <= len(want[0])
    deltas, result = got
    assert result.usage is not None
    assert result.usage.total > 0
    assert bool(result.thinking) == think
    assert any(d.channel == "thinking" for d in deltas) == think
    assert bool(result.calls) == tools
    if tools:
        assert {call.name for call in result.calls} == {"add"}
    # The request's run is kept (ended) to be followed: only its count shows.
    assert app.statistics() == type(app.statistics())(upstream_calls=1, runs=1)


def unnamed(result: ProviderResult) -> ProviderResult:
    """``result`` as a relay client receives it: without the upstream's model and response id."""
    return attrs.evolve(result, model=None, response_id=None)


class _Burst(_UpstreamStream):
    """Has every piece decoded at once (as one network read would): ``take_ready`` gives them."""

    def take_ready(self) -> list[Delta]:
        ready = [self._give(piece) for piece in self._pieces]
        self._pieces = []
        return ready


class Burst(Upstream):
    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        self.calls += 1
        return _Burst(self, messages[-1].content)


async def test_pieces_decoded_together_leave_as_one_frame_and_the_others_one_by_one(
    mock_clock: trio.testing.MockClock,
) -> None:
    words = "one two three four five"
    async with running(server(Burst())) as url, relay(url) as provider:
        burst, result = await drain(provider, words)
    assert [d.text for d in burst] == ["one two three four five "]  # one frame
    assert result.content == "one two three four five "
    async with running(server(Upstream())) as url, relay(url) as provider:
        paced, _ = await drain(provider, words)
    assert [d.text for d in paced] == ["one ", "two ", "three ", "four ", "five "]


@asynccontextmanager
async def failing_upstream() -> AsyncIterator[tuple[FaultProviderServer, OpenAIChat]]:
    """An upstream holding a secret key whose every call fails with HTTP 500 (no retries)."""
    plan: list[dict[str, Any]] = [{"kind": "http-error", "status": 500}]
    async with FaultProviderServer(plan) as fault:
        upstream = OpenAIChat(
            model="m",
            base_url=fault.base_url,
            api_key=UPSTREAM_SECRET,
            retry=RetryPolicy(retries=0),
        )
        try:
            yield fault, upstream
        finally:
            await upstream.aclose()


async def test_an_upstream_failure_crosses_as_a_fixed_text_without_its_secret(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with failing_upstream() as (fault, upstream):
        app = server(upstream)
        async with running(app) as url:
            async with Raw.connect(url) as raw:
                await raw.ready()
                await raw.send(stream("a", "hi"))
                assert await raw.frame() == ErrorFrame(
                    "upstream", "relay provider failed", True, "a"
                )
                await raw.send(stream("b", "the connection stays"))
                assert await raw.frame() == ErrorFrame(
                    "upstream", "relay provider failed", True, "b"
                )
                assert no_secret(*raw.texts)
                assert not any("fault" in text for text in raw.texts)
            async with relay(url) as provider:
                with pytest.raises(ProviderError) as failed:
                    await drain(provider, "hi")
        assert fault.calls() == 3
    assert (failed.value.code, failed.value.retryable) == ("upstream", True)
    assert failed.value.partial is None
    assert no_secret(str(failed.value))
    assert "fault" not in str(failed.value)


@pytest.mark.parametrize("prompt", ["fail", "crash"])
async def test_an_upstream_error_fails_only_its_own_request(
    mock_clock: trio.testing.MockClock, prompt: str
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(stream("a", "gate"))
        assert await raw.frame() == DeltaFrame("a", "content", "first")
        await raw.send(stream("b", prompt))
        assert await raw.frame() == ErrorFrame("upstream", "relay provider failed", True, "b")
        up.gate.set()  # the sibling on the same connection is unharmed
        frames = await raw.frames_until("a")
        assert isinstance(frames[-1], ResultFrame)
        assert no_secret(*raw.texts)
    assert up.calls == 2
    assert app.statistics().streams == 0


# -- cancellation, both ways --------------------------------------------------------------------


async def test_leaving_the_stream_early_closes_the_upstream_http_stream(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with simulated(interval=1.0) as (sim, upstream):
        app = server(upstream)
        async with running(app) as url, relay(url) as provider:
            texts: list[str] = []
            async with provider.stream([Message.user("count to 50")]) as s:
                async for delta in s:
                    texts.append(delta.text)
                    if len(texts) == 3:
                        break
            assert s.partial == ProviderResult(
                content="".join(texts), finish=FinishReason.CANCELLED
            )
            await until(lambda: sim.statistics().abandoned == 1)
            await until(lambda: app.statistics().streams == 0)
            # The connection is still good.
            _, result = await drain(provider, "count to 3")
        assert sim.statistics().completed == 1
    assert [t.strip() for t in texts] == ["1", "2", "3"]
    assert result.content.split() == ["1", "2", "3"]


async def test_cancelling_the_callers_scope_closes_the_upstream_and_keeps_the_partial(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with simulated(interval=1.0) as (sim, upstream):
        app = server(upstream)
        async with running(app) as url, relay(url) as provider:
            texts: list[str] = []
            with trio.move_on_after(5.5) as scope:
                async with provider.stream([Message.user("count to 50")]) as s:
                    async for delta in s:
                        texts.append(delta.text)
            assert scope.cancelled_caught
            await until(lambda: sim.statistics().abandoned == 1)
            await until(lambda: app.statistics().streams == 0)
        assert sim.statistics().completed == 0
    assert 1 <= len(texts) < 50
    assert s.partial == ProviderResult(content="".join(texts), finish=FinishReason.CANCELLED)


async def test_a_cancel_frame_is_answered_with_abort_and_the_partial(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(stream("a", "hang"))
        assert await raw.frame() == DeltaFrame("a", "content", "partial")
        await until(lambda: up.parked == 1)
        await raw.send(encode_frame(CancelFrame("a")))
        partial = ProviderResult(content="partial", finish=FinishReason.CANCELLED)
        assert await raw.frame() == AbortFrame("a", partial)
        assert (up.closed, up.parked) == (1, 0)
        await raw.send(encode_frame(CancelFrame("a")))  # no longer open
        assert await raw.frame() == ErrorFrame(
            "unknown_request", "no open request has this id", False, "a"
        )
    assert app.statistics().streams == 0


async def test_an_abrupt_disconnect_closes_the_upstream(mock_clock: trio.testing.MockClock) -> None:
    async with simulated(interval=1.0) as (sim, upstream):
        app = server(upstream)
        async with running(app) as url:
            async with Raw.connect(url) as raw:
                await raw.ready()
                await raw.send(stream("a", "count to 50"))
                assert isinstance(await raw.frame(), DeltaFrame)
                await raw.abort()  # no cancel, no close frame: the TCP connection just ends
            await until(lambda: sim.statistics().abandoned == 1)
            await until(lambda: app.statistics().connections == 0)
            assert app.statistics().streams == 0
        assert sim.statistics().completed == 0


async def test_closing_the_server_cuts_every_stream_and_refuses_what_comes_after(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with simulated(interval=1.0) as (sim, upstream):
        app = server(upstream)
        async with running(app) as url, relay(url) as provider, Raw.connect(url) as raw:
            await raw.ready()
            await raw.send(stream("a", "count to 50"))
            assert isinstance(await raw.frame(), DeltaFrame)
            async with provider.stream([Message.user("count to 50")]) as s:
                first = await s.__anext__()
                app.close()
                with pytest.raises(ProviderError) as failed:
                    async for _ in s:
                        pass
            frames: list[ServerFrame] = []
            while (text := await raw.receive()) is not None:
                frames.append(decode_server_frame(text))
            assert frames[-1] == ErrorFrame("shutdown", "the relay is shutting down", True)
            assert raw.close_code == 1001
            await until(lambda: sim.statistics().abandoned == 2)
            requests = len(sim.requests)
            with pytest.raises(ProviderError) as refused:
                await drain(provider, "hi")
            async with httpx.AsyncClient() as client:
                response = await client.post(
                    f"{url}/v1/stream",
                    headers={"authorization": f"Bearer {TOKEN}"},
                    json={"messages": [{"role": "user", "content": "hi"}]},
                )
            assert response.status_code == 503
            assert len(sim.requests) == requests  # nothing after close() reached the upstream
        assert sim.statistics().completed == 0
    assert failed.value.code == "disconnected"
    assert failed.value.partial is not None
    assert failed.value.partial.content.startswith(first.text)
    assert (refused.value.code, refused.value.status) == ("shutdown", 503)
    assert app.statistics().streams == 0


async def test_a_refused_handshake_reaches_the_caller_with_its_status(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url:
        async with RelayProvider(url.replace("http", "ws") + "/nowhere", token=TOKEN) as lost:
            with pytest.raises(ProviderError) as missing:
                await drain(lost, "hi")
        async with Raw.connect(url, path="/nowhere") as raw:
            assert raw.status == 404
    assert (missing.value.code, missing.value.status) == ("transport", 404)
    assert not missing.value.retryable  # a wrong address is not retried
    assert no_secret(str(missing.value))
    assert up.calls == 0


# -- many clients -------------------------------------------------------------------------------


async def test_200_clients_stream_at_once_through_one_server(
    mock_clock: trio.testing.MockClock,
) -> None:
    clients = 200
    up = Upstream()
    app = server(up, tokens=[RelayToken(TOKEN, max_streams=clients, per_minute=clients)])
    results: dict[int, tuple[list[str], ProviderResult]] = {}
    async with running(app) as url:

        async def client(n: int) -> None:
            async with relay(url) as provider:
                results[n] = await drain_texts(provider, "gate")

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for n in range(clients):
                    nursery.start_soon(client, n)
                await until(lambda: up.parked == clients)  # every one is mid-stream at once
                assert app.statistics().connections == clients
                assert app.statistics().streams == clients
                up.gate.set()
    assert len(results) == clients
    assert all(texts == ["first", "second"] for texts, _ in results.values())
    assert all(result.content == "firstsecond" for _, result in results.values())
    assert up.calls == clients
    assert app.statistics() == type(app.statistics())(upstream_calls=clients, runs=clients)


async def drain_texts(provider: Any, text: str) -> tuple[list[str], ProviderResult]:
    deltas, result = await drain(provider, text)
    return [delta.text for delta in deltas], result


# -- an agent over the relay --------------------------------------------------------------------


async def test_an_agent_runs_its_local_tool_over_the_relay(
    mock_clock: trio.testing.MockClock,
) -> None:
    runs: list[tuple[int, int]] = []

    @tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        runs.append((a, b))
        return a + b

    async with simulated() as (sim, upstream):
        app = server(upstream)
        async with running(app) as url, relay(url) as provider, open_runtime() as runtime:
            agent = await Agent.start(runtime, provider, tools=[add])
            result = await agent.generate("What is 19 + 23?")
        assert [request.tools for request in sim.requests] == [("add",), ("add",)]
    assert runs == [(19, 23)]  # the tool ran here, on the client
    assert result.content == "The answer is 42."
    assert result.turns == 2
    assert app.statistics().upstream_calls == 2


def tool_texts(messages: Sequence[Message]) -> dict[str, str]:
    return {m.tool_call_id or "": m.content for m in messages if m.role is Role.TOOL}


async def test_an_approval_is_answered_from_the_client_allowed_runs_and_denied_never_does(
    mock_clock: trio.testing.MockClock,
) -> None:
    runs: list[tuple[int, int]] = []
    asked: list[tuple[str, dict[str, Any], str | None]] = []

    @tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        runs.append((a, b))
        return a + b

    async def approve(call: ToolCall, reason: str | None) -> bool | tuple[bool, str]:
        asked.append((call.name, dict(call.arguments), reason))
        if call.arguments["a"] == 19:
            return True
        return False, "small sums are done by hand"

    authority = Authority([Rule("ask", tools=("add",), reason="sums need a human")])
    async with simulated() as (sim, upstream):
        app = server(upstream, authority=authority)
        async with (
            running(app) as url,
            relay(url, approve=approve) as provider,
            open_runtime() as runtime,
        ):
            agent = await Agent.start(runtime, provider, tools=[add])
            result = await agent.generate("What is 19 + 23 and 1 + 2?")
        first = sim.requests[0]
    assert asked == [
        ("add", {"a": 19, "b": 23}, "sums need a human"),
        ("add", {"a": 1, "b": 2}, "sums need a human"),
    ]
    assert runs == [(19, 23)]  # the denied call never ran
    assert first.tools == ("add",)
    answers = sorted(tool_texts(result.messages).values())
    assert answers == ["42", "denied: small sums are done by hand"]


async def test_the_result_frame_names_the_denied_calls(mock_clock: trio.testing.MockClock) -> None:
    calls = [ToolCall("c1", "add", {"a": 1, "b": 2}), ToolCall("c2", "add", {"a": 3, "b": 4})]
    up = Upstream(calls=calls)
    authority = Authority([Rule("ask", tools=("add",), reason="check")])
    app = server(up, authority=authority, limits=RelayLimits(approval_timeout=10))
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(stream("a", "sum"))
        assert await raw.frame() == DeltaFrame("a", "content", "sum ")
        assert await raw.frame() == ApprovalFrame("a", calls[0], "check")
        # An answer for a call nobody asked about (a late one, say) is ignored: no error.
        await raw.send(encode_frame(ApproveFrame("a", "c9", "allow")))
        await raw.send(encode_frame(ApproveFrame("a", "c1", "deny", "not today")))
        assert await raw.frame() == ApprovalFrame("a", calls[1], "check")
        start = trio.current_time()
        result = await raw.frame()  # c2 is never answered
        assert 10 <= trio.current_time() - start < 11
    assert isinstance(result, ResultFrame)
    assert result.result.calls == tuple(calls)
    assert result.result.denied == {
        "c1": "denied: not today",
        "c2": f"denied: {NO_APPROVER_REASON}",
    }
    assert up.calls == 1


async def test_a_relay_provider_without_an_approver_denies_and_an_answer_too_late_is_a_deny(
    mock_clock: trio.testing.MockClock,
) -> None:
    calls = [ToolCall("c1", "add", {"a": 1, "b": 2}), ToolCall("c2", "add", {"a": 3, "b": 4})]
    up = Upstream(calls=calls)
    authority = Authority([Rule("ask", tools=("add",))])
    app = server(up, authority=authority, limits=RelayLimits(approval_timeout=10))
    answered: list[str] = []

    async def slow_then_quick(call: ToolCall, reason: str | None) -> bool:
        if call.id == "c1":
            await trio.sleep(15)  # after the server gave up on it
        answered.append(call.id)
        return True

    async with running(app) as url:
        async with relay(url) as provider:
            _, unattended = await drain(provider, "sum")
        async with relay(url, approve=slow_then_quick) as provider:
            _, late = await drain(provider, "sum")
    assert unattended.denied == {
        "c1": "denied: no approver is attached to the relay client",
        "c2": "denied: no approver is attached to the relay client",
    }
    assert answered == ["c1", "c2"]
    assert late.denied == {"c1": f"denied: {NO_APPROVER_REASON}"}  # c2 was allowed in time
    assert up.calls == 2


# -- plain HTTP ---------------------------------------------------------------------------------


def body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"messages": [to_json(Message.user(text))], **extra}


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def raw_http(url: str, head: str, body: bytes = b"") -> bytes:
    """Send ``head`` (and ``body``, if any) on a bare TCP connection and read the response
    head; the connection stays open meanwhile, so a body never sent is never sent."""
    host, port = url.removeprefix("http://").split(":")
    async with await trio.open_tcp_stream(host, int(port)) as tcp:
        await tcp.send_all(head.replace("\n", "\r\n").encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await tcp.receive_some(65536)
            if not chunk:
                break
            data += chunk
        return data


async def test_http_streams_ndjson_frames_equal_to_the_provider_driven_directly(
    mock_clock: trio.testing.MockClock,
) -> None:
    extra = {"reasoning_effort": "low"}
    async with simulated() as (_, direct), simulated() as (_, upstream):
        deltas, want = await drain(
            direct, "What is 19 + 23?", tools=[ADD], options=ProviderOptions(extra=extra)
        )
        app = server(upstream)
        async with running(app) as url, httpx.AsyncClient() as client:
            request = body("What is 19 + 23?", tools=[to_json(ADD)], options={"extra": extra})
            response = await client.post(f"{url}/v1/stream", headers=bearer(), json=request)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    frames = [decode_server_frame(line) for line in response.text.splitlines()]
    assert frames[-1] == ResultFrame(HTTP_REQUEST_ID, unnamed(want))  # see above
    assert want.response_id is not None
    sent = frames[:-1]
    assert all(isinstance(f, DeltaFrame) and f.id == HTTP_REQUEST_ID for f in sent)
    assert joined(sent) == joined(deltas)
    assert want.calls
    assert want.thinking
    assert no_secret(response.text, response.headers)


async def test_http_without_the_right_token_is_401_before_the_body_is_read(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url:
        for authorization in (f"Bearer {WRONG}", "", f"Basic {TOKEN}"):
            line = f"Authorization: {authorization}\n" if authorization else ""
            head = (
                f"POST /v1/stream HTTP/1.1\nHost: {url[7:]}\n{line}"
                "Content-Type: application/json\nContent-Length: 1000\n\n"
            )
            response = await raw_http(url, head)  # the 1000 bytes never come
            assert response.startswith(b"HTTP/1.1 401 "), response
            assert b"www-authenticate: bearer" in response.lower()
            assert no_secret(response)
        async with httpx.AsyncClient() as client:
            refused = await client.post(f"{url}/v1/stream", json=body())
            assert refused.status_code == 401
            assert refused.content == b""
    assert up.calls == 0
    assert app.statistics().refused == {"unauthorized": 4}


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[]",
        b"{}",
        b'{"messages": []}',
        b'{"messages": [{"role": "user", "content": "hi"}], "x": 1}',
        b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": 1}]}',
        b'{"messages": [{"role": "user", "content": "hi"}], "options": {"temperature": 9}}',
        b'{"type": "stream", "id": "a", "messages": [{"role": "user", "content": "hi"}]}',
    ],
)
async def test_http_with_an_invalid_body_is_400(
    mock_clock: trio.testing.MockClock, content: bytes
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, httpx.AsyncClient() as client:
        response = await client.post(f"{url}/v1/stream", headers=bearer(), content=content)
    assert response.status_code == 400
    assert response.content == b""
    assert up.calls == 0
    assert app.statistics().refused == {"invalid": 1}


async def test_http_bodies_over_the_limit_are_413_and_one_at_the_limit_is_served(
    mock_clock: trio.testing.MockClock,
) -> None:
    limit = 4096
    up = Upstream()
    app = server(up, limits=RelayLimits(max_frame=limit))
    valid = json.dumps(body("at the limit")).encode()
    async with running(app) as url:
        async with httpx.AsyncClient() as client:
            exact = valid + b" " * (limit - len(valid))
            served = await client.post(f"{url}/v1/stream", headers=bearer(), content=exact)
            assert served.status_code == 200
            assert decode_server_frame(served.text.splitlines()[-1]) == ResultFrame(
                HTTP_REQUEST_ID, ProviderResult(content="at the limit ", usage=Usage(3, 4))
            )
            over = await client.post(f"{url}/v1/stream", headers=bearer(), content=exact + b" ")
            assert over.status_code == 413

            async def chunks() -> AsyncIterator[bytes]:  # no content-length: counted as read
                yield valid
                for _ in range(limit // 512 + 1):
                    yield b" " * 512

            chunked = await client.post(f"{url}/v1/stream", headers=bearer(), content=chunks())
            assert chunked.status_code == 413
        # A declared length over the limit is refused before the body is read.
        head = (
            f"POST /v1/stream HTTP/1.1\nHost: {url[7:]}\nAuthorization: Bearer {TOKEN}\n"
            f"Content-Type: application/json\nContent-Length: {limit + 1}\n\n"
        )
        assert (await raw_http(url, head)).startswith(b"HTTP/1.1 413 ")
    assert up.calls == 1
    assert app.statistics().refused == {"too_large": 3}


async def test_http_a_body_that_never_finishes_is_408_at_the_handshake_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(handshake_timeout=5))
    async with running(app) as url:
        head = (
            f"POST /v1/stream HTTP/1.1\nHost: {url[7:]}\nAuthorization: Bearer {TOKEN}\n"
            "Content-Type: application/json\nContent-Length: 100\n\n"
        )
        start = trio.current_time()
        response = await raw_http(url, head, b'{"messages": [')
        assert 5 <= trio.current_time() - start < 6
    assert response.startswith(b"HTTP/1.1 408 ")
    assert up.calls == 0
    assert app.statistics().refused == {"timeout": 1}


async def test_http_routes_methods_and_the_page(mock_clock: trio.testing.MockClock) -> None:
    up = Upstream()
    async with running(server(up)) as url, httpx.AsyncClient() as client:
        get = await client.get(f"{url}/v1/stream", headers=bearer())
        assert (get.status_code, get.headers["allow"]) == (405, "POST")
        put = await client.put(f"{url}/v1/stream", headers=bearer(), json=body())
        assert (put.status_code, put.headers["allow"]) == (405, "POST")
        assert (await client.get(f"{url}/nope")).status_code == 404
        assert (await client.post(f"{url}/v1/streams", headers=bearer())).status_code == 404
        upgrade = await client.get(f"{url}/v1/relay")
        assert (upgrade.status_code, upgrade.headers["upgrade"]) == (426, "websocket")
        page = await client.get(f"{url}/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert no_secret(page.text)
        head = await client.head(f"{url}/app.js")
        assert (head.status_code, head.content) == (200, b"")
        post = await client.post(f"{url}/")
        assert (post.status_code, post.headers["allow"]) == (405, "GET, HEAD")
    async with running(server(up, page=False)) as url, httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/")).status_code == 404
    assert up.calls == 0


async def test_http_502_when_the_upstream_fails_before_streaming(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with failing_upstream() as (fault, upstream):
        app = server(upstream)
        async with running(app) as url, httpx.AsyncClient() as client:
            response = await client.post(f"{url}/v1/stream", headers=bearer(), json=body())
        assert fault.calls() == 1
    assert response.status_code == 502
    assert response.content == b""
    assert no_secret(response.headers)


async def test_http_streams_as_it_goes_and_a_late_failure_is_an_error_line(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with (
        running(app) as url,
        httpx.AsyncClient() as client,
        client.stream("POST", f"{url}/v1/stream", headers=bearer(), json=body("gate")) as response,
    ):
        lines = response.aiter_lines()
        assert decode_server_frame(await lines.__anext__()) == DeltaFrame(
            HTTP_REQUEST_ID, "content", "first"
        )
        up.gate.set()
        rest = [decode_server_frame(line) async for line in lines]
    assert response.status_code == 200
    assert rest[0] == DeltaFrame(HTTP_REQUEST_ID, "content", "second")
    assert isinstance(rest[-1], ResultFrame)
    async with running(app) as url, httpx.AsyncClient() as client:
        broken = await client.post(f"{url}/v1/stream", headers=bearer(), json=body("break"))
    assert broken.status_code == 200  # the status went out with the first line
    assert [decode_server_frame(line) for line in broken.text.splitlines()] == [
        DeltaFrame(HTTP_REQUEST_ID, "content", "partial"),
        ErrorFrame("upstream", "relay provider failed", True, HTTP_REQUEST_ID),
    ]
    assert no_secret(broken.text)
    assert up.calls == 2


async def test_http_a_client_that_leaves_mid_stream_closes_the_upstream(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, httpx.AsyncClient() as client:
        async with client.stream(
            "POST", f"{url}/v1/stream", headers=bearer(), json=body("hang")
        ) as response:
            lines = response.aiter_lines()
            assert decode_server_frame(await lines.__anext__()) == DeltaFrame(
                HTTP_REQUEST_ID, "content", "partial"
            )
            await until(lambda: up.parked == 1)
        await until(lambda: up.closed == 1)
        await until(lambda: app.statistics().streams == 0)
    assert (up.calls, up.parked) == (1, 0)


async def test_http_limits_refuse_with_429_and_approvals_are_denied(
    mock_clock: trio.testing.MockClock,
) -> None:
    calls = [ToolCall("c1", "add", {"a": 1, "b": 2})]
    up = Upstream(calls=calls)
    authority = Authority([Rule("ask", tools=("add",))])
    app = server(up, tokens=[RelayToken(TOKEN, per_minute=1)], authority=authority)
    async with running(app) as url, httpx.AsyncClient() as client:
        first = await client.post(f"{url}/v1/stream", headers=bearer(), json=body())
        second = await client.post(f"{url}/v1/stream", headers=bearer(), json=body())
    assert first.status_code == 200
    result = decode_server_frame(first.text.splitlines()[-1])
    assert isinstance(result, ResultFrame)
    assert result.result.denied == {"c1": f"denied: {NO_APPROVER_REASON}"}  # nobody to ask
    assert second.status_code == 429
    assert up.calls == 1
    assert app.statistics().refused == {"rate_limited": 1}


# -- back-pressure ------------------------------------------------------------------------------


async def settled(read: Callable[[], int]) -> int:
    """``read()`` once it has stopped changing (over a few seconds of trio time)."""
    last = -1
    with trio.fail_after(600):
        while (now := read()) != last:
            last = now
            await trio.sleep(5)
    return last


async def test_a_client_that_does_not_read_parks_its_upstream_and_nobody_else(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    # Generous limits: this test is about the parking, not about cutting the slow client.
    limits = RelayLimits(send_timeout=10_000, idle_timeout=10_000)
    app = server(up, limits=limits)
    async with running(app) as url, Raw.connect(url) as slow:
        await slow.ready()
        await slow.send(stream("flood", "flood"))
        parked = await settled(lambda: up.pulled)  # the socket buffers are full: it waits
        assert parked > 0
        assert parked * len(Upstream.FLOOD) < 64 * 1024 * 1024  # bounded: nothing piles up
        # Another connection on the same server streams as usual meanwhile.
        async with relay(url) as provider:
            for n in range(3):
                _, result = await drain(provider, f"still served {n}")
                assert result.content == f"still served {n} "
        assert up.pulled - parked == 9  # only the other requests' deltas were pulled
        assert await settled(lambda: up.pulled) == parked + 9
        # Once the slow client reads, its stream moves again.
        for _ in range(parked + 5):
            assert isinstance(await slow.frame(), DeltaFrame)
        assert up.pulled > parked + 9
        await slow.send(encode_frame(CancelFrame("flood")))
        frames = await slow.frames_until("flood")
        assert isinstance(frames[-1], AbortFrame)
    assert up.closed == up.calls == 4


async def test_a_client_that_stops_reading_is_cut_after_the_send_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(send_timeout=30, idle_timeout=10_000))
    async with running(app) as url, Raw.connect(url) as slow:
        await slow.ready()
        start = trio.current_time()
        await slow.send(stream("flood", "flood"))
        parked = await settled(lambda: up.pulled)
        await until(lambda: up.closed == 1)  # its upstream stream is released...
        assert 30 <= trio.current_time() - start <= 40
        assert up.pulled == parked
        assert app.statistics().streams == 0
        async with relay(url) as provider:  # ...and the server serves others as before
            _, result = await drain(provider, "fine")
        assert result.content == "fine "
        await slow.abort()
        await until(lambda: app.statistics().connections == 0)
    assert up.calls == 2


async def test_closing_the_server_cuts_even_a_stream_whose_client_stopped_reading(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(send_timeout=10_000, idle_timeout=10_000))
    async with running(app) as url, Raw.connect(url) as slow:
        await slow.ready()
        await slow.send(stream("flood", "flood"))
        await settled(lambda: up.pulled)
        start = trio.current_time()
        app.close()
        await until(lambda: up.closed == 1)
        assert trio.current_time() - start < 1  # at once, not after some timeout
        assert app.statistics().streams == 0
        await slow.abort()
        await until(lambda: app.statistics().connections == 0)


# -- dropped connections ------------------------------------------------------------------------


async def test_after_the_server_drops_an_idle_connection_the_next_request_reconnects(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(idle_timeout=30))
    async with running(app) as url, relay(url) as provider:
        _, first = await drain(provider, "before")
        await trio.sleep(60)
        assert app.statistics().connections == 0  # the server hung up
        assert app.statistics().refused == {"timeout": 1}
        _, second = await drain(provider, "after")
        assert app.statistics().connections == 1
    assert (first.content, second.content) == ("before ", "after ")
    assert up.calls == 2


async def test_a_request_that_streamed_is_never_replayed_after_a_drop(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Proxy(url).running() as proxy, relay(proxy.url) as provider:
        async with provider.stream([Message.user("hang")]) as s:
            assert await s.__anext__() == Delta("content", "partial")
            await until(lambda: up.parked == 1)
            proxy.cut()
            with pytest.raises(ProviderError) as failed:
                await s.__anext__()
        await until(lambda: up.closed == 1)  # the server saw the drop and closed the upstream
        assert up.calls == 1  # not sent again
        _, result = await drain(provider, "next one")  # a new connection
        assert proxy.connections == 2
    assert failed.value.code == "disconnected"
    assert failed.value.retryable
    assert failed.value.partial == ProviderResult(content="partial", finish=FinishReason.CANCELLED)
    assert s.partial == failed.value.partial
    assert result.content == "next one "
    assert up.calls == 2


async def test_a_request_that_received_nothing_is_sent_again_after_a_drop(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    results: list[tuple[list[Delta], ProviderResult]] = []
    async with (
        running(app) as url,
        Proxy(url).running() as proxy,
        relay(proxy.url) as provider,
        trio.open_nursery() as nursery,
    ):

        async def ask() -> None:
            results.append(await drain(provider, "silent"))

        nursery.start_soon(ask)
        await until(lambda: up.parked == 1)
        proxy.cut()
        await until(lambda: up.calls == 2 and up.parked == 1)  # sent again, waiting again
        assert up.closed == 1
        up.gate.set()
    assert results == [
        ([Delta("content", "second")], ProviderResult(content="second", usage=Usage(3, 4)))
    ]
    assert proxy.connections == 2


async def test_a_request_is_sent_again_at_most_reconnects_times(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with (
        running(app) as url,
        Proxy(url).running() as proxy,
        relay(proxy.url, reconnects=2) as provider,
    ):
        async with trio.open_nursery() as nursery:
            failures: list[ProviderError] = []

            async def ask() -> None:
                with pytest.raises(ProviderError) as failed:
                    await drain(provider, "silent")
                failures.append(failed.value)

            nursery.start_soon(ask)
            for calls in (1, 2, 3):
                await until(lambda calls=calls: up.calls == calls and up.parked == 1)
                proxy.cut()
        await until(lambda: up.parked == 0)
    assert up.calls == 3  # the first try and two more
    assert [(f.code, f.partial) for f in failures] == [
        ("disconnected", ProviderResult(finish=FinishReason.CANCELLED))
    ]


async def test_a_drop_while_the_approver_decides_fails_the_request_as_disconnected(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream(calls=[ToolCall("c1", "add", {"a": 1, "b": 2})])
    app = server(up, authority=Authority([Rule("ask", tools=("add",))]))
    async with running(app) as url, Proxy(url).running() as proxy:

        async def approve(call: ToolCall, reason: str | None) -> bool:
            proxy.cut()
            await until(lambda: up.closed == 1)
            await trio.sleep(1)  # the client has seen the drop too
            return True

        async with relay(proxy.url, approve=approve) as provider:
            with pytest.raises(ProviderError) as failed:
                await drain(provider, "quiet")  # nothing streams before the approval
    assert failed.value.code == "disconnected"
    assert up.calls == 1  # the human was asked already: the request is not sent again


async def test_a_connection_still_saying_hello_when_the_server_closes_is_not_let_in(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await until(lambda: app.statistics().connections == 1)  # accepted, no hello yet
        app.close()
        await raw.send(hello())
        assert await raw.frame() == ErrorFrame("shutdown", "the relay is shutting down", True)
        assert await raw.closed() == 1001
    assert up.calls == 0


async def test_requests_open_when_the_provider_closes_fail_as_disconnected(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url:
        provider = relay(url)
        failures: list[BaseException] = []
        async with provider, trio.open_nursery() as nursery:

            async def ask() -> None:
                try:
                    await drain(provider, "silent")
                except ProviderError as error:
                    failures.append(error)

            nursery.start_soon(ask)
            await until(lambda: up.parked == 1)
            await provider.aclose()
        await until(lambda: up.closed == 1)
    assert [getattr(f, "code", f) for f in failures] == ["disconnected"]
    assert up.calls == 1


async def test_an_approver_that_raises_denies(mock_clock: trio.testing.MockClock) -> None:
    up = Upstream(calls=[ToolCall("c1", "add", {"a": 1, "b": 2})])
    app = server(up, authority=Authority([Rule("ask", tools=("add",))]))

    async def broken(call: ToolCall, reason: str | None) -> bool:
        raise RuntimeError(f"approver bug near {TOKEN}")

    async with running(app) as url, relay(url, approve=broken) as provider:
        _, result = await drain(provider, "quiet")
    assert result.denied == {"c1": "denied: the approver failed"}
    assert up.calls == 1


async def test_an_approver_that_never_answers_is_a_deny_after_the_clients_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream(calls=[ToolCall("c1", "add", {"a": 1, "b": 2})])
    app = server(up, authority=Authority([Rule("ask", tools=("add",))]))

    async def away(call: ToolCall, reason: str | None) -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with running(app) as url, relay(url, approve=away, approval_timeout=5) as provider:
        start = trio.current_time()
        _, result = await drain(provider, "quiet")
        assert 5 <= trio.current_time() - start < 300  # the client's bound, not the server's
    assert result.denied == {"c1": "denied: no answer in time"}
    assert up.calls == 1


async def test_no_bearer_token_reaches_the_logs(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    up = Upstream()
    app = server(up)
    async with running(app) as url:
        async with relay(url, token=WRONG) as provider:
            with pytest.raises(ProviderError):
                await drain(provider, "hello")
        async with relay(url) as provider:
            await drain(provider, "hello")
            with pytest.raises(ProviderError):
                await drain(provider, "fail")
        async with Raw.connect(url) as raw:
            await raw.ready()
            await raw.send("{not json " + TOKEN)
            assert await raw.closed() == 1008
    assert caplog.records  # something was logged...
    assert TOKEN not in caplog.text  # ...but never a bearer token
    assert WRONG not in caplog.text


async def test_http_requests_are_charged_to_the_token_budget(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream(usage=Usage(3, 4))  # 7 tokens a call
    app = server(up, tokens=[RelayToken(TOKEN, budget=10)])
    async with running(app) as url, httpx.AsyncClient() as client:
        statuses = [
            (await client.post(f"{url}/v1/stream", headers=bearer(), json=body())).status_code
            for _ in range(3)
        ]
        async with relay(url) as provider:
            with pytest.raises(ProviderError) as failed:
                await drain(provider, "hello")
    assert statuses == [200, 200, 429]  # 7, then 14 of 10: spent
    assert failed.value.code == "budget"
    assert up.calls == 2
    assert app.statistics().refused == {"budget": 2}


async def test_closing_the_server_cuts_an_http_stream_and_its_upstream(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    frames: list[ServerFrame] = []

    async def read(client: httpx.AsyncClient, url: str) -> None:
        request = client.stream("POST", f"{url}/v1/stream", headers=bearer(), json=body("hang"))
        async with request as response:
            async for line in response.aiter_lines():
                frames.append(decode_server_frame(line))
                if len(frames) == 1:
                    await until(lambda: up.parked == 1)
                    app.close()

    async with running(app) as url, httpx.AsyncClient() as client:
        await read(client, url)  # the response ends properly...
        await until(lambda: up.closed == 1)
    assert frames == [  # ...with a last line saying why, and no result
        DeltaFrame(HTTP_REQUEST_ID, "content", "partial"),
        error_frame("shutdown", HTTP_REQUEST_ID),
    ]
    assert app.statistics().streams == 0


# -- a plain HTTP client that stops reading -----------------------------------------------------


async def test_http_a_client_that_stops_reading_is_cut_after_the_send_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(
        up,
        tokens=[RelayToken(TOKEN, max_streams=1)],
        limits=RelayLimits(send_timeout=30, idle_timeout=10_000),
    )
    payload = json.dumps(body("flood")).encode()
    head = (
        "POST /v1/stream HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer "
        f"{TOKEN}\nContent-Type: application/json\nContent-Length: {len(payload)}\n\n"
    )
    async with running(app) as url:
        host, port = url.removeprefix("http://").split(":")
        async with await trio.open_tcp_stream(host, int(port)) as slow:
            start = trio.current_time()
            await slow.send_all(head.replace("\n", "\r\n").encode() + payload)  # never reads
            parked = await settled(lambda: up.pulled)
            await until(lambda: up.closed == 1)  # its upstream stream is released...
            assert 30 <= trio.current_time() - start <= 40
            assert up.pulled == parked
            assert app.statistics().streams == 0
            # ...and its token's only slot is free again: the same token is served.
            async with httpx.AsyncClient() as client:
                again = await client.post(f"{url}/v1/stream", headers=bearer(), json=body())
            assert again.status_code == 200
            assert isinstance(decode_server_frame(again.text.splitlines()[-1]), ResultFrame)
    assert up.calls == 2


# -- log lines a client cannot forge ------------------------------------------------------------

FORGED = "\nINFO trio_agents.relay forged line\x1b[2J\x1b[31m\r\u2028\u202e\x00\x85"


@pytest.mark.parametrize("prompt", ["fail", "crash"])
async def test_a_request_id_cannot_forge_a_log_line(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, prompt: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_agents")
    request_id = "id" + FORGED
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()
        await raw.send(stream(request_id, prompt))
        assert await raw.frame() == error_frame("upstream", request_id)
        # An invalid frame quoting the same text is logged too.
        await raw.send(json.dumps({"type": "stream", "id": request_id, "extra" + FORGED: 1}))
        assert await raw.frame() == error_frame("invalid")
    logged = [record.getMessage() for record in caplog.records]
    assert any(repr(request_id) in message for message in logged)  # shown, escaped
    for message in logged:
        assert "\x1b" not in message
        assert "\r" not in message
        assert "\u2028" not in message
        assert "\u202e" not in message
        assert "\x00" not in message
        assert "\x85" not in message
        # A traceback (of a provider's bug) spans lines, each of them the server's own.
        assert all("forged line" not in line or "'" in line for line in message.splitlines())
        assert not any(line.startswith("INFO") for line in message.splitlines())


# -- the client's invalid request is "invalid", not a retryable upstream failure ---------------


async def test_options_extra_naming_a_reserved_key_is_an_invalid_request(
    mock_clock: trio.testing.MockClock,
) -> None:
    bad = ProviderOptions(extra={"messages": []})  # the encoder owns "messages"
    async with simulated() as (simulator, upstream):
        app = server(upstream)
        async with running(app) as url:
            async with Raw.connect(url) as raw:
                await raw.ready()
                await raw.send(stream("a", "hi", options=bad))
                assert await raw.frame() == error_frame("invalid", "a")
                await raw.send(stream("b", "the connection stays"))
                assert isinstance((await raw.frames_until("b"))[-1], ResultFrame)
            async with relay(url) as provider:
                with pytest.raises(ProviderError) as failed:
                    await drain(provider, "hi", options=bad)
            async with httpx.AsyncClient() as client:
                plain = await client.post(
                    f"{url}/v1/stream",
                    headers=bearer(),
                    json=body(options={"extra": {"messages": []}}),
                )
        assert simulator.statistics().requests == 1  # only "b" reached the upstream
    assert (failed.value.code, failed.value.retryable) == ("invalid", False)
    assert plain.status_code == 400
    assert app.statistics().refused == {}


# -- host names and origins ---------------------------------------------------------------------


async def ws_status(url: str, headers: Sequence[tuple[str, str]]) -> int | None:
    """The status of a refused websocket handshake (None: accepted)."""
    async with Raw.connect(url, headers=headers) as raw:
        return raw.status


async def test_a_host_the_relay_does_not_answer_to_is_refused_before_anything_else(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url:
        port = url.rsplit(":", 1)[1]
        # A DNS-rebinding page: its own name, now resolving to 127.0.0.1, and its own origin.
        rebound = [("host", f"evil.example:{port}"), ("origin", f"http://evil.example:{port}")]
        assert await ws_status(url, rebound) == 421
        async with httpx.AsyncClient() as client:
            refused = await client.post(
                f"{url}/v1/stream", headers={**bearer(), **dict(rebound)}, json=body()
            )
            page = await client.get(f"{url}/", headers={"host": f"evil.example:{port}"})
            for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LocalHost.", "[::1]"):
                fine = await client.get(f"{url}/", headers={"host": host})
                assert fine.status_code == 200, host
    assert refused.status_code == page.status_code == 421
    assert b"does not answer to that host name" in refused.content
    assert up.calls == 0
    assert app.statistics().refused == {"misdirected": 3}


@pytest.mark.parametrize(
    ("allowed_hosts", "host", "origin", "status"),
    [
        # The default origins come from the names the relay answers to, not from Host.
        ((), "127.0.0.1:PORT", "http://localhost:PORT", None),
        ((), "localhost:PORT", "https://127.0.0.1:PORT", None),
        ((), "127.0.0.1:PORT", "http://localhost:1", 403),
        ((), "127.0.0.1:PORT", "http://relay.example.com:PORT", 403),
        ((), "relay.example.com", "https://relay.example.com", 421),
        # A public name behind a TLS proxy: its default port, and the relay's own.
        (("relay.example.com",), "relay.example.com", "https://relay.example.com", None),
        (("relay.example.com",), "relay.example.com:443", "https://relay.example.com:PORT", None),
        (("relay.example.com",), "relay.example.com", "https://evil.example", 403),
        (("relay.example.com:8443",), "relay.example.com", "https://relay.example.com", 403),
        (("relay.example.com:8443",), "relay.example.com", "https://relay.example.com:8443", None),
        (("relay.example.com",), "other.example.com", "https://relay.example.com", 421),
    ],
)
async def test_allowed_hosts_and_the_default_origins(
    mock_clock: trio.testing.MockClock,
    allowed_hosts: tuple[str, ...],
    host: str,
    origin: str,
    status: int | None,
) -> None:
    up = Upstream()
    app = server(up, allowed_hosts=allowed_hosts)
    async with running(app) as url:
        port = url.rsplit(":", 1)[1]
        headers = [("host", host.replace("PORT", port)), ("origin", origin.replace("PORT", port))]
        assert await ws_status(url, headers) == status
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{url}/v1/stream", headers={**bearer(), **dict(headers)}, json=body()
            )
    assert response.status_code == (status or 200)
    assert up.calls == (0 if status else 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"allowed_hosts": ["relay.example.com/path"]},
        {"allowed_hosts": ["bad host"]},
        {"allowed_hosts": ["name:99999"]},
        {"origins": ["relay.example.com"]},
        {"origins": ["ftp://relay.example.com"]},
        {"origins": ["https://relay.example.com/app"]},
    ],
)
def test_a_malformed_allowed_host_or_origin_is_a_configuration_error(
    kwargs: dict[str, Any],
) -> None:
    with pytest.raises(ConfigError):
        server(Upstream(), **kwargs)


# -- serve(): graceful shutdown -----------------------------------------------------------------


async def test_a_graceful_shutdown_with_nothing_open_returns_at_once(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(
            functools.partial(serve, app, port=0, shutdown=stop.wait, grace=30)
        )
        async with httpx.AsyncClient() as client, Raw.connect(url) as raw:
            assert (await client.get(f"{url}/")).status_code == 200  # an idle keep-alive
            await raw.ready()  # and a websocket with nothing open (its pings every 20 s)
            start = trio.current_time()
            stop.set()
            assert await raw.frame() == error_frame("shutdown")
            assert await raw.closed() == 1001
        # serve() returns by itself (the nursery would otherwise wait forever).
    # Not the grace, nor hypercorn's keep-alive timeout, nor the ping interval.
    assert trio.current_time() - start < 1
    assert app._closing  # it was told: new requests are refused


async def test_a_graceful_shutdown_cuts_what_is_still_open_after_the_grace(
    mock_clock: trio.testing.MockClock,
) -> None:
    """An application that never finishes, writing to a client that never reads: hypercorn
    shields that write from cancellation; the grace still bounds the shutdown."""
    writing = trio.Event()

    async def endless(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        writing.set()
        while True:
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})

    stop, served = trio.Event(), trio.Event()

    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve(endless, port=0, shutdown=stop.wait, grace=3, task_status=task_status)
        served.set()

    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(run)
        host, port = url.removeprefix("http://").split(":")
        async with await trio.open_tcp_stream(host, int(port)) as stuck:
            await stuck.send_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # never reads
            await writing.wait()
            start = trio.current_time()
            stop.set()
            with trio.fail_after(60):
                await served.wait()  # while the client is still connected, still not reading
    assert 3 <= trio.current_time() - start < 4


async def test_a_client_that_never_reads_again_loses_its_connection(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Cut after send_timeout, its requests end at once; the connection itself, whose last
    write hypercorn shields from cancellation, ends when a write has made no progress for
    serve()'s write timeout -- not never."""
    up = Upstream()
    app = server(up, limits=RelayLimits(send_timeout=30, idle_timeout=10_000))
    async with running(app) as url, Raw.connect(url) as slow:
        await slow.ready()
        start = trio.current_time()
        await slow.send(stream("flood", "flood"))
        await until(lambda: up.closed == 1)  # the request, at the send timeout
        await until(lambda: app.statistics().connections == 0, within=1000, most=5)
        assert 120 <= trio.current_time() - start <= 30 + 120 + 10
    assert up.calls == 1


async def test_a_ping_crossing_the_close_does_not_fail_the_providers_close(
    mock_clock: trio.testing.MockClock,
) -> None:
    """trio-websocket answers a ping that arrives after its close frame went out with a pong
    wsproto refuses to send (LocalProtocolError): that must not fail RelayProvider's close.
    A zero ping interval keeps a ping in flight all the time, so the crossing happens."""
    up = Upstream()
    app = server(up, tokens=[RelayToken(TOKEN, per_minute=1000)])
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=0))
        for n in range(20):
            async with relay(url) as provider:
                _, result = await drain(provider, f"closing {n}")
            assert result.content == f"closing {n} "
        nursery.cancel_scope.cancel()
    assert up.calls == 20


@pytest.mark.parametrize(
    "sent",
    [
        '{"type": "x\\nINFO forged line\\u001b[31m"}',
        '{"type": "delta", "id": "a\\nINFO forged line\\u001b[2J", "channel": "?", "text": "t"}',
        '{"type": "error", "code": "nope\\nINFO forged\\u202e", "message": "m"}',
    ],
)
async def test_the_client_escapes_what_a_relay_sent_in_its_log_lines(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, sent: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_agents")

    async def rogue(request: trio_websocket.WebSocketRequest) -> None:
        socket = await request.accept()
        await socket.get_message()  # the hello
        await socket.send_message(encode_frame(ReadyFrame(PROTOCOL_VERSION, 1 << 20, 16)))
        await socket.get_message()  # the request
        await socket.send_message(sent)
        with contextlib.suppress(trio_websocket.ConnectionClosed):
            await socket.get_message()

    async with trio.open_nursery() as nursery:
        listener = await nursery.start(
            functools.partial(
                trio_websocket.serve_websocket, rogue, "127.0.0.1", 0, ssl_context=None
            )
        )
        url = f"http://127.0.0.1:{listener.port}"
        async with relay(url, reconnects=0) as provider:
            with pytest.raises(ProviderError):
                await drain(provider, "hi")
        nursery.cancel_scope.cancel()
    logged = [record.getMessage() for record in caplog.records]
    assert any("invalid frame" in message for message in logged)
    for message in logged:
        assert message.isprintable(), message


# -- a reply the upstream cut short (issue 23 item 3) --------------------------------------------

#: The fields of a result frame's result before issue 23: a client of that time decodes a frame
#: with these only (relay frames are strict), and the values of ``finish`` it knows.
OLD_RESULT_FIELDS = {"content", "thinking", "calls", "usage", "finish", "continuation", "denied"}
OLD_FINISHES = {"stop", "length", "tool_calls", "content_filter", "cancelled", "other"}


async def test_a_reply_cut_short_upstream_ends_the_clients_run_and_its_call_never_runs(
    mock_clock: trio.testing.MockClock,
) -> None:
    runs: list[tuple[int, int]] = []
    asked: list[str] = []

    @tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        runs.append((a, b))
        return a + b

    async def approve(call: ToolCall, reason: str | None) -> bool:
        asked.append(call.id)
        return True

    # Even a policy that would put the call to a human does not: it will not run anyway.
    authority = Authority([Rule("ask", tools=("add",), reason="sums need a human")])
    async with simulated(max_tokens=2) as (sim, upstream):
        app = server(upstream, authority=authority)
        async with (
            running(app) as url,
            relay(url, approve=approve) as provider,
            open_runtime() as runtime,
        ):
            agent = await Agent.start(runtime, provider, tools=[add])
            result = await agent.generate('call add with {"a": 123456, "b": 654321}')
    assert (result.stop, result.partial, result.finish) == (
        StopReason.MAX_TOKENS,
        True,
        FinishReason.LENGTH,
    )
    assert runs == []
    assert asked == []
    assert list(tool_texts(result.messages).values()) == [CUT_SHORT[FinishReason.LENGTH]]
    assert len(sim.requests) == 1


async def test_an_older_client_decodes_a_cut_reply_and_is_told_not_to_run_its_calls(
    mock_clock: trio.testing.MockClock,
) -> None:
    # A cut reply adds nothing to the frame an older client could refuse: its finish is one it
    # knows, and every call is in ``denied`` -- which every client version answers instead of
    # running (its own loop then goes on with the model, as before this rule).
    # The upstream is any provider -- here one that names no call in ``denied`` itself: the
    # server does, and puts none of them to its policy.
    calls = [ToolCall("c1", "add", {"a": 1, "b": 2})]
    for finish in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER):
        upstream = ScriptedProvider(Reply("sum", calls=calls, finish=finish))
        app = server(upstream, authority=Authority([Rule("ask", tools=("add",))]))
        async with running(app) as url, Raw.connect(url) as raw:
            await raw.ready()
            await raw.send(stream("a", "sum", tools=[ADD]))
            frames = await raw.frames_until("a")
        result = frames[-1]
        assert isinstance(result, ResultFrame), frames  # no approval frame came first
        assert result.result.finish is finish
        assert result.result.calls == tuple(calls)
        assert result.result.denied == {"c1": CUT_SHORT[finish]}
        sent = json.loads(raw.texts[-1])["result"]
        assert set(sent) <= OLD_RESULT_FIELDS
        assert sent["finish"] in OLD_FINISHES
