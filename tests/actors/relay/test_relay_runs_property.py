"""Issue 25, section 4, over the relay's Server-Sent Events route: followers of a live run on
``GET /v1/runs/{id}/events`` that drop their connection anywhere -- between two events, or in
the middle of one event's record -- and come back with ``Last-Event-ID`` set to the seq of the
last event they read whole, each read every event of the run exactly once, in order, the
terminal one last and once.

Real parts only: ``RelayServer`` on hypercorn on loopback port 0, httpx reading the raw bytes
of the event stream (a cut is the connection closed after a drawn number of bytes, whatever
they end in), :class:`~protocols.sse.SSEDecoder` on each connection's bytes. The upstream is
:class:`Ticking`: its run goes on while its followers read, cut and come back. Each example
runs on its own trio mock clock (autojump): no real sleeps.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from typing import Any

import httpx
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_relay import TOKEN, running, server

from actors.providers import ProviderStream, StreamingProvider
from actors.relay import RelayLimits
from protocols.live import RunEvent, event_from_json
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
    Usage,
)
from protocols.relay import RUN_ID_HEADER
from protocols.sse import SSEDecoder, SSEEvent

AUTH = {"authorization": f"Bearer {TOKEN}"}

# -- an upstream whose run goes on while it is followed -----------------------------------------


class Ticking(StreamingProvider):
    """Streams ``count`` content deltas (``w<i> ``), the next one on each :meth:`tick` (what
    its followers do as they read and reconnect), or after ``pace`` seconds without one: the
    run is live all the while its followers cut and come back."""

    name = "ticking"

    def __init__(self, count: int, pace: float = 0.01) -> None:
        self.count = count
        self.pace = pace
        self._send, self._ticks = trio.open_memory_channel[None](math.inf)

    def tick(self) -> None:
        self._send.send_nowait(None)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        return _TickingStream(self)


class _TickingStream(ProviderStream):
    def __init__(self, provider: Ticking) -> None:
        self._provider = provider
        self._sent = 0
        self._result: ProviderResult | None = None

    async def __anext__(self) -> Delta:
        provider = self._provider
        if self._sent >= provider.count:
            self._result = ProviderResult(
                content=expected(provider.count), usage=Usage(3, 4), finish=FinishReason.STOP
            )
            raise StopAsyncIteration
        with trio.move_on_after(provider.pace):
            await provider._ticks.receive()
        self._sent += 1
        return Delta("content", f"w{self._sent - 1} ")

    @property
    def result(self) -> ProviderResult:
        assert self._result is not None
        return self._result

    @property
    def partial(self) -> ProviderResult:
        return ProviderResult(
            content=expected(self._sent), finish=FinishReason.CANCELLED, usage=Usage(3, 4)
        )

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def expected(count: int) -> str:
    return "".join(f"w{i} " for i in range(count))


# -- followers that cut -------------------------------------------------------------------------

#: How one connection of a follower ends: after this many bytes of the body (wherever they end:
#: mostly inside a record), or right after this many whole events (between two records).
#: ``None``: read to the end.
Cut = tuple[str, int]

CUTS: st.SearchStrategy[Cut] = st.one_of(
    st.tuples(st.just("bytes"), st.integers(0, 700)),
    st.tuples(st.just("events"), st.integers(0, 6)),
)


class Follower:
    """One client of the run's event stream: what it read (events it read whole), how many of
    its cuts fell inside a record, and how many connections it made."""

    def __init__(self, cuts: Sequence[Cut]) -> None:
        self.cuts = list(cuts)
        self.events: list[RunEvent] = []
        self.mid_record = 0
        self.connections = 0

    @property
    def last(self) -> int:
        return self.events[-1].seq if self.events else 0

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1].terminal

    async def follow(self, client: httpx.AsyncClient, url: str, run_id: str, up: Ticking) -> None:
        while not self.done:
            cut = self.cuts.pop(0) if self.cuts else None
            await self._connect(client, url, run_id, up, cut)

    async def _connect(
        self,
        client: httpx.AsyncClient,
        url: str,
        run_id: str,
        up: Ticking,
        cut: Cut | None,
    ) -> None:
        self.connections += 1
        up.tick()
        # Coming back: after the last event read whole (its seq, as an EventSource sends it);
        # the first connection sends none.
        headers = dict(AUTH)
        if self.connections > 1:
            headers["last-event-id"] = str(self.last)
        decoder = SSEDecoder()
        budget = cut[1] if cut is not None and cut[0] == "bytes" else math.inf
        whole = cut[1] if cut is not None and cut[0] == "events" else math.inf
        read = taken = 0
        async with client.stream(
            "GET", f"{url}/v1/runs/{run_id}/events", headers=headers
        ) as response:
            assert response.status_code == 200, response.status_code
            assert response.headers[RUN_ID_HEADER] == run_id
            if budget == 0 or whole == 0:
                return  # cut before a byte of the body
            async for chunk in response.aiter_raw():
                up.tick()
                part = chunk[: max(0, int(budget - read))] if read + len(chunk) > budget else chunk
                read += len(part)
                for item in decoder.feed(part):
                    if isinstance(item, SSEEvent):
                        self._take(item, run_id)
                        taken += 1
                        if taken >= whole:
                            return  # cut between two records
                if read >= budget:
                    # Cut here: whatever the decoder holds of a record not yet ended is lost,
                    # as it is for a client whose connection drops.
                    if inside_a_record(part):
                        self.mid_record += 1
                    return
        assert self.done, "the stream ended before the terminal event"

    def _take(self, item: SSEEvent, run_id: str) -> None:
        event = event_from_json(json.loads(item.data))
        assert item.id == str(event.seq)
        assert item.event == event.kind
        assert event.run_id == run_id
        assert not self.done, "an event after the terminal one"
        self.events.append(event)


def inside_a_record(part: bytes) -> bool:
    """Whether a cut after ``part`` falls inside a record (not right after its blank line)."""
    return bool(part) and not part.endswith((b"\n\n", b"\r\n\r\n", b"\r\r"))


def contents(events: Sequence[RunEvent]) -> list[tuple[int, str, Any]]:
    return [(e.seq, e.kind, e.data) for e in events]


async def scenario(count: int, plans: list[list[Cut]]) -> list[Follower]:
    up = Ticking(count)
    # Cut connections linger as watchers until the server hears they went: room for all.
    app = server(up, limits=RelayLimits(max_watchers=1_000))
    body = {
        "messages": [{"role": "user", "content": "go"}],
        "version": 3,
        "cancel_on_disconnect": False,
    }
    followers = [Follower(plan) for plan in plans]
    reference = Follower([])  # never cuts
    async with running(app) as url, httpx.AsyncClient(timeout=600) as client:
        # The run's own client leaves as soon as it knows the run: the run goes on.
        async with client.stream("POST", f"{url}/v1/stream", json=body, headers=AUTH) as r:
            run_id = r.headers[RUN_ID_HEADER]
        async with trio.open_nursery() as nursery:
            for follower in (reference, *followers):
                nursery.start_soon(follower.follow, client, url, run_id, up)
    return [reference, *followers]


# -- the property -------------------------------------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    count=st.integers(1, 60),
    plans=st.lists(st.lists(CUTS, max_size=8), min_size=1, max_size=4),
)
def test_sse_followers_that_cut_anywhere_and_resume_read_every_event_once(
    count: int, plans: list[list[Cut]]
) -> None:
    clock = trio.testing.MockClock(autojump_threshold=0.05)
    reference, *followers = trio.run(functools.partial(scenario, count, plans), clock=clock)
    events = reference.events
    # The run: its deltas, in order, then usage and one terminal event.
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert "".join(e.data["text"] for e in events if e.kind == "content") == expected(count)
    assert [e.terminal for e in events].count(True) == 1
    assert events[-1].kind == "finished"
    assert events[-1].data["response"]["content"] == expected(count)
    for follower, plan in zip(followers, plans, strict=True):
        # Every event once, in order, the terminal one last: whatever the cuts.
        assert contents(follower.events) == contents(events)
        assert follower.connections >= 1
        assert follower.connections <= len(plan) + 1


def test_a_cut_in_the_middle_of_a_record_resumes_after_the_last_whole_event() -> None:
    """One follower whose connections are cut after a few bytes, again and again, mostly inside
    a record: it still reads each event exactly once."""

    async def main() -> tuple[Follower, Follower]:
        cuts: list[Cut] = [("bytes", n) for n in (1, 5, 40, 200, 1, 333, 7, 150, 2, 90) * 3]
        reference, follower = await scenario(25, [cuts])
        return reference, follower

    clock = trio.testing.MockClock(autojump_threshold=0.05)
    reference, follower = trio.run(main, clock=clock)
    assert contents(follower.events) == contents(reference.events)
    assert follower.mid_record > 0  # some cuts did fall inside a record
    assert follower.connections > 1
