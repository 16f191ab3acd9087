"""``trio-agents chat``: an interactive terminal chat with one agent.

The logic lives in :class:`ChatSession` and :func:`chat_session`, which take their input as
lines (an iterable or an async iterator) and write to a rich :class:`~rich.console.Console`, so
they run without a terminal. :func:`main` adds the terminal: a prompt read in a worker thread,
and Ctrl-C (SIGINT) mapped to :meth:`ChatSession.interrupt` -- it cancels the answer in progress,
whose partial text stays in the conversation, and the chat goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio
from rich.console import Console
from rich.text import Text

from protocols.errors import AgentsError, Category, ProviderError, ValidationError
from protocols.history import ConversationSnapshot
from protocols.messages import AgentResult, Role, ToolCall, ToolSuccess
from protocols.questions import Answer, Question, parse_answer

from .._questions import Unanswered, ask_user
from .._runtime import Runtime, open_runtime
from ..agent import Agent, Chunk
from ..conversation import Conversation, ConversationManager
from ..providers import OpenAIChat, ProviderInterface
from ..store import SQLiteConversationStore
from ..testing import Simulator
from ._demo import SYSTEM, Endpoint, add, thinking_provider, tokens_text

if TYPE_CHECKING:
    from ..relay import RelayProvider

__all__ = [
    "HELP",
    "RELAY_TOKEN_ENV",
    "ChatError",
    "ChatSession",
    "Relay",
    "chat_session",
    "check_relay",
    "main",
    "open_chat",
]

HELP = """commands:
  /reset    start a new conversation (the current one is forgotten unless saved)
  /save     save the conversation to the SQLite file
  /load ID  continue a saved conversation (/load alone lists them)
  /help     show this help
  /quit     leave (also /exit, Ctrl-D)
