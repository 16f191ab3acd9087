"""The store journal under cancellation: what a run hands it is written or still buffered,
whatever is cancelled and when -- never taken from the buffer and dropped."""

from __future__ import annotations

import pathlib
import random
from collections.abc import AsyncIterator

import pytest
import trio
from run_store_helpers import KINDS, LEASE, T0, open_backend

from actors.durable import RunStore, StoreJournal
from protocols import jobs as J
from protocols.messages import Message, ToolCall

pytestmark = pytest.mark.trio


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> AsyncIterator[RunStore]:
    async with open_backend(request.param, tmp_path) as backend:
        yield backend.store


async def test_a_barrier_cancelled_while_it_waits_loses_nothing_buffered(store: RunStore) -> None:
    # Found failing once: an intent's write (a barrier: it writes what is buffered before it)
    # cancelled while its append waited its turn in the store lost the buffered input and
    # response -- taken from the buffer, never written. Property: journals written at once by
    # several runs, each barrier cancelled at a random moment, each journal then closed: every
    # journal begins with its input and response, then at most the intent.
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    runs = 8
    for round in range(10):
        journals: list[StoreJournal] = []
        for n in range(runs):
            await store.admit(J.AgentJob.ask("a", f"{round}-{n}"), now=T0)
            record = await store.acquire(owner="w", lease=LEASE, now=T0)
            assert record is not None
            assert record.lease is not None
            journals.append(StoreJournal(store, record.id, record.lease, cut=lambda why: None))
        scopes = [trio.CancelScope() for _ in journals]

        async def run(journal: StoreJournal, scope: trio.CancelScope, n: int) -> None:
            await journal.input([Message.user(f"question {n}")])
            call = ToolCall(f"call-{n}", "pay", {"n": n})
            await journal.response(Message.assistant("", calls=(call,)), None)
            with scope:
                await journal.intent(call)

        async with trio.open_nursery() as nursery:
            for n, journal in enumerate(journals):
                nursery.start_soon(run, journal, scopes[n], n)
            for _ in range(rng.randrange(0, 20)):
                await trio.lowlevel.checkpoint()
            for scope in rng.sample(scopes, runs // 2):
                scope.cancel()
        for journal in journals:
            await journal.close()
        for n, journal in enumerate(journals):
            kinds = [entry.kind for entry in await store.journal(journal.job)]
            assert kinds in (["input", "response"], ["input", "response", "intent"]), (
                f"seed {seed}, round {round}, run {n}: {kinds}"
            )
