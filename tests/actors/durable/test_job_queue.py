"""The durable job queue (:func:`actors.durable.open_job_queue`), behaviour by behaviour.

Jobs run on :class:`~actors.testing.ScriptedProvider` agents over a :class:`MemoryRunStore` (and
a few over a :class:`SQLiteRunStore` file). The tests over memory run in trio time: they have
the ``autojump_clock`` and their queues get ``clock=trio.current_time``, so leases, backoffs,
polls and approval timeouts pass at once. A worker "dies" by leaving its queue's block (which
cuts its running jobs as a crash would); another queue on the same store takes the job over once
the lease has expired.

The tests over SQLite run on trio's real clock instead, and their queues keep leases on a
:class:`LeaseClock` the test moves by hand. The SQLite store works in a thread, and the
autojump clock treats a task waiting for a thread as idle and jumps ahead: on it a lease can
lapse during one store call, and a worker can even stall for good. No test waits for time to pass
on the real clock: a lease expires when the test moves the :class:`LeaseClock`, a tool that would
sleep is cut first, and a worker is woken by what it waits for.
"""

from __future__ import annotations

import contextlib
import pathlib
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from actors import RunContext, Runtime, open_runtime, tool
from actors.durable import (
    AgentRegistry,
    JobError,
    JobQueue,
    MemoryRunStore,
    RunStore,
    SQLiteRunStore,
    open_job_queue,
)
from actors.durable._journal import CANCELLED as CANCELLED_CALL
from actors.durable._ops import cancel_job
from actors.durable._queue import MAX_TAKEOVERS
from actors.store import StoreError
from actors.testing import Fail, Hang, Reply, ScriptedProvider
from actors.tools import CallableTool
from protocols.authority import Authority, Rule
from protocols.errors import ProviderError, ValidationError
from protocols.jobs import (
    UNKNOWN_EFFECT,
    AgentJob,
    InputEntry,
    IntentEntry,
    JobRecord,
    JobStatus,
    RequestEntry,
    ResponseEntry,
    ResultEntry,
    StreamEntry,
    TerminalEntry,
    replay,
)
from protocols.messages import Message, Role, StopReason, ToolCall, Usage

LEASE = 30.0
#: The journal of a run with one tool call answered in two turns, entry by entry.
ONE_CALL_JOURNAL = [
    "input",
    "request",
    "response",
    "intent",
    "result",
    "request",
    "stream",  # the answer's deltas, as they streamed
    "response",
    "terminal",
]


