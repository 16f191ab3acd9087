"""Streaming structured output: a run with ``output=`` streams ``output`` chunks of the answer
known so far (``run.partial_output()``), each attempt starting over, while the final object is
validated strictly as before; a run without ``output=``, or one nobody streams, parses nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import typing
from collections.abc import Sequence
from typing import Any

import attrs
import pydantic
import pytest
import trio

import actors.aio
import actors.sync
from actors import Agent, Chunk, open_runtime, tool
from actors.agent import RunOptions
from actors.providers import FallbackProvider
from actors.testing import Reply, ScriptedProvider
from actors.testing._scripted import ScriptedCall, _ScriptedStream
from protocols.errors import ProviderError, ValidationError
from protocols.messages import Message, ProviderOptions, ToolCall, ToolDefinition
from protocols.toolschema import PartialOutput


@dataclasses.dataclass
class Stop:
    city: str
    nights: int = 1


@dataclasses.dataclass
class Trip:
    title: str
    stops: list[Stop]


ANSWER = '{"title": "Coast", "stops": [{"city": "Nice", "nights": 2}, {"city": "Genoa"}]}'


def outputs(chunks: Sequence[Chunk]) -> list[tuple[int, Any]]:
    return [(chunk.attempt, chunk.output) for chunk in chunks if chunk.kind == "output"]


async def streamed(agent: Agent, **options: Any) -> tuple[list[Chunk], Any, Any]:
    """The chunks of a run, its result's output and its last partial output."""
    async with agent.stream("Plan a trip.", **options) as run:
        chunks = [chunk async for chunk in run]
    return chunks, run.result.output, run.partial_output()


async def test_a_structured_run_streams_its_partial_object() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply(ANSWER, chunk=5)))
        chunks, output, partial = await streamed(agent, output=Trip)
    assert output == Trip("Coast", [Stop("Nice", 2), Stop("Genoa")])
    assert outputs(chunks) == [
        (1, {}),
        (1, {"title": "Coast"}),  # (five characters a delta: '"stops": [' and '{' came as one)
        (1, {"title": "Coast", "stops": [{}]}),
        (1, {"title": "Coast", "stops": [{"city": "Nice"}]}),
        (1, {"title": "Coast", "stops": [{"city": "Nice", "nights": 2}]}),
        (1, {"title": "Coast", "stops": [{"city": "Nice", "nights": 2}, {}]}),
        (1, json.loads(ANSWER)),
    ]
    assert partial == json.loads(ANSWER)  # the final object is result.output, built strictly
    # The content chunks still come, each output chunk after the delta that completed it.
    assert "".join(c.text for c in chunks if c.kind == "content") == ANSWER
    kinds = [c.kind for c in chunks]
    assert kinds.index("output") > kinds.index("content")


@attrs.define
class AttrsStop:
    city: str
    nights: int = 1


@attrs.define
class AttrsTrip:
    title: str
    stops: list[AttrsStop]


class TypedStop(typing.TypedDict):
    city: str
    nights: typing.NotRequired[int]


class TypedTrip(typing.TypedDict):
    title: str
    stops: list[TypedStop]


class PydanticStop(pydantic.BaseModel):
    city: str
    nights: int = 1


class PydanticTrip(pydantic.BaseModel):
    title: str
    stops: list[PydanticStop]


@pytest.mark.parametrize(
    "cls", [Trip, AttrsTrip, TypedTrip, PydanticTrip], ids=lambda c: c.__name__
)
async def test_every_class_kind_streams_the_same_partials(cls: type) -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply(ANSWER, chunk=5)))
        chunks, output, partial = await streamed(agent, output=cls)
    assert [out for _, out in outputs(chunks)][:3] == [
        {},
        {"title": "Coast"},
        {"title": "Coast", "stops": [{}]},
    ]
    assert partial == json.loads(ANSWER)
    if cls is TypedTrip:
        assert output == json.loads(ANSWER)  # a TypedDict is the checked dict
    else:
        assert isinstance(output, cls)  # the final object is the class's, built strictly


