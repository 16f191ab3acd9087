"""Small actors and helpers shared by the supervisor and runtime tests.

The actors record what happens to them in a :class:`Journal`; tests wait on journal entries
(never on scheduling luck).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio

from actors import Actor, ActorExit, ActorRef, ActorStopped, ChildSpec, Supervisor

# A generous bound on mock-clock time: a hang jumps the clock here and fails the test.
HANG = 600

_instances = itertools.count()


class Boom(Exception):
    """The failure our test actors raise on purpose."""


class Journal:
    """What happened, in the order it happened; tests wait for entries instead of guessing."""

    def __init__(self) -> None:
        self.entries: list[tuple[Any, ...]] = []
        self._changed = trio.Event()

    def add(self, *entry: Any) -> None:
        self.entries.append(entry)
        self._changed.set()
        self._changed = trio.Event()

    def count(self, *entry: Any) -> int:
        return self.entries.count(entry)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [entry for entry in self.entries if entry[0] == kind]

    def mark(self) -> int:
        return len(self.entries)

    def since(self, mark: int) -> list[tuple[Any, ...]]:
        return self.entries[mark:]

    def times(self, kind: str) -> list[float]:
        return [entry[2] for entry in self.entries if entry[0] == kind]

    async def wait_for(self, *entry: Any, count: int = 1) -> None:
        while self.entries.count(entry) < count:
            await self._changed.wait()


class Recorder(Actor[Any, Any]):
    """Records start and stop; crashes on "crash", ends itself on "stop", echoes the rest."""

    def __init__(self, label: str, journal: Journal) -> None:
        self.label = label
        self.journal = journal
        self.instance = next(_instances)

    async def on_start(self) -> None:
        self.journal.add("start", self.label)

    async def handle(self, message: Any) -> Any:
        if message == "crash":
            raise Boom(self.label)
        if message == "stop":
            self.stop()
            return None
        if message == "instance":
            return self.instance
        return message

    async def on_stop(self, exit: ActorExit) -> None:
        self.journal.add("stop", self.label)


class Slow(Recorder):
    """Each message takes a second; stopping takes another second."""

    async def handle(self, message: Any) -> Any:
        await trio.sleep(1)
        self.journal.add("handled", self.label, message)
        return message

    async def on_stop(self, exit: ActorExit) -> None:
        await trio.sleep(1)
        await super().on_stop(exit)


async def crash(ref: ActorRef[Any, Any]) -> BaseException:
    """Make ``ref`` fail while handling a call; return the failure the caller was chained to."""
    with pytest.raises(ActorStopped) as stopped:
        await ref.call("crash")
    cause = stopped.value.__cause__
    assert isinstance(cause, Boom)
    return cause


def nested(
    children: Sequence[ChildSpec], holder: list[Supervisor], **kwargs: Any
) -> Callable[[], Supervisor]:
    """A supervisor factory that keeps every instance it builds in ``holder`` (newest last)."""

    def make() -> Supervisor:
        supervisor = Supervisor(children, **kwargs)
        holder.append(supervisor)
        return supervisor

    return make
