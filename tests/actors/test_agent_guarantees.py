"""The seed guarantees of issue 6, ported one test each (test names cite the guarantee).

``000_gN`` is notes/000.md section 3 guarantee N (``000_2_10`` etc. its sections 2.10-2.13 and
5.2), ``001_*`` notes/001.md, ``003_gN`` / ``003_2_*`` notes/003.md, ``002_gN`` notes/002.md
section 4. DESIGN.md sections 4 and 12 override the seeds where they differ (the test then
asserts the DESIGN behaviour and says so). Guarantees the code does not meet yet are written
as they should hold, marked ``# GAP:`` / ``# BUG:`` and ``xfail(strict=True)``.

Everything runs on trio's autojump clock (``mock_clock`` with a small threshold where real
sockets are involved): no real sleeps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from actors import Abort, open_runtime, tool
from actors.agent import (
    EXHAUSTED,
    FALLBACK_SUMMARY,
    TOOLS_OFF,
    Agent,
    AgentEvent,
    AgentStatus,
    Chunk,
)
from actors.conversation import CompactionError, Conversation
from actors.providers import OpenAIChat, ProviderStream, RetryEvent, RetryPolicy
from actors.testing import (
    Fail,
    FaultProviderServer,
    Hang,
    Reply,
    ScriptedProvider,
    Simulator,
)
from actors.tools import INTERRUPTED, NOT_EXECUTED, ToolRegistry
from protocols.accounting import TokenBudget, estimate_tokens
from protocols.authority import NO_APPROVER_REASON, Authority, Rule, Verdict
from protocols.context import Scope
from protocols.errors import AgentsError, ProviderError, ValidationError
from protocols.faults import text_event
from protocols.messages import (
    Message,
    ProviderOptions,
    Role,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolSuccess,
    Usage,
)

# -- helpers -----------------------------------------------------------------------------------


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return "rested"


class Counter:
    """Tools that record every run: ``counter.tool(name)`` makes one."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, float]] = []

    def tool(self, name: str, *, value: Any = "done", seconds: float = 0.0) -> Any:
        runs = self.runs

        async def body(x: int = 0) -> Any:
            runs.append((name, trio.current_time()))
            if seconds:
                await trio.sleep(seconds)
            return value

        return tool(name=name, description=f"The {name} tool.")(body)

    def names(self) -> list[str]:
        return [name for name, _ in self.runs]


class Recording(ScriptedProvider):
    """A scripted provider that also records the raw ``tools`` and ``options`` it was given."""

    def __init__(self, *steps: Any) -> None:
        super().__init__(*steps)
        self.raw: list[tuple[Sequence[ToolDefinition] | None, ProviderOptions | None]] = []

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        self.raw.append((tools, options))
        return super().stream(messages, tools=tools, options=options)


def call(call_id: str, name: str = "add", **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments or {"a": 1, "b": 2})


def answered_in_place(messages: Sequence[Message]) -> bool:
    """Every assistant tool call is answered by exactly one tool message, and all of them come
    right after it, before any other message (notes/002.md guarantee 8)."""
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role is Role.TOOL:
            return False  # a tool message that answers no call just before it
        if message.role is not Role.ASSISTANT or not message.calls:
            continue
        expected = sorted(c.id for c in message.calls)
        answers: list[str] = []
        while index < len(messages) and messages[index].role is Role.TOOL:
            answers.append(messages[index].tool_call_id or "")
            index += 1
        if sorted(answers) != expected:
            return False
    return True


def same(message: Message) -> dict[str, Any]:
    """A message without what is minted per message (its id and creation time)."""
    return attrs.asdict(message, filter=lambda a, _: a.name not in ("id", "created_at"))


@attrs.frozen
class Inner:
    depth: int


def kinds(events: Sequence[AgentEvent]) -> list[str]:
    return [e.kind for e in events]


async def cancel_later(token: Abort, seconds: float, reason: str = "stop") -> None:
    await trio.sleep(seconds)
    token.cancel(reason)


# -- notes/000.md section 3 --------------------------------------------------------------------


async def test_000_g1_tool_iteration_is_capped_at_the_default_limit_of_10() -> None:
    provider = ScriptedProvider(*(Reply(calls=[call(f"c{i}")]) for i in range(12)))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("loop forever")
    assert len(provider.calls) == 10
    assert result.turns == 10
    assert result.stop is StopReason.EXHAUSTED


async def test_000_g1_every_bound_folds_into_one_cancel_and_the_run_always_terminates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first, second = Abort(), Abort()
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Hang("a"), Hang("b"), Hang("c")))
        # Either of two per-run tokens cancels the run.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_later, second, 2.0, "second token")
            result = await agent.generate("x", abort=[first, second])
        assert (result.stop, result.content) == (StopReason.CANCELLED, "a")
        assert not first.cancelled  # composed, never replaced or tripped by the run
        # agent.abort() folds in too.
        async with trio.open_nursery() as nursery:

            async def abort_soon() -> None:
                await trio.sleep(1)
                agent.abort("from the agent")

            nursery.start_soon(abort_soon)
            assert (await agent.generate("y", abort=[first])).stop is StopReason.CANCELLED
        # The deadline: a run that would hang forever ends exactly at its timeout.
        start = trio.current_time()
        result = await agent.generate("z", timeout=7)
        assert result.stop is StopReason.TIMEOUT
        assert trio.current_time() - start == pytest.approx(7)


async def test_000_g1_a_construction_abort_token_composes_with_the_runs_tokens() -> None:
    constructed = Abort()
    constructed.cancel("agent shut down")
    provider = ScriptedProvider(Reply("never"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, abort=[constructed])
        result = await agent.generate("hi", abort=[Abort()])
    assert result.stop is StopReason.CANCELLED
    assert provider.calls == []


@pytest.mark.parametrize("bound", ["token", "agent.abort", "timeout", "budget"])
async def test_000_g2_a_cancel_of_any_kind_resolves_partial_with_abort_then_finish(
    bound: str, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[AgentEvent] = []
    token = Abort()
    if bound == "budget":
        provider = ScriptedProvider(Reply("word " * 200, chunk=5, delay=0.1))
    else:
        provider = ScriptedProvider(Hang("accumulated"))
    by_bound: dict[str, dict[str, Any]] = {
        "token": {"abort": [token]},
        "agent.abort": {},
        "timeout": {"timeout": 3},
        "budget": {"budget": TokenBudget(max=10)},
    }
    options = by_bound[bound]
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, on=[events.append])
        async with trio.open_nursery() as nursery:
            if bound == "token":
                nursery.start_soon(cancel_later, token, 1.0, "user stop")
            elif bound == "agent.abort":

                async def abort_soon() -> None:
                    await trio.sleep(1)
                    agent.abort("user stop")

                nursery.start_soon(abort_soon)
            result = await agent.generate("go", **options)
        assert agent.status is AgentStatus.DONE
    expected = {
        "token": StopReason.CANCELLED,
        "agent.abort": StopReason.CANCELLED,
        "timeout": StopReason.TIMEOUT,
        "budget": StopReason.BUDGET,
    }[bound]
    assert result.partial
    assert result.stop is expected
    if bound != "budget":
        assert result.content == "accumulated"
    else:
        assert result.content
        assert result.content != "word " * 200
    assert kinds(events)[-2:] == ["abort", "finish"]
    assert "error" not in kinds(events)
    abort, finish = events[-2:]
    assert abort.stop is expected
    assert (finish.partial, finish.stop) == (True, expected)
    if bound in ("token", "agent.abort"):
        assert abort.reason == "user stop"


async def test_000_g2_only_a_genuine_failure_raises_with_error_and_no_finish() -> None:
    events: list[AgentEvent] = []

    @tool
    def broken() -> str:
        """Always raises."""
        raise RuntimeError("tool bug")

    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "broken", {})]),
        Reply("recovered"),
        Fail(ProviderError("upstream down", code="server_error", retryable=False)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[broken], on=[events.append])
        # A tool failure is not a genuine run failure: the run completes.
        assert (await agent.generate("a")).content == "recovered"
        events.clear()
        with pytest.raises(ProviderError, match="upstream down"):
            await agent.generate("b")
        assert agent.status is AgentStatus.ERROR
    assert kinds(events)[-1] == "error"
    assert "finish" not in kinds(events)
    assert "abort" not in kinds(events)
    assert isinstance(events[-1].error, ProviderError)