class LeaseClock:
    """A clock for leases that moves only when told to (see the module docstring)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.asynccontextmanager
async def worker(
    store: RunStore, registry: AgentRegistry, runtime: Runtime | None = None, **options: Any
) -> AsyncIterator[JobQueue]:
    """A queue on ``store`` in trio time, unless given another ``clock`` (its own runtime
    unless one is given)."""
    options.setdefault("lease", LEASE)
    options.setdefault("clock", trio.current_time)
    async with contextlib.AsyncExitStack() as stack:
        if runtime is None:
            runtime = await stack.enter_async_context(open_runtime())
        queue = await stack.enter_async_context(
            open_job_queue(
                store,
                registry,
                runtime,
                rng=random.Random(7),
                **options,
            )
        )
        yield queue


def held() -> tuple[CallableTool, trio.Event, trio.Event]:
    """A tool ``wait_here`` that, called, sets the first event (running) and waits for the
    second (release), then returns ``"released"``."""
    running, release = trio.Event(), trio.Event()

    @tool
    async def wait_here() -> str:
        """Wait for the test."""
        running.set()
        await release.wait()
        return "released"

    return wait_here, running, release


async def until(store: RunStore, id: str, *statuses: JobStatus, pause: float = 0.05) -> JobRecord:
    """Wait until the job is in one of ``statuses``, looking every ``pause`` seconds (of trio
    time; 0 on the real clock: each look is a store call)."""
    for _ in range(10_000):
        record = await store.get(id)
        if record is not None and record.status in statuses:
            return record
        await trio.sleep(pause)
    raise AssertionError(f"job {id} never reached {statuses}: {record}")


def tool_texts(provider: ScriptedProvider, call: int) -> dict[str, str]:
    """The tool messages the ``call``-th provider call was given, by call id."""
    return {
        m.tool_call_id or "": m.content
        for m in provider.calls[call].messages
        if m.role is Role.TOOL
    }


def user_texts(provider: ScriptedProvider, call: int) -> list[str]:
    return [m.content for m in provider.calls[call].messages if m.role is Role.USER]


def call(call_id: str, tool_name: str, /, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, tool_name, arguments)


# ---------------------------------------------------------------------------------------------
# Admission


async def test_enqueue_is_durable_before_it_returns_another_connection_sees_it(
    tmp_path: pathlib.Path,
) -> None:
    registry = AgentRegistry()
    # Twice: the first worker may be cut during its provider call, which is then made again.
    registry.add("echo", ScriptedProvider("hello", "hello"))
    path = tmp_path / "jobs.db"
    clock = LeaseClock()
    async with await SQLiteRunStore.open(path) as store, await SQLiteRunStore.open(path) as other:
        async with worker(store, registry, clock=clock) as queue:
            job = AgentJob.ask("echo", "hi")
            id = await queue.enqueue(job)
            # Read at once on another connection to the file: the job is there.
            seen = await other.get(id)
            assert seen is not None
            assert seen.job == job
        # The worker left at once (as a crash would, perhaps holding the job); a worker on the
        # other connection runs it (once any lease of the first has expired).
        clock.advance(LEASE + 1)
        async with worker(other, registry, clock=clock) as second:
            result = await second.result(id)
    assert result.content == "hello"


async def test_enqueue_with_the_same_key_returns_the_same_job_before_and_after_it_ended(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider("first answer", "second answer")
    registry = AgentRegistry()
    registry.add("echo", provider)
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("echo", "one"), key="k-1")
        again = await queue.enqueue(AgentJob.ask("echo", "a different job"), key="k-1")
        assert again == id
        assert (await queue.result(id)).content == "first answer"
        after = await queue.enqueue(AgentJob.ask("echo", "one"), key="k-1")
        other = await queue.enqueue(AgentJob.ask("echo", "two"), key="k-2")
        assert (await queue.result(other)).content == "second answer"
        record = await queue.record(id)
    assert after == id
    assert other != id
    assert record is not None
    assert record.job.input[0].content == "one"
    assert len(provider.calls) == 2  # the key's job ran once
    assert len(await store.list()) == 2


async def test_enqueue_with_a_purged_key_is_refused(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("done"))
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("echo", "one"), key="k-1")
        await queue.result(id)
        await queue.purge(id)
        with pytest.raises(StoreError) as raised:
            await queue.enqueue(AgentJob.ask("echo", "one"), key="k-1")
    assert raised.value.code == "purged"
    assert "purged" in raised.value.message
    assert len(await store.list()) == 0


# ---------------------------------------------------------------------------------------------
# result()


@tool
async def lookup(ctx: RunContext[None], name: str) -> str:
    """Look a name up."""
    return f"found {name}"


async def test_result_of_a_completed_job_is_its_agent_result(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(Reply("hello", usage=Usage(3, 2, 5))))
    async with worker(MemoryRunStore(), registry) as queue:
        id = await queue.enqueue(AgentJob.ask("echo", "hi"))
        result = await queue.result(id)
        record = await queue.record(id)
    assert result.content == "hello"
    assert result.stop is StopReason.COMPLETE
    assert record is not None
    assert record.status is JobStatus.COMPLETED
    assert record.result == result
    assert record.usage == Usage(3, 2, 5)


def _exhausting() -> AgentRegistry:
    """An agent whose job (limit 1) ends partial: its one turn calls a tool."""
    registry = AgentRegistry()
    registry.add(
        "looper",
        ScriptedProvider(Reply("let me look", calls=[call("c1", "lookup", name="x")])),
        tools=[lookup],
    )
    return registry


async def test_result_of_a_partial_job_raises_job_error_without_allow_partial(
    autojump_clock: Any,
) -> None:
    async with worker(MemoryRunStore(), _exhausting()) as queue:
        id = await queue.enqueue(AgentJob.ask("looper", "go", limit=1))
        with pytest.raises(JobError) as raised:
            await queue.result(id)
        statistics = queue.statistics()
    assert raised.value.record.status is JobStatus.PARTIAL
    assert raised.value.code == "job_partial"
    assert raised.value.record.result is not None
    assert raised.value.record.result.stop is StopReason.EXHAUSTED
    assert statistics["partial"] == 1
    assert statistics["retried"] == 0


async def test_result_of_a_partial_job_is_returned_with_allow_partial(
    autojump_clock: Any,
) -> None:
    async with worker(MemoryRunStore(), _exhausting(), allow_partial=True) as queue:
        id = await queue.enqueue(AgentJob.ask("looper", "go", limit=1))
        result = await queue.result(id)
    assert result.stop is StopReason.EXHAUSTED
    assert result.content == "let me look"


async def test_result_of_a_failed_job_raises_job_error_with_the_error(
    autojump_clock: Any,
) -> None:
    registry = AgentRegistry()
    registry.add("broken", ScriptedProvider(Fail(ProviderError("bad request", code="bad"))))
    async with worker(MemoryRunStore(), registry) as queue:
        id = await queue.enqueue(AgentJob.ask("broken", "hi"))
        with pytest.raises(JobError) as raised:
            await queue.result(id)
    record = raised.value.record
    assert record.status is JobStatus.FAILED
    assert raised.value.code == "job_failed"
    assert record.error is not None
    assert "bad request" in record.error
    assert "bad request" in raised.value.message


async def test_result_of_a_cancelled_job_raises_job_error(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("slow", ScriptedProvider(Hang()))
    async with worker(MemoryRunStore(), registry) as queue:
        id = await queue.enqueue(AgentJob.ask("slow", "hi"))
        await until(queue.store, id, JobStatus.RUNNING)
        await queue.cancel(id)
        with pytest.raises(JobError) as raised:
            await queue.result(id)
    assert raised.value.record.status is JobStatus.CANCELLED
    assert raised.value.code == "job_cancelled"


async def test_result_of_an_unknown_id_raises(autojump_clock: Any) -> None:
    async with worker(MemoryRunStore(), AgentRegistry()) as queue:
        with pytest.raises(ValidationError, match="no job 'nope'"):
            await queue.result("nope")


# ---------------------------------------------------------------------------------------------
# The journal


async def assert_two_turn_journal(store: RunStore, clock: Callable[[], float]) -> None:
    registry = AgentRegistry()
    provider = ScriptedProvider(
        Reply(calls=[call("c1", "lookup", name="ada")]), Reply("Ada is found.")
    )
    registry.add("finder", provider, tools=[lookup])
    async with worker(store, registry, clock=clock) as queue:
        id = await queue.enqueue(AgentJob.ask("finder", "Find Ada."))
        result = await queue.result(id)
    entries = await store.journal(id)
    assert [entry.kind for entry in entries] == ONE_CALL_JOURNAL
    assert isinstance(entries[0], InputEntry)
    assert [m.content for m in entries[0].messages] == ["Find Ada."]
    assert [e.turn for e in entries if isinstance(e, RequestEntry)] == [1, 2]
    assert isinstance(entries[4], ResultEntry)
    assert entries[4].result.render() == "found ada"
    assert isinstance(entries[6], StreamEntry)
    assert "".join(text for _, text in entries[6].deltas) == "Ada is found."
    assert isinstance(entries[8], TerminalEntry)
    assert entries[8].stop is StopReason.COMPLETE
    assert entries[8].result == result
    made = replay(id, entries)
    assert made.terminal is not None
    assert made.turns == 2


async def test_journal_of_a_completed_two_turn_tool_job_in_order(autojump_clock: Any) -> None:
    await assert_two_turn_journal(MemoryRunStore(), trio.current_time)


async def test_journal_of_a_completed_two_turn_tool_job_in_order_on_sqlite(
    tmp_path: pathlib.Path,
) -> None:
    async with await SQLiteRunStore.open(tmp_path / "jobs.db") as store:
        await assert_two_turn_journal(store, LeaseClock())


# ---------------------------------------------------------------------------------------------
# Continuation after a worker left mid-tool


def _charging(*, idempotent: bool, log: list[str | None], started: trio.Event | None = None) -> Any:
    @tool(name="charge", idempotent=idempotent)
    async def charge(ctx: RunContext[None], cents: int) -> str:
        """Charge the customer."""
        log.append(ctx.idempotency_key)
        if started is not None:
            started.set()
        await trio.sleep(10)
        return f"charged {cents}"

    return charge


async def _crash_mid_tool(
    store: RunStore,
    registry: AgentRegistry,
    job: AgentJob,
    started: trio.Event,
    clock: Callable[[], float] = trio.current_time,
    **second: Any,
) -> tuple[str, Any, JobRecord]:
    """Run ``job`` on a first worker that leaves as soon as ``started`` is set (a tool is
    running), then on a second one, which takes it over once the first's lease has expired."""
    async with open_runtime() as runtime:
        async with worker(store, registry, runtime, clock=clock) as first:
            id = await first.enqueue(job)
            await started.wait()
            assert (await store.get(id)).status is JobStatus.RUNNING  # type: ignore[union-attr]
        if isinstance(clock, LeaseClock):
            clock.advance(LEASE + 1)
        async with worker(store, registry, runtime, clock=clock, **second) as other:
            outcome: Any
            try:
                outcome = await other.result(id)
            except JobError as error:
                outcome = error
            record = await other.record(id)
    assert record is not None
    return id, outcome, record


async def assert_unknown_effect_never_rerun(store: RunStore, clock: Callable[[], float]) -> None:
    charged: list[str | None] = []
    started = trio.Event()
    provider = ScriptedProvider(
        Reply(calls=[call("c1", "charge", cents=500)]), Reply("I could not tell.")
    )
    registry = AgentRegistry()
    registry.add(
        "billing", provider, tools=[_charging(idempotent=False, log=charged, started=started)]
    )
    id, result, record = await _crash_mid_tool(
        store, registry, AgentJob.ask("billing", "Charge."), started, clock
    )
    assert len(charged) == 1  # started once, never run again
    assert result.content == "I could not tell."
    assert tool_texts(provider, 1)["c1"].endswith(UNKNOWN_EFFECT)
    assert record.takeovers == 1
    assert record.attempts == 1
    results = [e for e in await store.journal(id) if isinstance(e, ResultEntry)]
    assert len(results) == 1
    assert results[0].result.render().endswith(UNKNOWN_EFFECT)


