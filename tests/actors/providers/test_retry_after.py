"""notes/002.md guarantee 13: a vendor's ``Retry-After`` is honoured "within a bound".

The bound is ``RetryPolicy.max_retry_after`` (60 s by default): a longer ask -- the
``Retry-After: 86400`` of a spent daily quota -- is not waited for (the jittered backoff
applies), and never stalls a call past its deadline or a run past its own. The header's other
forms are read too: an HTTP date (also the obsolete asctime form, which has no zone), and
``retry-after-ms``; a value that is none of them (negative, ``nan``, garbage) is ignored.

Everything goes through the real HTTP engine against the
:class:`~actors.testing.FaultProviderServer` on loopback, on trio's mock clock (autojumping once
everything is idle): the waits are trio time, never real time. The HTTP-date cases compare with
the wall clock, as the engine must (the header names a wall-clock instant).
"""

from __future__ import annotations

import datetime
import email.utils
import random
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from actors import open_runtime
from actors.agent import Agent, AgentEvent
from actors.providers import OpenAIChat, RetryEvent, RetryPolicy, Timeouts
from actors.providers._http_config import parse_retry_after
from actors.testing import FaultProviderServer
from protocols.errors import ProviderError
from protocols.messages import Message, StopReason

IDLE = 0.05  # mock-clock autojump threshold (real seconds): real sockets are involved
DAY = "86400"
NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def limited(status: int, retry_after: str, *, then: str = "pass") -> list[dict[str, Any]]:
    """One refusal with ``Retry-After: retry_after``, then ``then`` (repeated)."""
    refusal = {"kind": "http-error", "status": status, "retryAfter": retry_after}
    return [refusal, refusal if then == "refuse" else {"kind": "pass"}]


async def call(
    plan: list[dict[str, Any]], **options: Any
) -> tuple[list[RetryEvent], float, Any, int]:
    """One ``generate`` against ``plan``: (the retries reported, trio seconds it took, its
    result or the ProviderError it raised, requests the server saw)."""
    retries: list[RetryEvent] = []
    async with FaultProviderServer(plan) as server:
        provider = OpenAIChat(
            model="m", base_url=server.base_url, on_retry=retries.append, **options
        )
        start = trio.current_time()
        try:
            outcome: Any = await provider.generate([Message.user("hi")])
        except ProviderError as error:
            outcome = error
        finally:
            await provider.aclose()
        return retries, trio.current_time() - start, outcome, server.calls()


def http_date(seconds_from_now: float) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)
    return email.utils.format_datetime(when, usegmt=True)


# -- the cap ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
async def test_a_day_long_retry_after_is_not_waited_for_the_backoff_applies(
    mock_clock: trio.testing.MockClock, status: int
) -> None:
    mock_clock.autojump_threshold = IDLE
    policy = RetryPolicy()
    retries, elapsed, result, requests = await call(limited(status, DAY), retry=policy)
    assert result.content == "ok"
    assert requests == 2
    (retry,) = retries
    assert retry.status == status
    # The first backoff draws from [0, initial]: nowhere near the day asked for, nor the cap.
    assert 0 <= retry.delay <= policy.initial
    assert elapsed <= policy.initial < policy.max_retry_after