async def test_000_g3_003_g3_pre_aborted_run_is_partial_without_a_provider_call() -> None:
    # DESIGN section 12 overrides 003 G3 ("AbortError"): a pre-cancelled run resolves partial.
    events: list[AgentEvent] = []
    token = Abort()
    token.cancel("changed my mind")
    provider = ScriptedProvider(Reply("never"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, on=[events.append])
        await agent.conversation.add([Message.user("earlier"), Message.assistant("reply")])
        result = await agent.generate("hi", abort=[token])
        assert (result.stop, result.partial, result.turns) == (StopReason.CANCELLED, True, 0)
        assert result.messages == ()
        assert kinds(events) == ["abort", "finish"]  # withdrawn: it never started
        assert events[0].reason == "changed my mind"
        # A budget already spent (max=0) is also a bound that tripped before the start.
        spent = await agent.generate("again", budget=TokenBudget(max=0))
        assert spent.stop is StopReason.BUDGET
        history = [m.content for m in await agent.conversation.messages()]
    assert provider.calls == []
    # The cancelled run was withdrawn (nothing committed); the run whose budget was already
    # spent began, so it commits its user message and stops before any provider call.
    assert history == ["earlier", "reply", "again"]


async def test_000_g4_the_partial_is_exactly_the_yielded_deltas_never_counted_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("abcd" * 10, chunk=4, delay=1))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        chunks: list[Chunk] = []
        async with agent.stream("spell", timeout=5.5, budget=TokenBudget(max=1000)) as run:
            async for chunk in run:
                chunks.append(chunk)
        result = run.result
        stored = await agent.conversation.messages()
    streamed = "".join(c.text for c in chunks if c.kind == "content")
    assert streamed == "abcd" * 5  # five deltas before the deadline
    assert result.content == streamed
    assert [m.content for m in stored if m.role is Role.ASSISTANT] == [streamed]
    usage = [c.usage for c in chunks if c.kind == "usage"]
    assert len(usage) == 1
    # The cut turn draws the estimate of what was streamed, once.
    assert usage[0] == result.usage == Usage(completion=5, total=5)
    assert result.usage.completion == estimate_tokens(streamed)


async def test_000_g5_generate_deep_equals_a_drained_stream_and_provider_generate_too() -> None:
    def script() -> ScriptedProvider:
        return ScriptedProvider(
            Reply(calls=[call("c1")], thinking="plan", usage=Usage(4, 2)),
            Reply("It is 3.", thinking="sure", chunk=2, usage=Usage(9, 3)),
        )

    async with open_runtime() as runtime:
        generated = await (await Agent.start(runtime, script(), tools=[add])).generate("1+2?")
        agent = await Agent.start(runtime, script(), tools=[add])
        async with agent.stream("1+2?") as run:
            async for _ in run:
                pass
    # The whole result: every field, and every message but its minted id and timestamp.
    # Two runs: their ids (and their agents' names) differ, everything else is equal.
    blank = {"messages": (), "run_id": "", "agent": ""}
    assert attrs.evolve(run.result, **blank) == attrs.evolve(generated, **blank)
    assert [same(m) for m in run.result.messages] == [same(m) for m in generated.messages]
    # One level down: provider.generate is provider.stream drained.
    messages = [Message.user("hi")]
    one = await ScriptedProvider(Reply("abc", thinking="t", chunk=1)).generate(messages)
    async with ScriptedProvider(Reply("abc", thinking="t", chunk=1)).stream(messages) as stream:
        async for _ in stream:
            pass
    assert stream.result == one


async def test_000_g6_the_run_progresses_and_settles_while_nobody_reads_its_chunks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(
        Reply("first ", chunk=1, delay=0.1, calls=[call("c1")]), Reply("done", chunk=1)
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        async with agent.stream("go") as run:
            first = await run.__anext__()  # take the slot, then stop reading
            await trio.sleep(60)
            # The run finished on its own: nothing waited for the reader.
            assert agent.status is AgentStatus.DONE
            assert (await agent.conversation.messages())[-1].content == "done"
            rest = [chunk async for chunk in run]
        assert first.kind == "content"
        assert run.result.content == "done"
        assert len(rest) > 3  # everything was buffered, nothing dropped


async def test_000_g7_tool_errors_are_isolated_results_with_their_text_unquoted() -> None:
    @tool
    def broken() -> str:
        """Always raises."""
        raise ValueError("disk on fire")

    @tool
    def info() -> dict[str, int]:
        """Some data."""
        return {"n": 1}

    calls = [
        ToolCall("c1", "broken", {}),
        ToolCall("c2", "missing", {}),
        ToolCall("c3", "info", {}),
    ]
    provider = ScriptedProvider(Reply(calls=calls), Reply("handled"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[broken, info])
        result = await agent.generate("go")
    assert result.content == "handled"
    tool_messages = [m for m in result.messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in tool_messages] == ["c1", "c2", "c3"]
    failure, unknown, success = (m.content for m in tool_messages)
    assert failure == "ValueError: disk on fire"  # the error text itself, not JSON-quoted
    assert unknown.startswith("skipped: there is no tool named 'missing'")
    assert success in {'{"n":1}', '{"n": 1}'}  # JSON of the value
    assert provider.calls[1].messages[-1].content == success  # the model sees them


async def test_000_g8_a_raising_error_handler_is_swallowed_and_emits_follow_transitions() -> None:
    seen: list[tuple[str, AgentStatus]] = []
    handled: list[str] = []
    agent: Agent | None = None

    def watch(event: AgentEvent) -> None:
        assert agent is not None
        seen.append((event.kind, agent.status))

    def bad(event: AgentEvent) -> None:
        raise RuntimeError(event.kind)

    def bad_handler(error: BaseException, event: AgentEvent) -> None:
        handled.append(event.kind)
        raise RuntimeError("the handler itself is broken")

    provider = ScriptedProvider(Reply("fine"), Fail())
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, on=[bad, watch], error=bad_handler)
        assert (await agent.generate("a")).content == "fine"
        with pytest.raises(ProviderError):
            await agent.generate("b")
    # The handler saw every throw, its own throw was swallowed (no recursion), and the
    # listener after the raising one still ran for every event.
    assert handled == [kind for kind, _ in seen]
    statuses = dict(seen)
    assert statuses["start"] is AgentStatus.RUNNING
    assert statuses["finish"] is AgentStatus.DONE
    assert statuses["error"] is AgentStatus.ERROR  # emitted after the state it reports


async def test_000_g8_without_an_error_handler_a_listener_throw_is_dropped() -> None:
    def bad(event: AgentEvent) -> None:
        raise RuntimeError("dropped")

    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply("ok")), on=[bad])
        result = await agent.generate("hi")
    assert (result.content, result.stop) == ("ok", StopReason.COMPLETE)
    assert agent.status is AgentStatus.DONE


