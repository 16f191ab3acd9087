"""Tests for the gap-aware job cursor (protocols.jobs._cursor, 004 S14), without an event loop.

Named cases first (a late commit returned on the next page, a rolled-back number closed by the
horizon or given up by the limits, a store whose numbers commit in order reporting no gap, the
bound on gaps, a page handled part-way, the cursor as JSON, refusals); then properties over a
model of a database that hands out numbers the way PostgreSQL does -- transactions take an id,
then numbers, and commit or roll back in any order -- read by pages at any moments: every job
committed is returned exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.codec import decode, encode
from protocols.errors import ProtocolError, ValidationError
from protocols.jobs import (
    AgentJob,
    Gap,
    Horizon,
    JobCursor,
    JobPage,
    JobRecord,
    admit,
    next_page,
)

JOB = AgentJob.ask("echo", "hi")


def job(number: int) -> JobRecord:
    return admit(f"job-{number}", JOB, sequence=number, now=0.0)


def jobs(*numbers: int) -> list[JobRecord]:
    return [job(number) for number in numbers]


def numbers_of(page: JobPage) -> list[int]:
    return [record.sequence for record in page.records]


# ---------------------------------------------------------------------------------------------
# Named cases


def test_a_late_commit_is_a_gap_read_again_and_returned_once() -> None:
    # 1 and 3 committed, 2 still in flight (its transaction is 12, below the read's begun 14).
    first = next_page(JobCursor(), jobs(1, 3), now=0.0, limit=10, horizon=Horizon(12, 14))
    assert numbers_of(first) == [1, 3]
    assert first.cursor.position == 3
    assert first.gaps == (Gap(2, 2, 0.0, horizon=14),)
    # 2 commits; the next page finds it in the gap, returns it, and closes the gap.
    second = next_page(first.cursor, [], jobs(2), now=1.0, limit=10, horizon=Horizon(13, 15))
    assert numbers_of(second) == [2]
    assert second.gaps == ()
    assert second.cursor == JobCursor(position=3)
    # ... and never again.
    third = next_page(second.cursor, jobs(4), now=2.0, limit=10, horizon=Horizon(15, 15))
    assert numbers_of(third) == [4]


def test_a_rolled_back_number_is_closed_once_the_horizon_passes_its_transactions() -> None:
    page = next_page(JobCursor(), jobs(1, 3), now=0.0, limit=10, horizon=Horizon(12, 14))
    # Transaction 12 still runs: the gap stays (and it is no miss that can give it up yet).
    page = next_page(page.cursor, [], now=1.0, limit=10, horizon=Horizon(12, 16))
    assert [gap.first for gap in page.gaps] == [2]
    assert page.gaps[0].misses == 1
    # Every transaction below 14 has ended, and 2 is still missing: a hole for good, not
    # reported as given up (it was proved).
    page = next_page(page.cursor, [], now=2.0, limit=10, horizon=Horizon(14, 16))
    assert page.gaps == ()
    assert page.given_up == ()
    assert page.cursor.position == 3


def test_a_gap_closed_at_once_when_no_transaction_was_running() -> None:
    page = next_page(JobCursor(), jobs(1, 5), now=0.0, limit=10, horizon=Horizon(20, 20))
    assert numbers_of(page) == [1, 5]
    assert page.gaps == ()


def test_a_store_whose_numbers_commit_in_order_reports_no_gap() -> None:
    # SQLite, the memory store: a jump is a purged job, never one still to come.
    page = next_page(JobCursor(), jobs(2, 7, 8), now=0.0, limit=3, horizon=Horizon.in_order())
    assert numbers_of(page) == [2, 7, 8]
    assert page.gaps == ()
    assert page.more  # the read was cut at its limit: rows may follow at once
    assert not page.full


def test_without_a_horizon_a_gap_is_given_up_after_both_limits() -> None:
    cursor = JobCursor(patience=10.0, attempts=2)
    page = next_page(cursor, jobs(1, 3), now=0.0, limit=10)
    assert page.gaps == (Gap(2, 2, 0.0),)
    # Read twice more, quickly: old enough in misses, not in time.
    page = next_page(page.cursor, [], now=1.0, limit=10)
    page = next_page(page.cursor, [], now=2.0, limit=10)
    assert page.gaps == (Gap(2, 2, 0.0, misses=2),)
    # Old enough in time too: given up, and said so.
    page = next_page(page.cursor, [], now=10.0, limit=10)
    assert page.gaps == ()
    assert page.given_up == (Gap(2, 2, 0.0, misses=3),)
    # A slow reader: one re-read after a long time is not enough (attempts).
    page = next_page(cursor, jobs(1, 3), now=0.0, limit=10)
    page = next_page(page.cursor, [], now=1000.0, limit=10)
    assert page.given_up == ()
    assert page.gaps[0].misses == 1


def test_a_record_found_inside_a_gap_splits_it() -> None:
    page = next_page(JobCursor(), jobs(1, 10), now=0.0, limit=10, horizon=Horizon(5, 9))
    assert page.gaps == (Gap(2, 9, 0.0, horizon=9),)
    page = next_page(page.cursor, [], jobs(6, 3), now=1.0, limit=10, horizon=Horizon(5, 9))
    assert numbers_of(page) == [3, 6]
    assert [(gap.first, gap.last) for gap in page.gaps] == [(2, 2), (4, 5), (7, 9)]
    assert page.cursor.missing == 6


def test_no_gap_is_opened_beyond_the_bound_the_page_stops_before_it() -> None:
    cursor = JobCursor(max_gaps=2)
    running = Horizon(1, 100)  # something still runs: no jump is proved a hole
    page = next_page(cursor, jobs(2, 4, 6, 8), now=0.0, limit=4, horizon=running)
    assert numbers_of(page) == [2, 4]  # 6 would need a third gap (5)
    assert page.cursor.position == 4
    assert page.full
    assert not page.more
    # Once the gaps close, it goes on from 4: 6 and 8 are read again and returned.
    page = next_page(page.cursor, jobs(6, 8), now=1.0, limit=4, horizon=Horizon(100, 100))
    assert numbers_of(page) == [6, 8]
    assert page.gaps == ()
    assert not page.full


def test_a_page_handled_part_way_continues_with_the_rest() -> None:
    start = next_page(JobCursor(), jobs(1, 4, 7), now=0.0, limit=10, horizon=Horizon(3, 9))
    assert [(g.first, g.last) for g in start.gaps] == [(2, 3), (5, 6)]
    page = next_page(
        start.cursor, jobs(8, 10), jobs(2, 6), now=1.0, limit=10, horizon=Horizon(3, 11)
    )
    assert numbers_of(page) == [2, 6, 8, 10]
    assert page.after(0) == start.cursor
    assert page.after(4) == page.cursor
    # After 2 and 6 (found in gaps), before 8: the start cursor without them.
    after_two = page.after(2)
    assert after_two.position == 7
    assert [(g.first, g.last) for g in after_two.gaps] == [(3, 3), (5, 5)]
    # After 8: the new cursor up to 8 (the gap 9 opened by 10 is not there yet).
    after_three = page.after(3)
    assert after_three.position == 8
    assert all(gap.last < 8 for gap in after_three.gaps)
    rest = next_page(after_three, jobs(10), now=2.0, limit=10, horizon=Horizon(3, 11))
    assert numbers_of(rest) == [10]
    with pytest.raises(ValidationError, match="count"):
        page.after(5)


def test_a_cursor_is_json_and_comes_back_strictly() -> None:
    page = next_page(JobCursor(patience=30), jobs(1, 3), now=5.0, limit=10, horizon=Horizon(1, 4))
    text = encode(page.cursor)
    assert decode(JobCursor, text) == page.cursor
    assert '"gaps":[{"first":2,"last":2,"seen":5.0,"horizon":4}]' in text
    for bad in (
        '{"position": -1}',
        '{"position": 3, "gaps": [{"first": 3, "last": 3, "seen": 0}]}',  # not below position
        '{"position": 9, "gaps": [{"first": 4, "last": 6, "seen": 0}, '
        '{"first": 5, "last": 5, "seen": 0}]}',  # overlapping
        '{"position": 3, "max_gaps": 0}',
        '{"position": 3, "patience": -1}',
        '{"position": 3, "attempts": 0}',
        '{"position": 3, "unknown": 1}',
        '{"position": true}',
    ):
        with pytest.raises(ProtocolError):
            decode(JobCursor, bad)


def test_what_a_store_could_only_give_by_mistake_is_refused() -> None:
    cursor = next_page(JobCursor(), jobs(1, 3), now=0.0, limit=10, horizon=Horizon(1, 2)).cursor
    with pytest.raises(ValidationError, match="above 3"):
        next_page(cursor, jobs(3), now=0.0, limit=10)
    with pytest.raises(ValidationError, match="in order"):
        next_page(cursor, jobs(5, 4), now=0.0, limit=10)
    with pytest.raises(ValidationError, match="outside every gap"):
        next_page(cursor, [], jobs(1), now=0.0, limit=10)
    with pytest.raises(ValidationError, match="twice"):
        next_page(cursor, [], jobs(2, 2), now=0.0, limit=10)
    with pytest.raises(ValidationError, match="more than its limit"):
        next_page(cursor, jobs(4, 5), now=0.0, limit=1)
    with pytest.raises(ValidationError, match="now"):
        next_page(cursor, [], now=math.nan, limit=1)
    with pytest.raises(ValidationError, match="limit"):
        next_page(cursor, [], now=0.0, limit=0)
    with pytest.raises(ValidationError, match="ended"):
        Horizon(3, 2)


# ---------------------------------------------------------------------------------------------
# Properties: a database that numbers jobs as PostgreSQL does, read at any moments


@attrs.define
class Database:
    """Transactions take an id when they begin (ids ascending), then their job numbers
    (ascending, in the order taken -- not the order of the ids), then commit or roll back, in
    any order; a committed job may be purged later. A read sees the jobs committed (and not
    purged), and the horizon of PostgreSQL's snapshot: the oldest transaction still running
    (``xmin``) and the next id (``xmax``)."""

    next_id: int = 1
    next_number: int = 1
    ids: dict[int, int] = attrs.field(factory=dict)  # transaction -> its id, while it runs
    numbers: dict[int, list[int]] = attrs.field(factory=dict)  # transaction -> its numbers
    committed: dict[int, JobRecord] = attrs.field(factory=dict)
    ever: set[int] = attrs.field(factory=set)  # every number ever committed
    rolled_back: set[int] = attrs.field(factory=set)

    def begin(self, tx: int) -> None:
        self.ids[tx] = self.next_id
        self.next_id += 1

    def take(self, tx: int, count: int) -> None:
        self.numbers[tx] = list(range(self.next_number, self.next_number + count))
        self.next_number += count

    def end(self, tx: int, commit: bool) -> None:
        del self.ids[tx]
        for number in self.numbers.pop(tx):
            if commit:
                self.committed[number] = job(number)
                self.ever.add(number)
            else:
                self.rolled_back.add(number)

    def purge(self, which: int) -> None:
        if self.committed:
            del self.committed[sorted(self.committed)[which % len(self.committed)]]

    def horizon(self) -> Horizon:
        return Horizon(min(self.ids.values(), default=self.next_id), self.next_id)

    def read(self, cursor: JobCursor, limit: int, *, now: float, exact: bool) -> JobPage:
        rows = [self.committed[n] for n in sorted(self.committed) if n > cursor.position][:limit]
        found = [
            record
            for number, record in self.committed.items()
            if any(number in gap for gap in cursor.gaps)
        ]
        horizon = self.horizon() if exact else None
        return next_page(cursor, rows, found, now=now, limit=limit, horizon=horizon)


Step = tuple[str, int, int]


@st.composite
def histories(draw: st.DrawFn) -> list[Step]:
    """Up to 8 transactions, each beginning, taking 1 to 3 numbers and committing or rolling
    back, their steps interleaved at random; reads (some stopping part-way through their page)
    and purges between any two steps."""
    count = draw(st.integers(1, 8))
    left = {
        tx: ["begin", "take", draw(st.sampled_from(["commit", "commit", "rollback"]))]
        for tx in range(count)
    }
    script: list[Step] = []
    while left:
        for _ in range(draw(st.integers(0, 2))):
            kind = draw(st.sampled_from(["read", "read", "read", "stop", "purge"]))
            script.append((kind, draw(st.integers(1, 4)), draw(st.integers(0, 4))))
        tx = draw(st.sampled_from(sorted(left)))
        script.append((left[tx].pop(0), tx, draw(st.integers(1, 3))))
        if not left[tx]:
            del left[tx]
    return script


def run(
    database: Database,
    script: Iterable[Step],
    cursor: JobCursor,
    *,
    exact: bool,
    tick: float = 1.0,
) -> tuple[list[int], JobCursor, list[Gap]]:
    """Play ``script``, then read until the cursor is past every job and holds no gap; the
    numbers returned, in order, the cursor, and the gaps given up."""
    returned: list[int] = []
    given_up: list[Gap] = []
    now = 0.0
    for action, first, second in script:
        now += tick
        if action == "begin":
            database.begin(first)
        elif action == "take":
            database.take(first, second)
        elif action in ("commit", "rollback"):
            database.end(first, commit=action == "commit")
        elif action == "purge":
            database.purge(second)
        else:
            page = database.read(cursor, first, now=now, exact=exact)
            late = sum(1 for number in numbers_of(page) if number < cursor.position)
            bound = max(cursor.max_gaps, len(cursor.gaps) + late)
            assert len(page.gaps) <= bound  # only records found in gaps add pieces beyond it
            handled = len(page.records) if action == "read" else min(second, len(page.records))
            returned.extend(numbers_of(page)[:handled])
            given_up.extend(page.given_up)
            cursor = page.after(handled)
    for _ in range(1000):
        now += tick
        page = database.read(cursor, 3, now=now, exact=exact)
        returned.extend(numbers_of(page))
        given_up.extend(page.given_up)
        cursor = page.cursor
        if not cursor.gaps and not page.more and not page.full:
            break
    else:  # pragma: no cover - a failure
        raise AssertionError(f"the cursor never settled: {cursor}")
    return returned, cursor, given_up


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=histories(), max_gaps=st.integers(1, 4))
def test_with_the_horizon_every_committed_job_comes_once_and_no_hole_stays(
    script: list[Step], max_gaps: int
) -> None:
    database = Database()
    cursor = JobCursor(max_gaps=max_gaps, patience=0.0, attempts=1_000_000)
    returned, cursor, given_up = run(database, script, cursor, exact=True)
    assert len(returned) == len(set(returned))  # never twice
    assert set(database.committed) <= set(returned) <= database.ever  # every one there
    assert given_up == []  # every hole was proved one
    assert not set(returned) & database.rolled_back


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=histories(),
    patience=st.floats(0, 20),
    attempts=st.integers(1, 4),
    max_gaps=st.integers(1, 4),
)
def test_without_a_horizon_a_job_is_missed_only_inside_a_gap_given_up(
    script: list[Step], patience: float, attempts: int, max_gaps: int
) -> None:
    database = Database()
    cursor = JobCursor(max_gaps=max_gaps, patience=patience, attempts=attempts)
    returned, cursor, given_up = run(database, script, cursor, exact=False)
    assert len(returned) == len(set(returned))  # never twice
    assert set(returned) <= database.ever
    for number in set(database.committed) - set(returned):
        assert any(number in gap for gap in given_up), number
    for gap in given_up:
        assert gap.misses >= attempts


@settings(max_examples=200, deadline=None)
@given(
    script=st.lists(
        st.tuples(st.sampled_from(["admit", "purge", "read"]), st.integers(0, 4)), max_size=60
    ),
    patience=st.floats(0, 5),
)
def test_a_store_in_order_never_reports_a_gap(
    script: list[tuple[str, int]], patience: float
) -> None:
    # One writer: each transaction takes its number and commits (or rolls back, taking the
    # number back) before the next begins; purges leave holes. Never a gap, nothing missed.
    committed: dict[int, JobRecord] = {}
    cursor = JobCursor(max_gaps=1, patience=patience)
    returned: list[int] = []
    number = 0
    for now, (action, value) in enumerate(script):
        if action == "admit":
            number += 1
            committed[number] = job(number)
        elif action == "purge":
            if committed:
                del committed[sorted(committed)[value % len(committed)]]  # purged
        else:
            limit = max(value, 1)
            rows = [committed[n] for n in sorted(committed) if n > cursor.position][:limit]
            page = next_page(cursor, rows, now=float(now), limit=limit, horizon=Horizon.in_order())
            assert page.gaps == ()
            assert page.given_up == ()
            assert numbers_of(page) == [record.sequence for record in rows]
            returned.extend(numbers_of(page))
            cursor = page.cursor
    assert returned == sorted(returned)
    assert len(set(returned)) == len(returned)
