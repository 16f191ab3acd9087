"""``Conversation``: one history owned by a supervised actor; ``ConversationManager``: many.

Every change to a conversation goes through its actor's mailbox, one at a time, so concurrent
callers never interleave half-done changes. The state itself is an immutable
:class:`~protocols.history.History` value kept outside the actor's incarnation: a change commits
by swapping that value, so a failure half-way (a summarizer that raises, a cancel) leaves the
conversation exactly as it was, and a restarted actor resumes from the last committed value.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs
import trio

from protocols.errors import AgentsError, Category, ValidationError
from protocols.history import (
    ConversationSnapshot,
    History,
    Section,
    estimate_messages,
    plan_collapse,
    plan_fold,
    render_for_provider,
    summary_inputs,
)
from protocols.messages import Message, Usage, new_id

from ._core._abort import Abort
from ._core._actor import Actor, ActorRef, ActorState, ActorStopped
from ._core._supervisor import Restart

if TYPE_CHECKING:
    from ._runtime import Runtime
    from .providers import ProviderInterface
    from .store import ConversationStore

__all__ = [
    "DEFAULT_SUMMARY_INSTRUCTION",
    "CompactionError",
    "Conversation",
    "ConversationEvent",
    "ConversationManager",
    "Summarizer",
    "WindowCheck",
    "summarizer_for",
]

log = logging.getLogger("trio_agents.conversation")

T = TypeVar("T")

#: Turns messages into a summary (a provider call, usually; see :func:`summarizer_for`).
Summarizer = Callable[[Sequence[Message]], Awaitable[str]]

#: What a provider-backed summarizer is told to do.
DEFAULT_SUMMARY_INSTRUCTION = (
    "Summarize the conversation excerpt below for your own later reference: keep facts, "
    "decisions, names, numbers, open questions and what the user asked for; drop pleasantries. "
    "Answer with the summary only."
)


class CompactionError(AgentsError):
    """A compaction could not be done (no summarizer, or the summarizer failed); the
    conversation is unchanged."""

    def __init__(self, message: str, *, code: str = "compaction") -> None:
        super().__init__(message, code=code, category=Category.PROVIDER, retryable=False)


@attrs.frozen
class ConversationEvent:
    """Something that happened to a conversation, reported after the state changed.

    ``kind``: ``"summary"`` (a new rollup, in ``summary``), ``"compact"`` (a fold made
    ``section``), ``"collapse"`` (the sections cap merged sections into ``section``) or
    ``"rehydrate"`` (``section``'s originals were read back).
    """

    kind: Literal["summary", "compact", "collapse", "rehydrate"]
    conversation: str
    section: Section | None = None
    summary: str | None = None


@attrs.frozen
class WindowCheck:
    """Whether the next prompt fits a context window (see :meth:`Conversation.fit`).

    ``tokens`` is the estimate of the prompt after any compaction; ``compacted`` whether a
    compaction ran; ``futile`` that the prompt is still over the window and compaction could
    free nothing more -- stop trying for the rest of the run.
    """

    tokens: int
    window: int
    compacted: bool = False
    futile: bool = False

    @property
    def over(self) -> bool:
        """The prompt reaches the window."""
        return self.tokens >= self.window


@attrs.frozen
class _Payer:
    """Who the summarizer calls of a compaction are made for: ``charge(usage, text)`` hears
    each call's reported usage (``None`` when unreported) and answer, and tripping ``abort``
    cuts the compaction (nothing changes)."""

    charge: Callable[[Usage | None, str], None]
    abort: Abort


#: Set by :func:`paying` in the task that asks for a compaction, and carried into the job.
_payer: contextvars.ContextVar[_Payer | None] = contextvars.ContextVar(
    "trio_agents_compaction_payer", default=None
)


@contextlib.contextmanager
def paying(charge: Callable[[Usage | None, str], None], abort: Abort) -> Iterator[None]:
    """Compactions asked for inside the block are made on someone's behalf (an agent's run):
    the usage of every summarizer call made by :func:`summarizer_for` is passed to ``charge``,
    and tripping ``abort`` cuts a compaction in progress, which then changes nothing. A custom
    summarizer is cut the same way but reports no usage."""
    reset = _payer.set(_Payer(charge, abort))
    try:
        yield
    finally:
        _payer.reset(reset)


def summarizer_for(
    provider: ProviderInterface,
    *,
    instruction: str = DEFAULT_SUMMARY_INSTRUCTION,
) -> Summarizer:
    """A summarizer that asks ``provider`` (a provider or a connection) for the summary.

    The messages are given as a transcript in one user message after ``instruction`` as the
    system message, so any provider can summarise any history (tool calls and results included)
    without its tool protocol. An empty answer raises :class:`CompactionError`.
    """

    async def summarize(messages: Sequence[Message]) -> str:
        lines = []
        for message in messages:
            text = message.content
            if message.calls:
                calls = ", ".join(f"{call.name}({call.arguments})" for call in message.calls)
                text = f"{text} [calls: {calls}]".strip()
            lines.append(f"{message.role.value}: {text}")
        prompt = [Message.system(instruction), Message.user("\n".join(lines))]
        result = await provider.generate(prompt)
        payer = _payer.get()
        if payer is not None:  # made for an agent's run: charged to it
            payer.charge(result.usage, result.content)
        summary = result.content.strip()
        if not summary:
            raise CompactionError("the summarizer answered with an empty summary")
        return summary

    return summarize


# ---------------------------------------------------------------------------------------------
# The actor


class _State:
    """The committed history and settings, shared by all incarnations of one conversation."""

    __slots__ = ("history", "keep", "listeners", "pending", "sections", "summarize")

    def __init__(
        self,
        history: History,
        summarize: Summarizer | None,
        keep: int,
        sections: int | None,
    ) -> None:
        self.history = history
        self.summarize = summarize
        self.keep = keep
        self.sections = sections
        self.listeners: list[Callable[[ConversationEvent], None]] = []
        # Jobs handed to the actor and not finished yet. Never too low (a job counts from
        # before its delivery until it has run); it may stay too high after a job was lost to
        # a crash, which only disables the direct path below for this conversation.
        self.pending = 0


_Job = Callable[[_State], Awaitable[Any]]


class _ConversationActor(Actor[_Job, Any]):
    """Runs each job on the shared state, one at a time."""

    mailbox_size = 64
    # Refusals and failed compactions are answers to the caller: the conversation carries on.
    reply_errors = (AgentsError,)

    def __init__(self, state: _State) -> None:
        self._state = state

    async def handle(self, message: _Job) -> Any:
        return await message(self._state)


def _emit(state: _State, event: ConversationEvent) -> None:
    for listener in list(state.listeners):
        try:
            listener(event)
        except Exception:
            log.exception(
                "a listener of conversation %s raised on %s", event.conversation, event.kind
            )


async def _summarize(state: _State, messages: Sequence[Message], what: str) -> str:
    summarize = state.summarize
    if summarize is None:
        raise CompactionError("this conversation has no summarizer", code="no_summarizer")
    try:
        summary = await summarize(messages)
    except AgentsError as error:
        raise CompactionError(f"summarizing {what} failed: {error.message}") from error
    except Exception as error:
        raise CompactionError(f"summarizing {what} failed: {error!r}") from error
    if not isinstance(summary, str):
        raise CompactionError(f"the summarizer returned {type(summary).__name__}, not str")
    return summary


def _check_keep(keep: object) -> int:
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValidationError(f"keep must be an integer >= 0, not {keep!r}")
    return keep


def _check_cap(cap: object) -> int | None:
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValidationError(f"the sections cap must be an integer >= 1 or None, not {cap!r}")
    return cap


class Conversation:
    """One conversation: a :class:`~protocols.history.History` owned by a supervised actor.

    Start one with :meth:`start` (or through a :class:`ConversationManager`). All methods are
    safe to call from many tasks at once: changes are applied one at a time in arrival order,
    and reads see every change that was committed before them.

    ``summarize`` (see :func:`summarizer_for`) enables :meth:`compact`; ``keep`` is the default
    number of latest messages a compaction leaves live; ``sections`` the default sections cap
    (``None``: unlimited).
    """

    def __init__(self, ref: ActorRef[_Job, Any], state: _State) -> None:
        self._ref = ref
        self._state = state

    @classmethod
    async def start(
        cls,
        runtime: Runtime,
        *,
        id: str | None = None,
        summarize: Summarizer | None = None,
        keep: int = 0,
        sections: int | None = None,
        snapshot: ConversationSnapshot | None = None,
        on: Iterable[Callable[[ConversationEvent], None]] = (),
        name: str | None = None,
    ) -> Conversation:
        """Start a conversation under ``runtime``'s root supervisor.

        ``snapshot`` restores a saved conversation (its id wins over ``id``); otherwise it
        starts empty with ``id`` or a fresh one. ``on`` registers event listeners.
        """
        if snapshot is not None:
            history = History.restore(snapshot)
        else:
            history = History(id=id or new_id())
        state = _State(history, summarize, _check_keep(keep), _check_cap(sections))
        state.listeners.extend(on)

        def conversation() -> _ConversationActor:  # the factory's name names the actor
            return _ConversationActor(state)

        ref = await runtime.spawn(
            conversation,
            name=name,
            restart=Restart.TRANSIENT,  # a crash restarts it (state intact); a stop ends it
        )
        return cls(ref, state)

    def __repr__(self) -> str:
        return f"Conversation(id={self.id!r}, live={self._state.history.count})"

    @property
    def id(self) -> str:
        """The conversation's id."""
        return self._state.history.id

    @property
    def summarizable(self) -> bool:
        """Whether a summarizer was given (so :meth:`compact` can work)."""
        return self._state.summarize is not None

    @property
    def ref(self) -> ActorRef[Any, Any]:
        """The actor's ref (to stop it or watch it)."""
        return self._ref

    def subscribe(self, listener: Callable[[ConversationEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every event from now on; returns a function that
        unsubscribes. A listener that raises is logged and does not affect the conversation."""
        self._state.listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._state.listeners:
                self._state.listeners.remove(listener)

        return unsubscribe

    async def _run(self, job: Callable[[_State], Awaitable[T]]) -> T:
        state = self._state
        state.pending += 1
        ran = False

        async def counted(state: _State) -> T:
            nonlocal ran
            try:
                return await job(state)
            finally:
                if not ran:
                    ran = True
                    state.pending -= 1

        try:
            result: T = await self._ref.call(counted)
        except ActorStopped:
            if not ran:  # refused or lost: it will never run
                ran = True
                state.pending -= 1
            raise
        return result

    def _add_now(self, batch: Sequence[Message]) -> bool:
        """Append ``batch`` at once, in the caller's task, when that is indistinguishable from
        going through the mailbox: the actor is running and has no job queued or in progress
        (so nothing submitted earlier is still to be applied). False when it cannot; the
        caller then goes through the mailbox. Raises like :meth:`add` on a duplicate id."""
        state = self._state
        if state.pending or self._ref.state is not ActorState.RUNNING:
            return False
        state.history = state.history.add(batch)
        return True

    # -- reading -------------------------------------------------------------------------------

    async def history(self) -> History:
        """The whole current state, as an immutable value: every change committed before the
        call, none half-done. Reads need no trip through the mailbox -- the state is one
        immutable value replaced whole by each change -- so they never wait behind a
        compaction in progress (they see the history as it was before it)."""
        await trio.lowlevel.checkpoint()
        return self._state.history

    def _history_now(self) -> History:
        """:meth:`history` without its checkpoint, for callers inside a run that has its own."""
        return self._state.history

    async def messages(self) -> tuple[Message, ...]:
        """The live messages, oldest first."""
        return (await self.history()).messages

    async def view(self) -> tuple[Message, ...]:
        """One recap message per compacted section, then the live messages."""
        return (await self.history()).view()

    async def search(self, query: str) -> tuple[Message, ...]:
        """Messages containing ``query`` (case-insensitive), compacted originals first."""
        return (await self.history()).search(query)

    async def reference(
        self, *, label: str | None = None, messages: Sequence[Message] = (), summary: bool = True
    ) -> str:
        """A labelled text block about this conversation, for use in another one."""
        return (await self.history()).reference(label=label, messages=messages, summary=summary)

    async def snapshot(self) -> ConversationSnapshot:
        """The conversation as plain data (see :class:`~protocols.history.ConversationSnapshot`)."""
        return (await self.history()).snapshot()

    async def rehydrate(self, section_id: str) -> tuple[Message, ...]:
        """The original messages of a compacted section (``()`` if unknown); emits
        ``rehydrate`` when the section exists. Nothing is put back into the conversation."""

        async def job(state: _State) -> tuple[Message, ...]:
            for section in state.history.sections:
                if section.id == section_id:
                    _emit(state, ConversationEvent("rehydrate", state.history.id, section=section))
                    return section.messages
            return ()

        return await self._run(job)

    # -- changing ------------------------------------------------------------------------------

    async def add(self, *messages: Message | Iterable[Message]) -> tuple[Message, ...]:
        """Append messages (given one by one or as iterables) and return them. A message id
        already in the conversation raises :class:`~protocols.errors.ValidationError` and
        adds nothing."""
        batch: list[Message] = []
        for item in messages:
            if isinstance(item, Message):
                batch.append(item)
            else:
                batch.extend(item)

        await trio.lowlevel.checkpoint_if_cancelled()
        if self._add_now(batch):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return tuple(batch)

        async def job(state: _State) -> tuple[Message, ...]:
            state.history = state.history.add(batch)
            return tuple(batch)

        return await self._run(job)

    async def remove(self, *message_ids: str) -> bool:
        """Remove live messages by id; true only when every id was found."""

        async def job(state: _State) -> bool:
            state.history, found = state.history.remove(message_ids)
            return found

        return await self._run(job)

    async def clear(self) -> None:
        """Empty the live messages (compacted sections and the rollup stay)."""

        async def job(state: _State) -> None:
            state.history = state.history.clear()

        await self._run(job)

    async def compact(
        self, *, keep: int | None = None, sections: int | None = None
    ) -> Section | None:
        """Fold the oldest live messages into a summarised section; ``None`` when nothing can
        fold (fewer than ``keep`` + 1 messages, or only a pending tool call).

        Summarizer calls: one for the folded messages, one for the new rollup of all section
        summaries, and one more when the sections cap (``sections``, else the conversation's)
        merges the oldest sections. Events ``summary``, ``compact`` (and ``collapse``) follow
        the change. If any call fails, raises :class:`CompactionError` and nothing changes.
        """
        keep_now = self._state.keep if keep is None else _check_keep(keep)
        cap = self._state.sections if sections is None else _check_cap(sections)
        payer = _payer.get()  # the caller's: the job runs in the actor's task

        async def job(state: _State) -> Section | None:
            if payer is None:
                return await fold(state)
            reset = _payer.set(payer)
            try:
                section: Section | None = None
                with payer.abort.open_scope() as scope:
                    section = await fold(state)
            finally:
                _payer.reset(reset)
            if scope.cancelled_caught:
                raise CompactionError(
                    "the run this compaction was for was cut before it finished; nothing changed",
                    code="cut",
                )
            return section

        async def fold(state: _State) -> Section | None:
            if state.summarize is None:
                raise CompactionError("this conversation has no summarizer", code="no_summarizer")
            history = state.history
            count = plan_fold(history.messages, keep_now)
            if count == 0:
                return None
            summary = await _summarize(state, history.messages[:count], "the folded messages")
            history = history.fold(count, summary)
            folded = history.sections[-1]
            merged: Section | None = None
            merge = plan_collapse(len(history.sections), cap)
            if merge:
                overflow = history.sections[:merge]
                text = await _summarize(
                    state, summary_inputs(s.summary for s in overflow), "the oldest sections"
                )
                history = history.collapse(merge, text)
                merged = history.sections[0]
            rollup = await _summarize(
                state, summary_inputs(s.summary for s in history.sections), "the rollup"
            )
            state.history = history.with_summary(rollup)  # the commit: all calls succeeded
            _emit(state, ConversationEvent("summary", history.id, summary=rollup))
            _emit(state, ConversationEvent("compact", history.id, section=folded))
            if merged is not None:
                _emit(state, ConversationEvent("collapse", history.id, section=merged))
            # The section that now holds the folded messages.
            return folded if folded in history.sections else merged

        return await self._run(job)

    async def fit(
        self,
        window: int,
        *,
        head: Sequence[Message] = (),
        tail: Sequence[Message] = (),
        estimator: Callable[[Sequence[Message]], int] = estimate_messages,
    ) -> WindowCheck:
        """Make the next prompt -- ``head`` (the system block), this conversation's view,
        ``tail`` (messages not yet added) -- fit ``window`` tokens if compaction can.

        When the estimate reaches the window and the conversation is summarizable, one
        :meth:`compact` runs; the result says whether it did and, when it could free nothing
        while the prompt is still over, that further tries are futile. A summarizer failure
        raises :class:`CompactionError` with the conversation unchanged.
        """
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValidationError(f"window must be an integer >= 1, not {window!r}")

        def estimate(history: History) -> int:
            return estimator([*head, *render_for_provider(history.view()), *tail])

        tokens = estimate(await self.history())
        if tokens < window or not self.summarizable:
            return WindowCheck(tokens, window, futile=tokens >= window)
        section = await self.compact()
        after = estimate(await self.history())
        return WindowCheck(after, window, compacted=section is not None, futile=section is None)

    async def stop(self) -> None:
        """Stop the actor (its state stays readable through :meth:`snapshot` until then)."""
        await self._ref.stop()


class _LocalConversation(Conversation):
    """A conversation with no actor, for one run in its caller's task (see
    :class:`~actors.agent._RunAgent`): the same state and methods, every change applied in the
    calling task, one at a time and in arrival order (a lock instead of a mailbox). It exists
    as long as the run that made it; after :meth:`stop` it takes no change
    (:class:`~actors.ActorStopped`)."""

    def __init__(self, history: History | None = None) -> None:
        self._state = _State(history or History(id=new_id()), None, 0, None)
        self._lock = trio.Lock()
        self._stopped = False

    @property
    def ref(self) -> ActorRef[Any, Any]:
        """Refused: this conversation has no actor."""
        raise RuntimeError("this conversation belongs to one run and has no actor")

    async def _run(self, job: Callable[[_State], Awaitable[T]]) -> T:
        if self._stopped:
            await trio.lowlevel.checkpoint()
            raise ActorStopped(f"conversation {self.id!r} is stopped", name=self.id)
        state = self._state
        state.pending += 1
        try:
            async with self._lock:
                return await job(state)
        finally:
            state.pending -= 1

    def _add_now(self, batch: Sequence[Message]) -> bool:
        state = self._state
        if state.pending or self._stopped:
            return False
        state.history = state.history.add(batch)
        return True

    async def stop(self) -> None:
        """It takes no change from now on."""
        self.stop_now()
        await trio.lowlevel.checkpoint()

    def stop_now(self) -> None:
        """:meth:`stop`, without waiting (there is nothing to wait for)."""
        self._stopped = True


# ---------------------------------------------------------------------------------------------
# The manager


class ConversationManager:
    """Many conversations by id, one of them active, optionally backed by a store.

    Defaults (``summarize``, ``keep``, ``sections``) flow into every conversation it starts
    unless :meth:`add` overrides them. The first conversation added becomes active; later ones
    leave the active one alone until :meth:`switch`.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        store: ConversationStore | None = None,
        summarize: Summarizer | None = None,
        keep: int = 0,
        sections: int | None = None,
    ) -> None:
        self._runtime = runtime
        self._store = store
        self._summarize = summarize
        self._keep = _check_keep(keep)
        self._sections = _check_cap(sections)
        self._conversations: dict[str, Conversation] = {}
        self._active: str | None = None

    @property
    def active(self) -> Conversation | None:
        """The active conversation, if any."""
        return self._conversations.get(self._active) if self._active is not None else None

    @property
    def count(self) -> int:
        """How many conversations it holds."""
        return len(self._conversations)

    def conversation(self, conversation_id: str) -> Conversation | None:
        """The conversation with that id, if held."""
        return self._conversations.get(conversation_id)

    def conversations(self) -> tuple[Conversation, ...]:
        """All held conversations, in the order they were added."""
        return tuple(self._conversations.values())

    async def add(
        self,
        *,
        id: str | None = None,
        snapshot: ConversationSnapshot | None = None,
        summarize: Summarizer | None = None,
        keep: int | None = None,
        sections: int | None = None,
        on: Iterable[Callable[[ConversationEvent], None]] = (),
    ) -> Conversation:
        """Start a conversation (empty, or from ``snapshot``) and hold it. An id already held
        is replaced: the old conversation's actor is stopped."""
        conversation = await Conversation.start(
            self._runtime,
            id=id,
            snapshot=snapshot,
            summarize=summarize or self._summarize,
            keep=self._keep if keep is None else keep,
            sections=self._sections if sections is None else sections,
            on=on,
        )
        old = self._conversations.pop(conversation.id, None)
        self._conversations[conversation.id] = conversation
        if old is not None:
            await old.stop()
        if self._active is None:
            self._active = conversation.id
        return conversation

    def switch(self, conversation_id: str) -> Conversation | None:
        """Make a held conversation active and return it; an unknown id returns ``None`` and
        leaves the active one unchanged."""
        conversation = self._conversations.get(conversation_id)
        if conversation is not None:
            self._active = conversation_id
        return conversation

    async def open(self, conversation_id: str) -> Conversation | None:
        """Activate a held conversation, or else load it from the store and activate it;
        ``None`` when neither has it."""
        held = self.switch(conversation_id)
        if held is not None or self._store is None:
            return held
        snapshot = await self._store.get(conversation_id)
        if snapshot is None:
            return None
        conversation = await self.add(snapshot=snapshot)
        self._active = conversation.id
        return conversation

    async def save(self, conversation_id: str | None = None) -> bool:
        """Write a held conversation (default: the active one) to the store; false when there
        is no store or no such conversation. Store errors propagate."""
        target = self._active if conversation_id is None else conversation_id
        conversation = self._conversations.get(target) if target is not None else None
        if conversation is None or self._store is None:
            return False
        await self._store.set(await conversation.snapshot())
        return True

    async def remove(self, *conversation_ids: str) -> bool:
        """Stop and forget conversations; true only when every id was held. Removing the
        active one leaves none active."""
        found = True
        for conversation_id in conversation_ids:
            conversation = self._conversations.pop(conversation_id, None)
            if conversation is None:
                found = False
                continue
            if self._active == conversation_id:
                self._active = None
            await conversation.stop()
        return found

    async def clear(self) -> None:
        """Stop and forget every conversation."""
        await self.remove(*self._conversations)
