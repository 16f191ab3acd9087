"""Model settings through the relay (issue 24, item 1): stream frames carry them to the
upstream, a server's cap on output tokens lowers (or sets) a request's ``max_tokens`` and says
so in its answer to ``hello``, and old and new on either side keep working: protocol version 2
is negotiated by the hello, a relay from before it gets hello 1 and never a frame it would
refuse, a client from before it never gets a ready frame it would refuse.

Real sockets: ``RelayServer`` on hypercorn, ``RelayProvider`` over trio-websocket, raw
websockets (wsproto) where a test plays an old client, a trio-websocket server playing an old
relay, and the :class:`~actors.testing.Simulator` upstream recording the settings it got.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import trio_websocket
from test_relay import TOKEN, Raw, drain, hello, relay, running, server, stream

from actors import ModelSettings, open_runtime, tool
from actors.relay import RelayLimits
from actors.testing import Simulator
from protocols.errors import ConfigError, ProviderError
from protocols.messages import ProviderOptions, ProviderResult
from protocols.relay import (
    SETTINGS_FIELDS,
    ResultFrame,
    decode_server_frame,
    encode_frame,
    error_frame,
)

#: Every key of a version 1 ready frame: what a client from before version 2 decodes.
READY_V1 = {"type", "version", "max_frame", "max_streams"}
#: The options fields a server from before version 2 decodes (it refuses any other).
OPTIONS_V1 = {"think", "schema", "max_tokens", "temperature", "tool_choice", "stop", "extra"}

SETTINGS = ModelSettings(
    temperature=0.4,
    top_p=0.9,
    max_tokens=64,
    stop=["END"],
    seed=3,
    presence_penalty=0.5,
    frequency_penalty=-0.5,
    reasoning_effort="low",
    parallel_tool_calls=False,
    extra={"vendor_option": "x"},
)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(autouse=True)
def _autojump(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.05


async def test_settings_cross_the_relay_to_the_upstream() -> None:
    async with Simulator() as sim:
        upstream = sim.openai()
        async with running(server(upstream)) as url, relay(url) as provider:
            async with open_runtime() as runtime:
                agent = await runtime.agent(
                    provider, tools=[add], settings=SETTINGS.merge({"top_p": 0.5})
                )
                await agent.generate("hello", settings={"top_p": 0.9})
            assert provider.ready is not None
            assert (provider.ready.version, provider.ready.max_tokens) == (3, None)
        await upstream.aclose()
    assert sim.requests[-1].settings == SETTINGS


async def test_a_capped_relay_says_its_cap_and_lowers_or_sets_max_tokens() -> None:
    async with Simulator() as sim:
        upstream = sim.openai()
        app = server(upstream, limits=RelayLimits(max_tokens=5))
        async with running(app) as url, relay(url) as provider:
            asked: list[int | None] = [100, None, 3, 5]
            for max_tokens in asked:
                await drain(provider, "count to 9", options=ProviderOptions(max_tokens=max_tokens))
            assert provider.ready is not None
            assert provider.ready.max_tokens == 5
            # vendor options could lift the cap under another name: refused, never sent
            options = ProviderOptions(extra={"max_completion_tokens": 1000})
            with pytest.raises(ProviderError) as refused:
                await drain(provider, "count to 9", options=options)
            assert refused.value.code == "invalid"
            assert not refused.value.retryable
            # the connection goes on
            _, result = await drain(provider, "count to 9")
        await upstream.aclose()
    assert [request.max_tokens for request in sim.requests] == [5, 5, 3, 5, 5]
    assert len(sim.requests) == 5
    assert result.content == "1 2 3 4 5"


async def test_a_client_from_before_version_2_gets_a_ready_it_can_decode() -> None:
    async with Simulator() as sim:
        upstream = sim.openai()
        app = server(upstream, limits=RelayLimits(max_tokens=5))
        async with running(app) as url:
            async with Raw.connect(url) as old:
                await old.send(hello(version=1))
                ready = json.loads(await old.receive() or "")
                assert set(ready) == READY_V1  # no cap in it: an old client refuses new keys
                assert ready["version"] == 1
                # its requests are still capped, and answered
                await old.send(stream("a", "count to 9"))
                answered = [json.loads(await old.receive() or "") for _ in range(2)]
                assert answered[-1]["type"] == "result"
            async with Raw.connect(url) as new:
                await new.send(hello(version=2))
                ready = json.loads(await new.receive() or "")
                assert ready == {
                    "type": "ready",
                    "version": 2,
                    "max_frame": 1024 * 1024,
                    "max_streams": 16,
                    "max_tokens": 5,
                }
        await upstream.aclose()
    assert sim.requests[0].max_tokens == 5


class OldRelay:
    """A relay from before protocol version 2, as far as a client can tell: it refuses a
    ``hello`` of any other version than 1 (``version``, then closes), answers version 1 with a
    ready frame of the old shape, and decodes each stream frame strictly by the old options
    -- an unknown field is ``invalid`` and closes the connection, as the old server did."""

    def __init__(self) -> None:
        self.hellos: list[int] = []
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: trio_websocket.WebSocketRequest) -> None:
        socket = await request.accept()
        try:
            said = json.loads(await socket.get_message())
            self.hellos.append(said["version"])
            if said["version"] != 1:
                await socket.send_message(encode_frame(error_frame("version")))
                await socket.aclose(1008)
                return
            ready = {"type": "ready", "version": 1, "max_frame": 1 << 20, "max_streams": 16}
            await socket.send_message(json.dumps(ready))
            while True:
                frame = json.loads(await socket.get_message())
                if not set(frame.get("options", {})) <= OPTIONS_V1:
                    await socket.send_message(encode_frame(error_frame("invalid")))
                    await socket.aclose(1008)
                    return
                self.requests.append(frame)
                answer = ResultFrame(frame["id"], ProviderResult(content="old and fine"))
                await socket.send_message(encode_frame(answer))
        except trio_websocket.ConnectionClosed:
            pass


async def test_a_newer_client_speaks_version_1_to_an_older_relay() -> None:
    old = OldRelay()
    async with trio.open_nursery() as nursery:
        listener = await nursery.start(
            functools.partial(trio_websocket.serve_websocket, old, "127.0.0.1", 0, ssl_context=None)
        )
        url = f"http://127.0.0.1:{listener.port}"
        async with relay(url) as provider:
            # a request without the new settings works: hellos 3 and 2 refused, 1 accepted
            _, result = await drain(
                provider, "hi", options=ProviderOptions(max_tokens=9, temperature=0.5)
            )
            assert result.content == "old and fine"
            assert provider.ready is not None
            assert provider.ready.version == 1
            # one the old relay would refuse (closing the connection) is refused here, named
            for field in SETTINGS_FIELDS:
                samples: dict[str, Any] = {
                    "reasoning_effort": "low",
                    "parallel_tool_calls": True,
                    "seed": 1,
                    "cache": "off",
                    "cache_breakpoints": ["system"],
                    "cache_key": "tenant-7",
                    "cache_retention": "24h",
                }
                options = ProviderOptions(**{field: samples.get(field, 0.5)})
                with pytest.raises(ConfigError, match=rf"version 1.*cannot take {field}"):
                    await drain(provider, "hi", options=options)
            # nothing of those was sent, and the connection is still the first one
            _, result = await drain(provider, "again")
            assert result.content == "old and fine"
        nursery.cancel_scope.cancel()
    assert old.hellos == [3, 2, 1]
    assert [frame["messages"][-1]["content"] for frame in old.requests] == ["hi", "again"]
    assert old.requests[0]["options"] == {"max_tokens": 9, "temperature": 0.5}


async def test_the_http_endpoint_is_capped_and_says_so() -> None:
    async with Simulator() as sim:
        upstream = sim.openai()
        app = server(upstream, limits=RelayLimits(max_tokens=4))
        async with running(app) as url, httpx.AsyncClient() as client:
            body = {"messages": [{"role": "user", "content": "count to 9"}]}
            response = await client.post(
                url + "/v1/stream", json=body, headers={"authorization": f"Bearer {TOKEN}"}
            )
        await upstream.aclose()
    assert response.status_code == 200
    assert response.headers["x-relay-max-tokens"] == "4"
    last = decode_server_frame(response.text.splitlines()[-1])
    assert isinstance(last, ResultFrame)
    assert last.result.content == "1 2 3 4"
    assert sim.requests[-1].max_tokens == 4
