"""One run from its request to its end (:class:`_Request`): queued, withdrawn or taken, its
log, its outcome delivered to its caller; the chain of runs a task is inside of (a run that
would wait on itself is refused with :class:`CycleError`); what a caller's input, history and
client tools are checked for before anything is queued."""

from __future__ import annotations

import contextvars
import enum
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from protocols.accounting import BudgetMeter
from protocols.errors import (
    AgentsError,
    Category,
    ValidationError,
)
from protocols.history import check_history
from protocols.live import terminal_for
from protocols.messages import (
    AgentResult,
    Message,
    StopReason,
    new_id,
)
from protocols.settings import check_reasoning

from . import _tracing
from ._core._abort import Abort
from ._core._actor import ActorRef, ActorStopped
from ._live import LiveRun
from ._run_context import RunStep
from ._run_loop import (
    COMMIT_DEADLINE,
    AgentEvent,
    Chunk,
    Resume,
    RunJournal,
    _Run,
)
from ._run_options import RunOptions
from .conversation import Conversation

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

    from .agent import Agent


class AgentStatus(enum.StrEnum):
    """Where an agent is: ``idle`` (never ran), ``running``, ``done`` (the last run ended, also
    partially) or ``error`` (the last run raised)."""

    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"


#: What a request does when the agent is busy (see :meth:`Agent.generate`).
BusyPolicy = Literal["queue", "interrupt", "reject"]


class _State(enum.Enum):
    QUEUED = "queued"  # submitted (or about to be), not taken by the agent yet
    RUNNING = "running"  # taken: it commits as any run does
    DONE = "done"  # ended (its result or error is set)
    WITHDRAWN = "withdrawn"  # given up before it began: nothing of it is ever committed


#: The chain of runs the current task is inside of, outermost first. A task started from inside
#: a run inherits it and may outlive it: only runs still running count.
_chain: contextvars.ContextVar[tuple[_Request, ...]] = contextvars.ContextVar(
    "trio_agents_run_chain", default=()
)


class CycleError(AgentsError):
    """A run was requested on an agent whose run the requesting task is already inside of (an
    agent calling itself, or A -> B -> A): it would wait on itself. Refused at once, before
    anything is queued or committed; ``chain`` names the agents, outermost first. A tool that
    makes such a request fails with this text, which the model reads."""

    def __init__(self, chain: Sequence[str], agent: str) -> None:
        path = " -> ".join([*chain, agent])
        super().__init__(
            f"refused: a run of agent {agent!r} was requested from inside its own run "
            f"({path}); it would wait on itself",
            code="cycle",
            category=Category.USER,
            retryable=False,
        )
        self.chain = (*chain, agent)


class AgentBusy(AgentsError):
    """A request with ``if_busy="reject"`` found the agent busy (a run in progress or
    waiting): refused at once, nothing queued or committed."""

    def __init__(self, agent: str) -> None:
        super().__init__(
            f"agent {agent!r} is busy answering another message (if_busy='reject')",
            code="busy",
            category=Category.USER,
            retryable=True,
        )
        self.agent = agent


