"""Conversation stores: one contract suite run against both adapters, then the SQLite store's own
guarantees on real files (schema, permissions, corruption, concurrent writers, a SIGKILL mid-write,
cancellation)."""

from __future__ import annotations

import os
import pathlib
import signal
import sqlite3
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from postgres_server import drop_schemas, new_schema, postgres_url

from actors.store import (
    MAX_LIST_LIMIT,
    SCHEMA_VERSION,
    ConversationStore,
    MemoryConversationStore,
    PostgresConversationStore,
    SQLiteConversationStore,
    StoreError,
)
from protocols.codec import decode, encode
from protocols.errors import AgentsError, ValidationError
from protocols.history import ConversationSnapshot, Section
from protocols.messages import Message, ToolCall

ROOT = pathlib.Path(__file__).resolve().parents[2]
META = "trio_agents_meta"
TABLE = "trio_agents_conversations"

# ---------------------------------------------------------------------------------------------
# Snapshots


def rich_snapshot(conversation_id: str = "conv-1", tag: str = "v1") -> ConversationSnapshot:
    """A snapshot touching every field the codec writes: sections, tool calls and results,
    images, thinking, continuation data, an interrupted answer, unicode and escapes."""
    call = ToolCall(
        id="call-1",
        name="search",
        arguments={"query": "naïve café ☕", "limit": 3, "nested": {"a": [1, 2.5, None, True]}},
    )
    folded = (
        Message.system("Be brief.", id="m1", created_at=1.0),
        Message.user("héllo 👋 中文 עברית", images=("iVBORw0KGgo=",), id="m2", created_at=2.0),
        Message.assistant(
            "",
            calls=(call,),
            thinking="let me look",
            continuation={"signature": "c2ln", "blocks": [{"type": "thinking"}]},
            id="m3",
            created_at=3.0,
        ),
        Message.tool("call-1", "search", '{"hits": 2}', id="m4", created_at=4.0),
        Message.assistant("Found two.", id="m5", created_at=5.5),
    )
    tail = (
        Message.user(
            f'and now? {tag}\n\t"quotes" \\ \x00 \u2028 \U0001f600', id="m6", created_at=6
        ),
        Message.assistant("partial answ", interrupted=True, id="m7", created_at=7.25),
    )
    return ConversationSnapshot(
        id=conversation_id,
        summary=f"rollup ✓ {tag}",
        sections=(Section("sec-1", "greeted; searched", folded),),
        messages=tail,
    )


def plain_snapshot(conversation_id: str, text: str = "hello") -> ConversationSnapshot:
    return ConversationSnapshot(
        id=conversation_id, messages=(Message.user(text, id="u1", created_at=1.0),)
    )


