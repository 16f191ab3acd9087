"""GeminiChat over real loopback sockets: against the Simulator's ``streamGenerateContent`` and
``generateContent``, against the FaultProviderServer speaking the Gemini wire, and under a real
Agent whose tool rounds need the thought signatures sent back (the simulator, like Gemini 3,
refuses a replayed call without its signature). Also Azure OpenAI's URL shapes against the
simulator: a deployment path with ``api-version`` and the ``api-key`` header, and the v1 path.

Timing tests run on the mock clock; with real sockets it only jumps after the loop has been idle
a little while in real time, so in-flight loopback bytes are never mistaken for a stall.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import trio.testing

from actors import GeminiChat, OpenAIChat, OpenAIResponses, open_runtime, tool
from actors.providers import RetryEvent, RetryPolicy, Timeouts, provider_from_string
from actors.testing import FaultProviderServer, Simulator
from protocols import (
    ConfigError,
    Delta,
    FinishReason,
    Message,
    ProviderError,
    ProviderOptions,
    ToolDefinition,
)
from protocols.faults import gemini_text_event
from protocols.wire import gemini

IDLE = 0.05  # mock-clock autojump threshold (real seconds) when real sockets are involved
MESSAGES = [Message.user("hi")]
RETRY = RetryPolicy(retries=3, initial=0.5, maximum=1)
KEY = "AIzaSy-test-key-0123456789"
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


def faulty(server: FaultProviderServer, **kwargs: Any) -> GeminiChat:
    return GeminiChat(model="gemini-2.5-flash", base_url=server.base_url, api_key=KEY, **kwargs)


async def drain(provider: GeminiChat, seen: list[Delta] | None = None, **kwargs: Any) -> Any:
    seen = [] if seen is None else seen
    async with provider.stream(kwargs.pop("messages", MESSAGES), **kwargs) as stream:
        async for delta in stream:
            seen.append(delta)
    return stream.result


# --------------------------------------------------------------------------- the adapter


def test_the_key_comes_from_the_environment_and_stays_out_of_repr_and_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini-variable")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    provider = GeminiChat(model="gemini-2.5-flash")
    assert provider.auth_headers() == {"x-goog-api-key": "from-gemini-variable"}
    assert provider.url == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
        ":streamGenerateContent?alt=sse"
    )
    assert "from-gemini" not in repr(provider)
    assert "from-gemini" not in provider.url
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google-variable")  # Google's SDK's order
    assert GeminiChat(model="m").auth_headers() == {"x-goog-api-key": "from-google-variable"}
    spec = provider_from_string("gemini:gemini-2.5-pro")
    assert isinstance(spec, GeminiChat)
    assert spec.auth_headers() == {"x-goog-api-key": "from-google-variable"}


def test_bad_construction_is_refused_before_any_call() -> None:
    with pytest.raises(ConfigError, match="model name"):
        GeminiChat(model="../../admin", api_key="k")
    with pytest.raises(ConfigError, match="api_version"):
        GeminiChat(model="m", api_key="k", api_version="v1/../x")
    with pytest.raises(ConfigError, match=r"(?i)x-goog-api-key"):
        GeminiChat(model="m", api_key="k", headers={"X-Goog-Api-Key": "other"})
    provider = GeminiChat(model="tunedModels/mine", api_key="k", api_version="v1")
    assert provider.url.endswith("/v1/tunedModels/mine:streamGenerateContent?alt=sse")


# --------------------------------------------------------------------------- simulator


async def test_a_streamed_answer_with_its_usage() -> None:
    async with Simulator(api_key=KEY) as simulator:
        provider = simulator.gemini(model="gemini-2.5-flash")
        seen: list[Delta] = []
        result = await drain(provider, seen, messages=[Message.user("count to 4")])
        await provider.aclose()
        request = simulator.requests[-1]
    assert [delta.text for delta in seen] == ["1", " 2", " 3", " 4"]
    assert result.content == "1 2 3 4"
    assert result.finish is FinishReason.STOP
    assert result.model == "gemini-2.5-flash"
    assert result.usage is not None
    assert result.usage.completion == 4
    assert (request.vendor, request.model, request.stream) == ("gemini", "gemini-2.5-flash", True)


async def test_thinking_parallel_calls_and_the_signature_sent_back() -> None:
    async with Simulator() as simulator:
        provider = simulator.gemini()
        question = Message.user("What is 19 + 23 and 1 + 2?")
        options = ProviderOptions(reasoning_effort="low")
        first = await drain(provider, messages=[question], tools=[ADD], options=options)
        assert first.thinking.startswith("I will call add")
        assert first.finish is FinishReason.TOOL_CALLS
        assert [call.arguments for call in first.calls] == [{"a": 19, "b": 23}, {"a": 1, "b": 2}]
        assert len({call.id for call in first.calls}) == 2  # minted: Gemini gave none
        assert first.usage is not None
        assert first.usage.reasoning is not None
        assert 0 < first.usage.reasoning <= first.usage.completion
        assert simulator.requests[-1].settings.reasoning_effort == "low"
        signed = first.continuation["gemini"]["parts"]
        assert [record["call"] for record in signed] == [0]
        history = [
            question,
            Message.assistant(first.content, calls=first.calls, continuation=first.continuation),
            *(Message.tool(call.id, call.name, "42") for call in first.calls),
        ]
        second = await drain(provider, messages=history, tools=[ADD])
        assert second.content == "The tools returned: 42, 42."
        # The same history without the continuation is what Gemini 3 refuses, and so does the
        # simulator: the signature is what made the round trip work.
        history[1] = Message.assistant(first.content, calls=first.calls)
        with pytest.raises(ProviderError) as refused:
            await drain(provider, messages=history, tools=[ADD])
        await provider.aclose()
    assert refused.value.status == 400
    assert refused.value.vendor_type == "INVALID_ARGUMENT"
    assert "thought_signature" in refused.value.message


async def test_an_agent_runs_tool_rounds_keeping_the_signatures() -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = await runtime.connect(simulator.gemini())
        agent = await runtime.agent(provider, tools=[add], limit=4)
        result = await agent.generate("What is 19 + 23?", think=True)
    assert result.content == "The answer is 42."
    assert result.stop == "complete"
    assert len(simulator.requests) == 2
    assert simulator.requests[-1].turns[-1].role == "tool"


async def test_an_output_cap_and_the_content_filter() -> None:
    async with Simulator(content_filter=["secret"]) as simulator:
        provider = simulator.gemini()
        capped = await drain(
            provider, messages=[Message.user("count to 9")], options=ProviderOptions(max_tokens=3)
        )
        filtered = await drain(provider, messages=[Message.user("tell the secret now")])
        await provider.aclose()
    assert (capped.content, capped.finish) == ("1 2 3", FinishReason.LENGTH)
    assert filtered.finish is FinishReason.CONTENT_FILTER
    assert "secret" not in filtered.content


async def test_a_wrong_key_is_a_401_that_never_shows_the_key() -> None:
    async with Simulator(api_key="the-right-key") as simulator:
        provider = simulator.gemini(api_key=KEY)
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    assert (failure.value.code, failure.value.status) == ("auth", 401)
    assert failure.value.vendor_type == "UNAUTHENTICATED"
    assert KEY not in str(failure.value)
    assert KEY not in repr(failure.value)


async def test_generate_content_whole_reads_as_the_stream() -> None:
    async with Simulator() as simulator:
        provider = simulator.gemini()
        messages = [Message.user("What is 2 + 3?")]
        options = ProviderOptions(think=True)
        streamed = await drain(provider, messages=messages, tools=[ADD], options=options)
        body = provider.encode(messages, [ADD], options)
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{simulator.base_url}/v1beta/models/simulator:generateContent", json=body
            )
        await provider.aclose()
        assert simulator.requests[-1].stream is False
    assert response.status_code == 200
    whole = gemini.read_response(response.content)
    assert (whole.content, whole.thinking, whole.finish) == (
        streamed.content,
        streamed.thinking,
        streamed.finish,
    )
    assert [(c.name, c.arguments) for c in whole.calls] == [
        (c.name, c.arguments) for c in streamed.calls
    ]
    assert whole.usage == streamed.usage

    def shape(records: list[dict[str, Any]]) -> list[dict[str, Any]]:  # signatures vary by seq
        assert all(record["thoughtSignature"] for record in records)
        return [{k: v for k, v in record.items() if k != "thoughtSignature"} for record in records]

    assert shape(whole.continuation["gemini"]["parts"]) == shape(
        streamed.continuation["gemini"]["parts"]
    )


# --------------------------------------------------------------------------- fault server


async def test_pass_in_the_gemini_shape_and_usage_missing() -> None:
    async with FaultProviderServer([{"kind": "pass", "text": "hello"}], wire="gemini") as server:
        assert server.url.endswith(":streamGenerateContent?alt=sse")
        provider = faulty(server)
        result = await drain(provider)
        await provider.aclose()
    assert result.content == "hello"
    assert result.usage is not None
    assert (result.usage.prompt, result.usage.completion) == (1, 1)
    async with FaultProviderServer([{"kind": "usage-missing"}], wire="gemini") as server:
        provider = faulty(server)
        result = await drain(provider)
        await provider.aclose()
    assert (result.content, result.usage) == ("ok", None)


async def test_429_then_503_then_pass_succeeds_after_two_retries(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    retries: list[RetryEvent] = []
    plan: list[dict[str, Any]] = [
        {"kind": "http-error", "status": 429, "message": "Resource has been exhausted."},
        {"kind": "http-error", "status": 503, "message": "The model is overloaded."},
        {"kind": "pass", "text": "recovered"},
    ]
    async with FaultProviderServer(plan, wire="gemini") as server:
        provider = faulty(server, retry=RETRY, on_retry=retries.append)
        result = await provider.generate(MESSAGES)
        assert server.calls() == 3
        await provider.aclose()
    assert result.content == "recovered"
    assert [(event.attempt, event.code, event.status) for event in retries] == [
        (1, "rate_limit", 429),
        (2, "server_error", 503),
    ]


async def test_a_400_context_error_is_not_retried_and_keeps_gemini_s_labels() -> None:
    message = "The input token count (1200000) exceeds the maximum number of tokens allowed."
    plan: list[dict[str, Any]] = [
        {"kind": "http-error", "status": 400, "message": message},
        {"kind": "pass"},
    ]
    async with FaultProviderServer(plan, wire="gemini") as server:
        provider = faulty(server, retry=RETRY)
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        assert server.calls() == 1
        await provider.aclose()
    assert (failure.value.code, failure.value.retryable) == ("context_overflow", False)
    assert (failure.value.vendor_type, failure.value.vendor_code) == ("INVALID_ARGUMENT", "400")


async def test_a_cut_after_a_delta_fails_with_the_partial() -> None:
    after = len(gemini_text_event("partial response")) + 5  # one whole event, then the cut
    plan: list[dict[str, Any]] = [{"kind": "stream-cut", "afterBytes": after}, {"kind": "pass"}]
    async with FaultProviderServer(plan, wire="gemini") as server:
        provider = faulty(server, retry=RETRY)
        seen: list[Delta] = []
        with pytest.raises(ProviderError) as failure:
            await drain(provider, seen)
        assert server.calls() == 1  # a stream the caller has seen is never replayed
        await provider.aclose()
    assert seen == [Delta("content", "partial response")]
    assert failure.value.partial is not None
    assert failure.value.partial.content == "partial response"


async def test_an_error_record_before_any_delta_is_retried_and_after_one_is_not(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    plan: list[dict[str, Any]] = [
        {"kind": "stream-error", "message": "Internal error encountered."},
        {"kind": "pass", "text": "fine"},
    ]
    async with FaultProviderServer(plan, wire="gemini") as server:
        provider = faulty(server, retry=RETRY)
        assert (await provider.generate(MESSAGES)).content == "fine"
        await provider.aclose()
    plan = [{"kind": "stream-error", "message": "boom", "text": "half"}]
    seen: list[Delta] = []
    async with FaultProviderServer(plan, wire="gemini") as server:
        provider = faulty(server, retry=RetryPolicy(retries=0))
        with pytest.raises(ProviderError, match="boom") as failure:
            await drain(provider, seen)
        assert server.calls() == 1
        await provider.aclose()
    assert (failure.value.code, failure.value.vendor_type) == ("server_error", "INTERNAL")
    assert failure.value.retryable
    # The text and the error came in one write: whether the text was shown before the error
    # was read depends on how the socket delivered it; a shown text is always in the partial.
    assert seen in ([], [Delta("content", "half")])
    if seen:
        assert failure.value.partial is not None
        assert failure.value.partial.content == "half"


async def test_bad_json_is_surfaced_never_skipped() -> None:
    async with FaultProviderServer([{"kind": "bad-json"}], wire="gemini") as server:
        provider = faulty(server, retry=RetryPolicy(retries=0))
        with pytest.raises(ProviderError) as failure:
            await provider.generate(MESSAGES)
        await provider.aclose()
    assert failure.value.code == "json"


async def test_a_slow_stream_within_and_past_the_idle_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    plan: list[dict[str, Any]] = [{"kind": "slow", "text": "one two three", "tokensPerSecond": 1}]
    async with FaultProviderServer(plan, wire="gemini") as server:
        provider = faulty(server, timeouts=Timeouts(idle=1.5))
        seen: list[Delta] = []
        await drain(provider, seen)
        assert [delta.text for delta in seen] == ["one ", "two ", "three"]
        provider = faulty(server, timeouts=Timeouts(idle=0.5), retry=RetryPolicy(retries=0))
        with pytest.raises(ProviderError) as failure:
            await drain(provider)
        await provider.aclose()
    assert failure.value.code == "timeout"


# --------------------------------------------------------------------------- Azure OpenAI


async def test_azure_openai_deployment_url_with_api_version_and_api_key_header() -> None:
    async with Simulator(api_key=KEY) as simulator:
        provider = OpenAIChat(
            model="gpt-4o-mini",
            base_url=f"{simulator.origin}/openai/deployments/my-gpt-4o-mini",
            api_key="",  # no bearer token: Azure's key goes in its own header
            headers={"api-key": KEY},
            query={"api-version": "2024-10-21"},
        )
        assert provider.url == (
            f"{simulator.origin}/openai/deployments/my-gpt-4o-mini/chat/completions"
            "?api-version=2024-10-21"
        )
        assert KEY not in repr(provider)
        result = await provider.generate([Message.user("count to 3")])
        await provider.aclose()
        wrong = OpenAIChat(
            model="m",
            base_url=f"{simulator.origin}/openai/deployments/d",
            api_key="",
            headers={"api-key": "wrong-key-123456"},
        )
        with pytest.raises(ProviderError) as failure:
            await wrong.generate(MESSAGES)
        await wrong.aclose()
    assert result.content == "1 2 3"
    assert failure.value.status == 401
    assert "wrong-key-123456" not in str(failure.value)


async def test_azure_openai_v1_endpoint_takes_the_key_as_a_bearer_token() -> None:
    async with Simulator(api_key=KEY) as simulator:
        base = f"{simulator.origin}/openai/v1"
        chat = OpenAIChat(model="gpt-4o-mini", base_url=base, api_key=KEY)
        responses = OpenAIResponses(model="gpt-4o-mini", base_url=base, api_key=KEY)
        assert (await chat.generate([Message.user("count to 2")])).content == "1 2"
        assert (await responses.generate([Message.user("count to 2")])).content == "1 2"
        await chat.aclose()
        await responses.aclose()


def test_a_credential_in_a_query_parameter_is_a_secret() -> None:
    provider = OpenAIChat(
        model="m", base_url="https://gateway.example/v1", api_key="", query={"key": "qsecret-1"}
    )
    assert "qsecret-1" in provider.secrets()
    assert provider.redact(f"GET {provider.url} failed") == (
        "GET https://gateway.example/v1/chat/completions?key=[redacted] failed"
    )
    with pytest.raises(ConfigError, match="query="):
        OpenAIChat(model="m", base_url="https://x.example/v1", query={"n": 1})