async def test_continuation_answers_a_started_non_idempotent_call_unknown_effect_never_rerun(
    autojump_clock: Any,
) -> None:
    await assert_unknown_effect_never_rerun(MemoryRunStore(), trio.current_time)


async def test_continuation_answers_unknown_effect_never_rerun_on_sqlite(
    tmp_path: pathlib.Path,
) -> None:
    async with await SQLiteRunStore.open(tmp_path / "jobs.db") as store:
        await assert_unknown_effect_never_rerun(store, LeaseClock())


async def test_continuation_reruns_a_started_idempotent_call_with_the_same_key(
    autojump_clock: Any,
) -> None:
    charged: list[str | None] = []
    started = trio.Event()
    provider = ScriptedProvider(Reply(calls=[call("c1", "charge", cents=500)]), Reply("Done."))
    registry = AgentRegistry()
    registry.add(
        "billing", provider, tools=[_charging(idempotent=True, log=charged, started=started)]
    )
    id, result, _record = await _crash_mid_tool(
        MemoryRunStore(), registry, AgentJob.ask("billing", "Charge."), started
    )
    assert result.content == "Done."
    assert len(charged) == 2
    assert charged[0] == charged[1] == f"{id}:1:0"
    assert tool_texts(provider, 1)["c1"] == "charged 500"


async def test_continuation_runs_a_call_that_never_started_and_answers_the_started_one(
    autojump_clock: Any,
) -> None:
    # One call at a time: when the worker leaves, one call has started and the other has not
    # (which one is up to the scheduler; each must end up having run exactly once).
    ran: dict[str, int] = {"a": 0, "b": 0}
    started = trio.Event()

    def make(name: str) -> Any:
        @tool(name=name)
        async def effect(ctx: RunContext[None]) -> str:
            """Do something with an effect."""
            ran[name] += 1
            started.set()
            await trio.sleep(10)
            return f"{name} done"

        return effect

    provider = ScriptedProvider(Reply(calls=[call("ca", "a"), call("cb", "b")]), Reply("Finished."))
    registry = AgentRegistry()
    registry.add("two", provider, tools=[make("a"), make("b")], tool_concurrency=1)
    _, result, _ = await _crash_mid_tool(
        MemoryRunStore(), registry, AgentJob.ask("two", "Go."), started
    )
    assert result.content == "Finished."
    assert ran == {"a": 1, "b": 1}
    texts = sorted(tool_texts(provider, 1).values())
    assert len(texts) == 2
    assert sum(text.endswith(UNKNOWN_EFFECT) for text in texts) == 1
    assert sum(text in ("a done", "b done") for text in texts) == 1


async def test_continuation_carries_turns_and_usage_over(autojump_clock: Any) -> None:
    charged: list[str | None] = []
    started = trio.Event()
    provider = ScriptedProvider(
        Reply(calls=[call("c1", "charge", cents=1)], usage=Usage(10, 5, 15)),
        Reply("Done.", usage=Usage(20, 3, 23)),
    )
    registry = AgentRegistry()
    registry.add(
        "billing", provider, tools=[_charging(idempotent=True, log=charged, started=started)]
    )
    _, result, record = await _crash_mid_tool(
        MemoryRunStore(), registry, AgentJob.ask("billing", "Charge."), started
    )
    assert len(provider.calls) == 2
    assert result.turns == 2  # both attempts' provider calls
    assert result.usage == Usage(30, 8, 38)
    assert record.usage == Usage(30, 8, 38)


async def test_continuation_counts_turns_before_the_crash_toward_the_job_limit(
    autojump_clock: Any,
) -> None:
    charged: list[str | None] = []
    started = trio.Event()
    provider = ScriptedProvider(
        Reply(calls=[call("c1", "charge", cents=1)]),
        Reply(calls=[call("c2", "charge", cents=2)]),
        Reply("never asked for"),
    )
    registry = AgentRegistry()
    registry.add(
        "billing", provider, tools=[_charging(idempotent=True, log=charged, started=started)]
    )
    _, result, record = await _crash_mid_tool(
        MemoryRunStore(),
        registry,
        AgentJob.ask("billing", "Charge.", limit=2),
        started,
        allow_partial=True,
    )
    assert len(provider.calls) == 2  # 1 before the crash, only 1 more after it
    assert provider.remaining == 1
    assert result.stop is StopReason.EXHAUSTED
    assert result.turns == 2
    assert record.status is JobStatus.PARTIAL


# ---------------------------------------------------------------------------------------------
# Takeovers


async def test_takeovers_are_counted_apart_from_attempts(autojump_clock: Any) -> None:
    charged: list[str | None] = []
    provider = ScriptedProvider(Reply(calls=[call("c1", "charge", cents=1)]), Reply("Done."))
    registry = AgentRegistry()
    registry.add("billing", provider, tools=[_charging(idempotent=True, log=charged)])
    store = MemoryRunStore()
    async with open_runtime() as runtime:
        # Two workers die mid-charge, one after the other: the first 1 s in; the second takes
        # the job over once the first's lease has expired, and dies 1 s into its own charge.
        async with worker(store, registry, runtime) as first:
            id = await first.enqueue(AgentJob.ask("billing", "Charge."))
            await trio.sleep(1)
        async with worker(store, registry, runtime):
            await trio.sleep(LEASE)
        assert len(charged) == 2
        async with worker(store, registry, runtime) as last:
            result = await last.result(id)
            record = await last.record(id)
    assert result.content == "Done."
    assert record is not None
    assert record.takeovers == 2
    assert record.attempts == 1
    assert len(charged) == 3
    assert len(set(charged)) == 1


async def _ghost_takeovers(store: RunStore, id: str, times: int) -> None:
    """Workers that acquire the job and die at once, ``times`` acquisitions in all."""
    for n in range(times):
        taken = await store.acquire(owner=f"ghost-{n}", lease=1.0, now=trio.current_time())
        assert taken is not None
        assert taken.id == id
        await trio.sleep(1.5)


async def test_max_takeovers_still_runs_the_job(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("made it"))
    store = MemoryRunStore()
    id = (await store.admit(AgentJob.ask("echo", "hi"), now=trio.current_time())).record.id
    await _ghost_takeovers(store, id, MAX_TAKEOVERS)
    async with worker(store, registry) as queue:
        result = await queue.result(id)
        record = await queue.record(id)
    assert result.content == "made it"
    assert record is not None
    assert record.takeovers == MAX_TAKEOVERS


# ---------------------------------------------------------------------------------------------
# Fencing


