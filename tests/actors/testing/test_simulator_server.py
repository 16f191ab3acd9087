"""The Simulator end to end: real loopback sockets, driven by our real HTTP providers and by raw
httpx, checked against the pure policy of ``protocols.simulator``.

Every answer the providers assemble is compared with ``answer(simulator.requests[-1])``: what the
policy says to the request the server actually parsed. Timing tests run on the mock clock (trio
virtual time); with real sockets it only jumps after the loop has been idle a little while in
real time, so in-flight loopback bytes are never mistaken for a stall.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeAlias, cast

import httpx
import pytest
import trio
import trio.testing

from actors.providers import AnthropicMessages, OllamaChat, OpenAIChat, RetryPolicy
from actors.testing import Simulator
from protocols import (
    ConfigError,
    Delta,
    FinishReason,
    Message,
    ProviderError,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
    Usage,
    ValidationError,
)
from protocols.simulator import SimAnswer, SimCall, answer
from protocols.wire import anthropic, ollama, openai_chat

IDLE = 0.05  # mock-clock autojump threshold (real seconds) when real sockets are involved

Vendor: TypeAlias = Literal["openai", "anthropic", "ollama"]
Provider: TypeAlias = OpenAIChat | AnthropicMessages | OllamaChat
VENDORS: tuple[Vendor, ...] = ("openai", "anthropic", "ollama")

#: Each wire format's endpoint, relative to ``Simulator.base_url``.
PATHS: dict[Vendor, str] = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "ollama": "/api/chat",
}

ADD = ToolDefinition(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
SUM_QUESTION = "What is 19 + 23?"


def make(simulator: Simulator, vendor: Vendor, **kwargs: Any) -> Provider:
    """The provider of ``vendor`` aimed at ``simulator`` (and its key)."""
    factories: dict[Vendor, Callable[..., Provider]] = {
        "openai": simulator.openai,
        "anthropic": simulator.anthropic,
        "ollama": simulator.ollama,
    }
    return factories[vendor](**kwargs)


@asynccontextmanager
async def serving(
    vendor: Vendor, simulator: Simulator | None = None
) -> AsyncIterator[tuple[Simulator, Provider]]:
    """A running simulator and a provider of ``vendor`` aimed at it (closed afterwards)."""
    server = simulator if simulator is not None else Simulator()
    async with server:
        provider = make(server, vendor)
        try:
            yield server, provider
        finally:
            await provider.aclose()


def think_options(vendor: Vendor) -> ProviderOptions:
    """Options that ask ``vendor``'s wire format for reasoning."""
    if vendor == "anthropic":
        return ProviderOptions(think=True, max_tokens=4000)
    if vendor == "ollama":
        return ProviderOptions(think=True)
    return ProviderOptions(extra={"reasoning_effort": "low"})


async def drain(
    provider: Provider,
    messages: list[Message],
    *,
    tools: list[ToolDefinition] | None = None,
    options: ProviderOptions | None = None,
) -> tuple[list[Delta], ProviderResult]:
    async with provider.stream(messages, tools=tools, options=options) as stream:
        deltas = [delta async for delta in stream]
    return deltas, stream.result


Essentials: TypeAlias = tuple[
    str, str, list[tuple[str, dict[str, Any]]], FinishReason, Usage | None
]


def essentials(result: ProviderResult) -> Essentials:
    """What two calls of the same request must agree on (call ids are minted per response)."""
    calls = [(call.name, dict(call.arguments)) for call in result.calls]
    return result.content, result.thinking, calls, result.finish, result.usage


def policy(answered: SimAnswer) -> Essentials:
    """The same, as the policy says it."""
    calls = [(call.name, dict(call.arguments)) for call in answered.calls]
    return answered.text, answered.thinking, calls, answered.finish, answered.usage


def last_answer(simulator: Simulator) -> SimAnswer:
    """What the policy answers to the last request the simulator parsed."""
    return answer(simulator.requests[-1])


async def wait_for(condition: Callable[[], bool], step: float = 0.01) -> None:
    """Poll ``condition`` every ``step`` seconds of trio time, a bounded number of times (a
    condition that never holds fails the test instead of hanging the suite)."""
    for _ in range(200):
        if condition():
            return
        await trio.sleep(step)
    pytest.fail(f"the condition still does not hold after {200 * step} s of trio time")


