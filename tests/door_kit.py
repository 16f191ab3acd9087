"""What the tests of the doors (actors.sync, actors.aio) share: a provider that says, across
threads, when a run is provably mid-stream, and the threads a door may leave."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import trio

from actors.providers import ProviderStream, StreamingProvider, TextStream
from protocols.messages import Delta, Message, ProviderOptions, ProviderResult, ToolDefinition

PARTIAL = "The first half of the answer"


class _GateStream(TextStream):
    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self._gate = gate
        self._sent = False

    async def __anext__(self) -> Delta:
        if not self._sent:
            self._sent = True
            self._content.append(self._gate.text)
            return Delta("content", self._gate.text)
        # Asked for more: the agent has taken the first delta (it is in the run's partial).
        self._gate.reached.set()
        if self._gate.notify is not None:
            self._gate.notify()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class Gate(StreamingProvider):
    """Streams ``text`` as one delta, then -- once the agent has taken it, so that a cut
    from now on commits it -- sets the ``reached`` threading event, calls ``notify`` (in the
    runtime's thread), and waits until cancelled. Each call does the same."""

    name = "gate"

    def __init__(self, text: str = PARTIAL, notify: Callable[[], object] | None = None) -> None:
        self.text = text
        self.notify = notify
        self.reached = threading.Event()
        self.calls = 0

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        self.calls += 1
        return _GateStream(self)


def threads() -> set[threading.Thread]:
    """The threads alive now."""
    return set(threading.enumerate())


def trio_workers(extra: set[threading.Thread]) -> set[threading.Thread]:
    """Of ``extra``, trio's own idle worker threads (``trio.to_thread``'s cache, shared by every
    trio run in the process; each ends after 10 s unused): SQLite stores use it."""
    return {thread for thread in extra if thread.name.startswith("Trio thread")}


class _PacedStream(TextStream):
    def __init__(self, provider: Paced) -> None:
        super().__init__()
        self._provider = provider
        self._index = 0

    async def __anext__(self) -> Delta:
        provider = self._provider
        if self._index == provider.notify_at and provider.notify is not None:
            provider.notify()  # the agent has taken `notify_at` pieces so far
        if self._index == len(provider.pieces):
            self._result = ProviderResult(content="".join(self._content))
            raise StopAsyncIteration
        await trio.sleep(provider.pace)
        piece = provider.pieces[self._index]
        self._index += 1
        self._content.append(piece)
        return Delta("content", piece)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class Paced(StreamingProvider):
    """Streams ``pieces`` with ``pace`` seconds before each; calls ``notify`` (in the runtime's
    thread) once the agent has taken ``notify_at`` of them (0: when the call begins)."""

    name = "paced"

    def __init__(
        self,
        pieces: Sequence[str],
        *,
        pace: float,
        notify_at: int = -1,
        notify: Callable[[], object] | None = None,
    ) -> None:
        self.pieces = list(pieces)
        self.pace = pace
        self.notify_at = notify_at
        self.notify = notify
        self.calls = 0

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        self.calls += 1
        return _PacedStream(self)
