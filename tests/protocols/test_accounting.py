"""Token accounting: budgets and the meter (mid-stream estimates, reconciled to reported usage),
the token estimate and the sanitiser of reported counts."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.accounting import (
    MAX_COUNT,
    BudgetMeter,
    TeamBudget,
    TokenBudget,
    estimate_tokens,
    sanitize_count,
)
from protocols.errors import ValidationError
from protocols.messages import Usage


def test_content_is_charged_by_estimate_as_it_streams() -> None:
    meter = BudgetMeter(TokenBudget(max=3, scope="completion"))
    assert not meter.charge_content("abcd")  # 4 chars: 1 token
    assert meter.consumed == Usage(completion=1, total=1)
    assert not meter.charge_content("e")  # 5 chars: 2 tokens, only the increase is charged
    assert meter.consumed == Usage(completion=2, total=2)
    assert meter.remaining == 1
    assert meter.charge_content("fghij")  # 10 chars: 3 tokens -- the budget is reached
    assert meter.exhausted
    assert meter.remaining == 0


def test_reconcile_replaces_the_estimate_with_the_reported_usage() -> None:
    meter = BudgetMeter(TokenBudget(max=1000))
    meter.charge_content("x" * 400)  # estimated 100
    reported = Usage(prompt=50, completion=30, total=80)  # the estimate overshot
    assert meter.reconcile(reported, thinking="ignored when usage is reported") == reported
    assert meter.consumed == reported  # the overshoot is given back: draw == reported
    meter.charge_content("y" * 8)
    assert meter.consumed == reported + Usage(completion=2, total=2)
    second = Usage(prompt=60, completion=5, total=65)
    meter.reconcile(second)
    assert meter.consumed == reported + second


def test_without_reported_usage_thinking_is_charged_at_reconcile() -> None:
    meter = BudgetMeter(TokenBudget(max=100))
    meter.charge_content("abcdefgh")  # 2 tokens
    draw = meter.reconcile(None, thinking="t" * 12)  # 3 more
    assert draw == Usage(completion=5, total=5)
    assert meter.consumed == draw


def test_prompt_scope_is_charged_at_reconcile_only() -> None:
    meter = BudgetMeter(TokenBudget(max=100, scope="prompt"))
    assert not meter.charge_content("x" * 1000)
    assert meter.used == 0
    meter.reconcile(Usage(prompt=100, completion=1))
    assert meter.exhausted


def test_a_zero_budget_is_exhausted_before_anything() -> None:
    assert BudgetMeter(TokenBudget(max=0)).exhausted


@pytest.mark.parametrize(
    ("maximum", "scope", "match"),
    [(-1, "total", "max"), (True, "total", "max"), (1.5, "total", "max"), (10, "tokens", "scope")],
)
def test_bad_budgets_are_refused(maximum: object, scope: object, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        TokenBudget(max=maximum, scope=scope)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="TokenBudget"):
        BudgetMeter(100)  # type: ignore[arg-type]


_TURN = st.tuples(
    st.lists(st.text(min_size=1, max_size=30), max_size=8),
    st.none() | st.builds(Usage, st.integers(0, 500), st.integers(0, 500)),
    st.text(max_size=40),
)


@given(st.lists(_TURN, max_size=6))
def test_the_draw_is_what_was_reported_and_never_double_counts(
    turns: list[tuple[list[str], Usage | None, str]],
) -> None:
    meter = BudgetMeter(TokenBudget(max=10**9))
    expected = Usage()
    for deltas, usage, thinking in turns:
        for delta in deltas:
            before = meter.used
            meter.charge_content(delta)
            assert meter.used >= before  # charging only ever grows during a turn
        text = "".join(deltas)
        # Mid-stream the turn costs exactly the estimate of its content so far.
        assert meter.consumed == expected + Usage(
            completion=estimate_tokens(text), total=estimate_tokens(text)
        )
        draw = meter.reconcile(usage, thinking=thinking)
        if usage is not None:
            assert draw == usage
        else:
            tokens = estimate_tokens(text) + estimate_tokens(thinking)
            assert draw == Usage(completion=tokens, total=tokens)
        expected = expected + draw
        assert meter.consumed == expected


def test_charge_adds_a_call_outside_the_turns_and_keeps_the_turns_estimate() -> None:
    meter = BudgetMeter(TokenBudget(max=100))
    meter.begin_turn()
    meter.charge_content("x" * 40)  # 10 tokens estimated for the turn in flight
    assert meter.charge(Usage(20, 5)) == Usage(20, 5)
    assert meter.used == 35
    # Unreported: the estimate of the answer, as completion tokens.
    assert meter.charge(None, text="y" * 80) == Usage(completion=20, total=20)
    assert meter.used == 55
    assert meter.reconcile(Usage(3, 7)) == Usage(3, 7)  # the turn's estimate is replaced
    assert meter.used == 55 - 10 + 10
    assert not meter.exhausted
    meter.charge(Usage(50, 0))
    assert meter.exhausted


# Token counts: the estimate and the sanitiser


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("é" * 8, 2), ("😀" * 5, 2)]
)
def test_estimate_counts_code_points(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


@given(st.text(), st.text())
def test_estimate_is_monotonic_and_subadditive_within_one(a: str, b: str) -> None:
    assert estimate_tokens(a + b) >= estimate_tokens(a)
    assert estimate_tokens(a + b) <= estimate_tokens(a) + estimate_tokens(b)


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (None, 0),
        (True, 0),
        (False, 0),
        (7, 7),
        (-7, 0),
        (7.0, 7),
        (7.2, 8),
        (float("nan"), 0),
        (float("inf"), 0),
        (" 12 ", 12),
        ("12.5", 13),
        ("", 0),
        ("twelve", 0),
        ([1], 0),
        (10**30, MAX_COUNT),
        (1e30, MAX_COUNT),
    ],
)
def test_sanitize_count(value: object, count: int) -> None:
    result = sanitize_count(value)
    assert result == count
    assert type(result) is int


# Meters that draw on others: a delegated run's on its parent's, a team's members on the team


def test_a_child_meter_charges_its_parent_as_it_streams_and_at_reconcile() -> None:
    parent = BudgetMeter(TokenBudget(max=100))
    child = BudgetMeter(None, parents=[parent])
    child.begin_turn()
    child.charge_content("x" * 40)  # 10 tokens by estimate
    assert parent.consumed == Usage(completion=10, total=10)
    assert parent.own == Usage()  # the parent's own turns charged nothing
    child.reconcile(Usage(prompt=7, completion=4))  # the estimate overshot: given back
    assert child.consumed == Usage(prompt=7, completion=4, total=11)
    assert parent.consumed == Usage(prompt=7, completion=4, total=11)
    assert parent.used == 11


def test_a_charge_that_spends_an_ancestor_trips_it_once_and_spends_the_child() -> None:
    trips: list[str] = []
    lead = BudgetMeter(TokenBudget(max=5))
    middle = BudgetMeter(None, parents=[lead])
    leaf = BudgetMeter(TokenBudget(max=1000), parents=[middle])
    lead.on_trip(lambda: trips.append("lead"))
    assert not leaf.charge_content("x" * 16)  # 4 tokens: under the lead's 5
    assert leaf.charge_content("x" * 4)  # 5: the lead is spent, so is every meter under it
    assert trips == ["lead"]
    assert lead.exhausted
    assert leaf.spent
    assert middle.spent
    assert not leaf.exhausted  # its own budget is far from spent
    leaf.charge_content("x" * 40)
    assert trips == ["lead"]  # once


def test_on_trip_fires_at_once_on_a_spent_meter_and_can_be_removed() -> None:
    spent = BudgetMeter(TokenBudget(max=0))
    calls: list[int] = []
    spent.on_trip(lambda: calls.append(1))
    assert calls == [1]
    fresh = BudgetMeter(TokenBudget(max=2))
    remove = fresh.on_trip(lambda: calls.append(2))
    remove()
    fresh.charge_content("x" * 8)
    assert fresh.exhausted
    assert calls == [1]


def test_a_meter_reached_twice_is_drawn_on_once() -> None:
    team = TeamBudget(max=1000)
    parent = BudgetMeter(None, parents=[team.meter])
    # A child of a team member, given the team too: the team already sees it through the parent.
    child = BudgetMeter(None, parents=[parent, team.meter])
    assert child.parents == (parent,)
    child.charge(Usage(prompt=3, completion=2))
    assert team.consumed == Usage(prompt=3, completion=2, total=5)
    assert parent.consumed == Usage(prompt=3, completion=2, total=5)


def test_a_team_budget_is_spent_by_its_members_together() -> None:
    team = TeamBudget(max=10, scope="completion")
    first = BudgetMeter(None, parents=[team.meter])
    second = BudgetMeter(TokenBudget(max=100), parents=[team.meter])
    assert not first.charge_content("x" * 20)  # 5
    assert second.charge_content("x" * 20)  # 10: the team is spent for both
    assert first.spent
    assert second.spent
    assert team.exhausted
    assert team.remaining == 0
    assert team.used == 10
    assert "10/10" in repr(team)


def test_meters_refuse_what_they_cannot_draw_on() -> None:
    with pytest.raises(ValidationError):
        BudgetMeter(None, parents=[TokenBudget(max=1)])  # type: ignore[list-item]
    unbounded = BudgetMeter()
    unbounded.charge_content("x" * 400)
    assert not unbounded.exhausted
    assert not unbounded.spent
    assert unbounded.remaining is None
    assert unbounded.used == 100


charges = st.lists(
    st.one_of(
        st.tuples(st.just("content"), st.integers(0, 3), st.text(max_size=30)),
        st.tuples(
            st.just("reconcile"),
            st.integers(0, 3),
            st.none() | st.builds(Usage, st.integers(0, 50), st.integers(0, 50)),
        ),
        st.tuples(st.just("begin"), st.integers(0, 3), st.none()),
    ),
    max_size=40,
)


@given(charges)
def test_a_parent_always_counts_exactly_what_its_children_charged(steps: list[tuple]) -> None:
    team = TeamBudget(max=MAX_COUNT)
    parent = BudgetMeter(TokenBudget(max=MAX_COUNT), parents=[team.meter])
    children = [BudgetMeter(None, parents=[parent]) for _ in range(2)] + [
        BudgetMeter(None, parents=[team.meter]) for _ in range(2)
    ]
    for kind, which, value in steps:
        meter = children[which]
        if kind == "content":
            meter.charge_content(value)
        elif kind == "reconcile":
            meter.reconcile(value)
        else:
            meter.begin_turn()
    under_parent = sum((child.consumed for child in children[:2]), Usage())
    assert parent.consumed == under_parent
    under_team = sum((child.consumed for child in children[2:]), under_parent)
    assert team.consumed == under_team


def test_a_meter_says_when_what_it_counts_includes_an_estimate() -> None:
    team = TeamBudget(max=1000)
    parent = BudgetMeter(TokenBudget(max=500), parents=[team.meter])
    child = BudgetMeter(None, parents=[parent])
    child.charge_content("x" * 40)  # an estimate in flight is replaced at reconcile
    assert [child.estimated, parent.estimated, team.estimated] == [False, False, False]
    child.reconcile(Usage(3, 4))
    assert [child.estimated, parent.estimated, team.estimated] == [False, False, False]
    assert repr(team) == "<TeamBudget 7/1000 total>"
    child.reconcile(None, thinking="hmm")  # nothing reported: charged by estimate
    assert child.estimated
    assert parent.estimated
    assert team.estimated
    assert repr(team).startswith("<TeamBudget ~")
    other = BudgetMeter(TokenBudget(max=10))
    other.charge(None, text="a summary nobody counted")
    assert other.estimated
    counted = BudgetMeter(TokenBudget(max=10))
    counted.charge(Usage(1, 1))
    assert not counted.estimated
    counted.charge(Usage(completion=2), estimated=True)  # an estimate made elsewhere
    assert counted.estimated


@given(charges)
def test_a_meter_is_estimated_exactly_when_it_or_a_meter_drawing_on_it_guessed(
    steps: list[tuple],
) -> None:
    team = TeamBudget(max=MAX_COUNT)
    parent = BudgetMeter(TokenBudget(max=MAX_COUNT), parents=[team.meter])
    children = [BudgetMeter(None, parents=[parent]) for _ in range(2)] + [
        BudgetMeter(None, parents=[team.meter]) for _ in range(2)
    ]
    guessed = [False] * 4
    for kind, which, value in steps:
        meter = children[which]
        if kind == "content":
            meter.charge_content(value)
        elif kind == "reconcile":
            meter.reconcile(value)
            guessed[which] = guessed[which] or value is None
        else:
            meter.begin_turn()
    assert [child.estimated for child in children] == guessed
    assert parent.estimated == any(guessed[:2])
    assert team.estimated == any(guessed)


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    prompt = draw(st.integers(0, 10**12))
    completion = draw(st.integers(0, 10**12))
    cached = draw(st.none() | st.integers(0, prompt))
    return Usage(
        prompt=prompt,
        completion=completion,
        total=prompt + completion + draw(st.integers(0, 10**6)),
        cached=cached,
        reasoning=draw(st.none() | st.integers(0, completion)),
        cache_write=draw(st.none() | st.integers(0, prompt - (cached or 0))),
    )


@given(usages(), usages())
def test_the_sum_of_two_usages_is_the_usage_of_their_summed_parts(a: Usage, b: Usage) -> None:
    total = a + b
    either = a.cached is not None or b.cached is not None
    thought = a.reasoning is not None or b.reasoning is not None
    written = a.cache_write is not None or b.cache_write is not None
    # What the validating constructor makes of the parts' sums: equal, field by field.
    assert total == Usage(
        prompt=a.prompt + b.prompt,
        completion=a.completion + b.completion,
        total=a.total + b.total,
        cached=(a.cached or 0) + (b.cached or 0) if either else None,
        reasoning=(a.reasoning or 0) + (b.reasoning or 0) if thought else None,
        cache_write=(a.cache_write or 0) + (b.cache_write or 0) if written else None,
    )
    assert type(total) is Usage
    assert hash(total) == hash(Usage(**attrs.asdict(total)))


def test_cache_reads_and_writes_together_may_not_exceed_the_prompt() -> None:
    assert Usage(prompt=10, cached=4, cache_write=6).cache_write == 6
    with pytest.raises(ValidationError, match="cache_write"):
        Usage(prompt=10, cached=4, cache_write=7)
    with pytest.raises(ValidationError, match="cache_write"):
        Usage(prompt=10, cache_write=-1)


@given(
    st.integers(-5, 10**6) | st.none(),
    st.integers(-5, 10**6) | st.none(),
    st.integers(-5, 10**6) | st.none(),
)
def test_sanitize_keeps_cache_writes_within_the_prompt(
    prompt: int | None, cached: int | None, written: int | None
) -> None:
    usage = Usage.sanitize(prompt=prompt, cached=cached, cache_write=written)
    assert (usage.cache_write is None) == (written is None)
    assert (usage.cached or 0) + (usage.cache_write or 0) <= usage.prompt