async def test_an_output_chunk_carries_the_seq_of_the_delta_it_follows() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply(ANSWER, chunk=7)))
        chunks, _, _ = await streamed(agent, output=Trip)
    previous: Chunk | None = None
    for chunk in chunks:
        if chunk.kind == "output":
            assert previous is not None
            assert previous.kind in ("content", "output")
            assert chunk.seq == previous.seq > 0
            assert chunk.run_id == previous.run_id
        previous = chunk


async def test_a_json_schema_output_streams_the_json_value() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, ScriptedProvider(Reply("```json\n[1, 2, 3]\n```", chunk=2))
        )
        chunks, output, partial = await streamed(agent, output=schema)
    assert output == [1, 2, 3]
    assert outputs(chunks) == [(1, []), (1, [1]), (1, [1, 2]), (1, [1, 2, 3])]
    assert partial == [1, 2, 3]


async def test_a_top_level_number_completes_with_the_answer() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply("42", chunk=1)))
        chunks, output, partial = await streamed(agent, output={"type": "integer"})
    assert (output, partial, outputs(chunks)) == (42, 42, [(1, 42)])


async def test_partial_strings_grow_when_asked() -> None:
    answer = '{"title": "Coast", "stops": []}'
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, ScriptedProvider(Reply(answer, chunk=3), Reply(answer, chunk=3))
        )
        grown, _, _ = await streamed(agent, output=Trip, partial_strings=True)
        whole, _, _ = await streamed(agent, output=Trip)
    titles = [out.get("title") for _, out in outputs(grown)]
    assert titles[:4] == [None, "C", "Coas", "Coast"]  # ('{"t', 'itl', 'e":', ' "C', 'oas', ...)
    assert [out.get("title") for _, out in outputs(whole)][:2] == [None, "Coast"]


async def test_a_retry_starts_a_new_attempt_from_nothing() -> None:
    async with open_runtime() as runtime:
        model = ScriptedProvider(
            Reply('{"title": 3, "stops": []}', chunk=4), Reply(ANSWER, chunk=40)
        )
        agent = await Agent.start(runtime, model)
        chunks, output, partial = await streamed(agent, output=Trip)
    assert output == Trip("Coast", [Stop("Nice", 2), Stop("Genoa")])
    seen = outputs(chunks)
    first = [out for attempt, out in seen if attempt == 1]
    assert first == [{}, {"stops": []}]  # the bad title never shows
    second = [out for attempt, out in seen if attempt == 2]
    assert second[0] is None  # the reset: a consumer drops what attempt 1 showed
    assert second[-1] == json.loads(ANSWER)
    assert all(out is not None for out in second[1:])
    assert partial == json.loads(ANSWER)


@tool
def look_up(city: str) -> str:
    """Say what a city is like."""
    return f"{city} is sunny."


async def test_words_before_a_tool_call_show_nothing_and_the_answer_after_counts() -> None:
    call = ToolCall("c1", "look_up", {"city": "Nice"})
    model = ScriptedProvider(Reply("Let me look that up.", calls=[call]), Reply(ANSWER, chunk=9))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, model, tools=[look_up])
        chunks, output, partial = await streamed(agent, output=Trip)
    assert output is not None
    seen = outputs(chunks)
    assert {attempt for attempt, _ in seen} == {2}  # the answer is the run's second call
    assert seen[0] == (2, {})  # no reset: attempt 1 showed nothing
    assert partial == json.loads(ANSWER)


async def test_a_run_without_output_streams_no_output_chunks() -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply(ANSWER, chunk=5)))
        chunks, output, partial = await streamed(agent)
    assert output is None
    assert partial is None
    assert outputs(chunks) == []


