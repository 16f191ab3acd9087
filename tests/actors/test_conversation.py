"""The Conversation actor and the ConversationManager: serialised changes, compaction through an
injected summarizer, events, the window check, and the store seam."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from actors import ActorStopped, SQLiteConversationStore, open_runtime
from actors.conversation import (
    CompactionError,
    Conversation,
    ConversationEvent,
    ConversationManager,
    summarizer_for,
)
from actors.testing import Fail, Reply, ScriptedProvider
from protocols.errors import ProviderError, ValidationError
from protocols.history import RECAP_PREFIX, ConversationSnapshot, estimate_messages
from protocols.messages import Message, ToolCall


def turns(n: int, start: int = 0) -> list[Message]:
    """``n`` alternating user/assistant messages with distinct, searchable text."""
    return [
        Message.user(f"question {i}") if i % 2 == 0 else Message.assistant(f"answer {i}")
        for i in range(start, start + n)
    ]


class Recorder:
    """A summarizer that records its inputs and answers 'summary <k>'."""

    def __init__(self) -> None:
        self.inputs: list[tuple[Message, ...]] = []

    async def __call__(self, messages: Sequence[Message]) -> str:
        self.inputs.append(tuple(messages))
        return f"summary {len(self.inputs)}"


async def test_add_and_read_back_in_order() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, id="c1")
        first, second = turns(2)
        added = await conversation.add(first, [second])
        assert added == (first, second)
        assert await conversation.messages() == (first, second)
        assert await conversation.view() == (first, second)
        assert conversation.id == "c1"
        assert not conversation.summarizable


async def test_a_duplicate_id_is_refused_and_nothing_is_added() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        message = Message.user("hi")
        await conversation.add(message)
        with pytest.raises(ValidationError, match="two messages with id"):
            await conversation.add(Message.user("new"), message)
        assert await conversation.messages() == (message,)


async def test_concurrent_adds_are_serialised_and_none_is_lost() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        batches = [turns(5, start=10 * k) for k in range(20)]
        async with trio.open_nursery() as nursery:
            for batch in batches:
                nursery.start_soon(conversation.add, batch)
        messages = await conversation.messages()
        assert len(messages) == 100
        # Each batch stays contiguous: a change is applied whole, never interleaved.
        for batch in batches:
            start = messages.index(batch[0])
            assert messages[start : start + 5] == tuple(batch)


async def test_remove_and_clear() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=Recorder())
        a, b, c = turns(3)
        await conversation.add(a, b, c)
        assert await conversation.remove(a.id, "missing") is False
        assert await conversation.messages() == (b, c)
        assert await conversation.remove(b.id) is True
        await conversation.add(turns(4, start=3))
        await conversation.compact(keep=1)
        await conversation.clear()
        history = await conversation.history()
        assert history.messages == ()
        assert len(history.sections) == 1  # clear keeps what was compacted


async def test_compact_folds_summarises_and_emits_after_the_change() -> None:
    summarize = Recorder()
    events: list[tuple[str, int]] = []
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summarize, keep=2)

        def listener(event: ConversationEvent) -> None:
            events.append((event.kind, len(conversation._state.history.sections)))

        conversation.subscribe(listener)
        messages = turns(6)
        await conversation.add(messages)
        section = await conversation.compact()
        assert section is not None
        assert section.messages == tuple(messages[:4])
        assert section.summary == "summary 1"
        # One call for the folded slice, one for the rollup over the raw section summaries.
        assert summarize.inputs[0] == tuple(messages[:4])
        assert [m.content for m in summarize.inputs[1]] == ["summary 1"]
        history = await conversation.history()
        assert history.summary == "summary 2"
        assert history.messages == tuple(messages[4:])
        view = await conversation.view()
        assert view[0].content == RECAP_PREFIX + "summary 1"
        assert view[1:] == tuple(messages[4:])
        # Events come after the state changed: the section is already there.
        assert events == [("summary", 1), ("compact", 1)]


async def test_nothing_to_fold_returns_none_without_calling_the_summarizer() -> None:
    summarize = Recorder()
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=summarize)
        assert await conversation.compact() is None
        await conversation.add(turns(2))
        assert await conversation.compact(keep=2) is None
        # A pending tool call cannot be folded, nor anything after it.
        pending = Message.assistant(calls=[ToolCall("c1", "add", {"a": 1, "b": 2})])
        fresh = await Conversation.start(runtime, summarize=summarize)
        await fresh.add(pending, Message.user("still waiting?"))
        assert await fresh.compact() is None
        assert summarize.inputs == []


async def test_the_sections_cap_merges_the_oldest_with_one_more_call() -> None:
    summarize = Recorder()
    kinds: list[str] = []
    async with open_runtime() as runtime:
        conversation = await Conversation.start(
            runtime, summarize=summarize, sections=2, on=[lambda e: kinds.append(e.kind)]
        )
        for round_ in range(3):
            await conversation.add(turns(2, start=2 * round_))
            await conversation.compact()
        history = await conversation.history()
        assert len(history.sections) == 2
        # Round 3: fold (call 5), merge the 2 oldest summaries (call 6), rollup (call 7).
        assert [m.content for m in summarize.inputs[5]] == ["summary 1", "summary 3"]
        assert history.sections[0].summary == "summary 6"
        assert [m.content for m in history.sections[0].messages] == [
            "question 0",
            "answer 1",
            "question 2",
            "answer 3",
        ]
        assert history.summary == "summary 7"
        assert kinds[-3:] == ["summary", "compact", "collapse"]


async def test_a_failing_summarizer_leaves_the_history_unchanged() -> None:
    calls = 0

    async def flaky(messages: Sequence[Message]) -> str:
        nonlocal calls
        calls += 1
        if calls == 2:  # the fold's summary succeeds, the rollup fails
            raise ProviderError("overloaded", code="overloaded", retryable=True)
        return "fine"

    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=flaky)
        await conversation.add(turns(4))
        before = await conversation.history()
        with pytest.raises(CompactionError, match="rollup failed: overloaded") as caught:
            await conversation.compact()
        assert isinstance(caught.value.__cause__, ProviderError)
        assert await conversation.history() == before
        # The conversation still works, and a later compaction can succeed.
        assert (await conversation.compact()) is not None


async def test_compact_without_a_summarizer_is_a_clear_error() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        await conversation.add(turns(2))
        with pytest.raises(CompactionError, match="no summarizer") as caught:
            await conversation.compact()
        assert caught.value.code == "no_summarizer"


async def test_a_raising_listener_is_isolated(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def bad(event: ConversationEvent) -> None:
        raise RuntimeError("listener bug")

    async with open_runtime() as runtime:
        conversation = await Conversation.start(
            runtime, summarize=Recorder(), on=[bad, lambda e: seen.append(e.kind)]
        )
        await conversation.add(turns(2))
        assert await conversation.compact() is not None
        assert seen == ["summary", "compact"]
        unsubscribe = conversation.subscribe(lambda e: seen.append("late"))
        unsubscribe()
        section = (await conversation.history()).sections[0]
        assert await conversation.rehydrate(section.id) == section.messages
        assert await conversation.rehydrate("unknown") == ()
        assert seen == ["summary", "compact", "rehydrate"]
    assert "listener bug" in caplog.text


async def test_search_reference_and_snapshot_restore() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, id="notes", summarize=Recorder())
        await conversation.add(turns(4))
        await conversation.compact(keep=1)
        found = await conversation.search("QUESTION 0")
        assert [m.content for m in found] == ["question 0"]
        text = await conversation.reference(label="old", messages=found)
        assert text.splitlines() == [
            '[Reference -- conversation "old" -- NOT part of this conversation]',
            "Summary: summary 2",
            "Relevant messages:",
            "- user: question 0",
        ]
        snapshot = await conversation.snapshot()
        restored = await Conversation.start(runtime, id="ignored", snapshot=snapshot)
        assert restored.id == "notes"
        assert await restored.snapshot() == snapshot


async def test_a_crashed_actor_restarts_with_its_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        first = turns(2)
        await conversation.add(first)

        async def boom(state: object) -> None:
            raise RuntimeError("a bug in a job")

        with pytest.raises(ActorStopped, match=r"conversation-\d+' failed") as caught:
            await conversation.ref.call(boom)
        assert "a bug in a job" in repr(caught.value.__cause__)
        # The supervisor restarts it; the committed state is intact.
        for _ in range(1000):  # virtual time: the restart may wait out a backoff
            if conversation.ref.statistics().restarts:
                break
            await trio.sleep(0.01)
        assert conversation.ref.statistics().restarts == 1
        assert await conversation.messages() == tuple(first)


async def test_fit_compacts_when_over_the_window_and_reports_futility() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=Recorder(), keep=1)
        long = [Message.user("x" * 400), Message.assistant("y" * 400), Message.user("now?")]
        await conversation.add(long)
        head = [Message.system("Be terse.")]
        tokens = estimate_messages([*head, *long])
        fits = await conversation.fit(tokens + 1, head=head)
        assert (fits.tokens, fits.compacted, fits.futile, fits.over) == (
            tokens,
            False,
            False,
            False,
        )
        check = await conversation.fit(100, head=head)
        assert check.compacted
        assert check.tokens < tokens
        assert not check.over
        # Only the kept message is left live: a tiny window cannot be met -- futile.
        futile = await conversation.fit(5, head=head)
        assert futile.over
        assert futile.futile
        assert not futile.compacted


async def test_fit_without_a_summarizer_never_compacts() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        await conversation.add(Message.user("x" * 400))
        check = await conversation.fit(10)
        assert check.over
        assert check.futile
        assert not check.compacted
        with pytest.raises(ValidationError, match="window"):
            await conversation.fit(0)


async def test_a_provider_summarizer_uses_a_transcript() -> None:
    provider = ScriptedProvider(Reply("They greeted."), Reply("  "), Fail())
    summarize = summarizer_for(provider, instruction="Summarize.")
    call = ToolCall("c1", "add", {"a": 1})
    text = await summarize([Message.user("hi"), Message.assistant("hello", calls=[call])])
    assert text == "They greeted."
    sent = provider.calls[0].messages
    assert sent[0] == Message.system("Summarize.", id=sent[0].id, created_at=sent[0].created_at)
    assert sent[1].content == "user: hi\nassistant: hello [calls: add({'a': 1})]"
    with pytest.raises(CompactionError, match="empty summary"):
        await summarize([Message.user("hi")])
    with pytest.raises(ProviderError):
        await summarize([Message.user("hi")])


async def test_manager_add_switch_remove() -> None:
    async with open_runtime() as runtime:
        manager = ConversationManager(runtime, summarize=Recorder(), keep=1)
        assert manager.active is None
        first = await manager.add(id="a")
        second = await manager.add(id="b", keep=3)
        assert manager.active is first  # the first added becomes active
        assert manager.count == 2
        assert manager.conversations() == (first, second)
        assert second.summarizable  # the manager's defaults flow in
        assert manager.switch("zzz") is None
        assert manager.active is first
        assert manager.switch("b") is second
        assert manager.active is second
        assert await manager.remove("b", "nope") is False
        assert manager.active is None
        assert manager.conversation("b") is None
        replaced = await manager.add(id="a")
        assert replaced is not first
        assert manager.conversation("a") is replaced
        await manager.clear()
        assert manager.count == 0


class DictStore:
    """The smallest ConversationStore: enough for the manager's seam."""

    def __init__(self) -> None:
        self.rows: dict[str, ConversationSnapshot] = {}

    async def get(self, conversation_id: str) -> ConversationSnapshot | None:
        return self.rows.get(conversation_id)

    async def set(self, snapshot: ConversationSnapshot) -> None:
        self.rows[snapshot.id] = snapshot

    async def delete(self, conversation_id: str) -> bool:
        return self.rows.pop(conversation_id, None) is not None

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        return sorted(key for key in self.rows if after is None or key > after)[:limit]

    async def aclose(self) -> None:
        self.rows.clear()