# --------------------------------------------------------------------------- adapters end to end


@pytest.mark.parametrize("vendor", VENDORS)
async def test_streamed_text_is_the_policy_answer_one_delta_per_word(vendor: Vendor) -> None:
    async with serving(vendor) as (simulator, provider):
        deltas, result = await drain(provider, [Message.user("hello there, simulator")])
        expected = last_answer(simulator)
    assert expected.text == "You said: hello there, simulator"
    assert [delta.text for delta in deltas] == list(expected.pieces)
    assert {delta.channel for delta in deltas} == {"content"}
    assert "".join(delta.text for delta in deltas) == result.content == expected.text
    assert result.thinking == ""
    assert result.finish is FinishReason.STOP
    assert result.usage == expected.usage
    assert result.usage is not None
    assert result.usage.prompt > 0


@pytest.mark.parametrize("vendor", VENDORS)
async def test_generate_equals_the_drained_stream(vendor: Vendor) -> None:
    cases: list[tuple[str, list[ToolDefinition] | None, ProviderOptions | None]] = [
        ("count to 12", None, None),
        ("Please echo these words back", None, think_options(vendor)),
        (SUM_QUESTION, [ADD], None),
        ("What is 1 + 2 and 3 + 4?", [ADD], think_options(vendor)),
        ("What is 5 + 6?", None, None),
    ]
    generated: list[ProviderResult] = []
    async with serving(vendor) as (simulator, provider):
        for prompt, tools, options in cases:
            messages = [Message.user(prompt)]
            _, streamed = await drain(provider, messages, tools=tools, options=options)
            streamed_policy = last_answer(simulator)
            generated.append(await provider.generate(messages, tools=tools, options=options))
            assert essentials(generated[-1]) == essentials(streamed) == policy(streamed_policy)
            assert policy(last_answer(simulator)) == policy(streamed_policy)
        assert len(simulator.requests) == 2 * len(cases)
    assert generated[0].content == "1 2 3 4 5 6 7 8 9 10 11 12"
    assert generated[1].thinking == "I will repeat what the user said."
    assert essentials(generated[2])[2] == [("add", {"a": 19, "b": 23})]
    assert essentials(generated[3])[2] == [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})]
    assert generated[3].thinking.startswith("I will call add(")
    assert generated[4].content == "5 + 6 = 11."


@pytest.mark.parametrize(
    ("vendor", "think_style"),
    [("openai", "tags"), ("openai", "field"), ("anthropic", "tags"), ("ollama", "tags")],
)
async def test_thinking_streams_on_its_own_channel_before_the_content(
    vendor: Vendor, think_style: Literal["tags", "field"]
) -> None:
    simulator = Simulator(think_style=think_style)
    async with serving(vendor, simulator) as (_, provider):
        deltas, result = await drain(
            provider, [Message.user("think about this")], options=think_options(vendor)
        )
        request = simulator.requests[-1]
        expected = last_answer(simulator)
    assert request.think
    assert expected.thinking == "I will repeat what the user said."
    channels = [delta.channel for delta in deltas]
    assert channels == ["thinking"] * channels.count("thinking") + ["content"] * channels.count(
        "content"
    )
    assert "".join(d.text for d in deltas if d.channel == "thinking") == expected.thinking
    assert "".join(d.text for d in deltas if d.channel == "content") == expected.text
    assert result.thinking == expected.thinking
    assert result.content == "You said: think about this"
    assert "<think>" not in result.content
    assert "</think>" not in result.content
    assert result.usage == expected.usage
    if vendor == "anthropic":
        blocks = cast(dict[str, Any], result.continuation["anthropic"])["thinking_blocks"]
        assert blocks == [
            {
                "type": "thinking",
                "thinking": expected.thinking,
                "signature": hashlib.sha256(expected.thinking.encode()).hexdigest(),
            }
        ]
    else:
        assert result.continuation == {}


