"""``trio-agents demo``: a supervised team of agents over real HTTP, or one streamed completion.

The team demo (the default) starts the offline :class:`~actors.testing.Simulator` -- or uses a
real OpenAI-compatible endpoint -- and runs a team of agents concurrently through one supervised
:class:`~actors.providers.ProviderConnection`: some answer sums with an ``add`` tool, some count
while streaming, one is cancelled mid-stream and one runs out of its token budget. Their
conversations are saved to a SQLite file, progress is shown live, and a table of results ends it.

:func:`run_demo` is the older single-stream demo: one completion streamed to the terminal.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal, TextIO

import attrs
import trio
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from protocols.accounting import Cost, Prices, PriceTable, Pricing, TokenBudget
from protocols.errors import AgentsError
from protocols.messages import (
    AgentResult,
    Message,
    ProviderOptions,
    ProviderResult,
    StopReason,
    ToolDefinition,
)
from protocols.wire.openai_chat import DEFAULT_BASE_URL

from .._runtime import open_runtime
from ..agent import Agent, Chunk
from ..conversation import ConversationManager
from ..providers import OpenAIChat, ProviderStream, StreamingProvider
from ..store import SQLiteConversationStore
from ..testing import Simulator
from ..tools import tool

__all__ = [
    "DEFAULT_PROMPT",
    "Endpoint",
    "Member",
    "MemberProgress",
    "TeamReport",
    "add",
    "cost_text",
    "main",
    "run_demo",
    "run_team",
    "team",
    "tokens_text",
    "total_cost",
]

#: What the single-stream demo asks when no prompt is given.
DEFAULT_PROMPT = "Please count to 12."

#: How the team demo's agents are told to behave (the simulator ignores it).
SYSTEM = "You are a terse assistant. Use the add tool for arithmetic."

#: Content deltas the cancelled member streams before the demo aborts it.
CANCEL_AFTER = 25

#: The token budget (completion tokens) of the member that runs out of it.
BUDGET = TokenBudget(max=40, scope="completion")

#: Provider turns each member may take.
TURN_LIMIT = 4

#: The simulator's made-up rates (USD per million input / output tokens): not any vendor's
#: price -- there so the demo's table shows what a priced run looks like.
SIMULATED_PRICES = Prices(input="0.50", output="1.50")

_DIM = "\x1b[2m"
_RESET = "\x1b[0m"

Role = Literal["add", "count", "cancel", "budget"]


def tokens_text(result: AgentResult | ProviderResult | None) -> str:
    """A result's token count as shown: ``"123"``, ``"~123"`` when it was estimated (the
    provider reported no usage and a budget charged an estimate), ``"unknown"`` when the
    provider never reported usage, ``"-"`` without a result."""
    if result is None:
        return "-"
    usage = result.usage
    if usage is None:
        return "unknown"
    estimated = isinstance(result, AgentResult) and result.estimated
    return f"~{usage.total}" if estimated else str(usage.total)


def total_tokens(results: Sequence[AgentResult | ProviderResult]) -> str:
    """The tokens of several results, as shown: their sum, ``~`` when any is estimated,
    ``unknown`` when none is known, and how many are unknown when some are."""
    shown = [tokens_text(result) for result in results]
    known = [text for text in shown if text != "unknown"]
    if not known:
        return "tokens unknown" if shown else "0 tokens"
    total = sum(int(text.lstrip("~")) for text in known)
    mark = "~" if any(text.startswith("~") for text in known) else ""
    unknown = len(shown) - len(known)
    return f"{mark}{total} tokens" + (f" ({unknown} run(s) unknown)" if unknown else "")


def _amount(cost: Cost) -> str:
    amount = format(cost.amount.normalize(), "f") if cost.amount is not None else "?"
    return f"${amount}" if cost.currency == "USD" else f"{amount} {cost.currency}"


def cost_text(result: AgentResult | None) -> str:
    """A result's cost as shown: ``"$0.0000625"`` (exact; another currency after the amount),
    ``"unknown"`` when it is unavailable (a turn went unreported or unpriced), ``"-"`` when
    nobody priced it (or without a result)."""
    cost = None if result is None or result.usage is None else result.usage.cost
    if cost is None:
        return "-" if result is None or result.usage is not None else "unknown"
    return "unknown" if cost.amount is None else _amount(cost)


def total_cost(results: Sequence[AgentResult]) -> str | None:
    """The cost of several results, as shown: their sum, ``unknown`` as soon as one is unknown
    (a cost is never a floor), ``None`` when none was priced."""
    costs = [r.usage.cost if r.usage is not None else None for r in results]
    if all(cost is None for cost in costs):
        return None
    known = [cost for cost in costs if cost is not None and cost.amount is not None]
    if len(known) < len(costs):
        return f"cost unknown ({len(costs) - len(known)} run(s) unknown)"
    total = known[0]
    for cost in known[1:]:
        total = total + cost
    return "cost unknown (mixed currencies)" if total.amount is None else f"cost {_amount(total)}"


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@attrs.frozen
class Endpoint:
    """A real OpenAI-compatible endpoint to use instead of the simulator.

    ``base_url`` and ``api_key`` default (when ``None``) to ``$OPENAI_BASE_URL`` and
    ``$OPENAI_API_KEY``, as :class:`~actors.providers.OpenAIChat` reads them.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)

    def provider(self) -> OpenAIChat:
        return OpenAIChat(model=self.model, base_url=self.base_url, api_key=self.api_key)

    @property
    def where(self) -> str:
        """The base URL the provider will use."""
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL

    @property
    def has_key(self) -> bool:
        """Whether an API key will be sent (given, or in ``$OPENAI_API_KEY``)."""
        return bool(self.api_key if self.api_key is not None else os.environ.get("OPENAI_API_KEY"))