Ctrl-C cancels the answer being written; the partial answer is kept.
When the agent asks you a question (its ask_user tool), your next line answers it; an empty
line declines."""

#: How many saved conversations ``/load`` lists.
LISTED = 20

#: The reason recorded when Ctrl-C cancels an answer.
INTERRUPTED = "interrupted by Ctrl-C"


class ChatError(AgentsError):
    """The chat cannot do what was asked: a conversation id that is not saved, a ``--db`` that
    cannot be used."""

    default_code = "chat"
    default_category = Category.USER


@attrs.define
class _Turn:
    """How the answer being written is rendered: the last kind of text written."""

    kind: str = ""


class _Lines:
    """The chat's input lines, each read when one is wanted -- never ahead, so a terminal shows
    its prompt only then. A read cut by a cancel is not lost: it goes on in ``nursery`` and the
    next :meth:`next` gets its line."""

    def __init__(self, source: AsyncIterator[str], nursery: trio.Nursery) -> None:
        self._source = source
        self._nursery = nursery
        self._reading: trio.Event | None = None
        self._line: str | None = None
        self._failure: Exception | None = None

    async def next(self) -> str | None:
        """The next line; ``None`` once the input has ended. What reading raised is raised
        here, as itself."""
        if self._reading is None:
            self._reading = trio.Event()
            self._nursery.start_soon(self._read, self._reading)
        await self._reading.wait()
        self._reading = None
        if self._failure is not None:
            raise self._failure
        line, self._line = self._line, None
        return line

    async def _read(self, done: trio.Event) -> None:
        try:
            self._line = await anext(self._source)
        except StopAsyncIteration:
            self._line = None
        except Exception as error:
            self._failure = error
        finally:
            done.set()


class ChatSession:
    """One chat: an agent (with the ``add`` and ``ask_user`` tools), its conversation, where
    ``/save`` writes, and the console it writes to. Feed it lines with :meth:`handle`; call
    :meth:`interrupt` to cancel the answer in progress (what Ctrl-C does). A question the agent
    asks is answered by the next line of the input (:meth:`answer_question`)."""

    def __init__(
        self,
        runtime: Runtime,
        agent: Agent,
        manager: ConversationManager,
        console: Console,
        *,
        db: str,
        where: str,
        base_url: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.manager = manager
        self.console = console
        self.db = db
        self.where = where
        #: The real endpoint's base URL (``None`` with the simulator), named in its errors.
        self.base_url = base_url
        #: Every answer's result, in order (a cancelled one is partial).
        self.results: list[AgentResult] = []
        self.quit = False
        #: Called with every chunk of every answer, after it is shown (in the chat's task).
        self.listeners: list[Callable[[Chunk], None]] = []
        self._answering = False
        self._idle_interrupts = 0
        #: Where the answers to the agent's questions are read (set by :func:`chat_session`).
        self._reader: _Lines | None = None

    @property
    def conversation(self) -> Conversation:
        return self.agent.conversation

    @property
    def answering(self) -> bool:
        """Whether an answer is being written now."""
        return self._answering

    def interrupt(self) -> bool:
        """Cancel the answer in progress (its partial is kept); false when there is none.

        Called with no answer in progress twice in a row (Ctrl-C twice at the prompt), it asks
        the chat to end: :attr:`quit` becomes true.
        """
        if self._answering:
            self.agent.abort(INTERRUPTED)
            return True
        self._idle_interrupts += 1
        if self._idle_interrupts >= 2:
            self.quit = True
        else:
            self.console.print(
                "\n(no answer to cancel: Ctrl-C again, /quit or Ctrl-D to leave)", style="dim"
            )
        return False

    async def handle(self, line: str) -> bool:
        """Act on one line of input: a command or a question. False once the chat should end."""
        self._idle_interrupts = 0
        text = line.strip()
        if not text:
            return not self.quit
        if text.startswith("/"):
            await self.command(text)
        else:
            await self.ask(text)
        return not self.quit

    async def command(self, text: str) -> None:
        name = text.split(maxsplit=1)[0].lower()
        console = self.console
        if name in ("/quit", "/exit"):
            self.quit = True
        elif name == "/help":
            console.print(HELP, markup=False, highlight=False)
        elif name == "/reset":
            old = self.conversation
            self.agent.conversation = await self.manager.add()
            await self.manager.remove(old.id)
            console.print("(new conversation)", style="dim")
        elif name == "/save":
            await self._guarded(self.save())
        elif name == "/load":
            words = text.split()
            if len(words) > 2:
                self.error("/load takes one conversation id (/load alone lists them)")
            elif len(words) == 2:
                await self._guarded(self.load(words[1]))
            else:
                await self._guarded(self.list_saved())
        else:
            console.print(f"unknown command {name} (try /help)", style="red", markup=False)

    async def answer_question(self, call: ToolCall, question: Question) -> Answer | None:
        """The agent's answerer: show ``question``, and read the answer from the next line of
        the input -- read as :func:`~protocols.questions.parse_answer` reads text; a refused one
        is shown as an error and the question asked again. An empty line declines (``None``);
        input that has ended raises :class:`~actors.Unanswered`."""
        self.console.print(
            f"? {question.prompt} ({question.expects()}; an empty line declines)",
            style="bold",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        while True:
            reader = self._reader
            if reader is None:
                await trio.lowlevel.checkpoint()
                raise Unanswered("this chat reads no input to answer with")
            line = await reader.next()
            if line is None:
                raise Unanswered("the chat's input ended")
            if not line.strip():
                return None
            try:
                return parse_answer(question, line)
            except ValidationError as error:
                self.error(error.message)

    def error(self, text: str) -> None:
        """Show an error (one line, red); the chat goes on."""
        self.console.print(
            f"error: {text}", style="red", markup=False, highlight=False, soft_wrap=True
        )

    async def _guarded(self, work: Awaitable[None]) -> None:
        """Run a command; a store that cannot be used is shown as an error, and the chat (with
        its conversation) goes on."""
        try:
            await work
        except (AgentsError, OSError) as error:
            self.error(self.describe(error))

    def describe(self, error: BaseException) -> str:
        from ._errors import describe_error  # noqa: PLC0415 - cli imports this module lazily

        return describe_error(error, self.base_url) or str(error)

    def _note(self, text: str) -> None:
        self.console.print(text, style="dim", markup=False, highlight=False, soft_wrap=True)

    async def save(self) -> None:
        """Write the conversation to the SQLite file (opened for the write)."""
        messages = await self.conversation.messages()
        async with await SQLiteConversationStore.open(self.db) as store:
            await store.set(await self.conversation.snapshot())
        self._note(
            f"saved conversation {self.conversation.id} ({len(messages)} messages) to {self.db}"
        )

    async def load(self, conversation_id: str) -> None:
        """Continue a conversation saved in the SQLite file: it replaces the current one (which
        is forgotten unless saved). An id that is not saved raises :class:`ChatError`."""
        snapshot = await read_snapshot(self.db, conversation_id)
        await self.resume(snapshot)

    async def resume(self, snapshot: ConversationSnapshot) -> None:
        """Make ``snapshot`` the conversation the agent continues."""
        old = self.conversation
        self.agent.conversation = await self.manager.add(snapshot=snapshot)
        if old.id != snapshot.id:
            await self.manager.remove(old.id)
        self._note(
            f"(continuing conversation {snapshot.id}: {len(snapshot.messages)} messages"
            f"{_last_exchange(snapshot)})"
        )

    async def list_saved(self) -> None:
        """Show the conversations saved in the SQLite file (at most :data:`LISTED`)."""
        if not await trio.Path(self.db).exists():
            self._note(f"(nothing saved yet: {self.db} does not exist)")
            return
        async with await SQLiteConversationStore.open(self.db) as store:
            ids = await store.list(limit=LISTED + 1)
            lines = []
            for conversation_id in ids[:LISTED]:
                snapshot = await store.get(conversation_id)
                if snapshot is not None:
                    lines.append(
                        f"  {conversation_id}  {len(snapshot.messages)} messages"
                        f"{_last_exchange(snapshot)}"
                    )
        if not lines:
            self._note(f"(nothing saved yet in {self.db})")
            return
        more = f" (the first {LISTED})" if len(ids) > LISTED else ""
        self._note(f"saved in {self.db}{more}; /load ID continues one:\n" + "\n".join(lines))

    async def ask(self, text: str) -> AgentResult | None:
        """Stream the agent's answer to ``text``: thinking dimmed, tool calls and their results
        dimmed, then the answer. A cancelled answer is kept, marked as interrupted."""
        console = self.console
        turn = _Turn()
        self._answering = True
        try:
            async with self.agent.stream(text) as run:
                async for chunk in run:
                    self._render(chunk, turn)
                    for listener in list(self.listeners):
                        listener(chunk)
            result = run.result
        except AgentsError as error:
            if turn.kind:
                console.out("")
            self.error(self.describe(error))
            return None
        finally:
            self._answering = False
        self.results.append(result)
        if turn.kind:
            console.out("")
        footer = f"({result.turns} turn(s), {_tokens(result)})"
        if result.partial:
            console.print(
                f"[{result.stop.value}: the partial answer is kept] {footer}",
                style="yellow",
                markup=False,
                highlight=False,
            )
        else:
            console.print(footer, style="dim", highlight=False)
        return result

    def _render(self, chunk: Chunk, turn: _Turn) -> None:
        console = self.console
        kind = chunk.kind
        if kind in ("content", "thinking"):
            if turn.kind and turn.kind != kind:
                console.out("")
            style = "dim italic" if kind == "thinking" else None
            console.out(chunk.text, style=style, end="", highlight=False)
            turn.kind = kind
        elif kind == "tool_call" and chunk.call is not None:
            if turn.kind:
                console.out("")
            arguments = ", ".join(f"{k}={v!r}" for k, v in chunk.call.arguments.items())
            console.out(f"-> {chunk.call.name}({arguments})", style="dim", highlight=False)
            turn.kind = ""
        elif kind == "tool_result" and chunk.result is not None:
            result = chunk.result
            shown = repr(result.value) if isinstance(result, ToolSuccess) else result.error
            console.out(f"<- {result.name}: {shown}", style="dim", highlight=False)
            turn.kind = ""


def _tokens(result: AgentResult) -> str:
    shown = tokens_text(result)
    return "tokens unknown" if shown == "unknown" else f"{shown} tokens"


def _last_exchange(snapshot: ConversationSnapshot) -> str:
    """``; last: ...`` with the conversation's last question, short; empty without one."""
    asked = [m.content for m in snapshot.messages if m.role is Role.USER and m.content]
    if not asked:
        return ""
    last = " ".join(asked[-1].split())
    return f"; last asked: {last[:40]}{'…' if len(last) > 40 else ''}"


