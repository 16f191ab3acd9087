"""ProviderConnection: a supervised provider with a concurrency limit and a circuit breaker."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors import open_runtime
from actors.providers import OpenAIChat, ProviderConnection, RetryPolicy
from actors.testing import Fail, FaultProviderServer, Hang, ScriptedProvider
from protocols import Message, ProviderError
from protocols.breaker import BreakerState, CircuitBreaker

HI = [Message.user("hi")]


def server_error() -> Fail:
    return Fail(ProviderError("boom", code="server_error", retryable=True, status=503))


async def test_a_connection_is_a_provider() -> None:
    scripted = ScriptedProvider("hello", "again")
    async with open_runtime() as runtime:
        connection = await runtime.connect(scripted, name="llm")
        assert isinstance(connection, ProviderConnection)
        assert (await connection.generate(HI)).content == "hello"
        async with connection.stream(HI) as stream:
            assert [delta.text async for delta in stream] == ["again"]
        assert stream.result.content == "again"
        assert runtime.lookup("llm") is None  # not registered unless asked
        statistics = connection.statistics()
        assert (statistics.in_flight, statistics.limit, statistics.breaker) == (
            0,
            16,
            BreakerState.CLOSED,
        )


async def test_at_most_limit_calls_are_in_flight(autojump_clock: trio.testing.MockClock) -> None:
    scripted = ScriptedProvider(Hang("a"), Hang("b"), "third")
    async with open_runtime() as runtime:
        connection = await runtime.connect(scripted, limit=2)
        finished: list[str] = []

        async def call() -> None:
            finished.append((await connection.generate(HI)).content)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            statistics = connection.statistics()
            assert (statistics.in_flight, statistics.waiting) == (2, 1)
            assert len(scripted.calls) == 2  # the third has not reached the provider
            nursery.cancel_scope.cancel()
        assert connection.statistics().in_flight == 0  # cancelled calls gave their slots back
        assert (await connection.generate(HI)).content == "third"


async def test_the_breaker_opens_fails_fast_and_recovers_after_a_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedProvider(server_error(), server_error(), "probe ok", "after")
    breaker = CircuitBreaker(threshold=2, cooldown=10)
    async with open_runtime() as runtime:
        connection = await runtime.connect(scripted, breaker=breaker)
        for _ in range(2):
            with pytest.raises(ProviderError, match="boom"):
                await connection.generate(HI)
        assert connection.statistics().breaker is BreakerState.OPEN
        with pytest.raises(ProviderError) as refused:
            await connection.generate(HI)
        assert (refused.value.code, refused.value.retryable) == ("circuit_open", True)
        assert refused.value.retry_after == pytest.approx(10)
        assert len(scripted.calls) == 2  # failing fast: the provider was not called
        await trio.sleep(10)
        assert (await connection.generate(HI)).content == "probe ok"
        assert connection.statistics().breaker is BreakerState.CLOSED
        assert (await connection.generate(HI)).content == "after"


async def test_errors_that_say_nothing_about_health_do_not_count() -> None:
    bad_request = Fail(ProviderError("bad", code="bad_request", retryable=False, status=400))
    scripted = ScriptedProvider(bad_request, bad_request, bad_request, "fine")
    async with open_runtime() as runtime:
        connection = await runtime.connect(scripted, breaker=CircuitBreaker(threshold=2))
        for _ in range(3):
            with pytest.raises(ProviderError, match="bad"):
                await connection.generate(HI)
        assert connection.statistics().breaker is BreakerState.CLOSED
        assert connection.statistics().failures == 0
        assert (await connection.generate(HI)).content == "fine"


async def test_a_cancelled_probe_lets_the_next_probe_go(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedProvider(server_error(), Hang(), "recovered")
    breaker = CircuitBreaker(threshold=1, cooldown=5)
    async with open_runtime() as runtime:
        connection = await runtime.connect(scripted, breaker=breaker)
        with pytest.raises(ProviderError):
            await connection.generate(HI)
        await trio.sleep(5)
        with trio.move_on_after(1):  # the probe hangs and is cancelled
            await connection.generate(HI)
        assert connection.statistics().breaker is BreakerState.HALF_OPEN
        assert (await connection.generate(HI)).content == "recovered"
        assert connection.statistics().breaker is BreakerState.CLOSED


async def test_a_pool_timeout_recycles_the_provider_from_its_factory() -> None:
    built: list[ScriptedProvider] = []

    def factory() -> ScriptedProvider:
        pool_timeout = Fail(ProviderError("pool", code="pool_timeout", retryable=True))
        built.append(ScriptedProvider(pool_timeout) if not built else ScriptedProvider("fresh"))
        return built[-1]

    async with open_runtime() as runtime:
        connection = await runtime.connect(factory)
        with pytest.raises(ProviderError, match="pool"):
            await connection.generate(HI)
        assert (await connection.generate(HI)).content == "fresh"  # waits for the restart
        assert len(built) == 2
        assert connection.ref.name == "provider-connection-1"
        assert connection.statistics().restarts == 1


async def test_recycling_an_http_provider_renews_its_client() -> None:
    async with (
        FaultProviderServer([{"kind": "pass", "text": "ok"}]) as server,
        open_runtime() as rt,
    ):
        provider = OpenAIChat(model="m", base_url=server.base_url, retry=RetryPolicy(retries=0))
        connection = await rt.connect(provider)
        assert (await connection.generate(HI)).content == "ok"
        first_client = provider.client
        await connection.recycle()
        with trio.fail_after(5):  # the next call waits through the restart
            assert (await connection.generate(HI)).content == "ok"
        assert connection.statistics().restarts == 1
        assert provider.client is not first_client
        assert first_client.is_closed
        await connection.aclose()
        assert provider.client.is_closed  # stopping the connection closes the client


async def test_a_stopped_connection_refuses_calls() -> None:
    async with open_runtime() as runtime:
        connection = await runtime.connect(ScriptedProvider("x"))
        await connection.aclose()
        with pytest.raises(Exception, match="is stopped"):
            await connection.generate(HI)
        connection.recycle_nowait()  # harmless when stopped


async def test_bad_limit_is_refused() -> None:
    async with open_runtime() as runtime:
        with pytest.raises(Exception, match="limit must be >= 1"):
            await runtime.connect(ScriptedProvider(), limit=0)