def big_snapshot(conversation_id: str, fill: str, size: int) -> ConversationSnapshot:
    return ConversationSnapshot(
        id=conversation_id,
        summary=fill,
        messages=(
            Message.user(fill * size, id="big-1", created_at=1.0),
            Message.assistant(fill * (size // 2), id="big-2", created_at=2.0),
        ),
    )


# ---------------------------------------------------------------------------------------------
# Fixtures: the contract suite runs against both stores

Opener = Callable[..., Awaitable[ConversationStore]]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Opener]:
    counter = iter(range(1000))
    schemas: list[str] = []

    async def opener(**options: Any) -> ConversationStore:
        if request.param == "memory":
            return MemoryConversationStore(**options)
        if request.param == "postgres":
            options.pop("busy_timeout", None)  # (a SQLite setting)
            options.pop("durable", None)
            schemas.append(new_schema())
            return await PostgresConversationStore.open(
                postgres_url(), schema=schemas[-1], **options
            )
        return await SQLiteConversationStore.open(tmp_path / f"s{next(counter)}.db", **options)

    yield opener
    if schemas:
        drop_schemas(*schemas)


@pytest.fixture
async def store(open_store: Opener) -> AsyncIterator[ConversationStore]:
    opened = await open_store()
    try:
        yield opened
    finally:
        await opened.aclose()


def raw(path: pathlib.Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def run_sql(path: pathlib.Path, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
    conn = raw(path)
    try:
        for statement in statements:
            if isinstance(statement, tuple):
                conn.execute(*statement)
            else:
                conn.execute(statement)
    finally:
        conn.close()


def query(path: pathlib.Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = raw(path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def mode_of(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def make_sqlite(path: pathlib.Path, *snapshots: ConversationSnapshot) -> None:
    """A closed store file at ``path`` holding ``snapshots``."""
    async with await SQLiteConversationStore.open(path) as created:
        for snapshot in snapshots:
            await created.set(snapshot)


# ---------------------------------------------------------------------------------------------
# The contract


async def test_both_stores_implement_the_port(store: ConversationStore) -> None:
    assert isinstance(store, ConversationStore)


async def test_round_trip_gives_an_equal_fresh_snapshot(store: ConversationStore) -> None:
    snapshot = rich_snapshot()
    await store.set(snapshot)
    first = await store.get("conv-1")
    second = await store.get("conv-1")
    assert first == snapshot
    assert second == snapshot
    assert first is not snapshot
    assert first is not second
    assert encode(first) == encode(snapshot)


async def test_a_later_mutation_of_the_callers_objects_does_not_leak_in(
    store: ConversationStore,
) -> None:
    snapshot = rich_snapshot()
    await store.set(snapshot)
    # Frozen classes still hold plain dicts: mutate them after the write.
    snapshot.sections[0].messages[2].calls[0].arguments["query"] = "changed"
    snapshot.sections[0].messages[2].continuation["signature"] = "changed"
    stored = await store.get("conv-1")
    assert stored is not None
    assert stored.sections[0].messages[2].calls[0].arguments["query"] == "naïve café ☕"
    assert stored.sections[0].messages[2].continuation["signature"] == "c2ln"
    # ... and mutating what get returned does not change the store either.
    stored.sections[0].messages[2].calls[0].arguments["query"] = "again"
    again = await store.get("conv-1")
    assert again is not None
    assert again.sections[0].messages[2].calls[0].arguments["query"] == "naïve café ☕"


async def test_get_of_an_absent_id_is_none(store: ConversationStore) -> None:
    assert await store.get("nobody") is None
    await store.set(plain_snapshot("somebody"))
    assert await store.get("nobody") is None


async def test_set_upserts_by_snapshot_id(store: ConversationStore) -> None:
    await store.set(rich_snapshot("conv-1", "v1"))
    await store.set(plain_snapshot("other"))
    await store.set(rich_snapshot("conv-1", "v2"))
    assert await store.get("conv-1") == rich_snapshot("conv-1", "v2")
    assert await store.get("other") == plain_snapshot("other")
    assert await store.list() == ["conv-1", "other"]


async def test_delete_reports_whether_something_was_removed(store: ConversationStore) -> None:
    await store.set(plain_snapshot("a"))
    await store.set(plain_snapshot("b"))
    assert await store.delete("a") is True
    assert await store.get("a") is None
    assert await store.delete("a") is False
    assert await store.delete("never") is False
    assert await store.list() == ["b"]
    await store.set(plain_snapshot("a", "back"))
    assert await store.get("a") == plain_snapshot("a", "back")


async def test_list_pages_ids_in_ascending_code_point_order(store: ConversationStore) -> None:
    ids = ["m", "B", "é", "a", "中", "😀", "a-2", "Z", "b", "aa", "zz", "Ω"]
    for conversation_id in ids:
        await store.set(plain_snapshot(conversation_id))
    assert await store.list() == sorted(ids)
    assert await store.list(limit=3) == sorted(ids)[:3]
    pages: list[list[str]] = []
    after: str | None = None
    for _ in range(len(ids)):  # bounded: a pager that repeats itself must fail, not hang
        page = await store.list(after=after, limit=5)
        if not page:
            break
        pages.append(page)
        after = page[-1]
    assert [len(page) for page in pages] == [5, 5, 2]
    assert [item for page in pages for item in page] == sorted(ids)
    assert await store.list(after="😀") == []
    # ``after`` need not be a stored id: ids strictly greater than it.
    assert await store.list(after="a-1") == [i for i in sorted(ids) if i > "a-1"]
    assert await store.list(after="") == sorted(ids)
    assert await store.list(after="a", limit=1) == ["a-2"]


async def test_list_of_an_empty_store_is_empty(store: ConversationStore) -> None:
    assert await store.list() == []
    assert await store.list(after="x", limit=MAX_LIST_LIMIT) == []


@pytest.mark.parametrize("limit", [0, -1, MAX_LIST_LIMIT + 1, True, 1.5, "10"])
async def test_list_refuses_a_limit_out_of_range(store: ConversationStore, limit: Any) -> None:
    with pytest.raises(ValidationError, match="limit"):
        await store.list(limit=limit)


@pytest.mark.parametrize("after", [7, b"a", "bad\udfff"])
async def test_list_refuses_a_bad_after(store: ConversationStore, after: Any) -> None:
    with pytest.raises(ValidationError, match="after"):
        await store.list(after=after)


async def test_list_accepts_the_limit_bounds(store: ConversationStore) -> None:
    for index in range(3):
        await store.set(plain_snapshot(f"id-{index}"))
    assert await store.list(limit=1) == ["id-0"]
    assert await store.list(limit=MAX_LIST_LIMIT) == ["id-0", "id-1", "id-2"]


@pytest.mark.parametrize("bad", [None, 7, b"id", "", "bad\ud800id"])
async def test_bad_ids_are_refused_before_anything_happens(
    store: ConversationStore, bad: Any
) -> None:
    with pytest.raises(ValidationError, match="conversation id"):
        await store.get(bad)
    with pytest.raises(ValidationError, match="conversation id"):
        await store.delete(bad)


async def test_set_refuses_what_is_not_a_snapshot(store: ConversationStore) -> None:
    with pytest.raises(ValidationError, match="ConversationSnapshot"):
        await store.set({"id": "x"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="lone surrogates"):
        await store.set(plain_snapshot("bad\udc00"))
    assert await store.list() == []


async def test_a_snapshot_above_max_bytes_is_refused_and_nothing_is_written(
    open_store: Opener,
) -> None:
    small = await open_store(max_bytes=2_000)
    try:
        await small.set(plain_snapshot("c", "old"))
        fits = plain_snapshot("c", "x" * 1_000)
        await small.set(fits)
        with pytest.raises(StoreError) as caught:
            await small.set(plain_snapshot("c", "é" * 1_000))  # 2,000 bytes of content alone
        assert caught.value.code == "too_large"
        assert caught.value.conversation_id == "c"
        assert "2000 bytes" in str(caught.value)
        assert await small.get("c") == fits
    finally:
        await small.aclose()


async def test_every_call_after_aclose_raises_closed(open_store: Opener) -> None:
    opened = await open_store()
    await opened.set(plain_snapshot("a"))
    await opened.aclose()
    await opened.aclose()  # idempotent
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: opened.get("a"),
        lambda: opened.set(plain_snapshot("b")),
        lambda: opened.delete("a"),
        opened.list,
    ]
    for call in calls:
        with pytest.raises(StoreError) as caught:
            await call()
        assert caught.value.code == "closed"
        assert isinstance(caught.value, AgentsError)


async def test_a_set_cancelled_before_it_starts_writes_nothing(store: ConversationStore) -> None:
    await store.set(plain_snapshot("c", "old"))
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.set(plain_snapshot("c", "new"))
    assert scope.cancelled_caught
    assert await store.get("c") == plain_snapshot("c", "old")


async def test_the_stores_work_as_async_context_managers(tmp_path: pathlib.Path) -> None:
    async with MemoryConversationStore() as memory:
        await memory.set(plain_snapshot("a"))
    async with await SQLiteConversationStore.open(tmp_path / "c.db") as sqlite:
        await sqlite.set(plain_snapshot("a"))
    for closed in (memory, sqlite):
        with pytest.raises(StoreError, match="closed"):
            await closed.list()


# ---------------------------------------------------------------------------------------------
# SQLite: files, schema, permissions


async def test_round_trip_across_fresh_instances_on_one_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, rich_snapshot("a"), rich_snapshot("b", "b1"))
    async with await SQLiteConversationStore.open(str(path)) as second:
        assert await second.get("a") == rich_snapshot("a")
        assert await second.get("b") == rich_snapshot("b", "b1")
        await second.set(rich_snapshot("b", "b2"))
        assert await second.delete("a") is True
        await second.set(plain_snapshot("c"))
    async with await SQLiteConversationStore.open(path) as third:
        assert await third.list() == ["b", "c"]
        assert await third.get("b") == rich_snapshot("b", "b2")
        assert await third.get("c") == plain_snapshot("c")


async def test_a_fresh_database_holds_the_current_schema(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    async with await SQLiteConversationStore.open(path, clock=lambda: 1234.5) as store:
        await store.set(rich_snapshot("a"))
        assert query(path, "PRAGMA journal_mode") == [("wal",)]
    assert query(path, f"SELECT key, value FROM {META}") == [("schema_version", "4")]
    assert SCHEMA_VERSION == 4
    rows = query(path, f"SELECT id, snapshot, updated_at FROM {TABLE}")
    assert len(rows) == 1
    conversation_id, text, updated_at = rows[0]
    assert conversation_id == "a"
    assert decode(ConversationSnapshot, text) == rich_snapshot("a")
    assert updated_at == 1234.5
    assert query(path, "PRAGMA integrity_check") == [("ok",)]


async def test_updated_at_follows_each_write(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    now = [100.0]
    async with await SQLiteConversationStore.open(path, clock=lambda: now[0]) as store:
        await store.set(plain_snapshot("a"))
        await store.set(plain_snapshot("b"))
        now[0] = 250.0
        await store.set(plain_snapshot("a", "again"))
        stamps = dict(query(path, f"SELECT id, updated_at FROM {TABLE} ORDER BY id"))
    assert stamps == {"a": 250.0, "b": 100.0}


async def test_an_application_table_in_the_same_file_is_left_alone(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    run_sql(path, "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')")
    await make_sqlite(path, plain_snapshot("a"))
    assert query(path, "SELECT body FROM notes") == [("mine",)]
    assert query(path, f"SELECT id FROM {TABLE}") == [("a",)]


async def test_the_database_and_its_companions_are_owner_only(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    old_umask = os.umask(0o000)  # the most permissive umask must not widen the file
    try:
        store = await SQLiteConversationStore.open(path)
    finally:
        os.umask(old_umask)
    try:
        await store.set(rich_snapshot("a"))
        assert mode_of(path) == 0o600
        companions = [tmp_path / "c.db-wal", tmp_path / "c.db-shm"]
        assert all(companion.exists() for companion in companions)
        assert [mode_of(companion) for companion in companions] == [0o600, 0o600]
    finally:
        await store.aclose()
    assert mode_of(path) == 0o600


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o606])
async def test_a_file_others_may_access_is_refused_not_fixed(
    tmp_path: pathlib.Path, mode: int
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, plain_snapshot("a"))
    path.chmod(mode)
    with pytest.raises(StoreError) as caught:
        await SQLiteConversationStore.open(path)
    assert caught.value.code == "permissions"
    assert f"{mode:04o}" in str(caught.value)
    assert "chmod 600" in str(caught.value)
    assert mode_of(path) == mode  # left for its owner to judge
    path.chmod(0o600)
    async with await SQLiteConversationStore.open(path) as reopened:
        assert await reopened.get("a") == plain_snapshot("a")


async def test_a_stray_companion_others_may_read_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, plain_snapshot("a"))
    wal = tmp_path / "c.db-wal"
    wal.touch(mode=0o644)
    wal.chmod(0o644)
    with pytest.raises(StoreError) as caught:
        await SQLiteConversationStore.open(path)
    assert caught.value.code == "permissions"
    assert "c.db-wal" in str(caught.value)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (str(SCHEMA_VERSION + 1), "newer than this trio-agents supports"),
        ("99", "newer"),
        ("0", "not a version"),
    ],
)
async def test_an_unknown_schema_version_is_refused(
    tmp_path: pathlib.Path, version: str, expected: str
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, plain_snapshot("a"))
    run_sql(path, (f"UPDATE {META} SET value = ? WHERE key = 'schema_version'", (version,)))
    with pytest.raises(StoreError) as caught:
        await SQLiteConversationStore.open(path)
    assert caught.value.code == "schema"
    assert expected in str(caught.value)
    assert repr(version) in str(caught.value)
    # Refused means untouched: the version and the row are still there.
    assert query(path, f"SELECT value FROM {META}") == [(version,)]
    assert query(path, f"SELECT id FROM {TABLE}") == [("a",)]


def _meta_without_conversations(path: pathlib.Path) -> None:
    run_sql(path, f"DROP TABLE {TABLE}")


def _conversations_without_meta(path: pathlib.Path) -> None:
    run_sql(path, f"DROP TABLE {META}")


def _meta_without_a_version(path: pathlib.Path) -> None:
    run_sql(path, f"DELETE FROM {META}")


def _wrong_columns(path: pathlib.Path) -> None:
    run_sql(
        path,
        f"DROP TABLE {TABLE}",
        f"CREATE TABLE {TABLE} (id TEXT PRIMARY KEY NOT NULL, snapshot BLOB NOT NULL)",
    )


def _wrong_meta_columns(path: pathlib.Path) -> None:
    run_sql(
        path,
        f"DROP TABLE {META}",
        f"CREATE TABLE {META} (name TEXT PRIMARY KEY, data TEXT)",
        f"INSERT INTO {META} VALUES ('schema_version', '2')",
    )


def _unreadable_version(path: pathlib.Path) -> None:
    run_sql(path, f"UPDATE {META} SET value = 'one'")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_meta_without_conversations, "lacks trio_agents_conversations"),
        (_conversations_without_meta, "but no trio_agents_meta table"),
        (_meta_without_a_version, "no schema_version"),
        (_wrong_columns, "unexpected columns (id TEXT, snapshot BLOB)"),
        (_wrong_meta_columns, "trio_agents_meta table has unexpected columns"),
        (_unreadable_version, "'one'"),
    ],
)
async def test_a_partial_or_altered_schema_is_refused_and_left_alone(
    tmp_path: pathlib.Path, damage: Callable[[pathlib.Path], None], expected: str
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path)
    damage(path)
    before = query(path, "SELECT type, name, sql FROM sqlite_master ORDER BY name")
    with pytest.raises(StoreError) as caught:
        await SQLiteConversationStore.open(path)
    assert caught.value.code == "schema"
    assert expected in str(caught.value)
    assert query(path, "SELECT type, name, sql FROM sqlite_master ORDER BY name") == before


async def test_a_file_that_is_not_a_database_is_reported_corrupt(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, b"this is not a SQLite database, just some text long enough" * 20)
    os.close(fd)
    with pytest.raises(StoreError) as caught:
        await SQLiteConversationStore.open(path)
    assert caught.value.code == "corrupt"
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


async def test_a_path_that_is_not_a_file_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(StoreError) as caught:
        await SQLiteConversationStore.open(tmp_path)
    assert caught.value.code == "io"
    assert "not a regular file" in str(caught.value)


async def test_a_missing_directory_is_an_io_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(StoreError) as caught:
        await SQLiteConversationStore.open(tmp_path / "missing" / "c.db")
    assert caught.value.code == "io"
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    "options",
    [
        {"max_bytes": 0},
        {"max_bytes": True},
        {"busy_timeout": -1},
        {"busy_timeout": float("nan")},
    ],
)
async def test_open_refuses_bad_options(tmp_path: pathlib.Path, options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        await SQLiteConversationStore.open(tmp_path / "c.db", **options)
    with pytest.raises(ValidationError, match="database file"):
        await SQLiteConversationStore.open(":memory:")
    assert not (tmp_path / "c.db").exists()


GARBAGE = [
    pytest.param("not json at all", "invalid JSON", id="not-json"),
    pytest.param(b"\xff\xfe\x00binary", "not UTF-8", id="not-utf8"),
    pytest.param('{"id": "c1", "bogus": 1}', "unknown field", id="unknown-field"),
    pytest.param('{"id": "c1", "messages": [{"role": "wizard"}]}', "wizard", id="bad-role"),
    pytest.param('{"id": "c1", "summary": NaN}', "NaN", id="nan"),
    pytest.param("[1, 2, 3]", "invalid ConversationSnapshot", id="not-an-object"),
    pytest.param('{"id": "someone-else"}', "holds conversation 'someone-else'", id="other-id"),
    pytest.param(
        '{"id": "c1", "messages": [' + ",".join(['{"role": "wizard"}'] * 50) + "]}",
        "...",
        id="long-complaint",
    ),
]


@pytest.mark.parametrize(("garbage", "detail"), GARBAGE)
async def test_a_corrupt_row_is_reported_never_dropped(
    tmp_path: pathlib.Path, garbage: str | bytes, detail: str
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, rich_snapshot("c1"), rich_snapshot("c2"))
    run_sql(path, (f"UPDATE {TABLE} SET snapshot = ? WHERE id = 'c1'", (garbage,)))
    async with await SQLiteConversationStore.open(path) as store:
        with pytest.raises(StoreError) as caught:
            await store.get("c1")
        assert caught.value.code == "corrupt"
        assert caught.value.conversation_id == "c1"
        assert "'c1'" in str(caught.value)
        assert detail in str(caught.value)
        assert len(str(caught.value)) < 500  # a bounded excerpt of the decoder's complaint
        # The rest of the store is unaffected and the bad row can be listed and replaced.
        assert await store.get("c2") == rich_snapshot("c2")
        assert await store.list() == ["c1", "c2"]
        await store.set(rich_snapshot("c1", "repaired"))
        assert await store.get("c1") == rich_snapshot("c1", "repaired")
        run_sql(path, (f"UPDATE {TABLE} SET snapshot = ? WHERE id = 'c1'", (garbage,)))
        assert await store.delete("c1") is True
        assert await store.get("c1") is None


async def test_a_lock_held_past_the_busy_timeout_is_a_retryable_store_error(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, plain_snapshot("a", "old"))
    async with await SQLiteConversationStore.open(path, busy_timeout=0) as store:
        blocker = raw(path)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError) as caught:
                await store.set(plain_snapshot("a", "new"))
            assert caught.value.code == "busy"
            assert caught.value.retryable is True
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            assert await store.get("a") == plain_snapshot("a", "old")  # readers are not blocked
            blocker.execute("COMMIT")
        finally:
            blocker.close()
        await store.set(plain_snapshot("a", "new"))  # the failed write left nothing open
        assert await store.get("a") == plain_snapshot("a", "new")


