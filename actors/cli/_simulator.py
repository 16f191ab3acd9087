"""``trio-agents simulator``: the offline model simulator as a server of its own, for other
processes -- ``trio-agents worker`` and ``trio-agents mcp`` apps, a script, another language's
client -- to talk to with no network and no API key."""

from __future__ import annotations

import signal
import sys
from typing import TextIO

import trio

from ..testing import Simulator
from ._parser import SIMULATOR_PORT as DEFAULT_PORT

__all__ = ["DEFAULT_PORT", "main", "run"]


async def run(
    *,
    host: str,
    port: int,
    interval: float,
    api_key: str | None,
    out: TextIO,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the simulator until SIGINT or SIGTERM; ``task_status`` gets its OpenAI-compatible
    base URL once it listens."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with Simulator(interval=interval, api_key=api_key, host=host, port=port) as simulator:
            key = "; requests must carry --api-key" if api_key else "; no API key needed"
            print(
                f"trio-agents simulator: an offline model at {simulator.origin}{key}\n"
                f"  OpenAI-compatible (chat completions, responses): "
                f"--base-url {simulator.openai_base_url}\n"
                f"  Anthropic and Ollama: {simulator.base_url}\n"
                "Any model name is answered. Ctrl-C or SIGTERM to stop.",
                file=out,
                flush=True,
            )
            task_status.started(simulator.openai_base_url)
            async for signum in signals:
                name = signal.Signals(signum).name
                answered = simulator.statistics().requests
                print(
                    f"trio-agents simulator: {name}: stopped ({answered} requests answered)",
                    file=out,
                    flush=True,
                )
                break


def main(
    *,
    host: str,
    port: int,
    interval: float,
    api_key: str | None,
    out: TextIO = sys.stdout,
    err: TextIO | None = None,
) -> int:
    """Serve the simulator until Ctrl-C or SIGTERM; the exit status (1: it cannot listen)."""
    err = sys.stderr if err is None else err
    try:
        trio.run(lambda: run(host=host, port=port, interval=interval, api_key=api_key, out=out))
    except BaseException as error:
        failure = _cannot_listen(error)
        if failure is None:
            raise
        print(f"trio-agents simulator: cannot listen on {host}:{port}: {failure}", file=err)
        return 1
    return 0


def _cannot_listen(error: BaseException) -> str | None:
    """Why the server could not listen, if that is what ``error`` (alone or grouped) says."""
    from ._errors import _leaves  # noqa: PLC0415 - loaded: it runs this command

    leaves = list(_leaves(error))
    if not leaves or not all(isinstance(leaf, OSError) for leaf in leaves):
        return None
    first = leaves[0]
    assert isinstance(first, OSError)
    return first.strerror or str(first)
