"""What every benchmark shares: its command line (``--quick``, ``--json``), running its
measurement on trio, and how it reports -- one human line per result, then with ``--json`` one
JSON object ``{"metrics": {...}, "ratios": {...}}`` as the last line (``tests/test_benchmarks.py``
reads it). Not a benchmark itself: the suite runs every other ``*.py`` here.

A benchmark script starts with ``sys.path.insert(0, <the repository>)`` so that
``benchmarks._common`` imports when it is run as ``python benchmarks/NAME.py``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias

import trio

from actors.providers import ProviderStream
from protocols.messages import Delta, FinishReason, ProviderResult

__all__ = ["ReadyStream", "Report", "parser", "print_report", "run_main"]

#: What a benchmark's measurement returns: its metrics, its ratios against the baselines
#: measured in the same run, and the lines that say them to a person.
Report: TypeAlias = tuple[dict[str, float], dict[str, float], list[str]]


class ReadyStream(ProviderStream):
    """Streams a ready :class:`ProviderResult`: its content as one delta."""

    def __init__(self, result: ProviderResult) -> None:
        self._final = result
        self._result: ProviderResult | None = None
        self._sent = not result.content

    async def __anext__(self) -> Delta:
        await trio.lowlevel.checkpoint()
        if not self._sent:
            self._sent = True
            return Delta("content", self._final.content)
        self._result = self._final
        raise StopAsyncIteration

    @property
    def result(self) -> ProviderResult:
        if self._result is None:
            raise RuntimeError("the stream has not finished: iterate it to the end first")
        return self._result

    @property
    def partial(self) -> ProviderResult:
        if self._result is not None:
            return self._result
        return ProviderResult(content="", finish=FinishReason.CANCELLED)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def parser(doc: str | None, quick: str) -> argparse.ArgumentParser:
    """The command line every benchmark takes; ``quick`` says what ``--quick`` trims."""
    described = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    described.add_argument("--quick", action="store_true", help=quick)
    described.add_argument("--json", action="store_true", help="end with one JSON line of results")
    return described


def print_report(report: Report, *, as_json: bool) -> None:
    """Print the lines, then (``as_json``) the JSON line of metrics and ratios."""
    metrics, ratios, lines = report
    for line in lines:
        print(line)
    if as_json:
        print(json.dumps({"metrics": metrics, "ratios": ratios}, sort_keys=True))


def run_main(
    run: Callable[[bool], Awaitable[Report]],
    argv: Sequence[str] | None,
    *,
    doc: str | None,
    quick: str,
) -> int:
    """Parse ``argv``, measure with ``trio.run(run, quick)``, report; the exit status."""
    args = parser(doc, quick).parse_args(argv)
    print_report(trio.run(run, args.quick), as_json=args.json)
    return 0


class Lines:
    """The lines a process writes to a pipe, one at a time."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> bytes | None:
        """The next line, without its end; ``None`` once the pipe has closed."""
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some()
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line
