"""Property: a run cut at a random point keeps the bounded turn's promises (DESIGN section 4).

Random scripts -- replies streamed in random pieces after random delays, 0-3 calls to ``nap``
and ``add``, hangs, failures -- run under random bounds: an abort token tripped from a sibling
task at a random trio time (or before the run, or never), ``agent.abort``, the caller's own
cancel scope, leaving the stream early, a timeout, a token budget, a turn limit and a tool
concurrency. After every run:

* history: what was there is untouched; a run with a result appended exactly
  ``result.messages``; every assistant tool call is answered by exactly one tool message right
  after it and no tool message answers an unknown call; at most one interrupted assistant
  message, the run's last;
* result: ``partial`` iff the stop is not ``complete``, and the stop is one the run's bounds
  allow (``cancelled`` only after an abort, ``timeout`` only past the deadline, ``budget`` only
  once the meter reached the budget, ``exhausted`` only at the limit with calls pending); each
  turn's assistant message is what the stream showed of that turn;
* usage: exactly one ``usage`` chunk per turn, summing to ``result.usage``; a completed turn
  draws its scripted usage, a cut one the estimate of what it streamed; no turn starts once the
  budget is spent;
* no task outlives the run or the runtime, the agent is not left running, and a caller that
  cuts its own run gets control back at once.

Some runs go on from a history of the caller's (``history=``, issue 24 item 4): the thread of
the example's earlier such runs (``thread + result.messages`` after each), on a seed with an
answered call. For those, "the history" above is ``thread + result.messages`` -- well formed
however the run was cut -- the prompt began with the thread, and the agent's own conversation
is untouched.

Everything runs on a ``MockClock`` with ``autojump_threshold=0``: no real sleeps.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from actors import Abort, ActorStopped, open_runtime, tool
from actors.agent import EXHAUSTED, FALLBACK_SUMMARY, Agent, AgentStatus, Chunk
from actors.testing import Fail, Hang, Reply, ScriptedProvider, ScriptExhausted
from actors.tools import INTERRUPTED, NOT_EXECUTED
from protocols.accounting import TokenBudget, estimate_tokens
from protocols.errors import ProviderError
from protocols.history import check_history, render_for_provider
from protocols.messages import (
    AgentResult,
    Message,
    Role,
    StopReason,
    ToolCall,
    ToolResult,
    ToolSuccess,
    Usage,
)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def nap(seconds: float) -> str:
    """Sleep a while."""
    await trio.sleep(seconds)
    return "rested"


Step = Reply | Hang | Fail
#: ``never``: no cut but the watchdog; ``token``: an ``abort=`` token tripped at ``at``; ``pre``:
#: that token tripped before the run; ``agent``: ``agent.abort()`` at ``at``; ``outer``: the
#: caller's own scope cancelled at ``at`` (at 0: already cancelled when it calls); ``close``:
#: leaving the stream after ``round(at)`` chunks.
Mode = Literal["never", "token", "pre", "agent", "outer", "close"]

#: Trio seconds after which a run nothing else cuts (a hang) is aborted by the watchdog.
WATCHDOG = 1000.0
#: How the repeat guard's refusal of a batch begins (``max_repeats``, 3 by default).
REPEATED = "not executed: the identical call"
CUTS = (StopReason.CANCELLED, StopReason.TIMEOUT, StopReason.BUDGET)


@attrs.frozen
class RunCase:
    """One run: its script and the bounds it runs under (``None``: the agent's setting)."""

    steps: tuple[Step, ...]
    mode: Mode
    at: float
    limit: int | None
    timeout: float | None
    budget: int | None
    on_history: bool = False  # run on the example's thread (history=), not the conversation


@attrs.frozen
class Case:
    """One example: an agent's settings and the runs made on it, one after the other."""

    runs: tuple[RunCase, ...]
    limit: int
    timeout: float | None
    budget: int | None
    tool_concurrency: int


@attrs.define
class Seen:
    """What the test observed of one run."""

    start: float
    end: float = 0.0
    fired: bool = False  # an abort reached the run (or tripped its token) before it ended
    cut_at: float | None = None  # when the caller cut its own run (outer, close)
    caller_cancelled: bool = False
    chunks: list[Chunk] = attrs.Factory(list)
    result: AgentResult | None = None
    error: ScriptExhausted | ProviderError | None = None


# -- strategies --------------------------------------------------------------------------------

moments = st.integers(0, 40).map(lambda quarters: quarters / 4)  # ties with delays are likely
durations = st.sampled_from([0.0, 0.5, 1.0, 2.5, 10.0])
usages = st.none() | st.builds(Usage, st.integers(0, 12), st.integers(0, 12))


@st.composite
def scripts(draw: st.DrawFn, run: int) -> tuple[Step, ...]:
    steps: list[Step] = []
    for index in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["reply"] * 6 + ["hang", "fail"]))
        if kind == "hang":
            steps.append(Hang(draw(st.text("xy", max_size=6))))
            continue
        if kind == "fail":
            steps.append(Fail(delay=draw(st.sampled_from([0.0, 1.0]))))
            continue
        calls: list[ToolCall] = []
        for number in range(draw(st.integers(0, 3))):
            call_id = f"r{run}s{index}c{number}"  # unique in the whole example
            if draw(st.booleans()):
                calls.append(ToolCall(call_id, "nap", {"seconds": draw(durations)}))
            else:
                pair = {"a": draw(st.integers(-9, 9)), "b": draw(st.integers(-9, 9))}
                calls.append(ToolCall(call_id, "add", pair))
        steps.append(
            Reply(
                text=draw(st.text("ab .", max_size=24)),
                thinking=draw(st.sampled_from(["", "hm", "let me see"])),
                calls=calls,
                usage=draw(usages),
                chunk=draw(st.integers(0, 6)),
                delay=draw(st.sampled_from([0.0, 0.25, 1.0])),
            )
        )
    return tuple(steps)