@pytest.mark.parametrize("effort", ["none", "minimal"])
async def test_openai_reasoning_effort_none_or_minimal_does_not_think(effort: str) -> None:
    options = ProviderOptions(extra={"reasoning_effort": effort})
    async with serving("openai") as (simulator, provider):
        deltas, result = await drain(provider, [Message.user("quick")], options=options)
        assert not simulator.requests[-1].think
    assert [delta.channel for delta in deltas] == ["content", "content", "content"]
    assert (result.content, result.thinking) == ("You said: quick", "")


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_output_cap_cuts_the_answer_with_finish_length(vendor: Vendor) -> None:
    async with serving(vendor) as (simulator, provider):
        deltas, result = await drain(
            provider, [Message.user("count to 10")], options=ProviderOptions(max_tokens=3)
        )
        assert simulator.requests[-1].max_tokens == 3
    assert [delta.text for delta in deltas] == ["1", " 2", " 3"]
    assert result.content == "1 2 3"
    assert result.finish is FinishReason.LENGTH


# --------------------------------------------------------------------------- tool round trips


@pytest.mark.parametrize("vendor", VENDORS)
async def test_the_tool_round_trip(vendor: Vendor) -> None:
    question = Message.user(SUM_QUESTION)
    async with serving(vendor) as (simulator, provider):
        deltas, first = await drain(provider, [question], tools=[ADD])
        assert [(call.name, call.arguments) for call in first.calls] == [
            ("add", {"a": 19, "b": 23})
        ]
        assert first.finish is FinishReason.TOOL_CALLS
        assert first.content == ""
        assert deltas == []  # a call is not text: nothing on either channel
        call = first.calls[0]
        history = [
            question,
            Message.assistant(calls=first.calls),
            Message.tool(call.id, "add", "42"),
        ]
        deltas, second = await drain(provider, history, tools=[ADD])
        requests = simulator.requests
    assert second.content == "The answer is 42."
    assert "".join(delta.text for delta in deltas) == second.content
    assert second.finish is FinishReason.STOP
    assert second.calls == ()
    assert len(requests) == 2
    assert [request.tools for request in requests] == [("add",), ("add",)]
    assert [turn.role for turn in requests[0].turns] == ["user"]
    assert requests[0].turns[0].text == SUM_QUESTION
    assert [turn.role for turn in requests[1].turns] == ["user", "assistant", "tool"]
    assert requests[1].turns[1].calls == (SimCall("add", {"a": 19, "b": 23}),)
    assert requests[1].turns[2].text == "42"
    assert {request.vendor for request in requests} == {vendor}


@pytest.mark.parametrize("vendor", VENDORS)
async def test_two_sums_make_two_parallel_calls_with_distinct_ids(vendor: Vendor) -> None:
    question = Message.user("What is 1 + 2, and what is 30 + 40?")
    async with serving(vendor) as (simulator, provider):
        first = await provider.generate([question], tools=[ADD])
        history = [
            question,
            Message.assistant(calls=first.calls),
            *(
                Message.tool(call.id, call.name, str(sum(cast(list[int], call.arguments.values()))))
                for call in first.calls
            ),
        ]
        second = await provider.generate(history, tools=[ADD])
        turns = simulator.requests[-1].turns
    assert [(call.name, call.arguments) for call in first.calls] == [
        ("add", {"a": 1, "b": 2}),
        ("add", {"a": 30, "b": 40}),
    ]
    assert len({call.id for call in first.calls}) == 2
    assert first.finish is FinishReason.TOOL_CALLS
    assert [turn.role for turn in turns] == ["user", "assistant", "tool", "tool"]
    assert second.content == "The tools returned: 3, 70."


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_named_call_takes_its_arguments_and_tool_choice_none_hides_tools(
    vendor: Vendor,
) -> None:
    text = 'Please call add with {"a": 2, "b": 5} and call the add tool'
    async with serving(vendor) as (simulator, provider):
        called = await provider.generate([Message.user(text)], tools=[ADD])
        hidden = await provider.generate(
            [Message.user(text)], tools=[ADD], options=ProviderOptions(tool_choice="none")
        )
        # Ollama has no tool_choice: its encoder leaves the tools out instead.
        assert simulator.requests[-1].tool_choice == "none" or not simulator.requests[-1].tools
    assert [(call.name, call.arguments) for call in called.calls] == [
        ("add", {"a": 2, "b": 5}),
        ("add", {}),
    ]
    assert called.finish is FinishReason.TOOL_CALLS
    assert hidden.calls == ()
    assert hidden.content == f"You said: {text}"


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_call_mention_ending_a_sentence_calls_the_tool(vendor: Vendor) -> None:
    # "one call to that tool per mention": the full stop is not part of the tool's name.
    async with serving(vendor) as (_, provider):
        result = await provider.generate([Message.user("Now call add.")], tools=[ADD])
    assert [(call.name, call.arguments) for call in result.calls] == [("add", {})]
    assert result.finish is FinishReason.TOOL_CALLS


