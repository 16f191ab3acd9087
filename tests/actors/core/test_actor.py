"""Actors and their refs: calls, casts, mailboxes, restarts, streams and lifecycle hooks.

Every actor here is hosted by a real runtime (``open_runtime``), driven by the mock clock; steps are
ordered with events and ``wait_all_tasks_blocked``, never with real sleeps.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import trio
import trio.testing

from actors import (
    Actor,
    ActorExit,
    ActorRef,
    ActorState,
    ActorStatistics,
    ActorStopped,
    Backoff,
    ChildSpec,
    ExitKind,
    Restart,
    open_runtime,
)

# ---------------------------------------------------------------------------------------------
# Test actors and the shared state a test uses to watch them.


class Boom(Exception):
    """The failure test actors raise on purpose."""


class Gate:
    """Holds a task at a point of the test's choosing, and tells the test when it got there."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.released = trio.Event()

    async def hold(self) -> None:
        self.entered.set()
        await self.released.wait()

    def release(self) -> None:
        self.released.set()


class Probe:
    """What one test shares with every incarnation of its :class:`Worker`."""

    def __init__(
        self, *, hold_start: frozenset[int] = frozenset(), hold_stop: frozenset[int] = frozenset()
    ) -> None:
        self.log: list[Any] = []
        self.gate = Gate()
        self.start_gate = Gate()
        self.stop_gate = Gate()
        #: Incarnations (1-based) whose on_start / on_stop wait at start_gate / stop_gate.
        self.hold_start = hold_start
        self.hold_stop = hold_stop
        self.instances: list[Worker] = []
        self.errors: list[BaseException] = []
        self.exits: list[tuple[int, ActorExit]] = []
        self.background_finished = trio.Event()

    def factory(self) -> Worker:
        worker = Worker(self, len(self.instances) + 1)
        self.instances.append(worker)
        return worker


