"""PostgreSQL announces a store's changes to other processes itself (schema version 6's
triggers): what another store hears is exactly what the writing store announces to its own
watchers, a change made by hand is heard too, and a write that is one statement runs as a
transaction on its own -- no BEGIN, COMMIT nor notification of the writer's. An admission of one
job is one statement that takes the job's number too, and stores exactly the text its record
encodes to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from postgres_server import drop_schemas, new_schema, postgres_url
from run_store_helpers import LEASE, T0, applied, ask, cancel, end, holder, take, text_of

from actors.durable import DEFAULT_MAX_BYTES, PostgresRunStore
from actors.durable._postgres_store import channel
from actors.durable._store import Watch, encode_checked
from protocols import jobs as J


def sql(query: str, *arguments: object) -> None:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(query, arguments)


class Heard:
    """What a store's two watchers (records; records and journals) saw since the last look."""

    def __init__(self, store: PostgresRunStore) -> None:
        self.records = store.watch()
        self.journals = store.watch(journals=True)

    async def until(self, marker: str) -> tuple[frozenset[str], frozenset[str]]:
        """Everything seen up to and including ``marker``'s admission, the marker left out."""
        return await _until(self.records, marker), await _until(self.journals, marker)


async def _until(watch: Watch, marker: str) -> frozenset[str]:
    seen: set[str] = set()
    with trio.fail_after(10):
        while marker not in seen:
            ids = await watch.next()
            assert ids, "a store was told that anything may have changed"
            seen |= ids
    return frozenset(seen - {marker})


async def test_another_store_hears_exactly_what_the_writer_announces(schema: str) -> None:
    url = postgres_url()
    async with (
        await PostgresRunStore.open(url, schema=schema) as writer,
        await PostgresRunStore.open(url, schema=schema) as other,
    ):
        mine, theirs = Heard(writer), Heard(other)
        state: dict[str, J.JobRecord] = {}

        async def admit_x() -> None:
            state["x"] = (await writer.admit(ask("x"), now=T0)).record

        async def take_x() -> None:
            state["x"] = await take(writer)

        async def grow_x() -> None:
            x = state["x"]
            await writer.append(x.id, holder(x), [J.RequestEntry(1)])

        async def renew_x() -> None:
            x = state["x"]
            renewed = applied(J.renew(x, holder(x), now=T0 + 2, lease=LEASE))
            assert await writer.write(renewed)
            state["x"] = renewed.record

        async def end_x() -> None:
            state["x"] = await end(writer, state["x"], now=T0 + 3)

        async def admit_and_take_y() -> None:
            # (ahead of the markers, which wait in the queue)
            await writer.admit(ask("y"), now=T0, priority=J.Priority.INTERRUPT)
            state["y"] = await take(writer, now=T0 + 4)
            assert text_of(state["y"]) == "y"

        async def cancel_y() -> None:  # (running: its status stays, its cancel changes)
            state["y"] = await cancel(writer, state["y"], now=T0 + 5)

        async def purge_x() -> None:
            await writer.purge(state["x"].id, now=T0 + 6)

        steps: list[Callable[[], Awaitable[None]]] = [
            admit_x,
            take_x,
            grow_x,
            renew_x,
            end_x,
            admit_and_take_y,
            cancel_y,
            purge_x,
        ]
        announced: list[tuple[frozenset[str], frozenset[str]]] = []
        for number, step in enumerate(steps):
            await step()
            marker = (await writer.admit(ask(f"marker {number}"), now=T0)).record.id
            said = await mine.until(marker)
            assert await theirs.until(marker) == said, step.__name__
            announced.append(said)
        x, y = state["x"].id, state["y"].id
        assert announced == [
            ({x}, {x}),  # admitted
            (set(), set()),  # taken: nobody waits for that
            (set(), {x}),  # its journal grew
            (set(), set()),  # a renewed lease
            ({x}, {x}),  # ended
            ({y}, {y}),  # admitted (and taken)
            ({y}, {y}),  # a cancel asked for
            ({x}, {x}),  # purged
        ]

        # A change made by hand, by a client that is no store, is heard by both.
        await trio.to_thread.run_sync(
            sql, f'UPDATE "{schema}".trio_agents_jobs SET cancel = FALSE WHERE id = %s', y
        )
        marker = (await writer.admit(ask("last marker"), now=T0)).record.id
        assert await theirs.until(marker) == ({y}, {y})
        assert await mine.until(marker) == ({y}, {y})


