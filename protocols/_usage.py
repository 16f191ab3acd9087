"""Token counts and what they cost: the count bound and estimate, money (:class:`Cost`), prices
(:class:`Prices`, :class:`Pricing`, :class:`PriceTable`) and the usage a provider reports
(:class:`Usage`); see :mod:`protocols.accounting`, which re-exports them with the budgets."""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from .errors import ValidationError

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
