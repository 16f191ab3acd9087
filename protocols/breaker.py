"""A circuit breaker as a pure state machine: the caller passes the time in.

``closed`` lets calls through and counts consecutive failures; ``threshold`` of them in a row
open it. ``open`` refuses calls until ``cooldown`` seconds have passed, then lets exactly one
probe through (``half_open``); the probe's success closes the breaker, its failure opens it again
for another cool-down.
"""

from __future__ import annotations

import enum
import math

import attrs

from .errors import ConfigError

__all__ = ["BreakerState", "CircuitBreaker"]


class BreakerState(enum.StrEnum):
    """Where a circuit breaker is."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"CircuitBreaker.{attribute.name} must be an integer >= 1, not {value!r}")


def _cooldown(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (isinstance(value, int | float) and not isinstance(value, bool)) or not (
        0 < value < math.inf
    ):
        raise ConfigError(f"CircuitBreaker.cooldown must be a finite number > 0, not {value!r}")


@attrs.define
class CircuitBreaker:
    """Fail fast while a dependency keeps failing. Not thread-safe; one owner.

    Guarantees: :meth:`allow` is true while closed; false while open and cooling down; after
    the cool-down it is true exactly once (the probe) until that probe's :meth:`success` or
    :meth:`failure` is recorded. :meth:`success` always closes it and clears the count.
    """

    threshold: int = attrs.field(default=5, validator=_positive_int)
    cooldown: float = attrs.field(default=30.0, validator=_cooldown)
    state: BreakerState = attrs.field(default=BreakerState.CLOSED, init=False)
    failures: int = attrs.field(default=0, init=False)
    opened_at: float = attrs.field(default=-math.inf, init=False)
    _probing: bool = attrs.field(default=False, init=False, alias="_probing")

    def allow(self, now: float) -> bool:
        """Whether a call may go ahead at time ``now`` (taking the probe slot if it opens one)."""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN and now - self.opened_at >= self.cooldown:
            self.state = BreakerState.HALF_OPEN
            self._probing = False
        if self.state is BreakerState.HALF_OPEN and not self._probing:
            self._probing = True
            return True
        return False

    def retry_in(self, now: float) -> float:
        """Seconds until a probe may go (0 when calls are allowed or a probe is due)."""
        if self.state is BreakerState.OPEN:
            return max(0.0, self.opened_at + self.cooldown - now)
        return 0.0

    def success(self) -> None:
        """Record a successful call: close the breaker."""
        self.state = BreakerState.CLOSED
        self.failures = 0
        self._probing = False

    def abandon(self) -> None:
        """A call that was allowed ended without saying anything about the dependency's health
        (cancelled, or refused for a reason of its own): if it was the probe, let another probe
        go."""
        if self.state is BreakerState.HALF_OPEN:
            self._probing = False

    def failure(self, now: float) -> None:
        """Record a failed call at time ``now``: count it, and open the breaker when the probe
        failed or the count reached the threshold."""
        self.failures += 1
        if self.state is BreakerState.HALF_OPEN or self.failures >= self.threshold:
            self.state = BreakerState.OPEN
            self.opened_at = now
            self._probing = False
