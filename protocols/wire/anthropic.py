"""Anthropic Messages API wire format, sans-IO: the request body, the stream reader, the
non-streaming response reader and error bodies.

What this module guarantees:

* :func:`encode_request` builds the JSON body of ``POST /v1/messages`` from the data model, or
  raises :class:`~protocols.errors.ConfigError` for a request Anthropic cannot express (a
  temperature above 1, a JSON-Schema answer, ...). It never mutates its inputs; the body it returns
  shares nested JSON values (tool arguments, schemas, thinking blocks, ``extra`` values) with them,
  so treat it as read-only (the engine only serialises it).
* :class:`AnthropicReader` turns each server-sent event of one stream into an
  :class:`~protocols.wire.Increment`; the assembler folds those into a
  :class:`~protocols.messages.ProviderResult` equal to what :func:`read_response` gives for the same
  message sent without streaming.
* Thinking blocks (with their signatures) and redacted thinking blocks are collected into the
  result's ``continuation`` under ``{"anthropic": {"thinking_blocks": [...]}}``, which
  :func:`encode_request` sends back unchanged when that assistant message is replayed, as Anthropic
  requires when tools are used with extended thinking.
* Readers tolerate event types and fields they do not know; a record that is not JSON, or whose
  known fields have the wrong shape, raises :class:`~protocols.errors.ProtocolError`; an ``error``
  event raises :class:`~protocols.errors.ProviderError`.

The request encoder lives in :mod:`protocols.wire._anthropic_request` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._json import loads
from ..accounting import sanitize_count
from ..errors import ProtocolError, ProviderError, ValidationError
from ..messages import CUT_SHORT, FinishReason, ProviderResult, ToolCall, Usage, new_id
from ..sse import SSEEvent
from ._anthropic_request import _NAMESPACE, DEFAULT_MAX_TOKENS, encode_request, thinking_budget
from ._stream import NOTHING, CallFragment, Increment, ignore_after_end, response_name

__all__ = [
    "API_VERSION",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_TOKENS",
    "PATH",
    "AnthropicReader",
    "encode_request",
    "error_details",
    "is_context_overflow",
    "read_response",
    "thinking_budget",
]

#: The path of the Messages endpoint, relative to the base URL.
PATH = "/v1/messages"
#: Where Anthropic serves its API.
DEFAULT_BASE_URL = "https://api.anthropic.com"
#: The value of the ``anthropic-version`` header every request carries.
API_VERSION = "2023-06-01"
#: The longest error message this module builds from vendor text (characters).
_MESSAGE_LIMIT = 300

_FINISH: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}

#: vendor error type -> (our code, retryable)
_ERROR_CODES: dict[str, tuple[str, bool]] = {
    "overloaded_error": ("overloaded", True),
    "rate_limit_error": ("rate_limit", True),
    "api_error": ("server_error", True),
    # The vendor timed out on its side: as transient as an overload.
    "timeout_error": ("timeout", True),
    "authentication_error": ("auth", False),
    "permission_error": ("auth", False),
    "not_found_error": ("model_not_found", False),
}

#: Phrases (lowercase) of Anthropic messages that say the prompt does not fit the context window.
_OVERFLOW_PHRASES = (
    "prompt is too long",
    "prompt too long",
    "exceed context limit",
    "exceeds context limit",
    "context window",
    "context length",
)


# ---------------------------------------------------------------------------------------------
# Shape checks for vendor records (ProtocolError on a known field of the wrong type)


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"Anthropic {what} is not a JSON object")
    return value


def _optional_object(record: Mapping[str, Any], key: str, what: str) -> dict[str, Any]:
    value = record.get(key)
    return {} if value is None else _object(value, f"{what}.{key}")


def _str(record: Mapping[str, Any], key: str, what: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise ProtocolError(f"Anthropic {what} has no string {key!r}")
    return value


def _optional_str(record: Mapping[str, Any], key: str, what: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"Anthropic {what}.{key} is not a string")
    return value


def _index(record: Mapping[str, Any], what: str) -> int:
    value = record.get("index")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"Anthropic {what} has no valid block index")
    return value


def _finish(reason: str | None) -> FinishReason | None:
    if reason is None:
        return None
    return _FINISH.get(reason, FinishReason.OTHER)


class _UsageCounts:
    """Anthropic's usage fields, merged across reports.

    Anthropic's ``input_tokens`` counts only the uncached part of the prompt; our
    :attr:`Usage.prompt` is the whole prompt, so it is ``input_tokens + cache_read_input_tokens +
    cache_creation_input_tokens``, :attr:`Usage.cached` is ``cache_read_input_tokens`` and
    :attr:`Usage.cache_write` is ``cache_creation_input_tokens`` (each ``None`` while Anthropic
    has not reported it). Until some count has been reported, the
    usage is unknown (``None``), never zeros.
    """

    __slots__ = ("cache_creation", "cache_read", "input", "output")

    def __init__(self) -> None:
        self.input: object = None
        self.cache_read: object = None
        self.cache_creation: object = None
        self.output: object = None

    def merge(self, usage: Mapping[str, Any]) -> Usage | None:
        # Counts are cumulative: a later report of a field replaces the earlier one.
        if usage.get("input_tokens") is not None:
            self.input = usage["input_tokens"]
        if usage.get("cache_read_input_tokens") is not None:
            self.cache_read = usage["cache_read_input_tokens"]
        if usage.get("cache_creation_input_tokens") is not None:
            self.cache_creation = usage["cache_creation_input_tokens"]
        if usage.get("output_tokens") is not None:
            self.output = usage["output_tokens"]
        return self.usage()

    def usage(self) -> Usage | None:
        if all(
            count is None
            for count in (self.input, self.cache_read, self.cache_creation, self.output)
        ):
            return None
        cache_read = sanitize_count(self.cache_read)
        prompt = sanitize_count(self.input) + cache_read + sanitize_count(self.cache_creation)
        return Usage.sanitize(
            prompt=prompt,
            completion=self.output,
            cached=None if self.cache_read is None else cache_read,
            cache_write=self.cache_creation,
        )


# ---------------------------------------------------------------------------------------------
# Stream reader


#: What ``message_stop`` contributes: the end of the response.
_STOP = Increment(terminal=True, final=True)


class AnthropicReader:
    """Reads the server-sent events of one Messages stream (use one reader per stream).

    :meth:`read` maps each event by the ``"type"`` of its JSON data (the SSE event name mirrors it
    and is used only when the data has none):

    * ``message_start``: usage (see below), and the message's ``model`` and ``id`` as the
      increment's ``model`` and ``response_id`` (a value that is not a non-empty string of at
      most 256 characters is ignored, never an error).
    * ``content_block_start``: a ``tool_use`` block starts a tool call (``CallFragment`` with the
      block index, id and name; its arguments come from the deltas); a ``thinking`` block starts
      being collected; a ``redacted_thinking`` block arrives whole and is kept; a ``text`` block
      contributes its initial text if any (normally none); other block types (server tools,
      ...) are ignored along with their deltas.
    * ``content_block_delta``: ``text_delta`` -> content, ``thinking_delta`` -> thinking,
      ``signature_delta`` -> kept for its thinking block, ``input_json_delta`` -> a
      ``CallFragment`` carrying the piece of argument JSON; other delta types are ignored.
    * ``content_block_stop``: a finished thinking block is stored as
      ``{"type": "thinking", "thinking": ..., "signature": ...}``. Whenever a thinking or redacted
      thinking block is stored, the increment carries ``continuation={"anthropic":
      {"thinking_blocks": [...]}}`` holding every block stored so far, in block order. A thinking
      block the stream never closes is not stored (its signature may be missing).
    * ``message_delta``: ``stop_reason`` -> finish (``end_turn``/``stop_sequence`` -> stop,
      ``max_tokens``/``model_context_window_exceeded`` -> length, ``tool_use`` -> tool_calls,
      ``refusal`` -> content_filter, anything else such as ``pause_turn`` -> other) and usage.
    * ``message_stop``: ``terminal=True`` and ``final=True``: it ends the response. Every
      event after it -- more deltas, another ``message_delta``, an ``error``, a trailing
      ``data: [DONE]``, data that is not JSON -- gives nothing and raises nothing, unread (the
      first one other than ``[DONE]`` is logged at debug level), so what comes after the end
      never changes the response.
    * ``ping`` and unknown types: nothing.
    * ``error``: raises :class:`~protocols.errors.ProviderError` (see :func:`error_details` for
      the codes) whose message quotes at most 300 characters of the vendor's message.

    Usage is reported whole each time it changes: ``prompt = input_tokens +
    cache_read_input_tokens + cache_creation_input_tokens`` (Anthropic's ``input_tokens`` leaves
    out cached and cache-writing tokens; our ``prompt`` is the whole prompt), ``completion =
    output_tokens`` (cumulative), ``cached = cache_read_input_tokens``, ``cache_write =
    cache_creation_input_tokens``.

    Raises :class:`~protocols.errors.ProtocolError` when the data is not a JSON object or a known
    field has the wrong shape.
    """

    __slots__ = ("_blocks", "_ended", "_ignored", "_logged", "_thinking", "_usage")

    def __init__(self) -> None:
        self._usage = _UsageCounts()
        # Open thinking blocks: index -> (text pieces, signature pieces).
        self._thinking: dict[int, tuple[list[str], list[str]]] = {}
        # Stored thinking blocks as (index, block), kept in block order.
        self._blocks: list[tuple[int, dict[str, Any]]] = []
        # Blocks of types this reader does not handle, whose deltas it ignores.
        self._ignored: set[int] = set()
        # message_stop was read (what follows is ignored), and an ignored event was logged.
        self._ended = False
        self._logged = False

    def read(self, event: SSEEvent) -> Increment:
        """The increment one event contributes (see the class documentation)."""
        if self._ended:
            data = event.data
            kind = "[DONE]" if data.strip() == "[DONE]" else f"event {event.event!r}"
            self._logged = ignore_after_end("Anthropic", kind, logged=self._logged)
            return NOTHING
        record = _object(loads(event.data), "stream event")
        kind = record.get("type", event.event)
        if kind == "content_block_delta":
            return self._delta(record)
        if kind == "content_block_start":
            return self._start(record)
        if kind == "content_block_stop":
            return self._stop(record)
        if kind == "message_start":
            message = _optional_object(record, "message", "message_start")
            usage = _optional_object(message, "usage", "message_start.message")
            return Increment(
                usage=self._usage.merge(usage),
                model=response_name(message.get("model")),
                response_id=response_name(message.get("id")),
            )
        if kind == "message_delta":
            delta = _optional_object(record, "delta", "message_delta")
            finish = _finish(_optional_str(delta, "stop_reason", "message_delta.delta"))
            reported = record.get("usage")
            merged = None if reported is None else self._usage.merge(_object(reported, "usage"))
            return Increment(usage=merged, finish=finish)
        if kind == "message_stop":
            self._ended = True
            return _STOP
        if kind == "error":
            raise _stream_error(record)
        return Increment()  # ping, and event types this reader does not know

    def _start(self, record: Mapping[str, Any]) -> Increment:
        index = _index(record, "content_block_start")
        block = _object(record.get("content_block"), "content_block_start.content_block")
        kind = block.get("type")
        what = f"{kind} block"
        if kind == "text":
            return Increment(content=_optional_str(block, "text", what) or "")
        if kind == "tool_use":
            return Increment(
                calls=(
                    CallFragment(
                        index,
                        id=_optional_str(block, "id", what),
                        name=_optional_str(block, "name", what),
                    ),
                )
            )
        if kind == "thinking":
            text = _optional_str(block, "thinking", what) or ""
            signature = _optional_str(block, "signature", what) or ""
            self._thinking[index] = ([text] if text else [], [signature] if signature else [])
            return Increment(thinking=text)
        if kind == "redacted_thinking":
            data = _str(block, "data", what)
            return self._store(index, {"type": "redacted_thinking", "data": data})
        self._ignored.add(index)
        return Increment()

    def _delta(self, record: Mapping[str, Any]) -> Increment:
        index = _index(record, "content_block_delta")
        delta = _object(record.get("delta"), "content_block_delta.delta")
        kind = delta.get("type")
        what = f"{kind} delta"
        if kind == "text_delta":
            return Increment(content=_str(delta, "text", what))
        if kind == "input_json_delta":
            piece = _str(delta, "partial_json", what)
            if index in self._ignored:
                return Increment()
            return Increment(calls=(CallFragment(index, arguments=piece),))
        if kind == "thinking_delta":
            text = _str(delta, "thinking", what)
            self._thinking.setdefault(index, ([], []))[0].append(text)
            return Increment(thinking=text)
        if kind == "signature_delta":
            signature = _str(delta, "signature", what)
            self._thinking.setdefault(index, ([], []))[1].append(signature)
        return Increment()

    def _stop(self, record: Mapping[str, Any]) -> Increment:
        index = _index(record, "content_block_stop")
        open_block = self._thinking.pop(index, None)
        if open_block is None:
            return Increment()
        text, signature = open_block
        return self._store(
            index, {"type": "thinking", "thinking": "".join(text), "signature": "".join(signature)}
        )

    def _store(self, index: int, block: dict[str, Any]) -> Increment:
        blocks = self._blocks
        blocks.append((index, block))
        if len(blocks) > 1 and blocks[-2][0] > index:
            blocks.sort(key=lambda item: item[0])
        stored = [item for _, item in blocks]
        return Increment(continuation={_NAMESPACE: {"thinking_blocks": stored}})


# ---------------------------------------------------------------------------------------------
# Non-streaming response


def read_response(body: Any) -> ProviderResult:
    """The result of a non-streaming Messages response (parsed JSON, or its text/bytes).

    Text blocks are joined into ``content`` and thinking blocks into ``thinking`` (without a
    separator, as the stream reader's deltas are); thinking and redacted thinking blocks go into
    ``continuation`` as :class:`AnthropicReader` stores them; ``tool_use`` blocks become calls
    keeping their ids (a missing id is minted); usage and ``stop_reason`` are mapped as by the
    stream reader (a reply cut short names every call in ``denied``, as the stream's result
    does), and the message's ``model`` and ``id`` are taken as it takes them. Other
    block types are ignored. A body of type ``error`` raises
    :class:`~protocols.errors.ProviderError`; a body of the wrong shape raises
    :class:`~protocols.errors.ProtocolError`.
    """
    if isinstance(body, str | bytes | bytearray | memoryview):
        body = loads(body)
    record = _object(body, "response")
    if record.get("type") == "error":
        raise _stream_error(record)
    content_blocks = record.get("content")
    if content_blocks is None:
        content_blocks = []
    if not isinstance(content_blocks, list):
        raise ProtocolError("Anthropic response content is not a list")
    text: list[str] = []
    thinking: list[str] = []
    stored: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for position, raw in enumerate(content_blocks):
        what = f"response content[{position}]"
        block = _object(raw, what)
        kind = block.get("type")
        if kind == "text":
            text.append(_str(block, "text", what))
        elif kind == "thinking":
            piece = _str(block, "thinking", what)
            thinking.append(piece)
            signature = _optional_str(block, "signature", what) or ""
            stored.append({"type": "thinking", "thinking": piece, "signature": signature})
        elif kind == "redacted_thinking":
            stored.append({"type": "redacted_thinking", "data": _str(block, "data", what)})
        elif kind == "tool_use":
            name = _str(block, "name", what)
            arguments = block.get("input")
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise ProtocolError(f"Anthropic {what} ({name!r}) input is not a JSON object")
            calls.append(ToolCall(_optional_str(block, "id", what) or new_id(), name, arguments))
    usage = record.get("usage")
    finish = _finish(_optional_str(record, "stop_reason", "response"))
    fields: dict[str, Any] = {
        "content": "".join(text),
        "thinking": "".join(thinking),
        "calls": calls,
        "usage": None if usage is None else _UsageCounts().merge(_object(usage, "usage")),
        "model": response_name(record.get("model")),
        "response_id": response_name(record.get("id")),
    }
    if finish is not None:
        fields["finish"] = finish
        cut = CUT_SHORT.get(finish)
        if cut is not None:  # a reply cut short: none of its calls runs (as when streamed)
            fields["denied"] = dict.fromkeys((call.id for call in calls), cut)
    if stored:
        fields["continuation"] = {_NAMESPACE: {"thinking_blocks": stored}}
    try:
        return ProviderResult(**fields)
    except ValidationError as error:
        raise ProtocolError(f"Anthropic response is not a valid result: {error.message}") from None


# ---------------------------------------------------------------------------------------------
# Errors


def is_context_overflow(message: str) -> bool:
    """Whether an Anthropic error message says the prompt does not fit the model's context window
    (such as ``"prompt is too long: 210000 tokens > 200000 maximum"``). Never raises."""
    lowered = message.lower()
    return any(phrase in lowered for phrase in _OVERFLOW_PHRASES)


def _bounded(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    """``text`` on one line, cut to at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def error_details(body: str) -> tuple[str | None, str | None, str]:
    """``(vendor_type, vendor_code, message)`` from the body of an Anthropic error response.

    For ``{"type": "error", "error": {"type": ..., "message": ...}}`` both the vendor type and
    the vendor code are ``error.type`` (Anthropic has no separate code) and the message is
    ``error.message``. Anything else gives ``(None, None, text)``. The message is on one line and
    at most 300 characters. Never raises.

    The codes :class:`AnthropicReader` gives these types: ``overloaded_error`` -> ``overloaded``,
    ``rate_limit_error`` -> ``rate_limit``, ``api_error`` -> ``server_error`` and
    ``timeout_error`` -> ``timeout`` (all retryable); ``invalid_request_error`` whose message
    :func:`is_context_overflow` -> ``context_overflow``; ``authentication_error`` and
    ``permission_error`` -> ``auth``; ``not_found_error`` -> ``model_not_found``; others ->
    ``provider_error``.
    """
    try:
        text = body if isinstance(body, str) else str(body)
        try:
            parsed = loads(text)
        except ProtocolError:
            return None, None, _bounded(text)
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict):
            kind = error.get("type")
            vendor = kind if isinstance(kind, str) and kind else None
            message = error.get("message")
            if isinstance(message, str):
                return vendor, vendor, _bounded(message)
            if vendor is not None:
                return vendor, vendor, _bounded(vendor)
        return None, None, _bounded(text)
    except Exception:  # never raise from an error path
        return None, None, ""


def _classify(vendor_type: str | None, message: str) -> tuple[str, bool]:
    """Our ``(code, retryable)`` for an Anthropic error type and message."""
    if vendor_type == "invalid_request_error" and is_context_overflow(message):
        return "context_overflow", False
    if vendor_type is None:
        return "provider_error", False
    return _ERROR_CODES.get(vendor_type, ("provider_error", False))


def _stream_error(record: Mapping[str, Any]) -> ProviderError:
    error = record.get("error")
    error = error if isinstance(error, dict) else {}
    kind = error.get("type")
    vendor = kind if isinstance(kind, str) and kind else None
    raw_message = error.get("message")
    message = _bounded(raw_message) if isinstance(raw_message, str) else ""
    code, retryable = _classify(vendor, message)
    summary = _bounded(f"Anthropic {vendor or 'error'}: {message or '(no message)'}")
    return ProviderError(
        summary,
        code=code,
        retryable=retryable,
        vendor_type=vendor,
        vendor_code=vendor,
        excerpt=message,
    )
