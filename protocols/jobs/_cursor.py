"""A gap-aware cursor over the jobs of a store, in admission order (004 S14), pure.

Every job a store admits is numbered (its record's ``sequence``), and "the jobs after number N"
is how a client pages through them or follows them. That is only safe where numbers become
visible in the order they were given. They do not on PostgreSQL: two transactions take 7 and 8,
the one holding 8 commits first, a reader sees 8 and moves past 7 -- and when 7 commits, a
moment later, a reader that only asks for "after 8" never sees it.

:class:`JobCursor` is a position plus the numbers known to be missing below it, its **gaps**.
Each page (:func:`next_page`) takes what a store read in one go -- the rows after the position
and the rows found again inside the gaps -- and moves on:

* a jump in the numbers (9 after 7) opens a gap (8) unless the store proves that no transaction
  can still commit 8 (a :class:`Horizon`); a store whose numbers commit in order (SQLite, with
  its one writer; the memory store) proves that of every jump, so it never reports a gap;
* a gap's numbers are read again by the next page, and a record found there is returned then,
  once -- so a job that committed late is never skipped;
* a gap is closed once the store proves that its transaction has ended (a rolled-back
  admission's number, a purged job's), or -- for a store that cannot tell -- given up as a
  permanent hole after :attr:`JobCursor.patience` seconds *and* :attr:`JobCursor.attempts`
  re-reads, and then reported (:attr:`JobPage.given_up`);
* the gaps are bounded (:attr:`JobCursor.max_gaps`): a page that would open more stops before
  the row that needs one (:attr:`JobPage.full`), and passes it once gaps have closed (a late
  record found inside a gap splits it, and may add one piece beyond the bound until they
  close: nothing is given up to keep the bound).

Guarantee (property-tested): with the numbers committed in any order and pages read at any
moments, every job committed is returned exactly once -- unless its number lay in a gap that was
given up, which the page that gave it up says.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ..errors import ValidationError
from ._record import JobRecord

__all__ = ["Gap", "Horizon", "JobCursor", "JobPage", "next_page"]

#: The most gaps a cursor may be set to keep.
MAX_GAPS = 65_536


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be an int >= 0, not {value!r}"
        )


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be an int >= 1, not {value!r}"
        )


def _finite(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{what} must be a finite number, not {value!r}")
    return float(value)


@attrs.frozen
class Horizon:
    """What a store knows, at the moment of one read, about the transactions that might still
    commit a job's number -- numbered as the database numbers its transactions:

    * every transaction numbered below ``ended`` had ended (committed or rolled back) when the
      read was made;
    * every number missing below a row the read returned was taken by a transaction numbered
      below ``begun``.

    A gap opened by a read is thus closed for good by a later read whose ``ended`` is at least
    the first read's ``begun``: the transaction that took its number has ended, and what is
    still missing never comes. On PostgreSQL these are the read's snapshot's ``xmin`` and
    ``xmax`` (admissions take their transaction id before their numbers). A store whose
    numbers commit in order says :meth:`in_order`: every jump is a hole for good, at once.
    """

    ended: int = attrs.field(validator=_count)
    begun: int = attrs.field(validator=_count)

    def __attrs_post_init__(self) -> None:
        if self.ended > self.begun:
            raise ValidationError(
                f"Horizon.ended ({self.ended}) cannot be above Horizon.begun ({self.begun})"
            )

    @classmethod
    def in_order(cls) -> Horizon:
        """The horizon of a store whose numbers become visible in the order they were given
        (one writer at a time): no transaction can still commit a number below one read."""
        return cls(0, 0)


def _optional_count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _count(instance, attribute, value)


def _time(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _finite(value, f"{type(instance).__name__}.{attribute.name}")


@attrs.frozen
class Gap:
    """Numbers ``first`` to ``last`` (inclusive), missing below a cursor's position: their
    jobs may still commit. ``seen`` is when the gap was found (the caller's clock, seconds),
    ``misses`` how many reads looked for them since and found none of the numbers still in it,
    and ``horizon`` what a read's :attr:`Horizon.ended` must reach to prove its transactions
    ended (``None``: the store could not say; only the cursor's limits close it)."""

    first: int = attrs.field(validator=_positive)
    last: int = attrs.field(validator=_positive)
    seen: float = attrs.field(validator=_time)
    misses: int = attrs.field(default=0, validator=_count)
    horizon: int | None = attrs.field(default=None, validator=_optional_count)

    def __attrs_post_init__(self) -> None:
        if self.last < self.first:
            raise ValidationError(f"a gap's last ({self.last}) is below its first ({self.first})")

    def __contains__(self, sequence: object) -> bool:
        return isinstance(sequence, int) and self.first <= sequence <= self.last

    @property
    def size(self) -> int:
        """How many numbers it holds."""
        return self.last - self.first + 1


def _gaps(value: Iterable[Gap]) -> tuple[Gap, ...]:
    if isinstance(value, Gap | str | bytes | dict) or not isinstance(value, Iterable):
        raise ValidationError(
            f"JobCursor.gaps must be a sequence of Gaps, not {type(value).__name__}"
        )
    return tuple(value)


def _check_gaps(instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    below = 0
    for gap in value:
        if not isinstance(gap, Gap):
            raise ValidationError(f"JobCursor.gaps holds Gaps, not {type(gap).__name__}")
        if gap.first <= below:
            raise ValidationError("JobCursor.gaps must be in order and must not overlap")
        below = gap.last
    if value and below >= instance.position:
        raise ValidationError(
            f"JobCursor.gaps must lie below its position ({instance.position}), not reach {below}"
        )


def _max_gaps(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GAPS:
        raise ValidationError(
            f"JobCursor.max_gaps must be an int from 1 to {MAX_GAPS}, not {value!r}"
        )


def _patience(value: object) -> float:
    seconds = _finite(value, "JobCursor.patience")
    if seconds < 0:
        raise ValidationError(f"JobCursor.patience must be >= 0 seconds, not {value!r}")
    return seconds


@attrs.frozen
class JobCursor:
    """Where a reader of a store's jobs is: every job numbered up to ``position`` has been
    returned, but for the numbers in ``gaps`` (which the next page reads again).

    ``JobCursor()`` starts before the first job; ``JobCursor(position=n)`` after job number
    ``n`` (a record's ``sequence``). The limits travel with the cursor: no gap is opened
    while ``max_gaps`` are kept (a page stops before the job that would need one; only a late
    job found inside a gap, splitting it, adds a piece beyond), and a gap the store cannot
    prove closed is given up once it is ``patience`` seconds old *and* was read again
    ``attempts`` times without its jobs appearing.

    A cursor is data: ``protocols.codec.encode(cursor)`` is its JSON, and ``decode(JobCursor,
    text)`` takes it back (strictly: a cursor that is not one is refused), so a client can keep
    it and continue from it in another process.
    """

    position: int = attrs.field(default=0, validator=_count)
    gaps: tuple[Gap, ...] = attrs.field(default=(), converter=_gaps, validator=_check_gaps)
    max_gaps: int = attrs.field(default=256, validator=_max_gaps)
    patience: float = attrs.field(default=300.0, converter=_patience)
    attempts: int = attrs.field(default=3, validator=_positive)

    @property
    def missing(self) -> int:
        """How many numbers its gaps hold."""
        return sum(gap.size for gap in self.gaps)


@attrs.frozen
class JobPage:
    """One page of a store's jobs: ``records``, in admission order (those found again in a gap
    -- committed late -- before the new ones), and ``cursor``, where the next page starts.

    ``gaps`` are the gaps still open after it (read again by the next page); ``given_up`` those
    this page gave up without the store proving them closed (their jobs, should any commit yet,
    are not returned: ``store.list`` still shows them). ``more``: the read was cut by its limit,
    so more rows may follow at once; ``full``: the page stopped before a row that needed one
    gap more than ``max_gaps`` allows -- the cursor passes it once some of its gaps close.
    """

    records: tuple[JobRecord, ...]
    cursor: JobCursor
    start: JobCursor
    given_up: tuple[Gap, ...] = ()
    more: bool = False
    full: bool = False

    @property
    def gaps(self) -> tuple[Gap, ...]:
        """The gaps still open (transient numbers the next page reads again)."""
        return self.cursor.gaps

    def after(self, count: int) -> JobCursor:
        """The cursor once the first ``count`` of :attr:`records` are handled (``len(records)``:
        :attr:`cursor`): a reader that stops part-way through a page and continues from it
        gets the rest, and nothing twice."""
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValidationError(f"count must be an int, not {count!r}")
        if not 0 <= count <= len(self.records):
            raise ValidationError(f"count must be from 0 to {len(self.records)}, not {count}")
        if count == len(self.records):
            return self.cursor
        late = sum(1 for record in self.records if record.sequence < self.start.position)
        if count <= late:
            # Only records found again in gaps are handled: take their numbers out of the
            # gaps, and leave the rest of the start cursor as it was.
            handed = sorted(record.sequence for record in self.records[:count])
            pieces = [piece for gap in self.start.gaps for piece in _split(gap, handed)]
            return attrs.evolve(self.start, gaps=pieces)
        last = self.records[count - 1].sequence
        return attrs.evolve(
            self.cursor,
            position=last,
            gaps=tuple(gap for gap in self.cursor.gaps if gap.last < last),
        )


def _split(gap: Gap, found: Sequence[int]) -> list[Gap]:
    """``gap`` without the numbers of ``found`` (ascending) that lie in it: its pieces."""
    pieces: list[Gap] = []
    low = gap.first
    for number in found:
        if number < gap.first:
            continue
        if number > gap.last:
            break
        if number > low:
            pieces.append(attrs.evolve(gap, first=low, last=number - 1))
        low = number + 1
    if low <= gap.last:
        pieces.append(attrs.evolve(gap, first=low))
    return pieces


def _closed(gap: Gap, horizon: Horizon | None) -> bool:
    return horizon is not None and gap.horizon is not None and horizon.ended >= gap.horizon


def _records(value: Iterable[JobRecord], what: str) -> tuple[JobRecord, ...]:
    if isinstance(value, JobRecord | str | bytes) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a sequence of JobRecords")
    records = tuple(value)
    for record in records:
        if not isinstance(record, JobRecord):
            raise ValidationError(f"{what} holds JobRecords, not {type(record).__name__}")
    return records


def next_page(
    cursor: JobCursor,
    rows: Iterable[JobRecord],
    found: Iterable[JobRecord] = (),
    *,
    now: float,
    limit: int,
    horizon: Horizon | None = None,
) -> JobPage:
    """The page a read gave, and the cursor after it.

    The read -- one consistent view of the store -- asked for ``limit`` rows numbered above
    ``cursor.position``, in order (``rows``: at most ``limit``), and for the rows numbered
    inside ``cursor.gaps`` (``found``, in any order); ``horizon`` is what the store knew of
    its transactions then (``None``: nothing). ``now`` is the caller's clock, in seconds,
    which gaps are timed by.

    Guarantees: every record in ``found`` and every record of ``rows`` up to the new position
    is in :attr:`JobPage.records`, once, and no record is returned by two pages of one chain
    of cursors; the new cursor's position never passes a number that may still commit without
    a gap holding it; no gap is opened while ``cursor.max_gaps`` are kept (the page stops
    before the row that needs it: :attr:`JobPage.full`) -- only a record found inside a gap,
    splitting it in two, adds one beyond, until the pieces close. Rows
    that are not in order, not above the position, or found outside every gap are a store's
    mistake: :class:`~protocols.errors.ValidationError`.
    """
    if not isinstance(cursor, JobCursor):
        raise ValidationError(f"next_page takes a JobCursor, not {type(cursor).__name__}")
    moment = _finite(now, "now")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError(f"limit must be an int >= 1, not {limit!r}")
    if horizon is not None and not isinstance(horizon, Horizon):
        raise ValidationError(f"horizon must be a Horizon or None, not {horizon!r}")
    fresh = _records(rows, "rows")
    late = sorted(_records(found, "found"), key=lambda record: record.sequence)
    if len(fresh) > limit:
        raise ValidationError(f"the read returned {len(fresh)} rows, more than its limit {limit}")
    below = cursor.position
    for record in fresh:
        if record.sequence <= below:
            raise ValidationError(
                f"rows must be numbered above {below} and in order: job {record.id} is "
                f"{record.sequence}"
            )
        below = record.sequence
    numbers = [record.sequence for record in late]
    if len(set(numbers)) != len(numbers):
        raise ValidationError("found holds one job number twice")
    for record in late:
        if not any(record.sequence in gap for gap in cursor.gaps):
            raise ValidationError(
                f"job {record.id}, number {record.sequence}, was found outside every gap"
            )

    # The gaps read again: what was found leaves them; what is left is closed (proved ended),
    # given up (the limits), or kept.
    kept: list[Gap] = []
    given_up: list[Gap] = []
    for gap in cursor.gaps:
        for part in _split(gap, numbers):
            piece = attrs.evolve(part, misses=part.misses + 1)
            if _closed(piece, horizon):
                continue
            if piece.misses >= cursor.attempts and moment - piece.seen >= cursor.patience:
                given_up.append(piece)
            else:
                kept.append(piece)

    # The new rows: each jump opens a gap, unless the store proves it a hole for good.
    position = cursor.position
    taken: list[JobRecord] = []
    full = False
    for record in fresh:
        if record.sequence > position + 1:
            gap = Gap(
                position + 1,
                record.sequence - 1,
                moment,
                horizon=None if horizon is None else horizon.begun,
            )
            if not _closed(gap, horizon):
                if len(kept) >= cursor.max_gaps:
                    full = True
                    break
                kept.append(gap)
        taken.append(record)
        position = record.sequence

    kept.sort(key=lambda gap: gap.first)
    given_up.sort(key=lambda gap: gap.first)
    return JobPage(
        records=(*late, *taken),
        cursor=attrs.evolve(cursor, position=position, gaps=kept),
        start=cursor,
        given_up=tuple(given_up),
        more=not full and len(fresh) >= limit,
        full=full,
    )
