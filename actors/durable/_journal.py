"""``StoreJournal``: a journaled run's journal, written to a :class:`RunStore` under the
worker's lease.

Entries are written in order, and a boundary whose loss would be ambiguous is a barrier: it is
written -- with everything journaled before it, in one append -- before it is crossed. A
provider call's request before the call; a call's intent (after the response that made the call)
before the call's effect; an approval request with the job's suspension; the terminal with the
job's end. The input and a settled response go with the barrier that always follows them at
once. A call's result and the deltas a call streams wait at most :data:`LINGER` seconds for the
next barrier to carry them, and are written on their own after that: a crash loses at most what
was journaled in the last moments before it, never a boundary. A write the store refuses as
fenced -- this worker no longer holds the job -- drops the run: it is cut at once, and nothing
more is written for it. A barrier the store refuses because the job's cancel was requested
(``code="cancelled"``, checked in the append's own transaction) is never crossed: the provider
call or the tool call it guards does not start, and the run is cut as a cancel cuts it -- what
it produced is still journaled, and the job ends ``cancelled``. A write that fails because the
store could not be reached (a database restarting, a connection cut) is asked again, with
backoff, for up to :data:`RETRY_FOR` seconds -- first finding out from the stored journal
whether the failed attempt had in fact committed, so nothing is written twice -- and the run
goes on where it was; only after that is it cut, to be continued from its journal.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Literal

import trio

from protocols.authority import Authority, Verdict
from protocols.context import Scope
from protocols.jobs import (
    AnswerEntry,
    Applied,
    ApprovalAnswer,
    ApprovalRequest,
    AskEntry,
    AttemptEntry,
    CheckpointEntry,
    Entry,
    InputEntry,
    IntentEntry,
    Lease,
    MessageEntry,
    Replay,
    RequestEntry,
    ResponseEntry,
    ResultEntry,
    StreamEntry,
    crosses,
    idempotency_key,
    suspend,
)
from protocols.messages import Message, ToolCall, ToolDefinition, ToolFailure, ToolResult, Usage
from protocols.questions import Answer, Question, check_answer

from .._questions import DECLINED, QuestionTool, Unanswered
from .._sqlite import StoreError
from ..tools import CallableTool, ToolRegistry
from ._store import RunStore, fenced

__all__ = ["CANCELLED", "LINGER", "LOST", "RETRY_FOR", "StoreJournal", "WriteBehind"]

#: How long an entry that is not a barrier waits for the next barrier to be written with it
#: before it is written on its own (seconds).
LINGER = 0.002

#: How long a journal write that failed because the store could not be reached is asked again
#: before the run is cut (seconds).
RETRY_FOR = 10.0

#: What a call answers when its worker lost the job before the call's effect could start.
LOST = "not executed: this worker no longer holds the job"

#: What a call answers when its job's cancel was acknowledged before the call's effect could
#: start.
CANCELLED = "not executed: the job was cancelled"


class StoreJournal:
    """The :class:`~actors._run_loop.RunJournal` of job ``job`` held with ``holder``.

    ``replay`` is the journal as read when the run was continued (``None`` for a first
    attempt), ``journaled`` how many entries the stored journal held then; ``cut`` is called
    once if the store refuses a write as fenced. What waits for a barrier is written by
    ``behind`` (the :class:`WriteBehind` of many journals) when given, else by :meth:`writer`,
    run beside the run."""

    def __init__(
        self,
        store: RunStore,
        job: str,
        holder: Lease,
        *,
        cut: Callable[[str], None],
        replay: Replay | None = None,
        journaled: int = 0,
        answers: Sequence[ApprovalAnswer] = (),
        clock: Callable[[], float] = time.time,
        leaving: Callable[[], bool] = lambda: False,
        behind: WriteBehind | None = None,
    ) -> None:
        self.store = store
        self.job = job
        self.holder = holder
        self._cut = cut
        #: The store refused a write as fenced: this worker has let the job go.
        self.dropped = False
        #: The run waits for approvals: the job is awaiting input, and this run writes no more.
        self.suspended = False
        #: The job's cancel was requested: the store refused a barrier, and the run was cut.
        self.cancelled = False
        self._answers = {answer.call_id: answer for answer in answers}
        self._clock = clock
        self._leaving = leaving
        self._turn = 0  # the settled response whose calls are the open batch
        self._calls: dict[str, int] = {}  # call id -> its index in that response
        self._recorded: set[str] = set()  # calls of the batch whose result is journaled
        self._intents: dict[str, str] = {}
        self._buffer: list[Entry] = []  # written behind the run, in order
        # Deltas streamed since the last entry was buffered (of turn _stream_turn): sealed into
        # one StreamEntry when anything else is buffered or the buffer is written.
        self._deltas: list[tuple[str, str]] = []
        self._stream_turn = 0
        self._journaled = journaled  # the entries the stored journal holds
        self._writing = False  # an append is in flight (the writer's or a barrier's)
        self._progress = trio.Event()  # set (and replaced) whenever an append ends
        self._more = trio.Event()  # the buffer has entries for the writer
        self._behind = behind
        self._waiting = False  # handed to ``behind``, not written yet
        self._closed = False
        #: The store failed a write (not as fenced): the run was cut; this is why.
        self.failure: StoreError | None = None
        if replay is not None:
            self._turn = replay.settled
            last = next(
                (m for m in reversed(replay.messages) if m.calls and not m.interrupted), None
            )
            if last is not None:
                self._calls = {call.id: index for index, call in enumerate(last.calls)}
            self._recorded = set(replay.results)
            self._intents = dict(replay.intents)

    async def _append(self, *entries: Entry, carried: bool = False) -> None:
        """Journal ``entries`` behind the run (see the module docstring). ``carried``: a
        barrier always follows them at once (the input, a settled response), so the writer is
        not woken for them; :meth:`close` writes them if the run ends first."""
        if not self._writable:
            return
        self._seal()
        self._buffer.extend(entries)
        if not carried:
            self._lingers()

    def stream(self, turn: int, channel: str, text: str) -> None:
        """A delta the turn in flight streamed (as the run showed it): journaled behind the
        run, the deltas of a turn that are buffered together in one :class:`StreamEntry`."""
        if not self._writable:
            return
        if self._stream_turn != turn:
            self._seal()
            self._stream_turn = turn
        self._deltas.append((channel, text))
        self._lingers()

    def _lingers(self) -> None:
        """Something buffered waits for the next barrier: have it written within
        :data:`LINGER` seconds if none comes first."""
        if self._behind is None:
            self._more.set()
        elif not self._waiting:
            self._waiting = True
            self._behind.later(self)

    def _seal(self) -> None:
        """The deltas buffered so far become one entry, in their place in the buffer."""
        if self._deltas:
            self._buffer.append(StreamEntry(self._stream_turn, tuple(self._deltas)))
            self._deltas = []

    async def writer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Write what the run journals behind it, until :meth:`close` (run it in a nursery)."""
        task_status.started()
        while True:
            await self._more.wait()
            self._more = trio.Event()
            await trio.sleep(LINGER)
            await self._write_behind()

    def _unwritten(self) -> bool:
        """Something is buffered, and the run still writes."""
        return bool(self._buffer or self._deltas) and self.holds() and not self.suspended

    async def _write_behind(self) -> None:
        """Write what is buffered, if the run still writes (shielded)."""
        while self._unwritten():
            with trio.CancelScope(shield=True):
                await self._write_buffer(())

    async def _take_turn(self) -> None:
        """Become the journal's one append in flight (waiting for the one before to end);
        :meth:`_end_turn` afterwards, always."""
        while self._writing:
            await self._progress.wait()
        self._writing = True

    def _end_turn(self) -> None:
        self._writing = False
        progress, self._progress = self._progress, trio.Event()
        progress.set()

    async def _write_buffer(self, entries: Sequence[Entry], then: Applied | None = None) -> bool:
        """Append what is buffered and ``entries`` now (waiting for an append in flight first);
        whether they were written. A fenced refusal drops the run; another failure cuts it."""
        await self._take_turn()
        try:
            if not self.holds() or self.suspended:
                return False
            self._seal()
            batch, self._buffer = [*self._buffer, *entries], []
            if not batch:
                return True
            try:
                await self._store_batch(batch, then)
            except StoreError as error:
                if error.code == "fenced":
                    self.dropped = True
                    self._cut("this worker no longer holds the job (fenced)")
                elif error.code == "cancelled":
                    # The job's cancel was acknowledged: the work the barrier guards never
                    # starts, and what the run produced waits for its cut to be committed.
                    kept = [entry for entry in batch if not crosses((entry,))]
                    self._buffer = [*kept, *self._buffer]
                    self._refused()
                else:
                    self.failure = error
                    self._cut(f"the journal could not be written: {error.message}")
                return False
        finally:
            self._end_turn()
        return True

    def _refused(self) -> None:
        """The job's cancel was requested: cut the run as a cancel does (once)."""
        if not self.cancelled:
            self.cancelled = True
            self._cut("the job was cancelled")

    async def _store_batch(self, batch: list[Entry], then: Applied | None) -> None:
        """Append ``batch`` (with ``then``), asking again while the store cannot be reached,
        for up to :data:`RETRY_FOR` seconds. Shielded: a cancel must not leave what was taken
        from the buffer neither written nor buffered, nor a write's outcome unknown."""
        with trio.CancelScope(shield=True):
            deadline = trio.current_time() + RETRY_FOR
            pause = 0.05

            async def wait(failed: StoreError) -> None:
                """Back off before asking again, or give up with ``failed`` past the deadline."""
                nonlocal pause
                if trio.current_time() + pause > deadline:
                    raise failed
                await trio.sleep(pause)
                pause = min(pause * 2, 1.0)

            while True:
                try:
                    await self.store.append(self.job, self.holder, batch, then=then)
                except StoreError as error:
                    if not error.retryable:
                        raise
                    failed = error
                else:
                    self._journaled += len(batch)
                    return
                # Did it commit before the connection went? The stored journal says -- if this
                # holder still holds the job: then no one else has appended to it. (Read before
                # the record: a job held now was held when its journal was read.)
                while True:
                    await wait(failed)
                    try:
                        length = len(await self.store.journal(self.job))
                        current = await self.store.get(self.job)
                    except StoreError as error:
                        if not error.retryable:
                            raise failed from error
                        continue
                    break
                if then is not None and current is not None and current == then.record:
                    self._journaled = length  # (written: the record is the one it wrote)
                    return
                if current is None or not current.held_by(self.holder):
                    raise fenced(self.job, self.holder, current)
                if length == self._journaled + len(batch):
                    self._journaled = length
                    return
                # Not written: asked again.

    async def flush(self) -> bool:
        """Wait until everything journaled so far is written; whether it was."""
        return await self._write_buffer(())

    async def close(self) -> None:
        """Write what is still buffered (unless the run was dropped) and take no more."""
        if self._writing or self._unwritten():  # (nothing to write, none in flight: no shield)
            with trio.CancelScope(shield=True):
                await self._write_buffer(())
        self._closed = True

    async def finish(self, terminal: Entry, then: Applied) -> None:
        """Write the terminal with what is buffered, and the job's end (``then``) with it.
        Raises :class:`~actors.store.StoreError` -- ``code="fenced"`` when this worker no
        longer holds the job or the record changed since ``then`` was computed."""
        await self._take_turn()
        try:
            if self.failure is not None:
                raise self.failure
            self._seal()
            batch, self._buffer = [*self._buffer, terminal], []
            try:
                await self._store_batch(batch, then)
            except StoreError as error:
                # Refused as fenced: lost the job (drop the run), or the record changed since
                # ``then`` was computed (keep what was not written for a retry of the end).
                current = await self.store.get(self.job) if error.code == "fenced" else None
                if error.code == "fenced" and (current is None or not current.held_by(self.holder)):
                    self.dropped = True
                else:
                    self._buffer = batch[:-1]
                raise
        finally:
            self._end_turn()
        self._closed = True

    async def gate(
        self,
        calls: Sequence[ToolCall],
        authority: Authority | None,
        registry: ToolRegistry | None = None,
        scope: Scope | None = None,
    ) -> None:
        """The approval gate, before a batch runs: if the authority asks about calls no human
        has answered yet, or a call of ``registry``'s question tool asks the human a question
        not answered yet, the job waits for them (``awaiting_input``, the requests and the
        questions persisted) and this run stops here -- no call of the batch runs until every
        answer is in (a continuing worker runs it then). A call out of ``scope`` asks nothing:
        it is skipped, never run."""
        asks: list[tuple[ToolCall, Verdict]] = []
        questions: dict[str, Question] = {}
        for call in calls:
            if call.id in self._answers:
                continue
            verdict = authority.decide(call) if authority is not None else None
            if verdict is not None and verdict.decision == "deny":
                continue  # denied: it never runs, so it asks nothing
            target = registry.get(call.name) if registry is not None else None
            if scope is not None and not scope.allows_tool(call.name):
                target = None
            question = target.question_of(call) if isinstance(target, QuestionTool) else None
            if question is not None:
                # The question is put to the human, who answers it (or declines): that answer
                # is also the approval an authority's "ask" about the call wants.
                questions[call.id] = question
                asks.append((call, Verdict("ask", None, "question", question.prompt)))
            elif verdict is not None and verdict.decision == "ask":
                asks.append((call, verdict))
        if not asks or not self._writable:
            return
        record = await self.store.get(self.job)
        if record is None or not record.held_by(self.holder):
            self.dropped = True
            self._cut("this worker no longer holds the job (fenced)")
            await trio.lowlevel.checkpoint()
            return
        if record.cancel_requested:
            # Nobody need answer: the batch never runs, and the job ends cancelled.
            self._refused()
            await trio.lowlevel.checkpoint()
            return
        requests = [
            ApprovalRequest(call.id, call.name, verdict.reason, questions.get(call.id))
            for call, verdict in asks
        ]
        waiting = suspend(record, self.holder, now=self._clock(), pending=requests)
        entry = AskEntry(
            tuple(call.id for call, _ in asks),
            {call.id: verdict.reason for call, verdict in asks},
            questions,
        )
        if not isinstance(waiting, Applied):
            self.dropped = True
            self._cut("this worker no longer holds the job (fenced)")
            await trio.lowlevel.checkpoint()
            return
        if not await self._write_buffer([entry], then=waiting):
            await trio.lowlevel.checkpoint()
            return
        self.suspended = True
        self._cut("the job waits for approval")
        await trio.lowlevel.checkpoint()

    async def approve(self, call: ToolCall, verdict: Verdict) -> tuple[bool, str]:
        """The approver of a journaled run: the human's recorded answer (the gate has made
        sure there is one)."""
        await trio.lowlevel.checkpoint()
        answer = self._answers.get(call.id)
        if answer is None:
            return False, "no answer was recorded"
        return answer.allow, answer.reason

    async def answer(self, call: ToolCall, question: Question) -> Answer:
        """The answerer of a journaled run: the human's recorded answer to the question the
        call asks (the gate has made sure there is one, checked against the question when it
        was given); raises :class:`~actors.Unanswered` when the human declined."""
        await trio.lowlevel.checkpoint()
        answer = self._answers.get(call.id)
        if answer is None:
            raise Unanswered("no answer was recorded")
        if not answer.allow:
            raise Unanswered(answer.reason or DECLINED)
        return check_answer(question, answer.value)

    @property
    def _writable(self) -> bool:
        """Entries journaled now can still be written."""
        return self.holds() and not self.suspended and not self._closed

    def holds(self) -> bool:
        """This worker still holds the job (no write was refused as fenced, none failed)."""
        return not self.dropped and self.failure is None

    def key(self, call_id: str) -> str | None:
        """The idempotency key of a call of the open batch."""
        known = self._intents.get(call_id)
        if known is not None:
            return known
        index = self._calls.get(call_id)
        return None if index is None else idempotency_key(self.job, self._turn, index)

    async def input(self, messages: Sequence[Message]) -> None:
        """The messages the run starts from (its first attempt)."""
        await self._append(InputEntry(tuple(messages)), carried=True)

    async def attempt(
        self,
        fence: int,
        reason: Literal["takeover", "retry", "answered"],
        answers: Sequence[ApprovalAnswer],
    ) -> None:
        """A continued attempt begins (``reason``: ``takeover``, ``retry`` or ``answered``),
        with the answers its batch waited for that the journal does not hold yet."""
        entries: list[Entry] = [AttemptEntry(fence, reason)]
        entries.extend(AnswerEntry(a.call_id, a.allow, a.reason, a.value) for a in answers)
        await self._append(*entries, carried=True)

    async def request(self, turn: int) -> None:
        """A provider call of ``turn`` is about to start (a barrier: a call lost in a crash
        still counts)."""
        if self._writable and not await self._write_buffer([RequestEntry(turn)]):
            # The run was cut (the job lost, or the journal failed): Cancelled, here.
            await trio.lowlevel.checkpoint()

    async def response(self, message: Message, usage: Usage | None) -> None:
        """A settled response: its calls become the open batch."""
        await self._append(ResponseEntry(message, usage), carried=True)
        self._turn += 1
        self._calls = {call.id: index for index, call in enumerate(message.calls)}
        self._recorded = set()
        self._intents = {}

    async def message(self, message: Message) -> None:
        """Another message the run adds."""
        await self._append(MessageEntry(message))

    async def results(self, results: Sequence[ToolResult]) -> None:
        """Results of the open batch not journaled yet (a result for a call the journal never
        saw -- one of a response cut before it settled -- is not journaled). While the worker is
        leaving, the results a cut gives its open calls are not journaled either: the batch
        stays open, as a crash would leave it, for the worker that continues the job to decide
        (an idempotent call runs again with its key; another is answered that its effect is
        unknown)."""
        if self._leaving():
            return
        new = [
            result
            for result in results
            if result.id in self._calls and result.id not in self._recorded
        ]
        if new:
            await self._append(*(ResultEntry(result) for result in new))
            self._recorded.update(result.id for result in new)

    async def intent(self, call: ToolCall) -> str | None:
        """The call is about to run: its intent, with its key. ``None`` when the call must not
        start (the store refused the intent: the job was cancelled, or this worker lost it)."""
        key = self.key(call.id) or idempotency_key(self.job, self._turn, len(self._calls))
        # A barrier: the intent, and the response that made the call, are written before the
        # call's effect starts.
        if self._writable and not await self._write_buffer([IntentEntry(call, key)]):
            return None
        if not self.holds() or self.cancelled:
            return None
        self._intents[call.id] = key
        return key

    async def result(self, result: ToolResult) -> None:
        """The call's result, as soon as it is in."""
        await self.results([result])

    async def checkpoint(self, turn: int, content: str, thinking: str) -> None:
        """What the turn in flight has streamed so far."""
        await self._append(CheckpointEntry(turn, content, thinking))

    def tools(self, registry: ToolRegistry) -> ToolRegistry:
        """``registry`` with each tool journaling its call's intent and result."""
        return ToolRegistry(_JournaledTool(tool, self) for tool in registry.tools())


