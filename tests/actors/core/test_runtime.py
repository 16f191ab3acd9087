"""The runtime root: ``open_runtime`` lifetime, shutdown, error propagation, registry, isolation.

Real actors under a real runtime; the small actors below record what happens to them in a
:class:`Journal`, and tests wait on journal entries (never on scheduling luck).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from actor_helpers import HANG, Boom, Journal, Recorder, Slow, crash, nested

from actors import (
    ActorExit,
    ActorRef,
    ActorState,
    ActorStopped,
    ChildSpec,
    ExitKind,
    Restart,
    Strategy,
    Supervisor,
    SupervisorGaveUp,
    open_runtime,
)
from protocols.errors import ConfigError


class StartFails(Recorder):
    async def on_start(self) -> None:
        raise Boom(f"{self.label} cannot start")


class Busy(Recorder):
    """Runs a background task for its whole life; "fail" makes that task raise."""

    live = 0  # background tasks running right now, over all instances

    def __init__(self, label: str, journal: Journal) -> None:
        super().__init__(label, journal)
        self._fail = trio.Event()

    async def on_start(self) -> None:
        await super().on_start()
        self.nursery.start_soon(self._background)

    async def _background(self) -> None:
        Busy.live += 1
        try:
            await self._fail.wait()
            raise Boom(f"{self.label} background")
        finally:
            Busy.live -= 1

    async def handle(self, message: Any) -> Any:
        if message == "fail":
            self._fail.set()
            return None
        return await super().handle(message)

    async def on_stop(self, exit: ActorExit) -> None:
        self.journal.add("exit", self.label, exit)
        await super().on_stop(exit)


def make(journal: Journal, label: str, cls: type[Recorder] = Recorder) -> Callable[[], Recorder]:
    return lambda: cls(label, journal)


def count_tasks() -> int:
    """Every task in this trio run, found by walking the task tree from the root."""

    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(
            walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks
        )

    return walk(trio.lowlevel.current_root_task())


# --------------------------------------------------------------------------- lifetime


async def test_spawn_returns_a_ready_working_ref(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            ref = await runtime.spawn(make(journal, "a"), name="a")
            assert journal.entries == [("start", "a")]  # on_start ran before spawn returned
            assert ref.name == "a"
            assert ref.state is ActorState.RUNNING
            assert await ref.call("hello") == "hello"
            await ref.send("cast")
            assert ref == runtime.root.children()[0]
            assert runtime.statistics().children == ("a",)

            unnamed = await runtime.spawn(make(journal, "b"))
            assert unnamed.name != ref.name
            assert await unnamed.call(1) == 1
        assert ref.state is ActorState.STOPPED
        assert unnamed.state is ActorState.STOPPED


async def test_runtime_statistics_describe_the_root(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            ref = await runtime.spawn(make(journal, "a"), name="a")
            await crash(ref)
            await journal.wait_for("start", "a", count=2)

            statistics = runtime.statistics()
            assert statistics.name == "root"
            assert statistics.strategy is Strategy.ONE_FOR_ONE
            assert statistics.children == ("a",)
            assert statistics.child_restarts == 1
            assert statistics.recent_restarts == 1
            own = runtime.statistics()
            assert own.name == "root"
            assert own.state is ActorState.RUNNING
            assert own.restarts == 0
            assert own.mailbox_size == Supervisor.mailbox_size


async def test_leaving_the_block_stops_every_actor_gracefully_in_reverse_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    inner = [ChildSpec(make(journal, label), name=label) for label in ("x", "y")]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            a = await runtime.spawn(make(journal, "a"), name="a")
            sup = await runtime.start(ChildSpec(nested(inner, holder), name="sup"))
            b = await runtime.spawn(make(journal, "b"), name="b")
            refs = [a, sup, b, *holder[0].children()]
            journal.entries.clear()
    assert journal.entries == [("stop", "b"), ("stop", "y"), ("stop", "x"), ("stop", "a")]
    assert all(ref.state is ActorState.STOPPED for ref in refs)
    assert (await a.wait_stopped()).kind is ExitKind.SHUTDOWN


async def test_leaving_the_block_lets_actors_finish_queued_work_before_their_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            ref = await runtime.spawn(make(journal, "s", Slow), name="s", shutdown=10)
            for message in (1, 2, 3):
                await ref.send(message)
            began = trio.current_time()
        # three one-second messages and a one-second on_stop, well inside the 10 s deadline
        assert trio.current_time() - began == pytest.approx(4)
    assert journal.of("handled") == [("handled", "s", 1), ("handled", "s", 2), ("handled", "s", 3)]
    assert journal.entries[-1] == ("stop", "s")
    exit = await ref.wait_stopped()
    assert exit == ActorExit(ExitKind.SHUTDOWN, killed=False)


async def test_no_task_outlives_the_runtime(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    before = count_tasks()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            for label in "abc":
                await runtime.spawn(make(journal, label, Busy), name=label)
            await runtime.start(
                ChildSpec(nested([ChildSpec(make(journal, "n", Busy), name="n")], holder))
            )
            assert Busy.live == 4
            # root, three workers and their background tasks, a supervisor, its worker and its
            # background task
            assert count_tasks() >= before + 10
    assert count_tasks() == before
    assert Busy.live == 0


# --------------------------------------------------------------------------- errors


async def test_root_giving_up_raises_supervisor_gave_up_chained_to_the_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    causes: list[BaseException] = []
    refs: list[ActorRef[Any, Any]] = []

    async def run() -> None:
        async with open_runtime(max_restarts=0) as runtime:
            refs.append(await runtime.spawn(make(journal, "a"), name="a"))
            refs.append(await runtime.spawn(make(journal, "b"), name="b"))
            refs.append(await runtime.spawn(make(journal, "c"), name="c"))
            causes.append(await crash(refs[1]))
            await trio.sleep_forever()  # the root giving up cancels the block
            journal.add("unreachable")

    with trio.fail_after(HANG), pytest.raises(SupervisorGaveUp) as gave_up:
        await run()
    (cause,) = causes
    assert type(gave_up.value) is SupervisorGaveUp
    assert gave_up.value.__cause__ is cause
    assert gave_up.value.last_failure is cause
    assert "unreachable" not in [entry[0] for entry in journal.entries]
    # The failed child stopped, then the others in reverse start order.
    assert journal.of("stop") == [("stop", "b"), ("stop", "c"), ("stop", "a")]
    assert all(ref.state is ActorState.STOPPED for ref in refs)


async def test_an_exception_from_the_block_propagates_as_itself_after_an_ordered_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    refs: list[ActorRef[Any, Any]] = []

    async def run() -> None:
        async with open_runtime() as runtime:
            for label in "abc":
                refs.append(await runtime.spawn(make(journal, label), name=label))
            raise Boom("from the block")

    with trio.fail_after(HANG), pytest.raises(Boom, match="from the block") as raised:
        await run()
    assert type(raised.value) is Boom
    assert all(ref.state is ActorState.STOPPED for ref in refs)
    assert journal.of("stop") == [("stop", "c"), ("stop", "b"), ("stop", "a")]


async def test_keyboard_interrupt_in_the_block_passes_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    refs: list[ActorRef[Any, Any]] = []

    async def run() -> None:
        async with open_runtime() as runtime:
            for label in "ab":
                refs.append(await runtime.spawn(make(journal, label), name=label))
            raise KeyboardInterrupt

    with trio.fail_after(HANG), pytest.raises(KeyboardInterrupt) as raised:
        await run()
    assert type(raised.value) is KeyboardInterrupt
    assert all(ref.state is ActorState.STOPPED for ref in refs)


async def test_an_outer_cancellation_propagates_and_the_actors_are_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    refs: list[ActorRef[Any, Any]] = []
    with trio.fail_after(HANG):
        with trio.move_on_after(5) as outer:
            async with open_runtime() as runtime:
                for label in "ab":
                    refs.append(await runtime.spawn(make(journal, label), name=label))
                await trio.sleep_forever()
            journal.add("unreachable")
        assert outer.cancelled_caught
        assert trio.current_time() == pytest.approx(5)
    assert ("unreachable",) not in journal.entries
    assert all(ref.state is ActorState.STOPPED for ref in refs)
    assert journal.of("stop") == [("stop", "b"), ("stop", "a")]


async def test_a_failure_racing_the_runtime_exit_does_not_escape_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The actor's failure and the runtime's shutdown race; trio runs ready tasks in a random
    # order, so repeat: an outcome that depends on that order cannot pass by luck.
    journal = Journal()
    for attempt in range(20):
        with trio.fail_after(HANG):
            async with open_runtime() as runtime:
                ref = await runtime.spawn(make(journal, f"w{attempt}", Busy))
                await crash(ref)  # its supervisor handles this; the runtime did not give up
        assert ref.state is ActorState.STOPPED


async def test_a_failure_racing_an_outer_cancellation_does_not_escape_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # As above, repeated; the outer cancellation must reach the caller's scope and nothing else.
    journal = Journal()
    for attempt in range(10):
        with trio.fail_after(HANG), trio.CancelScope() as outer:
            async with open_runtime() as runtime:
                ref = await runtime.spawn(make(journal, f"w{attempt}", Busy))
                await crash(ref)
                outer.cancel()
                await trio.sleep_forever()
        assert outer.cancelled_caught
        assert ref.state is ActorState.STOPPED


async def test_spawn_refuses_an_actor_instance(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            with pytest.raises(TypeError, match="factory"):
                await runtime.spawn(Recorder("a", journal))  # type: ignore[arg-type]
            assert runtime.statistics().children == ()
            assert journal.entries == []


async def test_spawn_raises_what_on_start_raised(autojump_clock: trio.testing.MockClock) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            with pytest.raises(Boom, match="a cannot start"):
                await runtime.spawn(make(journal, "a", StartFails), name="a")
            assert runtime.statistics().children == ()
            assert runtime.statistics().child_restarts == 0
            # The name is free and the runtime still works.
            ref = await runtime.spawn(make(journal, "a"), name="a")
            assert await ref.call("ok") == "ok"


async def test_background_task_failure_fails_the_actor_with_that_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            ref = await runtime.spawn(make(journal, "t", Busy), name="t", restart=Restart.TEMPORARY)
            await ref.call("fail")
            exit = await ref.wait_stopped()
            assert exit.kind is ExitKind.FAILED
            assert type(exit.error) is Boom
            assert str(exit.error) == "t background"
            # on_stop saw the same exit
            ((_, _, seen),) = journal.of("exit")
            assert seen.kind is ExitKind.FAILED
            assert seen.error is exit.error
            with pytest.raises(ActorStopped):
                await ref.call("ping")

            restarted = await runtime.spawn(make(journal, "p", Busy), name="p")
            await restarted.call("fail")
            await journal.wait_for("start", "p", count=2)
            assert restarted.statistics().restarts == 1
            assert await restarted.call("ping") == "ping"
            assert runtime.statistics().child_restarts == 1


# --------------------------------------------------------------------------- registry


async def test_registered_actors_are_found_by_name_anywhere_in_the_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            svc = await runtime.spawn(make(journal, "svc"), name="svc", register=True)
            plain = await runtime.spawn(make(journal, "plain"), name="plain")
            assert runtime.lookup("svc") == svc
            assert runtime.lookup("plain") is None  # not registered
            assert runtime.lookup("missing") is None

            await runtime.start(ChildSpec(nested([], holder), name="sup"))
            (supervisor,) = holder
            inner = await supervisor.start_child(
                ChildSpec(make(journal, "inner"), name="inner", register=True)
            )
            assert runtime.lookup("inner") == inner
            # One registry per runtime: the name is taken while its actor is alive.
            with pytest.raises(ConfigError):
                await supervisor.start_child(
                    ChildSpec(make(journal, "svc2"), name="svc", register=True)
                )
            assert runtime.lookup("svc") == svc
            assert await plain.call("still") == "still"

            await svc.stop()
            assert runtime.lookup("svc") is None
            again = await supervisor.start_child(
                ChildSpec(make(journal, "svc2"), name="svc", register=True)
            )
            assert runtime.lookup("svc") == again
            assert again != svc


async def test_lookup_does_not_return_stopped_actors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            temporary = await runtime.spawn(
                make(journal, "t"), name="t", register=True, restart=Restart.TEMPORARY
            )
            await crash(temporary)
            await temporary.wait_stopped()
            assert runtime.lookup("t") is None

            transient = await runtime.spawn(
                make(journal, "n"), name="n", register=True, restart=Restart.TRANSIENT
            )
            await transient.call("stop")
            await transient.wait_stopped()
            assert runtime.lookup("n") is None


async def test_registry_finds_the_new_children_of_a_restarted_supervisor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    holder: list[Supervisor] = []
    inner = [ChildSpec(make(journal, "w"), name="w", register=True)]
    with trio.fail_after(HANG):
        async with open_runtime() as runtime:
            await runtime.start(ChildSpec(nested(inner, holder, max_restarts=0), name="sup"))
            old = runtime.lookup("w")
            assert old is not None
            await crash(old)  # the inner supervisor gives up; the root restarts it
            await journal.wait_for("start", "w", count=2)
            await trio.testing.wait_all_tasks_blocked()  # registered once its start completes
            new = runtime.lookup("w")
            assert len(holder) == 2
            assert new is not None
            assert new != old
            assert old.state is ActorState.STOPPED
            assert await new.call("ping") == "ping"


async def test_two_runtimes_in_one_run_are_independent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with open_runtime() as outer:
            first = await outer.spawn(make(journal, "outer"), name="svc", register=True)
            async with open_runtime() as inner:
                second = await inner.spawn(make(journal, "inner"), name="svc", register=True)
                assert first != second
                assert outer.lookup("svc") == first
                assert inner.lookup("svc") == second
                assert outer.root is not inner.root

                await crash(second)
                await journal.wait_for("start", "inner", count=2)
                assert inner.statistics().child_restarts == 1
                assert outer.statistics().child_restarts == 0
                assert await first.call("instance") != await second.call("instance")
            # Leaving the inner runtime stopped only its actors.
            assert second.state is ActorState.STOPPED
            assert inner.lookup("svc") is None
            assert first.state is ActorState.RUNNING
            assert await first.call("ping") == "ping"
            assert outer.lookup("svc") == first
            assert outer.statistics().children == ("svc",)
        assert first.state is ActorState.STOPPED
