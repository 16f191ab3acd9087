"""Property (issue 25, section 4): followers that disconnect at random points and resume with
their last seq see every event exactly once, in order, and the terminal event exactly once.

* In memory (``runtime.watch``): random agent runs -- turns that think, stream text in pieces,
  call a tool that reports progress and naps, then answer, fail or hang -- cut at random or
  not, followed by several followers, each leaving after a random number of events or at a
  random moment (parked waiting for the next event, or between two), pausing, and coming back
  with ``after=`` its last seq. Every follower's events are the run's log, whole, in order,
  each once, ending with its one terminal event; and the caller's own stream shows each chunk
  under the seq the log has it. Everything runs on a ``MockClock`` (``autojump_threshold=0``).
* Durable (``queue.watch`` / ``watch_job``, on a SQLite file and on PostgreSQL, in this
  process): a job streams a random answer on a first worker, which leaves at a random point
  (as a crash leaves it: the job held, its lease running), and a second worker takes it over
  once the lease lapsed. Its followers leave and come back as above: they see the journal's
  events exactly once, in order, the ``rewind`` of the takeover, and the terminal once -- the
  same events under the same seqs as a follower that reads the whole journal afterwards.
  (The kill -9 of a worker process is ``tests/actors/durable/test_live_crash.py``.)
"""

from __future__ import annotations

import contextlib
import json
import math
import pathlib
import random
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_server import drop_schemas, new_schema, postgres_url

from actors import Agent, RunContext, open_runtime, tool
from actors._live import LiveRuns
from actors.agent import Chunk
from actors.durable import (
    AgentRegistry,
    MemoryRunStore,
    PostgresRunStore,
    RunStore,
    SQLiteRunStore,
    open_job_queue,
    watch_job,
)
from actors.durable._ops import cancel_job, submit_job
from actors.providers import ProviderStream, StreamingProvider
from actors.store import StoreError
from actors.testing import Fail, Hang, Reply, ScriptedProvider
from protocols.authority import Authority, Rule
from protocols.errors import ProviderError, ValidationError
from protocols.jobs import AgentJob, AttemptEntry, JobStatus, StreamEntry
from protocols.live import TERMINAL, RunEvent, event_from_json, event_to_json
from protocols.messages import (
    Message,
    ProviderOptions,
    Role,
    ToolCall,
    ToolDefinition,
)


@tool
async def nap(seconds: float, tag: str, ctx: RunContext[None]) -> str:
    """Sleep a while, saying so first."""
    ctx.progress(f"napping {tag}")
    await trio.sleep(seconds)
    return f"rested {tag}"


# -- followers -------------------------------------------------------------------------------------


@attrs.frozen
class Leave:
    """A follower leaves after ``events`` more events, or ``seconds`` after it came (whichever
    is first; ``None``: not that way), then stays away ``away`` seconds."""

    events: int | None
    seconds: float | None
    away: float


LEAVES = st.builds(
    Leave,
    events=st.none() | st.integers(0, 6),
    seconds=st.none() | st.sampled_from([0.0, 0.005, 0.02, 0.1, 0.5]),
    away=st.sampled_from([0.0, 0.001, 0.03, 0.2]),
)
#: Per follower: when it first comes, and how it leaves, time after time.
FOLLOWERS = st.lists(
    st.tuples(st.sampled_from([0.0, 0.01, 0.1, 1.0]), st.lists(LEAVES, max_size=8)),
    min_size=1,
    max_size=4,
)

Watch = Callable[[int], Any]  # after -> an async iterator of RunEvent


@attrs.define
class Follower:
    """What one follower saw, and how often it came back."""

    events: list[RunEvent] = attrs.field(factory=list)
    visits: int = 0


async def follow(watch: Watch, start: float, leaves: list[Leave], seen: Follower) -> None:
    """Follow a run to its terminal event, leaving and coming back as ``leaves`` say (then
    staying to the end), resuming each time after the last seq it saw."""
    await trio.sleep(start)
    plans = list(leaves)
    while True:
        plan = plans.pop(0) if plans else Leave(None, None, 0.0)
        seen.visits += 1
        position = seen.events[-1].seq if seen.events else 0
        events = watch(position)
        count = 0
        with trio.CancelScope() as scope:
            if plan.seconds is not None:
                scope.deadline = trio.current_time() + plan.seconds
            async for event in events:
                seen.events.append(event)
                if event.terminal:
                    return
                count += 1
                if plan.events is not None and count >= plan.events:
                    break
            else:
                if not scope.cancel_called:
                    raise AssertionError("a stream ended without its terminal event")
        await trio.sleep(plan.away)


