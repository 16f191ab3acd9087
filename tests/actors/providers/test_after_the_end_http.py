"""What a server sends after a stream's final record never changes the call (issue 23, 002 G18),
through the real HTTP engine over loopback sockets: a trailing ``data: [DONE]`` after the
Responses API's ``response.completed``, records that would change the answer, junk that does not
decode, a stall and a cut after the end. The connection is still read to its end when the end
comes promptly, so it serves the next request.

Timing tests run on the mock clock; with real sockets it only jumps after the loop has been idle
a little while in real time, so in-flight loopback bytes are never mistaken for a stall.
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any, Literal

import h11
import pytest
import trio
import trio.testing

from actors import Agent, open_runtime
from actors.providers import (
    AnthropicMessages,
    HTTPProvider,
    OllamaChat,
    OpenAIChat,
    OpenAIResponses,
    RetryPolicy,
)
from actors.providers._http import AFTER_END_WAIT
from actors.testing._loopback import Exchange, LoopbackServer
from protocols import Delta, Message, ProviderResult, from_json

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
MESSAGES = [Message.user("hi")]
IDLE = 0.05  # mock-clock autojump threshold (real seconds) when real sockets are involved

#: What a script does after its pieces: end the body, stall with it open, or cut the connection.
Ending = Literal["end", "stall", "cut"]


class Replay(LoopbackServer):
    """Answers every request with 200, then ``pieces`` (one write each), then ``ending``; keeps
    connections alive when the body ended, and counts connections and requests."""

    kind = "replay server"

    def __init__(self, pieces: list[bytes], ending: Ending = "end", media: str = "sse") -> None:
        super().__init__()
        self.pieces = pieces
        self.ending = ending
        self.media = b"text/event-stream" if media == "sse" else b"application/x-ndjson"
        self.connections = 0
        self.requests = 0

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        exchange = Exchange(stream, 1 << 20)
        async with stream:
            while await exchange.read_request() is not None:
                self.requests += 1
                await exchange.send(
                    h11.Response(status_code=200, headers=[(b"content-type", self.media)])
                )
                for piece in self.pieces:
                    await exchange.send(h11.Data(data=piece))
                if self.ending == "stall":
                    await trio.sleep_forever()
                if self.ending == "cut":
                    return  # no end of the chunked body: the client sees a cut connection
                await exchange.send(h11.EndOfMessage())
                if not exchange.next_cycle():
                    return


VENDORS: dict[str, tuple[type[HTTPProvider], str, str, bytes]] = {
    # provider, fixture directory, transcript, what follows its end
    "openai_chat": (
        OpenAIChat,
        "openai_chat",
        "text",
        b'data: {"choices":[{"index":0,"delta":{"content":"AFTER"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":999,"completion_tokens":999}}\n\n'
        b'data: {"error":{"message":"late","type":"server_error"}}\n\n'
        b"data: {not json\n\ndata: [DONE]\n\n",
    ),
    "openai_responses": (
        OpenAIResponses,
        "openai_responses",
        "reasoning_text",
        b'data: {"type":"response.output_text.delta","output_index":0,"delta":"AFTER"}\n\n'
        b'data: {"type":"response.completed","response":{"usage":{"input_tokens":999}}}\n\n'
        b'data: {"type":"error","code":"server_error","message":"late"}\n\n'
        b"data: {not json\n\ndata: [DONE]\n\n",
    ),
    "anthropic": (
        AnthropicMessages,
        "anthropic",
        "text",
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"AFTER"}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
        b'"max_tokens"},"usage":{"output_tokens":999}}\n\n'
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'
        b"data: {not json\n\ndata: [DONE]\n\n",
    ),
    "ollama": (
        OllamaChat,
        "ollama",
        "text",
        b'"late text, never logged"\n'
        b'{"message":{"role":"assistant","content":"AFTER"},"done":false}\n'
        b'{"done":true,"done_reason":"length","prompt_eval_count":999,"eval_count":999}\n'
        b'{"error":"late"}\n'
        b"{not json\n[DONE]\n",
    ),
}


def transcript(directory: str, name: str) -> bytes:
    suffix = "ndjson" if directory == "ollama" else "sse"
    return (FIXTURES / directory / f"{name}.{suffix}").read_bytes()


def expected(directory: str, name: str) -> ProviderResult:
    data = json.loads((FIXTURES / directory / f"{name}.expected.json").read_text("utf-8"))
    return from_json(ProviderResult, data)


def provider_for(kind: type[HTTPProvider], server: Replay, **kwargs: Any) -> HTTPProvider:
    base = server.origin if kind is OllamaChat else f"{server.origin}/v1"
    return kind(model="m", base_url=base, api_key="sk-test", **kwargs)


async def call(provider: HTTPProvider) -> tuple[list[Delta], ProviderResult]:
    async with provider.stream(MESSAGES) as stream:
        deltas = [delta async for delta in stream]
    return deltas, stream.result


@pytest.mark.parametrize("split", [False, True], ids=["one write", "two writes"])
async def test_a_trailing_done_after_response_completed_does_not_fail_the_call(
    split: bool,
) -> None:
    data = transcript("openai_responses", "reasoning_text")
    done = b"data: [DONE]\n\n"
    pieces = [data, done] if split else [data + done]
    async with Replay(pieces) as server:
        provider = provider_for(OpenAIResponses, server, retry=RetryPolicy(retries=0))
        deltas, result = await call(provider)
        await provider.aclose()
    assert result == expected("openai_responses", "reasoning_text")
    assert "".join(d.text for d in deltas if d.channel == "content") == result.content


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_trailing_done_is_accepted_silently_after_every_format(
    vendor: str, caplog: pytest.LogCaptureFixture
) -> None:
    kind, directory, name, _ = VENDORS[vendor]
    done = b"[DONE]\n" if directory == "ollama" else b"data: [DONE]\n\n"
    media = "ndjson" if directory == "ollama" else "sse"
    pieces = [transcript(directory, name) + done, done]
    async with Replay(pieces, media=media) as server:
        provider = provider_for(kind, server, retry=RetryPolicy(retries=0))
        with caplog.at_level(logging.DEBUG):
            _, result = await call(provider)
        await provider.aclose()
    assert result == expected(directory, name)
    assert not [r for r in caplog.records if "after the end" in r.getMessage()]


async def test_an_agent_run_survives_a_trailing_done_after_response_completed() -> None:
    data = transcript("openai_responses", "reasoning_text")
    async with Replay([data + b"data: [DONE]\n\n"]) as server, open_runtime() as runtime:
        provider = provider_for(OpenAIResponses, server, retry=RetryPolicy(retries=0))
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("Tell me a story.")
        await provider.aclose()
    assert result.stop == "complete"
    assert not result.partial
    assert result.content == expected("openai_responses", "reasoning_text").content
    assert server.requests == 1  # nothing was retried


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("split", [False, True], ids=["one write", "own writes"])
async def test_what_follows_the_end_changes_nothing(
    vendor: str, split: bool, caplog: pytest.LogCaptureFixture
) -> None:
    kind, directory, name, after = VENDORS[vendor]
    data = transcript(directory, name)
    pieces = [data, *after.splitlines(keepends=True)] if split else [data + after]
    media = "ndjson" if directory == "ollama" else "sse"
    async with Replay(pieces, media=media) as server:
        provider = provider_for(kind, server, retry=RetryPolicy(retries=0))
        with caplog.at_level(logging.DEBUG):
            deltas, result = await call(provider)
        await provider.aclose()
    assert result == expected(directory, name)
    assert "AFTER" not in "".join(d.text for d in deltas)
    noted = [r for r in caplog.records if "after the end" in r.getMessage()]
    assert [r.levelno for r in noted] == [logging.DEBUG]  # once, at debug level
    assert "late" not in noted[0].getMessage()  # its kind, never its text


async def test_a_stall_after_the_end_ends_the_call_with_its_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = IDLE
    data = transcript("openai_responses", "reasoning_text")
    async with Replay([data], ending="stall") as server:
        provider = provider_for(OpenAIResponses, server, retry=RetryPolicy(retries=0))
        start = trio.current_time()
        _, result = await call(provider)
        waited = trio.current_time() - start
        await provider.aclose()
    assert result == expected("openai_responses", "reasoning_text")
    assert waited < provider.timeouts.idle  # never held for the idle timeout
    assert waited >= AFTER_END_WAIT  # the rest of the body was waited for, briefly


@pytest.mark.parametrize("vendor", ["openai_responses", "anthropic", "ollama"])
async def test_a_cut_after_the_end_ends_the_call_with_its_result(vendor: str) -> None:
    kind, directory, name, _ = VENDORS[vendor]
    media = "ndjson" if directory == "ollama" else "sse"
    async with Replay([transcript(directory, name)], ending="cut", media=media) as server:
        provider = provider_for(kind, server, retry=RetryPolicy(retries=0))
        _, result = await call(provider)
        await provider.aclose()
    assert result == expected(directory, name)


async def test_a_body_that_ends_after_a_trailing_done_serves_the_next_request() -> None:
    data = transcript("openai_responses", "reasoning_text")
    async with Replay([data, b"data: [DONE]\n\n"]) as server:
        provider = provider_for(OpenAIResponses, server, retry=RetryPolicy(retries=0))
        first = await call(provider)
        second = await call(provider)
        await provider.aclose()
    assert first == second
    assert (server.requests, server.connections) == (2, 1)