async def read_snapshot(db: str, conversation_id: str) -> ConversationSnapshot:
    """The conversation ``conversation_id`` saved in the SQLite file ``db``; a
    :class:`ChatError` when the file or the conversation does not exist."""
    if not await trio.Path(db).exists():
        raise ChatError(f"no conversation {conversation_id} to continue: {db} does not exist")
    async with await SQLiteConversationStore.open(db) as store:
        snapshot = await store.get(conversation_id)
    if snapshot is None:
        raise ChatError(
            f"no conversation {conversation_id} in {db} (/load in the chat lists the saved ones)"
        )
    return snapshot


#: Where ``chat --relay`` reads its token when ``--token`` is not given (as ``serve`` does).
RELAY_TOKEN_ENV = "TRIO_AGENTS_RELAY_TOKEN"


@attrs.frozen
class Relay:
    """A relay to chat through instead of a model: its websocket ``url`` and bearer ``token``
    (never shown)."""

    url: str
    token: str = attrs.field(repr=False)


async def check_relay(provider: RelayProvider, relay: Relay) -> None:
    """Say hello to the relay now, so that a wrong URL or token is one line before the chat
    starts, not an error at the first question: a :class:`ChatError` saying which."""
    try:
        await provider._connect()  # the handshake and hello; kept for the first question
    except ProviderError as error:
        if error.code in ("unauthorized", "forbidden"):
            line = f"the relay at {relay.url} refused the token (--token or ${RELAY_TOKEN_ENV})"
        elif error.status is not None:
            line = (
                f"the relay at {relay.url} refused the connection (HTTP {error.status}): is it a "
                "relay's websocket, ws://HOST:PORT/v1/relay, or the address trio-agents serve "
                "prints?"
            )
        elif error.code == "timeout":
            line = f"the relay at {relay.url} did not answer in time"
        elif error.code == "transport":
            line = f"cannot reach the relay at {relay.url}: is it running?"
        else:
            line = f"the relay at {relay.url} refused to chat: {error}"
        raise ChatError(line) from None


