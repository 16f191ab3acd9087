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
"""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, Protocol, TypeAlias

import attrs

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


# ---------------------------------------------------------------------------------------------
# Money

#: Where a :class:`Cost` comes from: ``reported`` (the vendor said so), ``computed`` (a price
#: table's rates times the reported tokens, or a sum with such a part), ``unavailable`` (some
#: part of it is unknown: no price, no report, or currencies that do not add).
CostProvenance: TypeAlias = Literal["computed", "reported", "unavailable"]

_PROVENANCES = ("computed", "reported", "unavailable")
_CURRENCY = re.compile(r"[A-Z]{3}")
# Sums of amounts are exact to 60 significant digits (prices have a few, token counts 16).
_MONEY = decimal.Context(prec=60, traps=[decimal.InvalidOperation, decimal.Overflow])
_MILLION = Decimal(1_000_000)


def _money(value: object, what: str) -> Decimal:
    """``value`` as a finite, non-negative :class:`~decimal.Decimal` (a float by its shortest
    repr: ``0.1`` is ``Decimal("0.1")``); anything else is a :class:`ValidationError`."""
    if isinstance(value, Decimal):
        number = value
    elif isinstance(value, bool):
        raise ValidationError(f"{what} must be a decimal amount >= 0, not {value!r}")
    elif isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        number = Decimal(repr(value))
    elif isinstance(value, str):
        try:
            number = Decimal(value.strip())
        except decimal.InvalidOperation:
            raise ValidationError(f"{what} must be a decimal amount >= 0, not {value!r}") from None
    else:
        raise ValidationError(f"{what} must be a decimal amount >= 0, not {value!r}")
    if not number.is_finite() or number < 0:
        raise ValidationError(f"{what} must be a finite decimal amount >= 0, not {value!r}")
    return number.copy_abs() if number.is_zero() else number  # (no -0)


def _to_amount(value: object) -> Decimal | None:
    return None if value is None else _money(value, "Cost.amount")


@attrs.frozen
class Cost:
    """What one or more provider calls cost, with where the figure comes from.

    ``amount`` is an exact :class:`~decimal.Decimal` (never a float: sums of floats drift) in
    ``currency`` (an ISO 4217 code, ``"USD"``); it is ``None`` exactly when ``provenance`` is
    ``"unavailable"`` -- an unknown cost is not zero. ``currency`` is ``None`` only for an
    unavailable cost whose parts were in different currencies (or in none). On the wire (the
    codec) a cost is written whole, ``{"amount": "0.00725", "currency": "USD", "provenance":
    "computed"}``: the amount a JSON *string* (exact, and strict JSON; ``null`` when unknown).

    ``a + b`` (same currency) adds the amounts; its provenance is the weakest of the parts:
    ``reported`` only when both are, ``computed`` when either is, and ``unavailable`` when
    either is -- sticky: nothing added later makes an unknown cost known again (004 S13).
    Two costs in different currencies do not add: the sum is unavailable, with no currency.
    The sum is associative and commutative.
    """

    amount: Decimal | None = attrs.field(converter=_to_amount)
    currency: str | None
    provenance: CostProvenance

    def __attrs_post_init__(self) -> None:
        if self.provenance not in _PROVENANCES:
            raise ValidationError(
                "Cost.provenance must be 'computed', 'reported' or 'unavailable', not "
                f"{self.provenance!r}"
            )
        if (self.amount is None) != (self.provenance == "unavailable"):
            raise ValidationError(
                "Cost.amount is None exactly when the cost is 'unavailable' "
                f"(amount {self.amount!r}, provenance {self.provenance!r})"
            )
        currency = self.currency
        if currency is None:
            if self.provenance != "unavailable":
                raise ValidationError("a known Cost needs a currency")
        elif not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
            raise ValidationError(
                f"Cost.currency must be an ISO 4217 code such as 'USD', not {currency!r}"
            )

    @classmethod
    def unavailable(cls, currency: str | None = None) -> Cost:
        """A cost nobody knows (a part unpriced, unreported, or in another currency)."""
        return cls(None, currency, "unavailable")

    @classmethod
    def reported(cls, value: object, currency: str = "USD") -> Cost | None:
        """The cost a vendor reported, read leniently: ``None`` (not reported) when ``value``
        is missing, a boolean, not a number, not finite or negative; numbers and numeric
        strings are read exactly (a float by its shortest repr). OpenRouter's ``usage.cost``
        is in USD."""
        if value is None or isinstance(value, bool):
            return None
        try:
            amount = _money(value, "a reported cost")
        except ValidationError:
            return None
        return cls(amount, currency, "reported")

    @property
    def known(self) -> bool:
        """The amount is known (``computed`` or ``reported``)."""
        return self.amount is not None

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        currency = self.currency if self.currency == other.currency else None
        if self.amount is None or other.amount is None or currency is None:
            return _cost(None, currency, "unavailable")
        both = "reported" if self.provenance == other.provenance == "reported" else "computed"
        return _cost(_MONEY.add(self.amount, other.amount), currency, both)

    def __str__(self) -> str:
        if self.amount is None:
            return "unavailable"
        return f"{_plain(self.amount)} {self.currency} ({self.provenance})"


def _plain(amount: Decimal) -> str:
    """An amount as people read it: plain notation, no trailing zeros (``0.0001``)."""
    return format(amount.normalize(_MONEY), "f")


def _cost(amount: Decimal | None, currency: str | None, provenance: str) -> Cost:
    # A sum of valid costs is valid: made without the converter and the validators.
    made = _new(Cost)
    _set(made, "amount", amount)
    _set(made, "currency", currency)
    _set(made, "provenance", provenance)
    return made


def _add_costs(a: Usage, b: Usage) -> Cost | None:
    """The cost of ``a + b``: ``None`` when neither was priced; a usage that spent tokens but
    was not priced makes a priced sum ``unavailable`` (an unpriced step is an unknown cost,
    not a free one); a usage of no tokens, unpriced, adds nothing."""
    x, y = a.cost, b.cost
    if x is None:
        if y is None or a.total == 0:
            return y
        return _cost(None, y.currency, "unavailable")
    if y is None:
        if b.total == 0:
            return x
        return _cost(None, x.currency, "unavailable")
    return x + y


def _to_rate(value: object) -> Decimal:
    return _money(value, "a price")


def _to_optional_rate(value: object) -> Decimal | None:
    return None if value is None else _money(value, "a price")


def _currency(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be an ISO 4217 code such as "
            f"'USD', not {value!r}"
        )


@attrs.frozen
class Prices:
    """A model's rates, per million tokens, in ``currency``: ``input`` for prompt tokens,
    ``output`` for completion tokens, and optionally ``cache_read`` (prompt tokens read from a
    cache: :attr:`Usage.cached`), ``cache_write`` (written to one: :attr:`Usage.cache_write`)
    and ``reasoning`` (:attr:`Usage.reasoning`) -- each defaulting to ``input``, ``input`` and
    ``output``. Rates are exact decimals (give strings: ``Prices(input="2.50",
    output="10")``; a float is read by its shortest repr)."""

    input: Decimal = attrs.field(converter=_to_rate)
    output: Decimal = attrs.field(converter=_to_rate)
    cache_read: Decimal | None = attrs.field(default=None, converter=_to_optional_rate)
    cache_write: Decimal | None = attrs.field(default=None, converter=_to_optional_rate)
    reasoning: Decimal | None = attrs.field(default=None, converter=_to_optional_rate)
    currency: str = attrs.field(default="USD", validator=_currency)

    def amount(self, usage: Usage) -> Decimal:
        """What ``usage`` costs at these rates, exactly: uncached prompt tokens at ``input``,
        cached ones at ``cache_read``, cache writes at ``cache_write``, completion tokens at
        ``output`` but reasoning ones at ``reasoning``."""
        cached = usage.cached or 0
        written = usage.cache_write or 0
        reasoning = usage.reasoning or 0
        read_rate = self.input if self.cache_read is None else self.cache_read
        write_rate = self.input if self.cache_write is None else self.cache_write
        think_rate = self.output if self.reasoning is None else self.reasoning
        add, mul = _MONEY.add, _MONEY.multiply
        total = mul(self.input, Decimal(usage.prompt - cached - written))
        total = add(total, mul(read_rate, Decimal(cached)))
        total = add(total, mul(write_rate, Decimal(written)))
        total = add(total, mul(self.output, Decimal(usage.completion - reasoning)))
        total = add(total, mul(think_rate, Decimal(reasoning)))
        return total.scaleb(-6, _MONEY).normalize(_MONEY)

    def cost(self, usage: Usage) -> Cost:
        """:meth:`amount` as a ``computed`` :class:`Cost`."""
        return _cost(self.amount(usage), self.currency, "computed")

    def output_amount(self, tokens: int) -> Decimal:
        """What ``tokens`` completion tokens cost at ``output`` (the mid-stream estimate)."""
        return _MONEY.multiply(self.output, Decimal(tokens)).scaleb(-6, _MONEY)


class Pricing(Protocol):
    """A source of prices (a :class:`PriceTable`; ``actors.GenAIPrices`` for the maintained
    `genai-prices <https://pypi.org/project/genai-prices/>`_ data). ``model`` is the model's
    name; ``provider`` the provider's ``name`` (``"openai-chat"``, ``"anthropic"``,
    ``"scripted"``, ...); ``base_url`` where it is served, when known."""

    def price(
        self,
        usage: Usage,
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
    ) -> Cost | None:
        """What ``usage`` of ``model`` costs; ``None`` when no price is known for it."""
        ...

    def rates(
        self, model: str, *, provider: str | None = None, base_url: str | None = None
    ) -> Prices | None:
        """The rates of ``model`` (for estimates: the mid-stream charge of a cost budget);
        ``None`` when none is known."""
        ...


PriceKey: TypeAlias = str | tuple[str, str]


class PriceTable:
    """A price table of your own: model name -> :class:`Prices`, or ``(provider name, model
    name) -> Prices`` for one provider's price of a model (the provider's ``name``:
    ``"openai-chat"``, ``"anthropic"``, ``"scripted"``, ...). A ``(provider, model)`` entry wins
    over a bare model entry; a model it does not list goes to ``fallback`` (another
    :class:`Pricing`, such as ``actors.GenAIPrices()``), so the table overrides it.

    Guarantees: pure and exact (decimal arithmetic, :meth:`Prices.amount`); a lookup never
    raises for an unknown model -- it answers ``None``.
    """

    __slots__ = ("_prices", "fallback")

    def __init__(
        self, prices: Mapping[PriceKey, Prices], *, fallback: Pricing | None = None
    ) -> None:
        table: dict[PriceKey, Prices] = {}
        for key, value in prices.items():
            if not isinstance(value, Prices):
                raise ValidationError(f"PriceTable: {key!r} must map to Prices, not {value!r}")
            named = isinstance(key, str) and bool(key)
            paired = (
                isinstance(key, tuple)
                and len(key) == 2
                and all(isinstance(part, str) and part for part in key)
            )
            if named or paired:
                table[key] = value
            else:
                raise ValidationError(
                    "PriceTable keys are model names or (provider name, model name) pairs, "
                    f"not {key!r}"
                )
        self._prices = table
        #: Where a model the table does not list is looked up (``None``: nowhere).
        self.fallback = fallback

    def __repr__(self) -> str:
        return f"<PriceTable of {len(self._prices)} models>"

    def _own(self, model: str, provider: str | None) -> Prices | None:
        table = self._prices
        if provider is not None:
            found = table.get((provider, model))
            if found is not None:
                return found
        return table.get(model)

    def rates(
        self, model: str, *, provider: str | None = None, base_url: str | None = None
    ) -> Prices | None:
        own = self._own(model, provider)
        if own is not None or self.fallback is None:
            return own
        return self.fallback.rates(model, provider=provider, base_url=base_url)

    def price(
        self,
        usage: Usage,
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
    ) -> Cost | None:
        own = self._own(model, provider)
        if own is not None:
            return own.cost(usage)
        if self.fallback is None:
            return None
        return self.fallback.price(usage, model, provider=provider, base_url=base_url)


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
    exceed it. ``cost`` is what the call(s) cost in money (a :class:`Cost`, with its
    provenance); ``None`` when nobody priced them (no pricing was configured). ``a + b`` sums
    every field (``cached``, ``cache_write`` and ``reasoning`` each stay ``None`` only when both
    are ``None``; costs add as :class:`Cost` says -- and a part that spent tokens but carries no
    cost makes a priced sum's cost ``unavailable``, while a part of no tokens adds nothing).
    """

    prompt: int = attrs.field(default=0, validator=_count)
    completion: int = attrs.field(default=0, validator=_count)
    total: int = attrs.field(
        default=attrs.Factory(_default_total, takes_self=True), validator=_count
    )
    cached: int | None = attrs.field(default=None)
    reasoning: int | None = attrs.field(default=None)
    cache_write: int | None = attrs.field(default=None, kw_only=True)
    cost: Cost | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.cost is not None and not isinstance(self.cost, Cost):
            raise ValidationError(f"Usage.cost must be a Cost or None, not {self.cost!r}")
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
        _set(
            total,
            "cost",
            None if self.cost is None and other.cost is None else _add_costs(self, other),
        )
        return total

    def priced(self, cost: Cost | None) -> Usage:
        """This usage with ``cost`` (the same counts)."""
        made = _new(Usage)
        for name in ("prompt", "completion", "total", "cached", "reasoning", "cache_write"):
            _set(made, name, getattr(self, name))
        if cost is not None and not isinstance(cost, Cost):
            raise ValidationError(f"Usage.cost must be a Cost or None, not {cost!r}")
        _set(made, "cost", cost)
        return made

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
        cost: Cost | None = None,
    ) -> Usage:
        """Build a valid :class:`Usage` from whatever numbers a provider reported.

        Guarantees: never raises. Each count goes through
        :func:`sanitize_count`; a missing or too-small ``total`` becomes
        ``prompt + completion``; ``cached`` and ``reasoning`` stay ``None`` when not reported
        and are clamped to ``prompt`` and ``completion`` otherwise; ``cache_write`` likewise stays
        ``None`` when not reported and is clamped to what ``prompt`` leaves beside ``cached``.
        ``cost`` (what the vendor reported it cost, see :meth:`Cost.reported`) is kept as is.
        """
        p = sanitize_count(prompt)
        c = sanitize_count(completion)
        t = max(sanitize_count(total), p + c)
        k = None if cached is None else min(sanitize_count(cached), p)
        r = None if reasoning is None else min(sanitize_count(reasoning), c)
        w = None if cache_write is None else min(sanitize_count(cache_write), p - (k or 0))
        return cls(prompt=p, completion=c, total=t, cached=k, reasoning=r, cache_write=w, cost=cost)


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