class Worker(Actor[Any, Any]):
    """Logs each message as ``(incarnation, message)`` and replies with the message, except:

    ``"block"`` waits at the probe's gate; ``"crash"`` raises :class:`Boom`; ``"block-crash"``
    waits, then raises; ``"incr"`` bumps a counter and returns it; ``"whoami"`` returns the
    incarnation number; ``"quit"`` calls :meth:`Actor.stop`; ``"bg-crash"`` starts a background task
    that fails once the gate opens, and waits forever; ``"bg-sleep"`` starts a background task that
    sleeps forever and notes its ``finally``.
    """

    def __init__(self, probe: Probe, incarnation: int) -> None:
        self.probe = probe
        self.incarnation = incarnation
        self.count = 0

    async def on_start(self) -> None:
        if self.incarnation in self.probe.hold_start:
            await self.probe.start_gate.hold()
        self.probe.log.append((self.incarnation, "on_start"))

    async def handle(self, message: Any) -> Any:
        self.probe.log.append((self.incarnation, message))
        if message == "block":
            await self.probe.gate.hold()
        elif message in ("crash", "block-crash"):
            if message == "block-crash":
                await self.probe.gate.hold()
            error = Boom(f"{message} in incarnation {self.incarnation}")
            self.probe.errors.append(error)
            raise error
        elif message == "incr":
            self.count += 1
            return self.count
        elif message == "whoami":
            return self.incarnation
        elif message == "quit":
            self.stop()
        elif message == "bg-crash":
            self.nursery.start_soon(self._fail_later)
            await trio.sleep_forever()
        elif message == "bg-sleep":
            self.nursery.start_soon(self._sleep_forever)
        return message

    async def _fail_later(self) -> None:
        await self.probe.gate.hold()
        error = Boom("background task")
        self.probe.errors.append(error)
        raise error

    async def _sleep_forever(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.probe.background_finished.set()

    async def on_stop(self, exit: ActorExit) -> None:
        if self.incarnation in self.probe.hold_stop:
            await self.probe.stop_gate.hold()
        self.probe.exits.append((self.incarnation, exit))


class Echo(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        return message


class Streamer(Actor[tuple[str, int], None]):
    """``("count", n)`` streams 0..n-1; ``("forever", 0)`` streams until the consumer leaves;
    ``("die-after", n)`` streams n items and raises; ``("die-later", n)`` streams n items, sleeps
    one (mock) second and raises. ``progress`` counts the items sent successfully."""

    def __init__(self, record: dict[str, Any] | None = None) -> None:
        self.record = record if record is not None else {}
        self.record.setdefault("progress", 0)

    async def handle_stream(
        self, message: tuple[str, int], send: trio.MemorySendChannel[Any]
    ) -> None:
        kind, n = message
        if kind == "count":
            for i in range(n):
                await send.send(i)
                self.record["progress"] += 1
        elif kind == "forever":
            i = 0
            try:
                while True:
                    await send.send(i)
                    i += 1
                    self.record["progress"] = i
            except trio.BrokenResourceError as error:
                self.record["broken"] = error
                raise
            finally:
                self.record["finished"] = True
        elif kind in ("die-after", "die-later"):
            for i in range(n):
                await send.send(i)
            if kind == "die-later":
                await trio.sleep(1)
            failure = Boom("stream producer died")
            self.record["error"] = failure
            raise failure


async def collect(ref: ActorRef[Any, Any], message: Any, into: list[Any], buffer: int = 0) -> None:
    """Consume a whole streamed reply into ``into``."""
    async with ref.stream(message, buffer=buffer) as items:
        async for item in items:
            into.append(item)


# ---------------------------------------------------------------------------------------------
# Calls, casts and the mailbox


async def test_call_returns_the_value_of_handle(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime() as rt:
        ref = await rt.spawn(Echo)
        with trio.fail_after(1):
            assert await ref.call("hello") == "hello"
            assert await ref.call(42) == 42


async def test_messages_are_handled_one_at_a_time_in_mailbox_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)
        with trio.fail_after(1):
            await ref.send("block")
            for i in range(3):
                await ref.send(i)
            await probe.gate.entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            # The actor is inside the first message: the others wait in the mailbox.
            assert probe.log == [(1, "on_start"), (1, "block")]
            assert ref.statistics().mailbox_depth == 3
            probe.gate.release()
            assert await ref.call("last") == "last"
        assert probe.log == [
            (1, "on_start"),
            (1, "block"),
            (1, 0),
            (1, 1),
            (1, 2),
            (1, "last"),
        ]
        assert ref.statistics().mailbox_depth == 0


async def test_send_ignores_the_return_value(autojump_clock: trio.testing.MockClock) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)
        with trio.fail_after(1):
            assert await ref.send("incr") is None
            ref.send_nowait("incr")
            # The casts were handled (their return values dropped) before this call.
            assert await ref.call("incr") == 3
        assert ref.statistics().handled == 3


async def test_concurrent_callers_each_get_their_own_reply(
    autojump_clock: trio.testing.MockClock,
) -> None:
    results: dict[int, Any] = {}

    async with open_runtime() as rt:
        ref = await rt.spawn(Echo)

        async def caller(i: int) -> None:
            results[i] = await ref.call(("reply-for", i))

        with trio.fail_after(1):
            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(caller, i)
    assert results == {i: ("reply-for", i) for i in range(10)}


class SmallMailbox(Worker):
    mailbox_size = 2


@pytest.mark.parametrize(
    ("how", "capacity"),
    [
        pytest.param("class-attribute", 2, id="class-attribute"),
        pytest.param("spawn-override", 3, id="spawn-override"),
        pytest.param("childspec-override", 1, id="childspec-override"),
    ],
)
async def test_a_full_mailbox_pushes_back_on_senders(
    autojump_clock: trio.testing.MockClock, how: str, capacity: int
) -> None:
    probe = Probe()
    later_send_done = False

    def factory() -> Worker:
        return SmallMailbox(probe, 1)

    async with open_runtime() as rt:
        if how == "class-attribute":
            ref = await rt.spawn(factory)
        elif how == "spawn-override":
            ref = await rt.spawn(factory, mailbox_size=capacity)
        else:
            ref = await rt.start(ChildSpec(factory, mailbox_size=capacity))
        assert ref.statistics().mailbox_size == capacity

        async def one_more() -> None:
            nonlocal later_send_done
            await ref.send("one-too-many")
            later_send_done = True

        with trio.fail_after(1):
            await ref.send("block")
            await probe.gate.entered.wait()
            # The actor holds the first message; exactly `capacity` more fit in its mailbox.
            for i in range(capacity):
                await ref.send(i)
            assert ref.statistics().mailbox_depth == capacity
            with pytest.raises(trio.WouldBlock):
                ref.send_nowait("no room")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(one_more)
                await trio.testing.wait_all_tasks_blocked()
                assert not later_send_done
                assert ref.statistics().mailbox_depth == capacity
                probe.gate.release()
            assert later_send_done
            assert await ref.call("after") == "after"
        assert probe.log[1:] == [
            (1, "block"),
            *[(1, i) for i in range(capacity)],
            (1, "one-too-many"),
            (1, "after"),
        ]


async def test_statistics_snapshot(autojump_clock: trio.testing.MockClock) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory, name="stats")
        with trio.fail_after(1):
            await ref.call("incr")
            await ref.send("block")
            await ref.send("queued")
            await probe.gate.entered.wait()
            stats = ref.statistics()
            assert stats == ActorStatistics(
                name="stats",
                state=ActorState.RUNNING,
                mailbox_depth=1,
                mailbox_size=16,
                handled=2,
                restarts=0,
            )
            # The actor's own view is the same snapshot.
            assert probe.instances[0].statistics() == stats
            probe.gate.release()
            await ref.call("sync")
        assert ref.statistics().handled == 4
        assert ref.statistics().mailbox_depth == 0