async def test_a_worker_taken_over_cannot_write_and_the_job_completes_once(
    autojump_clock: Any,
) -> None:
    # The first worker's clock runs 100 s behind: its leases look expired to the second one,
    # which takes the job over while the first is mid-tool (a paused or partitioned worker).
    effects: list[str | None] = []

    @tool
    async def slow(ctx: RunContext[None]) -> str:
        """A slow effect."""
        effects.append(ctx.idempotency_key)
        await trio.sleep(10)
        return "first worker's result"

    provider = ScriptedProvider(Reply(calls=[call("c1", "slow")]), Reply("Done once."))
    registry = AgentRegistry()
    registry.add("slowpoke", provider, tools=[slow])
    store = MemoryRunStore()
    async with (
        open_runtime() as runtime,
        open_job_queue(
            store, registry, runtime, lease=LEASE, clock=lambda: trio.current_time() - 100
        ) as behind,
    ):
        id = await behind.enqueue(AgentJob.ask("slowpoke", "Go."))
        await trio.sleep(1)  # the first worker is in the tool now
        async with worker(store, registry, runtime) as ahead:
            result = await ahead.result(id)
            record = await ahead.record(id)
            taking = ahead.statistics()
        # Meanwhile the first worker finds it no longer holds the job (its renewal or its next
        # journal write is refused) and drops the run, writing nothing more.
        await trio.sleep(20)
        left = behind.statistics()
    assert result.content == "Done once."
    assert record is not None
    assert record.status is JobStatus.COMPLETED
    assert record.takeovers == 1
    assert len(effects) == 1
    assert taking["completed"] == 1
    assert left["completed"] == 0
    assert left["dropped"] == 1
    assert left["running"] == 0
    entries = await store.journal(id)
    assert sum(isinstance(e, TerminalEntry) for e in entries) == 1
    results = [e.result.render() for e in entries if isinstance(e, ResultEntry)]
    assert len(results) == 1
    assert results[0].endswith(UNKNOWN_EFFECT)
    assert len(provider.calls) == 2


# ---------------------------------------------------------------------------------------------
# Retries


def _retryable(text: str = "overloaded") -> Fail:
    return Fail(ProviderError(text, code="overloaded", retryable=True))


async def test_a_retryable_failure_is_retried_from_the_journal_and_completes(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(_retryable(), Reply("Second time lucky."))
    registry = AgentRegistry()
    registry.add("flaky", provider)
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("flaky", "hi"))
        result = await queue.result(id)
        record = await queue.record(id)
        statistics = queue.statistics()
    assert result.content == "Second time lucky."
    assert statistics["retried"] == 1
    assert statistics["completed"] == 1
    assert record is not None
    assert record.attempts == 2
    assert record.status is JobStatus.COMPLETED
    entries = await store.journal(id)
    assert sum(isinstance(e, InputEntry) for e in entries) == 1  # continued, not restarted
    assert user_texts(provider, 1) == ["hi"]


async def test_a_retry_is_taken_when_its_backoff_ends_not_at_the_next_poll(
    autojump_clock: Any,
) -> None:
    # Nothing announces that a retry's backoff has passed: the worker that queued it again
    # looks then. With polls 1000 s apart, the job would otherwise wait for one.
    provider = ScriptedProvider(_retryable(), _retryable(), Reply("Third time lucky."))
    registry = AgentRegistry()
    registry.add("flaky", provider)
    store = MemoryRunStore()
    async with worker(store, registry, poll=1000.0) as queue:
        start = trio.current_time()
        id = await queue.enqueue(AgentJob.ask("flaky", "hi"))
        result = await queue.result(id)
        took = trio.current_time() - start
        record = await queue.record(id)
    assert result.content == "Third time lucky."
    assert record is not None
    assert record.attempts == 3
    # Backoffs of at most 0.5 s and 1 s (jittered down to half), and nothing else to wait for.
    assert 0.75 <= took <= 1.5


async def test_retries_exhausted_fail_the_job_with_the_error(autojump_clock: Any) -> None:
    provider = ScriptedProvider(_retryable("busy 1"), _retryable("busy 2"), Reply("too late"))
    registry = AgentRegistry()
    registry.add("flaky", provider)
    async with worker(MemoryRunStore(), registry, retries=1) as queue:
        id = await queue.enqueue(AgentJob.ask("flaky", "hi"))
        with pytest.raises(JobError) as raised:
            await queue.result(id)
        statistics = queue.statistics()
    record = raised.value.record
    assert record.status is JobStatus.FAILED
    assert record.attempts == 2
    assert record.error is not None
    assert "busy 2" in record.error
    assert statistics["retried"] == 1
    assert statistics["failed"] == 1
    assert provider.remaining == 1


async def test_a_non_retryable_failure_fails_at_once(autojump_clock: Any) -> None:
    provider = ScriptedProvider(
        Fail(ProviderError("invalid key", code="auth", retryable=False)), Reply("unused")
    )
    registry = AgentRegistry()
    registry.add("denied", provider)
    async with worker(MemoryRunStore(), registry, retries=3) as queue:
        id = await queue.enqueue(AgentJob.ask("denied", "hi"))
        with pytest.raises(JobError) as raised:
            await queue.result(id)
        statistics = queue.statistics()
    assert raised.value.record.attempts == 1
    assert raised.value.record.error is not None
    assert "invalid key" in raised.value.record.error
    assert statistics["retried"] == 0
    assert len(provider.calls) == 1


async def test_the_per_attempt_timeout_cuts_an_attempt_and_retries_it(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(Hang(), Reply("On time."))
    registry = AgentRegistry()
    registry.add("stuck", provider)
    async with worker(MemoryRunStore(), registry, timeout=5) as queue:
        id = await queue.enqueue(AgentJob.ask("stuck", "hi"))
        started = trio.current_time()
        result = await queue.result(id)
        record = await queue.record(id)
        statistics = queue.statistics()
    assert result.content == "On time."
    assert trio.current_time() - started >= 5
    assert statistics["retried"] == 1
    assert record is not None
    assert record.attempts == 2
    assert record.error is None  # the retried attempt's error does not outlive the job's success


# ---------------------------------------------------------------------------------------------
# Approvals


def _support(provider: ScriptedProvider, log: list[str]) -> AgentRegistry:
    @tool
    async def refund(cents: int) -> str:
        """Refund the customer."""
        log.append(f"refund {cents}")
        return f"refunded {cents}"

    @tool
    async def note(text: str) -> str:
        """Note something down."""
        log.append(f"note {text}")
        return "noted"

    ask = Authority(
        rules=(
            Rule("ask", tools=("refund",), reason="refunds need a human"),
            Rule("allow", tools=("note",)),
        )
    )
    registry = AgentRegistry()
    registry.add("support", provider, tools=[refund, note], authority=ask)
    return registry


def _batch() -> Reply:
    return Reply(
        calls=[
            call("n1", "note", text="customer asked"),
            call("r1", "refund", cents=900),
            call("r2", "refund", cents=100),
        ]
    )


async def test_an_ask_suspends_the_job_and_no_call_of_its_batch_runs_until_every_answer(
    autojump_clock: Any,
) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_batch(), Reply("Refunded."))
    store = MemoryRunStore()
    async with worker(store, _support(provider, log)) as queue:
        id = await queue.enqueue(AgentJob.ask("support", "Refund."))
        record = await until(store, id, JobStatus.AWAITING_INPUT)
        assert [(p.call_id, p.tool, p.reason) for p in record.pending] == [
            ("r1", "refund", "refunds need a human"),
            ("r2", "refund", "refunds need a human"),
        ]
        assert record.lease is None
        await queue.answer(id, "r1", True, "ok")
        await trio.sleep(5)
        waiting = await queue.record(id)
        assert waiting is not None
        assert waiting.status is JobStatus.AWAITING_INPUT
        assert log == []  # not even the allowed note: the batch is one gate
        await queue.answer(id, "r2", True, "ok")
        result = await queue.result(id)
        statistics = queue.statistics()
    assert result.content == "Refunded."
    assert sorted(log) == ["note customer asked", "refund 100", "refund 900"]
    assert statistics["suspended"] == 1
    assert tool_texts(provider, 1) == {"n1": "noted", "r1": "refunded 900", "r2": "refunded 100"}
    assert len(provider.calls) == 2