@pytest.mark.parametrize("vendor", VENDORS)
async def test_call_arguments_that_are_not_json_are_left_out(vendor: Vendor) -> None:
    # A valid request whose user text holds a malformed object: the policy drops the arguments
    # (it must never take the server down over what a user typed).
    async with serving(vendor) as (simulator, provider):
        result = await provider.generate([Message.user("call add with {a: 1}")], tools=[ADD])
        stats = simulator.statistics()
    assert [(call.name, call.arguments) for call in result.calls] == [("add", {})]
    assert stats.requests == 1


async def test_anthropic_thinking_blocks_go_back_with_the_tool_result() -> None:
    options = think_options("anthropic")
    question = Message.user(SUM_QUESTION)
    async with serving("anthropic") as (simulator, provider):
        deltas, first = await drain(provider, [question], tools=[ADD], options=options)
        assert first.thinking == 'I will call add({"a":19,"b":23}).'
        assert {delta.channel for delta in deltas} == {"thinking"}
        assert first.continuation["anthropic"]
        history = [
            question,
            Message.assistant(
                calls=first.calls, thinking=first.thinking, continuation=first.continuation
            ),
            Message.tool(first.calls[0].id, "add", "42"),
        ]
        second = await provider.generate(history, tools=[ADD], options=options)
        turns = simulator.requests[-1].turns
    assert second.content == "The answer is 42."
    assert second.thinking == "The tools have answered, so I will report their results."
    assert [turn.role for turn in turns] == ["user", "assistant", "tool"]


# --------------------------------------------------------------------------- raw HTTP


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_non_streamed_response_reads_like_the_stream(vendor: Vendor) -> None:
    messages = [Message.user("What is 2 + 3? No: count to 4.")]
    options = think_options(vendor)
    encoders: dict[Vendor, Callable[..., dict[str, Any]]] = {
        "openai": openai_chat.encode_request,
        "anthropic": anthropic.encode_request,
        "ollama": ollama.encode_request,
    }
    body = encoders[vendor](messages, model="simulator", options=options, stream=False)
    assert body.get("stream", False) is False
    async with serving(vendor) as (simulator, provider), httpx.AsyncClient() as client:
        response = await client.post(simulator.base_url + PATHS[vendor], json=body)
        one_shot = last_answer(simulator)
        assert not simulator.requests[-1].stream
        streamed = await provider.generate(messages, options=options)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    data = response.json()
    read: ProviderResult
    if vendor == "openai":
        assert data["object"] == "chat.completion"
        message = data["choices"][0]["message"]
        assert message["content"] == f"<think>{one_shot.thinking}</think>1 2 3 4"
        read = openai_chat.read_response(data)
    elif vendor == "anthropic":
        assert data["type"] == "message"
        assert [block["type"] for block in data["content"]] == ["thinking", "text"]
        read = anthropic.read_response(data)
        assert read.continuation == streamed.continuation
    else:
        assert data["done"] is True
        read = ollama.read_response(data)
    # The count wins over the sum.
    assert read.content == "1 2 3 4" == one_shot.text
    assert read.thinking == "The user wants me to count to 4, one number at a time."
    assert essentials(read) == essentials(streamed) == policy(one_shot)


