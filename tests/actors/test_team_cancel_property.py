"""Property: cuts landing anywhere in a team of agents keep every run's promises (issue 13).

The single-agent random-cancel property (``test_agent_cancel_property.py``) extended to teams.
Each example builds a random delegation tree -- a lead and up to three levels of agents below
it, each called through ``as_tool`` with ``conversation="fresh"`` or ``"shared"`` -- and random
scripts for every run: replies streamed in random pieces after random delays, which call
several child agents (and a ``nap`` tool) in one batch, hangs and failures. Every call of a
child agent asks it for one task (``input="task <call id>"``), so every run, at every depth,
answers from a script of its own.

The lead's run is then cut at random: its abort token, ``agent.abort`` on any agent of the
tree, the caller's own scope, leaving the stream after a number of chunks, timeouts at every
level (the lead's run, each agent's own), a budget shared by the whole tree (a ``TeamBudget``
on every agent, or a ``TokenBudget`` on the lead's run) and interrupts (a second message with
``if_busy="interrupt"`` to the lead or to a shared child). Afterwards:

* every conversation is well formed: the lead's and every shared child's read back, a fresh
  child's as its chunks showed it (every provider call's prompt, too): each assistant tool call
  answered by exactly one result right after it, no result for an unknown call, at most one cut
  (interrupted) turn per run and that run's last;
* every run's stop is one its bounds allow (``cancelled`` only after a cancel reached it,
  ``timeout`` only past its deadline -- its own or one inherited -- ``budget`` only once its
  budget was reached), and a parent cut while a child ran records that call as interrupted: a
  child's answer is never the result of a call whose parent cut it;
* budgets: the meter is exactly the sum of every turn's draw across the tree (and, replayed
  from a stream that carries the whole tree, no text was shown while it was spent); no provider
  call starts once it is spent; reaching it cuts every run drawing on it at that moment; the
  charge that reaches it is one charge (a content delta's estimate or a turn's settling), and
  afterwards only the turns then streaming settle, one charge each -- so it ends at most
  ``max - 1 + largest charge * (1 + the most turns streaming at once)``;
* no task outlives the runs, no actor restarted, every agent is idle with nothing queued, and a
  caller that cuts its own run gets control back at once.

Everything runs on a ``MockClock`` with ``autojump_threshold=0``: no real sleeps.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs
import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from actors import Abort, RunContext, TeamBudget, open_runtime, tool
from actors.agent import EXHAUSTED, Agent, AgentEvent, AgentStatus, Chunk
from actors.testing import Fail, Hang, Reply, ScriptedProvider, ScriptExhausted
from actors.tools import INTERRUPTED, NOT_EXECUTED
from protocols.accounting import TokenBudget, estimate_tokens
from protocols.errors import ProviderError
from protocols.messages import (
    AgentResult,
    Message,
    Role,
    StopReason,
    ToolCall,
    ToolResult,
    ToolSuccess,
    Usage,
)


@tool
async def nap(seconds: float, tag: str, ctx: RunContext[None]) -> str:
    """Sleep a while (``tag`` keeps each call distinct), saying so first."""
    ctx.progress("napping", tag=tag)
    await trio.sleep(seconds)
    return "rested"


Step = Reply | Hang | Fail
Mode = Literal["lead", "fresh", "shared"]
CutKind = Literal["token", "abort", "interrupt", "outer", "close"]
BudgetMode = Literal["none", "team", "lead"]

#: Trio seconds after which anything still running is aborted by the watchdog.
WATCHDOG = 1000.0
#: How the repeat guard's refusal of a batch begins.
REPEATED = "not executed: the identical call"
#: How a stopped-early child's answer ends (its stop follows).
EARLY = "(the agent stopped early: "
CUTS = (StopReason.CANCELLED, StopReason.TIMEOUT, StopReason.BUDGET)
#: The main run's task; interrupts answer ``i<n>``, a delegated run the id of its call.
MAIN = "m"
MAX_AGENTS = 7
MAX_DELEGATIONS = 10


@attrs.frozen
class Member:
    """One agent of the team: how its parent calls it (the lead has none), its children (agent
    numbers) and the bounds of its runs."""

    index: int
    depth: int
    mode: Mode
    children: tuple[int, ...]
    limit: int
    timeout: float | None
    tool_concurrency: int

    @property
    def name(self) -> str:
        return f"a{self.index}"


@attrs.frozen
class Cut:
    """One cut: at ``at`` trio seconds after the start (``close``: after ``at`` chunks)."""

    kind: CutKind
    at: float
    target: int = 0  # the agent, for abort and interrupt
    task: str = ""  # the interrupting run's task
    how: Literal["generate", "stream"] = "generate"


@attrs.frozen
class TeamCase:
    members: tuple[Member, ...]
    #: (task, agent number, steps): the script of every run that may happen.
    scripts: tuple[tuple[str, int, tuple[Step, ...]], ...]
    cuts: tuple[Cut, ...]
    timeout: float | None  # the main run's
    budget: BudgetMode
    max: int

    def script(self, task: str) -> tuple[Step, ...]:
        return next(steps for name, _, steps in self.scripts if name == task)


# -- strategies --------------------------------------------------------------------------------

moments = st.integers(0, 24).map(lambda quarters: quarters / 4)  # ties with delays are likely
durations = st.sampled_from([0.0, 0.5, 1.0, 2.5, 10.0])
usages = st.none() | st.builds(Usage, st.integers(0, 8), st.integers(0, 8))
timeouts = st.sampled_from([None, None, None, 0.25, 0.5, 1.0, 1.75, 2.5, 4.0, 6.0, 10.0])


@st.composite
def team_cases(draw: st.DrawFn) -> TeamCase:
    depth = draw(st.sampled_from([3, 2, 1]))
    members: dict[int, Member] = {}
    count = [0]

    def member(level: int, mode: Mode) -> int:
        index = count[0]
        count[0] += 1
        children: list[int] = []
        if level < depth:
            for _ in range(draw(st.sampled_from([2, 1, 3] if level == 0 else [1, 0, 1, 2]))):
                if count[0] >= MAX_AGENTS:
                    break
                children.append(member(level + 1, draw(st.sampled_from(["fresh", "shared"]))))
        members[index] = Member(
            index=index,
            depth=level,
            mode=mode,
            children=tuple(children),
            limit=draw(
                st.sampled_from([3, 2, 4] if level == 0 else [3, 1, 2] if children else [2, 1, 3])
            ),
            timeout=None if level == 0 else draw(timeouts),
            tool_concurrency=draw(st.integers(1, 3)),
        )
        return index

    member(0, "lead")
    scripts: list[tuple[str, int, tuple[Step, ...]]] = []
    room = [MAX_DELEGATIONS]

    def script(agent: int, task: str) -> None:
        owner = members[agent]
        steps: list[Step] = []
        for index in range(draw(st.integers(1, 4 if owner.depth == 0 else 3))):
            kind = draw(st.sampled_from(["reply"] * 7 + ["hang", "fail"]))
            if index == 0 and owner.children and draw(st.integers(0, 4)) > 0:
                kind = "reply"  # most runs that can delegate begin by delegating
            if kind == "hang":
                steps.append(Hang(draw(st.text("xy", max_size=6))))
                continue
            if kind == "fail":
                steps.append(Fail(delay=draw(st.sampled_from([0.0, 1.0]))))
                continue
            calls: list[ToolCall] = []
            delegating = bool(owner.children) and room[0] > 0
            counts = [0, 1, 2, 2, 3] if delegating else [0, 1]
            if delegating and index == 0:
                counts = [1, 2, 2, 3]
            for number in range(draw(st.sampled_from(counts))):
                call_id = f"{task}.{index}{number}"
                delegate = room[0] > 0 and delegating and draw(st.integers(0, 3)) > 0
                if not delegate:
                    arguments = {"seconds": draw(durations), "tag": call_id}
                    calls.append(ToolCall(call_id, "nap", arguments))
                    continue
                room[0] -= 1
                child = draw(st.sampled_from(owner.children))
                calls.append(ToolCall(call_id, members[child].name, {"input": f"task {call_id}"}))
                script(child, call_id)
            steps.append(
                Reply(
                    text=draw(st.text("ab .", max_size=12)),
                    thinking=draw(st.sampled_from(["", "hm", "let me see"])),
                    calls=calls,
                    usage=draw(usages),
                    chunk=draw(st.integers(0, 6)),
                    delay=draw(st.sampled_from([0.0, 0.25, 0.5])),
                )
            )
        scripts.append((task, agent, tuple(steps)))

    script(0, MAIN)
    cuts: list[Cut] = []
    for number in range(draw(st.sampled_from([1, 0, 1, 2, 3]))):
        kind: CutKind = draw(
            st.sampled_from(["token", "token", "abort", "abort", "interrupt", "outer", "close"])
        )
        if kind in ("outer", "close") and any(cut.kind == kind for cut in cuts):
            kind = "token"  # the caller cuts its own run once
        if kind == "close":
            cuts.append(Cut("close", draw(st.integers(0, 40))))
        elif kind == "abort":
            cuts.append(Cut("abort", draw(moments), draw(st.sampled_from(sorted(members)))))
        elif kind == "interrupt":
            targets = sorted(i for i, m in members.items() if m.mode != "fresh")
            target = draw(st.sampled_from(targets))
            task = f"i{number}"
            script(target, task)
            how: Literal["generate", "stream"] = draw(st.sampled_from(["generate", "stream"]))
            cuts.append(Cut("interrupt", draw(moments), target, task, how))
        else:
            cuts.append(Cut(kind, draw(moments)))
    return TeamCase(
        members=tuple(members[index] for index in sorted(members)),
        scripts=tuple(scripts),
        cuts=tuple(cuts),
        timeout=draw(timeouts),
        budget=draw(st.sampled_from(["none", "team", "none", "lead"])),
        max=draw(st.sampled_from([30, 0, 2, 5, 10, 15, 20, 45, 60, 90])),
    )


# -- driving one example -----------------------------------------------------------------------


class _ByTask(ScriptedProvider):
    """An agent's provider: each call is answered from the script of the task its run was
    asked (the latest ``task <id>`` user message of the prompt)."""

    def __init__(self, scripts: Mapping[str, ScriptedProvider]) -> None:
        super().__init__()
        self.scripts = scripts

    def stream(self, messages: Sequence[Message], **options: Any) -> Any:
        asked = [m.content for m in messages if m.role is Role.USER and m.content[:5] == "task "]
        return self.scripts[asked[-1][5:]].stream(messages, **options)


@attrs.define
class Outcome:
    """What the caller of one top-level run saw."""

    run_id: str | None = None
    chunks: list[tuple[float, Chunk]] = attrs.Factory(list)  # (when it arrived, the chunk)
    result: AgentResult | None = None
    error: BaseException | None = None


@attrs.define
class Record:
    """What the test observed of one example."""

    start: float
    #: Every run's own events, in the order they happened: (when, agent, event, team count).
    events: list[tuple[float, str, AgentEvent, int | None]] = attrs.Factory(list)
    main: Outcome = attrs.Factory(Outcome)
    interrupts: dict[str, Outcome] = attrs.Factory(dict)
    #: When the main run's caller cut it itself (its scope, leaving the stream).
    cut_at: float | None = None
    caller_cancelled: bool = False
    end: float = 0.0
    fired: list[tuple[float, Cut]] = attrs.Factory(list)
    watchdog: float = math.inf
    #: When the team budget tripped, its count then, and how many events had happened.
    trip: tuple[float, int, int] | None = None


async def _watchdog(agents: Sequence[Agent], record: Record) -> None:
    while True:
        await trio.sleep(WATCHDOG)
        if any(agent.busy for agent in agents):
            record.watchdog = min(record.watchdog, trio.current_time())
            for agent in agents:
                agent.abort("watchdog: nothing else bounds this run")


async def _cut(agents: Sequence[Agent], cut: Cut, token: Abort, record: Record) -> None:
    await trio.sleep_until(record.start + cut.at)
    record.fired.append((trio.current_time(), cut))
    if cut.kind == "token":
        token.cancel("the user pressed stop")
    else:
        agents[cut.target].abort("the user pressed stop here")


async def _interrupt(agent: Agent, cut: Cut, record: Record) -> None:
    outcome = record.interrupts[cut.task] = Outcome()
    await trio.sleep_until(record.start + cut.at)
    record.fired.append((trio.current_time(), cut))
    text = f"task {cut.task}"
    try:
        if cut.how == "generate":
            outcome.result = await agent.generate(text, if_busy="interrupt")
            outcome.run_id = outcome.result.run_id
        else:
            async with agent.stream(text, if_busy="interrupt") as stream:
                outcome.run_id = stream.run_id
                async for chunk in stream:
                    outcome.chunks.append((trio.current_time(), chunk))
                outcome.result = stream.result
    except (ScriptExhausted, ProviderError) as error:
        outcome.error = error


async def _main(lead: Agent, case: TeamCase, token: Abort, record: Record) -> None:
    outcome = record.main
    options: dict[str, Any] = {"timeout": case.timeout, "abort": [token]}
    if case.budget == "lead":
        options["budget"] = TokenBudget(max=case.max)
    close = next((cut for cut in case.cuts if cut.kind == "close"), None)
    outer_cut = next((cut for cut in case.cuts if cut.kind == "outer"), None)
    with trio.CancelScope() as outer:
        if outer_cut is not None:
            if outer_cut.at == 0:
                outer.cancel()  # the caller is already cancelled when it asks
            else:
                outer.deadline = record.start + outer_cut.at
        try:
            async with lead.stream(f"task {MAIN}", **options) as stream:
                outcome.run_id = stream.run_id
                if close is not None and close.at == 0:
                    record.cut_at = trio.current_time()  # never iterated: never started
                    return
                async for chunk in stream:
                    outcome.chunks.append((trio.current_time(), chunk))
                    if close is not None and len(outcome.chunks) >= close.at:
                        record.cut_at = trio.current_time()
                        break
                else:
                    outcome.result = stream.result
        except (ScriptExhausted, ProviderError) as error:
            outcome.error = error
    record.end = trio.current_time()
    record.caller_cancelled = outer.cancelled_caught
    if outer.cancelled_caught:
        assert outer_cut is not None
        record.cut_at = record.start + outer_cut.at


def _tasks() -> int:
    return trio.lowlevel.current_statistics().tasks_living


@attrs.frozen
class Finished:
    """What was left to check once the runtime closed."""

    record: Record
    histories: dict[int, tuple[Message, ...]]  # the lead's and every shared child's
    providers: dict[str, ScriptedProvider]  # by task
    team_used: int | None


async def _exercise(case: TeamCase) -> Finished:
    living = _tasks()
    record = Record(start=0.0)
    providers = {task: ScriptedProvider(*steps) for task, _, steps in case.scripts}
    team = TeamBudget(case.max) if case.budget == "team" else None
    if team is not None:
        team.meter.on_trip(lambda: _tripped(record, team))
    histories: dict[int, tuple[Message, ...]] = {}
    with trio.fail_after(10 * WATCHDOG):  # a deadlock fails instead of hanging
        async with open_runtime() as runtime:
            agents: dict[int, Agent] = {}
            for member in reversed(case.members):  # children before their parents
                tools: list[Any] = [
                    agents[child].as_tool(conversation=_conversation(case.members[child]))
                    for child in member.children
                ]
                scripts = {t: providers[t] for t, owner, _ in case.scripts if owner == member.index}

                def listen(event: AgentEvent, name: str = member.name) -> None:
                    if not event.path:  # a run's own events, once each
                        used = team.used if team is not None else None
                        record.events.append((trio.current_time(), name, event, used))

                agents[member.index] = await Agent.start(
                    runtime,
                    _ByTask(scripts),
                    name=member.name,
                    tools=[*tools, nap],
                    limit=member.limit,
                    timeout=member.timeout,
                    budget=team,
                    tool_concurrency=member.tool_concurrency,
                    on=[listen],
                )
            team_agents = [agents[index] for index in sorted(agents)]
            await trio.testing.wait_all_tasks_blocked()
            idle = _tasks()
            record.start = trio.current_time()
            token = Abort()
            async with trio.open_nursery() as guard:
                guard.start_soon(_watchdog, team_agents, record)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_main, agents[0], case, token, record)
                    for cut in case.cuts:
                        if cut.kind in ("token", "abort"):
                            nursery.start_soon(_cut, team_agents, cut, token, record)
                        elif cut.kind == "interrupt":
                            nursery.start_soon(_interrupt, agents[cut.target], cut, record)
                guard.cancel_scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert _tasks() == idle, "a task of the team's runs outlived them"
            statistics = runtime.statistics()
            assert statistics.restarts == 0, "the root supervisor restarted"
            assert statistics.child_restarts == 0, "an agent's actor restarted"
            for agent in team_agents:
                assert agent.status is not AgentStatus.RUNNING, f"{agent.name} left running"
                assert not agent.busy, f"{agent.name} still has runs"
                assert agent.statistics()["queued"] == 0
            for member in case.members:
                if member.mode != "fresh":
                    histories[member.index] = await agents[member.index].conversation.messages()
    assert _tasks() == living, "a task outlived the runtime"
    return Finished(record, histories, providers, None if team is None else team.used)


def _conversation(member: Member) -> Literal["fresh", "shared"]:
    return "shared" if member.mode == "shared" else "fresh"


def _tripped(record: Record, team: TeamBudget) -> None:
    record.trip = (trio.current_time(), team.used, len(record.events))


# -- what the events say about each run --------------------------------------------------------


@attrs.define(eq=False)
class RunInfo:
    """One run as its own events told it."""

    run_id: str
    agent: str
    start: float | None = None
    #: Where its start and its end are in the event log.
    first: int = -1
    last: int = -1
    end: float | None = None
    stop: StopReason | None = None
    failed: bool = False
    parent: RunInfo | None = None
    draws: list[Usage | None] = attrs.Factory(list)
    #: Child runs it started (subagent_start), by call id, and how each call ended.
    started: dict[str, str] = attrs.Factory(dict)
    finished: dict[str, str] = attrs.Factory(dict)

    @property
    def began(self) -> bool:
        """It was taken and ran (a run withdrawn while it waited never began; a delegated run
        whose parent was cut before its request was queued has no events at all)."""
        return self.start is not None

    def path(self) -> Iterator[RunInfo]:
        """This run and the runs above it, up to its top-level run."""
        run: RunInfo | None = self
        while run is not None:
            yield run
            run = run.parent

    def root(self) -> RunInfo:
        return list(self.path())[-1]


def _runs(record: Record) -> dict[str, RunInfo]:
    runs: dict[str, RunInfo] = {}

    def info(run_id: str, agent: str) -> RunInfo:
        return runs.setdefault(run_id, RunInfo(run_id, agent))

    for position, (when, agent, ev, _) in enumerate(record.events):
        run = info(ev.run_id, agent)
        assert run.agent == agent
        if ev.kind == "start":
            assert run.start is None, "a run started twice"
            run.start = when
            run.first = position
        elif ev.kind in ("finish", "error"):
            assert run.end is None, "a run ended twice"
            run.end = when
            run.last = position
            run.stop = ev.stop
            run.failed = ev.kind == "error"
        elif ev.kind == "usage":
            run.draws.append(ev.usage)
        elif ev.kind == "subagent_start":
            assert ev.call is not None
            assert ev.child is not None
            assert ev.agent is not None
            assert ev.child.startswith(f"subagent:{ev.call.id}:")  # (and a unique suffix)
            assert ev.call.id not in run.started, "a call delegated twice"
            run.started[ev.call.id] = ev.child
            info(ev.child, ev.agent).parent = run
        elif ev.kind == "subagent_finish":
            assert ev.call is not None
            assert ev.status is not None
            assert ev.call.id in run.started, "a delegation finished that never started"
            assert ev.call.id not in run.finished, "a delegation finished twice"
            run.finished[ev.call.id] = ev.status
    for run in runs.values():
        if run.began:
            # Also a delegated run cut with its caller while its tools ran concurrently (the
            # cancel then leaves as a group): its own listeners hear how it ended.
            assert run.end is not None, f"{run.run_id} began and never ended"
        assert set(run.started) == set(run.finished), "a delegation never finished"
    return runs


@attrs.frozen
class Facts:
    """Everything the checks read."""

    case: TeamCase
    record: Record
    runs: dict[str, RunInfo]
    members: dict[str, Member]  # by agent name
    main_id: str | None

    def task(self, run_id: str) -> str | None:
        if run_id == self.main_id:
            return MAIN
        if run_id.startswith("subagent:"):
            return run_id.removeprefix("subagent:").rsplit(":", 1)[0]
        return next((t for t, o in self.record.interrupts.items() if o.run_id == run_id), None)

    def run_of(self, task: str) -> str | None:
        if task == MAIN:
            return self.main_id
        if task in self.record.interrupts:
            return self.record.interrupts[task].run_id
        return self.child_run(task)

    def child_run(self, call_id: str) -> str | None:
        """The run the call ``call_id`` delegated to (its id is the call's and a suffix)."""
        prefix = f"subagent:{call_id}:"
        return next((run_id for run_id in self.runs if run_id.startswith(prefix)), None)

    def deadline(self, run: RunInfo) -> float:
        """The run's deadline: its own timeout from its start, or the one it inherited."""
        inherited = math.inf if run.parent is None else self.deadline(run.parent)
        timeout = self.case.timeout if run.run_id == self.main_id else self.timeout(run)
        if run.start is None or timeout is None:
            return inherited
        return min(inherited, run.start + timeout)

    def timeout(self, run: RunInfo) -> float | None:
        return self.members[run.agent].timeout

    def cancel_reached(self, run: RunInfo) -> bool:
        """A cancel aimed at this run, or at a run above it, happened before it ended."""
        assert run.end is not None
        record = self.record
        if record.watchdog <= run.end:
            return True
        agents = {above.agent for above in run.path()}
        main = run.root().run_id == self.main_id
        for when, cut in record.fired:
            if when > run.end:
                continue
            if cut.kind in ("abort", "interrupt") and self.case.members[cut.target].name in agents:
                return True
            if cut.kind == "token" and main:
                return True
        if main and record.cut_at is not None and record.cut_at <= run.end:
            return True
        # A cut parent cuts its children: a shared child's waiting run is withdrawn
        # (cancelled) whatever cut the parent, and one running when the parent's deadline
        # passes may see the parent's give-up before its own deadline.
        parent = run.parent
        return parent is not None and parent.stop in CUTS

    def budget_reached(self, run: RunInfo, lead_trip: float | None, lead_known: bool) -> bool:
        """The budget this run draws on was reached before it ended."""
        assert run.end is not None
        if self.case.budget == "team":
            trip = self.record.trip
            return trip is not None and trip[0] <= run.end
        if self.case.budget == "lead" and run.root().run_id == self.main_id:
            if not lead_known:
                return True  # the stream was left early: the meter cannot be replayed
            return lead_trip is not None and lead_trip <= run.end
        return False

    def cut_by_parent(self, child: RunInfo) -> bool:
        """Whatever stopped ``child`` also cut the run that called it: its parent's cancel,
        deadline or budget (children have no budget of their own)."""
        stop = child.stop
        if stop is StopReason.BUDGET:
            return True
        if stop is StopReason.CANCELLED:
            assert child.end is not None
            if self.record.watchdog <= child.end:
                return False
            return not any(
                when <= child.end
                and cut.kind in ("abort", "interrupt")
                and self.case.members[cut.target].name == child.agent
                for when, cut in self.record.fired
            )
        if stop is StopReason.TIMEOUT:
            assert child.parent is not None
            assert child.start is not None
            timeout = self.timeout(child)
            own = math.inf if timeout is None else child.start + timeout
            return self.deadline(child.parent) <= own
        return False


# -- what the chunks say about each run --------------------------------------------------------


@attrs.define
class TurnSeen:
    """One provider turn of a run as its chunks showed it, with the calls and results that
    followed it."""

    content: str = ""
    thinking: str = ""
    usage: Chunk | None = None
    calls: list[ToolCall] = attrs.Factory(list)
    results: list[ToolResult] = attrs.Factory(list)


def _turns(chunks: Sequence[Chunk]) -> list[TurnSeen]:
    turns: list[TurnSeen] = []
    turn = TurnSeen()
    for chunk in chunks:
        if chunk.kind in ("content", "thinking", "usage") and turn.usage is not None:
            turns.append(turn)  # the next turn begins
            turn = TurnSeen()
        if chunk.kind == "content":
            turn.content += chunk.text
        elif chunk.kind == "thinking":
            assert not turn.content, "thinking streamed after the turn's text"
            turn.thinking += chunk.text
        elif chunk.kind == "usage":
            turn.usage = chunk
        elif chunk.kind == "tool_call":
            assert turn.usage is not None, "a call shown before its turn settled"
            assert not turn.results, "a call shown after results"
            assert chunk.call is not None
            turn.calls.append(chunk.call)
        elif chunk.kind == "tool_result":
            assert turn.usage is not None, "a result shown before its turn settled"
            assert chunk.result is not None
            turn.results.append(chunk.result)
        else:
            assert chunk.kind == "progress"
            assert turn.usage is not None, "progress before its turn settled"
            assert turn.calls, "progress outside a tool batch"
            assert chunk.call in turn.calls, "progress of a call not in the batch"
    if turn.usage is not None or turn.content or turn.thinking:
        turns.append(turn)
    return turns


def _text(result: ToolResult) -> str:
    return result.render() if isinstance(result, ToolSuccess) else result.error


def _expected(step: Step | None) -> tuple[str, str]:
    if isinstance(step, Reply):
        return step.text, step.thinking
    if isinstance(step, Hang):
        return step.text, ""
    return "", ""


def _check_chunks(
    run_id: str, chunks: Sequence[Chunk], steps: Sequence[Step], *, complete: bool
) -> list[tuple[str, str, str, bool]]:
    """A run's chunks against its script: every turn but the last streamed its whole step and
    had each of its calls answered once, right after it; the last may be cut anywhere. Returns
    the answered calls: (call id, tool name, text, in the run's last turn). ``complete``: the
    stream was read to its end (else only a prefix of the run was seen)."""
    turns = _turns(chunks)
    assert len(turns) <= len(steps) + 1, f"{run_id}: more turns than its script"
    answered: list[tuple[str, str, str, bool]] = []
    for index, turn in enumerate(turns):
        last = index == len(turns) - 1
        step = steps[index] if index < len(steps) else None  # None: the script ran out
        text, thinking = _expected(step)
        assert text.startswith(turn.content), f"{run_id}: content not from its script"
        assert thinking.startswith(turn.thinking), f"{run_id}: thinking not from its script"
        whole = isinstance(step, Reply) and (turn.content, turn.thinking) == (text, thinking)
        scripted = [call.id for call in step.calls] if isinstance(step, Reply) else []
        if complete or not last:
            assert turn.usage is not None, f"{run_id}: a turn never settled its usage"
        ids = [result.id for result in turn.results]
        assert len(ids) == len(set(ids)), f"{run_id}: a call answered twice"
        texts = [_text(result) for result in turn.results]
        if turn.calls:
            assert whole, f"{run_id}: calls of a turn cut short"
            shown = [call.id for call in turn.calls]
            if complete or not last or turn.results:
                assert shown == scripted, f"{run_id}: calls differ from the script"
            else:
                assert shown == scripted[: len(shown)], f"{run_id}: calls differ from the script"
            assert set(ids) <= set(scripted), f"{run_id}: an unknown call answered"
            if complete or not last:
                assert sorted(ids) == sorted(scripted), f"{run_id}: a call left unanswered"
        elif turn.results:
            # The stream ended, but the run was cut before it committed the turn: the calls
            # are committed with the interrupted message, none run.
            assert last, f"{run_id}: results without calls"
            assert whole, f"{run_id}: results without calls"
            assert set(texts) == {NOT_EXECUTED}
            assert set(ids) <= set(scripted)
            if complete:
                assert sorted(ids) == sorted(scripted)
        if not last:
            assert whole, f"{run_id}: the run went on after a cut turn"
            assert scripted, f"{run_id}: the run went on after a turn without calls"
            assert INTERRUPTED not in texts
            assert NOT_EXECUTED not in texts
            assert EXHAUSTED not in texts, f"{run_id}: the run went on after its limit"
        elif EXHAUSTED in texts:
            assert set(texts) == {EXHAUSTED}, texts
        for text_ in texts:
            if text_.startswith(REPEATED):
                assert all(t.startswith(REPEATED) for t in texts)
        answered.extend(
            (result.id, result.name, text_, last)
            for result, text_ in zip(turn.results, texts, strict=True)
        )
    return answered


# -- what the histories say about each run -----------------------------------------------------


def _well_formed(messages: Sequence[Message]) -> None:
    """Each assistant's calls are answered right after it, once each; nothing else is."""
    pending: list[str] = []
    for message in messages:
        if message.role is Role.TOOL:
            assert message.tool_call_id in pending, f"an unknown call is answered: {message}"
            pending.remove(message.tool_call_id)
            continue
        assert not pending, f"calls without a result: {pending}"
        if message.role is Role.ASSISTANT:
            pending = [call.id for call in message.calls]
            assert len(pending) == len(set(pending))
    assert not pending, f"calls without a result: {pending}"
    answers = Counter(m.tool_call_id for m in messages if m.role is Role.TOOL)
    assert set(answers.values()) <= {1}, "a call answered twice"


def _segments(history: Sequence[Message]) -> Iterator[tuple[str, tuple[Message, ...]]]:
    """The runs of one conversation, each from its ``task <id>`` message on (runs on one
    agent's conversation are one at a time)."""
    starts = [
        i for i, m in enumerate(history) if m.role is Role.USER and m.content.startswith("task ")
    ]
    assert starts[:1] == [0] or not history
    for begin, end in zip(starts, [*starts[1:], len(history)][: len(starts)], strict=True):
        yield history[begin].content.removeprefix("task "), tuple(history[begin:end])


def _answered(messages: Sequence[Message]) -> list[tuple[str, str, str, bool]]:
    """A run's answered calls: (call id, tool name, text, in the run's last batch)."""
    assistants = [i for i, m in enumerate(messages) if m.role is Role.ASSISTANT]
    answered: list[tuple[str, str, str, bool]] = []
    for index, message in enumerate(messages):
        if message.role is Role.TOOL:
            owner = max(i for i in assistants if i < index)
            assert message.tool_call_id is not None
            assert message.name is not None
            last = owner == assistants[-1]
            answered.append((message.tool_call_id, message.name, message.content, last))
    return answered


# -- the checks --------------------------------------------------------------------------------


def _check(case: TeamCase, done: Finished) -> None:
    record = done.record
    runs = _runs(record)
    facts = Facts(case, record, runs, {m.name: m for m in case.members}, record.main.run_id)
    delegated = [run for run in runs.values() if run.parent is not None]
    event(f"delegated runs: {min(len(delegated), 4)}{'+' if len(delegated) >= 4 else ''}")
    event(f"depth reached: {max((len(list(run.path())) - 1 for run in runs.values()), default=0)}")
    main = record.main
    if record.cut_at is not None and main.result is None and main.error is None:
        # The caller cut its own run: control back at once (a commit takes no time, at any
        # depth of the tree).
        assert record.end == record.cut_at, "the caller was held after cutting its own run"
        event("the caller cut its own run")
    for task, owner, _ in case.scripts:
        provider = done.providers[task]
        assert len(provider.calls) <= case.members[owner].limit
        for call in provider.calls:
            _well_formed(call.messages)  # every provider call saw a well-formed history
    answered = _check_histories(facts, done.histories)
    _check_streams(facts, answered)
    lead_budget = _check_lead_budget(facts)
    _check_stops(facts, lead_budget)
    _check_delegations(facts, answered)
    if case.budget == "team":
        _check_team_budget(facts, done.team_used)


def _check_histories(
    facts: Facts, histories: Mapping[int, Sequence[Message]]
) -> dict[str, list[tuple[str, str, str, bool]]]:
    """The lead's and every shared child's conversation: well formed, each run's part with at
    most one interrupted message, its last, and what its caller's result says. Returns each
    run's answered calls."""
    answered: dict[str, list[tuple[str, str, str, bool]]] = {}
    record = facts.record
    for index, history in histories.items():
        _well_formed(history)
        for task, segment in _segments(history):
            interrupted = [m for m in segment if m.interrupted]
            assistants = [m for m in segment if m.role is Role.ASSISTANT]
            assert len(interrupted) <= 1, "two interrupted messages in one run"
            if interrupted:
                assert assistants[-1] is interrupted[0], "a run went on after a cut turn"
                event("an interrupted assistant message")
            run_id = facts.run_of(task)
            if run_id is None:  # an interrupting generate() that raised: no id to match
                assert record.interrupts[task].error is not None
                continue
            run = facts.runs[run_id]
            assert run.began
            assert facts.members[run.agent].index == index
            answered[run_id] = _answered(segment)
            outcome = record.main if task == MAIN else record.interrupts.get(task)
            if outcome is not None and outcome.result is not None:
                assert outcome.result.messages == segment, "the history differs from the result"
    return answered


def _check_streams(facts: Facts, answered: dict[str, list[tuple[str, str, str, bool]]]) -> None:
    """Every streamed run's chunks, at every depth, against its script; a fresh child's answered
    calls are known from them alone (its conversation is gone)."""
    for outcome in [facts.record.main, *facts.record.interrupts.values()]:
        complete = outcome.result is not None or outcome.error is not None
        by_run: dict[str, list[Chunk]] = {}
        for _, chunk in outcome.chunks:
            by_run.setdefault(chunk.run_id, []).append(chunk)
        for run_id, chunks in by_run.items():
            task = facts.task(run_id)
            assert task is not None, f"chunks of an unknown run {run_id}"
            seen = _check_chunks(run_id, chunks, facts.case.script(task), complete=complete)
            if not complete:
                continue
            if run_id in answered:
                # ("last" may differ: a cut turn that committed nothing is a turn of the stream)
                shown = Counter(answer[:3] for answer in seen)
                stored = Counter(answer[:3] for answer in answered[run_id])
                assert shown == stored, "the stream and the history differ"
            else:
                answered[run_id] = seen


@attrs.frozen
class LeadBudget:
    """The lead's own budget, replayed from its stream (``known``: the stream was read to its
    end), and when it was first reached."""

    known: bool
    trip: float | None = None


def _check_lead_budget(facts: Facts) -> LeadBudget:
    """With a ``TokenBudget`` on the lead's run: what the tree charged is exactly its draws,
    no turn began and no text was shown on a spent budget, and it ended at most one charge
    past its maximum, plus what the turns then in flight settled."""
    case, record, main = facts.case, facts.record, facts.record.main
    if case.budget != "lead" or main.run_id is None:
        return LeadBudget(known=False)
    tree = [run for run in facts.runs.values() if run.root().run_id == main.run_id]
    settled = 0
    for _, _, ev, _ in record.events:
        if facts.runs[ev.run_id] not in tree:
            continue
        if ev.kind == "usage":
            assert ev.usage is not None, "a run with a budget always knows its draw"
            settled += ev.usage.total
        elif ev.kind == "turn":
            assert settled < case.max, "a turn began on the lead's spent budget"
    known = main.result is not None or main.error is not None
    if not known:
        return LeadBudget(known=False)
    trip, tripped_at, final = _replay(main.chunks, case.max)
    if trip is not None:
        # The trip cut every run of the tree at once, wherever it was.
        for run in tree:
            if run.start is not None and run.start < trip and run.end is not None:
                assert run.end <= trip, f"{run.run_id} went on after the lead's budget tripped"
    assert final == settled, "the lead's meter differs from its runs' draws"
    _within(case, final, tripped_at, _most_in_flight(record, tree), "the lead's budget")
    if main.result is not None:
        total = main.result.total_usage
        assert total is not None, "total_usage unknown with a budget"
        assert total.total == final, "total_usage is not the tree's"
    return LeadBudget(known=True, trip=trip)


def _check_team_budget(facts: Facts, used: int | None) -> None:
    """With a ``TeamBudget`` on every agent: the same, for the team's meter (read directly)."""
    case, record = facts.case, facts.record
    assert used is not None
    assert used == sum(d.total for run in facts.runs.values() for d in run.draws if d)
    for _, _, ev, count in record.events:
        if ev.kind == "turn":
            assert count is not None
            assert count < case.max, "a turn began on a spent budget"
    tripped_at = None if record.trip is None else record.trip[1]
    if not record.interrupts and (record.main.result or record.main.error):
        # Every run was in the main stream, in the order it charged: replay the meter.
        _, replayed, final = _replay(record.main.chunks, case.max)
        assert (replayed, final) == (tripped_at, used), "the team's meter differs from a replay"
    _within(case, used, tripped_at, _most_in_flight(record, list(facts.runs.values())), "team")
    if record.trip is not None:
        # The trip cut every run drawing on the team at once, wherever it was.
        when, _, position = record.trip
        for run in facts.runs.values():
            if run.began and run.first < position and run.last >= position:
                assert run.end == when, f"{run.run_id} went on after the team's budget tripped"


def _within(case: TeamCase, used: int, tripped_at: int | None, in_flight: int, what: str) -> None:
    """The charge that first reached the budget is one charge; once reached, only the turns
    then in flight settle, one charge each (see the module docstring)."""
    largest = _largest_charge(case)
    if tripped_at is None:
        assert used < case.max, f"{what}: reached without a trip"
        return
    event(f"{what} tripped with {min(in_flight, 3)} turns in flight at most")
    assert tripped_at < max(case.max + largest, 1), f"{what}: tripped {tripped_at}/{case.max}"
    bound = case.max - 1 + largest * (1 + in_flight)
    assert used <= max(bound, case.max), f"{what}: {used}/{case.max}, bound {bound}"


def _largest_charge(case: TeamCase) -> int:
    """The most one charge to a meter can add: a content delta's estimate, or a turn's
    settling (its reported usage, or the estimate of its thinking)."""
    largest = 0
    for _, _, steps in case.scripts:
        for step in steps:
            if isinstance(step, Hang):
                largest = max(largest, estimate_tokens(step.text))
            elif isinstance(step, Reply):
                size = step.chunk or len(step.text) or 1
                largest = max(largest, estimate_tokens(step.text[:size]))
                settle = step.usage.total if step.usage is not None else 0
                largest = max(largest, settle, estimate_tokens(step.thinking))
    return largest


def _most_in_flight(record: Record, runs: Sequence[RunInfo]) -> int:
    """The most provider turns of ``runs`` streaming at one time (from a turn's start to its
    usage)."""
    ids = {run.run_id for run in runs}
    flying: set[str] = set()
    most = 0
    for _, _, ev, _ in record.events:
        if ev.run_id not in ids:
            continue
        if ev.kind == "turn":
            flying.add(ev.run_id)
            most = max(most, len(flying))
        elif ev.kind == "usage":
            flying.discard(ev.run_id)
    return most


def _replay(
    chunks: Sequence[tuple[float, Chunk]], budget: int
) -> tuple[float | None, int | None, int]:
    """Replay a meter from a stream that carries every run drawing on it (chunks arrive in
    the order they were charged: a content delta is charged as it is shown, a turn's draw
    before its usage chunk): (when it first reached ``budget``, its count then, its count at
    the end). Checks that no text was shown while it was spent."""
    settled = 0
    chars: dict[str, int] = {}
    estimates: dict[str, int] = {}
    trip: tuple[float, int] | None = (-math.inf, 0) if budget == 0 else None
    for when, chunk in chunks:
        run = chunk.run_id
        if chunk.kind == "content":
            count = settled + sum(estimates.values())
            assert count < budget, f"text shown on a spent budget ({count}/{budget})"
            chars[run] = chars.get(run, 0) + len(chunk.text)
            estimates[run] = estimate_tokens("x" * chars[run])
        elif chunk.kind == "usage":
            assert chunk.usage is not None, "a run with a budget always knows its draw"
            settled += chunk.usage.total
            chars[run] = estimates[run] = 0
        count = settled + sum(estimates.values())
        if trip is None and count >= budget:
            trip = (when, count)
    assert not any(estimates.values()), "a turn never settled its usage"
    return (None, None, settled) if trip is None else (*trip, settled)


def _check_stops(facts: Facts, lead: LeadBudget) -> None:
    """Each run stopped as its bounds allow: cancelled only after a cancel reached it (or its
    parent was cut), timeout only past its deadline, budget only once its budget was reached."""
    for run in facts.runs.values():
        if run.stop is None:
            continue
        assert run.end is not None
        allowed = {StopReason.COMPLETE, StopReason.EXHAUSTED}
        if facts.cancel_reached(run):
            allowed.add(StopReason.CANCELLED)
        if run.end >= facts.deadline(run):
            allowed.add(StopReason.TIMEOUT)
        if facts.budget_reached(run, lead.trip, lead.known):
            allowed.add(StopReason.BUDGET)
        assert run.stop in allowed, (
            f"{run.run_id} ({run.agent}) stopped {run.stop.value}; only {sorted(allowed)}"
        )
        event(f"stop{' (delegated)' if run.parent else ''}: {run.stop.value}")
    main = facts.record.main
    if main.result is not None:
        assert main.run_id is not None
        assert main.result.stop is facts.runs[main.run_id].stop


def _check_delegations(
    facts: Facts, answered: Mapping[str, Sequence[tuple[str, str, str, bool]]]
) -> None:
    """A call of a child agent is answered by the child's answer (noting an early stop), its
    failure, or -- when the calling run was cut in that batch -- interrupted (it was running)
    or not executed (it never started). A child that stopped because its parent was cut (a
    cancel, deadline or budget they share) never has its answer recorded: a parent cut while
    a child ran records the call as interrupted."""
    for run_id, calls in answered.items():
        parent = facts.runs[run_id]
        agent = facts.members[parent.agent]
        children = {facts.case.members[child].name for child in agent.children}
        for call_id, name, text, last in calls:
            cut_here = last and parent.stop in CUTS
            if text in (INTERRUPTED, NOT_EXECUTED):
                assert cut_here, f"{call_id}: {text!r}, but its run was not cut there"
            if name not in children:
                continue
            delegated = call_id in parent.started
            child_id = facts.child_run(call_id)
            child = facts.runs.get(child_id) if child_id is not None else None
            if text == INTERRUPTED:
                assert delegated, f"{call_id}: interrupted, but never delegated"
                event("a delegation interrupted")
                continue
            if text in (NOT_EXECUTED, EXHAUSTED) or text.startswith(REPEATED):
                assert not delegated, f"{call_id}: delegated, yet answered {text!r}"
                continue
            assert delegated, f"{call_id}: answered, never delegated"
            assert child is not None
            status = parent.finished[call_id]
            if text.startswith(f"the agent {name!r} failed"):
                assert child.failed
                assert status == "error"
                event("a delegation failed")
                continue
            assert child.stop is not None
            assert status == child.stop.value
            if child.stop is StopReason.COMPLETE:
                assert EARLY not in text
                continue
            assert text.endswith(f"{EARLY}{status})"), text
            assert not facts.cut_by_parent(child), (
                f"{call_id}: the child stopped ({status}) because its parent was cut, yet the "
                f"parent recorded its answer {text!r}"
            )
            event("a child stopped early on its own")


# -- the test ----------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(case=team_cases())
def test_random_team_runs_cut_at_random_points_keep_every_runs_promises(case: TeamCase) -> None:
    done = trio.run(_exercise, case, clock=trio.testing.MockClock(autojump_threshold=0))
    _check(case, done)
