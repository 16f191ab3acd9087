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
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from typing import Any

import attrs
import trio
from rich.console import Console
from rich.text import Text

from protocols.errors import AgentsError
from protocols.messages import AgentResult, ToolSuccess

from ._demo import SYSTEM, Endpoint, add, thinking_provider
from ._runtime import Runtime, open_runtime
from .agent import Agent, Chunk
from .conversation import Conversation, ConversationManager
from .providers import OpenAIChat
from .store import SQLiteConversationStore
from .testing import Simulator

__all__ = ["HELP", "ChatSession", "chat_session", "main", "open_chat"]

HELP = """commands:
  /reset  start a new conversation (the current one is forgotten unless saved)
  /save   save the conversation to the SQLite file
  /help   show this help
  /quit   leave (also /exit, Ctrl-D)
Ctrl-C cancels the answer being written; the partial answer is kept."""

#: The reason recorded when Ctrl-C cancels an answer.
INTERRUPTED = "interrupted by Ctrl-C"


@attrs.define
class _Turn:
    """How the answer being written is rendered: the last kind of text written."""

    kind: str = ""


class ChatSession:
    """One chat: an agent (with the ``add`` tool), its conversation, where ``/save`` writes, and
    the console it writes to. Feed it lines with :meth:`handle`; call :meth:`interrupt` to cancel
    the answer in progress (what Ctrl-C does)."""

    def __init__(
        self,
        runtime: Runtime,
        agent: Agent,
        manager: ConversationManager,
        console: Console,
        *,
        db: str,
        where: str,
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.manager = manager
        self.console = console
        self.db = db
        self.where = where
        #: Every answer's result, in order (a cancelled one is partial).
        self.results: list[AgentResult] = []
        self.quit = False
        #: Called with every chunk of every answer, after it is shown (in the chat's task).
        self.listeners: list[Callable[[Chunk], None]] = []
        self._answering = False
        self._idle_interrupts = 0

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
            await self.save()
        else:
            console.print(f"unknown command {name} (try /help)", style="red", markup=False)

    async def save(self) -> None:
        """Write the conversation to the SQLite file (opened for the write)."""
        messages = await self.conversation.messages()
        async with await SQLiteConversationStore.open(self.db) as store:
            await store.set(await self.conversation.snapshot())
        self.console.print(
            f"saved conversation {self.conversation.id} ({len(messages)} messages) to {self.db}",
            style="dim",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

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
            console.print(f"\nerror: {error}", style="red", markup=False, highlight=False)
            return None
        finally:
            self._answering = False
        self.results.append(result)
        if turn.kind:
            console.out("")
        footer = f"({result.turns} turn(s), {result.usage.total} tokens)"
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


@contextlib.asynccontextmanager
async def open_chat(
    console: Console,
    *,
    endpoint: Endpoint | None = None,
    interval: float = 0.0,
    think: bool | None = None,
    db: str | os.PathLike[str] = "trio-agents-chat.sqlite3",
) -> AsyncIterator[ChatSession]:
    """A :class:`ChatSession` for the ``async with`` block: a runtime, a
    :class:`~actors.testing.Simulator` pacing deltas ``interval`` seconds apart (or
    ``endpoint``), one provider connection and an agent. ``think`` asks for reasoning (default:
    on for the simulator only); ``/save`` writes to ``db``. Leaving the block stops them all."""
    async with contextlib.AsyncExitStack() as stack:
        make: Callable[[], OpenAIChat]
        if endpoint is None:
            simulator = await stack.enter_async_context(Simulator(interval=interval))
            make, where = simulator.openai, f"simulator at {simulator.openai_base_url}"
            think = True if think is None else think
        else:
            make, where = endpoint.provider, endpoint.where
            think = bool(think)
        runtime = await stack.enter_async_context(open_runtime())
        connection = await runtime.connect(thinking_provider(make, think), name="provider")
        manager = ConversationManager(runtime)
        conversation = await manager.add()
        agent = await Agent.start(
            runtime, connection, conversation=conversation, system=SYSTEM, tools=[add], limit=6
        )
        yield ChatSession(runtime, agent, manager, console, db=os.fspath(db), where=where)


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
        if on_start is not None:
            on_start(session)
        async with contextlib.aclosing(_lines(input_lines)) as lines:
            async for line in lines:
                if not await session.handle(line):
                    break
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
) -> int:
    """Run the terminal chat until the user leaves; the exit status."""
    console = console or Console(highlight=False)
    try:
        trio.run(
            lambda: run_terminal_chat(
                console, interval=interval, think=think, db=db, endpoint=endpoint
            )
        )
    except KeyboardInterrupt:  # pragma: no cover - SIGINT is caught while the chat runs
        return 130
    console.print("bye", style="dim")
    return 0