async def test_answers_from_another_process_resume_the_job(tmp_path: pathlib.Path) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_batch(), Reply("Refunded."))
    registry = _support(provider, log)
    path = tmp_path / "jobs.db"
    clock = LeaseClock()
    async with await SQLiteRunStore.open(path) as first_store:
        async with worker(first_store, registry, clock=clock) as first:
            id = await first.enqueue(AgentJob.ask("support", "Refund."))
            await until(first_store, id, JobStatus.AWAITING_INPUT, pause=0)
        # The first process is gone; another answers and runs it, on its own connection.
        async with (
            await SQLiteRunStore.open(path) as second_store,
            worker(second_store, registry, clock=clock) as second,
        ):
            await second.answer(id, "r1", True)
            await second.answer(id, "r2", True)
            result = await second.result(id)
    assert result.content == "Refunded."
    assert sorted(log) == ["note customer asked", "refund 100", "refund 900"]


async def test_a_denied_call_is_read_by_the_model_as_the_denial(autojump_clock: Any) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_batch(), Reply("Only one refund."))
    store = MemoryRunStore()
    async with worker(store, _support(provider, log)) as queue:
        id = await queue.enqueue(AgentJob.ask("support", "Refund."))
        await until(store, id, JobStatus.AWAITING_INPUT)
        await queue.answer(id, "r1", False, "over the limit")
        await queue.answer(id, "r2", True)
        result = await queue.result(id)
    assert result.content == "Only one refund."
    assert sorted(log) == ["note customer asked", "refund 100"]
    texts = tool_texts(provider, 1)
    assert texts["r1"] == "denied: over the limit"
    assert texts["r2"] == "refunded 100"


async def test_a_duplicate_identical_answer_is_accepted_and_a_different_one_raises(
    autojump_clock: Any,
) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_batch(), Reply("Refunded."))
    store = MemoryRunStore()
    async with worker(store, _support(provider, log)) as queue:
        id = await queue.enqueue(AgentJob.ask("support", "Refund."))
        await until(store, id, JobStatus.AWAITING_INPUT)
        first = await queue.answer(id, "r1", True, "yes")
        again = await queue.answer(id, "r1", True, "yes")
        assert again.revision == first.revision  # a no-op
        with pytest.raises(ValidationError, match="already answered"):
            await queue.answer(id, "r1", False, "no")
        with pytest.raises(ValidationError, match="does not wait"):
            await queue.answer(id, "zz", True)
        await queue.answer(id, "r2", True)
        result = await queue.result(id)
    assert result.content == "Refunded."
    assert sorted(log) == ["note customer asked", "refund 100", "refund 900"]


async def test_approval_timeout_denies_what_waited_too_long(autojump_clock: Any) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_batch(), Reply("Nobody answered."))
    store = MemoryRunStore()
    async with worker(store, _support(provider, log), approval_timeout=60) as queue:
        id = await queue.enqueue(AgentJob.ask("support", "Refund."))
        await until(store, id, JobStatus.AWAITING_INPUT)
        asked = trio.current_time()
        await queue.answer(id, "r2", True)
        result = await queue.result(id)
    assert trio.current_time() - asked >= 60
    assert result.content == "Nobody answered."
    assert sorted(log) == ["note customer asked", "refund 100"]
    texts = tool_texts(provider, 1)
    assert texts["r1"] == "denied: no answer came before the approval timeout"
    assert texts["r2"] == "refunded 100"


# ---------------------------------------------------------------------------------------------
# Children


async def test_children_run_first_and_the_parent_gets_their_results_in_order(
    autojump_clock: Any,
) -> None:
    parent = ScriptedProvider("Summed up.")
    registry = AgentRegistry()
    registry.add("lead", parent)
    registry.add("north", ScriptedProvider(Reply("north is cold", delay=3)))
    registry.add("south", ScriptedProvider(Reply("south is warm", delay=1)))
    store = MemoryRunStore()
    job = AgentJob.ask(
        "lead",
        "Report.",
        children=[AgentJob.ask("north", "How is it?"), AgentJob.ask("south", "How is it?")],
    )
    # One slot: a parent holding it while it waits would leave no room for its children.
    async with worker(store, registry, concurrency=1) as queue:
        id = await queue.enqueue(job)
        result = await queue.result(id)
        record = await queue.record(id)
    assert result.content == "Summed up."
    assert record is not None
    assert len(record.children) == 2
    children = [await store.get(child) for child in record.children]
    assert [c.status for c in children if c is not None] == [JobStatus.COMPLETED] * 2
    # (Where the message stands relative to the input is left to the pending test: docs say
    # after it, the queue puts it before.)
    assert sorted(user_texts(parent, 0)) == [
        "Report.",
        "Results of the sub-jobs, in order:\n"
        "1. north (completed): north is cold\n"
        "2. south (completed): south is warm",
    ]


async def test_a_failed_child_fails_the_parent_without_running_it(autojump_clock: Any) -> None:
    parent = ScriptedProvider("never")
    registry = AgentRegistry()
    registry.add("lead", parent)
    registry.add("ok", ScriptedProvider("fine"))
    registry.add("bad", ScriptedProvider(Fail()))
    store = MemoryRunStore()
    job = AgentJob.ask(
        "lead", "Report.", children=[AgentJob.ask("ok", "x"), AgentJob.ask("bad", "y")]
    )
    async with worker(store, registry) as queue:
        id = await queue.enqueue(job)
        with pytest.raises(JobError) as raised:
            await queue.result(id)
    record = raised.value.record
    assert record.status is JobStatus.FAILED
    assert record.error == f"sub-job 2 (bad, {record.children[1]}) ended failed"
    assert parent.calls == []
    assert [e.kind for e in await store.journal(id)] == ["terminal"]


async def test_a_partial_child_fails_the_parent_without_allow_partial(
    autojump_clock: Any,
) -> None:
    parent = ScriptedProvider("never")
    registry = _exhausting()
    registry.add("lead", parent)
    job = AgentJob.ask("lead", "Report.", children=[AgentJob.ask("looper", "x", limit=1)])
    async with worker(MemoryRunStore(), registry) as queue:
        id = await queue.enqueue(job)
        with pytest.raises(JobError) as raised:
            await queue.result(id)
    assert raised.value.record.error is not None
    assert raised.value.record.error.endswith("ended partial")
    assert parent.calls == []


