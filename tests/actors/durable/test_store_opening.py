"""Opening a run store without creating one (``create=False``: a mistyped path or schema is an
error, never a new empty store), whether a worker has ever taken jobs from a store
(``worker_seen``), and store URLs whose password never shows, however it is written. Real
SQLite files and the tests' PostgreSQL."""

from __future__ import annotations

import os
import pathlib
import urllib.parse

import psycopg
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from postgres_server import drop_schemas, new_schema, postgres_url
from run_store_helpers import LEASE, T0, ask

from actors._postgres import redacted, split_url
from actors.durable import PostgresRunStore, SQLiteRunStore, check_store_url, open_run_store
from actors.store import StoreError
from protocols.errors import ConfigError


def _schemas() -> set[str]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
    return {str(name) for (name,) in rows}


def _with_schema(schema: str) -> str:
    url = postgres_url()
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


# -- create=False ---------------------------------------------------------------------------------


async def test_sqlite_without_create_refuses_a_missing_file_and_creates_nothing(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "jbos.db"
    for opening in (
        SQLiteRunStore.open(path, create=False),
        open_run_store(f"sqlite:///{path}", create=False),
    ):
        with pytest.raises(StoreError) as refused:
            await opening
        assert refused.value.code == "missing"
        assert str(refused.value) == f"there is no store at {path} (no such file)"
    assert os.listdir(tmp_path) == []


async def test_sqlite_without_create_refuses_a_file_without_the_stores_tables(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "empty.db"
    path.touch(mode=0o600)
    with pytest.raises(StoreError) as refused:
        await SQLiteRunStore.open(path, create=False)
    assert refused.value.code == "missing"
    assert "holds none of its tables" in str(refused.value)
    assert path.stat().st_size == 0, "left as it was"
    assert sorted(os.listdir(tmp_path)) == ["empty.db"]


async def test_sqlite_without_create_opens_a_store_that_exists(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "jobs.db"
    async with await SQLiteRunStore.open(path) as store:
        admitted = await store.admit(ask(), now=T0)
    async with await SQLiteRunStore.open(path, create=False) as store:
        found = await store.get(admitted.record.id)
        assert found is not None
        await store.admit(ask(), now=T0)  # and writes as any store does
        assert len(await store.list()) == 2
    # The owner-only rule holds on this path too.
    path.chmod(0o644)
    with pytest.raises(StoreError) as loose:
        await SQLiteRunStore.open(path, create=False)
    assert loose.value.code == "permissions"


async def test_postgres_without_create_refuses_a_missing_schema_and_creates_nothing(
    schema: str,
) -> None:
    for opening in (
        PostgresRunStore.open(postgres_url(), schema=schema, create=False),
        open_run_store(_with_schema(schema), create=False),
    ):
        with pytest.raises(StoreError) as refused:
            await opening
        assert refused.value.code == "missing"
        assert f"in schema {schema} (none of its tables)" in str(refused.value)
    assert schema not in await trio.to_thread.run_sync(_schemas)
    # Once a store is there, it opens.
    await (await PostgresRunStore.open(postgres_url(), schema=schema)).aclose()
    store = await PostgresRunStore.open(postgres_url(), schema=schema, create=False)
    try:
        await store.admit(ask(), now=T0)
    finally:
        await store.aclose()


# -- worker_seen ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_worker_seen_is_when_a_worker_last_began_taking_jobs(
    kind: str, tmp_path: pathlib.Path
) -> None:
    schema = new_schema()
    url = f"sqlite:///{tmp_path / 'jobs.db'}" if kind == "sqlite" else _with_schema(schema)
    try:
        submitter = await open_run_store(url)
        first = second = None
        try:
            await submitter.admit(ask(), now=T0)
            assert isinstance(submitter, SQLiteRunStore | PostgresRunStore)
            assert await submitter.worker_seen() is None, "admitting is no worker's doing"
            first = await open_run_store(url)
            assert isinstance(first, SQLiteRunStore | PostgresRunStore)
            taken = await first.acquire(owner="w1", lease=LEASE, now=T0 + 1)
            assert taken is not None
            await first.acquire(owner="w1", lease=LEASE, now=T0 + 2)  # (only the first)
            assert await submitter.worker_seen() == T0 + 1
            # Another worker's store, later: its first acquire, even one finding nothing.
            second = await open_run_store(url)
            assert await second.acquire(owner="w2", lease=LEASE, now=T0 + 5) is None
            assert await submitter.worker_seen() == T0 + 5
        finally:
            for store in (submitter, first, second):
                if store is not None:
                    await store.aclose()
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


# -- store URLs and their passwords -------------------------------------------------------------

# What a password may be written as in a URL, unescaped characters included (a user's mistake
# the error must not repeat).
passwords = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1)


@given(password=passwords)
def test_redacted_hides_a_password_however_it_is_written(password: str) -> None:
    url = f"postgresql://ada:{password}@db.example:5432/jobs?sslmode=require"
    assert redacted(url) == "postgresql://ada:***@db.example:5432/jobs?sslmode=require"
    query = f"postgresql://ada@db.example/jobs?user=ada&password={password}"
    if "&" not in password and "#" not in password:
        assert redacted(query) == "postgresql://ada@db.example/jobs?user=ada&password=***"


@given(password=passwords)
def test_a_malformed_store_url_is_refused_without_its_password(password: str) -> None:
    """Whatever the password holds, checking the URL raises nothing but a ConfigError, and
    that never quotes the password."""
    url = f"postgresql://ada:{password}@db.example:5432/jobs"
    said = ""
    try:
        check_store_url(url)
    except ConfigError as error:
        said = str(error)
    if said:
        assert "ada:***@" in said
    if len(password) >= 4 and password not in url.replace(f":{password}@", ""):
        assert password not in said


def test_a_url_without_a_host_keeps_its_empty_authority() -> None:
    # postgresql:///db is libpq's local socket: it must not become postgresql:/db.
    assert split_url("postgresql:///jobs?host=/run/pg&schema=s") == (
        "postgresql:///jobs?host=%2Frun%2Fpg",
        "s",
    )
    assert split_url("postgresql://ada@h/jobs?schema=s") == ("postgresql://ada@h/jobs", "s")
    parts = urllib.parse.urlsplit(split_url("postgresql:///jobs")[0])
    assert (parts.netloc, parts.path) == ("", "/jobs")
