"""The relay protocol: versioned JSON frames between a credential-free client and a relay server
that holds the model and its credential.

Sans-IO: this module only turns frames into text and text into frames, strictly. The server
(:mod:`actors.relay`) and the client (``RelayProvider``) move the text over a websocket (one JSON
object per message) or, for clients without websockets, over a plain HTTP request whose
response is NDJSON (one server frame per line).

Client to server:

* ``hello`` -- ``version`` (:data:`PROTOCOL_VERSION`, or an older one of :data:`VERSIONS`)
  and ``token`` (the bearer token); the first frame of a connection, and only there. A client
  refused with ``version`` says hello again, on a new connection, with the version before (a
  server from before version 2 knows only 1).
* ``stream`` -- ``id`` (the client's request id, unique among its open requests),
  ``messages``, ``tools``, ``options`` (the call's options and model settings: on a
  connection of version 1, none of :data:`SETTINGS_FIELDS`): one provider call; optionally
  ``trace``, the caller's W3C trace context (``traceparent``, ``tracestate``) for the server's
  span of the call (absent: the connection's handshake headers say it, or nothing does). A
  client never sends
  a tool message's ``images`` (servers from before them refuse the frame): each such message
  says in its text how many images were left out. A server accepts them.
  From version 3, ``cancel_on_disconnect`` (default true, then not sent): false lets the
  request's *run* go on when the connection drops, to be followed again with ``watch``.
* ``cancel`` -- ``id``: stop that request (from version 3 also a watched run); the server
  answers ``abort`` with the partial.
* ``approve`` -- ``id``, ``call`` (a tool-call id), ``decision`` (``allow`` or ``deny``),
  ``reason``: the answer to an ``approval``.
* ``watch`` (version 3) -- ``id`` (a request id of this connection), ``run_id``, ``after`` (a
  seq, default 0): the run's frames after that event -- what the log still holds, then the
  rest as it comes, through its end (a ``gap`` first where the log no longer holds some).
* The durable jobs' frames (version 3, on a relay serving jobs; see
  :mod:`protocols.relay_jobs`), each with an ``id`` (a request id of this connection):
  ``job_submit`` -- ``job`` (what ``POST /v1/jobs`` takes); ``job_get``, ``job_cancel`` --
  ``job_id``; ``job_answer`` -- ``job_id``, ``answers`` (what ``POST /v1/jobs/{id}/answers``
  takes as ``answers``); ``job_watch`` -- ``job_id``, ``after`` (a seq, default 0): the job's
  events after it. A ``cancel`` with a ``job_watch``'s id ends that watch, not the job.

Server to client:

* ``ready`` -- ``version`` (the hello's) and the connection's limits (``max_frame``,
  ``max_streams``; from version 2, ``max_tokens`` when the server caps a request's output
  tokens: it lowers a larger ``max_tokens`` to it, and sets it where none is given).
* ``delta`` -- ``id``, ``channel`` (``content`` or ``thinking``), ``text``.
* ``result`` -- ``id``, ``result`` (the provider result; its ``denied`` maps the tool calls
  the server's policy refused to the text the model must be answered with). A server never sends
  the result's ``model`` and ``response_id``, nor its usage's ``reasoning``, ``cost`` or
  ``cache_write`` (clients from before those fields refuse them), nor in an ``abort``'s
  ``partial``; a client accepts them.
* ``abort`` -- ``id``, ``partial``: the request was cancelled (by the client, or by the
  server's shutdown); what had streamed so far.
* ``error`` -- ``id`` (absent for the connection), ``code`` (one of :data:`ERROR_MESSAGES`),
  ``message`` (the fixed text for that code: an upstream's own message, and any secret, never
  crosses), ``retryable``.
* ``approval`` -- ``id``, ``call`` (the tool call), ``reason``: the server's policy wants a
  human to decide that call; the client answers with ``approve``.
* ``run`` (version 3) -- ``id``, ``run_id``: the request (or the watch) is run ``run_id``, a
  server-minted, unguessable id; sent before any other frame of it.
* ``gap`` (version 3) -- ``id``, ``first``, ``seq``: the run's events ``first`` .. ``seq`` are
  no longer kept; what follows comes after ``seq``.
* ``job`` (version 3) -- ``id``, ``job`` (the job as ``GET /v1/jobs/{id}`` shows it), and on
  the answer to a ``job_submit`` ``created`` (false: the idempotency key named that job
  already). It answers ``job_submit``, ``job_get``, ``job_cancel`` and ``job_answer``, and ends
  a ``job_watch`` that ends before a terminal event (cancelled by the client).
* ``job_event`` (version 3) -- ``id``, ``event`` (one event of the job, as JSON: what its
  Server-Sent Events carry); a terminal one (:data:`~protocols.live.TERMINAL`) ends its
  ``job_watch``.

A job frame refused is answered with an ``error`` of its ``id`` (its code's fixed text: the
HTTP route's answer says more) and the connection goes on.

From version 3, every frame of a run (``delta``, ``approval``, ``result``, ``abort``, and the
``error`` that ends it) carries ``seq``: the seq of the run's event it stands for (see
:mod:`protocols.live`), which a client gives back as ``after`` to resume. A frame of an older
version never has it.

Every frame is validated strictly: an unknown ``type``, an unknown or missing field, a value of
the wrong type, a frame over the size limit or nested too deeply is refused with a
:class:`~protocols.errors.ProtocolError` (a :class:`~protocols.errors.SizeLimitError` for size)
whose category says who sent it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeAlias

import attrs

from ._json import _may_hold_surrogates, dumps, json_kind, loads, loads_object_unchecked
from .codec import from_json, to_json
from .errors import Category, ProtocolError, ProviderError, SizeLimitError, ValidationError
from .live import TERMINAL, RunEvent, decimal_seq, event_to_json, event_to_sse
from .messages import (
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
)

__all__ = [
    "DEFAULT_CONTINUATION_LIMIT",
    "DEFAULT_MAX_FRAME",
    "ERROR_MESSAGES",
    "HTTP_REQUEST_ID",
    "MAX_JOB_ANSWERS",
    "MAX_REQUEST_ID",
    "MAX_RUN_ID",
    "MAX_SAFE_INTEGER",
    "NDJSON_CONTENT_TYPE",
    "PROTOCOL_VERSION",
    "RUNS_VERSION",
    "RUN_ERROR_TYPE",
    "RUN_ID_HEADER",
    "RUN_STATE_HEADER",
    "SETTINGS_FIELDS",
    "TAIL_INDEX_HEADER",
    "TRACE_KEYS",
    "VERSIONS",
    "Abort",
    "AbortFrame",
    "Approval",
    "ApprovalFrame",
    "Approve",
    "ApproveFrame",
    "Cancel",
    "CancelFrame",
    "ClientFrame",
    "Delta",
    "DeltaFrame",
    "Error",
    "ErrorFrame",
    "GapFrame",
    "Hello",
    "HelloFrame",
    "HostPolicy",
    "HttpRequest",
    "JobAnswerFrame",
    "JobCancelFrame",
    "JobEventFrame",
    "JobFrame",
    "JobGetFrame",
    "JobSubmitFrame",
    "JobWatchFrame",
    "Ready",
    "ReadyFrame",
    "Result",
    "ResultFrame",
    "RunContinuation",
    "RunFrame",
    "ServerFrame",
    "Stream",
    "StreamFrame",
    "WatchFrame",
    "decode_client_frame",
    "decode_http_request",
    "decode_server_frame",
    "encode_frame",
    "error_frame",
    "event_frame",
    "frame_events",
    "is_loopback",
    "loggable",
    "parse_origin",
    "parse_start_index",
    "run_event_json",
    "run_event_sse",
    "split_host",
    "unsupported_options",
    "with_seq",
]

#: The newest version this module speaks, the one a client says ``hello`` with first.
PROTOCOL_VERSION: Final = 3
#: Every version a server speaks, oldest first: a ``hello`` with another is refused
#: (``version``), and the connection speaks the version of the ``hello`` it accepted. Version 2
#: adds model settings: a ``stream`` frame's ``options`` may set the fields of
#: :data:`SETTINGS_FIELDS`, and ``ready`` may carry ``max_tokens``, the server's cap. Version 3
#: adds runs: the ``run`` and ``gap`` frames, ``seq`` on a run's frames, ``watch``, and a
#: ``stream`` frame's ``cancel_on_disconnect``.
VERSIONS: Final = (1, 2, 3)
#: The first version with runs (``run``, ``watch``, ``gap``, ``seq``, ``cancel_on_disconnect``).
RUNS_VERSION: Final = 3
#: The options fields a server speaking version 1 refuses (it decodes strictly): sent only on a
#: connection of version 2 or later (see :func:`unsupported_options`).
SETTINGS_FIELDS: Final = (
    "top_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "reasoning_effort",
    "parallel_tool_calls",
    "cache",
    "cache_breakpoints",
    "cache_key",
    "cache_retention",
)
#: The default size limit of one frame, in bytes of UTF-8 (1 MiB).
DEFAULT_MAX_FRAME: Final = 1024 * 1024
#: The longest request id accepted (characters).
MAX_REQUEST_ID: Final = 128
#: The request id the server gives the frames of a plain HTTP request.
HTTP_REQUEST_ID: Final = "http"
#: The content type of the plain HTTP endpoint's response.
NDJSON_CONTENT_TYPE: Final = "application/x-ndjson; charset=utf-8"
#: The longest run id accepted (characters; the server's own are 26).
MAX_RUN_ID: Final = 64
#: The largest ``startIndex`` (or seq) a client may send: JavaScript's largest safe integer.
MAX_SAFE_INTEGER: Final = 2**53 - 1
#: The response header naming the run an HTTP answer belongs to (002's ``x-workflow-run-id``).
RUN_ID_HEADER: Final = "x-relay-run-id"
#: The response header saying the stream's tail before the answer's body: the body's events
#: come after that seq (002's ``x-workflow-stream-tail-index``).
TAIL_INDEX_HEADER: Final = "x-relay-tail-index"
#: The response header of a polling answer saying whether the run is ``running`` or ``ended``.
RUN_STATE_HEADER: Final = "x-relay-run-state"

#: Every error code the server sends, with the only text it sends with it.
ERROR_MESSAGES: Final[Mapping[str, str]] = {
    "unauthorized": "unauthorized",
    "forbidden_origin": "this origin is not allowed",
    "version": "unsupported protocol version",
    "invalid": "invalid frame",
    "too_large": "frame too large",
    "too_many_streams": "too many concurrent streams",
    "rate_limited": "too many requests; try again later",
    "budget": "the token budget of this token is spent",
    "duplicate": "a request with this id is already open",
    "unknown_request": "no open request has this id",
    "unknown_run": "no run has this id",
    "too_many_watchers": "too many watchers of this run",
    "run_too_large": "the run is larger than the relay keeps",
    "upstream": "relay provider failed",
    "timeout": "the connection was idle for too long",
    "shutdown": "the relay is shutting down",
    # The durable jobs' frames (the codes of the jobs API over HTTP, protocols.relay_jobs):
    "no_jobs": "this relay serves no jobs",
    "not_found": "no such job",
    "unknown_agent": "no such agent on this relay",
    "key_conflict": "this idempotency key was used for another request",
    "key_purged": "this idempotency key's job was purged; use a new key",
    "conflict": "the job cannot take this answer",
    "ended": "the job has ended",
    "unavailable": "the job store is unavailable; try again",
    "internal": "the relay failed to answer",
}

_RETRYABLE: Final = frozenset(
    {"too_many_streams", "rate_limited", "upstream", "shutdown", "too_many_watchers", "unavailable"}
)


def _request_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_REQUEST_ID:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be a string of 1 to "
            f"{MAX_REQUEST_ID} characters"
        )


def _str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"{type(instance).__name__}.{attribute.name} must be a string")


def _optional_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _str(instance, attribute, value)


def _version(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{type(instance).__name__}.version must be an integer >= 1")


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{type(instance).__name__}.{attribute.name} must be an integer >= 1")


def _run_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_RUN_ID:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be a string of 1 to "
            f"{MAX_RUN_ID} characters"
        )


def _seq(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SAFE_INTEGER:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be a seq (an integer >= 1)"
        )


def _index(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SAFE_INTEGER:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be a seq (an integer >= 0)"
        )


def _nonempty_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError(
            f"{type(instance).__name__}.{attribute.name} must be a non-empty string"
        )


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise ValidationError(f"{type(instance).__name__}.{attribute.name} must be true or false")


def _instance_of(kind: type, *, optional: bool = False) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind) and not (optional and value is None):
            raise ValidationError(
                f"{type(instance).__name__}.{attribute.name} must be a {kind.__name__}, "
                f"not {type(value).__name__}"
            )

    return check


def _items(kind: type, what: str, value: object) -> tuple[Any, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a sequence of {kind.__name__}")
    items = tuple(value)
    for index, item in enumerate(items):
        if not isinstance(item, kind):
            raise ValidationError(
                f"{what}[{index}] must be a {kind.__name__}, not {type(item).__name__}"
            )
    return items


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return _items(Message, "messages", value)


def _tools(value: Iterable[ToolDefinition]) -> tuple[ToolDefinition, ...]:
    return _items(ToolDefinition, "tools", value)


_OPTIONS: Final = _instance_of(ProviderOptions, optional=True)

#: The keys a ``stream`` frame's ``trace`` may hold (W3C Trace Context), and their longest
#: values (a ``traceparent`` is 55 characters; a ``tracestate`` at most 32 entries of 256).
TRACE_KEYS: Final[Mapping[str, int]] = {"traceparent": 256, "tracestate": 8192}


def _trace(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValidationError("StreamFrame.trace must be an object of strings")
    for key, text in value.items():
        limit = TRACE_KEYS.get(key) if isinstance(key, str) else None
        if limit is None:
            raise ValidationError(
                f"StreamFrame.trace may hold only {', '.join(TRACE_KEYS)}, not {loggable(key, 40)}"
            )
        if not isinstance(text, str) or len(text) > limit:
            raise ValidationError(
                f"StreamFrame.trace.{key} must be a string of at most {limit} characters"
            )


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


# -- runs: frames and events --------------------------------------------------------------------

#: The error ``type`` a relay run's ``failed`` event names.
RUN_ERROR_TYPE: Final = "RelayError"


def frame_events(frame: ServerFrame) -> list[tuple[str, Any]]:
    """The events of a run that ``frame`` stands for, as ``(kind, data)`` in order (see
    :class:`~protocols.live.RunEvent`; a delta's data is its text alone, as
    :class:`~protocols.live.EventLog` keeps it): ``delta`` -> ``content`` / ``thinking``;
    ``approval`` -> ``approval_requested`` (with ``call``, the tool call as JSON); ``result``
    -> a ``tool_call`` per call, ``usage`` and ``finished`` (``response``: the
    :class:`~protocols.messages.ProviderResult`); ``abort`` -> ``cancelled`` (``response``: the
    partial); an ``error`` of a request -> ``failed`` (``error``: ``type``, ``code``,
    ``message``, ``retryable``). Other frames stand for no event. The frame's own seq is its
    last event's. On a wire, :func:`run_event_json` is such an event's JSON (its
    ``response`` as JSON too)."""
    kind = type(frame)
    if kind is DeltaFrame:
        assert isinstance(frame, DeltaFrame)
        return [(frame.channel, frame.text)]
    if kind is ResultFrame:
        assert isinstance(frame, ResultFrame)
        result = frame.result
        events: list[tuple[str, Any]] = [("tool_call", {"call": call}) for call in result.calls]
        events.append(
            ("usage", {"usage": result.usage, "estimated": False, "finish": str(result.finish)})
        )
        events.append(("finished", {"response": result}))
        return events
    if kind is AbortFrame:
        assert isinstance(frame, AbortFrame)
        return [("cancelled", {"response": frame.partial})]
    if kind is ErrorFrame:
        assert isinstance(frame, ErrorFrame)
        if frame.id is None:
            return []
        error = {
            "type": RUN_ERROR_TYPE,
            "code": frame.code,
            "message": frame.message,
            "retryable": frame.retryable,
        }
        return [("failed", {"error": error})]
    if kind is ApprovalFrame:
        assert isinstance(frame, ApprovalFrame)
        call = frame.call
        data = {"call_id": call.id, "tool": call.name, "reason": frame.reason}
        return [("approval_requested", {**data, "call": to_json(call)})]
    return []


def with_seq(frame: ServerFrame, seq: int) -> ServerFrame:
    """``frame`` carrying ``seq`` (a frame of a run, on a connection of version 3)."""
    if type(frame) is DeltaFrame:  # the hot path: no validation twice
        copy = _new(DeltaFrame)
        _set(copy, "id", frame.id)
        _set(copy, "channel", frame.channel)
        _set(copy, "text", frame.text)
        _set(copy, "seq", seq)
        return copy
    if not isinstance(frame, ResultFrame | AbortFrame | ErrorFrame | ApprovalFrame):
        raise ValidationError(f"a {type(frame).__name__} carries no seq")
    return attrs.evolve(frame, seq=seq)


def event_frame(event: RunEvent, request_id: str) -> ServerFrame | None:
    """The frame (of version 3, with the event's ``seq``) a client following a relay run
    under ``request_id`` gets for ``event``: ``content`` / ``thinking`` -> ``delta``,
    ``approval_requested`` -> ``approval``, ``finished`` -> ``result``, ``cancelled`` ->
    ``abort``, ``failed`` -> ``error``, ``gap`` -> ``gap``; ``None`` for the events no frame
    stands for (``tool_call`` and ``usage`` are in the ``result``). The inverse of
    :func:`frame_events`. Raises :class:`~protocols.errors.ProtocolError` for an event whose
    data a relay run cannot have."""
    kind, data, seq = event.kind, event.data, event.seq
    try:
        if kind == "content" or kind == "thinking":  # noqa: PLR1714
            copy = _new(DeltaFrame)
            text = data["text"]
            if type(text) is not str or not text:
                raise ValidationError("a delta's text must be a non-empty string")
            _set(copy, "id", request_id)
            _set(copy, "channel", kind)
            _set(copy, "text", text)
            _set(copy, "seq", seq)
            return copy
        if kind == "finished":
            return ResultFrame(request_id, _response(data["response"]), seq)
        if kind == "cancelled":
            return AbortFrame(request_id, _response(data["response"]), seq)
        if kind == "failed":
            error = data.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            if not isinstance(code, str) or code not in ERROR_MESSAGES:
                code = "upstream"
            return error_frame(code, request_id, seq)
        if kind == "approval_requested":
            call = from_json(ToolCall, data["call"])
            return ApprovalFrame(request_id, call, data.get("reason"), seq)
        if kind == "gap":
            return GapFrame(request_id, data["first"], seq)
    except (KeyError, TypeError, ValidationError) as error:
        raise ProtocolError(f"a relay run's {kind} event is malformed: {error}") from None
    return None


def _response(value: Any) -> ProviderResult:
    if isinstance(value, ProviderResult):
        return value
    result: ProviderResult = from_json(ProviderResult, value)
    return result


def run_event_json(event: RunEvent) -> dict[str, Any]:
    """A relay run's ``event`` as strict JSON data: :func:`~protocols.live.event_to_json`, with
    the ``response`` of a ``finished`` or ``cancelled`` event (a provider result) as JSON too --
    what :func:`~protocols.live.event_from_json` reads back (the ``response`` stays JSON there,
    and :func:`event_frame` takes either)."""
    return event_to_json(_json_response(event))


def _json_response(event: RunEvent) -> RunEvent:
    response = event.data.get("response")
    if not isinstance(response, ProviderResult):
        return event
    data = {**event.data, "response": to_json(response)}
    return RunEvent(event.run_id, event.seq, event.kind, event.time, data)


def run_event_sse(event: RunEvent) -> bytes:
    """A relay run's ``event`` as one Server-Sent Event (:func:`~protocols.live.event_to_sse`:
    ``id:`` its seq), its ``response`` as JSON."""
    return event_to_sse(_json_response(event))


def parse_start_index(value: str | None) -> int:
    """The ``startIndex`` (or ``after``) a polling client sent, as a seq: ``0`` for none.
    Raises :class:`~protocols.errors.ValidationError` for anything but a non-negative safe
    integer in decimal (002's rule: a client checks it before sending, a server again)."""
    return decimal_seq(
        value, most=MAX_SAFE_INTEGER, refusal="startIndex must be a non-negative safe integer"
    )


#: Follow-up requests a :class:`RunContinuation` makes by default before it gives up.
DEFAULT_CONTINUATION_LIMIT: Final = 1000


class RunContinuation:
    """002's continuation rule, for a client that follows run ``run_id`` by polling
    (``GET /v1/runs/{id}/events?startIndex=N``), sans-IO: it says what to ask for next and
    sorts the answers.

    * ``start_index`` (the next request's ``startIndex``) is a non-negative safe integer,
      checked here -- before any request is sent (:class:`~protocols.errors.ValidationError`).
    * :meth:`feed` takes one answer (its events, and the ``x-relay-tail-index`` header: the
      seq the body comes after) and returns what to deliver: the events after
      ``start_index``, in order, through the terminal one -- an event already delivered is
      never delivered again, whatever the answers overlap. The next request starts after the
      last event returned.
    * An empty answer without the terminal event is a *polling gap* (:attr:`polling_gap`):
      the client waits briefly, honouring cancellation, and asks again for the same
      ``start_index``.
    * After the terminal event, :attr:`done`: nothing more belongs to the stream.
    * ``limit`` bounds the follow-up requests (the answers after the first; ``None``: no
      bound): once it is spent without the terminal event, :meth:`query` raises
      :class:`~protocols.errors.ProviderError` (``continuation_limit``). With ``limit=0`` any
      answer that does not end the run fails.
    """

    __slots__ = ("answers", "done", "limit", "polling_gap", "run_id", "start_index")

    def __init__(
        self,
        run_id: str,
        *,
        start_index: int = 0,
        limit: int | None = DEFAULT_CONTINUATION_LIMIT,
    ) -> None:
        if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_RUN_ID:
            raise ValidationError(f"run_id must be a string of 1 to {MAX_RUN_ID} characters")
        if (
            isinstance(start_index, bool)
            or not isinstance(start_index, int)
            or not 0 <= start_index <= MAX_SAFE_INTEGER
        ):
            raise ValidationError("startIndex must be a non-negative safe integer")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValidationError(f"limit must be an integer >= 0 or None, not {limit!r}")
        self.run_id = run_id
        self.start_index = start_index
        self.limit = limit
        #: Answers fed so far (the first, then the follow-ups).
        self.answers = 0
        #: The terminal event was delivered: the stream is over.
        self.done = False
        #: The last answer was empty and not terminal: ask again for the same ``start_index``.
        self.polling_gap = False

    def query(self) -> dict[str, str]:
        """The next request's query parameters (``startIndex``). Raises
        :class:`~protocols.errors.ProviderError` (``continuation_limit``, not retryable) when
        the limit of follow-up requests is spent, and
        :class:`~protocols.errors.ValidationError` once the stream is :attr:`done`."""
        if self.done:
            raise ValidationError(f"run {self.run_id}: the stream has ended; nothing follows")
        if self.limit is not None and self.answers > self.limit:
            raise ProviderError(
                f"run {self.run_id}: no terminal event after {self.limit} continuations",
                code="continuation_limit",
                retryable=False,
            )
        return {"startIndex": str(self.start_index)}

    def feed(self, events: Iterable[RunEvent], *, tail_index: int | None = None) -> list[RunEvent]:
        """Take one answer; the events to deliver. ``tail_index``: the answer's tail index
        header, when it has one -- an answer whose body starts after events this client has
        not had raises :class:`~protocols.errors.ProtocolError`."""
        if self.done:
            raise ValidationError(f"run {self.run_id}: the stream has ended; nothing follows")
        if tail_index is not None and tail_index > self.start_index:
            raise ProtocolError(
                f"run {self.run_id}: the answer starts after seq {tail_index}, but this client "
                f"has had only up to {self.start_index}",
                code="decode",
                category=Category.PROVIDER,
            )
        self.answers += 1
        out: list[RunEvent] = []
        for event in events:
            if event.seq <= self.start_index:
                continue  # had already: replay-safe
            out.append(event)
            self.start_index = event.seq
            if event.terminal:
                self.done = True
                break
        self.polling_gap = not out and not self.done
        return out


# -- logs ---------------------------------------------------------------------------------------


def loggable(value: object, limit: int = 200) -> str:
    """``value`` as it may go into a log line when a peer controls it (a request id, a frame's
    field, a header): quoted, every control or invisible character escaped the way ``repr``
    escapes it (so a newline or an ANSI escape cannot start a forged line or restyle the
    terminal), and at most ``limit`` characters of it shown."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text) - limit} more characters)"


# -- host names and origins ---------------------------------------------------------------------

#: What a loopback-bound relay also answers to.
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS: Final[Mapping[str, int]] = {"http": 80, "https": 443}
_LABELS: Final = re.compile(
    r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*"
)


def _name(text: str) -> str | None:
    """``text`` as a host name (lower-case, no trailing dot, an IPv6 address without brackets,
    compressed), or None when it is not one."""
    text = text.lower()
    if text.startswith("[") and text.endswith("]"):
        try:
            address = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            return None
        return address.compressed
    if text.endswith("."):
        text = text[:-1]
    if not text or len(text) > 253 or not _LABELS.fullmatch(text):
        return None
    return text


def split_host(value: object) -> tuple[str, int | None] | None:
    """The name and port of ``host[:port]`` (a ``Host`` header, or a host a relay is told to
    answer to): the name lower-case without a trailing dot, an IPv6 address (in brackets,
    ``[::1]:8000``) without its brackets; the port None when absent. None when malformed."""
    if not isinstance(value, str) or len(value) > 300:
        return None
    text = value.strip()
    port: int | None = None
    head, colon, tail = text.rpartition(":")
    if colon and not (text.startswith("[") and text.endswith("]")) and head.count(":") == 0:
        name_part = head  # name:port
    elif colon and head.startswith("[") and head.endswith("]"):
        name_part = head  # [v6]:port
    else:
        name_part, tail = text, ""
    if tail:
        if not tail.isascii() or not tail.isdigit() or not 0 < int(tail) < 65536:
            return None
        port = int(tail)
    elif colon and name_part is head:
        return None  # "name:" with no port
    name = _name(name_part)
    if name is None:
        return None
    return name, port


def parse_origin(value: object) -> tuple[str, str, int] | None:
    """``(scheme, name, port)`` of a browser origin ``http(s)://host[:port]`` (a trailing ``/``
    is tolerated; the port defaults to the scheme's), or None when it is not such an origin
    (``null``, another scheme, a path, user info...)."""
    if not isinstance(value, str):
        return None
    scheme, separator, rest = value.strip().partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in _DEFAULT_PORTS:
        return None
    rest = rest.removesuffix("/")
    if not rest or any(c in rest for c in "/?#@\\ "):
        return None
    host = split_host(rest)
    if host is None:
        return None
    name, port = host
    return scheme, name, _DEFAULT_PORTS[scheme] if port is None else port


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) surely means this
    machine: ``localhost`` or a loopback address. Any other name may resolve to anything."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@attrs.frozen
class HostPolicy:
    """Which ``Host`` a relay answers to and which browser ``Origin`` it lets in.

    ``names``: the host names it answers to -- its own address (with ``localhost``,
    ``127.0.0.1`` and ``::1`` when that is a loopback address) and the hosts it is told to;
    ``origins``: the allowed origins as ``(scheme, name, port)``. Build one with
    :meth:`build`. A missing ``Host`` passes (only browsers can be rebound, and they always
    send one); a missing ``Origin`` passes (not a browser: the token is the whole story).
    """

    names: frozenset[str]
    origins: frozenset[tuple[str, str, int]]

    @classmethod
    def build(
        cls,
        server: tuple[str, int] | None,
        allowed_hosts: Iterable[str] = (),
        origins: Iterable[str] | None = None,
    ) -> HostPolicy:
        """The policy of a relay listening on ``server`` (its address and port, as the
        connection's local end; None when unknown) that also answers to ``allowed_hosts``
        (``name`` or ``name:port``). ``origins``: the allowed origins, or None for the
        default -- ``http`` and ``https`` on each of those names with the server's port, and
        for an allowed host also with its own port if it names one, else with 80 and 443 too
        (the public port of a reverse proxy in front). Raises
        :class:`~protocols.errors.ValidationError` for a malformed host or origin."""
        names: set[str] = set()
        ports: dict[str, set[int]] = {}
        own_port = server[1] if server is not None else None
        if server is not None:
            own = split_host(server[0]) or split_host(f"[{server[0]}]")
            if own is not None:
                local = {own[0]} | (LOOPBACK_NAMES if is_loopback(own[0]) else set())
                for name in local:
                    names.add(name)
                    if own_port is not None:
                        ports.setdefault(name, set()).add(own_port)
        for entry in allowed_hosts:
            host = split_host(entry) if isinstance(entry, str) else None
            if host is None:
                raise ValidationError(
                    f"not a host name (name or name:port): {loggable(entry, 100)}"
                )
            name, port = host
            names.add(name)
            wanted = {port} if port is not None else {80, 443}
            if port is None and own_port is not None:
                wanted.add(own_port)
            ports.setdefault(name, set()).update(wanted)
        allowed: set[tuple[str, str, int]] = set()
        if origins is None:
            for name, name_ports in ports.items():
                allowed.update(
                    (scheme, name, port) for scheme in _DEFAULT_PORTS for port in name_ports
                )
        else:
            for origin in origins:
                parsed = parse_origin(origin) if isinstance(origin, str) else None
                if parsed is None:
                    raise ValidationError(
                        "not an origin (http(s)://host[:port]): " + loggable(origin, 100)
                    )
                allowed.add(parsed)
        return cls(frozenset(names), frozenset(allowed))

    def host_ok(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header (None: none) is for this relay."""
        if host is None:
            return True
        parsed = split_host(host)
        return parsed is not None and parsed[0] in self.names

    def origin_ok(self, origin: str | None) -> bool:
        """Whether a request with this ``Origin`` header (None: none) may come in."""
        if origin is None:
            return True
        parsed = parse_origin(origin)
        return parsed is not None and parsed in self.origins


# The frames' names before each said it was a frame (``Abort`` and ``Delta`` also name the cancel
# token and the provider's delta): kept, so imports written against them still work.
Hello = HelloFrame
Stream = StreamFrame
Cancel = CancelFrame
Approve = ApproveFrame
Ready = ReadyFrame
Delta = DeltaFrame
Result = ResultFrame
Abort = AbortFrame
Error = ErrorFrame
Approval = ApprovalFrame