timeouts = st.none() | st.integers(1, 40).map(lambda quarters: quarters / 4)
budgets = st.none() | st.integers(0, 30)
modes: st.SearchStrategy[Mode] = st.sampled_from(
    ["never", "token", "token", "token", "pre", "agent", "outer", "close"]
)


@st.composite
def run_cases(draw: st.DrawFn, run: int) -> RunCase:
    return RunCase(
        steps=draw(scripts(run)),
        mode=draw(modes),
        at=draw(moments),
        limit=draw(st.none() | st.integers(0, 4)),
        timeout=draw(timeouts),
        budget=draw(budgets),
        on_history=draw(st.booleans()),
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    count = draw(st.integers(1, 2))
    return Case(
        runs=tuple(draw(run_cases(run)) for run in range(count)),
        limit=draw(st.integers(0, 4)),
        timeout=draw(timeouts),
        budget=draw(budgets),
        tool_concurrency=draw(st.integers(1, 3)),
    )


# -- driving one run ---------------------------------------------------------------------------


def _tasks() -> int:
    return trio.lowlevel.current_statistics().tasks_living


async def _watchdog(agent: Agent, seen: Seen) -> None:
    while True:
        await trio.sleep(WATCHDOG)
        if agent.status is AgentStatus.RUNNING:
            seen.fired = True
            agent.abort("watchdog: nothing else bounds this run")


async def _cut_later(agent: Agent, token: Abort, run: RunCase, seen: Seen) -> None:
    await trio.sleep_until(seen.start + run.at)
    if run.mode == "token":
        seen.fired = True
        token.cancel("the user pressed stop")
    else:
        seen.fired = seen.fired or agent.status is AgentStatus.RUNNING
        agent.abort("the user pressed stop")


async def _drive(
    agent: Agent, text: str, options: dict[str, Any], run: RunCase, seen: Seen
) -> None:
    reads = round(run.at)
    try:
        async with agent.stream(text, **options) as stream:
            if run.mode == "close" and reads == 0:
                seen.cut_at = trio.current_time()  # never iterated: the run never starts
                return
            async for chunk in stream:
                seen.chunks.append(chunk)
                if run.mode == "close" and len(seen.chunks) >= reads:
                    seen.cut_at = trio.current_time()
                    break
            else:
                seen.result = stream.result
    except (ScriptExhausted, ProviderError) as error:
        seen.error = error


def _effective(case: Case, run: RunCase) -> tuple[int, float | None, int | None]:
    limit = case.limit if run.limit is None else run.limit
    timeout = case.timeout if run.timeout is None else run.timeout
    budget = case.budget if run.budget is None else run.budget
    return limit, timeout, budget


#: Where an example's runs on a history begin: a turn with a call, answered.
SEED = (
    Message.user("seed"),
    Message.assistant("", calls=[ToolCall("seed", "add", {"a": 1, "b": 1})]),
    Message.tool("seed", "add", "2"),
    Message.assistant("2", interrupted=True),
)


async def _one_run(
    agent: Agent, case: Case, index: int, run: RunCase, thread: list[Message]
) -> None:
    provider = ScriptedProvider(*run.steps)
    agent.provider = provider
    own = await agent.conversation.messages()
    before = tuple(thread) if run.on_history else own
    await trio.testing.wait_all_tasks_blocked()
    living = _tasks()
    seen = Seen(start=trio.current_time())
    token = Abort()
    options: dict[str, Any] = {
        "limit": run.limit,
        "timeout": run.timeout,
        "budget": None if run.budget is None else TokenBudget(max=run.budget),
    }
    if run.on_history:
        options["history"] = before
    if run.mode in ("token", "pre"):
        options["abort"] = [token]
    if run.mode == "pre":
        token.cancel("cancelled before the start")
        seen.fired = True
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watchdog, agent, seen)
        if run.mode in ("token", "agent"):
            nursery.start_soon(_cut_later, agent, token, run, seen)
        with trio.CancelScope() as outer:
            if run.mode == "outer":
                seen.cut_at = seen.start + run.at
                if run.at == 0:
                    outer.cancel()  # the caller is already cancelled when it asks
                else:
                    outer.deadline = seen.cut_at
            await _drive(agent, f"go {index}", options, run, seen)
        seen.end = trio.current_time()
        seen.caller_cancelled = outer.cancelled_caught
        nursery.cancel_scope.cancel()
    await trio.testing.wait_all_tasks_blocked()
    assert _tasks() == living, "a task of the run outlived it"
    assert agent.status is not AgentStatus.RUNNING
    assert agent.statistics()["queued"] == 0
    after = await agent.conversation.messages()
    if run.on_history:
        event("a run on a history")
        assert after == own, "a run on a history changed the agent's conversation"
        if provider.calls:  # its prompt went on from the thread
            assert provider.calls[0].messages[: len(before)] == render_for_provider(before)
        # The caller's next history; for a run the caller cut itself (no result), what it
        # added is the caller's loss, and the thread goes on without it.
        added = seen.result.messages if seen.result is not None else ()
        after = check_history((*before, *added))
        thread[:] = after
    _check(case, run, seen, before=before, after=after, provider=provider, agent=agent)


