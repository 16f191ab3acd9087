"""Following the jobs a store admits, as they commit, without missing one: pages of a
:class:`~protocols.jobs.JobCursor` (:meth:`RunStore.page <actors.durable.RunStore.page>`), read
again whenever the store says something changed and every ``poll`` seconds in any case."""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable

import trio

from protocols.errors import ValidationError
from protocols.jobs import Gap, JobCursor, JobPage, JobRecord

from ._store import RunStore, check_limit

__all__ = ["JobFeed", "feed_jobs"]

log = logging.getLogger("trio_agents.jobs")

#: The gaps given up that a feed remembers (the latest).
_KEPT = 100


def feed_jobs(
    store: RunStore,
    *,
    after: JobCursor | int | None = None,
    poll: float = 0.5,
    limit: int = 100,
    clock: Callable[[], float] = time.time,
) -> JobFeed:
    """The jobs of ``store`` after ``after`` -- a cursor (a :attr:`JobFeed.cursor` kept from an
    earlier feed, in this process or another), a job's number (its record's ``sequence``), or
    ``None`` for every job from the first -- as an async iterator of their records, in
    admission order, that never ends: once it has returned the jobs there are, it waits for
    new ones.

    Guarantee: every job committed is returned once, also one whose number committed after a
    higher one (PostgreSQL): the cursor keeps such numbers as gaps and reads them again
    (:func:`protocols.jobs.next_page`). A job committed late comes when it commits, after the
    jobs it was passed by. Wakes when the store hears of a change (its own process's commits,
    and PostgreSQL's from other processes) and looks every ``poll`` seconds in any case (a
    SQLite store written by another process, a gap to read again). ``limit`` jobs are read at
    most per query; ``clock`` times the gaps (the store's own limits on how long a gap is
    waited for are the cursor's: :class:`~protocols.jobs.JobCursor`)."""
    if after is None:
        cursor = JobCursor()
    elif isinstance(after, JobCursor):
        cursor = after
    elif isinstance(after, int) and not isinstance(after, bool) and after >= 0:
        cursor = JobCursor(position=after)
    else:
        raise ValidationError(
            f"after must be a JobCursor, a job's number (an int >= 0) or None, not {after!r}"
        )
    if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < math.inf:
        raise ValidationError(f"poll must be a number of seconds > 0, not {poll!r}")
    check_limit(limit)
    if not callable(clock):
        raise ValidationError("clock must be a function returning seconds")
    return JobFeed(store, cursor, float(poll), limit, clock)


class JobFeed:
    """See :func:`feed_jobs`. :attr:`cursor` is where a new feed continues after the records
    this one has returned: keep it (``protocols.codec.encode(feed.cursor)``) to resume."""

    def __init__(
        self,
        store: RunStore,
        cursor: JobCursor,
        poll: float,
        limit: int,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self._start = cursor
        self._poll = poll
        self._limit = limit
        self._clock = clock
        self._page: JobPage | None = None
        self._handed = 0
        self._given_up: collections.deque[Gap] = collections.deque(maxlen=_KEPT)

    @property
    def cursor(self) -> JobCursor:
        """The cursor after the last record returned (the start cursor before the first)."""
        if self._page is None:
            return self._start
        return self._page.after(self._handed)

    @property
    def given_up(self) -> tuple[Gap, ...]:
        """The gaps (the latest 100) given up without the store proving them closed -- a store
        that cannot tell, or a transaction running longer than the cursor's ``patience``:
        should a job numbered in one commit after all, this feed does not return it (each is
        logged as a warning too)."""
        return tuple(self._given_up)

    def __aiter__(self) -> JobFeed:
        return self

    async def __anext__(self) -> JobRecord:
        page = self._page
        if page is not None and self._handed < len(page.records):
            self._handed += 1
            return page.records[self._handed - 1]
        # Watching from before the read: a commit after it wakes the wait below.
        with self.store.watch() as watch:
            while True:
                page = await self.store.page(self.cursor, limit=self._limit, now=self._clock())
                self._page, self._handed = page, 0
                for gap in page.given_up:
                    self._given_up.append(gap)
                    log.warning(
                        "job feed: gave up waiting for job numbers %d to %d (seen missing "
                        "%.0f s ago, looked for %d times)",
                        gap.first,
                        gap.last,
                        self._clock() - gap.seen,
                        gap.misses,
                    )
                if page.records:
                    self._handed = 1
                    return page.records[0]
                if page.more:  # (cannot be without records; kept for safety)
                    continue
                with trio.move_on_after(self._poll):
                    await watch.next()
