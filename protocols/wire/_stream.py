"""The contract between a vendor's record reader and the provider engine, and the pure assembler
that turns a stream of records into deltas and a :class:`~protocols.messages.ProviderResult`.

A vendor reader turns each wire record (an SSE event, an NDJSON line) into an :class:`Increment`:
the text, reasoning and tool-call fragments that record contributed, plus usage, the finish reason
and whether it was the vendor's terminal record (the stream may end there) or its final one (the
response ends there: nothing after it belongs to the response). For the commonest record, one
that carries only answer text, a reader may return that text as a plain ``str``: it means exactly
``Increment(content=text)`` and spares the hot loop an object per delta.

:class:`StreamAssembler` folds increments in order. It is the hot loop of every streamed
completion, so it is linear in the stream: text and argument fragments are collected in lists and
joined once.

The model that answered and the vendor's id of the response travel the same way: a reader puts
them on the increment of the record that names them, and the assembler keeps the **first**
acceptable value of each (vendors that repeat them -- OpenAI on every chunk, the Responses API on
``response.created`` and again on ``response.completed`` -- repeat the same value, and the first
one is there for a stream cut short too). A value that is not a non-empty string of at most
256 characters is dropped, never an error: these are telemetry, and no call fails over them.

**After the end.** Once a record is final -- OpenAI chat ``data: [DONE]``, Anthropic
``message_stop``, Ollama ``done: true``, the Responses API's ``response.completed`` or
``response.incomplete`` -- nothing that follows may change the response: each reader ignores
every later record without looking into it (a trailing ``[DONE]``, which some servers send after
any format, silently; anything else logged once per stream at debug level on the
``protocols.wire`` logger, by its kind, never its text), and the assembler ignores every
later increment, so a reader that forgot would still be held to the rule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs

from .._json import loads
from .._message_checks import _MAX_RESPONSE_NAME
from ..errors import ProtocolError, ValidationError
from ..messages import (
    CUT_SHORT,
    Delta,
    FinishReason,
    ProviderResult,
    ToolCall,
    Usage,
    new_id,
    trusted_delta,
)
from ..think import ThinkSplitter

__all__ = [
    "NOTHING",
    "CallFragment",
    "Increment",
    "StreamAssembler",
    "ignore_after_end",
    "response_name",
]

_log = logging.getLogger("protocols.wire")


@attrs.frozen
class CallFragment:
    """A piece of one tool call, as a stream delivers it.

    ``index`` says which call of the response it belongs to (calls may interleave); ``id`` and
    ``name`` arrive once, possibly after the first fragment; ``arguments`` is a piece of the
    arguments' JSON text, to be concatenated with the call's other pieces in order.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@attrs.frozen
class Increment:
    """What one wire record contributes to a response.

    - ``content``: answer text (it may still hold inline ``<think>`` tags; the assembler splits
      them out when asked to).
    - ``thinking``: native reasoning text.
    - ``calls``: tool-call fragments.
    - ``usage``: the usage known so far (it *replaces* earlier reports; a reader that gets usage in
      parts merges them before reporting).
    - ``finish``: the finish reason, when this record gave one.
    - ``terminal``: the stream may end after this record (OpenAI ``[DONE]`` or a finish reason,
      Anthropic ``message_stop``, Ollama ``done: true``, the Responses API's
      ``response.completed``). A stream that ends without one was truncated.
    - ``final``: the response ends with this record (it is also terminal): nothing after it may
      change the result, and the assembler ignores every later increment. OpenAI chat's finish
      reason is terminal but not final -- a usage-only chunk and ``[DONE]`` follow it -- while
      its ``[DONE]``, Anthropic's ``message_stop``, Ollama's ``done: true`` and the Responses
      API's ``response.completed`` and ``response.incomplete`` are final.
    - ``continuation``: vendor data for the assistant message (replaces earlier values).
    - ``model``, ``response_id``: the model the vendor says answered and its id of the response,
      when this record names them (the assembler keeps the first acceptable value of each).
    """

    content: str = ""
    thinking: str = ""
    calls: tuple[CallFragment, ...] = ()
    usage: Usage | None = None
    finish: FinishReason | None = None
    terminal: bool = False
    final: bool = False
    continuation: dict[str, Any] | None = None
    model: str | None = None
    response_id: str | None = None