async def test_a_partial_child_lets_the_parent_run_with_allow_partial(
    autojump_clock: Any,
) -> None:
    parent = ScriptedProvider("Partly done.")
    registry = _exhausting()
    registry.add("lead", parent)
    job = AgentJob.ask("lead", "Report.", children=[AgentJob.ask("looper", "x", limit=1)])
    async with worker(MemoryRunStore(), registry, allow_partial=True) as queue:
        id = await queue.enqueue(job)
        result = await queue.result(id)
    assert result.content == "Partly done."
    assert "Results of the sub-jobs, in order:\n1. looper (partial): let me look" in (
        user_texts(parent, 0)
    )


# ---------------------------------------------------------------------------------------------
# Threads


async def test_a_thread_runs_its_jobs_one_at_a_time_in_order_the_second_seeing_the_first(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(Reply("one", delay=2), Reply("two", delay=2))
    registry = AgentRegistry()
    registry.add("chat", provider)
    store = MemoryRunStore()
    async with worker(store, registry, concurrency=4) as queue:
        first = await queue.enqueue(AgentJob.ask("chat", "q1", conversation="t"))
        second = await queue.enqueue(AgentJob.ask("chat", "q2", conversation="t"))
        await trio.sleep(1)  # were they run at once, both would be streaming now
        assert (await store.get(second)).status is JobStatus.QUEUED  # type: ignore[union-attr]
        results = [await queue.result(id) for id in (first, second)]
    assert [r.content for r in results] == ["one", "two"]
    assert [
        (m.role.value, m.content) for m in provider.calls[1].messages if m.role is not Role.SYSTEM
    ] == [("user", "q1"), ("assistant", "one"), ("user", "q2")]
    records = [await store.get(id) for id in (first, second)]
    executions = [r.execution for r in records if r is not None]
    assert executions == sorted(executions)
    assert len(set(executions)) == 2


async def test_an_interrupt_job_goes_ahead_of_the_waiting_ones(autojump_clock: Any) -> None:
    provider = ScriptedProvider("normal 1", "urgent", "normal 2")
    registry = AgentRegistry()
    registry.add("busy", ScriptedProvider(Reply("held", delay=5)))
    registry.add("chat", provider)
    store = MemoryRunStore()
    async with worker(store, registry, concurrency=1) as queue:
        busy = await queue.enqueue(AgentJob.ask("busy", "hold the slot"))
        await until(store, busy, JobStatus.RUNNING)
        normal = [await queue.enqueue(AgentJob.ask("chat", f"n{n}")) for n in (1, 2)]
        urgent = await queue.enqueue(AgentJob.ask("chat", "u"), priority="interrupt")
        for id in (busy, *normal, urgent):
            await queue.result(id)
    assert [user_texts(provider, n) for n in range(3)] == [["u"], ["n1"], ["n2"]]


# ---------------------------------------------------------------------------------------------
# Cancel


async def test_cancel_of_a_queued_job_ends_it_at_once_and_it_never_runs(
    autojump_clock: Any,
) -> None:
    waiting = ScriptedProvider("never")
    registry = AgentRegistry()
    registry.add("busy", ScriptedProvider(Hang()))
    registry.add("waiting", waiting)
    store = MemoryRunStore()
    async with worker(store, registry, concurrency=1) as queue:
        busy = await queue.enqueue(AgentJob.ask("busy", "hold the slot"))
        await until(store, busy, JobStatus.RUNNING)
        id = await queue.enqueue(AgentJob.ask("waiting", "hi"))
        record = await queue.cancel(id)
        assert record.status is JobStatus.CANCELLED
        await queue.cancel(busy)
        with pytest.raises(JobError):
            await queue.result(id)
        await queue.wait_idle()
    assert waiting.calls == []
    assert await store.journal(id) == []


async def test_cancel_of_a_running_job_cuts_it_commits_the_partial_and_ends_cancelled(
    autojump_clock: Any,
) -> None:
    registry = AgentRegistry()
    registry.add("talker", ScriptedProvider(Hang("half a sentence")))
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("talker", "hi"))
        await until(store, id, JobStatus.RUNNING)
        await trio.sleep(1)
        cancelled_at = trio.current_time()
        await queue.cancel(id)
        with pytest.raises(JobError) as raised:
            await queue.result(id)
        statistics = queue.statistics()
    assert trio.current_time() - cancelled_at < 1  # at once in the same worker
    record = raised.value.record
    assert record.status is JobStatus.CANCELLED
    assert statistics["cancelled"] == 1
    entries = await store.journal(id)
    assert isinstance(entries[-1], TerminalEntry)
    made = replay(id, entries)
    assert made.messages[-1].content == "half a sentence"
    assert made.messages[-1].interrupted


async def test_cancel_from_another_worker_cuts_the_run_within_a_third_of_the_lease(
    autojump_clock: Any,
) -> None:
    registry = AgentRegistry()
    registry.add("talker", ScriptedProvider(Hang("streaming")))
    store = MemoryRunStore()
    async with worker(store, registry) as running, worker(store, registry) as other:
        other.stop_taking()
        id = await running.enqueue(AgentJob.ask("talker", "hi"))
        await until(store, id, JobStatus.RUNNING)
        assert (await store.get(id)).lease.owner == running.owner  # type: ignore[union-attr]
        cancelled_at = trio.current_time()
        await other.cancel(id)
        record = await until(store, id, JobStatus.CANCELLED)
    assert trio.current_time() - cancelled_at <= LEASE / 3 + 1
    assert record.result is not None
    assert record.result.content == "streaming"


# Cancels acknowledged while the job's worker is dead, or before its worker hears of them
# (issue 23, item 1): no provider call or tool call starts after the acknowledgement, in any
# process, and the job ends cancelled with its journal closed as a cut run's is.


async def _cancelled_while_dead(
    store: RunStore, clock: Callable[[], float] = trio.current_time
) -> tuple[str, JobRecord, list[str | None], ScriptedProvider]:
    """A job whose worker dies mid-tool (an idempotent one: a continuation would run it
    again), cancelled from elsewhere while nobody holds it, then taken over."""
    charged: list[str | None] = []
    started = trio.Event()
    provider = ScriptedProvider(Reply(calls=[call("c1", "charge", cents=500)]), Reply("Done."))
    registry = AgentRegistry()
    registry.add(
        "billing", provider, tools=[_charging(idempotent=True, log=charged, started=started)]
    )
    async with open_runtime() as runtime:
        async with worker(store, registry, runtime, clock=clock) as first:
            id = await first.enqueue(AgentJob.ask("billing", "Charge."))
            await started.wait()
        # The worker is gone; the cancel is acknowledged as a request (the job still runs,
        # held by the dead worker's lease).
        acknowledged, changed = await cancel_job(store, id, clock=clock)
        assert changed
        assert acknowledged.status is JobStatus.RUNNING
        assert acknowledged.cancel_requested
        if isinstance(clock, LeaseClock):
            clock.advance(LEASE + 1)
        async with worker(store, registry, runtime, clock=clock) as other:
            with pytest.raises(JobError) as raised:
                await other.result(id)
            statistics = other.statistics()
    assert statistics["cancelled"] == 1
    assert statistics["completed"] == 0
    return id, raised.value.record, charged, provider


