"""ScriptedProvider: scripted replies, failures, delays and hangs, recorded calls."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.providers import ProviderStream
from actors.testing import Fail, Hang, Reply, ScriptedCall, ScriptedProvider, ScriptExhausted
from protocols import (
    Delta,
    FinishReason,
    Message,
    ProviderError,
    ProviderOptions,
    ToolCall,
    ToolDefinition,
    Usage,
)

HI = [Message.user("hi")]


async def test_replies_in_order_and_records_every_call() -> None:
    provider = ScriptedProvider("first", Reply("second", usage=Usage(3, 2)))
    tools = [ToolDefinition("add")]
    options = ProviderOptions(temperature=0.5)
    first = await provider.generate(HI, tools=tools, options=options)
    second = await provider.generate(HI)
    assert (first.content, second.content) == ("first", "second")
    assert first.usage is None
    assert second.usage == Usage(3, 2)
    assert provider.calls == [
        ScriptedCall(tuple(HI), tuple(tools), options),
        ScriptedCall(tuple(HI), (), None),
    ]
    assert provider.remaining == 0


async def test_a_reply_may_name_the_model_and_the_response() -> None:
    provider = ScriptedProvider(Reply("hi", model="gpt-test-1", response_id="chatcmpl-1"), "plain")
    named, plain = await provider.generate(HI), await provider.generate(HI)
    assert (named.model, named.response_id) == ("gpt-test-1", "chatcmpl-1")
    assert (plain.model, plain.response_id) == (None, None)


async def test_streams_thinking_then_content_in_chunks() -> None:
    provider = ScriptedProvider(Reply("abcde", thinking="xyz", chunk=2))
    async with provider.stream(HI) as stream:
        assert isinstance(stream, ProviderStream)
        deltas = [delta async for delta in stream]
    assert deltas == [
        Delta("thinking", "xy"),
        Delta("thinking", "z"),
        Delta("content", "ab"),
        Delta("content", "cd"),
        Delta("content", "e"),
    ]
    assert (stream.result.content, stream.result.thinking) == ("abcde", "xyz")


async def test_tool_calls_and_finish() -> None:
    call = ToolCall("c1", "add", {"a": 1})
    provider = ScriptedProvider(Reply(calls=[call]), Reply("cut", finish=FinishReason.LENGTH))
    with_calls = await provider.generate(HI)
    assert with_calls.calls == (call,)
    assert with_calls.finish is FinishReason.TOOL_CALLS
    assert (await provider.generate(HI)).finish is FinishReason.LENGTH


async def test_fail_raises_before_any_delta(autojump_clock: trio.testing.MockClock) -> None:
    boom = ProviderError("overloaded", code="overloaded", retryable=True)
    provider = ScriptedProvider(Fail(boom, delay=3), Fail())
    start = trio.current_time()
    with pytest.raises(ProviderError) as failure:
        await provider.generate(HI)
    assert failure.value is boom
    assert trio.current_time() - start == pytest.approx(3)
    with pytest.raises(ProviderError, match="scripted failure"):
        await provider.generate(HI)


async def test_delays_use_trio_time(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider(Reply("a b c", chunk=2, delay=0.5))
    start = trio.current_time()
    result = await provider.generate(HI)
    assert result.content == "a b c"
    assert trio.current_time() - start == pytest.approx(1.5)  # three deltas, 0.5 s before each


async def test_a_hang_ends_only_by_cancel_and_keeps_the_partial(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Hang("started"))
    seen: list[Delta] = []
    with trio.move_on_after(60) as scope:
        async with provider.stream(HI) as stream:
            async for delta in stream:
                seen.append(delta)
    assert scope.cancelled_caught
    assert seen == [Delta("content", "started")]
    assert stream.partial.content == "started"
    assert stream.partial.finish is FinishReason.CANCELLED
    with pytest.raises(RuntimeError, match="has not finished"):
        _ = stream.result


async def test_an_exhausted_script_says_so() -> None:
    provider = ScriptedProvider("only")
    await provider.generate(HI)
    with pytest.raises(ScriptExhausted, match="called 2 times but its script has only 1 steps"):
        await provider.generate(HI)
    provider.extend(["more"])
    assert (await provider.generate(HI)).content == "more"


async def test_an_empty_reply_streams_nothing_and_completes() -> None:
    provider = ScriptedProvider(Reply())
    async with provider.stream(HI) as stream:
        assert [delta async for delta in stream] == []
    assert stream.result.content == ""
    assert stream.result.finish is FinishReason.STOP


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="delay must be >= 0"):
        Reply("x", delay=-1)
