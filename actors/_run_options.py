"""The options of one run (:class:`RunOptions`): what a caller may set per run over its agent's
defaults, each checked when given."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from protocols.accounting import Pricing, TeamBudget, TokenBudget
from protocols.errors import (
    ValidationError,
)
from protocols.messages import (
    ToolDefinition,
)
from protocols.settings import ModelSettings, SettingsLike

from ._core._abort import Abort
from ._run_context import RunContext

if TYPE_CHECKING:
    from .guardrails import Guardrail


#: Awaited before every provider call of a run (see ``RunOptions.pace``).
Pace = Callable[[RunContext[Any]], Awaitable[None]]


def _positive(name: str, value: object) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
    ):
        raise ValidationError(f"{name} must be a number > 0 or None, not {value!r}")


def _settings(value: SettingsLike) -> ModelSettings | None:
    return None if value is None else ModelSettings.of(value)


def _tokens(value: Iterable[Abort]) -> tuple[Abort, ...]:
    return tuple(value)


def _check_guardrails(value: object) -> tuple[Guardrail, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError("guardrails takes a list of guardrails")
    guards = tuple(value)
    for guard in guards:
        # (The class lives above this module: known by what it offers.)
        if getattr(guard, "kind", None) not in ("input", "output", "tool") or not callable(
            getattr(guard, "verdict", None)
        ):
            raise ValidationError(
                "guardrails takes Guardrail objects (input_guardrail(...), output_guardrail(...), "
                f"tool_guardrail(...)), not {type(guard).__name__}"
            )
    return guards


def _check_client_tools(tools: tuple[ToolDefinition, ...]) -> None:
    names: set[str] = set()
    for tool in tools:
        if not isinstance(tool, ToolDefinition):
            raise ValidationError(
                f"client_tools must be ToolDefinitions, not {type(tool).__name__}"
            )
        if tool.name in names:
            raise ValidationError(f"client_tools name {tool.name!r} twice")
        names.add(tool.name)


@attrs.frozen
class RunOptions:
    """Options of one run (``None``: the agent's own setting).

    ``limit``: provider turns at most (>= 0); ``timeout``: seconds for the whole run; ``budget``:
    a :class:`~protocols.accounting.TokenBudget`; ``abort``: caller tokens that cancel the run;
    ``think`` and ``tool_choice``: passed to the provider; ``on_exhaust``: ``"stop"`` or
    ``"summarize"`` (one final tool-less call when the limit is reached while the model still
    wants tools); ``max_repeats``: how often one identical call (name and arguments) may run in
    one run before a batch repeating it is refused; ``output``: the shape the final answer
    must have (see :class:`OutputError`) -- a JSON Schema (a dict), or a pydantic model, a
    dataclass, a TypedDict or an attrs class, whose instance ``result.output`` then is;
    ``schema``: the same option by its first name (give one of the two); ``schema_retries``: how
    many more answers a wrong one may be followed by (default 2); ``partial_strings``: while such
    an answer streams, show a string field still being read as it grows in its ``output``
    chunks (default ``False``: a field appears once its value is complete);
    ``on_tool_error``: what a tool that raises does -- ``"record"`` (the default: the model
    reads the error, a ``tool_error`` event and a WARNING log with the traceback tell you) or
    ``"raise"`` (the batch's results are committed, then the run fails with a
    :class:`~protocols.errors.ToolError` chained to the tool's exception); ``deps``: what tools
    read as :attr:`RunContext.deps <actors.RunContext.deps>`; ``pace``: an async function
    awaited (with the run's :class:`~actors.RunContext`) before every provider call of the
    run, inside the run's scope -- rate limiting, scheduling; a cancel while it waits is a
    cancel like any other. ``budget`` may be a :class:`~protocols.accounting.TeamBudget`, drawn
    on by every run given it. ``settings``: the model's
    :class:`~protocols.settings.ModelSettings` (or a mapping of their fields), which override
    the agent's field by field -- each field this sets wins, each it leaves unset keeps the
    agent's. ``client_tools``: tools the caller runs itself (a frontend's, a remote client's),
    as :class:`~protocols.messages.ToolDefinition` objects -- shown to the model beside the agent's
    own (a name of the agent's own is refused); a turn that calls one ends the run, ``stop``
    ``"client_tools"``, once the agent's own calls of that turn have run: the calls it left
    open are :attr:`AgentResult.client_calls <protocols.messages.AgentResult.client_calls>`,
    and the caller continues with their results as the next run's input. Such a run works on
    a ``history=`` (the caller's: the open calls are answered there), never on the agent's
    conversation. ``guardrails``: :class:`~actors.guardrails.Guardrail` checks of the run's
    input, its final answer and its tool calls -- a run's are added to the agent's (a run
    cannot take one of its agent's away); one that trips ends the run ``stop="guardrail"``.
    ``pricing``: a :class:`~protocols.accounting.Pricing` (a
    :class:`~protocols.accounting.PriceTable`, :class:`~actors.GenAIPrices`) that prices
    each provider call: its usage then carries a :class:`~protocols.accounting.Cost` (see
    ``docs/agent.md``, "Cost"); needed by a budget with a ``max_cost``.
    """

    limit: int | None = None
    timeout: float | None = None
    budget: TokenBudget | TeamBudget | None = None
    abort: tuple[Abort, ...] = attrs.field(default=(), converter=_tokens)
    think: bool | None = None
    tool_choice: str | None = None
    on_exhaust: Literal["stop", "summarize"] | None = None
    max_repeats: int | None = None
    output: dict[str, Any] | type | None = None
    schema: dict[str, Any] | type | None = None
    schema_retries: int | None = None
    partial_strings: bool | None = None
    on_tool_error: Literal["record", "raise"] | None = None
    deps: Any = None
    pace: Pace | None = None
    settings: ModelSettings | None = attrs.field(default=None, converter=_settings)
    client_tools: tuple[ToolDefinition, ...] = ()
    guardrails: tuple[Guardrail, ...] = ()
    pricing: Pricing | None = None

    def __attrs_post_init__(self) -> None:
        if self.pricing is not None and not (
            callable(getattr(self.pricing, "price", None))
            and callable(getattr(self.pricing, "rates", None))
        ):
            raise ValidationError(
                "pricing takes a Pricing (a PriceTable, GenAIPrices), not "
                f"{type(self.pricing).__name__}"
            )
        if self.client_tools:  # (a run without them pays nothing for them)
            tools = tuple(self.client_tools)
            _check_client_tools(tools)
            object.__setattr__(self, "client_tools", tools)
        if self.guardrails:
            object.__setattr__(self, "guardrails", _check_guardrails(self.guardrails))
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
        if self.output is not None and self.schema is not None and self.output != self.schema:
            raise ValidationError("give output= or schema=, not both: they are the same option")
        if self.schema_retries is not None and (
            isinstance(self.schema_retries, bool)
            or not isinstance(self.schema_retries, int)
            or self.schema_retries < 0
        ):
            raise ValidationError(
                f"schema_retries must be an integer >= 0, not {self.schema_retries!r}"
            )
        if self.partial_strings is not None and not isinstance(self.partial_strings, bool):
            raise ValidationError(f"partial_strings must be a bool, not {self.partial_strings!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0
        ):
            raise ValidationError(f"limit must be an integer >= 0, not {self.limit!r}")
        _positive("timeout", self.timeout)
        if self.budget is not None and not isinstance(self.budget, TokenBudget | TeamBudget):
            raise ValidationError("budget must be a TokenBudget or a TeamBudget")
        if self.pace is not None and not callable(self.pace):
            raise ValidationError(f"pace must be an async function, not {self.pace!r}")
        for token in self.abort:
            if not isinstance(token, Abort):
                raise ValidationError(f"abort takes Abort tokens, not {type(token).__name__}")


#: The options of a run given none (RunOptions is frozen: one instance serves them all).
_NO_OPTIONS: Final = RunOptions()
