"""The HTTP provider engine and its three vendor adapters, over real loopback sockets.

The FaultProviderServer drives the failure semantics; a small scriptable server below (real h11,
127.0.0.1, port 0) covers what fault plans cannot express: keep-alive comments, echoing what the
client sent, noticing a client hang-up, replaying recorded vendor transcripts.
"""

from __future__ import annotations

import functools
import json
import pathlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import h11
import pytest
import trio
import trio.testing

from actors.providers import (
    AnthropicMessages,
    HTTPProvider,
    OllamaChat,
    OpenAIChat,
    RetryEvent,
    RetryPolicy,
    Timeouts,
    observe_retries,
)
from actors.testing import FaultProviderServer
from protocols import (
    ConfigError,
    Delta,
    Message,
    ProviderError,
    ProviderResult,
    ToolDefinition,
    from_json,
)
from protocols.faults import text_event

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "tests" / "fixtures"
MESSAGES = [Message.user("hi")]
FAST = RetryPolicy(initial=0.01, maximum=0.02)
IDLE = 0.05  # mock-clock autojump threshold (real seconds) when real sockets are involved

Handler = Callable[[h11.Request, Callable[[bytes], Awaitable[None]]], Awaitable[None]]


@asynccontextmanager
async def script_server(
    respond: Callable[[h11.Request, bytes, trio.SocketStream, h11.Connection], Awaitable[None]],
) -> AsyncIterator[str]:
    """Serve every request with ``respond(request, body, stream, connection)``; yield the base
    URL. Cancelled (with its handlers) when the block ends."""

    async def handle(stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = bytearray()
        async with stream:
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    connection.receive_data(data)
                elif isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body.extend(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
            assert request is not None
            await respond(request, bytes(body), stream, connection)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def send(stream: trio.SocketStream, connection: h11.Connection, event: object) -> None:
    data = connection.send(event)  # type: ignore[arg-type]
    if data:
        await stream.send_all(data)


def sse_response(content_type: bytes = b"text/event-stream") -> h11.Response:
    return h11.Response(status_code=200, headers=[(b"content-type", content_type)])


async def drain(
    provider: OpenAIChat | AnthropicMessages | OllamaChat,
) -> tuple[list[Delta], ProviderResult]:
    async with provider.stream(MESSAGES) as stream:
        deltas = [delta async for delta in stream]
    return deltas, stream.result


async def collect(provider: OpenAIChat, seen: list[Delta]) -> None:
    async with provider.stream(MESSAGES) as stream:
        async for delta in stream:
            seen.append(delta)


# --------------------------------------------------------------------------- fault plans


async def test_pass_streams_deltas_and_reports_usage() -> None:
    async with FaultProviderServer([{"kind": "pass", "text": "hello"}]) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, api_key="k")
        deltas, result = await drain(provider)
        await provider.aclose()
    assert deltas == [Delta("content", "hello")]
    assert result.content == "hello"
    assert result.usage is not None
    assert (result.usage.prompt, result.usage.completion, result.usage.total) == (1, 1, 2)


async def test_refused_then_503_then_pass_succeeds_after_two_observed_retries() -> None:
    retries: list[RetryEvent] = []
    plan = [{"kind": "connection-refused"}, {"kind": "http-error", "status": 503}, {"kind": "pass"}]
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(
            model="m", base_url=server.base_url, retry=FAST, on_retry=retries.append
        )
        result = await provider.generate(MESSAGES)
        assert server.calls() == 3
        await provider.aclose()
    assert result.content == "ok"
    assert [(event.attempt, event.code, event.status) for event in retries] == [
        (1, "transport", None),
        (2, "server_error", 503),
    ]


async def test_observe_retries_reports_to_every_enclosing_listener_in_its_block_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outer: list[RetryEvent] = []
    inner: list[RetryEvent] = []
    own: list[RetryEvent] = []

    def broken(event: RetryEvent) -> None:
        raise RuntimeError("a listener bug")

    plan = [{"kind": "http-error", "status": 503}, {"kind": "pass"}] * 2
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(
            model="m", base_url=server.base_url, api_key="k", retry=FAST, on_retry=own.append
        )
        try:
            with observe_retries(outer.append), observe_retries(broken):
                with observe_retries(inner.append):
                    assert (await provider.generate(MESSAGES)).content == "ok"
                assert len(inner) == 1
            # Outside every block: only the provider's own callback hears the next retry.
            assert (await provider.generate(MESSAGES)).content == "ok"
        finally:
            await provider.aclose()
    assert [(event.attempt, event.status) for event in outer] == [(1, 503)]
    assert inner == outer
    assert len(own) == 2
    assert "a retry listener of" in caplog.text  # the raising one was logged, nothing changed


async def test_take_ready_hands_over_decoded_deltas_without_waiting_in_order() -> None:
    async def burst(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        await send(stream, connection, sse_response())
        pieces = b"".join(text_event(word) for word in ("one ", "two ", "three ", "four"))
        await send(stream, connection, h11.Data(data=pieces))  # one write: one read
        await send(stream, connection, h11.Data(data=text_event("", "stop") + b"data: [DONE]\n\n"))
        await send(stream, connection, h11.EndOfMessage())

    async with script_server(burst) as base:
        provider = OpenAIChat(model="m", base_url=base + "/v1")
        try:
            async with provider.stream(MESSAGES) as stream:
                assert stream.take_ready() == []  # nothing requested yet: nothing to take
                first = await stream.__anext__()
                rest = stream.take_ready()
                assert stream.partial.content == "one two three four"  # taken counts as seen
                more = [delta async for delta in stream]
        finally:
            await provider.aclose()
    assert first.text == "one "
    assert [d.text for d in rest] == ["two ", "three ", "four"]
    assert more == []
    assert stream.result.content == "one two three four"
    assert stream.take_ready() == []


async def test_retries_are_bounded() -> None:
    async with FaultProviderServer([{"kind": "http-error", "status": 502}]) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, retry=FAST)
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        assert server.calls() == 3  # the first attempt and two retries
        await provider.aclose()
    assert (failure.value.status, failure.value.code, failure.value.retryable) == (
        502,
        "server_error",
        True,
    )


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [(400, "bad_request", False), (401, "auth", False), (404, "model_not_found", False)],
)
async def test_non_retryable_statuses_fail_at_once(status: int, code: str, retryable: bool) -> None:
    async with FaultProviderServer([{"kind": "http-error", "status": status}]) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, retry=FAST)
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        assert server.calls() == 1
        await provider.aclose()
    error = failure.value
    assert (error.status, error.code, error.retryable) == (status, code, retryable)
    assert str(error) == f"openai-chat error: {status} - fault {status}"