async def _exercise(case: Case) -> None:
    living = _tasks()
    with trio.fail_after(10 * WATCHDOG):  # a deadlock fails instead of looping forever
        async with open_runtime() as runtime:
            agent = await Agent.start(
                runtime,
                ScriptedProvider(),
                tools=[add, nap],
                limit=case.limit,
                timeout=case.timeout,
                budget=None if case.budget is None else TokenBudget(max=case.budget),
                tool_concurrency=case.tool_concurrency,
            )
            thread = list(SEED)
            for index, run in enumerate(case.runs):
                await _one_run(agent, case, index, run, thread)
    assert _tasks() == living, "a task outlived the runtime"


# -- the checks --------------------------------------------------------------------------------


def _assert_well_formed(messages: Sequence[Message]) -> None:
    """Each assistant's calls are answered right after it, once each; nothing else is."""
    pending: list[str] = []
    for message in messages:
        if message.role is Role.TOOL:
            assert message.tool_call_id in pending, f"an unknown call is answered: {message}"
            pending.remove(message.tool_call_id)
            continue
        assert not pending, f"calls without a result: {pending}"
        if message.role is Role.ASSISTANT:
            pending = [call.id for call in message.calls]
    assert not pending, f"calls without a result: {pending}"
    calls = Counter(call.id for m in messages if m.role is Role.ASSISTANT for call in m.calls)
    answers = Counter(m.tool_call_id for m in messages if m.role is Role.TOOL)
    assert calls == answers
    assert set(calls.values()) <= {1}


def _outcome(call: ToolCall) -> str:
    if call.name == "nap":
        return "rested"
    a, b = call.arguments["a"], call.arguments["b"]
    assert isinstance(a, int)
    assert isinstance(b, int)
    return str(a + b)


