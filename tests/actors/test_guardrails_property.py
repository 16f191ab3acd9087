"""Property: guardrails keep their promises whatever the timing (issue 27, section 5).

Random scripts (replies streamed in random pieces after random delays, some calling ``add``),
random guards (an input guard before or alongside the first call, an output guard, a tool guard
on ``add``; each passing or tripping after a random delay) and a random cut (an abort at a
random trio time, or none). After every run:

* the history is well formed (every call answered), whatever was cut;
* ``stop`` is ``guardrail`` exactly when the result names a guardrail, and only a guard that
  trips can be named;
* an input guard that tripped: nothing the run's model said is in the history, and no tool
  ran -- also when it ran alongside the first call and that call had finished with calls; one
  that runs before the first call tripped before any provider call was made;
* a tool guard that trips on ``add``: ``add`` never ran;
* a completed run: every guard it consulted passed;
* no task outlives the runtime (it closes).

Everything runs on a ``MockClock`` with ``autojump_threshold=0``: no real sleeps.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import (
    Abort,
    Agent,
    GuardrailTrip,
    input_guardrail,
    open_runtime,
    output_guardrail,
    tool,
    tool_guardrail,
)
from actors.guardrails import Guardrail
from actors.testing import Reply, ScriptedProvider
from protocols.history import check_history
from protocols.messages import Role, StopReason, ToolCall


@attrs.frozen
class Guard:
    kind: str
    trips: bool
    delay: float
    when: str = "parallel"


@attrs.frozen
class Case:
    replies: tuple[Reply, ...]
    guards: tuple[Guard, ...]
    cut_at: float | None


def replies() -> st.SearchStrategy[tuple[Reply, ...]]:
    def reply(index: int, last: bool) -> st.SearchStrategy[Reply]:
        calls = st.just([]) if last else st.lists(st.just(None), min_size=0, max_size=2)
        return st.builds(
            lambda text, chunk, delay, n: Reply(
                text,
                chunk=chunk,
                delay=delay,
                calls=[ToolCall(f"c{index}_{i}", "add", {"a": i, "b": 1}) for i in range(len(n))],
            ),
            st.text(alphabet="abc ", max_size=12),
            st.integers(0, 5),
            st.sampled_from([0.0, 0.5, 2.0]),
            calls,
        )

    return st.integers(1, 3).flatmap(lambda n: st.tuples(*(reply(i, i == n - 1) for i in range(n))))


GUARDS = st.lists(
    st.builds(
        Guard,
        st.sampled_from(["input", "output", "tool"]),
        st.booleans(),
        st.sampled_from([0.0, 0.5, 1.0, 3.0, 8.0]),
        st.sampled_from(["parallel", "before"]),
    ),
    max_size=3,
    unique_by=lambda guard: guard.kind,
)
CASES = st.builds(Case, replies(), GUARDS.map(tuple), st.none() | st.floats(0, 20, allow_nan=False))


def make(guard: Guard, log: list[str]) -> Guardrail:
    async def check(subject: Any) -> str | None:
        await trio.sleep(guard.delay)
        log.append(guard.kind)
        return f"{guard.kind} trips" if guard.trips else None

    if guard.kind == "input":
        return input_guardrail(check, name="in", when=guard.when)
    if guard.kind == "output":
        return output_guardrail(check, name="out")
    return tool_guardrail(check, name="tools", tools=["add"])


async def one_run(case: Case) -> None:
    ran: list[int] = []
    consulted: list[str] = []

    @tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        ran.append(a)
        return a + b

    provider = ScriptedProvider(*case.replies, *["spare"] * 3)
    token = Abort()
    guards = [make(guard, consulted) for guard in case.guards]
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[add], guardrails=guards, limit=5)
        async with trio.open_nursery() as nursery:
            if case.cut_at is not None:

                async def cut(at: float) -> None:
                    await trio.sleep(at)
                    token.cancel("cut")

                nursery.start_soon(cut, case.cut_at)
            result = await agent.generate("please add", abort=[token])
            nursery.cancel_scope.cancel()
        history = await agent.conversation.messages()
    check_history(history)
    by_kind = {guard.kind: guard for guard in case.guards}
    assert (result.stop is StopReason.GUARDRAIL) == (result.guardrail is not None)
    trip = result.guardrail
    if trip is not None:
        assert isinstance(trip, GuardrailTrip)
        assert by_kind[trip.kind].trips
        assert f"{trip.kind} trips" == trip.reason
    if trip is not None and trip.kind == "input":
        # Nothing of the model's is committed, and no tool ran.
        assert [m.role for m in history] == [Role.USER]
        assert ran == []
        if by_kind["input"].when == "before":
            assert provider.calls == []  # nothing was spent on the model
    tool_guard = by_kind.get("tool")
    if tool_guard is not None and tool_guard.trips:
        assert ran == []
    input_guard = by_kind.get("input")
    if input_guard is not None and input_guard.trips:
        assert ran == []  # its verdict comes before any call runs
    if result.stop is StopReason.COMPLETE:
        for kind in consulted:
            assert not by_kind[kind].trips
        if input_guard is not None:
            assert "input" in consulted
        if "output" in by_kind:
            assert "output" in consulted


@settings(max_examples=150, deadline=None)
@given(CASES)
def test_guardrails_keep_their_promises_under_random_timing(case: Case) -> None:
    trio.run(one_run, case, clock=trio.testing.MockClock(autojump_threshold=0))
