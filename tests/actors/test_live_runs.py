"""Following in-memory runs (issue 25, section 1): every run's event log, read by the caller's
stream and by any follower of ``runtime.watch(run_id, after=...)`` -- numbered 1..n without a
hole, one terminal event at the end, approvals, compactions and delegated runs in it, and every
way a run ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors import Abort, ActorStopped, RunContext, handoff, open_runtime, tool
from actors.agent import Agent, AgentBusy, Chunk
from actors.conversation import Conversation
from actors.testing import Fail, Hang, Reply, ScriptedProvider
from protocols.accounting import TokenBudget
from protocols.authority import NO_APPROVER_REASON, Authority, Rule, Verdict
from protocols.errors import ProviderError, ValidationError
from protocols.live import TERMINAL, RunEvent
from protocols.messages import AgentResult, Message, StopReason, ToolCall, Usage
from protocols.wire import classify_status


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def survey(topic: str, ctx: RunContext[Any]) -> str:
    """Look around, saying how it goes."""
    ctx.progress(f"looking at {topic}")
    await trio.sleep(1)
    ctx.progress("done looking")
    return f"{topic}: fine"


@tool
async def refund(cents: int) -> str:
    """Refund an order."""
    return f"refunded {cents}"


def tool_turn(*calls: ToolCall, delay: float = 0.0) -> Reply:
    return Reply(calls=calls, usage=Usage(10, 5), delay=delay)


async def follow(runtime: Any, run_id: str, after: int = 0) -> list[RunEvent]:
    return [event async for event in runtime.watch(run_id, after=after)]


def check_log(events: Sequence[RunEvent], run_id: str) -> None:
    """Seqs 1..n with no hole, one run, and exactly one terminal event: the last."""
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert {event.run_id for event in events} == {run_id}
    assert [event.terminal for event in events] == [False] * (len(events) - 1) + [True]
    assert sum(event.kind in TERMINAL for event in events) == 1


# -- the log of one run ---------------------------------------------------------------------------


async def test_a_run_publishes_seqs_one_to_n_and_one_terminal_event() -> None:
    provider = ScriptedProvider(
        tool_turn(ToolCall("c1", "add", {"a": 19, "b": 23})),
        Reply("It is 42.", chunk=3, usage=Usage(20, 4)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], name="calc")
        result = await agent.generate("What is 19 + 23?")
        events = await follow(runtime, result.run_id)
    check_log(events, result.run_id)
    assert [event.kind for event in events] == [
        "started",
        "turn",
        "usage",
        "tool_call",
        "tool_result",
        "turn",
        "content",
        "content",
        "content",
        "usage",
        "finished",
    ]
    assert events[0].data == {"agent": "calc"}
    assert [e.data["turn"] for e in events if e.kind == "turn"] == [1, 2]
    assert events[3].data["call"] == ToolCall("c1", "add", {"a": 19, "b": 23})
    assert events[4].data["result"].value == 42
    assert "".join(e.data["text"] for e in events if e.kind == "content") == "It is 42."
    assert events[2].data == {"usage": Usage(10, 5), "estimated": False, "finish": "tool_calls"}
    assert events[-1].data == {"result": result}


async def test_the_callers_stream_is_the_sequence_a_follower_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One run, three readers: its chunks, its own events (run.events()), and a follower that
    # starts once the run has begun. Same kinds, seqs and data.
    provider = ScriptedProvider(
        Reply(
            thinking="Let me look.",
            chunk=4,
            delay=0.5,
            calls=[ToolCall("s1", "survey", {"topic": "x"})],
        ),
        Reply("All fine.", chunk=2, delay=0.5, usage=Usage(30, 3)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[survey])
        followed: list[RunEvent] = []
        chunks: list[Chunk] = []

        async def follower(run_id: str) -> None:
            followed.extend(await follow(runtime, run_id))

        async with agent.stream("How is x?") as run, trio.open_nursery() as nursery:
            async for chunk in run:
                if not chunks:
                    assert chunk.run_id == run.run_id
                    nursery.start_soon(follower, run.run_id)
                chunks.append(chunk)
        result = run.result
        own = [event async for event in run.events()]
    check_log(followed, result.run_id)
    assert own == followed
    by_seq = {event.seq: event for event in followed}
    assert [chunk.seq for chunk in chunks] == sorted(chunk.seq for chunk in chunks)
    assert {chunk.kind for chunk in chunks} == {
        "thinking",
        "tool_call",
        "progress",
        "tool_result",
        "content",
        "usage",
    }
    for chunk in chunks:
        event = by_seq[chunk.seq]
        assert (event.kind, event.run_id) == (chunk.kind, chunk.run_id)
        if chunk.kind in ("content", "thinking"):
            assert event.data == {"text": chunk.text}
        elif chunk.kind == "tool_call":
            assert event.data == {"call": chunk.call}
        elif chunk.kind == "tool_result":
            assert event.data == {"result": chunk.result}
        elif chunk.kind == "usage":
            assert event.data["usage"] == chunk.usage
            assert event.data["estimated"] == chunk.estimated
        else:
            assert event.data == {"call_id": "s1", "text": chunk.text}
    shown = {chunk.seq for chunk in chunks}
    assert {e.kind for e in followed if e.seq not in shown} == {"started", "turn", "finished"}
    assert followed[-1].data["result"] == result


async def test_run_events_alone_starts_the_run_and_gives_its_result() -> None:
    provider = ScriptedProvider(Reply("Hello there.", chunk=5))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        async with agent.stream("hi") as run:
            events = [event async for event in run.events()]
        assert run.result.content == "Hello there."
        assert events[-1].kind == "finished"
        assert events[-1].data["result"] == run.result
        assert [e.seq for e in await follow(runtime, run.run_id)] == [e.seq for e in events]
        with pytest.raises(ValidationError, match="after"):
            run.events(after=-1)


async def test_a_follower_after_k_reads_exactly_the_rest() -> None:
    provider = ScriptedProvider(Reply("one two three four five", chunk=4))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("count")
        everything = await follow(runtime, result.run_id)
        for after in range(len(everything) + 1):
            assert await follow(runtime, result.run_id, after) == everything[after:]
        # Past the end: nothing, at once (the log has ended).
        assert await follow(runtime, result.run_id, len(everything) + 5) == []


async def test_a_follower_behind_a_small_buffer_reads_a_gap_never_a_hole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    text = "abcdefghijklmnopqrstuvwxyz"
    provider = ScriptedProvider(Reply(text, chunk=1, delay=0.1))
    async with open_runtime(event_capacity=8) as runtime:
        agent = await Agent.start(runtime, provider)
        async with agent.stream("letters") as run:
            seen: list[Chunk] = [chunk async for chunk in run]
        run_id = run.run_id
        events = await follow(runtime, run_id)
    total = 1 + 1 + len(text) + 1 + 1  # started, turn, deltas, usage, finished
    assert seen[-1].seq == total - 1  # the usage chunk
    gap, *kept = events
    assert gap.kind == "gap"
    assert gap.data == {"first": 1}
    assert gap.seq == total - 8  # the events the log no longer keeps: 1 .. total - 8
    assert [e.seq for e in kept] == list(range(total - 7, total + 1))
    assert kept[-1].kind == "finished"
    # A follower within what the log keeps reads no gap.
    async with open_runtime(event_capacity=8) as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply(text, chunk=1, delay=0.1)))
        async with agent.stream("letters") as run, trio.open_nursery() as nursery:
            live: list[RunEvent] = []

            async def follower() -> None:
                live.extend(await follow(runtime, run.run_id))

            async for chunk in run:
                if chunk.seq == 3:  # (the first delta: 1 and 2 are started, turn)
                    nursery.start_soon(follower)
        assert [e.kind for e in live].count("gap") == 0
        check_log(live, run.run_id)


async def test_an_ended_runs_log_is_kept_for_keep_events_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(keep_events=30) as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply("a"), Reply("b")))
        first = await agent.generate("1")
        await trio.sleep(29)
        assert (await follow(runtime, first.run_id))[-1].kind == "finished"
        await trio.sleep(2)
        with pytest.raises(ValidationError, match="no longer kept"):
            runtime.watch(first.run_id)
        with pytest.raises(ValidationError, match="no run"):
            runtime.watch("never-started")
        # A run going on is kept however long it goes on.
        slow = await Agent.start(runtime, ScriptedProvider(Reply("zzz", chunk=1, delay=40)))
        async with slow.stream("sleep") as run:
            async for _ in run:
                pass
        assert (await follow(runtime, run.run_id))[-1].kind == "finished"


# -- what happens in a run ------------------------------------------------------------------------


async def test_approvals_asked_and_answered_are_in_the_log() -> None:
    asks = Authority(rules=(Rule("ask", tools=("refund",), reason="needs a human"),))
    answers = {"r1": (True, "ok by me"), "r2": (False, "too much")}

    async def approve(call: ToolCall, verdict: Verdict) -> tuple[bool, str]:
        await trio.lowlevel.checkpoint()
        return answers[call.id]

    provider = ScriptedProvider(
        tool_turn(
            ToolCall("r1", "refund", {"cents": 5}), ToolCall("r2", "refund", {"cents": 5000})
        ),
        Reply("One refunded."),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[refund], authority=asks, approve=approve
        )
        result = await agent.generate("Refund both.")
        events = await follow(runtime, result.run_id)
        # With no approver attached, the ask is answered "no" at once -- and said so.
        alone = await Agent.start(
            runtime,
            ScriptedProvider(tool_turn(ToolCall("r3", "refund", {"cents": 1})), Reply("No.")),
            tools=[refund],
            authority=asks,
        )
        denied = await follow(runtime, (await alone.generate("Refund.")).run_id)
    check_log(events, result.run_id)
    approvals = [e for e in events if e.kind.startswith("approval")]
    # (Asked concurrently: in whichever order the approver is reached.)
    requested = {e.data["call_id"]: e.data for e in approvals if e.kind == "approval_requested"}
    answered = {e.data["call_id"]: e.data for e in approvals if e.kind == "approval_answered"}
    assert len(approvals) == 4
    assert requested == {
        "r1": {"call_id": "r1", "tool": "refund", "reason": "needs a human"},
        "r2": {"call_id": "r2", "tool": "refund", "reason": "needs a human"},
    }
    assert answered == {
        "r1": {"call_id": "r1", "allow": True, "reason": "ok by me"},
        "r2": {"call_id": "r2", "allow": False, "reason": "too much"},
    }
    kinds = [e.kind for e in events]
    # Asked after the calls were shown, answered before any result.
    assert kinds.index("tool_call") < kinds.index("approval_requested")
    assert max(i for i, k in enumerate(kinds) if k.startswith("approval")) < kinds.index(
        "tool_result"
    )
    results = {e.data["result"].id: e.data["result"] for e in events if e.kind == "tool_result"}
    assert results["r1"].value == "refunded 5"
    assert results["r2"].error == "denied: too much"
    assert events[-1].kind == "finished"  # in memory a run waits for its approver: never
    # awaiting_input (only a durable job stops to wait for a human)
    assert [(e.kind, e.data) for e in denied if e.kind.startswith("approval")] == [
        ("approval_requested", {"call_id": "r3", "tool": "refund", "reason": "needs a human"}),
        ("approval_answered", {"call_id": "r3", "allow": False, "reason": NO_APPROVER_REASON}),
    ]


class Summaries:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: Sequence[Message]) -> str:
        self.calls += 1
        return f"summary {self.calls}"


class Overflowing(ScriptedProvider):
    """Refuses, as a vendor does (a 400 saying so), a prompt longer than ``limit`` characters."""

    def __init__(self, limit: int, *steps: Reply | str) -> None:
        super().__init__(*steps)
        self.limit = limit

    def stream(self, messages: Any, *, tools: Any = None, options: Any = None) -> Any:
        size = sum(len(m.content) for m in messages)
        if size > self.limit:
            code, retryable = classify_status(400, f"prompt is too long: {size} characters")
            error = ProviderError("prompt is too long", code=code, retryable=retryable, status=400)
            self._script.appendleft(Fail(error))
        return super().stream(messages, tools=tools, options=options)


async def test_compactions_are_in_the_log_with_their_reason_and_size() -> None:
    async with open_runtime() as runtime:
        # The window: the prompt reaches it before the first provider call.
        conversation = await Conversation.start(runtime, summarize=Summaries(), keep=1)
        await conversation.add(
            Message.user("x" * 800), Message.assistant("y" * 800), Message.user("z" * 800)
        )
        await conversation.add(Message.assistant("w" * 800))
        agent = await Agent.start(
            runtime, ScriptedProvider(Reply("ok")), conversation=conversation, window=200
        )
        result = await agent.generate("and now?")
        events = await follow(runtime, result.run_id)
        live = len((await conversation.history()).messages)
        # The provider refuses the prompt as too long: one compaction, the turn sent again.
        other = await Conversation.start(runtime, summarize=Summaries(), keep=1)
        await other.add(Message.user("x" * 800), Message.assistant("y" * 800))
        agent = await Agent.start(
            runtime, Overflowing(1_000, Reply("fits now")), conversation=other
        )
        overflowed = await agent.generate("and now?")
        refused = await follow(runtime, overflowed.run_id)
    check_log(events, result.run_id)
    [compaction] = [e for e in events if e.kind == "compaction"]
    # Four earlier messages and the run's own input were live; ``live`` are left after the
    # run (the answer among them).
    assert compaction.data == {"reason": "window", "replaced": 5 - (live - 1)}
    assert compaction.data["replaced"] >= 1
    kinds = [e.kind for e in events]
    assert kinds.index("compaction") < kinds.index("turn")
    check_log(refused, overflowed.run_id)
    assert [e.kind for e in refused] == [
        "started",
        "turn",
        "guard",
        "compaction",
        "content",
        "usage",
        "finished",
    ]
    assert refused[3].data["reason"] == "overflow"
    assert refused[3].data["replaced"] >= 1


async def test_a_delegated_run_is_followed_by_the_id_its_parent_names() -> None:
    async with open_runtime() as runtime:
        child = await Agent.start(
            runtime, ScriptedProvider(Reply("Paris.", chunk=2, delay=1.0)), name="geo"
        )
        provider = ScriptedProvider(
            tool_turn(ToolCall("g1", "geo", {"input": "Capital of France?"})),
            Reply("It is Paris."),
        )
        parent = await Agent.start(runtime, provider, tools=[child.as_tool()], name="lead")
        children: list[list[RunEvent]] = []
        parents: list[RunEvent] = []
        async with parent.stream("Capital of France?") as run, trio.open_nursery() as nursery:

            async def follow_child(run_id: str) -> None:
                children.append(await follow(runtime, run_id))

            async def follow_parent() -> None:
                async for event in runtime.watch(run.run_id):
                    parents.append(event)
                    if event.kind == "subagent_started":
                        # At once, as a client does when it reads the event.
                        nursery.start_soon(follow_child, event.data["run_id"])

            chunks: list[Chunk] = []
            async for chunk in run:
                if not chunks:
                    nursery.start_soon(follow_parent)
                chunks.append(chunk)
    check_log(parents, run.run_id)
    started = next(e for e in parents if e.kind == "subagent_started")
    finished = next(e for e in parents if e.kind == "subagent_finished")
    child_id = started.data["run_id"]
    assert child_id.startswith("subagent:g1:")
    assert started.data == {"call_id": "g1", "agent": "geo", "run_id": child_id}
    assert finished.data == {"call_id": "g1", "run_id": child_id, "status": "complete"}
    [followed] = children
    check_log(followed, child_id)
    assert [e.kind for e in followed] == [
        "started",
        "turn",
        "content",
        "content",
        "content",
        "usage",
        "finished",
    ]
    assert followed[-1].data["result"].content == "Paris."
    # The child's chunks reach the parent's stream under the child's id and its seqs; none of
    # them is in the parent's log.
    delegated = [c for c in chunks if c.run_id == child_id]
    assert [c.seq for c in delegated] == [e.seq for e in followed if e.kind in ("content", "usage")]
    assert not any(e.kind == "content" and e.data["text"] == "Pa" for e in parents)


async def test_a_handed_to_agent_goes_on_in_the_same_log() -> None:
    async with open_runtime() as runtime:
        billing = await Agent.start(
            runtime, ScriptedProvider(Reply("Refund sent.")), name="billing"
        )
        provider = ScriptedProvider(tool_turn(ToolCall("h1", "transfer_to_billing", {})))
        front = await Agent.start(runtime, provider, tools=[handoff(billing)], name="front")
        result = await front.generate("I want a refund.")
        events = await follow(runtime, result.run_id)
    check_log(events, result.run_id)
    kinds = [e.kind for e in events]
    assert kinds.count("started") == 1
    assert events[0].data == {"agent": "front"}
    assert kinds.index("handoff") < kinds.index("content")
    assert next(e for e in events if e.kind == "handoff").data == {
        "call_id": "h1",
        "agent": "billing",
    }
    assert events[-1].data["result"].agent == "billing"
    assert events[-1].data["result"].content == "Refund sent."


# -- how a run ends -------------------------------------------------------------------------------


async def test_every_way_a_run_ends_is_one_terminal_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        # Aborted mid-answer: cancelled, with the partial result.
        agent = await Agent.start(runtime, ScriptedProvider(Hang("Once upon")))
        async with agent.stream("a story") as run:
            async for chunk in run:
                if chunk.kind == "content":
                    run.abort("enough")
        aborted = await follow(runtime, run.run_id)
        # The deadline: finished, partial, stop "timeout" (a cut, not a cancel: as a durable
        # job ends "partial", not "cancelled").
        agent = await Agent.start(runtime, ScriptedProvider(Hang("Once")))
        timed = await agent.generate("a story", timeout=5)
        timeout = await follow(runtime, timed.run_id)
        # The budget.
        agent = await Agent.start(runtime, ScriptedProvider(Reply("word " * 200, chunk=5)))
        spent = await agent.generate("talk", budget=TokenBudget(max=10, scope="completion"))
        budget = await follow(runtime, spent.run_id)
        # A failure: its type, code and message.
        agent = await Agent.start(runtime, ScriptedProvider(Fail()))
        async with agent.stream("fail") as run:
            with pytest.raises(ProviderError):
                async for _ in run:
                    pass
        failed = await follow(runtime, run.run_id)
        # Withdrawn while it waited its turn: cancelled, nothing done.
        token = Abort()
        agent = await Agent.start(runtime, ScriptedProvider(Reply("a", delay=10), Reply("b")))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.generate, "first")
            await trio.sleep(1)
            queued = agent.stream("second", abort=[token])
            async with queued, trio.open_nursery() as inner:

                async def drain() -> None:
                    async for _ in queued:
                        pass

                inner.start_soon(drain)
                await trio.sleep(1)
                token.cancel("not needed")
        withdrawn = await follow(runtime, queued.run_id)
        # Refused because the agent is busy.
        agent = await Agent.start(runtime, ScriptedProvider(Reply("a", delay=10)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.generate, "first")
            await trio.sleep(1)
            rejected = agent.stream("second", if_busy="reject")
            with pytest.raises(AgentBusy):
                async for _ in rejected:
                    pass
        busy = await follow(runtime, rejected.run_id)
    for events, kind in (
        (aborted, "cancelled"),
        (timeout, "finished"),
        (budget, "finished"),
        (failed, "failed"),
        (withdrawn, "cancelled"),
        (busy, "failed"),
    ):
        check_log(events, events[0].run_id)
        assert events[-1].kind == kind
    assert aborted[-1].data["result"].stop is StopReason.CANCELLED
    assert aborted[-1].data["result"].content == "Once upon"
    assert timeout[-1].data["result"].stop is StopReason.TIMEOUT
    assert timeout[-1].data["result"].partial
    assert budget[-1].data["result"].stop is StopReason.BUDGET
    assert failed[-1].data == {
        "error": {"type": "ProviderError", "code": "scripted", "message": "scripted failure"}
    }
    assert [e.kind for e in withdrawn] == ["cancelled"]
    assert withdrawn[-1].data["result"] == AgentResult(
        stop=StopReason.CANCELLED, run_id=queued.run_id, agent=withdrawn[-1].data["result"].agent
    )
    assert [e.kind for e in busy] == ["failed"]
    assert busy[-1].data["error"]["type"] == "AgentBusy"
    assert busy[-1].data["error"]["code"] == "busy"


async def test_a_delegated_run_cut_with_its_parent_ends_its_log(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        child = await Agent.start(runtime, ScriptedProvider(Hang("thinking...")), name="slow")
        provider = ScriptedProvider(tool_turn(ToolCall("s1", "slow", {"input": "go"})))
        parent = await Agent.start(runtime, provider, tools=[child.as_tool()])
        result = await parent.generate("go", timeout=10)
        events = await follow(runtime, result.run_id)
        child_id = next(e for e in events if e.kind == "subagent_started").data["run_id"]
        cut = await follow(runtime, child_id)
    assert result.stop is StopReason.TIMEOUT
    check_log(events, result.run_id)
    check_log(cut, child_id)
    assert cut[-1].kind == "finished"
    assert cut[-1].data["result"].stop is StopReason.TIMEOUT
    assert cut[-1].data["result"].content == "thinking..."


async def test_a_run_its_agent_stopped_under_it_ends_failed_as_its_caller_is_told(
    autojump_clock: trio.testing.MockClock,
) -> None:
    told: list[BaseException] = []
    async with trio.open_nursery() as outside, open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Hang("half an ans")))
        run = agent.stream("go")

        async def caller() -> None:
            try:
                async for _ in run:
                    pass
            except ActorStopped as error:
                told.append(error)

        outside.start_soon(caller)
        await trio.sleep(1)
        live = runtime.live.get(run.run_id)
        assert live is not None
        assert live.ended is None
        # The runtime is gone, and the agent's actor with it, mid-answer.
    events = live.log.read(0)
    check_log(events, run.run_id)
    assert [e.kind for e in events] == ["started", "turn", "content", "usage", "failed"]
    assert events[-1].data["error"]["type"] == "ActorStopped"
    assert [type(error) for error in told] == [ActorStopped]
