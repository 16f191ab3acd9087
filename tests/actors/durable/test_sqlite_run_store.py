"""What only the SQLite run store has: its schema's query columns (and their migration from a
store of version 2), and group commit -- writes asked for at once share one commit, each still
all-or-nothing on its own."""

from __future__ import annotations

import pathlib
import sqlite3

import attrs
import pytest
import trio
from run_store_helpers import T0, applied, ask, holder, raises_code

from actors.durable import SQLiteRunStore
from actors.store import StoreError
from protocols import jobs as J
from protocols.messages import Message

pytestmark = pytest.mark.trio

JOBS = "trio_agents_jobs"
COLUMNS = ("revision", "holder", "held", "until", "thread", "rank", "cancel")


def columns(path: pathlib.Path) -> dict[str, tuple[object, ...]]:
    """The query columns of every job, by id."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"SELECT id, {', '.join(COLUMNS)} FROM {JOBS}").fetchall()
    finally:
        conn.close()
    return {str(row[0]): tuple(row[1:]) for row in rows}


def to_version_2(path: pathlib.Path) -> None:
    """Make the file what version 2 wrote: the jobs table without the query columns (those of
    versions 3 and 4)."""
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
        assert written[taken.id] == (2, "w", 1, T0 + 31, None, 0, 0)
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


def to_version_3(path: pathlib.Path) -> None:
    """Make the file what version 3 wrote: the jobs table without the cancel column."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"ALTER TABLE {JOBS} DROP COLUMN cancel")
        conn.execute("UPDATE trio_agents_meta SET value = '3' WHERE key = 'schema_version'")
    finally:
        conn.close()


def schema_of(path: pathlib.Path) -> list[tuple[object, ...]]:
    """Every table, index and column of the file, and its version: what a migration changes."""
    conn = sqlite3.connect(path)
    try:
        objects = conn.execute(
            "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        version = conn.execute(
            "SELECT value FROM trio_agents_meta WHERE key = 'schema_version'"
        ).fetchall()
    finally:
        conn.close()
    return [*objects, *version]


async def test_a_version_3_store_is_migrated_with_its_cancels_filled(
    tmp_path: pathlib.Path,
) -> None:
    # Version 4 keeps whether a cancel was requested in a column a journal append reads: a
    # running job whose cancel was asked for under version 3 keeps refusing new work.
    path = tmp_path / "jobs.db"
    async with await SQLiteRunStore.open(path) as store:
        await store.admit(ask("cancelled while running"), now=T0)
        await store.admit(ask("left alone"), now=T0)
        first = await store.acquire(owner="w", lease=30, now=T0 + 1)
        second = await store.acquire(owner="w", lease=30, now=T0 + 1)
        assert first is not None
        assert second is not None
        assert await store.write(applied(J.cancel(first, now=T0 + 2)))
    to_version_3(path)
    async with await SQLiteRunStore.open(path) as store:
        assert columns(path)[first.id][-1] == 1
        assert columns(path)[second.id][-1] == 0
        await raises_code("cancelled", store.append(first.id, holder(first), [J.RequestEntry(1)]))
        await store.append(second.id, holder(second), [J.RequestEntry(1)])


async def test_a_migration_that_fails_part_way_leaves_the_file_as_it_was(
    tmp_path: pathlib.Path,
) -> None:
    # 004 S11: a version 2 file whose migration to version 4 fails in its last step (a record
    # that is not JSON: version 4's fill reads every record) is left exactly as it was --
    # version 3's columns and indexes too, which the same transaction had added -- and opens
    # once the record is repaired.
    path = tmp_path / "jobs.db"
    async with await SQLiteRunStore.open(path) as store:
        admitted = (await store.admit(ask("kept"), now=T0)).record
        damaged = (await store.admit(ask("damaged"), now=T0)).record
    to_version_2(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        (good,) = conn.execute(f"SELECT record FROM {JOBS} WHERE id = ?", (damaged.id,)).fetchone()
        conn.execute(f"UPDATE {JOBS} SET record = 'not json' WHERE id = ?", (damaged.id,))
    finally:
        conn.close()
    before = schema_of(path)
    with pytest.raises(StoreError) as caught:
        await SQLiteRunStore.open(path)
    assert caught.value.code in ("io", "corrupt"), caught.value
    assert schema_of(path) == before
    assert ("2",) in before
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"UPDATE {JOBS} SET record = ? WHERE id = ?", (good, damaged.id))
    finally:
        conn.close()
    async with await SQLiteRunStore.open(path) as store:
        assert await store.get(admitted.id) == admitted
        assert await store.get(damaged.id) == damaged
    assert ("4",) in schema_of(path)


async def test_job_numbers_go_on_from_either_way_of_taking_them(tmp_path: pathlib.Path) -> None:
    # The meta table's counters are taken in one statement where SQLite can (an upsert
    # RETURNING the new value), else read, then written. Either way continues the other's
    # numbers: admission numbers and execution numbers ascend, never given twice.
    path = tmp_path / "jobs.db"
    sequences: list[int] = []
    executions: list[int] = []
    for one_statement in (False, True, False, True):
        async with await SQLiteRunStore.open(path) as store:
            jobs = store._jobs
            jobs.dialect = attrs.evolve(jobs.dialect, counter_returning=one_statement)
            for n in range(3):
                admitted = await store.admit(ask(f"job {n}"), now=T0)
                sequences.append(admitted.record.sequence)
                taken = await store.acquire(owner="w1", lease=30.0, now=T0 + 1)
                assert taken is not None
                assert taken.execution is not None
                executions.append(taken.execution)
    assert sequences == list(range(1, 13))
    assert executions == list(range(1, 13))
