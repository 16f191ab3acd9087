"""Live runs: every run's event log (:class:`~protocols.live.EventLog`) published as the run
goes, and followed -- from its first event, or from any seq -- by whoever asks for it by id.

A :class:`LiveRuns` registry belongs to one runtime (``runtime.watch(run_id, after=...)``). A
run's log is registered when the run is asked for and kept, once it ended, for ``keep`` seconds
(at most ``max_ended`` ended logs: the oldest go first). A follower never slows the run down:
it reads the log at its own pace, and one that fell behind what the log keeps reads a ``gap``.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Final

import trio

from protocols.errors import ValidationError
from protocols.live import DEFAULT_CAPACITY, TERMINAL, EventLog, RunEvent

__all__ = ["DEFAULT_KEEP", "LiveRun", "LiveRuns", "RunEvents"]

#: How long an ended run's log stays to be followed, by default (seconds).
DEFAULT_KEEP: Final = 600.0
#: How many ended runs' logs are kept at most, by default.
DEFAULT_MAX_ENDED: Final = 10_000


class LiveRun(EventLog):
    """One run's log (its :class:`~protocols.live.EventLog`: ``ended`` is the time of its
    terminal event, ``None`` while the run goes on), and the followers waiting for its next
    event: an :meth:`~protocols.live.EventLog.add` wakes them."""

    # Its followers' parking lot: made when one first waits (most runs are never followed
    # live; a run's log is made with no more than the log's own fields).
    __slots__ = ("_lot",)

    @property
    def log(self) -> EventLog:
        """The run's log: this object itself."""
        return self

    async def _park(self) -> None:
        """Wait for the next :meth:`add`."""
        lot: trio.lowlevel.ParkingLot | None = getattr(self, "_lot", None)
        if lot is None:
            lot = self._lot = trio.lowlevel.ParkingLot()
        self.wake = lot.unpark_all  # (while nobody waits, an add calls nothing)
        try:
            await lot.park()
        finally:
            if not lot:  # (nobody is parked now: an add need not wake anyone)
                self.wake = None

    async def wait_after(self, seq: int) -> None:
        """Wait until the log holds an event after ``seq`` (or has ended)."""
        if self.last <= seq and self.ended is None:
            await self._park()
        else:
            await trio.lowlevel.checkpoint()


class RunEvents:
    """The events of one run after ``after``, as they come: an async iterator that replays
    what the log holds, then follows it live, and stops after the terminal event (see
    :meth:`LiveRuns.watch`)."""

    def __init__(self, run: LiveRun, after: int) -> None:
        self._run = run
        self._after = after
        self._pending: collections.deque[RunEvent] = collections.deque()
        self._done = False

    @property
    def run_id(self) -> str:
        """The run followed."""
        return self._run.log.run_id

    @property
    def position(self) -> int:
        """The seq of the last event handed out (``after`` before the first)."""
        return self._after

    def __aiter__(self) -> RunEvents:
        return self

    async def __anext__(self) -> RunEvent:
        # (The fan-out path: a run's every follower runs this for each event it publishes.)
        pending = self._pending
        while not pending:
            run = self._run
            log = run.log
            after = self._after
            if self._done or (log.ended is not None and log.last <= after):
                # Followed to its end (or resumed after it): nothing more belongs to the stream.
                self._done = True
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            if log.last <= after:
                await run._park()  # until the next event is published
            else:
                await trio.lowlevel.checkpoint()
            now = time.time() if after < log.first - 1 else math.nan  # (a gap's time)
            pending.extend(log.read(after, now=now))
        event = pending.popleft()
        self._after = event.seq
        if event.kind in TERMINAL:
            self._done = True
            pending.clear()
        return event


class LiveRuns:
    """The runs of one runtime whose logs can be followed, by run id."""

    def __init__(
        self,
        *,
        capacity: int = DEFAULT_CAPACITY,
        keep: float = DEFAULT_KEEP,
        max_ended: int = DEFAULT_MAX_ENDED,
    ) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int | float) or not keep >= 0:
            raise ValidationError(f"keep must be a number of seconds >= 0, not {keep!r}")
        if isinstance(max_ended, bool) or not isinstance(max_ended, int) or max_ended < 0:
            raise ValidationError(f"max_ended must be an int >= 0, not {max_ended!r}")
        EventLog("-", capacity=capacity)  # (checks the capacity)
        self.capacity = capacity
        self.keep = float(keep)
        self.max_ended = max_ended
        self._runs: dict[str, LiveRun] = {}
        self._ended: collections.OrderedDict[str, float] = collections.OrderedDict()
        # When the oldest ended log is due to go (at the latest: it may have gone already).
        self._due = math.inf

    def open(self, run_id: str) -> LiveRun:
        """Register a new run's log (replacing an ended one of the same id)."""
        run = LiveRun(run_id, capacity=self.capacity)
        self._runs[run_id] = run
        if self._ended:
            self._ended.pop(run_id, None)
        return run

    def end(self, run_id: str) -> None:
        """The run ended: its log is kept ``keep`` seconds more (ended logs are let go as
        later runs end and as logs are looked up: those ended more than ``keep`` seconds
        before, and the oldest beyond ``max_ended``)."""
        if run_id in self._runs:
            now = _now()
            ended = self._ended
            if run_id in ended:
                ended.move_to_end(run_id)
            elif not ended:
                self._due = now + self.keep
            ended[run_id] = now
            if now >= self._due or len(ended) > self.max_ended:
                self._expire(now)

    def get(self, run_id: str) -> LiveRun | None:
        """The run's log, while it is kept."""
        if self._ended:  # (an ended log older than ``keep`` is gone, also with no run since)
            now = _now()
            if now >= self._due:
                self._expire(now)
        return self._runs.get(run_id)

    def watch(self, run_id: str, *, after: int = 0) -> RunEvents:
        """The run's events after seq ``after``: those the log holds, then the rest as they
        come, until the terminal event (included). Raises
        :class:`~protocols.errors.ValidationError` for a run this runtime does not know (never
        started here, or ended longer ago than it keeps logs)."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValidationError(f"after must be a seq (an int >= 0), not {after!r}")
        run = self.get(run_id) if isinstance(run_id, str) else None
        if run is None:
            raise ValidationError(f"no run {run_id!r} (never started here, or no longer kept)")
        return RunEvents(run, after)

    def statistics(self) -> dict[str, int]:
        """How many logs are kept (``runs``), of which ended (``ended``)."""
        return {"runs": len(self._runs), "ended": len(self._ended)}

    def _expire(self, now: float) -> None:
        ended = self._ended
        horizon = now - self.keep
        while ended:
            run_id, at = next(iter(ended.items()))
            if at > horizon and len(ended) <= self.max_ended:
                self._due = at + self.keep
                return
            ended.popitem(last=False)
            self._runs.pop(run_id, None)
        self._due = math.inf


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # pragma: no cover - outside a run (a registry made before one)
        return math.inf