async def test_a_non_streamed_openai_tool_call_reads_like_the_stream() -> None:
    messages = [Message.user(SUM_QUESTION)]
    body = openai_chat.encode_request(messages, model="simulator", tools=[ADD], stream=False)
    async with serving("openai") as (simulator, provider), httpx.AsyncClient() as client:
        response = await client.post(simulator.openai_base_url + "/chat/completions", json=body)
        streamed = await provider.generate(messages, tools=[ADD])
    data = response.json()
    assert data["choices"][0]["message"]["content"] is None
    read = openai_chat.read_response(data)
    assert essentials(read) == essentials(streamed)
    assert [(call.name, call.arguments) for call in read.calls] == [("add", {"a": 19, "b": 23})]
    assert read.calls[0].id == "call_sim0_0"


async def test_models_lists_the_simulator() -> None:
    async with Simulator() as simulator, httpx.AsyncClient() as client:
        response = await client.get(simulator.openai_base_url + "/models")
    assert response.status_code == 200
    assert [model["id"] for model in response.json()["data"]] == ["simulator"]


# --------------------------------------------------------------------------- pacing


async def test_a_paced_stream_takes_trio_time_and_yields_deltas_one_by_one(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    arrivals: list[tuple[float, Delta]] = []
    async with serving("openai", Simulator(interval=1.0)) as (_, provider):
        start = trio.current_time()
        async with provider.stream([Message.user("count to 5")]) as stream:
            async for delta in stream:
                arrivals.append((trio.current_time() - start, delta))
        elapsed = trio.current_time() - start
    assert [delta.text for _, delta in arrivals] == ["1", " 2", " 3", " 4", " 5"]
    times = [at for at, _ in arrivals]
    assert times[0] >= 2.0  # the role chunk, then the first number: one interval each
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(times))
    assert elapsed >= 5.0
    assert stream.result.content == "1 2 3 4 5"


# --------------------------------------------------------------------------- server-side view


