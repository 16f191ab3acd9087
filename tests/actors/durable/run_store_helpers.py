"""What the run store tests share: the two kinds of store behind one :class:`Backend`, and
short ways to move a job through its states with the pure transitions of :mod:`protocols.jobs`.

Every time is explicit (``now=``, from :data:`T0`): nothing waits.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
import trio
from postgres_server import drop_schemas, new_schema, postgres_url

from actors.durable import (
    DEFAULT_MAX_BYTES,
    MemoryRunStore,
    PostgresRunStore,
    RunStore,
    SQLiteRunStore,
)
from actors.store import StoreError
from protocols import jobs as J
from protocols.messages import AgentResult, StopReason

__all__ = [
    "KINDS",
    "LEASE",
    "LIVE",
    "T0",
    "Backend",
    "applied",
    "ask",
    "cancel",
    "end",
    "holder",
    "open_backend",
    "raises_code",
    "suspend",
    "take",
    "text_of",
]

T0 = 1_000.0
LEASE = 30.0
LIVE = (J.JobStatus.QUEUED, J.JobStatus.RUNNING, J.JobStatus.AWAITING_INPUT)


class Backend:
    """One kind of store under test: ``store`` is the main one, :meth:`peer` another view of
    its data, :meth:`fresh` an empty store of the same kind with other options. Every store it
    opened is closed at the end of the test."""

    def __init__(self, kind: str, directory: pathlib.Path) -> None:
        self.kind = kind
        self.directory = directory
        self.path = directory / "runs.db"
        self._opened: list[RunStore] = []
        self._fresh = 0
        self._schemas: list[str] = []
        self.store: RunStore = MemoryRunStore()  # replaced by start()

    async def _open(self, path: pathlib.Path, max_bytes: int = DEFAULT_MAX_BYTES) -> RunStore:
        store: RunStore
        if self.kind == "memory":
            store = MemoryRunStore(max_bytes=max_bytes)
        elif self.kind == "postgres":
            # A database's schema stands for a file: the path's name picks it.
            schema = self._schema_for(path)
            store = await PostgresRunStore.open(postgres_url(), schema=schema, max_bytes=max_bytes)
        else:
            store = await SQLiteRunStore.open(path, max_bytes=max_bytes)
        self._opened.append(store)
        return store

    async def start(self) -> None:
        self.store = await self._open(self.path)

    async def peer(self) -> RunStore:
        """Another view of ``store``'s data (a new connection to its file, for SQLite)."""
        if self.kind == "memory":
            return self.store
        return await self._open(self.path)

    async def fresh(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> RunStore:
        self._fresh += 1
        return await self._open(self.directory / f"fresh-{self._fresh}.db", max_bytes)

    def _schema_for(self, path: pathlib.Path) -> str:
        names = getattr(self, "_schema_names", {})
        self._schema_names = names
        if path not in names:
            names[path] = new_schema()
            self._schemas.append(names[path])
        return names[path]

    async def close(self) -> None:
        for store in self._opened:
            await store.aclose()
        if self._schemas:
            await trio.to_thread.run_sync(drop_schemas, *self._schemas)


#: The kinds of store every contract test runs against.
KINDS = ("memory", "sqlite", "postgres")


@contextlib.asynccontextmanager
async def open_backend(kind: str, directory: pathlib.Path) -> AsyncIterator[Backend]:
    """A started :class:`Backend` (each test module's ``backend`` fixture), closed after."""
    opened = Backend(kind, directory)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()


# ---------------------------------------------------------------------------------------------
# Helpers


def ask(text: str = "hello", **fields: Any) -> J.AgentJob:
    return J.AgentJob.ask("echo", text, **fields)


def text_of(record: J.JobRecord) -> str:
    return record.job.input[0].content


def applied(transition: J.Transition) -> J.Applied:
    assert isinstance(transition, J.Applied), transition
    return transition


def holder(record: J.JobRecord) -> J.Lease:
    assert record.lease is not None, f"job {record.id} is held by nobody"
    return record.lease


async def take(
    store: RunStore, owner: str = "w1", *, now: float = T0 + 1, lease: float = LEASE
) -> J.JobRecord:
    record = await store.acquire(owner=owner, lease=lease, now=now)
    assert record is not None, f"{owner} found nothing to run"
    return record


async def end(
    store: RunStore,
    record: J.JobRecord,
    status: J.JobStatus = J.JobStatus.COMPLETED,
    *,
    now: float = T0 + 2,
    content: str = "done",
) -> J.JobRecord:
    """The holder of ``record`` finishes it with ``status``."""
    result = None
    error = None
    if status is J.JobStatus.COMPLETED:
        result = AgentResult(content)
    elif status is J.JobStatus.PARTIAL:
        result = AgentResult(content, stop=StopReason.CANCELLED)
    else:
        error = content
    done = applied(
        J.finish(record, holder(record), now=now, status=status, result=result, error=error)
    )
    assert await store.write(done)
    return done.record


async def cancel(store: RunStore, record: J.JobRecord, *, now: float = T0 + 2) -> J.JobRecord:
    cancelled = applied(J.cancel(record, now=now))
    assert await store.write(cancelled)
    return cancelled.record


async def suspend(store: RunStore, record: J.JobRecord, *, now: float = T0 + 2) -> J.JobRecord:
    waiting = applied(
        J.suspend(record, holder(record), now=now, pending=[J.ApprovalRequest("call-1", "delete")])
    )
    assert await store.write(waiting)
    return waiting.record


async def raises_code(code: str, call: Awaitable[object]) -> StoreError:
    with pytest.raises(StoreError) as caught:
        await call
    assert caught.value.code == code, caught.value
    return caught.value
