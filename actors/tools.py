"""Tools: the ``@tool`` decorator, and a registry that runs a model's calls safely.

A tool is a Python function (sync or async) the model may call. ``@tool`` derives its JSON Schema
from the signature and docstring (:mod:`protocols.toolschema`), or takes an explicit one.
Arguments a model sends are validated against that schema and structured into the typed
parameters; every problem is a *result the model sees*, never an exception in your process.

:meth:`ToolRegistry.execute` runs one batch of calls, the way an agent turn needs it:

* results come back in call order, each call isolated -- a raise, a timeout, a bad argument or
  a non-JSON return value becomes a :class:`~protocols.messages.ToolFailure`;
* a call to a tool that is not registered (or out of scope) is skipped with a failure naming
  the requested tool and the available ones -- never executed, never mapped to a similar name;
* the :class:`~protocols.authority.Authority` decides each call first: a denied call never runs
  and answers ``denied: <reason>``; an "ask" goes to the async ``approve`` callback (none
  attached: denied), and no call of the batch runs before every approval is answered;
* at most ``limit`` calls run at once, all inside the caller's nursery scope: ``trio.Cancelled``
  always propagates and no tool task outlives the batch. :class:`ToolBatch` tells afterwards
  which calls finished, which were interrupted and which never started.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol, overload, runtime_checkable

import attrs
import cattrs
import trio

from protocols.authority import Authority, Verdict, resolve_ask
from protocols.codec import check_json
from protocols.context import Scope
from protocols.errors import ConfigError, ValidationError
from protocols.messages import ToolCall, ToolDefinition, ToolFailure, ToolResult, ToolSuccess
from protocols.relay import loggable
from protocols.toolschema import (
    ToolSignature,
    signature_of,
    structure_arguments,
    validate_arguments,
)

from ._core._errors import raises_one_cause
from ._run_context import context_for
from ._tool_run import _tool_run

__all__ = [
    "INTERRUPTED",
    "NOT_EXECUTED",
    "Approver",
    "CallableTool",
    "Tool",
    "ToolBatch",
    "ToolRegistry",
    "tool",
]

log = logging.getLogger("trio_agents.tools")

#: The error text of a call that was running when its batch was cancelled.
INTERRUPTED = "interrupted: the run was cancelled while this tool was running"
#: The error text of a call that never started because its batch was cancelled first.
NOT_EXECUTED = "not executed: the run ended before this call started"

#: How much of an exception's message a failure result carries.
_ERROR_LIMIT = 2000

#: Answers an "ask": ``(call, verdict) -> approved`` or ``(approved, reason)``.
Approver = Callable[[ToolCall, Verdict], Awaitable[bool | tuple[bool, str]]]

_results = cattrs.Converter()

#: The types a tool's value may have that unstructure to themselves.
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _success(call: ToolCall, plain: Any) -> ToolSuccess:
    """The success of ``call`` with the value ``plain`` (checked JSON already), without
    ToolSuccess's checks: its id and name are the call's (checked by ToolCall), it has no images,
    and checking ``plain`` again would give ``plain``."""
    made: ToolSuccess = _new(ToolSuccess)
    _set(made, "id", call.id)
    _set(made, "name", call.name)
    _set(made, "value", plain)
    _set(made, "images", ())
    return made


_new = object.__new__
_set = object.__setattr__
if {field.name for field in attrs.fields(ToolSuccess)} != {"id", "name", "value", "images"}:
    raise RuntimeError("_success does not set every field of ToolSuccess")  # pragma: no cover


def _is_pydantic_model(cls: type) -> bool:
    # Duck-typed: pydantic is optional and never imported here.
    return callable(getattr(cls, "model_dump", None)) and hasattr(cls, "__pydantic_fields__")


def _pydantic_json(value: Any) -> Any:
    return value.model_dump(mode="json")


# A tool may return a pydantic model: the model reads its ``model_dump(mode="json")``.
_results.register_unstructure_hook_func(_is_pydantic_model, _pydantic_json)

#: Where a tool that raised reports its exception (set per call by ToolRegistry.execute).
_raised: contextvars.ContextVar[Callable[[ToolCall, Exception], None] | None] = (
    contextvars.ContextVar("trio_agents_tool_raised", default=None)
)


@runtime_checkable
class CallableTool(Protocol):
    """What a registry runs: a definition, and ``call`` turning a model's call into a result
    without raising (``trio.Cancelled`` aside). :class:`Tool` is one; so are the workspace
    tools of :func:`actors.workspace_tools`."""

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told about the tool."""
        ...

    async def call(self, call: ToolCall) -> ToolResult:
        """Run ``call``; every failure is a result."""
        ...


