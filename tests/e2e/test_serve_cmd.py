"""``trio-agents serve``: its graceful shutdown in a real process, and its options.

The shutdown tests run ``python -m actors serve`` as a subprocess on a free port, open a
websocket stream and a ``POST /v1/stream`` stream through it (the simulator counting to a
million: both are mid-stream), send the signal, and read what each client is told. They run on
the real clock (a subprocess does not follow trio's mock clock); every wait is bounded.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
import wsproto
import wsproto.events as ws_events

from actors.cli import _serve as _serve_cmd
from actors.cli import main as cli_main
from actors.cli._demo import Endpoint
from actors.relay import RelayProvider
from actors.testing import Simulator
from protocols.messages import Message
from protocols.relay import (
    HTTP_REQUEST_ID,
    PROTOCOL_VERSION,
    Delta,
    Hello,
    Ready,
    Result,
    RunFrame,
    ServerFrame,
    Stream,
    decode_server_frame,
    encode_frame,
    error_frame,
)

TOKEN = "serve-command-token-0123456789"
LONG = "count to 5000"  # at the default pace (0.02 s a piece), a stream of 100 s

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@asynccontextmanager
async def serving(*args: str) -> AsyncIterator[tuple[trio.Process, str, list[bytes]]]:
    """``python -m actors serve --port 0 --token TOKEN ARGS...`` until it has said where it
    listens; yields the process, its ``http://127.0.0.1:PORT`` and what it printed so far (the
    list grows as the test reads more with :func:`read_rest`)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRIO_AGENTS_RELAY_TOKEN", None)
    command = [sys.executable, "-m", "actors", "serve", "--port", "0", "--token", TOKEN, *args]
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    printed: list[bytes] = []
    try:
        with trio.fail_after(60):
            while b"websocket: ws://" not in b"".join(printed) or not b"".join(printed).endswith(
                b"\n"
            ):
                data = await process.stdout.receive_some(65536)
                assert data, f"serve ended early: {b''.join(printed)!r}"
                printed.append(data)
        text = b"".join(printed).decode()
        url = text.split(" at ", 1)[1].split()[0].rstrip("/")
        yield process, url, printed
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    await pipe.aclose()


async def read_rest(process: trio.Process, printed: list[bytes]) -> tuple[str, str]:
    """Everything the process prints until it exits: (stdout, stderr)."""
    assert process.stdout is not None
    assert process.stderr is not None
    errors: list[bytes] = []

    async def pump(stream: trio.abc.ReceiveStream, into: list[bytes]) -> None:
        while data := await stream.receive_some(65536):
            into.append(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, process.stdout, printed)
        nursery.start_soon(pump, process.stderr, errors)
    await process.wait()
    return b"".join(printed).decode(), b"".join(errors).decode()


class Websocket:
    """A minimal websocket client (wsproto over a TCP stream) that reads every frame up to the
    server's close and keeps its close code."""

    def __init__(self, tcp: trio.SocketStream) -> None:
        self.tcp = tcp
        self.ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.close_code: int | None = None
        self._events: list[ws_events.Event] = []

    @classmethod
    @asynccontextmanager
    async def connect(cls, url: str) -> AsyncIterator[Websocket]:
        host, port = url.removeprefix("http://").split(":")
        async with await trio.open_tcp_stream(host, int(port)) as tcp:
            socket = cls(tcp)
            request = ws_events.Request(host=f"{host}:{port}", target="/v1/relay")
            await tcp.send_all(socket.ws.send(request))
            assert isinstance(await socket._event(), ws_events.AcceptConnection)
            yield socket

    async def _event(self) -> ws_events.Event | None:
        while not self._events:
            data = await self.tcp.receive_some(65536)
            if not data:
                return None
            self.ws.receive_data(data)
            self._events.extend(self.ws.events())
        return self._events.pop(0)

    async def send(self, frame: Hello | Stream) -> None:
        await self.tcp.send_all(self.ws.send(ws_events.TextMessage(encode_frame(frame))))

    async def frame(self) -> ServerFrame | None:
        """The next frame, or None once the server closed (:attr:`close_code`)."""
        parts: list[str] = []
        while True:
            event = await self._event()
            if event is None:
                return None
            if isinstance(event, ws_events.TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    return decode_server_frame("".join(parts), max_bytes=1 << 24)
            elif isinstance(event, ws_events.CloseConnection):
                self.close_code = event.code
                return None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_signal_gives_open_streams_their_shutdown_frame_and_line(signum: int) -> None:
    async with serving() as (process, url, printed):
        with trio.fail_after(60):
            async with Websocket.connect(url) as socket, httpx.AsyncClient(timeout=60) as client:
                await socket.send(Hello(PROTOCOL_VERSION, TOKEN))
                assert isinstance(await socket.frame(), Ready)
                await socket.send(Stream("w", [Message.user(LONG)]))
                assert isinstance(await socket.frame(), RunFrame)  # version 3: its run first
                assert isinstance(await socket.frame(), Delta)
                post = client.stream(
                    "POST",
                    f"{url}/v1/stream",
                    headers={"authorization": f"Bearer {TOKEN}"},
                    json={"messages": [{"role": "user", "content": LONG}]},
                )
                async with post as response:
                    lines = response.aiter_lines()
                    first = decode_server_frame(await lines.__anext__())
                    assert isinstance(first, Delta)
                    # Both are mid-stream: now the signal.
                    process.send_signal(signum)
                    rest = [decode_server_frame(line) async for line in lines if line]
                frames = []
                while (frame := await socket.frame()) is not None:
                    frames.append(frame)
            out, errors = await read_rest(process, printed)
    # The NDJSON response ended properly, its last line saying why.
    assert all(isinstance(frame, Delta) for frame in rest[:-1])
    assert rest[-1] == error_frame("shutdown", HTTP_REQUEST_ID)
    # The websocket got the shutdown error, then a close with 1001 (going away).
    assert all(isinstance(frame, Delta) for frame in frames[:-1])
    assert frames[-1] == error_frame("shutdown")
    assert socket.close_code == 1001
    assert process.returncode == 0, errors
    assert out.rstrip().endswith("stopped")
    assert "Traceback" not in errors


async def test_a_second_connection_after_the_signal_is_not_served() -> None:
    async with serving("--grace", "30") as (process, url, printed):
        with trio.fail_after(60):
            process.send_signal(signal.SIGINT)
            out, _ = await read_rest(process, printed)
            with pytest.raises(httpx.TransportError):
                async with httpx.AsyncClient() as client:
                    await client.get(url + "/")
    assert process.returncode == 0
    assert out.rstrip().endswith("stopped")


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    ["relay.example.com", "ftp://relay.example.com", "https://relay.example.com/app", "null"],
)
def test_a_malformed_origin_is_one_clear_line_and_exit_2(
    origin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["serve", "--port", "0", "--token", TOKEN, "--origin", origin]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert f"--origin {origin!r} is not an origin" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize("host", ["bad host", "name:99999", "relay.example.com/x", "::1"])
def test_a_malformed_allowed_host_is_one_clear_line_and_exit_2(host: str) -> None:
    err = io.StringIO()
    status = _serve_cmd.main(
        host="127.0.0.1",
        port=0,
        token=TOKEN,
        origins=None,
        endpoint=None,
        interval=0,
        max_frame=1024,
        allowed_hosts=[host],
        out=io.StringIO(),
        err=err,
    )
    assert status == 2
    assert err.getvalue().count("\n") == 1
    assert f"--allowed-host {host!r} is not a host name" in err.getvalue()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
        ("relay.example.com", False),
    ],
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert _serve_cmd.is_loopback(host) is loopback


