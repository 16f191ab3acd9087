"""The data model every layer speaks: messages, tool calls and results, usage, provider options,
streamed deltas, and the results of a provider call and of an agent run.

Every class is a frozen, slotted attrs class validated at construction: a value that breaks an
invariant raises :class:`~protocols.errors.ValidationError` (a ``ValueError``) naming the class,
the field and the rule. Collections are stored as tuples; JSON-valued fields (tool arguments,
schemas, ``extra``) must be strict JSON objects and should be treated as read-only. The fields'
checks and converters are in :mod:`protocols._message_checks`.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from ._json import JSON, dumps
from ._message_checks import (
    _bool,
    _check_channel,
    _check_created_at,
    _check_delta_text,
    _check_images,
    _check_output_schema,
    _check_schema,
    _check_tool_choice,
    _check_tool_name,
    _count,
    _empty_object_schema,
    _enum,
    _nonempty_str,
    _optional_bool,
    _optional_nonempty_str,
    _response_name,
    _str,
    _to_arguments,
    _to_breakpoints,
    _to_continuation,
    _to_denied,
    _to_extra,
    _to_images,
    _to_parameters,
    _to_result_images,
    _to_schema,
    _to_stop_sequences,
    _to_timestamp,
    _to_value,
    _tuple,
)
from .accounting import Usage
from .errors import ValidationError
from .settings import (
    CacheMode,
    CacheRetention,
    ModelSettings,
    ReasoningEffort,
    check_cache,
    check_cache_key,
    check_cache_retention,
    check_effort,
    check_max_tokens,
    check_optional_bool,
    check_penalty,
    check_reasoning,
    check_seed,
    check_temperature,
    check_top_p,
    to_float,
)

__all__ = [
    "CUT_SHORT",
    "AgentResult",
    "Channel",
    "Delta",
    "FinishReason",
    "GuardrailTrip",
    "Message",
    "ProviderOptions",
    "ProviderResult",
    "Role",
    "StopReason",
    "ToolCall",
    "ToolDefinition",
    "ToolFailure",
    "ToolResult",
    "ToolSuccess",
    "Usage",
    "new_id",
]

Channel: TypeAlias = Literal["content", "thinking"]


def new_id() -> str:
    """Mint a fresh random identifier: 32 lowercase hex characters, 128 bits from the
    operating system's cryptographic source (unguessable, and unique as a UUID4 is)."""
    return os.urandom(16).hex()  # (a quarter of uuid4().hex's time: a run mints several)


