"""What only the PostgreSQL run store has: its URL and schema checks, a password that never shows,
its schema version, workers on separate connections that never take one job twice, and a
connection terminated under it (issue 15). The contract and conformance suites run against it
too (``KINDS`` in ``run_store_helpers.py``)."""

from __future__ import annotations

import pathlib

import psycopg
import pytest
import trio
from postgres_server import postgres_url
from run_store_helpers import LEASE, T0, applied, ask, holder, raises_code

from actors import open_runtime
from actors._postgres import POSTGRES_SCHEMA_VERSION
from actors.durable import (
    AgentRegistry,
    PostgresRunStore,
    SQLiteRunStore,
    check_store_url,
    open_job_queue,
    open_run_store,
)
from actors.store import PostgresConversationStore, StoreError, open_conversation_store
from actors.testing import ScriptedProvider
from protocols import jobs as J
from protocols.errors import ConfigError, ValidationError
from protocols.history import ConversationSnapshot
from protocols.messages import Message

pytestmark = pytest.mark.trio


def sql(query: str, *arguments: object) -> list[tuple[object, ...]]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        cursor = conn.execute(query, arguments)
        return cursor.fetchall() if cursor.description else []


async def test_what_is_not_a_postgresql_url_or_schema_is_refused_before_connecting() -> None:
    for url in ("sqlite:///x.db", "", "http://h/db"):
        with pytest.raises(ValidationError, match="postgresql://"):
            await PostgresRunStore.open(url)
    with pytest.raises(ValidationError, match="schema"):
        await PostgresRunStore.open(postgres_url(), schema='x"; DROP TABLE y; --')


async def test_a_password_never_appears_when_the_server_cannot_be_reached() -> None:
    url = "postgresql://ada:hunter2-secret@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(StoreError) as caught:
        await PostgresRunStore.open(url)
    error = caught.value
    assert error.code == "io"
    assert error.retryable
    assert "hunter2" not in str(error)
    assert "hunter2" not in repr(error)
    assert "ada:***@127.0.0.1:1" in str(error)


async def test_a_schema_newer_than_this_code_is_refused_and_left_alone(schema: str) -> None:
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        await store.admit(ask(), now=T0)
    sql(f'UPDATE "{schema}".trio_agents_meta SET value = %s WHERE key = %s', "99", "schema_version")
    with pytest.raises(StoreError) as caught:
        await PostgresRunStore.open(postgres_url(), schema=schema)
    assert caught.value.code == "schema"
    assert "newer than this trio-agents supports" in str(caught.value)
    assert sql(f'SELECT count(*) FROM "{schema}".trio_agents_jobs') == [(1,)]


async def test_workers_on_their_own_connections_never_take_one_job_twice(schema: str) -> None:
    stores = [await PostgresRunStore.open(postgres_url(), schema=schema) for _ in range(4)]
    try:
        for index in range(40):
            await stores[index % 4].admit(ask(f"job {index}"), now=T0)
        taken: list[tuple[int, str]] = []

        async def work(number: int) -> None:
            while True:
                record = await stores[number].acquire(owner=f"w{number}", lease=30, now=T0 + 1)
                if record is None:
                    return
                taken.append((number, record.id))

        async with trio.open_nursery() as nursery:
            for number in range(4):
                nursery.start_soon(work, number)
        ids = [id for _, id in taken]
        assert len(ids) == 40
        assert len(set(ids)) == 40
        # Each job is held by exactly the worker that took it, with fence 1.
        for number, id in taken:
            record = await stores[0].get(id)
            assert record is not None
            assert record.lease is not None
            assert (record.lease.owner, record.fence) == (f"w{number}", 1)
    finally:
        for store in stores:
            await store.aclose()


async def test_a_terminated_connection_fails_one_call_retryably_then_is_replaced(
    schema: str,
) -> None:
    # The store's connections carry a name of their own: only they are terminated.
    url = postgres_url()
    named = f"{url}{'&' if '?' in url else '?'}application_name={schema}"
    async with await PostgresRunStore.open(named, schema=schema) as store:
        first = (await store.admit(ask("before"), now=T0)).record
        # The listener connects in the background: all three must be up before they are cut
        # (the server's own view is what counts; it cannot wake a trio task, so it is polled).
        mine = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        with trio.fail_after(30):
            while True:
                if sql(mine, schema) == [(3,)]:
                    break
                await trio.sleep(0.01)
        terminated = sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            schema,
        )
        assert terminated == [(True,)] * 3  # its writer, its reader and its listener
        outcomes: list[tuple[str, bool]] = []
        for _ in range(3):
            try:
                await store.admit(ask("after"), now=T0 + 1)
            except StoreError as error:
                outcomes.append((error.code, bool(error.retryable)))
            else:
                outcomes.append(("ok", True))
                break
        # At most the call that met the dead connection failed, retryably; the next worked.
        assert outcomes[-1] == ("ok", True)
        assert outcomes[:-1] in ([], [("io", True)])
        # Reads recover alike; nothing acknowledged was lost.
        reads: list[object] = []
        for _ in range(2):
            try:
                reads.append(await store.get(first.id))
            except StoreError as error:
                reads.append((error.code, error.retryable))
            else:
                break
        assert reads[-1] == first
        assert reads[:-1] in ([], [("io", True)])
        everything = await store.list(limit=10)
        assert sorted(r.job.input[0].content for r in everything) == ["after", "before"]
        assert all(r.status is J.JobStatus.QUEUED for r in everything)
        # The listener came back too, says so, and tells watchers to look at everything.
        with store.watch() as watch, trio.fail_after(10):
            while store.statistics()["listener_reconnects"] < 1:
                assert await watch.next() == frozenset()


