"""A research team: a lead agent hands three tasks to three workers at once, and the terminal
shows the whole team at work, as it happens, each line indented by how deep its speaker is.

What it shows (see docs/multi-agent.md):

* ``worker.as_tool()``: each worker is a tool of the lead. The lead's model calls all three in
  one turn, and the three runs go at the same time;
* ``chunk.path``: the workers' chunks reach the lead's stream, tagged with the hop down to the
  run that made them. ``len(chunk.path)`` is the depth, and ``chunk.path[-1].agent`` the
  speaker;
* ``RunContext``: the workers' tools read the team's notes from ``deps`` (given to the lead's
  run, passed down to the workers) and report progress;
* ``TeamBudget``: one budget for the whole team, which the workers' tokens are charged to as
  they stream; ``subagent_finish`` events give each worker's status and usage.

It runs offline. The model is the project's simulator, served on 127.0.0.1 inside the script,
and the agents reach it over HTTP through ``OpenAIChat``, as they would a real server. The
simulator is a tiny deterministic model. A message saying ``call <tool> with {json}`` makes it
call that tool, and after tool results it reports them. So the lead's task below is written in
that form, and the answers are mechanical. For a real model, point ``OpenAIChat`` at it (see
docs/models.md) and write the task in plain words.

Run: ``python examples/research_team.py``
"""

from __future__ import annotations

import json

import attrs
import trio

from actors import Agent, RunContext, TeamBudget, open_runtime, tool
from actors.agent import AgentEvent, Chunk
from actors.providers import OpenAIChat
from actors.testing import Simulator
from protocols import ToolFailure


@attrs.frozen
class Notes:
    """What the team knows: notes by title. The deps of every run of the team."""

    pages: dict[str, str]


NOTES = Notes(
    {
        "cancel scopes": "A cancel scope cuts everything inside it at once, at the next "
        "checkpoint, and says whether it did.",
        "nurseries": "A nursery owns the tasks it starts and waits for every one of them "
        "before it closes.",
        "memory channels": "Memory channels pass values between tasks, and make a fast "
        "sender wait when the buffer is full.",
    }
)


@tool
async def search_notes(ctx: RunContext[Notes]) -> str:
    """List the notes on file."""
    titles = list(ctx.deps.pages)
    for title in titles:
        ctx.progress(f"found the note on {title}", title=title)
    return f"{len(titles)} notes, on {', '.join(titles[:-1])} and {titles[-1]}"


@tool
async def count_words(ctx: RunContext[Notes]) -> str:
    """Count the words of all the notes."""
    total = 0
    for title, text in ctx.deps.pages.items():
        words = len(text.split())
        ctx.progress(f"{title}: {words} words", title=title, words=words)
        total += words
    return f"{total} words in all"


@tool
async def outline(ctx: RunContext[Notes]) -> str:
    """Draft an outline of a briefing, one point per note."""
    ctx.progress("drafting the outline")
    return "; ".join(f"{n}. {title}" for n, title in enumerate(ctx.deps.pages, 1))


#: Each worker, its job, and the tool it does it with.
WORKERS = {
    "researcher": ("You find sources.", search_notes),
    "analyst": ("You measure sources.", count_words),
    "writer": ("You draft briefings.", outline),
}


class Console:
    """Writes a team's chunks to the terminal as they arrive.

    Every line starts with its speaker, indented four spaces per level of delegation. Text
    streams onto its line; when another run speaks in between (workers run at the same time),
    the line is broken and the text goes on later on a line of its own."""

    def __init__(self, lead: str) -> None:
        self.lead = lead
        #: The run id and kind of the text line being written, if any.
        self.open: tuple[str, str] | None = None

    def show(self, chunk: Chunk) -> None:
        margin = "    " * len(chunk.path)
        who = chunk.path[-1].agent if chunk.path else self.lead
        if chunk.kind in ("content", "thinking"):
            line = (chunk.run_id, chunk.kind)
            if self.open != line:
                self.end_line()
                label = f"{who} (thinking)" if chunk.kind == "thinking" else who
                print(f"{margin}{label}: ", end="")
                self.open = line
            print(chunk.text, end="", flush=True)
        elif chunk.kind == "usage":  # the end of one turn of that run
            if self.open is not None and self.open[0] == chunk.run_id:
                self.end_line()
        elif chunk.kind == "tool_call" and chunk.call is not None:
            self.end_line()
            call = chunk.call
            if call.name in WORKERS:
                print(f"{margin}{who} asks {call.name}: {call.arguments.get('input')!r}")
            else:
                print(f"{margin}{who} calls {call.name}({json.dumps(call.arguments)})")
        elif chunk.kind == "tool_result" and chunk.result is not None:
            self.end_line()
            result = chunk.result
            said = f"failed: {result.error}" if isinstance(result, ToolFailure) else result.value
            print(f"{margin}{who} <- {result.name}: {said}")
        elif chunk.kind == "progress":
            self.end_line()
            print(f"{margin}{who} ... {chunk.text}")

    def end_line(self) -> None:
        if self.open is not None:
            print()
            self.open = None


def task() -> str:
    """The lead's task, in the form the simulator acts on: one call per worker."""
    asks = [
        f"call {name} with {json.dumps({'input': f'call {tool.definition.name}'})}"
        for name, (_, tool) in WORKERS.items()
    ]
    return "Brief me on trio. " + " ".join(asks)


async def main() -> None:
    finished: list[AgentEvent] = []
    team = TeamBudget(max=20_000)
    async with Simulator() as simulator, open_runtime() as runtime:
        model = OpenAIChat(model="simulator", base_url=simulator.openai_base_url, api_key="")
        provider = await runtime.connect(model)  # one supervised connection for the team
        workers: list[Agent] = [
            await runtime.agent(provider, name=name, system=system, tools=[tool])
            for name, (system, tool) in WORKERS.items()
        ]
        lead = await runtime.agent(
            provider,
            name="lead",
            system="You lead a research team. Ask your workers, then brief the user.",
            tools=[worker.as_tool() for worker in workers],
            think=True,  # the simulator then says what it is about to do, on the thinking channel
            budget=team,
            on=[lambda event: finished.append(event) if event.kind == "subagent_finish" else None],
        )
        console = Console(lead.name)
        print(f"user: {task()}")
        async with lead.stream(task(), deps=NOTES) as run:
            async for chunk in run:
                console.show(chunk)
        console.end_line()
        result = run.result

    print()
    for event in sorted(finished, key=lambda event: str(event.agent)):
        tokens = event.usage.total if event.usage is not None else "unknown"
        print(f"{event.agent:>10}: {event.status}, {tokens} tokens, run {event.child}")
    # ->    analyst: complete, ... tokens, run subagent:call_sim0_1:...
    # -> researcher: complete, ... tokens, run subagent:call_sim0_0:...
    # ->     writer: complete, ... tokens, run subagent:call_sim0_2:...
    own, everything = result.usage, result.total_usage
    assert own is not None  # the simulator reports usage, so neither is unknown
    assert everything is not None
    print(f"{result.agent}: {result.stop} after {result.turns} turns")
    # -> lead: complete after 2 turns
    print(f"tokens: {own.total} of the lead's own, {everything.total} in all")
    # -> tokens: ... of the lead's own, ... in all
    print(f"team budget: {team.used} of {team.budget.max} used")
    # -> team budget: ... of 20000 used

    # What the run guarantees, checked: every worker finished, and the team budget was charged
    # exactly what the whole team spent.
    assert [event.status for event in finished] == ["complete"] * len(WORKERS)
    assert team.used == everything.total > own.total


if __name__ == "__main__":
    trio.run(main)