@attrs.define(eq=False)
class _Request:
    """One run, from its request to its end: what was asked, where it is, how it ended.

    A request is *queued* until the agent's actor takes it. A queued request whose tokens trip,
    or whose caller gives up, is *withdrawn* at once: it resolves as cancelled with nothing
    committed, and the actor skips it when it reaches it.
    """

    agent: Agent
    input: tuple[Message, ...]
    options: RunOptions
    #: Where chunks and the outcome go (None: generate(), which only wants the outcome).
    send: trio.MemorySendChannel[Any] | None
    #: The run's own token (``AgentRun.abort``, ``Agent.abort``, a caller that gave up).
    token: Abort = attrs.field(factory=Abort)
    finished: trio.Event = attrs.field(factory=trio.Event)
    result: AgentResult | None = None
    error: BaseException | None = None
    state: _State = _State.QUEUED
    #: Everything that cancels the run: its own token, the agent's and the caller's tokens.
    watch: Abort | None = None
    chain: tuple[_Request, ...] = ()
    _unwatch: Callable[[], None] | None = None
    _waiting: bool = False  # counted in the agent's queued runs
    run_id: str = attrs.field(factory=new_id)
    #: The delegation hops above this run (empty for a run a caller started).
    path: tuple[RunStep, ...] = ()
    #: The conversation the run works in (None: the agent's).
    conversation: Conversation | None = None
    #: A history of the caller's the run goes on from, in a conversation of its own made when
    #: the run begins and thrown away when it ends (None: not such a run).
    history: tuple[Message, ...] | None = None
    deps: Any = None
    #: A delegated or handed-to run passes its chunks and events to its parent run.
    forward: Callable[[Chunk], None] | None = None
    forward_event: Callable[[AgentEvent], None] | None = None
    #: A deadline inherited from a parent run (``trio.current_time()`` terms).
    deadline: float = math.inf
    #: The meters of the runs this run draws on (its parent's).
    meters: tuple[BudgetMeter, ...] = ()
    #: The loop state of the run, once it began (what a cut delegated run had done).
    run: _Run | None = None
    #: A journaled run's journal (actors.durable), and where a continued one stands.
    journal: RunJournal | None = None
    resume: Resume | None = None
    #: The run's event log, from the moment it is asked for (None: a journaled run's log is its
    #: journal's, or the agent has no runtime).
    live: LiveRun | None = None
    #: The run ends its log (False: a handed-to run, which publishes into the log of the run
    #: that handed to it -- that run ends it).
    owns_log: bool = True
    #: Tracing (actors._tracing): the tracer of the run (None: not traced), the OpenTelemetry
    #: context current where the run was requested (its span's parent), and the run's spans.
    tracer: Tracer | None = None
    parent: Context | None = None
    trace: _tracing.RunTrace | None = None

    def bind(self, *, queued: bool) -> None:
        """Check the chain of runs the calling task is inside of and watch the tokens.

        Raises :class:`CycleError` when the calling task is inside a run of this agent, and
        :class:`~protocols.errors.ValidationError` when the run's settings contradict its
        ``think`` (``think=False`` with a ``reasoning_effort``)."""
        agent = self.agent
        chain = _chain.get()
        if chain:  # (a run requested from inside runs: none of them may be this agent's)
            chain = tuple(run for run in chain if run.state is _State.RUNNING)
            if any(run.agent is agent for run in chain):
                self.state = _State.WITHDRAWN
                raise CycleError([run.agent.name for run in chain], agent.name)
        settings = agent._settings(self.options)
        if settings is not None and settings.reasoning_effort is not None:
            # A contradiction is refused now, before anything is queued or committed.
            try:
                check_reasoning(agent._option(self.options, "think"), settings.reasoning_effort)
            except ValidationError:
                self.state = _State.WITHDRAWN
                raise
        self.chain = (*chain, self)
        self.open_log()
        own, extra = agent.defaults.abort, self.options.abort
        sources = (*own, *extra) if extra else own
        self.watch = watch = Abort.any(self.token, *sources) if sources else self.token
        if queued:
            self._unwatch = watch.on_cancel(self._tripped)

    async def submit(self, ref: ActorRef[Any, Any], if_busy: BusyPolicy = "queue") -> None:
        """Queue this run for the agent's actor (without a yield when there is room).

        Raises :class:`CycleError` when the calling task is inside a run of this agent,
        :class:`AgentBusy` for ``if_busy="reject"`` when the agent is busy, and
        :class:`~actors.ActorStopped` once the agent is closing; a request whose tokens
        already tripped is withdrawn without being queued. ``if_busy="interrupt"`` queues it
        ahead of ordinary runs and cuts the run in progress."""
        await trio.lowlevel.checkpoint_if_cancelled()
        agent = self.agent
        if if_busy not in ("queue", "interrupt", "reject"):
            raise ValidationError(
                f"if_busy must be 'queue', 'interrupt' or 'reject', not {if_busy!r}"
            )
        if agent._closing:
            self.state = _State.WITHDRAWN
            error = ActorStopped(f"agent {agent.name!r} is closed", name=agent.name)
            self.end_log("failed", {"error": _described(error)})  # (a log opened beforehand)
            raise error
        self.bind(queued=True)
        if if_busy == "reject" and agent.busy:
            self.state = _State.WITHDRAWN
            self._settle()
            busy = AgentBusy(agent.name)
            self.end_log("failed", {"error": _described(busy)})
            raise busy
        if self.state is not _State.QUEUED:  # already tripped: never queued
            return
        queue = agent._queue(urgent=if_busy == "interrupt")
        queue.append(self)
        try:
            try:
                ref.send_nowait(self)
            except trio.WouldBlock:
                await ref.send(self)
        except BaseException:
            queue.remove(self)  # never delivered: no wake-up will come for it
            self.withdraw("the request was never delivered", quiet=True)
            raise
        if self.state is _State.QUEUED:
            self._waiting = True
            agent._queued += 1
            if if_busy == "interrupt" and agent._current is not None:
                agent._current.token.cancel("interrupted by a new message")

    def _settle(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._waiting:
            self._waiting = False
            self.agent._queued -= 1
            self.agent._maybe_idle()

    def _tripped(self, reason: str) -> None:
        if self.state is _State.QUEUED:
            self.withdraw(reason)

    def begin(self) -> bool:
        """The actor takes the run: False when it was withdrawn (skip it)."""
        if self.state is not _State.QUEUED:
            return False
        self.state = _State.RUNNING
        self._settle()
        return True

    def withdraw(self, reason: str, *, quiet: bool = False) -> None:
        """Give up a queued run: it resolves cancelled, partial, with no messages, at once."""
        if self.state is not _State.QUEUED:
            return
        self.state = _State.WITHDRAWN
        self._settle()
        self.input = ()
        self.result = result = AgentResult(
            stop=StopReason.CANCELLED, run_id=self.run_id, agent=self.agent.name
        )
        self.end_log("cancelled", {"result": result})
        self.deliver(("result", result))
        self.close()
        self.finished.set()
        agent = self.agent
        agent._statistics["withdrawn"] += 1
        if agent._listeners and not quiet:
            agent._runs += 1
            number, run_id = agent._runs, self.run_id
            agent._emit(
                AgentEvent("abort", number, reason=reason, stop=StopReason.CANCELLED, run_id=run_id)
            )
            agent._emit(
                AgentEvent("finish", number, stop=StopReason.CANCELLED, partial=True, run_id=run_id)
            )

    def fail(self, error: BaseException) -> None:
        """End a run that will never finish (its agent stopped): its caller gets ``error``."""
        if self.state not in (_State.QUEUED, _State.RUNNING):
            return
        self.state = _State.DONE
        self._settle()
        if self.result is None and self.error is None:
            self.error = error
            self.end_log("failed", {"error": _described(error)})
            self.deliver(("error", error))
        self.close()
        self.finished.set()

    def open_log(self) -> None:
        """Register the run's event log with its agent's runtime, so that it can be followed
        by its id from now on (once; not for a journaled run, whose log is its journal's)."""
        runtime = self.agent._runtime
        if self.live is None and self.journal is None and runtime is not None:
            self.live = runtime.live.open(self.run_id)

    def close_log(self) -> None:
        """End the log of a run that will not end it itself -- one that never began (its
        caller was cut first): ``failed`` with its error, else ``cancelled``. A no-op for a run
        whose log has ended."""
        live = self.live
        if live is None or live.ended is not None or self.state is _State.RUNNING:
            return  # (a running run ends its log itself)
        if self.error is not None:
            self.end_log("failed", {"error": _described(self.error)})
        else:
            result = self.result or AgentResult(
                stop=StopReason.CANCELLED, run_id=self.run_id, agent=self.agent.name
            )
            self.end_log(terminal_for(result), result)

    def end_log(self, kind: str, data: dict[str, Any] | AgentResult) -> None:
        """Publish the run's terminal event (once: ``data`` is its result, or its data), and
        let its log go after the runtime's keeping time."""
        live = self.live
        if live is not None and live.ended is None and self.owns_log:
            live.add(kind, data)
            runtime = self.agent._runtime
            if runtime is not None:
                runtime.live.end(self.run_id)

    def deliver(self, item: Any) -> bool:
        """Hand ``item`` to the consumer; False (and nothing raised) when it has gone away."""
        send = self.send
        if send is None:
            return False
        try:
            send.send_nowait(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.send = None
            return False
        return True

    def close(self) -> None:
        if self.send is not None:
            self.send.close()
            self.send = None

    async def give_up(self, reason: str) -> None:
        """The caller stopped waiting for the run (its scope was cancelled, it left the stream):
        a queued run is withdrawn at once; a running one is aborted, and this waits (shielded,
        bounded) until it has committed its partial."""
        if self.state is _State.QUEUED:
            self.withdraw(reason)
            return
        self.token.cancel(reason)
        if self.state is _State.RUNNING:
            with trio.CancelScope(shield=True) as shield:
                shield.deadline = trio.current_time() + COMMIT_DEADLINE + 1
                await self.finished.wait()


def _client_history(options: RunOptions, past: tuple[Message, ...] | None) -> None:
    if options.client_tools and past is None:
        raise ValidationError(
            "a run with client_tools works on the caller's history: give history= (an empty "
            "one to begin); the calls it leaves open are answered there, not in the agent's "
            "conversation"
        )


def _history(
    history: Sequence[Message] | None, input: Sequence[Message]
) -> tuple[Message, ...] | None:
    """A run's ``history=``, checked: well formed, and none of its ids an input message's."""
    if history is None:
        return None
    past = check_history(history)
    if input:
        ids = {message.id for message in past}
        for index, message in enumerate(input):
            if message.id in ids:
                raise ValidationError(
                    f"the input message {index} has the id {message.id!r} of a message of the "
                    "history (is it in both?)"
                )
    return past


def _input_messages(input: str | Message | Sequence[Message] | None) -> tuple[Message, ...]:
    if input is None:
        return ()
    if isinstance(input, str):
        return (Message.user(input),)
    if isinstance(input, Message):
        return (input,)
    return tuple(input)


def _described(error: BaseException) -> dict[str, Any]:
    """A failure as a run's ``failed`` event shows it: its class, code and message (an error of
    ours; a foreign one's message is left out, as tracing leaves it out)."""
    if isinstance(error, AgentsError):
        return {"type": type(error).__name__, "code": error.code, "message": error.message}
    return {"type": type(error).__name__, "code": None, "message": ""}