async def test_a_store_url_opens_the_store_it_names(schema: str, tmp_path: pathlib.Path) -> None:
    url = postgres_url()
    joined = "&" if "?" in url else "?"
    store = await open_run_store(f"{url}{joined}schema={schema}")
    try:
        assert isinstance(store, PostgresRunStore)
        await store.admit(ask(), now=T0)
    finally:
        await store.aclose()
    assert sql(f'SELECT count(*) FROM "{schema}".trio_agents_jobs') == [(1,)]
    local = await open_run_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        assert isinstance(local, SQLiteRunStore)
    finally:
        await local.aclose()
    for bad, words in (
        (f"{url}{joined}schema=a&schema=b", "more than one schema"),
        ("mysql://h/db", "unsupported store URL 'mysql'"),
        ("sqlite://jobs.db", "sqlite:///PATH"),
    ):
        with pytest.raises(ConfigError, match=words):
            check_store_url(bad)


async def test_a_job_admitted_through_another_connection_is_taken_at_once(schema: str) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("heard"))
    async with (
        await PostgresRunStore.open(postgres_url(), schema=schema) as worker_store,
        await PostgresRunStore.open(postgres_url(), schema=schema) as client_store,
        open_runtime() as runtime,
        # A poll of a minute: only a notification can make the worker take the job in time.
        open_job_queue(worker_store, registry, runtime, poll=60) as queue,
    ):
        with client_store.watch() as watch:
            id = (await client_store.admit(J.AgentJob.ask("echo", "hi"))).record.id
            with trio.fail_after(10):
                while True:
                    # The client hears the worker's progress through the database too.
                    await watch.next()
                    status = await client_store.status(id)
                    if status is J.JobStatus.COMPLETED:
                        break
        # (The client may hear of the commit before the worker's task, back from it, counts it.)
        for _ in range(500):
            if queue.statistics()["completed"] == 1:
                break
            await trio.sleep(0.01)
        assert queue.statistics()["completed"] == 1
        record = await client_store.get(id)
        assert record is not None
        assert record.result is not None
        assert record.result.content == "heard"


def drop_announcing(schema: str) -> None:
    """Take away what version 6 added: the triggers that announce changes, and their function."""
    for table in ("trio_agents_jobs", "trio_agents_journal"):
        sql(f'DROP TRIGGER trio_agents_announce ON "{schema}".{table}')
    sql(f'DROP FUNCTION "{schema}".trio_agents_announce()')


def as_version_1(schema: str) -> None:
    """Make the schema what version 1 wrote: no conversations table, and the counters as rows
    of the meta table (where they were before version 3 made them sequences), carried on from
    the sequences."""
    for name in ("job_sequence", "job_execution"):
        ((value,),) = sql(f"SELECT nextval('\"{schema}\".trio_agents_{name}')")
        sql(f'UPDATE "{schema}".trio_agents_meta SET value = %s WHERE key = %s', str(value), name)
        sql(f'DROP SEQUENCE "{schema}".trio_agents_{name}')
    sql(f'DROP TABLE "{schema}".trio_agents_conversations')
    sql(f'ALTER TABLE "{schema}".trio_agents_jobs DROP COLUMN cancel')  # (version 4's)
    sql(f'DROP FUNCTION "{schema}".trio_agents_take_numbers(regclass, integer)')  # (version 5's)
    drop_announcing(schema)  # (version 6's)
    sql(f'UPDATE "{schema}".trio_agents_meta SET value = %s WHERE key = %s', "1", "schema_version")


async def test_a_version_1_schema_is_migrated_to_hold_conversations_too(schema: str) -> None:
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        kept = (await store.admit(ask("kept"), now=T0)).record
    as_version_1(schema)
    url = postgres_url()
    conversations = await open_conversation_store(
        f"{url}{'&' if '?' in url else '?'}schema={schema}"
    )
    try:
        assert isinstance(conversations, PostgresConversationStore)
        snapshot = ConversationSnapshot(id="c1", messages=(Message.user("hello", id="m1"),))
        await conversations.set(snapshot)
        assert await conversations.get("c1") == snapshot
    finally:
        await conversations.aclose()
    assert sql(
        f'SELECT value FROM "{schema}".trio_agents_meta WHERE key = %s', "schema_version"
    ) == [(str(POSTGRES_SCHEMA_VERSION),)]
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        assert await store.get(kept.id) == kept