async def test_leaving_a_stream_early_is_seen_as_abandoned(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    simulator = Simulator(interval=0.5)
    async with serving("openai", simulator) as (_, provider):
        async with provider.stream([Message.user("count to 100000")]) as stream:
            async for delta in stream:
                assert delta.text == "1"
                break
        await wait_for(lambda: simulator.statistics().abandoned == 1, step=0.5)
        await wait_for(lambda: simulator.statistics().open_connections == 0, step=0.5)
        stats = simulator.statistics()
        assert (stats.streaming, stats.completed, stats.requests) == (0, 0, 1)
        # The provider is still usable: a new connection, a complete answer.
        result = await provider.generate([Message.user("count to 3")])
        # (The server counts a stream completed once its last bytes are sent: maybe after the
        # client has read them.)
        await wait_for(lambda: simulator.statistics().completed == 1)
        after = simulator.statistics()
    assert result.content == "1 2 3"
    assert (after.abandoned, after.completed, after.connections) == (1, 1, 2)


@pytest.mark.parametrize("vendor", VENDORS)
async def test_sequential_calls_keep_one_connection_alive(vendor: Vendor) -> None:
    async with serving(vendor) as (simulator, provider):
        contents = [
            (await provider.generate([Message.user(f"count to {n}")])).content for n in (1, 2, 3)
        ]
        await trio.testing.wait_all_tasks_blocked()  # the handler is back to reading requests
        stats = simulator.statistics()
    assert contents == ["1", "1 2", "1 2 3"]
    assert stats.connections == 1
    assert (stats.requests, stats.completed, stats.abandoned, stats.streaming) == (3, 3, 0, 0)


async def test_fifty_concurrent_streams_on_one_provider() -> None:
    results: dict[int, ProviderResult] = {}
    pieces: dict[int, int] = {}

    async def one(provider: Provider, n: int) -> None:
        deltas, results[n] = await drain(provider, [Message.user(f"count to {n}")])
        pieces[n] = len(deltas)

    async with serving("openai") as (simulator, provider):
        async with trio.open_nursery() as nursery:
            for n in range(1, 51):
                nursery.start_soon(one, provider, n)
        await trio.testing.wait_all_tasks_blocked()  # every handler is back to reading requests
        stats = simulator.statistics()
        counted = sorted(int(request.turns[0].text.split()[-1]) for request in simulator.requests)
    assert sorted(results) == list(range(1, 51))
    for n, result in results.items():
        assert result.content == " ".join(str(i) for i in range(1, n + 1))
        assert result.finish is FinishReason.STOP
        assert pieces[n] == n
    assert counted == list(range(1, 51))
    assert (stats.requests, stats.completed, stats.abandoned, stats.streaming) == (50, 50, 0, 0)
    assert 1 <= stats.connections <= 50


# --------------------------------------------------------------------------- errors


SECRET = "sk-sim-secret-0123456789"
WRONG = "sk-wrong-key-9876543210"


def wrong_key(simulator: Simulator, vendor: Vendor, key: str) -> Provider:
    """A provider of ``vendor`` aimed at ``simulator`` with ``key`` (no retries)."""
    no_retry = RetryPolicy(retries=0)
    if vendor == "openai":
        return OpenAIChat(
            model="simulator", base_url=simulator.openai_base_url, api_key=key, retry=no_retry
        )
    if vendor == "anthropic":
        return AnthropicMessages(
            model="simulator", base_url=simulator.base_url, api_key=key, retry=no_retry
        )
    return OllamaChat(model="simulator", base_url=simulator.base_url, api_key=key, retry=no_retry)


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_api_key_is_required_and_never_shown(vendor: Vendor) -> None:
    simulator = Simulator(api_key=SECRET)
    assert SECRET not in repr(simulator)
    async with simulator:
        assert SECRET not in repr(simulator)
        assert "redacted" in repr(simulator)
        good = make(simulator, vendor)
        result = await good.generate([Message.user("count to 2")])
        await good.aclose()
        failures: list[ProviderError] = []
        for key in (WRONG, ""):
            bad = wrong_key(simulator, vendor, key)
            with pytest.raises(ProviderError) as caught:
                await bad.generate([Message.user("count to 2")])
            await bad.aclose()
            failures.append(caught.value)
        stats = simulator.statistics()
    assert result.content == "1 2"
    assert stats.requests == 3
    assert len(simulator.requests) == 1  # refused requests are not model requests
    for error in failures:
        assert error.status == 401
        assert error.code == "auth"
        assert not error.retryable
        assert "invalid or missing API key" in str(error)
        for text in (str(error), repr(error), error.excerpt, error.message):
            assert SECRET not in text
            assert WRONG not in text
    assert SECRET not in repr(simulator)


async def test_an_unknown_path_is_a_404_in_json() -> None:
    async with Simulator() as simulator, httpx.AsyncClient() as client:
        response = await client.post(simulator.base_url + "/v1/nothing-here", json={})
        stats = simulator.statistics()
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "not_found_error"
    assert "/v1/nothing-here" in response.json()["error"]["message"]
    assert stats.requests == 1


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_get_on_a_model_endpoint_is_a_405(vendor: Vendor) -> None:
    async with Simulator() as simulator, httpx.AsyncClient() as client:
        response = await client.get(simulator.base_url + PATHS[vendor])
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/json"
    assert response.headers["allow"] == "POST"
    assert "takes POST, not GET" in response.text


async def test_ready_made_providers_take_overrides() -> None:
    async with Simulator(api_key="sim-key") as simulator:
        wrong = simulator.openai(api_key="other-key", retry=RetryPolicy(retries=0))
        with pytest.raises(ProviderError) as caught:
            await wrong.generate([Message.user("hi")])
        assert caught.value.status == 401
        elsewhere = simulator.ollama(base_url=simulator.base_url + "/")
        assert (await elsewhere.generate([Message.user("hi")])).content == "You said: hi"
        await wrong.aclose()
        await elsewhere.aclose()


def vendor_error(vendor: Vendor, data: Any) -> tuple[str, str | None]:
    """(message, type) of an error body, checking it has ``vendor``'s shape."""
    if vendor == "anthropic":
        assert data["type"] == "error"
        return data["error"]["message"], data["error"]["type"]
    if vendor == "ollama":
        assert set(data) == {"error"}
        return data["error"], None
    assert set(data["error"]) == {"message", "type", "param", "code"}
    return data["error"]["message"], data["error"]["type"]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_request_of_the_wrong_shape_is_a_400_in_the_vendor_shape(vendor: Vendor) -> None:
    async with Simulator() as simulator, httpx.AsyncClient() as client:
        response = await client.post(simulator.base_url + PATHS[vendor], json={"messages": []})
        stats = simulator.statistics()
    assert response.status_code == 400
    message, kind = vendor_error(vendor, response.json())
    assert "'model' must be a non-empty string" in message
    assert kind in (None, "invalid_request_error")
    assert stats.requests == 1
    assert simulator.requests == ()


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_invalid_json_body_is_a_400_in_the_vendor_shape(vendor: Vendor) -> None:
    # The documented contract: "400 for an invalid body" in the vendor's error shape. A body
    # that is not JSON at all must not take the server down.
    async with Simulator() as simulator, httpx.AsyncClient() as client:
        response = await client.post(simulator.base_url + PATHS[vendor], content=b"{not json")
        again = await client.get(simulator.openai_base_url + "/models")
    assert response.status_code == 400
    message, kind = vendor_error(vendor, response.json())
    assert "JSON" in message
    assert kind in (None, "invalid_request_error")
    assert again.status_code == 200


@pytest.mark.parametrize("vendor", ["openai", "ollama"])
@pytest.mark.parametrize(
    "tool_calls", [5, True, [{"function": {"name": "add", "arguments": "{oops"}}]]
)
async def test_malformed_tool_calls_in_the_history_are_a_400(
    vendor: Vendor, tool_calls: object
) -> None:
    body = {"model": "m", "messages": [{"role": "assistant", "tool_calls": tool_calls}]}
    async with Simulator() as simulator, httpx.AsyncClient() as client:
        response = await client.post(simulator.base_url + PATHS[vendor], json=body)
    assert response.status_code == 400
    message, _ = vendor_error(vendor, response.json())
    assert "tool_calls" in message


async def test_an_oversized_body_is_a_413_and_the_connection_closes(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    small = {"model": "simulator", "messages": [{"role": "user", "content": "hi"}]}
    big = {**small, "padding": "x" * 5000}
    simulator = Simulator(max_request_bytes=1000)
    async with simulator, httpx.AsyncClient() as client:
        url = simulator.openai_base_url + "/chat/completions"
        before = await client.post(url, json=small)
        assert simulator.statistics().connections == 1
        refused = await client.post(url, json=big)
        await wait_for(lambda: simulator.statistics().open_connections == 0)
        after = await client.post(url, json=small)
        stats = simulator.statistics()
    assert before.status_code == after.status_code == 200
    assert refused.status_code == 413
    assert refused.headers["connection"] == "close"
    assert refused.json()["error"]["type"] == "request_too_large"
    assert stats.connections == 2  # the refused request's connection was not reused
    assert stats.requests == 3
    assert len(simulator.requests) == 2


async def test_an_oversized_request_head_is_a_413() -> None:
    # The limit covers the request "head and body"; a head alone over it is refused too.
    small = {"model": "simulator", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-padding": "y" * 3000}
    async with Simulator(max_request_bytes=1000) as simulator, httpx.AsyncClient() as client:
        response = await client.post(
            simulator.openai_base_url + "/chat/completions", json=small, headers=headers
        )
    assert response.status_code == 413


# --------------------------------------------------------------------------- lifecycle


def task_count() -> int:
    def tasks(task: trio.lowlevel.Task) -> int:
        return 1 + sum(tasks(child) for n in task.child_nurseries for child in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return tasks(root)


async def test_leaving_the_block_stops_the_server_and_every_handler(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    before = task_count()
    simulator = Simulator(interval=1.0)
    async with simulator, httpx.AsyncClient() as client:
        port = simulator.port
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "count to 1000"}],
            "stream": True,
        }
        url = simulator.openai_base_url + "/chat/completions"
        # A handler is mid-response (sleeping between deltas) when the block ends.
        async with client.stream("POST", url, json=body) as response:
            assert response.status_code == 200
            await wait_for(lambda: simulator.statistics().streaming == 1)
            assert task_count() > before
    assert task_count() == before
    with pytest.raises(OSError, match="connect"):  # nothing listens any more
        await trio.open_tcp_stream("127.0.0.1", port)
    with pytest.raises(RuntimeError, match="not running"):
        _ = simulator.port
    assert "not running" in repr(simulator)
    await simulator.aclose()  # idempotent


async def test_entering_a_running_simulator_again_raises() -> None:
    simulator = Simulator()
    async with simulator:
        port = simulator.port
        with pytest.raises(RuntimeError, match="already running"):
            async with simulator:
                pass  # pragma: no cover
        assert simulator.port == port  # still serving
        async with httpx.AsyncClient() as client:
            response = await client.get(simulator.openai_base_url + "/models")
    assert response.status_code == 200


async def test_the_port_before_start_raises() -> None:
    simulator = Simulator()
    with pytest.raises(RuntimeError, match="not running"):
        _ = simulator.port
    with pytest.raises(RuntimeError, match="not running"):
        _ = simulator.base_url
    assert "not running" in repr(simulator)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"interval": -1.0}, "interval"),
        ({"interval": float("nan")}, "interval"),
        ({"think_style": "xml"}, "think_style"),
        ({"api_key": ""}, "api_key"),
        ({"api_key": 123}, "api_key"),
        ({"max_request_bytes": 0}, "max_request_bytes"),
        ({"max_request_bytes": -5}, "max_request_bytes"),
        ({"max_request_bytes": True}, "max_request_bytes"),
        ({"max_request_bytes": 10.5}, "max_request_bytes"),
    ],
)
def test_the_constructor_refuses_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Simulator(**kwargs)


