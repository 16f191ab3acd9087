"""The OpenAI Chat Completions wire format, sans-IO: request body, stream reader, response reader.

This is the format of ``POST {base}/chat/completions`` as OpenAI defines it and as most
"OpenAI-compatible" servers (vLLM, llama.cpp, Ollama's ``/v1``, LM Studio, OpenRouter, DeepSeek,
Groq, ...) speak it. Everything here is a pure function of its inputs:

- :func:`encode_request` turns messages, tools and options into the JSON request body.
- :class:`OpenAIChatReader` turns each server-sent event of a streamed response into an
  :class:`~protocols.wire.Increment` for :class:`~protocols.wire.StreamAssembler`.
- :func:`read_response` turns a non-streamed response body into a
  :class:`~protocols.messages.ProviderResult`.
- :func:`error_details` pulls the vendor's error type, code and message out of an error body.

Readers tolerate fields they do not know (and ``null`` where a field is optional), but a field
they do know with the wrong shape is a :class:`~protocols.errors.ProtocolError`, never skipped.
The request encoder lives in :mod:`protocols.wire._openai_chat_request` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NoReturn

from .._json import dumps, loads, loads_object_unchecked, scan_string, string_token
from ..accounting import Cost
from ..errors import ProtocolError, ProviderError, ValidationError
from ..messages import FinishReason, ProviderResult, Usage
from ..sse import SSEEvent
from ._common import label
from ._openai_chat_request import (
    MAX_TOKENS_KEYS,
    RESERVED_KEYS,
    THINK_EFFORT,
    TOOL_IMAGES_LABEL,
    MaxTokensKey,
    encode_request,
)
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
    "MAX_TOKENS_KEYS",
    "PATH",
    "RESERVED_KEYS",
    "THINK_EFFORT",
    "TOOL_IMAGES_LABEL",
    "MaxTokensKey",
    "OpenAIChatReader",
    "encode_request",
    "error_details",
    "read_response",
]

#: The endpoint path, appended to a base URL that already ends in ``/v1``.
PATH: Final = "/chat/completions"

#: OpenAI's own base URL. Compatible servers have their own (``http://localhost:8000/v1``, ...).
DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"


#: The most characters of vendor error text kept in a message.
_MESSAGE_LIMIT: Final = 300

_FINISH: Final[Mapping[str, FinishReason]] = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
}


# ---------------------------------------------------------------------------------------------
# Shape checks shared by the readers


def _field(record: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``record[key]``, or ``None`` when absent or null; ProtocolError when of another type."""
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):  # no field here is a bool
        raise ProtocolError(
            f"OpenAI chat {where}.{key} must be {_describe(kind)}, not {type(value).__name__}"
        )
    return value


