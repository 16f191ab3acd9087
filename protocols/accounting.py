"""Token budgets: how much a run may spend, and the meter that charges it as the run goes.

A :class:`TokenBudget` caps one kind of token count (``total``, ``completion`` or ``prompt``). A
:class:`BudgetMeter` charges it in two steps per provider turn, so that a runaway answer is cut
mid-stream and the final draw is still exactly what the provider reported:

1. While a turn streams, each *content* delta is charged by estimate
   (:func:`~protocols.budget.estimate_tokens` of the turn's content so far; only the increase is
   charged, as completion and total tokens). Thinking is not charged mid-stream.
2. When the turn ends, :meth:`BudgetMeter.reconcile` replaces the estimate with the reported
   usage: it charges the prompt tokens, and the completion and total tokens beyond what the
   estimate already charged. The meter's draw for the turn then equals the reported usage (or,
   when the provider reported none, the estimate of the content and thinking).

Pure and synchronous: the agent loop calls it and cancels the run when it reports exhaustion.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from .budget import estimate_tokens
from .errors import ValidationError
from .messages import Usage

__all__ = ["BudgetMeter", "BudgetScope", "TokenBudget"]

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
