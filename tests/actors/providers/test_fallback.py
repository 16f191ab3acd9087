"""``FallbackProvider`` (issue 27, section 1): a call that fails before its first delta goes to
the next provider, for each failure class; after the first delta there is no silent switch
(unless opted in, with a rewind the consumer takes); breakers skip without calling; the error
when every member fails.

Every member is the real HTTP engine against the :class:`~actors.testing.FaultProviderServer`
on loopback (a closed port for a refused connection), on trio's mock clock where time matters.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from actors import open_runtime
from actors.providers import (
    FallbackEvent,
    FallbackOn,
    FallbackProvider,
    OpenAIChat,
    RetryEvent,
    RetryPolicy,
    Timeouts,
    observe_fallbacks,
    observe_retries,
)
from actors.testing import FaultProviderServer, ScriptedProvider
from protocols.breaker import BreakerState, CircuitBreaker
from protocols.errors import ConfigError, ProviderError
from protocols.messages import Message, ProviderResult

HI = [Message.user("hi")]
IDLE = 0.05  # mock-clock autojump threshold (real seconds): real sockets are involved


def member(base_url: str, model: str, *, retries: int = 0, key: str = "k") -> OpenAIChat:
    return OpenAIChat(
        model=model, base_url=base_url, api_key=key, retry=RetryPolicy(retries=retries)
    )


@asynccontextmanager
async def servers(
    *plans: Sequence[dict[str, Any]],
) -> AsyncIterator[list[FaultProviderServer]]:
    opened: list[FaultProviderServer] = []
    try:
        for plan in plans:
            server = FaultProviderServer(plan)
            await server.__aenter__()
            opened.append(server)
        yield opened
    finally:
        for server in reversed(opened):
            await server.__aexit__(None, None, None)


def closed_port() -> str:
    """The base URL of a port nothing listens on (a real refused connection)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


PASS = [{"kind": "pass", "text": "second"}]

#: (name, the first member's plan, the codes configured, the reason, the code, the status).
CLASSES: list[tuple[str, list[dict[str, Any]], frozenset[str], str, str, int | None]] = [
    ("429", [{"kind": "http-error", "status": 429}], frozenset(), "overload", "rate_limit", 429),
    ("503", [{"kind": "http-error", "status": 503}], frozenset(), "overload", "server_error", 503),
    ("529", [{"kind": "http-error", "status": 529}], frozenset(), "overload", "server_error", 529),
    ("reset", [{"kind": "connection-refused"}], frozenset(), "connection", "transport", None),
    (
        "context",
        [{"kind": "http-error", "status": 400, "message": "maximum context length exceeded"}],
        frozenset(),
        "context_overflow",
        "context_overflow",
        400,
    ),
    ("code", [{"kind": "http-error", "status": 401}], frozenset({"auth"}), "code", "auth", 401),
    (
        "status",
        [{"kind": "http-error", "status": 404}],
        frozenset({"404"}),
        "code",
        "model_not_found",
        404,
    ),
    ("5xx", [{"kind": "http-error", "status": 500}], frozenset(), "retryable", "server_error", 500),
    (
        "cut",
        [{"kind": "stream-cut", "afterBytes": 10}],
        frozenset(),
        "connection",
        "transport",
        None,
    ),
]


@pytest.mark.parametrize(
    ("plan", "codes", "reason", "code", "status"),
    [case[1:] for case in CLASSES],
    ids=[case[0] for case in CLASSES],
)
async def test_each_failure_class_before_the_first_delta_goes_to_the_next_provider(
    plan: list[dict[str, Any]], codes: frozenset[str], reason: str, code: str, status: int | None
) -> None:
    heard: list[FallbackEvent] = []
    observed: list[FallbackEvent] = []
    async with servers(plan, PASS) as (first, second):
        fallback = FallbackProvider(
            [member(first.base_url, "big"), member(second.base_url, "small")],
            on=FallbackOn(codes=codes),
            on_fallback=heard.append,
        )
        try:
            with observe_fallbacks(observed.append):
                result = await fallback.generate(HI)
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (1, 1)
    assert (result.content, result.provider) == ("second", "openai-chat:small")
    (event,) = heard
    assert observed == heard
    assert (event.provider, event.index, event.next) == ("openai-chat:big", 0, "openai-chat:small")
    assert (event.reason, event.code, event.status, event.rewind) == (reason, code, status, False)
    assert event.partial is None