def _describe(kind: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _text(record: Mapping[str, Any], key: str, where: str) -> str:
    value: str | None = _field(record, key, str, where)
    return value or ""


def _finish(record: Mapping[str, Any], where: str) -> FinishReason | None:
    """The normalised ``finish_reason`` (``None`` when absent, null or empty)."""
    reason: str | None = _field(record, "finish_reason", str, where)
    if not reason:
        return None
    return _FINISH.get(reason, FinishReason.OTHER)


def _reasoning(record: Mapping[str, Any], where: str) -> str:
    # Servers name it either way; some send both with the same text, so never add them up.
    return _text(record, "reasoning_content", where) or _text(record, "reasoning", where)


def _usage(record: Mapping[str, Any]) -> Usage | None:
    usage: dict[str, Any] | None = _field(record, "usage", dict, "record")
    if usage is None:
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    total = usage.get("total_tokens")
    if prompt is None and completion is None and total is None:
        return None  # an empty usage object reports nothing: usage stays unknown
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")  # DeepSeek's name for it
    spent = usage.get("completion_tokens_details")
    reasoning = spent.get("reasoning_tokens") if isinstance(spent, dict) else None
    return Usage.sanitize(
        prompt=prompt,
        completion=completion,
        total=total,
        cached=cached,
        reasoning=reasoning,
        # OpenRouter reports what the call cost, in USD (its credits): kept as reported.
        cost=Cost.reported(usage.get("cost")),
    )


def _first_choice(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The choice with index 0 (a choice without an index counts as 0); ``None`` if there is
    none. Only one completion is ever asked for, so other choices are ignored."""
    choices: list[Any] | None = _field(record, "choices", list, "record")
    for choice in choices or ():
        if not isinstance(choice, dict):
            raise ProtocolError(
                f"OpenAI chat record.choices items must be objects, not {type(choice).__name__}"
            )
        if choice.get("index") in (0, None):
            return choice
    return None


def _argument_text(arguments: dict[str, Any]) -> str:
    """Arguments sent as an object (some servers do) as JSON text; ProtocolError if not JSON."""
    try:
        return dumps(arguments)
    except ValidationError as error:
        raise ProtocolError(f"tool call arguments are not strict JSON: {error.message}") from None


def _bounded(text: str) -> str:
    return text.strip()[:_MESSAGE_LIMIT]


def _error_of(record: Mapping[str, Any]) -> tuple[str | None, str | None, str] | None:
    """(type, code, message) when ``record`` is an error record, else ``None``.

    Recognised: ``{"error": {...}}`` (OpenAI and most servers), ``{"error": "text"}``, and the
    flat ``{"object": "error", "message": ...}`` some servers send.
    """
    error = record.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return (
            label(error.get("type")),
            label(error.get("code")),
            _bounded(message) if isinstance(message, str) else "",
        )
    if isinstance(error, str) and error:
        return None, None, _bounded(error)
    if record.get("object") == "error":
        message = record.get("message")
        return (
            label(record.get("type")),
            label(record.get("code")),
            _bounded(message) if isinstance(message, str) else "",
        )
    return None


def _raise_error(details: tuple[str | None, str | None, str], where: str) -> NoReturn:
    vendor_type, vendor_code, message = details
    kind = vendor_type or vendor_code or "error"
    raise ProviderError(
        f"the provider reported an error {where} ({kind}): {message or 'no message'}",
        vendor_type=vendor_type,
        vendor_code=vendor_code,
        excerpt=message,
    )


# ---------------------------------------------------------------------------------------------
# Streamed response


#: Templates learned freely per stream; after that, only once the last one served this many.
_TEMPLATES = 3
_HITS_TO_RELEARN = 32
_BLANKS = " \t\n\r"


def _plain_content(data: str) -> tuple[str, dict[str, Any]] | None:
    """The text of the commonest stream record and the record, or ``None`` when the general
    reader must judge.

    The commonest record is one choice (index 0) whose delta holds non-empty ``content`` and at
    most a ``role``, with no finish reason, usage or error. For every record this accepts, the
    general path would give ``Increment(content=text)`` (with the record's model and id while the
    reader still looks for them); strictness is kept by proving, cheaply,
    that the record has no duplicate keys (see :func:`protocols._json.loads_object_unchecked`):
    with exactly three objects (record, choice, delta) and one array (choices), all keys are
    known, and the colons of the text must equal those keys plus the colons inside the strings
    (escapes excluded, so a string's colons in the text are its colons once parsed).
    """
    if data.count("{") != 3 or data.count("[") != 1 or "\\u" in data:
        return None
    record = loads_object_unchecked(data)
    if record is None:
        return None
    choices = record.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if (
        type(choice) is not dict
        or choice.get("finish_reason") is not None
        or choice.get("index") not in (0, None)
    ):
        return None
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    content = delta.get("content")
    if type(content) is not str or not content:
        return None
    if len(delta) != 1 and not (len(delta) == 2 and "role" in delta):
        return None
    if "error" in record or record.get("usage") is not None or record.get("object") == "error":
        return None
    keys = len(record) + len(choice) + len(delta)
    colons = data.count(":")
    if colons != keys and colons != keys + _string_colons(record, choice, delta):
        return None
    return content, record


def _string_colons(*objects: dict[str, Any]) -> int:
    """Colons inside the keys and string values of ``objects``."""
    total = 0
    for item in objects:
        for key, value in item.items():
            total += key.count(":")
            if type(value) is str:
                total += value.count(":")
    return total


#: What ``data: [DONE]`` contributes: the end of the response.
_DONE: Final = Increment(terminal=True, final=True)


class OpenAIChatReader:
    """Reads the server-sent events of one streamed response (use one reader per stream).

    :meth:`read` guarantees, for each event:

    * ``data: [DONE]`` gives a final increment (terminal too) with nothing else. It ends the
      response: every event after it -- another chunk, a usage chunk, an error record, data that
      is not JSON, another ``[DONE]`` -- gives nothing and raises nothing, unread (the first one
      other than ``[DONE]`` is logged at debug level), so what comes after the end never changes
      the response.
    * ``delta.content`` (and ``delta.refusal``, a model's refusal text) is content, as sent: it may
      hold inline ``<think>`` tags for the assembler to split. ``delta.reasoning_content`` or, when
      that is empty, ``delta.reasoning`` is native thinking.
    * ``delta.tool_calls`` items become :class:`~protocols.wire.CallFragment` values. The
      fragment ``index`` is the reader's own numbering of calls in order of first appearance: it
      follows the wire ``index``, but a fragment that brings a new id at an index that already
      has a different id starts a new call (some servers number every call 0), and a fragment
      without an index belongs to the call with its id, or else to the previous fragment's call.
      Ids and names may arrive late or repeatedly; arguments are passed on as text (an object
      sent in place of text is written out as compact JSON).
    * A non-empty ``finish_reason`` is normalised (``stop``, ``length``, ``tool_calls`` and
      ``function_call``, ``content_filter``, anything else ``other``) and makes the increment
      terminal but not final: with ``stream_options.include_usage`` a usage-only chunk follows
      it, then ``[DONE]``, so everything up to ``[DONE]`` is still read (a stream that ends
      after a finish reason without ``[DONE]`` is complete all the same).
    * A top-level ``usage`` object (normally in a last chunk with no choices) becomes
      :class:`~protocols.messages.Usage`, sanitised (one without any count is no report: usage
      stays unknown, ``None``, as when a server never sends usage);
      ``prompt_tokens_details.cached_tokens`` is the cached part and
      ``completion_tokens_details.reasoning_tokens`` the reasoning part; a ``usage.cost``
      (OpenRouter's, in USD) is the usage's ``reported``
      :class:`~protocols.accounting.Cost` (a cost that is not a finite number >= 0 is no
      report).
    * Only the choice with index 0 is read. Unknown fields, ``null`` fields, missing or empty
      ``choices`` are fine; a record that contributes nothing gives an empty increment.
    * The record's top-level ``model`` and ``id`` (every chunk repeats them) are reported as
      ``model`` and ``response_id`` on the increment of the first record that has an acceptable
      one (see :func:`~protocols.wire._stream.response_name`; anything else is ignored, never an
      error), and not again: the assembler keeps the first.

    Raises :class:`~protocols.errors.ProviderError` for an error record (the vendor's type and
    code, and at most 300 characters of its message), and
    :class:`~protocols.errors.ProtocolError` for data that is not JSON, not an object, or has a
    known field of the wrong shape.
    """

    __slots__ = (
        "_ended",
        "_hits",
        "_id_of_slot",
        "_last_slot",
        "_learned",
        "_logged",
        "_model",
        "_prefix",
        "_response_id",
        "_slot_of_id",
        "_slot_of_wire",
        "_slots",
        "_suffix",
        "_unnamed",
    )

    def __init__(self) -> None:
        # The plain-text record template (see _template_content): text before and after the
        # content string, how many templates were learned and how many records matched the last.
        self._prefix: str | None = None
        self._suffix = ""
        self._learned = 0
        self._hits = 0
        # Calls are numbered 0, 1, ... in order of first appearance ("slots").
        self._slots = 0
        self._slot_of_wire: dict[int, int] = {}
        self._id_of_slot: dict[int, str] = {}
        self._slot_of_id: dict[str, int] = {}
        self._last_slot: int | None = None
        # The model and response id reported so far; ``_unnamed`` while either is missing. (A
        # learned template's records all name what the record it was learned from named.)
        self._model: str | None = None
        self._response_id: str | None = None
        self._unnamed = True
        # [DONE] was read (what follows is ignored), and an ignored event was logged.
        self._ended = False
        self._logged = False

    def read(self, event: SSEEvent) -> Increment | str:
        """What ``event`` contributes to the response; see the class docstring. A record that
        carries only answer text gives that text as a ``str`` (``Increment(content=text)``)."""
        data = event.data
        if self._ended:
            kind = "[DONE]" if data.strip() == "[DONE]" else f"event {event.event!r}"
            self._logged = ignore_after_end("OpenAI chat", kind, logged=self._logged)
            return NOTHING
        if event.event == "message":
            prefix = self._prefix
            if prefix is not None and data.startswith(prefix) and data.endswith(self._suffix):
                content = string_token(data, len(prefix), len(data) - len(self._suffix))
                if content:
                    self._hits += 1
                    return content
            plain = _plain_content(data)
            if plain is not None:
                content, record = plain
                if self._learned < _TEMPLATES or self._hits >= _HITS_TO_RELEARN:
                    self._learn(data, content)
                if self._unnamed:
                    model, response_id = self._names(record)
                    if model is not None or response_id is not None:
                        return Increment(content=content, model=model, response_id=response_id)
                return content
        return self._read_general(event)

    def _names(self, record: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """The record's model and id, those not reported yet (``None`` for the others)."""
        model = response_id = None
        if self._model is None:
            model = self._model = response_name(record.get("model"))
        if self._response_id is None:
            response_id = self._response_id = response_name(record.get("id"))
        self._unnamed = self._model is None or self._response_id is None
        return model, response_id

    def _learn(self, data: str, content: str) -> None:
        """Take ``data``, a plain text record with ``content``, as the template of the records
        that follow: most servers send every text record of a stream as the same text around
        a different content string.

        Sound by construction: a JSON string token is self-delimiting, so a record that is the
        template's prefix, then one whole valid string token, then its suffix, parses to the
        template's structure with that string as the content. The template is taken only when a
        probe -- the prefix, a different string, the suffix -- is itself accepted by
        :func:`_plain_content` (so it has no duplicate keys) with the probe string as its
        content (so the slot is the delta's content).
        """
        self._learned += 1
        self._hits = 0
        start = data.rfind('"content"')
        if start < 0:
            return
        at = start + len('"content"')
        while at < len(data) and data[at] in _BLANKS:
            at += 1
        if data[at : at + 1] != ":":
            return
        at += 1
        while at < len(data) and data[at] in _BLANKS:
            at += 1
        scanned = scan_string(data, at)
        if scanned is None or scanned[0] != content:
            return
        prefix, suffix = data[:at], data[scanned[1] :]
        probe = "#" if content != "#" else "%"
        plain = _plain_content(f'{prefix}"{probe}"{suffix}')
        if plain is None or plain[0] != probe:
            return
        self._prefix, self._suffix = prefix, suffix

    def _read_general(self, event: SSEEvent) -> Increment:
        """:meth:`read` without the fast path for plain text records."""
        data = event.data
        if data.strip() == "[DONE]":
            self._ended = True
            return _DONE
        if event.event == "error":  # some servers name the event instead of the record
            _raise_error(error_details(data), "in the stream")
        record = loads(data)
        if not isinstance(record, dict):
            raise ProtocolError(
                f"OpenAI chat stream record must be a JSON object, not {type(record).__name__}"
            )
        details = _error_of(record)
        if details is not None:
            _raise_error(details, "in the stream")
        usage = _usage(record)
        model = response_id = None
        if self._unnamed:
            model, response_id = self._names(record)
        choice = _first_choice(record)
        if choice is None:
            if usage is None and model is None and response_id is None:
                return NOTHING
            return Increment(usage=usage, model=model, response_id=response_id)
        delta: dict[str, Any] = _field(choice, "delta", dict, "choice") or {}
        content = _text(delta, "content", "delta")
        refusal = _text(delta, "refusal", "delta")
        if refusal:
            content += refusal
        thinking = _reasoning(delta, "delta")
        calls: tuple[CallFragment, ...] = ()
        raw_calls: list[Any] | None = _field(delta, "tool_calls", list, "delta")
        if raw_calls:
            calls = tuple(self._fragment(item) for item in raw_calls)
        finish = _finish(choice, "choice")
        if not (content or thinking or calls or usage or finish or model or response_id):
            return NOTHING
        return Increment(
            content=content,
            thinking=thinking,
            calls=calls,
            usage=usage,
            finish=finish,
            terminal=finish is not None,
            model=model,
            response_id=response_id,
        )

    def _fragment(self, item: Any) -> CallFragment:
        if not isinstance(item, dict):
            raise ProtocolError(
                f"OpenAI chat delta.tool_calls items must be objects, not {type(item).__name__}"
            )
        wire_index: int | None = _field(item, "index", int, "tool call")
        if wire_index is not None and wire_index < 0:
            raise ProtocolError(f"OpenAI chat tool call index must be >= 0, not {wire_index}")
        call_id: str | None = _field(item, "id", str, "tool call") or None
        function: dict[str, Any] = _field(item, "function", dict, "tool call") or {}
        name: str | None = _field(function, "name", str, "tool call function") or None
        arguments: str | dict[str, Any] | None = _field(
            function, "arguments", (str, dict), "tool call function"
        )
        if isinstance(arguments, dict):
            arguments = _argument_text(arguments)
        slot = self._slot(wire_index, call_id)
        return CallFragment(index=slot, id=call_id, name=name, arguments=arguments or "")

    def _slot(self, wire_index: int | None, call_id: str | None) -> int:
        """The call a fragment belongs to (see the class docstring)."""
        if wire_index is not None:
            slot = self._slot_of_wire.get(wire_index)
            known = self._id_of_slot.get(slot) if slot is not None else None
            if slot is None or (call_id and known is not None and known != call_id):
                slot = self._slot_of_id.get(call_id) if call_id else None
                if slot is None:
                    slot = self._new_slot()
                self._slot_of_wire[wire_index] = slot
        elif call_id:
            slot = self._slot_of_id.get(call_id)
            if slot is None:
                slot = self._new_slot()
        else:
            slot = self._last_slot if self._last_slot is not None else self._new_slot()
        if call_id and slot not in self._id_of_slot:
            self._id_of_slot[slot] = call_id
            self._slot_of_id.setdefault(call_id, slot)
        self._last_slot = slot
        return slot

    def _new_slot(self) -> int:
        slot = self._slots
        self._slots += 1
        return slot


# ---------------------------------------------------------------------------------------------
# Non-streamed response


def read_response(body: Any, *, split: bool = True) -> ProviderResult:
    """The result of a non-streamed response, given its parsed JSON body.

    Guarantees the same result a stream of the same response gives: content (inline ``<think>``
    spans split out into thinking unless ``split`` is false; a refusal counts as content),
    native thinking from ``reasoning_content`` or ``reasoning``, tool calls in order with their
    arguments parsed strictly (an empty text is ``{}``; anything that is not a JSON object is
    refused) and ids kept as sent (minted with :func:`~protocols.messages.new_id` when missing),
    the body's ``model`` and ``id`` (as the stream reader takes them), the normalised finish
    reason (defaulting to ``tool_calls`` when there are calls, else ``stop``) and usage. Only the
    choice with index 0 is read.

    Raises :class:`~protocols.errors.ProviderError` for an error body and
    :class:`~protocols.errors.ProtocolError` for a body of the wrong shape (not an object, no
    choice, a malformed call, two calls with one id).
    """
    if not isinstance(body, dict):
        raise ProtocolError(
            f"OpenAI chat response must be a JSON object, not {type(body).__name__}"
        )
    details = _error_of(body)
    if details is not None:
        _raise_error(details, "instead of a response")
    choice = _first_choice(body)
    if choice is None:
        raise ProtocolError("OpenAI chat response has no choice with index 0")
    message: dict[str, Any] = _field(choice, "message", dict, "choice") or {}
    raw_calls: list[Any] = _field(message, "tool_calls", list, "message") or []
    calls: list[CallFragment] = []
    for index, item in enumerate(raw_calls):
        if not isinstance(item, dict):
            raise ProtocolError(
                f"OpenAI chat message.tool_calls items must be objects, not {type(item).__name__}"
            )
        function: dict[str, Any] = _field(item, "function", dict, "tool call") or {}
        arguments: str | dict[str, Any] | None = _field(
            function, "arguments", (str, dict), "tool call function"
        )
        calls.append(
            CallFragment(
                index=index,
                id=_field(item, "id", str, "tool call") or None,
                name=_field(function, "name", str, "tool call function") or None,
                arguments=(
                    _argument_text(arguments) if isinstance(arguments, dict) else arguments or ""
                ),
            )
        )
    assembler = StreamAssembler(split=split)
    assembler.add(
        Increment(
            content=_text(message, "content", "message") + _text(message, "refusal", "message"),
            thinking=_reasoning(message, "message"),
            calls=tuple(calls),
            usage=_usage(body),
            finish=_finish(choice, "choice"),
            terminal=True,
            model=response_name(body.get("model")),
            response_id=response_name(body.get("id")),
        )
    )
    assembler.flush()
    return assembler.result()


# ---------------------------------------------------------------------------------------------
# Error bodies


def error_details(body: str) -> tuple[str | None, str | None, str]:
    """``(vendor_type, vendor_code, message)`` from an error response body or an excerpt of one.

    Understands ``{"error": {"type", "code", "message"}}`` (integer codes are written out),
    ``{"error": "text"}``, the flat ``{"object": "error", "message", "type", "code"}`` and
    ``{"detail": "text"}``. Anything else -- truncated or non-JSON text, an unknown shape, an
    error without a message -- gives the text itself as the message. The message is stripped and
    at most 300 characters. Never raises.
    """
    try:
        parsed: Any = loads(body)
    except (ProtocolError, TypeError):
        parsed = None
    if isinstance(parsed, dict):
        details = _error_of(parsed)
        if details is None and isinstance(parsed.get("detail"), str):
            details = (None, None, _bounded(parsed["detail"]))
        if details is not None:
            if details[2]:
                return details
            return details[0], details[1], _bounded(body)
    return None, None, _bounded(body) if isinstance(body, str) else ""