@attrs.frozen
class Turn:
    """One provider turn as the stream showed it, up to and including its ``usage`` chunk."""

    content: tuple[str, ...]
    thinking: str
    draw: Usage | None  # None: not reported, and no budget to estimate it


def _turns(chunks: Sequence[Chunk]) -> list[Turn]:
    turns: list[Turn] = []
    content: list[str] = []
    thinking: list[str] = []
    for chunk in chunks:
        if chunk.kind == "content":
            content.append(chunk.text)
        elif chunk.kind == "thinking":
            thinking.append(chunk.text)
        elif chunk.kind == "usage":
            turns.append(Turn(tuple(content), "".join(thinking), chunk.usage))
            content, thinking = [], []
    assert not content, "text streamed after the last turn settled"
    assert not thinking, "thinking streamed after the last turn settled"
    return turns


def _completed(step: Step, turn: Turn) -> bool:
    """A scripted stream completes exactly when all its deltas got out (none is left to wait
    before the end)."""
    return (
        isinstance(step, Reply)
        and "".join(turn.content) == step.text
        and turn.thinking == step.thinking
    )


def _check(
    case: Case,
    run: RunCase,
    seen: Seen,
    *,
    before: Sequence[Message],
    after: Sequence[Message],
    provider: ScriptedProvider,
    agent: Agent,
) -> None:
    limit, timeout, budget = _effective(case, run)
    # History: never edited, well formed, at most one interrupted message -- the run's last.
    assert tuple(after[: len(before)]) == tuple(before)
    appended = after[len(before) :]
    _assert_well_formed(after)
    interrupted = [m for m in appended if m.interrupted]
    assert len(interrupted) <= 1
    for kind in (INTERRUPTED, NOT_EXECUTED):
        if any(m.content == kind for m in appended if m.role is Role.TOOL):
            event(f"a result: {kind.split(':')[0]}")
    assistants = [m for m in appended if m.role is Role.ASSISTANT]
    if interrupted:
        event("an interrupted assistant message")
        assert assistants[-1] is interrupted[0]
    assert len(provider.calls) <= limit
    if seen.cut_at is not None and seen.result is None and seen.error is None:
        # The caller cut its own run: it gets no result, and control back at once (the run
        # commits in no time: nothing in a commit sleeps).
        assert seen.end == seen.cut_at, "the caller was held after cutting its own run"
        assert seen.caller_cancelled == (run.mode == "outer")
        event(f"the caller cut its own run ({run.mode})")
        return
    if seen.error is not None:
        event(f"failed: {type(seen.error).__name__}")
        assert agent.status is AgentStatus.ERROR
        if isinstance(seen.error, ScriptExhausted):
            assert len(provider.calls) == len(run.steps) + 1
        else:
            assert isinstance(run.steps[len(provider.calls) - 1], Fail)
        return
    result = seen.result
    assert result is not None
    if run.mode == "pre":
        # Cancelled before it began: withdrawn, nothing committed (DESIGN section 12).
        assert (result.stop, result.messages, provider.calls) == (StopReason.CANCELLED, (), [])
        assert result.partial
        assert tuple(after) == tuple(before)
        return
    assert agent.status is AgentStatus.DONE
    assert tuple(after) == tuple(before) + result.messages, "history differs from the result"
    assert result.partial == (result.stop is not StopReason.COMPLETE)
    assert result.messages[0].role is Role.USER
    assert result.turns == len(provider.calls) <= limit
    _check_turns(run, seen, result, budget)
    _check_tools(seen, result)
    _check_stop(run, seen, result, limit=limit, timeout=timeout, budget=budget)