class _Thinking(StreamingProvider):
    """An OpenAI-compatible provider that asks for reasoning on every call.

    The OpenAI chat format has no standard switch for ``think``; the simulator (like OpenAI's
    reasoning models) reads ``reasoning_effort``, which this adds to each request's ``extra``.
    """

    def __init__(self, inner: OpenAIChat) -> None:
        self.inner = inner
        self.name = inner.name

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        options = options or ProviderOptions()
        options = attrs.evolve(options, extra={"reasoning_effort": "low", **options.extra})
        return self.inner.stream(messages, tools=tools, options=options)

    async def aclose(self) -> None:
        await self.inner.aclose()


def thinking_provider(make: Callable[[], OpenAIChat], think: bool) -> Callable[[], Any]:
    """A provider factory (fresh client per connection restart), asking for reasoning or not."""
    if not think:
        return make
    return lambda: _Thinking(make())


# ---------------------------------------------------------------------------------------------
# The team


@attrs.frozen
class Member:
    """One agent of the team: its name, role, prompt and bounds."""

    name: str
    role: Role
    prompt: str
    tools: bool = False
    budget: TokenBudget | None = None
    cancel_after: int | None = None


def team(size: int) -> list[Member]:
    """The demo's team of ``size`` agents: the first sums with the ``add`` tool, the second
    counts, the third is cancelled mid-stream, the fourth hits its token budget, and the rest
    alternate between sums and counts."""
    if size < 1:
        raise ValueError(f"a team needs at least one agent, not {size}")
    members: list[Member] = []
    sums = 0
    for index in range(size):
        name = f"agent-{index + 1:02d}"
        if index == 2:
            members.append(
                Member(name, "cancel", "Please count to 100000.", cancel_after=CANCEL_AFTER)
            )
        elif index == 3:
            members.append(Member(name, "budget", "Please count to 2000.", budget=BUDGET))
        elif index % 2 == 0:
            a, b = 19 + 3 * sums, 23 + 2 * sums
            sums += 1
            members.append(Member(name, "add", f"What is {a} + {b}?", tools=True))
        else:
            members.append(Member(name, "count", "Please count to 40."))
    return members


