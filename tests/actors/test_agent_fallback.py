"""An agent's run on a ``FallbackProvider`` (issue 27, section 1): the ``fallback`` event and
log event say which member was left and why; the opt-in rewind voids what a member streamed
(a ``rewind`` log event and chunk) and the next member answers; the budget is charged for every
attempt; the run's one deadline covers every attempt; and a cut at every point -- before the
first attempt, while a member is called, during a member's backoff, between two members, during
a tool, in the middle of the second member's stream -- keeps the bounded turn's promises
(DESIGN section 4): no task left, the partial committed, every tool call answered, and the
budget charged for each attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import Abort, FallbackProvider, open_runtime, tool
from actors.agent import Agent, AgentEvent, Chunk
from actors.durable import AgentRegistry, JobError, MemoryRunStore, open_job_queue
from actors.providers import FallbackOn, OpenAIChat, RetryPolicy, Timeouts
from actors.testing import Fail, FaultProviderServer, Hang, Reply, ScriptedProvider
from actors.tools import INTERRUPTED
from protocols.accounting import TeamBudget, estimate_tokens
from protocols.errors import ProviderError
from protocols.history import check_history
from protocols.jobs import AgentJob
from protocols.messages import Message, Role, StopReason, ToolCall, Usage

IDLE = 0.05  # mock-clock autojump threshold (real seconds) where real sockets are involved
PASS = [{"kind": "pass", "text": "second"}]
#: One token, then a stall past the member's idle timeout (5 s): a failure after the first delta.
STALL = [{"kind": "slow", "text": "half an answer", "tokensPerSecond": 0.1}]


def member(base_url: str, model: str, *, retries: int = 0, idle: float = 30) -> OpenAIChat:
    return OpenAIChat(
        model=model,
        base_url=base_url,
        api_key="k",
        retry=RetryPolicy(retries=retries),
        timeouts=Timeouts(idle=idle),
    )


def _tasks() -> int:
    return trio.lowlevel.current_statistics().tasks_living


async def test_the_run_says_which_member_was_left_and_why() -> None:
    events: list[AgentEvent] = []
    async with (
        FaultProviderServer([{"kind": "http-error", "status": 429}]) as first,
        FaultProviderServer(PASS) as second,
        open_runtime() as runtime,
    ):
        fallback = FallbackProvider([member(first.base_url, "a"), member(second.base_url, "b")])
        try:
            agent = await Agent.start(runtime, fallback, on=[events.append])
            result = await agent.generate("hi")
            logged = [event async for event in runtime.watch(result.run_id)]
        finally:
            await fallback.aclose()
    assert (result.content, result.stop) == ("second", StopReason.COMPLETE)
    (left,) = [event for event in events if event.kind == "fallback"]
    assert left.reason == "overload (rate_limit, HTTP 429)"
    assert left.fallback is not None
    assert (left.fallback.provider, left.fallback.next) == ("openai-chat:a", "openai-chat:b")
    assert left.turn == 1
    kinds = [event.kind for event in events]
    assert kinds.index("turn") < kinds.index("fallback") < kinds.index("usage")
    (entry,) = [event for event in logged if event.kind == "fallback"]
    assert dict(entry.data) == {
        "provider": "openai-chat:a",
        "next": "openai-chat:b",
        "reason": "overload (rate_limit, HTTP 429)",
        "rewind": False,
    }
    assert "rewind" not in [event.kind for event in logged]


async def test_a_failure_before_any_delta_is_charged_what_it_reported_nothing() -> None:
    team = TeamBudget(10_000)
    async with (
        FaultProviderServer([{"kind": "http-error", "status": 503}]) as first,
        FaultProviderServer(PASS) as second,
        open_runtime() as runtime,
    ):
        fallback = FallbackProvider([member(first.base_url, "a"), member(second.base_url, "b")])
        try:
            agent = await Agent.start(runtime, fallback)
            result = await agent.generate("hi", budget=team)
        finally:
            await fallback.aclose()
    assert result.usage == Usage(1, 1, 2)  # the second's, as reported: the first streamed nothing
    assert team.consumed == Usage(1, 1, 2)
    assert not result.estimated


@pytest.mark.parametrize("budget", [True, False])
async def test_opted_in_a_rewind_voids_what_the_member_streamed_and_the_next_answers(
    mock_clock: trio.testing.MockClock, budget: bool
) -> None:
    mock_clock.autojump_threshold = IDLE
    team = TeamBudget(10_000) if budget else None
    events: list[AgentEvent] = []
    chunks: list[Chunk] = []
    async with (
        FaultProviderServer(STALL) as first,
        FaultProviderServer(PASS) as second,
        open_runtime() as runtime,
    ):
        fallback = FallbackProvider(
            [member(first.base_url, "a", idle=5), member(second.base_url, "b")], rewind=True
        )
        try:
            agent = await Agent.start(runtime, fallback, on=[events.append])
            async with agent.stream("hi", budget=team) as run:
                async for chunk in run:
                    chunks.append(chunk)
            result = run.result
            logged = [event async for event in runtime.watch(result.run_id)]
            history = await agent.conversation.messages()
        finally:
            await fallback.aclose()
    assert (result.content, result.stop, result.partial) == ("second", StopReason.COMPLETE, False)
    assert [(c.kind, c.text) for c in chunks] == [
        ("content", "half "),
        ("rewind", ""),
        ("content", "second"),
        ("usage", ""),
    ]
    # The log: the voided delta, a rewind to the seq before it, the fallback, the answer.
    kinds = [event.kind for event in logged]
    first_delta = logged[kinds.index("content")]
    rewind = logged[kinds.index("rewind")]
    assert rewind.data == {"to": first_delta.seq - 1}
    assert kinds[kinds.index("rewind") + 1] == "fallback"
    assert logged[kinds.index("rewind") + 1].data["rewind"] is True
    assert chunks[1].seq == rewind.seq
    # The history holds the answer alone, never the voided text.
    assistant = [m for m in history if m.role is Role.ASSISTANT]
    assert [(m.content, m.interrupted) for m in assistant] == [("second", False)]
    (left,) = [event for event in events if event.kind == "fallback"]
    assert left.fallback is not None
    assert left.fallback.rewind
    assert left.reason == "retryable (timeout, after it had streamed)"
    # Every attempt is paid for: the voided one by the estimate of what it streamed.
    voided = estimate_tokens("half ")
    if team is not None:
        assert result.usage == Usage(1, 1 + voided, 2 + voided)
        assert team.consumed == Usage(1, 1 + voided, 2 + voided)
        assert result.estimated
    else:
        assert result.usage is None  # the voided attempt reported nothing: unknown


@tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return "rested"


OVERLOADED = ProviderError("overloaded", code="overloaded", retryable=True, status=529)
NAP = ToolCall("n1", "nap", {"seconds": 5})
FIRST_USAGE = Usage(3, 2)
FINAL_USAGE = Usage(4, 6)
Step = Reply | Fail | Hang


def scripted() -> tuple[ScriptedProvider, ScriptedProvider]:
    """Trio-time timeline: turn 1 at t=0, the first member fails at t=1, the second asks for
    ``nap(5)`` at once (t=1..6); turn 2 at t=6, the first fails at t=7, the second streams
    ``final answer`` in six pieces at t=8..13."""
    first = ScriptedProvider(Fail(OVERLOADED, delay=1), Fail(OVERLOADED, delay=1))
    second = ScriptedProvider(
        Reply(calls=[NAP], usage=FIRST_USAGE),
        Reply("final answer", chunk=2, delay=1, usage=FINAL_USAGE),
    )
    return first, second


def assert_answered(history: Sequence[Message]) -> None:
    check_history(history)  # every call answered, right after it
    results = [m for m in history if m.role is Role.TOOL]
    calls = [c for m in history if m.role is Role.ASSISTANT for c in m.calls]
    assert len(results) == len(calls)


#: point -> (timeout, calls of the first member, of the second, stop, committed text, usage)
POINTS: dict[str, tuple[float | None, int, int, StopReason, str, Usage]] = {
    "first-attempt": (0.5, 1, 0, StopReason.TIMEOUT, "", Usage()),
    "tool": (3, 1, 1, StopReason.TIMEOUT, "", FIRST_USAGE),
    "first-attempt-of-turn-2": (6.5, 2, 1, StopReason.TIMEOUT, "", FIRST_USAGE),
    "second-mid-stream": (
        9.5,
        2,
        2,
        StopReason.TIMEOUT,
        "fina",
        FIRST_USAGE + Usage(completion=estimate_tokens("fina"), total=estimate_tokens("fina")),
    ),
    "never": (None, 2, 2, StopReason.COMPLETE, "final answer", FIRST_USAGE + FINAL_USAGE),
}


@pytest.mark.parametrize("point", [*POINTS, "before", "between"])
async def test_a_cut_at_every_point_keeps_the_bounded_turns_promises(
    autojump_clock: trio.testing.MockClock, point: str
) -> None:
    first, second = scripted()
    team = TeamBudget(10_000)
    token = Abort()
    chunks: list[Chunk] = []
    left: list[AgentEvent] = []

    def listen(event: AgentEvent) -> None:
        if event.kind == "fallback":
            left.append(event)
            if point == "between" and event.turn == 2:
                token.cancel("between two members")

    if point == "before":
        token.cancel("before it began")
    living = _tasks()
    async with open_runtime() as runtime:
        fallback = FallbackProvider([first, second], names=["big", "small"])
        agent = await Agent.start(runtime, fallback, tools=[nap], on=[listen])
        timeout = POINTS[point][0] if point in POINTS else None
        async with agent.stream("go", budget=team, abort=[token], timeout=timeout) as run:
            async for chunk in run:
                chunks.append(chunk)
        result = run.result
        history = await agent.conversation.messages()
        in_run = _tasks()
    assert _tasks() == living, "a task outlived the runtime"
    assert in_run >= living
    assert_answered(history)
    if point == "before":
        expected: tuple[Any, ...] = (None, 0, 0, StopReason.CANCELLED, "", Usage())
    elif point == "between":
        expected = (None, 2, 1, StopReason.CANCELLED, "", FIRST_USAGE)
    else:
        expected = POINTS[point]
    _, calls_first, calls_second, stop, text, usage = expected
    assert (len(first.calls), len(second.calls)) == (calls_first, calls_second)
    assert result.stop is stop
    assert result.partial is (stop is not StopReason.COMPLETE)
    # The committed partial is what the stream showed of the cut turn.
    shown = "".join(c.text for c in chunks if c.kind == "content")
    assert shown == text
    assert result.content == text
    if text and stop is not StopReason.COMPLETE:
        assert history[-1].interrupted
        assert history[-1].content == text
    # The budget: every attempt charged -- the failed ones (nothing streamed, nothing
    # reported) nothing, the answered ones what they reported, a cut one its estimate.
    assert team.consumed == usage
    assert result.usage == usage
    # The nap cut in the middle is answered as interrupted.
    if point == "tool":
        (answer,) = [m for m in history if m.role is Role.TOOL]
        assert answer.content == INTERRUPTED
    # Each member the run left was heard of (a fallback event per failure that completed).
    failed = {"before": 0, "first-attempt": 0, "tool": 1, "first-attempt-of-turn-2": 1}
    assert [event.turn for event in left] == [1, 2][: failed.get(point, 2)]


#: point -> the run's timeout, on an HTTP timeline: the first member is refused at t=0 with a
#: Retry-After of 10 s, retried at t=10 and refused again; the second streams ``half an answer``
#: one token per 2 s (t=12, 14, 16).
HTTP_POINTS: dict[str, tuple[float, str, int]] = {
    "backoff": (5, "", 1),
    "second-mid-stream": (13, "half ", 2),
}


@pytest.mark.parametrize("point", HTTP_POINTS)
async def test_a_cut_during_a_backoff_or_the_next_members_stream_over_http(
    mock_clock: trio.testing.MockClock, point: str
) -> None:
    mock_clock.autojump_threshold = IDLE
    timeout, text, refused = HTTP_POINTS[point]
    team = TeamBudget(10_000)
    refusal = {"kind": "http-error", "status": 503, "retryAfter": "10"}
    slow = [{"kind": "slow", "text": "half an answer", "tokensPerSecond": 0.5}]
    living = _tasks()
    async with (
        FaultProviderServer([refusal]) as first,
        FaultProviderServer(slow) as second,
        open_runtime() as runtime,
    ):
        fallback = FallbackProvider(
            [member(first.base_url, "a", retries=1), member(second.base_url, "b")]
        )
        try:
            agent = await Agent.start(runtime, fallback)
            start = trio.current_time()
            result = await agent.generate("go", budget=team, timeout=timeout)
            elapsed = trio.current_time() - start
            history = await agent.conversation.messages()
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (refused, 1 if text else 0)
    assert _tasks() == living
    assert result.stop is StopReason.TIMEOUT
    assert elapsed == pytest.approx(timeout)
    assert result.content == text
    assert_answered(history)
    charged = estimate_tokens(text)
    assert team.consumed == Usage(completion=charged, total=charged)


async def test_the_runs_deadline_is_shared_by_every_member(
    mock_clock: trio.testing.MockClock,
) -> None:
    # Each member would take 8 s to be refused (a Retry-After of 8, once): 16 s for both. The
    # run has 10: it times out in the second member's backoff, at its own deadline.
    mock_clock.autojump_threshold = IDLE
    refusal = {"kind": "http-error", "status": 503, "retryAfter": "8"}
    async with (
        FaultProviderServer([refusal]) as first,
        FaultProviderServer([refusal, *PASS]) as second,
        open_runtime() as runtime,
    ):
        fallback = FallbackProvider(
            [member(first.base_url, "a", retries=1), member(second.base_url, "b", retries=1)],
            on=FallbackOn(),
        )
        try:
            agent = await Agent.start(runtime, fallback)
            start = trio.current_time()
            result = await agent.generate("go", timeout=10)
            elapsed = trio.current_time() - start
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (2, 1)
    assert result.stop is StopReason.TIMEOUT
    assert elapsed == pytest.approx(10)


async def test_when_every_member_fails_the_run_raises_the_last_error_with_notes() -> None:
    async with (
        FaultProviderServer([{"kind": "http-error", "status": 429}]) as first,
        FaultProviderServer([{"kind": "http-error", "status": 503}]) as second,
        open_runtime() as runtime,
    ):
        fallback = FallbackProvider([member(first.base_url, "a"), member(second.base_url, "b")])
        try:
            agent = await Agent.start(runtime, fallback)
            with pytest.raises(ProviderError) as raised:
                await agent.generate("hi")
            history = await agent.conversation.messages()
        finally:
            await fallback.aclose()
    assert (raised.value.code, raised.value.status) == ("server_error", 503)
    assert [note.split(":")[0] for note in raised.value.__notes__] == ["fallback"]
    assert_answered(history)


@st.composite
def timelines(draw: st.DrawFn) -> tuple[list[list[Step]], float | None, int | None]:
    """Random members (2 or 3) and which of them answers each of the two turns (those before
    it fail after a random delay), a random cut time (or none), and maybe a cancel between two
    members (at the first fallback event of turn 1 or 2)."""
    count = draw(st.integers(2, 3))
    steps: list[list[Step]] = [[] for _ in range(count)]
    delays = st.sampled_from([0.0, 0.5, 1.0])
    for turn in (1, 2):
        answering = draw(st.integers(0, count - 1))
        for index in range(answering):
            steps[index].append(Fail(OVERLOADED, delay=draw(delays)))
        if turn == 1:
            steps[answering].append(Reply(calls=[NAP], usage=FIRST_USAGE, delay=draw(delays)))
        else:
            reply = Reply("final answer", chunk=2, delay=draw(delays), usage=FINAL_USAGE)
            steps[answering].append(reply)
    cut = draw(st.one_of(st.none(), st.floats(0.001, 16, allow_nan=False)))
    between = draw(st.one_of(st.none(), st.sampled_from([1, 2])))
    return steps, cut, between


async def _cut_once(steps: list[list[Step]], cut: float | None, between: int | None) -> None:
    members = [ScriptedProvider(*script) for script in steps]
    team = TeamBudget(10_000)
    token = Abort()
    chunks: list[Chunk] = []

    def listen(event: AgentEvent) -> None:
        if event.kind == "fallback" and event.turn == between:
            token.cancel("between two members")

    living = _tasks()
    async with open_runtime() as runtime:
        fallback = FallbackProvider(members)
        agent = await Agent.start(runtime, fallback, tools=[nap], on=[listen])
        async with agent.stream("go", budget=team, abort=[token], timeout=cut) as run:
            async for chunk in run:
                chunks.append(chunk)
        result = run.result
        history = await agent.conversation.messages()
    assert _tasks() == living, "a task outlived the runtime"
    assert_answered(history)
    assert result.partial is (result.stop is not StopReason.COMPLETE)
    assert result.stop in (StopReason.COMPLETE, StopReason.TIMEOUT, StopReason.CANCELLED)
    if result.stop is StopReason.COMPLETE:
        assert result.content == "final answer"
    # What is committed is what the last turn showed (its content before its usage chunk).
    turns: list[str] = [""]
    for chunk in chunks:
        if chunk.kind == "content":
            turns[-1] += chunk.text
        elif chunk.kind == "usage":
            turns.append("")
    assert "rewind" not in [chunk.kind for chunk in chunks]
    assert turns[-1] == ""  # every turn that began ends with its usage, a cut one too
    assert result.content == (turns[-2] if len(turns) > 1 else "")
    # Every attempt charged: the failed ones (nothing streamed or reported) nothing, the others
    # their usage chunk -- one per turn that began streaming an answer, summing to the budget's.
    charged = [chunk.usage for chunk in chunks if chunk.kind == "usage"]
    total = Usage()
    for usage in charged:
        assert usage is not None
        total = total + usage
    assert team.consumed == total == result.usage


@settings(max_examples=80, deadline=None)
@given(timeline=timelines())
def test_random_cuts_over_random_members_keep_the_bounded_turn(
    timeline: tuple[list[list[Step]], float | None, int | None],
) -> None:
    trio.run(_cut_once, *timeline, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_a_durable_jobs_run_takes_no_rewind_it_fails_as_without_the_opt_in(
    mock_clock: trio.testing.MockClock,
) -> None:
    # A durable job's log is derived from its journal, which cannot void a live attempt: its
    # run does not take the rewind, and the failure after the first delta fails the attempt.
    mock_clock.autojump_threshold = IDLE
    async with (
        FaultProviderServer(STALL) as first,
        FaultProviderServer(PASS) as second,
        open_runtime() as runtime,
    ):
        fallback = FallbackProvider(
            [member(first.base_url, "a", idle=5), member(second.base_url, "b")], rewind=True
        )
        registry = AgentRegistry()
        registry.add("fb", fallback)
        try:
            async with open_job_queue(
                MemoryRunStore(), registry, runtime, retries=0, clock=trio.current_time
            ) as queue:
                id = await queue.enqueue(AgentJob.ask("fb", "hi"))
                with pytest.raises(JobError) as raised:
                    await queue.result(id)
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (1, 0)
    assert "no event for 5 s" in str(raised.value)  # the first member's stall, not switched
