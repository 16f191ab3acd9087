"""Fault plans for the fault-injecting provider server: what each request should go through.

A plan is a non-empty sequence of steps; request ``n`` (0-based) gets step ``min(n, len - 1)``, so
the last step repeats forever. Steps are plain data, validated strictly when built from JSON-like
mappings (:func:`parse_plan`): the ``kind`` selects the step, unknown keys are refused, defaults
are filled in.

Steps are described in OpenAI chat-completions terms, the server's default wire. On the Responses
API wire (:data:`FaultWire` ``"openai-responses"``) each step keeps its meaning in that format's
shape: an answer starts with ``response.created`` and an output message item, text goes in
``response.output_text.delta`` events, the finish (with ``[DONE]``) is one ``response.completed``
event whose response carries the usage (``null`` when a step has none), and the in-stream error is
an ``error`` event with the code ``server_error``. On the Gemini wire (``"gemini"``), every event
is a ``GenerateContentResponse`` (CRLF-framed): text goes in a candidate's text part, the finish
is a record with ``finishReason: STOP`` (and the usage, when the step has one), the in-stream
error is an ``{"error": {"code": 500, "status": "INTERNAL"}}`` record, and error bodies are in
Gemini's shape (``{"error": {"code", "message", "status"}}``). The other error bodies are the
same on both OpenAI wires.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Literal, TypeAlias

import attrs

from ._json import dumpb
from .errors import ValidationError

__all__ = [
    "FAULT_WIRES",
    "BadJson",
    "ConnectionRefused",
    "FaultStep",
    "FaultWire",
    "HttpError",
    "Pass",
    "Slow",
    "StreamCut",
    "StreamError",
    "TimeoutBeforeFirstByte",
    "UsageMissing",
    "done_event",
    "error_event",
    "gemini_error_body",
    "gemini_error_event",
    "gemini_finish_event",
    "gemini_text_event",
    "parse_plan",
    "responses_completed_event",
    "responses_error_event",
    "responses_start_events",
    "responses_text_event",
    "slow_tokens",
    "text_event",
    "usage_event",
]


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError(f"{attribute.name} must be an integer > 0, not {value!r}")


def _non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{attribute.name} must be an integer >= 0, not {value!r}")


def _status(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 400 <= value <= 599:
        raise ValidationError(f"status must be an integer from 400 to 599, not {value!r}")


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"{attribute.name} must be a string, not {value!r}")


def _positive_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValidationError(f"{attribute.name} must be a number > 0, not {value!r}")


@attrs.frozen
class Pass:
    """A complete SSE answer streaming ``text``, with usage 1/1/2."""

    kind: ClassVar[str] = "pass"
    text: str = attrs.field(default="ok", validator=_text)


@attrs.frozen
class ConnectionRefused:
    """The connection is accepted and closed at once: no status line, no bytes."""

    kind: ClassVar[str] = "connection-refused"


@attrs.frozen
class TimeoutBeforeFirstByte:
    """Nothing at all for ``milliseconds``, then a complete answer ``"late"`` with usage."""

    kind: ClassVar[str] = "timeout-before-first-byte"
    milliseconds: int = attrs.field(validator=_positive_int)


@attrs.frozen
class StreamCut:
    """SSE headers, then the first ``after_bytes`` bytes of a ``"partial response"`` chunk, then
    the connection is closed: no finish reason, no usage, no ``[DONE]``."""

    kind: ClassVar[str] = "stream-cut"
    after_bytes: int = attrs.field(validator=_non_negative_int)


def _line(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _text(instance, attribute, value)
    assert isinstance(value, str)
    if "\n" in value or "\r" in value:
        raise ValidationError(f"{attribute.name} must be one line, not {value!r}")


def _optional_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _text(instance, attribute, value)


def _header_value(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if (
        not isinstance(value, str)
        or len(value) > 200
        or not all(" " <= char <= "~" for char in value)
    ):
        raise ValidationError(
            f"{attribute.name} must be a header value (at most 200 printable ASCII characters),"
            f" not {value!r}"
        )


@attrs.frozen
class HttpError:
    """An error response with ``status`` and body ``{"error": {"message": ...}}``: ``message``,
    or ``"fault <status>"`` when it is ``None``; with a ``Retry-After: <retry_after>`` header
    when ``retry_after`` is given (sent as written: seconds, an HTTP date, or anything else)."""

    kind: ClassVar[str] = "http-error"
    status: int = attrs.field(validator=_status)
    message: str | None = attrs.field(default=None, validator=_optional_text)
    retry_after: str | None = attrs.field(default=None, validator=_header_value)

    @property
    def text(self) -> str:
        """The error message the body carries."""
        return self.message if self.message is not None else f"fault {self.status}"


@attrs.frozen
class BadJson:
    """A 200 SSE body whose one record, ``record`` (one line, default ``{not-json}``), is not
    JSON, then ``[DONE]``."""

    kind: ClassVar[str] = "bad-json"
    record: str = attrs.field(default="{not-json}", validator=_line)


@attrs.frozen
class StreamError:
    """A 200 SSE body: ``text`` as a content delta (none when empty), then an in-stream error
    record ``{"error": {"message": message, "type": "server_error"}}`` -- what a server sends
    when it fails after the status line."""

    kind: ClassVar[str] = "stream-error"
    message: str = attrs.field(default="fault in the stream", validator=_text)
    text: str = attrs.field(default="", validator=_text)


@attrs.frozen
class Slow:
    """``text`` streamed one token per tick at ``tokens_per_second``, then stop and ``[DONE]``,
    without usage. Tokens are ``text`` split after each run of whitespace (see
    :func:`slow_tokens`); a tick is ``max(1, round(1000 / tokens_per_second))`` ms and the first
    token comes after one tick."""

    kind: ClassVar[str] = "slow"
    text: str = attrs.field(validator=_text)
    tokens_per_second: float = attrs.field(validator=_positive_number)

    @property
    def tick(self) -> float:
        """Seconds between tokens."""
        return max(1, round(1000 / self.tokens_per_second)) / 1000


@attrs.frozen
class UsageMissing:
    """A complete SSE answer streaming ``text``, without the usage chunk."""

    kind: ClassVar[str] = "usage-missing"
    text: str = attrs.field(default="ok", validator=_text)


FaultStep: TypeAlias = (
    Pass
    | ConnectionRefused
    | TimeoutBeforeFirstByte
    | StreamCut
    | HttpError
    | BadJson
    | StreamError
    | Slow
    | UsageMissing
)

_KINDS: dict[str, tuple[type[Any], dict[str, str]]] = {
    # kind: (class, {wire key: attribute})
    "pass": (Pass, {"text": "text"}),
    "connection-refused": (ConnectionRefused, {}),
    "timeout-before-first-byte": (TimeoutBeforeFirstByte, {"milliseconds": "milliseconds"}),
    "stream-cut": (StreamCut, {"afterBytes": "after_bytes"}),
    "http-error": (
        HttpError,
        {"status": "status", "message": "message", "retryAfter": "retry_after"},
    ),
    "bad-json": (BadJson, {"record": "record"}),
    "stream-error": (StreamError, {"message": "message", "text": "text"}),
    "slow": (Slow, {"text": "text", "tokensPerSecond": "tokens_per_second"}),
    "usage-missing": (UsageMissing, {"text": "text"}),
}
_STEP_TYPES = tuple(cls for cls, _ in _KINDS.values())


def parse_plan(steps: Sequence[FaultStep | Mapping[str, Any]]) -> tuple[FaultStep, ...]:
    """Validate a plan given as step objects or JSON-like mappings in their wire form
    (``{"kind": "stream-cut", "afterBytes": 24}``, camel-case keys).

    Raises :class:`~protocols.errors.ValidationError` for an empty plan, an unknown kind, an
    unknown or missing key, or a bad value, naming the step's position.
    """
    if isinstance(steps, str | bytes | Mapping) or not isinstance(steps, Sequence):
        raise ValidationError("a fault plan is a sequence of steps")
    if not steps:
        raise ValidationError("a fault plan must contain at least one step")
    plan: list[FaultStep] = []
    for position, step in enumerate(steps):
        if isinstance(step, _STEP_TYPES):
            plan.append(step)
            continue
        if not isinstance(step, Mapping):
            raise ValidationError(f"fault step {position} must be a mapping, not {step!r}")
        kind = step.get("kind")
        if kind not in _KINDS:
            known = ", ".join(sorted(_KINDS))
            raise ValidationError(f"fault step {position}: unknown kind {kind!r} (known: {known})")
        cls, keys = _KINDS[kind]
        unknown = sorted(set(step) - set(keys) - {"kind"})
        if unknown:
            raise ValidationError(
                f"fault step {position} ({kind}): unknown key(s) {', '.join(map(repr, unknown))}"
            )
        try:
            plan.append(cls(**{keys[key]: value for key, value in step.items() if key != "kind"}))
        except TypeError as error:  # a required key is missing
            raise ValidationError(f"fault step {position} ({kind}): {error}") from None
        except ValidationError as error:
            raise ValidationError(f"fault step {position} ({kind}): {error.message}") from None
    return tuple(plan)


def slow_tokens(text: str) -> list[str]:
    """``text`` split after each run of whitespace, empty pieces dropped: ``"a b  c"`` gives
    ``["a ", "b  ", "c"]``."""
    tokens: list[str] = []
    current: list[str] = []
    for index, char in enumerate(text):
        current.append(char)
        if char.isspace() and (index + 1 == len(text) or not text[index + 1].isspace()):
            tokens.append("".join(current))
            current = []
    if current:
        tokens.append("".join(current))
    return [token for token in tokens if token]


def text_event(text: str, finish: str | None = None) -> bytes:
    """One OpenAI chat-completion chunk as an SSE event: ``text`` as the content delta (an empty
    delta when ``text`` is empty) and ``finish`` as the finish reason."""
    delta = {"content": text} if text else {}
    record = {
        "id": "fault-bench",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + dumpb(record) + b"\n\n"


def usage_event() -> bytes:
    """The usage chunk (1 prompt, 1 completion, 2 total tokens) as an SSE event."""
    record = {
        "id": "fault-bench",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return b"data: " + dumpb(record) + b"\n\n"


def error_event(message: str) -> bytes:
    """An OpenAI-style in-stream error record carrying ``message`` as an SSE event."""
    record = {"error": {"message": message, "type": "server_error", "code": None}}
    return b"data: " + dumpb(record) + b"\n\n"


def done_event() -> bytes:
    """The terminal ``[DONE]`` event."""
    return b"data: [DONE]\n\n"


# ---------------------------------------------------------------------------------------------
# The Responses API wire

#: The wire formats a fault server speaks: OpenAI chat completions or OpenAI's Responses API.
FaultWire: TypeAlias = Literal["openai-chat", "openai-responses", "gemini"]
#: Every :data:`FaultWire`, the default first.
FAULT_WIRES: Final[tuple[FaultWire, ...]] = ("openai-chat", "openai-responses", "gemini")

_RESPONSE_ID = "resp_fault"
_MESSAGE_ID = "msg_fault"


def _responses_event(name: str, fields: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumpb({"type": name, **fields}) + b"\n\n"


def _response(status: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": _RESPONSE_ID,
        "object": "response",
        "status": status,
        "error": None,
        "model": "fault",
        "output": [],
        "usage": usage,
    }


def responses_start_events() -> bytes:
    """The opening of a Responses API stream: ``response.created``, then an assistant message
    item and its text part being added (output index 0)."""
    item = {"id": _MESSAGE_ID, "type": "message", "role": "assistant", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    return (
        _responses_event("response.created", {"response": _response("in_progress", None)})
        + _responses_event("response.output_item.added", {"output_index": 0, "item": item})
        + _responses_event(
            "response.content_part.added",
            {"item_id": _MESSAGE_ID, "output_index": 0, "content_index": 0, "part": part},
        )
    )


def responses_text_event(text: str) -> bytes:
    """One ``response.output_text.delta`` event carrying ``text`` (output index 0)."""
    fields = {"item_id": _MESSAGE_ID, "output_index": 0, "content_index": 0, "delta": text}
    return _responses_event("response.output_text.delta", fields)


def responses_completed_event(*, usage: bool = True) -> bytes:
    """The terminal ``response.completed`` event; its response reports usage 1/1/2 when
    ``usage``, else ``"usage": null``."""
    counts = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2} if usage else None
    return _responses_event("response.completed", {"response": _response("completed", counts)})


def responses_error_event(message: str) -> bytes:
    """A Responses API ``error`` event with the code ``server_error`` carrying ``message``."""
    fields = {"code": "server_error", "message": message, "param": None}
    return _responses_event("error", fields)


# ---------------------------------------------------------------------------------------------
# The Gemini wire

#: Google RPC status names of the HTTP statuses a fault step may give.
_GEMINI_STATUS: Final = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _gemini_event(record: dict[str, Any]) -> bytes:
    return b"data: " + dumpb(record) + b"\r\n\r\n"


def gemini_text_event(text: str) -> bytes:
    """One Gemini stream record whose candidate carries ``text`` in one text part."""
    content = {"parts": [{"text": text}], "role": "model"}
    return _gemini_event({"candidates": [{"content": content, "index": 0}]})


def gemini_finish_event(*, usage: bool = True) -> bytes:
    """The Gemini record that ends an answer: ``finishReason: STOP`` and, when ``usage``, the
    counts 1 prompt, 1 candidate, 2 total."""
    record: dict[str, Any] = {
        "candidates": [
            {"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "STOP"}
        ]
    }
    if usage:
        record["usageMetadata"] = {
            "promptTokenCount": 1,
            "candidatesTokenCount": 1,
            "totalTokenCount": 2,
        }
    return _gemini_event(record)


def gemini_error_event(message: str) -> bytes:
    """A Gemini in-stream error record, ``INTERNAL`` (500), carrying ``message``."""
    return _gemini_event({"error": gemini_error_body(500, message)["error"]})


def gemini_error_body(status: int, message: str) -> dict[str, Any]:
    """A Gemini error body for an HTTP ``status``: ``{"error": {"code", "message",
    "status"}}``."""
    name = _GEMINI_STATUS.get(status, "UNKNOWN")
    return {"error": {"code": status, "message": message, "status": name}}
