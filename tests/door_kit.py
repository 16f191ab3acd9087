"""What the tests of the doors (actors.sync, actors.aio) share: a provider that says, across
threads, when a run is provably mid-stream, and the threads a door may leave."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import trio

from actors.providers import ProviderStream, StreamingProvider, TextStream
from protocols.messages import Delta, Message, ProviderOptions, ToolDefinition

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
