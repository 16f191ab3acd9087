"""The relay protocol's frames, client to server and server to client, and their strict encoding
and decoding as JSON text (see :mod:`protocols.relay`, which re-exports them and describes each
frame)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeAlias

import attrs

from ._json import _may_hold_surrogates, dumps, json_kind, loads, loads_object_unchecked
from ._relay_checks import (
    _OPTIONS,
    _RETRYABLE,
    DEFAULT_MAX_FRAME,
    ERROR_MESSAGES,
    MAX_REQUEST_ID,
    MAX_SAFE_INTEGER,
    SETTINGS_FIELDS,
    VERSIONS,
    _bool,
    _index,
    _instance_of,
    _messages,
    _nonempty_str,
    _optional_str,
    _positive,
    _request_id,
    _run_id,
    _seq,
    _str,
    _tools,
    _trace,
    _version,
)
from .codec import from_json, to_json
from .errors import Category, ProtocolError, SizeLimitError, ValidationError
from .live import TERMINAL
from .messages import Message, ProviderOptions, ProviderResult, ToolCall, ToolDefinition

# -- client to server ---------------------------------------------------------------------------


@attrs.frozen(repr=False)
class HelloFrame:
    """The first frame of a connection: the protocol version and the bearer token."""

    version: int = attrs.field(validator=_version)
    token: str = attrs.field(validator=_str)

    def __repr__(self) -> str:  # the token is a secret
        return f"Hello(version={self.version}, token=<redacted>)"


@attrs.frozen
class StreamFrame:
    """One provider call, under the client's request ``id``; ``trace``: the caller's W3C trace
    context (``traceparent``, ``tracestate``), or ``None`` (then the field is not sent);
    ``cancel_on_disconnect`` (version 3; sent only when false): false lets the call's run go on
    when the connection drops, to be followed again with a :class:`WatchFrame`."""

    id: str = attrs.field(validator=_request_id)
    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=_tools)
    options: ProviderOptions | None = attrs.field(default=None, validator=_OPTIONS)
    trace: dict[str, str] | None = attrs.field(default=None, validator=_trace)
    cancel_on_disconnect: bool = attrs.field(default=True, validator=_bool)

    def __attrs_post_init__(self) -> None:
        if not self.messages:
            raise ValidationError("StreamFrame.messages must not be empty")


@attrs.frozen
class CancelFrame:
    """Stop request ``id``."""

    id: str = attrs.field(validator=_request_id)


def _decision(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ("allow", "deny"):
        raise ValidationError("ApproveFrame.decision must be 'allow' or 'deny'")


@attrs.frozen
class ApproveFrame:
    """The client's answer to an :class:`ApprovalFrame`."""

    id: str = attrs.field(validator=_request_id)
    call: str = attrs.field(validator=_nonempty_str)
    decision: str = attrs.field(validator=_decision)
    reason: str | None = attrs.field(default=None, validator=_optional_str)


