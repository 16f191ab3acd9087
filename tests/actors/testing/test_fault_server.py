"""FaultProviderServer over real loopback sockets, observed with a real HTTP client (httpx).

These tests pin the server's wire behaviour for each step kind. How the provider engine reacts
to each (retries, truncation errors, idle timeouts) is tested with the engine.
"""

from __future__ import annotations

import httpx
import pytest
import trio
import trio.testing

from actors.testing import FaultProviderServer
from protocols import SSEDecoder, SSEEvent, ValidationError, loads
from protocols.faults import text_event

# Timing tests run on a mock clock; with real sockets, only jump once the loop has been idle a
# little while in real time, so in-flight loopback bytes are never mistaken for a stall.
IDLE = 0.05


def events_of(body: bytes) -> list[str]:
    return [item.data for item in SSEDecoder().feed(body) if isinstance(item, SSEEvent)]


async def post(client: httpx.AsyncClient, server: FaultProviderServer) -> httpx.Response:
    return await client.post(server.url, json={"model": "m", "messages": []})


async def test_pass_streams_a_complete_answer_with_usage() -> None:
    async with FaultProviderServer([{"kind": "pass"}]) as server, httpx.AsyncClient() as client:
        response = await post(client, server)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["transfer-encoding"] == "chunked"
    events = events_of(response.content)
    assert loads(events[0])["choices"][0]["delta"] == {"content": "ok"}
    assert loads(events[1])["choices"][0]["finish_reason"] == "stop"
    assert loads(events[2])["usage"]["total_tokens"] == 2
    assert events[3] == "[DONE]"
    assert len(events) == 4


