"""The stores' lane (:class:`actors._sqlite.Lane`): one thread, calls in order, errors handed
back, and a call that has started is never abandoned."""

from __future__ import annotations

import threading

import pytest
import trio

from actors._sqlite import Lane

pytestmark = pytest.mark.trio


async def test_calls_run_in_order_in_one_thread_of_the_lane() -> None:
    lane = Lane("test lane")
    seen: list[tuple[int, int]] = []
    try:
        async with trio.open_nursery() as nursery:
            for index in range(20):
                nursery.start_soon(
                    lane.run, lambda i=index: seen.append((i, threading.get_ident()))
                )
                await trio.lowlevel.checkpoint()
        assert [index for index, _ in seen] == list(range(20))
        assert len({thread for _, thread in seen}) == 1
        assert seen[0][1] != threading.get_ident()
        assert await lane.run(lambda: 42) == 42
    finally:
        lane.close()


async def test_what_a_call_raises_reaches_its_caller_and_the_lane_goes_on() -> None:
    lane = Lane("test lane")

    def fail() -> None:
        raise ValueError("broken")

    try:
        with pytest.raises(ValueError, match="broken"):
            await lane.run(fail)
        assert await lane.run(lambda: "still serving") == "still serving"
    finally:
        lane.close()


async def test_a_call_cancelled_while_it_runs_finishes_and_then_the_cancel_lands() -> None:
    lane = Lane("test lane")
    started = threading.Event()
    release = threading.Event()
    finished: list[str] = []

    def slow() -> str:
        started.set()
        release.wait(10)
        finished.append("done")
        return "done"

    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def cancel_once_started() -> None:
                    await trio.to_thread.run_sync(started.wait, 10)
                    scope.cancel()
                    release.set()

                nursery.start_soon(cancel_once_started)
                await lane.run(slow)
                pytest.fail("the cancel was not delivered after the call")  # pragma: no cover
        assert scope.cancelled_caught
        assert finished == ["done"]
        # A call given to a lane from an already cancelled scope never starts.
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            await lane.run(lambda: finished.append("never"))
        assert finished == ["done"]
    finally:
        lane.close()
