"""Cost with provenance (issue 27, section 4; 004 S13): the arithmetic of :class:`Cost`, how a
:class:`Usage` carries and sums one, price tables, money caps on a :class:`BudgetMeter`, and
how a cost travels (the codec, the run's event log, OpenRouter's reported ``usage.cost``).
Pure: no event loop."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.accounting import (
    BudgetMeter,
    Cost,
    Prices,
    PriceTable,
    TeamBudget,
    TokenBudget,
    Usage,
)
from protocols.codec import decode, dumps, encode, from_json, loads, to_json
from protocols.errors import ConfigError, ProtocolError, ValidationError
from protocols.jobs import AgentJob
from protocols.live import EventLog, usage_parts
from protocols.messages import ProviderResult
from protocols.relay import ResultFrame, encode_frame
from protocols.sse import SSEEvent
from protocols.wire.openai_chat import OpenAIChatReader, read_response

# -- Cost arithmetic ------------------------------------------------------------------------

_AMOUNTS = st.decimals(min_value=0, max_value=10**6, places=9, allow_nan=False)
_CURRENCIES = st.sampled_from(["USD", "EUR"])
_KNOWN = st.builds(Cost, _AMOUNTS, _CURRENCIES, st.sampled_from(["computed", "reported"]))
_COSTS = _KNOWN | st.builds(Cost.unavailable, st.none() | _CURRENCIES)


@given(_COSTS, _COSTS, _COSTS)
def test_summing_costs_is_associative_and_commutative(a: Cost, b: Cost, c: Cost) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a


@given(st.lists(_AMOUNTS, min_size=1, max_size=8))
def test_a_sum_in_one_currency_is_the_exact_sum_of_the_amounts(amounts: list[Decimal]) -> None:
    total = Cost(amounts[0], "USD", "computed")
    for amount in amounts[1:]:
        total = total + Cost(amount, "USD", "computed")
    assert total == Cost(sum(amounts, Decimal(0)), "USD", "computed")


@given(st.lists(_KNOWN, max_size=5), st.lists(_KNOWN, max_size=5), st.none() | _CURRENCIES)
def test_unavailable_is_sticky(before: list[Cost], after: list[Cost], currency: str | None) -> None:
    total = Cost.unavailable(currency)
    for cost in [*before, *after]:
        total = cost + total if cost.currency == "EUR" else total + cost
    assert total.provenance == "unavailable"
    assert total.amount is None
    assert not total.known


def test_provenance_of_a_sum_is_its_weakest_part() -> None:
    reported = Cost(Decimal("0.25"), "USD", "reported")
    computed = Cost(Decimal("0.5"), "USD", "computed")
    assert reported + reported == Cost(Decimal("0.50"), "USD", "reported")
    assert reported + computed == Cost(Decimal("0.75"), "USD", "computed")
    assert computed + Cost.unavailable("USD") == Cost.unavailable("USD")


def test_mixed_currencies_are_unavailable_with_no_currency_never_converted() -> None:
    mixed = Cost(Decimal(1), "USD", "computed") + Cost(Decimal(1), "EUR", "computed")
    assert mixed == Cost(None, None, "unavailable")
    assert mixed + Cost(Decimal(1), "USD", "computed") == Cost.unavailable()
    assert str(mixed) == "unavailable"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((Decimal("-1"), "USD", "computed"), "finite decimal amount >= 0"),
        ((Decimal("NaN"), "USD", "computed"), "finite decimal amount >= 0"),
        ((Decimal("Infinity"), "USD", "computed"), "finite"),
        ((True, "USD", "computed"), "decimal amount"),
        (("x", "USD", "computed"), "decimal amount"),
        ((None, "USD", "computed"), "exactly when"),
        ((Decimal(1), "USD", "unavailable"), "exactly when"),
        ((Decimal(1), "usd", "computed"), "ISO 4217"),
        ((Decimal(1), None, "computed"), "needs a currency"),
        ((Decimal(1), "USD", "guessed"), "provenance"),
    ],
)
def test_bad_costs_are_refused(args: tuple[Any, Any, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Cost(*args)


def test_a_float_amount_is_read_by_its_shortest_repr() -> None:
    assert Cost(0.1, "USD", "computed").amount == Decimal("0.1")
    assert Cost("-0", "USD", "computed").amount == Decimal(0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.00123, Decimal("0.00123")),
        (2, Decimal(2)),
        ("0.5", Decimal("0.5")),
        (None, None),
        (True, None),
        (-0.1, None),
        (float("nan"), None),
        (float("inf"), None),
        ("lots", None),
        ({"usd": 1}, None),
    ],
)
def test_a_reported_cost_is_read_leniently(value: object, expected: Decimal | None) -> None:
    cost = Cost.reported(value)
    if expected is None:
        assert cost is None
    else:
        assert cost == Cost(expected, "USD", "reported")


# -- Usage carries a cost --------------------------------------------------------------------

_PRICED = Cost(Decimal("0.01"), "USD", "computed")


def test_usage_without_pricing_has_no_cost_and_sums_as_before() -> None:
    assert (Usage(1, 2) + Usage(3, 4)).cost is None


def test_an_unpriced_step_that_spent_tokens_makes_a_priced_sum_unavailable() -> None:
    priced = Usage(10, 5, cost=_PRICED)
    assert (priced + Usage(1, 1)).cost == Cost.unavailable("USD")
    assert (Usage(1, 1) + priced).cost == Cost.unavailable("USD")
    # ...and it stays unknown: later priced steps cannot revive it (004 S13).
    assert (priced + Usage(1, 1) + priced).cost == Cost.unavailable("USD")


def test_a_usage_of_no_tokens_adds_no_cost() -> None:
    priced = Usage(10, 5, cost=_PRICED)
    assert (Usage() + priced).cost == _PRICED
    assert (priced + Usage()).cost == _PRICED
    assert (Usage() + priced + priced).cost == Cost(Decimal("0.02"), "USD", "computed")


@given(
    st.lists(
        st.builds(
            Usage,
            st.integers(0, 100),
            st.integers(0, 100),
            cost=st.none() | _COSTS,
        ),
        min_size=3,
        max_size=3,
    )
)
def test_usage_sums_stay_associative_with_costs(usages: list[Usage]) -> None:
    a, b, c = usages
    assert ((a + b) + c).cost == (a + (b + c)).cost


def test_priced_keeps_the_counts() -> None:
    usage = Usage(10, 5, cached=2, reasoning=1, cache_write=3)
    assert usage.priced(_PRICED) == Usage(10, 5, cached=2, reasoning=1, cache_write=3, cost=_PRICED)
    assert usage.priced(_PRICED).priced(None) == usage
    with pytest.raises(ValidationError, match="Cost"):
        usage.priced("0.1")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="Cost"):
        Usage(1, cost=0.1)  # type: ignore[arg-type]


# -- prices and tables -----------------------------------------------------------------------


def test_prices_apply_each_rate_per_million_tokens_exactly() -> None:
    prices = Prices(
        input="2.50", output="10", cache_read="1.25", cache_write="3.75", reasoning="20"
    )
    usage = Usage(1000, 500, cached=200, cache_write=100, reasoning=50)
    expected = (
        Decimal(700) * Decimal("2.50")
        + Decimal(200) * Decimal("1.25")
        + Decimal(100) * Decimal("3.75")
        + Decimal(450) * Decimal(10)
        + Decimal(50) * Decimal(20)
    ) / Decimal(1_000_000)
    assert prices.amount(usage) == expected
    assert prices.cost(usage) == Cost(expected, "USD", "computed")
    # Unset rates fall back: cache reads and writes to input, reasoning to output.
    plain = Prices(input=1, output=2)
    assert plain.amount(usage) == Decimal("0.002")
    assert plain.output_amount(500_000) == Decimal(1)


def test_bad_prices_are_refused() -> None:
    with pytest.raises(ValidationError, match="price"):
        Prices(input="-1", output="1")
    with pytest.raises(ValidationError, match="ISO 4217"):
        Prices(input="1", output="1", currency="dollars")


def test_a_table_entry_for_a_provider_wins_over_a_bare_model_and_falls_back() -> None:
    fallback = PriceTable({"other": Prices(input=5, output=5)})
    table = PriceTable(
        {
            "m": Prices(input=1, output=1),
            ("anthropic", "m"): Prices(input=2, output=2, currency="EUR"),
        },
        fallback=fallback,
    )
    usage = Usage(500_000, 500_000)
    assert table.price(usage, "m") == Cost(Decimal(1), "USD", "computed")
    assert table.price(usage, "m", provider="openai-chat") == Cost(Decimal(1), "USD", "computed")
    assert table.price(usage, "m", provider="anthropic") == Cost(Decimal(2), "EUR", "computed")
    assert table.price(usage, "other") == Cost(Decimal(5), "USD", "computed")
    assert table.price(usage, "unknown") is None
    assert table.rates("other") == Prices(input=5, output=5)
    assert table.rates("unknown") is None
    assert PriceTable({}).price(usage, "m") is None


@pytest.mark.parametrize("key", ["", ("a",), ("", "m"), 3])
def test_bad_table_keys_are_refused(key: Any) -> None:
    with pytest.raises(ValidationError, match="keys"):
        PriceTable({key: Prices(input=1, output=1)})
    with pytest.raises(ValidationError, match="Prices"):
        PriceTable({"m": "1.0"})  # type: ignore[dict-item]


# -- money caps ------------------------------------------------------------------------------

_RATES = Prices(input="1", output="4")  # per million: an output token is 0.000004


def test_a_budget_caps_tokens_money_or_both() -> None:
    assert TokenBudget(max_cost="0.5").max_cost == Decimal("0.5")
    assert TokenBudget(100, max_cost=1).max == 100
    with pytest.raises(ValidationError, match="caps tokens"):
        TokenBudget()
    with pytest.raises(ValidationError, match="max_cost"):
        TokenBudget(max_cost="-1")
    with pytest.raises(ValidationError, match="ISO 4217"):
        TokenBudget(max_cost=1, currency="$")


def test_money_is_charged_mid_stream_at_the_output_rate_then_reconciled() -> None:
    meter = BudgetMeter(TokenBudget(max_cost="0.0001"), prices=_RATES)
    meter.begin_turn()
    assert not meter.charge_content("x" * 40)  # 10 tokens: 0.00004
    assert meter.cost == Decimal("0.00004")
    assert meter.remaining_cost == Decimal("0.00006")
    assert meter.remaining is None  # no token cap
    assert meter.charge_content("x" * 60)  # 25 tokens: 0.0001 -- spent
    assert meter.exhausted
    # The turn's reported cost replaces the estimate.
    reported = Usage(10, 20, cost=Cost(Decimal("0.00003"), "USD", "reported"))
    meter.reconcile(reported)
    assert meter.cost == Decimal("0.00003")
    assert meter.remaining_cost == Decimal("0.00007")  # no longer exhausted
    assert not meter.estimated


def test_a_turn_of_unknown_cost_is_charged_at_the_rates_and_marked_estimated() -> None:
    meter = BudgetMeter(TokenBudget(max_cost=1), prices=_RATES)
    meter.reconcile(Usage(1000, 1000, cost=Cost.unavailable("USD")))
    assert meter.cost == Decimal("0.005")
    assert meter.estimated
    other = BudgetMeter(TokenBudget(max_cost=1), prices=_RATES)
    other.reconcile(None, thinking="x" * 400)  # unreported: 100 tokens at the output rate
    assert other.cost == Decimal("0.0004")
    assert other.estimated
    # A cost in another currency than the meter's cannot be charged as it is.
    euros = BudgetMeter(TokenBudget(max_cost=1), prices=_RATES)
    euros.reconcile(Usage(1000, 0, cost=Cost(Decimal(9), "EUR", "computed")))
    assert euros.cost == Decimal("0.001")


def test_a_cost_cap_without_prices_is_refused_when_the_run_starts() -> None:
    with pytest.raises(ConfigError, match="no price is known"):
        BudgetMeter(TokenBudget(max_cost=1)).check_prices()
    team = TeamBudget(max_cost=1)
    with pytest.raises(ConfigError, match="no price is known"):
        BudgetMeter(None, parents=[team.meter]).check_prices()
    with pytest.raises(ConfigError, match="never converted"):
        BudgetMeter(None, parents=[team.meter], prices=Prices(1, 1, currency="EUR")).check_prices()
    BudgetMeter(None, parents=[team.meter], prices=_RATES).check_prices()
    BudgetMeter(TokenBudget(10)).check_prices()  # tokens only: no prices needed
    assert BudgetMeter(None, parents=[team.meter]).caps_cost
    assert not BudgetMeter(TokenBudget(10)).caps_cost


def test_a_team_money_cap_is_charged_by_every_run_and_cuts_them_all() -> None:
    team = TeamBudget(max_cost="0.0001")
    a = BudgetMeter(None, parents=[team.meter], prices=_RATES)
    b = BudgetMeter(None, parents=[team.meter], prices=_RATES)
    tripped: list[str] = []
    team.meter.on_trip(lambda: tripped.append("team"))
    a.begin_turn()
    b.begin_turn()
    assert not a.charge_content("x" * 48)  # 12 tokens: 0.000048
    assert not b.charge_content("x" * 48)
    assert team.cost == Decimal("0.000096")
    assert b.charge_content("x" * 4)  # one more token each side of the cap: spent
    assert a.spent
    assert team.exhausted
    assert tripped == ["team"]
    assert team.remaining_cost == 0
    assert team.remaining is None
    assert repr(team) == "<TeamBudget 0.0001/0.0001 USD>"


# -- on the wire -----------------------------------------------------------------------------


def test_a_cost_travels_as_a_decimal_string_and_back() -> None:
    usage = Usage(10, 5, cost=Cost(Decimal("1E-7"), "USD", "reported"))
    data = to_json(usage)
    assert data == {
        "prompt": 10,
        "completion": 5,
        "cost": {"amount": "0.0000001", "currency": "USD", "provenance": "reported"},
    }
    assert decode(Usage, encode(usage)) == usage
    unknown = Usage(1, cost=Cost.unavailable())
    assert to_json(unknown)["cost"] == {
        "amount": None,
        "currency": None,
        "provenance": "unavailable",
    }
    assert from_json(Usage, to_json(unknown)) == unknown


@pytest.mark.parametrize("amount", [0.5, "NaN", "1e5", "Infinity", "-", " 1", "0x1", True])
def test_an_amount_that_is_not_a_plain_decimal_string_is_refused(amount: object) -> None:
    data = {"prompt": 1, "cost": {"amount": amount, "currency": "USD", "provenance": "computed"}}
    with pytest.raises(ProtocolError, match=r"\$\.cost\.amount"):
        from_json(Usage, data)


def test_records_written_before_cost_existed_still_read() -> None:
    assert from_json(Usage, {"prompt": 3, "completion": 4}) == Usage(3, 4)
    job = from_json(AgentJob, to_json(AgentJob.ask("a", "hi", budget=TokenBudget(50))))
    assert job.budget == TokenBudget(50)
    assert to_json(TokenBudget(50)) == {"max": 50}
    capped = AgentJob.ask("a", "hi", budget=TokenBudget(max_cost="0.25"))
    assert to_json(capped)["budget"] == {"max_cost": "0.25"}
    assert from_json(AgentJob, to_json(capped)) == capped


def test_the_event_log_keeps_a_cost_in_plain_values_and_reads_it_back() -> None:
    priced = Usage(10, 5, cost=Cost(Decimal("0.002"), "USD", "computed"))
    parts = usage_parts(priced, False, "stop")
    assert all(isinstance(p, int | bool | str | Decimal) or p is None for p in parts)
    assert len(usage_parts(Usage(1, 1), False, None)) == 8  # unpriced: as before
    log = EventLog("run-1")
    log.add("usage", parts)
    log.add("usage", usage_parts(Usage(1, 1, cost=Cost.unavailable("USD")), True, None))
    events = [event for event in log.read(0) if event.kind == "usage"]
    assert events[0].data["usage"] == priced
    assert events[1].data["usage"].cost == Cost.unavailable("USD")
    assert events[1].data["estimated"] is True


# -- a vendor that reports cost ----------------------------------------------------------------

#: What OpenRouter streams with usage accounting: the last chunk's usage carries ``cost``.
OPENROUTER_STREAM = [
    {
        "id": "gen-1",
        "model": "openai/gpt-4o",
        "choices": [{"index": 0, "delta": {"content": "Hi"}}],
    },
    {
        "id": "gen-1",
        "model": "openai/gpt-4o",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    },
    {
        "id": "gen-1",
        "model": "openai/gpt-4o",
        "choices": [],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "cost": 0.0000595,
            "is_byok": False,
            "cost_details": {"upstream_inference_cost": None},
        },
    },
]


def test_openrouters_reported_cost_is_read_from_a_transcript() -> None:
    reader = OpenAIChatReader()
    usage = None
    for record in OPENROUTER_STREAM:
        increment = reader.read(SSEEvent(dumps(record)))
        if not isinstance(increment, str) and increment.usage is not None:
            usage = increment.usage
    assert usage == Usage(12, 3, 15, cost=Cost(Decimal("0.0000595"), "USD", "reported"))
    body = {
        "choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "cost": "bad"},
    }
    whole = read_response(body)
    assert whole.usage == Usage(12, 3)  # a cost that is no number is no report


def test_a_relay_result_frame_leaves_the_cost_out_for_clients_from_before_it() -> None:
    usage = Usage(12, 3, cost=Cost(Decimal("0.5"), "USD", "reported"))
    frame = ResultFrame("r1", ProviderResult(content="Hi", usage=usage))
    sent = loads(encode_frame(frame))
    assert sent["result"]["usage"] == {"prompt": 12, "completion": 3}
