"""What a run's provider calls cost: the maintained price data (:class:`GenAIPrices`, from the
optional ``genai-prices`` package: ``pip install 'trio-agents[prices]'``), and how a run prices
each call's usage with whatever :class:`~protocols.accounting.Pricing` it was given.

A run prices a call where it settles it (the run loop), so every provider is covered the
same way -- HTTP adapters, a :class:`~actors.providers.FallbackProvider`'s members,
:class:`~actors.testing.ScriptedProvider`, a relay client. A usage that already carries a cost
(a vendor reported it, as OpenRouter does) keeps it. Without pricing nothing here runs.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import attrs

from protocols.accounting import Cost, Prices, Pricing, Usage
from protocols.errors import ConfigError
from protocols.messages import ProviderResult

__all__ = ["GenAIPrices", "price_result", "price_usage", "run_rates"]

log = logging.getLogger(__name__)


class GenAIPrices:
    """Prices from `genai-prices <https://pypi.org/project/genai-prices/>`_ (Pydantic's
    maintained price data for LLM APIs; the ``prices`` extra installs it), in USD.

    The vendor is found from the provider's ``base_url`` (``api.openai.com``,
    ``api.anthropic.com``, ``openrouter.ai``, ...; a server the data does not know -- a local
    vLLM or Ollama -- has no price), or, for a provider without one, from the model's name.
    :meth:`price` is genai-prices' own calculation (tiers, cache reads and writes, the price
    in force now); :meth:`rates` are the model's base rates, a tiered rate taken at its
    highest tier (what a cost budget's estimate charges: never under). Wrap it in a
    :class:`~protocols.accounting.PriceTable` to override models:
    ``PriceTable({...}, fallback=GenAIPrices())``.

    Guarantees: the package and its data are loaded when this is made (a
    :class:`~protocols.errors.ConfigError` says how to install it when it is missing), never
    on import of ``actors`` and never inside a run; a model it does not know answers ``None``,
    never raises; lookups are cached per (model, base URL), at most 4096 of them (the first
    lookup of a model scans the data: a few milliseconds, once).
    """

    def __init__(self) -> None:
        try:
            import genai_prices  # noqa: PLC0415 - the optional extra, imported when used
            from genai_prices import data_snapshot  # noqa: PLC0415
        except ImportError:
            raise ConfigError(
                "GenAIPrices needs the genai-prices package: pip install 'trio-agents[prices]'"
            ) from None
        self._package = genai_prices
        self._snapshot = data_snapshot
        self._found: dict[tuple[str, str | None], tuple[Any, Any] | None] = {}
        # Load the data now (a large module: a fraction of a second), not inside a run's turn.
        data_snapshot.get_snapshot()

    def __repr__(self) -> str:
        return "<GenAIPrices>"

    def _find(self, model: str, base_url: str | None) -> tuple[Any, Any] | None:
        key = (model, base_url)
        if key in self._found:
            return self._found[key]
        snapshot = self._snapshot.get_snapshot()
        try:
            found: tuple[Any, Any] | None = snapshot.find_provider_model(
                model, None, None, base_url
            )
        except LookupError:
            found = None
        if len(self._found) < 4096:
            self._found[key] = found
        return found

    def price(
        self,
        usage: Usage,
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
    ) -> Cost | None:
        """genai-prices' calculation for ``usage`` of ``model`` (``None``: not known)."""
        found = self._find(model, base_url)
        if found is None:
            return None
        vendor, info = found
        counts: dict[str, int] = {
            "input_tokens": usage.prompt,
            "output_tokens": usage.completion,
        }
        if usage.cached:
            counts["cache_read_tokens"] = usage.cached
        if usage.cache_write:
            counts["cache_write_tokens"] = usage.cache_write
        if usage.reasoning:
            counts["output_reasoning_tokens"] = usage.reasoning
        try:
            calculation = info.calc_price(self._package.Usage(**counts), vendor)
        except (ValueError, LookupError) as error:  # the data cannot price these counts
            log.debug("genai-prices could not price %r: %s", model, error)
            return None
        return Cost(calculation.total_price, "USD", "computed")

    def rates(
        self, model: str, *, provider: str | None = None, base_url: str | None = None
    ) -> Prices | None:
        """The model's rates per million tokens (``None``: not known, or priced in units
        other than tokens)."""
        found = self._find(model, base_url)
        if found is None:
            return None
        info = found[1]
        try:
            price = info.get_prices(datetime.datetime.now(tz=datetime.UTC))
        except (ValueError, LookupError):
            return None
        input_rate, output_rate = _rate(price.input_mtok), _rate(price.output_mtok)
        if input_rate is None or output_rate is None:
            return None
        return Prices(
            input=input_rate,
            output=output_rate,
            cache_read=_rate(price.cache_read_mtok),
            cache_write=_rate(price.cache_write_mtok),
            reasoning=_rate(getattr(price, "output_reasoning_mtok", None)),
        )


def _rate(value: object) -> Decimal | None:
    """A genai-prices rate: a Decimal, or a tiered one at its highest tier."""
    if isinstance(value, Decimal):
        return value
    base = getattr(value, "base", None)
    if isinstance(base, Decimal):
        tiers: list[Decimal] = [tier.price for tier in getattr(value, "tiers", ())]
        highest: Decimal = max([base, *tiers])
        return highest
    return None


def _members(provider: object) -> Iterator[object]:
    """The providers that may answer a call of ``provider`` (a fallback's members)."""
    members = getattr(provider, "providers", None)
    if isinstance(members, tuple) and members:
        for member in members:
            yield from _members(member)
    else:
        yield provider


def _identity(provider: object) -> tuple[str | None, str | None, str | None]:
    """A provider's name, model and base URL, as far as it says."""
    name = getattr(provider, "name", None)
    model = getattr(provider, "model", None)
    base_url = getattr(provider, "base_url", None)
    return (
        name if isinstance(name, str) and name else None,
        model if isinstance(model, str) and model else None,
        base_url if isinstance(base_url, str) and base_url else None,
    )


def _answered_by(provider: object, label: str | None) -> object:
    """The member of a fallback provider its result names (``provider`` itself otherwise)."""
    if label is None:
        return provider
    names = getattr(provider, "names", None)
    members = getattr(provider, "providers", None)
    if isinstance(names, tuple) and isinstance(members, tuple) and label in names:
        return members[names.index(label)]
    return provider


def price_usage(
    pricing: Pricing,
    provider: object,
    usage: Usage,
    *,
    model: str | None = None,
    member: str | None = None,
) -> Cost | None:
    """What ``usage`` of a call of ``provider`` cost (``model``: what the vendor says
    answered; ``member``: the fallback member that answered): priced by the reported model,
    else by the provider's own; ``None`` when neither is priced."""
    answering = _answered_by(provider, member)
    name, own, base_url = _identity(answering)
    for candidate in dict.fromkeys(m for m in (model, own) if m):
        cost = pricing.price(usage, candidate, provider=name, base_url=base_url)
        if cost is not None:
            return cost
    return None


def price_result(
    pricing: Pricing, provider: object, result: ProviderResult, currency: str | None
) -> ProviderResult:
    """``result`` with its usage priced (a usage that carries a cost already keeps it; one
    nobody can price gets an ``unavailable`` cost -- in ``currency``, the run's, when known);
    a result without usage is returned as it is."""
    usage = result.usage
    if usage is None or usage.cost is not None:
        return result
    cost = price_usage(pricing, provider, usage, model=result.model, member=result.provider)
    if cost is None:
        cost = Cost.unavailable(currency)
    return _with_usage(result, usage.priced(cost))


def _with_usage(result: ProviderResult, usage: Usage) -> ProviderResult:
    return attrs.evolve(result, usage=usage)


def run_rates(pricing: Pricing, provider: object) -> Prices | None:
    """The rates a run's cost budget charges estimates at: its provider's model's, and for a
    fallback provider the member's with the highest output rate (a cap is never charged
    under); ``None`` when some member has no price (or names no model)."""
    best: Prices | None = None
    for member in _members(provider):
        name, model, base_url = _identity(member)
        if model is None:
            return None
        rates = pricing.rates(model, provider=name, base_url=base_url)
        if rates is None:
            return None
        if best is None or rates.output > best.output:
            best = rates
    return best