async def check_db(db: str) -> None:
    """Fail now, not at the first ``/save``, when ``db`` cannot be used: an existing file must
    open as a conversation store (owner-only, a SQLite store); a new one needs its folder."""
    path = trio.Path(db)
    if await path.exists():
        async with await SQLiteConversationStore.open(db):
            return
    folder = (await path.absolute()).parent
    if not await folder.is_dir():
        raise ChatError(f"cannot save to {db}: the folder {folder} does not exist")


@contextlib.asynccontextmanager
async def open_chat(
    console: Console,
    *,
    endpoint: Endpoint | None = None,
    interval: float = 0.0,
    think: bool | None = None,
    db: str | os.PathLike[str] = "trio-agents-chat.sqlite3",
    resume: str | None = None,
    relay: Relay | None = None,
) -> AsyncIterator[ChatSession]:
    """A :class:`ChatSession` for the ``async with`` block: a runtime, a
    :class:`~actors.testing.Simulator` pacing deltas ``interval`` seconds apart (or
    ``endpoint``, or a ``relay``), one provider connection and an agent. ``think`` asks for
    reasoning (default: on for the simulator only); ``/save`` writes to ``db`` (checked first:
    see :func:`check_db`). ``resume`` continues the conversation with that id saved in ``db``
    (:class:`ChatError` when there is none). With ``relay`` the model is the relay's: the agent
    (and its ``add`` tool) runs here, its model calls go through a
    :class:`~actors.relay.RelayProvider`, checked at once (:func:`check_relay`). Leaving the
    block stops them all."""
    db = os.fspath(db)
    await check_db(db)
    snapshot = await read_snapshot(db, resume) if resume is not None else None
    async with contextlib.AsyncExitStack() as stack:
        make: Callable[[], OpenAIChat]
        provider: ProviderInterface
        if relay is not None:
            from ..relay import RelayProvider  # noqa: PLC0415 - only when asked for

            through = await stack.enter_async_context(RelayProvider(relay.url, token=relay.token))
            await check_relay(through, relay)
            provider, where = through, f"relay at {relay.url}"
            think = bool(think)
        elif endpoint is None:
            simulator = await stack.enter_async_context(Simulator(interval=interval))
            make, where = simulator.openai, f"simulator at {simulator.openai_base_url}"
            think = True if think is None else think
        else:
            make, where = endpoint.provider, endpoint.where
            think = bool(think)
        runtime = await stack.enter_async_context(open_runtime())
        if relay is None:
            provider = await runtime.connect(thinking_provider(make, bool(think)), name="provider")
        manager = ConversationManager(runtime)
        conversation = await manager.add(snapshot=snapshot)
        agent = await Agent.start(
            runtime,
            provider,
            conversation=conversation,
            system=SYSTEM,
            tools=[add, ask_user],
            limit=6,
            # Through a relay, reasoning is a request option the relay's model may honour.
            think=think if relay is not None else None,
        )
        session = ChatSession(
            runtime,
            agent,
            manager,
            console,
            db=db,
            where=where,
            base_url=endpoint.where if endpoint is not None else None,
        )
        agent.answer = session.answer_question
        yield session


