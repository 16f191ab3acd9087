"""The agent's bounded turn: completion, tools, limit, cancel, timeout, budget, FIFO runs.

Test names cite the guarantee of notes/000.md section 3 they port (G1..G17) where there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from actors import Abort, open_runtime, tool
from actors.agent import (
    EXHAUST_INSTRUCTION,
    EXHAUSTED,
    FALLBACK_SUMMARY,
    OUTPUT_INSTRUCTION,
    Agent,
    AgentEvent,
    AgentStatus,
    Chunk,
    OutputError,
)
from actors.conversation import CompactionError, Conversation
from actors.testing import Fail, Hang, Reply, ScriptedProvider, Simulator
from actors.tools import INTERRUPTED, NOT_EXECUTED
from protocols.accounting import TokenBudget, estimate_tokens
from protocols.errors import ProviderError
from protocols.history import RECAP_PREFIX
from protocols.messages import AgentResult, Message, Role, StopReason, ToolCall, Usage
from protocols.wire import classify_status


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return "rested"


def well_formed(messages: Sequence[Message]) -> bool:
    """Every assistant tool call has exactly one tool message answering it."""
    calls = [call.id for m in messages if m.role is Role.ASSISTANT for call in m.calls]
    answers = [m.tool_call_id for m in messages if m.role is Role.TOOL]
    return sorted(calls) == sorted(answer for answer in answers if answer is not None)


async def test_a_plain_answer_completes() -> None:
    provider = ScriptedProvider(Reply("Hello!", usage=Usage(5, 2)))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, system="Be brief.")
        result = await agent.generate("Hi")
        assert result.content == "Hello!"
        assert result.stop is StopReason.COMPLETE
        assert not result.partial
        assert result.turns == 1
        assert result.usage == Usage(5, 2)
        assert [m.role for m in result.messages] == [Role.USER, Role.ASSISTANT]
        sent = provider.calls[0].messages
        assert sent[0].role is Role.SYSTEM
        assert sent[0].content == "Be brief."
        assert agent.status is AgentStatus.DONE
        assert await agent.conversation.messages() == result.messages


async def test_a_tool_turn_then_an_answer() -> None:
    call = ToolCall("c1", "add", {"a": 19, "b": 23})
    provider = ScriptedProvider(Reply(calls=[call]), Reply("It is 42."))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("What is 19 + 23?")
        assert result.content == "It is 42."
        assert result.turns == 2
        tool_message = result.messages[2]
        assert (tool_message.role, tool_message.content, tool_message.tool_call_id) == (
            Role.TOOL,
            "42",
            "c1",
        )
        assert provider.calls[0].tools[0].name == "add"  # advertised
        assert well_formed(result.messages)


async def test_generate_equals_a_drained_stream_g5() -> None:
    def script() -> ScriptedProvider:
        return ScriptedProvider(
            Reply(calls=[ToolCall("c1", "add", {"a": 1, "b": 2})], thinking="plan"),
            Reply("3", chunk=1),
        )

    async with open_runtime() as runtime:
        first = await Agent.start(runtime, script(), tools=[add])
        generated = await first.generate("1 + 2?")
        second = await Agent.start(runtime, script(), tools=[add])
        chunks: list[Chunk] = []
        async with second.stream("1 + 2?") as run:
            async for chunk in run:
                chunks.append(chunk)
        streamed = run.result

        def shape(result: AgentResult) -> list[tuple[object, ...]]:
            return [(m.role, m.content, m.calls, m.tool_call_id) for m in result.messages]

        assert shape(streamed) == shape(generated)
        assert (streamed.content, streamed.stop, streamed.usage) == (
            generated.content,
            generated.stop,
            generated.usage,
        )
        kinds = [chunk.kind for chunk in chunks]
        assert kinds == ["thinking", "usage", "tool_call", "tool_result", "content", "usage"]


async def test_limit_zero_makes_no_call_g13() -> None:
    provider = ScriptedProvider()
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, limit=0)
        result = await agent.generate("hi")
        assert provider.calls == []
        assert not result.partial
        assert result.turns == 0


async def test_the_limit_exhausts_with_not_executed_results_g13() -> None:
    calls = [Reply(calls=[ToolCall(f"c{i}", "add", {"a": i, "b": 1})]) for i in range(3)]
    provider = ScriptedProvider(*calls)
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], limit=2)
        result = await agent.generate("loop")
        assert result.stop is StopReason.EXHAUSTED
        assert result.partial
        assert result.turns == 2
        last = result.messages[-1]
        assert (last.role, last.content) == (Role.TOOL, EXHAUSTED)
        assert well_formed(result.messages)
        # A natural answer on the last allowed turn completes.
        done = await Agent.start(runtime, ScriptedProvider(calls[0], Reply("ok")), tools=[add])
        assert (await done.generate("x", limit=2)).stop is StopReason.COMPLETE


async def test_a_pre_cancelled_run_makes_no_provider_call_g3() -> None:
    provider = ScriptedProvider(Reply("never"))
    token = Abort()
    token.cancel("changed my mind")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("hi", abort=[token])
        assert result.stop is StopReason.CANCELLED
        assert result.partial
        assert provider.calls == []
        assert result.messages == ()
        # A run cancelled before it began is withdrawn: nothing of it is committed (003 G3,
        # DESIGN section 12), not even the user's message.
        assert await agent.conversation.messages() == ()


async def test_a_cancel_mid_stream_commits_the_partial_as_interrupted_g2(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Hang("Once upon a"))
    token = Abort()
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        async with trio.open_nursery() as nursery:

            async def later() -> None:
                await trio.sleep(1)
                token.cancel("user pressed stop")

            nursery.start_soon(later)
            result = await agent.generate("A story", abort=[token])
        assert result.stop is StopReason.CANCELLED
        assert result.content == "Once upon a"
        stored = (await agent.conversation.messages())[-1]
        assert stored.interrupted
        assert stored.content == "Once upon a"
        assert agent.status is AgentStatus.DONE


async def test_timeout_cuts_running_tools_and_records_them_g1(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = [ToolCall("c1", "nap", {"seconds": 1}), ToolCall("c2", "nap", {"seconds": 100})]
    provider = ScriptedProvider(Reply(calls=calls), Reply("never reached"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[nap], timeout=10)
        result = await agent.generate("rest")
        assert result.stop is StopReason.TIMEOUT
        results = {m.tool_call_id: m.content for m in result.messages if m.role is Role.TOOL}
        assert results == {"c1": "rested", "c2": INTERRUPTED}
        assert well_formed(await agent.conversation.messages())
        assert len(provider.calls) == 1


async def test_queued_calls_are_not_executed_on_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = [ToolCall(f"c{i}", "nap", {"seconds": 100}) for i in range(3)]
    provider = ScriptedProvider(Reply(calls=calls))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[nap], tool_concurrency=1, timeout=5)
        result = await agent.generate("rest")
        contents = sorted(m.content for m in result.messages if m.role is Role.TOOL)
        assert contents == sorted([INTERRUPTED, NOT_EXECUTED, NOT_EXECUTED])


async def test_the_budget_cuts_a_runaway_answer_mid_stream_g16(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("word " * 200, chunk=5, delay=0.1))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("Write a lot", budget=TokenBudget(max=20))
        assert result.stop is StopReason.BUDGET
        assert result.partial
        # Cut as soon as the estimate reached 20 tokens: 80 characters, not the whole answer.
        assert 80 <= len(result.content) < 100
        assert result.usage.completion == 20


async def test_a_provider_failure_raises_after_committing_g2() -> None:
    failure = ProviderError("upstream down", code="server_error", retryable=True)
    provider = ScriptedProvider(Fail(failure))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        with pytest.raises(ProviderError, match="upstream down"):
            await agent.generate("hi")
        assert agent.status is AgentStatus.ERROR
        # The agent keeps working after a failed run.
        agent.provider = ScriptedProvider(Reply("back"))
        assert (await agent.generate("again")).content == "back"


async def test_runs_on_one_agent_are_fifo(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider(Reply("first", delay=1), Reply("second"))
    order: list[str] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)

        async def ask(text: str) -> None:
            order.append((await agent.generate(text)).content)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "one")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ask, "two")
        assert order == ["first", "second"]
        assert [m.content for m in provider.calls[1].messages][-3:] == ["one", "first", "two"]


async def test_an_outer_cancel_commits_then_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Hang("partial text"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        with trio.move_on_after(2) as outer:
            await agent.generate("go")
        assert outer.cancelled_caught
        stored = (await agent.conversation.messages())[-1]
        assert (stored.content, stored.interrupted) == ("partial text", True)


async def test_an_agent_over_http_against_the_simulator() -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("What is 19 + 23?")
        assert result.content == "The answer is 42."
        assert result.turns == 2
        assert result.usage.total > 0
        await provider.aclose()


async def test_events_follow_the_run_and_a_raising_listener_changes_nothing_g8() -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    provider = ScriptedProvider(Reply(calls=[call], usage=Usage(3, 1)), Reply("3"))
    kinds: list[str] = []
    failures: list[tuple[str, str]] = []

    def bad(event: AgentEvent) -> None:
        raise RuntimeError(f"listener bug on {event.kind}")

    def handler(error: BaseException, event: AgentEvent) -> None:
        failures.append((event.kind, str(error)))

    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime, provider, tools=[add], on=[lambda e: kinds.append(e.kind), bad], error=handler
        )
        result = await agent.generate("1 + 2?")
        assert result.content == "3"
    assert kinds == ["start", "turn", "usage", "tool", "turn", "usage", "finish"]
    assert [kind for kind, _ in failures] == kinds  # every raising listener is surfaced
    assert failures[0][1] == "listener bug on start"


async def test_a_cancel_emits_abort_then_finish_g2(autojump_clock: trio.testing.MockClock) -> None:
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Hang("so far")), on=[events.append])
        await agent.generate("go", timeout=3)
    assert [e.kind for e in events][-2:] == ["abort", "finish"]
    abort, finish = events[-2:]
    assert (abort.stop, finish.partial) == (StopReason.TIMEOUT, True)


async def test_exhaustion_emits_exhaust_not_abort_g13() -> None:
    events: list[str] = []
    call = ToolCall("c1", "add", {"a": 1, "b": 1})
    async with open_runtime() as runtime:
        agent = await Agent.start(
            runtime,
            ScriptedProvider(Reply(calls=[call])),
            tools=[add],
            limit=1,
            on=[lambda e: events.append(e.kind)],
        )
        result = await agent.generate("go")
    assert result.stop is StopReason.EXHAUSTED
    assert "exhaust" in events
    assert "abort" not in events
    assert events[-1] == "finish"


async def test_on_exhaust_summarize_makes_one_tool_less_call_never_stored() -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 1})
    provider = ScriptedProvider(Reply(calls=[call]), Reply("Partly done: 1 + 1 = 2."), Reply(""))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], limit=1, on_exhaust="summarize")
        result = await agent.generate("go")
        assert result.stop is StopReason.EXHAUSTED
        assert result.content == "Partly done: 1 + 1 = 2."
        final = provider.calls[1]
        assert final.tools == ()  # no tools offered
        assert final.messages[-1].content == EXHAUST_INSTRUCTION
        stored = [m.content for m in await agent.conversation.messages()]
        assert EXHAUST_INSTRUCTION not in stored
        # An empty final answer is recorded as the fixed fallback.
        provider2 = ScriptedProvider(Reply(calls=[call]), Reply(""))
        agent2 = await Agent.start(runtime, provider2, tools=[add], limit=1, on_exhaust="summarize")
        assert (await agent2.generate("go")).content == FALLBACK_SUMMARY


async def test_an_identical_call_repeated_too_often_is_refused_not_run() -> None:
    runs: list[int] = []

    @tool
    def count(n: int) -> int:
        """Count."""
        runs.append(n)
        return n

    same = [Reply(calls=[ToolCall(f"c{i}", "count", {"n": 7})]) for i in range(4)]
    provider = ScriptedProvider(*same, Reply("I will stop."))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[count], max_repeats=2)
        result = await agent.generate("count")
        assert runs == [7, 7]
        refused = [m.content for m in result.messages if m.role is Role.TOOL][2:]
        assert len(refused) == 2
        assert all(text.startswith("not executed: the identical call count(") for text in refused)
        assert result.content == "I will stop."
        assert well_formed(result.messages)


async def test_unknown_tools_twice_in_a_row_end_with_a_tool_less_call() -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("c1", "search", {"q": "x"})]),
        Reply(calls=[ToolCall("c2", "browse", {"url": "y"})]),
        Reply("I cannot search here."),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("find it")
        assert result.content == "I cannot search here."
        final = provider.calls[2]
        assert final.tools == ()
        assert "browse, search" in final.messages[-1].content
        assert result.stop is StopReason.COMPLETE
        assert well_formed(result.messages)


class Summaries:
    """A summarizer that records how often it ran and can be told to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    async def __call__(self, messages: Sequence[Message]) -> str:
        self.calls += 1
        if self.fail:
            raise ProviderError("summarizer down", code="server_error")
        return f"summary {self.calls}"


