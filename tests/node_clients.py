"""The reference client packages of the protocols the relay serves (``@ag-ui/client``, the AI
SDK's ``ai``), run by Node scripts in ``tests/e2e/node`` -- installed there with ``npm ci`` from
the committed lock file the first time a test needs them.

A test that needs them calls :func:`node_clients` (from a worker thread, or before its event
loop: the install blocks): it skips, saying why, only where ``node`` or ``npm`` is not
installed; an install that fails is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import pytest
import trio

#: Where the scripts, ``package.json`` and ``package-lock.json`` are.
NODE_DIR = pathlib.Path(__file__).parent / "e2e" / "node"

#: Seconds ``npm ci`` may take (a cold npm cache downloads a few megabytes).
INSTALL_TIMEOUT = 300


def node_clients() -> pathlib.Path:
    """The folder of the Node scripts, its packages installed (``npm ci``, once: again only
    when the lock file is newer than the install)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run the protocols' reference clients")
    stamp = NODE_DIR / "node_modules" / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {NODE_DIR} failed:\n{done.stdout}\n{done.stderr}")
    return NODE_DIR


class NodeRun:
    """What a Node script printed: its JSON lines (``lines``), stderr, and exit status."""

    def __init__(self, status: int, stdout: str, stderr: str) -> None:
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
        self.lines: list[dict[str, Any]] = [
            json.loads(line) for line in stdout.splitlines() if line.startswith("{")
        ]

    def __repr__(self) -> str:
        out, err = self.stdout[-3000:], self.stderr[-2000:]
        return f"<NodeRun status={self.status} stdout={out!r} stderr={err!r}>"


async def run_node(script: str, *args: str, within: float = 60) -> NodeRun:
    """Run ``node SCRIPT ARGS`` in :data:`NODE_DIR` (installing the packages first), at most
    ``within`` seconds; what it printed."""
    folder = await trio.to_thread.run_sync(node_clients)
    node = shutil.which("node")
    assert node is not None
    with trio.fail_after(within):
        done = await trio.run_process(
            [node, script, *args],
            cwd=folder,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "NO_COLOR": "1"},
        )
    return NodeRun(done.returncode, done.stdout.decode(), done.stderr.decode())
