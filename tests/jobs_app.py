"""The app module the job tests' worker processes load (``--app app:registry``), as source
text written to the test's folder, and the helpers that run the ``trio-agents`` command there.

One app for every such test: ``calculator`` (``add``, then the answer), ``support`` (asks a
human before ``refund``), and what a test adds (:func:`app`'s ``extra``). The tests run the real
command, on the real clock: every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
from functools import partial

import trio

_APP = '''
from actors import tool
from actors.durable import AgentRegistry
from actors.testing import Hang, Reply, ScriptedProvider
from protocols.authority import Authority, Rule
from protocols.messages import ToolCall


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def refund(cents: int) -> str:
    """Refund."""
    return f"refunded {cents}"


def registry():
    agents = AgentRegistry()
    steps = []
    for _ in range(20):
        steps += [Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]), ANSWER]
    agents.add("calculator", ScriptedProvider(*steps), tools=[add])
    asks = Authority(rules=(Rule("ask", tools=("refund",), reason="needs a human"),))
    agents.add(
        "support",
        ScriptedProvider(Reply(calls=[ToolCall("r1", "refund", {"cents": 5})]), Reply("Done.")),
        tools=[refund],
        authority=asks,
    )
    EXTRA
    return agents
'''

#: ``cut``: a reply cut short by the token limit.
CUT = 'agents.add("cut", ScriptedProvider(Reply("Once upon a", finish="length")))'
#: ``writer``: streams a little, then never ends (until cancelled).
WRITER = 'agents.add("writer", ScriptedProvider(Hang("Once upon a time")))'


def app(*extra: str, answer: str = 'Reply("It is 42.")') -> str:
    """The app's source: ``calculator`` answering with ``answer`` (a ``Reply(...)``'s source),
    ``support``, and the agents ``extra`` adds (``agents.add(...)`` lines: :data:`CUT`,
    :data:`WRITER`)."""
    lines = "\n    ".join(extra) if extra else "pass"
    return _APP.replace("ANSWER", answer).replace("EXTRA", lines)


def cli(folder: pathlib.Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``trio-agents ARGS`` in ``folder``, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "actors", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(folder: pathlib.Path, *args: str) -> subprocess.Popen[str]:
    """``trio-agents ARGS`` in ``folder``, started (its output unbuffered, piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "actors", *args],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def start_worker(
    folder: pathlib.Path, *extra: str, store: str = "sqlite:///jobs.db"
) -> subprocess.Popen[str]:
    """A worker of the app on ``store``, looking for jobs every 0.05 s."""
    return start(
        folder, "worker", "--store", store, "--app", "app:registry", "--poll", "0.05", *extra
    )


def stop(worker: subprocess.Popen[str]) -> tuple[str, str]:
    """Stop ``worker`` as a supervisor does (SIGTERM); its output. It must exit 0."""
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    return out, err


def has_open(pid: int, name: str) -> bool:
    """Whether process ``pid`` has a file called ``name`` open (Linux): a command that has
    its store open is past its imports and at work."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(os.sep + name):
                return True
    return False


async def opened(process: subprocess.Popen[str], name: str, *, within: float = 60) -> None:
    """Wait (on trio's clock, polling /proc) until ``process`` has the file ``name`` open: a
    command that has its store open is past its imports and at work. It must not exit first."""
    with trio.fail_after(within):
        while not has_open(process.pid, name):
            assert process.poll() is None, process.communicate()
            await trio.sleep(0.05)


async def ended(process: subprocess.Popen[str], *, within: float = 60) -> tuple[str, str]:
    """``process``'s output, once it has exited (waited for in a worker thread)."""
    out, err = await trio.to_thread.run_sync(partial(process.communicate, timeout=within))
    return out, err
