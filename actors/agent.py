"""``Agent``: a supervised actor running bounded turns of model calls and tool calls.

One run is one trio cancel scope folding every bound: the caller's :class:`~actors.Abort`
tokens, :meth:`Agent.abort`, the run's deadline and its token budget. Whatever trips first cuts
the provider stream and the tool calls in flight at once, and the run still commits what it
produced:

* a cancel is not an error: the run resolves an :class:`~protocols.messages.AgentResult` with
  ``partial=True`` and the stop reason (``cancelled``, ``timeout``, ``budget``); the partial
  assistant text is committed to the conversation marked ``interrupted``;
* tool calls running at the cancel are recorded as interrupted, queued ones as not executed --
  every assistant tool call in the history always has a result;
* a run cut before it begins -- its tokens tripped, its caller cancelled or its stream left
  while it waited its turn -- is withdrawn at once: no provider call, nothing committed;
* every provider call of the run, the loop's own extra calls included, is inside its scope and
  none starts once the budget is spent;
* at most ``limit`` provider turns; reaching it while the model still asks for tools ends the
  run with ``stop="exhausted"`` and "not executed" results for those calls; ``limit=0`` makes no
  call;
* only genuine failures (a provider error after its retries, a bug) raise, after the partial
  was committed;
* a cancel of the *caller's* own scope aborts a running run, waits (shielded, briefly) for it
  to commit, then propagates as ``trio.Cancelled``; no way of a caller going away crashes the
  agent;
* a run requested from inside a run of the same agent (A -> A, A -> B -> A) would wait on
  itself: it is refused at once with :class:`CycleError`.

Runs on one agent are taken one at a time, in the order they were started (FIFO); separate
agents run concurrently. A :meth:`Agent.stream` that is never iterated never takes the slot.
"""

from __future__ import annotations

import contextvars
import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from protocols.accounting import BudgetMeter, TokenBudget
from protocols.authority import Authority
from protocols.codec import dumps, loads
from protocols.context import Instructions, Scope, build
from protocols.errors import (
    AgentsError,
    Category,
    ConfigError,
    ProtocolError,
    ToolError,
    ValidationError,
)
from protocols.messages import (
    AgentResult,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    Usage,
)
from protocols.toolschema import (
    ToolSignature,
    schema_for,
    structure_arguments,
    validate_arguments,
)
from protocols.workspace import Workspace, WorkspaceManager

from ._abort import Abort
from ._actor import Actor, ActorRef, ActorStopped
from ._supervisor import Restart
from .conversation import CompactionError, Conversation, paying
from .providers import RetryEvent, observe_retries
from .tools import NOT_EXECUTED, Approver, CallableTool, ToolBatch, ToolRegistry

if TYPE_CHECKING:
    from ._runtime import Runtime
    from .providers import ProviderInterface, ProviderStream

__all__ = [
    "EXHAUSTED",
    "EXHAUST_INSTRUCTION",
    "FALLBACK_SUMMARY",
    "OUTPUT_FEEDBACK",
    "OUTPUT_INSTRUCTION",
    "TOOLS_OFF",
    "UNKNOWN_TOOLS_FALLBACK",
    "Agent",
    "AgentEvent",
    "AgentRun",
    "AgentStatus",
    "Chunk",
    "CycleError",
    "OutputError",
    "RunOptions",
]

log = logging.getLogger("trio_agents.agent")

#: The result text of calls the model asked for on the last turn the limit allowed.
EXHAUSTED = "not executed: the run reached its turn limit"

#: The result text of calls a model made in a run with ``tool_choice="none"`` (which then fails).
TOOLS_OFF = "not executed: tools are off for this request (tool_choice='none')"

#: How long a cancelled run may take to commit its partial (seconds, shielded).
COMMIT_DEADLINE = 5.0

#: The instruction of the final tool-less call ``on_exhaust="summarize"`` makes (never stored).
EXHAUST_INSTRUCTION = (
    "You have reached the limit of tool-using turns for this request. Do not call any tools. "
    "Answer now, as well as you can, from what you have found so far, and say what is left "
    "undone."
)

#: The answer recorded when that final call answers with nothing.
FALLBACK_SUMMARY = "I reached my turn limit before I could finish, and have nothing to add."

#: The answer recorded when the final call after unknown tools answers with nothing.
UNKNOWN_TOOLS_FALLBACK = (
    "I could not finish: the tools I tried to use do not exist ({names}), and I have nothing "
    "to add."
)

#: Called with the error and the event when an event listener raises.
ErrorHandler = Callable[[BaseException, "AgentEvent"], None]


class AgentStatus(enum.StrEnum):
    """Where an agent is: ``idle`` (never ran), ``running``, ``done`` (the last run ended, also
    partially) or ``error`` (the last run raised)."""

    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"


class OutputError(AgentsError):
    """The model's final answer never matched the requested schema. ``issues`` are the
    problems with the last answer, ``attempts`` how many answers were checked; every attempt
    stays in the conversation."""

    def __init__(self, issues: Sequence[str], attempts: int) -> None:
        shown = "; ".join(issues[:5])
        super().__init__(
            f"the answer did not match the schema after {attempts} attempt(s): {shown}",
            code="output",
            retryable=False,
        )
        self.issues = tuple(issues)
        self.attempts = attempts


#: How a wrong structured answer is sent back to the model (``{issues}`` filled in).
OUTPUT_FEEDBACK = (
    "Your answer is not valid: {issues}. Answer again with only a JSON value that matches the "
    "requested schema, with no other text."
)

