"""What a run publishes besides its log: :class:`Chunk` (what a consumer of the run's stream
reads) and :class:`AgentEvent` (what an agent's listeners hear)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs

from protocols.messages import (
    FinishReason,
    GuardrailTrip,
    StopReason,
    ToolCall,
    ToolResult,
    Usage,
)

from ._run_context import RunStep
from .providers import FallbackEvent

_T = TypeVar("_T")

if TYPE_CHECKING:
    pass


@attrs.frozen
class AgentEvent:
    """Something that happened in a run, delivered to listeners after it happened.

    ``run`` is the run's number on this agent, ``run_id`` its id (the ``run_id`` of its
    :class:`~protocols.messages.AgentResult`); ``turn`` the provider calls made so far. An event
    of a delegated run, as the parent's listeners hear it, has a non-empty ``path`` (the
    delegation hops down to it, see :class:`~actors.RunStep`). By ``kind``:

    * ``start``: the run began (a run withdrawn while it waited never starts);
    * ``turn``: a provider call begins;
    * ``retry``: the provider call failed before anything streamed and is tried again --
      ``attempt`` (the failed attempt, from 1), ``delay`` (seconds until the next), ``reason``
      (the error code and HTTP status);
    * ``fallback``: the call of a :class:`~actors.providers.FallbackProvider` left one member
      for the next -- ``fallback`` (the :class:`~actors.providers.FallbackEvent`: which member,
      which next, why, whether what it streamed was voided by a rewind), ``reason`` (why, in
      words);
    * ``tool``: a call's ``result`` is in;
    * ``tool_error``: the tool behind ``call`` raised ``error``; ``result`` is the failure the
      model reads;
    * ``deny``: the authority refused ``call`` (``reason``);
    * ``usage``: a turn's ``usage`` (``None``: not reported; ``estimated``: charged to the
      budget by estimate because it was not reported) and ``finish``, its finish reason;
    * ``guard``: a guard refused a batch (``reason``);
    * ``guardrail``: a guardrail tripped and ends the run -- ``guardrail`` (the
      :class:`~protocols.messages.GuardrailTrip`: its name, kind and reason), ``reason``;
    * ``fault``: automatic compaction failed and the run goes on (``error``);
    * ``abort``: the run was cut, or withdrawn before it began (``reason``, ``stop``; ``error``:
      a failure that raced the cut, its cause -- ``None`` when the cut was the only one);
    * ``exhaust``: the turn limit was reached;
    * ``finish``: the run ended (``partial``, ``stop``, and ``finish``: the finish reason of
      its last provider call, ``None`` when it made none -- ``length`` or ``content_filter``
      with ``stop`` ``max_tokens`` or ``content_filter`` when the provider cut its last reply
      short);
    * ``error``: the run raised ``error``;
    * ``progress``: a tool reported progress (``call``, ``text``, ``data``);
    * ``subagent_start``: the tool ``call`` delegated to ``agent``, whose run is ``child``
      (``subagent:<call id>:<12 hex digits>``, unique: follow it by its id);
    * ``subagent_finish``: that run ended: ``status`` (its stop reason, or ``error``),
      ``duration`` (seconds), ``usage`` (its total, delegations included; ``estimated``: it
      includes estimates);
    * ``handoff``: the tool ``call`` handed the rest of the run to ``agent``.
    """

    kind: Literal[
        "start",
        "turn",
        "retry",
        "fallback",
        "tool",
        "tool_error",
        "deny",
        "usage",
        "guard",
        "guardrail",
        "fault",
        "abort",
        "exhaust",
        "finish",
        "error",
        "progress",
        "subagent_start",
        "subagent_finish",
        "handoff",
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
    run_id: str = ""
    path: tuple[RunStep, ...] = ()
    text: str | None = None
    data: Mapping[str, Any] | None = None
    agent: str | None = None
    child: str | None = None
    status: str | None = None
    duration: float | None = None
    finish: FinishReason | None = None
    fallback: FallbackEvent | None = None
    guardrail: GuardrailTrip | None = None


@attrs.frozen
class Chunk:
    """One piece of a run, in order: ``content`` or ``thinking`` text, a ``tool_call`` the model
    made, a ``tool_result``, the ``usage`` of a finished turn (``None`` when the provider
    reported none; ``estimated`` when the run's budget charged it by estimate instead), or a
    tool's ``progress`` (``text``; ``call`` is the reporting call) -- or a ``rewind``: the
    ``content`` and ``thinking`` chunks of the provider call in flight so far are void (a
    :class:`~actors.providers.FallbackProvider` with ``rewind=True`` left a member that had
    streamed; the next member answers the turn from the start) -- or, in a run with ``output=``,
    an ``output``: the structured answer known so far (``output``: the dict of the fields
    complete so far, validated leniently -- see :class:`~protocols.toolschema.PartialOutput`;
    ``None`` once a new attempt began, before anything of it is known) of provider call
    ``attempt`` (from 1; a later attempt -- a retry, a turn after tools, a rewind -- starts
    over), emitted whenever it changes, only while somebody reads the chunks.

    ``run_id`` is the run that produced it; a chunk of a run delegated to (``as_tool``) reaches
    the parent's stream with the hops down to that run in ``path`` (empty for the run's own).
    ``seq`` is the chunk's event in the log of run ``run_id`` (:meth:`Runtime.watch
    <actors.Runtime.watch>`: follow the run from there, from anywhere): the event of that seq
    has the chunk's kind and data (``text``; ``call``; ``result``; ``usage`` and ``estimated``;
    ``progress``'s ``call_id`` and ``text``); an ``output`` chunk has no event of its own: its
    seq is that of the content delta it follows. 0 for a run whose log is not in memory -- a
    durable job's, which its queue's log is (``JobQueue.watch``)."""

    kind: Literal[
        "content", "thinking", "tool_call", "tool_result", "usage", "progress", "rewind", "output"
    ]
    text: str = ""
    call: ToolCall | None = None
    result: ToolResult | None = None
    usage: Usage | None = None
    estimated: bool = False
    run_id: str = ""
    path: tuple[RunStep, ...] = ()
    seq: int = 0
    output: Any = None
    attempt: int = 0