async def test_a_retryable_timeout_goes_to_the_next_provider(
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = IDLE
    heard: list[FallbackEvent] = []
    async with servers([{"kind": "timeout-before-first-byte", "milliseconds": 60_000}], PASS) as (
        first,
        second,
    ):
        slow = OpenAIChat(
            model="a",
            base_url=first.base_url,
            api_key="k",
            retry=RetryPolicy(retries=0),
            timeouts=Timeouts(first_event=5),
        )
        fallback = FallbackProvider([slow, member(second.base_url, "b")], on_fallback=heard.append)
        start = trio.current_time()
        try:
            result = await fallback.generate(HI)
        finally:
            await fallback.aclose()
        assert 5 <= trio.current_time() - start < 6
    assert result.provider == "openai-chat:b"
    assert [(e.reason, e.code) for e in heard] == [("retryable", "timeout")]


async def test_a_member_past_its_own_call_deadline_is_left(
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = IDLE
    heard: list[FallbackEvent] = []
    silent = [{"kind": "timeout-before-first-byte", "milliseconds": 60_000}]
    async with servers(silent, PASS) as (first, second):
        slow = OpenAIChat(
            model="a",
            base_url=first.base_url,
            api_key="k",
            retry=RetryPolicy(retries=0),
            timeouts=Timeouts(deadline=3),
        )
        fallback = FallbackProvider([slow, member(second.base_url, "b")], on_fallback=heard.append)
        try:
            result = await fallback.generate(HI)
        finally:
            await fallback.aclose()
    assert result.provider == "openai-chat:b"
    (event,) = heard
    assert (event.reason, event.code) == ("retryable", "timeout")


async def test_a_refused_connection_goes_to_the_next_provider() -> None:
    heard: list[FallbackEvent] = []
    async with servers(PASS) as (second,):
        fallback = FallbackProvider(
            [member(closed_port(), "down"), member(second.base_url, "up")],
            on_fallback=heard.append,
        )
        try:
            result = await fallback.generate(HI)
        finally:
            await fallback.aclose()
    assert (result.content, result.provider) == ("second", "openai-chat:up")
    assert [(e.reason, e.code) for e in heard] == [("connection", "transport")]


@pytest.mark.parametrize(
    ("status", "on"),
    [
        (401, FallbackOn()),  # not a class that goes on, and no code configured
        (400, FallbackOn()),  # a bad request: the next would be refused as well
        (503, FallbackOn(overload=False, retryable=False)),  # turned off
        (429, FallbackOn(overload=False, retryable=False, codes={"auth"})),
    ],
)
async def test_a_failure_the_policy_does_not_name_is_raised_without_calling_the_next(
    status: int, on: FallbackOn
) -> None:
    heard: list[FallbackEvent] = []
    async with servers([{"kind": "http-error", "status": status}], PASS) as (first, second):
        fallback = FallbackProvider(
            [member(first.base_url, "a"), member(second.base_url, "b")],
            on=on,
            on_fallback=heard.append,
        )
        try:
            with pytest.raises(ProviderError) as raised:
                await fallback.generate(HI)
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (1, 0)
    assert raised.value.status == status
    assert heard == []
    assert not getattr(raised.value, "__notes__", [])


async def test_when_every_provider_fails_the_last_error_is_raised_with_a_note_for_each_other() -> (
    None
):
    plans = (
        [{"kind": "http-error", "status": 429, "message": "slow down"}],
        [{"kind": "connection-refused"}],
        [{"kind": "http-error", "status": 503, "message": "the third is down"}],
    )
    async with servers(*plans) as (one, two, three):
        fallback = FallbackProvider(
            [member(one.base_url, "a"), member(two.base_url, "b"), member(three.base_url, "c")]
        )
        try:
            with pytest.raises(ProviderError) as raised:
                await fallback.generate(HI)
        finally:
            await fallback.aclose()
        assert (one.calls(), two.calls(), three.calls()) == (1, 1, 1)
    error = raised.value
    assert type(error) is ProviderError
    assert (error.code, error.status) == ("server_error", 503)  # the last one's
    assert "the third is down" in str(error)
    notes = error.__notes__
    assert len(notes) == 2
    assert notes[0].startswith("fallback: openai-chat:a was left: overload (rate_limit, HTTP 429)")
    assert "slow down" in notes[0]
    assert notes[1].startswith("fallback: openai-chat:b was left: connection (transport)")


async def test_the_notes_never_carry_a_members_key() -> None:
    key = "sk-secret-0123456789abcdef"
    plans = (
        [{"kind": "http-error", "status": 429, "message": f"quota exceeded for key {key}"}],
        [{"kind": "http-error", "status": 503}],
    )
    async with servers(*plans) as (one, two):
        fallback = FallbackProvider(
            [member(one.base_url, "a", key=key), member(two.base_url, "b", key=key)]
        )
        try:
            with pytest.raises(ProviderError) as raised:
                await fallback.generate(HI)
        finally:
            await fallback.aclose()
    shown = str(raised.value) + "\n".join(raised.value.__notes__)
    assert key not in shown
    assert "[redacted]" in shown


#: One token, then a stall past the member's idle timeout (5 s): a failure after the first delta.
STALL = [{"kind": "slow", "text": "half an answer", "tokensPerSecond": 0.1}]


def stalling(base_url: str) -> OpenAIChat:
    return OpenAIChat(
        model="a",
        base_url=base_url,
        api_key="k",
        retry=RetryPolicy(retries=0),
        timeouts=Timeouts(idle=5),
    )


async def read_all(fallback: FallbackProvider, shown: list[str]) -> ProviderResult:
    async with fallback.stream(HI) as stream:
        async for delta in stream:
            shown.append(delta.text)
            assert stream.partial.content == "".join(shown)
    return stream.result


@pytest.mark.parametrize("rewind", [False, True])
async def test_after_the_first_delta_the_failure_is_raised_and_nothing_switches(
    autojump_clock: trio.testing.MockClock, rewind: bool
) -> None:
    # Opted in or not: nobody here takes a rewind (a listener alone does not), so no switch.
    autojump_clock.autojump_threshold = IDLE
    heard: list[FallbackEvent] = []
    shown: list[str] = []
    async with servers(STALL, PASS) as (first, second):
        fallback = FallbackProvider(
            [stalling(first.base_url), member(second.base_url, "b")],
            rewind=rewind,
            on_fallback=heard.append,
        )
        try:
            with observe_fallbacks(heard.append), pytest.raises(ProviderError) as raised:
                await read_all(fallback, shown)
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (1, 0)
    assert (raised.value.code, raised.value.retryable) == ("timeout", True)
    assert raised.value.partial is not None
    assert raised.value.partial.content == "half "
    assert shown == ["half "]
    assert heard == []


async def test_opted_in_a_consumer_that_takes_rewinds_gets_the_next_answer_whole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = IDLE
    heard: list[FallbackEvent] = []
    shown: list[str] = []
    async with servers(STALL, PASS) as (first, second):
        fallback = FallbackProvider(
            [stalling(first.base_url), member(second.base_url, "b")], rewind=True
        )
        try:
            with observe_fallbacks(heard.append, rewinds=True):
                async with fallback.stream(HI) as stream:
                    async for delta in stream:
                        shown.append(delta.text)
                        if heard:  # voided: the partial is the next member's alone
                            assert stream.partial.content == "second"
                            assert stream.partial.provider == "openai-chat:b"
                        else:
                            assert stream.partial.content == "half "
                            assert stream.partial.provider == "openai-chat:a"
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (1, 1)
    assert shown == ["half ", "second"]
    assert (stream.result.content, stream.result.provider) == ("second", "openai-chat:b")
    (event,) = heard
    assert (event.rewind, event.reason, event.code) == (True, "retryable", "timeout")
    assert event.partial is not None
    assert event.partial.content == "half "
    assert event.describe() == "retryable (timeout, after it had streamed)"


async def test_the_innermost_observer_decides_whether_a_rewind_is_taken(
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = IDLE
    heard: list[FallbackEvent] = []
    async with servers(STALL, PASS) as (first, second):
        fallback = FallbackProvider(
            [stalling(first.base_url), member(second.base_url, "b")], rewind=True
        )
        try:
            with (
                observe_fallbacks(heard.append, rewinds=True),
                observe_fallbacks(heard.append),  # the consumer in here takes none
                pytest.raises(ProviderError),
            ):
                await read_all(fallback, [])
        finally:
            await fallback.aclose()
        assert second.calls() == 0
    assert heard == []


async def test_an_in_stream_error_before_any_delta_goes_on_when_its_vendor_type_is_named() -> None:
    broken = [{"kind": "stream-error", "text": "never shown", "message": "died"}]
    heard: list[FallbackEvent] = []
    async with servers(broken, PASS) as (first, second):
        fallback = FallbackProvider(
            [member(first.base_url, "a"), member(second.base_url, "b")],
            on=FallbackOn(codes={"server_error"}),
            on_fallback=heard.append,
        )
        shown: list[str] = []
        try:
            result = await read_all(fallback, shown)
        finally:
            await fallback.aclose()
    # The error record came in the same read as the text: nothing had been shown.
    assert shown == ["second"]
    assert result.provider == "openai-chat:b"
    assert [(e.reason, e.code, e.rewind) for e in heard] == [("code", "provider_error", False)]


async def test_an_open_breaker_skips_its_provider_without_calling_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = IDLE
    heard: list[FallbackEvent] = []
    async with (
        servers([{"kind": "http-error", "status": 503}], PASS) as (first, second),
        open_runtime() as runtime,
    ):
        primary = await runtime.connect(
            member(first.base_url, "a"), name="primary", breaker=CircuitBreaker(1, cooldown=30)
        )
        fallback = FallbackProvider(
            [primary, member(second.base_url, "b")], on_fallback=heard.append
        )
        assert fallback.names == ("primary", "openai-chat:b")
        for _ in range(3):
            assert (await fallback.generate(HI)).provider == "openai-chat:b"
        assert primary.statistics().breaker is BreakerState.OPEN
        assert (first.calls(), second.calls()) == (1, 3)  # tried once, then skipped
        assert primary.statistics().in_flight == 0  # every attempt gave its slot back
    assert [e.reason for e in heard] == ["overload", "circuit_open", "circuit_open"]


async def test_a_member_retries_as_configured_before_it_is_left(
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = IDLE
    retries: list[RetryEvent] = []
    heard: list[FallbackEvent] = []
    refusal = {"kind": "http-error", "status": 503, "retryAfter": "7"}
    async with servers([refusal], PASS) as (first, second):
        fallback = FallbackProvider(
            [member(first.base_url, "a", retries=2), member(second.base_url, "b")],
            on_fallback=heard.append,
        )
        start = trio.current_time()
        try:
            with observe_retries(retries.append):
                result = await fallback.generate(HI)
        finally:
            await fallback.aclose()
        assert (first.calls(), second.calls()) == (3, 1)
    assert result.content == "second"
    assert [(r.attempt, r.delay) for r in retries] == [(1, 7), (2, 7)]
    assert 14 <= trio.current_time() - start < 15
    assert len(heard) == 1


async def test_the_callers_deadline_bounds_every_attempt_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Each member would wait out its Retry-After of 7 s once: 14 s in all. The caller gave
    # the whole call 10 s: the second member's backoff is cut by that same deadline.
    autojump_clock.autojump_threshold = IDLE
    refusal = {"kind": "http-error", "status": 503, "retryAfter": "7"}
    async with servers([refusal], [refusal, *PASS]) as (first, second):
        fallback = FallbackProvider(
            [member(first.base_url, "a", retries=1), member(second.base_url, "b", retries=1)]
        )
        start = trio.current_time()
        try:
            with trio.move_on_after(10) as scope:
                async with fallback.stream(HI) as stream:
                    async for _ in stream:
                        pass
        finally:
            await fallback.aclose()
        assert scope.cancelled_caught
        assert trio.current_time() - start == pytest.approx(10)
        assert (first.calls(), second.calls()) == (2, 1)
    assert (stream.partial.content, stream.partial.provider) == ("", "openai-chat:b")


async def test_a_cancel_between_attempts_calls_no_further_provider() -> None:
    async with servers([{"kind": "http-error", "status": 503}], PASS) as (first, second):
        with trio.CancelScope() as scope:
            fallback = FallbackProvider(
                [member(first.base_url, "a"), member(second.base_url, "b")],
                on_fallback=lambda event: scope.cancel(),
            )
            try:
                await fallback.generate(HI)
            finally:
                await fallback.aclose()
        assert scope.cancelled_caught
        assert (first.calls(), second.calls()) == (1, 0)


async def test_a_listener_that_raises_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    def bad(event: FallbackEvent) -> None:
        raise RuntimeError("listener bug")

    async with servers([{"kind": "http-error", "status": 429}], PASS) as (first, second):
        fallback = FallbackProvider(
            [member(first.base_url, "a"), member(second.base_url, "b")], on_fallback=bad
        )
        try:
            with observe_fallbacks(bad):
                result = await fallback.generate(HI)
        finally:
            await fallback.aclose()
    assert result.content == "second"
    failures = [r for r in caplog.records if r.name == "actors.providers._fallback"]
    assert len(failures) == 2
    assert all(r.exc_info is not None for r in failures)


def test_members_and_names_are_checked() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        FallbackProvider([])
    with pytest.raises(ConfigError, match="not a provider"):
        FallbackProvider([object()])  # type: ignore[list-item]
    scripted = ScriptedProvider("x")
    with pytest.raises(ConfigError, match="names"):
        FallbackProvider([scripted, scripted], names=["one"])
    with pytest.raises(ConfigError, match="differ"):
        FallbackProvider([scripted, scripted], names=["one", "one"])
    with pytest.raises(ConfigError, match="collection"):
        FallbackOn(codes="auth")
    twins = FallbackProvider(
        [member("http://127.0.0.1:9/v1", "m"), member("http://127.0.0.1:9/v1", "m"), scripted]
    )
    assert twins.names == ("openai-chat:m#0", "openai-chat:m#1", "scripted")
    assert repr(twins) == "<FallbackProvider openai-chat:m#0, openai-chat:m#1, scripted>"
