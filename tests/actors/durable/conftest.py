"""Fixtures the durable tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from postgres_server import drop_schemas, new_schema


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A PostgreSQL schema no other test uses, dropped with what it holds afterwards."""
    name = new_schema()
    try:
        yield name
    finally:
        await trio.to_thread.run_sync(drop_schemas, name)