async def test_manager_save_and_open_through_a_store() -> None:
    store = DictStore()
    async with open_runtime() as runtime:
        manager = ConversationManager(runtime, store=store)
        assert await manager.save() is False  # nothing active
        conversation = await manager.add(id="kept")
        await conversation.add(turns(3))
        assert await manager.save() is True
        assert await manager.save("unknown") is False
        fresh = ConversationManager(runtime, store=store)
        opened = await fresh.open("kept")
        assert opened is not None
        assert fresh.active is opened
        assert await opened.snapshot() == await conversation.snapshot()
        assert await fresh.open("never-saved") is None
        no_store = ConversationManager(runtime)
        assert await no_store.save() is False
        assert await no_store.open("kept") is None


async def test_a_conversation_survives_a_fresh_runtime_through_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    async with open_runtime() as runtime:
        store = await SQLiteConversationStore.open(path)
        manager = ConversationManager(runtime, store=store, summarize=Recorder())
        conversation = await manager.add(id="long")
        await conversation.add(turns(6))
        await conversation.compact(keep=2)
        saved = await conversation.snapshot()
        assert await manager.save("long") is True
        await store.aclose()
    async with open_runtime() as runtime:
        store = await SQLiteConversationStore.open(path)
        manager = ConversationManager(runtime, store=store, summarize=Recorder())
        opened = await manager.open("long")
        assert opened is not None
        assert await opened.snapshot() == saved
        # It can keep compacting after the restore.
        await opened.add(turns(4, start=6))
        assert await opened.compact(keep=1) is not None
        assert len((await opened.history()).sections) == 2
        await store.aclose()


