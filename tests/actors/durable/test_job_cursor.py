"""Listing and following a store's jobs with the gap-aware cursor (issue 25, section 3; 004
S14): ``RunStore.page``, ``feed_jobs`` / ``JobQueue.feed``, against the memory, SQLite and
PostgreSQL stores alike; then what only PostgreSQL does -- numbers that commit out of order.

The PostgreSQL cases commit out of order for real: admission transactions of their own, each
on a connection of its own, running the store's own admission code (``Jobs.admit``) and held
open at will, while the store under test reads pages beside them. The PostgreSQL server may
be shared with other test runs, whose transactions show in every snapshot's horizon: a gap
may then stay open a little longer than this test's own transactions alone would keep it, so
the cases that wait for a gap to close read again until it does (never asserting how soon).
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_server import drop_schemas, new_schema, postgres_url
from run_store_helpers import KINDS, T0, Backend, applied, ask, open_backend

from actors import open_runtime
from actors._postgres import POSTGRES_SCHEMA_VERSION, connect
from actors.durable import (
    DEFAULT_MAX_BYTES,
    AgentRegistry,
    JobFeed,
    MemoryRunStore,
    PostgresRunStore,
    RunStore,
    feed_jobs,
    open_job_queue,
)
from actors.durable._postgres_store import dialect
from actors.durable._sql_store import Jobs
from actors.testing import Reply, ScriptedProvider
from protocols import jobs as J
from protocols.codec import decode, encode
from protocols.errors import ValidationError


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[Backend]:
    async with open_backend(request.param, tmp_path) as opened:
        yield opened


async def admit_all(store: RunStore, count: int, *, children: int = 0) -> list[J.JobRecord]:
    """Admit ``count`` jobs (the first with ``children`` children); every record admitted, in
    admission order."""
    records: list[J.JobRecord] = []
    for n in range(count):
        kids = tuple(ask(f"child {n}.{i}") for i in range(children if n == 0 else 0))
        admitted = await store.admit(ask(f"job {n}", children=kids), now=T0)
        records.extend((*admitted.children, admitted.record))
    return records


async def settle(store: RunStore, cursor: J.JobCursor) -> tuple[list[J.JobRecord], J.JobCursor]:
    """Read pages from ``cursor`` until it is past every job and holds no gap (on PostgreSQL,
    until transactions elsewhere on the server have ended): what they returned, and the
    cursor."""
    returned: list[J.JobRecord] = []
    for _ in range(2000):
        page = await store.page(cursor, limit=7)
        returned.extend(page.records)
        cursor = page.cursor
        if not page.more and not page.full and not page.gaps:
            return returned, cursor
        if not page.more:
            await trio.sleep(0.01)  # a transaction elsewhere runs: look again in a moment
    raise AssertionError(f"the gaps never closed: {cursor}")


def ids(records: list[J.JobRecord]) -> list[str]:
    return [record.id for record in records]


# ---------------------------------------------------------------------------------------------
# Every store


async def test_pages_return_every_job_once_in_admission_order(backend: Backend) -> None:
    store = backend.store
    admitted = await admit_all(store, 6, children=2)
    first = await store.page(limit=3)
    assert ids(list(first.records)) == ids(admitted[:3])
    assert first.more
    assert first.cursor.position == admitted[2].sequence
    returned = list(first.records)
    cursor = first.cursor
    while True:
        page = await store.page(cursor, limit=3)
        returned.extend(page.records)
        cursor = page.cursor
        if not page.more:
            break
    assert ids(returned) == ids(admitted)
    assert [r.sequence for r in returned] == sorted(r.sequence for r in admitted)
    # Nothing again; then only what is new.
    assert (await store.page(cursor)).records == ()
    later = await admit_all(store, 1)
    assert ids(list((await store.page(cursor)).records)) == ids(later)


async def test_a_purged_job_is_a_hole_and_never_reported_as_a_gap(backend: Backend) -> None:
    store = backend.store
    admitted = await admit_all(store, 5)
    for record in (admitted[1], admitted[3]):
        assert await store.write(applied(J.cancel(record, now=T0 + 1)))
        await store.purge(record.id, now=T0 + 2)
    page = await store.page()
    assert ids(list(page.records)) == ids([admitted[0], admitted[2], admitted[4]])
    if backend.kind != "postgres":
        # One writer at a time: a jump is a purged job, proved so by the read itself.
        assert page.gaps == ()
    returned, cursor = await settle(store, page.cursor)
    assert returned == []  # (read again, the holes give nothing)
    assert cursor.gaps == ()
    assert cursor.position == admitted[4].sequence


async def test_a_page_refuses_what_is_no_cursor_or_limit(backend: Backend) -> None:
    store = backend.store
    with pytest.raises(ValidationError, match="JobCursor"):
        await store.page(3)  # type: ignore[arg-type]
    for limit in (0, 1001, True):
        with pytest.raises(ValidationError, match="limit"):
            await store.page(limit=limit)
    with pytest.raises(ValidationError, match="now"):
        await store.page(now=float("nan"))


async def test_a_feed_returns_every_job_then_each_new_one_as_it_commits(backend: Backend) -> None:
    store = backend.store
    admitted = await admit_all(store, 3)
    feed = feed_jobs(store, poll=0.05, limit=2)
    returned = []
    with trio.fail_after(30):
        async for record in feed:
            returned.append(record)
            if len(returned) == 3:
                break
        assert ids(returned) == ids(admitted)
        async with trio.open_nursery() as nursery:
            # Admitted while the feed waits: it wakes (the store's watch, or its poll).
            nursery.start_soon(admit_all, store, 2)
            later = [await anext(feed), await anext(feed)]
    assert [text_of(r) for r in later] == ["job 0", "job 1"]
    assert feed.cursor.position == later[-1].sequence
    assert feed.given_up == ()


def text_of(record: J.JobRecord) -> str:
    return record.job.input[0].content


async def test_a_feed_resumes_from_a_kept_cursor_without_repeats(backend: Backend) -> None:
    store = backend.store
    admitted = await admit_all(store, 5)
    feed = feed_jobs(store, limit=3)
    with trio.fail_after(30):
        first = [await anext(feed), await anext(feed)]  # stopped in the middle of a page
        kept = encode(feed.cursor)  # (kept as JSON, say in another process's database)
        resumed = feed_jobs(store, after=decode(J.JobCursor, kept), limit=3)
        rest = [await anext(resumed) for _ in range(3)]
        # A job's number works too: the jobs after it.
        by_number = feed_jobs(store, after=admitted[3].sequence)
        assert (await anext(by_number)).id == admitted[4].id
    assert ids(first + rest) == ids(admitted)
    for after in (-1, "3", True, 2.5):
        with pytest.raises(ValidationError, match="after"):
            feed_jobs(store, after=after)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="poll"):
        feed_jobs(store, poll=0)


async def test_a_queue_pages_and_feeds_its_jobs(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(Reply("one"), Reply("two"), Reply("three")))
    store = MemoryRunStore()
    async with (
        open_runtime() as runtime,
        open_job_queue(store, registry, runtime, clock=trio.current_time, poll=1.0) as queue,
    ):
        feed = queue.feed()
        assert isinstance(feed, JobFeed)
        first = await queue.enqueue(J.AgentJob.ask("echo", "a"))
        assert (await anext(feed)).id == first
        second = await queue.enqueue(J.AgentJob.ask("echo", "b"))
        assert (await anext(feed)).id == second
        page = await queue.page(limit=1)
        assert [r.id for r in page.records] == [first]
        assert [r.id for r in (await queue.page(page.cursor)).records] == [second]
        # From a number: the jobs after it.
        assert (await anext(queue.feed(after=page.cursor.position))).id == second
        await queue.result(second)


# ---------------------------------------------------------------------------------------------
# PostgreSQL: numbers that commit out of order


class Admitting:
    """An admission transaction held open at will, on a connection of its own, running the
    store's own admission code. Blocking: call it from a thread."""

    def __init__(self, schema: str) -> None:
        conn = connect(postgres_url(), schema, migrate=False)
        self.jobs = Jobs(dialect(), conn, conn, DEFAULT_MAX_BYTES)

    def begin(self) -> None:
        self.jobs.conn.execute("BEGIN")

    def admit(self, text: str, children: int = 0) -> list[J.JobRecord]:
        kids = tuple(ask(f"{text}.{i}") for i in range(children))
        admitted = self.jobs.admit(ask(text, children=kids), T0, None, J.Priority.NORMAL)
        return [*admitted.children, admitted.record]

    def end(self, commit: bool = True) -> None:
        self.jobs.conn.execute("COMMIT" if commit else "ROLLBACK")

    def close(self) -> None:
        self.jobs.close()