async def test_a_write_of_one_statement_is_a_transaction_of_its_own(schema: str) -> None:
    url = postgres_url()
    async with (
        await PostgresRunStore.open(url, schema=schema) as writer,
        await PostgresRunStore.open(url, schema=schema) as other,
    ):
        heard = Heard(other)

        def statements() -> int:
            return writer.statistics()["statements"]

        before = statements()
        admitted = (await writer.admit(ask("x"), now=T0)).record
        assert statements() - before == 1
        job = await take(writer)
        assert job.id == admitted.id
        before = statements()
        await writer.append(job.id, holder(job), [J.InputEntry(job.job.input), J.RequestEntry(1)])
        assert statements() - before == 1
        before = statements()
        done = await end(writer, job, now=T0 + 3)
        assert statements() - before == 1
        # ... and other processes still hear of both, from the database.
        marker = (await writer.admit(ask("marker"), now=T0)).record.id
        assert await heard.until(marker) == ({done.id}, {done.id})
        assert [entry.kind for entry in await other.journal(job.id)] == ["input", "request"]


async def test_a_long_schema_name_is_announced_on_its_hashed_channel() -> None:
    # Channel names stop at 63 bytes: a longer one is hashed, by the database's function the
    # same way as by the listener's.
    schema = f"{new_schema()}_{'x' * 40}"[:63]
    assert channel(schema) != f"trio_agents_{schema}"
    url = postgres_url()
    try:
        async with (
            await PostgresRunStore.open(url, schema=schema) as writer,
            await PostgresRunStore.open(url, schema=schema) as other,
        ):
            heard = Heard(other)
            admitted = (await writer.admit(ask("x"), now=T0)).record.id
            marker = (await writer.admit(ask("marker"), now=T0)).record.id
            assert await heard.until(marker) == ({admitted}, {admitted})
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=("Cs",))
)
_METADATA = st.dictionaries(
    st.sampled_from(["sequence", "0", "x"]) | _TEXT,
    st.integers() | _TEXT | st.none(),
    max_size=3,
)


@settings(max_examples=12, deadline=None)
@given(jobs=st.lists(st.tuples(_TEXT, _METADATA), min_size=1, max_size=12))
def test_an_admitted_record_is_stored_as_it_encodes(
    jobs: list[tuple[str, dict[str, Any]]],
) -> None:
    # Whatever the job holds (digits, "sequence" keys, any character), and whatever number it
    # is given (one digit or more), the row holds the record's own text and number.
    for admitted, stored, sequence, read in trio.run(_admit_all, jobs):
        assert sequence == admitted.sequence >= 98
        assert stored == encode_checked(admitted, DEFAULT_MAX_BYTES, "a record")
        assert read == admitted


async def _admit_all(
    jobs: list[tuple[str, dict[str, Any]]],
) -> list[tuple[J.JobRecord, str, int, J.JobRecord | None]]:
    """Each job admitted to a fresh store: its record as admit returned it, its row's text and
    number, and the record as the store reads it back."""
    schema = new_schema()
    url = postgres_url()
    out: list[tuple[J.JobRecord, str, int, J.JobRecord | None]] = []
    try:
        async with await PostgresRunStore.open(url, schema=schema) as store:
            # (numbers past 9 and 99: the text grows by a digit)
            await trio.to_thread.run_sync(
                sql, f"SELECT setval('\"{schema}\".trio_agents_job_sequence', 97)"
            )
            for text, metadata in jobs:
                admitted = (await store.admit(ask(text, metadata=metadata), now=T0)).record
                ((stored, sequence),) = await trio.to_thread.run_sync(
                    rows,
                    f'SELECT record, sequence FROM "{schema}".trio_agents_jobs WHERE id = %s',
                    admitted.id,
                )
                out.append((admitted, stored, sequence, await store.get(admitted.id)))
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)
    return out


def rows(query: str, *arguments: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        return conn.execute(query, arguments).fetchall()