#: How the schema is stated when the provider has no native JSON-schema mode.
OUTPUT_INSTRUCTION = "Answer with only a JSON value matching this JSON Schema, and nothing else:\n"


@attrs.frozen
class _OutputSpec:
    """A requested output: its JSON Schema and, for an attrs class, how to build it."""

    schema: dict[str, Any]
    signature: ToolSignature | None

    @classmethod
    def of(cls, schema: dict[str, Any] | type) -> _OutputSpec:
        if isinstance(schema, dict):
            return cls(schema, None)
        if isinstance(schema, type) and attrs.has(schema):
            json_schema = schema_for(schema)
            wrapper = {
                "type": "object",
                "properties": {"value": json_schema},
                "required": ["value"],
                "additionalProperties": False,
            }
            return cls(json_schema, ToolSignature("output", "", wrapper, {"value": schema}, {}))
        raise ValidationError(
            f"schema must be a JSON Schema dict or an attrs class, not {schema!r}"
        )

    def read(self, text: str) -> tuple[Any, list[str]]:
        """The typed output of ``text``, or the problems with it."""
        body = text.strip()
        if body.startswith("```"):
            body = body.split("\n", 1)[1] if "\n" in body else ""
            body = body.rsplit("```", 1)[0]
        try:
            value = loads(body)
        except ProtocolError as error:
            return None, [f"it is not JSON ({error.message})"]
        problems = validate_arguments(self.schema, value)
        if problems:
            return None, problems
        if self.signature is None:
            return value, []
        try:
            return structure_arguments(self.signature, {"value": value})["value"], []
        except ValidationError as error:
            return None, [error.message]


@attrs.frozen
class AgentEvent:
    """Something that happened in a run, delivered to listeners after it happened.

    ``run`` is the run's number on this agent; ``turn`` the provider calls made so far. By
    ``kind``:

    * ``start``: the run began (a run withdrawn while it waited never starts);
    * ``turn``: a provider call begins;
    * ``retry``: the provider call failed before anything streamed and is tried again --
      ``attempt`` (the failed attempt, from 1), ``delay`` (seconds until the next), ``reason``
      (the error code and HTTP status);
    * ``tool``: a call's ``result`` is in;
    * ``tool_error``: the tool behind ``call`` raised ``error``; ``result`` is the failure the
      model reads;
    * ``deny``: the authority refused ``call`` (``reason``);
    * ``usage``: a turn's ``usage`` (``None``: not reported; ``estimated``: charged to the
      budget by estimate because it was not reported);
    * ``guard``: a guard refused a batch (``reason``);
    * ``fault``: automatic compaction failed and the run goes on (``error``);
    * ``abort``: the run was cut, or withdrawn before it began (``reason``, ``stop``);
    * ``exhaust``: the turn limit was reached;
    * ``finish``: the run ended (``partial``, ``stop``);
    * ``error``: the run raised ``error``.
    """

    kind: Literal[
        "start",
        "turn",
        "retry",
        "tool",
        "tool_error",
        "deny",
        "usage",
        "guard",
        "fault",
        "abort",
        "exhaust",
        "finish",
        "error",
    ]
    run: int
    turn: int = 0
    call: ToolCall | None = None
    result: ToolResult | None = None
    usage: Usage | None = None
    reason: str | None = None
    stop: StopReason | None = None
    partial: bool | None = None
    error: BaseException | None = None
    attempt: int | None = None
    delay: float | None = None
    estimated: bool = False


@attrs.frozen
class Chunk:
    """One piece of a run, in order: ``content`` or ``thinking`` text, a ``tool_call`` the model
    made, a ``tool_result``, or the ``usage`` of a finished turn (``None`` when the provider
    reported none; ``estimated`` when the run's budget charged it by estimate instead)."""

    kind: Literal["content", "thinking", "tool_call", "tool_result", "usage"]
    text: str = ""
    call: ToolCall | None = None
    result: ToolResult | None = None
    usage: Usage | None = None
    estimated: bool = False


def _positive(name: str, value: object) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
    ):
        raise ValidationError(f"{name} must be a number > 0 or None, not {value!r}")


def _tokens(value: Iterable[Abort]) -> tuple[Abort, ...]:
    return tuple(value)