async def in_thread(call: Callable[..., Any], *args: Any) -> Any:
    return await trio.to_thread.run_sync(call, *args)


async def open_postgres(schema: str) -> PostgresRunStore:
    return await PostgresRunStore.open(postgres_url(), schema=schema)


async def test_a_job_committed_after_a_higher_number_comes_with_the_next_page(
    schema: str,
) -> None:
    async with await open_postgres(schema) as store:
        first = await admit_all(store, 1)
        a, b = Admitting(schema), Admitting(schema)
        try:
            await in_thread(a.begin)
            (held,) = await in_thread(a.admit, "held open")  # takes n
            await in_thread(b.begin)
            (passed,) = await in_thread(b.admit, "committed first")  # takes n + 1
            await in_thread(b.end)
            assert passed.sequence > held.sequence
            page = await store.page()
            # n + 1 is returned; n may still commit: a gap, read again by the next page.
            assert ids(list(page.records)) == ids([*first, passed])
            assert any(held.sequence in gap for gap in page.gaps)
            assert page.cursor.position == passed.sequence
            again = await store.page(page.cursor)
            assert again.records == ()
            assert any(held.sequence in gap for gap in again.gaps)  # (still running)
            await in_thread(a.end)
            late = await store.page(again.cursor)
            assert ids(list(late.records)) == [held.id]
            rest, cursor = await settle(store, late.cursor)
            assert rest == []
            assert cursor.gaps == ()
            assert late.given_up == ()
        finally:
            await in_thread(a.close)
            await in_thread(b.close)


