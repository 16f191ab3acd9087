"""The relay's abuse tests, extended to the protocols it serves besides its own (issue 26):
OpenAI's chat completions (``POST /v1/chat/completions``), AG-UI (``POST /v1/agui[/{agent}]``)
and the AI SDK's UI message stream (``POST /v1/chat[/{agent}]``, resumed by ``GET
.../{chat id}/stream``). Tenancy, tokens, limits, the Host policy and the relay's secrets apply
to each of them as to the native routes: the tests below run once per protocol (but the two
about a whole OpenAI completion and an AI SDK chat's resume).

Hostile clients: bodies over ``max_frame`` (by ``Content-Length``, and chunked with no length),
bodies that never finish, malformed JSON and messages, thousands of messages or tools, no or
wrong token, a foreign ``Host``, a disallowed ``Origin`` (and its preflight), a token over its
limits, an upstream failing with a secret in its message, a client that never reads a flood,
another token's run id or chat id, an unknown agent. Each refusal comes before the upstream is
touched, in the protocol's own error shape, and no answer ever holds a token or the upstream's
secret (:class:`Client` checks every answer it got).

Real parts: ``RelayServer`` on hypercorn on loopback port 0; httpx, or a bare trio socket where
the test must hold the body back or never read. Everything runs on trio's mock clock with a
small autojump threshold (real sockets are involved): no real sleeps.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import attrs
import httpx
import pytest
import trio
import trio.testing
from test_relay import (
    OTHER,
    TOKEN,
    UPSTREAM_SECRET,
    WRONG,
    Upstream,
    _UpstreamStream,
    no_secret,
    running,
    server,
    until,
)

from actors import open_runtime
from actors.durable import AgentRegistry
from actors.providers import ProviderStream
from actors.relay import RelayAgents, RelayLimits, RelayServer, RelayToken
from protocols.messages import Delta, Message

#: A small frame limit, so that an oversize body is a few kilobytes.
SMALL = 4096
#: The relay's limits in most tests here: small bodies, a short wait for them.
LIMITS = RelayLimits(max_frame=SMALL, handshake_timeout=5)
#: More messages and tools than any of the codecs takes (the most: 2048 messages, 128 tools).
MANY_MESSAGES = 5000
MANY_TOOLS = 3000
#: An origin the relay is told to allow (and one it is not).
ALLOWED = "https://app.example"
EVIL = "https://evil.example"


@pytest.fixture(autouse=True)
def _autojump(mock_clock: trio.testing.MockClock) -> None:
    """Every test takes ``mock_clock`` (so trio runs on it); this makes it jump whenever every
    task has been blocked a moment (real sockets are involved, so not at once)."""
    mock_clock.autojump_threshold = 0.05


# -- the three protocols ------------------------------------------------------------------------


def _tool_definition(index: int) -> dict[str, Any]:
    return {
        "name": f"tool_{index}",
        "description": "",
        "parameters": {"type": "object", "properties": {}},
    }


@attrs.frozen
class Protocol:
    """How a test speaks one served protocol: its route, a request body, and how it reads a
    refusal (checking the protocol's error shape) and a streamed answer's end."""

    name: str
    #: The route for the relay's own model; :meth:`route` for an agent's.
    path: str
    #: The body of a request whose last user message is ``prompt`` (``fields`` replace the
    #: request's own).
    body: Callable[..., dict[str, Any]]
    #: One user message of the protocol, of index ``i``, saying ``text``.
    message: Callable[[int, str], dict[str, Any]]
    #: One tool definition of the protocol (``tool_{i}``).
    tool: Callable[[int], dict[str, Any]]
    #: What a message whose content is of the wrong JSON type looks like, and the field it names.
    bad_content: tuple[dict[str, Any], str]
    #: What a whole streamed answer says last (in its last kilobyte).
    end: bytes
    #: What a streamed answer that failed says last.
    failed: bytes

    def route(self, agent: str) -> tuple[str, dict[str, Any]]:
        """The path and body of a request to agent ``agent``."""
        if self.name == "openai":
            return self.path, self.body("hi", model=f"agent:{agent}")
        return f"{self.path}/{agent}", self.body("hi")

    def refusal(self, response: httpx.Response) -> tuple[str | None, str]:
        """``(code, message)`` of a refusal, its shape checked: OpenAI's error object; AG-UI's
        ``{"error", "code"}``; the UI stream's short plain text (no code)."""
        kind = response.headers.get("content-type", "")
        if self.name == "ui":
            assert kind.startswith("text/plain"), (kind, response.content)
            return None, response.text.strip()
        assert kind.startswith("application/json"), (kind, response.content)
        document = response.json()
        if self.name == "openai":
            assert set(document) == {"error"}, document
            error = document["error"]
            assert set(error) == {"message", "type", "param", "code"}, document
            assert isinstance(error["message"], str)
            assert isinstance(error["type"], str)
            return error["code"], error["message"]
        assert set(document) == {"error", "code"}, document
        assert isinstance(document["error"], str)
        return document["code"], document["error"]


def _openai_body(prompt: str, **fields: Any) -> dict[str, Any]:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": prompt}]}
    return {**body, **fields}


def _agui_body(prompt: str, **fields: Any) -> dict[str, Any]:
    body = {
        "threadId": "thread-1",
        "runId": "run-1",
        "messages": [{"id": "m1", "role": "user", "content": prompt}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": None,
    }
    return {**body, **fields}


def _ui_body(prompt: str, **fields: Any) -> dict[str, Any]:
    body = {
        "id": "chat-1",
        "trigger": "submit-message",
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": prompt}]}],
    }
    return {**body, **fields}


OPENAI = Protocol(
    "openai",
    "/v1/chat/completions",
    _openai_body,
    lambda i, text: {"role": "user", "content": text},
    lambda i: {"type": "function", "function": _tool_definition(i)},
    ({"role": "user", "content": 42}, "content"),
    b"data: [DONE]\n\n",
    b'"error":',
)
AGUI = Protocol(
    "agui",
    "/v1/agui",
    _agui_body,
    lambda i, text: {"id": f"m{i}", "role": "user", "content": text},
    _tool_definition,
    ({"id": "m1", "role": "user", "content": 42}, "content"),
    b'"type":"RUN_FINISHED"',
    b'"type":"RUN_ERROR"',
)
UI = Protocol(
    "ui",
    "/v1/chat",
    _ui_body,
    lambda i, text: {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": text}]},
    _tool_definition,
    ({"id": "m1", "role": "user", "parts": "hi"}, "parts"),
    b"data: [DONE]\n\n",
    b'"type":"error"',
)
PROTOCOLS = [OPENAI, AGUI, UI]
each_protocol = pytest.mark.parametrize("proto", PROTOCOLS, ids=[p.name for p in PROTOCOLS])


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def encoded(document: Any) -> bytes:
    return json.dumps(document).encode()


# -- an HTTP client that remembers every answer --------------------------------------------------


class Client:
    """httpx on the relay at ``url``, keeping every answer it got (status line, headers, body:
    what was read of it) so that :meth:`seen_no_secret` can check them all."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.seen: list[str] = []

    def keep(self, response: httpx.Response, body: bytes) -> None:
        self.seen.append(f"{response.status_code} {list(response.headers.multi_items())}")
        self.seen.append(body.decode("utf-8", "replace"))

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        kwargs.setdefault("headers", bearer())
        response = await self.http.request(method, path, **kwargs)
        self.keep(response, response.content)
        return response

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.request("POST", path, **kwargs)

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.request("GET", path, **kwargs)

    @asynccontextmanager
    async def opened(
        self, path: str, body: dict[str, Any], *, until_text: bytes
    ) -> AsyncIterator[httpx.Response]:
        """A streamed POST, read until its body holds ``until_text`` (the answer then stays
        open, unread, until the block ends)."""
        async with self.http.stream("POST", path, json=body, headers=bearer()) as response:
            got = bytearray()
            # Not ``break`` out of ``async for``: trio would finalize the abandoned generator,
            # closing the answer (which cancels its run).
            reader = cast("AsyncGenerator[bytes, None]", response.aiter_raw())
            try:
                while response.status_code == 200 and until_text not in got:
                    got += await reader.__anext__()
                self.keep(response, bytes(got))
                yield response
            finally:
                await reader.aclose()

    def seen_no_secret(self) -> bool:
        return no_secret(*self.seen)


@asynccontextmanager
async def serving(app: RelayServer) -> AsyncIterator[Client]:
    """``app`` on hypercorn, and a :class:`Client` of it; every answer the client got holds
    no token and no upstream secret."""
    async with running(app) as url, httpx.AsyncClient(base_url=url, timeout=600) as http:
        client = Client(http, url)
        with trio.fail_after(600):
            yield client
    assert client.seen_no_secret(), client.seen


# -- raw HTTP over a bare socket -----------------------------------------------------------------


@attrs.frozen
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes
    #: trio seconds from the request's head to the answer's.
    took: float


def request_head(
    client: Client,
    path: str,
    *,
    length: int | None = None,
    chunked: bool = False,
    token: str | None = TOKEN,
) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{client.port}"]
    lines.append("Content-Type: application/json")
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@asynccontextmanager
async def bare(
    client: Client, *, receive_buffer: int | None = None
) -> AsyncIterator[trio.SocketStream]:
    """A plain TCP connection to the relay (with a small receive buffer if told: a client
    that stops reading stops the server's writes soon)."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    await sock.connect(("127.0.0.1", client.port))
    async with trio.SocketStream(sock) as tcp:
        yield tcp


async def read_answer(tcp: trio.SocketStream, client: Client, start: float) -> Answer:
    """The answer's head and its whole body (a ``Content-Length`` one, or chunked)."""
    got = bytearray()
    while b"\r\n\r\n" not in got:
        data = await tcp.receive_some(65536)
        assert data, f"the relay closed the connection without an answer: {bytes(got)!r}"
        got += data
    took = trio.current_time() - start
    head, _, rest = bytes(got).partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines)
    }
    body = bytearray(rest)

    async def more() -> None:
        data = await tcp.receive_some(65536)
        assert data, "the relay closed the connection mid-answer"
        body.extend(data)

    if "content-length" in headers:
        while len(body) < int(headers["content-length"]):
            await more()
        content = bytes(body[: int(headers["content-length"])])
    elif headers.get("transfer-encoding") == "chunked":
        out = bytearray()
        while True:
            while b"\r\n" not in body:
                await more()
            size_line, _, tail = bytes(body).partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(tail) < size + 2:
                await more()
                size_line, _, tail = bytes(body).partition(b"\r\n")
            out += tail[:size]
            del body[: len(size_line) + 2 + size + 2]
            if size == 0:
                break
        content = bytes(out)
    else:
        content = bytes(body)
    client.seen.append(head.decode("latin-1"))
    client.seen.append(content.decode("utf-8", "replace"))
    return Answer(int(status_line.split()[1]), headers, content, took)


async def drain(tcp: trio.SocketStream) -> bytes:
    """Read until the relay closes the connection, or a chunked body ends."""
    got = bytearray()
    try:
        while not got.endswith(b"\r\n0\r\n\r\n") and (data := await tcp.receive_some(1 << 20)):
            got += data
    except trio.BrokenResourceError:
        pass
    return bytes(got)


def as_response(answer: Answer) -> httpx.Response:
    """A bare answer as httpx's, for :meth:`Protocol.refusal`."""
    return httpx.Response(answer.status, headers=dict(answer.headers), content=answer.body)


# -- bodies over the limit, and bodies that never arrive -----------------------------------------


@each_protocol
async def test_a_body_over_max_frame_by_its_length_is_413_before_it_is_read(
    mock_clock: trio.testing.MockClock,
    proto: Protocol,
) -> None:
    up = Upstream()
    app = server(up, limits=LIMITS)
    async with serving(app) as client:
        # Only the head, announcing one byte too many: refused at once, nothing read.
        async with bare(client) as tcp:
            start = trio.current_time()
            await tcp.send_all(request_head(client, proto.path, length=SMALL + 1))
            answer = await read_answer(tcp, client, start)
        assert answer.status == 413
        assert answer.took < 1  # not the handshake timeout: judged by the length alone
        code, message = proto.refusal(as_response(answer))
        assert code in (None, "too_large")
        assert "size" in message
        # And the same through a client that sends the whole body.
        body = encoded(proto.body("x" * SMALL))
        assert len(body) > SMALL
        whole = await client.post(proto.path, content=body)
        assert whole.status_code == 413
        assert proto.refusal(whole) == (code, message)
    assert up.calls == 0
    assert app.statistics().refused == {"too_large": 2}


@each_protocol
async def test_a_body_at_max_frame_is_served(
    mock_clock: trio.testing.MockClock, proto: Protocol
) -> None:
    up = Upstream()
    app = server(up, limits=LIMITS)
    bare_body = len(encoded(proto.body("hello")))
    body = encoded(proto.body("hello" + " " * (SMALL - bare_body)))
    assert len(body) == SMALL
    async with serving(app) as client:
        answer = await client.post(proto.path, content=body)
    assert answer.status_code == 200
    assert proto.end in answer.content[-1000:]
    assert up.calls == 1


@each_protocol
async def test_a_chunked_body_with_no_length_is_413_once_it_grows_over_max_frame(
    mock_clock: trio.testing.MockClock,
    proto: Protocol,
) -> None:
    up = Upstream()
    app = server(up, limits=LIMITS)
    async with serving(app) as client, bare(client) as tcp:
        start = trio.current_time()
        # Chunks over the limit, and no last chunk: the relay must not wait for the end.
        parts = [chunk(b" " * 1024) for _ in range(SMALL // 1024 + 1)]
        await tcp.send_all(request_head(client, proto.path, chunked=True) + b"".join(parts))
        answer = await read_answer(tcp, client, start)
    assert answer.status == 413
    assert answer.took < LIMITS.handshake_timeout
    assert proto.refusal(as_response(answer))[0] in (None, "too_large")
    assert up.calls == 0
    assert app.statistics().refused == {"too_large": 1}


@each_protocol
@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_body_that_never_finishes_is_408_at_the_handshake_timeout(
    mock_clock: trio.testing.MockClock, proto: Protocol, framing: str
) -> None:
    up = Upstream()
    app = server(up, limits=LIMITS)
    body = encoded(proto.body("never all of it"))
    async with serving(app) as client, bare(client) as tcp:
        start = trio.current_time()
        if framing == "length":
            head = request_head(client, proto.path, length=len(body))
            await tcp.send_all(head + body[:-5])  # five bytes short, forever
        else:
            head = request_head(client, proto.path, chunked=True)
            await tcp.send_all(head + chunk(body))  # and never the last chunk
        answer = await read_answer(tcp, client, start)
    assert answer.status == 408
    assert LIMITS.handshake_timeout <= answer.took < LIMITS.handshake_timeout + 1
    assert proto.refusal(as_response(answer))[0] in (None, "timeout")
    assert up.calls == 0
    assert app.statistics().refused == {"timeout": 1}


# -- malformed requests --------------------------------------------------------------------------


def _malformed(proto: Protocol) -> dict[str, Callable[[], tuple[bytes, str]]]:
    """Malformed requests of ``proto`` by name: each makes the body, and says a word its
    refusal must hold (the field, or what is wrong)."""
    body = proto.body
    bad_content, content_field = proto.bad_content

    def request(**fields: Any) -> bytes:
        return encoded(body("hi", **fields))

    return {
        "not_json": lambda: (b"{", "json"),
        "truncated_json": lambda: (request()[:-1], "json"),
        "not_utf8": lambda: (b'{"messages": "\xff\xfe"}', "utf-8"),
        "nan": lambda: (b'{"messages": NaN}', "nan"),
        "duplicate_keys": lambda: (b'{"messages": [], "messages": []}', "duplicate"),
        "nested_too_deep": lambda: (b"[" * 1000 + b"]" * 1000, "nested"),
        "not_an_object": lambda: (b"[1, 2]", "object"),
        "messages_not_an_array": lambda: (request(messages="hi"), "messages"),
        "no_messages": lambda: (request(messages=[]), "messages"),
        "message_not_an_object": lambda: (request(messages=["hi"]), "messages[0]"),
        "unknown_role": lambda: (
            request(messages=[{**proto.message(0, "hi"), "role": "wizard"}]),
            "messages[0].role",
        ),
        "content_of_the_wrong_type": lambda: (request(messages=[bad_content]), content_field),
        "tools_not_an_array": lambda: (request(tools={"tool_0": {}}), "tools"),
        "tool_of_the_wrong_type": lambda: (request(tools=[42]), "tools[0]"),
        "tool_named_twice": lambda: (request(tools=[proto.tool(1), proto.tool(1)]), "tools[1]"),
        "many_messages": lambda: (
            request(messages=[proto.message(i, "x") for i in range(MANY_MESSAGES)]),
            "messages",
        ),
        "thousands_of_tools": lambda: (
            request(tools=[proto.tool(i) for i in range(MANY_TOOLS)]),
            "tools",
        ),
    }


MALFORMED = list(_malformed(OPENAI))


@each_protocol
@pytest.mark.parametrize("case", MALFORMED)
async def test_a_malformed_request_is_400_naming_the_problem(
    mock_clock: trio.testing.MockClock, proto: Protocol, case: str
) -> None:
    up = Upstream()
    app = server(up)  # the default frame limit: thousands of messages or tools fit in it
    body, named = _malformed(proto)[case]()
    assert len(body) <= RelayLimits().max_frame
    async with serving(app) as client:
        answer = await client.post(proto.path, content=body)
    assert answer.status_code == 400, (answer.status_code, answer.content[:300])
    code, message = proto.refusal(answer)
    assert code != "too_large"
    assert named.lower() in message.lower(), message
    assert up.calls == 0
    assert app.statistics().refused == {"invalid": 1}


# -- tokens --------------------------------------------------------------------------------------

BAD_AUTHORIZATION = [
    None,
    f"Bearer {WRONG}",
    "Bearer",
    f"Basic {TOKEN}",
    TOKEN,
    f"Bearer {TOKEN}x",
    f"Bearer {TOKEN[:-1]}",
    f"Bearer {TOKEN} {TOKEN}",
]


@each_protocol
@pytest.mark.parametrize("authorization", BAD_AUTHORIZATION, ids=range(len(BAD_AUTHORIZATION)))
async def test_no_or_a_wrong_token_is_401_and_no_answer_holds_a_token(
    mock_clock: trio.testing.MockClock,
    proto: Protocol,
    authorization: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_agents")
    up = Upstream()
    app = server(up, limits=LIMITS)
    headers = {} if authorization is None else {"authorization": authorization}
    async with serving(app) as client:
        answer = await client.post(proto.path, json=proto.body("hi"), headers=headers)
        assert answer.status_code == 401
        code, _ = proto.refusal(answer)
        assert code in (None, "unauthorized")
        # Refused on its head: a huge body announced without a token is not waited for.
        async with bare(client) as tcp:
            start = trio.current_time()
            await tcp.send_all(request_head(client, proto.path, length=10**9, token=WRONG))
            raw = await read_answer(tcp, client, start)
        assert raw.status == 401
        assert raw.took < 1
    assert up.calls == 0
    assert app.statistics().refused == {"unauthorized": 2}
    logged = [record.getMessage() for record in caplog.records]
    assert no_secret(*logged), logged


# -- the Host policy, origins and preflights -----------------------------------------------------


@each_protocol
async def test_a_foreign_host_is_421_before_anything_else(
    mock_clock: trio.testing.MockClock, proto: Protocol
) -> None:
    up = Upstream()
    app = server(up, origins=[ALLOWED])
    async with serving(app) as client:
        foreign = {"host": f"evil.example:{client.port}"}
        refused = await client.post(
            proto.path, json=proto.body("hi"), headers={**bearer(), **foreign}
        )
        preflight = await client.request(
            "OPTIONS",
            proto.path,
            headers={**foreign, "origin": ALLOWED, "access-control-request-method": "POST"},
        )
        # A DNS-rebinding page: its own name, and its own origin.
        rebound = await client.post(
            proto.path,
            json=proto.body("hi"),
            headers={**bearer(), **foreign, "origin": f"http://evil.example:{client.port}"},
        )
    assert refused.status_code == preflight.status_code == rebound.status_code == 421
    assert b"does not answer to that host name" in refused.content
    assert "access-control-allow-origin" not in preflight.headers
    assert up.calls == 0
    assert app.statistics().refused == {"misdirected": 3}


@each_protocol
async def test_a_disallowed_origin_is_403_and_its_preflight_too(
    mock_clock: trio.testing.MockClock, proto: Protocol
) -> None:
    up = Upstream()
    app = server(up, origins=[ALLOWED])
    async with serving(app) as client:
        refused = await client.post(
            proto.path, json=proto.body("hi"), headers={**bearer(), "origin": EVIL}
        )
        assert refused.status_code == 403
        assert proto.refusal(refused)[0] in (None, "forbidden_origin")
        assert "access-control-allow-origin" not in refused.headers
        asking = {"access-control-request-method": "POST"}
        evil = await client.request("OPTIONS", proto.path, headers={"origin": EVIL, **asking})
        nobody = await client.request("OPTIONS", proto.path, headers=asking)
        assert evil.status_code == nobody.status_code == 403
        assert "access-control-allow-origin" not in evil.headers
        assert up.calls == 0
        # From the allowed origin: the preflight allows the method and the headers...
        allowed = await client.request(
            "OPTIONS",
            proto.path,
            headers={
                "origin": ALLOWED,
                **asking,
                "access-control-request-headers": "authorization, content-type",
            },
        )
        assert allowed.status_code == 204
        assert allowed.headers["access-control-allow-origin"] == ALLOWED
        assert "POST" in allowed.headers["access-control-allow-methods"]
        allowed_headers = allowed.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed_headers
        assert "content-type" in allowed_headers
        assert "origin" in allowed.headers.get("vary", "").lower()
        # ...and the request is answered, with the CORS headers.
        served = await client.post(
            proto.path, json=proto.body("hi"), headers={**bearer(), "origin": ALLOWED}
        )
    assert served.status_code == 200
    assert served.headers["access-control-allow-origin"] == ALLOWED
    assert "x-relay-run-id" in served.headers["access-control-expose-headers"]
    assert up.calls == 1
    assert app.statistics().refused == {"forbidden_origin": 3}


# -- the token's limits --------------------------------------------------------------------------

#: OpenAI's error type for each refusal of the token's limits, and a word its text says.
LIMIT_TYPES = {
    "rate_limited": "rate_limit_error",
    "too_many_streams": "rate_limit_error",
    "budget": "insufficient_quota",
}
LIMIT_WORDS = {"rate_limited": "minute", "too_many_streams": "too many", "budget": "budget"}


def assert_429(proto: Protocol, answer: httpx.Response, code: str) -> None:
    """``answer`` refuses ``code``, a limit of the token, in ``proto``'s error shape."""
    assert answer.status_code == 429, (answer.status_code, answer.content[:300])
    got, message = proto.refusal(answer)
    assert got in (None, code)
    assert LIMIT_WORDS[code] in message, message
    if proto is OPENAI:
        assert answer.json()["error"]["type"] == LIMIT_TYPES[code]
        assert answer.headers["x-should-retry"] == ("false" if code == "budget" else "true")


@each_protocol
async def test_requests_per_minute_are_429_over_the_tokens_limit(
    mock_clock: trio.testing.MockClock, proto: Protocol
) -> None:
    up = Upstream()
    tokens = [RelayToken(TOKEN, per_minute=2), RelayToken(OTHER, name="other")]
    app = server(up, tokens=tokens)
    async with serving(app) as client:
        for n in range(2):
            done = await client.post(proto.path, json=proto.body(f"request {n}"))
            assert done.status_code == 200
        assert_429(proto, await client.post(proto.path, json=proto.body("three")), "rate_limited")
        other = await client.post(proto.path, json=proto.body("other"), headers=bearer(OTHER))
        assert other.status_code == 200  # another token is not held back
        await trio.sleep(61)
        later = await client.post(proto.path, json=proto.body("a minute later"))
    assert later.status_code == 200
    assert up.prompts == ["request 0", "request 1", "other", "a minute later"]
    assert app.statistics().refused == {"rate_limited": 1}


@each_protocol
async def test_streams_over_the_tokens_max_streams_are_429(
    mock_clock: trio.testing.MockClock, proto: Protocol
) -> None:
    up = Upstream()
    app = server(up, tokens=[RelayToken(TOKEN, max_streams=1), RelayToken(OTHER, name="o")])
    async with serving(app) as client:
        async with client.opened(proto.path, proto.body("hang"), until_text=b"partial") as first:
            assert first.status_code == 200
            await until(lambda: up.parked == 1)
            refused = await client.post(proto.path, json=proto.body("second"))
            assert_429(proto, refused, "too_many_streams")
            other = await client.post(proto.path, json=proto.body("other"), headers=bearer(OTHER))
            assert other.status_code == 200
            # Its slot comes back when its run ends.
            run_id = first.headers["x-relay-run-id"]
            assert (await client.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
        await until(lambda: up.closed == 2)
        await until(lambda: all(run.done.is_set() for run in app._runs._runs.values()))
        again = await client.post(proto.path, json=proto.body("fits again"))
    assert again.status_code == 200
    assert up.prompts == ["hang", "other", "fits again"]
    assert app.statistics().refused == {"too_many_streams": 1}


@each_protocol
async def test_a_spent_budget_is_429(mock_clock: trio.testing.MockClock, proto: Protocol) -> None:
    up = Upstream()  # 7 tokens a call
    app = server(up, tokens=[RelayToken(TOKEN, budget=5), RelayToken(OTHER, name="other")])
    async with serving(app) as client:
        spent = await client.post(proto.path, json=proto.body("one"))
        assert spent.status_code == 200
        assert_429(proto, await client.post(proto.path, json=proto.body("two")), "budget")
        other = await client.post(proto.path, json=proto.body("other"), headers=bearer(OTHER))
    assert other.status_code == 200
    assert up.prompts == ["one", "other"]
    assert app.statistics().refused == {"budget": 1}


# -- an upstream failure -------------------------------------------------------------------------


@each_protocol
@pytest.mark.parametrize("prompt", ["fail", "break", "crash"])
async def test_an_upstream_failure_says_nothing_of_the_upstreams_words(
    mock_clock: trio.testing.MockClock, proto: Protocol, prompt: str
) -> None:
    up = Upstream()
    app = server(up)
    async with serving(app) as client:
        answer = await client.post(proto.path, json=proto.body(prompt))
    assert answer.status_code == 200  # (streamed: the failure is in the stream)
    assert proto.failed in answer.content[-1000:], answer.content
    assert UPSTREAM_SECRET not in answer.text
    assert "upstream said no" not in answer.text
    assert "bug holding" not in answer.text
    assert up.calls == 1


@pytest.mark.parametrize("prompt", ["fail", "break", "crash"])
async def test_a_whole_openai_completion_that_failed_upstream_holds_no_secret(
    mock_clock: trio.testing.MockClock,
    prompt: str,
) -> None:
    up = Upstream()
    app = server(up)
    async with serving(app) as client:
        answer = await client.post(OPENAI.path, json=OPENAI.body(prompt, stream=False))
    assert answer.status_code == 502
    code, message = OPENAI.refusal(answer)
    assert code == "upstream"
    assert UPSTREAM_SECRET not in answer.text
    assert "upstream said no" not in message
    assert up.calls == 1


# -- a client that never reads -------------------------------------------------------------------

#: The relay gives up on a client that takes nothing for this long (trio seconds).
SEND_TIMEOUT = 30
#: The most text one run's log holds: a flood is cut there (far over what the sockets buffer).
RUN_BYTES = 24 * 1024 * 1024


async def flood_unread(proto: Protocol, read_after: float) -> tuple[Upstream, bytes]:
    """A client asks for a flood and reads nothing for ``read_after`` trio seconds, then reads
    to the end; the upstream, and what the client got."""
    up = Upstream()
    limits = RelayLimits(send_timeout=SEND_TIMEOUT, max_run_bytes=RUN_BYTES, resume_grace=5)
    app = server(up, limits=limits)
    async with serving(app) as client, bare(client, receive_buffer=16384) as tcp:
        start = trio.current_time()
        body = encoded(proto.body("flood"))
        await tcp.send_all(request_head(client, proto.path, length=len(body)) + body)
        # The run is cut by its log's size (the upstream does not wait for the client): its
        # upstream stream closed, nothing more of it kept.
        await until(lambda: up.closed == 1)
        (run,) = app._runs._runs.values()
        await until(run.done.is_set)
        assert run.bytes <= RUN_BYTES + 1024  # (and its terminal event, which is always kept)
        assert app.statistics().watchers == 1  # the client's answer, stuck
        await trio.sleep(read_after - (trio.current_time() - start))
        got = await drain(tcp)
        await until(lambda: app.statistics().watchers == 0)
        client.seen.append(got[:4096].decode("utf-8", "replace"))
    return up, got


@each_protocol
async def test_a_client_that_never_reads_a_flood_is_cut_after_the_send_timeout(
    mock_clock: trio.testing.MockClock,
    proto: Protocol,
) -> None:
    up, got = await flood_unread(proto, SEND_TIMEOUT + 1)
    # What it reads at last is what was in the sockets and the relay's small outbox when the
    # relay gave up: a fraction of the answer, which never ends as a whole answer does.
    assert got.startswith(b"HTTP/1.1 200")
    assert len(got) < RUN_BYTES // 2
    assert not got.endswith(b"0\r\n\r\n")  # the chunked body never ended
    assert up.calls == up.closed == 1


@each_protocol
async def test_a_client_that_reads_again_before_the_send_timeout_gets_it_all(
    mock_clock: trio.testing.MockClock,
    proto: Protocol,
) -> None:
    up, got = await flood_unread(proto, SEND_TIMEOUT - 5)
    assert len(got) > RUN_BYTES * 0.9  # the whole log...
    assert proto.failed in got[-1000:]  # ...to its end (the run was cut by its size)
    assert got.endswith(b"0\r\n\r\n")  # and the chunked body's end
    assert up.calls == up.closed == 1


class Bursts(Upstream):
    """An upstream that floods in bursts, forever: :data:`BURST` pieces of ``flood`` at once,
    then :data:`PAUSE` trio seconds of nothing -- so that a run it feeds stays under the log's
    size limit for minutes, and only the relay giving up on its client ends it."""

    def stream(self, messages: Sequence[Message], **kwargs: Any) -> ProviderStream:
        self.calls += 1
        return _BurstStream(self)


#: Pieces of :data:`Upstream.FLOOD` in one burst (5 MiB: more than the sockets buffer), and
#: the trio seconds between bursts.
BURST = 160
PAUSE = 10


class _BurstStream(_UpstreamStream):
    def __init__(self, upstream: Upstream) -> None:
        super().__init__(upstream, "flood")
        self._left = BURST

    async def __anext__(self) -> Delta:
        if not self._left:
            await trio.sleep(PAUSE)
            self._left = BURST
        self._left -= 1
        return await super().__anext__()


@each_protocol
async def test_a_client_that_never_reads_loses_its_run_and_its_upstream_at_the_send_timeout(
    mock_clock: trio.testing.MockClock,
    proto: Protocol,
) -> None:
    """The run of a client the relay gave up on (it read nothing for ``send_timeout``) is
    cancelled -- for a chat, once nobody came back to it within ``resume_grace`` -- and its
    upstream stream closed: nothing keeps pulling an upstream for a client that is gone."""
    up = Bursts()
    grace = 5
    limits = RelayLimits(
        send_timeout=SEND_TIMEOUT, max_run_bytes=1 << 30, resume_grace=grace, keepalive=1000
    )
    app = server(up, limits=limits)
    bound = SEND_TIMEOUT + PAUSE + (grace if proto is UI else 0) + 5
    async with serving(app) as client, bare(client, receive_buffer=16384) as tcp:
        start = trio.current_time()
        body = encoded(proto.body("flood"))
        await tcp.send_all(request_head(client, proto.path, length=len(body)) + body)
        await until(lambda: up.pulled >= BURST)
        with trio.move_on_after(bound):
            await until(lambda: up.closed == 1, within=10_000)
        closed_at = trio.current_time() - start
        (run,) = app._runs._runs.values()
        assert not run.too_large  # (not cut by its size: by the client's end)
        assert up.closed == 1, (
            f"the upstream stream is still open {closed_at:.0f} s after a client that reads "
            f"nothing asked for it ({up.pulled} pieces pulled; send_timeout={SEND_TIMEOUT})"
        )
    assert SEND_TIMEOUT <= closed_at <= bound
    assert up.calls == 1


# -- tenancy: another token's run or chat --------------------------------------------------------


def _comparable(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    headers = [(k, v) for k, v in response.headers.multi_items() if k not in ("date", "server")]
    return response.status_code, response.content, headers


@each_protocol
async def test_another_tokens_run_is_answered_as_one_that_never_existed(
    mock_clock: trio.testing.MockClock, proto: Protocol
) -> None:
    up = Upstream()
    app = server(up, tokens=[RelayToken(TOKEN), RelayToken(OTHER, name="other")])
    never = "run_" + secrets.token_urlsafe(16)
    async with serving(app) as client:
        async with client.opened(proto.path, proto.body("hang"), until_text=b"partial") as mine:
            run_id = mine.headers["x-relay-run-id"]
            theirs = bearer(OTHER)
            for method, action in (("GET", "events"), ("POST", "cancel")):
                foreign = await client.request(
                    method, f"/v1/runs/{run_id}/{action}", headers=theirs
                )
                missing = await client.request(method, f"/v1/runs/{never}/{action}", headers=theirs)
                assert foreign.status_code == 404
                assert _comparable(foreign) == _comparable(missing)
            await until(lambda: up.parked == 1)  # the run goes on: nothing of it was touched
            assert not app._runs._runs[run_id].cancelled
            # Its own token sees it.
            assert (await client.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
        await until(lambda: up.closed == 1)
    assert app.statistics().refused == {"unknown_run": 4}


async def test_another_tokens_chat_is_not_resumed_exactly_as_one_that_never_existed(
    mock_clock: trio.testing.MockClock,
) -> None:
    up = Upstream()
    app = server(up, tokens=[RelayToken(TOKEN), RelayToken(OTHER, name="other")])
    async with serving(app) as client:
        async with client.opened(UI.path, UI.body("hang"), until_text=b"partial") as mine:
            assert mine.status_code == 200
        theirs = bearer(OTHER)
        foreign = await client.get("/v1/chat/chat-1/stream", headers=theirs)
        missing = await client.get("/v1/chat/never-was/stream", headers=theirs)
        assert foreign.status_code == 204
        assert _comparable(foreign) == _comparable(missing)
        await until(lambda: up.parked == 1)  # the chat's run goes on, untouched
        # Its own token resumes it.
        async with client.http.stream("GET", "/v1/chat/chat-1/stream", headers=bearer()) as resumed:
            assert resumed.status_code == 200
            async for data in resumed.aiter_raw():
                assert UPSTREAM_SECRET.encode() not in data
                if b"partial" in data:
                    break
        run_id = mine.headers["x-relay-run-id"]
        assert (await client.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
        await until(lambda: up.closed == 1)


# -- unknown agents ------------------------------------------------------------------------------


@each_protocol
@pytest.mark.parametrize("registered", [False, True], ids=["no_agents", "other_agents"])
async def test_an_unknown_agent_is_404(
    mock_clock: trio.testing.MockClock, proto: Protocol, registered: bool
) -> None:
    up = Upstream()
    async with open_runtime() as runtime:
        registry = AgentRegistry()
        registry.add("known", Upstream())
        agents = RelayAgents(registry, runtime) if registered else None
        app = server(up, agents=agents)
        async with serving(app) as client:
            for name in ("nobody", "a" * 200):
                path, body = proto.route(name)
                answer = await client.post(path, json=body)
                assert answer.status_code == 404, (name, answer.content[:300])
                code, message = proto.refusal(answer)
                assert code in (None, "unknown_agent")
                assert name not in message  # nothing the client sent is quoted back
    assert up.calls == 0
    assert app.statistics().refused == {"unknown_agent": 2}