async def test_usage_missing_is_complete_but_without_usage() -> None:
    plan = [{"kind": "usage-missing", "text": "hi"}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        events = events_of((await post(client, server)).content)
    assert [loads(e)["choices"][0]["delta"] for e in events[:2]] == [{"content": "hi"}, {}]
    assert events[2] == "[DONE]"
    assert not any("usage" in event for event in events)


async def test_connection_refused_closes_without_a_status_line() -> None:
    plan = [{"kind": "connection-refused"}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        # (A body-less request: httpx leaves a request body's async generator unfinalized when
        # the peer hangs up before reading it, which the suite's warning filter would flag.)
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await client.get(server.url)
        assert server.calls() == 1  # refusals count


@pytest.mark.parametrize("after", [0, 1, 24, 60, 10_000])
async def test_stream_cut_sends_exactly_the_partial_bytes_then_closes(after: int) -> None:
    plan = [{"kind": "stream-cut", "afterBytes": after}]
    received = bytearray()

    async def read_all(response: httpx.Response) -> None:
        async for chunk in response.aiter_raw():
            received.extend(chunk)

    async with (
        FaultProviderServer(plan) as server,
        httpx.AsyncClient() as client,
        client.stream("POST", server.url, json={}) as response,
    ):
        assert response.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            await read_all(response)
    assert bytes(received) == text_event("partial response")[:after]


async def test_http_error_returns_the_status_and_a_json_error() -> None:
    plan = [{"kind": "http-error", "status": 429}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        response = await post(client, server)
    assert response.status_code == 429
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": {"message": "fault 429"}}


async def test_http_error_carries_a_given_message() -> None:
    plan = [{"kind": "http-error", "status": 401, "message": "bad key sk-123"}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        response = await post(client, server)
    assert response.status_code == 401
    assert response.json() == {"error": {"message": "bad key sk-123"}}


async def test_bad_json_sends_a_given_record() -> None:
    plan = [{"kind": "bad-json", "record": "{oops sk-123"}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        response = await post(client, server)
    assert response.content == b"data: {oops sk-123\n\ndata: [DONE]\n\n"


@pytest.mark.parametrize("text", ["", "partial"])
async def test_stream_error_answers_200_then_an_error_record(text: str) -> None:
    plan = [{"kind": "stream-error", "message": "quota exceeded", "text": text}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        response = await post(client, server)
    assert response.status_code == 200
    events = events_of(response.content)
    if text:
        assert loads(events.pop(0))["choices"][0]["delta"] == {"content": text}
    assert [loads(event) for event in events] == [
        {"error": {"message": "quota exceeded", "type": "server_error", "code": None}}
    ]


async def test_bad_json_sends_an_unparsable_record_then_done() -> None:
    async with FaultProviderServer([{"kind": "bad-json"}]) as server, httpx.AsyncClient() as client:
        response = await post(client, server)
    assert response.status_code == 200
    assert response.content == b"data: {not-json}\n\ndata: [DONE]\n\n"


async def test_timeout_before_first_byte_is_silent_then_late(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    plan = [{"kind": "timeout-before-first-byte", "milliseconds": 2500}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient(timeout=None) as client:
        start = trio.current_time()
        async with client.stream("POST", server.url, json={}) as response:
            headers_at = trio.current_time() - start
            body = await response.aread()
    assert headers_at >= 2.5  # not even the status line before the delay
    events = events_of(body)
    assert loads(events[0])["choices"][0]["delta"] == {"content": "late"}
    assert loads(events[2])["usage"]["total_tokens"] == 2


async def test_slow_sends_one_token_per_tick_without_usage(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    plan = [{"kind": "slow", "text": "one two three", "tokensPerSecond": 2}]
    arrivals: list[tuple[float, str]] = []
    async with FaultProviderServer(plan) as server, httpx.AsyncClient(timeout=None) as client:
        start = trio.current_time()
        async with client.stream("POST", server.url, json={}) as response:
            decoder = SSEDecoder()
            async for chunk in response.aiter_bytes():
                for item in decoder.feed(chunk):
                    if isinstance(item, SSEEvent):
                        arrivals.append((trio.current_time() - start, item.data))
    contents = [loads(data)["choices"][0]["delta"].get("content") for _, data in arrivals[:-1]]
    assert contents == ["one ", "two ", "three", None]
    assert arrivals[-1][1] == "[DONE]"
    times = [at for at, _ in arrivals[:3]]
    assert times[0] >= 0.5  # the first token waits one tick
    assert times[1] - times[0] >= 0.5
    assert times[2] - times[1] >= 0.5
    assert not any("usage" in data for _, data in arrivals)


async def test_the_last_step_repeats_and_calls_count_every_request() -> None:
    plan = [{"kind": "http-error", "status": 503}, {"kind": "pass", "text": "again"}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        statuses = [(await post(client, server)).status_code for _ in range(4)]
        assert server.calls() == 4
    assert statuses == [503, 200, 200, 200]


async def test_a_cut_then_a_pass_recovers_on_the_second_request() -> None:
    plan = [{"kind": "stream-cut", "afterBytes": 24}, {"kind": "pass", "text": "recovered"}]
    async with FaultProviderServer(plan) as server, httpx.AsyncClient() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await post(client, server)
        response = await post(client, server)
        assert server.calls() == 2
    assert "recovered" in response.text


async def test_any_method_and_path_is_served_and_the_body_ignored() -> None:
    async with FaultProviderServer([{"kind": "pass"}]) as server, httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{server.port}/anything/else")
        upload = await client.put(server.url, content=b"x" * 200_000)
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert response.status_code == 200
    assert upload.status_code == 200


async def test_leaving_the_block_stops_everything() -> None:
    root = trio.lowlevel.current_root_task()

    def tasks(task: trio.lowlevel.Task) -> int:
        return 1 + sum(tasks(child) for n in task.child_nurseries for child in n.child_tasks)

    before = tasks(root)
    server = FaultProviderServer([{"kind": "slow", "text": "never finishes", "tokensPerSecond": 1}])
    async with server, httpx.AsyncClient() as client:
        port = server.port
        # A handler is mid-response (sleeping between tokens) when the block ends.
        async with client.stream("POST", server.url, json={}) as response:
            assert response.status_code == 200
    assert tasks(root) == before
    with pytest.raises(OSError, match="connect"):  # nothing listens any more
        await trio.open_tcp_stream("127.0.0.1", port)
    await server.aclose()  # idempotent
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.port


async def test_an_empty_or_bad_plan_is_refused_before_serving() -> None:
    with pytest.raises(ValidationError, match="at least one step"):
        FaultProviderServer([])
    with pytest.raises(ValidationError, match="unknown key"):
        FaultProviderServer([{"kind": "pass", "speed": 3}])
