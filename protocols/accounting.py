"""What tokens cost: the usage a provider reports, the estimates charged when it reports none,
what it costs in money, and the budgets that cap a run.

* :class:`Cost` is money with its provenance (``reported``, ``computed``, ``unavailable``; 004
  S13): an exact decimal amount in an ISO 4217 currency, summed so that an unknown part makes
  the whole unknown, for good, and currencies never mix. :attr:`Usage.cost` carries it.
* :class:`Prices` are a model's rates per million tokens, :class:`PriceTable` a table of them
  (with a fallback :class:`Pricing` source, such as ``actors.GenAIPrices``); the arithmetic of
  applying them is here, exact.

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

  A budget's ``max_cost`` caps money the same way, given the run's :class:`Prices`: the
  content estimate priced at the output rate mid-stream, the turn's cost at reconcile.

Pure and synchronous: the agent loop calls it and cancels the run when it reports exhaustion.
Counts, costs, prices and :class:`Usage` are defined in :mod:`protocols._usage`; the budgets here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Literal, TypeAlias

import attrs

from ._usage import (
    MAX_COUNT,
    Cost,
    CostProvenance,
    PriceKey,  # noqa: F401 - a name of this module before the split
    Prices,
    PriceTable,
    Pricing,
    Usage,
    _currency,
    _money,
    _plain,
    estimate_tokens,
    sanitize_count,
)
from .errors import ConfigError, ValidationError

__all__ = [
    "MAX_COUNT",
    "BudgetMeter",
    "BudgetScope",
    "Cost",
    "CostProvenance",
    "PriceTable",
    "Prices",
    "Pricing",
    "TeamBudget",
    "TokenBudget",
    "Usage",
    "estimate_tokens",
    "sanitize_count",
]


# ---------------------------------------------------------------------------------------------
# Budgets

#: Which count a budget caps.
BudgetScope: TypeAlias = Literal["total", "completion", "prompt"]


def _maximum(instance: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"TokenBudget.max must be an integer >= 0 or None, not {value!r}")


def _scope(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in ("total", "completion", "prompt"):
        raise ValidationError(
            f"TokenBudget.scope must be 'total', 'completion' or 'prompt', not {value!r}"
        )


def _to_cap(value: object) -> Decimal | None:
    return None if value is None else _money(value, "TokenBudget.max_cost")


_ZERO = Decimal(0)


@attrs.frozen
class TokenBudget:
    """At most ``max`` tokens of the ``scope`` count for one run (``max=0``: no call at all),
    and/or at most ``max_cost`` of money in ``currency`` (an exact decimal: give a string,
    ``max_cost="0.50"``; ``max_cost=0``: no call at all). Give one or both; whichever is reached
    first cuts the run (``stop="budget"``).

    Money is charged like tokens (see :class:`BudgetMeter`): mid-stream, the estimate of the
    completion tokens priced at the model's output rate; at the turn's end, the turn's cost
    (what the vendor reported, or the price table computed), or -- when that is unknown --
    its tokens priced at the model's rates. A run with a ``max_cost`` needs prices for its
    model: without any, it is refused before its first call (a
    :class:`~protocols.errors.ConfigError`), never left uncapped.
    """

    max: int | None = attrs.field(default=None, validator=_maximum)
    scope: BudgetScope = attrs.field(default="total", validator=_scope)
    max_cost: Decimal | None = attrs.field(default=None, kw_only=True, converter=_to_cap)
    currency: str = attrs.field(default="USD", kw_only=True, validator=_currency)

    def __attrs_post_init__(self) -> None:
        if self.max is None and self.max_cost is None:
            raise ValidationError("a TokenBudget caps tokens (max=), money (max_cost=) or both")


class BudgetMeter:
    """Charges one run against a :class:`TokenBudget` (see the module docstring).

    ``consumed`` is everything charged so far -- the reported usage of finished turns plus the
    current turn's estimate, plus what meters drawing on this one charged (a delegated run
    draws on its parent's meter; several runs draw on one :class:`TeamBudget`). ``exhausted``
    says whether the budget's count has reached its maximum, the moment the run must be cut. An
    estimate that overshot is given back at reconcile: the draw of a finished turn is exactly
    its reported usage.

    Money: given ``prices`` (the run's model's rates), the meter also charges :attr:`cost`,
    in the same two steps -- the content estimate priced at ``prices.output`` while a turn
    streams, then the turn's :attr:`Usage.cost` when it is known in the meter's currency (else
    its tokens priced at ``prices``, and the meter is :attr:`estimated`). Without ``prices`` a
    meter charges no money of its own (what meters drawing on it charge still reaches it).

    ``budget`` may be ``None``: the meter only counts, and passes its charges on to ``parents``.
    Every charge reaches every parent (and theirs) at once, in the same call: a charge is
    atomic for everyone watching. A meter calls the callbacks registered with :meth:`on_trip`
    once, when it first becomes exhausted, whoever's charge did it.
    """

    __slots__ = (
        "_chars",
        "_drawn",
        "_drawn_cost",
        "_estimate",
        "_estimate_cost",
        "_estimated",
        "_settled",
        "_settled_cost",
        "_tripped",
        "_trips",
        "budget",
        "parents",
        "prices",
    )

    def __init__(
        self,
        budget: TokenBudget | None = None,
        *,
        parents: Sequence[BudgetMeter] = (),
        prices: Prices | None = None,
    ) -> None:
        if budget is not None and not isinstance(budget, TokenBudget):
            raise ValidationError(f"BudgetMeter takes a TokenBudget, not {type(budget).__name__}")
        for parent in parents:
            if not isinstance(parent, BudgetMeter):
                raise ValidationError(f"a meter draws on BudgetMeters, not {type(parent).__name__}")
        if prices is not None and not isinstance(prices, Prices):
            raise ValidationError(f"BudgetMeter prices must be Prices, not {prices!r}")
        self.budget = budget
        #: The meters this one draws on: each charge here is charged to them too.
        self.parents = _without_shared_ancestors(tuple(parents))
        #: The rates this meter's own run is charged money at (``None``: it charges none).
        self.prices = prices
        self._settled = Usage()  # the draws of finished turns
        self._chars = 0  # content characters of the current turn
        self._estimate = 0  # the current turn's content estimate, in tokens
        self._drawn = [0, 0, 0]  # prompt, completion, total charged by meters drawing on this one
        self._settled_cost = _ZERO  # money: the draws of finished turns
        self._estimate_cost = _ZERO  # the current turn's content estimate, priced
        self._drawn_cost = _ZERO  # charged by meters drawing on this one
        self._trips: list[Callable[[], None]] = []
        self._tripped = False
        self._estimated = False

    def check_prices(self) -> None:
        """Refuse (:class:`~protocols.errors.ConfigError`) a run whose meter could never trip
        a money cap: this meter, or one it draws on, caps cost but this one has no
        :attr:`prices` (no price is known for the run's model), or prices in another currency
        than a cap's. Called when the run starts, before any provider call."""
        prices = self.prices
        for meter in self._lineage():
            budget = meter.budget
            if budget is None or budget.max_cost is None:
                continue
            if prices is None:
                raise ConfigError(
                    f"a budget caps cost (max_cost={format(budget.max_cost, 'f')} "
                    f"{budget.currency}) but no price is known for the run's model: give the "
                    "agent pricing= that prices it (a PriceTable, or GenAIPrices from the "
                    "'prices' extra)"
                )
            if prices.currency != budget.currency:
                raise ConfigError(
                    f"a budget caps cost in {budget.currency} but the run's model is priced "
                    f"in {prices.currency}: currencies are never converted"
                )

    def _lineage(self) -> list[BudgetMeter]:
        seen: set[int] = set()
        found: list[BudgetMeter] = []
        stack: list[BudgetMeter] = [self]
        while stack:
            meter = stack.pop()
            if id(meter) not in seen:
                seen.add(id(meter))
                found.append(meter)
                stack.extend(meter.parents)
        return found

    @property
    def caps_cost(self) -> bool:
        """This meter, or one it draws on, caps money (a ``max_cost``)."""
        return any(
            meter.budget is not None and meter.budget.max_cost is not None
            for meter in self._lineage()
        )

    @property
    def estimated(self) -> bool:
        """What this meter has counted includes estimates: a charge made without reported
        usage (:meth:`reconcile` or :meth:`charge` given ``None``), or money charged at the
        meter's ``prices`` because a turn's cost was unknown -- here or by a meter drawing on
        this one. The in-flight estimate of a turn that is still streaming does not count:
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
        """The tokens this meter's own run charged (its turns, the current estimate
        included); money is :attr:`cost`."""
        if not self._estimate:
            return self._settled
        return self._settled + Usage(completion=self._estimate, total=self._estimate)

    @property
    def consumed(self) -> Usage:
        """All tokens charged so far: :attr:`own` plus what meters drawing on this one
        charged (money is :attr:`cost`)."""
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

    @property
    def cost(self) -> Decimal:
        """All money charged so far (this run's, its in-flight estimate included, and what
        meters drawing on this one charged), in the currency of its prices or cap."""
        return self._settled_cost + self._estimate_cost + self._drawn_cost

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
        """What is left of the token budget (0 once exhausted; ``None`` without a token
        cap)."""
        if self.budget is None or self.budget.max is None:
            return None
        return max(self.budget.max - self._count(), 0)

    @property
    def remaining_cost(self) -> Decimal | None:
        """What is left of the money cap (0 once reached; ``None`` without one)."""
        if self.budget is None or self.budget.max_cost is None:
            return None
        return max(self.budget.max_cost - self.cost, _ZERO)

    @property
    def exhausted(self) -> bool:
        """The budget's token count or money has reached its maximum (never, without a
        budget)."""
        budget = self.budget
        if budget is None:
            return False
        if budget.max is not None and self._count() >= budget.max:
            return True
        return budget.max_cost is not None and self.cost >= budget.max_cost

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

    def _changed(self, prompt: int, completion: int, total: int, cost: Decimal | int = 0) -> None:
        # This meter's count moved by the given amounts: pass them up, then trip if exhausted.
        for parent in self.parents:
            drawn = parent._drawn
            drawn[0] += prompt
            drawn[1] += completion
            drawn[2] += total
            if cost:
                parent._drawn_cost += cost
            parent._changed(prompt, completion, total, cost)
        if not self._tripped and self.exhausted:
            self._tripped = True
            trips, self._trips = self._trips, []
            for callback in trips:
                callback()

    def begin_turn(self) -> None:
        """A new provider turn starts: its estimate begins at zero."""
        if self._estimate:
            estimate, self._estimate = self._estimate, 0
            money, self._estimate_cost = self._estimate_cost, _ZERO
            self._changed(0, -estimate, -estimate, -money)
        self._chars = 0

    def charge_content(self, text: str) -> bool:
        """Charge a content delta by estimate (and, with prices, that estimate at the output
        rate); returns :attr:`spent` afterwards."""
        self._chars += len(text)
        estimate = -(-self._chars // 4)  # estimate_tokens of the turn's content so far
        grown = estimate - self._estimate
        if grown:
            self._estimate = estimate
            prices = self.prices
            if prices is None:
                self._changed(0, grown, grown)
            else:
                priced = prices.output_amount(estimate)
                money = priced - self._estimate_cost
                self._estimate_cost = priced
                self._changed(0, grown, grown, money)
        return self.spent

    def _money(self, draw: Usage, known: bool) -> Decimal:
        """The money a draw charges: its cost when known in the meter's currency, else its
        tokens at the meter's prices (an estimate: then :attr:`estimated`); 0 without
        prices."""
        prices = self.prices
        if prices is None:
            return _ZERO
        cost = draw.cost
        if (
            known
            and cost is not None
            and cost.amount is not None
            and cost.currency == prices.currency
        ):
            return cost.amount
        self._guessed()
        return prices.amount(draw)

    def _settle(self, draw: Usage) -> None:
        # The meter's settled tokens (money is kept apart, as a Decimal).
        self._settled = self._settled + (draw if draw.cost is None else draw.priced(None))

    def charge(self, usage: Usage | None, *, text: str = "", estimated: bool = False) -> Usage:
        """Charge a call made for the run outside its turns (a compaction's summary, what an
        earlier attempt of a continued run spent) and return the draw: the reported ``usage``,
        or with none reported the estimate of ``text`` (the answer) -- then, or when
        ``estimated`` says ``usage`` is an estimate itself, the meter is :attr:`estimated`.
        With prices, its money is charged as :meth:`reconcile` charges a turn's. The current
        turn's estimate is left as it is."""
        if usage is None:
            tokens = estimate_tokens(text)
            usage = Usage(completion=tokens, total=tokens)
            estimated = True
        if estimated:
            self._guessed()
        money = self._money(usage, not estimated) if self.prices is not None else _ZERO
        self._settle(usage)
        self._settled_cost += money
        self._changed(usage.prompt, usage.completion, usage.total, money)
        return usage

    def reconcile(self, usage: Usage | None, *, thinking: str = "") -> Usage:
        """End the turn and return its draw: the reported ``usage``, or with none reported the
        estimate of the content plus ``thinking`` -- then :attr:`estimated`. The estimate is
        replaced, not added to; so is the money estimate (by the turn's cost, see the
        class)."""
        estimate = self._estimate
        if usage is None:
            tokens = estimate + estimate_tokens(thinking)
            draw = Usage(completion=tokens, total=tokens)
            self._guessed()
        else:
            draw = usage
        estimate_cost = self._estimate_cost
        money = self._money(draw, usage is not None) if self.prices is not None else _ZERO
        self._settle(draw)
        self._settled_cost += money
        self._estimate = 0
        self._estimate_cost = _ZERO
        self._chars = 0
        self._changed(
            draw.prompt, draw.completion - estimate, draw.total - estimate, money - estimate_cost
        )
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
    the team as it streams; the first charge that reaches ``max`` tokens (or ``max_cost`` of
    money in ``currency``: each run drawing on it then needs prices for its model, see
    :class:`TokenBudget`) cuts every run drawing from it (``stop="budget"``), and no run
    starts a provider call once it is spent. A :class:`TokenBudget`, by contrast, is a fresh
    allowance for each run.
    """

    __slots__ = ("budget", "meter")

    def __init__(
        self,
        max: int | None = None,
        scope: BudgetScope = "total",
        *,
        max_cost: object = None,
        currency: str = "USD",
    ) -> None:
        self.budget = TokenBudget(
            max,
            scope,
            max_cost=max_cost,  # (converted and checked there)
            currency=currency,
        )
        #: The meter the runs draw on.
        self.meter = BudgetMeter(self.budget)

    @property
    def consumed(self) -> Usage:
        """The tokens the team's runs charged so far (money: :attr:`cost`)."""
        return self.meter.consumed

    @property
    def used(self) -> int:
        """The budget's token count so far."""
        return self.meter.used

    @property
    def cost(self) -> Decimal:
        """The money the team's runs charged so far (in :attr:`TokenBudget.currency`)."""
        return self.meter.cost

    @property
    def remaining(self) -> int | None:
        """The tokens left (0 once spent; ``None`` without a token cap)."""
        return self.meter.remaining

    @property
    def remaining_cost(self) -> Decimal | None:
        """The money left (0 once spent; ``None`` without a money cap)."""
        return self.meter.remaining_cost

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
        budget = self.budget
        parts = []
        if budget.max is not None:
            parts.append(f"{mark}{self.used}/{budget.max} {budget.scope}")
        if budget.max_cost is not None:
            parts.append(f"{mark}{_plain(self.cost)}/{_plain(budget.max_cost)} {budget.currency}")
        return f"<TeamBudget {', '.join(parts)}>"
