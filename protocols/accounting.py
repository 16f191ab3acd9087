"""What tokens cost: the usage a provider reports, the estimates charged when it reports none,
and the budgets that cap a run.

* :class:`Usage` is the token usage of one or more provider calls; :func:`sanitize_count` and
  :meth:`Usage.sanitize` turn whatever numbers a provider reports into sane counts.
* :func:`estimate_tokens` is the estimate charged mid-stream and when no usage is reported. Text
  lengths are counted in Unicode code points (Python ``len``), never bytes or UTF-16 units.
* A :class:`TokenBudget` caps one kind of token count (``total``, ``completion`` or ``prompt``). A
  :class:`BudgetMeter` charges it in two steps per provider turn, so that a runaway answer is cut
  mid-stream and the final draw is still exactly what the provider reported:

  1. While a turn streams, each *content* delta is charged by estimate (:func:`estimate_tokens`
     of the turn's content so far; only the increase is charged, as completion and total
     tokens). Thinking is not charged mid-stream.
  2. When the turn ends, :meth:`BudgetMeter.reconcile` replaces the estimate with the reported
     usage: it charges the prompt tokens, and the completion and total tokens beyond what the
     estimate already charged. The meter's draw for the turn then equals the reported usage (or,
     when the provider reported none, the estimate of the content and thinking -- completion
     tokens only: the prompt it was sent is not estimated).

  A meter never passes a partial count off as the whole: once it has charged an estimate for
  usage nobody reported -- or a meter drawing on it has -- its :attr:`~BudgetMeter.estimated`
  (and a :class:`TeamBudget`'s) says so.

Pure and synchronous: the agent loop calls it and cancels the run when it reports exhaustion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from .errors import ValidationError

__all__ = [
    "MAX_COUNT",
    "BudgetMeter",
    "BudgetScope",
    "TeamBudget",
    "TokenBudget",
    "Usage",
    "estimate_tokens",
    "sanitize_count",
]

# ---------------------------------------------------------------------------------------------
# Counts and estimates

#: The largest token count kept; bigger reports are clamped to it (2**53 - 1, the largest integer
#: every JSON reader represents exactly).
MAX_COUNT = 2**53 - 1


def estimate_tokens(text: str) -> int:
    """Estimate the tokens in ``text`` as ``ceil(code points / 4)``.

    Guarantees: 0 for the empty string, at least 1 for any non-empty string, monotonic in length.
    """
    return -(-len(text) // 4)


def sanitize_count(value: object) -> int:
    """Turn a provider-reported token count into a sane non-negative integer.

    Guarantees: the result is an ``int`` in ``[0, MAX_COUNT]``. Missing values (``None``), booleans,
    non-numbers, NaN, infinities and negatives become 0; fractional numbers are rounded up (a
    budget never under-counts); numeric strings such as ``"12"`` are read as numbers; huge values
    are clamped to :data:`MAX_COUNT`.
    """
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        number: float | int = value
    elif isinstance(value, float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip()) if value.strip() else 0
        except ValueError:
            return 0
    else:
        return 0
    if isinstance(number, float):
        if not math.isfinite(number) or number <= 0:
            return 0
        if number >= MAX_COUNT:
            return MAX_COUNT
        return math.ceil(number)
    return min(max(number, 0), MAX_COUNT)


# ---------------------------------------------------------------------------------------------
# Usage


_new = object.__new__
_set = object.__setattr__


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be an int >= 0, not {value!r}"
        )


def _default_total(usage: Usage) -> int:
    # Runs before the validators: leave bad parts for them to report clearly.
    parts = (usage.prompt, usage.completion)
    if all(isinstance(part, int) and not isinstance(part, bool) for part in parts):
        return usage.prompt + usage.completion
    return 0


@attrs.frozen
class Usage:
    """Token usage of one or more provider calls.

    ``total`` defaults to ``prompt + completion`` and may not be smaller; ``cached`` is the part of
    ``prompt`` read from a prompt cache (``None`` when not reported) and ``cache_write`` the part
    written to one (``None`` when not reported; vendors that bill cache writes, as Anthropic
    does, report it): together they may not exceed ``prompt``. ``reasoning`` is the part of
    ``completion`` a reasoning model spent thinking (``None`` when not reported) and may not
    exceed it. ``a + b`` sums every field (``cached``, ``cache_write`` and ``reasoning`` each
    stay ``None`` only when both are ``None``).
    """

    prompt: int = attrs.field(default=0, validator=_count)
    completion: int = attrs.field(default=0, validator=_count)
    total: int = attrs.field(
        default=attrs.Factory(_default_total, takes_self=True), validator=_count
    )
    cached: int | None = attrs.field(default=None)
    reasoning: int | None = attrs.field(default=None)
    cache_write: int | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.total < self.prompt + self.completion:
            raise ValidationError(
                f"Usage.total ({self.total}) is less than prompt + completion "
                f"({self.prompt} + {self.completion})"
            )
        if self.cached is not None:
            _count(self, attrs.fields(Usage).cached, self.cached)
            if self.cached > self.prompt:
                raise ValidationError(
                    f"Usage.cached ({self.cached}) exceeds Usage.prompt ({self.prompt})"
                )
        if self.cache_write is not None:
            _count(self, attrs.fields(Usage).cache_write, self.cache_write)
            if self.cache_write + (self.cached or 0) > self.prompt:
                raise ValidationError(
                    f"Usage.cached + Usage.cache_write ({self.cached or 0} + {self.cache_write}) "
                    f"exceeds Usage.prompt ({self.prompt})"
                )
        if self.reasoning is not None:
            _count(self, attrs.fields(Usage).reasoning, self.reasoning)
            if self.reasoning > self.completion:
                raise ValidationError(
                    f"Usage.reasoning ({self.reasoning}) exceeds Usage.completion "
                    f"({self.completion})"
                )

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        cached = None
        if self.cached is not None or other.cached is not None:
            cached = (self.cached or 0) + (other.cached or 0)
        reasoning = None
        if self.reasoning is not None or other.reasoning is not None:
            reasoning = (self.reasoning or 0) + (other.reasoning or 0)
        cache_write = None
        if self.cache_write is not None or other.cache_write is not None:
            cache_write = (self.cache_write or 0) + (other.cache_write or 0)
        # The sum of two valid usages is valid (every bound holds part by part): made without
        # the validators, as a run adds a usage per provider call.
        total = _new(Usage)
        _set(total, "prompt", self.prompt + other.prompt)
        _set(total, "completion", self.completion + other.completion)
        _set(total, "total", self.total + other.total)
        _set(total, "cached", cached)
        _set(total, "reasoning", reasoning)
        _set(total, "cache_write", cache_write)
        return total

    @classmethod
    def sanitize(
        cls,
        *,
        prompt: object = None,
        completion: object = None,
        total: object = None,
        cached: object = None,
        reasoning: object = None,
        cache_write: object = None,
    ) -> Usage:
        """Build a valid :class:`Usage` from whatever numbers a provider reported.

        Guarantees: never raises. Each count goes through
        :func:`sanitize_count`; a missing or too-small ``total`` becomes
        ``prompt + completion``; ``cached`` and ``reasoning`` stay ``None`` when not reported
        and are clamped to ``prompt`` and ``completion`` otherwise; ``cache_write`` likewise stays
        ``None`` when not reported and is clamped to what ``prompt`` leaves beside ``cached``.
        """
        p = sanitize_count(prompt)
        c = sanitize_count(completion)
        t = max(sanitize_count(total), p + c)
        k = None if cached is None else min(sanitize_count(cached), p)
        r = None if reasoning is None else min(sanitize_count(reasoning), c)
        w = None if cache_write is None else min(sanitize_count(cache_write), p - (k or 0))
        return cls(prompt=p, completion=c, total=t, cached=k, reasoning=r, cache_write=w)


# ---------------------------------------------------------------------------------------------
# Budgets

#: Which count a budget caps.
BudgetScope: TypeAlias = Literal["total", "completion", "prompt"]


def _maximum(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"TokenBudget.max must be an integer >= 0, not {value!r}")


def _scope(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in ("total", "completion", "prompt"):
        raise ValidationError(
            f"TokenBudget.scope must be 'total', 'completion' or 'prompt', not {value!r}"
        )


@attrs.frozen
class TokenBudget:
    """At most ``max`` tokens of the ``scope`` count for one run (``max=0``: no call at all)."""

    max: int = attrs.field(validator=_maximum)
    scope: BudgetScope = attrs.field(default="total", validator=_scope)


class BudgetMeter:
    """Charges one run against a :class:`TokenBudget` (see the module docstring).

    ``consumed`` is everything charged so far -- the reported usage of finished turns plus the
    current turn's estimate, plus what meters drawing on this one charged (a delegated run
    draws on its parent's meter; several runs draw on one :class:`TeamBudget`). ``exhausted``
    says whether the budget's count has reached its maximum, the moment the run must be cut. An
    estimate that overshot is given back at reconcile: the draw of a finished turn is exactly
    its reported usage.

    ``budget`` may be ``None``: the meter only counts, and passes its charges on to ``parents``.
    Every charge reaches every parent (and theirs) at once, in the same call: a charge is
    atomic for everyone watching. A meter calls the callbacks registered with :meth:`on_trip`
    once, when it first becomes exhausted, whoever's charge did it.
    """

    __slots__ = (
        "_chars",
        "_drawn",
        "_estimate",
        "_estimated",
        "_settled",
        "_tripped",
        "_trips",
        "budget",
        "parents",
    )

    def __init__(
        self, budget: TokenBudget | None = None, *, parents: Sequence[BudgetMeter] = ()
    ) -> None:
        if budget is not None and not isinstance(budget, TokenBudget):
            raise ValidationError(f"BudgetMeter takes a TokenBudget, not {type(budget).__name__}")
        for parent in parents:
            if not isinstance(parent, BudgetMeter):
                raise ValidationError(f"a meter draws on BudgetMeters, not {type(parent).__name__}")
        self.budget = budget
        #: The meters this one draws on: each charge here is charged to them too.
        self.parents = _without_shared_ancestors(tuple(parents))
        self._settled = Usage()  # the draws of finished turns
        self._chars = 0  # content characters of the current turn
        self._estimate = 0  # the current turn's content estimate, in tokens
        self._drawn = [0, 0, 0]  # prompt, completion, total charged by meters drawing on this one
        self._trips: list[Callable[[], None]] = []
        self._tripped = False
        self._estimated = False

    @property
    def estimated(self) -> bool:
        """What this meter has counted includes estimates: a charge made without reported
        usage (:meth:`reconcile` or :meth:`charge` given ``None``), here or by a meter drawing
        on this one. The in-flight estimate of a turn that is still streaming does not count:
        :meth:`reconcile` replaces it."""
        return self._estimated

    def _guessed(self) -> None:
        # An estimate was charged here: this meter and every meter it draws on count one.
        stack: list[BudgetMeter] = [self]
        while stack:
            meter = stack.pop()
            if not meter._estimated:
                meter._estimated = True
                stack.extend(meter.parents)

    @property
    def own(self) -> Usage:
        """What this meter's own run charged (its turns, the current estimate included)."""
        if not self._estimate:
            return self._settled
        return self._settled + Usage(completion=self._estimate, total=self._estimate)

    @property
    def consumed(self) -> Usage:
        """All tokens charged so far: :attr:`own` plus what meters drawing on this one
        charged."""
        own = self.own
        prompt, completion, total = self._drawn
        if not (prompt or completion or total):
            return own
        return Usage(
            prompt=own.prompt + prompt,
            completion=own.completion + completion,
            total=own.total + total,
            cached=own.cached,
            reasoning=own.reasoning,
            cache_write=own.cache_write,
        )

    def _count(self) -> int:
        scope = "total" if self.budget is None else self.budget.scope
        settled = self._settled
        if scope == "prompt":
            return settled.prompt + self._drawn[0]
        if scope == "completion":
            return settled.completion + self._estimate + self._drawn[1]
        return settled.total + self._estimate + self._drawn[2]

    @property
    def used(self) -> int:
        """The budget's own count so far (``total`` when there is no budget)."""
        return self._count()

    @property
    def remaining(self) -> int | None:
        """What is left of the budget (0 once exhausted; ``None`` without a budget)."""
        if self.budget is None:
            return None
        return max(self.budget.max - self._count(), 0)

    @property
    def exhausted(self) -> bool:
        """The budget's count has reached its maximum (never, without a budget)."""
        return self.budget is not None and self._count() >= self.budget.max

    @property
    def spent(self) -> bool:
        """This meter or any meter it draws on is exhausted: no charge may be made."""
        if self.exhausted:
            return True
        return any(parent.spent for parent in self.parents)

    def on_trip(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once when this meter becomes exhausted (at once if it is);
        returns a function that unregisters it."""
        if self._tripped or self.exhausted:
            self._tripped = True
            callback()
            return lambda: None
        self._trips.append(callback)

        def remove() -> None:
            if callback in self._trips:
                self._trips.remove(callback)

        return remove

    def _changed(self, prompt: int, completion: int, total: int) -> None:
        # This meter's count moved by the given amounts: pass them up, then trip if exhausted.
        for parent in self.parents:
            drawn = parent._drawn
            drawn[0] += prompt
            drawn[1] += completion
            drawn[2] += total
            parent._changed(prompt, completion, total)
        if not self._tripped and self.exhausted:
            self._tripped = True
            trips, self._trips = self._trips, []
            for callback in trips:
                callback()

    def begin_turn(self) -> None:
        """A new provider turn starts: its estimate begins at zero."""
        if self._estimate:
            estimate, self._estimate = self._estimate, 0
            self._changed(0, -estimate, -estimate)
        self._chars = 0

    def charge_content(self, text: str) -> bool:
        """Charge a content delta by estimate; returns :attr:`spent` afterwards."""
        self._chars += len(text)
        estimate = -(-self._chars // 4)  # estimate_tokens of the turn's content so far
        grown = estimate - self._estimate
        if grown:
            self._estimate = estimate
            self._changed(0, grown, grown)
        return self.spent

    def charge(self, usage: Usage | None, *, text: str = "", estimated: bool = False) -> Usage:
        """Charge a call made for the run outside its turns (a compaction's summary, what an
        earlier attempt of a continued run spent) and return the draw: the reported ``usage``,
        or with none reported the estimate of ``text`` (the answer) -- then, or when
        ``estimated`` says ``usage`` is an estimate itself, the meter is :attr:`estimated`.
        The current turn's estimate is left as it is."""
        if usage is None:
            tokens = estimate_tokens(text)
            usage = Usage(completion=tokens, total=tokens)
            estimated = True
        if estimated:
            self._guessed()
        self._settled = self._settled + usage
        self._changed(usage.prompt, usage.completion, usage.total)
        return usage

    def reconcile(self, usage: Usage | None, *, thinking: str = "") -> Usage:
        """End the turn and return its draw: the reported ``usage``, or with none reported the
        estimate of the content plus ``thinking`` -- then :attr:`estimated`. The estimate is
        replaced, not added to."""
        estimate = self._estimate
        if usage is None:
            tokens = estimate + estimate_tokens(thinking)
            draw = Usage(completion=tokens, total=tokens)
            self._guessed()
        else:
            draw = usage
        self._settled = self._settled + draw
        self._estimate = 0
        self._chars = 0
        self._changed(draw.prompt, draw.completion - estimate, draw.total - estimate)
        return draw


def _ancestors(meter: BudgetMeter) -> set[int]:
    seen: set[int] = set()
    stack = list(meter.parents)
    while stack:
        current = stack.pop()
        if id(current) not in seen:
            seen.add(id(current))
            stack.extend(current.parents)
    return seen


def _without_shared_ancestors(parents: tuple[BudgetMeter, ...]) -> tuple[BudgetMeter, ...]:
    # A meter reached through two parents would count every charge twice: keep each once, by
    # its nearest path (a team budget that a parent run already draws on is not drawn on again).
    kept: list[BudgetMeter] = []
    for parent in parents:
        others = [other for other in parents if other is not parent]
        if any(id(parent) in _ancestors(other) for other in others):
            continue
        if any(parent is other for other in kept):
            continue
        kept.append(parent)
    return tuple(kept)


class TeamBudget:
    """One budget that several runs -- of one agent or many, at once -- draw from.

    Pass it as a run's (or an agent's) ``budget``: each run keeps its own usage and charges
    the team as it streams; the first charge that reaches ``max`` cuts every run drawing from
    it (``stop="budget"``), and no run starts a provider call once it is spent. A
    :class:`TokenBudget`, by contrast, is a fresh allowance for each run.
    """

    __slots__ = ("budget", "meter")

    def __init__(self, max: int, scope: BudgetScope = "total") -> None:
        self.budget = TokenBudget(max, scope)
        #: The meter the runs draw on.
        self.meter = BudgetMeter(self.budget)

    @property
    def consumed(self) -> Usage:
        """Everything the team's runs charged so far."""
        return self.meter.consumed

    @property
    def used(self) -> int:
        """The budget's count so far."""
        return self.meter.used

    @property
    def remaining(self) -> int:
        """What is left (0 once spent)."""
        return max(self.budget.max - self.meter.used, 0)

    @property
    def exhausted(self) -> bool:
        """The budget is spent."""
        return self.meter.exhausted

    @property
    def estimated(self) -> bool:
        """What it counts includes estimates: some run drawing on it was charged by estimate
        for usage its provider did not report (see :attr:`BudgetMeter.estimated`)."""
        return self.meter.estimated

    def __repr__(self) -> str:
        mark = "~" if self.estimated else ""
        return f"<TeamBudget {mark}{self.used}/{self.budget.max} {self.budget.scope}>"
