"""Agents as tools: a call that is a run of another agent inside the calling run
(:meth:`Agent.as_tool <actors.agent.Agent.as_tool>`), and a call that hands the rest of the turn
to another agent (:func:`handoff`).

A delegated run executes in the calling tool's task (``conversation="fresh"``) or in the agent's
own actor (``"shared"``), always bound to the caller: it inherits its deadline and abort, draws
on its budget as it streams, and passes its chunks and events up, tagged with the hop. A cut
parent cuts it; it commits its own partial; the parent records the call as interrupted.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from protocols.errors import ConfigError
from protocols.messages import (
    AgentResult,
    Message,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    Usage,
    new_id,
)
from protocols.toolschema import validate_arguments

from . import _tracing
from ._request import CycleError, _chain, _Request, _State
from ._run_context import RunStep
from ._run_options import RunOptions
from ._tool_run import _tool_run
from .conversation import Conversation
from .tools import _raised

if TYPE_CHECKING:
    from ._run_loop import AgentEvent, Chunk, _Run
    from .agent import Agent

__all__ = ["AgentTool", "HandoffTool", "handoff"]

log = logging.getLogger("trio_agents.agent")

#: How much of a delegated run's error its failure result carries.
_ERROR_LIMIT = 2000

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {
            "type": "string",
            "description": "The task or question for the agent, with everything it needs to know.",
        }
    },
    "required": ["input"],
    "additionalProperties": False,
}


def _tool_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", text)[:64]
    return name or "agent"


def _running_chain() -> tuple[_Request, ...]:
    return tuple(run for run in _chain.get() if run.state is _State.RUNNING)


def _refusal(target: Agent) -> str | None:
    """The model-visible text refusing a run of ``target`` from here (a cycle), if any."""
    chain = _running_chain()
    if any(run.agent is target for run in chain):
        return CycleError([run.agent.name for run in chain], target.name).message
    return None


class AgentTool:
    """A tool whose call is a run of ``agent`` (see :meth:`Agent.as_tool
    <actors.agent.Agent.as_tool>`). Its one argument, ``input``, is the child's user message;
    its result is the child's answer (its structured output, when it has a schema), with a note
    when the child stopped early, or a failure naming its error."""

    def __init__(
        self,
        agent: Agent,
        *,
        name: str | None = None,
        description: str | None = None,
        conversation: Literal["fresh", "shared"] = "fresh",
    ) -> None:
        if conversation not in ("fresh", "shared"):
            raise ConfigError(f"conversation must be 'fresh' or 'shared', not {conversation!r}")
        self.agent = agent
        self.conversation = conversation
        text = description or (
            f"Ask the agent {agent.name!r} to do a task and get its answer. It starts from "
            "only what you write in `input`."
            if conversation == "fresh"
            else f"Ask the agent {agent.name!r}, which remembers earlier requests, and get its "
            "answer."
        )
        self._definition = ToolDefinition(name or _tool_name(agent.name), text, _PARAMETERS)

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told about the tool."""
        return self._definition

    def __repr__(self) -> str:
        return f"<AgentTool {self._definition.name} -> {self.agent.name} ({self.conversation})>"

    async def call(self, call: ToolCall) -> ToolResult:
        """Run the child for ``call``; every failure is a result, a cut propagates."""
        problems = validate_arguments(self._definition.parameters, call.arguments)
        if problems:
            return ToolFailure(call.id, call.name, "invalid arguments: " + "; ".join(problems))
        child = self.agent
        refusal = _refusal(child)
        if refusal is not None:
            return ToolFailure(call.id, call.name, refusal)
        parent = _tool_run.get()
        request = _child_request(child, parent, call, str(call.arguments["input"]))
        started = trio.current_time()
        if parent is not None:
            request.open_log()  # followed by its id from the moment the parent names it
            parent.event("subagent_start", call=call, agent=child.name, child=request.run_id)
        fresh: Conversation | None = None
        result: AgentResult | None = None
        status = "cancelled"
        try:
            if self.conversation == "fresh":
                runtime = child._runtime
                if runtime is None:
                    return ToolFailure(call.id, call.name, f"agent {child.name!r} was not started")
                fresh = request.conversation = await Conversation.start(runtime)
                result = await child._execute_here(request)
            else:
                result = await child._wait(request)
            status = result.stop.value
            # Cut with its parent (its abort is the parent's): the call was interrupted, not
            # answered -- raise the parent's cancel here rather than report a partial answer.
            await trio.lowlevel.checkpoint_if_cancelled()
        except Exception as error:
            status = "error"
            # Reported as a tool that raised is: a tool_error event, the WARNING log, and a
            # failed parent under on_tool_error="raise".
            log.warning("the agent %r failed (call %r)", child.name, call.id, exc_info=True)
            report = _raised.get()
            if report is not None:
                report(call, error)
            text = f"the agent {child.name!r} failed: {type(error).__name__}: {error}"
            if len(text) > _ERROR_LIMIT:
                text = text[: _ERROR_LIMIT - 3] + "..."
            return ToolFailure(call.id, call.name, text)
        except BaseException:
            # Cut with its parent (Cancelled, or a group of them out of a nursery).
            if parent is not None:
                status = parent.cut_reason().value
            raise
        finally:
            request.close_log()  # (one that never began: its log ends all the same)
            usage = _spent(request.run, result)
            if parent is not None:
                estimated = _estimated(request.run, result)
                parent.delegated_to(usage, estimated=estimated)
                parent.event(
                    "subagent_finish",
                    call=call,
                    agent=child.name,
                    child=request.run_id,
                    status=status,
                    duration=trio.current_time() - started,
                    usage=usage,
                    estimated=estimated,
                )
            if fresh is not None:
                with trio.CancelScope(shield=True):
                    await fresh.stop()
        value: Any = result.output if result.output is not None else result.content
        if result.partial and isinstance(value, str):
            value = f"{value}\n\n(the agent stopped early: {result.stop.value})".lstrip()
        return ToolSuccess(call.id, call.name, value)