async def _check_closed_as_cut(
    store: RunStore, id: str, record: JobRecord, charged: list[str | None], provider: Any
) -> None:
    assert record.status is JobStatus.CANCELLED
    assert (record.takeovers, record.cancel_requested) == (1, True)
    # No second provider call, and the idempotent call was not run again.
    assert len(provider.calls) == 1
    assert len(charged) == 1
    entries = await store.journal(id)
    made = replay(id, entries)
    assert made.open == ()  # the open call was answered: interrupted, its effect unknown
    (answered,) = [e.result for e in entries if isinstance(e, ResultEntry)]
    assert answered.render().endswith(UNKNOWN_EFFECT)
    assert sum(isinstance(e, IntentEntry) for e in entries) == 1
    assert [e.kind for e in entries].count("request") == 1
    assert made.terminal is not None
    assert made.terminal.result is not None
    assert made.terminal.result.stop is StopReason.CANCELLED
    assert record.result is not None
    assert record.result.partial
    assert [m.role for m in record.result.messages] == [Role.ASSISTANT, Role.TOOL]


async def test_a_cancel_acknowledged_while_the_worker_is_dead_is_honoured_by_the_takeover(
    autojump_clock: Any,
) -> None:
    store = MemoryRunStore()
    id, record, charged, provider = await _cancelled_while_dead(store)
    await _check_closed_as_cut(store, id, record, charged, provider)


async def test_a_cancel_acknowledged_while_the_worker_is_dead_on_sqlite(
    tmp_path: pathlib.Path,
) -> None:
    async with await SQLiteRunStore.open(tmp_path / "jobs.db") as store:
        id, record, charged, provider = await _cancelled_while_dead(store, LeaseClock())
        await _check_closed_as_cut(store, id, record, charged, provider)


async def test_a_takeover_of_a_cancelled_job_keeps_what_was_streamed_as_its_partial(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(Hang("half a sentence"), Reply("a whole new answer"))
    registry = AgentRegistry()
    registry.add("talker", provider)
    store = MemoryRunStore()
    async with open_runtime() as runtime:
        async with worker(store, registry, runtime) as first:
            id = await first.enqueue(AgentJob.ask("talker", "hi"))
            await until(store, id, JobStatus.RUNNING)
            await trio.sleep(1)  # streaming, then the worker dies
        await cancel_job(store, id, clock=trio.current_time)
        async with worker(store, registry, runtime) as other:
            with pytest.raises(JobError) as raised:
                await other.result(id)
    record = raised.value.record
    assert record.status is JobStatus.CANCELLED
    assert len(provider.calls) == 1
    assert record.result is not None
    assert (record.result.content, record.result.stop) == ("half a sentence", "cancelled")
    made = replay(id, await store.journal(id))
    assert made.messages[-1].content == "half a sentence"
    assert made.messages[-1].interrupted
    assert made.terminal is not None


async def test_a_job_answered_before_its_cancel_still_ends_cancelled_with_its_answer(
    autojump_clock: Any,
) -> None:
    # A worker died after journaling the final answer and before ending the job (its journal
    # is written here as it left it); the cancel came in between. An acknowledged cancel is
    # final: the job ends cancelled (never completed with the cancel requested), the answer
    # kept, and no provider call is made.
    provider = ScriptedProvider(Reply("asked again"))
    registry = AgentRegistry()
    registry.add("echo", provider)
    store = MemoryRunStore()
    now = trio.current_time()
    id = (await store.admit(AgentJob.ask("echo", "hi"), now=now)).record.id
    dead = await store.acquire(owner="dead", lease=LEASE, now=now)
    assert dead is not None
    assert dead.lease is not None
    answer = Message.assistant("the answer")
    opening = [InputEntry((Message.user("hi"),)), RequestEntry(1), ResponseEntry(answer)]
    await store.append(id, dead.lease, opening)
    await cancel_job(store, id, clock=trio.current_time)
    async with worker(store, registry) as other:
        with pytest.raises(JobError) as raised:
            await other.result(id)
    record = raised.value.record
    assert record.status is JobStatus.CANCELLED
    assert record.takeovers == 1
    assert record.result is not None
    assert record.result.content == "the answer"
    assert provider.calls == []


async def test_a_cancel_the_worker_has_not_heard_of_stops_the_next_provider_call(
    tmp_path: pathlib.Path,
) -> None:
    # SQLite tells no other process of a change: the cancel below, made through another
    # connection (another process), reaches the worker's lease keeper only at its next
    # renewal, ten seconds away. The worker still starts no provider call after it: the
    # barrier before the call is refused in the store.
    wait_here, running, release = held()
    provider = ScriptedProvider(Reply(calls=[call("c1", "wait_here")]), Reply("second call"))
    registry = AgentRegistry()
    registry.add("waiter", provider, tools=[wait_here])
    clock = LeaseClock()
    path = tmp_path / "jobs.db"
    async with (
        await SQLiteRunStore.open(path) as store,
        await SQLiteRunStore.open(path) as elsewhere,
    ):
        async with worker(store, registry, clock=clock) as queue:
            id = await queue.enqueue(AgentJob.ask("waiter", "Go."))
            await running.wait()
            await cancel_job(elsewhere, id, clock=clock)
            release.set()
            with pytest.raises(JobError) as raised:
                await queue.result(id)
        made = replay(id, await store.journal(id))
    record = raised.value.record
    assert record.status is JobStatus.CANCELLED
    assert len(provider.calls) == 1  # the second call never started
    assert made.messages[-1].role is Role.TOOL  # the call's result, then nothing
    assert made.messages[-1].content == "released"
    assert made.terminal is not None


async def test_a_cancel_the_worker_has_not_heard_of_stops_the_next_tool_call(
    tmp_path: pathlib.Path,
) -> None:
    # As above, between two calls of one batch run one at a time (in whichever order): the
    # intent of the call that had not started is refused in the store, and its effect never
    # starts.
    release = trio.Event()
    running = trio.Event()
    effects: list[str] = []

    @tool
    async def step(ctx: RunContext[None]) -> str:
        """An effect."""
        effects.append(ctx.call_id)
        running.set()
        await release.wait()
        return f"{ctx.call_id} done"

    provider = ScriptedProvider(Reply(calls=[call("c1", "step"), call("c2", "step")]), "never")
    registry = AgentRegistry()
    registry.add("pair", provider, tools=[step], tool_concurrency=1)
    clock = LeaseClock()
    path = tmp_path / "jobs.db"
    async with (
        await SQLiteRunStore.open(path) as store,
        await SQLiteRunStore.open(path) as elsewhere,
    ):
        async with worker(store, registry, clock=clock) as queue:
            id = await queue.enqueue(AgentJob.ask("pair", "Go."))
            await running.wait()
            await cancel_job(elsewhere, id, clock=clock)
            release.set()
            with pytest.raises(JobError) as raised:
                await queue.result(id)
        entries = await store.journal(id)
    assert raised.value.record.status is JobStatus.CANCELLED
    assert len(effects) == 1
    (ran,) = effects
    (other,) = {"c1", "c2"} - {ran}
    assert len(provider.calls) == 1
    assert [e.call.id for e in entries if isinstance(e, IntentEntry)] == [ran]
    results = {e.result.id: e.result.render() for e in entries if isinstance(e, ResultEntry)}
    assert results[ran] == f"{ran} done"
    assert results[other].endswith(CANCELLED_CALL)
    assert replay(id, entries).open == ()


async def test_cancel_of_an_ended_job_leaves_it(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("done"))
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("echo", "hi"))
        await queue.result(id)
        before = await queue.record(id)
        after = await queue.cancel(id)
        result = await queue.result(id)
    assert before is not None
    assert after == before
    assert after.status is JobStatus.COMPLETED
    assert result.content == "done"


