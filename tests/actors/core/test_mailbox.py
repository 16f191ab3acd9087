"""The actor mailbox: a bounded many-senders, one-reader channel with trio's channel semantics."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors._core._mailbox import Mailbox


async def test_items_come_out_in_order() -> None:
    box = Mailbox[int](4)
    for item in range(4):
        await box.send(item)
    assert len(box) == 4
    assert [await box.receive() for _ in range(4)] == [0, 1, 2, 3]
    assert len(box) == 0


async def test_a_full_mailbox_refuses_nowait_and_blocks_send() -> None:
    box = Mailbox[int](2)
    box.send_nowait(1)
    box.send_nowait(2)
    with pytest.raises(trio.WouldBlock):
        box.send_nowait(3)
    sent = trio.Event()

    async def sender() -> None:
        await box.send(3)
        sent.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert not sent.is_set()  # blocked: the mailbox is full
        assert box.receive_nowait() == 1
        await sent.wait()  # one slot freed, the waiting sender went in
    assert [box.receive_nowait(), box.receive_nowait()] == [2, 3]


async def test_a_parked_reader_takes_an_item_even_at_capacity_zero() -> None:
    box = Mailbox[str](0)
    with pytest.raises(trio.WouldBlock):
        box.send_nowait("nobody listening")
    received: list[str] = []

    async def reader() -> None:
        received.append(await box.receive())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        box.send_nowait("hand-off")
    assert received == ["hand-off"]


async def test_close_sending_drains_then_ends() -> None:
    box = Mailbox[int](4)
    await box.send(1)
    await box.send(2)
    box.close_sending()
    box.close_sending()  # idempotent
    with pytest.raises(trio.ClosedResourceError):
        await box.send(3)
    with pytest.raises(trio.ClosedResourceError):
        box.send_nowait(3)
    assert [item async for item in box] == [1, 2]
    with pytest.raises(trio.EndOfChannel):
        await box.receive()


async def test_close_sending_wakes_a_parked_reader() -> None:
    box = Mailbox[int](0)
    ended = trio.Event()

    async def reader() -> None:
        with pytest.raises(trio.EndOfChannel):
            await box.receive()
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not ended.is_set()
        box.close_sending()
    assert ended.is_set()


async def test_close_sending_refuses_waiting_senders() -> None:
    box = Mailbox[int](0)
    refused = trio.Event()

    async def sender() -> None:
        with pytest.raises(trio.ClosedResourceError):
            await box.send(1)
        refused.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert not refused.is_set()
        box.close_sending()
    assert refused.is_set()
    assert len(box) == 0


async def test_close_receiving_breaks_senders_but_keeps_the_queue() -> None:
    box = Mailbox[int](1)
    await box.send(1)
    refused = trio.Event()

    async def sender() -> None:
        with pytest.raises(trio.BrokenResourceError):
            await box.send(2)
        refused.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        box.close_receiving()
    assert refused.is_set()
    with pytest.raises(trio.BrokenResourceError):
        box.send_nowait(3)
    with pytest.raises(trio.ClosedResourceError):
        await box.receive()
    assert box.receive_nowait() == 1  # still there, for the owner to refuse


async def test_close_receiving_wakes_a_parked_reader_with_closed() -> None:
    box = Mailbox[int](1)

    async def reader() -> None:
        with pytest.raises(trio.ClosedResourceError):
            await box.receive()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        box.close_receiving()


async def test_a_cancelled_reader_leaves_the_mailbox_usable(autojump_clock: object) -> None:
    box = Mailbox[int](1)
    with trio.move_on_after(1) as scope:
        await box.receive()
    assert scope.cancelled_caught
    box.send_nowait(7)  # must not try to wake the task that gave up
    assert await box.receive() == 7


async def test_a_cancelled_sender_leaves_the_mailbox_usable(autojump_clock: object) -> None:
    box = Mailbox[int](1)
    box.send_nowait(1)
    with trio.move_on_after(1) as scope:
        await box.send(2)
    assert scope.cancelled_caught
    assert box.receive_nowait() == 1
    with pytest.raises(trio.WouldBlock):
        box.receive_nowait()  # the cancelled send put nothing in
    await box.send(3)
    assert box.receive_nowait() == 3


async def test_only_one_reader_at_a_time() -> None:
    box = Mailbox[int](1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(box.receive)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await box.receive()
        box.send_nowait(1)


async def test_send_and_receive_are_checkpoints() -> None:
    box = Mailbox[int](2)
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await box.send(1)
    assert len(box) == 0  # a cancelled send puts nothing in
    box.send_nowait(1)
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await box.receive()
    assert box.receive_nowait() == 1  # a cancelled receive takes nothing


def test_capacity_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 0"):
        Mailbox[int](-1)


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(0, 4),
    batches=st.lists(st.integers(1, 5), min_size=1, max_size=6),
)
def test_many_senders_one_reader_lose_nothing(capacity: int, batches: list[int]) -> None:
    """Every item sent by concurrent senders arrives exactly once, each sender's in its order."""

    async def main() -> list[tuple[int, int]]:
        box = Mailbox[tuple[int, int]](capacity)
        received: list[tuple[int, int]] = []
        total = sum(batches)

        async def sender(who: int, count: int) -> None:
            for index in range(count):
                await box.send((who, index))

        async with trio.open_nursery() as nursery:
            for who, count in enumerate(batches):
                nursery.start_soon(sender, who, count)
            for _ in range(total):
                received.append(await box.receive())
        return received

    received = trio.run(main)
    assert sorted(received) == sorted((who, i) for who, n in enumerate(batches) for i in range(n))
    for who in range(len(batches)):
        mine = [index for sender, index in received if sender == who]
        assert mine == sorted(mine)