async def test_automatic_compaction_before_the_first_request() -> None:
    provider = ScriptedProvider(Reply("ok"))
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=Summaries(), keep=1)
        await conversation.add(Message.user("x" * 800), Message.assistant("y" * 800))
        agent = await Agent.start(runtime, provider, conversation=conversation, window=200)
        result = await agent.generate("and now?")
        assert result.content == "ok"
        sent = provider.calls[0].messages
        assert sent[0].content.startswith(RECAP_PREFIX)  # the old turns went into a summary
        assert sent[-1].content == "and now?"
        assert len((await conversation.history()).sections) == 1


async def test_a_failing_summarizer_emits_fault_and_the_run_goes_on_within_the_window() -> None:
    # The history is over the window (compaction is tried, and fails): the prompt is refused
    # while it is over, and the run goes on once it fits -- a summary is only a saving.
    summaries = Summaries(fail=True)
    events: list[AgentEvent] = []
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=1)
        await conversation.add(Message.user("x" * 800), Message.assistant("y" * 800))
        call = ToolCall("c1", "add", {"a": 1, "b": 1})
        provider = ScriptedProvider(Reply(calls=[call]), Reply("2"))
        agent = await Agent.start(
            runtime,
            provider,
            conversation=conversation,
            window=200,
            tools=[add],
            on=[lambda e: events.append(e) if e.kind in ("fault", "guard") else None],
        )
        # Over the window after the failed compaction: refused, no provider call.
        with pytest.raises(ProviderError) as refused:
            await agent.generate("1 + 1?")
        assert refused.value.code == "context_overflow"
        assert not refused.value.retryable
        assert provider.calls == []
        assert [e.kind for e in events] == ["fault", "guard"]  # tried once, then refused
        assert summaries.calls == 1
        assert isinstance(events[0].error, CompactionError)
        # A window the prompt fits: nothing tried, nothing refused, the run goes on.
        agent.window = 2_000
        events.clear()
        result = await agent.generate("1 + 1?")
        assert result.content == "2"
        assert events == []
        # With strict=True the failure is the run's failure, and the history is unchanged.
        before = await conversation.history()
        strict = await Agent.start(
            runtime, ScriptedProvider(), conversation=conversation, window=200, strict=True
        )
        with pytest.raises(CompactionError, match="summarizer down"):
            await strict.generate()
        assert (await conversation.history()).sections == before.sections


