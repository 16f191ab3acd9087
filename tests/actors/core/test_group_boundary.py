"""``actors._core._errors``: where trio's exception groups stop (DESIGN.md section 16).

The property tests build random trees of exception groups -- cancellations, failures,
interrupts, nested as nurseries nest them, with or without the caller's own exception somewhere
in them -- and check what :func:`one_cause` picks and what :class:`OneCause` raises: the class of
bug behind issue 24 item 2 (a group with one real cause escaping, or its cause re-raised with the
group as its context, so two tracebacks print).
"""

from __future__ import annotations

import traceback
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from actors._core import _errors
from actors._core._errors import OneCause, one_cause, raise_as_itself, raises_one_cause


class Mine(Exception):
    """The caller's own exception."""


async def _cancelled_now() -> trio.Cancelled:
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as error:
            return error
    raise AssertionError("not cancelled")


def cancelled() -> trio.Cancelled:
    """A real ``trio.Cancelled`` (it has no public constructor)."""
    return trio.run(_cancelled_now)


#: Real cancellations, made once: a tree may hold the same one more than once.
CANCELLED = [cancelled() for _ in range(4)]

KINDS = ["cancel", "fail", "fail", "interrupt", "exit"]
Spec = Any  # a kind (str), or a list of specs: a group


def specs() -> st.SearchStrategy[Spec]:
    leaf = st.sampled_from(KINDS)
    return st.lists(
        st.recursive(leaf, lambda inner: st.lists(inner, min_size=1, max_size=4), max_leaves=12),
        min_size=1,
        max_size=4,
    )


def build(spec: Spec, counter: list[int]) -> BaseException:
    if isinstance(spec, list):
        return BaseExceptionGroup("nursery", [build(member, counter) for member in spec])
    counter[0] += 1
    if spec == "cancel":
        return CANCELLED[counter[0] % len(CANCELLED)]
    if spec == "fail":
        return Mine(f"failure {counter[0]}")
    if spec == "interrupt":
        return KeyboardInterrupt(f"interrupt {counter[0]}")
    return SystemExit(f"exit {counter[0]}")


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for member in error.exceptions for leaf in leaves(member)]
    return [error]


def nodes(error: BaseException) -> list[BaseException]:
    found = [error]
    if isinstance(error, BaseExceptionGroup):
        for member in error.exceptions:
            found.extend(nodes(member))
    return found


@st.composite
def trees(draw: st.DrawFn) -> tuple[BaseException, BaseException | None]:
    """A tree of groups, and maybe the caller's own exception: one of its nodes below the root
    (what the ``async with`` block raised, as a nursery holds it)."""
    tree = build(draw(specs()), [0])
    below = nodes(tree)[1:]
    own = draw(st.one_of(st.none(), st.sampled_from(below))) if below else None
    return tree, own


def is_cancel(error: BaseException) -> bool:
    return isinstance(error, trio.Cancelled)


@given(trees())
def test_one_cause_picks_what_a_caller_should_see(drawn: tuple[BaseException, Any]) -> None:
    tree, own = drawn
    all_leaves = leaves(tree)
    real = [leaf for leaf in all_leaves if not is_cancel(leaf)]
    interrupts = [leaf for leaf in real if not isinstance(leaf, Exception)]
    own_leaves = {id(leaf) for leaf in leaves(own)} if own is not None else set()

    cause = one_cause(tree, own)

    if interrupts:
        # An interrupt is never lost: one of them, KeyboardInterrupt first.
        assert any(cause is leaf for leaf in interrupts)
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in interrupts):
            assert isinstance(cause, KeyboardInterrupt)
        others = [leaf for leaf in real if leaf is not cause]
        assert len(getattr(cause, "__notes__", [])) == min(len(others), 5) + (len(others) > 5)
    elif not real:
        assert cause is tree  # cancellations only: left for their scope, untouched
    elif own is not None and all(id(leaf) in own_leaves for leaf in real):
        assert cause is own  # the caller's own exception, as itself (a group of theirs too)
    elif len(real) == 1:
        assert cause is real[0]  # the very exception, not a copy
    else:
        # Several failures stay a group -- a node of the tree that holds every one of them.
        assert any(cause is node for node in nodes(tree))
        assert isinstance(cause, BaseExceptionGroup)
        assert {id(leaf) for leaf in real} <= {id(leaf) for leaf in leaves(cause)}
    assert not is_cancel(cause) or cause is tree