def _check_turns(run: RunCase, seen: Seen, result: AgentResult, budget: int | None) -> None:
    """Usage and assistant messages, turn by turn, against what the stream showed."""
    turns = _turns(seen.chunks)
    assert len(turns) == result.turns, "a turn settled its usage twice, or never"
    assert result.usage == _sum(turn.draw for turn in turns)
    assert result.estimated == any(
        chunk.estimated for chunk in seen.chunks if chunk.kind == "usage"
    )
    expected: list[tuple[str, str, tuple[ToolCall, ...], bool]] = []
    # The budget cuts the turn at the delta that reaches it -- also its last one.
    trip = _budget_trip(turns, budget) if budget is not None else None
    for index, turn in enumerate(turns):
        # A turn past the script: its call failed (the script was exhausted) at the moment a
        # cut landed, and the cut outranked the failure (000 G17): a cut turn, nothing shown.
        step = run.steps[index] if index < len(run.steps) else None
        content = "".join(turn.content)
        if step is None:
            assert index == len(turns) - 1, "a turn past the script was not the run's last"
            assert result.stop in CUTS, "a turn past the script, and the run was not cut"
            assert not content
        elif _completed(step, turn) and not (trip is not None and trip[0] == index):
            assert isinstance(step, Reply)
            expected.append((content, turn.thinking, step.calls, False))
            if step.usage is not None:
                assert turn.draw == step.usage
                continue
        else:
            assert index == len(turns) - 1, "a cut turn was not the run's last"
            if content:
                expected.append((content, turn.thinking, (), True))
        # Not reported (or cut): unknown, unless the budget charged it by estimate.
        estimate = estimate_tokens(content) + estimate_tokens(turn.thinking)
        counted = Usage(completion=estimate, total=estimate) if budget is not None else None
        assert turn.draw == counted
    assistants = [m for m in result.messages if m.role is Role.ASSISTANT]
    shown = [(m.content, m.thinking, m.calls, m.interrupted) for m in assistants]
    assert shown == expected, "the history differs from what the stream showed"
    assert result.content == (assistants[-1].content if assistants else "")
    assert result.thinking == "\n\n".join(turn.thinking for turn in turns if turn.thinking)
    if budget is not None:
        spent = 0
        for turn in turns[:-1]:
            assert turn.draw is not None  # a run with a budget always knows what it charged
            spent += turn.draw.total
            assert spent < budget, f"a turn started with the budget spent ({spent}/{budget})"


def _sum(draws: Iterable[Usage | None]) -> Usage | None:
    """The run's usage: the sum of its turns', unknown once one is."""
    total: Usage | None = Usage()
    for draw in draws:
        total = None if total is None or draw is None else total + draw
    return total


def _text(result: ToolResult) -> str:
    return result.render() if isinstance(result, ToolSuccess) else result.error


def _check_tools(seen: Seen, result: AgentResult) -> None:
    """Each batch's results are real, cut, exhausted or refused as repeats -- a whole batch
    at a time for the last two -- and the stream showed every call and result in history."""
    messages = result.messages
    for index, message in enumerate(messages):
        if message.role is not Role.ASSISTANT or not message.calls:
            continue
        answers = messages[index + 1 : index + 1 + len(message.calls)]
        texts = [answer.content for answer in answers]
        for call, text in zip(message.calls, texts, strict=True):
            kinds = (_outcome(call), INTERRUPTED, NOT_EXECUTED, EXHAUSTED)
            assert text in kinds or text.startswith(REPEATED), f"{call}: {text}"
        for whole in (EXHAUSTED, REPEATED):
            if any(text.startswith(whole) for text in texts):
                assert all(text.startswith(whole) for text in texts), texts
    shown_calls = [c.call.id for c in seen.chunks if c.kind == "tool_call" and c.call]
    made = [call.id for m in messages if not m.interrupted for call in m.calls]
    assert Counter(shown_calls) == Counter(made), "the stream and the history differ on calls"
    shown = [(c.result.id, _text(c.result)) for c in seen.chunks if c.result is not None]
    stored = [(m.tool_call_id, m.content) for m in messages if m.role is Role.TOOL]
    assert Counter(shown) == Counter(stored), "the stream and the history differ on results"


def _budget_trip(turns: Sequence[Turn], budget: int) -> tuple[int, bool] | None:
    """Where the meter's estimate reached the budget: (turn, on the turn's last delta)."""
    settled = 0
    for index, turn in enumerate(turns):
        chars = 0
        for number, piece in enumerate(turn.content):
            chars += len(piece)
            if settled + estimate_tokens("x" * chars) >= budget:
                return index, number == len(turn.content) - 1
        settled += turn.draw.total if turn.draw is not None else 0
    return None