def check_followers(log: list[RunEvent], followers: list[Follower]) -> None:
    """Each follower saw the whole log, each event once, in order; the terminal once, last."""
    assert log, "the run has events"
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    assert [event.kind in TERMINAL for event in log] == [False] * (len(log) - 1) + [True]
    for seen in followers:
        assert [event.seq for event in seen.events] == [event.seq for event in log]
        assert seen.events == log  # the same content under each seq, for every follower
        assert sum(event.terminal for event in seen.events) == 1


# -- in memory -------------------------------------------------------------------------------------

TEXT = st.text(alphabet="abcdefgh xyz.", min_size=0, max_size=24)
DELAYS = st.sampled_from([0.0, 0.001, 0.01, 0.05])


@st.composite
def scripts(draw: st.DrawFn) -> tuple[list[Reply | Fail | Hang], float | None]:
    """A run's provider replies -- tool turns, then an answer, a failure or a hang -- and when
    the caller cuts it (``None``: never)."""
    steps: list[Reply | Fail | Hang] = []
    for turn in range(draw(st.integers(0, 2))):
        calls = [
            ToolCall(f"nap-{turn}-{i}", "nap", {"seconds": draw(DELAYS), "tag": f"{turn}.{i}"})
            for i in range(draw(st.integers(1, 2)))
        ]
        steps.append(
            Reply(
                thinking=draw(TEXT),
                text=draw(TEXT),
                calls=calls,
                chunk=draw(st.integers(1, 4)),
                delay=draw(DELAYS),
            )
        )
    ending = draw(st.sampled_from(["answer", "answer", "fail", "hang"]))
    if ending == "answer":
        steps.append(
            Reply(
                thinking=draw(TEXT),
                text=draw(TEXT),
                chunk=draw(st.integers(1, 5)),
                delay=draw(DELAYS),
            )
        )
    elif ending == "fail":
        error = ProviderError("it broke", code="scripted", retryable=False)
        steps.append(Fail(error, delay=draw(DELAYS)))
    else:
        steps.append(Hang(draw(TEXT)))
    cut = draw(st.sampled_from([None, None, None, 0.0, 0.003, 0.02, 0.1, 0.4]))
    if ending == "hang" and cut is None:
        cut = 1.0
    return steps, cut


async def run_in_memory(
    steps: list[Reply | Fail | Hang],
    cut: float | None,
    plans: list[tuple[float, list[Leave]]],
) -> None:
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, ScriptedProvider(*steps), tools=[nap], name="lively")
        chunks: list[Chunk] = []
        followers = [Follower() for _ in plans]
        run = agent.stream("go")

        async def drive() -> None:
            with contextlib.suppress(ProviderError):
                async with run:
                    async for chunk in run:
                        chunks.append(chunk)

        async def cutter() -> None:
            assert cut is not None
            await trio.sleep(cut)
            run.abort("cut by the test")

        async def follower(start: float, leaves: list[Leave], seen: Follower) -> None:
            # The run's log is registered once the run is asked for (the driver's first step).
            while runtime.live.get(run.run_id) is None:  # noqa: ASYNC110 - nothing to wait on
                await trio.sleep(0.0005)

            def watch(after: int) -> Any:
                return runtime.watch(run.run_id, after=after)

            await follow(watch, start, leaves, seen)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            if cut is not None:
                nursery.start_soon(cutter)
            for (start, leaves), seen in zip(plans, followers, strict=True):
                nursery.start_soon(follower, start, leaves, seen)

        log = [event async for event in runtime.watch(run.run_id)]
        check_followers(log, followers)
        # Resuming after the terminal (or past the end) is an empty stream, never a hang.
        assert [event async for event in runtime.watch(run.run_id, after=len(log))] == []
        assert [event async for event in runtime.watch(run.run_id, after=len(log) + 5)] == []
        # The caller's chunks are the log's events, under the seqs it gives them.
        by_seq = {event.seq: event for event in log}
        for chunk in chunks:
            if chunk.kind == "usage":
                continue
            event = by_seq[chunk.seq]
            assert event.kind == chunk.kind
            if chunk.kind in ("content", "thinking"):
                assert event.data == {"text": chunk.text}
            elif chunk.kind == "tool_call":
                assert event.data == {"call": chunk.call}
            elif chunk.kind == "tool_result":
                assert event.data == {"result": chunk.result}
        shown = [c.seq for c in chunks if c.kind != "usage"]
        assert shown == sorted(shown)
        # Every event crosses a wire as it is.
        for event in log:
            assert event_from_json(event_to_json(event)) == event
        if log[0].kind != "started":  # withdrawn before it started: its end alone
            assert [event.kind for event in log] == ["cancelled"]
        else:
            assert log[0].data == {"agent": "lively"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts(), plans=FOLLOWERS)