async def test_a_refusal_that_keeps_asking_for_a_day_fails_within_the_backoffs(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    policy = RetryPolicy()
    retries, elapsed, error, requests = await call(limited(429, DAY, then="refuse"), retry=policy)
    assert isinstance(error, ProviderError)
    assert (error.code, error.status, error.retry_after) == ("rate_limit", 429, 86400)
    assert requests == policy.retries + 1
    assert [r.attempt for r in retries] == [1, 2]
    assert all(r.delay <= policy.maximum for r in retries)
    assert elapsed <= policy.initial * 3  # 0.5 s then 1 s at most: not a day, not the cap


@pytest.mark.parametrize(("asked", "honoured"), [(30, True), (60, True), (61, False)])
async def test_a_retry_after_up_to_the_cap_is_honoured_and_one_past_it_is_not(
    mock_clock: trio.testing.MockClock, asked: int, honoured: bool
) -> None:
    mock_clock.autojump_threshold = IDLE
    policy = RetryPolicy(max_retry_after=60)
    retries, elapsed, result, _ = await call(limited(503, str(asked)), retry=policy)
    assert result.content == "ok"
    (retry,) = retries
    if honoured:
        assert retry.delay == asked
        assert asked <= elapsed < asked + 1
    else:
        assert retry.delay <= policy.initial
        assert elapsed <= policy.initial


async def test_a_raised_cap_still_never_waits_past_the_calls_deadline(
    mock_clock: trio.testing.MockClock,
) -> None:
    # The caller allows waits of a day, but a call lives 120 s: the wait is not begun (and no
    # retry is reported), the 429 is raised at once -- not at the deadline, not a day later.
    mock_clock.autojump_threshold = IDLE
    policy = RetryPolicy(max_retry_after=86400)
    retries, elapsed, error, requests = await call(
        limited(429, DAY), retry=policy, timeouts=Timeouts(deadline=120)
    )
    assert isinstance(error, ProviderError)
    assert (error.code, error.status) == ("rate_limit", 429)
    assert retries == []
    assert requests == 1
    assert elapsed < 1


async def test_a_run_waiting_out_a_retry_after_ends_at_its_own_deadline(
    mock_clock: trio.testing.MockClock,
) -> None:
    # 50 s is under the cap and the call's deadline, so the engine waits -- but the run's own
    # deadline (5 s) cuts the wait: a cancel, not an error, and at 5 s, not at 50.
    mock_clock.autojump_threshold = IDLE
    events: list[AgentEvent] = []
    async with FaultProviderServer(limited(429, "50")) as server, open_runtime() as runtime:
        provider = OpenAIChat(model="m", base_url=server.base_url)
        try:
            agent = await Agent.start(runtime, provider, on=[events.append])
            start = trio.current_time()
            result = await agent.generate("hi", timeout=5)
            elapsed = trio.current_time() - start
        finally:
            await provider.aclose()
        assert server.calls() == 1
    assert (result.stop, result.partial) == (StopReason.TIMEOUT, True)
    assert elapsed == pytest.approx(5)
    assert [e.delay for e in events if e.kind == "retry"] == [50]


async def test_a_run_facing_a_day_long_retry_after_fails_long_before_its_deadline(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    async with (
        FaultProviderServer(limited(503, DAY, then="refuse")) as server,
        open_runtime() as runtime,
    ):
        provider = OpenAIChat(model="m", base_url=server.base_url)
        try:
            agent = await Agent.start(runtime, provider)
            start = trio.current_time()
            with pytest.raises(ProviderError) as failure:
                await agent.generate("hi", timeout=3600)
            elapsed = trio.current_time() - start
        finally:
            await provider.aclose()
    assert (failure.value.code, failure.value.status) == ("server_error", 503)
    assert elapsed <= RetryPolicy().initial * 3


# -- the header's forms -------------------------------------------------------------------------


async def test_an_http_date_retry_after_is_the_wait_until_that_instant(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    retries, elapsed, result, _ = await call(limited(429, http_date(30)))
    assert result.content == "ok"
    (retry,) = retries
    # An HTTP date has whole seconds: the wait is the rest of those 30 s, give or take the
    # second the date was cut to and the real time the exchange took.
    assert 28 <= retry.delay <= 30
    assert elapsed == pytest.approx(retry.delay, abs=0.5)


async def test_an_http_date_a_day_ahead_is_over_the_cap(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = IDLE
    retries, elapsed, result, _ = await call(limited(503, http_date(86400)))
    assert result.content == "ok"
    assert retries[0].delay <= RetryPolicy().initial
    assert elapsed <= RetryPolicy().initial


@pytest.mark.parametrize(
    "value",
    [
        "Wed, 21 Oct 2015 07:28:00 GMT",  # IMF-fixdate, past
        "Wednesday, 21-Oct-15 07:28:00 GMT",  # obsolete RFC 850 form, past
        "Wed Oct 21 07:28:00 2015",  # obsolete asctime form: no zone (GMT by definition)
        "Wed, 21 Oct 2015 07:28:00 -0000",  # a zone email.utils reads as "none"
    ],
)
async def test_an_http_date_already_past_means_retry_at_once(
    mock_clock: trio.testing.MockClock, value: str
) -> None:
    # Regression: a date without a zone (asctime, "-0000") came back naive from email.utils,
    # and subtracting it from an aware "now" raised TypeError out of the stream.
    mock_clock.autojump_threshold = IDLE
    retries, elapsed, result, requests = await call(limited(429, value))
    assert result.content == "ok"
    assert requests == 2
    assert [r.delay for r in retries] == [0]
    assert elapsed < 0.01


@pytest.mark.parametrize("value", ["-5", "-0.5", "nan", "inf", "1e3", "soon", "", "1_0"])
async def test_a_retry_after_that_is_not_a_delay_or_a_date_is_ignored(
    mock_clock: trio.testing.MockClock, value: str
) -> None:
    # Before: float() took "-5" (then 0: an immediate retry) and "nan" (0 as well).
    mock_clock.autojump_threshold = IDLE
    policy = RetryPolicy(initial=2.0)
    draw = policy.delay(0, random.Random(7), None)  # what the backoff waits, seeded alike
    retries, _, result, _ = await call(limited(503, value), retry=policy, rng=random.Random(7))
    assert result.content == "ok"
    assert [r.delay for r in retries] == [draw]
    assert 0 < draw <= policy.initial


# -- the parser alone ---------------------------------------------------------------------------


def test_the_parser_reads_each_form() -> None:
    assert parse_retry_after(None, "7", now=NOW) == 7
    assert parse_retry_after(None, " 7 ", now=NOW) == 7
    assert parse_retry_after(None, "1.5", now=NOW) == 1.5
    assert parse_retry_after("2500", "7", now=NOW) == 2.5  # retry-after-ms first
    assert parse_retry_after("-1", "7", now=NOW) == 7  # an unusable ms header is skipped
    assert parse_retry_after(None, None, now=NOW) is None
    ahead = email.utils.format_datetime(NOW + datetime.timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(None, ahead, now=NOW) == 90
    assert parse_retry_after(None, "Thu Jan  2 03:05:05 2030", now=NOW) == 60  # asctime: GMT
    assert parse_retry_after(None, "Wed, 02 Jan 2030 03:04:05 -0000", now=NOW) == 0
    assert parse_retry_after(None, "Wed, 02 Jan 2030 04:04:05 +0100", now=NOW) == 0
    # float() would take the first five (and "١٢" as 12: digits of another script).
    for bad in ("-5", "nan", "inf", "1e3", "١٢", "0x10", "12 s", "Mon, 99 Foo 2030 9:9:9 GMT"):
        assert parse_retry_after(None, bad, now=NOW) is None, bad


@given(
    milliseconds=st.none() | st.text(max_size=40),
    value=st.none() | st.text(max_size=60) | st.from_regex(r"[0-9.\- ]{0,20}", fullmatch=True),
)
def test_the_parser_never_raises_and_gives_none_or_a_finite_wait(
    milliseconds: str | None, value: str | None
) -> None:
    wait = parse_retry_after(milliseconds, value, now=NOW)
    assert wait is None or (isinstance(wait, float) and 0 <= wait < float("inf"))


@given(
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 1),
        max_value=datetime.datetime(9999, 12, 31),
        timezones=st.just(datetime.UTC),
    )
)
def test_every_http_date_reads_as_the_seconds_until_it(when: datetime.datetime) -> None:
    text = email.utils.format_datetime(when, usegmt=True)
    expected = max(0.0, (when.replace(microsecond=0) - NOW).total_seconds())
    assert parse_retry_after(None, text, now=NOW) == expected
