"""notes/002.md guarantee 1, "stateless loop": the same transcript, scripted replies and tools
give the same event sequence -- kinds, order and payloads, ids and times aside -- and the loop
never changes the messages it was given.

A hypothesis property over generated scripts: replies streamed in random pieces after random
delays, with thinking, usage and 0-3 tool calls each -- to tools that answer, sleep (so calls
of a batch overlap and finish in another order than they were made), raise, get arguments that
do not fit, are unknown, or are refused by the authority -- under a random turn limit, ending
in an answer, a failure or the limit. Each script runs twice, each time in a fresh runtime
with a fresh agent; the listeners' events, the stream's chunks, the result (or the error) and
the history must be equal, once what is minted per run (run ids, message ids and creation
times, durations) is left out.

Tools that report ``progress`` are left out: what calls running at the same time report
interleaves as trio runs them (two calls waking at the same instant run in either order), which
the loop does not order -- docs/agent.md says so.

Everything runs on a ``MockClock`` with ``autojump_threshold=0``: no real sleeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import open_runtime, tool
from actors.agent import Agent, AgentEvent, Chunk
from actors.testing import Fail, Reply, ScriptedProvider
from protocols.authority import Authority, Rule
from protocols.errors import AgentsError, ProviderError
from protocols.messages import Message, ToolCall, Usage

#: What is minted per run or per message, or measures time: left out of the comparison.
MINTED = frozenset({"id", "created_at", "run_id", "child", "duration"})


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return f"rested {seconds}"


@tool
async def boom() -> str:
    """Fail."""
    await trio.sleep(0.05)
    raise ValueError("boom went the tool")


TOOLS = [add, nap, boom]
AUTHORITY = Authority([Rule("deny", tools=("rm",), reason="not here")])


def plain(value: Any) -> Any:
    """``value`` as plain data without what is minted per run; an exception as its type and
    text (a fresh instance each run)."""
    if isinstance(value, BaseException):
        return (type(value).__name__, str(value))
    if attrs.has(type(value)):
        return {
            field.name: plain(getattr(value, field.name))
            for field in attrs.fields(type(value))
            if field.name not in MINTED
        }
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


# -- scripts -------------------------------------------------------------------------------------

CALLS = st.sampled_from(
    [
        ("add", {"a": 19, "b": 23}),
        ("add", {"a": "nineteen", "b": 23}),  # does not fit the schema
        ("nap", {"seconds": 0.3}),
        ("nap", {"seconds": 0.1}),  # made after a longer nap, finishes before it
        ("nap", {"seconds": 0.1}),  # and one finishing at the same moment
        ("boom", {}),
        ("missing", {}),  # no such tool
        ("rm", {"path": "/"}),  # refused by the authority
    ]
)
TEXT = st.text(alphabet="abcde <>/think", max_size=24)
REPLIES = st.builds(
    lambda text, thinking, calls, usage, chunk, delay: (text, thinking, calls, usage, chunk, delay),
    TEXT,
    st.sampled_from(["", "", "pondering"]),
    st.lists(CALLS, max_size=3),
    st.none() | st.builds(Usage, st.integers(0, 50), st.integers(0, 50)),
    st.integers(0, 4),
    st.sampled_from([0.0, 0.0, 0.2]),
)
SCRIPTS = st.builds(
    lambda replies, ending, limit, chunks: (tuple(replies), ending, limit, chunks),
    st.lists(REPLIES, min_size=1, max_size=4),
    st.sampled_from(["answer", "answer", "fail", "none"]),
    st.integers(1, 5),
    st.booleans(),
)


def provider_for(script: tuple[Any, ...]) -> ScriptedProvider:
    """A fresh provider playing ``script`` (fresh objects: nothing is shared between runs)."""
    replies, ending, _, _ = script
    steps: list[Any] = []
    for turn, (text, thinking, calls, usage, chunk, delay) in enumerate(replies):
        steps.append(
            Reply(
                text,
                thinking=thinking,
                calls=[
                    ToolCall(f"t{turn}c{i}", name, dict(args))
                    for i, (name, args) in enumerate(calls)
                ],
                usage=usage,
                chunk=chunk,
                delay=delay,
            )
        )
    if ending == "answer":
        steps.append(Reply("the end", chunk=3, usage=Usage(5, 3)))
    elif ending == "fail":
        steps.append(Fail(ProviderError("the model is gone", code="server_error")))
    return ScriptedProvider(*steps)


async def play(script: tuple[Any, ...], transcript: Sequence[Message]) -> dict[str, Any]:
    """One run of ``script`` from ``transcript``, everything it showed, as plain data."""
    _, _, limit, chunked = script
    events: list[AgentEvent] = []
    chunks: list[Chunk] = []
    outcome: Any
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime,
            provider_for(script),
            name="determinism",
            system="Be brief.",
            tools=TOOLS,
            authority=AUTHORITY,
            limit=limit,
            on=[events.append],
        )
        try:
            if chunked:
                async with agent.stream(transcript) as run:
                    async for chunk in run:
                        chunks.append(chunk)
                outcome = run.result
            else:
                outcome = await agent.generate(transcript)
        except AgentsError as error:  # the model failed, or the script ran out first
            outcome = error
        history = await agent.conversation.messages()
    return {
        "events": plain(events),
        "chunks": plain(chunks),
        "outcome": plain(outcome),
        "history": plain(history),
    }


@settings(max_examples=150, deadline=None)
@given(script=SCRIPTS)
def test_002_g1_the_same_script_gives_the_same_events_chunks_and_result(
    script: tuple[Any, ...],
) -> None:
    transcript = [
        Message.user("an earlier question"),
        Message.assistant("an earlier answer"),
        Message.user("go"),
    ]
    given_before = list(transcript)
    snapshot = [attrs.asdict(message) for message in transcript]

    async def twice() -> tuple[dict[str, Any], dict[str, Any]]:
        return await play(script, transcript), await play(script, transcript)

    first, second = trio.run(twice, clock=trio.testing.MockClock(autojump_threshold=0))
    assert first["events"] == second["events"]
    assert first["chunks"] == second["chunks"]
    assert first["outcome"] == second["outcome"]
    assert first["history"] == second["history"]
    # Something happened, and the loop left its input as it was.
    assert [event["kind"] for event in first["events"]][:2] == ["start", "turn"]
    assert first["events"][-1]["kind"] in ("finish", "error")
    assert transcript == given_before
    assert all(a is b for a, b in zip(transcript, given_before, strict=True))
    assert [attrs.asdict(message) for message in transcript] == snapshot


async def test_002_g1_payloads_are_compared_not_only_kinds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The comparison above would see a change in any payload: two scripts differing only in a
    # tool's argument give different event sequences (while their kinds are the same).
    transcript = [Message.user("go")]
    base = ((("", "", [("nap", {"seconds": 0.1})], None, 0, 0.0),), "answer", 3, False)
    other = ((("", "", [("nap", {"seconds": 0.3})], None, 0, 0.0),), "answer", 3, False)
    one, two = await play(base, transcript), await play(other, transcript)
    assert [e["kind"] for e in one["events"]] == [e["kind"] for e in two["events"]]
    assert one["events"] != two["events"]
    assert one == await play(base, transcript)
