"""A connection the server ends while a store is being prepared on it (an operator, a
failover, the crash harness's ``pg_terminate_backend``) is made again: a worker starting while
its connections are cut still opens its store. A server that refuses to connect at all is an
error at once, as before."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from postgres_server import drop_schemas, new_schema, postgres_url

import actors._postgres as pg
from actors.durable import PostgresRunStore
from actors.store import StoreError


def cut_while_preparing(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """Make the first ``times`` preparations end their own connection from the server side."""
    cuts: list[int] = []
    migrate = pg._migrate

    def migrate_or_cut(conn: Any, where: str) -> None:
        if len(cuts) < times:
            cuts.append(1)
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        migrate(conn, where)

    monkeypatch.setattr(pg, "_migrate", migrate_or_cut)
    return cuts


async def test_a_store_opens_when_its_connection_is_cut_while_being_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = new_schema()
    cuts = cut_while_preparing(monkeypatch, times=2)
    try:
        store = await PostgresRunStore.open(postgres_url(), schema=schema)
        async with store:
            assert await store.list() == []
        assert len(cuts) == 2  # both cuts happened, and the third attempt opened the store
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


async def test_a_connection_cut_every_time_is_an_error_that_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = new_schema()
    cuts = cut_while_preparing(monkeypatch, times=99)
    try:
        with pytest.raises(StoreError, match="went away") as caught:
            await PostgresRunStore.open(postgres_url(), schema=schema)
        assert caught.value.retryable
        assert len(cuts) == pg._PREPARE_ATTEMPTS  # tried that often, then gave up
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)