# ---------------------------------------------------------------------------------------------
# Calls racing failures and stops


async def test_a_failing_call_raises_actor_stopped_and_queued_calls_are_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Observed (and documented on ActorRef): messages queued in the dead incarnation's mailbox are
    # refused with ActorStopped chained to the failure; they do not reach the next incarnation.
    probe = Probe()
    outcomes: dict[str, BaseException | Any] = {}

    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)

        async def caller(message: str) -> None:
            try:
                outcomes[message] = await ref.call(message)
            except ActorStopped as error:
                outcomes[message] = error

        with trio.fail_after(1):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller, "block-crash")
                await probe.gate.entered.wait()
                nursery.start_soon(caller, "queued-1")
                nursery.start_soon(caller, "queued-2")
                await trio.testing.wait_all_tasks_blocked()
                assert ref.statistics().mailbox_depth == 2
                probe.gate.release()
            assert set(outcomes) == {"block-crash", "queued-1", "queued-2"}
            (boom,) = probe.errors
            for message, outcome in outcomes.items():
                assert isinstance(outcome, ActorStopped), message
                assert outcome.__cause__ is boom, message
                assert outcome.name == ref.name
            # The permanent actor was restarted; the same ref reaches the new incarnation.
            assert await ref.call("whoami") == 2
        assert (1, "queued-1") not in probe.log
        assert (1, "queued-2") not in probe.log


async def test_operations_on_a_stopped_actor_raise_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as rt:
        ref = await rt.spawn(Echo, name="gone")
        exit = await ref.stop()
        assert exit.kind is ExitKind.SHUTDOWN
        assert ref.state is ActorState.STOPPED
        with trio.fail_after(0.001):
            with pytest.raises(ActorStopped) as stopped:
                await ref.call("hello")
            assert stopped.value.name == "gone"
            with pytest.raises(ActorStopped):
                await ref.send("hello")
            with pytest.raises(ActorStopped):
                ref.send_nowait("hello")
            with pytest.raises(ActorStopped):
                await collect(ref, "hello", [])


async def test_a_cancelled_caller_leaves_the_actor_healthy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)
        with trio.move_on_after(1) as scope:
            await ref.call("block")
        assert scope.cancelled_caught
        assert ref.state is ActorState.RUNNING
        with trio.fail_after(1):
            probe.gate.release()
            assert await ref.call("later") == "later"
        assert probe.log[1:] == [(1, "block"), (1, "later")]
        assert ref.statistics().restarts == 0