def _bounded(text: str) -> str:
    text = text.strip() or "(no message)"
    return text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 3] + "..."


@attrs.frozen
class Tool:
    """A callable the model may use: its :class:`~protocols.messages.ToolDefinition` and the
    function behind it.

    ``blocking``: a sync function that blocks (disk, CPU, a sync client) runs in a worker thread;
    a cancel then waits for it to return (threads cannot be interrupted). Other sync functions run
    on the event loop and must be quick. ``timeout``: seconds one call may take (its failure tells
    the model so). ``idempotent``: running a call twice with the same
    :attr:`RunContext.idempotency_key <actors.RunContext.idempotency_key>` has the effect of
    running it once -- a durable job's worker that took over a crashed one runs such a call
    again when its effect is unknown, instead of telling the model it is unknown.
    """

    definition: ToolDefinition
    function: Callable[..., Any] = attrs.field(repr=False)
    signature: ToolSignature | None = attrs.field(default=None, repr=False)
    blocking: bool = False
    timeout: float | None = None
    idempotent: bool = False
    # Whether the function is a coroutine function (asked on every call: answered once).
    _is_async: bool = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_is_async", inspect.iscoroutinefunction(self.function))
        if self.timeout is not None and not (
            isinstance(self.timeout, int | float)
            and self.timeout > 0
            and math.isfinite(self.timeout)
        ):
            raise ConfigError(
                f"a tool timeout must be a number of seconds > 0, not {self.timeout!r}"
            )
        if self.blocking and inspect.iscoroutinefunction(self.function):
            raise ConfigError(f"tool {self.name!r} is async: blocking=True is for sync functions")

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        return self.definition.name

    async def __call__(self, **arguments: Any) -> Any:
        """Call the function directly (for tests and reuse), bypassing validation."""
        return await self._invoke(arguments)

    async def _invoke(self, arguments: Mapping[str, Any]) -> Any:
        function = self.function
        if self._is_async:
            return await function(**arguments)
        if self.blocking:
            return await trio.to_thread.run_sync(functools.partial(function, **arguments))
        # A quick sync function on the event loop: honour a cancel first, but do not yield --
        # the run around it yields at every provider call.
        await trio.lowlevel.checkpoint_if_cancelled()
        return function(**arguments)

    async def call(self, call: ToolCall) -> ToolResult:
        """Run ``call`` and return its result; every failure is a result, ``trio.Cancelled``
        propagates."""
        problems = validate_arguments(self.definition.parameters, call.arguments)
        if problems:
            return ToolFailure(call.id, call.name, "invalid arguments: " + "; ".join(problems))
        try:
            if self.signature is not None:
                arguments = structure_arguments(self.signature, dict(call.arguments))
            else:
                arguments = dict(call.arguments)
        except ValidationError as error:
            # What the schema could not say (a validator's refusal), worded as the schema's
            # problems are: "invalid arguments: <path>: <message>; ...".
            assert self.signature is not None
            refused = error.message.removeprefix(
                f"invalid arguments for tool {self.signature.name!r}: "
            )
            return ToolFailure(call.id, call.name, f"invalid arguments: {refused}")
        if self.signature is not None and self.signature.context is not None:
            run = _tool_run.get()
            if run is None:
                return ToolFailure(
                    call.id,
                    call.name,
                    "not executed: this tool takes a RunContext and was called outside an agent "
                    "run",
                )
            arguments[self.signature.context] = context_for(run, call.id)
        try:
            if self.timeout is None:
                value = await self._invoke(arguments)
            else:
                with trio.fail_after(self.timeout):
                    value = await self._invoke(arguments)
        except trio.TooSlowError:
            return ToolFailure(call.id, call.name, f"timed out after {self.timeout:g} s")
        except Exception as error:
            # An expected failure of a tool is one line (the model gets it as the call's
            # result); its traceback is for DEBUG, so a plain script shows none.
            log.warning(
                "tool %r raised %s: %s (call %r)",
                call.name,
                type(error).__name__,
                loggable(str(error).strip() or "(no message)"),
                call.id,
            )
            log.debug("tool %r raised (call %r)", call.name, call.id, exc_info=True)
            report = _raised.get()
            if report is not None:
                report(call, error)
            return ToolFailure(call.id, call.name, _bounded(f"{type(error).__name__}: {error}"))
        try:
            # (A JSON scalar is its own unstructured form: no converter dispatch for it.)
            plain = check_json(value if type(value) in _SCALARS else _results.unstructure(value))
        except (ValidationError, TypeError, ValueError) as error:
            message = error.message if isinstance(error, ValidationError) else str(error)
            return ToolFailure(
                call.id, call.name, _bounded(f"the tool returned a non-JSON value: {message}")
            )
        return _success(call, plain)


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
    blocking: bool = False,
    timeout: float | None = None,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
    blocking: bool = False,
    timeout: float | None = None,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a typed function, as ``@tool`` or ``@tool(...)``.

    The schema comes from the signature and the docstring (summary as the description, a
    Google-style ``Args:`` section for parameter descriptions), or from ``schema`` -- then the
    arguments reach the function as plain JSON values. A parameter annotated with a pydantic
    model, a dataclass, an attrs class or a TypedDict gets that class's schema, nested, and
    receives an instance (a TypedDict: the checked dict); see :mod:`protocols.toolschema`. A
    parameter annotated :class:`~actors.RunContext` is filled by the runtime with the calling
    run's context and is left out of the schema. A pydantic model a tool returns reaches the
    model as its ``model_dump(mode="json")``. Raises
    :class:`~protocols.errors.ValidationError` when the signature cannot be described (a
    parameter without an annotation, ``*args``, an unsupported type).
    """

    def make(target: Callable[..., Any]) -> Tool:
        if schema is not None:
            doc = inspect.getdoc(target) or ""
            definition = ToolDefinition(
                name or target.__name__, description or doc.split("\n\n")[0], dict(schema)
            )
            return Tool(definition, target, None, blocking, timeout, idempotent)
        signature = signature_of(target, name=name, description=description)
        definition = ToolDefinition(signature.name, signature.description, signature.parameters)
        return Tool(definition, target, signature, blocking, timeout, idempotent)

    return make(function) if function is not None else make


class ToolBatch:
    """One batch of calls being executed (see :meth:`ToolRegistry.execute`).

    ``results[i]`` is the result of ``calls[i]`` once known. After a cancel, :meth:`settled`
    gives a complete list: finished calls keep their results, a call that was running is
    :data:`INTERRUPTED`, one that never started :data:`NOT_EXECUTED`.
    """

    def __init__(self, calls: Sequence[ToolCall]) -> None:
        self.calls = tuple(calls)
        self.results: list[ToolResult | None] = [None] * len(self.calls)
        self.started: set[int] = set()
        #: Indices of calls the authority refused (never run).
        self.denied: set[int] = set()
        #: Indices of calls to tools that are not registered or out of scope (never run).
        self.skipped: set[int] = set()
        #: The exceptions of calls whose tool raised (their results are failures), by index.
        self.errors: dict[int, Exception] = {}

    @property
    def done(self) -> bool:
        """Every call has a result."""
        return all(result is not None for result in self.results)

    def settled(self) -> list[ToolResult]:
        """A result for every call, filling the gaps a cancel left (see the class docstring)."""
        out: list[ToolResult] = []
        for index, (call, result) in enumerate(zip(self.calls, self.results, strict=True)):
            if result is not None:
                out.append(result)
            else:
                text = INTERRUPTED if index in self.started else NOT_EXECUTED
                out.append(ToolFailure(call.id, call.name, text))
        return out


class ToolRegistry:
    """The tools an agent may use, by name."""

    def __init__(self, tools: Iterable[CallableTool] = ()) -> None:
        self._tools: dict[str, CallableTool] = {}
        #: Counts the changes of the registry (a run reuses what it advertised while none).
        self.version = 0
        self.add(*tools)

    def add(self, *tools: CallableTool, replace: bool = False) -> None:
        """Register tools (made with ``@tool``, or any :class:`CallableTool`); a name already
        registered raises ConfigError unless ``replace``."""
        for item in tools:
            # (What ``isinstance(item, CallableTool)`` asks -- a ``call`` and a definition --
            # without a runtime protocol check's price, paid at every agent's start.)
            if not callable(getattr(item, "call", None)) or not isinstance(
                getattr(item, "definition", None), ToolDefinition
            ):
                raise ConfigError(
                    f"ToolRegistry takes tools (use @tool), not {type(item).__name__}"
                )
            if item.definition.name in self._tools and not replace:
                raise ConfigError(f"a tool named {item.definition.name!r} is already registered")
        for item in tools:
            self._tools[item.definition.name] = item
        self.version += 1

    def remove(self, *names: str) -> bool:
        """Unregister tools; true only when every name was registered."""
        found = True
        for name in names:
            found = self._tools.pop(name, None) is not None and found
        self.version += 1
        return found

    def get(self, name: str) -> CallableTool | None:
        """The tool called ``name``, if registered."""
        return self._tools.get(name)

    def tools(self, scope: Scope | None = None) -> tuple[CallableTool, ...]:
        """The registered tools (in scope), in the order they were added."""
        return tuple(
            t for t in self._tools.values() if scope is None or scope.allows_tool(t.definition.name)
        )

    def definitions(self, scope: Scope | None = None) -> tuple[ToolDefinition, ...]:
        """What to advertise to the model: the definitions of the tools in scope."""
        return tuple(t.definition for t in self.tools(scope))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @raises_one_cause
    async def execute(
        self,
        calls: Sequence[ToolCall],
        *,
        scope: Scope | None = None,
        authority: Authority | None = None,
        approve: Approver | None = None,
        limit: int = 8,
        batch: ToolBatch | None = None,
        refused: Mapping[str, str] | None = None,
    ) -> list[ToolResult]:
        """Run ``calls`` and return their results in call order (see the module docstring).

        ``batch`` (made from the same calls) lets the caller see progress and, after a
        cancel, :meth:`ToolBatch.settled`. ``refused`` maps the ids of calls refused before
        they got here (by a relay's policy) to the text each is answered with: they count as
        denied and never run. ``trio.Cancelled`` propagates; when this returns, nothing it
        started is still running. A tool that breaks its contract by raising has its exception
        come out as itself, never in an exception group.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError(f"limit must be an integer >= 1, not {limit!r}")
        state = batch if batch is not None else ToolBatch(calls)
        if state.calls != tuple(calls):
            raise ValidationError("the batch was made for other calls")
        # First every call is decided -- unknown ones skipped, the authority's verdicts taken,
        # every approval asked for (concurrently) -- and only then does any call run: a call
        # waiting for approval fences its whole batch, so no sibling's side effect happens
        # before the human has answered.
        runnable: list[tuple[int, ToolCall, CallableTool]] = []
        asks: list[tuple[int, ToolCall, CallableTool, Verdict]] = []
        for index, call in enumerate(state.calls):
            if refused and call.id in refused:
                state.denied.add(index)
                state.results[index] = ToolFailure(call.id, call.name, refused[call.id])
                continue
            target = self._tools.get(call.name)
            if target is None or (scope is not None and not scope.allows_tool(call.name)):
                state.skipped.add(index)
                names = ", ".join(t.definition.name for t in self.tools(scope)) or "none"
                state.results[index] = ToolFailure(
                    call.id,
                    call.name,
                    f"skipped: there is no tool named {call.name!r}; available tools: {names}",
                )
                continue
            verdict = authority.decide(call) if authority is not None else None
            if verdict is None or verdict.decision == "allow":
                runnable.append((index, call, target))
            elif verdict.decision == "ask":
                asks.append((index, call, target, verdict))
            else:
                state.denied.add(index)
                state.results[index] = ToolFailure(call.id, call.name, verdict.model_text())
        if asks:
            answers: list[Verdict | None] = [None] * len(asks)

            async def ask(position: int) -> None:
                _, call, _, verdict = asks[position]
                answers[position] = await _ask(approve, call, verdict)

            if len(asks) == 1:
                await ask(0)
            else:
                async with trio.open_nursery() as nursery:
                    for position in range(len(asks)):
                        nursery.start_soon(ask, position)
            for (index, call, target, _), answer in zip(asks, answers, strict=True):
                assert answer is not None
                if answer.decision == "deny":
                    state.denied.add(index)
                    state.results[index] = ToolFailure(call.id, call.name, answer.model_text())
                else:
                    runnable.append((index, call, target))
            runnable.sort(key=lambda item: item[0])  # start in call order

        # The calling run's spans, when it is traced: each call gets its execute_tool span.
        caller = _tool_run.get()
        trace = caller.trace if caller is not None else None

        async def call_one(index: int, call: ToolCall, target: CallableTool) -> None:
            state.started.add(index)
            reset = _raised.set(lambda _call, error: state.errors.__setitem__(index, error))
            span = trace.tool(call) if trace is not None else None
            try:
                state.results[index] = await target.call(call)
            except BaseException:
                if span is not None:
                    span.interrupted()
                raise
            finally:
                _raised.reset(reset)
            if span is not None:
                span.done(state.results[index], state.errors.get(index))

        if len(runnable) == 1:
            # One call: no task to start and no limit to wait for, the same guarantees.
            await call_one(*runnable[0])
        elif runnable:
            limiter = trio.CapacityLimiter(limit)

            async def run(index: int, call: ToolCall, target: CallableTool) -> None:
                async with limiter:
                    await call_one(index, call, target)

            async with trio.open_nursery() as nursery:
                for index, call, target in runnable:
                    nursery.start_soon(run, index, call, target)
        else:
            await trio.lowlevel.checkpoint()
        return state.settled()


async def _ask(approve: Approver | None, call: ToolCall, verdict: Verdict) -> Verdict:
    """The approver's answer to an ask, as a verdict; inside an agent's run, the run's log
    shows the ask (``approval_requested``) and the answer (``approval_answered``)."""
    run = _tool_run.get()
    if run is None:
        return await _answer(approve, call, verdict)
    run.asked(call, verdict.reason)
    answer = await _answer(approve, call, verdict)
    run.answered(call, answer.decision == "allow", answer.reason)
    return answer


async def _answer(approve: Approver | None, call: ToolCall, verdict: Verdict) -> Verdict:
    if approve is None:
        return resolve_ask(verdict, None, None)
    try:
        answer = await approve(call, verdict)
    except Exception as error:
        log.warning("the approver raised for tool %r; denying", call.name, exc_info=True)
        return resolve_ask(verdict, False, f"the approver failed ({type(error).__name__})")
    if isinstance(answer, tuple):
        approved, reason = answer
        return resolve_ask(verdict, bool(approved), reason)
    return resolve_ask(verdict, bool(answer), None)