# -- adds without a mailbox trip ----------------------------------------------------------------


async def test_an_add_to_an_idle_conversation_needs_no_trip_through_the_mailbox() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        handled = conversation.ref.statistics().handled
        first, second = turns(2)
        await conversation.add(first)
        await conversation.add(second)
        assert await conversation.messages() == (first, second)
        assert conversation.ref.statistics().handled == handled  # applied in the caller's task


async def test_an_add_during_a_compaction_waits_for_it_and_lands_after_the_fold(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()
    inputs: list[tuple[Message, ...]] = []

    async def slow(messages: Sequence[Message]) -> str:
        inputs.append(tuple(messages))
        await release.wait()
        return f"summary {len(inputs)}"

    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=slow)
        old = turns(4)
        await conversation.add(old)
        late = Message.user("added while compacting")
        landed: list[tuple[Message, ...]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: conversation.compact(keep=1))
            await trio.testing.wait_all_tasks_blocked()
            assert inputs  # the compaction is waiting on its summarizer

            async def add_late() -> None:
                landed.append(await conversation.add(late))

            nursery.start_soon(add_late)
            await trio.testing.wait_all_tasks_blocked()
            # Not applied past the compaction in progress: the history is still the old one.
            assert (await conversation.messages()) == tuple(old)
            assert not landed
            release.set()
        history = await conversation.history()
        assert landed == [(late,)]
        assert len(history.sections) == 1
        assert history.sections[0].messages == tuple(old[:3])
        assert history.messages == (old[3], late)  # nothing lost, in arrival order


async def test_adds_after_a_crash_and_restart_are_not_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime, summarize=Recorder())
        first = turns(2)
        await conversation.add(first)

        async def boom(state: object) -> None:
            raise RuntimeError("a bug in a job")

        with pytest.raises(ActorStopped):
            await conversation.ref.call(boom)
        later = Message.user("after the crash")
        await conversation.add(later)  # waits for the restart, then lands
        assert await conversation.messages() == (*first, later)
        again = Message.user("once it runs again")
        await conversation.add(again)
        assert await conversation.messages() == (*first, later, again)


async def test_an_add_to_a_stopped_conversation_raises_and_a_cancelled_one_adds_nothing() -> None:
    async with open_runtime() as runtime:
        conversation = await Conversation.start(runtime)
        with trio.CancelScope() as scope:
            scope.cancel()
            await conversation.add(Message.user("never"))
        assert scope.cancelled_caught
        assert await conversation.messages() == ()
        await conversation.ref.stop()
        with pytest.raises(ActorStopped):
            await conversation.add(Message.user("too late"))