class Role(enum.StrEnum):
    """Who speaks a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class FinishReason(enum.StrEnum):
    """Why a provider stopped producing a response (normalised across vendors)."""

    #: The model finished its answer (or hit a stop sequence).
    STOP = "stop"
    #: The output token limit was reached.
    LENGTH = "length"
    #: The model stopped to have tools called.
    TOOL_CALLS = "tool_calls"
    #: The vendor withheld or cut the output for policy reasons.
    CONTENT_FILTER = "content_filter"
    #: The call was cancelled; the result is partial.
    CANCELLED = "cancelled"
    #: The vendor gave a reason with no normalised equivalent.
    OTHER = "other"


class StopReason(enum.StrEnum):
    """Why an agent run ended. Every reason but ``complete`` means the result is partial.

    ``max_tokens`` and ``content_filter``: the provider cut the run's last reply short -- at
    its output token limit, or by its content filter (finish reasons ``length`` and
    ``content_filter``); the reply is kept as it came, and none of its tool calls ran."""

    COMPLETE = "complete"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    BUDGET = "budget"
    EXHAUSTED = "exhausted"
    MAX_TOKENS = "max_tokens"
    CONTENT_FILTER = "content_filter"
    #: The model called a tool the caller runs itself (a run's ``client_tools``): the run
    #: stopped for its result (see :attr:`AgentResult.client_calls`).
    CLIENT_TOOLS = "client_tools"
    #: A guardrail tripped: on the run's input, its final answer or a tool call's arguments
    #: (see :attr:`AgentResult.guardrail`).
    GUARDRAIL = "guardrail"


#: What each tool call of a reply the provider cut short is answered with, by the reply's
#: finish reason (such a call never runs: its arguments may be cut, and the model had not
#: finished deciding). A :class:`ProviderResult` with one of these finish reasons names every
#: call it holds in ``denied`` with this text.
CUT_SHORT: Mapping[FinishReason, str] = MappingProxyType(
    {
        FinishReason.LENGTH: "not executed: the reply was cut by the token limit",
        FinishReason.CONTENT_FILTER: "not executed: the reply was cut by the provider's "
        "content filter",
    }
)


# Named converters, one per field (attrs' mypy plugin understands only named functions).
def _to_role(value: Role | str) -> Role:
    return _enum(Role, value)


def _to_finish(value: FinishReason | str) -> FinishReason:
    return _enum(FinishReason, value)


def _to_optional_finish(value: FinishReason | str | None) -> FinishReason | None:
    return None if value is None else _enum(FinishReason, value)


def _to_stop_reason(value: StopReason | str) -> StopReason:
    return _enum(StopReason, value)


def _to_message_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return _tuple(ToolCall, "Message.calls", value)


def _to_result_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return _tuple(ToolCall, "ProviderResult.calls", value)


def _to_messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return _tuple(Message, "AgentResult.messages", value)


def _unique_call_ids(owner: str, calls: tuple[ToolCall, ...]) -> None:
    seen: set[str] = set()
    for call in calls:
        if call.id in seen:
            raise ValidationError(f"{owner}.calls has two calls with id {call.id!r}")
        seen.add(call.id)


# ---------------------------------------------------------------------------------------------
# Tools


@attrs.frozen
class ToolCall:
    """A model's request to run one tool.

    ``id`` is the provider's opaque token (never rewritten; minted by the provider layer when the
    wire omits it); ``arguments`` is the parsed JSON object of arguments.
    """

    id: str = attrs.field(validator=_nonempty_str)
    name: str = attrs.field(validator=_nonempty_str)
    arguments: dict[str, JSON] = attrs.field(factory=dict, converter=_to_arguments)


@attrs.frozen
class ToolSuccess:
    """The success arm of a tool result: ``value`` is any strict JSON value the tool returned;
    ``images`` are images it returned for the model to see (base64 payloads or ``data:`` URLs,
    as :attr:`Message.images` takes them; none by default). The tool message of the result
    (:meth:`Message.from_result`) carries them."""

    ok: ClassVar[Literal[True]] = True

    id: str = attrs.field(validator=_nonempty_str)
    name: str = attrs.field(validator=_nonempty_str)
    value: JSON = attrs.field(default=None, converter=_to_value)
    images: tuple[str, ...] = attrs.field(
        default=(), converter=_to_result_images, validator=_check_images
    )

    def render(self) -> str:
        """The text the model sees: a string value as is, anything else as compact JSON (the
        images are not part of it)."""
        return self.value if isinstance(self.value, str) else dumps(self.value)


@attrs.frozen
class ToolFailure:
    """The failure arm of a tool result: ``error`` is the message the model sees."""

    ok: ClassVar[Literal[False]] = False

    id: str = attrs.field(validator=_nonempty_str)
    name: str = attrs.field(validator=_nonempty_str)
    error: str = attrs.field(validator=_nonempty_str)

    def render(self) -> str:
        """The text the model sees: the error message verbatim."""
        return self.error


#: The result of one tool call: exactly one of the two arms. Usable with ``isinstance``.
ToolResult: TypeAlias = ToolSuccess | ToolFailure


def _check_parameters(
    instance: ToolDefinition, attribute: attrs.Attribute[Any], value: dict[str, Any]
) -> None:
    if value.get("type") != "object":
        raise ValidationError(
            f"ToolDefinition.parameters for {instance.name!r} must have "
            '"type": "object" at its root (or be an anyOf/oneOf of object schemas)'
        )
    _check_schema(f"ToolDefinition.parameters for {instance.name!r}", value)


@attrs.frozen
class ToolDefinition:
    """What a model is told about one tool: its name, a description and a JSON Schema for its
    arguments (an object schema, checked against its JSON Schema metaschema). A schema with no
    root ``type`` that is an ``anyOf``/``oneOf`` whose members are all object schemas (a union
    of argument sets, as MCP servers write them) is taken with ``"type": "object"`` added at its
    root, which changes nothing it accepts; vendors get it flattened (see
    :func:`protocols.wire.schema.project`), and arguments are checked against it as it is."""

    name: str = attrs.field(validator=_check_tool_name)
    description: str = attrs.field(default="", validator=_str)
    parameters: dict[str, JSON] = attrs.field(
        factory=_empty_object_schema,
        converter=_to_parameters,
        validator=_check_parameters,
    )


# ---------------------------------------------------------------------------------------------
# Messages


@attrs.frozen
class Message:
    """One immutable message of a conversation.

    Field rules by role (violations raise :class:`ValidationError`):

    - ``system``: ``content`` only.
    - ``user``: ``content`` and optionally ``images`` (base64 payloads or ``data:`` URLs, input
      only).
    - ``assistant``: ``content``, optionally ``calls`` (unique ids), ``thinking`` (kept for audit,
      never sent back as content), ``interrupted`` (the answer was cut short) and
      ``continuation`` (vendor data a later request must send back as it was, such as Anthropic
      thinking signatures; opaque to everything but the adapter that wrote it).
    - ``tool``: ``content`` (the rendered result) with ``tool_call_id`` and ``name`` naming the call
      it answers, and optionally ``images`` the tool returned (a :class:`ToolSuccess`'s).

    ``id`` and ``created_at`` (seconds since the epoch) are minted when not given.
    """

    role: Role = attrs.field(converter=_to_role)
    content: str = attrs.field(default="", validator=_str)
    calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_to_message_calls)
    tool_call_id: str | None = attrs.field(default=None, validator=_optional_nonempty_str)
    name: str | None = attrs.field(default=None, validator=_optional_nonempty_str)
    images: tuple[str, ...] = attrs.field(default=(), converter=_to_images, validator=_check_images)
    thinking: str = attrs.field(default="", validator=_str)
    interrupted: bool = attrs.field(default=False, validator=_bool)
    continuation: dict[str, JSON] = attrs.field(factory=dict, converter=_to_continuation)
    id: str = attrs.field(factory=new_id, validator=_nonempty_str)
    created_at: float = attrs.field(
        factory=time.time, converter=_to_timestamp, validator=_check_created_at
    )

    def __attrs_post_init__(self) -> None:
        role = self.role
        present = {
            "calls": bool(self.calls),
            "tool_call_id": self.tool_call_id is not None,
            "name": self.name is not None,
            "images": bool(self.images),
            "thinking": bool(self.thinking),
            "interrupted": self.interrupted,
            "continuation": bool(self.continuation),
        }
        allowed = _ALLOWED_FIELDS[role]
        for field, is_set in present.items():
            if is_set and field not in allowed:
                raise ValidationError(f"a {role.value} message cannot have {field}")
        if role is Role.TOOL and (self.tool_call_id is None or self.name is None):
            raise ValidationError("a tool message needs tool_call_id and name")
        if self.calls:
            _unique_call_ids("Message", self.calls)

    @classmethod
    def system(
        cls, content: str, *, id: str | None = None, created_at: float | None = None
    ) -> Message:
        """A system message."""
        mid, stamp = _minted(id, created_at)
        return cls(role=Role.SYSTEM, content=content, id=mid, created_at=stamp)

    @classmethod
    def user(
        cls,
        content: str,
        *,
        images: Iterable[str] = (),
        id: str | None = None,
        created_at: float | None = None,
    ) -> Message:
        """A user message, optionally with base64 images."""
        mid, stamp = _minted(id, created_at)
        return cls(role=Role.USER, content=content, images=images, id=mid, created_at=stamp)

    @classmethod
    def assistant(
        cls,
        content: str = "",
        *,
        calls: Iterable[ToolCall] = (),
        thinking: str = "",
        interrupted: bool = False,
        continuation: Mapping[str, Any] | None = None,
        id: str | None = None,
        created_at: float | None = None,
    ) -> Message:
        """An assistant message, optionally with tool calls, thinking, the interrupted mark and
        vendor continuation data."""
        mid, stamp = _minted(id, created_at)
        return cls(
            role=Role.ASSISTANT,
            content=content,
            calls=calls,
            thinking=thinking,
            interrupted=interrupted,
            continuation=continuation or {},
            id=mid,
            created_at=stamp,
        )

    @classmethod
    def tool(
        cls,
        call_id: str,
        name: str,
        content: str,
        *,
        images: Iterable[str] = (),
        id: str | None = None,
        created_at: float | None = None,
    ) -> Message:
        """A tool message answering the call ``call_id`` of tool ``name``, optionally with the
        images the tool returned."""
        mid, stamp = _minted(id, created_at)
        return cls(
            role=Role.TOOL,
            content=content,
            tool_call_id=call_id,
            name=name,
            images=images,
            id=mid,
            created_at=stamp,
        )

    @classmethod
    def from_result(
        cls, result: ToolResult, *, id: str | None = None, created_at: float | None = None
    ) -> Message:
        """The tool message carrying ``result``: its text rendered with ``result.render()``, and
        a success's images."""
        images = result.images if isinstance(result, ToolSuccess) else ()
        return cls.tool(
            result.id, result.name, result.render(), images=images, id=id, created_at=created_at
        )


def _minted(id: str | None, created_at: float | None) -> tuple[str, float]:
    """The given id and timestamp, or fresh ones."""
    return (new_id() if id is None else id, time.time() if created_at is None else created_at)


_ALLOWED_FIELDS: dict[Role, frozenset[str]] = {
    Role.SYSTEM: frozenset(),
    Role.USER: frozenset({"images"}),
    Role.ASSISTANT: frozenset({"calls", "thinking", "interrupted", "continuation"}),
    Role.TOOL: frozenset({"tool_call_id", "name", "images"}),
}


# ---------------------------------------------------------------------------------------------
# Provider boundary


@attrs.frozen
class ProviderOptions:
    """Per-call options for a provider. ``None`` means "the provider's default".

    - ``think``: turn the model's reasoning on or off where the vendor supports it.
    - ``schema``: a JSON Schema the answer must follow (structured output).
    - ``tool_choice``: ``"auto"``, ``"none"``, ``"required"``, or the name of the one tool to call.
    - The model's settings, each as :class:`~protocols.settings.ModelSettings` says (``stop``
      and ``extra`` empty when not set): ``max_tokens``, ``temperature``, ``stop``, ``extra``,
      ``top_p``, ``seed``, ``presence_penalty``, ``frequency_penalty``, ``reasoning_effort``,
      ``parallel_tool_calls``, and the prompt-cache controls ``cache``,
      ``cache_breakpoints``, ``cache_key`` and ``cache_retention``. :meth:`from_settings`
      makes options of settings, and :attr:`settings` gives them back.

    ``think=False`` with a ``reasoning_effort`` is a contradiction, refused.
    """

    think: bool | None = attrs.field(default=None, validator=_optional_bool)
    schema: dict[str, JSON] | None = attrs.field(
        default=None,
        converter=_to_schema,
        validator=_check_output_schema,
    )
    max_tokens: int | None = attrs.field(default=None, validator=check_max_tokens)
    temperature: float | None = attrs.field(
        default=None, converter=to_float, validator=check_temperature
    )
    tool_choice: str | None = attrs.field(default=None, validator=_check_tool_choice)
    stop: tuple[str, ...] = attrs.field(default=(), converter=_to_stop_sequences)
    extra: dict[str, JSON] = attrs.field(factory=dict, converter=_to_extra)
    top_p: float | None = attrs.field(default=None, converter=to_float, validator=check_top_p)
    seed: int | None = attrs.field(default=None, validator=check_seed)
    presence_penalty: float | None = attrs.field(
        default=None, converter=to_float, validator=check_penalty
    )
    frequency_penalty: float | None = attrs.field(
        default=None, converter=to_float, validator=check_penalty
    )
    reasoning_effort: ReasoningEffort | None = attrs.field(default=None, validator=check_effort)
    parallel_tool_calls: bool | None = attrs.field(default=None, validator=check_optional_bool)
    cache: CacheMode | None = attrs.field(default=None, validator=check_cache)
    cache_breakpoints: tuple[str, ...] | None = attrs.field(default=None, converter=_to_breakpoints)
    cache_key: str | None = attrs.field(default=None, validator=check_cache_key)
    cache_retention: CacheRetention | None = attrs.field(
        default=None, validator=check_cache_retention
    )

    def __attrs_post_init__(self) -> None:
        check_reasoning(self.think, self.reasoning_effort)

    @classmethod
    def from_settings(
        cls,
        settings: ModelSettings | None,
        *,
        think: bool | None = None,
        schema: Mapping[str, Any] | None = None,
        tool_choice: str | None = None,
    ) -> ProviderOptions:
        """The options of one call made with ``settings`` (``None``: none set) and the given
        call options."""
        if settings is None:
            return cls(think=think, schema=schema, tool_choice=tool_choice)
        return cls(
            think=think,
            schema=schema,
            tool_choice=tool_choice,
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
            stop=settings.stop or (),
            extra=settings.extra or {},
            top_p=settings.top_p,
            seed=settings.seed,
            presence_penalty=settings.presence_penalty,
            frequency_penalty=settings.frequency_penalty,
            reasoning_effort=settings.reasoning_effort,
            parallel_tool_calls=settings.parallel_tool_calls,
            cache=settings.cache,
            cache_breakpoints=settings.cache_breakpoints,
            cache_key=settings.cache_key,
            cache_retention=settings.cache_retention,
        )

    @property
    def settings(self) -> ModelSettings:
        """The model settings these options hold (an empty ``stop`` or ``extra``: not set)."""
        return ModelSettings(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            stop=self.stop or None,
            seed=self.seed,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            reasoning_effort=self.reasoning_effort,
            parallel_tool_calls=self.parallel_tool_calls,
            extra=self.extra or None,
            cache=self.cache,
            cache_breakpoints=self.cache_breakpoints,
            cache_key=self.cache_key,
            cache_retention=self.cache_retention,
        )


@attrs.frozen
class Delta:
    """One streamed piece of model output on one channel. ``text`` is never empty."""

    channel: Channel = attrs.field(validator=_check_channel)
    text: str = attrs.field(validator=_check_delta_text)


_new_object = object.__new__
_set_attribute = object.__setattr__


def trusted_delta(channel: Channel, text: str) -> Delta:
    """A :class:`Delta` built without running its validators, for the streaming hot loop.

    The caller guarantees what the validators would check: ``channel`` is ``"content"`` or
    ``"thinking"`` and ``text`` is a non-empty ``str``. Not part of the public API.
    """
    delta = _new_object(Delta)
    _set_attribute(delta, "channel", channel)
    _set_attribute(delta, "text", text)
    return delta


def _default_finish(result: ProviderResult) -> FinishReason:
    return FinishReason.TOOL_CALLS if result.calls else FinishReason.STOP


@attrs.frozen
class ProviderResult:
    """The assembled outcome of one provider call.

    ``usage`` is ``None`` when the provider reported none; ``finish`` defaults to ``tool_calls``
    when there are calls and ``stop`` otherwise. Call ids are unique within one result.
    ``continuation`` is vendor data to store on the assistant message (see :class:`Message`).
    ``denied`` names calls the provider side refused, with the text to answer each with: a
    relay's policy, and every call of a reply cut short (finish ``length`` or
    ``content_filter``, whose last call's arguments may be cut: see :data:`CUT_SHORT`).
    ``model`` and ``response_id`` are what the vendor said answered and how it named the
    response (OpenAI's ``chatcmpl-...``, Anthropic's ``msg_...``, the Responses API's
    ``resp_...``; Ollama names no response): ``None`` when it did not say. Each is a non-empty
    string of at most 256 characters; the wire readers drop a longer or malformed value rather
    than fail the call (they are telemetry: the ``chat`` span's ``gen_ai.response.model`` and
    ``gen_ai.response.id``). ``provider`` names the member of a fallback provider that answered
    (``None`` for a call made without one).
    """

    content: str = attrs.field(default="", validator=_str)
    thinking: str = attrs.field(default="", validator=_str)
    calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_to_result_calls)
    usage: Usage | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Usage))
    )
    finish: FinishReason = attrs.field(
        default=attrs.Factory(_default_finish, takes_self=True),
        converter=_to_finish,
    )
    continuation: dict[str, JSON] = attrs.field(factory=dict, converter=_to_continuation)
    #: Calls the provider side refused (a relay's policy, a reply cut short): call id -> the
    #: text the model is answered with. They are never run.
    denied: dict[str, str] = attrs.field(factory=dict, converter=_to_denied)
    #: The model the vendor reports answered (``None``: not reported).
    model: str | None = attrs.field(default=None, validator=_response_name)
    #: The vendor's id of the response (``None``: not reported).
    response_id: str | None = attrs.field(default=None, validator=_response_name)
    #: Which provider answered, when a :class:`~actors.providers.FallbackProvider` chose among
    #: several (its label of the member; ``None``: not chosen among several).
    provider: str | None = attrs.field(default=None, validator=_response_name)

    def __attrs_post_init__(self) -> None:
        if self.calls:
            _unique_call_ids("ProviderResult", self.calls)
        if self.denied and not set(self.denied) <= {call.id for call in self.calls}:
            raise ValidationError("ProviderResult.denied names a call the result does not hold")


