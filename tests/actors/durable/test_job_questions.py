"""A durable job's question for the human (the ``ask_user`` tool): journaled before the job
waits (``awaiting_input``, the question in the record), answered from any process with a value
checked against the question (a refused one writes nothing), and continued by any worker, whose
``ask_user`` call returns the recorded answer -- written to the journal before the model reads
it. Over a memory store in trio time, and over a real SQLite file with a second worker."""

from __future__ import annotations

import contextlib
import pathlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from actors import RunContext, Runtime, Unanswered, ask_user, open_runtime, tool
from actors.durable import (
    AgentRegistry,
    JobQueue,
    MemoryRunStore,
    RunStore,
    SQLiteRunStore,
    open_job_queue,
)
from actors.durable._ops import answer_job, cancel_job
from actors.testing import Reply, ScriptedProvider
from protocols.authority import Authority, Rule
from protocols.context import Scope
from protocols.errors import ValidationError
from protocols.jobs import AgentJob, AnswerEntry, AskEntry, JobRecord, JobStatus, replay
from protocols.live import event_from_json, event_to_json
from protocols.messages import Role, ToolCall
from protocols.questions import Question

LEASE = 30.0
SIZE = {"question": "Which size?", "kind": "choice", "options": ["S", "M", "L"]}


class LeaseClock:
    """A lease clock that moves only when told to (the SQLite store works in threads, which
    the autojump clock would jump over)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def worker(
    store: RunStore, registry: AgentRegistry, runtime: Runtime | None = None, **options: Any
) -> AsyncIterator[JobQueue]:
    options.setdefault("lease", LEASE)
    options.setdefault("clock", trio.current_time)
    async with contextlib.AsyncExitStack() as stack:
        if runtime is None:
            runtime = await stack.enter_async_context(open_runtime())
        yield await stack.enter_async_context(
            open_job_queue(store, registry, runtime, rng=random.Random(7), **options)
        )


async def until(store: RunStore, id: str, *statuses: JobStatus, pause: float = 0.05) -> JobRecord:
    for _ in range(10_000):
        record = await store.get(id)
        assert record is not None
        if record.status in statuses:
            return record
        await trio.sleep(pause)
    raise AssertionError(f"job {id} never reached {statuses}")


def tool_texts(provider: ScriptedProvider, call: int) -> dict[str, str]:
    return {
        m.tool_call_id or "": m.content
        for m in provider.calls[call].messages
        if m.role is Role.TOOL
    }


def _shop(provider: ScriptedProvider, log: list[str]) -> AgentRegistry:
    @tool
    async def note(text: str) -> str:
        """Note something down."""
        log.append(f"note {text}")
        return "noted"

    registry = AgentRegistry()
    registry.add("shop", provider, tools=[ask_user, note])
    return registry


def _asks(*extra: ToolCall) -> Reply:
    return Reply(
        calls=[ToolCall("n1", "note", {"text": "asked"}), ToolCall("q1", "ask_user", SIZE), *extra]
    )


async def test_a_question_suspends_the_job_until_a_checked_answer_continues_it(
    autojump_clock: Any,
) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_asks(), Reply("Size M it is."))
    store = MemoryRunStore()
    async with worker(store, _shop(provider, log)) as queue:
        id = await queue.enqueue(AgentJob.ask("shop", "Buy a shirt."))
        record = await until(store, id, JobStatus.AWAITING_INPUT)
        [pending] = record.pending
        assert (pending.call_id, pending.tool, pending.reason) == ("q1", "ask_user", "Which size?")
        assert pending.question == Question("Which size?", kind="choice", options=("S", "M", "L"))
        assert log == []  # the question fences its batch, as an approval does
        # The question was journaled before the job waited.
        asked = [e for e in await store.journal(id) if isinstance(e, AskEntry)]
        assert [(e.calls, e.questions) for e in asked] == [(("q1",), {"q1": pending.question})]
        # A refused answer writes nothing, and says why.
        for wrong in ("XL", None, ["M"], 2):
            with pytest.raises(ValidationError, match="answer refused"):
                await queue.answer(id, "q1", True, value=wrong)
        with pytest.raises(ValidationError, match="does not wait for call"):
            await queue.answer(id, "zz", True, value="M")
        unchanged = await store.get(id)
        assert unchanged is not None
        assert unchanged.revision == record.revision
        answered = await queue.answer(id, "q1", True, value="M")
        assert answered.status is JobStatus.QUEUED
        # The same answer again is accepted; a different one is not.
        await queue.answer(id, "q1", True, value="M")
        result = await queue.result(id)
    assert result.content == "Size M it is."
    assert log == ["note asked"]
    assert tool_texts(provider, 1) == {"n1": "noted", "q1": "M"}
    assert len(provider.calls) == 2
    # The answer is journaled (with the continued attempt) before the call's result.
    entries = await store.journal(id)
    kinds = [e.kind for e in entries]
    answer_at = next(i for i, e in enumerate(entries) if isinstance(e, AnswerEntry))
    assert entries[answer_at] == AnswerEntry("q1", True, "", "M")
    result_at = max(
        i
        for i, e in enumerate(entries)
        if e.kind == "result" and e.result.id == "q1"  # type: ignore[union-attr]
    )
    assert answer_at < result_at
    assert kinds[-1] == "terminal"
    made = replay(id, entries[: answer_at + 1])
    assert made.answers["q1"].value == "M"


async def test_a_declined_question_is_read_by_the_model_as_not_answered(
    autojump_clock: Any,
) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_asks(), Reply("I will pick for you."))
    store = MemoryRunStore()
    async with worker(store, _shop(provider, log)) as queue:
        id = await queue.enqueue(AgentJob.ask("shop", "Buy a shirt."))
        await until(store, id, JobStatus.AWAITING_INPUT)
        with pytest.raises(ValidationError, match="declines carries no value"):
            await queue.answer(id, "q1", False, "busy", value="M")
        await queue.answer(id, "q1", False, "the customer is busy")
        result = await queue.result(id)
    assert result.content == "I will pick for you."
    assert tool_texts(provider, 1)["q1"] == "not answered: the customer is busy"


async def test_questions_and_approvals_wait_together(autojump_clock: Any) -> None:
    @tool
    async def refund(cents: int) -> str:
        """Refund."""
        return f"refunded {cents}"

    provider = ScriptedProvider(
        Reply(
            calls=[
                ToolCall("r1", "refund", {"cents": 5}),
                ToolCall("q1", "ask_user", {"question": "How many?", "kind": "number", "max": 3}),
            ]
        ),
        Reply("Done."),
    )
    registry = AgentRegistry()
    registry.add(
        "mixed",
        provider,
        tools=[refund, ask_user],
        authority=Authority(rules=(Rule("ask", tools=("refund",), reason="needs a human"),)),
    )
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("mixed", "Go."))
        record = await until(store, id, JobStatus.AWAITING_INPUT)
        assert [(p.call_id, p.question is not None) for p in record.pending] == [
            ("r1", False),
            ("q1", True),
        ]
        with pytest.raises(ValidationError, match="asks for an approval, not an answer"):
            await queue.answer(id, "r1", True, value=2)
        with pytest.raises(ValidationError, match="above 3"):
            await queue.answer(id, "q1", True, value=4)
        await queue.answer(id, "q1", True, value=2)
        await trio.sleep(5)
        waiting = await store.get(id)
        assert waiting is not None
        assert waiting.status is JobStatus.AWAITING_INPUT
        await queue.answer(id, "r1", True)
        result = await queue.result(id)
    assert result.content == "Done."
    assert tool_texts(provider, 1) == {"r1": "refunded 5", "q1": "2"}


async def test_the_jobs_log_shows_the_question_and_its_answer(autojump_clock: Any) -> None:
    provider = ScriptedProvider(_asks(), Reply("ok"))
    store = MemoryRunStore()
    async with worker(store, _shop(provider, [])) as queue:
        id = await queue.enqueue(AgentJob.ask("shop", "Buy a shirt."))
        await until(store, id, JobStatus.AWAITING_INPUT)
        await queue.answer(id, "q1", True, value="L")
        await queue.result(id)
        events = [event async for event in queue.watch(id)]  # until it waited
        assert events[-1].kind == "awaiting_input"
        events += [event async for event in queue.watch(id, after=events[-1].seq)]
        assert events[-1].kind == "finished"
    requested = next(e for e in events if e.kind == "approval_requested")
    assert requested.data["question"] == {
        "prompt": "Which size?",
        "kind": "choice",
        "options": ["S", "M", "L"],
    }
    waited = next(e for e in events if e.kind == "awaiting_input")
    assert waited.data["calls"][0]["question"]["prompt"] == "Which size?"
    answered = next(e for e in events if e.kind == "approval_answered")
    assert dict(answered.data) == {"call_id": "q1", "allow": True, "reason": "", "answer": "L"}
    for event in (requested, waited, answered):
        assert event_from_json(event_to_json(event)) == event


async def test_a_cancelled_job_cancels_its_open_question(autojump_clock: Any) -> None:
    provider = ScriptedProvider(_asks())
    store = MemoryRunStore()
    async with worker(store, _shop(provider, [])) as queue:
        id = await queue.enqueue(AgentJob.ask("shop", "Buy a shirt."))
        await until(store, id, JobStatus.AWAITING_INPUT)
        record, changed = await cancel_job(store, id)
        assert changed
        assert record.status is JobStatus.CANCELLED
        # Nobody can answer it any more.
        with pytest.raises(ValidationError, match="not awaiting input"):
            await queue.answer(id, "q1", True, value="M")
    assert len(provider.calls) == 1


async def test_a_question_answered_from_another_connection_is_continued_by_a_new_worker(
    tmp_path: pathlib.Path,
) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_asks(), Reply("Size S."))
    registry = _shop(provider, log)
    path = tmp_path / "jobs.db"
    clock = LeaseClock()
    async with (
        await SQLiteRunStore.open(path) as first_store,
        worker(first_store, registry, clock=clock) as first,
    ):
        id = await first.enqueue(AgentJob.ask("shop", "Buy a shirt."))
        await until(first_store, id, JobStatus.AWAITING_INPUT, pause=0)
    # The first worker is gone. Another connection answers (as `jobs answer` does) ...
    async with await SQLiteRunStore.open(path) as answering:
        with pytest.raises(ValidationError, match="'XL' is not an option"):
            await answer_job(answering, id, "q1", True, value="XL", clock=clock)
        record = await answer_job(answering, id, "q1", True, value="S", clock=clock)
        assert record.status is JobStatus.QUEUED
    # ... and a new worker, on its own connection, continues the job.
    async with (
        await SQLiteRunStore.open(path) as second_store,
        worker(second_store, registry, clock=clock) as second,
    ):
        result = await second.result(id)
    assert result.content == "Size S."
    assert log == ["note asked"]
    assert tool_texts(provider, 1) == {"n1": "noted", "q1": "S"}


async def test_a_question_tool_out_of_scope_asks_nothing_and_is_skipped(
    autojump_clock: Any,
) -> None:
    log: list[str] = []
    provider = ScriptedProvider(_asks(), Reply("ok"))

    @tool
    async def note(text: str) -> str:
        """Note something down."""
        log.append(f"note {text}")
        return "noted"

    registry = AgentRegistry()
    registry.add("shop", provider, tools=[ask_user, note], scope=Scope(tools=["note"]))
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("shop", "Buy a shirt."))
        result = await queue.result(id)
    assert result.content == "ok"
    assert log == ["note asked"]
    texts = tool_texts(provider, 1)
    assert texts["q1"].startswith("skipped: there is no tool named 'ask_user'")
    assert not [e for e in await store.journal(id) if isinstance(e, AskEntry)]


async def test_an_authority_that_asks_about_the_question_tool_waits_once_for_the_answer(
    autojump_clock: Any,
) -> None:
    provider = ScriptedProvider(Reply(calls=[ToolCall("q1", "ask_user", SIZE)]), Reply("ok"))
    registry = AgentRegistry()
    registry.add("shop", provider, tools=[ask_user], authority=Authority(fallback="ask"))
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("shop", "Buy a shirt."))
        record = await until(store, id, JobStatus.AWAITING_INPUT)
        [pending] = record.pending
        assert pending.question is not None  # one question, which is the approval too
        await queue.answer(id, "q1", True, value="L")
        result = await queue.result(id)
        statistics = queue.statistics()
    assert result.content == "ok"
    assert tool_texts(provider, 1) == {"q1": "L"}
    assert statistics["suspended"] == 1


async def test_run_context_ask_in_a_durable_job_is_refused_with_a_pointer(
    autojump_clock: Any,
) -> None:
    @tool
    async def book(ctx: RunContext[None]) -> str:
        """Book."""
        try:
            await ctx.ask(Question("Where?"))
        except Unanswered as error:
            return f"booked nothing: {error.reason}"
        return "booked"

    provider = ScriptedProvider(Reply(calls=[ToolCall("b1", "book", {})]), Reply("ok"))
    registry = AgentRegistry()
    registry.add("trips", provider, tools=[book])
    store = MemoryRunStore()
    async with worker(store, registry) as queue:
        id = await queue.enqueue(AgentJob.ask("trips", "Book."))
        result = await queue.result(id)
    assert result.content == "ok"
    assert tool_texts(provider, 1)["b1"] == (
        "booked nothing: a tool of a durable job cannot stop to ask mid-call: give the agent "
        "the ask_user tool instead"
    )