def ignore_after_end(vendor: str, kind: str, *, logged: bool) -> bool:
    """What a reader does with a record that came after its stream's final record: nothing.

    ``kind`` names the record (``"[DONE]"``, or its event type or JSON type). A ``"[DONE]"`` is
    accepted silently; the first other record of a stream (``logged`` false) is logged at debug
    level -- by vendor and kind, never its text. Returns the new ``logged``: whether this stream
    has logged one. Not part of the public API."""
    if logged or kind == "[DONE]":
        return logged
    _log.debug("%s: ignored what came after the end of the stream (first: %s)", vendor, kind[:80])
    return True


def response_name(value: object) -> str | None:
    """``value`` when it can be a :class:`~protocols.messages.ProviderResult`'s ``model`` or
    ``response_id`` (a non-empty ``str`` of at most 256 characters), else ``None``: readers
    drop what is not, rather than fail a stream over telemetry."""
    if isinstance(value, str) and 0 < len(value) <= _MAX_RESPONSE_NAME:
        return value
    return None


#: An increment that contributes nothing (records such as pings).
NOTHING = Increment()


class _PartialCall:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class StreamAssembler:
    """Fold a stream's increments into deltas and one result.

    Guarantees:

    * :meth:`add` returns the deltas to show for an increment, in order: content (after
      ``<think>`` splitting when ``split`` is true) then native thinking; never an empty delta.
    * Tool calls are assembled by index in linear time; a call's ``id`` and ``name`` are the first
      non-empty values seen for its index; a call with no id gets one from ``mint_id``.
    * :meth:`result` is the complete result; it raises :class:`~protocols.errors.ProtocolError`
      when a call has no name or its arguments are not a JSON object (malformed JSON is never
      silently dropped) -- unless the provider cut the reply short (finish ``length`` or
      ``content_filter``): then the last call's arguments may be cut, so a named call whose
      arguments are not a JSON object is kept with empty arguments (a call with no name or a
      repeated id is left out), and every call is named in the result's ``denied`` with the
      text of :data:`~protocols.messages.CUT_SHORT` -- no call of a cut reply is ever run, by
      the agent or by anyone honouring ``denied`` (a relay client from before this rule
      included). :meth:`partial` never raises: it is what was produced so far, for a stream
      cut short (calls whose arguments are incomplete are left out).
    * ``terminal`` tells whether the vendor's end-of-stream record has been seen, ``final``
      whether the record that ends the response has been: from then on :meth:`add` ignores
      every increment (it returns no delta and changes nothing), so what comes after the end
      never changes the result.
    * ``model`` and ``response_id`` are the first acceptable values the increments named (see
      :func:`response_name`; a later, different value is ignored); both results carry them.
    """

    def __init__(self, *, split: bool = True, mint_id: Callable[[], str] = new_id) -> None:
        self._splitter: ThinkSplitter | None = ThinkSplitter() if split else None
        self._content: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._mint_id = mint_id
        self.usage: Usage | None = None
        self.finish: FinishReason | None = None
        self.terminal = False
        self.final = False
        self.continuation: dict[str, Any] = {}
        self.model: str | None = None
        self.response_id: str | None = None
        self._flushed = False

    def add(self, increment: Increment | str) -> list[Delta]:
        """Fold one increment (a ``str`` is content only); return the deltas it produces.
        After a final increment, nothing: what comes after the end is ignored."""
        if self.final:
            return []
        if type(increment) is str:
            if not increment:
                return []
            if self._splitter is not None:
                return self._splitter.feed(increment)
            self._content.append(increment)
            return [trusted_delta("content", increment)]
        assert isinstance(increment, Increment)
        deltas: list[Delta] = []
        if increment.content:
            if self._splitter is not None:
                deltas.extend(self._splitter.feed(increment.content))
            else:
                self._content.append(increment.content)
                deltas.append(trusted_delta("content", increment.content))
        if increment.thinking:
            self._thinking.append(increment.thinking)
            deltas.append(trusted_delta("thinking", increment.thinking))
        for fragment in increment.calls:
            call = self._calls.get(fragment.index)
            if call is None:
                call = self._calls[fragment.index] = _PartialCall()
            if fragment.id and call.id is None:
                call.id = fragment.id
            if fragment.name and call.name is None:
                call.name = fragment.name
            if fragment.arguments:
                call.arguments.append(fragment.arguments)
        if increment.usage is not None:
            self.usage = increment.usage
        if increment.finish is not None:
            self.finish = increment.finish
        if increment.continuation is not None:
            self.continuation = increment.continuation
        if increment.terminal or increment.final:
            self.terminal = True
        if increment.final:
            self.final = True
        if increment.model is not None and self.model is None:
            self.model = response_name(increment.model)
        if increment.response_id is not None and self.response_id is None:
            self.response_id = response_name(increment.response_id)
        return deltas

    def flush(self) -> list[Delta]:
        """End of input: release text held back by the think splitter (call once)."""
        if self._flushed or self._splitter is None:
            self._flushed = True
            return []
        self._flushed = True
        return self._splitter.flush()

    @property
    def content(self) -> str:
        """The answer text so far (authoritative: corrected by the think splitter)."""
        if self._splitter is not None:
            return self._splitter.content
        return "".join(self._content)

    @property
    def thinking(self) -> str:
        """Inline reasoning (from ``<think>`` spans) followed by native reasoning, so far."""
        native = "".join(self._thinking)
        inline = self._splitter.thinking if self._splitter is not None else ""
        if inline and native:
            return f"{inline}\n\n{native}"
        return inline or native

    def result(self) -> ProviderResult:
        """The complete result. Call after the stream ended (and after :meth:`flush`)."""
        finish = self.finish
        cut = CUT_SHORT.get(finish) if finish is not None else None
        calls = self._built_calls(strict=cut is None, cut=cut is not None)
        if finish is None:
            finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
        return ProviderResult(
            content=self.content,
            thinking=self.thinking,
            calls=calls,
            usage=self.usage,
            finish=finish,
            continuation=self.continuation,
            denied=dict.fromkeys((call.id for call in calls), cut) if cut is not None else {},
            model=self.model,
            response_id=self.response_id,
        )

    def partial(self) -> ProviderResult:
        """What the stream produced before it was cut short; never raises."""
        calls = self._built_calls(strict=False)
        return ProviderResult(
            content=self.content,
            thinking=self.thinking,
            calls=calls,
            usage=self.usage,
            finish=FinishReason.CANCELLED,
            continuation=self.continuation,
            model=self.model,
            response_id=self.response_id,
        )

    def _built_calls(self, *, strict: bool, cut: bool = False) -> tuple[ToolCall, ...]:
        """The calls in index order. ``strict``: a malformed call or a repeated id is a
        ProtocolError; otherwise incomplete calls and repeated ids are left out -- except, for
        a reply the provider cut short (``cut``), a named call whose arguments were cut: it is
        kept with empty arguments, to be answered (it never runs)."""
        calls: list[ToolCall] = []
        seen: set[str] = set()
        for index, call in sorted(self._calls.items()):
            try:
                built = self._build(index, call, cut=cut)
            except (ProtocolError, ValidationError):
                if strict:
                    raise
                continue  # its arguments never finished arriving
            if built.id in seen:
                if strict:
                    raise ProtocolError(f"two tool calls of one response share the id {built.id!r}")
                continue  # a duplicate id cannot be answered unambiguously: drop it
            seen.add(built.id)
            calls.append(built)
        return tuple(calls)

    def _build(self, index: int, call: _PartialCall, *, cut: bool = False) -> ToolCall:
        if not call.name:
            raise ProtocolError(f"tool call {index} has no name")
        text = "".join(call.arguments)
        arguments: Any = {} if not text.strip() else None
        if arguments is None:
            try:
                arguments = loads(text)
            except ProtocolError as error:
                if not cut:
                    raise ProtocolError(
                        f"tool call {index} ({call.name!r}) has malformed arguments: "
                        f"{error.message}"
                    ) from None
                arguments = {}  # cut by the limit: kept to be answered, never run
        if cut and not isinstance(arguments, dict):
            arguments = {}
        if not isinstance(arguments, dict):
            raise ProtocolError(
                f"tool call {index} ({call.name!r}) arguments are not a JSON object"
            )
        call.id = call.id or self._mint_id()
        return ToolCall(call.id, call.name, arguments)
