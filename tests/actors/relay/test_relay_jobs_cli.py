"""``trio-agents serve --store URL``: the relay serving durable jobs, as a user runs it -- a real
process on a free port, with its own workers (``--workers``, the default ``assistant`` agent on
the simulator) or with none (a ``trio-agents worker`` process runs the jobs), and its options.

Real processes, on the real clock; every wait is bounded.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

from actors.cli import main as cli_main
from actors.cli._serve import main as serve_main
from protocols.errors import ConfigError
from protocols.sse import SSEDecoder, SSEEvent

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")

TOKEN = "serve-jobs-token-0123456789"

APP = """
from actors.durable import AgentRegistry
from actors.testing import Reply, ScriptedProvider


def registry():
    agents = AgentRegistry()
    agents.add("echo", ScriptedProvider(*[Reply("echoed") for _ in range(10)]))
    return agents
"""


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path


class Process:
    """A ``python -m actors ...`` child: what it printed, kept as it comes."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.out = b""
        self.err = b""
        self.grew = trio.Event()

    async def pump(self, name: str, stream: trio.abc.ReceiveStream | None) -> None:
        assert stream is not None
        while data := await stream.receive_some(65536):
            setattr(self, name, getattr(self, name) + data)
            self.grew.set()
            self.grew = trio.Event()

    async def said(self, text: str) -> str:
        """Wait until stdout holds ``text`` (on a whole line); all of stdout."""
        while text not in self.out.decode() or not self.out.endswith(b"\n"):
            if self.process.poll() is not None:
                raise AssertionError(f"it ended early: {self.out!r} {self.err!r}")
            await self.grew.wait()
        return self.out.decode()


@asynccontextmanager
async def running(folder: pathlib.Path, *args: str) -> AsyncIterator[Process]:
    """``python -m actors ARGS`` in ``folder``; SIGINT on the way out, and it must exit 0."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRIO_AGENTS_RELAY_TOKEN", None)
    child = await trio.lowlevel.open_process(
        [sys.executable, "-m", "actors", *args],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    watched = Process(child)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watched.pump, "out", child.stdout)
            nursery.start_soon(watched.pump, "err", child.stderr)
            try:
                yield watched
            finally:
                child.send_signal(signal.SIGINT)
                with trio.fail_after(60):
                    await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
            with trio.CancelScope(shield=True):
                await child.wait()
    assert child.returncode == 0, watched.err.decode()


def address(printed: str) -> str:
    """The ``http://127.0.0.1:PORT`` a serve process says it listens on."""
    return printed.split(" at ", 1)[1].split(maxsplit=1)[0].rstrip("/")


async def follow(client: httpx.AsyncClient, id: str) -> list[dict[str, Any]]:
    decoder = SSEDecoder()
    events: list[dict[str, Any]] = []
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with client.stream("GET", f"/v1/jobs/{id}/events", headers=headers) as answer:
        assert answer.status_code == 200
        async for data in answer.aiter_bytes():
            events += [
                json.loads(item.data) for item in decoder.feed(data) if isinstance(item, SSEEvent)
            ]
    return events


async def test_serve_with_a_store_runs_the_jobs_it_is_given(folder: pathlib.Path) -> None:
    with trio.fail_after(120):
        async with running(
            folder, "serve", "--port", "0", "--token", TOKEN, "--store", "sqlite:///jobs.db"
        ) as serve:
            printed = await serve.said("durable jobs on")
            url = address(printed)
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                headers = {"authorization": f"Bearer {TOKEN}"}
                job = {"agent": "assistant", "input": "What is 19 + 23?", "key": "q-1"}
                submitted = await client.post("/v1/jobs", json=job, headers=headers)
                events = await follow(client, submitted.json()["id"])
                shown = await client.get(f"/v1/jobs/{submitted.json()['id']}", headers=headers)
                unknown = await client.post(
                    "/v1/jobs", json={"agent": "nobody", "input": "hi"}, headers=headers
                )
    assert "durable jobs on sqlite:///jobs.db (agents: assistant; 4 workers here)" in printed
    assert f"{url}/v1/jobs" in printed
    assert submitted.status_code == 201
    assert [e["kind"] for e in events][-1] == "finished"
    assert "tool_call" in [e["kind"] for e in events]  # the add tool, on the relay's model
    assert shown.json()["result"]["content"] == "The answer is 42."
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "unknown_agent"
    assert "stopped" in serve.out.decode()
    assert TOKEN not in serve.err.decode()
    assert oct((folder / "jobs.db").stat().st_mode & 0o777) == oct(0o600)


async def test_serve_with_no_workers_leaves_the_jobs_to_a_worker_process(
    folder: pathlib.Path,
) -> None:
    store = "sqlite:///jobs.db"
    with trio.fail_after(120):
        async with running(
            folder,
            "serve",
            "--port",
            "0",
            "--token",
            TOKEN,
            "--store",
            store,
            "--app",
            "app:registry",
            "--workers",
            "0",
        ) as serve:
            printed = await serve.said("durable jobs on")
            async with (
                running(folder, "worker", "--store", store, "--app", "app:registry") as work,
                httpx.AsyncClient(base_url=address(printed), timeout=30) as client,
            ):
                await work.said("Ctrl-C or SIGTERM to stop")
                headers = {"authorization": f"Bearer {TOKEN}"}
                submitted = await client.post(
                    "/v1/jobs", json={"agent": "echo", "input": "hi"}, headers=headers
                )
                events = await follow(client, submitted.json()["id"])
    assert "(agents: echo; no workers here: run trio-agents worker on the store)" in printed
    assert events[-1]["kind"] == "finished"
    assert events[-1]["data"]["result"]["content"] == "echoed"


def test_workers_need_a_store_and_a_bad_store_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["serve", "--port", "0", "--token", TOKEN, "--workers", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "trio-agents serve: --workers run durable jobs: it needs --store URL\n"
    assert cli_main(["serve", "--port", "0", "--token", TOKEN, "--store", "mysql://x"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("trio-agents serve: unsupported store URL 'mysql'")
    assert captured.err.count("\n") == 1
    assert captured.out == ""


def test_an_app_that_cannot_be_had_stops_serve_before_it_listens(
    folder: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = io.StringIO()
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))  # --app imports from the current folder
    monkeypatch.delitem(sys.modules, "app", raising=False)
    with pytest.raises(ConfigError, match="has no 'nothing'"):
        serve_main(
            host="127.0.0.1",
            port=0,
            token=TOKEN,
            origins=None,
            endpoint=None,
            interval=0,
            max_frame=1024,
            store="sqlite:///jobs.db",
            app="app:nothing",
            out=out,
            err=io.StringIO(),
        )
    assert out.getvalue() == ""
    assert not (folder / "jobs.db").exists()
    sys.modules.pop("app", None)
