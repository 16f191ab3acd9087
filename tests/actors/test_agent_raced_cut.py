"""notes/000.md guarantee 17, the class of it: a failure that races a run's own cut never turns
the cut into an error. "A local cancel always outranks the wire": once the run's scope is cut
(its abort, an ``abort=`` token, its deadline, its budget), an exception that leaves the run --
raised by the stream's cleanup while the ``Cancelled`` unwinds, or by a provider that turns the
``Cancelled`` into its own error -- resolves the run as cut, with the locally assembled
partial, and becomes the cut's cause: the ``abort`` event's ``error`` (``None`` when the cut
was the only failure). A failure with no cut is still the run's error.

A hypothesis property over the cut (kind and moment) and the provider's failure mode, with a
small provider of the test's own (the public ``ProviderStream`` interface, as any user's
provider). Everything runs on a ``MockClock`` with ``autojump_threshold=0``: no real sleeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import Abort, open_runtime
from actors.agent import Agent, AgentEvent
from actors.providers import ProviderStream, StreamingProvider, TextStream
from protocols.accounting import TokenBudget
from protocols.errors import ProviderError
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    StopReason,
    ToolDefinition,
)

#: What goes wrong when the stream is cut: nothing; its ``aclose`` raises (a transport that
#: fails while closing); its ``__anext__`` turns the ``Cancelled`` into a ``ProviderError``;
#: or, with no cut at all, the stream fails by itself (a genuine error).
Failure = Literal["none", "close", "convert", "genuine"]
Cut = Literal["abort", "token", "timeout", "budget"]

PIECE = "word"  # four characters: one token by estimate


class Breaking(StreamingProvider):
    """Streams :data:`PIECE` once a second, forever; fails as ``failure`` says."""

    name = "breaking"

    def __init__(self, failure: Failure, fail_after: int) -> None:
        self.failure = failure
        self.fail_after = fail_after

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        return _BreakingStream(self)


class _BreakingStream(TextStream):
    def __init__(self, provider: Breaking) -> None:
        super().__init__()
        self.provider = provider

    async def __anext__(self) -> Delta:
        provider = self.provider
        if provider.failure == "genuine" and len(self._content) == provider.fail_after:
            await trio.sleep(0.5)
            raise ProviderError("the model server broke", code="server_error")
        try:
            await trio.sleep(1)
        except trio.Cancelled:
            if provider.failure == "convert":
                raise ProviderError("the call was aborted", code="aborted") from None
            raise
        self._content.append(PIECE)
        return Delta("content", PIECE)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        if self.provider.failure == "close" and self._result is None:
            raise RuntimeError("the connection failed while closing")

    @property
    def partial(self) -> ProviderResult:
        return ProviderResult(content="".join(self._content), finish=FinishReason.CANCELLED)


async def exercise(cut: Cut, pieces: int, failure: Failure) -> tuple[Any, list[AgentEvent]]:
    """A run cut by ``cut`` after ``pieces`` pieces (half a second later), its provider failing
    as ``failure`` says: (its result or the error it raised, its events)."""
    events: list[AgentEvent] = []
    at = pieces + 0.5
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, Breaking(failure, pieces), on=[events.append])
        token = Abort()
        options: dict[str, Any] = {}
        if cut == "timeout":
            options["timeout"] = at
        elif cut == "budget":
            # The piece after ``pieces`` trips it, mid-stream (one token by estimate each).
            options["budget"] = TokenBudget(max=pieces + 1, scope="completion")
        elif cut == "token":
            options["abort"] = [token]

        async def cut_later() -> None:
            await trio.sleep(at)
            if cut == "abort":
                agent.abort("the user pressed stop")
            elif cut == "token":
                token.cancel("the caller gave up")

        outcome: Any
        async with trio.open_nursery() as nursery:
            if failure != "genuine" and cut in ("abort", "token"):
                nursery.start_soon(cut_later)
            try:
                outcome = await agent.generate("go", **options)
            except ProviderError as error:
                outcome = error
            nursery.cancel_scope.cancel()
    return outcome, events


STOPS = {
    "abort": StopReason.CANCELLED,
    "token": StopReason.CANCELLED,
    "timeout": StopReason.TIMEOUT,
    "budget": StopReason.BUDGET,
}


@settings(max_examples=120, deadline=None)
@given(
    cut=st.sampled_from(["abort", "token", "timeout", "budget"]),
    pieces=st.integers(0, 3),
    failure=st.sampled_from(["none", "close", "convert"]),
)
def test_a_failure_racing_the_runs_own_cut_becomes_its_cause(
    cut: Cut, pieces: int, failure: Failure
) -> None:
    outcome, events = trio.run(
        exercise, cut, pieces, failure, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert not isinstance(outcome, BaseException), outcome  # never an error: it was cut
    shown = pieces + 1 if cut == "budget" else pieces  # the budget trips on a shown piece
    assert (outcome.stop, outcome.partial) == (STOPS[cut], True)
    assert outcome.content == PIECE * shown  # the locally assembled partial
    last = outcome.messages[-1]
    if shown:  # committed, marked interrupted (an empty partial is not committed)
        assert (last.role, last.content, last.interrupted) == (Role.ASSISTANT, PIECE * shown, True)
    kinds = [event.kind for event in events]
    assert kinds[-2:] == ["abort", "finish"]
    assert "error" not in kinds
    cause = events[-2].error
    # The budget's cut lands between two pieces, not inside the provider's wait: nothing there
    # to convert.
    if failure == "close":
        assert isinstance(cause, RuntimeError)
        assert str(cause) == "the connection failed while closing"
    elif failure == "convert" and cut != "budget":
        assert isinstance(cause, ProviderError)
        assert cause.code == "aborted"
    else:
        assert cause is None  # the cut was the only failure


@pytest.mark.parametrize("pieces", [0, 2])
def test_a_failure_without_a_cut_is_still_the_runs_error(pieces: int) -> None:
    outcome, events = trio.run(
        exercise, "abort", pieces, "genuine", clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert isinstance(outcome, ProviderError)
    assert outcome.code == "server_error"
    kinds = [event.kind for event in events]
    assert kinds[-1] == "error"
    assert "abort" not in kinds