async def test_a_graceful_stop_handles_queued_messages_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    replies: dict[str, Any] = {}
    exits: list[ActorExit] = []

    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory, shutdown=60)

        async def caller(message: str) -> None:
            replies[message] = await ref.call(message)

        async def stopper() -> None:
            exits.append(await ref.stop())

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller, "block")
                await probe.gate.entered.wait()
                nursery.start_soon(caller, "queued")
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(stopper)
                await trio.testing.wait_all_tasks_blocked()
                assert ref.state is ActorState.STOPPING
                with pytest.raises(ActorStopped):
                    await ref.call("too late")
                probe.gate.release()
        assert replies == {"block": "block", "queued": "queued"}
        assert exits == [ActorExit(ExitKind.SHUTDOWN)]
        assert not exits[0].killed
        assert probe.exits == [(1, ActorExit(ExitKind.SHUTDOWN))]
        assert ref.state is ActorState.STOPPED


async def test_a_stop_cancels_the_actor_at_its_shutdown_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    outcome: list[BaseException] = []

    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory, shutdown=2)

        async def caller() -> None:
            try:
                await ref.call("block")
            except ActorStopped as error:
                outcome.append(error)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                await probe.gate.entered.wait()
                start = trio.current_time()
                exit = await ref.stop()
        assert trio.current_time() - start == pytest.approx(2)
        assert exit.kind is ExitKind.SHUTDOWN
        assert exit.killed
        assert len(outcome) == 1
        # A hard kill skips on_stop.
        assert probe.exits == []


# ---------------------------------------------------------------------------------------------
# Restarts


async def test_the_same_ref_reaches_the_restarted_incarnation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)
        with trio.fail_after(1):
            for expected in (1, 2, 3):
                assert await ref.call("incr") == expected
            await ref.send("crash")
            await trio.testing.wait_all_tasks_blocked()
            assert ref.state is ActorState.RUNNING
            # Fresh state in a fresh instance.
            assert await ref.call("incr") == 1
            assert await ref.call("whoami") == 2
        stats = ref.statistics()
        assert stats.restarts == 1
        assert stats.handled == 6  # counted over both incarnations
        assert len(probe.instances) == 2
        (boom,) = probe.errors
        assert probe.exits[0][0] == 1
        assert probe.exits[0][1].kind is ExitKind.FAILED
        assert probe.exits[0][1].error is boom


async def test_a_call_during_a_restart_backoff_waits_for_the_new_incarnation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    replies: list[Any] = []
    async with open_runtime(backoff=Backoff(initial=5, jitter=0)) as rt:
        ref = await rt.spawn(probe.factory)

        async def caller() -> None:
            replies.append(await ref.call("whoami"))

        with trio.fail_after(30):
            start = trio.current_time()
            await ref.send("crash")
            await trio.testing.wait_all_tasks_blocked()
            assert ref.state is ActorState.RESTARTING
            assert ref.statistics().mailbox_depth == 0
            with pytest.raises(trio.WouldBlock):
                ref.send_nowait("while restarting")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                await trio.testing.wait_all_tasks_blocked()
                assert replies == []
                assert trio.current_time() == start
            assert replies == [2]
            assert trio.current_time() - start == pytest.approx(5)
        assert ref.statistics().restarts == 1
        assert ref.state is ActorState.RUNNING


@pytest.mark.parametrize("crash_by", ["call", "cast"])
async def test_a_message_sent_after_a_failure_reaches_the_next_incarnation(
    autojump_clock: trio.testing.MockClock, crash_by: str
) -> None:
    # The first incarnation failed and is still running on_stop: the actor is between
    # incarnations, so a new call waits for the next one instead of being swallowed by the dead
    # mailbox. (The ref docs: "While the actor is restarting, send and call wait for it".)
    probe = Probe(hold_stop=frozenset({1}))
    replies: list[Any] = []
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)

        async def caller() -> None:
            try:
                replies.append(await ref.call("whoami"))
            except ActorStopped as error:
                replies.append(error)

        with trio.fail_after(30):
            if crash_by == "call":
                with pytest.raises(ActorStopped):
                    await ref.call("crash")
            else:
                await ref.send("crash")
            await probe.stop_gate.entered.wait()
            state_after_failure = ref.state
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                await trio.testing.wait_all_tasks_blocked()
                probe.stop_gate.release()
        assert replies == [2]
        assert state_after_failure is ActorState.RESTARTING