@attrs.frozen
class RunOptions:
    """Options of one run (``None``: the agent's own setting).

    ``limit``: provider turns at most (>= 0); ``timeout``: seconds for the whole run; ``budget``:
    a :class:`~protocols.accounting.TokenBudget`; ``abort``: caller tokens that cancel the run;
    ``think`` and ``tool_choice``: passed to the provider; ``on_exhaust``: ``"stop"`` or
    ``"summarize"`` (one final tool-less call when the limit is reached while the model still
    wants tools); ``max_repeats``: how often one identical call (name and arguments) may run in
    one run before a batch repeating it is refused; ``schema``: a JSON Schema (a dict) or an
    attrs class the final answer must follow (see :class:`OutputError`); ``schema_retries``: how
    many more answers a wrong one may be followed by (default 2); ``on_tool_error``: what a
    tool that raises does -- ``"record"`` (the default: the model reads the error, a
    ``tool_error`` event and a WARNING log with the traceback tell you) or ``"raise"`` (the
    batch's results are committed, then the run fails with a
    :class:`~protocols.errors.ToolError` chained to the tool's exception).
    """

    limit: int | None = None
    timeout: float | None = None
    budget: TokenBudget | None = None
    abort: tuple[Abort, ...] = attrs.field(default=(), converter=_tokens)
    think: bool | None = None
    tool_choice: str | None = None
    on_exhaust: Literal["stop", "summarize"] | None = None
    max_repeats: int | None = None
    schema: dict[str, Any] | type | None = None
    schema_retries: int | None = None
    on_tool_error: Literal["record", "raise"] | None = None

    def __attrs_post_init__(self) -> None:
        if self.on_exhaust not in (None, "stop", "summarize"):
            raise ValidationError(
                f"on_exhaust must be 'stop' or 'summarize', not {self.on_exhaust!r}"
            )
        if self.on_tool_error not in (None, "record", "raise"):
            raise ValidationError(
                f"on_tool_error must be 'record' or 'raise', not {self.on_tool_error!r}"
            )
        if self.max_repeats is not None and (
            isinstance(self.max_repeats, bool)
            or not isinstance(self.max_repeats, int)
            or self.max_repeats < 1
        ):
            raise ValidationError(f"max_repeats must be an integer >= 1, not {self.max_repeats!r}")
        if self.schema_retries is not None and (
            isinstance(self.schema_retries, bool)
            or not isinstance(self.schema_retries, int)
            or self.schema_retries < 0
        ):
            raise ValidationError(
                f"schema_retries must be an integer >= 0, not {self.schema_retries!r}"
            )
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0
        ):
            raise ValidationError(f"limit must be an integer >= 0, not {self.limit!r}")
        _positive("timeout", self.timeout)
        if self.budget is not None and not isinstance(self.budget, TokenBudget):
            raise ValidationError("budget must be a TokenBudget")
        for token in self.abort:
            if not isinstance(token, Abort):
                raise ValidationError(f"abort takes Abort tokens, not {type(token).__name__}")


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


