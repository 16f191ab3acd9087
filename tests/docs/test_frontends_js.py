"""The JavaScript blocks of docs/frontends.md (```js) run, under Node with the reference client
packages (tests/e2e/node), against a relay served as ``trio-agents serve`` serves one: the
simulator upstream and its ``assistant`` agent, ``RELAY`` and ``TOKEN`` in the environment.
Each must exit 0 and say the answer (the simulator's agent answers 42)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil

import pytest
import trio
from node_clients import node_clients

from actors import open_runtime
from actors.cli._demo import SYSTEM, add
from actors.durable import AgentRegistry
from actors.relay import RelayAgents, RelayServer, serve
from actors.testing import Simulator

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "frontends.md"
FENCE = re.compile(r"^```js\n(.*?)^```$", re.DOTALL | re.MULTILINE)
TOKEN = "docs-relay-token-0123456789"
BLOCKS = FENCE.findall(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_javascript_to_run() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("number", range(len(BLOCKS)))
async def test_a_javascript_block_runs(number: int, tmp_path: pathlib.Path) -> None:
    folder = await trio.to_thread.run_sync(node_clients)
    # Inside the packages' folder, so that its imports resolve; removed after.
    script = folder / ".docs" / f"frontends_{number}.mjs"
    script.parent.mkdir(exist_ok=True)
    script.write_text(BLOCKS[number], encoding="utf-8")
    try:
        async with Simulator() as simulator, open_runtime() as runtime:
            upstream = simulator.openai()
            agents = AgentRegistry()
            agents.add("assistant", upstream, system=SYSTEM, tools=[add], limit=6)
            relay = RelayServer(upstream, tokens=[TOKEN], agents=RelayAgents(agents, runtime))
            async with trio.open_nursery() as nursery:
                (address,) = await nursery.start(
                    lambda task_status: serve(relay, port=0, task_status=task_status)
                )
                node = shutil.which("node")
                assert node is not None
                with trio.fail_after(60):
                    done = await trio.run_process(
                        [node, str(script)],
                        cwd=folder,
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                        env={**os.environ, "RELAY": address, "TOKEN": TOKEN},
                    )
                nursery.cancel_scope.cancel()
            await upstream.aclose()
    finally:
        script.unlink()
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert "42" in out
    assert TOKEN not in out
