"""What a tool learns about the run that called it: :class:`RunContext`, and the read-only
:class:`BudgetView` of the run's budget."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import attrs
import trio

from protocols.accounting import BudgetMeter, BudgetScope
from protocols.messages import ToolCall

from ._core._abort import Abort
from ._questions import Unanswered, ask_question

if TYPE_CHECKING:
    from protocols.questions import Answer, Question

    from ._run_loop import _Run

__all__ = ["BudgetView", "RunContext", "RunStep"]

DepsT = TypeVar("DepsT")


@attrs.frozen
class RunStep:
    """One hop of a delegation: the parent run ``run_id`` called ``agent`` as the tool call
    ``call_id``. Chunks and events of a delegated run carry the hops from the outermost run
    down (``path``); a run's own chunks have an empty path."""

    run_id: str
    call_id: str
    agent: str


class BudgetView:
    """A read-only, live view of a run's budget: the run's own :class:`~actors.TokenBudget`,
    or else the nearest budget it draws on (its team's, its parent's). ``spent`` is that
    budget's count so far (what the runs drawing on it spent included), ``remaining`` and
    ``max`` what is left and the cap (``None`` when no budget bounds the run), ``scope`` the
    count it caps, ``cost`` and ``remaining_cost`` the money charged and left (``None`` when
    no budget caps money), ``exhausted`` whether the run may make no further provider
    call."""

    __slots__ = ("_binding", "_meter")

    def __init__(self, meter: BudgetMeter | None) -> None:
        self._meter = meter
        self._binding = _binding(meter)

    @property
    def spent(self) -> int:
        """Tokens of the budget's count charged so far (0 when no budget bounds the run)."""
        return 0 if self._binding is None else self._binding.used

    @property
    def remaining(self) -> int | None:
        """Tokens left before the run is cut; ``None`` when no budget bounds the run."""
        return None if self._binding is None else self._binding.remaining

    @property
    def max(self) -> int | None:
        """The cap of the budget that bounds the run."""
        binding = self._binding
        return None if binding is None or binding.budget is None else binding.budget.max

    @property
    def scope(self) -> BudgetScope | None:
        """Which count that budget caps."""
        binding = self._binding
        return None if binding is None or binding.budget is None else binding.budget.scope

    @property
    def cost(self) -> Decimal | None:
        """Money that budget has been charged so far (``None`` when it caps no money)."""
        binding = self._binding
        if binding is None or binding.budget is None or binding.budget.max_cost is None:
            return None
        return binding.cost

    @property
    def remaining_cost(self) -> Decimal | None:
        """Money left before the run is cut (``None`` when no budget caps money)."""
        return None if self._binding is None else self._binding.remaining_cost

    @property
    def exhausted(self) -> bool:
        """The run's budget, or a budget it draws on, is spent."""
        return self._meter is not None and self._meter.spent

    def __repr__(self) -> str:
        return f"<BudgetView spent={self.spent} remaining={self.remaining}>"


def _binding(meter: BudgetMeter | None) -> BudgetMeter | None:
    """The nearest meter with a budget: ``meter`` itself, else its ancestors breadth first."""
    queue = [meter] if meter is not None else []
    while queue:
        current = queue.pop(0)
        if current.budget is not None:
            return current
        queue.extend(current.parents)
    return None


class RunContext(Generic[DepsT]):
    """What a tool knows about the run that called it. Declare a parameter annotated
    ``RunContext`` (or ``RunContext[MyDeps]``) and the runtime fills it; the model never sees
    it in the tool's schema.

    ``deps``: the run's dependencies (``generate(deps=...)``, else the agent's ``deps=``);
    ``run_id``, ``call_id``: the run and this tool call; ``agent``: the agent's name;
    ``deadline``: the run's deadline in :func:`trio.current_time` terms (``inf``: none);
    ``budget``: a :class:`BudgetView`; ``abort``: the run's token (cancel it to cut the run;
    watch it to stop work early); ``path``: the delegation hops above this run;
    ``idempotency_key``: in a journaled run (a durable job), the call's key -- the same in every
    attempt at it, also when a continuing worker runs an idempotent tool again (``None``
    otherwise).
    :meth:`progress` puts a progress event into the run's stream; :meth:`ask` asks the human
    a question.
    """

    __tool_context__: ClassVar[bool] = True
    __slots__ = (
        "_run",
        "abort",
        "agent",
        "budget",
        "call_id",
        "deadline",
        "deps",
        "idempotency_key",
        "path",
        "run_id",
    )

    def __init__(
        self,
        *,
        deps: DepsT,
        run_id: str,
        call_id: str,
        agent: str,
        deadline: float = math.inf,
        budget: BudgetView | None = None,
        abort: Abort | None = None,
        path: tuple[RunStep, ...] = (),
        idempotency_key: str | None = None,
        run: _Run | None = None,
    ) -> None:
        """Built by the runtime for each call; build one yourself only to call a tool's function
        directly (in a test, say): its :meth:`progress` then goes nowhere."""
        self.deps = deps
        self.run_id = run_id
        self.call_id = call_id
        self.agent = agent
        self.deadline = deadline
        self.budget = budget if budget is not None else BudgetView(None)
        self.abort = abort if abort is not None else Abort()
        self.path = path
        self.idempotency_key = idempotency_key
        self._run = run

    def progress(self, message: str, **data: Any) -> None:
        """Report progress: a ``progress`` chunk (``text=message``) in the run's stream and a
        ``progress`` event (``text``, ``data``, ``call``) to its listeners -- and, for a
        delegated run, to its parent's consumer. Never raises, never waits."""
        run = self._run
        if run is not None:
            run.progress(self.call_id, str(message), data)

    async def ask(self, question: Question) -> Answer:
        """Ask the human ``question`` (a :class:`~protocols.questions.Question`) and wait for
        the answer: the agent's ``answer=`` hook answers, and what it gives is checked against
        the question (see ``docs/agent.md``, "Asking the human"). Raises
        :class:`~actors.Unanswered` when nobody can answer, the human declines, or the answer
        is refused -- uncaught, the call's result says why -- and in a durable job, which
        cannot stop inside a tool call (its agent asks with the ``ask_user`` tool instead). A
        cut of the run while waiting cancels the question (``trio.Cancelled``)."""
        run = self._run
        if run is None or run.ended:
            await trio.lowlevel.checkpoint()
            raise Unanswered(
                "this RunContext belongs to no run (or its run has ended): nobody can answer"
            )
        call = next(
            (c for c in run.open_calls if c.id == self.call_id),
            ToolCall(self.call_id, "tool", {}),
        )
        return await ask_question(call, question, run=run, durable=False)

    def __repr__(self) -> str:
        return f"<RunContext run={self.run_id} call={self.call_id} agent={self.agent}>"


def context_for(run: _Run, call_id: str) -> RunContext[Any]:
    """The context of tool call ``call_id`` of ``run``."""
    return RunContext(
        deps=run.deps,
        run_id=run.run_id,
        call_id=call_id,
        agent=run.agent.name,
        deadline=run.deadline(),
        budget=BudgetView(run.meter),
        abort=run.token,
        path=run.path,
        idempotency_key=run.journal.key(call_id) if run.journal is not None else None,
        run=run,
    )