def test_followers_that_leave_and_resume_see_every_in_memory_event_once(
    script: tuple[list[Reply | Fail | Hang], float | None],
    plans: list[tuple[float, list[Leave]]],
) -> None:
    steps, cut = script
    trio.run(run_in_memory, steps, cut, plans, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_a_follower_behind_a_small_log_reads_a_gap_then_the_rest(autojump_clock: Any) -> None:
    async with open_runtime(event_capacity=4) as runtime:
        agent = await Agent.start(
            runtime, ScriptedProvider(Reply("abcdefghijkl", chunk=1, delay=0.01)), name="small"
        )
        run = agent.stream("go")
        async with run:
            first = await run.__anext__()
            async for _ in run:
                pass
        events = [event async for event in runtime.watch(run.run_id, after=first.seq)]
    assert events[0].kind == "gap"
    assert events[0].data == {"first": first.seq + 1}
    assert [event.seq for event in events[1:]] == list(range(events[0].seq + 1, events[-1].seq + 1))
    assert events[-1].kind == "finished"
    assert len(events) == 5


async def test_an_ended_runs_log_is_kept_its_time_and_the_oldest_go_first(
    autojump_clock: Any,
) -> None:
    runs = LiveRuns(keep=10.0, max_ended=2)
    first = runs.open("first")
    first.add("started", {"agent": "a"})
    follower = runs.watch("first")
    first.add("finished", {"result": None})
    runs.end("first")
    running = runs.open("running")  # never ends: never let go
    await trio.sleep(9)
    runs.open("second").add("finished", {"result": None})
    runs.end("second")
    assert runs.get("first") is first  # 9 s after its end: still there
    await trio.sleep(2)
    runs.open("third").add("finished", {"result": None})
    runs.end("third")  # 11 s after the first ended: it goes
    assert runs.get("first") is None
    with pytest.raises(ValidationError, match="no longer kept"):
        runs.watch("first")
    # A follower that had it reads it to its end all the same.
    assert [event.kind async for event in follower] == ["started", "finished"]
    for name in ("fourth", "fifth"):
        runs.open(name).add("finished", {"result": None})
        runs.end(name)
    # At most max_ended ended logs: the oldest went first; the running one stays.
    assert runs.get("second") is None
    assert runs.get("third") is None
    assert runs.get("running") is running
    assert runs.statistics() == {"runs": 3, "ended": 2}
    for bad in ({"keep": -1}, {"keep": True}, {"max_ended": -1}, {"capacity": 0}):
        with pytest.raises(ValidationError):
            LiveRuns(**bad)


async def test_watching_an_unknown_run_is_refused() -> None:
    async with open_runtime() as runtime:
        with pytest.raises(ValidationError, match="no run"):
            runtime.watch("nobody")
        with pytest.raises(ValidationError, match="after"):
            runtime.watch("nobody", after=-1)


# -- durable, in this process ----------------------------------------------------------------------

LEASE = 30.0


class LeaseClock:
    """Leases' clock: moves only when the test says (the store works in threads, so trio's
    autojump clock would lapse leases in the middle of a store call)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Turns(StreamingProvider):
    """Answers turn ``n`` of a job (its ``n``-th settled response) with ``steps[n]``, in any
    worker and any attempt: a turn cut by a worker's leaving is answered the same way again."""

    name = "turns"

    def __init__(self, steps: list[Reply]) -> None:
        self.steps = steps

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        settled = sum(1 for m in messages if m.role is Role.ASSISTANT and not m.interrupted)
        return ScriptedProvider(self.steps[settled]).stream(messages, tools=tools, options=options)


Backend = Literal["sqlite", "postgres"]


@contextlib.asynccontextmanager
async def opened(backend: Backend, directory: pathlib.Path) -> AsyncIterator[Callable[[], Any]]:
    """A function opening a new connection to one fresh store (each worker, and the
    followers, get their own)."""
    if backend == "sqlite":
        path = directory / f"jobs-{random.randrange(10**12)}.db"
        yield lambda: SQLiteRunStore.open(path)
        return
    schema = new_schema()
    try:
        yield lambda: PostgresRunStore.open(postgres_url(), schema=schema)
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


@st.composite
def durable_scripts(draw: st.DrawFn) -> tuple[list[Reply], int]:
    """A job's replies (tool turns with streamed thoughts, then a streamed answer, a delta
    every millisecond), and after how many journal entries its first worker leaves."""
    steps = []
    for turn in range(draw(st.integers(0, 2))):
        calls = [ToolCall(f"nap-{turn}", "nap", {"seconds": 0.0, "tag": str(turn)})]
        steps.append(
            Reply(thinking=draw(TEXT), calls=calls, chunk=draw(st.integers(1, 4)), delay=0.001)
        )
    steps.append(Reply(draw(TEXT), thinking=draw(TEXT), chunk=draw(st.integers(1, 4)), delay=0.001))
    return steps, draw(st.integers(1, 14))


async def run_durable(
    backend: Backend,
    directory: pathlib.Path,
    steps: list[Reply],
    leave_after: int,
    plans: list[tuple[float, list[Leave]]],
) -> None:
    clock = LeaseClock()
    registry = AgentRegistry()
    registry.add("lively", Turns(steps), tools=[nap])
    # On the real clock: the plans' times, a tenth of them.
    plans = [
        (
            start / 10,
            [
                attrs.evolve(leave, seconds=_tenth(leave.seconds), away=leave.away / 10)
                for leave in leaves
            ],
        )
        for start, leaves in plans
    ]
    followers = [Follower() for _ in plans]
    async with opened(backend, directory) as connect, await connect() as watcher:
        with trio.fail_after(60):
            async with open_runtime() as runtime, trio.open_nursery() as nursery:
                async with (
                    await connect() as store,
                    open_job_queue(
                        store, registry, runtime, lease=LEASE, clock=clock, poll=0.05
                    ) as first,
                ):
                    id = await first.enqueue(AgentJob.ask("lively", "go"))

                    def watch(after: int) -> Any:
                        return watch_job(watcher, id, after=after, poll=0.05)

                    for (start, leaves), seen in zip(plans, followers, strict=True):
                        nursery.start_soon(follow, watch, start, leaves, seen)
                    # The first worker leaves once the journal holds `leave_after` entries (or
                    # the job ended): leaving its block cuts its run as a crash would, and the
                    # job stays held until its lease lapses.
                    while True:
                        record = await store.get(id)
                        assert record is not None
                        if record.terminal or len(await store.journal(id)) >= leave_after:
                            break
                        await trio.sleep(0.001)
                clock.now += LEASE + 1
                async with (
                    await connect() as store,
                    open_job_queue(
                        store, registry, runtime, lease=LEASE, clock=clock, poll=0.05
                    ) as second,
                ):
                    await second.result(id)
                # (the followers end by themselves, after the terminal event)
        whole = [event async for event in watch_job(watcher, id)]
        record = await watcher.get(id)
        journal = await watcher.journal(id)
    assert record is not None
    assert record.status is JobStatus.COMPLETED
    # (Each event at its journal entry's append time: the same for every follower, in any
    # process; a journal entry stored before times were would have none, here none is.)
    assert all(math.isfinite(event.time) for event in whole)
    check_followers(whole, followers)
    rewinds = [event for event in whole if event.kind == "rewind"]
    assert len(rewinds) == sum(isinstance(entry, AttemptEntry) for entry in journal)
    # (A takeover of a job whose answer was journaled before its worker left only ends it:
    # no new attempt streams anything, and the journal holds no attempt to rewind for.)
    for rewind in rewinds:
        assert rewind.data == {"to": rewind.seq - 1}
        assert whole[rewind.seq].kind == "takeover"
    streamed = [text for e in journal if isinstance(e, StreamEntry) for channel, text in e.deltas]
    assert [e.data["text"] for e in whole if e.kind in ("content", "thinking")] == streamed
    assert whole[-1].kind == "finished"


def _tenth(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 10


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(script=durable_scripts(), plans=FOLLOWERS)
def test_followers_that_leave_and_resume_see_every_durable_event_once(
    backend: Backend,
    tmp_path: pathlib.Path,
    script: tuple[list[Reply], int],
    plans: list[tuple[float, list[Leave]]],
) -> None:
    steps, leave_after = script
    trio.run(run_durable, backend, tmp_path, steps, leave_after, plans)


# -- a durable job's follower: its edges ----------------------------------------------------------


class Flaky:
    """A real store whose journal and ``get`` fail retryably ``failures`` times in all
    (a database restarting under a follower), then answer as the store does."""

    def __init__(self, store: RunStore, failures: int) -> None:
        self._store = store
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get(self, id: str) -> Any:
        await self._fail()
        return await self._store.get(id)

    async def journal(self, id: str, *, after: int = 0) -> Any:
        await self._fail()
        return await self._store.journal(id, after=after)

    async def timed_journal(self, id: str, *, after: int = 0) -> Any:
        await self._fail()
        return await self._store.timed_journal(id, after=after)

    async def _fail(self) -> None:
        await trio.lowlevel.checkpoint()
        if self.failures:
            self.failures -= 1
            raise StoreError("the connection was lost", code="io", retryable=True)


def _refunding(provider: ScriptedProvider) -> AgentRegistry:
    @tool
    async def refund(cents: int) -> str:
        """Refund the customer."""
        return f"refunded {cents}"

    authority = Authority(rules=(Rule("ask", tools=("refund",), reason="a human decides"),))
    registry = AgentRegistry()
    registry.add("support", provider, tools=[refund], authority=authority)
    return registry


async def test_a_job_waiting_for_approval_ends_a_stream_and_the_next_goes_on_after_it(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("r1", "refund", {"cents": 5})]), Reply("Done.", chunk=2)
    )
    store = MemoryRunStore()
    async with (
        open_runtime() as runtime,
        open_job_queue(store, _refunding(provider), runtime, clock=trio.current_time) as queue,
    ):
        id = await queue.enqueue(AgentJob.ask("support", "Refund."))
        first = [event async for event in queue.watch(id)]
        assert [e.kind for e in first][-2:] == ["approval_requested", "awaiting_input"]
        assert first[-1].data == {
            "calls": [{"call_id": "r1", "tool": "refund", "reason": "a human decides"}]
        }
        # Resumed after it, a follower waits for the answer; then the rest comes.
        async with trio.open_nursery() as nursery:
            rest: list[RunEvent] = []

            async def follow() -> None:
                rest.extend([event async for event in queue.watch(id, after=first[-1].seq)])

            nursery.start_soon(follow)
            await trio.sleep(5)
            assert rest == []
            await queue.answer(id, "r1", True, "fine")
    events = first + rest
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.kind for e in rest]
    assert kinds[:4] == ["rewind", "takeover", "approval_answered", "tool_result"]
    assert rest[0].data == {"to": first[-1].seq}
    assert rest[1].data["reason"] == "answered"
    assert rest[2].data == {"call_id": "r1", "allow": True, "reason": "fine"}
    assert "".join(e.data["text"] for e in rest if e.kind == "content") == "Done."
    assert kinds[-1] == "finished"
    for event in events:
        assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event


