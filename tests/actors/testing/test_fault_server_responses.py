"""FaultProviderServer on the Responses API wire, observed with raw httpx: each step's shape."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from actors.testing import FaultProviderServer
from protocols import SSEDecoder, SSEEvent, loads
from protocols.faults import responses_text_event


async def events(plan: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(SSE event name, parsed data) of the one response the server gives to a POST."""
    async with (
        FaultProviderServer(plan, wire="openai-responses") as server,
        httpx.AsyncClient() as client,
    ):
        response = await client.post(server.url, json={"model": "m", "input": "hi"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    decoded = SSEDecoder().feed(response.content)
    return [(item.event, loads(item.data)) for item in decoded if isinstance(item, SSEEvent)]


def kinds(received: list[tuple[str, dict[str, Any]]]) -> list[str]:
    for name, data in received:
        assert data["type"] == name
    return [name for name, _ in received]


OPENING = ["response.created", "response.output_item.added", "response.content_part.added"]


async def test_pass_is_a_complete_response_with_usage() -> None:
    received = await events([{"kind": "pass", "text": "hello"}])
    assert kinds(received) == [*OPENING, "response.output_text.delta", "response.completed"]
    assert received[3][1]["delta"] == "hello"
    response = received[-1][1]["response"]
    assert response["status"] == "completed"
    assert response["usage"] == {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}


async def test_usage_missing_completes_with_null_usage() -> None:
    received = await events([{"kind": "usage-missing"}])
    assert kinds(received)[-1] == "response.completed"
    assert received[-1][1]["response"]["usage"] is None


@pytest.mark.parametrize("text", ["", "partial"])
async def test_stream_error_ends_with_an_error_event(text: str) -> None:
    received = await events([{"kind": "stream-error", "message": "boom", "text": text}])
    expected = [*OPENING, *(["response.output_text.delta"] if text else []), "error"]
    assert kinds(received) == expected
    assert received[-1][1] == {
        "type": "error",
        "code": "server_error",
        "message": "boom",
        "param": None,
    }


async def test_bad_json_is_followed_by_the_terminal_event() -> None:
    async with (
        FaultProviderServer([{"kind": "bad-json"}], wire="openai-responses") as server,
        httpx.AsyncClient() as client,
    ):
        body = (await client.post(server.url, json={})).content
    assert body.startswith(b"data: {not-json}\n\n")
    assert b"event: response.completed\n" in body
    assert b"[DONE]" not in body


async def test_stream_cut_sends_the_first_bytes_of_a_text_event() -> None:
    after = 40
    received = bytearray()

    async def read_all(response: httpx.Response) -> None:
        async for chunk in response.aiter_raw():
            received.extend(chunk)

    async with (
        FaultProviderServer(
            [{"kind": "stream-cut", "afterBytes": after}], wire="openai-responses"
        ) as server,
        httpx.AsyncClient() as client,
        client.stream("POST", server.url, json={}) as response,
    ):
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            await read_all(response)
    assert bytes(received) == responses_text_event("partial response")[:after]


async def test_http_errors_have_the_same_body_on_both_wires() -> None:
    bodies = []
    for wire in ("openai-chat", "openai-responses"):
        plan = [{"kind": "http-error", "status": 429, "message": "slow down"}]
        async with FaultProviderServer(plan, wire=wire) as server, httpx.AsyncClient() as client:  # type: ignore[arg-type]
            response = await client.post(server.url, json={})
        assert response.status_code == 429
        bodies.append(response.json())
    assert bodies[0] == bodies[1] == {"error": {"message": "slow down"}}