async def test_a_prompt_compaction_cannot_bring_under_the_window_is_never_sent() -> None:
    # 003 G9: keep=1 leaves only the user's message live: nothing can fold, the prompt is over
    # the tiny window -- refused before any provider call, with a guard event saying why.
    summaries = Summaries()
    provider = ScriptedProvider(Reply("never"))
    guards: list[AgentEvent] = []
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=1)
        agent = await Agent.start(
            runtime,
            provider,
            conversation=conversation,
            window=5,
            on=[lambda e: guards.append(e) if e.kind == "guard" else None],
        )
        with pytest.raises(ProviderError, match="not sent") as refused:
            await agent.generate("x" * 100)
        assert refused.value.code == "context_overflow"
        assert provider.calls == []
        assert summaries.calls == 0
        assert len(guards) == 1
        assert "context window of 5" in str(guards[0].reason)
        # Without a window nothing is refused (the provider is the judge).
        agent.window = None
        assert (await agent.generate("short")).content == "never"


class Overflowing(ScriptedProvider):
    """Refuses, as a vendor does (a 400 saying so), a prompt longer than ``limit`` characters."""

    def __init__(self, limit: int, *steps: Reply | str) -> None:
        super().__init__(*steps)
        self.limit = limit
        self.refused = 0

    def stream(self, messages: Any, *, tools: Any = None, options: Any = None) -> Any:
        size = sum(len(m.content) for m in messages)
        if size > self.limit:
            self.refused += 1
            code, retryable = classify_status(400, f"prompt is too long: {size} characters")
            error = ProviderError("prompt is too long", code=code, retryable=retryable, status=400)
            self._script.appendleft(Fail(error))
        return super().stream(messages, tools=tools, options=options)


