"""Google's Gemini API wire format (``generateContent`` / ``streamGenerateContent``), sans-IO:
the request body, the stream reader, the whole-response reader and error bodies.

What this module guarantees:

* :func:`encode_request` builds the JSON body of ``POST {base}/v1beta/models/{model}:
  streamGenerateContent?alt=sse`` (or ``:generateContent``) from the data model, or raises
  :class:`~protocols.errors.ConfigError` for a request Gemini cannot express. The model is not
  in the body: it is in the path (:func:`model_path`). It never mutates its inputs; the body
  shares nested JSON values (tool arguments, schemas, ``extra`` values) with them, so treat it
  as read-only.
* :class:`GeminiReader` turns each server-sent event of one stream (each a whole
  ``GenerateContentResponse``) into an :class:`~protocols.wire.Increment`; the assembler folds
  those into a :class:`~protocols.messages.ProviderResult` equal to what :func:`read_response`
  gives for the same answer sent whole.
* Thought signatures -- opaque tokens Gemini puts on parts of its answer, which it wants back
  exactly where they were when the history is sent again (Gemini 3 refuses a function-call
  turn without them) -- are kept in the result's ``continuation`` under
  ``{"gemini": {"parts": [...]}}`` and put back by :func:`encode_request` on the same parts
  when that assistant message is replayed (see :func:`encode_request`).
* Readers tolerate fields and part kinds they do not know; a record that is not JSON, or whose
  known fields have the wrong shape, raises :class:`~protocols.errors.ProtocolError`; an error
  record raises :class:`~protocols.errors.ProviderError`.

The request encoder lives in :mod:`protocols.wire._gemini_request` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .._json import dumps, loads, scan_string, string_token
from ..accounting import sanitize_count
from ..errors import ProtocolError, ProviderError
from ..messages import FinishReason, ProviderResult, Usage
from ..sse import SSEEvent
from ._common import label
from ._gemini_request import MAX_STOP, NAMESPACE, THINKING_BUDGETS, encode_request, model_path
from ._stream import CallFragment, Increment, StreamAssembler, response_name

__all__ = [
    "API_VERSION",
    "DEFAULT_BASE_URL",
    "MAX_STOP",
    "NAMESPACE",
    "THINKING_BUDGETS",
    "GeminiReader",
    "encode_request",
    "error_details",
    "is_context_overflow",
    "model_path",
    "read_response",
]

#: Where Google serves the Gemini API (the Developer API, keyed by ``x-goog-api-key``).
DEFAULT_BASE_URL: Final = "https://generativelanguage.googleapis.com"
#: The API version in the path.
API_VERSION: Final = "v1beta"
#: How many plain text record templates a stream may learn (see GeminiReader._learn).
_TEMPLATES: Final = 8
_BLANKS: Final = " \t\n\r"
#: The longest error message built from vendor text (characters).
_MESSAGE_LIMIT: Final = 300

_FINISH: Final[Mapping[str, FinishReason]] = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishReason.CONTENT_FILTER,
    "IMAGE_PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "IMAGE_RECITATION": FinishReason.CONTENT_FILTER,
}

#: Google RPC status -> (our code, retryable), for errors inside a stream or a 200 body.
_STATUS_CODES: Final[Mapping[str, tuple[str, bool]]] = {
    "RESOURCE_EXHAUSTED": ("rate_limit", True),
    "UNAVAILABLE": ("overloaded", True),
    "INTERNAL": ("server_error", True),
    "DEADLINE_EXCEEDED": ("timeout", True),
    "UNAUTHENTICATED": ("auth", False),
    "PERMISSION_DENIED": ("auth", False),
    "NOT_FOUND": ("model_not_found", False),
    "INVALID_ARGUMENT": ("bad_request", False),
    "FAILED_PRECONDITION": ("bad_request", False),
}

#: Phrases (lowercase) of Gemini messages saying the prompt does not fit the context window.
_OVERFLOW_PHRASES: Final = (
    "exceeds the maximum number of tokens",
    "input token count",
    "context window",
    "too long",
)


# ---------------------------------------------------------------------------------------------
# Shape checks


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"Gemini {what} is not a JSON object")
    return value


def _optional_object(record: Mapping[str, Any], key: str, what: str) -> dict[str, Any]:
    value = record.get(key)
    return {} if value is None else _object(value, f"{what}.{key}")


def _optional_list(record: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"Gemini {what}.{key} is not a list")
    return value


def _optional_str(record: Mapping[str, Any], key: str, what: str) -> str | None:
    value = record.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ProtocolError(f"Gemini {what}.{key} is not a string")


def _bounded(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _usage(metadata: Mapping[str, Any]) -> Usage | None:
    """Gemini's ``usageMetadata`` as our usage (``None`` when it reports no count).

    Gemini's ``candidatesTokenCount`` leaves out the thinking (``thoughtsTokenCount``), which
    our ``completion`` includes; ``toolUsePromptTokenCount`` is prompt too."""
    keys = ("promptTokenCount", "candidatesTokenCount", "totalTokenCount", "thoughtsTokenCount")
    if all(metadata.get(key) is None for key in keys):
        return None
    thoughts = metadata.get("thoughtsTokenCount")
    cached = metadata.get("cachedContentTokenCount")
    prompt = _count(metadata.get("promptTokenCount")) + _count(
        metadata.get("toolUsePromptTokenCount")
    )
    completion = _count(metadata.get("candidatesTokenCount")) + _count(thoughts)
    return Usage.sanitize(
        prompt=prompt,
        completion=completion,
        total=metadata.get("totalTokenCount"),
        cached=None if cached is None else min(_count(cached), prompt),
        reasoning=None if thoughts is None else _count(thoughts),
    )


_count = sanitize_count


# ---------------------------------------------------------------------------------------------
# Reading responses


class GeminiReader:
    """Reads the server-sent events of one ``streamGenerateContent?alt=sse`` response (use one
    reader per stream). Every event is a whole ``GenerateContentResponse``; :meth:`read` maps it:

    * Of ``candidates``, only the first (index 0) is read: the encoder never asks for more.
      Its ``content.parts``, in order: a ``text`` part is answer text, or thinking when it has
      ``"thought": true``; a ``functionCall`` part is a whole call (:class:`CallFragment` with
      the next call index, its ``name``, its ``id`` when Gemini gives one -- else the assembler
      mints one -- and its ``args`` as JSON text; missing ``args`` are ``{}``). Other part
      kinds (code execution, inline data, ...) are ignored.
    * A part's ``thoughtSignature`` is stored: for a text part, with the span of the content
      it covers; for a thought part, with its text; for a call, with the call's index. A call
      with Gemini's own ``id`` is stored with it, so that only ids Gemini gave are sent back.
      The increment then carries ``continuation={"gemini": {"parts": [...]}}`` with every
      record so far, in order.
    * ``finishReason``: ``STOP`` is ``stop`` -- ``tool_calls`` when the answer has calls --;
      ``MAX_TOKENS`` is ``length``; ``SAFETY``, ``RECITATION``, ``BLOCKLIST``,
      ``PROHIBITED_CONTENT``, ``SPII`` and the image ones are ``content_filter``; anything
      else (``MALFORMED_FUNCTION_CALL``, ``OTHER``, ...) is ``other``. A finish reason is
      terminal (usage may still follow). ``promptFeedback.blockReason`` (the prompt itself was
      blocked: no candidate) is ``content_filter``, terminal.
    * ``usageMetadata`` (each report replaces the last): ``prompt = promptTokenCount +
      toolUsePromptTokenCount``, ``completion = candidatesTokenCount + thoughtsTokenCount``
      (Gemini counts the thinking apart; our completion includes it), ``reasoning =
      thoughtsTokenCount``, ``cached = cachedContentTokenCount``, ``total =
      totalTokenCount`` (never less than the sum).
    * ``modelVersion`` and ``responseId`` are the increment's ``model`` and ``response_id``.
    * An ``error`` object raises :class:`~protocols.errors.ProviderError` (see
      :func:`error_details` for the codes).

    Raises :class:`~protocols.errors.ProtocolError` when the data is not a JSON object or a
    known field has the wrong shape.
    """

    __slots__ = (
        "_calls",
        "_content",
        "_learned",
        "_metadata",
        "_model",
        "_prefix",
        "_records",
        "_response_id",
        "_suffix",
    )

    def __init__(self) -> None:
        self._calls = 0  # calls seen so far (the next call's index)
        self._content = 0  # code points of answer text so far
        self._records: list[dict[str, Any]] = []
        # The last usage report read (Gemini repeats it on every record), and whether the
        # model and the response id have been reported.
        self._metadata: Any = None
        self._model = False
        self._response_id = False
        # The plain text record template (see _learn): the text around the string, and how
        # many templates were learned.
        self._prefix: str | None = None
        self._suffix = ""
        self._learned = 0

    def read(self, event: SSEEvent) -> Increment | str:
        """The increment one event contributes (see the class documentation)."""
        data = event.data
        prefix = self._prefix
        if prefix is not None and data.startswith(prefix) and data.endswith(self._suffix):
            text = string_token(data, len(prefix), len(data) - len(self._suffix))
            if text is not None:
                self._content += len(text)
                return text
        record = loads(data)
        text = self._plain(record)
        if text is None:
            self._prefix = None  # what the template repeats may have changed
            return self._read_record(record)
        if self._learned < _TEMPLATES:
            self._learn(data, text)
        self._content += len(text)
        return text

    def read_record(self, data: Any) -> Increment | str:
        """The increment of one ``GenerateContentResponse`` (parsed JSON)."""
        text = self._plain(data)
        if text is None:
            return self._read_record(data)
        self._content += len(text)
        return text

    def _plain(self, data: Any) -> str | None:
        """The text of the commonest record -- one plain text part and nothing new besides
        (the usage, model and id Gemini repeats on every record are as last read) -- or
        ``None`` for any other record. Pure: it changes nothing."""
        if type(data) is not dict or "error" in data or "promptFeedback" in data:
            return None
        candidates = data.get("candidates")
        if type(candidates) is not list or not candidates:
            return None
        candidate = candidates[0]
        content = candidate.get("content") if type(candidate) is dict else None
        parts = content.get("parts") if type(content) is dict else None
        if (
            type(parts) is list
            and len(parts) == 1
            and candidate.get("finishReason") is None
            and type(parts[0]) is dict
            and len(parts[0]) == 1
            and type(text := parts[0].get("text")) is str
            and data.get("usageMetadata") == self._metadata
            and (self._model or data.get("modelVersion") is None)
            and (self._response_id or data.get("responseId") is None)
        ):
            return text
        return None

    def _learn(self, data: str, text: str) -> None:
        """Take ``data``, a record :meth:`_plain` read as ``text``, as the template of the
        records that follow: Gemini sends every text record of a stream as the same text (the
        same usage, model and id) around a different string.

        Sound by construction: a JSON string token is self-delimiting, so a record that is the
        template's prefix, then one whole valid string token, then its suffix, parses to the
        template's structure with that string as the text. The template is taken only when a
        probe -- the prefix, a different string, the suffix -- is itself strict JSON that
        :meth:`_plain` reads as the probe string. Any other record drops the template (the
        usage it repeats may have changed); one is learned again from the next plain record,
        at most :data:`_TEMPLATES` times a stream."""
        self._learned += 1
        start = data.find('"text"')
        if start < 0:
            return
        at = start + len('"text"')
        while at < len(data) and data[at] in _BLANKS:
            at += 1
        if data[at : at + 1] != ":":
            return
        at += 1
        while at < len(data) and data[at] in _BLANKS:
            at += 1
        scanned = scan_string(data, at)
        if scanned is None or scanned[0] != text:
            return
        prefix, suffix = data[:at], data[scanned[1] :]
        probe = "#" if text != "#" else "%"
        try:
            record = loads(f'{prefix}"{probe}"{suffix}')
        except ProtocolError:
            return
        if self._plain(record) == probe:
            self._prefix, self._suffix = prefix, suffix

    def _read_record(self, data: Any) -> Increment | str:
        record = _object(data, "response")
        if "error" in record:
            raise _error(record["error"])
        candidates = _optional_list(record, "candidates", "response")
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[CallFragment] = []
        stored = False
        finish: FinishReason | None = None
        if candidates:
            candidate = _object(candidates[0], "candidates[0]")
            content = _optional_object(candidate, "content", "candidates[0]")
            for position, raw in enumerate(_optional_list(content, "parts", "content")):
                what = f"content.parts[{position}]"
                part = _object(raw, what)
                signature = _optional_str(part, "thoughtSignature", what)
                text = _optional_str(part, "text", what)
                call = part.get("functionCall")
                if call is not None:
                    fragment, kept = self._call(_object(call, f"{what}.functionCall"), signature)
                    calls.append(fragment)
                    stored = stored or kept
                elif text is not None and part.get("thought") is True:
                    thinking.append(text)
                    if signature:
                        self._records.append({"thought": text, "thoughtSignature": signature})
                        stored = True
                elif text is not None or signature:
                    text = text or ""
                    texts.append(text)
                    start = self._content
                    self._content += len(text)
                    if signature:
                        self._records.append(
                            {"span": [start, self._content], "thoughtSignature": signature}
                        )
                        stored = True
            reason = _optional_str(candidate, "finishReason", "candidates[0]")
            if reason is not None:
                finish = _FINISH.get(reason, FinishReason.OTHER)
                if finish is FinishReason.STOP and self._calls:
                    finish = FinishReason.TOOL_CALLS
        feedback = _optional_object(record, "promptFeedback", "response")
        if finish is None and _optional_str(feedback, "blockReason", "promptFeedback"):
            finish = FinishReason.CONTENT_FILTER
        metadata = record.get("usageMetadata")
        usage = None
        if metadata is not None and metadata != self._metadata:
            usage = _usage(_object(metadata, "usageMetadata"))
            self._metadata = metadata
        model = response_id = None
        if not self._model:
            model = response_name(record.get("modelVersion"))
            self._model = model is not None
        if not self._response_id:
            response_id = response_name(record.get("responseId"))
            self._response_id = response_id is not None
        if (
            len(texts) == 1
            and not thinking
            and not calls
            and not stored
            and finish is None
            and usage is None
            and model is None
            and response_id is None
        ):
            return texts[0]  # the commonest record: a piece of answer text
        return Increment(
            content="".join(texts),
            thinking="".join(thinking),
            calls=tuple(calls),
            usage=usage,
            finish=finish,
            terminal=finish is not None,
            continuation={NAMESPACE: {"parts": list(self._records)}} if stored else None,
            model=model,
            response_id=response_id,
        )

    def _call(self, call: Mapping[str, Any], signature: str | None) -> tuple[CallFragment, bool]:
        what = "functionCall"
        name = _optional_str(call, "name", what)
        call_id = _optional_str(call, "id", what) or None
        arguments = call.get("args")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ProtocolError(f"Gemini functionCall {name!r} args is not a JSON object")
        index = self._calls
        self._calls += 1
        record: dict[str, Any] = {"call": index}
        if call_id is not None:
            record["id"] = call_id
        if signature:
            record["thoughtSignature"] = signature
        kept = len(record) > 1
        if kept:
            self._records.append(record)
        return CallFragment(index, id=call_id, name=name, arguments=dumps(arguments)), kept


def read_response(body: Any, *, split: bool = False) -> ProviderResult:
    """The result of a ``generateContent`` response (parsed JSON, or its text/bytes): the
    same result the stream of that answer gives (see :class:`GeminiReader`) -- the response
    is read as the stream's one record. Raises :class:`~protocols.errors.ProviderError` for an
    error body and :class:`~protocols.errors.ProtocolError` for a body of the wrong shape."""
    if isinstance(body, str | bytes | bytearray | memoryview):
        body = loads(body)
    if isinstance(body, list) and len(body) == 1:
        body = body[0]  # an error as a one-element array, as the JSON-array stream sends it
    assembler = StreamAssembler(split=split)
    increment = GeminiReader().read_record(body)
    if isinstance(increment, str):
        increment = Increment(content=increment)
    assembler.add(attrs.evolve(increment, terminal=True))
    assembler.flush()
    return assembler.result()


# ---------------------------------------------------------------------------------------------
# Errors


def is_context_overflow(message: str) -> bool:
    """Whether a Gemini error message says the prompt does not fit the model's context window
    (``"The input token count (1200000) exceeds the maximum number of tokens allowed
    (1048576)."``). Never raises."""
    lowered = message.lower()
    return any(phrase in lowered for phrase in _OVERFLOW_PHRASES)


def error_details(body: str) -> tuple[str | None, str | None, str]:
    """``(vendor_type, vendor_code, message)`` from the body of a Gemini error response.

    For ``{"error": {"code": 429, "message": ..., "status": "RESOURCE_EXHAUSTED"}}`` (also as
    a one-element array) the vendor type is ``status``, the vendor code ``code`` written out
    and the message ``message``. Anything else gives ``(None, None, text)``. The message is on
    one line and at most 300 characters. Never raises."""
    try:
        text = body if isinstance(body, str) else str(body)
        try:
            parsed = loads(text)
        except ProtocolError:
            return None, None, _bounded(text)
        if isinstance(parsed, list) and parsed:
            parsed = parsed[0]
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict):
            status = label(error.get("status"))
            code = label(error.get("code"))
            message = error.get("message")
            if isinstance(message, str) and message.strip():
                return status, code, _bounded(message)
            return status, code, _bounded(status or text)
        return None, None, _bounded(text)
    except Exception:  # never raise from an error path
        return None, None, ""


def _error(value: Any) -> ProviderError:
    """The :class:`ProviderError` of an ``error`` object inside a stream or a 200 body."""
    error = value if isinstance(value, dict) else {}
    status = label(error.get("status"))
    code_label = label(error.get("code"))
    raw = error.get("message")
    message = _bounded(raw) if isinstance(raw, str) else ""
    if status == "INVALID_ARGUMENT" and is_context_overflow(message):
        code, retryable = "context_overflow", False
    elif status is not None and status in _STATUS_CODES:
        code, retryable = _STATUS_CODES[status]
    elif code_label in ("429", "500", "502", "503", "504"):
        code, retryable = ("rate_limit" if code_label == "429" else "server_error"), True
    else:
        code, retryable = "provider_error", False
    summary = _bounded(f"Gemini {status or 'error'}: {message or '(no message)'}")
    return ProviderError(
        summary,
        code=code,
        retryable=retryable,
        vendor_type=status,
        vendor_code=code_label,
        excerpt=message,
    )