class WriteBehind:
    """Writes, for many journals at once, what waits for a barrier: each journal's buffer
    :data:`LINGER` seconds after its first entry that waits, unless a barrier carried it
    first. One task (:meth:`run`) for every journal instead of one beside each run; the
    journals' writes themselves run side by side (a store may commit them together)."""

    def __init__(self) -> None:
        self._due: collections.deque[tuple[float, StoreJournal]] = collections.deque()
        self._wake = trio.Event()

    def later(self, journal: StoreJournal) -> None:
        """Write ``journal``'s buffer :data:`LINGER` seconds from now."""
        self._due.append((trio.current_time() + LINGER, journal))
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write what is due, as it falls due, until cancelled (run it in a nursery)."""
        async with trio.open_nursery() as writes:
            task_status.started()
            while True:
                if not self._due:
                    self._wake = trio.Event()
                    await self._wake.wait()
                when, journal = self._due[0]
                await trio.sleep_until(when)
                while self._due and self._due[0][0] <= when:
                    _, journal = self._due.popleft()
                    journal._waiting = False
                    if journal._unwritten():
                        writes.start_soon(journal._write_behind)


class _JournaledTool:
    """A tool whose calls are journaled: intent before the effect, result after."""

    def __init__(self, inner: CallableTool, journal: StoreJournal) -> None:
        self._inner = inner
        self._journal = journal

    @property
    def definition(self) -> ToolDefinition:
        return self._inner.definition

    async def call(self, call: ToolCall) -> ToolResult:
        journal = self._journal
        if await journal.intent(call) is None:
            # The effect never starts: its intent was refused (the run is being cut).
            text = CANCELLED if journal.cancelled else LOST
            return ToolFailure(call.id, call.name, text)
        result = await self._inner.call(call)
        await journal.result(result)
        return result