def _spent(run: _Run | None, result: AgentResult | None) -> Usage | None:
    if result is not None:
        return result.total_usage
    if run is None:
        return Usage()
    usage, delegated = run.usage, run.delegated
    return None if usage is None or delegated is None else usage + delegated


def _estimated(run: _Run | None, result: AgentResult | None) -> bool:
    """What the delegated run spent includes estimates."""
    if result is not None:
        return result.estimated
    return run is not None and run.estimated


def _child_request(child: Agent, parent: _Run | None, call: ToolCall, text: str) -> _Request:
    """The request of a run delegated to ``child`` by ``call``: traced as a child of the
    context current here -- the call's ``execute_tool`` span, when the parent is traced."""
    if parent is None:
        return child._traced(_Request(child, (Message.user(text),), RunOptions(), None))
    step = RunStep(parent.run_id, call.id, child.name)

    def forward(chunk: Chunk) -> None:
        parent.emit(attrs.evolve(chunk, path=(step, *chunk.path)))

    def forward_event(event: AgentEvent) -> None:
        parent.relay(attrs.evolve(event, path=(step, *event.path)))

    request = _Request(
        child,
        (Message.user(text),),
        RunOptions(abort=(parent.token,)),  # the parent's abort is the child's too
        None,
        # Unique, to be followed by its id (a model's call ids repeat across runs and turns).
        run_id=f"subagent:{call.id}:{new_id()[:12]}",
        path=(*parent.path, step),
        deps=child.deps if child.deps is not None else parent.deps,
        forward=forward,
        forward_event=forward_event,
        deadline=parent.deadline(),
        meters=(parent.meter,) if parent.meter is not None else (),
    )
    return child._traced(request)


class HandoffTool:
    """A tool that ends the calling run's own answer and lets ``agent`` answer the same user
    turn, in the same conversation (see :func:`handoff`)."""

    def __init__(
        self, agent: Agent, *, name: str | None = None, description: str | None = None
    ) -> None:
        self.agent = agent
        self._definition = ToolDefinition(
            name or _tool_name(f"transfer_to_{agent.name}"),
            description
            or f"Hand this conversation to the agent {agent.name!r}, which answers the user "
            "from here. Call it alone, when that agent is the right one to answer.",
            {"type": "object", "properties": {}, "additionalProperties": False},
        )

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told about the tool."""
        return self._definition

    def __repr__(self) -> str:
        return f"<HandoffTool {self._definition.name} -> {self.agent.name}>"

    async def call(self, call: ToolCall) -> ToolResult:
        """Record the handoff on the calling run; every refusal is a result."""
        await trio.lowlevel.checkpoint_if_cancelled()
        target = self.agent
        run = _tool_run.get()
        if run is None:
            return ToolFailure(
                call.id, call.name, "not executed: a handoff works only inside an agent run"
            )
        if target is run.agent:
            return ToolFailure(call.id, call.name, "refused: this agent is already answering")
        refusal = _refusal(target)
        if refusal is not None:
            return ToolFailure(call.id, call.name, refusal)
        first = next(
            (c for c in run.open_calls if isinstance(run.agent.registry.get(c.name), HandoffTool)),
            call,
        )
        if first.id != call.id or run.handoff is not None:
            # Several handoffs in one batch: the first in call order is the one taken.
            chosen = run.agent.registry.get(first.name)
            name = chosen.agent.name if isinstance(chosen, HandoffTool) else target.name
            return ToolFailure(
                call.id, call.name, f"refused: this turn is already handed to {name!r}"
            )
        if target.closed:
            return ToolFailure(call.id, call.name, f"refused: agent {target.name!r} is closed")
        run.handoff = target
        if run.trace is not None:
            # The handed-to run's span is a child of this call's execute_tool span.
            run.handed_from = _tracing.current_context()
        run.event("handoff", call=call, agent=target.name)
        return ToolSuccess(call.id, call.name, f"handed to {target.name}; it answers from here")


def handoff(
    agent: Agent, *, name: str | None = None, description: str | None = None
) -> HandoffTool:
    """A tool that hands the rest of the calling run to ``agent``: when the batch it is in is
    answered, the run makes no further turn of its own; ``agent`` answers the same user turn in
    the same conversation, inside the same run (its deadline, abort and budget), streaming into
    the same stream. The run's result then has ``agent`` set to the agent that answered."""
    return HandoffTool(agent, name=name, description=description)