async def test_000_g9_denied_call_never_runs_and_spends_no_budget() -> None:
    counter = Counter()
    rm, ls = counter.tool("rm"), counter.tool("ls")
    authority = Authority([Rule("deny", tools=("rm",), reason="destructive", zone="fs")])
    calls = [ToolCall("c1", "rm", {}), ToolCall("c2", "ls", {}), ToolCall("c3", "rm", {})]
    provider = ScriptedProvider(Reply(calls=calls, usage=Usage(10, 5)), Reply("ok", usage=Usage(3)))
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[rm, ls], authority=authority, on=[events.append]
        )
        chunks: list[Chunk] = []
        async with agent.stream("clean up", budget=TokenBudget(max=18)) as run:
            async for chunk in run:
                chunks.append(chunk)
        result = run.result
    assert counter.names() == ["ls"]  # the denied handler never ran
    # Denials use no budget: the draw is exactly the providers' usage and the run completes
    # within a budget that leaves no room for anything else.
    assert result.usage == Usage(13, 5)
    assert result.stop is StopReason.COMPLETE
    tool_results = [c.result for c in chunks if c.kind == "tool_result"]
    assert [r.id for r in tool_results if r is not None] == ["c1", "c2", "c3"]  # call order
    texts = [m.content for m in result.messages if m.role is Role.TOOL]
    assert texts == ["denied: destructive", "done", "denied: destructive"]
    denies = [e for e in events if e.kind == "deny"]
    assert [(e.call.id if e.call else None, e.reason) for e in denies] == [
        ("c1", "denied: destructive"),
        ("c3", "denied: destructive"),
    ]
    assert [e.call.id for e in events if e.kind == "tool" and e.call] == ["c2"]
    assert {c.kind for c in chunks} <= {"content", "thinking", "tool_call", "tool_result", "usage"}


async def test_000_g9_without_an_authority_every_call_is_dispatched() -> None:
    counter = Counter()
    tools = [counter.tool("a"), counter.tool("b")]
    calls = [ToolCall("c1", "a", {}), ToolCall("c2", "b", {}), ToolCall("c3", "a", {"x": 2})]
    provider = ScriptedProvider(Reply(calls=calls), Reply("ok"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=tools)
        await agent.generate("go")
    assert sorted(counter.names()) == ["a", "a", "b"]


async def test_000_g10_tools_stay_structural_and_scoped_out_ones_are_not_shown_or_run() -> None:
    counter = Counter()
    secret = counter.tool("secret_tool")
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "secret_tool", {}), call("c2")]), Reply("done")
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime,
            provider,
            system="You are terse.",
            tools=[add, secret],
            scope=Scope(tools=["add"]),
        )
        result = await agent.generate("go")
    for sent in provider.calls:
        assert [t.name for t in sent.tools] == ["add"]  # scoped-out: never advertised
        text = " ".join(m.content for m in sent.messages if m.role is not Role.TOOL)
        assert "secret_tool" not in text  # neither the name of a tool
        assert "Add two integers" not in text  # nor its description
        assert "The secret_tool tool." not in text
        assert '"properties"' not in text
    assert counter.runs == []  # and never callable
    skip = next(m for m in result.messages if m.tool_call_id == "c1")
    assert skip.content.startswith("skipped: there is no tool named 'secret_tool'")
    assert "available tools: add" in skip.content


async def test_000_g10_and_001_g8_an_empty_tool_filter_passes_no_tools_at_all() -> None:
    provider = Recording(Reply("a"), Reply("b"))
    async with open_runtime() as runtime:
        scoped = await Agent.start(runtime, provider, tools=[add], scope=Scope(tools=[]))
        await scoped.generate("x")
        bare = await Agent.start(runtime, provider)
        await bare.generate("y")
    assert [tools for tools, _ in provider.raw] == [None, None]


async def test_000_g11_run_options_are_passed_through_and_unset_ones_stay_unset() -> None:
    # The port passes a ProviderOptions whose unset fields are None ("the provider's
    # default") instead of omitting the object: the same contract in Python terms.
    provider = Recording(Reply("a"), Reply("b"), Reply('{"z": 1}'))
    schema = {"type": "object"}
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        await agent.generate("x")
        await agent.generate("y", think=True, tool_choice="required")
        await agent.generate("z", schema=schema)
    plain, chosen, structured = (options for _, options in provider.raw)
    assert plain is not None
    assert chosen is not None
    assert structured is not None
    assert (plain.think, plain.schema, plain.tool_choice) == (None, None, None)
    assert (chosen.think, chosen.schema, chosen.tool_choice) == (True, None, "required")
    assert structured.schema == schema
    assert structured.think is None


async def test_000_g13_limit_semantics_exhaust_then_finish_and_limit_zero() -> None:
    counter = Counter()
    work = counter.tool("work")
    events: list[AgentEvent] = []
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "work", {})]),
        Reply(calls=[ToolCall("c2", "work", {}), ToolCall("c3", "work", {})]),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[work], on=[events.append])
        result = await agent.generate("go", limit=2)
        assert (result.stop, result.partial, result.turns) == (StopReason.EXHAUSTED, True, 2)
        assert counter.names() == ["work"]  # the last turn's calls were never dispatched
        last = [m.content for m in result.messages if m.role is Role.TOOL][1:]
        assert last == [EXHAUSTED, EXHAUSTED]
        assert kinds(events)[-2:] == ["exhaust", "finish"]
        assert "abort" not in kinds(events)
        # A natural answer on the last allowed turn is complete, not partial.
        agent.provider = ScriptedProvider(Reply(calls=[ToolCall("c4", "work", {})]), "fine")
        natural = await agent.generate("again", limit=2)
        assert (natural.stop, natural.partial) == (StopReason.COMPLETE, False)
        # limit=0 never enters the loop.
        agent.provider = nothing = ScriptedProvider()
        events.clear()
        zero = await agent.generate("zero", limit=0)
    assert (zero.stop, zero.partial, zero.turns) == (StopReason.COMPLETE, False, 0)
    assert nothing.calls == []
    assert kinds(events) == ["start", "finish"]


async def test_000_g14_and_003_g1_runs_queue_fifo_and_two_agents_overlap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # DESIGN section 12 overrides 000 G14 (CONCURRENCY error): runs on one agent queue FIFO.
    async with open_runtime() as runtime:
        one = await Agent.start(runtime, ScriptedProvider(Reply("a1", delay=1), Reply("a2")))
        other = await Agent.start(runtime, ScriptedProvider(Reply("b1", delay=1)))
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one.generate, "u1")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(one.generate, "u2")
            nursery.start_soon(other.generate, "v1")
        elapsed = trio.current_time() - start
        history = [m.content for m in await one.conversation.messages()]
    assert history == ["u1", "a1", "u2", "a2"]
    assert elapsed == pytest.approx(1)  # the other agent ran alongside, not after


