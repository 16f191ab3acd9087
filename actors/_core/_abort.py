"""``Abort``: a first-class cancel token that can be passed around, combined and bound to scopes."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

__all__ = ["Abort"]


class Abort:
    """A cancel token: something that can be tripped once, with a reason, and observed.

    Guarantees:

    * :meth:`cancel` is idempotent: the first reason wins and later calls change nothing.
    * :meth:`open_scope` runs a ``with`` block in a new :class:`trio.CancelScope` tied to the
      token, and :meth:`bind` ties an existing scope for the duration of a ``with`` block:
      tripping the token cancels the scope with ``cancel(reason=...)`` (at once if the token was
      already tripped). The binding is a plain callback, removed when the block exits -- no
      task watches the token, so nothing outlives the scope.
    * :meth:`any` derives a token that trips when any of its sources trips, keeping the first
      source's reason. Sources hold derived tokens only weakly, so deriving tokens from a
      long-lived source (a per-agent token, say) never accumulates garbage.

    Tokens are not thread-safe: trip them from trio code (or via ``trio.from_thread.run_sync``).
    """

    __slots__ = ("__weakref__", "_callbacks", "_derived", "_event", "_reason", "_sources")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._event: trio.Event | None = None
        self._callbacks: dict[object, Callable[[str], object]] = {}
        # Made when a token is first derived from this one (most tokens never are).
        self._derived: weakref.WeakSet[Abort] | None = None
        # A derived token holds its sources strongly (so a chain of derived tokens stays intact
        # while its last link is alive); sources hold derived tokens only weakly.
        self._sources: tuple[Abort, ...] = ()

    def __repr__(self) -> str:
        state = f"cancelled, reason={self._reason!r}" if self.cancelled else "armed"
        return f"<Abort {state}>"

    @property
    def cancelled(self) -> bool:
        """Whether the token has been tripped."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """The reason given by the first :meth:`cancel`, or ``None`` while not tripped."""
        return self._reason

    def cancel(self, reason: str = "cancelled") -> None:
        """Trip the token (no-op if already tripped): wake waiters, cancel bound scopes, trip
        derived tokens, all with ``reason``."""
        if self._reason is not None:
            return
        self._reason = reason = reason or "cancelled"
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, {}
        for callback in callbacks.values():
            callback(reason)
        derived_tokens, self._derived = self._derived, None
        if derived_tokens:
            for derived in list(derived_tokens):
                derived.cancel(reason)
        self._sources = ()

    async def wait(self) -> str:
        """Wait until the token is tripped and return the reason (at once if it already is)."""
        if self._reason is None:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        else:
            await trio.lowlevel.checkpoint()
        assert self._reason is not None
        return self._reason

    def on_cancel(self, callback: Callable[[str], object]) -> Callable[[], None]:
        """Call ``callback(reason)`` once, synchronously, when the token trips (at once if it
        already has). Returns a function that removes the callback (a no-op once it ran); a
        callback held by a long-lived token should be removed when it is no longer wanted."""
        if self._reason is not None:
            callback(self._reason)
            return _nothing
        key = object()
        self._callbacks[key] = callback

        def remove() -> None:
            self._callbacks.pop(key, None)

        return remove

    @contextmanager
    def open_scope(self) -> Iterator[trio.CancelScope]:
        """Enter a new :class:`trio.CancelScope` bound to this token for the ``with`` block.

        ``with token.open_scope() as scope: ...`` -- the block is cancelled (with the token's
        reason) when the token trips, at once if it already has; afterwards
        ``scope.cancelled_caught`` says whether that happened.
        """
        with trio.CancelScope() as scope, self.bind(scope):
            yield scope

    @contextmanager
    def bind(self, scope: trio.CancelScope) -> Iterator[trio.CancelScope]:
        """Cancel ``scope`` (entered elsewhere, e.g. a nursery's ``cancel_scope``) with this
        token's reason if the token trips during the ``with`` block. Yields ``scope``."""
        if self._reason is not None:
            scope.cancel(reason=self._reason)
            yield scope
            return
        key = object()  # one per binding: the same scope may be bound more than once
        self._callbacks[key] = lambda reason: scope.cancel(reason=reason)
        try:
            yield scope
        finally:
            self._callbacks.pop(key, None)

    @classmethod
    def any(cls, *tokens: Abort) -> Abort:
        """A new token that trips as soon as any of ``tokens`` trips, with that token's reason.

        If one of them is already tripped, the new token is born tripped with the reason of the
        first such token in argument order. With no tokens it is a token nothing else trips.
        """
        derived = cls()
        for token in tokens:
            if token._reason is not None:
                derived.cancel(token._reason)
                return derived
        derived._sources = tokens
        for token in tokens:
            if token._derived is None:
                token._derived = weakref.WeakSet()
            token._derived.add(derived)
        return derived


def _nothing() -> None:
    """What :meth:`Abort.on_cancel` returns for a token that had already tripped."""