async def test_a_rolled_back_number_is_closed_once_its_transaction_ended(schema: str) -> None:
    async with await open_postgres(schema) as store:
        a, b = Admitting(schema), Admitting(schema)
        try:
            await in_thread(a.begin)
            doomed = await in_thread(a.admit, "rolled back", 2)  # a tree: three numbers
            await in_thread(b.begin)
            (kept,) = await in_thread(b.admit, "kept")
            await in_thread(b.end)
            page = await store.page()
            assert ids(list(page.records)) == [kept.id]
            assert [(g.first, g.last) for g in page.gaps] == [
                (doomed[0].sequence, doomed[-1].sequence)
            ]
            await in_thread(a.end, False)
            # No more running, the gap is proved a hole -- not given up by the limits (they
            # are set so they never would).
            returned, cursor = await settle(store, page.cursor)
            assert returned == []
            assert cursor.gaps == ()
            assert cursor.position == kept.sequence
        finally:
            await in_thread(a.close)
            await in_thread(b.close)


async def test_a_feed_returns_a_late_commit_after_the_jobs_that_passed_it(schema: str) -> None:
    async with await open_postgres(schema) as store:
        feed = feed_jobs(store, poll=0.05)
        a, b = Admitting(schema), Admitting(schema)
        try:
            await in_thread(a.begin)
            (held,) = await in_thread(a.admit, "held open")
            await in_thread(b.begin)
            (passed,) = await in_thread(b.admit, "committed first")
            await in_thread(b.end)
            with trio.fail_after(30):
                assert (await anext(feed)).id == passed.id
                await in_thread(a.end)
                assert (await anext(feed)).id == held.id
        finally:
            await in_thread(a.close)
            await in_thread(b.close)