async def test_000_g15_status_goes_idle_running_done_or_error() -> None:
    statuses: list[AgentStatus] = []
    agent: Agent | None = None

    @tool
    def probe() -> str:
        """Report the status."""
        assert agent is not None
        statuses.append(agent.status)
        return "ok"

    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "probe", {})]), "done", Fail(), "up")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[probe])
        statuses.append(agent.status)
        await agent.generate("a")
        statuses.append(agent.status)
        with pytest.raises(ProviderError):
            await agent.generate("b")
        statuses.append(agent.status)
        await agent.generate("c")
        statuses.append(agent.status)
    assert statuses == [
        AgentStatus.IDLE,
        AgentStatus.RUNNING,
        AgentStatus.DONE,
        AgentStatus.ERROR,
        AgentStatus.DONE,
    ]


async def test_000_g16_thinking_is_not_metered_mid_stream_only_at_reconcile() -> None:
    # 400 characters of thinking (100 tokens by estimate) under a budget of 50: the turn is not
    # cut mid-stream, but its reconciled draw spends the budget, so no further turn starts.
    provider = ScriptedProvider(Reply(thinking="t" * 400, text="ok", calls=[call("c1")]), "never")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("think", budget=TokenBudget(max=50))
    assert len(provider.calls) == 1
    assert result.messages[1].content == "ok"
    assert not result.messages[1].interrupted  # the turn ran to its end
    assert result.usage == Usage(completion=101, total=101)  # content + thinking estimates
    assert result.stop is StopReason.BUDGET
    assert answered_in_place(result.messages)


async def test_000_g16_and_001_g13_the_draw_per_turn_equals_the_reported_usage() -> None:
    # Each turn streams 400 characters (an estimate of 100 tokens) but reports 7 completion
    # tokens: if the estimate stayed charged, the second turn would pass the budget of 150.
    provider = ScriptedProvider(
        Reply("x" * 400, chunk=40, calls=[call("c1")], usage=Usage(10, 7)),
        Reply("y" * 400, chunk=40, usage=Usage(20, 7)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        chunks: list[Chunk] = []
        async with agent.stream("go", budget=TokenBudget(max=150)) as run:
            async for chunk in run:
                chunks.append(chunk)
    result = run.result
    assert result.stop is StopReason.COMPLETE
    assert [c.usage for c in chunks if c.kind == "usage"] == [Usage(10, 7), Usage(20, 7)]
    assert result.usage == Usage(30, 14)  # the full authoritative figure


async def test_000_g16_a_mid_stream_trip_resolves_partial_with_an_abort_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[AgentEvent] = []
    provider = ScriptedProvider(Reply("a" * 400, chunk=4, delay=0.1))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, on=[events.append])
        result = await agent.generate("go", budget=TokenBudget(max=5, scope="completion"))
        stored = (await agent.conversation.messages())[-1]
    assert (result.stop, result.partial) == (StopReason.BUDGET, True)
    assert result.content == "a" * 20  # cut at the delta that reached 5 tokens
    assert (stored.content, stored.interrupted) == ("a" * 20, True)
    assert kinds(events)[-2:] == ["abort", "finish"]
    assert events[-2].stop is StopReason.BUDGET


async def test_000_g17_a_local_cancel_gives_the_local_partial_and_outranks_a_late_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The remote half of G17 (a relay abort frame) belongs to issue 7.
    provider = ScriptedProvider(Reply("so far", delay=1), Fail(delay=10))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        first = await agent.generate("a")
        assert first.content == "so far"
        result = await agent.generate("b", timeout=5)  # the failure would come at t+10
        assert agent.status is AgentStatus.DONE
    assert (result.stop, result.partial) == (StopReason.TIMEOUT, True)


# -- notes/000.md sections 2.10-2.13 -----------------------------------------------------------


async def test_000_2_10_the_result_joins_thinking_sums_usage_and_defaults_to_10_turns() -> None:
    provider = ScriptedProvider(
        Reply(thinking="first", calls=[call("c1")], usage=Usage(3, 1, cached=2)),
        Reply("answer", thinking="second", usage=Usage(5, 2, cached=1)),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        assert agent.defaults.limit == 10
        result = await agent.generate("go")
    assert result.thinking == "first\n\nsecond"
    assert result.usage == Usage(8, 3, cached=3)
    assert result.content == "answer"


async def test_000_2_11_and_001_2_8_authority_first_match_wins_and_the_fallback_decides() -> None:
    seen: list[dict[str, Any]] = []

    def look(arguments: Any) -> bool:
        seen.append(dict(arguments))
        return bool(arguments.get("path", "").startswith("/etc"))

    authority = Authority(
        [
            Rule("deny", tools=("write",), when=look, zone="fs", reason="system files"),
            Rule("allow", tools=("write",), zone="fs"),
            Rule("deny", tools=("write",), reason="never consulted"),
        ]
    )
    etc = ToolCall("c1", "write", {"path": "/etc/passwd"})
    home = ToolCall("c2", "write", {"path": "/home/a"})
    assert authority.decide(etc).decision == "deny"
    assert authority.decide(etc).reason == "system files"
    assert (authority.decide(home).decision, authority.decide(home).zone) == ("allow", "fs")
    assert seen == [{"path": "/etc/passwd"}] * 2 + [{"path": "/home/a"}] * 2  # saw the arguments
    fallback = Authority().decide(ToolCall("c3", "anything", {}))
    assert (fallback.decision, fallback.zone, fallback.rule) == ("allow", "default", None)
    allowlist = Authority([Rule("allow", tools=("ls",))], fallback="deny")
    assert allowlist.decide(ToolCall("c4", "rm", {})).decision == "deny"
    assert allowlist.decide(ToolCall("c5", "ls", {})).decision == "allow"


def test_000_2_13_helpers_estimate_tokens_and_deny_text() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcde") == 2  # ceil(5 / 4)
    assert estimate_tokens("é" * 8) == 2  # code points, not bytes
    verdict = Authority([Rule("deny", reason="nope")]).decide(ToolCall("c1", "x", {}))
    assert verdict.model_text() == "denied: nope"
    assert Usage(1, 2) + Usage(3, 4) == Usage(4, 6)


def test_000_2_13_filter_allow_list_none_passes_all_empty_none_order_kept() -> None:
    counter = Counter()
    registry = ToolRegistry([counter.tool("a"), counter.tool("b"), counter.tool("c")])
    assert [d.name for d in registry.definitions(Scope(tools=None))] == ["a", "b", "c"]
    assert registry.definitions(Scope(tools=[])) == ()
    # The items' order is kept (not the allow-list's); unknown keys are ignored.
    assert [d.name for d in registry.definitions(Scope(tools=["c", "zz", "a"]))] == ["a", "c"]


# -- notes/000.md section 5.2: automatic compaction ----------------------------------------------


class Summaries:
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    async def __call__(self, messages: Sequence[Message]) -> str:
        self.calls += 1
        if self.fail:
            raise ProviderError("summarizer down", code="server_error")
        return f"summary {self.calls}"


async def test_000_5_2_and_001_g14_without_window_or_summarizer_compaction_is_skipped() -> None:
    events: list[AgentEvent] = []
    summaries = Summaries()
    async with open_runtime() as runtime:
        # A window but a conversation that cannot summarise: nothing tried, no fault -- and the
        # prompt over the window is refused before it is sent (003 G9).
        plain = await Conversation.start(runtime)
        await plain.add([Message.user("x" * 800)])
        provider = ScriptedProvider("ok", "ok")
        agent = await Agent.start(
            runtime, provider, conversation=plain, window=50, on=[events.append]
        )
        with pytest.raises(ProviderError, match="not sent") as refused:
            await agent.generate("hi")
        assert refused.value.code == "context_overflow"
        assert provider.calls == []
        assert kinds(events).count("guard") == 1
        # A summarizer but no window: never called however long the history.
        long = await Conversation.start(runtime, summarize=summaries, keep=1)
        await long.add([Message.user("x" * 8000), Message.assistant("y" * 8000)])
        other = await Agent.start(runtime, provider, conversation=long)
        assert (await other.generate("hi")).content == "ok"
    assert "fault" not in kinds(events)
    assert summaries.calls == 0
    # The whole history went as it was.
    assert [m.content for m in provider.calls[0].messages] == ["x" * 8000, "y" * 8000, "hi"]


async def test_000_5_2_compaction_is_never_checked_after_the_final_turn() -> None:
    summaries = Summaries()
    provider = ScriptedProvider(Reply("z" * 4000))
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=1)
        await conversation.add([Message.user("a"), Message.assistant("b")])
        agent = await Agent.start(runtime, provider, conversation=conversation, window=200)
        result = await agent.generate("write a lot")
        sections = (await conversation.history()).sections
    assert result.content == "z" * 4000  # far over the window now, but the run is over
    assert summaries.calls == 0
    assert sections == ()


async def test_000_5_2_a_run_can_fold_twice_between_turns_and_stay_coherent() -> None:
    summaries = Summaries()

    @tool
    def fetch(n: int) -> str:
        """Fetch a page."""
        return f"page {n} " + "p" * 600

    provider = ScriptedProvider(
        *(Reply(calls=[ToolCall(f"c{n}", "fetch", {"n": n})]) for n in range(4)), "summary done"
    )
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=2)
        agent = await Agent.start(
            runtime, provider, conversation=conversation, window=250, tools=[fetch]
        )
        result = await agent.generate("read four pages")
        history = await conversation.history()
        stored = await conversation.messages()
    assert result.content == "summary done"
    assert len(history.sections) >= 2  # folded more than once in one run
    assert answered_in_place(stored)
    for sent in provider.calls:  # every prompt sent was well formed too
        assert answered_in_place([m for m in sent.messages if m.role is not Role.SYSTEM])


