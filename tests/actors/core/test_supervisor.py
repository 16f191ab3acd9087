"""Supervisors: strategies, restart types, intensity, backoff, shutdown deadlines, dynamic children.

Every test runs real actors under a real runtime; the small actors below record what happens to
them in a :class:`Journal`, and tests wait on journal entries (never on scheduling luck).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from actor_helpers import HANG, Boom, Journal, Recorder, Slow, crash, nested
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import (
    ActorExit,
    ActorRef,
    ActorState,
    ActorStopped,
    AutoShutdown,
    Backoff,
    ChildSpec,
    ExitKind,
    Restart,
    StartChild,
    Strategy,
    Supervisor,
    SupervisorGaveUp,
    TerminateChild,
    open_runtime,
)
from protocols.errors import ConfigError


class Timed(Recorder):
    """A recorder that notes the mock-clock time of each start and crash."""

    async def on_start(self) -> None:
        self.journal.add("started", self.label, trio.current_time())
        await super().on_start()

    async def handle(self, message: Any) -> Any:
        if message == "crash":
            self.journal.add("crashed", self.label, trio.current_time())
        return await super().handle(message)


class SlowStart(Recorder):
    """Takes ``delay`` seconds to start, recording when it begins and when it is ready."""

    def __init__(self, label: str, journal: Journal, delay: float) -> None:
        super().__init__(label, journal)
        self.delay = delay

    async def on_start(self) -> None:
        self.journal.add("begin", self.label)
        await trio.sleep(self.delay)
        self.journal.add("ready", self.label)


class StartFails(Recorder):
    async def on_start(self) -> None:
        self.journal.add("start", self.label)
        raise Boom(f"{self.label} cannot start")


class StuckInHandle(Recorder):
    """Never finishes handling a message."""

    async def handle(self, message: Any) -> Any:
        self.journal.add("handling", self.label)
        await trio.sleep_forever()


class StuckInOnStop(Recorder):
    """Never finishes stopping."""

    async def on_stop(self, exit: ActorExit) -> None:
        self.journal.add("stopping", self.label)
        await trio.sleep_forever()


def spec(journal: Journal, label: str, cls: type[Recorder] = Recorder, **kwargs: Any) -> ChildSpec:
    """A child spec named ``label`` building a fresh ``cls`` for every incarnation."""
    return ChildSpec(lambda: cls(label, journal), name=label, **kwargs)


async def instances(refs: Sequence[ActorRef[Any, Any]]) -> dict[str, int]:
    return {ref.name: await ref.call("instance") for ref in refs}


# --------------------------------------------------------------------------- strategies


@pytest.mark.parametrize(
    ("strategy", "expected", "restarted"),
    [
        pytest.param(
            Strategy.ONE_FOR_ONE,
            [("stop", "b"), ("start", "b")],
            {"b"},
            id="one_for_one",
        ),
        pytest.param(
            Strategy.ONE_FOR_ALL,
            [
                *[("stop", "b"), ("stop", "c"), ("stop", "a")],
                *[("start", "a"), ("start", "b"), ("start", "c")],
            ],
            {"a", "b", "c"},
            id="one_for_all",
        ),
        pytest.param(
            Strategy.REST_FOR_ONE,
            [("stop", "b"), ("stop", "c"), ("start", "b"), ("start", "c")],
            {"b", "c"},
            id="rest_for_one",
        ),
    ],
)
async def test_strategy_restarts_exactly_its_group_in_order(
    strategy: Strategy,
    expected: list[tuple[str, str]],
    restarted: set[str],
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [spec(journal, label) for label in "abc"]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            await runtime.start(ChildSpec(nested(children, holder, strategy=strategy), name="sup"))
            (supervisor,) = holder
            refs = supervisor.children()
            before = await instances(refs)
            mark = journal.mark()

            await crash(refs[1])
            await journal.wait_for(*expected[-1], count=2)
            await trio.testing.wait_all_tasks_blocked()

            assert journal.since(mark) == expected
            after = await instances(refs)
            assert {label for label in before if before[label] != after[label]} == restarted
            # The same refs, in the same order, reach the new incarnations.
            assert supervisor.children() == refs
            assert all(ref.state is ActorState.RUNNING for ref in refs)
            assert supervisor.statistics().child_restarts == 1
            assert len(holder) == 1  # the supervisor itself was not restarted


# --------------------------------------------------------------------------- restart types


async def test_permanent_child_restarts_after_failure_and_after_normal_exit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            ref = await runtime.spawn(lambda: Recorder("p", journal), name="p")
            first = await ref.call("instance")

            await crash(ref)
            await journal.wait_for("start", "p", count=2)
            second = await ref.call("instance")
            assert second != first

            assert await ref.call("stop") is None
            await journal.wait_for("start", "p", count=3)
            third = await ref.call("instance")
            assert third not in (first, second)

            assert ref.state is ActorState.RUNNING
            assert ref.statistics().restarts == 2
            assert runtime.statistics().child_restarts == 2
            assert runtime.statistics().children == ("p",)


async def test_transient_child_restarts_only_after_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            ref = await runtime.spawn(
                lambda: Recorder("t", journal), name="t", restart=Restart.TRANSIENT
            )
            first = await ref.call("instance")
            await crash(ref)
            assert await ref.call("instance") != first
            assert ref.statistics().restarts == 1

            assert await ref.call("stop") is None
            exit = await ref.wait_stopped()

            assert exit == ActorExit(ExitKind.NORMAL)
            assert ref.state is ActorState.STOPPED
            assert journal.count("start", "t") == 2
            assert runtime.statistics().children == ()
            with pytest.raises(ActorStopped):
                await ref.call("ping")


async def test_temporary_child_is_never_restarted(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            failing = await runtime.spawn(
                lambda: Recorder("f", journal), name="f", restart=Restart.TEMPORARY
            )
            ending = await runtime.spawn(
                lambda: Recorder("n", journal), name="n", restart=Restart.TEMPORARY
            )

            cause = await crash(failing)
            failed = await failing.wait_stopped()
            assert failed.kind is ExitKind.FAILED
            assert failed.error is cause

            await ending.call("stop")
            assert (await ending.wait_stopped()).kind is ExitKind.NORMAL

            assert failing.state is ActorState.STOPPED
            assert ending.state is ActorState.STOPPED
            assert journal.count("start", "f") == 1
            assert journal.count("start", "n") == 1
            assert runtime.statistics().children == ()
            assert runtime.statistics().child_restarts == 0
            with pytest.raises(ActorStopped):
                await failing.call("ping")


# --------------------------------------------------------------------------- intensity


async def test_too_many_restarts_within_the_period_make_the_supervisor_give_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [spec(journal, label) for label in "abc"]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(
                ChildSpec(nested(children, holder), name="sup", restart=Restart.TEMPORARY)
            )
            (supervisor,) = holder
            refs = supervisor.children()
            b = refs[1]
            for restart in range(1, 4):  # the default allows 3 restarts in 5 s
                await crash(b)
                await journal.wait_for("start", "b", count=restart + 1)
                assert sup_ref.state is ActorState.RUNNING

            mark = journal.mark()
            last = await crash(b)
            exit = await sup_ref.wait_stopped()

            assert exit.kind is ExitKind.FAILED
            assert isinstance(exit.error, SupervisorGaveUp)
            assert exit.error.last_failure is last
            assert exit.error.__cause__ is last
            # The failed child stopped first, then the others in reverse start order.
            assert journal.since(mark) == [("stop", "b"), ("stop", "c"), ("stop", "a")]
            assert all(ref.state is ActorState.STOPPED for ref in refs)
            assert runtime.statistics().children == ()


async def test_a_restart_that_fails_to_start_counts_as_another_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    built: list[Recorder] = []

    def first_works_then_fails() -> Recorder:
        actor = Recorder("w", journal) if not built else StartFails("w", journal)
        built.append(actor)
        return actor

    children = [ChildSpec(first_works_then_fails, name="w")]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(
                ChildSpec(nested(children, holder), name="sup", restart=Restart.TEMPORARY)
            )
            (ref,) = holder[0].children()
            await crash(ref)
            exit = await sup_ref.wait_stopped()

            # One crash and three failed restarts: the fourth restart exceeds the default 3.
            assert len(built) == 4
            assert journal.count("start", "w") == 4
            assert exit.kind is ExitKind.FAILED
            assert isinstance(exit.error, SupervisorGaveUp)
            assert isinstance(exit.error.last_failure, Boom)
            assert str(exit.error.last_failure) == "w cannot start"
            assert ref.state is ActorState.STOPPED


async def test_restarts_spread_beyond_the_period_do_not_trip_the_intensity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime(max_restarts=3, period=5) as runtime:
            ref = await runtime.spawn(lambda: Recorder("w", journal), name="w")
            for restart in range(1, 9):
                await trio.sleep(5.5)
                await crash(ref)
                await journal.wait_for("start", "w", count=restart + 1)

            assert ref.state is ActorState.RUNNING
            statistics = runtime.statistics()
            assert statistics.child_restarts == 8
            assert statistics.recent_restarts == 1
            assert ref.statistics().restarts == 8


async def test_nested_supervisor_gives_up_and_its_parent_restarts_it_fresh(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [spec(journal, label) for label in "ab"]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(
                ChildSpec(nested(children, holder, max_restarts=1), name="sup")
            )
            old = holder[0].children()
            old_instances = await instances(old)

            await crash(old[0])  # one restart is allowed
            await journal.wait_for("start", "a", count=2)
            await crash(old[0])  # the second one escalates
            await journal.wait_for("start", "b", count=2)
            await trio.testing.wait_all_tasks_blocked()

            assert len(holder) == 2
            assert holder[1] is not holder[0]
            assert all(ref.state is ActorState.STOPPED for ref in old)
            new = holder[1].children()
            assert [ref.name for ref in new] == ["a", "b"]
            assert not set(new) & set(old)
            new_instances = await instances(new)
            assert set(new_instances.values()).isdisjoint(old_instances.values())
            assert holder[1].statistics().child_restarts == 0
            # The parent restarted its child once, and the same ref reaches the new supervisor.
            assert runtime.statistics().child_restarts == 1
            assert runtime.statistics().children == ("sup",)
            assert sup_ref.state is ActorState.RUNNING
            assert sup_ref.statistics().restarts == 1


# --------------------------------------------------------------------------- backoff


async def _backoff_delays(backoff: Backoff, crashes: int, **kwargs: Any) -> list[float]:
    """Crash a child ``crashes`` times under ``backoff``; return each crash-to-restart delay."""
    journal = Journal()
    holder: list[Supervisor] = []
    child = spec(journal, "w", cls=Timed)
    factory = nested([child], holder, backoff=backoff, max_restarts=1000, period=0.01, **kwargs)
    async with open_runtime() as runtime:
        await runtime.start(ChildSpec(factory, name="sup"))
        (ref,) = holder[0].children()
        for restart in range(1, crashes + 1):
            await crash(ref)
            await journal.wait_for("start", "w", count=restart + 1)
    started = journal.times("started")
    crashed = journal.times("crashed")
    return [start - crash for crash, start in zip(crashed, started[1:], strict=True)]


async def test_backoff_delays_grow_exponentially_up_to_the_maximum(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backoff = Backoff(initial=1, maximum=8, factor=2, jitter=0)
    with trio.fail_after(HANG):
        delays = await _backoff_delays(backoff, 6)
    assert delays == pytest.approx([1, 2, 4, 8, 8, 8])


async def test_backoff_jitter_shortens_each_delay_within_bounds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backoff = Backoff(initial=1, maximum=8, factor=2, jitter=0.5)
    with trio.fail_after(HANG):
        delays = await _backoff_delays(backoff, 6, rng=random.Random(1))
    bases = [1, 2, 4, 8, 8, 8]
    for delay, base in zip(delays, bases, strict=True):
        assert (1 - backoff.jitter) * base - 1e-9 <= delay <= base + 1e-9
    # The seeded generator decides every delay.
    rng = random.Random(1)
    assert delays == pytest.approx([backoff.delay(attempt, rng) for attempt in range(6)])
    assert any(delay < base - 1e-6 for delay, base in zip(delays, bases, strict=True))


async def test_backoff_count_resets_after_a_long_enough_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    backoff = Backoff(initial=1, maximum=8, factor=2, jitter=0, reset_after=10)
    with trio.fail_after(HANG):
        async with open_runtime(backoff=backoff, max_restarts=1000, period=0.01) as runtime:
            ref = await runtime.spawn(lambda: Timed("w", journal), name="w")
            await crash(ref)
            await crash(ref)
            await crash(ref)
            await journal.wait_for("start", "w", count=4)
            await trio.sleep(10)  # a quiet run of reset_after seconds
            await crash(ref)
            await crash(ref)
            await journal.wait_for("start", "w", count=6)
    started = journal.times("started")
    crashed = journal.times("crashed")
    delays = [start - crash for crash, start in zip(crashed, started[1:], strict=True)]
    assert delays == pytest.approx([1, 2, 4, 1, 2])


def test_backoff_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError):
        Backoff(initial=0)
    with pytest.raises(ConfigError):
        Backoff(jitter=1.5)
    with pytest.raises(ConfigError):
        ChildSpec(Recorder, shutdown=-1)
    with pytest.raises(ConfigError):
        Supervisor(max_restarts=-1)
    with pytest.raises(ConfigError):
        Supervisor(period=0)


# --------------------------------------------------------------------------- shutdown deadline


async def test_on_stop_blocking_forever_is_killed_at_the_shutdown_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    # trio runs ready tasks in a random order: repeat, so an outcome that depends on that order
    # cannot pass by luck.
    outcomes: list[tuple[float, ExitKind, bool]] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            for attempt in range(16):
                label = f"stuck-{attempt}"
                ref = await runtime.spawn(
                    lambda label=label: StuckInOnStop(label, journal), name=label, shutdown=2
                )
                began = trio.current_time()
                exit = await ref.stop()
                outcomes.append((trio.current_time() - began, exit.kind, exit.killed))
                assert journal.count("stopping", label) == 1
                assert ref.state is ActorState.STOPPED
    assert outcomes == [(pytest.approx(2), ExitKind.SHUTDOWN, True)] * 16


@pytest.mark.parametrize("shutdown", [2, 0])
async def test_handler_blocking_forever_is_killed_at_the_shutdown_deadline(
    shutdown: float, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()

    async def caller(ref: ActorRef[Any, Any]) -> None:
        with pytest.raises(ActorStopped):
            await ref.call("work")
        journal.add("caller refused")

    with trio.fail_after(HANG):
        async with open_runtime() as runtime, trio.open_nursery() as nursery:
            ref = await runtime.spawn(
                lambda: StuckInHandle("s", journal), name="s", shutdown=shutdown
            )
            nursery.start_soon(caller, ref)
            await journal.wait_for("handling", "s")
            began = trio.current_time()
            exit = await ref.stop()

            assert trio.current_time() - began == pytest.approx(shutdown)
            assert exit == ActorExit(ExitKind.SHUTDOWN, killed=True)
            assert ref.state is ActorState.STOPPED
            await journal.wait_for("caller refused")
            assert ("stop", "s") not in journal.entries  # no on_stop after a hard kill


async def test_graceful_stop_handles_queued_messages_then_runs_on_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            ref = await runtime.spawn(lambda: Slow("s", journal), name="s", shutdown=10)
            for message in (1, 2, 3):
                await ref.send(message)
            began = trio.current_time()
            exit = await ref.stop()

            # three messages of one second each, then a one-second on_stop: all inside 10 s
            assert trio.current_time() - began == pytest.approx(4)
            assert exit == ActorExit(ExitKind.SHUTDOWN, killed=False)
            handled = [entry for entry in journal.entries if entry[0] != "start"]
            assert handled == [
                ("handled", "s", 1),
                ("handled", "s", 2),
                ("handled", "s", 3),
                ("stop", "s"),
            ]
            assert ref.statistics().handled == 3
            with pytest.raises(ActorStopped):
                await ref.send(4)


class SlowOnStop(Recorder):
    """Takes seven seconds to stop."""

    async def on_stop(self, exit: ActorExit) -> None:
        await trio.sleep(7)
        await super().on_stop(exit)


@pytest.mark.parametrize("built_by", ["subclass", "lambda"])
async def test_a_supervisor_child_waits_for_its_own_children_to_stop_by_default(
    built_by: str, autojump_clock: trio.testing.MockClock
) -> None:
    # ChildSpec.shutdown=None means "forever for supervisors": a supervisor must not be killed
    # at the 5 s worker default while its children are still stopping within their own deadline,
    # however its factory is written.
    journal = Journal()
    children = [spec(journal, "s", cls=SlowOnStop, shutdown=10)]

    class Team(Supervisor):
        def __init__(self) -> None:
            super().__init__(children)

    factory: Callable[[], Supervisor] = (
        Team if built_by == "subclass" else lambda: Supervisor(children)
    )
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            team = await runtime.start(ChildSpec(factory, name="team"))
            began = trio.current_time()
            exit = await team.stop()
            assert trio.current_time() - began == pytest.approx(7)
            assert exit == ActorExit(ExitKind.SHUTDOWN, killed=False)
            assert ("stop", "s") in journal.entries


# --------------------------------------------------------------------------- ordered start


async def test_children_start_in_order_each_ready_before_the_next_begins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    # The first child is the slowest: if starts overlapped, the later ones would be ready first.
    children = [
        ChildSpec(lambda label=label, delay=delay: SlowStart(label, journal, delay), name=label)
        for label, delay in (("a", 3), ("b", 2), ("c", 1))
    ]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            began = trio.current_time()
            sup_ref = await runtime.start(ChildSpec(nested(children, holder), name="sup"))
            assert trio.current_time() - began == pytest.approx(6)
            assert sup_ref.state is ActorState.RUNNING
            assert journal.entries == [
                ("begin", "a"),
                ("ready", "a"),
                ("begin", "b"),
                ("ready", "b"),
                ("begin", "c"),
                ("ready", "c"),
            ]
            assert [ref.name for ref in holder[0].children()] == ["a", "b", "c"]


async def test_child_failing_to_start_fails_the_supervisor_start_with_its_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [spec(journal, "a"), spec(journal, "b", cls=StartFails), spec(journal, "c")]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            with pytest.raises(Boom, match="b cannot start"):
                await runtime.start(ChildSpec(nested(children, holder), name="sup"))
            assert ("start", "c") not in journal.entries
            assert runtime.statistics().children == ()
            assert runtime.statistics().child_restarts == 0


async def test_dynamic_child_failing_to_start_raises_its_error_and_is_not_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            await runtime.start(ChildSpec(nested([spec(journal, "a")], holder), name="sup"))
            (supervisor,) = holder
            (a,) = supervisor.children()
            with pytest.raises(Boom, match="x cannot start"):
                await supervisor.start_child(spec(journal, "x", cls=StartFails))
            assert supervisor.children() == [a]
            assert supervisor.statistics().child_restarts == 0
            assert await a.call("ping") == "ping"


# --------------------------------------------------------------------------- dynamic children


async def test_start_and_terminate_children_through_supervisor_methods(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            await runtime.start(ChildSpec(nested([spec(journal, "a")], holder), name="sup"))
            (supervisor,) = holder
            (a,) = supervisor.children()
            b = await supervisor.start_child(spec(journal, "b"))
            c = await supervisor.start_child(spec(journal, "c"))
            assert supervisor.children() == [a, b, c]
            assert await b.call("ping") == "ping"

            exit = await supervisor.terminate_child("b")
            assert exit == ActorExit(ExitKind.SHUTDOWN)
            assert ("stop", "b") in journal.entries
            assert b.state is ActorState.STOPPED
            with pytest.raises(ActorStopped):
                await b.call("ping")

            assert await supervisor.terminate_child(c) == ActorExit(ExitKind.SHUTDOWN)
            assert supervisor.children() == [a]
            assert supervisor.statistics().children == ("a",)
            # Unknown or already stopped children are not an error.
            assert await supervisor.terminate_child("nobody") == ActorExit(ExitKind.SHUTDOWN)
            assert await supervisor.terminate_child(b) == ActorExit(ExitKind.SHUTDOWN)
            assert supervisor.statistics().child_restarts == 0


async def test_start_and_terminate_children_through_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(ChildSpec(nested([], holder), name="sup"))
            b = await sup_ref.call(StartChild(spec(journal, "b")))
            assert isinstance(b, ActorRef)
            assert b.name == "b"
            assert await b.call("ping") == "ping"
            assert holder[0].children() == [b]

            exit = await sup_ref.call(TerminateChild("b"))
            assert exit == ActorExit(ExitKind.SHUTDOWN)
            assert b.state is ActorState.STOPPED
            assert journal.entries == [("start", "b"), ("stop", "b")]
            assert holder[0].children() == []
            assert len(holder) == 1


async def test_duplicate_child_names_are_refused(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            await runtime.start(ChildSpec(nested([spec(journal, "a")], holder), name="sup"))
            (supervisor,) = holder
            (a,) = supervisor.children()
            first = await a.call("instance")
            with pytest.raises(ConfigError):
                await supervisor.start_child(spec(journal, "a"))
            assert supervisor.children() == [a]
            assert await a.call("instance") == first

            await runtime.spawn(lambda: Recorder("r", journal), name="r")
            with pytest.raises(ConfigError):
                await runtime.spawn(lambda: Recorder("r", journal), name="r")
            assert runtime.statistics().children == ("sup", "r")
            assert journal.count("start", "a") == 1


async def test_duplicate_name_sent_as_a_message_is_refused_without_crashing_the_supervisor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(
                ChildSpec(nested([spec(journal, "a")], holder), name="sup")
            )
            (a,) = holder[0].children()
            b = await sup_ref.call(StartChild(spec(journal, "b")))
            with pytest.raises(ConfigError):
                await sup_ref.call(StartChild(spec(journal, "b")))
            await trio.testing.wait_all_tasks_blocked()

            # A refused request must not take the subtree down.
            assert len(holder) == 1
            assert holder[0].children() == [a, b]
            assert b.state is ActorState.RUNNING
            assert await b.call("ping") == "ping"
            assert journal.count("start", "a") == 1


async def test_children_keep_their_start_order_across_restarts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            await runtime.start(
                ChildSpec(nested([spec(journal, "a"), spec(journal, "b")], holder), name="sup")
            )
            (supervisor,) = holder
            c = await supervisor.start_child(spec(journal, "c"))
            a = supervisor.children()[0]
            await crash(a)
            await journal.wait_for("start", "a", count=2)
            assert [ref.name for ref in supervisor.children()] == ["a", "b", "c"]
            assert supervisor.children()[2] == c
            assert supervisor.statistics().children == ("a", "b", "c")


# --------------------------------------------------------------------------- auto shutdown


async def test_any_significant_stops_the_supervisor_when_one_significant_child_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [
        spec(journal, "x", restart=Restart.TRANSIENT, significant=True),
        spec(journal, "y", restart=Restart.TRANSIENT, significant=True),
        spec(journal, "z"),
    ]
    factory = nested(children, holder, auto_shutdown=AutoShutdown.ANY_SIGNIFICANT)
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(ChildSpec(factory, name="sup", restart=Restart.TRANSIENT))
            x, y, z = holder[0].children()
            # A failure is restarted, so it does not count as ending.
            await crash(x)
            await journal.wait_for("start", "x", count=2)
            assert sup_ref.state is ActorState.RUNNING

            await x.call("stop")
            exit = await sup_ref.wait_stopped()

            assert exit.kind is ExitKind.SHUTDOWN
            assert (await x.wait_stopped()).kind is ExitKind.NORMAL
            assert y.state is ActorState.STOPPED
            assert z.state is ActorState.STOPPED
            assert runtime.statistics().children == ()
            assert len(holder) == 1


async def test_all_significant_waits_for_every_significant_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [
        spec(journal, "x", restart=Restart.TRANSIENT, significant=True),
        spec(journal, "y", restart=Restart.TRANSIENT, significant=True),
        spec(journal, "z"),
    ]
    factory = nested(children, holder, auto_shutdown=AutoShutdown.ALL_SIGNIFICANT)
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(ChildSpec(factory, name="sup", restart=Restart.TRANSIENT))
            x, y, z = holder[0].children()
            await x.call("stop")
            await x.wait_stopped()
            await trio.testing.wait_all_tasks_blocked()
            assert sup_ref.state is ActorState.RUNNING
            assert holder[0].children() == [y, z]

            await y.call("stop")
            assert (await sup_ref.wait_stopped()).kind is ExitKind.SHUTDOWN
            assert z.state is ActorState.STOPPED
            assert runtime.statistics().children == ()


async def test_without_auto_shutdown_significant_children_ending_change_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [spec(journal, "x", restart=Restart.TRANSIENT, significant=True)]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            sup_ref = await runtime.start(ChildSpec(nested(children, holder), name="sup"))
            (x,) = holder[0].children()
            await x.call("stop")
            await x.wait_stopped()
            await trio.testing.wait_all_tasks_blocked()
            assert sup_ref.state is ActorState.RUNNING
            assert holder[0].children() == []


# --------------------------------------------------------------------------- statistics


async def test_supervisor_and_actor_statistics(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    children = [spec(journal, "a"), spec(journal, "b")]
    factory = nested(children, holder, strategy=Strategy.REST_FOR_ONE, period=5)
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            await runtime.start(ChildSpec(factory, name="sup"))
            (supervisor,) = holder
            a, b = supervisor.children()
            for message in range(3):
                assert await a.call(message) == message
            await crash(a)  # restarts a and b
            await journal.wait_for("start", "b", count=2)
            await crash(b)
            await journal.wait_for("start", "b", count=3)
            await b.call("ping")

            statistics = supervisor.statistics()
            assert statistics.name == "sup"
            assert statistics.strategy is Strategy.REST_FOR_ONE
            assert statistics.children == ("a", "b")
            assert statistics.child_restarts == 2
            assert statistics.restarts == 0  # the supervisor itself never restarted
            assert statistics.recent_restarts == 2

            a_statistics = a.statistics()
            assert a_statistics.name == "a"
            assert a_statistics.state is ActorState.RUNNING
            assert a_statistics.restarts == 1
            assert a_statistics.handled == 4  # three echoes and the crash, over two incarnations
            assert a_statistics.mailbox_depth == 0
            assert a_statistics.mailbox_size == Recorder.mailbox_size
            assert b.statistics().restarts == 2
            assert b.statistics().handled == 2

            await trio.sleep(5)
            assert supervisor.statistics().recent_restarts == 0
            assert supervisor.statistics().child_restarts == 2


# --------------------------------------------------------------------------- properties

NAMES = ("a", "b", "c")

operation = st.one_of(
    st.tuples(st.just("spawn"), st.sampled_from(NAMES), st.sampled_from(list(Restart))),
    st.tuples(
        st.sampled_from(["call", "crash", "stop", "terminate"]),
        st.sampled_from(NAMES),
        st.just(None),
    ),
)


class _Model:
    """What the runtime should look like: live children in start order, and every ref made."""

    def __init__(self, max_restarts: int) -> None:
        self.max_restarts = max_restarts
        self.alive: dict[str, Restart] = {}
        self.latest: dict[str, ActorRef[Any, Any]] = {}
        self.refs: list[ActorRef[Any, Any]] = []
        self.restarts = 0
        self.gives_up = False

    def ended(self, name: str, *, failed: bool) -> None:
        restart = self.alive[name]
        if restart is Restart.PERMANENT or (restart is Restart.TRANSIENT and failed):
            self.restarts += 1
            self.gives_up = self.restarts > self.max_restarts
        else:
            del self.alive[name]

    def check(self, statistics_children: tuple[str, ...]) -> None:
        assert statistics_children == tuple(self.alive)
        for ref in self.refs:
            assert ref.state in set(ActorState)
            current = self.latest[ref.name] == ref and ref.name in self.alive
            expected = ActorState.RUNNING if current else ActorState.STOPPED
            assert ref.state is expected, (ref, expected)


async def _apply(model: _Model, runtime: Any, op: tuple[str, str, Restart | None]) -> None:
    kind, name, restart = op
    journal = Journal()
    if kind == "spawn":
        assert restart is not None
        if name in model.alive:
            with pytest.raises(ConfigError):
                await runtime.spawn(lambda: Recorder(name, journal), name=name, restart=restart)
            return
        ref = await runtime.spawn(lambda: Recorder(name, journal), name=name, restart=restart)
        model.alive[name] = restart
        model.latest[name] = ref
        model.refs.append(ref)
        return
    ref = model.latest.get(name)
    if ref is None:
        return
    alive = name in model.alive
    if kind == "call":
        if alive:
            assert await ref.call("ping") == "ping"
        else:
            with pytest.raises(ActorStopped):
                await ref.call("ping")
    elif kind == "crash":
        with pytest.raises(ActorStopped):
            await ref.call("crash")
        if alive:
            model.ended(name, failed=True)
    elif kind == "stop":
        if alive:
            assert await ref.call("stop") is None
            model.ended(name, failed=False)
        else:
            with pytest.raises(ActorStopped):
                await ref.call("stop")
    else:
        exit = await ref.stop()
        assert isinstance(exit, ActorExit)
        if alive:
            assert exit == ActorExit(ExitKind.SHUTDOWN)
            del model.alive[name]


async def _exercise(operations: list[tuple[str, str, Restart | None]], max_restarts: int) -> _Model:
    model = _Model(max_restarts)
    gave_up: SupervisorGaveUp | None = None
    with trio.fail_after(HANG):
        try:
            async with open_runtime(max_restarts=max_restarts) as runtime:
                for op in operations:
                    await _apply(model, runtime, op)
                    # Let restarts and removals finish (nothing here sleeps, so no time passes).
                    await trio.testing.wait_all_tasks_blocked()
                    assert not model.gives_up, "the root should have given up by now"
                    model.check(runtime.statistics().children)
        except SupervisorGaveUp as error:
            gave_up = error
        assert (gave_up is not None) == model.gives_up
        for ref in model.refs:
            assert ref.state is ActorState.STOPPED
            with pytest.raises(ActorStopped):
                await ref.call("ping")
    return model


@settings(max_examples=40, deadline=None)
@given(operations=st.lists(operation, max_size=20), max_restarts=st.integers(1, 6))
def test_random_operations_keep_the_tree_consistent(
    operations: list[tuple[str, str, Restart | None]], max_restarts: int
) -> None:
    model = trio.run(
        _exercise,
        operations,
        max_restarts,
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    spawned = {op[1] for op in operations if op[0] == "spawn"}
    names = {ref.name for ref in model.refs}
    # Every spawn ran, unless the root gave up first (the runtime block then ended early).
    assert names <= spawned
    assert names == spawned or model.gives_up
    assert all(ref.state is ActorState.STOPPED for ref in model.refs)
