"""Abort: the cancel token."""

from __future__ import annotations

import gc

import trio
import trio.testing

from actors import Abort


async def test_a_new_token_is_armed() -> None:
    token = Abort()
    assert not token.cancelled
    assert token.reason is None
    assert repr(token) == "<Abort armed>"


async def test_cancel_keeps_the_first_reason() -> None:
    token = Abort()
    token.cancel("user pressed stop")
    token.cancel("deadline")
    assert token.cancelled
    assert token.reason == "user pressed stop"
    assert "user pressed stop" in repr(token)


async def test_cancel_without_reason_says_cancelled() -> None:
    token = Abort()
    token.cancel()
    assert token.reason == "cancelled"
    other = Abort()
    other.cancel("")
    assert other.reason == "cancelled"


async def test_wait_returns_the_reason_once_tripped() -> None:
    token = Abort()
    reasons: list[str] = []

    async def waiter() -> None:
        reasons.append(await token.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert reasons == []
        token.cancel("budget")
    assert reasons == ["budget", "budget"]
    # Already tripped: returns at once (still a checkpoint).
    with trio.fail_after(1):
        assert await token.wait() == "budget"


async def test_open_scope_is_cancelled_with_the_reason() -> None:
    token = Abort()
    reached_end = False
    with trio.fail_after(5), token.open_scope() as scope:
        token.cancel("user abort")
        await trio.sleep_forever()
        reached_end = True  # pragma: no cover - never reached
    assert scope.cancelled_caught
    assert not reached_end
    assert token._callbacks == {}


async def test_bind_ties_an_existing_scope() -> None:
    token = Abort()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            with token.bind(nursery.cancel_scope):
                nursery.start_soon(trio.sleep_forever)
                await trio.testing.wait_all_tasks_blocked()
                token.cancel("stop the nursery")
    assert nursery.cancel_scope.cancelled_caught


async def test_the_cancelled_exception_carries_the_reason() -> None:
    token = Abort()
    seen = ""
    with trio.fail_after(5), token.open_scope() as scope:
        token.cancel("turn budget spent")
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as cancelled:
            seen = str(cancelled)
            raise
    assert scope.cancelled_caught
    assert "turn budget spent" in seen


async def test_binding_a_tripped_token_cancels_at_once() -> None:
    token = Abort()
    token.cancel("early")
    with trio.fail_after(5), token.open_scope() as scope:
        assert scope.cancel_called
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught


async def test_binding_ends_with_the_block() -> None:
    token = Abort()
    with token.open_scope() as scope:
        await trio.lowlevel.checkpoint()
    assert token._callbacks == {}
    token.cancel("late")
    assert not scope.cancel_called


async def test_the_same_scope_bound_twice_stays_bound_until_both_end() -> None:
    token = Abort()
    scope = trio.CancelScope()
    with token.bind(scope), scope:
        with token.bind(scope):
            pass
        token.cancel("still bound")
        assert scope.cancel_called
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught


async def test_binding_starts_no_task() -> None:
    token = Abort()
    root = trio.lowlevel.current_root_task()

    def task_count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(
            task_count(child) for nursery in task.child_nurseries for child in nursery.child_tasks
        )

    before = task_count(root)
    with token.open_scope():
        assert task_count(root) == before
    derived = Abort.any(token, Abort())
    assert task_count(root) == before
    assert not derived.cancelled


async def test_any_trips_with_the_first_source_reason() -> None:
    a, b, c = Abort(), Abort(), Abort()
    either = Abort.any(a, b, c)
    assert not either.cancelled
    b.cancel("b first")
    a.cancel("a later")
    assert either.reason == "b first"


async def test_any_of_a_tripped_token_is_born_tripped() -> None:
    a, b = Abort(), Abort()
    b.cancel("b")
    a.cancel("a")
    assert Abort.any(b, a).reason == "b"
    assert Abort.any(a, b).reason == "a"  # argument order decides among tripped sources
    assert not Abort.any().cancelled


async def test_any_of_any_chains() -> None:
    caller, agent, deadline = Abort(), Abort(), Abort()
    run = Abort.any(Abort.any(caller, agent), deadline)
    with trio.fail_after(5), run.open_scope() as scope:
        agent.cancel("agent.abort()")
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert run.reason == "agent.abort()"
    assert not caller.cancelled  # tripping a derived token never trips its sources


async def test_a_chain_of_derived_tokens_survives_garbage_collection() -> None:
    source = Abort()
    chain = Abort.any(Abort.any(Abort.any(source)))  # the middle links have no other owner
    gc.collect()
    source.cancel("through the chain")
    assert chain.reason == "through the chain"


async def test_derived_tokens_are_not_kept_alive_by_their_sources() -> None:
    source = Abort()
    for _ in range(100):
        Abort.any(source)
    gc.collect()
    assert len(source._derived) == 0
    kept = Abort.any(source)
    gc.collect()
    assert len(source._derived) == 1
    source.cancel("x")
    assert kept.reason == "x"


async def test_a_derived_token_can_be_cancelled_alone() -> None:
    source = Abort()
    derived = Abort.any(source)
    derived.cancel("only me")
    assert derived.reason == "only me"
    assert not source.cancelled
    source.cancel("source")
    assert derived.reason == "only me"