@given(trees())
def test_one_cause_raises_its_pick_as_it_was(drawn: tuple[BaseException, Any]) -> None:
    """What leaves a ``with OneCause()`` block is what one_cause picks, with its own context
    and traceback: never the group as its context (two tracebacks, "During handling of the
    above exception")."""
    tree, own = drawn
    context = ValueError("what it was raised while handling")
    for node in nodes(tree)[1:]:
        node.__context__ = context
    expected = one_cause(tree, own)
    before = expected.__traceback__

    with pytest.raises(BaseException) as caught, OneCause(own=own):  # noqa: PT011 - anything
        raise tree
    assert caught.value is expected
    if expected is not tree:
        assert expected.__context__ is context
        # Its own traceback, under this frame's; the boundary's frames are not on it.
        chain = []
        entry = expected.__traceback__
        while entry is not None:
            chain.append(entry)
            entry = entry.tb_next
        assert before is None or before in chain
        assert not any(entry.tb_frame.f_code.co_filename == _errors.__file__ for entry in chain)


def test_the_callers_own_group_comes_out_even_when_a_cancel_scope_copied_it() -> None:
    """A cancel scope takes its cancellations out of a group with ``split``, which copies the
    groups it rebuilds: the caller's group is recognised by its leaves, and comes out as the
    original."""
    own = ExceptionGroup("mine", [Mine("one"), Mine("two")])
    nursery = BaseExceptionGroup("nursery", [own, CANCELLED[0]])
    _, rest = nursery.split(trio.Cancelled)
    assert rest is not None
    assert rest.exceptions[0] is not own  # the copy
    assert one_cause(rest, own) is own
    # Without knowing which was the caller's, a group of several failures stays a group.
    assert one_cause(rest) is rest.exceptions[0]


def test_a_users_exception_is_not_unwrapped_when_nothing_says_it_is_theirs() -> None:
    """Without ``own``, a group with one member is unwrapped however deep: that is what the
    doors' portals need (a group of one that trio made)."""
    failure = Mine("deep")
    tree = BaseExceptionGroup("a", [CANCELLED[0], ExceptionGroup("b", [failure])])
    assert one_cause(tree) is failure
    assert one_cause(tree, own=tree.exceptions[1]) is tree.exceptions[1]


def test_raise_as_itself_keeps_context_and_traceback() -> None:
    try:
        raise Mine("first")
    except Mine as error:
        first = error
    context = first.__context__
    frames = traceback.extract_tb(first.__traceback__)
    group = ExceptionGroup("nursery", [first])

    def reraise() -> None:
        try:
            raise group
        except ExceptionGroup:
            raise_as_itself(first)

    with pytest.raises(Mine) as caught:
        reraise()
    assert caught.value is first
    assert first.__context__ is context  # not the group
    # Its own frames, under the frame that caught it.
    assert traceback.extract_tb(first.__traceback__)[-len(frames) :] == frames


async def test_raises_one_cause_unwraps_what_a_function_raises() -> None:
    failure = Mine("from a task")

    @raises_one_cause
    async def run() -> int:
        async with trio.open_nursery() as nursery:

            async def fail() -> None:
                raise failure

            nursery.start_soon(fail)
            await trio.sleep_forever()
        return 0

    with pytest.raises(Mine) as caught:
        await run()
    assert caught.value is failure
    assert caught.value.__context__ is None


async def test_an_outer_cancel_passes_a_boundary() -> None:
    reached = []
    with trio.CancelScope() as outside, OneCause():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            outside.cancel()
            await trio.sleep(1000)
            reached.append("never")
    assert outside.cancelled_caught
    assert reached == []