def _check_stop(
    run: RunCase,
    seen: Seen,
    result: AgentResult,
    *,
    limit: int,
    timeout: float | None,
    budget: int | None,
) -> None:
    stop = result.stop
    event(f"stop: {stop.value}")
    turns = _turns(seen.chunks)
    tools = [m for m in result.messages if m.role is Role.TOOL]
    assistants = [m for m in result.messages if m.role is Role.ASSISTANT]
    # Which bounds could have cut the run.
    allowed = {StopReason.COMPLETE, StopReason.EXHAUSTED}
    if seen.fired:
        allowed.add(StopReason.CANCELLED)
    if timeout is not None and seen.end - seen.start >= timeout:
        allowed.add(StopReason.TIMEOUT)
    trip = _budget_trip(turns, budget) if budget is not None else None
    if budget is not None and (budget == 0 or trip is not None):
        allowed.add(StopReason.BUDGET)
    if budget is not None and turns:
        spent = sum(turn.draw.total for turn in turns if turn.draw is not None)
        if spent >= budget:
            allowed.add(StopReason.BUDGET)
    assert stop in allowed, f"stop {stop.value} but only {sorted(allowed)} could happen"
    if trip is not None:
        # Reaching the budget cuts the run at that delta, wherever it is (the last one too).
        assert stop is StopReason.BUDGET
    if budget == 0:
        assert result.turns == 0
        assert stop is StopReason.BUDGET or (seen.fired and stop is StopReason.CANCELLED)
    exhausted = [m for m in tools if m.content == EXHAUSTED]
    if stop in CUTS:
        assert not exhausted
        return
    # Nothing was cut: no interrupted message or result, and the scripted usage was drawn.
    assert not any(m.interrupted for m in result.messages)
    assert not [m for m in tools if m.content in (INTERRUPTED, NOT_EXECUTED)]
    made = run.steps[: result.turns]
    assert all(isinstance(step, Reply) for step in made)
    reported = [step.usage for step in made if isinstance(step, Reply)]
    if all(usage is not None for usage in reported):
        assert result.usage == sum((u for u in reported if u is not None), Usage())
    elif budget is None:
        assert result.usage is None  # a turn reported nothing: the run's usage is unknown
    if stop is StopReason.COMPLETE:
        assert not exhausted
        if limit == 0:
            assert result.turns == 0
        else:
            assert assistants
            assert not assistants[-1].calls
        return
    assert stop is StopReason.EXHAUSTED
    assert result.turns == limit >= 1
    last = assistants[-1]
    assert last.calls
    assert [m.tool_call_id for m in exhausted] == [call.id for call in last.calls]
    assert result.messages[-len(last.calls) :] == tuple(exhausted)


# -- the tests ---------------------------------------------------------------------------------


@settings(max_examples=250, deadline=None)
@given(case=cases())
def test_random_runs_cut_at_random_points_keep_the_bounded_turn(case: Case) -> None:
    trio.run(_exercise, case, clock=trio.testing.MockClock(autojump_threshold=0))


# A turn's reported usage can spend the budget without the mid-stream estimate tripping (the
# estimate counts content only; prompt tokens and thinking come at reconcile): no further turn
# may start. Found by the property above (shrunk to two content-less tool-call replies).
async def test_no_turn_starts_once_the_budget_is_spent() -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    provider = ScriptedProvider(
        Reply(calls=[call], usage=Usage(8, 2)), Reply("done", usage=Usage(9, 1))
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add])
        result = await agent.generate("add", budget=TokenBudget(max=5))
        _assert_well_formed(await agent.conversation.messages())
    assert len(provider.calls) == 1
    assert result.stop is StopReason.BUDGET
    assert result.usage == Usage(8, 2)


# A run whose request never reached the mailbox (the caller's scope was already cancelled, or
# the agent's actor had stopped) has nothing to wait for: the caller gets control back at once.
async def test_a_caller_cancelled_before_its_run_is_queued_is_not_held(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(Reply("never"))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        start = trio.current_time()
        with trio.CancelScope() as scope:
            scope.cancel()
            await agent.generate("hi")
        assert scope.cancelled_caught
        assert trio.current_time() == start
        assert provider.calls == []


# The same, through ActorStopped instead of Cancelled.
async def test_a_stopped_agent_refuses_a_run_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(Reply("never")))
    start = trio.current_time()
    with pytest.raises(ActorStopped):
        await agent.generate("hi")
    assert trio.current_time() == start