async def test_000_5_2_strict_summarizer_failure_emits_fault_then_raises() -> None:
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=Summaries(fail=True), keep=1)
        await conversation.add([Message.user("x" * 800), Message.assistant("y" * 800)])
        provider = ScriptedProvider("never")
        agent = await Agent.start(
            runtime,
            provider,
            conversation=conversation,
            window=100,
            strict=True,
            on=[events.append],
        )
        with pytest.raises(CompactionError):
            await agent.generate("go")
        assert agent.status is AgentStatus.ERROR
    assert kinds(events) == ["start", "fault", "error"]
    assert provider.calls == []


# -- notes/001.md ---------------------------------------------------------------------------------


async def test_001_2_2_an_empty_batch_gives_no_results_and_a_batch_runs_concurrently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = ToolRegistry([nap])
    assert await registry.execute([]) == []
    start = trio.current_time()
    calls = [ToolCall(f"c{i}", "nap", {"seconds": 1}) for i in range(5)]
    results = await registry.execute(calls)
    assert trio.current_time() - start == pytest.approx(1)  # all at once, not one by one
    assert [r.id for r in results] == ["c0", "c1", "c2", "c3", "c4"]
    assert all(isinstance(r, ToolSuccess) for r in results)


async def test_001_2_9_a_per_run_budget_overrides_the_construction_budget_for_one_run() -> None:
    provider = ScriptedProvider(Reply("x" * 40, usage=Usage(0, 10)), Reply("y", usage=Usage(0, 1)))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, budget=TokenBudget(max=0))
        big = await agent.generate("a", budget=TokenBudget(max=100))
        assert big.stop is StopReason.COMPLETE
        tight = await agent.generate("b")  # the construction budget (max=0) applies again
    assert tight.stop is StopReason.BUDGET
    assert len(provider.calls) == 1


async def test_001_4_the_run_appends_its_messages_to_the_conversation_in_order() -> None:
    provider = ScriptedProvider(Reply(calls=[call("c1")]), "3")
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        await conversation.add([Message.user("before"), Message.assistant("ok")])
        agent = await Agent.start(runtime, provider, conversation=conversation, tools=[add])
        result = await agent.generate("1+2?")
        stored = await conversation.messages()
    assert tuple(stored[2:]) == result.messages
    roles = [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert [m.role for m in result.messages] == roles
    assert provider.calls[1].messages[-2:] == tuple(stored[3:5])  # rebuilt from the history


async def test_001_6_agents_on_separate_conversations_do_not_cross_talk(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        a = await Agent.start(runtime, ScriptedProvider(Reply("for a", delay=1), "a again"))
        b = await Agent.start(runtime, ScriptedProvider(Reply("for b", delay=1), "b again"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.generate, "question a")
            nursery.start_soon(b.generate, "question b")
        await a.generate("more a")
        history_a = [m.content for m in await a.conversation.messages()]
        history_b = [m.content for m in await b.conversation.messages()]
    assert history_a == ["question a", "for a", "more a", "a again"]
    assert history_b == ["question b", "for b"]


# -- notes/003.md -------------------------------------------------------------------------------


async def test_003_2_5_an_ask_goes_to_the_approver_and_without_one_is_denied() -> None:
    counter = Counter()
    deploy = counter.tool("deploy")
    authority = Authority([Rule("ask", tools=("deploy",), reason="ships to prod")])
    asked: list[tuple[str, str]] = []

    async def approve(request: ToolCall, verdict: Verdict) -> bool | tuple[bool, str]:
        asked.append((request.id, verdict.reason))
        return request.arguments.get("x") == 1 or (False, "not today")

    calls = [ToolCall("c1", "deploy", {"x": 1}), ToolCall("c2", "deploy", {"x": 2})]
    registry = ToolRegistry([deploy])
    approved = await registry.execute(calls, authority=authority, approve=approve)
    assert sorted(asked) == [("c1", "ships to prod"), ("c2", "ships to prod")]
    assert isinstance(approved[0], ToolSuccess)
    assert approved[1] == ToolFailure("c2", "deploy", "denied: not today")
    # Direct invocation with no approver attached: the ask becomes a deny.
    alone = await registry.execute(calls[:1], authority=authority)
    assert alone == [ToolFailure("c1", "deploy", f"denied: {NO_APPROVER_REASON}")]

    async def crash(request: ToolCall, verdict: Verdict) -> bool:
        raise RuntimeError("approver bug")

    crashed = await registry.execute(calls[:1], authority=authority, approve=crash)
    assert isinstance(crashed[0], ToolFailure)
    assert crashed[0].error.startswith("denied:")
    assert counter.names() == ["deploy"]  # only the approved call ever ran


async def test_003_2_5_a_tool_denied_outright_is_withheld_from_the_model() -> None:
    counter = Counter()
    provider = ScriptedProvider("ok")
    authority = Authority([Rule("deny", tools=("rm",), reason="never")])
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[counter.tool("rm"), add], authority=authority
        )
        await agent.generate("hi")
    assert [t.name for t in provider.calls[0].tools] == ["add"]


async def test_003_g15_an_unevaluable_deny_asks_and_never_falls_through_to_allow() -> None:
    counter = Counter()
    rm = counter.tool("rm")
    authority = Authority([Rule("deny", tools=("rm",), when=lambda a: a["path"].startswith("/"))])
    results = await ToolRegistry([rm]).execute([ToolCall("c1", "rm", {})], authority=authority)
    assert counter.runs == []
    assert isinstance(results[0], ToolFailure)
    assert results[0].error.startswith("denied:")


async def test_003_2_7_leaving_the_stream_early_aborts_the_turn_and_commits_the_partial(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("one two three four", chunk=4, delay=1), "next")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        async with agent.stream("count") as run:
            async for chunk in run:
                if chunk.kind == "content":
                    break
        stored = await agent.conversation.messages()
        assert agent.status is AgentStatus.DONE
        assert (await agent.generate("again")).content == "next"  # the slot was freed
    assert (stored[-1].content, stored[-1].interrupted) == ("one ", True)
    with pytest.raises(RuntimeError):
        run.result  # noqa: B018 - the run never reported a result to this reader


async def test_003_2_7_a_late_provider_result_never_replaces_the_timeout_that_won(
    autojump_clock: trio.testing.MockClock,
) -> None:
    counter = Counter()
    provider = ScriptedProvider(Reply("late", delay=10, calls=[ToolCall("c1", "t", {})]))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[counter.tool("t")])
        result = await agent.generate("go", timeout=5)
        await trio.sleep(20)
        stored = await agent.conversation.messages()
    assert (result.stop, result.content) == (StopReason.TIMEOUT, "")
    assert counter.runs == []
    assert [m.content for m in stored] == ["go"]  # nothing arrived after the run ended


async def test_003_2_8_each_round_emits_one_content_free_turn_event() -> None:
    events: list[AgentEvent] = []
    provider = ScriptedProvider(Reply(calls=[call("c1")]), Reply(calls=[call("c2")]), "done")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], on=[events.append])
        result = await agent.generate("go")
    turns = [e for e in events if e.kind == "turn"]
    assert [e.turn for e in turns] == [1, 2, 3] == list(range(1, result.turns + 1))
    assert all(e.call is None and e.result is None and e.usage is None for e in turns)


