"""The OpenAI Responses API wire format, sans-IO: request body, stream reader, response reader.

This is the format of ``POST {base}/responses`` as OpenAI defines it (and as servers that copy it
-- vLLM, Ollama's ``/v1``, LM Studio -- speak it). The adapter is stateless on the server side:
every request sends the whole history as ``input`` items with ``"store": false`` and never a
``previous_response_id``, so a conversation lives in trio-agents, not at the vendor.

- :func:`encode_request` turns messages, tools and options into the JSON request body.
- :class:`OpenAIResponsesReader` turns each server-sent event of a streamed response into an
  :class:`~protocols.wire.Increment` for :class:`~protocols.wire.StreamAssembler`.
- :func:`read_response` turns a non-streamed response body into a
  :class:`~protocols.messages.ProviderResult`.
- :func:`error_details` pulls the vendor's error type, code and message out of an error body.

Reasoning items that come with ``encrypted_content`` (asked for with ``think=True``) are kept in
the result's ``continuation`` under ``{"openai_responses": {"reasoning": [...]}}`` and sent back,
unchanged and just before that assistant turn's output, when the message is replayed: with
``store: false`` that is how a reasoning model keeps its reasoning across tool calls.

Readers tolerate event types and fields they do not know (and ``null`` where a field is
optional), but a field they do know with the wrong shape is a
:class:`~protocols.errors.ProtocolError`, never skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._json import dumps, loads
from ..errors import ConfigError, ProtocolError, ProviderError
from ..messages import (
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    ToolDefinition,
    Usage,
)
from ..sse import SSEEvent
from ._common import Written, automatic_cache, classify_status, data_url, label, split_system
from ._stream import (
    NOTHING,
    CallFragment,
    Increment,
    StreamAssembler,
    ignore_after_end,
    response_name,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "NAMESPACE",
    "PATH",
    "RESERVED_KEYS",
    "THINK_EFFORT",
    "OpenAIResponsesReader",
    "encode_request",
    "error_details",
    "read_response",
]

#: The endpoint path, appended to a base URL that already ends in ``/v1``.
PATH: Final = "/responses"

#: OpenAI's own base URL.
DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"

#: Request-body keys :func:`encode_request` owns; ``ProviderOptions.extra`` may not set them
#: (``store``, ``previous_response_id`` and ``conversation`` would make the vendor keep or add
#: history the adapter already sends).
RESERVED_KEYS: Final = frozenset(
    {"model", "input", "tools", "stream", "store", "previous_response_id", "conversation"}
)

#: ``reasoning.effort`` sent for ``think=True``.
THINK_EFFORT: Final = "medium"

#: The key of this adapter's data in ``continuation``.
NAMESPACE: Final = "openai_responses"

#: The most characters of vendor error text kept in a message.
_MESSAGE_LIMIT: Final = 300

#: vendor error code -> (our code, retryable), for errors reported inside a 200 stream or body.
_ERROR_CODES: Final[Mapping[str, tuple[str, bool]]] = {
    "context_length_exceeded": ("context_overflow", False),
    "rate_limit_exceeded": ("rate_limit", True),
    "server_error": ("server_error", True),
}

_INCOMPLETE: Final[Mapping[str, FinishReason]] = {
    "max_output_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}

#: Thinking pieces from different reasoning parts are separated like paragraphs.
_PART_BREAK: Final = "\n\n"


# ---------------------------------------------------------------------------------------------
# Request


def encode_request(
    messages: Sequence[Message],
    *,
    model: str,
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
) -> dict[str, Any]:
    """The JSON request body for ``messages``: strict JSON data, ready to serialise and send.

    The body's dicts and lists are new, but tool parameter schemas, the output schema, stored
    reasoning items and ``extra`` values are the caller's objects, shared rather than copied:
    treat the body as read-only, like the data model.

    Guarantees:

    * ``"store": false`` always, and never ``previous_response_id``: the whole history goes as
      ``input`` items, in order.
    * System messages, wherever they stand, become one ``system`` message item, the first input
      item: their texts in order, joined by a blank line (empty ones left out; see
      ``docs/context.md``). There is none when no message is a system message, and never two;
      ``instructions`` is not sent. A ``user`` message becomes a message item whose content is its
      text as an ``input_text`` part (left out when empty and there are images) then one
      ``input_image`` part per image as a ``data:`` URL (sniffed by
      :func:`~protocols.wire.image_media_type` unless it already is one). An ``assistant`` message
      sends, in order: the reasoning items stored in its ``continuation`` by this adapter, its text
      as an ``output_text`` message item (left out when empty and there are calls), then one
      ``function_call`` item per call (``call_id``, ``name``, ``arguments`` as compact JSON text). A
      ``tool`` message becomes a ``function_call_output`` item (``call_id``, ``output``): ``output``
      is its text, or, when it has images, a list of an ``input_text`` item (left out when the text
      is empty) then one ``input_image`` item per image as for a user message. Thinking text and the
      interrupted mark are never sent.
    * ``tools`` become flat ``function`` tools (``name``, ``description`` unless empty,
      ``parameters``, ``"strict": false`` -- the Responses API is strict by default, which
      refuses most schemas); no ``tools`` key when there are none.
    * ``stream=True`` sends ``"stream": true``; ``stream=False`` sends no ``stream`` key.
    * Options, each only when set: ``max_tokens`` as ``max_output_tokens``; ``temperature``;
      ``top_p``; ``reasoning_effort`` as ``"reasoning": {"effort": ..., "summary": "auto"}``
      with ``"include": ["reasoning.encrypted_content"]`` (so the reasoning can be sent back),
      and ``think=True`` without one the same at ``"medium"``; ``think=False`` sends nothing;
      ``parallel_tool_calls`` when the request has tools; ``tool_choice`` as
      ``"auto"``/``"none"``/``"required"`` or ``{"type": "function", "name": ...}``;
      ``schema`` as ``text.format`` of type ``json_schema`` named ``"output"``; ``cache_key``
      as ``prompt_cache_key`` and ``cache_retention`` as ``prompt_cache_retention``.
      ``cache="auto"`` sends nothing (OpenAI caches a long prompt's prefix by itself);
      ``cache="off"`` and breakpoints by hand raise ``ConfigError``: no way to say either.
      ``options.extra`` is merged last; it may not set a key this function owns
      (:data:`RESERVED_KEYS`) nor one it wrote from an option.

    Raises :class:`~protocols.errors.ConfigError` when ``model`` is empty, when ``stop``,
    ``seed``, ``presence_penalty`` or ``frequency_penalty`` is set (the Responses API has none
    of them: refusing beats dropping them), or when ``extra`` sets a key it may not (the error
    names it and why).
    """
    if not isinstance(model, str) or not model:
        raise ConfigError("the OpenAI Responses request needs a non-empty model name")
    system, others = split_system(messages)
    items: list[dict[str, Any]] = []
    if system is not None:
        items.append({"type": "message", "role": "system", "content": system})
    for message in others:
        _encode_message(message, items)
    body: dict[str, Any] = {"model": model, "input": items, "store": False}
    if tools:
        body["tools"] = [_encode_tool(tool) for tool in tools]
    if stream:
        body["stream"] = True
    if options is not None:
        _encode_options(body, options)
    return body


def _encode_message(message: Message, items: list[dict[str, Any]]) -> None:
    role = message.role
    if role is Role.USER:
        parts: list[dict[str, Any]] = []
        if message.content or not message.images:
            parts.append({"type": "input_text", "text": message.content})
        parts.extend(
            {"type": "input_image", "image_url": data_url(image), "detail": "auto"}
            for image in message.images
        )
        items.append({"type": "message", "role": "user", "content": parts})
    elif role is Role.ASSISTANT:
        items.extend(_stored_reasoning(message.continuation))
        if message.content or not message.calls:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": message.content}],
                }
            )
        items.extend(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": dumps(call.arguments),
            }
            for call in message.calls
        )
    elif role is Role.TOOL:
        output: str | list[dict[str, Any]] = message.content
        if message.images:
            output = [{"type": "input_text", "text": message.content}] if message.content else []
            output.extend(
                {"type": "input_image", "image_url": data_url(image), "detail": "auto"}
                for image in message.images
            )
        items.append(
            {"type": "function_call_output", "call_id": message.tool_call_id, "output": output}
        )
    else:
        raise AssertionError("system messages are merged by split_system")


def _stored_reasoning(continuation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The reasoning items this adapter stored in an assistant message (others' data ignored)."""
    ours = continuation.get(NAMESPACE)
    stored = ours.get("reasoning") if isinstance(ours, dict) else None
    if not isinstance(stored, list):
        return []
    return [item for item in stored if isinstance(item, dict) and item.get("type") == "reasoning"]


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    encoded: dict[str, Any] = {"type": "function", "name": tool.name}
    if tool.description:
        encoded["description"] = tool.description
    encoded["parameters"] = tool.parameters
    encoded["strict"] = False
    return encoded


#: The settings the Responses API has no field for: refused, never dropped.
_NO_SUCH_FIELD: Final = ("stop", "seed", "presence_penalty", "frequency_penalty")


def _encode_options(body: dict[str, Any], options: ProviderOptions) -> None:
    for name in _NO_SUCH_FIELD:
        if getattr(options, name) not in (None, ()):
            raise ConfigError(
                f"the OpenAI Responses API has no {name}: leave it unset (refusing it beats "
                "dropping it)"
            )
    written = Written("OpenAI Responses", body)
    put = written.put
    if options.max_tokens is not None:
        put("max_output_tokens", options.max_tokens, "max_tokens")
    if options.temperature is not None:
        put("temperature", options.temperature, "temperature")
    if options.top_p is not None:
        put("top_p", options.top_p, "top_p")
    effort = options.reasoning_effort
    if effort is not None or options.think:
        source = "think" if effort is None else "reasoning_effort"
        put("reasoning", {"effort": effort or THINK_EFFORT, "summary": "auto"}, source)
        put("include", ["reasoning.encrypted_content"], source)
    if options.parallel_tool_calls is not None and "tools" in body:
        put("parallel_tool_calls", options.parallel_tool_calls, "parallel_tool_calls")
    choice = options.tool_choice
    if choice is not None:
        if choice in ("auto", "none", "required"):
            put("tool_choice", choice, "tool_choice")
        else:
            put("tool_choice", {"type": "function", "name": choice}, "tool_choice")
    if options.schema is not None:
        put(
            "text",
            {"format": {"type": "json_schema", "name": "output", "schema": options.schema}},
            "schema",
        )
    automatic_cache(options, written, key="prompt_cache_key", retention="prompt_cache_retention")
    for key, value in options.extra.items():
        written.refuse(key, RESERVED_KEYS)
        body[key] = value


# ---------------------------------------------------------------------------------------------
# Shape checks


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(
            f"OpenAI Responses {where} must be a JSON object, not {type(value).__name__}"
        )
    return value


def _optional_object(record: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """``record[key]`` as an object (``{}`` when absent or null)."""
    value = record.get(key)
    if value is None:
        return {}
    return _object(value, f"{where}.{key}")


def _optional_str(record: Mapping[str, Any], key: str, where: str) -> str | None:
    value = record.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ProtocolError(
        f"OpenAI Responses {where}.{key} must be a string, not {type(value).__name__}"
    )


def _str(record: Mapping[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise ProtocolError(
            f"OpenAI Responses {where}.{key} must be a string, not {type(value).__name__}"
        )
    return value


def _optional_index(record: Mapping[str, Any], key: str, where: str) -> int:
    """A non-negative integer position (0 when absent or null)."""
    value = record.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(
            f"OpenAI Responses {where}.{key} must be an integer >= 0, not {value!r:.40}"
        )
    return value


def _index(record: Mapping[str, Any], where: str) -> int:
    """The required ``output_index`` of an event about one output item."""
    if record.get("output_index") is None:
        raise ProtocolError(f"OpenAI Responses {where} has no output_index")
    return _optional_index(record, "output_index", where)


def _list(record: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(
            f"OpenAI Responses {where}.{key} must be an array, not {type(value).__name__}"
        )
    return value


def _usage(response: Mapping[str, Any]) -> Usage | None:
    """The response's usage, sanitised; ``None`` when it reported no count at all."""
    usage = _optional_object(response, "usage", "response")
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    total = usage.get("total_tokens")
    if prompt is None and completion is None and total is None:
        return None
    details = _optional_object(usage, "input_tokens_details", "usage")
    spent = _optional_object(usage, "output_tokens_details", "usage")
    return Usage.sanitize(
        prompt=prompt,
        completion=completion,
        total=total,
        cached=details.get("cached_tokens"),
        reasoning=spent.get("reasoning_tokens"),
    )


def _incomplete_finish(response: Mapping[str, Any]) -> FinishReason:
    details = _optional_object(response, "incomplete_details", "response")
    reason = _optional_str(details, "reason", "response.incomplete_details")
    return _INCOMPLETE.get(reason or "", FinishReason.OTHER)


def _summary_texts(item: Mapping[str, Any], where: str) -> list[str]:
    """The texts of a reasoning item's summary parts, then of its reasoning content parts."""
    texts: list[str] = []
    for key in ("summary", "content"):
        for position, raw in enumerate(_list(item, key, where)):
            part = _object(raw, f"{where}.{key}[{position}]")
            if part.get("type") in ("summary_text", "reasoning_text"):
                texts.append(_str(part, "text", f"{where}.{key}[{position}]"))
    return texts


def _kept_reasoning(item: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """A reasoning item as it can be sent back with ``store: false`` (only one that carries
    ``encrypted_content``; unknown fields dropped), else ``None``."""
    encrypted = _optional_str(item, "encrypted_content", where)
    if not encrypted:
        return None
    summary = []
    for position, raw in enumerate(_list(item, "summary", where)):
        part = _object(raw, f"{where}.summary[{position}]")
        if part.get("type") == "summary_text":
            summary.append({"type": "summary_text", "text": _str(part, "text", f"{where}.summary")})
    kept: dict[str, Any] = {"type": "reasoning"}
    item_id = _optional_str(item, "id", where)
    if item_id:
        kept["id"] = item_id
    kept["summary"] = summary
    kept["encrypted_content"] = encrypted
    return kept


# ---------------------------------------------------------------------------------------------
# Errors


def _bounded(text: str) -> str:
    flat = " ".join(text.split())
    return flat[:_MESSAGE_LIMIT]


def _error_fields(record: Mapping[str, Any]) -> tuple[str | None, str | None, str] | None:
    """``(type, code, message)`` of an error object: ``{"error": {...}}``, or the flat
    ``{"type": "error", "code", "message"}`` of an ``error`` event; ``None`` otherwise."""
    error = record.get("error")
    if isinstance(error, dict):
        source: Mapping[str, Any] = error
    elif isinstance(error, str) and error:
        return None, None, _bounded(error)
    elif record.get("type") == "error" or record.get("object") == "error":
        source = record
    else:
        return None
    kind = label(source.get("type"))
    message = source.get("message")
    return (
        None if kind == "error" else kind,
        label(source.get("code")),
        _bounded(message) if isinstance(message, str) else "",
    )


def _classify(vendor_code: str | None, vendor_type: str | None, message: str) -> tuple[str, bool]:
    for name in (vendor_code, vendor_type):
        if name is not None and name in _ERROR_CODES:
            return _ERROR_CODES[name]
    if classify_status(400, message)[0] == "context_overflow":
        return "context_overflow", False
    return "provider_error", False


def _provider_error(details: tuple[str | None, str | None, str], where: str) -> ProviderError:
    vendor_type, vendor_code, message = details
    code, retryable = _classify(vendor_code, vendor_type, message)
    kind = vendor_code or vendor_type or "error"
    return ProviderError(
        f"the provider reported an error {where} ({kind}): {message or 'no message'}",
        code=code,
        retryable=retryable,
        vendor_type=vendor_type,
        vendor_code=vendor_code,
        excerpt=message,
    )


def _failure(response: Mapping[str, Any]) -> ProviderError:
    """The error of a ``failed`` response (its ``error`` object, if any)."""
    error = _optional_object(response, "error", "response")
    details = _error_fields({"error": error}) if error else (None, None, "")
    return _provider_error(details or (None, None, ""), "in a failed response")


def error_details(body: str) -> tuple[str | None, str | None, str]:
    """``(vendor_type, vendor_code, message)`` from an error response body or an excerpt of one.

    Understands ``{"error": {"type", "code", "message"}}`` (integer codes are written out),
    ``{"error": "text"}``, the flat ``{"type": "error", "code", "message"}`` of an ``error``
    event and ``{"detail": "text"}``. Anything else -- truncated or non-JSON text, an unknown
    shape, an error without a message -- gives the text itself as the message. The message is on
    one line and at most 300 characters. Never raises.
    """
    try:
        try:
            parsed: Any = loads(body)
        except (ProtocolError, TypeError):
            parsed = None
        if isinstance(parsed, dict):
            details = _error_fields(parsed)
            if details is None and isinstance(parsed.get("detail"), str):
                details = (None, None, _bounded(parsed["detail"]))
            if details is not None:
                if details[2]:
                    return details
                return details[0], details[1], _bounded(body)
        return None, None, _bounded(body) if isinstance(body, str) else ""
    except Exception:  # never raise from an error path
        return None, None, ""


# ---------------------------------------------------------------------------------------------
# Streamed response


class OpenAIResponsesReader:
    """Reads the server-sent events of one streamed response (use one reader per stream).

    :meth:`read` maps each event by the ``type`` of its JSON data (the SSE event name, which
    mirrors it, is used only when the data has none):

    * ``response.output_text.delta`` and ``response.refusal.delta``: content (returned as a plain
      ``str``, the assembler's shorthand for ``Increment(content=text)``).
    * ``response.reasoning_summary_text.delta`` and ``response.reasoning_text.delta``: thinking.
      A piece of a different part (another ``output_index`` or ``summary_index`` /
      ``content_index``) than the previous piece starts with a blank line, as :func:`read_response`
      joins parts.
    * ``response.output_item.added`` with a ``function_call`` item starts a call: a
      :class:`~protocols.wire.CallFragment` whose ``index`` is the ``output_index``, with the
      item's ``call_id`` and ``name`` (and its ``arguments``, if any).
      ``response.function_call_arguments.delta`` adds a piece of the arguments of the call at its
      ``output_index``. ``response.function_call_arguments.done`` and
      ``response.output_item.done`` bring the whole arguments again: they are used only for a call
      whose pieces never came, and otherwise change nothing.
    * ``response.output_item.done`` with a ``reasoning`` item that carries ``encrypted_content``
      stores it; the increment carries ``continuation={"openai_responses": {"reasoning":
      [...]}}`` with every item stored so far, in output order.
    * ``response.completed``: final (see below); usage (see below); finish ``tool_calls`` when
      the stream started a call, else ``stop``. ``response.incomplete``: final; usage; finish
      ``length`` for ``max_output_tokens``, ``content_filter`` for ``content_filter``, else
      ``other``.
    * After a final event, every event -- more deltas, another ``response.completed``, an
      ``error``, a trailing ``data: [DONE]`` as some compatible servers send, data that is not
      JSON -- gives nothing and raises nothing, unread (the first one other than ``[DONE]`` is
      logged at debug level): what comes after the end never changes the response.
    * ``response.failed`` and ``error`` (also an ``error`` event whose data is plain text) raise
      :class:`~protocols.errors.ProviderError` with the vendor's type and code and at most 300
      characters of its message: ``context_length_exceeded`` (or a message saying the context
      is too long) has the code ``context_overflow``, ``rate_limit_exceeded`` is ``rate_limit``
      and ``server_error`` is ``server_error`` (both retryable), anything else
      ``provider_error``.
    * ``response.created``, ``response.in_progress``, ``response.completed`` and
      ``response.incomplete``: the response's ``model`` and ``id`` as the increment's ``model``
      and ``response_id``, on the first event that has an acceptable one (a non-empty string of
      at most 256 characters; anything else is ignored, never an error), and not again.
    * Every other event type (``response.content_part.added``, ``response.output_text.done``,
      annotations, ...): nothing.

    Usage: ``prompt = input_tokens``, ``completion = output_tokens`` (reasoning tokens included,
    as OpenAI counts them), ``reasoning = output_tokens_details.reasoning_tokens`` (that part of
    the completion), ``total = total_tokens``, ``cached = input_tokens_details.cached_tokens``;
    sanitised, and ``None`` when no count was reported.

    Raises :class:`~protocols.errors.ProtocolError` for data that is not a JSON object or a known
    field of the wrong shape.
    """

    __slots__ = (
        "_calls",
        "_ended",
        "_logged",
        "_model",
        "_reasoning",
        "_response_id",
        "_streamed",
        "_thinking_part",
    )

    def __init__(self) -> None:
        # output_index of every call started, and of those whose arguments arrived in pieces.
        self._calls: set[int] = set()
        self._streamed: set[int] = set()
        # (output_index, part index) of the last thinking piece, to separate parts.
        self._thinking_part: tuple[int, int, int] | None = None
        # Stored reasoning items as (output_index, item), kept in output order.
        self._reasoning: list[tuple[int, dict[str, Any]]] = []
        # The model and response id reported so far.
        self._model: str | None = None
        self._response_id: str | None = None
        # A final event was read (what follows is ignored), and an ignored one was logged.
        self._ended = False
        self._logged = False

    def read(self, event: SSEEvent) -> Increment | str:
        """What ``event`` contributes to the response; see the class docstring."""
        if self._ended:
            data = event.data
            kind = "[DONE]" if data.strip() == "[DONE]" else f"event {event.event!r}"
            self._logged = ignore_after_end("OpenAI Responses", kind, logged=self._logged)
            return NOTHING
        try:
            parsed = loads(event.data)
        except ProtocolError:
            if event.event == "error":  # an error event whose data is plain text
                raise _provider_error((None, None, _bounded(event.data)), "in the stream") from None
            raise
        record = _object(parsed, "stream event")
        kind = _optional_str(record, "type", "stream event") or event.event
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return _str(record, "delta", kind)
        if kind == "response.function_call_arguments.delta":
            index = _index(record, kind)
            self._streamed.add(index)
            return Increment(calls=(CallFragment(index, arguments=_str(record, "delta", kind)),))
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return self._thinking(record, kind)
        if kind == "response.output_item.added":
            return self._item(record, kind, done=False)
        if kind == "response.output_item.done":
            return self._item(record, kind, done=True)
        if kind == "response.function_call_arguments.done":
            index = _index(record, kind)
            arguments = _optional_str(record, "arguments", kind)
            if index in self._streamed or not arguments:
                return NOTHING
            self._streamed.add(index)
            return Increment(calls=(CallFragment(index, arguments=arguments),))
        if kind == "response.completed":
            response = _optional_object(record, "response", kind)
            finish = FinishReason.TOOL_CALLS if self._calls else FinishReason.STOP
            model, response_id = self._names(response)
            usage = _usage(response)
            self._ended = True
            return Increment(
                usage=usage,
                finish=finish,
                terminal=True,
                final=True,
                model=model,
                response_id=response_id,
            )
        if kind == "response.incomplete":
            response = _optional_object(record, "response", kind)
            model, response_id = self._names(response)
            finish, usage = _incomplete_finish(response), _usage(response)
            self._ended = True
            return Increment(
                usage=usage,
                finish=finish,
                terminal=True,
                final=True,
                model=model,
                response_id=response_id,
            )
        if kind in ("response.created", "response.in_progress"):
            response = _optional_object(record, "response", kind)
            model, response_id = self._names(response)
            if model is None and response_id is None:
                return NOTHING
            return Increment(model=model, response_id=response_id)
        if kind == "response.failed":
            raise _failure(_optional_object(record, "response", kind))
        if kind == "error":
            details = _error_fields(record) or (None, None, "")
            raise _provider_error(details, "in the stream")
        return NOTHING

    def _names(self, response: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """The response's model and id, those not reported yet (``None`` for the others)."""
        model = response_id = None
        if self._model is None:
            model = self._model = response_name(response.get("model"))
        if self._response_id is None:
            response_id = self._response_id = response_name(response.get("id"))
        return model, response_id

    def _thinking(self, record: Mapping[str, Any], kind: str) -> Increment:
        text = _str(record, "delta", kind)
        if not text:
            return NOTHING
        summary = kind == "response.reasoning_summary_text.delta"
        part = (
            _optional_index(record, "output_index", kind),
            int(summary),
            _optional_index(record, "summary_index" if summary else "content_index", kind),
        )
        if self._thinking_part is not None and self._thinking_part != part:
            text = _PART_BREAK + text
        self._thinking_part = part
        return Increment(thinking=text)

    def _item(self, record: Mapping[str, Any], kind: str, *, done: bool) -> Increment:
        item = _object(record.get("item"), f"{kind}.item")
        item_type = item.get("type")
        where = f"{kind} {item_type} item"
        if item_type == "function_call":
            index = _index(record, kind)
            call_id = _optional_str(item, "call_id", where) or None
            name = _optional_str(item, "name", where) or None
            arguments = _optional_str(item, "arguments", where) or ""
            if index in self._streamed:
                arguments = ""
            elif arguments:
                self._streamed.add(index)
            if done and index in self._calls and not arguments:
                return NOTHING
            self._calls.add(index)
            return Increment(
                calls=(CallFragment(index, id=call_id, name=name, arguments=arguments),)
            )
        if item_type == "reasoning" and done:
            kept = _kept_reasoning(item, where)
            if kept is None:
                return NOTHING
            index = _index(record, kind)
            stored = self._reasoning
            stored.append((index, kept))
            stored.sort(key=lambda entry: entry[0])
            return Increment(continuation={NAMESPACE: {"reasoning": [kept for _, kept in stored]}})
        return NOTHING


# ---------------------------------------------------------------------------------------------
# Non-streamed response


def read_response(body: Any, *, split: bool = True) -> ProviderResult:
    """The result of a non-streamed response, given its parsed JSON body (or its text).

    Guarantees the same result a stream of the same response gives: content from the
    ``output_text`` and ``refusal`` parts of message items (inline ``<think>`` spans split out
    unless ``split`` is false); thinking from reasoning items' summary and reasoning texts, parts
    joined by a blank line; reasoning items with ``encrypted_content`` kept in ``continuation``;
    ``function_call`` items as calls in output order with their ``call_id`` (minted when missing)
    and arguments parsed strictly (empty text is ``{}``; anything but a JSON object is refused);
    the finish reason (``incomplete`` as the stream reader maps it, else ``tool_calls`` when there
    are calls, else ``stop``), usage, and the response's ``model`` and ``id`` (as the stream
    reader takes them).

    Raises :class:`~protocols.errors.ProviderError` for an error body or a ``failed`` response,
    and :class:`~protocols.errors.ProtocolError` for a body of the wrong shape (not an object, a
    malformed item, a call without a name or two calls with one id).
    """
    if isinstance(body, str | bytes | bytearray):
        body = loads(body)
    response = _object(body, "response")
    status = _optional_str(response, "status", "response")
    if status == "failed":
        raise _failure(response)
    details = _error_fields(response)
    if details is not None:
        raise _provider_error(details, "instead of a response")
    content: list[str] = []
    thinking: list[str] = []
    calls: list[CallFragment] = []
    kept: list[dict[str, Any]] = []
    for position, raw in enumerate(_list(response, "output", "response")):
        where = f"response.output[{position}]"
        item = _object(raw, where)
        item_type = item.get("type")
        if item_type == "message":
            for number, raw_part in enumerate(_list(item, "content", where)):
                part = _object(raw_part, f"{where}.content[{number}]")
                if part.get("type") == "output_text":
                    content.append(_str(part, "text", f"{where}.content[{number}]"))
                elif part.get("type") == "refusal":
                    content.append(_str(part, "refusal", f"{where}.content[{number}]"))
        elif item_type == "reasoning":
            thinking.extend(text for text in _summary_texts(item, where) if text)
            stored = _kept_reasoning(item, where)
            if stored is not None:
                kept.append(stored)
        elif item_type == "function_call":
            calls.append(
                CallFragment(
                    index=position,
                    id=_optional_str(item, "call_id", where) or None,
                    name=_optional_str(item, "name", where) or None,
                    arguments=_optional_str(item, "arguments", where) or "",
                )
            )
    finish = _incomplete_finish(response) if status == "incomplete" else None
    assembler = StreamAssembler(split=split)
    assembler.add(
        Increment(
            content="".join(content),
            thinking=_PART_BREAK.join(thinking),
            calls=tuple(calls),
            usage=_usage(response),
            finish=finish,
            terminal=True,
            continuation={NAMESPACE: {"reasoning": kept}} if kept else None,
            model=response_name(response.get("model")),
            response_id=response_name(response.get("id")),
        )
    )
    assembler.flush()
    return assembler.result()