def kids(n: int) -> tuple[J.AgentJob, ...]:
    return tuple(ask(f"child {i}") for i in range(n))


async def test_numbers_continue_across_the_migration_to_sequences(schema: str) -> None:
    # Version 3 takes admission and execution numbers from sequences instead of locked rows;
    # migrated, a store goes on numbering after what it had given.
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        for n in range(3):
            await store.admit(ask(f"before {n}", children=kids(n)), now=T0)
        before = await store.acquire(owner="w", lease=LEASE, now=T0)
        assert before is not None
        last = max(record.sequence for record in await store.list(limit=100))
    as_version_1(schema)
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        admitted = await store.admit(ask("after", children=kids(2)), now=T0)
        numbers = [r.sequence for r in (*admitted.children, admitted.record)]
        assert numbers == sorted(numbers)
        assert min(numbers) > last
        after = None
        while (taken := await store.acquire(owner="w", lease=LEASE, now=T0)) is not None:
            after = taken
        assert after is not None
        assert before.execution is not None
        assert after.execution is not None
        assert after.execution > before.execution


def schema_objects(schema: str) -> list[tuple[object, ...]]:
    """Every table column, index, sequence and function of ``schema``, and its version."""
    columns = sql(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY table_name, column_name",
        schema,
    )
    indexes = sql(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY indexname",
        schema,
    )
    sequences = sql(
        "SELECT sequence_name FROM information_schema.sequences WHERE sequence_schema = %s "
        "ORDER BY sequence_name",
        schema,
    )
    functions = sql(
        "SELECT routine_name FROM information_schema.routines WHERE routine_schema = %s "
        "ORDER BY routine_name",
        schema,
    )
    version = sql(f'SELECT value FROM "{schema}".trio_agents_meta WHERE key = %s', "schema_version")
    return [*columns, *indexes, *sequences, *functions, *version]


async def test_a_version_3_schema_is_migrated_with_its_cancels_filled(schema: str) -> None:
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        await store.admit(ask("cancelled while running"), now=T0)
        await store.admit(ask("left alone"), now=T0)
        first = await store.acquire(owner="w", lease=30, now=T0 + 1)
        second = await store.acquire(owner="w", lease=30, now=T0 + 1)
        assert first is not None
        assert second is not None
        assert await store.write(applied(J.cancel(first, now=T0 + 2)))
    sql(f'ALTER TABLE "{schema}".trio_agents_jobs DROP COLUMN cancel')
    sql(f'UPDATE "{schema}".trio_agents_meta SET value = %s WHERE key = %s', "3", "schema_version")
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        cancels = dict(sql(f'SELECT id, cancel FROM "{schema}".trio_agents_jobs'))
        assert cancels == {first.id: True, second.id: False}
        await raises_code("cancelled", store.append(first.id, holder(first), [J.RequestEntry(1)]))
        await store.append(second.id, holder(second), [J.RequestEntry(1)])


async def test_a_migration_that_fails_part_way_leaves_the_schema_as_it_was(schema: str) -> None:
    # 004 S11: a version 1 schema whose migration fails in version 4's step (a record
    # that is not JSON: version 4's fill reads every record) is left exactly as it was --
    # versions 2 and 3's table and sequences too, which the same transaction had made -- and
    # opens once the record is repaired.
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        kept = (await store.admit(ask("kept"), now=T0)).record
        damaged = (await store.admit(ask("damaged"), now=T0)).record
    as_version_1(schema)
    ((good,),) = sql(f'SELECT record FROM "{schema}".trio_agents_jobs WHERE id = %s', damaged.id)
    sql(f"UPDATE \"{schema}\".trio_agents_jobs SET record = 'not json' WHERE id = %s", damaged.id)
    before = schema_objects(schema)
    with pytest.raises(StoreError) as caught:
        await PostgresRunStore.open(postgres_url(), schema=schema)
    assert "not json" not in str(caught.value)  # (the record's text is not echoed)
    assert schema_objects(schema) == before
    assert ("1",) in before
    sql(f'UPDATE "{schema}".trio_agents_jobs SET record = %s WHERE id = %s', good, damaged.id)
    async with await PostgresRunStore.open(postgres_url(), schema=schema) as store:
        assert await store.get(kept.id) == kept
        assert await store.get(damaged.id) == damaged
    after = schema_objects(schema)
    assert (str(POSTGRES_SCHEMA_VERSION),) in after
    assert ("trio_agents_take_numbers",) in after
    assert ("trio_agents_announce",) in after