# ---------------------------------------------------------------------------------------------
# Purge


async def test_purge_refuses_a_job_that_has_not_ended(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("slow", ScriptedProvider(Hang()))
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("slow", "hi"))
        await until(store, id, JobStatus.RUNNING)
        with pytest.raises(ValidationError, match="not ended"):
            await queue.purge(id)
        with pytest.raises(ValidationError, match="no job"):
            await queue.purge("nope")
        assert await store.get(id) is not None
        await queue.cancel(id)
        await until(store, id, JobStatus.CANCELLED)
        await queue.purge(id)
    assert await store.get(id) is None


async def test_purge_removes_the_record_and_journal_and_leaves_a_tombstone(
    autojump_clock: Any,
) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("done"))
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("echo", "hi"), key="k")
        await queue.result(id)
        assert await store.journal(id) != []
        await queue.purge(id)
        assert await queue.record(id) is None
        with pytest.raises(ValidationError):
            await queue.result(id)
    assert await store.journal(id) == []
    assert await store.find("k") is None
    stone = await store.purged(id)
    assert stone is not None
    assert stone.id == id
    assert stone.key == "k"


# ---------------------------------------------------------------------------------------------
# Statistics


async def test_statistics_count_what_the_worker_did(autojump_clock: Any) -> None:
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider("a", "b"))
    registry.add("broken", ScriptedProvider(Fail()))
    registry.add("flaky", ScriptedProvider(_retryable(), "c"))
    registry.add("slow", ScriptedProvider(Hang()))
    registry.add("looper", _exhausting().get("looper").provider, tools=[lookup])
    store = MemoryRunStore()
    async with worker(store, registry, allow_partial=True) as queue:
        assert queue.statistics() == {
            "acquired": 0,
            "completed": 0,
            "partial": 0,
            "failed": 0,
            "cancelled": 0,
            "abandoned": 0,
            "retried": 0,
            "dropped": 0,
            "suspended": 0,
            "store_errors": 0,
            "running": 0,
        }
        ended = [
            await queue.enqueue(job)
            for job in (
                AgentJob.ask("echo", "1"),
                AgentJob.ask("echo", "2"),
                AgentJob.ask("flaky", "3"),
                AgentJob.ask("looper", "4", limit=1),
            )
        ]
        for id in ended:
            await queue.result(id)
        failing = await queue.enqueue(AgentJob.ask("broken", "x"))
        with pytest.raises(JobError):
            await queue.result(failing)
        # (A result comes as soon as the end commits; the worker then closes the job's agent.)
        await queue.wait_idle()
        slow = await queue.enqueue(AgentJob.ask("slow", "x"))
        await until(store, slow, JobStatus.RUNNING)
        assert queue.statistics()["running"] == 1
        await queue.cancel(slow)
        with pytest.raises(JobError):
            await queue.result(slow)
        await queue.wait_idle()
        statistics = queue.statistics()
    assert statistics == {
        "acquired": 7,  # the flaky job twice
        "completed": 3,
        "partial": 1,
        "failed": 1,
        "cancelled": 1,
        "abandoned": 0,
        "retried": 1,
        "dropped": 0,
        "suspended": 0,
        "store_errors": 0,
        "running": 0,
    }


# ---------------------------------------------------------------------------------------------
# Batches: results in order, declared then spawned; fail-fast


async def test_a_batch_gives_the_declared_results_then_the_spawned_ones_in_order(
    autojump_clock: Any,
) -> None:
    registry = AgentRegistry()
    registry.add("lead", ScriptedProvider("lead one", "lead two"))
    # The later-declared jobs finish first: the order is the batch's, not the finishing one.
    registry.add("north", ScriptedProvider(Reply("north", delay=5)))
    registry.add("south", ScriptedProvider(Reply("south", delay=1)))
    registry.add("east", ScriptedProvider(Reply("east", delay=2)))
    store = MemoryRunStore()
    jobs = [
        AgentJob.ask(
            "lead", "A.", children=[AgentJob.ask("north", "n"), AgentJob.ask("south", "s")]
        ),
        AgentJob.ask("lead", "B.", children=[AgentJob.ask("east", "e")]),
    ]
    async with worker(store, registry, concurrency=4) as queue:
        results = await queue.run(jobs)
    assert sorted(r.content for r in results[:2]) == ["lead one", "lead two"]
    assert [r.content for r in results[2:]] == ["north", "south", "east"]
    assert [r.agent for r in results] == ["lead", "lead", "north", "south", "east"]
    # Every job of the batch is a durable job of its own, ended.
    records = await store.list(limit=100)
    assert len(records) == 5
    assert all(r.status is JobStatus.COMPLETED for r in records)


async def test_a_batch_fails_fast_and_cancels_the_declared_jobs_not_ended(
    autojump_clock: Any,
) -> None:
    registry = AgentRegistry()
    registry.add("bad", ScriptedProvider(Fail()))
    slow = ScriptedProvider(Hang())
    registry.add("slow", slow)
    store = MemoryRunStore()
    async with worker(store, registry, concurrency=4, retries=0) as queue:
        with pytest.raises(JobError) as raised:
            await queue.run([AgentJob.ask("bad", "x"), AgentJob.ask("slow", "y")])
        assert raised.value.record.status is JobStatus.FAILED
        records = {r.job.agent: r for r in await store.list(limit=100)}
        with pytest.raises(JobError) as cancelled:
            await queue.result(records["slow"].id)
    assert cancelled.value.record.status is JobStatus.CANCELLED


async def test_a_batch_refuses_what_is_not_a_job(autojump_clock: Any) -> None:
    store = MemoryRunStore()
    async with worker(store, AgentRegistry()) as queue:
        with pytest.raises(ValidationError):
            await queue.run(["not a job"])  # type: ignore[list-item]
    assert await store.list() == []


# ---------------------------------------------------------------------------------------------
# Barriers: each boundary is in the store before it is crossed


async def test_the_intent_and_the_response_are_in_the_store_before_the_effect(
    autojump_clock: Any,
) -> None:
    store = MemoryRunStore()
    seen: dict[str, list[str]] = {}
    ids: list[str] = []

    async def kinds() -> list[str]:
        return [entry.kind for entry in await store.journal(ids[0])]

    @tool
    async def effect() -> str:
        """An effect."""
        seen["effect"] = await kinds()
        return "done"

    provider = ScriptedProvider(Reply(calls=[call("c1", "effect")]), Reply("Finished."))
    registry = AgentRegistry()
    registry.add("worker", provider, tools=[effect])
    async with worker(store, registry) as queue:
        ids.append(await queue.enqueue(AgentJob.ask("worker", "Go.")))
        result = await queue.result(ids[0])
    assert result.content == "Finished."
    # When the effect ran, the response that made the call and the call's intent were written.
    assert seen["effect"] == ["input", "request", "response", "intent"]
    assert await kinds() == ONE_CALL_JOURNAL
