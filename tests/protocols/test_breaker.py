"""The circuit breaker state machine (pure: time is passed in)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols import ConfigError
from protocols.breaker import BreakerState, CircuitBreaker


def test_closed_allows_and_opens_after_threshold_consecutive_failures() -> None:
    breaker = CircuitBreaker(threshold=3, cooldown=10)
    assert breaker.allow(0)
    breaker.failure(0)
    breaker.failure(1)
    assert breaker.state is BreakerState.CLOSED
    breaker.success()  # a success in between starts the count again
    breaker.failure(2)
    breaker.failure(3)
    assert breaker.allow(3)
    breaker.failure(4)
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow(5)
    assert breaker.retry_in(5) == 9


def test_after_the_cooldown_exactly_one_probe_goes() -> None:
    breaker = CircuitBreaker(threshold=1, cooldown=10)
    breaker.failure(0)
    assert not breaker.allow(9.9)
    assert breaker.allow(10)  # the probe
    assert breaker.state is BreakerState.HALF_OPEN
    assert not breaker.allow(10)  # only one
    assert not breaker.allow(50)
    assert breaker.retry_in(50) == 0


def test_a_successful_probe_closes_a_failed_probe_reopens() -> None:
    breaker = CircuitBreaker(threshold=2, cooldown=5)
    breaker.failure(0)
    breaker.failure(0)
    assert breaker.allow(5)
    breaker.failure(6)  # the probe failed: open again, for a new cool-down
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow(10)
    assert breaker.allow(11)
    breaker.success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.failures == 0
    assert breaker.allow(11)


def test_an_abandoned_probe_lets_the_next_one_go() -> None:
    breaker = CircuitBreaker(threshold=1, cooldown=5)
    breaker.failure(0)
    assert breaker.allow(5)
    assert not breaker.allow(5)
    breaker.abandon()  # the probe was cancelled: no news about the dependency
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow(5)
    closed = CircuitBreaker()
    closed.abandon()  # harmless when closed
    assert closed.allow(0)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"threshold": 0}, "threshold must be an integer >= 1"),
        ({"threshold": True}, "threshold must be an integer >= 1"),
        ({"cooldown": 0}, "cooldown must be a finite number > 0"),
        ({"cooldown": float("inf")}, "cooldown must be a finite number > 0"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        CircuitBreaker(**kwargs)  # type: ignore[arg-type]


@given(
    st.lists(
        st.tuples(st.sampled_from(["call-ok", "call-fail", "tick"]), st.floats(0, 20)),
        max_size=40,
    )
)
def test_never_more_than_one_probe_in_flight(events: list[tuple[str, float]]) -> None:
    breaker = CircuitBreaker(threshold=2, cooldown=5)
    now = 0.0
    in_flight = 0
    for kind, step in events:
        now += step
        if kind == "tick":
            continue
        if breaker.allow(now):
            was_probe = breaker.state is BreakerState.HALF_OPEN
            in_flight += was_probe
            assert in_flight <= 1
            if kind == "call-ok":
                breaker.success()
            else:
                breaker.failure(now)
            in_flight -= was_probe
        else:
            assert breaker.state in (BreakerState.OPEN, BreakerState.HALF_OPEN)