# -- several runs at once on one agent: queued runs, cut while they wait ----------------------
#
# Runs on one agent are FIFO: all of an example's runs are requested at once, so all but one
# wait their turn. Each may be cut -- its caller's scope, its token, ``AgentRun.abort``, or its
# consumer leaving the stream -- at a random moment, while it waits or while it runs. Scripts
# may call tools that do not exist (the loop's own extra call after two such turns) and the
# agent may summarize on exhaustion (another extra call), under budgets small enough to trip
# on them. Afterwards:
#
# * no agent actor restarted, nobody hangs, the agent is idle with nothing queued;
# * the history is well formed; each run's messages are one contiguous slice of it;
# * a run withdrawn before it began committed nothing and made no provider call, and a caller
#   that cut its own run got control back at once;
# * no provider call of a run -- the extra ones included -- started with its budget spent;
# * a run on a history (``history=SEED``) waits its turn like the others, and never touches
#   the agent's conversation: ``SEED + result.messages`` is well formed, and one withdrawn
#   added nothing and made no provider call.

Cut = Literal["never", "outer", "token", "abort", "leave"]


@attrs.frozen
class QueuedRun:
    steps: tuple[Step, ...]
    how: Literal["generate", "stream"]
    cut: Cut
    at: float
    limit: int | None
    budget: int | None
    on_history: bool = False


@attrs.frozen
class QueueCase:
    runs: tuple[QueuedRun, ...]
    summarize: bool
    tool_concurrency: int


@attrs.define
class QueuedSeen:
    end: float = -1.0
    chunks: list[Chunk] = attrs.Factory(list)
    result: AgentResult | None = None
    error: BaseException | None = None
    cancelled: bool = False


@st.composite
def queued_scripts(draw: st.DrawFn, run: int) -> tuple[Step, ...]:
    steps = list(draw(scripts(run)))
    # Calls to a tool that does not exist, in consecutive turns: the loop's own final call.
    for index in range(len(steps)):
        step = steps[index]
        if isinstance(step, Reply) and draw(st.integers(0, 2)) == 0:
            ghost = ToolCall(f"r{run}s{index}g", "ghost", {})
            steps[index] = attrs.evolve(step, calls=(*step.calls, ghost))
    return tuple(steps)


@st.composite
def queued_runs(draw: st.DrawFn, run: int) -> QueuedRun:
    return QueuedRun(
        steps=draw(queued_scripts(run)),
        how=draw(st.sampled_from(["generate", "stream"])),
        cut=draw(st.sampled_from(["never", "outer", "token", "abort", "leave"])),
        at=draw(moments),
        limit=draw(st.none() | st.integers(1, 3)),
        budget=draw(st.none() | st.integers(0, 25)),
        on_history=draw(st.integers(0, 3)) == 0,
    )


@st.composite
def queue_cases(draw: st.DrawFn) -> QueueCase:
    count = draw(st.integers(2, 4))
    return QueueCase(
        runs=tuple(draw(queued_runs(run)) for run in range(count)),
        summarize=draw(st.booleans()),
        tool_concurrency=draw(st.integers(1, 3)),
    )


class _ByRun(ScriptedProvider):
    """One script per run: a call is answered from the script of the run whose user message
    (``go <index>``) is the latest in its prompt (the loop's extra instructions come after)."""

    def __init__(self, scripts: Sequence[ScriptedProvider]) -> None:
        super().__init__()
        self.scripts = scripts

    def stream(self, messages: Sequence[Message], **options: Any) -> Any:
        asked = [m.content for m in messages if m.role is Role.USER and m.content[:3] == "go "]
        return self.scripts[int(asked[-1][3:])].stream(messages, **options)


async def _queued(agent: Agent, index: int, run: QueuedRun, seen: QueuedSeen, start: float) -> None:
    token = Abort()
    options: dict[str, Any] = {
        "limit": run.limit,
        "budget": None if run.budget is None else TokenBudget(max=run.budget),
        "abort": [token],
    }
    if run.on_history:
        options["history"] = SEED
    text = f"go {index}"
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as outer:
            if run.cut == "outer":
                outer.deadline = start + run.at
            if run.cut == "token":
                nursery.start_soon(_trip_at, start + run.at, token.cancel)
            try:
                if run.how == "generate":
                    seen.result = await agent.generate(text, **options)
                else:
                    async with agent.stream(text, **options) as stream:
                        if run.cut == "abort":
                            nursery.start_soon(_trip_at, start + run.at, stream.abort)
                        with trio.move_on_after(run.at if run.cut == "leave" else math.inf):
                            async for chunk in stream:
                                seen.chunks.append(chunk)
                            seen.result = stream.result
            except (ScriptExhausted, ProviderError) as error:
                seen.error = error
        seen.cancelled = outer.cancelled_caught
        seen.end = trio.current_time()
        nursery.cancel_scope.cancel()