async def _lines(source: AsyncIterator[str] | Iterable[str]) -> AsyncGenerator[str, None]:
    if isinstance(source, AsyncIterator):
        async for line in source:
            yield line
    else:
        for line in source:
            yield line


async def chat_session(
    input_lines: AsyncIterator[str] | Iterable[str],
    out: Console,
    *,
    on_start: Callable[[ChatSession], Any] | None = None,
    **options: Any,
) -> ChatSession:
    """Chat through ``input_lines`` (questions and commands, one a line) until they run out or
    ``/quit``, writing to ``out``; returns the session (its :attr:`~ChatSession.results`).

    ``options`` are those of :func:`open_chat`; ``on_start`` is called with the session before
    the first line is read (the terminal uses it to hook up Ctrl-C).
    """
    async with open_chat(out, **options) as session:
        out.print(
            f"trio-agents chat -> {session.where}. /help for commands, /quit to leave.",
            style="bold",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if options.get("resume") is not None:
            snapshot = await session.conversation.snapshot()
            session._note(
                f"(continuing conversation {snapshot.id}: {len(snapshot.messages)} messages"
                f"{_last_exchange(snapshot)})"
            )
        if on_start is not None:
            on_start(session)
        async with (
            contextlib.aclosing(_lines(input_lines)) as lines,
            trio.open_nursery() as reading,
        ):
            # One reader of the lines for the chat and for the agent's questions alike.
            session._reader = reader = _Lines(lines, reading)
            while (line := await reader.next()) is not None:
                if not await session.handle(line):
                    break
            session._reader = None
            reading.cancel_scope.cancel()
        return session


async def _terminal_lines(console: Console) -> AsyncIterator[str]:
    """Lines typed at the prompt (read in a worker thread, so the chat stays responsive)."""
    prompt = Text("you> ", style="bold green")
    while True:
        try:
            yield await trio.to_thread.run_sync(console.input, prompt, abandon_on_cancel=True)
        except EOFError:
            console.out("")
            return


async def run_terminal_chat(console: Console, **options: Any) -> ChatSession | None:
    """The chat on a terminal: Ctrl-C cancels the answer in progress (see
    :meth:`ChatSession.interrupt`); twice at the prompt, it leaves."""
    holder: list[ChatSession] = []
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for _ in signals:
                    if not holder:
                        continue
                    holder[0].interrupt()
                    if holder[0].quit:
                        nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            await chat_session(_terminal_lines(console), console, on_start=holder.append, **options)
            nursery.cancel_scope.cancel()
    return holder[0] if holder else None


def main(
    *,
    interval: float = 0.02,
    think: bool | None = None,
    db: str = "trio-agents-chat.sqlite3",
    endpoint: Endpoint | None = None,
    console: Console | None = None,
    resume: str | None = None,
    relay: Relay | None = None,
) -> int:
    """Run the terminal chat until the user leaves; the exit status. Errors that stop it from
    starting (``db``, ``resume``, ``relay``) propagate (the command line makes them one
    line)."""
    console = console or Console(highlight=False)
    try:
        trio.run(
            lambda: run_terminal_chat(
                console,
                interval=interval,
                think=think,
                db=db,
                endpoint=endpoint,
                resume=resume,
                relay=relay,
            )
        )
    except KeyboardInterrupt:  # pragma: no cover - SIGINT is caught while the chat runs
        return 130
    console.print("bye", style="dim")
    return 0