def _default_partial(result: AgentResult) -> bool:
    return result.stop is not StopReason.COMPLETE


def _default_total_usage(result: AgentResult) -> Usage | None:
    return result.usage


@attrs.frozen
class GuardrailTrip:
    """A guardrail that tripped and ended a run: its ``name``, what it checked (``kind``:
    ``input`` -- the run's input; ``output`` -- its final answer; ``tool`` -- a tool call's
    arguments, then ``call_id`` names the call) and the ``reason`` it gave."""

    name: str = attrs.field(validator=_str)
    kind: Literal["input", "output", "tool"] = attrs.field()
    reason: str = attrs.field(validator=_str)
    call_id: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )

    @kind.validator
    def _kind(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in ("input", "output", "tool"):
            raise ValidationError(
                f"GuardrailTrip.kind must be 'input', 'output' or 'tool', not {value!r}"
            )


@attrs.frozen
class AgentResult:
    """The outcome of one agent run.

    ``content`` is the text of the run's last assistant message (partial if cut), ``thinking`` the
    run's reasoning (turns joined by a blank line), ``messages`` everything the run appended to the
    conversation, ``turns`` the number of provider calls made. ``usage`` is the sum over its
    turns of what the provider reported -- ``None`` (unknown) as soon as one turn's usage was
    not reported and not estimated; a run with a budget charges a turn reported without usage
    by estimate, and then ``estimated`` is true (``usage`` includes estimates).
    ``partial`` is true exactly when ``stop`` is not ``complete`` (it defaults accordingly, and a
    contradicting value is refused). ``output`` is the structured answer, when one was asked for.
    ``run_id`` identifies the run (its events carry the same id; a delegated run's is
    ``subagent:<call id>:<12 hex digits>``), ``agent`` names the agent that gave the answer
    (after a handoff, the agent handed to). ``total_usage`` adds to ``usage`` what the runs it
    delegated to spent (equal to ``usage`` when it delegated nothing; ``None`` when any part is
    unknown); ``estimated`` covers it too (a run it delegated to charged an estimate). A count
    is never a part passed off as the whole: unknown is ``None``, estimated is flagged.
    ``finish`` is the finish reason of the run's last provider call (``cancelled`` when that
    call was cut; ``None`` when the run made none): a run whose last reply the provider cut
    short ends ``max_tokens`` (finish ``length``) or ``content_filter``, partial.
    ``guardrail`` is the guardrail that ended the run (set only with ``stop`` ``guardrail``;
    a run of this library that a guardrail ended always has it).
    """

    content: str = attrs.field(default="", validator=_str)
    thinking: str = attrs.field(default="", validator=_str)
    messages: tuple[Message, ...] = attrs.field(default=(), converter=_to_messages)
    usage: Usage | None = attrs.field(
        factory=Usage, validator=attrs.validators.optional(attrs.validators.instance_of(Usage))
    )
    stop: StopReason = attrs.field(default=StopReason.COMPLETE, converter=_to_stop_reason)
    partial: bool = attrs.field(
        default=attrs.Factory(_default_partial, takes_self=True), validator=_bool
    )
    turns: int = attrs.field(default=0, validator=_count)
    #: The structured answer of a run that asked for one (``output=``): the parsed JSON, or an
    #: instance of the class given (pydantic model, dataclass, attrs); ``None`` otherwise.
    output: Any = None
    #: ``usage`` includes estimates for turns the provider reported no usage for.
    estimated: bool = attrs.field(default=False, validator=_bool)
    run_id: str = attrs.field(default="", validator=_str)
    agent: str = attrs.field(default="", validator=_str)
    total_usage: Usage | None = attrs.field(
        default=attrs.Factory(_default_total_usage, takes_self=True),
        validator=attrs.validators.optional(attrs.validators.instance_of(Usage)),
    )
    #: The finish reason of the run's last provider call (``None``: it made none).
    finish: FinishReason | None = attrs.field(default=None, converter=_to_optional_finish)
    #: The guardrail that tripped and ended the run (only with ``stop`` ``guardrail``).
    guardrail: GuardrailTrip | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(GuardrailTrip)),
    )

    @property
    def client_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the run left open for its caller to run (``stop`` is
        ``client_tools``): the calls of its last assistant message that no message of the run
        answers. Empty for any other stop."""
        if self.stop is not StopReason.CLIENT_TOOLS:
            return ()
        answered = {m.tool_call_id for m in self.messages if m.role == Role.TOOL}
        for message in reversed(self.messages):
            if message.role == Role.ASSISTANT:
                return tuple(call for call in message.calls if call.id not in answered)
        return ()

    def __attrs_post_init__(self) -> None:
        if self.partial != (self.stop is not StopReason.COMPLETE):
            raise ValidationError(
                f"AgentResult.partial={self.partial} contradicts stop={self.stop.value!r} "
                "(a run is partial exactly when it did not complete)"
            )
        if self.guardrail is not None and self.stop is not StopReason.GUARDRAIL:
            raise ValidationError(
                "AgentResult.guardrail is set only when stop is 'guardrail' "
                f"(stop={self.stop.value!r})"
            )
