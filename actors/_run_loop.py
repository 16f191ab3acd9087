"""The run loop of an agent: one run's turns -- provider calls, tool batches, the guards --
and what a cut run commits. :class:`~actors.agent.Agent` owns the runs; this module is the
loop it drives for each, with the chunks and events a run produces."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from protocols._json import _CANONICAL_CHECKED
from protocols.codec import dumps, loads
from protocols.errors import (
    AgentsError,
    ConfigError,
    ProtocolError,
    ProviderError,
    ToolError,
    ValidationError,
)
from protocols.history import estimate_messages
from protocols.jobs import UNKNOWN_EFFECT, Decision
from protocols.messages import (
    CUT_SHORT,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    Usage,
)
from protocols.toolschema import schema_for, structure_value, validate_arguments

from . import _guarding
from ._core._abort import Abort
from ._output_stream import output_stream
from ._pricing import price_result
from ._run_context import context_for
from ._run_events import AgentEvent, Chunk
from ._run_state import COMMIT_DEADLINE, Resume, RunJournal, _failed, _RunState
from ._tool_run import _tool_run
from .conversation import CompactionError, paying
from .providers._fallback import _OBSERVERS as _FALLBACK_OBSERVERS
from .tools import NOT_EXECUTED, ToolBatch

_T = TypeVar("_T")

if TYPE_CHECKING:
    from protocols.settings import ModelSettings

    from .agent import Agent
    from .guardrails import Guardrail

__all__ = [
    "COMMIT_DEADLINE",
    "EXHAUSTED",
    "EXHAUST_INSTRUCTION",
    "FALLBACK_SUMMARY",
    "OUTPUT_FEEDBACK",
    "OUTPUT_INSTRUCTION",
    "TOOLS_OFF",
    "UNKNOWN_TOOLS_FALLBACK",
    "AgentEvent",
    "Chunk",
    "OutputError",
    "Resume",
    "RunJournal",
]

log = logging.getLogger("trio_agents.agent")

#: The result text of calls the model asked for on the last turn the limit allowed.
EXHAUSTED = "not executed: the run reached its turn limit"

#: The result text of calls a model made in a run with ``tool_choice="none"`` (which then fails).
TOOLS_OFF = "not executed: tools are off for this request (tool_choice='none')"

#: How a run ends when the provider cut a reply short, by the reply's finish reason.
_CUT_STOP: Mapping[FinishReason, StopReason] = {
    FinishReason.LENGTH: StopReason.MAX_TOKENS,
    FinishReason.CONTENT_FILTER: StopReason.CONTENT_FILTER,
}

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
    """A requested output: its JSON Schema and, for a class, the class answers are built into."""

    schema: dict[str, Any]
    target: type | None

    @classmethod
    def of(cls, output: dict[str, Any] | type) -> _OutputSpec:
        if isinstance(output, dict):
            return cls(output, None)
        if isinstance(output, type):
            try:
                json_schema = schema_for(output)
            except ValidationError as error:
                raise ValidationError(f"output: {error.message}") from None
            if json_schema.get("type") == "object":
                return cls(json_schema, output)
        raise ValidationError(
            "output must be a JSON Schema (a dict) or a class whose values are JSON objects -- "
            f"a pydantic model, a dataclass, a TypedDict or an attrs class -- not {output!r}"
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
        if self.target is None:
            return value, []
        try:
            return structure_value(self.target, value), []
        except ValidationError as error:  # what the schema cannot say: a validator's refusal
            return None, [error.message]


class _Run(_RunState):
    """One run's loop: its turns -- a provider call, the reply committed, its tool calls run --
    until the model answers, a bound cuts it, or a guard stops it."""

    async def turns(self, limit: int) -> StopReason:
        agent = self.agent
        options = self.request.options
        definitions: tuple[ToolDefinition, ...] | None = _advertised(agent)
        choice = agent._option(options, "tool_choice")
        tools_off = choice == "none"
        if tools_off:
            definitions = ()  # no tools this run: none advertised, and none will run
        client: frozenset[str] | None = None
        if options.client_tools and not tools_off:
            client = frozenset(tool.name for tool in options.client_tools)
            own = {d.name for d in definitions or ()}
            clash = sorted(client & own)
            if clash:
                raise ValidationError(
                    f"client_tools {', '.join(map(repr, clash))}: the agent has a tool of that name"
                )
            definitions = (*(definitions or ()), *options.client_tools)
        definitions = definitions or None
        provider_options = _provider_options(
            agent,
            agent._settings(options),
            agent._option(options, "think"),
            choice if definitions else None,
        )
        max_repeats: int = agent._option(options, "max_repeats") or 3
        unknown_streak: list[ToolCall] = []
        requested = agent._option(options, "output")
        if requested is None:
            requested = agent._option(options, "schema")  # the same option, by its first name
        spec = _OutputSpec.of(requested) if requested is not None else None
        retries_left = 0  # (answers are read against a schema only with one)
        stated: tuple[Message, ...] = ()  # the schema, stated for a provider without a JSON mode
        if spec is not None:
            configured: int | None = agent._option(options, "schema_retries")
            retries_left = 2 if configured is None else configured
            provider_options = attrs.evolve(provider_options, schema=spec.schema)
            self.partial = output_stream(self, spec.schema, Chunk)
        attempts = 0
        guards = agent._guardrails(options)
        watching: Sequence[Guardrail] = ()  # input guards to run alongside the first call
        tool_guards: Sequence[Guardrail] = ()
        if guards:
            tool_guards = [guard for guard in guards if guard.kind == "tool"]
            watching = await _guarding.before(self, guards)
            if self.tripped is not None:
                return StopReason.GUARDRAIL
        while self.turns_made < limit:
            if self.meter is not None and self.meter.spent:
                # Reported usage (prompt tokens, thinking) spent the budget after the stream:
                # no further turn starts. The last turn's tool calls have run and are answered.
                self.budget_tripped = True
                return StopReason.BUDGET
            if watching:
                # The first call, while the input guards check the input: its answer is
                # committed (and its calls run) only once they all passed.
                async with _guarding.alongside(self, watching) as watch:
                    result, provider_options, stated = await self.model_turn(
                        definitions, provider_options, stated, spec
                    )
                watching = ()
                if watch.trip is not None:
                    return _guarding.void_first(self, watch.trip)
            else:
                prompt = self.prompt(stated)
                if await self.keep_in_window(prompt):
                    prompt = self.prompt(stated)
                try:
                    result = await self.provider_turn(prompt, definitions, provider_options)
                except (ProviderError, ConfigError) as error:
                    result, provider_options, stated = await self.turn_again(
                        error, definitions, provider_options, stated, spec
                    )
            await self.respond(
                Message.assistant(
                    result.content,
                    calls=result.calls,
                    thinking=result.thinking,
                    continuation=result.continuation,
                ),
                result.usage,
            )
            cut = _CUT_STOP.get(result.finish)
            if cut is not None:
                # The provider cut the reply short (its token limit, its content filter): the
                # run ends here, partial. None of the reply's calls runs -- the last one's
                # arguments may be cut, and the model had not finished deciding -- and each is
                # answered why, so the history stays well formed. A structured answer is never
                # read from a cut reply, and no retry is spent on it.
                await self.cut_short(result)
                return cut
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
                await self.note(Message.user(feedback))
                continue
            self.open_calls = result.calls
            for call in result.calls:
                self.show("tool_call", call=call)
            if tools_off:
                # The model was told to call no tools and did: none runs, each is answered (the
                # history stays well formed), and the run fails -- its answer cannot be trusted.
                await self.answer(result.calls, TOOLS_OFF)
                names = ", ".join(sorted({call.name for call in result.calls}))
                raise ProtocolError(
                    f"the model called tools ({names}) although this run set tool_choice='none'",
                    code="tool_choice",
                )
            if tool_guards:
                checks = _guarding.tool_checks(tool_guards, result.calls)
                trip = await _guarding.check(self, checks) if checks else None
                if trip is not None:
                    reason = _guarding.TOOL_TRIPPED.format(name=trip.name, reason=trip.reason)
                    await self.answer(result.calls, reason)
                    return _guarding.tripped(self, trip)
            if client is not None and any(call.name in client for call in result.calls):
                # A call of the caller's own tools: the agent's calls of the turn run, and the
                # run stops for the caller's results (they are the next run's input).
                ours = tuple(call for call in result.calls if call.name not in client)
                if ours:
                    await self.run_tools(ours, refused=result.denied)
                self.open_calls = ()
                return StopReason.CLIENT_TOOLS
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
            if self.handoff is not None:
                return StopReason.COMPLETE  # the agent handed to answers the rest of the turn
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
                final = await self.final_answer(instruction, provider_options, fallback)
                return _CUT_STOP.get(final.finish, StopReason.COMPLETE)
            unknown_streak = unknown
        return StopReason.COMPLETE

    async def model_turn(
        self,
        definitions: tuple[ToolDefinition, ...] | None,
        options: ProviderOptions,
        stated: tuple[Message, ...],
        spec: _OutputSpec | None,
    ) -> tuple[ProviderResult, ProviderOptions, tuple[Message, ...]]:
        """One turn's provider call, on a prompt built fresh: compacted first when it reaches
        the window; once more after compacting when the provider says it overflowed; once
        more with the schema stated when the provider has no JSON-schema mode. Returns the
        result, and the options and stated messages the next turns use."""
        prompt = self.prompt(stated)
        if await self.keep_in_window(prompt):
            prompt = self.prompt(stated)
        try:
            result = await self.provider_turn(prompt, definitions, options)
        except (ProviderError, ConfigError) as error:
            return await self.turn_again(error, definitions, options, stated, spec)
        return result, options, stated

    async def turn_again(
        self,
        error: ProviderError | ConfigError,
        definitions: tuple[ToolDefinition, ...] | None,
        options: ProviderOptions,
        stated: tuple[Message, ...],
        spec: _OutputSpec | None,
    ) -> tuple[ProviderResult, ProviderOptions, tuple[Message, ...]]:
        """A turn's provider call failed with ``error``: the same turn once more, after
        compacting, when the provider says the prompt overflowed its context window; with the
        schema stated, when the provider has no JSON-schema mode. Raises ``error`` otherwise.
        Returns as :meth:`model_turn` does."""
        if isinstance(error, ProviderError):
            # The provider says the prompt is over its context window, although the estimate
            # was not (or there is no window set): one compaction, whatever the estimate
            # says, and the turn once more; a second overflow is the run's error.
            if error.code != "context_overflow" or self.refused:
                raise error
            if not await self.compact_after_overflow(error):
                raise error
        else:
            if spec is None or options.schema is None:
                raise error
            # No native JSON-schema mode on this provider: state the schema instead.
            options = attrs.evolve(options, schema=None)
            stated = (Message.user(OUTPUT_INSTRUCTION + dumps(spec.schema)),)
        prompt = self.prompt(stated)
        result = await self.provider_turn(prompt, definitions, options, again=True)
        return result, options, stated

    async def keep_in_window(self, prompt: Sequence[Message]) -> bool:
        """Before a provider call: compact when the prompt reaches the agent's window (and the
        conversation can summarise). True when a compaction changed the history."""
        agent = self.agent
        conversation = self.conversation
        if agent.window is None or self.futile or not conversation.summarizable:
            return False
        head = [m for m in prompt[:1] if m.role is Role.SYSTEM]
        window = agent.window
        before = len(conversation._history_now().messages)
        check = await self.compacting(lambda: conversation.fit(window, head=head))
        if check is None:
            return False
        if check.futile:
            self.futile = True  # nothing more can fold: the window guard refuses the prompt
        if check.compacted:
            self.compacted("window", max(0, before - len(conversation._history_now().messages)))
        return check.compacted

    async def compact_after_overflow(self, error: ProviderError) -> bool:
        """The provider refused the prompt as over its context window: compact the conversation
        once, whatever the estimate says. True when that changed the history, so that the turn
        may be sent once more."""
        conversation = self.conversation
        if self.futile or not conversation.summarizable:
            return False
        self.event("guard", reason=f"the provider refused the prompt as too long: {error.message}")
        before = len(conversation._history_now().messages)
        section = await self.compacting(conversation.compact)
        if section is None:
            self.futile = True
            return False
        self.compacted("overflow", max(0, before - len(conversation._history_now().messages)))
        return True

    async def compacting(self, fold: Callable[[], Awaitable[_T]]) -> _T | None:
        """Run a compaction of the conversation (``fold``) as part of this run: its summarizer
        calls charged to the run's budget, and cut the moment the run is (they run in the
        conversation's actor, not in this scope). A summarizer failure emits ``fault`` and gives
        ``None`` (with this run trying no more), or fails the run when the agent is strict."""
        cut = Abort()
        try:
            with paying(self.charge_compaction, cut):
                return await fold()
        except CompactionError as error:
            self.event("fault", error=error, reason=error.message)
            if self.agent.strict:
                raise
            self.futile = True  # do not retry a failing summarizer on every turn of this run
            return None
        except BaseException:
            cut.cancel("the run was cut during its compaction")
            raise

    def within_window(self, prompt: Sequence[Message]) -> None:
        """The window guard: a prompt estimated at or over the agent's context window is not
        sent. Raises :class:`~protocols.errors.ProviderError` ``context_overflow`` (not
        retryable) before any provider call, with a ``guard`` event saying why."""
        window = self.agent.window
        self.refused = False
        if window is None:
            return
        tokens = estimate_messages(prompt)
        if tokens < window:
            return
        reason = (
            f"the prompt is estimated at {tokens} tokens, at or over the agent's context window "
            f"of {window}"
            + (" after compaction" if self.conversation.summarizable else "")
            + "; it was not sent"
        )
        self.refused = True
        self.event("guard", reason=reason)
        raise ProviderError(reason, code="context_overflow", retryable=False)

    def charge_compaction(self, usage: Usage | None, text: str) -> None:
        """A summarizer call of this run's compaction: charged to the budget (by estimate of
        its answer when unreported). Not a turn: ``AgentResult.usage`` sums the turns."""
        if self.meter is not None:
            self.meter.charge(usage, text=text)
            self.estimated = self.estimated or usage is None

    def repeats(self, calls: Sequence[ToolCall], max_repeats: int) -> str | None:
        """Count this batch's calls; the first one now repeated beyond the limit, if any."""
        keys = [f"{call.name}({_canonical(call.arguments)})" for call in calls]
        over = next((key for key in keys if self.seen.get(key, 0) >= max_repeats), None)
        if over is None:
            for key in keys:
                self.seen[key] = self.seen.get(key, 0) + 1
        return over

    async def finish_batch(self, decisions: Sequence[Decision]) -> None:
        """A continued run first answers the batch its crash left open: calls that never
        started run, idempotent ones that had started run again (same key), the others are
        answered that their effect is unknown; recorded results are already in the history."""
        calls = tuple(d.call for d in decisions)
        self.open_calls = calls
        unknown = [d.result for d in decisions if d.action == "unknown" and d.result is not None]
        if unknown:
            for tool_result in unknown:
                self.show("tool_result", result=tool_result)
            await self.record(unknown)
        again = tuple(d.call for d in decisions if d.action in ("run", "rerun"))
        if again:
            await self.run_tools(again)
        self.open_calls = ()

    async def close_batch(self, decisions: Sequence[Decision]) -> None:
        """A continued run that is cut before it begins answers the batch its crash left open
        without running any of it: a call that had started is answered that it was interrupted
        with its effect unknown, one that never started that it was not executed."""
        results = [
            decision.result
            if decision.result is not None
            else _failed(
                decision.call, NOT_EXECUTED if decision.action == "run" else UNKNOWN_EFFECT
            )
            for decision in decisions
        ]
        for tool_result in results:
            self.show("tool_result", result=tool_result)
        await self.record(results)

    async def answer(self, calls: Sequence[ToolCall], text: str) -> None:
        """Record ``text`` as the failed result of every call (none of them runs)."""
        results = [_failed(call, text) for call in calls]
        for tool_result in results:
            self.show("tool_result", result=tool_result)
        await self.record(results)
        self.open_calls = ()

    async def run_tools(
        self, calls: tuple[ToolCall, ...], *, refused: dict[str, str] | None = None
    ) -> ToolBatch:
        """Run a turn's calls (those the provider side ``refused`` are answered, not run)."""
        agent = self.agent
        self.batch = batch = ToolBatch(calls)
        registry = agent.registry
        if self.journal is not None:
            waiting = [call for call in calls if not refused or call.id not in refused]
            await self.journal.gate(waiting, agent.authority, registry, agent.scope)
            registry = self.journal.tools(registry)
        reset = _tool_run.set(self)
        try:
            results = await registry.execute(
                calls,
                scope=agent.scope,
                authority=agent.authority,
                approve=agent.approve,
                limit=agent.tool_concurrency,
                batch=batch,
                refused=refused,
            )
        finally:
            _tool_run.reset(reset)
        for index, (call, tool_result) in enumerate(zip(calls, results, strict=True)):
            self.show("tool_result", result=tool_result)
            if index in batch.denied and isinstance(tool_result, ToolFailure):
                self.event("deny", call=call, result=tool_result, reason=tool_result.error)
            else:
                self.notify("tool", call=call, result=tool_result)
                if index in batch.errors:
                    self.event(
                        "tool_error", call=call, result=tool_result, error=batch.errors[index]
                    )
        await self.record(results)
        self.batch = None
        self.open_calls = ()
        # The batch lets go of the tools' exceptions once they are reported: each one's
        # traceback holds the frames that held the batch (a cycle the collector would have to
        # find).
        errors, batch.errors = batch.errors, {}
        if errors and agent._option(self.request.options, "on_tool_error") == "raise":
            index = min(errors)
            call, error = calls[index], errors[index]
            raise ToolError(
                f"tool {call.name!r} raised {type(error).__name__} (call {call.id!r}), and "
                "this run fails on tool errors (on_tool_error='raise')",
                code="tool_raised",
                tool=call.name,
                call_id=call.id,
            ) from error
        return batch

    async def final_answer(
        self, instruction: str, options: ProviderOptions, fallback: str
    ) -> ProviderResult:
        """One last provider call without tools, told ``instruction`` (which is not stored);
        ``fallback`` is recorded when it answers with nothing. Returns the call's result."""
        prompt = self.prompt([Message.user(instruction)])
        quiet = attrs.evolve(options, tool_choice=None)
        result = await self.provider_turn(prompt, None, quiet)
        text = result.content.strip() or fallback
        await self.respond(Message.assistant(text, thinking=result.thinking), result.usage)
        return result

    async def cut_short(self, result: ProviderResult) -> None:
        """Answer every call of a reply the provider cut short (committed already) with why it
        did not run: the text the result's ``denied`` gives it (:data:`CUT_SHORT`)."""
        calls = result.calls
        if not calls:
            return
        self.open_calls = calls
        for call in calls:
            self.show("tool_call", call=call)
        default = CUT_SHORT[result.finish]
        results = [_failed(call, result.denied.get(call.id, default)) for call in calls]
        for tool_result in results:
            self.show("tool_result", result=tool_result)
        await self.record(results)
        self.open_calls = ()

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
        # A cut that landed while the run was shielded (committing) stops it here, before a
        # provider call starts.
        await trio.lowlevel.checkpoint_if_cancelled()
        self.within_window(prompt)
        if self.pace is not None:
            # Inside the run's scope: a cancel, a deadline or a budget trip while pacing cuts
            # the run like any other wait.
            await self.pace(context_for(self, ""))
        if meter is not None:
            if meter.spent:
                self.budget_tripped = True
                assert self.scope is not None
                self.scope.cancel()
                await trio.lowlevel.checkpoint()  # raises Cancelled: the run's scope takes it
            meter.begin_turn()
        if not again:
            self.turns_made += 1
            self.agent._statistics["turns"] += 1
            live = self.live
            if live is not None:
                live.add("turn", self.turns_made)  # (read back as {"turn": ...})
            self.notify("turn")
        journal = self.journal
        if journal is not None and not again:
            await journal.request(self.turns_made)
        provider = self.agent.provider
        trace = self.trace
        # The call's span, current while the provider streams (a relay client sends it on).
        chat = trace.chat(provider, options, self.turns_made) if trace is not None else None
        partial = self.partial
        if partial is not None:
            partial.begin()  # a new attempt: its answer is read from the start
        self.void_to = None
        # While the run consumes the stream it hears the stream's fallbacks (fell_back), and
        # takes their rewinds unless it is journaled (a durable job's log is derived from its
        # journal, which has no rewind of a live attempt: there a failure after the first
        # delta fails the turn, as without the opt-in). (observe_fallbacks, without its
        # context manager's price on every turn.)
        observed = _FALLBACK_OBSERVERS.set((*_FALLBACK_OBSERVERS.get(), self.observer))
        try:
            self.stream = stream = provider.stream(prompt, tools=definitions, options=options)
            async with stream:
                turn = self.turns_made
                async for delta in stream:
                    if meter is not None and meter.spent:
                        # Spent by another run drawing on the same budget (a team's, a parent's)
                        # before this delta: it is neither shown nor charged.
                        self.budget_tripped = True
                        assert self.scope is not None
                        self.scope.cancel()
                        await trio.lowlevel.checkpoint()
                    # Shown -- and journaled, written behind the run: a durable job's log is
                    # derived from its journal -- exactly as the stream gave it.
                    if self.void_to is None:  # the attempt's first delta: a rewind goes back here
                        self.void_to = self.live.last if self.live is not None else 0
                    self.show(delta.channel, delta.text)
                    if partial is not None and delta.channel == "content":
                        partial.feed(delta.text)
                    if journal is not None:
                        journal.stream(turn, delta.channel, delta.text)
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
                if partial is not None:
                    partial.end()
            result: ProviderResult = stream.result
            if self.pricing is not None:
                result = price_result(self.pricing, provider, result, self.currency)
        except BaseException as error:
            if chat is not None:
                cut = self.stream
                chat.failed(error, cut.partial if cut is not None else None)
            raise
        finally:
            _FALLBACK_OBSERVERS.reset(observed)
        if chat is not None:
            chat.done(result)
        self.stream = None
        self.settle_usage(result)
        return result


