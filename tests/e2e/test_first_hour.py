"""What a Python developer tries in the first hour, from the docs alone, as real processes:
the simulator as a server, the offline worker recipe with ``examples/offline_app.py`` and a
single tool served with ``mcp --app``.

They run on the real clock (subprocesses do not follow trio's mock clock); every wait is
bounded.
"""

from __future__ import annotations

import os
import pathlib
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import mcp
import pytest
import trio

from actors.providers import OpenAIChat
from protocols import Message, ProviderError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
WITHIN = 60.0


def environment(**extra: str) -> dict[str, str]:
    """This checkout importable first (as the tests' own interpreter imports it), unbuffered."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    for name in ("TRIO_AGENTS_RELAY_TOKEN", "OPENAI_BASE_URL", "OPENAI_API_KEY", "MODEL"):
        if name not in extra:
            env.pop(name, None)
    return env


def cli(
    cwd: pathlib.Path, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WITHIN,
        check=False,
        env=environment(**env),
    )


class Running:
    """A ``trio-agents`` process whose output is read as it comes."""

    def __init__(self, cwd: pathlib.Path, *args: str, **env: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "actors", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment(**env),
        )
        self.seen = b""

    @property
    def out(self) -> str:
        return self.seen.decode()

    def wait_for(self, pattern: str, timeout: float = WITHIN) -> re.Match[str]:
        """Read stdout until ``pattern`` (a regex) matches what it has printed."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while (found := re.search(pattern, self.out)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} within {timeout} s; it printed {self.out!r}"
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                data = os.read(self.process.stdout.fileno(), 65536)
                assert data, f"it ended before {pattern!r}: {self.out!r} {self.errors()!r}"
                self.seen += data
        return found

    def errors(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode()

    def stop(self, signum: int = signal.SIGTERM) -> tuple[str, str]:
        """Signal it, wait for its end; what it printed, on stdout and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        rest, errors = self.process.communicate(timeout=WITHIN)
        self.seen += rest
        return self.out, errors.decode()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WITHIN)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                stream.close()


@contextmanager
def running(cwd: pathlib.Path, *args: str, **env: str) -> Iterator[Running]:
    process = Running(cwd, *args, **env)
    try:
        yield process
    finally:
        process.close()


@contextmanager
def simulator_server(cwd: pathlib.Path) -> Iterator[str]:
    """``trio-agents simulator --port 0``: its OpenAI-compatible base URL."""
    with running(cwd, "simulator", "--port", "0") as server:
        yield server.wait_for(r"--base-url (http://127\.0\.0\.1:\d+/v1)").group(1)


# -- trio-agents simulator ----------------------------------------------------------------------


def test_the_simulator_serves_until_sigterm_and_says_where(tmp_path: pathlib.Path) -> None:
    with running(tmp_path, "simulator", "--port", "0", "--api-key", "sk-local-0123") as server:
        base = server.wait_for(r"--base-url (http://127\.0\.0\.1:\d+/v1)")
        assert "requests must carry --api-key" in server.out

        async def ask(key: str) -> str:
            model = OpenAIChat(model="anything", base_url=base.group(1), api_key=key)
            try:
                return (await model.generate([Message.user("What is 2 + 3?")])).content
            except ProviderError as error:
                return error.code
            finally:
                await model.aclose()

        assert trio.run(ask, "sk-local-0123") == "2 + 3 = 5."
        assert trio.run(ask, "sk-wrong") == "auth"
        out, errors = server.stop()
    assert server.process.returncode == 0, errors
    assert out.rstrip().endswith("SIGTERM: stopped (2 requests answered)")
    # A port already taken is one line and status 1.
    with running(tmp_path, "simulator", "--port", "0") as first:
        taken = first.wait_for(r"127\.0\.0\.1:(\d+)/v1").group(1)
        second = cli(tmp_path, "simulator", "--port", taken)
    assert second.returncode == 1
    assert second.stderr.strip().startswith(
        f"trio-agents simulator: cannot listen on 127.0.0.1:{taken}:"
    )
    assert len(second.stderr.strip().splitlines()) == 1


# -- the offline recipe: a worker and MCP with examples/offline_app.py -------------------------


def test_the_offline_worker_recipe_of_the_docs(tmp_path: pathlib.Path) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    with simulator_server(tmp_path) as base:
        model = {"OPENAI_BASE_URL": base}
        with running(
            EXAMPLES,
            "worker",
            "--store",
            store,
            "--app",
            "offline_app:registry",
            "--poll",
            "0.05",
            **model,
        ) as worker:
            worker.wait_for(r"agents: calculator;")
            submitted = cli(
                tmp_path,
                "jobs",
                "submit",
                "--store",
                store,
                "--agent",
                "calculator",
                "What is 19 + 23?",
            )
            assert submitted.returncode == 0, submitted.stderr
            job = submitted.stdout.strip()
            waited = cli(tmp_path, "jobs", "wait", "--store", store, job, "--timeout", "30")
            worker.stop()
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert waited.stdout.splitlines()[0] == f"{job}  completed  agent=calculator"
    assert "  The answer is 42." in waited.stdout.splitlines()


async def test_mcp_serves_a_single_tool_of_the_example_app() -> None:
    for name, arguments, answer in (
        ("add", {"a": 19, "b": 23}, "42"),
        ("shout", {"text": "hi"}, "HI"),
    ):
        params = mcp.StdioServerParameters(
            command=sys.executable,
            args=["-m", "actors", "mcp", "--app", f"offline_app:{name}"],
            env=environment(),
            cwd=str(EXAMPLES),
        )
        with trio.fail_after(WITHIN):
            async with mcp.Client(params) as client:
                (served,) = (await client.list_tools()).tools
                assert served.name == name
                result = await client.call_tool(name, arguments)
                assert result.content[0].text == answer


async def test_mcp_serves_the_example_agent_against_the_simulator_server(
    tmp_path: pathlib.Path,
) -> None:
    with simulator_server(tmp_path) as base:
        params = mcp.StdioServerParameters(
            command=sys.executable,
            args=["-m", "actors", "mcp", "--app", "offline_app:calculator"],
            env=environment(OPENAI_BASE_URL=base),
            cwd=str(EXAMPLES),
        )
        with trio.fail_after(WITHIN):
            async with mcp.Client(params) as client:
                (served,) = (await client.list_tools()).tools
                assert served.name == "calculator"
                result = await client.call_tool("calculator", {"prompt": "What is 19 + 23?"})
                assert result.content[0].text == "The answer is 42."


def test_mcp_app_naming_something_else_says_what_it_may_name(tmp_path: pathlib.Path) -> None:
    (tmp_path / "odd.py").write_text("number = 7\n", encoding="utf-8")
    refused = cli(tmp_path, "mcp", "--app", "odd:number")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "trio-agents mcp: --app must name an Agent, a tool, a ToolRegistry or a list of tools, "
        "or a function (taking the runtime, or nothing) that returns one; it gave int"
    )