async def test_admissions_racing_from_several_stores_reach_a_feed_exactly_once(
    schema: str,
) -> None:
    # Three stores (three group commits, so transactions that commit in any order) admit 40
    # jobs each while a feed follows them: it returns all 120, none twice.
    stores = [await open_postgres(schema) for _ in range(3)]
    try:
        feed = feed_jobs(stores[0], poll=0.05, limit=16)
        admitted: list[str] = []
        returned: list[str] = []

        async def admit_from(store: RunStore, name: str) -> None:
            for n in range(40):
                record = (await store.admit(ask(f"{name} {n}"), now=T0)).record
                admitted.append(record.id)
                if n % 7 == 0:
                    await trio.lowlevel.checkpoint()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for i, store in enumerate(stores):
                    nursery.start_soon(admit_from, store, f"store {i}")
            while len(returned) < 120:
                returned.append((await anext(feed)).id)
        assert sorted(returned) == sorted(admitted)
        assert len(set(returned)) == 120
    finally:
        for store in stores:
            await store.aclose()


# A property: transactions on connections of their own begin, admit (a job, or a tree), and
# commit or roll back in a random order, with pages read (some handled part-way) between any
# two steps; then every transaction ends and pages are read until the cursor settles. Every job
# committed is returned exactly once; none rolled back ever is; nothing is given up.

Step = tuple[str, int, int]


@st.composite
def histories(draw: st.DrawFn) -> list[Step]:
    """2 to 4 transactions' steps (begin, admit a job or a tree, commit or roll back),
    interleaved at random, with a page read after each commit or rollback and at random
    between other steps (some handled part-way)."""
    count = draw(st.integers(2, 4))
    shuffle = draw(st.randoms(use_true_random=False))
    left = {
        tx: ["begin", "admit", draw(st.sampled_from(["commit", "commit", "rollback"]))]
        for tx in range(count)
    }
    script: list[Step] = []
    while left:
        tx = shuffle.choice(sorted(left))
        step = left[tx].pop(0)
        script.append((step, tx, draw(st.integers(0, 2))))
        if not left[tx]:
            del left[tx]
        if step in ("commit", "rollback") or draw(st.booleans()):
            script.append((draw(st.sampled_from(["read", "stop"])), draw(st.integers(1, 3)), 0))
    return script


@pytest.fixture(scope="module")
def shared_schema() -> Any:
    name = new_schema()
    yield name
    drop_schemas(name)


async def _play(schema: str, script: list[Step]) -> None:
    cursor = J.JobCursor(patience=3600.0, attempts=1_000_000, max_gaps=2)
    async with await open_postgres(schema) as store:
        # Start after what earlier examples admitted.
        _, cursor = await settle(store, cursor)
        writers: dict[int, Admitting] = {}
        committed: set[str] = set()
        rolled_back: set[str] = set()
        held: dict[int, list[str]] = {}
        returned: list[str] = []
        try:
            for action, first, second in script:
                if action == "begin":
                    writers[first] = await in_thread(Admitting, schema)
                    await in_thread(writers[first].begin)
                elif action == "admit":
                    records = await in_thread(writers[first].admit, f"tx {first}", second)
                    held[first] = [r.id for r in records]
                elif action in ("commit", "rollback"):
                    await in_thread(writers[first].end, action == "commit")
                    (committed if action == "commit" else rolled_back).update(held[first])
                else:
                    page = await store.page(cursor, limit=first)
                    handled = len(page.records) if action == "read" else len(page.records) // 2
                    returned.extend(ids(list(page.records[:handled])))
                    assert page.given_up == ()
                    cursor = page.after(handled)
        finally:
            for writer in writers.values():
                await in_thread(writer.close)
        rest, cursor = await settle(store, cursor)
        returned.extend(ids(rest))
    assert sorted(returned) == sorted(committed)
    assert not rolled_back & set(returned)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=histories())