async def test_partial_holds_only_the_text_handed_to_the_caller() -> None:
    # One network read carries thousands of deltas; those not yet yielded are not "produced"
    # for the caller, so a partial committed after a cancel never holds text nobody saw.
    async with Simulator() as simulator:
        provider = simulator.openai()
        seen: list[str] = []
        async with provider.stream([Message.user("count to 5000")]) as stream:
            async for delta in stream:
                seen.append(delta.text)
                if len(seen) == 3:
                    break
        assert stream.partial.content == "".join(seen) == "1 2 3"
        await provider.aclose()


# --------------------------------------------------------------------------- think=True


@pytest.mark.parametrize("vendor", VENDORS)
async def test_think_true_asks_every_adapter_for_reasoning(vendor: Vendor) -> None:
    """``think=True`` is never silently dropped: each adapter sends its vendor's reasoning
    setting (OpenAI-compatible ``reasoning_effort``, Anthropic ``thinking``, Ollama ``think``),
    and the simulator, which reads each, thinks first."""
    async with serving(vendor) as (simulator, provider):
        options = ProviderOptions(think=True)
        _, result = await drain(provider, [Message.user("Say hi")], options=options)
        sent = simulator.requests[-1]
    assert sent.think
    assert result.thinking
    assert result.content == "You said: Say hi"