async def test_messages_sent_while_starting_are_handled_after_on_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe(hold_start=frozenset({2}))
    replies: list[Any] = []
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)

        async def caller() -> None:
            replies.append(await ref.call("third"))

        with trio.fail_after(1):
            await ref.send("crash")
            await probe.start_gate.entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert ref.state is ActorState.STARTING
            await ref.send("first")
            ref.send_nowait("second")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                await trio.testing.wait_all_tasks_blocked()
                assert ref.statistics().mailbox_depth == 3
                assert (2, "first") not in probe.log
                probe.start_gate.release()
        assert replies == ["third"]
        assert probe.log[-4:] == [(2, "on_start"), (2, "first"), (2, "second"), (2, "third")]
        assert ref.state is ActorState.RUNNING


# ---------------------------------------------------------------------------------------------
# Exits


async def _end_normally(ref: ActorRef[Any, Any], probe: Probe) -> ActorExit:
    await ref.call("quit")
    return await ref.wait_stopped()


async def _end_by_shutdown(ref: ActorRef[Any, Any], probe: Probe) -> ActorExit:
    return await ref.stop()


async def _end_by_failure(ref: ActorRef[Any, Any], probe: Probe) -> ActorExit:
    await ref.send("crash")
    return await ref.wait_stopped()


@pytest.mark.parametrize(
    ("restart", "end", "kind"),
    [
        pytest.param(Restart.TRANSIENT, _end_normally, ExitKind.NORMAL, id="normal"),
        pytest.param(Restart.PERMANENT, _end_by_shutdown, ExitKind.SHUTDOWN, id="shutdown"),
        pytest.param(Restart.TEMPORARY, _end_by_failure, ExitKind.FAILED, id="failed"),
    ],
)
async def test_the_exit_reaches_wait_stopped_and_on_stop(
    autojump_clock: trio.testing.MockClock, restart: Restart, end: Any, kind: ExitKind
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory, restart=restart)
        with trio.fail_after(1):
            exit = await end(ref, probe)
            assert await ref.wait_stopped() is exit
        assert exit.kind is kind
        assert not exit.killed
        assert ref.state is ActorState.STOPPED
        assert len(probe.instances) == 1  # not restarted
        assert probe.exits == [(1, exit)]
        assert probe.exits[0][1].error is exit.error
        if kind is ExitKind.FAILED:
            assert exit.error is probe.errors[0]
        else:
            assert exit.error is None
        with pytest.raises(ActorStopped):
            await ref.call("anyone?")


async def test_self_stop_drains_the_messages_already_queued(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory, restart=Restart.TRANSIENT)
        with trio.fail_after(1):
            await ref.send("block")
            await ref.send("quit")
            await ref.send("after quit")
            await probe.gate.entered.wait()
            probe.gate.release()
            exit = await ref.wait_stopped()
        assert exit.kind is ExitKind.NORMAL
        assert probe.log[1:] == [(1, "block"), (1, "quit"), (1, "after quit")]