async def test_a_provider_context_overflow_leads_to_one_compaction_and_one_retry() -> None:
    # 002 G15: no window set (nothing estimated), the provider says the prompt is too long: the
    # conversation is compacted once and the same turn sent once more.
    summaries = Summaries()
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=1)
        await conversation.add(Message.user("x" * 800), Message.assistant("y" * 800))
        provider = Overflowing(1_000, Reply("fits now"))
        agent = await Agent.start(runtime, provider, conversation=conversation)
        result = await agent.generate("and now?")
        assert result.content == "fits now"
        assert provider.refused == 1
        assert summaries.calls >= 1
        assert provider.calls[-1].messages[0].content.startswith(RECAP_PREFIX)
        assert result.turns == 1  # the same turn, sent again


async def test_a_second_context_overflow_is_the_runs_error_and_nothing_loops() -> None:
    summaries = Summaries()
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summaries, keep=1)
        await conversation.add(Message.user("x" * 800), Message.assistant("y" * 800))
        # Still too long for this provider after the compaction: the run's error.
        provider = Overflowing(10, Reply("never"))
        agent = await Agent.start(runtime, provider, conversation=conversation)
        with pytest.raises(ProviderError) as failed:
            await agent.generate("and now?")
        assert failed.value.code == "context_overflow"
        assert provider.refused == 2  # the first call and its one retry
        # No summarizer: nothing to compact, so no retry either.
        once = Overflowing(5, Reply("never"))
        plain = await Agent.start(runtime, once, conversation=await Conversation.start(runtime))
        with pytest.raises(ProviderError, match="too long"):
            await plain.generate("and now?")
        assert once.refused == 1


