"""What only the SQLite run store has: its schema's query columns (and their migration from a
store of version 2), and group commit -- writes asked for at once share one commit, each still
all-or-nothing on its own."""

from __future__ import annotations

import pathlib
import sqlite3

import pytest
import trio
from run_store_helpers import T0, applied, ask, holder, raises_code

from actors.durable import SQLiteRunStore
from actors.store import StoreError
from protocols import jobs as J
from protocols.messages import Message

pytestmark = pytest.mark.trio

JOBS = "trio_agents_jobs"
COLUMNS = ("revision", "holder", "held", "until", "thread", "rank")


def columns(path: pathlib.Path) -> dict[str, tuple[object, ...]]:
    """The query columns of every job, by id."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"SELECT id, {', '.join(COLUMNS)} FROM {JOBS}").fetchall()
    finally:
        conn.close()
    return {str(row[0]): tuple(row[1:]) for row in rows}


def to_version_2(path: pathlib.Path) -> None:
    """Make the file what version 2 wrote: the jobs table without the query columns."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"DROP INDEX {JOBS}_rank")
        conn.execute(f"DROP INDEX {JOBS}_thread")
        for column in COLUMNS:
            conn.execute(f"ALTER TABLE {JOBS} DROP COLUMN {column}")
        conn.execute("UPDATE trio_agents_meta SET value = '2' WHERE key = 'schema_version'")
    finally:
        conn.close()


async def test_a_version_2_store_is_migrated_with_its_query_columns_filled(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "jobs.db"
    async with await SQLiteRunStore.open(path) as store:
        running = (await store.admit(ask("first"), now=T0)).record
        await store.admit(ask("threaded", conversation="t"), now=T0)
        urgent = (await store.admit(ask("urgent"), now=T0, priority=J.Priority.INTERRUPT)).record
        taken = await store.acquire(owner="w", lease=30, now=T0 + 1)
        assert taken is not None
        assert taken.id == urgent.id  # interrupting jobs first
        del running
    written = columns(path)
    to_version_2(path)
    async with await SQLiteRunStore.open(path) as store:
        # The columns the migration filled from the records are the ones the store writes.
        assert columns(path) == written
        assert written[taken.id] == (2, "w", 1, T0 + 31, None, 0)
        # And they work: the holder's appends pass the fence, a stranger's do not; the queue's
        # order holds.
        await store.append(taken.id, holder(taken), [J.InputEntry((Message.user("x"),))])
        stranger = J.Lease("other", 1, T0 + 99)
        await raises_code("fenced", store.append(taken.id, stranger, [J.RequestEntry(1)]))
        following = await store.acquire(owner="w", lease=30, now=T0 + 2)
        assert following is not None
        assert following.job.input[0].content == "first"
        # The lease expired: the job is taken over first, with the next fence.
        again = await store.acquire(owner="x", lease=30, now=T0 + 100)
        assert again is not None
        assert (again.id, again.fence) in {(taken.id, 2), (following.id, 2)}


async def test_writes_asked_for_at_once_share_commits_and_fail_alone(
    tmp_path: pathlib.Path,
) -> None:
    async with await SQLiteRunStore.open(tmp_path / "jobs.db") as store:
        admitted: list[J.JobRecord] = []

        async def admit(index: int) -> None:
            admitted.append((await store.admit(ask(f"job {index}"), now=T0)).record)

        async with trio.open_nursery() as nursery:
            for index in range(40):
                nursery.start_soon(admit, index)
        assert len({record.id for record in admitted}) == 40
        assert sorted(record.sequence for record in admitted) == list(range(1, 41))

        taken = [await store.acquire(owner="w", lease=30, now=T0 + 1) for _ in range(3)]
        assert all(record is not None for record in taken)
        records = [record for record in taken if record is not None]
        # One append of each batch is refused (another holder's); the others commit.
        outcomes: dict[str, str] = {}

        async def append(record: J.JobRecord, lease: J.Lease, name: str) -> None:
            try:
                await store.append(record.id, lease, [J.InputEntry((Message.user(name),))])
            except StoreError as error:
                outcomes[name] = error.code
            else:
                outcomes[name] = "ok"

        async with trio.open_nursery() as nursery:
            for index, record in enumerate(records):
                nursery.start_soon(append, record, holder(record), f"good {index}")
                nursery.start_soon(append, record, J.Lease("thief", 9, T0 + 9), f"bad {index}")
        assert outcomes == {
            **{f"good {i}": "ok" for i in range(3)},
            **{f"bad {i}": "fenced" for i in range(3)},
        }
        for record in records:
            journal = await store.journal(record.id)
            assert len(journal) == 1
            assert isinstance(journal[0], J.InputEntry)
            assert journal[0].messages[0].content.startswith("good")


async def test_a_write_cancelled_before_its_commit_writes_nothing(tmp_path: pathlib.Path) -> None:
    async with await SQLiteRunStore.open(tmp_path / "jobs.db") as store:
        first = (await store.admit(ask("one"), now=T0)).record
        done: list[str] = []

        async def admit(text: str) -> None:
            await store.admit(ask(text), now=T0)
            done.append(text)

        async with trio.open_nursery() as nursery:
            # The first is taken by a commit at once; the second waits for the next one and
            # is cancelled while it waits.
            nursery.start_soon(admit, "taken")
            await trio.testing.wait_all_tasks_blocked()
            with trio.CancelScope() as scope:
                scope.cancel()
                await store.admit(ask("withdrawn"), now=T0)
        everything = await store.list(limit=1000)
        texts = sorted(record.job.input[0].content for record in everything)
        assert "withdrawn" not in texts
        assert texts == sorted(["one", "taken"])
        assert done == ["taken"]
        transition = applied(J.cancel(first, now=T0 + 1))
        assert await store.write(transition) is True


async def test_a_status_no_job_has_is_reported_corrupt(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "jobs.db"
    async with await SQLiteRunStore.open(path) as store:
        record = (await store.admit(ask(), now=T0)).record
        conn = sqlite3.connect(path)
        try:
            conn.execute(f"UPDATE {JOBS} SET status = 'sideways' WHERE id = ?", (record.id,))
            conn.commit()
        finally:
            conn.close()
        error = await raises_code("corrupt", store.status(record.id))
        assert "sideways" in error.message
