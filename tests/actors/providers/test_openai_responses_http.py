"""OpenAIResponses over real loopback sockets: against the Simulator's ``/v1/responses``, against
the FaultProviderServer speaking the Responses wire, and under a real Agent with tools.

Timing tests run on the mock clock; with real sockets it only jumps after the loop has been idle
a little while in real time, so in-flight loopback bytes are never mistaken for a stall.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import trio.testing

from actors import Agent, OpenAIResponses, open_runtime, tool
from actors.providers import RetryEvent, RetryPolicy, Timeouts
from actors.testing import FaultProviderServer, Simulator
from protocols import (
    ConfigError,
    Delta,
    FinishReason,
    Message,
    ProviderError,
    ProviderOptions,
    ToolDefinition,
    Usage,
    ValidationError,
)
from protocols.faults import responses_text_event
from protocols.simulator import answer
from protocols.wire import openai_responses

IDLE = 0.05  # mock-clock autojump threshold (real seconds) when real sockets are involved
MESSAGES = [Message.user("hi")]
RETRY = RetryPolicy(retries=3, initial=0.5, maximum=1)
ADD = ToolDefinition(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def responses(server: FaultProviderServer, **kwargs: Any) -> OpenAIResponses:
    return OpenAIResponses(model="m", base_url=server.base_url, api_key="sk-fault-key", **kwargs)


async def drain(provider: OpenAIResponses, seen: list[Delta] | None = None) -> Any:
    seen = [] if seen is None else seen
    async with provider.stream(MESSAGES) as stream:
        async for delta in stream:
            seen.append(delta)
    return stream.result


# --------------------------------------------------------------------------- the adapter


def test_defaults_come_from_the_environment_and_the_key_stays_out_of_repr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret-123456")
    provider = OpenAIResponses(model="gpt-5-mini")
    assert provider.url == "http://127.0.0.1:9/v1/responses"
    assert provider.auth_headers() == {"authorization": "Bearer sk-env-secret-123456"}
    assert "sk-env" not in repr(provider)
    assert provider.name == "openai-responses"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIResponses(model="x").url == "https://api.openai.com/v1/responses"


def test_a_request_it_cannot_express_is_refused_before_sending() -> None:
    provider = OpenAIResponses(model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    with pytest.raises(ConfigError, match="stop"):
        provider.stream(MESSAGES, options=ProviderOptions(stop=["END"]))
    with pytest.raises(ConfigError, match="previous_response_id"):
        provider.stream(MESSAGES, options=ProviderOptions(extra={"previous_response_id": "r"}))


# --------------------------------------------------------------------------- the simulator


async def test_a_streamed_answer_from_the_simulator() -> None:
    async with Simulator() as simulator:
        provider = simulator.openai_responses()
        async with provider.stream([Message.user("Say hello")]) as stream:
            deltas = [delta async for delta in stream]
        await provider.aclose()
        request = simulator.requests[-1]
    assert request.vendor == "openai-responses"
    assert [delta.text for delta in deltas] == ["You", " said:", " Say", " hello"]
    sim = answer(request)
    assert stream.result.content == sim.text
    assert stream.result.usage == Usage(
        sim.usage.prompt, sim.usage.completion, sim.usage.total, cached=0, reasoning=0
    )
    assert stream.result.finish is FinishReason.STOP


async def test_thinking_tool_calls_and_the_reasoning_sent_back() -> None:
    sent: list[dict[str, Any]] = []
    async with Simulator() as simulator:
        provider = simulator.openai_responses()
        real_encode = provider.encode

        def spy(*args: Any) -> dict[str, Any]:
            body = real_encode(*args)
            sent.append(body)
            return body

        provider.encode = spy  # type: ignore[method-assign,assignment]
        question = Message.user("What is 19 + 23?")
        think = ProviderOptions(think=True)
        thinking: list[str] = []
        async with provider.stream([question], tools=[ADD], options=think) as stream:
            thinking.extend([delta.text async for delta in stream if delta.channel == "thinking"])
        first = stream.result
        assert "".join(thinking) == first.thinking == 'I will call add({"a":19,"b":23}).'
        (call,) = first.calls
        assert (call.name, call.arguments, first.finish) == (
            "add",
            {"a": 19, "b": 23},
            FinishReason.TOOL_CALLS,
        )
        turn = Message.assistant(calls=[call], continuation=first.continuation)
        history = [question, turn, Message.tool(call.id, "add", "42")]
        second = await provider.generate(history, tools=[ADD], options=think)
        await provider.aclose()
    assert second.content == "The answer is 42."
    replayed = sent[1]["input"]
    assert [item["type"] for item in replayed] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert replayed[1]["encrypted_content"]
    assert replayed[2]["call_id"] == call.id
    assert sent[1]["store"] is False
    assert "previous_response_id" not in sent[1]


async def test_an_output_cap_cuts_with_finish_length() -> None:
    async with Simulator() as simulator:
        provider = simulator.openai_responses()
        result = await provider.generate(
            [Message.user("count to 100")], options=ProviderOptions(max_tokens=4)
        )
        await provider.aclose()
    assert (result.content, result.finish) == ("1 2 3 4", FinishReason.LENGTH)


async def test_a_wrong_key_is_a_401_that_never_shows_the_key() -> None:
    async with Simulator(api_key="sk-right-key-0123456789") as simulator:
        provider = simulator.openai_responses(api_key="sk-wrong-key-9876543210")
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    assert (failure.value.status, failure.value.code) == (401, "auth")
    assert "sk-wrong" not in str(failure.value)
    assert "sk-wrong" not in repr(failure.value)


async def test_a_non_streamed_request_reads_like_the_stream() -> None:
    history = [Message.user("What is 3 + 4?")]
    body = openai_responses.encode_request(
        history, model="simulator", tools=[ADD], options=ProviderOptions(think=True), stream=False
    )
    async with Simulator() as simulator, httpx.AsyncClient() as client:
        response = await client.post(simulator.openai_base_url + "/responses", json=body)
        provider = simulator.openai_responses()
        streamed = await provider.generate(
            history, tools=[ADD], options=ProviderOptions(think=True)
        )
        await provider.aclose()
    assert response.status_code == 200
    whole = openai_responses.read_response(response.json())
    assert whole.calls[0].arguments == streamed.calls[0].arguments == {"a": 3, "b": 4}
    assert (whole.thinking, whole.finish, whole.usage) == (
        streamed.thinking,
        streamed.finish,
        streamed.usage,
    )


async def test_an_agent_runs_tool_rounds_against_the_simulator() -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = simulator.openai_responses()
        agent = await Agent.start(runtime, provider, tools=[add], think=True)
        result = await agent.generate("What is 19 + 23?")
        again = await agent.generate("What is 1 + 2 and 3 + 4?")
        stored = await agent.conversation.messages()
        await provider.aclose()
        requests = simulator.requests
    assert result.content == "The answer is 42."
    assert result.turns == 2
    assert result.usage is not None
    assert result.usage.total > 0
    assert again.content == "The tools returned: 3, 7."
    assert len(requests) == 4
    assert {request.vendor for request in requests} == {"openai-responses"}
    # The second question's first request carried the whole first exchange.
    assert [turn.role for turn in requests[2].turns] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    calling = [message for message in stored if message.calls]
    assert calling
    assert all(message.continuation[openai_responses.NAMESPACE]["reasoning"] for message in calling)


# --------------------------------------------------------------------------- the fault server


async def test_the_fault_server_refuses_an_unknown_wire() -> None:
    with pytest.raises(ValidationError, match="wire"):
        FaultProviderServer([{"kind": "pass"}], wire="anthropic")  # type: ignore[arg-type]


async def test_pass_in_the_responses_shape() -> None:
    plan: list[dict[str, Any]] = [{"kind": "pass", "text": "hello"}]
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        assert server.url.endswith("/v1/responses")
        provider = responses(server)
        seen: list[Delta] = []
        result = await drain(provider, seen)
        await provider.aclose()
    assert seen == [Delta("content", "hello")]
    assert result.usage == Usage(1, 1, 2)
    assert result.finish is FinishReason.STOP


async def test_usage_missing_is_unknown_not_zero() -> None:
    async with FaultProviderServer([{"kind": "usage-missing"}], wire="openai-responses") as server:
        provider = responses(server)
        result = await drain(provider)
        await provider.aclose()
    assert (result.content, result.usage) == ("ok", None)


async def test_429_then_503_then_pass_succeeds_after_two_retries(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    retries: list[RetryEvent] = []
    plan: list[dict[str, Any]] = [
        {"kind": "http-error", "status": 429, "message": "Rate limit reached for gpt-5"},
        {"kind": "http-error", "status": 503},
        {"kind": "pass", "text": "recovered"},
    ]
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(server, retry=RETRY, on_retry=retries.append)
        result = await provider.generate(MESSAGES)
        assert server.calls() == 3
        await provider.aclose()
    assert result.content == "recovered"
    assert [(event.attempt, event.code, event.status) for event in retries] == [
        (1, "rate_limit", 429),
        (2, "server_error", 503),
    ]


async def test_a_400_context_error_is_not_retried() -> None:
    message = "Your input exceeds the context window of this model."
    plan: list[dict[str, Any]] = [
        {"kind": "http-error", "status": 400, "message": message},
        {"kind": "pass"},
    ]
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(server, retry=RETRY)
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        assert server.calls() == 1
        await provider.aclose()
    assert (failure.value.code, failure.value.retryable) == ("context_overflow", False)


async def test_a_cut_before_any_delta_is_retried(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = IDLE
    plan: list[dict[str, Any]] = [
        {"kind": "stream-cut", "afterBytes": 30},
        {"kind": "pass", "text": "again"},
    ]
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(server, retry=RETRY)
        seen: list[Delta] = []
        result = await drain(provider, seen)
        assert server.calls() == 2
        await provider.aclose()
    assert seen == [Delta("content", "again")]
    assert result.content == "again"


async def test_a_cut_after_a_delta_fails_with_the_partial() -> None:
    after = len(responses_text_event("partial response")) + 5  # one whole event, then the cut
    plan: list[dict[str, Any]] = [{"kind": "stream-cut", "afterBytes": after}, {"kind": "pass"}]
    seen: list[Delta] = []
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(server, retry=RETRY)
        with pytest.raises(ProviderError) as failure:
            await drain(provider, seen)
        assert server.calls() == 1
        await provider.aclose()
    assert seen == [Delta("content", "partial response")]
    assert failure.value.partial is not None
    assert failure.value.partial.content == "partial response"


async def test_an_error_event_mid_stream_fails_as_a_provider_error() -> None:
    plan: list[dict[str, Any]] = [
        {"kind": "stream-error", "message": "The server had an error", "text": "Once"}
    ]
    seen: list[Delta] = []
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(server, retry=RetryPolicy(retries=0))
        with pytest.raises(ProviderError, match="The server had an error") as failure:
            await drain(provider, seen)
        assert server.calls() == 1
        await provider.aclose()
    assert (failure.value.code, failure.value.vendor_code) == ("server_error", "server_error")
    assert failure.value.retryable
    # The text and the error came in one write: whether the text was shown before the error was
    # read depends on how the socket delivered it; a shown text is always in the partial.
    assert seen in ([], [Delta("content", "Once")])
    if seen:
        assert failure.value.partial is not None
        assert failure.value.partial.content == "Once"


async def test_an_error_event_before_any_delta_is_retried(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    plan: list[dict[str, Any]] = [{"kind": "stream-error"}, {"kind": "pass", "text": "fine"}]
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(server, retry=RETRY)
        result = await provider.generate(MESSAGES)
        assert server.calls() == 2
        await provider.aclose()
    assert result.content == "fine"


async def test_bad_json_is_surfaced_never_skipped() -> None:
    async with FaultProviderServer([{"kind": "bad-json"}], wire="openai-responses") as server:
        provider = responses(server, retry=RETRY)
        with pytest.raises(ProviderError, match="invalid JSON") as failure:
            await provider.generate(MESSAGES)
        assert server.calls() == 1
        await provider.aclose()
    assert failure.value.code == "json"


async def test_slow_streams_within_the_idle_timeout(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = IDLE
    plan: list[dict[str, Any]] = [{"kind": "slow", "text": "one two three", "tokensPerSecond": 1}]
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(server, timeouts=Timeouts(idle=1.5))
        start = trio.current_time()
        seen: list[Delta] = []
        result = await drain(provider, seen)
        elapsed = trio.current_time() - start
        await provider.aclose()
    assert [delta.text for delta in seen] == ["one ", "two ", "three"]
    assert result.usage is None
    assert elapsed >= 3


async def test_a_late_first_byte_times_out_then_answers(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    retries: list[RetryEvent] = []
    plan: list[dict[str, Any]] = [
        {"kind": "timeout-before-first-byte", "milliseconds": 3000},
        {"kind": "pass", "text": "on time"},
    ]
    async with FaultProviderServer(plan, wire="openai-responses") as server:
        provider = responses(
            server, timeouts=Timeouts(first_event=1), retry=RETRY, on_retry=retries.append
        )
        result = await provider.generate(MESSAGES)
        await provider.aclose()
    assert result.content == "on time"
    assert [event.code for event in retries] == ["timeout"]


async def test_the_chat_wire_is_still_the_default() -> None:
    async with FaultProviderServer([{"kind": "pass"}]) as server:
        assert server.wire == "openai-chat"
        assert server.url.endswith("/v1/chat/completions")
        async with httpx.AsyncClient() as client:
            body = (await client.post(server.url, json={})).content
    assert body.endswith(b"data: [DONE]\n\n")
    assert b"response.completed" not in body
