"""``FallbackProvider``: one call tried on several providers in order, the next one taking over
when one fails before it has shown anything -- and, opted in, after, with the shown deltas
voided by a rewind. How a consumer hears each switch: :class:`FallbackEvent` and
:func:`observe_fallbacks`, in the style of the retries' (``_interface``)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Literal

import attrs
import trio

from protocols.errors import ConfigError, ProviderError
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
    Usage,
)

from ._interface import ProviderInterface, ProviderStream, StreamingProvider

__all__ = [
    "FallbackEvent",
    "FallbackOn",
    "FallbackProvider",
    "FallbackReason",
    "observe_fallbacks",
]

log = logging.getLogger(__name__)

#: Why a call left a provider for the next (see :meth:`FallbackOn.reason`).
FallbackReason = Literal[
    "circuit_open", "context_overflow", "overload", "connection", "code", "retryable"
]

#: The HTTP statuses that say "overloaded": too many requests, unavailable, Anthropic's 529.
OVERLOAD_STATUSES: Final = frozenset({429, 503, 529})
#: The error codes that say "overloaded" (a vendor's own record, not only a status).
OVERLOAD_CODES: Final = frozenset({"rate_limit", "overloaded"})
#: The error codes of a connection that failed (refused, reset, a stuck pool).
CONNECTION_CODES: Final = frozenset({"transport", "pool_timeout"})

#: The longest label of a member (as :attr:`ProviderResult.provider` takes it).
_MAX_LABEL = 256


def _codes(value: Iterable[str]) -> frozenset[str]:
    if isinstance(value, str):
        raise ConfigError("FallbackOn.codes is a collection of error codes, not one string")
    codes = frozenset(value)
    for code in codes:
        if not isinstance(code, str) or not code:
            raise ConfigError(f"FallbackOn.codes holds non-empty strings, not {code!r}")
    return codes


@attrs.frozen
class FallbackOn:
    """Which failures send a call on to the next provider (each class on by default, but
    ``codes``, which adds codes of your own).

    A failure is a :class:`~protocols.errors.ProviderError` (nothing else ever sends a call on:
    a bug, a ``ConfigError`` of the request, a cancel propagate as they are). Its class, as
    :meth:`reason` names it, first match wins:

    * ``circuit_open``: the member's circuit breaker is open (a
      :class:`~actors.providers.ProviderConnection` refused the call without making it);
    * ``context_overflow``: the member said the prompt does not fit its context window (the
      next may have a larger one);
    * ``overload``: HTTP 429, 503 or 529, or the code ``rate_limit`` or ``overloaded``;
    * ``connection``: the connection failed (refused, reset, a stuck pool: the codes
      ``transport`` and ``pool_timeout``);
    * ``code``: the error's ``code``, its vendor's ``vendor_code`` or ``vendor_type``, or its
      HTTP status (as text, ``"401"``) is one of ``codes`` -- say ``{"auth",
      "model_not_found"}`` for a member whose key or model may be wrong;
    * ``retryable``: any other error marked ``retryable`` (a 5xx, a truncated stream, a
      timeout before the first event), and a member's timeout of its whole call (the code
      ``timeout``, which the member does not retry itself).
    """

    circuit_open: bool = True
    context_overflow: bool = True
    overload: bool = True
    connection: bool = True
    retryable: bool = True
    codes: frozenset[str] = attrs.field(default=frozenset(), converter=_codes)

    def reason(self, error: ProviderError) -> FallbackReason | None:
        """The class of ``error`` that sends the call on, or ``None``: it does not."""
        code = error.code
        if code == "circuit_open":
            return "circuit_open" if self.circuit_open else None
        if code == "context_overflow" and self.context_overflow:
            return "context_overflow"
        if self.overload and (error.status in OVERLOAD_STATUSES or code in OVERLOAD_CODES):
            return "overload"
        if self.connection and code in CONNECTION_CODES:
            return "connection"
        codes = self.codes
        if codes and (
            code in codes
            or error.vendor_code in codes
            or error.vendor_type in codes
            or (error.status is not None and str(error.status) in codes)
        ):
            return "code"
        if self.retryable and (error.retryable or code == "timeout"):
            return "retryable"
        return None


@attrs.frozen
class FallbackEvent:
    """A call left member ``provider`` (at ``index``) for ``next``: reported before ``next``
    is called, in the task iterating the stream.

    ``reason`` is the failure's class (:meth:`FallbackOn.reason`), ``code`` and ``status`` the
    error's. ``rewind``: ``provider`` had already streamed deltas -- ``partial`` is what it
    showed -- and they are void: ``next`` answers from the start (only with
    ``FallbackProvider(rewind=True)`` and a consumer that takes rewinds, see
    :func:`observe_fallbacks`). ``usage`` is what the attempt left behind reported, if it
    reported anything (a budget charges it: every attempt is paid for)."""

    provider: str
    index: int
    next: str
    reason: FallbackReason
    code: str
    status: int | None = None
    rewind: bool = False
    partial: ProviderResult | None = None
    usage: Usage | None = None

    def describe(self) -> str:
        """One line saying why: ``"overload (rate_limit, HTTP 429)"``."""
        status = f", HTTP {self.status}" if self.status is not None else ""
        after = ", after it had streamed" if self.rewind else ""
        return f"{self.reason} ({self.code}{status}{after})"


@attrs.frozen
class _Observer:
    listener: Callable[[FallbackEvent], object]
    rewinds: bool


_OBSERVERS: contextvars.ContextVar[tuple[_Observer, ...]] = contextvars.ContextVar(
    "trio_agents_fallback_observers", default=()
)


@contextlib.contextmanager
def observe_fallbacks(
    listener: Callable[[FallbackEvent], object], *, rewinds: bool = False
) -> Iterator[None]:
    """Within the block, every switch of a :class:`FallbackProvider`'s stream iterated by this
    task (or by tasks it starts inside the block) is also reported to ``listener``, before the
    next member is called. A listener that raises is logged and changes nothing. Blocks nest:
    every enclosing listener hears each switch.

    ``rewinds=True`` says the consumer in this block can take a rewind: when a
    ``FallbackProvider(rewind=True)`` voids the deltas it already yielded (an event with
    ``rewind`` set), the consumer drops them -- the stream's :attr:`~ProviderStream.partial`
    and result hold the next member's output only. The innermost block decides: without one
    that takes rewinds, a failure after the first delta is raised as without the opt-in (the
    deltas shown are never silently followed by another member's). An agent's run takes them
    (it logs a ``rewind`` event, see ``docs/providers.md``)."""
    token = _OBSERVERS.set((*_OBSERVERS.get(), _Observer(listener, rewinds)))
    try:
        yield
    finally:
        _OBSERVERS.reset(token)


def _labels(providers: Sequence[ProviderInterface], names: Sequence[str] | None) -> list[str]:
    if names is not None:
        labels = list(names)
        if len(labels) != len(providers):
            raise ConfigError(
                f"FallbackProvider: {len(labels)} names for {len(providers)} providers"
            )
        for label in labels:
            if not isinstance(label, str) or not label or len(label) > _MAX_LABEL:
                raise ConfigError(
                    f"FallbackProvider: a name is a non-empty str of at most {_MAX_LABEL} "
                    f"characters, not {label!r}"
                )
        if len(set(labels)) != len(labels):
            raise ConfigError("FallbackProvider: the names must differ")
        return labels
    labels = []
    for provider in providers:
        label = str(getattr(provider, "name", "") or type(provider).__name__)
        model = getattr(provider, "model", None)
        if isinstance(model, str) and model:
            label = f"{label}:{model}"
        labels.append(label[:_MAX_LABEL])
    seen: dict[str, int] = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    # Two members of one label (two keys for one model): told apart by their position.
    return [
        label if seen[label] == 1 else f"{label[: _MAX_LABEL - 4]}#{index}"
        for index, label in enumerate(labels)
    ]


class FallbackProvider(StreamingProvider):
    """A provider that tries ``providers`` in order, each call on its own.

    Guarantees:

    * A call that fails before its first delta with an error :class:`FallbackOn` (``on=``)
      names goes to the next member, after a :class:`FallbackEvent` is reported
      (``on_fallback=`` and :func:`observe_fallbacks`). A member retries as it is configured to
      (an HTTP adapter's :class:`~actors.providers.RetryPolicy`) before it is left; a
      :class:`~actors.providers.ProviderConnection` whose breaker is open is left without being
      called. Other errors, and the last member's, are raised.
    * After the first delta there is no silent switch: the failure is raised, with the
      stream's ``partial`` what that member showed -- unless ``rewind=True`` and the consumer
      takes rewinds (:func:`observe_fallbacks`; an agent run does): then the attempt is voided
      (a ``FallbackEvent`` with ``rewind`` set) and the next member answers from the start.
    * Every attempt runs in the caller's task and scope: a cancel or a deadline cuts whichever
      member is answering, and the waits of all attempts share the caller's deadline.
    * When no member answers, the error raised is the last member's (its class, code and
      status), with a note for each member left before it (``add_note``: the member, why, and
      its error's message).
    * The result's :attr:`~protocols.messages.ProviderResult.provider` names the member that
      answered (``names=``, or its ``name`` and ``model``: ``"openai-chat:gpt-4.1-mini"``;
      ``#index`` added where two are alike). So does :attr:`~ProviderStream.partial`.

    :meth:`aclose` closes every member that has an ``aclose`` (it owns them).
    """

    def __init__(
        self,
        providers: Sequence[ProviderInterface],
        *,
        on: FallbackOn | None = None,
        rewind: bool = False,
        names: Sequence[str] | None = None,
        on_fallback: Callable[[FallbackEvent], object] | None = None,
        name: str = "fallback",
    ) -> None:
        members = tuple(providers)
        if not members:
            raise ConfigError("FallbackProvider needs at least one provider")
        for member in members:
            if not callable(getattr(member, "stream", None)):
                raise ConfigError(
                    f"FallbackProvider: {type(member).__name__} is not a provider (no stream)"
                )
        self.providers = members
        self.names: tuple[str, ...] = tuple(_labels(members, names))
        self.on = on if on is not None else FallbackOn()
        self.rewind = rewind
        self.on_fallback = on_fallback
        self.name = name

    def __repr__(self) -> str:
        return f"<FallbackProvider {', '.join(self.names)}>"

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        """Stream a completion from the first member that answers (see the class). The first
        member's request is built here (its encoding errors raise here); a later member's
        when the call reaches it."""
        return _FallbackStream(self, messages, tools, options)

    async def aclose(self) -> None:
        """Close every member that has an ``aclose``, all of them even when one fails (the
        first failure is raised after)."""
        failure: BaseException | None = None
        for member in self.providers:
            close = getattr(member, "aclose", None)
            if close is None:
                continue
            try:
                await close()
            except Exception as error:
                failure = failure or error
        if failure is not None:
            raise failure


def _report(event: FallbackEvent, own: Callable[[FallbackEvent], object] | None) -> None:
    listeners = (own, *(observer.listener for observer in _OBSERVERS.get()))
    for listener in listeners:
        if listener is None:
            continue
        try:
            listener(event)
        except Exception:
            log.exception("a fallback listener raised")


def _takes_rewinds() -> bool:
    observers = _OBSERVERS.get()
    return bool(observers) and observers[-1].rewinds


class _FallbackStream(ProviderStream):
    """The members' streams, one after the other (see :class:`FallbackProvider`)."""

    def __init__(
        self,
        fallback: FallbackProvider,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None,
        options: ProviderOptions | None,
    ) -> None:
        self._fallback = fallback
        self._args = (messages, tools, options)
        self._index = 0
        # The current member's stream (None: the next one is not opened yet).
        self._inner: ProviderStream | None = fallback.providers[0].stream(
            messages, tools=tools, options=options
        )
        self._shown = False  # a delta of the current member reached the caller
        self._notes: list[str] = []
        self._result: ProviderResult | None = None

    def _label(self, result: ProviderResult) -> ProviderResult:
        if result.provider is not None:  # a fallback inside this one named its member
            return result
        return attrs.evolve(result, provider=self._fallback.names[self._index])

    @property
    def result(self) -> ProviderResult:
        if self._result is None:
            raise RuntimeError("the stream has not finished: iterate it to the end first")
        return self._result

    @property
    def partial(self) -> ProviderResult:
        """What the answering member showed so far (a voided attempt's output is not in it)."""
        if self._result is not None:
            return self._result
        inner = self._inner
        if inner is None:  # between two members: nothing stands
            return ProviderResult(finish=FinishReason.CANCELLED)
        return self._label(inner.partial)

    def take_ready(self) -> list[Delta]:
        inner = self._inner
        if inner is None:
            return []
        taken = inner.take_ready()
        if taken:
            self._shown = True
        return taken

    async def aclose(self) -> None:
        inner = self._inner
        if inner is not None:
            await inner.aclose()

    async def __anext__(self) -> Delta:
        while True:
            inner = self._inner
            if inner is None:
                messages, tools, options = self._args
                member = self._fallback.providers[self._index]
                inner = self._inner = member.stream(messages, tools=tools, options=options)
            try:
                delta = await inner.__anext__()
            except StopAsyncIteration:
                self._result = self._label(inner.result)
                raise
            except ProviderError as error:
                await self._leave(inner, error)
                continue
            self._shown = True
            return delta

    async def _leave(self, inner: ProviderStream, error: ProviderError) -> None:
        """``inner`` failed with ``error``: raise it, or report the switch and make way for the
        next member."""
        fallback = self._fallback
        index = self._index
        last = index + 1 >= len(fallback.providers)
        reason = fallback.on.reason(error)
        shown = self._shown
        if reason is None or last or (shown and not (fallback.rewind and _takes_rewinds())):
            if self._notes:
                for note in self._notes:
                    error.add_note(note)
                self._notes = []  # (a stream iterated again after its error adds none twice)
            raise error
        partial = inner.partial if shown else None
        usage = partial.usage if partial is not None else None
        if usage is None and error.partial is not None:
            usage = error.partial.usage
        event = FallbackEvent(
            provider=fallback.names[index],
            index=index,
            next=fallback.names[index + 1],
            reason=reason,
            code=error.code,
            status=error.status,
            rewind=shown,
            partial=partial,
            usage=usage,
        )
        self._notes.append(f"fallback: {event.provider} was left: {event.describe()}: {error}")
        # The member's call is over: what it holds (a response, a connection's slot) goes
        # before the next one is called.
        self._inner = None
        with trio.CancelScope(shield=True):
            await inner.aclose()
        self._index = index + 1
        self._shown = False
        _report(event, fallback.on_fallback)
        # A cancel that landed meanwhile stops the call here, before the next member starts.
        await trio.lowlevel.checkpoint_if_cancelled()
