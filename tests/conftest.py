"""Makes this folder importable for every test (``postgres_server``: where the tests'
PostgreSQL comes from), however the tests are selected; gives the PostgreSQL tests a schema of
their own (``schema``); and keeps a test from passing when a stray ``trio.Cancelled`` escapes
it.

pytest-trio takes a ``trio.Cancelled`` that leaves a test for the test being shut down, and
passes it -- also when nothing had cancelled the test, so a test that leaks one (a library
re-raising a cancel from elsewhere) stops before its remaining assertions and still passes.
Every async test here is wrapped: a ``Cancelled`` that leaves it while no scope around it is
cancelled fails the test.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

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


def _no_stray_cancelled(
    test: Callable[..., Coroutine[Any, Any, object]],
) -> Callable[..., Coroutine[Any, Any, object]]:
    @functools.wraps(test)
    async def guarded(*args: Any, **kwargs: Any) -> object:
        try:
            return await test(*args, **kwargs)
        except trio.Cancelled:
            # Cancelled for real (the test's own scope, pytest-trio shutting it down): this
            # raises it again. Otherwise nothing cancelled the test.
            await trio.lowlevel.checkpoint_if_cancelled()
            raise AssertionError(
                "a trio.Cancelled escaped the test although nothing around it was cancelled "
                "(a cancel leaked out of the code under test)"
            ) from None

    return guarded


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        test = getattr(item, "obj", None)
        if (
            isinstance(item, pytest.Function)
            and test is not None
            and inspect.iscoroutinefunction(test)
            and not getattr(test, "is_hypothesis_test", False)
        ):
            item.obj = _no_stray_cancelled(test)