# 003 section 2.8 "Run-scoped toolChoice:none: no local schemas in any round, and a returned
# tool call fails the run before any body starts". The call is answered (not executed) first,
# so the history stays well formed (002 G8).
async def test_003_2_8_tool_choice_none_sends_no_schemas_and_a_returned_call_fails() -> None:
    counter = Counter()
    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "t", {})]), "never")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[counter.tool("t")])
        with pytest.raises(AgentsError) as caught:
            await agent.generate("go", tool_choice="none")
        stored = await agent.conversation.messages()
    assert caught.value.code == "tool_choice"
    assert "'t'" not in caught.value.message
    assert "(t)" in caught.value.message
    assert provider.calls[0].tools == ()
    assert provider.calls[0].options is not None
    assert provider.calls[0].options.tool_choice is None  # nothing offered, nothing to choose
    assert counter.runs == []
    assert len(provider.calls) == 1
    assert answered_in_place(stored)
    assert stored[-1].role is Role.TOOL
    assert stored[-1].content == TOOLS_OFF
    assert agent.status is AgentStatus.ERROR


async def test_003_g2_an_uniterated_stream_never_takes_the_slot_and_closing_frees_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("ab", chunk=1, delay=1), "second", "third")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        idle = agent.stream("never iterated")
        with trio.fail_after(1.5):  # not blocked by the idle stream
            async with agent.stream("one") as run:
                await run.__anext__()
            # Closed after one chunk: the slot is free at once.
            assert (await agent.generate("two")).content == "second"
        async with idle:
            pass
        history = [m.content for m in await agent.conversation.messages()]
    assert "never iterated" not in history
    assert history == ["one", "a", "two", "second"]
    assert provider.remaining == 1


async def test_003_g4_a_mid_stream_abort_leaves_exactly_one_interrupted_assistant_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("abcdefgh", chunk=1, delay=1))
    token = Abort()
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_later, token, 2.5)
            result = await agent.generate("go", abort=[token])
        stored = await agent.conversation.messages()
    assistants = [m for m in stored if m.role is Role.ASSISTANT]
    assert len(assistants) == 1
    assert (assistants[0].content, assistants[0].interrupted) == ("ab", True)
    assert result.messages[-1] == assistants[0]


async def test_003_g5_running_tools_are_interrupted_and_queued_ones_not_executed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # DESIGN section 4 overrides 003 G5: a running tool is cancelled and recorded as interrupted
    # (not awaited to its real result); a queued one gets "not executed". Which queued call
    # starts next is not specified (trio's scheduling), so every call takes 3 s: one finished,
    # one running and one queued at the deadline of 5 s.
    calls = [ToolCall(f"c{i}", "nap", {"seconds": 3}) for i in range(3)]
    provider = ScriptedProvider(Reply(calls=calls), "never")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[nap], tool_concurrency=1)
        result = await agent.generate("go", timeout=5)
    tool_messages = [m for m in result.messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in tool_messages] == ["c0", "c1", "c2"]  # call order
    assert sorted(m.content for m in tool_messages) == sorted(["rested", INTERRUPTED, NOT_EXECUTED])
    assert answered_in_place(result.messages)


async def test_003_g6_forced_summary_runs_no_calls_and_its_failure_fails_the_run() -> None:
    counter = Counter()
    work = counter.tool("work")
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "work", {})]),
        Reply("", calls=[ToolCall("c2", "work", {})]),  # the summary asks for a tool anyway
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[work], on_exhaust="summarize")
        result = await agent.generate("go", limit=1)
        assert len(provider.calls) == 2  # exactly one extra call
        final = provider.calls[1]
        assert final.tools == ()
        assert final.options is None or final.options.tool_choice in (None, "none")
        assert counter.runs == []  # neither the limited turn's call nor the summary's ran
        assert result.content == FALLBACK_SUMMARY  # empty text -> the fixed fallback
        stored = await agent.conversation.messages()
        assert final.messages[-1].content not in [m.content for m in stored]
        assert answered_in_place(stored)
        # A failing summary call fails the run with its error.
        agent.provider = ScriptedProvider(
            Reply(calls=[ToolCall("c3", "work", {})]), Fail(ProviderError("summary down"))
        )
        with pytest.raises(ProviderError, match="summary down"):
            await agent.generate("again", limit=1)
        assert answered_in_place(await agent.conversation.messages())