async def test_a_job_cancelled_before_it_ran_has_one_event_its_end(autojump_clock: Any) -> None:
    store = MemoryRunStore()
    record, _ = await submit_job(store, AgentJob.ask("nobody", "Hi."))
    await cancel_job(store, record.id)
    events = [event async for event in watch_job(store, record.id)]
    assert [(e.seq, e.kind, dict(e.data)) for e in events] == [(1, "cancelled", {"result": None})]
    assert event_from_json(event_to_json(events[0])).data == {"result": None}
    # After its end, a follower has nothing more to read; a job never admitted is refused.
    assert [event async for event in watch_job(store, record.id, after=1)] == []
    assert [event async for event in watch_job(store, record.id, after=9)] == []
    with pytest.raises(ValidationError, match="no job"):
        await watch_job(store, "nope").__anext__()
    for bad in ({"after": -1}, {"after": True}, {"poll": 0}, {"poll": math.inf}):
        with pytest.raises(ValidationError):
            watch_job(store, record.id, **bad)


async def test_a_follower_rides_out_a_store_it_cannot_reach_for_a_moment(
    autojump_clock: Any,
) -> None:
    store = MemoryRunStore()
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(Reply("hello", chunk=1)))
    async with (
        open_runtime() as runtime,
        open_job_queue(store, registry, runtime, clock=trio.current_time) as queue,
    ):
        id = await queue.enqueue(AgentJob.ask("echo", "Hi."))
        await queue.result(id)
    flaky = Flaky(store, failures=5)
    events = [event async for event in watch_job(flaky, id)]
    assert flaky.failures == 0
    assert [e.kind for e in events][-1] == "finished"
    assert "".join(e.data["text"] for e in events if e.kind == "content") == "hello"
    # A store that stays unreachable: the follower gives up after a while, with its error.
    gone = Flaky(store, failures=10_000)
    start = trio.current_time()
    with pytest.raises(StoreError, match="connection was lost"):
        await watch_job(gone, id).__anext__()
    assert 5 <= trio.current_time() - start <= 15


