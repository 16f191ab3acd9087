"""Guardrails: checks on what goes into a run, what comes out of it, and the tool calls it makes.

A :class:`Guardrail` is a check of one ``kind``:

* ``input``: the run's input (the text of the messages the run was given). By default it runs
  *alongside* the run's first provider call (``when="parallel"``: no latency added); the
  first call's answer is not committed, and none of its tool calls runs, until every input
  guard has passed. ``when="before"``: it runs before that call (nothing is spent on the model
  until it passes). In a durable job every input guard runs before the first call (a job's
  journal has no way to take back what a call streamed).
* ``output``: the run's final answer (its text), once the run would complete.
* ``tool``: each tool call of the model's (a :class:`~protocols.messages.ToolCall`: name and
  arguments), before the authority gate sees it -- only the calls of the tools it names
  (``tools``), or of every tool.

A check is a function of the thing checked, plain or async, that returns ``None`` to pass or
a reason (a non-empty string) to trip -- or an agent (see :func:`input_guardrail`), whose
answer says whether it trips. A guard that trips ends the run: ``stop="guardrail"``, with
:attr:`AgentResult.guardrail <protocols.messages.AgentResult.guardrail>` naming it and its
reason, a ``guardrail`` event and a ``guardrail`` entry in the run's event log (kept in a
durable job's record too). Guards run inside the run: its cancel, deadline and budget cut
them as they cut a tool, and an agent guard's provider calls are charged to the run's budget.
A check that raises fails the run with that exception, as a bug does: a guard never lets a run
through because it could not decide.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

import attrs
import trio

from protocols.codec import dumps
from protocols.errors import ValidationError
from protocols.messages import Message, ToolCall, new_id

from ._request import _Request
from ._run_context import RunStep
from .agent import Agent, RunOptions

if TYPE_CHECKING:
    from ._run_loop import _Run

__all__ = [
    "MAX_AGENT_REASON",
    "VERDICT_SCHEMA",
    "GuardCheck",
    "Guardrail",
    "input_guardrail",
    "output_guardrail",
    "tool_guardrail",
]

#: A guard's check: a function of the thing checked (the input's text, the answer's text, or
#: a :class:`~protocols.messages.ToolCall`) returning ``None`` to pass or a reason to trip --
#: plain or async.
GuardCheck: TypeAlias = Callable[[Any], "Awaitable[str | None] | str | None"]

GuardKind: TypeAlias = Literal["input", "output", "tool"]

#: What an agent used as a guard answers: whether the check trips, and why.
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tripped": {
            "type": "boolean",
            "description": "true when the text breaks the policy and must be stopped",
        },
        "reason": {"type": "string", "description": "why, in one sentence"},
    },
    "required": ["tripped", "reason"],
    "additionalProperties": False,
}

#: The longest reason of an agent's verdict kept (in code points; a longer one is cut).
MAX_AGENT_REASON = 2_000

#: How the thing checked is put to an agent used as a guard, by kind.
_ASKED = {
    "input": "Check this input to an assistant against your policy.\n\n{text}",
    "output": "Check this answer of an assistant against your policy.\n\n{text}",
    "tool": "Check this tool call of an assistant against your policy.\n\n{text}",
}


def _name_of(check: object) -> str:
    if isinstance(check, Agent):
        return check.name
    name = getattr(check, "__name__", None)
    if isinstance(name, str) and name and name != "<lambda>":
        return name
    raise ValidationError("name the guardrail (name=...): its check has no name of its own")


def _names(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError(f"a tool guard's tools are a list of tool names, not {value!r}")
    return frozenset(value)


@attrs.frozen(eq=False)
class Guardrail:
    """A check of a run's ``input``, its ``output`` or its ``tool`` calls (see the module's
    documentation); ``name`` is what a trip reports. ``when`` (input guards only):
    ``"parallel"`` (the default) or ``"before"`` the first provider call. ``tools`` (tool
    guards only): the names of the tools whose calls it checks (``None``: every tool's).

    Prefer :func:`input_guardrail`, :func:`output_guardrail` and :func:`tool_guardrail`; give
    guardrails to an agent (``runtime.agent(..., guardrails=[...])``, every run) or to a run
    (``guardrails=[...]``, on top of the agent's)."""

    kind: GuardKind
    check: GuardCheck | Agent
    name: str
    when: Literal["parallel", "before"] = "parallel"
    tools: frozenset[str] | None = attrs.field(default=None, converter=_names)

    def __attrs_post_init__(self) -> None:
        if self.kind not in ("input", "output", "tool"):
            raise ValidationError(
                f"a guardrail's kind is 'input', 'output' or 'tool', not {self.kind!r}"
            )
        if not isinstance(self.check, Agent) and not callable(self.check):
            raise ValidationError(
                f"guardrail {self.name!r}: its check must be a function or an agent, not "
                f"{type(self.check).__name__}"
            )
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValidationError(
                f"a guardrail's name must be a non-empty string, not {self.name!r}"
            )
        if self.when not in ("parallel", "before"):
            raise ValidationError(
                f"guardrail {self.name!r}: when is 'parallel' or 'before', not {self.when!r}"
            )
        if self.when != "parallel" and self.kind != "input":
            raise ValidationError(f"guardrail {self.name!r}: only an input guard has a 'when'")
        if self.tools is not None:
            if self.kind != "tool":
                raise ValidationError(f"guardrail {self.name!r}: only a tool guard names tools")
            if not all(isinstance(name, str) and name for name in self.tools):
                raise ValidationError(f"guardrail {self.name!r}: tools are names of tools")

    def __repr__(self) -> str:
        return f"<Guardrail {self.kind} {self.name!r}>"

    def covers(self, call: ToolCall) -> bool:
        """Whether this tool guard checks ``call``."""
        return self.tools is None or call.name in self.tools

    async def verdict(self, run: _Run, subject: Any) -> str | None:
        """Check ``subject`` inside ``run``: ``None`` when it passes, else the reason it
        trips. Raises what the check raises (and a :class:`ValidationError` for a check that
        returns anything but ``None`` or a non-empty string)."""
        check = self.check
        if isinstance(check, Agent):
            return await _ask_agent(self, check, run, subject)
        outcome = check(subject)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome is None:
            return None
        if isinstance(outcome, str) and outcome.strip():
            return outcome
        raise ValidationError(
            f"guardrail {self.name!r} returned {outcome!r}: a check returns None to pass or a "
            "reason (a non-empty string) to trip"
        )


def _text(kind: str, subject: Any) -> str:
    if isinstance(subject, ToolCall):
        return f"{subject.name}({dumps(subject.arguments)})"
    return str(subject)


async def _ask_agent(guard: Guardrail, agent: Agent, run: _Run, subject: Any) -> str | None:
    """Run ``agent`` on ``subject`` as a run inside ``run`` (its scope, deadline, abort and
    budget; a conversation of its own, empty), asking for a verdict."""
    step = RunStep(run.run_id, f"guardrail:{guard.name}", agent.name)
    request = _Request(
        agent,
        (Message.user(_ASKED[guard.kind].format(text=_text(guard.kind, subject))),),
        RunOptions(abort=(run.token,), output=VERDICT_SCHEMA),
        None,
        run_id=f"guardrail:{guard.name}:{new_id()[:12]}",
        path=(*run.path, step),
        history=(),
        deadline=run.deadline(),
        meters=(run.meter,) if run.meter is not None else (),
    )
    agent._traced(request)
    result = None
    try:
        result = await agent._execute_here(request)
    finally:
        spent = result.total_usage if result is not None else _spent(request)
        run.delegated_to(spent, estimated=result.estimated if result is not None else False)
    # Cut with the run (its abort is the run's): the run's cancel, not a verdict.
    await trio.lowlevel.checkpoint_if_cancelled()
    verdict = result.output
    if result.partial or not isinstance(verdict, dict):
        # No verdict: the guard could not decide, and a guard that cannot decide trips.
        return f"the guard agent {agent.name!r} gave no verdict (it stopped: {result.stop.value})"
    if verdict.get("tripped") is True:
        reason = verdict.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            return "tripped"
        reason = reason.strip()
        # A model's words: kept to a bounded size wherever the trip goes (results, logs, jobs).
        if len(reason) > MAX_AGENT_REASON:
            reason = reason[: MAX_AGENT_REASON - 1] + "…"
        return reason
    return None


def _spent(request: _Request) -> Any:
    run = request.run
    if run is None:
        return None
    usage, delegated = run.usage, run.delegated
    return None if usage is None or delegated is None else usage + delegated


_Make: TypeAlias = Callable[["GuardCheck | Agent"], Guardrail]


@overload
def input_guardrail(
    check: GuardCheck | Agent, /, *, name: str | None = None, when: str = "parallel"
) -> Guardrail: ...
@overload
def input_guardrail(
    check: None = None, /, *, name: str | None = None, when: str = "parallel"
) -> _Make: ...
def input_guardrail(
    check: GuardCheck | Agent | None = None,
    /,
    *,
    name: str | None = None,
    when: str = "parallel",
) -> Guardrail | _Make:
    """A guard on a run's input: ``input_guardrail(check)``, or ``@input_guardrail`` /
    ``@input_guardrail(name=..., when="before")`` on a function. ``check`` receives the text of
    the run's input (its messages' text, joined by a blank line); it may be an agent, which is
    asked whether the input breaks its policy (its system prompt states the policy; it answers
    a verdict, see :data:`VERDICT_SCHEMA`). ``name`` defaults to the function's (the agent's)
    name; ``when``: ``"parallel"`` (alongside the first provider call) or ``"before"`` it."""

    def make(check: GuardCheck | Agent) -> Guardrail:
        return Guardrail("input", check, name or _name_of(check), when=when)  # type: ignore[arg-type]

    return make if check is None else make(check)


@overload
def output_guardrail(check: GuardCheck | Agent, /, *, name: str | None = None) -> Guardrail: ...
@overload
def output_guardrail(check: None = None, /, *, name: str | None = None) -> _Make: ...
def output_guardrail(
    check: GuardCheck | Agent | None = None, /, *, name: str | None = None
) -> Guardrail | _Make:
    """A guard on a run's final answer: ``check`` receives its text (or is an agent, as for
    :func:`input_guardrail`). A run whose answer trips it ends ``stop="guardrail"``; the answer
    is in the conversation (the model said it) and in ``result.content`` -- show the caller
    ``result.guardrail.reason`` instead."""

    def make(check: GuardCheck | Agent) -> Guardrail:
        return Guardrail("output", check, name or _name_of(check))

    return make if check is None else make(check)


@overload
def tool_guardrail(
    check: GuardCheck | Agent,
    /,
    *,
    name: str | None = None,
    tools: list[str] | tuple[str, ...] | frozenset[str] | None = None,
) -> Guardrail: ...
@overload
def tool_guardrail(
    check: None = None,
    /,
    *,
    name: str | None = None,
    tools: list[str] | tuple[str, ...] | frozenset[str] | None = None,
) -> _Make: ...
def tool_guardrail(
    check: GuardCheck | Agent | None = None,
    /,
    *,
    name: str | None = None,
    tools: list[str] | tuple[str, ...] | frozenset[str] | None = None,
) -> Guardrail | _Make:
    """A guard on the model's tool calls: ``check`` receives each
    :class:`~protocols.messages.ToolCall` (of the tools named in ``tools``, or of every tool)
    before the authority gate. A call that trips it ends the run ``stop="guardrail"``: none of
    that turn's calls runs, each is answered that it was not executed."""

    def make(check: GuardCheck | Agent) -> Guardrail:
        return Guardrail("tool", check, name or _name_of(check), tools=_names(tools))

    return make if check is None else make(check)