async def test_003_g8_an_identical_input_overrun_is_a_named_recoverable_guard() -> None:
    counter = Counter()
    ping = counter.tool("ping")
    events: list[AgentEvent] = []
    same = [Reply(calls=[ToolCall(f"c{i}", "ping", {"x": 1})]) for i in range(3)]
    provider = ScriptedProvider(*same, Reply("changed approach"))
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[ping], max_repeats=2, on=[events.append]
        )
        result = await agent.generate("go")
    assert len(counter.runs) == 2
    guards = [e for e in events if e.kind == "guard"]
    assert len(guards) == 1
    assert guards[0].reason is not None
    assert "ping(" in guards[0].reason
    assert (result.stop, result.content) == (StopReason.COMPLETE, "changed approach")
    assert answered_in_place(result.messages)  # every committed call has a result


async def test_003_g10_unknown_tools_are_labelled_skips_and_ids_are_never_rewritten() -> None:
    counter = Counter()
    # Ids are the provider's: reused across turns, never minted or rewritten. (Two calls
    # with one id in the same turn are refused by ProviderResult -- protocols/messages.py
    # requires unique ids per message, since such results could not be told apart.)
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("dup", "t", {})]),
        Reply(calls=[ToolCall("dup", "t", {"x": 1})]),
        Reply(calls=[ToolCall("dup", "ghost", {})]),
        "done",
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[counter.tool("t"), add])
        result = await agent.generate("go")
    assert len(counter.runs) == 2  # a reused id is accepted, each call runs once
    tool_messages = [m for m in result.messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in tool_messages] == ["dup", "dup", "dup"]
    skip = tool_messages[-1].content
    assert "'ghost'" in skip
    assert "available tools: t, add" in skip
    assert result.content == "done"


async def test_003_g12_structured_retries_carry_issues_and_schema_and_tools_may_run() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    provider = ScriptedProvider(
        Reply(calls=[call("c1")]),  # tools may run before the final answer
        Reply("{oops"),
        Reply('{"n": "three"}'),
        Reply('{"n": 3}'),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("1+2 as JSON", schema=schema)
    assert result.output == {"n": 3}
    answers = [m.content for m in result.messages if m.role is Role.ASSISTANT][1:]
    assert answers == ["{oops", '{"n": "three"}', '{"n": 3}']  # every attempt kept
    for retry in provider.calls[2:]:
        assert retry.options is not None
        assert retry.options.schema == schema
    assert "not JSON" in provider.calls[2].messages[-1].content
    assert "$.n" in provider.calls[3].messages[-1].content  # the issue names the path


# -- notes/002.md section 4 ---------------------------------------------------------------------


async def test_002_g2_a_manual_approval_tool_never_runs_before_it_is_approved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    counter = Counter()
    authority = Authority([Rule("ask", tools=("deploy",))])
    decisions = iter([True, False])

    async def approve(request: ToolCall, verdict: Verdict) -> bool:
        await trio.sleep(5)  # a human takes a while
        return next(decisions)

    calls = [ToolCall("c1", "deploy", {})]
    provider = ScriptedProvider(Reply(calls=calls), "shipped", Reply(calls=calls), "held")
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime,
            provider,
            tools=[counter.tool("deploy")],
            authority=authority,
            approve=approve,
        )
        start = trio.current_time()
        await agent.generate("ship it")
        await agent.generate("ship again")
    assert len(counter.runs) == 1  # the rejected one never ran
    assert counter.runs[0][1] - start >= 5  # and the approved one only after approval


async def test_002_g3_a_denial_is_an_error_result_the_model_sees_next_turn() -> None:
    authority = Authority([Rule("deny", tools=("add",), reason="math is off today")])
    provider = ScriptedProvider(Reply(calls=[call("c1")]), "ok")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], authority=authority)
        await agent.generate("1+2")
    seen = provider.calls[1].messages[-1]
    assert (seen.role, seen.tool_call_id, seen.content) == (
        Role.TOOL,
        "c1",
        "denied: math is off today",
    )


# 002 G4 "Approval fences the whole batch: if any call in a turn needs approval, no call in that
# batch executes before resume". The allowed call runs only once the approval (5 s) is in.
async def test_002_g4_approval_fences_the_whole_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    counter = Counter()
    authority = Authority([Rule("ask", tools=("deploy",))])

    async def approve(request: ToolCall, verdict: Verdict) -> bool:
        await trio.sleep(5)
        return True

    registry = ToolRegistry([counter.tool("deploy"), counter.tool("lint")])
    calls = [ToolCall("c1", "lint", {}), ToolCall("c2", "deploy", {})]
    start = trio.current_time()
    results = await registry.execute(calls, authority=authority, approve=approve)
    assert [r.id for r in results] == ["c1", "c2"]
    assert sorted(name for name, _ in counter.runs) == ["deploy", "lint"]
    assert all(at - start >= 5 for _, at in counter.runs)


async def test_calls_the_provider_side_refused_are_answered_as_denied_and_never_run() -> None:
    counter = Counter()
    events: list[AgentEvent] = []
    calls = [ToolCall("c1", "deploy", {}), ToolCall("c2", "lint", {})]
    provider = ScriptedProvider(
        Reply(calls=calls, denied={"c1": "denied: the relay's policy"}), "done"
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime,
            provider,
            tools=[counter.tool("deploy"), counter.tool("lint")],
            on=[events.append],
        )
        result = await agent.generate("go")
        stored = await agent.conversation.messages()
    assert result.content == "done"
    assert counter.names() == ["lint"]
    answers = {m.tool_call_id: m.content for m in stored if m.role is Role.TOOL}
    assert answers["c1"] == "denied: the relay's policy"
    denials = [e for e in events if e.kind == "deny"]
    assert [e.call.id for e in denials if e.call is not None] == ["c1"]
    assert answered_in_place(stored)


async def test_002_g8_every_call_is_answered_before_the_next_non_tool_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    counter = Counter()
    authority = Authority([Rule("deny", tools=("rm",))])
    tools = [counter.tool("rm"), counter.tool("ls"), nap]
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "rm", {}), ToolCall("c2", "ghost", {})]),  # deny, unknown
        Reply(calls=[ToolCall("c3", "ls", {})]),
        Reply(calls=[ToolCall("c4", "ls", {})]),  # exhausted at limit 3
        Reply(calls=[ToolCall("c5", "nap", {"seconds": 50}), ToolCall("c6", "ls", {})]),
        Hang("cut"),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=tools, authority=authority, tool_concurrency=1
        )
        await agent.generate("a", limit=3)
        await agent.generate("b", timeout=10)  # cancelled while a tool runs
        stored = await agent.conversation.messages()
    assert answered_in_place(stored)
    assert sum(1 for m in stored if m.role is Role.TOOL) == 6


# 002 G8: providers refuse a history with a dangling tool call before sending it.
async def test_002_g8_providers_refuse_a_dangling_tool_call_before_sending() -> None:
    history = [
        Message.user("hi"),
        Message.assistant("", calls=[ToolCall("c1", "add", {"a": 1, "b": 2})]),
        Message.user("and?"),
    ]
    async with Simulator() as simulator:
        provider = simulator.openai()
        try:
            with pytest.raises(ValidationError):
                await provider.generate(history)
            assert simulator.requests == ()
        finally:
            await provider.aclose()


