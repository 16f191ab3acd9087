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
     when the provider reported none, the estimate of the content and thinking).

Pure and synchronous: the agent loop calls it and cancels the run when it reports exhaustion.
"""

from __future__ import annotations

import math
from typing import Any, Literal, TypeAlias

import attrs

from .errors import ValidationError

__all__ = [
    "MAX_COUNT",
    "BudgetMeter",
    "BudgetScope",
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
    ``prompt`` served from a prompt cache (``None`` when not reported) and may not exceed it.
    ``a + b`` sums every field (``cached`` stays ``None`` only when both are ``None``).
    """

    prompt: int = attrs.field(default=0, validator=_count)
    completion: int = attrs.field(default=0, validator=_count)
    total: int = attrs.field(
        default=attrs.Factory(_default_total, takes_self=True), validator=_count
    )
    cached: int | None = attrs.field(default=None)

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

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        cached = None
        if self.cached is not None or other.cached is not None:
            cached = (self.cached or 0) + (other.cached or 0)
        return Usage(
            prompt=self.prompt + other.prompt,
            completion=self.completion + other.completion,
            total=self.total + other.total,
            cached=cached,
        )

    @classmethod
    def sanitize(
        cls,
        *,
        prompt: object = None,
        completion: object = None,
        total: object = None,
        cached: object = None,
    ) -> Usage:
        """Build a valid :class:`Usage` from whatever numbers a provider reported.

        Guarantees: never raises. Each count goes through
        :func:`sanitize_count`; a missing or too-small ``total`` becomes
        ``prompt + completion``; ``cached`` stays ``None`` when not reported and is clamped to
        ``prompt`` otherwise.
        """
        p = sanitize_count(prompt)
        c = sanitize_count(completion)
        t = max(sanitize_count(total), p + c)
        k = None if cached is None else min(sanitize_count(cached), p)
        return cls(prompt=p, completion=c, total=t, cached=k)


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
    current turn's estimate; ``exhausted`` whether the budget's count has reached its maximum,
    the moment the run must be cut. An estimate that overshot is given back at reconcile: the
    draw of a finished turn is exactly its reported usage.
    """

    __slots__ = ("_chars", "_estimate", "_settled", "budget")

    def __init__(self, budget: TokenBudget) -> None:
        if not isinstance(budget, TokenBudget):
            raise ValidationError(f"BudgetMeter takes a TokenBudget, not {type(budget).__name__}")
        self.budget = budget
        self._settled = Usage()  # the draws of finished turns
        self._chars = 0  # content characters of the current turn
        self._estimate = 0  # the current turn's content estimate, in tokens

    @property
    def consumed(self) -> Usage:
        """All tokens charged so far (the current turn's estimate included)."""
        if not self._estimate:
            return self._settled
        return self._settled + Usage(completion=self._estimate, total=self._estimate)

    @property
    def used(self) -> int:
        """The budget's own count so far."""
        return int(getattr(self.consumed, self.budget.scope))

    @property
    def remaining(self) -> int:
        """What is left of the budget (0 once exhausted)."""
        return max(self.budget.max - self.used, 0)

    @property
    def exhausted(self) -> bool:
        """The budget's count has reached its maximum."""
        return self.used >= self.budget.max

    def begin_turn(self) -> None:
        """A new provider turn starts: its estimate begins at zero."""
        self._chars = 0
        self._estimate = 0

    def charge_content(self, text: str) -> bool:
        """Charge a content delta by estimate; returns :attr:`exhausted` afterwards."""
        self._chars += len(text)
        self._estimate = -(-self._chars // 4)  # estimate_tokens of the turn's content so far
        return self.exhausted

    def charge(self, usage: Usage | None, *, text: str = "") -> Usage:
        """Charge a call made for the run outside its turns (a compaction's summary) and return
        the draw: the reported ``usage``, or with none reported the estimate of ``text`` (the
        answer). The current turn's estimate is left as it is."""
        if usage is None:
            tokens = estimate_tokens(text)
            usage = Usage(completion=tokens, total=tokens)
        self._settled = self._settled + usage
        return usage

    def reconcile(self, usage: Usage | None, *, thinking: str = "") -> Usage:
        """End the turn and return its draw: the reported ``usage``, or with none reported the
        estimate of the content plus ``thinking``. The estimate is replaced, not added to."""
        if usage is None:
            tokens = self._estimate + estimate_tokens(thinking)
            draw = Usage(completion=tokens, total=tokens)
        else:
            draw = usage
        self._settled = self._settled + draw
        self.begin_turn()
        return draw
