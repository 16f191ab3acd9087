"""The relay protocol's constants (versions, limits, headers, error codes) and the field checks its
frames run (see :mod:`protocols.relay`, which re-exports the public ones)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from ._relay_hosts import loggable
from .errors import ValidationError
from .messages import Message, ProviderOptions, ToolDefinition

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