@attrs.frozen
class Verdict:
    label: str
    score: int


async def test_structured_output_is_parsed_and_typed() -> None:
    provider = ScriptedProvider(Reply('```json\n{"label": "spam", "score": 9}\n```'))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("Classify this.", schema=Verdict)
        assert result.output == Verdict("spam", 9)
        # The schema went to the provider's native JSON mode, not into the prompt.
        options = provider.calls[0].options
        assert options is not None
        assert options.schema is not None
        assert options.schema["required"] == ["label", "score"]


async def test_a_wrong_answer_is_retried_with_the_issues_and_every_attempt_kept() -> None:
    provider = ScriptedProvider(Reply("not json"), Reply('{"label": 1}'), Reply('{"a": 2}'))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("Give me a.", schema=schema)
        assert result.output == {"a": 2}
        assert result.stop is StopReason.COMPLETE
        feedback = [m.content for m in result.messages if m.role is Role.USER][1:]
        assert len(feedback) == 2
        assert "it is not JSON" in feedback[0]
        assert "missing required argument 'a'" in feedback[1]
        assert [m.content for m in result.messages if m.role is Role.ASSISTANT] == [
            "not json",
            '{"label": 1}',
            '{"a": 2}',
        ]


async def test_schema_retries_run_out_with_a_clear_error() -> None:
    provider = ScriptedProvider(Reply("no"), Reply("still no"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        with pytest.raises(OutputError, match=r"after 2 attempt\(s\)") as caught:
            await agent.generate("Give me a.", schema={"type": "integer"}, schema_retries=1)
        assert caught.value.attempts == 2
        assert caught.value.issues[0].startswith("it is not JSON")
        stored = [m.content for m in await agent.conversation.messages()]
        assert "no" in stored
        assert "still no" in stored


async def test_a_provider_without_a_json_mode_gets_the_schema_stated() -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = simulator.anthropic()  # Anthropic has no JSON-schema mode: ConfigError
        agent = await Agent.start(runtime, provider)
        with pytest.raises(OutputError):
            # The simulator echoes, so the answer is not JSON -- but the request was made, with
            # the schema stated in an instruction the conversation never stores.
            await agent.generate("hello", schema={"type": "object"}, schema_retries=0)
        sent = simulator.requests[0].turns[-1].text
        assert OUTPUT_INSTRUCTION.strip() in sent  # merged into the last user turn
        stored = [m.content for m in await agent.conversation.messages()]
        assert not any(text.startswith(OUTPUT_INSTRUCTION.strip()) for text in stored)
        await provider.aclose()


async def test_the_budget_cuts_an_http_stream_at_the_delta_that_trips_it() -> None:
    # The simulator sends thousands of deltas per network read: the cut must not wait for the
    # next read (the stream would otherwise hand over every buffered delta first).
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = simulator.openai()
        agent = await Agent.start(runtime, provider)
        budget = TokenBudget(max=40, scope="completion")
        result = await agent.generate("count to 5000", budget=budget)
        assert result.stop is StopReason.BUDGET
        assert 40 <= estimate_tokens(result.content) <= 41
        await provider.aclose()


async def test_the_runtime_starts_agents_too() -> None:
    async with open_runtime() as runtime:
        agent = await runtime.agent(ScriptedProvider(Reply("hi")), system="Be brief.", limit=3)
        assert agent.defaults.limit == 3
        assert (await agent.generate("hello")).content == "hi"
        assert agent.ref.name in runtime.statistics().children
