"""Where trio's exception groups stop: the one exception a caller of a public API sees.

trio's strict exception groups are right inside the library (a nursery may fail in several ways
at once) and wrong at its edge: ``except ValueError`` around ``async with open_runtime():``
must catch the ``ValueError`` raised in the block, not an ``ExceptionGroup`` holding it. Every
public context manager (and every public function that runs a nursery) therefore leaves
through :class:`OneCause`, which applies :func:`one_cause`:

* a group whose only real cause is one exception becomes that exception -- the very object
  raised, with its own traceback, ``__cause__`` and ``__context__`` (never the group as its
  context: one traceback is printed, not two joined by "During handling of the above exception,
  another exception occurred");
* ``trio.Cancelled`` is never a real cause, and never swallowed: a group of cancellations only
  is left as it is, for the cancel scope it belongs to;
* an interrupt (``KeyboardInterrupt``, ``SystemExit`` -- anything that is not an ``Exception``
  nor a cancellation) wins over failures, ``KeyboardInterrupt`` first; the failures it wins
  over are named in its notes;
* the caller's own exception (what the ``async with`` block raised) comes out as itself, even
  when it is an exception group of the caller's own;
* several real failures at once stay a group (the innermost one that holds them all).

The doors from outside trio (``actors.sync``, ``actors.aio``) use the same helper where their
own nurseries or portals could hand a group to a caller.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn, ParamSpec, TypeVar

import trio

__all__ = ["OneCause", "one_cause", "only_cancelled", "raise_as_itself", "raises_one_cause"]

P = ParamSpec("P")
T = TypeVar("T")

#: How much of each failure an interrupt's note repeats.
_NOTE_CHARS = 300
#: How many of the failures an interrupt won over its notes name.
_NOTES = 5


def one_cause(error: BaseException, own: BaseException | None = None) -> BaseException:
    """The exception a caller should see for ``error`` (see the module's docstring): ``error``
    itself unless it is an exception group with one real cause; ``own`` is the exception the
    caller's own code raised (the ``async with`` block's), which is never unwrapped.

    Pure: nothing is raised or changed, except that an interrupt chosen over other failures
    gets notes naming them."""
    if not isinstance(error, BaseExceptionGroup) or error is own:
        return error
    leaves = _leaves(error)
    if all(isinstance(leaf, trio.Cancelled) for leaf in leaves):
        return error  # cancellations only: for the scopes they belong to, untouched
    interrupts = [leaf for leaf in leaves if not isinstance(leaf, Exception | trio.Cancelled)]
    if interrupts:
        keyboard = [leaf for leaf in interrupts if isinstance(leaf, KeyboardInterrupt)]
        mine = [leaf for leaf in interrupts if leaf is own]
        chosen = (keyboard or mine or interrupts)[0]
        others = [leaf for leaf in leaves if leaf is not chosen and _real(leaf)]
        for other in others[:_NOTES]:
            text = f"{type(other).__name__}: {other}"
            chosen.add_note(f"(while it propagated, also: {text[:_NOTE_CHARS]})")
        if len(others) > _NOTES:
            chosen.add_note(f"(and {len(others) - _NOTES} more failures)")
        return chosen
    current: BaseException = error
    while isinstance(current, BaseExceptionGroup):
        if own is not None and _is_own(current, own):
            return own
        real = [member for member in current.exceptions if not only_cancelled(member)]
        if len(real) != 1:
            return current  # several failures at once: the group that holds them all
        current = real[0]
    return current


class OneCause:
    """A context manager (sync, so it works in any async code too) that lets no exception
    group with one real cause out: on the way out it raises :func:`one_cause` of what left its
    block instead, keeping that exception's own traceback and context.

    Around a nursery whose body is the caller's code, mark the body with :meth:`own`, so the
    caller's exception comes out as itself::

        one = OneCause()
        with one:
            async with trio.open_nursery() as nursery:
                ...
                with one.own():
                    yield value  # (in an @asynccontextmanager)

    In an ``__aexit__``, pass the block's exception as ``own=`` instead::

        async def __aexit__(self, *exc_info) -> None:
            with OneCause(own=exc_info[1]):
                await self._nursery_manager.__aexit__(*exc_info)

    Around blocking or asyncio code that re-raises what a trio call raised (a portal, a guest
    run), ``with OneCause():`` alone does it.
    """

    __slots__ = ("_own",)

    def __init__(self, own: BaseException | None = None) -> None:
        self._own = own

    def own(self) -> _Own:
        """A context manager marking its block as the caller's code: an exception leaving it
        is the caller's own, and comes out of this boundary as itself."""
        return _Own(self)

    def __enter__(self) -> OneCause:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        if error is None:
            return
        cause = one_cause(error, self._own)
        self._own = None  # no reference cycle through the traceback
        if cause is error:
            return
        del error, traceback
        # raise_as_itself(cause), inline: so that this frame is not on the traceback either.
        context, traceback = cause.__context__, cause.__traceback__
        try:
            raise cause
        finally:
            cause.__context__ = context
            cause.__traceback__ = traceback
            del cause, context, traceback


def raises_one_cause(function: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Decorate an async function (one that runs a nursery, say) so that what it raises leaves
    through :class:`OneCause`: no exception group with one real cause comes out of it."""

    @functools.wraps(function)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        with OneCause():
            return await function(*args, **kwargs)

    return wrapper


class _Own:
    __slots__ = ("_boundary",)

    def __init__(self, boundary: OneCause) -> None:
        self._boundary = boundary

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        if error is not None:
            self._boundary._own = error


def raise_as_itself(error: BaseException) -> NoReturn:
    """Raise ``error`` as it was: a ``raise`` statement makes the exception being handled (the
    group it came out of) its ``__context__``, and puts this frame on its traceback; both are
    put back (trio's nurseries do the same for the groups they raise)."""
    context, traceback = error.__context__, error.__traceback__
    try:
        raise error
    finally:
        error.__context__ = context
        error.__traceback__ = traceback
        del error, context, traceback  # no reference cycle through this frame


def _is_own(group: BaseExceptionGroup[Any], own: BaseException) -> bool:
    """Whether ``group`` is ``own`` or a copy of it that a cancel scope made while taking its
    cancellations out (``split`` copies the groups it rebuilds; their leaves stay the same)."""
    if group is own:
        return True
    if not isinstance(own, BaseExceptionGroup):
        return False
    mine = {id(leaf) for leaf in _leaves(own)}
    leaves = _leaves(group)
    return bool(leaves) and all(id(leaf) in mine for leaf in leaves)


def _real(error: BaseException) -> bool:
    return not isinstance(error, trio.Cancelled)


def only_cancelled(error: BaseException) -> bool:
    """``error`` is a ``trio.Cancelled``, or a group of nothing else."""
    if isinstance(error, BaseExceptionGroup):
        return all(only_cancelled(member) for member in error.exceptions)
    return isinstance(error, trio.Cancelled)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for member in error.exceptions for leaf in _leaves(member)]
    return [error]