async def test_002_g9_tool_arguments_are_validated_and_errors_are_model_visible() -> None:
    @tool
    def probe(a: int, inner: Inner, b: int = 5, c: int | None = 3) -> list[Any]:
        """Probe the arguments."""
        return [a, inner.depth, b, c]

    schema = probe.definition.parameters
    assert schema["additionalProperties"] is False  # the advertised object is closed

    async def run(arguments: dict[str, Any]) -> Any:
        return await probe.call(ToolCall("c1", "probe", arguments))

    inner = {"depth": 1}
    assert (await run({"a": 1, "inner": inner, "c": None})) == ToolSuccess(
        "c1",
        "probe",
        [1, 1, 5, None],  # optional(null | X) keeps null; defaults apply
    )
    required_null = await run({"a": None, "inner": inner})
    assert isinstance(required_null, ToolFailure)
    assert "$.a" in required_null.error
    nested = await run({"a": 1, "inner": {"depth": 1, "extra": 2}})
    assert isinstance(nested, ToolFailure)
    assert "extra" in nested.error
    assert "depth" in nested.error  # the allowed keys are named
    # Issue 6 decides "null for a non-nullable field" is an error, also for an optional one
    # (002 G9 would read it as absent): the error is model-visible, never a raise.
    optional_null = await run({"a": 1, "inner": inner, "b": None})
    assert isinstance(optional_null, ToolFailure)
    assert "$.b" in optional_null.error
    # NaN / Infinity never reach a tool: a call carrying one is refused when it is made.
    for bad in (math.nan, math.inf):
        with pytest.raises(ValidationError, match="finite"):
            ToolCall("c2", "probe", {"a": bad, "inner": inner})


async def test_002_g11_tool_concurrency_never_exceeds_the_limit_and_order_is_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    running = 0
    peak = 0

    @tool
    async def job(n: int) -> int:
        """A job."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(10 - n)  # later calls finish first
        running -= 1
        return n

    calls = [ToolCall(f"c{n}", "job", {"n": n}) for n in range(6)]
    provider = ScriptedProvider(Reply(calls=calls), "ok")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[job], tool_concurrency=2)
        result = await agent.generate("go")
    assert peak == 2
    tool_messages = [m for m in result.messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in tool_messages] == [f"c{n}" for n in range(6)]
    assert [m.content for m in tool_messages] == [str(n) for n in range(6)]


async def test_002_g12_usage_is_summed_per_turn_and_cached_input_counts_as_prompt() -> None:
    provider = ScriptedProvider(
        Reply(calls=[call("c1")], usage=Usage(prompt=100, completion=5, cached=80)),
        Reply("done", usage=Usage(prompt=120, completion=7, cached=100)),
    )
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], on=[events.append])
        result = await agent.generate("go")
    deltas = [e.usage for e in events if e.kind == "usage"]
    assert deltas == [Usage(100, 5, cached=80), Usage(120, 7, cached=100)]  # per turn
    assert result.usage == Usage(prompt=220, completion=12, total=232, cached=180)
    assert result.usage.prompt >= (result.usage.cached or 0)  # cached is part of the input


# 002 G13 (and the issue's event list: "... deny, retry, abort ...") "Retryable provider
# failures produce AgentRetry with delayMs".
async def test_002_g13_a_retried_provider_failure_emits_a_retry_event(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.05
    events: list[AgentEvent] = []
    own: list[RetryEvent] = []
    plan: list[dict[str, Any]] = [{"kind": "http-error", "status": 503}, {"kind": "pass"}]
    async with FaultProviderServer(plan) as server, open_runtime() as runtime:
        provider = OpenAIChat(model="m", base_url=server.base_url, api_key="k", on_retry=own.append)
        try:
            agent = await Agent.start(runtime, provider, on=[events.append])
            result = await agent.generate("hi")
        finally:
            await provider.aclose()
    assert not result.partial
    (retry,) = [event for event in events if event.kind == "retry"]
    assert retry.attempt == 1
    assert retry.delay is not None
    assert retry.delay >= 0
    assert retry.reason is not None
    assert "HTTP 503" in retry.reason
    assert retry.turn == 1
    # In order: the turn began, failed and was retried, then its usage came in.
    assert kinds(events).index("turn") < kinds(events).index("retry") < kinds(events).index("usage")
    assert len(own) == 1  # the provider's own callback still hears it


# -- end to end, over HTTP ----------------------------------------------------------------------


@pytest.mark.parametrize("vendor", ["openai", "anthropic", "ollama"])
async def test_e2e_an_agent_on_the_simulator_does_a_tool_turn(
    vendor: str, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 0.05
    counter: list[tuple[int, int]] = []

    @tool
    async def plus(a: int, b: int) -> int:
        """Add two integers."""
        counter.append((a, b))
        return a + b

    async with Simulator() as simulator, open_runtime() as runtime:
        provider = getattr(simulator, vendor)()
        try:
            agent = await Agent.start(runtime, provider, tools=[plus])
            result = await agent.generate('call plus with {"a": 19, "b": 23}')
        finally:
            await provider.aclose()
        assert len(simulator.requests) == 2
        assert simulator.requests[0].tools == ("plus",)
    assert counter == [(19, 23)]
    assert result.turns == 2
    assert result.stop is StopReason.COMPLETE
    assert result.content == "The answer is 42."
    assert answered_in_place(result.messages)
    assert result.usage.total > 0


async def test_e2e_openai_over_the_fault_server_succeeds_after_a_503_retry(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.05
    retries: list[RetryEvent] = []
    plan: list[dict[str, Any]] = [
        {"kind": "http-error", "status": 503},
        {"kind": "pass", "text": "recovered"},
    ]
    async with FaultProviderServer(plan) as server, open_runtime() as runtime:
        provider = OpenAIChat(
            model="m",
            base_url=server.base_url,
            api_key="k",
            retry=RetryPolicy(retries=2),
            on_retry=retries.append,
        )
        try:
            agent = await Agent.start(runtime, provider)
            result = await agent.generate("hi")
        finally:
            await provider.aclose()
        assert server.calls() == 2
    assert (result.content, result.stop) == ("recovered", StopReason.COMPLETE)
    assert [(r.attempt, r.status) for r in retries] == [(1, 503)]
    assert result.usage == Usage(1, 1)
    assert agent.status is AgentStatus.DONE


async def test_e2e_a_stream_cut_after_a_delta_raises_with_the_partial_committed(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.05
    events: list[AgentEvent] = []
    whole = len(text_event("partial response"))  # the first delta arrives, then the cut
    async with FaultProviderServer([{"kind": "stream-cut", "afterBytes": whole}]) as server:
        async with open_runtime() as runtime:
            provider = OpenAIChat(model="m", base_url=server.base_url, api_key="k")
            try:
                agent = await Agent.start(runtime, provider, on=[events.append])
                chunks: list[Chunk] = []

                async def drain() -> None:
                    async with agent.stream("hi") as run:
                        async for chunk in run:
                            chunks.append(chunk)

                with pytest.raises(ProviderError):
                    await drain()
                stored = await agent.conversation.messages()
            finally:
                await provider.aclose()
        assert server.calls() == 1  # a stream the caller saw is never replayed
    assert [c.text for c in chunks if c.kind == "content"] == ["partial response"]
    assert [(m.role, m.content, m.interrupted) for m in stored] == [
        (Role.USER, "hi", False),
        (Role.ASSISTANT, "partial response", True),
    ]
    assert answered_in_place(stored)
    assert agent.status is AgentStatus.ERROR
    assert kinds(events)[-1] == "error"
    assert "finish" not in kinds(events)