def _advertised(agent: Agent) -> tuple[ToolDefinition, ...]:
    """The definitions of the agent's tools in its scope, but those its authority never allows
    (not shown at all) -- the same tuple run after run while none of them changed."""
    registry, scope, authority = agent.registry, agent.scope, agent.authority
    cached = agent._advertised
    if (
        cached is not None
        and cached[0] is registry
        and cached[1] == registry.version
        and cached[2] is scope
        and cached[3] is authority
    ):
        known: tuple[ToolDefinition, ...] = cached[4]
        return known
    definitions = tuple(
        d
        for d in registry.definitions(scope)
        if authority is None or not authority.withholds(d.name)
    )
    agent._advertised = (registry, registry.version, scope, authority, definitions)
    return definitions


def _provider_options(
    agent: Agent, settings: ModelSettings | None, think: bool | None, tool_choice: str | None
) -> ProviderOptions:
    """The options of a run's provider calls: the same (immutable) object run after run while
    the settings are the same object and the call options equal."""
    cached = agent._call_options
    if (
        cached is not None
        and cached[0] is settings
        and cached[1] == think
        and cached[2] == tool_choice
    ):
        same: ProviderOptions = cached[3]
        return same
    made = ProviderOptions.from_settings(settings, think=think, tool_choice=tool_choice)
    agent._call_options = (settings, think, tool_choice, made)
    return made


#: No usage (yet): a run's starting count (a usage is immutable: one for every run).


def _canonical(arguments: Mapping[str, Any]) -> str:
    """A call's arguments as canonical JSON text, the same for equal arguments (checked JSON
    already: the C encoder takes them as they are; what it cannot take goes the strict way)."""
    try:
        return _CANONICAL_CHECKED(arguments)
    except (ValueError, TypeError, RecursionError):
        return dumps(arguments, canonical=True)