class Counting:
    """A real store that notes from where each journal read starts."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def timed_journal(self, id: str, *, after: int = 0) -> Any:
        self.reads.append(after)
        return await self._store.timed_journal(id, after=after)


async def test_followers_in_one_process_share_a_jobs_derivation(autojump_clock: Any) -> None:
    store = MemoryRunStore()
    registry = AgentRegistry()
    registry.add("echo", ScriptedProvider(Reply("hello there", chunk=2)))
    async with (
        open_runtime() as runtime,
        open_job_queue(store, registry, runtime, clock=trio.current_time) as queue,
    ):
        id = await queue.enqueue(AgentJob.ask("echo", "Hi."))
        await queue.result(id)
    counting = Counting(store)
    whole = [event async for event in watch_job(counting, id)]
    entries = len(await store.journal(id))
    assert counting.reads == [0]
    # A follower reconnecting in this process reads what the journal gained since (nothing).
    again = [event async for event in watch_job(counting, id, after=3)]
    assert again == whole[3:]
    assert counting.reads == [0, entries]


REGISTRY_OPS = st.lists(
    st.tuples(
        st.sampled_from(["open", "end", "get", "wait"]),
        st.integers(0, 5),  # a run id's number
        st.sampled_from([0.0, 0.5, 3.0, 10.0, 11.0]),  # seconds, for "wait"
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=REGISTRY_OPS, keep=st.sampled_from([0.0, 5.0, 10.0]), most=st.integers(0, 4))
def test_the_registry_keeps_exactly_the_logs_its_limits_say(
    ops: list[tuple[str, int, float]], keep: float, most: int
) -> None:
    # A model of the rule: a running log stays; an ended one stays while it ended less than
    # ``keep`` seconds ago and is among the ``max_ended`` that ended last (counted when a run
    # ends); a log opened again under the same id replaces the one before.
    async def scenario() -> None:
        clock = trio.lowlevel.current_clock()
        runs = LiveRuns(keep=keep, max_ended=most)
        opened: dict[str, object] = {}
        ended: dict[str, float] = {}  # in the order they ended
        for op, number, seconds in ops:
            run_id = f"run{number}"
            now = trio.current_time()
            if op == "open":
                opened[run_id] = runs.open(run_id)
                ended.pop(run_id, None)
            elif op == "end" and run_id in opened and run_id not in ended:
                runs.end(run_id)
                ended[run_id] = now
                while len(ended) > most:
                    del opened[next(iter(ended))]
                    del ended[next(iter(ended))]
            elif op == "wait":
                clock.jump(seconds)  # type: ignore[attr-defined]
            elif op == "get":
                for gone in [name for name, at in ended.items() if at <= now - keep]:
                    del opened[gone]
                    del ended[gone]
                assert runs.get(run_id) is opened.get(run_id)
        now = trio.current_time()
        for gone in [name for name, at in ended.items() if at <= now - keep]:
            del opened[gone]
            del ended[gone]
        for number in range(6):
            assert runs.get(f"run{number}") is opened.get(f"run{number}")

    trio.run(scenario, clock=trio.testing.MockClock())