@attrs.define
class MemberProgress:
    """What one member has done so far (updated as its chunks arrive)."""

    member: Member
    #: The id of the member's conversation (as saved in the SQLite file).
    conversation: str = ""
    state: str = "queued"
    content: str = ""
    deltas: int = 0
    thinking: int = 0
    tool_calls: int = 0
    #: Tokens reported so far (``None`` until the provider reports usage).
    tokens: int | None = None
    result: AgentResult | None = None
    #: Why the run failed (one line), when it raised.
    error: str | None = None

    def observe(self, chunk: Chunk) -> None:
        if chunk.kind == "content":
            self.state = "writing"
            self.deltas += 1
            self.content += chunk.text
        elif chunk.kind == "thinking":
            self.state = "thinking"
            self.thinking += 1
        elif chunk.kind == "tool_call":
            self.state = "tool"
            self.tool_calls += 1
            self.content = ""  # the next turn's text is the answer
        elif chunk.kind == "usage" and chunk.usage is not None:
            self.tokens = (self.tokens or 0) + chunk.usage.total

    @property
    def stop(self) -> str:
        if self.error is not None:
            return "error"
        return self.result.stop.value if self.result is not None else self.state


@attrs.frozen
class TeamReport:
    """The outcome of :func:`run_team`: every member's progress (with its result), where the
    conversations were saved (``None`` once a temporary file is removed), how many conversations
    the store held when read back, and where the model was."""

    members: tuple[MemberProgress, ...]
    db: str | None
    saved: int
    where: str
    #: Where the costs shown come from (``None``: not priced).
    priced: str | None = None

    def stops(self) -> Counter[str]:
        """How many members ended with each stop reason (``error`` for a raised run)."""
        return Counter(progress.stop for progress in self.members)

    @property
    def ok(self) -> bool:
        return all(progress.error is None for progress in self.members)