async def test_a_cut_before_any_delta_is_retried() -> None:
    plan = [{"kind": "stream-cut", "afterBytes": 24}, {"kind": "pass", "text": "recovered"}]
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, retry=FAST)
        deltas, result = await drain(provider)
        assert server.calls() == 2
        await provider.aclose()
    assert [delta.text for delta in deltas] == ["recovered"]  # nothing of the failed attempt
    assert result.content == "recovered"


async def test_a_cut_after_a_delta_is_not_retried_and_carries_the_partial() -> None:
    after = len(text_event("partial response")) + 5  # one whole event, then the cut
    plan = [{"kind": "stream-cut", "afterBytes": after}, {"kind": "pass"}]
    seen: list[Delta] = []
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, retry=FAST)
        with pytest.raises(ProviderError) as failure:
            await collect(provider, seen)
        assert server.calls() == 1
        await provider.aclose()
    assert seen == [Delta("content", "partial response")]
    assert failure.value.partial is not None
    assert failure.value.partial.content == "partial response"


async def test_bad_json_is_surfaced_never_skipped() -> None:
    async with FaultProviderServer([{"kind": "bad-json"}]) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, retry=FAST)
        with pytest.raises(ProviderError, match="invalid JSON") as failure:
            await provider.generate(MESSAGES)
        assert server.calls() == 1
        await provider.aclose()
    assert failure.value.code == "json"