def test_binding_beyond_loopback_warns_in_one_line_to_put_tls_in_front() -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails after the warning,
    # so nothing listens beyond loopback during the test.
    err = io.StringIO()
    status = _serve_cmd.main(
        host="192.0.2.1",
        port=0,
        token=TOKEN,
        origins=None,
        endpoint=None,
        interval=0,
        max_frame=1024,
        out=io.StringIO(),
        err=err,
    )
    lines = err.getvalue().splitlines()
    assert status == 1
    assert "warning" in lines[0]
    assert "TLS" in lines[0]
    assert "cannot listen on 192.0.2.1" in lines[1]
    assert len(lines) == 2


async def test_serve_with_an_endpoint_relays_to_it_and_runs_no_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Simulator(api_key="sk-endpoint") as real:

        class NoSimulator:
            def __init__(self, *args: object, **kwargs: object) -> None:
                raise AssertionError("serve started its own simulator")

        monkeypatch.setattr(_serve_cmd, "Simulator", NoSimulator)
        endpoint = Endpoint(model="simulator", base_url=real.openai_base_url, api_key="sk-endpoint")
        out = io.StringIO()
        async with trio.open_nursery() as nursery:
            url: str = await nursery.start(
                lambda task_status: _serve_cmd.run(
                    host="127.0.0.1",
                    port=0,
                    token=TOKEN,
                    origins=None,
                    endpoint=endpoint,
                    interval=0,
                    max_frame=1024 * 1024,
                    out=out,
                    shown=False,
                    allowed_hosts=["relay.example.com"],
                    task_status=task_status,
                )
            )
            socket = url.replace("http", "ws", 1) + "v1/relay"
            async with RelayProvider(socket, token=TOKEN) as relay:
                result = await relay.generate([Message.user("What is 2 + 3?")])
            async with httpx.AsyncClient() as client:
                named = await client.get(url, headers={"host": "relay.example.com"})
                other = await client.get(url, headers={"host": "other.example.com"})
            nursery.cancel_scope.cancel()
        assert real.statistics().requests == 1
        assert f"relay for {real.openai_base_url}" in out.getvalue()
    assert "5" in result.content
    assert named.status_code == 200
    assert other.status_code == 421
    assert "sk-endpoint" not in out.getvalue()
    assert json.dumps(TOKEN) not in out.getvalue()


async def test_max_tokens_caps_every_request_and_is_said_in_the_answer_to_hello() -> None:
    async with serving("--max-tokens", "3", "--interval", "0") as (process, url, printed):
        with trio.fail_after(60):
            async with Websocket.connect(url) as socket:
                await socket.send(Hello(PROTOCOL_VERSION, TOKEN))
                ready = await socket.frame()
                await socket.send(Stream("w", [Message.user("count to 9")]))
                frames = []
                while not isinstance(frame := await socket.frame(), Result):
                    assert frame is not None
                    frames.append(frame)
            process.send_signal(signal.SIGINT)
            out, errors = await read_rest(process, printed)
    assert isinstance(ready, Ready)
    assert ready.max_tokens == 3
    assert frame.result.content == "1 2 3"
    assert frame.result.finish == "length"
    assert "output tokens capped at 3 per request" in out
    assert process.returncode == 0, errors


@pytest.mark.parametrize("given", ["0", "many", "-1"])
def test_max_tokens_must_be_a_positive_whole_number(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["serve", "--port", "0", "--token", TOKEN, "--max-tokens", given])
    assert exited.value.code == 2
    assert "--max-tokens" in capsys.readouterr().err