async def test_a_write_failing_inside_its_transaction_rolls_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, plain_snapshot("a", "old"))
    async with await SQLiteConversationStore.open(path) as store:
        # An application trigger refuses the update half-way through the transaction.
        run_sql(
            path,
            f"CREATE TRIGGER refuse BEFORE UPDATE ON {TABLE} "
            "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END",
        )
        with pytest.raises(StoreError) as caught:
            await store.set(plain_snapshot("a", "new"))
        assert caught.value.code == "io"
        assert "refused by a trigger" in str(caught.value)
        assert await store.get("a") == plain_snapshot("a", "old")
        run_sql(path, "DROP TRIGGER refuse")  # needs the write lock: the store released it
        await store.set(plain_snapshot("a", "new"))
        assert await store.get("a") == plain_snapshot("a", "new")


# ---------------------------------------------------------------------------------------------
# SQLite: concurrency, crashes, cancellation


async def test_stores_opening_one_fresh_file_at_once_agree_on_the_schema(
    tmp_path: pathlib.Path,
) -> None:
    # Switching a fresh file to WAL from two connections at once can deadlock inside SQLite,
    # which answers SQLITE_BUSY without calling the busy handler; the store retries the switch.
    # Several fresh files, eight openers each, make that race likely enough to be seen.
    for round in range(4):
        others = tmp_path / f"race-{round}.db"
        raced: list[SQLiteConversationStore] = []

        async def open_raced(
            target: pathlib.Path = others, into: list[SQLiteConversationStore] = raced
        ) -> None:
            into.append(await SQLiteConversationStore.open(target))

        try:
            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(open_raced)
            assert len(raced) == 8
        finally:
            for store in raced:
                await store.aclose()

    path = tmp_path / "c.db"
    opened: list[SQLiteConversationStore] = []

    async def open_one() -> None:
        opened.append(await SQLiteConversationStore.open(path))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(open_one)
    try:
        assert len(opened) == 4
        for index, store in enumerate(opened):
            await store.set(plain_snapshot(f"s{index}"))
        assert await opened[0].list() == ["s0", "s1", "s2", "s3"]
    finally:
        for store in opened:
            await store.aclose()
    assert query(path, f"SELECT key, value FROM {META}") == [("schema_version", "4")]
    assert mode_of(path) == 0o600


