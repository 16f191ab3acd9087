"""The model that answered and the vendor's id of the response, end to end over loopback HTTP:
the Simulator's streams carry them (its ids are ``chatcmpl-sim<n>``, ``msg_sim<n>`` and
``resp_sim<n>``, ``n`` counting its requests; Ollama names no response), each adapter's reader
and the assembler put them on the result, and on the partial of a stream cut short."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors.testing import Simulator
from protocols import Message

MODEL = "sim-model-2025"


def adapter(simulator: Simulator, vendor: str) -> Any:
    return {
        "openai": simulator.openai,
        "anthropic": simulator.anthropic,
        "ollama": simulator.ollama,
        "openai-responses": simulator.openai_responses,
    }[vendor](model=MODEL)


@pytest.mark.parametrize(
    ("vendor", "ids"),
    [
        ("openai", ["chatcmpl-sim0", "chatcmpl-sim1"]),
        ("anthropic", ["msg_sim0", "msg_sim1"]),
        ("openai-responses", ["resp_sim0", "resp_sim1"]),
        ("ollama", [None, None]),
    ],
)
async def test_each_result_names_the_model_and_its_response(
    vendor: str, ids: list[str | None]
) -> None:
    async with Simulator() as simulator:
        provider = adapter(simulator, vendor)
        results = []
        for question in ("Say hello", "What is 19 + 23?"):
            async with provider.stream([Message.user(question)]) as stream:
                async for _ in stream:
                    pass
            results.append(stream.result)
        await provider.aclose()
        assert [request.model for request in simulator.requests] == [MODEL, MODEL]
    assert [result.model for result in results] == [MODEL, MODEL]
    assert [result.response_id for result in results] == ids
    assert results[0].content == "You said: Say hello"


@pytest.mark.parametrize(
    ("vendor", "response_id"), [("openai", "chatcmpl-sim0"), ("anthropic", "msg_sim0")]
)
async def test_a_stream_cut_short_keeps_them_on_its_partial(
    autojump_clock: Any, vendor: str, response_id: str
) -> None:
    autojump_clock.autojump_threshold = 0.05  # real sockets: jump only once the loop is idle
    async with Simulator(interval=1) as simulator:
        provider = adapter(simulator, vendor)
        with trio.move_on_after(60) as scope:
            async with provider.stream([Message.user("count to 50")]) as stream:
                async for delta in stream:
                    if delta.channel == "content":
                        scope.cancel()
        await provider.aclose()
    assert scope.cancelled_caught
    partial = stream.partial
    assert partial.content
    assert (partial.model, partial.response_id) == (MODEL, response_id)