async def test_a_record_that_fails_to_decode_is_shown_short_and_redacted() -> None:
    key = "sk-live-0123456789abcdef"
    record = '{"choices": [{"delta": {"content": "key ' + key + '"' + "x" * 500
    async with FaultProviderServer([{"kind": "bad-json", "record": record}]) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, api_key=key, retry=FAST)
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    error = failure.value
    assert error.code == "json"
    shown = error.message.split("; the record: ", 1)[1]
    assert shown.startswith('{"choices": [{"delta": {"content": "key [redacted]"xxx')
    assert shown.endswith("\u2026")
    assert len(shown) <= 200 + len("[redacted]") - len(key)
    assert key not in str(error)


@pytest.mark.parametrize(
    ("transcript", "shown"),
    [
        # split over two chunks: the line's start came with the chunk before
        (
            [b'{"message": {"content": "a"}, "done": false}\n{"mess', b'age": oops}\n'],
            '{"message": oops}',
        ),
        ([b'{"done": false}\n\n{bad}\n'], "{bad}"),
        ([b'{"done": false}\n{unterminated'], "{unterminated"),  # no final newline
    ],
)
async def test_an_ndjson_line_that_fails_to_decode_is_shown(
    transcript: list[bytes], shown: str
) -> None:
    async def respond(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        await send(stream, connection, sse_response(b"application/x-ndjson"))
        for piece in transcript:
            await send(stream, connection, h11.Data(data=piece))
        await send(stream, connection, h11.EndOfMessage())

    async with script_server(respond) as base:
        provider = OllamaChat(model="m", base_url=base, retry=RetryPolicy(retries=0))
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    assert failure.value.code == "json"
    assert failure.value.message.endswith(f"; the record: {shown}")


async def test_a_record_of_the_wrong_shape_is_shown_too() -> None:
    async def respond(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        await send(stream, connection, sse_response())
        await send(stream, connection, h11.Data(data=b'data: ["not", "an", "object"]\n\n'))
        await send(stream, connection, h11.EndOfMessage())

    async with script_server(respond) as base:
        provider = OpenAIChat(model="m", base_url=base + "/v1", retry=RetryPolicy(retries=0))
        with pytest.raises(ProviderError, match="must be a JSON object") as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    assert failure.value.message.endswith('; the record: ["not", "an", "object"]')


async def test_usage_missing_is_unavailable_not_zero() -> None:
    async with FaultProviderServer([{"kind": "usage-missing"}]) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url)
        result = await provider.generate(MESSAGES)
        await provider.aclose()
    assert result.content == "ok"
    assert result.usage is None


async def test_slow_within_the_idle_timeout_succeeds(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = IDLE
    plan = [{"kind": "slow", "text": "one two three", "tokensPerSecond": 1}]
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url, timeouts=Timeouts(idle=1.5))
        result = await provider.generate(MESSAGES)
        await provider.aclose()
    assert result.content == "one two three"


async def test_slow_beyond_the_idle_timeout_fails(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = IDLE
    plan = [{"kind": "slow", "text": "one two three", "tokensPerSecond": 1}]
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(
            model="m",
            base_url=server.base_url,
            timeouts=Timeouts(idle=0.5, first_event=5),
            retry=RetryPolicy(retries=0),
        )
        with pytest.raises(ProviderError, match=r"no event for 0\.5 s") as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    assert failure.value.code == "timeout"


async def test_first_event_timeout(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = IDLE
    plan = [{"kind": "timeout-before-first-byte", "milliseconds": 3000}]
    async with FaultProviderServer(plan) as server:
        late = OpenAIChat(model="m", base_url=server.base_url, timeouts=Timeouts(first_event=5))
        assert (await late.generate(MESSAGES)).content == "late"
        hasty = OpenAIChat(
            model="m",
            base_url=server.base_url,
            timeouts=Timeouts(first_event=1),
            retry=RetryPolicy(retries=0),
        )
        with pytest.raises(ProviderError, match="no response within 1 s"):
            await hasty.generate(MESSAGES)
        await late.aclose()
        await hasty.aclose()


async def test_keep_alive_comments_do_not_reset_the_idle_timer(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE

    async def comments_forever(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        await send(stream, connection, sse_response())
        await send(stream, connection, h11.Data(data=text_event("first")))
        while True:
            await trio.sleep(0.2)
            await send(stream, connection, h11.Data(data=b": keep-alive\n\n"))

    async with script_server(comments_forever) as base:
        provider = OpenAIChat(
            model="m", base_url=base + "/v1", timeouts=Timeouts(idle=1), retry=FAST
        )
        start = trio.current_time()
        with pytest.raises(ProviderError, match="no event for 1 s") as failure:
            await provider.generate(MESSAGES)
        elapsed = trio.current_time() - start
        await provider.aclose()
    assert 1 <= elapsed < 1.5  # comments every 0.2 s did not keep it alive
    assert failure.value.partial is not None
    assert failure.value.partial.content == "first"


async def test_a_429_retry_after_is_honoured(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = IDLE
    times: list[float] = []

    async def limited(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        times.append(trio.current_time())
        if len(times) == 1:
            headers = [(b"retry-after", b"7"), (b"content-length", b"2")]
            await send(stream, connection, h11.Response(status_code=429, headers=headers))
            await send(stream, connection, h11.Data(data=b"{}"))
        else:
            await send(stream, connection, sse_response())
            await send(stream, connection, h11.Data(data=text_event("done", "stop")))
        await send(stream, connection, h11.EndOfMessage())

    async with script_server(limited) as base:
        provider = OpenAIChat(model="m", base_url=base + "/v1")
        result = await provider.generate(MESSAGES)
        await provider.aclose()
    assert result.content == "done"
    assert times[1] - times[0] >= 7


async def test_secrets_never_reach_errors_or_repr() -> None:
    secret = "sk-very-secret-key-123"

    async def echo_auth(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        auth = dict(request.headers).get(b"authorization", b"").decode()
        payload = json.dumps({"error": {"message": f"bad key {auth}", "type": "auth"}}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        await send(stream, connection, h11.Response(status_code=401, headers=headers))
        await send(stream, connection, h11.Data(data=payload))
        await send(stream, connection, h11.EndOfMessage())

    async with script_server(echo_auth) as base:
        provider = OpenAIChat(model="m", base_url=base + "/v1", api_key=secret)
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    error = failure.value
    assert error.code == "auth"
    assert "[redacted]" in error.excerpt  # the server did echo it: we removed it
    for text in (str(error), repr(error), error.excerpt, repr(provider)):
        assert secret not in text


async def test_leaving_the_block_early_closes_the_response_server_side() -> None:
    closed = trio.Event()

    async def endless(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        await send(stream, connection, sse_response())
        try:
            while True:
                await send(stream, connection, h11.Data(data=text_event("tick")))
                await trio.sleep(0.001)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            closed.set()  # the client hung up

    async with script_server(endless) as base:
        provider = OpenAIChat(model="m", base_url=base + "/v1")
        async with provider.stream(MESSAGES) as stream:
            async for delta in stream:
                assert delta.text == "tick"
                break
        with trio.fail_after(5):
            await closed.wait()
        await provider.aclose()


async def test_a_cancel_raises_cancelled_and_keeps_the_partial() -> None:
    async def endless(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        await send(stream, connection, sse_response())
        await send(stream, connection, h11.Data(data=text_event("so far")))
        await trio.sleep_forever()

    async with script_server(endless) as base:
        provider = OpenAIChat(model="m", base_url=base + "/v1")
        with trio.move_on_after(5) as scope:
            async with provider.stream(MESSAGES) as stream:
                async for delta in stream:
                    assert delta.text == "so far"
                    scope.cancel()
        await provider.aclose()
    assert scope.cancelled_caught
    assert stream.partial.content == "so far"


async def test_generate_equals_the_drained_stream() -> None:
    plan = [{"kind": "slow", "text": "a b c d", "tokensPerSecond": 1000}]
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(model="m", base_url=server.base_url)
        streamed = (await drain(provider))[1]
        generated = await provider.generate(MESSAGES)
        await provider.aclose()
    assert generated == streamed


def test_configuration_errors_are_clear() -> None:
    with pytest.raises(ConfigError, match="headers may not override Authorization"):
        OpenAIChat(model="m", base_url="http://127.0.0.1:1/v1", headers={"Authorization": "x"})
    with pytest.raises(ConfigError, match="a model name is required"):
        OpenAIChat(model="", base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="must be an http"):
        OllamaChat(model="m", base_url="ftp://example")
    with pytest.raises(TypeError, match="must set `wire`"):
        HTTPProvider(model="m", base_url="http://127.0.0.1:1")
    assert OllamaChat(model="m").framing == "ndjson"
    assert OpenAIChat(model="m", base_url="http://h/v1/").url == "http://h/v1/chat/completions"


def test_tool_schemas_are_projected_per_vendor_and_refused_before_any_request() -> None:
    loose = ToolDefinition(
        "search", parameters={"type": "object", "properties": {"tags": {"type": "array"}}}
    )
    openai = OpenAIChat(model="m", base_url="http://127.0.0.1:1/v1")
    body = openai.encode(MESSAGES, [loose], None)
    parameters = body["tools"][0]["function"]["parameters"]
    assert parameters["properties"]["tags"] == {"type": "array", "items": {}}  # adapted
    assert loose.parameters["properties"]["tags"] == {"type": "array"}  # input untouched
    anthropic = AnthropicMessages(model="m", api_key="k")
    body = anthropic.encode(MESSAGES, [loose], None)
    assert body["tools"][0]["input_schema"] is loose.parameters  # adopted as it is
    polluting = ToolDefinition(
        "merge", parameters={"type": "object", "properties": {"__proto__": {"type": "object"}}}
    )
    with pytest.raises(ConfigError, match="schema of tool 'merge' cannot be sent"):
        openai.stream(MESSAGES, tools=[polluting])


# --------------------------------------------------------------------------- vendor transcripts


def replay_server(
    transcript: bytes, content_type: bytes, seed: int
) -> Callable[..., Awaitable[None]]:
    async def respond(
        request: h11.Request, body: bytes, stream: trio.SocketStream, connection: h11.Connection
    ) -> None:
        rng = random.Random(seed)
        await send(stream, connection, sse_response(content_type))
        position = 0
        while position < len(transcript):
            size = rng.randint(1, 64)
            await send(stream, connection, h11.Data(data=transcript[position : position + size]))
            position += size
        await send(stream, connection, h11.EndOfMessage())

    return respond


@pytest.mark.parametrize(
    ("vendor", "name"),
    [
        ("openai_chat", "parallel_tools.sse"),
        ("openai_chat", "reasoning.sse"),
        ("anthropic", "thinking.sse"),
        ("anthropic", "tool_use.sse"),
        ("ollama", "tool_calls.ndjson"),
        ("ollama", "thinking.ndjson"),
        # servers that report no usage: it stays unknown (None), never zeros
        ("openai_chat", "no_usage.sse"),
        ("anthropic", "no_usage.sse"),
        ("ollama", "no_usage.ndjson"),
    ],
)
@pytest.mark.parametrize("seed", [1, 2])
async def test_recorded_transcripts_replay_through_the_adapters(
    vendor: str, name: str, seed: int
) -> None:
    transcript = (FIXTURES / vendor / name).read_bytes()
    expected_path = FIXTURES / vendor / (name.rsplit(".", 1)[0] + ".expected.json")
    expected = from_json(ProviderResult, json.loads(expected_path.read_text()))
    content_type = b"application/x-ndjson" if vendor == "ollama" else b"text/event-stream"
    async with script_server(replay_server(transcript, content_type, seed)) as base:
        if vendor == "openai_chat":
            provider: OpenAIChat | AnthropicMessages | OllamaChat = OpenAIChat(
                model="m", base_url=base + "/v1"
            )
        elif vendor == "anthropic":
            provider = AnthropicMessages(model="m", base_url=base, api_key="k")
        else:
            provider = OllamaChat(model="m", base_url=base)
        result = await provider.generate(MESSAGES)
        await provider.aclose()
    if vendor == "ollama":  # ids are minted per run when the wire has none
        result = attrs.evolve(
            result,
            calls=[
                type(call)(want.id, call.name, call.arguments)
                for call, want in zip(result.calls, expected.calls, strict=True)
            ],
        )
    assert result == expected
    if name.startswith("no_usage"):
        assert result.usage is None
