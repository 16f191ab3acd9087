"""Questions for the human, in a run: the ``ask_user`` tool, :meth:`RunContext.ask
<actors.RunContext.ask>`, and the agent's ``answer=`` hook that answers them.

A question (:class:`~protocols.questions.Question`) goes to the *answerer* of the run's agent
(``Agent(answer=...)``): an async callback ``(call, question) -> answer``. What it returns is
checked with :func:`~protocols.questions.check_answer`; only a valid answer reaches the model.
It may decline by returning ``None`` or by raising :class:`Unanswered` (with the reason the
model reads). Guarantees:

* no answerer attached, an answerer that declines, fails (raises) or gives an answer the
  question refuses: the question is *not answered* -- the ``ask_user`` call's result is a
  failure ``"not answered: <why>"`` the model reads, and :meth:`RunContext.ask` raises
  :class:`Unanswered` -- never an invented answer;
* the run's log shows the question (``approval_requested`` with ``question``) and its outcome
  (``approval_answered`` with ``answer``, or ``allow=False`` and why), so a relay or UI following
  the run sees it; a cut of the run while a question is open cancels the answerer's wait (it is
  awaited inside the run's scope), logs the question as answered ``allow=False`` ("cancelled")
  and the call's result says it was interrupted, so the history stays well formed;
* in a durable job the ``ask_user`` call is asked through the job: the question is journaled and
  the job waits (``awaiting_input``) before the call runs, and the recorded answer -- checked
  against the question when given (``jobs answer``) -- is the call's result when a worker
  continues it (see ``docs/durable.md``). :meth:`RunContext.ask` inside other tools is for
  in-process runs only: in a durable job it raises :class:`Unanswered` saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from protocols.codec import to_json
from protocols.errors import AgentsError, Category, ValidationError
from protocols.messages import ToolCall, ToolDefinition, ToolFailure, ToolResult, ToolSuccess
from protocols.questions import (
    Answer,
    Question,
    check_answer,
    question_from_arguments,
    question_schema,
)

from ._tool_run import _tool_run

if TYPE_CHECKING:
    from ._run_loop import _Run

__all__ = [
    "NO_ANSWERER",
    "Answerer",
    "QuestionTool",
    "Unanswered",
    "ask_question",
    "ask_user",
    "question_tool",
]

log = logging.getLogger("trio_agents.tools")

#: Answers a question: ``(call, question) -> answer`` (``None``: declined).
Answerer = Callable[[ToolCall, Question], Awaitable[Any]]

#: Why a question is not answered when the agent has no answerer.
NO_ANSWERER: Final = "no one can answer questions in this run (the agent has no answer= hook)"
#: Why a question the answerer declined without saying why is not answered.
DECLINED: Final = "the user declined to answer"
#: Why a question whose run was cut while it waited is not answered.
CANCELLED: Final = "cancelled: the run was cut while the question waited for an answer"

_DESCRIPTION: Final = (
    "Ask the user a question and wait for the answer. Use it when you need information or a "
    "decision only the user has. kind: 'text' (free text), 'choice' (exactly one of options), "
    "'choices' (one or more of options) or 'number' (optionally between min and max, integer "
    "for whole numbers). The result is the user's answer."
)


class Unanswered(AgentsError):
    """A question was not answered (see the module docstring for when); ``reason`` says why,
    in the words the model reads. An answerer may raise it to decline with a reason."""

    default_code = "unanswered"
    default_category = Category.USER

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _log(run: _Run, kind: str, data: dict[str, Any]) -> None:
    live = run.live
    if live is not None:
        live.add(kind, data)


async def ask_question(
    call: ToolCall, question: Question, *, run: _Run | None = None, durable: bool = True
) -> Answer:
    """Put ``question`` (asked by tool call ``call``) to the answerer of ``run`` (default: the
    run executing the current tool batch); the answer, checked. Raises :class:`Unanswered`
    (see the module docstring); ``trio.Cancelled`` propagates. ``durable=False``: the caller
    is not the question tool, which a durable job cannot pause inside of."""
    if run is None:
        run = _tool_run.get()
    if run is None:
        await trio.lowlevel.checkpoint()
        raise Unanswered("a question can only be asked inside an agent's run")
    if run.journal is not None and not durable:
        await trio.lowlevel.checkpoint()
        raise Unanswered(
            "a tool of a durable job cannot stop to ask mid-call: give the agent the ask_user "
            "tool instead"
        )
    _log(
        run,
        "approval_requested",
        {
            "call_id": call.id,
            "tool": call.name,
            "reason": question.prompt,
            "question": to_json(question),
        },
    )
    try:
        value = await _answer(run.agent.answer, call, question)
    except Unanswered as error:
        _log(
            run,
            "approval_answered",
            {"call_id": call.id, "allow": False, "reason": error.reason},
        )
        raise
    except trio.Cancelled:
        _log(run, "approval_answered", {"call_id": call.id, "allow": False, "reason": CANCELLED})
        raise
    _log(
        run,
        "approval_answered",
        {"call_id": call.id, "allow": True, "reason": "", "answer": value},
    )
    return value


async def _answer(answerer: Answerer | None, call: ToolCall, question: Question) -> Answer:
    if answerer is None:
        await trio.lowlevel.checkpoint()
        raise Unanswered(NO_ANSWERER)
    try:
        raw = await answerer(call, question)
    except Unanswered:
        raise
    except Exception as error:
        log.warning("the answerer raised for tool %r", call.name, exc_info=True)
        raise Unanswered(f"the answerer failed ({type(error).__name__})") from error
    if raw is None:
        raise Unanswered(DECLINED)
    try:
        return check_answer(question, raw)
    except ValidationError as error:
        raise Unanswered(f"the answer was refused: {error.message}") from None


class QuestionTool:
    """The question tool: the model asks the user a typed question (its arguments are the
    question, :func:`~protocols.questions.question_schema`) and reads the answer as the call's
    result. :data:`ask_user` is one; :func:`question_tool` makes one with another name or
    description. A :class:`~actors.tools.CallableTool`: give it to an agent's ``tools``."""

    def __init__(self, name: str = "ask_user", description: str = _DESCRIPTION) -> None:
        self._definition = ToolDefinition(name, description, question_schema())

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told about the tool."""
        return self._definition

    def question_of(self, call: ToolCall) -> Question | None:
        """The question ``call`` asks (``None``: its arguments describe none)."""
        try:
            return question_from_arguments(call.arguments)
        except ValidationError:
            return None

    async def call(self, call: ToolCall) -> ToolResult:
        """Ask and return the answer as the result (a failure when the question cannot be
        asked or is not answered); ``trio.Cancelled`` propagates."""
        try:
            question = question_from_arguments(call.arguments)
        except ValidationError as error:
            await trio.lowlevel.checkpoint()
            return ToolFailure(call.id, call.name, f"invalid question: {error.message}")
        try:
            value = await ask_question(call, question)
        except Unanswered as error:
            return ToolFailure(call.id, call.name, f"not answered: {error.reason}")
        return ToolSuccess(call.id, call.name, value)

    def __repr__(self) -> str:
        return f"<QuestionTool {self._definition.name!r}>"


def question_tool(*, name: str = "ask_user", description: str | None = None) -> QuestionTool:
    """A question tool called ``name`` (see :class:`QuestionTool`)."""
    return QuestionTool(name, description if description is not None else _DESCRIPTION)


#: The built-in question tool, ``ask_user``: ``Agent(tools=[ask_user], answer=...)``.
ask_user: Final = QuestionTool()