def _short(text: str, width: int = 22) -> str:
    """``text`` on one line, its middle elided (at word boundaries) to fit ``width``."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    keep = (width - 3) // 2
    head = text[:keep].rsplit(" ", 1)[0] if " " in text[:keep] else text[:keep]
    tail = text[-keep:].split(" ", 1)[-1] if " " in text[-keep:] else text[-keep:]
    return f"{head} … {tail}"


_STYLES = {
    "complete": "green",
    "cancelled": "yellow",
    "budget": "magenta",
    "timeout": "red",
    "exhausted": "red",
    "max_tokens": "red",
    "content_filter": "red",
    "guardrail": "red",
    "client_tools": "cyan",
    "error": "bold red",
}


#: The console width from which the results table has a cost column (narrower, it would
#: squeeze the answers: the cost is on the summary line only).
COST_COLUMN_WIDTH = 96


def results_table(
    members: Sequence[MemberProgress], *, title: str = "Results", cost: bool = True
) -> Table:
    """The table of results: agent, task, stop reason, turns, tokens, cost (unless ``cost`` is
    false) and the (partial) answer."""
    table = Table(
        title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, padding=(0, 1, 0, 0)
    )
    table.add_column("agent", no_wrap=True, min_width=8)
    table.add_column("task", no_wrap=True, overflow="ellipsis", max_width=19)
    table.add_column("stop", no_wrap=True, min_width=9)
    table.add_column("turns", justify="right", no_wrap=True, min_width=5)
    table.add_column("tokens", justify="right", no_wrap=True, min_width=6)
    if cost:
        table.add_column("cost", justify="right", no_wrap=True, min_width=4)
    # Answers are elided to one line; why a run failed is wrapped, whole.
    table.add_column("answer", min_width=12)
    for progress in members:
        result = progress.result
        turns = str(result.turns) if result is not None else "-"
        answer: Text
        if progress.error is not None:  # why it failed, whole: wrapped, never elided
            answer = Text(progress.error, style="red", no_wrap=False, overflow="fold")
        else:
            text = result.content if result is not None else progress.content
            answer = Text(_short(text), no_wrap=True, overflow="ellipsis")
        stop = progress.stop
        table.add_row(
            progress.member.name,
            progress.member.prompt,
            Text(stop, style=_STYLES.get(stop, "cyan")),
            turns,
            tokens_text(result) if result is not None else _live_tokens(progress),
            *((cost_text(result),) if cost else ()),
            answer,
        )
    return table


def _live_tokens(progress: MemberProgress) -> str:
    return "-" if progress.tokens is None else str(progress.tokens)


def _live_view(members: Sequence[MemberProgress], height: int) -> Group:
    done = sum(1 for p in members if p.result is not None or p.error is not None)
    running = [p for p in members if p.result is None and p.error is None]
    finished = [p for p in members if p.result is not None or p.error is not None]
    shown = (running + finished[::-1])[: max(3, height - 8)]
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("agent", no_wrap=True)
    table.add_column("state", no_wrap=True, min_width=9)
    table.add_column("deltas", justify="right")
    table.add_column("tools", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("latest", no_wrap=True, overflow="ellipsis")
    for progress in shown:
        state = progress.stop
        tail = progress.content[-40:] if progress.content else ""
        table.add_row(
            progress.member.name,
            Text(state, style=_STYLES.get(state, "cyan")),
            str(progress.deltas),
            str(progress.tool_calls),
            tokens_text(progress.result) if progress.result is not None else _live_tokens(progress),
            tail,
        )
    header = Text(f"{done}/{len(members)} agents finished", style="bold")
    return Group(header, table)


async def _drive(
    agent: Agent,
    progress: MemberProgress,
    everyone: Sequence[MemberProgress],
    console: Console,
    where: str,
) -> None:
    member = progress.member
    progress.state = "waiting"
    aborted = False
    try:
        async with agent.stream(member.prompt) as run:
            async for chunk in run:
                progress.observe(chunk)
                if (
                    member.cancel_after is not None
                    and not aborted
                    and progress.deltas >= member.cancel_after
                ):
                    aborted = True
                    agent.abort("cancelled by the demo mid-stream")
        progress.result = run.result
    except AgentsError as error:
        progress.error = _why(error, where)
    if not console.is_terminal:
        done = sum(1 for p in everyone if p.result is not None or p.error is not None)
        width = len(str(len(everyone)))
        why = f": {progress.error}" if progress.error is not None else ""
        console.print(
            f"[{done:>{width}}/{len(everyone)}] {member.name} {progress.stop}{why}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


def _real_prices() -> tuple[Pricing | None, str | None]:
    """A real endpoint's prices: genai-prices' when the ``prices`` extra is installed (a model
    it does not know shows ``unknown``); none otherwise (the cost column shows ``-``)."""
    from .._pricing import GenAIPrices  # noqa: PLC0415

    try:
        return GenAIPrices(), "genai-prices' data (unknown: a model it has no price for)"
    except AgentsError:
        return None, None


def _why(error: AgentsError, where: str) -> str:
    """One line saying why a run failed (as the command line says it)."""
    from ._errors import describe_error  # noqa: PLC0415 - cli imports this module lazily

    return describe_error(error, where) or str(error)


async def run_team(
    console: Console,
    *,
    agents: int = 20,
    interval: float = 0.05,
    think: bool | None = None,
    db: str | os.PathLike[str] | None = None,
    endpoint: Endpoint | None = None,
    concurrency: int = 16,
    live: bool | None = None,
) -> TeamReport:
    """Run the demo's team (see :func:`team`) and print its progress and results to ``console``.

    The model is a :class:`~actors.testing.Simulator` pacing deltas ``interval`` seconds apart,
    or ``endpoint``. Every agent is supervised by one runtime and talks to the model through one
    :class:`~actors.providers.ProviderConnection` allowing ``concurrency`` calls at once.
    Conversations are saved to the SQLite file ``db`` (default: a temporary file, removed when
    the demo ends). ``think`` asks for reasoning (default: on for the simulator only). ``live``
    shows a live table (default: when ``console`` is a terminal); otherwise a line is printed as
    each agent finishes. Nothing keeps running once it returns.
    """
    members = team(agents)
    progress = [MemberProgress(member) for member in members]
    show_live = console.is_terminal if live is None else live
    async with contextlib.AsyncExitStack() as stack:
        # The store first: a --db that cannot be used fails before anything else starts.
        if db is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="trio-agents-demo-"))
            path, temporary = os.path.join(folder, "conversations.sqlite3"), True
        else:
            path, temporary = os.fspath(db), False
        store = await SQLiteConversationStore.open(path)
        stack.push_async_callback(store.aclose)
        make: Callable[[], OpenAIChat]
        pricing: Pricing | None
        priced: str | None
        if endpoint is None:
            simulator = await stack.enter_async_context(Simulator(interval=interval))
            where = f"simulator at {simulator.openai_base_url}"
            make = simulator.openai
            think = True if think is None else think
            # The simulator has no price: a made-up one, said to be so under the table.
            pricing = PriceTable({"simulator": SIMULATED_PRICES})
            priced = (
                f"the simulator's made-up price (${SIMULATED_PRICES.input} in, "
                f"${SIMULATED_PRICES.output} out per million tokens), not a real one"
            )
        else:
            where = endpoint.where
            make = endpoint.provider
            think = bool(think)
            pricing, priced = _real_prices()
        runtime = await stack.enter_async_context(open_runtime())
        connection = await runtime.connect(
            thinking_provider(make, think), name="provider", limit=concurrency
        )
        console.print(
            f"trio-agents demo: a team of {agents} agent(s) -> OpenAIChat -> {where}\n"
            f"one supervised ProviderConnection (at most {concurrency} calls at once); "
            f"conversations in {path}",
            highlight=False,
            soft_wrap=True,
        )
        manager = ConversationManager(runtime, store=store)
        started: list[Agent] = []
        for member, state in zip(members, progress, strict=True):
            conversation = await manager.add()
            state.conversation = conversation.id
            started.append(
                await Agent.start(
                    runtime,
                    connection,
                    conversation=conversation,
                    system=SYSTEM,
                    tools=[add] if member.tools else (),
                    limit=TURN_LIMIT,
                    budget=member.budget,
                    pricing=pricing,
                    name=member.name,
                )
            )
        async with trio.open_nursery() as nursery:
            for agent, each in zip(started, progress, strict=True):
                nursery.start_soon(_drive, agent, each, progress, console, where)
            if show_live:
                view = Live(console=console, auto_refresh=False, transient=True)
                with view:
                    while any(p.result is None and p.error is None for p in progress):
                        view.update(_live_view(progress, console.height), refresh=True)
                        await trio.sleep(0.1)
        for conversation in manager.conversations():
            await manager.save(conversation.id)
        saved = len(await store.list(limit=max(100, agents)))
    report = TeamReport(tuple(progress), None if temporary else path, saved, where, priced)
    _print_report(console, report, path, temporary)
    return report


def _print_report(console: Console, report: TeamReport, path: str, temporary: bool) -> None:
    console.print(results_table(report.members, cost=console.width >= COST_COLUMN_WIDTH))
    stops = report.stops()
    order = [*(reason.value for reason in StopReason), "error"]  # every one that can occur
    counts = ", ".join(f"{stops[stop]} {stop}" for stop in order if stops[stop])
    results = [p.result for p in report.members if p.result is not None]
    tokens = total_tokens(results)
    console.print(f"{len(report.members)} agents: {counts}; {tokens}", highlight=False)
    cost = total_cost(results)
    if cost is not None and report.priced is not None:
        console.print(f"{cost}, at {report.priced}", highlight=False, soft_wrap=True)
    kept = "a temporary file, now removed; --db PATH keeps it" if temporary else "kept"
    console.print(
        f"saved {report.saved} conversation(s) to {path} ({kept})", highlight=False, soft_wrap=True
    )


# ---------------------------------------------------------------------------------------------
# The single stream


async def run_demo(
    out: TextIO,
    *,
    prompt: str = DEFAULT_PROMPT,
    interval: float = 0.05,
    think: bool = True,
    color: bool | None = None,
    endpoint: Endpoint | None = None,
) -> ProviderResult:
    """Stream one completion of ``prompt`` through :class:`~actors.providers.OpenAIChat` over
    HTTP -- from a :class:`~actors.testing.Simulator` started for it, or from ``endpoint`` --
    and write it to ``out`` as it arrives: the model's thinking (dimmed on a terminal), then its
    answer, then the finish reason and usage. Returns the assembled result.

    ``interval`` is the simulator's pause between deltas in seconds; ``color`` defaults to
    whether ``out`` is a terminal. Nothing keeps running once it returns.
    """
    if color is None:
        color = out.isatty()
    dim, reset = (_DIM, _RESET) if color else ("", "")
    async with contextlib.AsyncExitStack() as stack:
        if endpoint is None:
            simulator = await stack.enter_async_context(Simulator(interval=interval))
            provider = simulator.openai(model="simulator")
            where = f"simulator at {simulator.openai_base_url}"
        else:
            provider = endpoint.provider()
            where = endpoint.where
        stack.push_async_callback(provider.aclose)
        out.write(f"trio-agents demo: OpenAIChat -> {where}\n")
        out.write(f"> {prompt}\n")
        options = ProviderOptions(extra={"reasoning_effort": "low"}) if think else None
        channel = None
        async with provider.stream([Message.user(prompt)], options=options) as stream:
            async for delta in stream:
                if delta.channel != channel:
                    if channel is not None:
                        out.write(f"{reset}\n")
                    out.write(f"{dim}[thinking] " if delta.channel == "thinking" else "")
                    channel = delta.channel
                out.write(delta.text)
                out.flush()
        result: ProviderResult = stream.result
    usage = result.usage
    counts = (
        f"{usage.prompt} prompt + {usage.completion} completion tokens"
        if usage is not None
        else "tokens unknown (the server reported no usage)"
    )
    out.write(f"{reset}\n-- finish: {result.finish}; {counts}\n")
    out.flush()
    return result


def main(
    *,
    out: TextIO,
    err: TextIO | None = None,
    prompt: str | None = None,
    interval: float = 0.05,
    think: bool | None = None,
    agents: int = 20,
    db: str | None = None,
    endpoint: Endpoint | None = None,
    concurrency: int = 16,
) -> int:
    """Run the demo -- the team, or one stream of ``prompt`` when given -- to completion; the
    exit status (1 when a member's run raised -- then one line on ``err``, default stderr, says
    how many and why -- 130 on Ctrl-C). Other errors propagate (the command line turns them
    into one line)."""
    try:
        if prompt is not None:
            single = think if think is not None else endpoint is None
            trio.run(
                lambda: run_demo(
                    out, prompt=prompt, interval=interval, think=single, endpoint=endpoint
                )
            )
            return 0
        console = Console(file=out, highlight=False)
        report = trio.run(
            lambda: run_team(
                console,
                agents=agents,
                interval=interval,
                think=think,
                db=db,
                endpoint=endpoint,
                concurrency=concurrency,
            )
        )
    except KeyboardInterrupt:
        out.write("\ninterrupted\n")
        return 130
    if report.ok:
        return 0
    failed = [p.error for p in report.members if p.error is not None]
    print(
        f"trio-agents demo: {len(failed)} of {len(report.members)} run(s) failed: {failed[0]}",
        file=err or sys.stderr,
    )
    return 1