async def _trip_at(when: float, trip: Any) -> None:
    await trio.sleep_until(when)
    trip("cut at random")


async def _exercise_queue(case: QueueCase) -> None:
    scripted = [ScriptedProvider(*run.steps) for run in case.runs]
    seen = [QueuedSeen() for _ in case.runs]
    with trio.fail_after(100 * WATCHDOG):  # a deadlock fails instead of hanging
        async with open_runtime() as runtime:
            agent = await Agent.start(
                runtime,
                _ByRun(scripted),
                tools=[add, nap],
                on_exhaust="summarize" if case.summarize else "stop",
                tool_concurrency=case.tool_concurrency,
            )
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watchdog, agent, Seen(start=start))
                async with trio.open_nursery() as callers:
                    for index, run in enumerate(case.runs):
                        callers.start_soon(_queued, agent, index, run, seen[index], start)
                nursery.cancel_scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert runtime.statistics().child_restarts == 0, "an agent actor restarted"
            assert agent.status is not AgentStatus.RUNNING
            assert agent.statistics()["queued"] == 0
            history = await agent.conversation.messages()
    _check_queue(case, scripted, seen, start, history)


def _check_queue(
    case: QueueCase,
    scripted: Sequence[ScriptedProvider],
    seen: Sequence[QueuedSeen],
    start: float,
    history: Sequence[Message],
) -> None:
    _assert_well_formed(history)
    users = [m.content for m in history if m.role is Role.USER]
    for index, (run, provider, saw) in enumerate(zip(case.runs, scripted, seen, strict=True)):
        text = f"go {index}"
        assert users.count(text) <= 1
        limit = 10 if run.limit is None else run.limit
        assert len(provider.calls) <= limit + 1  # the final summarize call at most
        if run.cut in ("outer", "leave") and saw.result is None and saw.error is None:
            # The caller cut its own run (waiting or running): control back at that moment.
            assert saw.end == start + run.at, "a caller was held after cutting its own run"
            event(f"the caller cut its run ({run.cut})")
        if run.on_history:
            assert text not in users, "a run on a history wrote to the agent's conversation"
            if saw.result is not None:
                event("a run on a history")
                check_history((*SEED, *saw.result.messages))
                assert saw.result.turns == len(provider.calls)
                if not saw.result.messages:
                    assert provider.calls == [], "a withdrawn run called the provider"
            continue
        if text not in users:
            # Withdrawn before it began: nothing of it, and no provider call.
            assert provider.calls == [], "a withdrawn run called the provider"
            if saw.result is not None:
                assert (saw.result.stop, saw.result.messages) == (StopReason.CANCELLED, ())
            event("withdrawn")
            continue
        # It began: its messages are one contiguous slice starting with its user message.
        first = next(i for i, m in enumerate(history) if m.content == text)
        if saw.result is not None:
            event(f"stop: {saw.result.stop.value}")
            messages = saw.result.messages
            assert tuple(history[first : first + len(messages)]) == messages
            assert saw.result.turns == len(provider.calls)
            if saw.result.stop is StopReason.CANCELLED and not messages:
                event("cancelled before it began")
        if run.budget is not None and (saw.result is not None and run.how == "stream"):
            turns = _turns(saw.chunks)
            assert len(turns) == len(provider.calls)
            spent = 0
            for turn in turns[:-1]:
                assert turn.draw is not None
                spent += turn.draw.total
                assert spent < run.budget, "a provider call started with the budget spent"
        for position, message in enumerate(history):
            if message.content == FALLBACK_SUMMARY:  # only ever after the turn limit
                assert any(m.content == EXHAUSTED for m in history[:position])


@settings(max_examples=200, deadline=None)
@given(case=queue_cases())
def test_runs_waiting_their_turn_cut_at_random_points_keep_the_bounded_turn(
    case: QueueCase,
) -> None:
    trio.run(_exercise_queue, case, clock=trio.testing.MockClock(autojump_threshold=0))