@attrs.define
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

    async def submit(self, ref: ActorRef[Any, Any]) -> None:
        """Queue this run in the agent's mailbox (without a yield when there is room).

        Raises :class:`CycleError` when the calling task is inside a run of this agent; a
        request whose tokens already tripped is withdrawn without being queued."""
        await trio.lowlevel.checkpoint_if_cancelled()
        chain = tuple(run for run in _chain.get() if run.state is _State.RUNNING)
        agent = self.agent
        if any(run.agent is agent for run in chain):
            self.state = _State.WITHDRAWN
            raise CycleError([run.agent.name for run in chain], agent.name)
        self.chain = (*chain, self)
        sources = (*agent.defaults.abort, *self.options.abort)
        self.watch = watch = Abort.any(self.token, *sources) if sources else self.token
        self._unwatch = watch.on_cancel(self._tripped)
        if self.state is not _State.QUEUED:  # already tripped: never queued
            return
        try:
            ref.send_nowait(self)
        except trio.WouldBlock:
            try:
                await ref.send(self)
            except BaseException:
                self.withdraw("the request was never delivered", quiet=True)
                raise
        except BaseException:
            self.withdraw("the request was never delivered", quiet=True)
            raise
        if self.state is _State.QUEUED:
            self._waiting = True
            agent._queued += 1

    def _settle(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._waiting:
            self._waiting = False
            self.agent._queued -= 1

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
        self.result = result = AgentResult(stop=StopReason.CANCELLED)
        self.deliver(("result", result))
        self.close()
        self.finished.set()
        agent = self.agent
        agent._statistics["withdrawn"] += 1
        if agent._listeners and not quiet:
            agent._runs += 1
            number = agent._runs
            agent._emit(AgentEvent("abort", number, reason=reason, stop=StopReason.CANCELLED))
            agent._emit(AgentEvent("finish", number, stop=StopReason.CANCELLED, partial=True))

    def fail(self, error: BaseException) -> None:
        """End a run that will never finish (its agent stopped): its caller gets ``error``."""
        if self.state not in (_State.QUEUED, _State.RUNNING):
            return
        self.state = _State.DONE
        self._settle()
        if self.result is None and self.error is None:
            self.error = error
            self.deliver(("error", error))
        self.close()
        self.finished.set()

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


class AgentRun:
    """A run being streamed: ``async with agent.stream(...) as run: async for chunk in run``,
    then ``run.result``. Leaving the block early aborts the run (its partial is committed)."""

    def __init__(self, agent: Agent, request: _Request, receive: trio.MemoryReceiveChannel[Any]):
        self._agent = agent
        self._request = request
        self._receive = receive
        self._submitted = False
        self._result: AgentResult | None = None
        self._error: BaseException | None = None
        self._ended = False

    @property
    def result(self) -> AgentResult:
        """The run's result, once the iteration has ended."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the run has not finished: iterate it to the end first")
        return self._result

    def abort(self, reason: str = "cancelled") -> None:
        """Cancel this run (a no-op once it has ended). A run still waiting its turn is
        withdrawn at once: it commits nothing and ends ``cancelled``."""
        self._request.token.cancel(reason)

    async def __aenter__(self) -> AgentRun:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Leave the run (what leaving the ``async with`` block does): a run still queued is
        withdrawn at once and commits nothing; a running one is aborted and this waits, briefly
        and even when the caller is being cancelled, until it has committed its partial."""
        if self._submitted and not self._ended:
            await self._request.give_up("the stream was closed before the run ended")
        self._ended = True
        self._receive.close()

    def __aiter__(self) -> AgentRun:
        return self

    async def __anext__(self) -> Chunk:
        if self._ended:
            raise StopAsyncIteration
        if not self._submitted:
            # Only a delivered request has a run to wait for: a send that raises (the caller
            # cancelled, the agent stopped) delivered nothing.
            await self._request.submit(self._agent.ref)
            self._submitted = True
        try:
            item = await self._receive.receive()
        except trio.EndOfChannel:  # the run ended without a word (it cannot, but never hang)
            self._ended = True
            raise StopAsyncIteration from None
        if isinstance(item, Chunk):
            return item
        self._ended = True
        kind, value = item
        if kind == "error":
            self._error = value
            raise value
        self._result = value
        raise StopAsyncIteration


def _input_messages(input: str | Message | Sequence[Message] | None) -> tuple[Message, ...]:
    if input is None:
        return ()
    if isinstance(input, str):
        return (Message.user(input),)
    if isinstance(input, Message):
        return (input,)
    return tuple(input)


class _AgentActor(Actor[_Request, None]):
    """Takes runs from the mailbox one at a time."""

    mailbox_size = 1024

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def undelivered(self, message: _Request, error: ActorStopped) -> None:
        message.fail(error)  # the agent stopped before this run's turn: its caller must not wait

    async def handle(self, message: _Request) -> None:
        if not message.begin():  # withdrawn while it waited: nothing of it happens
            return
        agent = self._agent
        agent._current = message
        agent.status = AgentStatus.RUNNING
        agent._runs += 1
        number = agent._runs
        chain = _chain.set(message.chain)
        try:
            result = await agent._run(message, number)
        except Exception as error:
            agent.status = AgentStatus.ERROR
            agent._statistics["errors"] += 1
            message.error = error
            message.deliver(("error", error))
            if agent._listeners:
                agent._emit(AgentEvent("error", number, error=error))
        except BaseException:
            # Cancelled from outside: the agent is being stopped (its partial was committed).
            message.fail(
                ActorStopped(f"agent {agent.name!r} stopped during the run", name=agent.name)
            )
            raise
        else:
            agent.status = AgentStatus.DONE
            agent._statistics["runs"] += 1
            message.result = result
            message.deliver(("result", result))
            if agent._listeners:
                agent._emit(
                    AgentEvent(
                        "finish",
                        number,
                        turn=result.turns,
                        stop=result.stop,
                        partial=result.partial,
                    )
                )
        finally:
            _chain.reset(chain)
            agent._current = None
            message.state = _State.DONE
            message.finished.set()
            message.close()


class Agent:
    """An agent: a provider, a conversation, context and tools, run as a supervised actor.

    Start one with :meth:`start`. ``provider`` is any provider or
    :class:`~actors.providers.ProviderConnection`; ``conversation`` an existing
    :class:`~actors.conversation.Conversation` (default: a new one). Construction options --
    ``limit`` (10), ``timeout``, ``budget``, ``think``, ``tool_choice``, ``on_exhaust``,
    ``max_repeats``, ``on_tool_error`` -- apply to every run unless the run overrides them.
    """

    def __init__(
        self,
        provider: ProviderInterface,
        conversation: Conversation,
        *,
        system: str | None = None,
        instructions: Instructions | None = None,
        tools: Iterable[CallableTool] | ToolRegistry = (),
        scope: Scope | None = None,
        workspace: Workspace | WorkspaceManager | None = None,
        authority: Authority | None = None,
        approve: Approver | None = None,
        defaults: RunOptions = RunOptions(),
        tool_concurrency: int = 8,
        on: Iterable[Callable[[AgentEvent], None]] = (),
        error: ErrorHandler | None = None,
        window: int | None = None,
        strict: bool = False,
    ) -> None:
        """Prefer :meth:`start`, which also starts the agent's actor: an agent built here has
        none, and its runs raise until it has."""
        if isinstance(tool_concurrency, bool) or not isinstance(tool_concurrency, int):
            raise ConfigError("tool_concurrency must be an integer >= 1")
        if tool_concurrency < 1:
            raise ConfigError("tool_concurrency must be an integer >= 1")
        self.provider = provider
        self.conversation = conversation
        self.system = system
        self.instructions = instructions or Instructions()
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.scope = scope
        self.workspace = workspace
        self.authority = authority
        self.approve = approve
        self.defaults = defaults
        self.tool_concurrency = tool_concurrency
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ConfigError(f"window must be a number of tokens >= 1, not {window!r}")
        self.window = window
        self.strict = strict
        self.status = AgentStatus.IDLE
        self._current: _Request | None = None
        self._statistics = {"runs": 0, "errors": 0, "turns": 0, "withdrawn": 0}
        self._queued = 0
        self._ref: ActorRef[_Request, None] | None = None
        self._listeners: list[Callable[[AgentEvent], None]] = list(on)
        self._error_handler = error
        self._runs = 0

    def subscribe(self, listener: Callable[[AgentEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every event from now on; returns a function that
        unsubscribes. A listener that raises never changes a run: the error goes to the
        agent's ``error`` handler (or the log)."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _emit(self, event: AgentEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as error:
                handler = self._error_handler
                if handler is None:
                    log.exception("an event listener raised on %s", event.kind)
                    continue
                try:
                    handler(error, event)
                except Exception:
                    log.exception("the error handler raised on %s", event.kind)

    @classmethod
    async def start(
        cls,
        runtime: Runtime,
        provider: ProviderInterface,
        *,
        conversation: Conversation | None = None,
        limit: int = 10,
        timeout: float | None = None,  # noqa: ASYNC109 - the runs' deadline, not start()'s
        budget: TokenBudget | None = None,
        think: bool | None = None,
        tool_choice: str | None = None,
        abort: Iterable[Abort] = (),
        on_exhaust: Literal["stop", "summarize"] = "stop",
        max_repeats: int = 3,
        on_tool_error: Literal["record", "raise"] = "record",
        name: str | None = None,
        **context: Any,
    ) -> Agent:
        """Start an agent under ``runtime``'s root supervisor and return it.

        ``context`` holds the other constructor arguments (``system``, ``instructions``,
        ``tools``, ``scope``, ``workspace``, ``authority``, ``approve``, ``tool_concurrency``,
        ``on`` (event listeners), ``error`` (their error handler), ``window`` (the model's
        context window in tokens: compact the conversation automatically to stay inside it)
        and ``strict`` (a failed automatic compaction raises instead of emitting ``fault``)).
        """
        defaults = RunOptions(
            limit=limit,
            timeout=timeout,
            budget=budget,
            think=think,
            tool_choice=tool_choice,
            abort=abort,
            on_exhaust=on_exhaust,
            max_repeats=max_repeats,
            on_tool_error=on_tool_error,
        )
        conversation = conversation or await Conversation.start(runtime)
        self = cls(provider, conversation, defaults=defaults, **context)

        def agent() -> _AgentActor:  # the factory's name names the actor
            return _AgentActor(self)

        self._ref = await runtime.spawn(agent, name=name, restart=Restart.TRANSIENT)
        return self

    @property
    def ref(self) -> ActorRef[Any, Any]:
        """The agent's actor."""
        if self._ref is None:
            raise RuntimeError("the agent has no actor: create it with 'await Agent.start(...)'")
        return self._ref

    @property
    def name(self) -> str:
        """The name the agent's actor runs under (``"(not started)"`` before :meth:`start`)."""
        return self._ref.name if self._ref is not None else "(not started)"

    def __repr__(self) -> str:
        return f"<Agent {self.name} {self.status.value}>"

    def statistics(self) -> dict[str, int]:
        """Runs completed (partial ones included), runs that raised, provider turns made, runs
        withdrawn before they began (their caller gave up or their token tripped while they
        waited), and runs waiting their turn."""
        return {**self._statistics, "queued": self._queued}

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the run in progress, if any (queued runs are not affected)."""
        if self._current is not None:
            self._current.token.cancel(reason)

    def stream(
        self, input: str | Message | Sequence[Message] | None = None, **options: Any
    ) -> AgentRun:
        """Start a run and stream its chunks (see :class:`AgentRun`). ``options`` are
        :class:`RunOptions` fields overriding the agent's for this run."""
        run_options = RunOptions(**options)
        send, receive = trio.open_memory_channel[Any](float("inf"))
        return AgentRun(self, _Request(self, _input_messages(input), run_options, send), receive)

    async def generate(
        self, input: str | Message | Sequence[Message] | None = None, **options: Any
    ) -> AgentResult:
        """Run to the end and return the result: :meth:`stream`, drained (the same run,
        without producing chunks nobody reads)."""
        request = _Request(self, _input_messages(input), RunOptions(**options), None)
        await request.submit(self.ref)
        try:
            await request.finished.wait()
        except BaseException:
            # Cancelled: a queued run is withdrawn at once, a running one commits its partial.
            await request.give_up("the caller was cancelled")
            raise
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    # -- the run -------------------------------------------------------------------------------

    def _option(self, options: RunOptions, name: str) -> Any:
        value = getattr(options, name)
        return getattr(self.defaults, name) if value is None else value

    async def _run(self, request: _Request, number: int) -> AgentResult:
        options = request.options
        limit: int = self._option(options, "limit")
        timeout: float | None = self._option(options, "timeout")
        budget: TokenBudget | None = self._option(options, "budget")
        meter = BudgetMeter(budget) if budget is not None else None
        run = _Run(self, request, meter, number)
        token = request.watch if request.watch is not None else request.token
        if request.input:
            await run.add(*request.input)
        if self._listeners:
            self._emit(AgentEvent("start", number))
        if token.cancelled or (meter is not None and meter.exhausted):
            stop = StopReason.CANCELLED if token.cancelled else StopReason.BUDGET
            self._emit(AgentEvent("abort", number, reason=token.reason or "budget", stop=stop))
            return run.result(stop)
        with trio.CancelScope() as scope, token.bind(scope):
            if timeout is not None:
                scope.deadline = trio.current_time() + timeout
            run.scope = scope
            try:
                with observe_retries(run.retried):
                    stop = await run.turns(limit)
            except BaseException:
                # A genuine failure, a cut (committed once: a second commit finds nothing), or
                # the agent stopped from outside: the history is left well formed either way.
                await run.commit_partial()
                raise
        if scope.cancelled_caught:
            if run.budget_tripped:
                stop = StopReason.BUDGET
            elif not token.cancelled and trio.current_time() >= scope.deadline:
                stop = StopReason.TIMEOUT
            else:
                stop = StopReason.CANCELLED
            await run.commit_partial()
            reason = "budget" if stop is StopReason.BUDGET else token.reason or stop.value
            self._emit(AgentEvent("abort", number, turn=run.turns_made, reason=reason, stop=stop))
        elif stop is StopReason.BUDGET:  # spent by a turn's reported usage, between turns
            self._emit(AgentEvent("abort", number, turn=run.turns_made, reason="budget", stop=stop))
        return run.result(stop)


class _Run:
    """The state of one run: what it appended, its usage, and what to commit on a cancel."""

    def __init__(
        self, agent: Agent, request: _Request, meter: BudgetMeter | None, number: int
    ) -> None:
        self.agent = agent
        self.request = request
        self.meter = meter
        self.number = number
        # How often each identical call (name + canonical arguments) has been run.
        self.seen: dict[str, int] = {}
        # Automatic compaction gave up for this run (futile, or its summarizer failed).
        self.futile = False
        self.output: Any = None
        self.scope: trio.CancelScope | None = None
        self.appended: list[Message] = []
        self.usage: Usage | None = Usage()  # None once a turn's usage is unknown
        self.estimated = False
        self.turns_made = 0
        self.thinking: list[str] = []
        self.budget_tripped = False
        # What a cancel must commit: the stream of the turn in flight, or its tool batch.
        self.stream: ProviderStream | None = None
        self.batch: ToolBatch | None = None
        # Calls of a committed assistant message whose results are not committed yet.
        self.open_calls: tuple[ToolCall, ...] = ()

    def emit(self, chunk: Chunk) -> None:
        request = self.request
        if request.send is not None and not request.deliver(chunk):
            # The consumer went away without closing the run: that is a cancel, never a crash.
            request.token.cancel("the stream's consumer went away")

    def result(self, stop: StopReason) -> AgentResult:
        content = next(
            (m.content for m in reversed(self.appended) if m.role.value == "assistant"), ""
        )
        return AgentResult(
            content=content,
            thinking="\n\n".join(t for t in self.thinking if t),
            messages=self.appended,
            usage=self.usage,
            stop=stop,
            turns=self.turns_made,
            output=self.output,
            estimated=self.estimated,
        )

    async def add(self, *messages: Message) -> None:
        # Shielded: a commit is quick (a local actor call) and must be known to have happened
        # or not -- a cancel landing mid-call could otherwise commit a tool call unrecorded.
        conversation = self.agent.conversation
        if not conversation._add_now(messages):  # the actor is busy: queue behind its work
            with trio.CancelScope(shield=True):
                await conversation.add(messages)
        self.appended.extend(messages)

    def retried(self, retry: RetryEvent) -> None:
        status = f" (HTTP {retry.status})" if retry.status is not None else ""
        self.event("retry", attempt=retry.attempt, delay=retry.delay, reason=retry.code + status)

    def event(self, kind: Any, **fields: Any) -> None:
        if self.agent._listeners:  # nobody listening: build no event
            self.agent._emit(AgentEvent(kind, self.number, turn=self.turns_made, **fields))

    def prompt(self, extra: Sequence[Message] = ()) -> tuple[Message, ...]:
        """The next request's messages, built fresh (``extra`` is appended, never stored)."""
        agent = self.agent
        source = agent.workspace
        active = source.active if isinstance(source, WorkspaceManager) else source
        built = build(
            agent.conversation._history_now().view(),
            system=agent.system,
            instructions=agent.instructions,
            files=active.files() if active is not None else (),
            scope=agent.scope,
        )
        return (*built, *extra)

    async def turns(self, limit: int) -> StopReason:
        agent = self.agent
        options = self.request.options
        authority = agent.authority
        definitions: tuple[ToolDefinition, ...] | None = tuple(
            d
            for d in agent.registry.definitions(agent.scope)
            if authority is None or not authority.withholds(d.name)  # never allowed: not shown
        )
        tools_off = agent._option(options, "tool_choice") == "none"
        if tools_off:
            definitions = ()  # no tools this run: none advertised, and none will run
        definitions = definitions or None
        provider_options = ProviderOptions(
            think=agent._option(options, "think"),
            tool_choice=agent._option(options, "tool_choice") if definitions else None,
        )
        max_repeats: int = agent._option(options, "max_repeats") or 3
        unknown_streak: list[ToolCall] = []
        requested = agent._option(options, "schema")
        spec = _OutputSpec.of(requested) if requested is not None else None
        configured: int | None = agent._option(options, "schema_retries")
        retries_left = 2 if configured is None else configured
        stated: tuple[Message, ...] = ()  # the schema, stated for a provider without a JSON mode
        if spec is not None:
            provider_options = attrs.evolve(provider_options, schema=spec.schema)
        attempts = 0
        while self.turns_made < limit:
            if self.meter is not None and self.meter.exhausted:
                # Reported usage (prompt tokens, thinking) spent the budget after the stream:
                # no further turn starts. The last turn's tool calls have run and are answered.
                self.budget_tripped = True
                return StopReason.BUDGET
            prompt = self.prompt(stated)
            if await self.keep_in_window(prompt):
                prompt = self.prompt(stated)
            try:
                result = await self.provider_turn(prompt, definitions, provider_options)
            except ConfigError:
                if spec is None or provider_options.schema is None:
                    raise
                # No native JSON-schema mode on this provider: state the schema instead.
                provider_options = attrs.evolve(provider_options, schema=None)
                stated = (Message.user(OUTPUT_INSTRUCTION + dumps(spec.schema)),)
                prompt = self.prompt(stated)
                result = await self.provider_turn(prompt, definitions, provider_options, again=True)
            await self.add(
                Message.assistant(
                    result.content,
                    calls=result.calls,
                    thinking=result.thinking,
                    continuation=result.continuation,
                )
            )
            if not result.calls:
                if spec is None:
                    return StopReason.COMPLETE
                attempts += 1
                self.output, issues = spec.read(result.content)
                if not issues:
                    return StopReason.COMPLETE
                if retries_left == 0:
                    raise OutputError(issues, attempts)
                retries_left -= 1
                limit += 1  # a retry is an extra answer, not one of the tool turns
                feedback = OUTPUT_FEEDBACK.format(issues="; ".join(issues[:5]))
                await self.add(Message.user(feedback))
                continue
            self.open_calls = result.calls
            for call in result.calls:
                self.emit(Chunk("tool_call", call=call))
            if tools_off:
                # The model was told to call no tools and did: none runs, each is answered (the
                # history stays well formed), and the run fails -- its answer cannot be trusted.
                await self.answer(result.calls, TOOLS_OFF)
                names = ", ".join(sorted({call.name for call in result.calls}))
                raise ProtocolError(
                    f"the model called tools ({names}) although this run set tool_choice='none'",
                    code="tool_choice",
                )
            if self.turns_made >= limit:
                await self.answer(result.calls, EXHAUSTED)
                self.event("exhaust", reason=f"the turn limit of {limit} was reached")
                if agent._option(options, "on_exhaust") == "summarize":
                    await self.final_answer(EXHAUST_INSTRUCTION, provider_options, FALLBACK_SUMMARY)
                return StopReason.EXHAUSTED
            repeated = self.repeats(result.calls, max_repeats)
            if repeated is not None:
                reason = (
                    f"not executed: the identical call {repeated} was already made {max_repeats} "
                    "times in this run; change the arguments or answer with what you have"
                )
                await self.answer(result.calls, reason)
                self.event("guard", reason=reason)
                continue
            batch = await self.run_tools(result.calls, refused=result.denied)
            unknown = [result.calls[index] for index in sorted(batch.skipped)]
            if unknown and unknown_streak:
                # Unknown tools two turns running: one last call, without tools, that names
                # what never ran -- instead of letting the model spin on names that do not exist.
                names = ", ".join(sorted({c.name for c in (*unknown_streak, *unknown)}))
                reason = f"unknown tools requested in consecutive turns: {names}"
                self.event("guard", reason=reason)
                instruction = (
                    f"These tool calls never ran because no such tools exist: {names}. Do not "
                    "call tools; answer with what you have."
                )
                fallback = UNKNOWN_TOOLS_FALLBACK.format(names=names)
                await self.final_answer(instruction, provider_options, fallback)
                return StopReason.COMPLETE
            unknown_streak = unknown
        return StopReason.COMPLETE

    async def keep_in_window(self, prompt: Sequence[Message]) -> bool:
        """Before a provider call: compact when the prompt reaches the agent's window (and the
        conversation can summarise). True when a compaction changed the history."""
        agent = self.agent
        if agent.window is None or self.futile or not agent.conversation.summarizable:
            return False
        head = [m for m in prompt[:1] if m.role is Role.SYSTEM]
        # The compaction's summarizer calls are the run's too: charged to its budget, and cut
        # the moment the run is (they run in the conversation's actor, not in this scope).
        cut = Abort()
        try:
            with paying(self.charge_compaction, cut):
                check = await agent.conversation.fit(agent.window, head=head)
        except CompactionError as error:
            self.event("fault", error=error, reason=error.message)
            if agent.strict:
                raise
            self.futile = True  # do not retry a failing summarizer on every turn of this run
            return False
        except BaseException:
            cut.cancel("the run was cut during its compaction")
            raise
        if check.futile:
            self.futile = True  # nothing more can fold: let the provider report the overflow
        return check.compacted

    def charge_compaction(self, usage: Usage | None, text: str) -> None:
        """A summarizer call of this run's compaction: charged to the budget (by estimate of
        its answer when unreported). Not a turn: ``AgentResult.usage`` sums the turns."""
        if self.meter is not None:
            self.meter.charge(usage, text=text)
            self.estimated = self.estimated or usage is None

    def repeats(self, calls: Sequence[ToolCall], max_repeats: int) -> str | None:
        """Count this batch's calls; the first one now repeated beyond the limit, if any."""
        keys = [f"{call.name}({dumps(call.arguments, canonical=True)})" for call in calls]
        over = next((key for key in keys if self.seen.get(key, 0) >= max_repeats), None)
        if over is None:
            for key in keys:
                self.seen[key] = self.seen.get(key, 0) + 1
        return over

    async def answer(self, calls: Sequence[ToolCall], text: str) -> None:
        """Record ``text`` as the failed result of every call (none of them runs)."""
        results = [_failed(call, text) for call in calls]
        for tool_result in results:
            self.emit(Chunk("tool_result", result=tool_result))
        await self.add(*(_tool_message(r) for r in results))
        self.open_calls = ()

    async def run_tools(
        self, calls: tuple[ToolCall, ...], *, refused: dict[str, str] | None = None
    ) -> ToolBatch:
        """Run a turn's calls (those the provider side ``refused`` are answered, not run)."""
        agent = self.agent
        self.batch = batch = ToolBatch(calls)
        results = await agent.registry.execute(
            calls,
            scope=agent.scope,
            authority=agent.authority,
            approve=agent.approve,
            limit=agent.tool_concurrency,
            batch=batch,
            refused=refused,
        )
        for index, (call, tool_result) in enumerate(zip(calls, results, strict=True)):
            self.emit(Chunk("tool_result", result=tool_result))
            if index in batch.denied and isinstance(tool_result, ToolFailure):
                self.event("deny", call=call, result=tool_result, reason=tool_result.error)
            else:
                self.event("tool", call=call, result=tool_result)
                if index in batch.errors:
                    self.event(
                        "tool_error", call=call, result=tool_result, error=batch.errors[index]
                    )
        await self.add(*(_tool_message(r) for r in results))
        self.batch = None
        self.open_calls = ()
        if batch.errors and agent._option(self.request.options, "on_tool_error") == "raise":
            index = min(batch.errors)
            call, error = calls[index], batch.errors[index]
            raise ToolError(
                f"tool {call.name!r} raised {type(error).__name__} (call {call.id!r}), and "
                "this run fails on tool errors (on_tool_error='raise')",
                code="tool_raised",
                tool=call.name,
                call_id=call.id,
            ) from error
        return batch

    async def final_answer(self, instruction: str, options: ProviderOptions, fallback: str) -> None:
        """One last provider call without tools, told ``instruction`` (which is not stored);
        ``fallback`` is recorded when it answers with nothing."""
        prompt = self.prompt([Message.user(instruction)])
        quiet = attrs.evolve(options, tool_choice=None)
        result = await self.provider_turn(prompt, None, quiet)
        text = result.content.strip() or fallback
        await self.add(Message.assistant(text, thinking=result.thinking))

    async def provider_turn(
        self,
        prompt: Sequence[Message],
        definitions: Any,
        options: ProviderOptions,
        *,
        again: bool = False,
    ) -> ProviderResult:
        """Every provider call of the run, whatever asks for it, goes through here: inside the
        run's scope (its deadline and abort), and never once the budget is spent -- then the
        run is cut as by a budget trip mid-stream. ``again``: the same turn, re-sent."""
        meter = self.meter
        if meter is not None:
            if meter.exhausted:
                self.budget_tripped = True
                assert self.scope is not None
                self.scope.cancel()
                await trio.lowlevel.checkpoint()  # raises Cancelled: the run's scope takes it
            meter.begin_turn()
        if not again:
            self.turns_made += 1
            self.agent._statistics["turns"] += 1
            self.event("turn")
        self.stream = stream = self.agent.provider.stream(
            prompt, tools=definitions, options=options
        )
        async with stream:
            async for delta in stream:
                self.emit(Chunk(delta.channel, text=delta.text))
                if (
                    delta.channel == "content"
                    and meter is not None
                    and meter.charge_content(delta.text)
                ):
                    self.budget_tripped = True
                    assert self.scope is not None
                    self.scope.cancel()
                    # Stop at this delta: the cancel is delivered here, not at the stream's
                    # next network read (which may be many buffered deltas later).
                    await trio.lowlevel.checkpoint()
        self.stream = None
        result: ProviderResult = stream.result
        self.settle_usage(result)
        return result

    def settle_usage(self, result: ProviderResult) -> None:
        """Account a finished (or cut) turn: what was reported; unreported usage stays unknown
        (``None``), or, with a budget, is charged by estimate and marked so."""
        draw: Usage | None
        estimated = False
        if self.meter is not None:
            draw = self.meter.reconcile(result.usage, thinking=result.thinking)
            estimated = result.usage is None
            self.estimated = self.estimated or estimated
        else:
            draw = result.usage
        self.usage = None if self.usage is None or draw is None else self.usage + draw
        self.thinking.append(result.thinking)
        self.emit(Chunk("usage", usage=draw, estimated=estimated))
        self.event("usage", usage=draw, estimated=estimated)

    async def commit_partial(self) -> None:
        """After a cancel or a failure: commit what the cut turn produced, with a result for
        every call (running ones interrupted, the others not executed)."""
        with trio.CancelScope(shield=True) as shield:
            shield.deadline = trio.current_time() + COMMIT_DEADLINE
            stream, self.stream = self.stream, None
            if stream is not None:
                partial = stream.partial
                self.settle_usage(partial)
                if partial.content or partial.calls:
                    await self.add(
                        Message.assistant(
                            partial.content,
                            calls=partial.calls,
                            thinking=partial.thinking,
                            interrupted=True,
                        )
                    )
                    self.open_calls = partial.calls
            if self.open_calls:
                batch = self.batch
                if batch is not None:
                    settled = batch.settled()
                else:
                    settled = [_failed(call, NOT_EXECUTED) for call in self.open_calls]
                for tool_result in settled:
                    self.emit(Chunk("tool_result", result=tool_result))
                await self.add(*(_tool_message(r) for r in settled))
                self.open_calls = ()
                self.batch = None


def _failed(call: ToolCall, text: str) -> ToolResult:
    return ToolFailure(call.id, call.name, text)


def _tool_message(result: ToolResult) -> Message:
    """A tool result as the tool message the model reads: a success as JSON text (a string
    value as it is), a failure as its error text."""
    if isinstance(result, ToolSuccess):
        value = result.value
        content = value if isinstance(value, str) else dumps(value)
    else:
        content = result.error
    return Message.tool(result.id, result.name, content)