async def test_stopping_twice_returns_the_exit_both_times(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as rt:
        ref = await rt.spawn(Echo)
        with trio.fail_after(1):
            first = await ref.stop()
            second = await ref.stop()
        assert first.kind is ExitKind.SHUTDOWN
        assert second == first
        assert await ref.wait_stopped() == first


async def test_leaving_the_runtime_stops_actors_gracefully(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # open_runtime: "Leaving the block stops every actor ... each gracefully"; Actor: on_stop runs
    # after the last message of every incarnation that ends by a stop.
    probe = Probe()
    async with trio.open_nursery() as nursery:

        async def release_when_idle() -> None:
            await trio.testing.wait_all_tasks_blocked()
            probe.gate.release()

        with trio.fail_after(30):
            async with open_runtime() as rt:
                ref = await rt.spawn(probe.factory, shutdown=60)
                await ref.send("block")
                await ref.send("queued")
                await probe.gate.entered.wait()
                nursery.start_soon(release_when_idle)
    assert ref.state is ActorState.STOPPED
    assert probe.log[1:] == [(1, "block"), (1, "queued")]
    assert probe.exits == [(1, ActorExit(ExitKind.SHUTDOWN))]


# ---------------------------------------------------------------------------------------------
# Streams


async def test_a_stream_yields_what_handle_stream_sends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as rt:
        ref = await rt.spawn(Streamer)
        items: list[int] = []
        with trio.fail_after(1):
            await collect(ref, ("count", 5), items)
            assert items == [0, 1, 2, 3, 4]
            empty: list[int] = []
            await collect(ref, ("count", 0), empty)
            assert empty == []


async def test_leaving_a_stream_early_ends_the_producer_quietly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    record: dict[str, Any] = {}
    async with open_runtime() as rt:
        ref = await rt.spawn(lambda: Streamer(record))
        got: list[int] = []
        with trio.fail_after(1):
            async with ref.stream(("forever", 0)) as items:
                async for item in items:
                    got.append(item)
                    if len(got) == 3:
                        break
            assert got == [0, 1, 2]
            await trio.testing.wait_all_tasks_blocked()
            assert record.get("finished")
            assert isinstance(record["broken"], trio.BrokenResourceError)
            # The handler ended quietly: same incarnation, still taking messages.
            assert ref.state is ActorState.RUNNING
            again: list[int] = []
            await collect(ref, ("count", 2), again)
            assert again == [0, 1]
        assert ref.statistics().restarts == 0


async def test_an_actor_dying_mid_stream_raises_actor_stopped_chained_to_its_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    record: dict[str, Any] = {}
    async with open_runtime() as rt:
        ref = await rt.spawn(lambda: Streamer(record), restart=Restart.TEMPORARY)
        got: list[int] = []
        with trio.fail_after(1):
            async with ref.stream(("die-after", 1), buffer=1) as items:
                # Let the producer put its item in the buffer and die before we read anything.
                exit = await ref.wait_stopped()
                got.append(await anext(items))
                with pytest.raises(ActorStopped) as stopped:
                    await anext(items)
        assert got == [0]
        assert exit.kind is ExitKind.FAILED
        assert exit.error is record["error"]
        assert stopped.value.__cause__ is record["error"]


async def test_a_consumer_waiting_for_an_item_sees_the_producer_die(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The consumer is parked in receive() when the producer raises. However trio orders the two
    # tasks after that, iteration must raise ActorStopped, never end as if the stream completed.
    # Repeated so that both orders occur.
    outcomes: list[str] = []
    async with open_runtime() as rt:
        for _ in range(20):
            ref = await rt.spawn(Streamer, restart=Restart.TEMPORARY)
            got: list[int] = []
            with trio.fail_after(10):
                try:
                    await collect(ref, ("die-later", 1), got)
                    outcomes.append("ended silently")
                except ActorStopped:
                    outcomes.append("ActorStopped")
                await ref.wait_stopped()
            assert got == [0]
    assert outcomes == ["ActorStopped"] * 20


async def test_a_stream_to_a_stopped_actor_raises(autojump_clock: trio.testing.MockClock) -> None:
    async with open_runtime() as rt:
        ref = await rt.spawn(Streamer)
        await ref.stop()
        with trio.fail_after(1), pytest.raises(ActorStopped):
            await collect(ref, ("count", 3), [])


async def test_a_stream_to_an_actor_without_handle_stream_fails_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as rt:
        ref = await rt.spawn(Echo, restart=Restart.TEMPORARY)
        with trio.fail_after(1):
            async with ref.stream("hello") as items:
                exit = await ref.wait_stopped()
                with pytest.raises(ActorStopped):
                    await anext(items)
        assert exit.kind is ExitKind.FAILED
        assert isinstance(exit.error, NotImplementedError)


@pytest.mark.parametrize("buffer", [0, 1, 3])
async def test_the_stream_buffer_lets_the_producer_run_ahead(
    autojump_clock: trio.testing.MockClock, buffer: int
) -> None:
    record: dict[str, Any] = {}
    async with open_runtime() as rt:
        ref = await rt.spawn(lambda: Streamer(record))
        with trio.fail_after(1):
            async with ref.stream(("count", 10), buffer=buffer) as items:
                await trio.testing.wait_all_tasks_blocked()
                # Nothing consumed yet: the producer got exactly `buffer` items out.
                assert record["progress"] == buffer
                got = [item async for item in items]
        assert got == list(range(10))
        assert record["progress"] == 10


# ---------------------------------------------------------------------------------------------
# Lifecycle hooks, background tasks, names


async def test_on_start_runs_before_the_first_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)
        # spawn returns once the actor is ready.
        assert ref.state is ActorState.RUNNING
        assert probe.log == [(1, "on_start")]
        with trio.fail_after(1):
            await ref.call("hello")
        assert probe.log == [(1, "on_start"), (1, "hello")]


class BadOnStop(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        return message

    async def on_stop(self, exit: ActorExit) -> None:
        raise Boom("on_stop failed")


async def test_an_on_stop_error_is_logged_and_does_not_change_the_exit(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="actors._core._actor"):
        async with open_runtime() as rt:
            ref = await rt.spawn(BadOnStop, name="bad-stop")
            with trio.fail_after(1):
                exit = await ref.stop()
    assert exit == ActorExit(ExitKind.SHUTDOWN)
    assert exit.error is None
    records = [r for r in caplog.records if r.name == "actors._core._actor"]
    assert len(records) == 1
    assert "bad-stop" in records[0].getMessage()
    assert records[0].exc_info is not None
    assert isinstance(records[0].exc_info[1], Boom)


async def test_a_failing_background_task_fails_the_actor_with_its_exception(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory, restart=Restart.TEMPORARY)
        with trio.fail_after(1):
            await ref.send("bg-crash")
            await probe.gate.entered.wait()
            probe.gate.release()
            exit = await ref.wait_stopped()
        (boom,) = probe.errors
        assert exit.kind is ExitKind.FAILED
        assert exit.error is boom  # unwrapped, not an ExceptionGroup
        assert probe.exits == [(1, exit)]


async def test_a_caller_waiting_when_a_background_task_fails_sees_the_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Actor docs: a failing task in `nursery` fails the incarnation, and "a caller waiting on that
    # message gets ActorStopped chained to the exception".
    probe = Probe()
    outcome: list[BaseException] = []
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory, restart=Restart.TEMPORARY)

        async def caller() -> None:
            try:
                await ref.call("bg-crash")
            except ActorStopped as error:
                outcome.append(error)

        with trio.fail_after(1):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                await probe.gate.entered.wait()
                probe.gate.release()
            exit = await ref.wait_stopped()
    (boom,) = probe.errors
    assert exit.error is boom
    (stopped,) = outcome
    assert stopped.__cause__ is boom


async def test_background_tasks_are_cancelled_when_the_actor_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe()
    async with open_runtime() as rt:
        ref = await rt.spawn(probe.factory)
        with trio.fail_after(1):
            await ref.call("bg-sleep")
            await trio.testing.wait_all_tasks_blocked()
            assert not probe.background_finished.is_set()
            exit = await ref.stop()
        assert probe.background_finished.is_set()
        assert exit == ActorExit(ExitKind.SHUTDOWN)
        assert not exit.killed


class Introspective(Actor[str, Any]):
    async def handle(self, message: str) -> Any:
        if message == "name":
            return self.name
        if message == "nursery":
            return self.nursery
        return self.statistics()


async def test_name_nursery_and_statistics_from_inside_and_outside(
    autojump_clock: trio.testing.MockClock,
) -> None:
    instances: list[Introspective] = []

    def factory() -> Introspective:
        instances.append(Introspective())
        return instances[-1]

    unstarted = Introspective()
    assert unstarted.name == "Introspective"
    with pytest.raises(RuntimeError, match="not running"):
        _ = unstarted.nursery
    with pytest.raises(RuntimeError, match="not been started"):
        unstarted.statistics()

    async with open_runtime() as rt:
        ref = await rt.spawn(factory, name="looker")
        with trio.fail_after(1):
            assert await ref.call("name") == "looker"
            assert isinstance(await ref.call("nursery"), trio.Nursery)
            stats = await ref.call("stats")
        assert stats.name == "looker"
        assert stats.state is ActorState.RUNNING
        assert stats.handled == 3
        assert ref.name == "looker"
        await ref.stop()
        (actor,) = instances
        assert actor.name == "looker"
        with pytest.raises(RuntimeError, match="not running"):
            _ = actor.nursery


async def test_spawned_names_default_to_the_factory_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as rt:
        first = await rt.spawn(Echo)
        second = await rt.spawn(Echo)
    assert first.name.startswith("Echo")
    assert second.name.startswith("Echo")
    assert first.name != second.name


# ---------------------------------------------------------------------------------------------
# Refs


async def test_refs_to_one_actor_are_equal_and_hash_alike(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as rt:
        ref = await rt.spawn(Echo, name="one", register=True)
        other = await rt.spawn(Echo, name="two")
        same = copy.copy(ref)
        assert same is not ref
        assert same == ref
        assert hash(same) == hash(ref)
        assert rt.lookup("one") == ref
        assert ref != other
        assert ref != "one"
        assert len({ref, same, other}) == 2
        with trio.fail_after(1):
            assert await same.call("via copy") == "via copy"

        assert repr(ref) == "<ActorRef 'one' running>"
        await ref.stop()
        assert "'one'" in repr(ref)
        assert "stopped" in repr(ref)


# ---------------------------------------------------------------------------------------------
# Exception groups from handlers


class GroupFailure(Actor[int, None]):
    """Handles ``n`` by running ``n`` failing tasks next to one that would run forever."""

    def __init__(self, raised: list[BaseException]) -> None:
        self.raised = raised

    async def handle(self, message: int) -> None:
        async def fail(i: int) -> None:
            error = Boom(f"task {i}")
            self.raised.append(error)
            raise error

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            for i in range(message):
                nursery.start_soon(fail, i)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _leaves(sub)]
    return [error]


async def test_a_single_real_failure_in_a_group_is_unwrapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    raised: list[BaseException] = []
    async with open_runtime() as rt:
        ref = await rt.spawn(lambda: GroupFailure(raised), restart=Restart.TEMPORARY)
        with trio.fail_after(1):
            await ref.send(1)
            exit = await ref.wait_stopped()
    (boom,) = raised
    assert exit.kind is ExitKind.FAILED
    assert exit.error is boom


async def test_several_real_failures_are_kept_as_a_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    raised: list[BaseException] = []
    async with open_runtime() as rt:
        ref = await rt.spawn(lambda: GroupFailure(raised), restart=Restart.TEMPORARY)
        with trio.fail_after(1):
            with pytest.raises(ActorStopped) as stopped:
                await ref.call(2)
            exit = await ref.wait_stopped()
    assert len(raised) == 2
    assert exit.kind is ExitKind.FAILED
    assert isinstance(exit.error, BaseExceptionGroup)
    assert sorted(map(id, _leaves(exit.error))) == sorted(map(id, raised))
    cause = stopped.value.__cause__
    assert isinstance(cause, BaseExceptionGroup)
    assert sorted(map(id, _leaves(cause))) == sorted(map(id, raised))


def test_actor_exit_equality_ignores_the_error() -> None:
    assert ActorExit(ExitKind.FAILED, Boom("a")) == ActorExit(ExitKind.FAILED, Boom("b"))
    assert ActorExit(ExitKind.FAILED) != ActorExit(ExitKind.SHUTDOWN)
    assert ActorExit(ExitKind.SHUTDOWN) != ActorExit(ExitKind.SHUTDOWN, killed=True)
