"""The followers of one relay run take turns to read it (``_Turns``): however many follow it,
and whenever some of them leave, each one still reads every event once, in order, through the
terminal one -- and no more than the turns' width read at once."""

from __future__ import annotations

import functools
import math

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.relay import RelayLimits, RelayToken
from actors.relay._admission import _TokenState
from actors.relay._runs import _Run, _Turns, next_events
from protocols.live import RunEvent


@attrs.define
class Follower:
    #: Starts following after this many events were added, from seq ``after``.
    joins: int
    after: int
    #: Leaves (cancelled) after reading this many batches; ``None``: follows to the end.
    leaves: int | None
    #: Seconds it takes to "send" what it read (between reads).
    sends: float
    #: Cut (cancelled, wherever it is: in line for a turn too) this many seconds after it
    #: joined; ``None``: never.
    cut: float | None
    read: list[RunEvent] = attrs.Factory(list)
    done: bool = False
    was_cut: bool = False


class Counted(_Turns):
    """Turns that count how many were held at once, at most."""

    def __init__(self, width: int) -> None:
        super().__init__(width)
        self.widest = 0

    async def take(self, unread: bool) -> None:
        await super().take(unread)
        self.widest = max(self.widest, self._active)


def new_run(capacity: int) -> _Run:
    owner = _TokenState(RelayToken("secret-token-0123456789"))
    return _Run(
        "run_test",
        owner,
        RelayLimits(run_events=capacity),
        request_id="r1",
        cancel_on_disconnect=False,
    )


async def follow(run: _Run, follower: Follower) -> None:
    after = follower.after
    batches = 0
    with trio.move_on_after(math.inf if follower.cut is None else follower.cut) as cut:
        while follower.leaves is None or batches < follower.leaves:
            events = await next_events(run, after)
            if not events:
                break
            follower.read.extend(events)
            after = events[-1].seq
            batches += 1
            if events[-1].terminal:
                break
            await trio.sleep(follower.sends)
    follower.done = True
    follower.was_cut = cut.cancelled_caught


async def scenario(
    pauses: list[float], followers: list[Follower], capacity: int, width: int
) -> tuple[_Run, int]:
    run = new_run(capacity)
    turns = run.turns = Counted(width)
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            for number, pause in enumerate(pauses):
                for follower in followers:
                    if follower.joins == number:
                        nursery.start_soon(follow, run, follower)
                await trio.sleep(pause)
                run.add("content", f"w{number} ")
            for follower in followers:
                if follower.joins >= len(pauses):
                    nursery.start_soon(follow, run, follower)
            run.add("failed", {"message": "the end"})
    return run, turns.widest


FOLLOWERS = st.builds(
    Follower,
    joins=st.integers(0, 40),
    after=st.just(0),
    leaves=st.none() | st.integers(0, 6),
    sends=st.sampled_from([0.0, 0.001, 0.01, 0.5]),
    cut=st.none() | st.sampled_from([0.0, 0.0005, 0.003, 0.05, 1.0]),
)


@settings(max_examples=60, deadline=None)
@given(
    pauses=st.lists(st.sampled_from([0.0, 0.0005, 0.002, 0.1]), min_size=0, max_size=40),
    followers=st.lists(FOLLOWERS, min_size=1, max_size=40),
    capacity=st.sampled_from([8, 1000]),
    width=st.integers(1, 6),
)
def test_every_follower_reads_every_event_once_in_order_and_few_read_at_once(
    pauses: list[float], followers: list[Follower], capacity: int, width: int
) -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    run, widest = trio.run(
        functools.partial(scenario, pauses, followers, capacity, width), clock=clock
    )
    last = len(pauses) + 1
    assert run.last == last
    assert run.ended
    # Never more turns held than the width (and turns were held, if anyone read).
    assert widest <= width
    assert (widest >= 1) == any(follower.read for follower in followers)
    assert run.turns._active == 0  # every turn was given back (a follower that left, too)
    for follower in followers:
        assert follower.done
        seqs = [e.seq for e in follower.read]
        # Each event once, in order: a gap stands for the events the log no longer held.
        expected = 1
        for event in follower.read:
            if event.kind == "gap":
                assert event.data["first"] == expected
            else:
                assert event.seq == expected
            expected = event.seq + 1
        assert seqs == sorted(set(seqs))
        if follower.leaves is None and not follower.was_cut:
            assert follower.read[-1].kind == "failed"  # through the terminal event
            assert seqs[-1] == last
        if capacity >= last:
            assert all(e.kind != "gap" for e in follower.read)


async def test_a_follower_that_waits_in_line_and_leaves_gives_no_turn_away() -> None:
    run = new_run(100)
    run.turns = _Turns(1)
    run.add("content", "a")
    read: list[int] = []
    holding = trio.Event()
    release = trio.Event()

    async def hold() -> None:
        await run.turns.take(True)  # the one turn, held
        holding.set()
        await release.wait()
        run.turns.done()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold)
        await holding.wait()
        with trio.move_on_after(1) as waited:  # in line behind the holder, then leaves
            await next_events(run, 0)
        assert waited.cancelled_caught
        release.set()

        async def reader() -> None:
            read.extend(e.seq for e in await next_events(run, 0))

        nursery.start_soon(reader)
    assert read == [1]
    assert run.turns._active == 0
