"""notes/000.md guarantee 17 over a real relay: an agent's run on a :class:`RelayProvider`,
through a :class:`RelayServer` (hypercorn, real websockets on loopback), to an upstream model
server.

* A local cut (``agent.abort()``, the run's deadline) resolves the run with the locally
  assembled partial, committed as interrupted, and it reaches the model's server: the
  upstream stream is closed, as the :class:`~actors.testing.Simulator` sees it (``abandoned``).
  The cancel was the only failure, so the ``abort`` event has no ``error``.
* A failure that races the cancel -- the relay's ``error`` frame for an upstream that broke,
  raised in the run while its own cancel lands -- does not turn the cut into an error: the run
  resolves as cut, and the failure is the ``abort`` event's ``error`` (the cancel's cause).

Everything runs on trio's mock clock with a small autojump threshold: no real sleeps.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from actors import open_runtime
from actors.agent import Agent, AgentEvent, AgentStatus, Chunk
from actors.providers import OpenAIChat, RetryPolicy
from actors.relay import RelayProvider, RelayServer, serve
from actors.testing import FaultProviderServer, Simulator
from protocols.errors import ProviderError
from protocols.faults import text_event
from protocols.messages import Role, StopReason

IDLE = 0.05  # mock-clock autojump threshold (real seconds): real sockets are involved
TOKEN = "relay-token-0123456789abcdef"


@asynccontextmanager
async def relayed(upstream: Any) -> AsyncIterator[tuple[RelayServer, RelayProvider]]:
    """``upstream`` behind a relay served on a free port, and a client connected to it."""
    app = RelayServer(upstream, tokens=[TOKEN])
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, app, port=0, ping_interval=None))
        address = url.replace("http://", "ws://") + "/v1/relay"
        async with RelayProvider(address, token=TOKEN) as client:
            yield app, client
        nursery.cancel_scope.cancel()


async def until(predicate: Callable[[], bool], *, within: float = 60) -> None:
    """Wait (in trio time) until ``predicate()`` holds."""
    pause = 0.001
    with trio.fail_after(within):
        while not predicate():
            await trio.sleep(pause)
            pause = min(pause * 2, 1.0)


@pytest.mark.parametrize("cut", ["abort", "timeout"])
async def test_a_cut_run_closes_the_upstream_stream_and_keeps_its_local_partial(
    mock_clock: trio.testing.MockClock, cut: str
) -> None:
    mock_clock.autojump_threshold = IDLE
    events: list[AgentEvent] = []
    chunks: list[Chunk] = []
    async with Simulator(interval=1.0) as simulator:  # one number a second
        upstream = simulator.openai()
        try:
            async with relayed(upstream) as (app, client), open_runtime() as runtime:
                agent = await Agent.start(runtime, client, on=[events.append])
                options: dict[str, Any] = {"timeout": 4.5} if cut == "timeout" else {}
                async with agent.stream("count to 50", **options) as run:
                    async for chunk in run:
                        chunks.append(chunk)
                        if cut == "abort" and len(chunks) == 3:
                            agent.abort("the user pressed stop")
                result = run.result
                history = await agent.conversation.messages()
                # The cut reached the model's server: its stream was closed, not finished.
                await until(lambda: simulator.statistics().abandoned == 1)
                await until(lambda: app.statistics().streams == 0)
                assert simulator.statistics().completed == 0
                # The connection is still good for the next run.
                again = await agent.generate("count to 2")
        finally:
            await upstream.aclose()
    shown = "".join(chunk.text for chunk in chunks if chunk.kind == "content")
    assert shown.split() == ["1", "2", "3"]
    stop = StopReason.CANCELLED if cut == "abort" else StopReason.TIMEOUT
    assert (result.stop, result.partial) == (stop, True)
    assert result.content == shown  # the local partial: what this side had shown
    assert (history[-1].role, history[-1].content, history[-1].interrupted) == (
        Role.ASSISTANT,
        shown,
        True,
    )
    (abort,) = [event for event in events if event.kind == "abort"]
    assert abort.stop is stop
    assert abort.error is None  # the cancel was the only failure: no cause
    assert "error" not in [event.kind for event in events]
    assert again.content.split() == ["1", "2"]


async def test_a_relay_error_that_races_the_cancel_becomes_the_cancels_cause(
    mock_clock: trio.testing.MockClock,
) -> None:
    # The upstream streams "partial response" and breaks off; the relay sends its error frame,
    # and the run raises it -- while, in that same moment (the listener of the failed turn's
    # usage runs as the run commits what the turn streamed, before the failure leaves the
    # run), the run's own cancel lands. The cancel outranks the wire: the run resolves as cut,
    # its partial kept, and the relay's failure is the abort's cause. (Before: the run failed
    # with the relay's error although it had been aborted.)
    mock_clock.autojump_threshold = IDLE
    events: list[AgentEvent] = []
    agent: Agent | None = None

    def stop_at_once(event: AgentEvent) -> None:
        events.append(event)
        if event.kind == "usage" and agent is not None:
            agent.abort("the user pressed stop")

    whole = len(text_event("partial response"))  # that delta arrives whole, then the cut
    plan = [{"kind": "stream-cut", "afterBytes": whole}]
    async with FaultProviderServer(plan) as model_server:
        upstream = OpenAIChat(
            model="m", base_url=model_server.base_url, retry=RetryPolicy(retries=0)
        )
        try:
            async with relayed(upstream) as (_, client), open_runtime() as runtime:
                agent = await Agent.start(runtime, client, on=[stop_at_once])
                result = await agent.generate("hi")
                status = agent.status
        finally:
            await upstream.aclose()
    assert (result.stop, result.partial) == (StopReason.CANCELLED, True)
    assert result.content == "partial response"
    assert result.messages[-1].interrupted
    assert status is AgentStatus.DONE
    kinds = [event.kind for event in events]
    assert kinds[-2:] == ["abort", "finish"]
    assert "error" not in kinds
    abort = events[-2]
    assert abort.reason == "the user pressed stop"
    assert isinstance(abort.error, ProviderError)
    assert (abort.error.code, abort.error.message) == ("upstream", "relay: relay provider failed")