def _optional_version(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and value not in VERSIONS:
        raise ValidationError(
            f"HttpRequest.version must be one of {', '.join(map(str, VERSIONS))}, or absent"
        )


@attrs.frozen
class HttpRequest:
    """The body of a plain HTTP relay request: one provider call. ``version`` (``None``: as
    before versions): 3 asks for an answer of version 3 -- a ``run`` line first, then the
    run's frames with their ``seq``; ``cancel_on_disconnect`` false lets the run go on when the
    client leaves (its id is in the answer's ``x-relay-run-id`` header)."""

    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    tools: tuple[ToolDefinition, ...] = attrs.field(default=(), converter=_tools)
    options: ProviderOptions | None = attrs.field(default=None, validator=_OPTIONS)
    version: int | None = attrs.field(default=None, validator=_optional_version)
    cancel_on_disconnect: bool = attrs.field(default=True, validator=_bool)

    def __attrs_post_init__(self) -> None:
        if not self.messages:
            raise ValidationError("HttpRequest.messages must not be empty")


@attrs.frozen
class WatchFrame:
    """Follow run ``run_id`` under request ``id`` (version 3): its frames after the event
    ``after`` (a seq; 0: from the start), then the rest as they come, through its end."""

    id: str = attrs.field(validator=_request_id)
    run_id: str = attrs.field(validator=_run_id)
    after: int = attrs.field(default=0, validator=_index)


_JOB_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: The most answers one ``job_answer`` frame may carry.
MAX_JOB_ANSWERS: Final = 256


def _job_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _JOB_ID.fullmatch(value):
        raise ValidationError(
            f"{attribute.name} must be 1 to 128 letters, digits, '-' or '_' (a job's id)"
        )


def _json_object(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise ValidationError(f"{attribute.name} must be a JSON object")


def _answers(value: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    answers = tuple(value)
    if not 1 <= len(answers) <= MAX_JOB_ANSWERS or not all(isinstance(a, dict) for a in answers):
        raise ValidationError(f"answers must be 1 to {MAX_JOB_ANSWERS} JSON objects")
    return answers


@attrs.frozen
class JobSubmitFrame:
    """Submit a durable job (version 3): ``job`` is what ``POST /v1/jobs`` takes (``agent``,
    ``input``, ``settings``, ``key``), checked by the server as over HTTP. Answered with a
    ``job`` frame (``created``)."""

    id: str = attrs.field(validator=_request_id)
    job: dict[str, Any] = attrs.field(validator=_json_object)


@attrs.frozen
class JobGetFrame:
    """Show the job ``job_id`` (version 3): answered with a ``job`` frame."""

    id: str = attrs.field(validator=_request_id)
    job_id: str = attrs.field(validator=_job_id)


@attrs.frozen
class JobCancelFrame:
    """Cancel the job ``job_id`` (version 3): answered with a ``job`` frame."""

    id: str = attrs.field(validator=_request_id)
    job_id: str = attrs.field(validator=_job_id)


@attrs.frozen
class JobAnswerFrame:
    """Answer the approvals the job ``job_id`` waits for (version 3): each of ``answers`` is
    ``{"call_id", "allow", "reason"?}``, as ``POST /v1/jobs/{id}/answers`` takes them.
    Answered with a ``job`` frame."""

    id: str = attrs.field(validator=_request_id)
    job_id: str = attrs.field(validator=_job_id)
    answers: tuple[dict[str, Any], ...] = attrs.field(converter=_answers)


@attrs.frozen
class JobWatchFrame:
    """Follow the job ``job_id``'s events after seq ``after`` (version 3): ``job_event``
    frames through its terminal event."""

    id: str = attrs.field(validator=_request_id)
    job_id: str = attrs.field(validator=_job_id)
    after: int = attrs.field(default=0, validator=_index)


ClientFrame: TypeAlias = (
    HelloFrame
    | StreamFrame
    | CancelFrame
    | ApproveFrame
    | WatchFrame
    | JobSubmitFrame
    | JobGetFrame
    | JobCancelFrame
    | JobAnswerFrame
    | JobWatchFrame
)


# -- server to client ---------------------------------------------------------------------------


def _optional_positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _positive(instance, attribute, value)


@attrs.frozen
class ReadyFrame:
    """The server accepted the ``hello``: the version the connection speaks and its limits --
    and from version 2, ``max_tokens``: the most output tokens the server lets one request ask
    for (``None``, not sent: no cap)."""

    version: int = attrs.field(validator=_version)
    max_frame: int = attrs.field(validator=_positive)
    max_streams: int = attrs.field(validator=_positive)
    max_tokens: int | None = attrs.field(default=None, validator=_optional_positive)

    def __attrs_post_init__(self) -> None:
        if self.max_tokens is not None and self.version < 2:
            raise ValidationError("ReadyFrame.max_tokens needs version 2 or later")


def unsupported_options(options: ProviderOptions | None, version: int) -> tuple[str, ...]:
    """The fields ``options`` sets that a connection of ``version`` cannot carry (a server of
    that version would refuse the whole frame, and close the connection): a client refuses
    such a request itself, naming them."""
    if options is None or version >= 2:
        return ()
    return tuple(name for name in SETTINGS_FIELDS if getattr(options, name) is not None)


def _channel(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ("content", "thinking"):
        raise ValidationError("DeltaFrame.channel must be 'content' or 'thinking'")


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError("DeltaFrame.text must be a non-empty string")


@attrs.frozen
class DeltaFrame:
    """A piece of the answer to request ``id``; ``seq`` (version 3): its event's seq."""

    id: str = attrs.field(validator=_request_id)
    channel: str = attrs.field(validator=_channel)
    text: str = attrs.field(validator=_text)
    seq: int | None = attrs.field(default=None, validator=_seq)


@attrs.frozen
class ResultFrame:
    """Request ``id`` finished: its result (whose ``denied`` names the calls the server's
    policy refused, with the text the model must be answered with)."""

    id: str = attrs.field(validator=_request_id)
    result: ProviderResult = attrs.field(validator=_instance_of(ProviderResult))
    seq: int | None = attrs.field(default=None, validator=_seq)


@attrs.frozen
class AbortFrame:
    """Request ``id`` was cancelled; ``partial`` is what had streamed."""

    id: str = attrs.field(validator=_request_id)
    partial: ProviderResult = attrs.field(validator=_instance_of(ProviderResult))
    seq: int | None = attrs.field(default=None, validator=_seq)


def _code(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ERROR_MESSAGES:
        raise ValidationError(f"ErrorFrame.code must be one of {', '.join(ERROR_MESSAGES)}")


@attrs.frozen
class ErrorFrame:
    """A refusal or a failure: of request ``id``, or of the connection (``id`` None); ``seq``
    (version 3): the seq of the run's ``failed`` event, when the error ends a run."""

    code: str = attrs.field(validator=_code)
    message: str = attrs.field(validator=_str)
    retryable: bool = attrs.field(default=False, validator=_bool)
    id: str | None = attrs.field(default=None)
    seq: int | None = attrs.field(default=None, validator=_seq)

    def __attrs_post_init__(self) -> None:
        if self.id is not None:
            _request_id(self, attrs.fields(ErrorFrame).id, self.id)
        if self.message != ERROR_MESSAGES[self.code]:
            raise ValidationError("ErrorFrame.message must be the fixed text of its code")


@attrs.frozen
class ApprovalFrame:
    """The server's policy asks for a decision on ``call`` of request ``id``."""

    id: str = attrs.field(validator=_request_id)
    call: ToolCall = attrs.field(validator=_instance_of(ToolCall))
    reason: str | None = attrs.field(default=None, validator=_optional_str)
    seq: int | None = attrs.field(default=None, validator=_seq)


@attrs.frozen
class RunFrame:
    """Request (or watch) ``id`` is run ``run_id`` (version 3): sent before any other frame
    of it. The id is the server's, unguessable; a client follows the run again with it."""

    id: str = attrs.field(validator=_request_id)
    run_id: str = attrs.field(validator=_run_id)


@attrs.frozen
class GapFrame:
    """The events ``first`` .. ``seq`` of the run followed under ``id`` are no longer kept
    (version 3): what follows comes after ``seq``."""

    id: str = attrs.field(validator=_request_id)
    first: int = attrs.field(validator=_positive)
    seq: int = attrs.field(validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.first > self.seq:
            raise ValidationError("GapFrame.first must not be after its seq")


@attrs.frozen
class JobFrame:
    """A durable job as its owner sees it (version 3): the answer to a ``job_submit`` (with
    ``created``: false when its idempotency key named this job already), ``job_get``,
    ``job_cancel`` or ``job_answer``; and the end of a ``job_watch`` cancelled before a
    terminal event."""

    id: str = attrs.field(validator=_request_id)
    job: dict[str, Any] = attrs.field(validator=_json_object)
    created: bool | None = attrs.field(default=None)

    @created.validator
    def _created(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None and not isinstance(value, bool):
            raise ValidationError("JobFrame.created must be true, false or absent")


@attrs.frozen
class JobEventFrame:
    """One event of a followed job, as JSON (version 3; what its Server-Sent Events carry:
    ``run_id``, ``seq``, ``kind``, ``time``, ``data``); a terminal one ends its ``job_watch``."""

    id: str = attrs.field(validator=_request_id)
    event: dict[str, Any] = attrs.field(validator=_json_object)

    @property
    def terminal(self) -> bool:
        """Whether this event ends its watch (:data:`~protocols.live.TERMINAL`)."""
        return self.event.get("kind") in TERMINAL


ServerFrame: TypeAlias = (
    ReadyFrame
    | DeltaFrame
    | ResultFrame
    | AbortFrame
    | ErrorFrame
    | ApprovalFrame
    | RunFrame
    | GapFrame
    | JobFrame
    | JobEventFrame
)


def error_frame(code: str, id: str | None = None, seq: int | None = None) -> ErrorFrame:
    """The :class:`ErrorFrame` frame for ``code``, with its fixed message and retry hint (and
    ``seq``, for the error that ends a run, on a connection of version 3)."""
    if code not in ERROR_MESSAGES:
        raise ValidationError(f"unknown relay error code {code!r}")
    return ErrorFrame(code, ERROR_MESSAGES[code], code in _RETRYABLE, id, seq)


# -- text ---------------------------------------------------------------------------------------

_CLIENT: Final[Mapping[str, type]] = {
    "hello": HelloFrame,
    "stream": StreamFrame,
    "cancel": CancelFrame,
    "approve": ApproveFrame,
    "watch": WatchFrame,
    "job_submit": JobSubmitFrame,
    "job_get": JobGetFrame,
    "job_cancel": JobCancelFrame,
    "job_answer": JobAnswerFrame,
    "job_watch": JobWatchFrame,
}
_SERVER: Final[Mapping[str, type]] = {
    "ready": ReadyFrame,
    "delta": DeltaFrame,
    "result": ResultFrame,
    "abort": AbortFrame,
    "error": ErrorFrame,
    "approval": ApprovalFrame,
    "run": RunFrame,
    "gap": GapFrame,
    "job": JobFrame,
    "job_event": JobEventFrame,
}
_TAGS: Final[Mapping[type, str]] = {cls: tag for tag, cls in (*_CLIENT.items(), *_SERVER.items())}


# The hot loop of a relay is one delta frame after another; these two fast paths are written
# here by hand (a general encode or decode goes through the codec: about 6 us each) and
# property tests hold them to the general paths.
_DELTA_PREFIX: Final = '{"type":"delta","id":'


def _fast_delta(text: str) -> DeltaFrame | None:
    """The delta frame ``text`` holds, or None when the general decoder must judge it."""
    if not text.startswith(_DELTA_PREFIX) or "\\u" in text:
        return None
    data = loads_object_unchecked(text)
    if data is None:
        return None
    keys = len(data)
    seq = data.get("seq")
    if keys == 5:
        if type(seq) is not int or not 1 <= seq <= MAX_SAFE_INTEGER:
            return None
    elif keys != 4:
        return None
    request, channel, piece = data.get("id"), data.get("channel"), data.get("text")
    if (
        type(request) is not str
        or type(piece) is not str
        or (channel != "content" and channel != "thinking")  # noqa: PLR1714
        or not piece
        or not 1 <= len(request) <= MAX_REQUEST_ID
        # Every key parsed and every other colon inside a string: no key was a duplicate.
        or text.count(":") != keys + request.count(":") + piece.count(":")
    ):
        return None
    frame = _new(DeltaFrame)
    _set(frame, "id", request)
    _set(frame, "channel", channel)
    _set(frame, "text", piece)
    _set(frame, "seq", seq)
    return frame


_new = object.__new__
_set = object.__setattr__
#: The C string encoder behind ``json.dumps(..., ensure_ascii=False)``: what :func:`dumps` writes
#: for a string without lone surrogates (those go the general way, to be repaired).
_string: Final[Callable[[str], str]] = json.encoder.encode_basestring


#: The result field of the frames that carry a ProviderResult, and the result's fields they
#: leave out: the upstream's model and response id (a client from before them would refuse the
#: frame; the server's own span of the call records them) -- and, the same way, the reasoning
#: part of its usage.
_RESULT_FIELDS: Final[Mapping[type, str]] = {ResultFrame: "result", AbortFrame: "partial"}
_UNSENT: Final = ("model", "response_id")


def _without_tool_images(message: dict[str, Any]) -> None:
    """Leave a tool message's images out of a frame, saying so in its text."""
    images = message.pop("images", None) if message.get("role") == "tool" else None
    if images:
        count = f"{len(images)} image" + ("s" if len(images) > 1 else "")
        note = f"[{count} the tool returned, not sent through the relay]"
        message["content"] = f"{message['content']}\n\n{note}" if message.get("content") else note


def encode_frame(frame: ClientFrame | ServerFrame) -> str:
    """The frame as compact JSON text with its ``type`` first (what the other side decodes).

    A result's ``model`` and ``response_id``, and its usage's ``reasoning``, ``cost`` and
    ``cache_write``, are left out (see :data:`_UNSENT`); so are a ``stream`` frame's tool
    messages' images, which servers from before them refuse -- each such message's text ends
    with a note of how many were left out instead."""
    if type(frame) is DeltaFrame:
        request, piece = frame.id, frame.text
        if not (_may_hold_surrogates(request) or _may_hold_surrogates(piece)):
            channel = "content" if frame.channel == "content" else "thinking"
            head = f'{_DELTA_PREFIX}{_string(request)},"channel":"{channel}","text":'
            if frame.seq is None:
                return f"{head}{_string(piece)}}}"
            return f'{head}{_string(piece)},"seq":{int(frame.seq)}}}'
    tag = _TAGS.get(type(frame))
    if tag is None:
        raise ValidationError(f"not a relay frame: {type(frame).__name__}")
    body = to_json(frame)
    assert isinstance(body, dict)
    field = _RESULT_FIELDS.get(type(frame))
    if field is not None:
        result = body[field]
        for name in _UNSENT:
            result.pop(name, None)
        usage = result.get("usage")
        if isinstance(usage, dict):
            usage.pop("reasoning", None)
            usage.pop("cost", None)  # (likewise: clients from before cost refuse it)
            usage.pop("cache_write", None)  # (and those from before cache writes were counted)
    elif type(frame) is StreamFrame:
        for message in body["messages"]:
            _without_tool_images(message)
    return dumps({"type": tag, **body})


def _decode(
    text: str | bytes, kinds: Mapping[str, type], max_bytes: int, category: Category, side: str
) -> Any:
    # Each character is at least one byte: a string longer than the limit is refused without
    # encoding it (its length is then a lower bound of its size).
    if isinstance(text, str) and len(text) <= max_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))
    else:
        size = len(text)
    if size > max_bytes:
        raise SizeLimitError(f"a {side} frame", limit=max_bytes, size=size, category=category)
    data = loads(text, category=category)
    if not isinstance(data, dict):
        raise ProtocolError(
            f"a {side} frame must be a JSON object, not {json_kind(data)}", category=category
        )
    allowed = ", ".join(kinds)
    if "type" not in data:
        raise ProtocolError(
            f'a {side} frame must have a "type"; expected one of {allowed}', category=category
        )
    kind = data.pop("type")
    if not isinstance(kind, str):
        raise ProtocolError(
            f'the "type" of a {side} frame must be a string, not {json_kind(kind)}',
            category=category,
        )
    cls = kinds.get(kind)
    if cls is None:
        raise ProtocolError(
            f"unknown {side} frame type {kind[:40]!r}; expected one of {allowed}",
            category=category,
        )
    return from_json(cls, data, category=category)


def decode_client_frame(text: str | bytes, *, max_bytes: int = DEFAULT_MAX_FRAME) -> ClientFrame:
    """Decode a frame a client sent. Raises :class:`~protocols.errors.SizeLimitError` over
    ``max_bytes`` (checked before parsing) and :class:`~protocols.errors.ProtocolError`
    (category ``user``) for anything else that is not exactly one client frame."""
    frame: ClientFrame = _decode(text, _CLIENT, max_bytes, Category.USER, "client")
    return frame


def decode_server_frame(text: str | bytes, *, max_bytes: int = DEFAULT_MAX_FRAME) -> ServerFrame:
    """Decode a frame a server sent (raises like :func:`decode_client_frame`, with category
    ``provider``: the server is the client's provider)."""
    if isinstance(text, str) and len(text) <= max_bytes // 4:  # surely under the limit
        fast = _fast_delta(text)
        if fast is not None:
            return fast
    frame: ServerFrame = _decode(text, _SERVER, max_bytes, Category.PROVIDER, "server")
    return frame


def decode_http_request(body: bytes) -> HttpRequest:
    """Decode the body of a plain HTTP relay request (``{"messages", "tools"?, "options"?}``),
    strictly; the caller bounds its size. Raises :class:`~protocols.errors.ProtocolError`
    (category ``user``)."""
    data = loads(body, category=Category.USER)
    if not isinstance(data, dict):
        raise ProtocolError(
            f"the request body must be a JSON object, not {json_kind(data)}",
            category=Category.USER,
        )
    request: HttpRequest = from_json(HttpRequest, data, category=Category.USER)
    return request