def test_out_of_order_commits_on_postgresql_return_every_job_exactly_once(
    shared_schema: str, script: list[Step]
) -> None:
    trio.run(_play, shared_schema, script)


# ---------------------------------------------------------------------------------------------
# PostgreSQL: the schema (version 5 and later)


def sql(query: str, *arguments: object) -> list[tuple[object, ...]]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        cursor = conn.execute(query, arguments)
        return cursor.fetchall() if cursor.description else []


async def test_numbers_are_taken_by_a_transaction_that_has_its_id(schema: str) -> None:
    # What a page's proof rests on: the schema's function gives the transaction its id before
    # the sequence gives it numbers.
    before, numbers, after = await in_thread(numbers_taken_in_a_transaction, schema)
    assert before == (None,)
    assert len(numbers) == 3
    assert after != (None,)


def numbers_taken_in_a_transaction(schema: str) -> tuple[Any, list[int], Any]:
    """In one transaction: its id before, three numbers taken, its id after."""
    conn = connect(postgres_url(), schema, migrate=True)
    try:
        conn.execute("BEGIN")
        before = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
        take = dialect().numbers
        assert take is not None
        numbers = take(conn, "job_sequence", 3)
        after = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
        conn.execute("ROLLBACK")
        return before, numbers, after
    finally:
        conn.close()


async def test_a_version_4_schema_is_migrated_and_its_jobs_paged(schema: str) -> None:
    async with await open_postgres(schema) as store:
        before = await admit_all(store, 3)
    # Version 4 had no function for numbers (nor version 6's announcing triggers).
    sql(f'DROP FUNCTION "{schema}".trio_agents_take_numbers(regclass, integer)')
    for table in ("trio_agents_jobs", "trio_agents_journal"):
        sql(f'DROP TRIGGER trio_agents_announce ON "{schema}".{table}')
    sql(f'DROP FUNCTION "{schema}".trio_agents_announce()')
    sql(f'UPDATE "{schema}".trio_agents_meta SET value = %s WHERE key = %s', "4", "schema_version")
    async with await open_postgres(schema) as store:
        assert sql(
            f'SELECT value FROM "{schema}".trio_agents_meta WHERE key = %s', "schema_version"
        ) == [(str(POSTGRES_SCHEMA_VERSION),)]
        assert POSTGRES_SCHEMA_VERSION == 6
        after = await admit_all(store, 2)
        assert min(r.sequence for r in after) > max(r.sequence for r in before)
        returned, _ = await settle(store, J.JobCursor())
        assert ids(returned) == ids(before + after)


async def test_the_page_read_is_one_statement_with_its_snapshot(schema: str) -> None:
    # The rows and the horizon come from one snapshot; the horizon is PostgreSQL's own.
    fresh, found, horizon, xmin = await in_thread(a_page_and_the_xmin_after, schema)
    assert (fresh, found) == ([], [])
    assert horizon.ended <= horizon.begun
    assert horizon.ended <= xmin


def a_page_and_the_xmin_after(schema: str) -> tuple[Any, Any, J.Horizon, int]:
    """An empty store's page (numbers 1-5 as a gap), and the xmin of a snapshot taken after."""
    conn = connect(postgres_url(), schema, migrate=True)
    try:
        page = dialect().page
        assert page is not None
        fresh, found, horizon = page(conn, 0, [(1, 5)], 10)
        (row,) = conn.execute(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
        ).fetchall()
        return fresh, found, horizon, int(str(row[0]))
    finally:
        conn.close()