async def test_concurrent_writers_from_two_instances_all_land(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    rounds = 40
    first = await SQLiteConversationStore.open(path)
    second = await SQLiteConversationStore.open(path)
    try:

        async def writer(store: SQLiteConversationStore, name: str) -> None:
            for index in range(rounds):
                await store.set(plain_snapshot(f"{name}-{index:03}", f"{name} {index}"))
                await store.set(plain_snapshot("shared", f"{name} {index}"))
                await store.set(rich_snapshot(f"{name}-rich", f"{index}"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer, first, "one")
            nursery.start_soon(writer, second, "two")

        ids = await first.list(limit=MAX_LIST_LIMIT)
        expected = sorted(
            [f"{name}-{index:03}" for name in ("one", "two") for index in range(rounds)]
            + ["one-rich", "two-rich", "shared"]
        )
        assert ids == expected
        for name in ("one", "two"):
            for index in range(rounds):
                got = await second.get(f"{name}-{index:03}")
                assert got == plain_snapshot(f"{name}-{index:03}", f"{name} {index}")
            assert await first.get(f"{name}-rich") == rich_snapshot(f"{name}-rich", "39")
        last = f" {rounds - 1}"
        assert await first.get("shared") in (
            plain_snapshot("shared", "one" + last),
            plain_snapshot("shared", "two" + last),
        )
    finally:
        await first.aclose()
        await second.aclose()
    assert query(path, "PRAGMA integrity_check") == [("ok",)]


_CHILD_STORE = """
import sys, trio
from actors.store import SQLiteConversationStore
from protocols.codec import decode
from protocols.history import ConversationSnapshot

path, *sources = sys.argv[1:]
snapshots = [decode(ConversationSnapshot, open(s, encoding="utf-8").read()) for s in sources]

async def main():
    store = await SQLiteConversationStore.open(path)
    for i in range(100_000):
        print("set", i, flush=True)
        await store.set(snapshots[i % 2])

trio.run(main)
"""

# A writer in the store's schema that stops inside its transaction, after SQLite has spilled
# the new row's pages into the WAL (a small page cache forces the spill) but before COMMIT.
_CHILD_STUCK = f"""
import sys, sqlite3
path, source = sys.argv[1:]
text = open(source, encoding="utf-8").read()
conn = sqlite3.connect(path, isolation_level=None)
conn.execute("PRAGMA cache_size = -64")
conn.execute("BEGIN IMMEDIATE")
conn.execute(
    "UPDATE {TABLE} SET snapshot = ?, updated_at = 2.0 WHERE id = 'big'", (text,)
)
print("set 0", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


async def _kill_when(script: str, args: list[str], line: int) -> trio.Process:
    """Run ``script`` and SIGKILL it as soon as it prints ``set <line>``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdin is not None
    try:
        seen = b""
        target = f"set {line}\n".encode()
        with trio.fail_after(60):
            while target not in seen:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    error = await process.stderr.receive_some()
                    pytest.fail(f"the writer exited early: {error.decode(errors='replace')}")
                seen += chunk
        return process
    finally:
        process.kill()  # SIGKILL on POSIX
        await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            await stream.aclose()


def write_sources(tmp_path: pathlib.Path, *snapshots: ConversationSnapshot) -> list[str]:
    sources = []
    for index, snapshot in enumerate(snapshots):
        source = tmp_path / f"v{index}.json"
        source.write_text(encode(snapshot), encoding="utf-8")
        sources.append(str(source))
    return sources


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
async def test_a_store_killed_while_writing_leaves_the_old_or_the_new_snapshot(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    # ~1.5 MB apiece: each write spans hundreds of WAL pages. Where in set() the kill lands
    # (encoding, the transaction, the commit) varies from round to round.
    versions = [big_snapshot("big", "a", 1_000_000), big_snapshot("big", "b", 1_000_000)]
    sources = write_sources(tmp_path, *versions)
    await make_sqlite(path, plain_snapshot("small"))
    for round_, line in enumerate((1, 2, 4)):
        process = await _kill_when(_CHILD_STORE, [str(path), *sources], line)
        assert process.returncode == -signal.SIGKILL
        assert query(path, "PRAGMA integrity_check") == [("ok",)]
        async with await SQLiteConversationStore.open(path) as store:
            survivor = await store.get("big")
            assert survivor in versions, f"round {round_}: a torn or missing snapshot"
            assert await store.get("small") == plain_snapshot("small")
            assert await store.list() == ["big", "small"]
        assert mode_of(path) == 0o600


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
async def test_a_writer_killed_inside_its_transaction_leaves_the_old_snapshot(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    old, new = big_snapshot("big", "o", 10), big_snapshot("big", "n", 1_000_000)
    await make_sqlite(path, old)
    (source,) = write_sources(tmp_path, new)
    wal = tmp_path / "c.db-wal"
    assert not wal.exists()  # the store closed cleanly
    # The child is stopped mid-transaction when it prints: its uncommitted frames are on disk,
    # so the kill leaves a torn write for recovery to discard.
    process = await _kill_when(_CHILD_STUCK, [str(path), source], 0)
    assert process.returncode == -signal.SIGKILL
    assert wal.stat().st_size > 1_000_000
    assert query(path, "PRAGMA integrity_check") == [("ok",)]
    async with await SQLiteConversationStore.open(path) as store:
        assert await store.get("big") == old
        await store.set(new)  # the write lock the dead writer held is free again
        assert await store.get("big") == new


async def test_a_cancel_while_the_write_runs_lets_it_commit(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    old, new = plain_snapshot("c", "old"), rich_snapshot("c", "new")
    await make_sqlite(path, old)
    async with await SQLiteConversationStore.open(path) as store:
        blocker = raw(path)
        try:
            blocker.execute("BEGIN IMMEDIATE")  # the worker will wait for this lock
            scope = trio.CancelScope()
            returned = trio.Event()

            async def write() -> None:
                with scope:
                    await store.set(new)
                    returned.set()  # set() returned: the cancel is delivered later
                    await trio.sleep_forever()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                await trio.testing.wait_all_tasks_blocked()  # set() is in the worker
                scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
                assert not returned.is_set()  # the write is not abandoned half-way
                assert query(path, f"SELECT count(*) FROM {TABLE}") == [(1,)]
                blocker.execute("COMMIT")
            assert returned.is_set()
            assert scope.cancelled_caught
        finally:
            blocker.close()
        assert await store.get("c") == new
        await store.set(plain_snapshot("d"))  # still usable
        assert await store.list() == ["c", "d"]


async def test_a_cancel_while_waiting_for_the_worker_writes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, plain_snapshot("a", "old"), plain_snapshot("b", "old"))
    async with await SQLiteConversationStore.open(path) as store:
        blocker = raw(path)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            queued = trio.CancelScope()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.set, plain_snapshot("a", "first"))
                await trio.testing.wait_all_tasks_blocked()  # the worker waits for the lock

                async def second() -> None:
                    with queued:
                        await store.set(plain_snapshot("b", "second"))

                nursery.start_soon(second)
                await trio.testing.wait_all_tasks_blocked()  # queued behind the first
                queued.cancel()
                await trio.testing.wait_all_tasks_blocked()
                blocker.execute("COMMIT")
            assert queued.cancelled_caught
        finally:
            blocker.close()
        assert await store.get("a") == plain_snapshot("a", "first")
        assert await store.get("b") == plain_snapshot("b", "old")


async def test_aclose_lets_queued_calls_finish_then_refuses_new_ones(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path)
    store = await SQLiteConversationStore.open(path)
    blocker = raw(path)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.set, plain_snapshot("a"))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(store.aclose)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(StoreError, match="closed"):
                await store.get("a")
            blocker.execute("COMMIT")
    finally:
        blocker.close()
    assert query(path, f"SELECT id FROM {TABLE}") == [("a",)]


async def test_aclose_completes_inside_a_cancelled_scope(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    store = await SQLiteConversationStore.open(path)
    await store.set(plain_snapshot("a"))
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.aclose()
    # Closed for real: the last connection checkpointed and removed the WAL file.
    assert not (tmp_path / "c.db-wal").exists()
    with pytest.raises(StoreError, match="closed"):
        await store.get("a")


async def test_open_cancelled_while_connecting_closes_what_it_opened(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    await make_sqlite(path, plain_snapshot("a"))
    opened: list[SQLiteConversationStore] = []
    scope = trio.CancelScope()

    async def open_it() -> None:
        with scope:
            opened.append(await SQLiteConversationStore.open(path))

    blocker = raw(path)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # opening waits for this lock to check the schema
        async with trio.open_nursery() as nursery:
            nursery.start_soon(open_it)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            blocker.execute("COMMIT")
    finally:
        blocker.close()
    assert scope.cancelled_caught
    assert opened == []
    # The last connection to close removes the WAL file: none of the store's was left open.
    assert not (tmp_path / "c.db-wal").exists()
    assert query(path, f"SELECT id FROM {TABLE}") == [("a",)]


def test_snapshots_used_here_are_really_rich() -> None:
    snapshot = rich_snapshot()
    messages = [*snapshot.sections[0].messages, *snapshot.messages]
    assert {m.role.value for m in messages} == {"system", "user", "assistant", "tool"}
    assert any(m.calls for m in messages)
    assert any(m.images for m in messages)
    assert any(m.continuation for m in messages)
    assert any(m.interrupted for m in messages)
    assert any(m.thinking for m in messages)
    assert attrs.evolve(snapshot, summary="x") != snapshot


async def test_a_version_1_file_is_migrated_to_hold_durable_jobs_too(
    tmp_path: pathlib.Path,
) -> None:
    # A conversation store file as version 1 wrote it: the meta and conversations tables only.
    path = tmp_path / "old.db"
    await make_sqlite(path, plain_snapshot("a"))
    run_sql(
        path,
        "DROP TABLE trio_agents_jobs",
        "DROP TABLE trio_agents_journal",
        "DROP TABLE trio_agents_tombstones",
        f"UPDATE {META} SET value = '1' WHERE key = 'schema_version'",
    )
    assert query(path, f"SELECT value FROM {META}") == [("1",)]
    async with await SQLiteConversationStore.open(path) as store:
        assert await store.get("a") == plain_snapshot("a")
    assert query(path, f"SELECT key, value FROM {META}") == [("schema_version", "4")]
    tables = {name for (name,) in query(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"trio_agents_jobs", "trio_agents_journal", "trio_agents_tombstones"} <= tables
    assert query(path, "PRAGMA integrity_check") == [("ok",)]