async def test_only_a_run_somebody_streams_parses_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[PartialOutput] = []
    original = PartialOutput.__init__

    def counted(self: PartialOutput, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(PartialOutput, "__init__", counted)
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply(ANSWER, chunk=5), Reply(ANSWER)))
        result = await agent.generate("Plan a trip.", output=Trip)
        assert result.output is not None
        assert made == []  # generate(): nobody reads chunks, nothing is parsed
        await streamed(agent, output=Trip)
    assert len(made) == 1


def test_the_partial_option_is_checked() -> None:
    with pytest.raises(ValidationError, match="partial_strings must be a bool, not 1"):
        RunOptions(partial_strings=1)  # type: ignore[arg-type]
    assert RunOptions(partial_strings=True).partial_strings is True


class _CutStream(_ScriptedStream):
    """Streams its reply, then fails instead of finishing (a connection lost mid-answer)."""

    async def __anext__(self) -> Any:
        try:
            return await super().__anext__()
        except StopAsyncIteration:
            raise ProviderError(
                "the connection was lost", code="transport", retryable=True
            ) from None


class _CutProvider(ScriptedProvider):
    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> Any:
        return _CutStream(self, ScriptedCall(tuple(messages), tuple(tools or ()), options))


async def test_a_rewind_starts_the_answer_over() -> None:
    cut = _CutProvider(Reply('{"title": "Half", "stops": [', chunk=6))
    fallback = FallbackProvider([cut, ScriptedProvider(Reply(ANSWER, chunk=30))], rewind=True)
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, fallback)
        chunks, output, partial = await streamed(agent, output=Trip)
    assert output == Trip("Coast", [Stop("Nice", 2), Stop("Genoa")])
    kinds = [c.kind for c in chunks]
    rewind = kinds.index("rewind")
    before = [(c.attempt, c.output) for c in chunks[:rewind] if c.kind == "output"]
    after = [(c.attempt, c.output) for c in chunks[rewind:] if c.kind == "output"]
    assert before[-1] == (1, {"title": "Half", "stops": []})
    assert after[0] == (2, None)  # what the voided member showed is void
    assert after[-1] == (2, json.loads(ANSWER))
    assert partial == json.loads(ANSWER)


async def test_a_cut_run_keeps_the_last_partial(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply(ANSWER, chunk=5, delay=1)))
        async with agent.stream("Plan a trip.", output=Trip, timeout=9.5) as run:
            chunks = [chunk async for chunk in run]
    assert run.result.stop == "timeout"
    assert run.result.output is None  # a cut answer is never the structured answer
    text = "".join(c.text for c in chunks if c.kind == "content")
    assert text == ANSWER[:45]  # nine deltas of five characters
    assert (
        run.partial_output()
        == outputs(chunks)[-1][1]
        == {"title": "Coast", "stops": [{"city": "Nice"}]}
    )


def test_the_sync_door_offers_the_partial_output() -> None:
    with actors.sync.Runtime() as runtime:
        agent = runtime.agent(ScriptedProvider(Reply(ANSWER, chunk=8)))
        with agent.stream("Plan a trip.", output=Trip) as run:
            assert run.partial_output() is None
            seen = [run.partial_output() for chunk in run if chunk.kind == "output"]
    assert seen[0] == {}
    assert seen[-1] == json.loads(ANSWER)
    assert run.partial_output() == json.loads(ANSWER)
    assert run.result.output == Trip("Coast", [Stop("Nice", 2), Stop("Genoa")])


def test_the_asyncio_door_offers_the_partial_output() -> None:
    async def main() -> list[Any]:
        async with actors.aio.Runtime() as runtime:
            agent = await runtime.agent(ScriptedProvider(Reply(ANSWER, chunk=8)))
            async with agent.stream("Plan a trip.", output=Trip) as run:
                seen = [run.partial_output() async for chunk in run if chunk.kind == "output"]
        assert run.partial_output() == json.loads(ANSWER)
        return seen

    seen = asyncio.run(main())
    assert seen[0] == {}
    assert seen[-1] == json.loads(ANSWER)