async def test_think_true_that_anthropic_cannot_honour_fails_before_any_request() -> None:
    async with serving("anthropic") as (simulator, provider):
        options = ProviderOptions(think=True, max_tokens=1000)
        with pytest.raises(ConfigError, match="thinking on Anthropic needs max_tokens"):
            await provider.generate([Message.user("hi")], options=options)
        assert simulator.requests == ()


# --------------------------------------------------------------------------- unknown usage


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("stream", [True, False])
async def test_a_simulator_that_reports_no_usage_leaves_usage_unknown(
    vendor: Vendor, stream: bool
) -> None:
    """Like llama-cpp-python (which ignores ``stream_options``): no counts at all, and every
    adapter keeps usage ``None`` rather than inventing zeros."""
    async with serving(vendor, Simulator(report_usage=False)) as (simulator, provider):
        if stream:
            _, result = await drain(provider, [Message.user("count to 3")])
        else:
            async with httpx.AsyncClient() as client:
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                if vendor == "anthropic":
                    body["max_tokens"] = 10
                body["stream"] = False
                raw = (await client.post(simulator.base_url + PATHS[vendor], json=body)).json()
            assert not {"usage", "prompt_eval_count", "eval_count"} & set(raw)
            return
    assert result.content == "1 2 3"
    assert result.usage is None
