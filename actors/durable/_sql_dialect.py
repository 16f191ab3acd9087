"""What differs between the databases the run store over SQL runs on: :class:`Dialect` (see
:mod:`actors.durable._sql_jobs`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from protocols.jobs import Horizon

from .._sqlite import StoreError

__all__ = ["Dialect"]


@attrs.frozen(cache_hash=True)
class Dialect:
    """How one database does what the run store asks of it. The queries are written for
    SQLite; :meth:`sql` rewrites them: ``?`` parameters, ``RECORD_TEXT`` and ``ENTRY_TEXT``
    (the JSON columns as the driver should return them), and the row locks ``FOR_UPDATE``,
    ``FOR_SHARE`` and ``SKIP_LOCKED`` (nothing on SQLite, whose writes hold the database's one
    write lock from ``BEGIN IMMEDIATE``)."""

    name: str
    begin: str
    error: type[Exception]
    translate: Callable[[Exception, str], StoreError]
    rollback: Callable[[Any], None]
    words: tuple[tuple[str, str], ...]
    #: Make concurrent admissions of one key wait for each other (a no-op on SQLite).
    serialize: Callable[[Any, str], None] = lambda conn, key: None
    #: Whether a connection was lost (it is replaced before the next call).
    broken: Callable[[Any], bool] = lambda conn: False
    #: Whether an error is a conflict with another transaction that asking again settles (a
    #: deadlock: the database chose this write to give way). Never on SQLite, whose writes take
    #: the one database lock before they begin.
    conflict: Callable[[Exception], bool] = lambda exc: False
    #: ``count`` ascending numbers from the counter named (``job_sequence``, ``job_execution``)
    #: without a lock held to the commit (PostgreSQL's sequences); ``None``: take them from the
    #: counter's row in the meta table (SQLite, whose writes are serialized anyway).
    numbers: Callable[[Any, str, int], list[int]] | None = None
    #: Whether the meta table's counters are taken in one statement (an upsert ``RETURNING``
    #: the new value: SQLite 3.35 and later) rather than a read, then a write.
    counter_returning: bool = False
    #: Read a page of jobs in one consistent view (see :meth:`Jobs.page`): the rows numbered
    #: above a position (up to a limit, in order) and those inside the ranges given, each
    #: ``(id, text)``, and what the database knew of its running transactions then. ``None``:
    #: numbers commit in order (SQLite, whose writes are serialized), so two plain queries do.
    page: (
        Callable[
            [Any, int, Sequence[tuple[int, int]], int],
            tuple[list[tuple[Any, Any]], list[tuple[Any, Any]], Horizon],
        ]
        | None
    ) = None
    #: An SQL expression that takes a new execution number (PostgreSQL's ``nextval``), read
    #: with the first page an acquisition looks at: no statement of its own. ``None``: the
    #: ``job_execution`` counter of :attr:`numbers` (or the meta table), when a job is taken.
    execution: str | None = None
    #: A table function (one column) that takes one new job number, of the counter
    #: ``job_sequence``, as :attr:`numbers` does: an admission of one job then takes its number
    #: inside its ``INSERT`` -- one statement. ``None``: numbers are taken first.
    take_number: str | None = None
    #: Whether an ``UPDATE`` may be a ``WITH`` query of an ``INSERT`` (PostgreSQL): a journal
    #: append that changes the record too is then one statement.
    modifying_with: bool = False
    #: Whether a group commit may begin its transaction late (PostgreSQL, in READ COMMITTED:
    #: every statement reads its own snapshot, in a transaction or not): a read that takes no
    #: lock runs before it, and a batch of one write whose one writing statement is its last
    #: needs none (the statement is its own transaction; what other processes must hear of it
    #: the database announces itself, by its triggers). Not SQLite, whose reads in the
    #: transaction are under its write lock.
    late_begin: bool = False

    @functools.cache  # noqa: B019 - dialects are few and live for the process
    def sql(self, query: str) -> str:
        """``query`` in this dialect."""
        for word, replacement in self.words:
            query = query.replace(word, replacement)
        return query
