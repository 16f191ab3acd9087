"""Providers behind an egress policy: judged when made (the URL) and at every connection (the
addresses the name resolved to), against a real loopback server -- refused before a byte is
sent, with an error naming the host that is never retried."""

from __future__ import annotations

import pytest

from actors.providers import OpenAIChat
from actors.testing import FaultProviderServer
from protocols import Message
from protocols.egress import EgressPolicy
from protocols.errors import ConfigError, ProviderError

pytestmark = pytest.mark.trio


async def test_a_loopback_url_is_refused_when_the_provider_is_made() -> None:
    async with FaultProviderServer([{"kind": "pass"}]) as server:
        with pytest.raises(ConfigError, match=r"egress to 127\.0\.0\.1:\d+ .*loopback address"):
            OpenAIChat(model="any", base_url=server.base_url, egress=EgressPolicy())
        with pytest.raises(ConfigError, match="not in the allow-list"):
            OpenAIChat(
                model="any",
                base_url=server.base_url,
                egress=EgressPolicy(allow=["api.openai.com"], private=["127.0.0.0/8"]),
            )
        assert server.calls() == 0


async def test_a_model_server_on_this_machine_is_reached_when_its_network_is_allowed() -> None:
    async with FaultProviderServer([{"kind": "pass"}]) as server:
        provider = OpenAIChat(
            model="any", base_url=server.base_url, egress=EgressPolicy(private=["127.0.0.0/8"])
        )
        try:
            result = await provider.generate([Message.user("hi")])
        finally:
            await provider.aclose()
        assert result.content == "ok"
        assert server.calls() == 1


async def test_a_name_whose_answer_is_not_allowed_is_refused_at_connection() -> None:
    # "localhost" passes by name (a private network is allowed) but resolves to 127.0.0.1,
    # which is not in it: refused at the connection, before anything is sent, and not retried.
    async with FaultProviderServer([{"kind": "pass"}]) as server:
        url = server.base_url.replace("127.0.0.1", "localhost")
        provider = OpenAIChat(
            model="any", base_url=url, egress=EgressPolicy(private=["10.0.0.0/8"])
        )
        retries: list[object] = []
        provider.on_retry = retries.append
        try:
            with pytest.raises(ProviderError) as refused:
                await provider.generate([Message.user("hi")])
        finally:
            await provider.aclose()
        assert refused.value.code == "egress"
        assert not refused.value.retryable
        assert "egress to localhost:" in refused.value.message
        assert "loopback address" in refused.value.message
        assert retries == []
        assert server.calls() == 0


async def test_a_client_of_the_callers_cannot_be_guarded_by_the_provider() -> None:
    import httpx

    async with httpx.AsyncClient() as client:
        with pytest.raises(ConfigError, match="egress= guards the provider's own client"):
            OpenAIChat(
                model="any",
                base_url="https://api.openai.com/v1",
                client=client,
                egress=EgressPolicy(),
            )
