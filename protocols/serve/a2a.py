"""A2A (Agent2Agent) 1.0 over JSON-RPC and Server-Sent Events, sans-IO.

A2A 1.0 is what the official ``a2a-sdk`` (1.x) client speaks to a card that lists a 1.0
interface: methods ``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``CancelTask`` and
``SubscribeToTask``; ProtoJSON objects (camelCase; enums such as ``TASK_STATE_WORKING`` and
``ROLE_USER``; a part holds one of ``text``, ``raw``, ``url``, ``data``; a stream event is
``{"task" | "message" | "statusUpdate" | "artifactUpdate": {...}}``).

* :func:`decode_rpc` reads a request body into an :class:`A2ARequest` or the
  :class:`RpcError` to answer it with (it never raises); :func:`rpc_result`, :func:`rpc_error`
  and :func:`sse_event` write answers; :func:`message_to_messages` turns a message into ours.
* :func:`agent_card` is an agent's card, served at :data:`CARD_PATH`.
* :class:`TaskEncoder` turns a run's :class:`~protocols.live.RunEvent`\\ s into a task's stream
  events and its Task; :func:`state_of` maps job statuses and run endings to :class:`TaskState`.
* The client's side -- reading a remote server's stream, writing a client's requests -- is
  :mod:`protocols.serve.a2a_client`.
"""

from __future__ import annotations

import binascii
import enum
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal

import attrs

from .._json import JSON, dumpb, dumpb_own, dumps, loads
from ..codec import from_json, to_json
from ..errors import Category, ProtocolError, ValidationError
from ..jobs import ApprovalAnswer
from ..live import RunEvent
from ..messages import AgentResult, Message, StopReason
from ..questions import Question
from ..relay_jobs import shown_event

__all__ = [
    "CARD_PATH", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_PARTS", "METHODS", "A2AMessage", "A2APart",
    "A2ARequest", "RpcCode", "RpcError", "TaskEncoder", "TaskState", "agent_card", "approvals_of",
    "decode_rpc", "message_to_messages", "rpc_error", "rpc_result", "sse_event", "state_of",
]  # fmt: skip

#: Where an agent's card is served, under the base URL its clients are given.
CARD_PATH: Final = "/.well-known/agent-card.json"
#: The largest request body :func:`decode_rpc` reads by default (bytes; images come inline).
DEFAULT_MAX_BYTES: Final = 4 * 1024 * 1024
#: The most parts a message may have by default.
DEFAULT_MAX_PARTS: Final = 64
_MAX_ID: Final = 1000

#: The methods served (the streaming ones answer with Server-Sent Events).
METHODS: Final = ("SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "SubscribeToTask")
_STREAMING: Final = frozenset({"SendStreamingMessage", "SubscribeToTask"})


class RpcCode(enum.IntEnum):
    """A2A's JSON-RPC error codes (its spec's section 5.4) and JSON-RPC 2.0's own."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    TASK_NOT_FOUND = -32001
    TASK_NOT_CANCELABLE = -32002
    PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
    UNSUPPORTED_OPERATION = -32004
    CONTENT_TYPE_NOT_SUPPORTED = -32005
    INVALID_AGENT_RESPONSE = -32006
    EXTENDED_CARD_NOT_CONFIGURED = -32007
    EXTENSION_SUPPORT_REQUIRED = -32008
    VERSION_NOT_SUPPORTED = -32009


#: A2A methods known but not served, and the error each is answered with.
_PUSH: Final = (RpcCode.PUSH_NOTIFICATION_NOT_SUPPORTED, "push notifications are not supported")
_NOT_SERVED: Final[Mapping[str, tuple[RpcCode, str]]] = {
    "ListTasks": (RpcCode.UNSUPPORTED_OPERATION, "listing tasks is not supported"),
    "GetExtendedAgentCard": (RpcCode.EXTENDED_CARD_NOT_CONFIGURED, "no extended agent card"),
    "CreateTaskPushNotificationConfig": _PUSH, "GetTaskPushNotificationConfig": _PUSH,
    "ListTaskPushNotificationConfigs": _PUSH, "DeleteTaskPushNotificationConfig": _PUSH,
}  # fmt: skip


class TaskState(enum.StrEnum):
    """A task's state, by its 1.0 name."""

    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
    COMPLETED = "TASK_STATE_COMPLETED"
    CANCELED = "TASK_STATE_CANCELED"
    FAILED = "TASK_STATE_FAILED"
    REJECTED = "TASK_STATE_REJECTED"

    @property
    def terminal(self) -> bool:
        """The task never leaves this state (completed, canceled, failed, rejected)."""
        return self in (TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED, self.REJECTED)

    @property
    def interrupted(self) -> bool:
        """The task waits for its client (input or auth required): a stream ends here."""
        return self in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED)


# ---------------------------------------------------------------------------------------------
# Requests


@attrs.frozen
class A2APart:
    """A message's part: ``text`` (``kind="text"``), any JSON ``data`` (``"data"``) or an image
    (``"file"``: its bytes as base64 in ``raw``, or a ``data:`` URL in ``url``)."""

    kind: Literal["text", "data", "file"]
    text: str = ""
    data: JSON = None
    raw: str | None = None
    url: str | None = None
    media_type: str | None = None
    filename: str | None = None


@attrs.frozen
class A2AMessage:
    """A message as A2A carries it (``role``: ``user`` or ``agent``)."""

    message_id: str
    role: Literal["user", "agent"]
    parts: tuple[A2APart, ...]
    context_id: str | None = None
    task_id: str | None = None


@attrs.frozen
class A2ARequest:
    """A valid request: its JSON-RPC ``id`` and ``method`` (one of :data:`METHODS`); a send's
    ``message`` (role ``user``), ``blocking`` (not ``returnImmediately``) and
    ``accepted_output_modes``; ``task_id`` (the task asked about, or the one a message goes on
    with), ``context_id`` (a message's) and ``history_length`` (``None``: unset)."""

    id: str | int | None
    method: str
    message: A2AMessage | None = None
    task_id: str | None = None
    context_id: str | None = None
    history_length: int | None = None
    blocking: bool = True
    accepted_output_modes: tuple[str, ...] = ()

    @property
    def streaming(self) -> bool:
        """The answer is a stream of Server-Sent Events."""
        return self.method in _STREAMING


@attrs.frozen
class RpcError:
    """A request refused: the JSON-RPC error (:attr:`body`) to answer it with."""

    id: str | int | None
    code: int
    message: str

    @property
    def body(self) -> bytes:
        """The JSON-RPC error response."""
        return rpc_error(self.id, self.code, self.message)


class _Refused(Exception):
    def __init__(self, message: str, code: RpcCode = RpcCode.INVALID_PARAMS) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def decode_rpc(
    body: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, max_parts: int = DEFAULT_MAX_PARTS
) -> A2ARequest | RpcError:
    """The request ``body`` holds, validated, or the error to answer it with -- never raises:

    * ``-32700`` (parse error): not strict JSON (invalid UTF-8, duplicate keys, NaN, ...);
    * ``-32600`` (invalid request): over ``max_bytes``; a batch; not an object with
      ``"jsonrpc": "2.0"``, a string ``method`` and a string, integer or null ``id``;
    * ``-32601`` (method not found): no such method -- ``-32004``, ``-32007`` or ``-32003``
      for ``ListTasks``, ``GetExtendedAgentCard`` and the push notification methods;
    * ``-32602`` (invalid params): params not what the method takes -- a task's ``id``, or a
      ``message`` with a ``messageId``, the role ``ROLE_USER`` and 1 to ``max_parts`` parts,
      each with exactly one of ``text``, ``data``, ``raw`` (base64) and ``url``;
    * ``-32005`` (content type not supported): a file that is not an image given inline.

    Unknown fields are ignored, as A2A asks; the ``A2A-Version`` header is the route's."""
    if len(body) > max_bytes:
        return RpcError(None, RpcCode.INVALID_REQUEST, f"the request is over {max_bytes} bytes")
    try:
        doc = loads(body, category=Category.USER)
    except ProtocolError as error:
        return RpcError(None, RpcCode.PARSE_ERROR, f"the request is not JSON: {error.message}")
    if not isinstance(doc, dict):
        what = "batch requests are not supported" if isinstance(doc, list) else "not an object"
        return RpcError(None, RpcCode.INVALID_REQUEST, f"invalid request: {what}")
    rid = doc.get("id")
    if isinstance(rid, bool) or not isinstance(rid, str | int | None) or len(str(rid)) > _MAX_ID:
        return RpcError(None, RpcCode.INVALID_REQUEST, "id must be a string, an integer or null")
    method = doc.get("method")
    if doc.get("jsonrpc") != "2.0" or not isinstance(method, str):
        return RpcError(rid, RpcCode.INVALID_REQUEST, 'needs "jsonrpc": "2.0" and a method')
    if method in _NOT_SERVED:
        return RpcError(rid, *_NOT_SERVED[method])
    if method not in METHODS:
        return RpcError(rid, RpcCode.METHOD_NOT_FOUND, f"no method {method[:80]!r}")
    params = doc.get("params", {})
    try:
        if not isinstance(params, dict):
            raise _Refused("params must be an object")
        if method in ("SendMessage", "SendStreamingMessage"):
            return _send(rid, method, params, max_parts)
        history = _count(params.get("historyLength"), "params.historyLength")
        return A2ARequest(
            rid, method, task_id=_id(params.get("id"), "params.id"), history_length=history
        )
    except _Refused as refusal:
        return RpcError(rid, refusal.code, refusal.message)


def _send(rid: str | int | None, method: str, params: dict[str, Any], max_parts: int) -> A2ARequest:
    message = _message(params.get("message"), "params.message", max_parts)
    if message.role != "user":
        raise _Refused("params.message.role must be ROLE_USER (a message sent to an agent)")
    config = params.get("configuration")
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise _Refused("params.configuration must be an object")
    later = config.get("returnImmediately", False)
    modes = config.get("acceptedOutputModes", [])
    if not isinstance(later, bool):
        raise _Refused("params.configuration.returnImmediately must be true or false")
    if not (isinstance(modes, list) and all(isinstance(mode, str) for mode in modes)):
        raise _Refused("params.configuration.acceptedOutputModes must be a list of strings")
    return A2ARequest(
        rid,
        method,
        message=message,
        task_id=message.task_id,
        context_id=message.context_id,
        history_length=_count(config.get("historyLength"), "params.configuration.historyLength"),
        blocking=not later,
        accepted_output_modes=tuple(modes),
    )


def _id(value: Any, path: str, *, optional: bool = False) -> Any:
    if (value is None and optional) or (isinstance(value, str) and 0 < len(value) <= _MAX_ID):
        return value
    raise _Refused(f"{path} must be a non-empty string of at most {_MAX_ID} characters")


def _count(value: Any, path: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise _Refused(f"{path} must be an integer >= 0")
    return value


_ROLES: Final[Mapping[Any, Literal["user", "agent"]]] = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}


def _message(value: Any, path: str, max_parts: int) -> A2AMessage:
    if not isinstance(value, dict):
        raise _Refused(f"{path} must be an object")
    role = _ROLES.get(value.get("role"))
    if role is None:
        raise _Refused(f"{path}.role must be ROLE_USER or ROLE_AGENT")
    parts = value.get("parts")
    if not isinstance(parts, list) or not 1 <= len(parts) <= max_parts:
        raise _Refused(f"{path}.parts must be a list of 1 to {max_parts} parts")
    return A2AMessage(
        message_id=_id(value.get("messageId"), f"{path}.messageId"),
        role=role,
        parts=tuple(_part(part, f"{path}.parts[{i}]") for i, part in enumerate(parts)),
        context_id=_id(value.get("contextId"), f"{path}.contextId", optional=True),
        task_id=_id(value.get("taskId"), f"{path}.taskId", optional=True),
    )


_TYPE: Final = RpcCode.CONTENT_TYPE_NOT_SUPPORTED


def _part(value: Any, path: str) -> A2APart:
    if not isinstance(value, dict):
        raise _Refused(f"{path} must be an object")
    present = [key for key in ("text", "raw", "url", "data") if value.get(key) is not None]
    media, name = value.get("mediaType"), value.get("filename")
    if len(present) != 1:
        raise _Refused(f"{path} must have exactly one of text, raw, url and data")
    if not isinstance(media, str | None) or not isinstance(name, str | None):
        raise _Refused(f"{path}.mediaType and .filename must be strings")
    key = present[0]
    if key == "data":
        return A2APart("data", data=value["data"], media_type=media)
    if not isinstance(value[key], str):
        raise _Refused(f"{path}.{key} must be a string")
    if key == "text":
        return A2APart("text", text=value["text"])
    if key == "url" and not value["url"].startswith("data:image/"):
        raise _Refused(f"{path}: files by URL are not supported (send an image inline)", _TYPE)
    if key == "raw":
        if not (media or "").startswith("image/"):
            shown = (media or "untyped")[:80]
            raise _Refused(f"{path}: only images are supported as files, not {shown!r}", _TYPE)
        try:
            binascii.a2b_base64(value["raw"], strict_mode=True)
        except (binascii.Error, ValueError):
            raise _Refused(f"{path}.raw must be base64") from None
    return A2APart(
        "file", raw=value.get("raw"), url=value.get("url"), media_type=media, filename=name
    )


def rpc_result(id: str | int | None, result: JSON) -> bytes:
    """A JSON-RPC success response: compact strict JSON (no newline in it)."""
    return dumpb_own({"jsonrpc": "2.0", "id": id, "result": result})


def rpc_error(id: str | int | None, code: int, message: str) -> bytes:
    """A JSON-RPC error response: ``{"jsonrpc", "id", "error": {"code", "message"}}``."""
    return dumpb({"jsonrpc": "2.0", "id": id, "error": {"code": int(code), "message": message}})


def sse_event(payload: bytes, *, error: bool = False) -> bytes:
    """``payload`` (one :func:`rpc_result` or :func:`rpc_error`) as a Server-Sent Event: one
    ``data:`` line, the event named ``error`` when it is one (the SDK's client then raises the
    A2A error of its code)."""
    return (b"event: error\n" if error else b"") + b"data: " + payload + b"\n\n"


def message_to_messages(message: A2AMessage) -> list[Message]:
    """Our messages for ``message``: one, with its ``message_id`` as id -- its text and data
    parts in order, one per line (data as compact JSON), and a user's images as its
    :attr:`~protocols.messages.Message.images` (an agent's message, an assistant one, shows a
    file as ``[file <name>]``)."""
    lines: list[str] = []
    images: list[str] = []
    for part in message.parts:
        if part.kind == "file" and message.role == "user":
            images.append(part.url or f"data:{part.media_type};base64,{part.raw}")
        elif part.kind == "file":
            lines.append(f"[file {part.filename or part.media_type or ''}]")
        else:
            lines.append(part.text if part.kind == "text" else dumps(part.data))
    if message.role == "agent":
        return [Message.assistant("\n".join(lines), id=message.message_id)]
    return [Message.user("\n".join(lines), images=images, id=message.message_id)]


def approvals_of(message: A2AMessage) -> tuple[ApprovalAnswer, ...]:
    """The approvals ``message`` gives, from its data parts ``{"answers": [{"call_id",
    "allow", "reason"?}, ...]}`` (what an ``input-required`` status asks for) -- an answer to a
    question as ``{"call_id", "answer"}`` (``allow`` true, the answer as its ``value``, checked
    against the question when it is recorded); none when it has no such part. A malformed
    answer raises :class:`~protocols.errors.ValidationError`."""
    out: list[ApprovalAnswer] = []
    for part in message.parts:
        if part.kind == "data" and isinstance(part.data, dict) and "answers" in part.data:
            answers = part.data["answers"]
            for each in answers if isinstance(answers, list) else [None]:
                answer = each if isinstance(each, dict) else {}
                call_id, allow, reason = (answer.get(k) for k in ("call_id", "allow", "reason"))
                reason = "" if reason is None else reason
                value = answer.get("answer")
                if value is not None and allow is None:
                    allow = True  # an answer to a question
                if not (isinstance(call_id, str) and call_id and isinstance(allow, bool)):
                    raise ValidationError("an answer needs a call_id (string), allow (boolean)")
                if not isinstance(reason, str):
                    raise ValidationError("an answer's reason must be a string")
                out.append(ApprovalAnswer(call_id, allow, reason, value))
    return tuple(out)


def agent_card(
    name: str,
    description: str,
    url: str,
    *,
    streaming: bool = True,
    skills: Sequence[Mapping[str, JSON]] | None = None,
    version: str = "1.0.0",
    input_modes: Sequence[str] = ("text/plain", "application/json"),
    output_modes: Sequence[str] = ("text/plain",),
) -> dict[str, JSON]:
    """The Agent Card of agent ``name`` whose JSON-RPC endpoint is ``url`` (A2A 1.0: one
    ``supportedInterfaces`` entry, ``JSONRPC`` at ``url``, protocol version ``1.0``, which an
    SDK client picks). ``skills``: objects with ``id``, ``name``, ``description`` (strings;
    ``tags``, which A2A wants non-empty, default to the id); by default one, the agent. Raises
    :class:`~protocols.errors.ValidationError` for a skill lacking one."""
    shown = [dict(skill) for skill in skills or ({"id": name, "name": name},)]
    for skill in shown:
        skill.setdefault("description", description)
        if not all(isinstance(skill.get(key), str) for key in ("id", "name", "description")):
            raise ValidationError("a skill needs an id, a name and a description (strings)")
        skill.setdefault("tags", [skill["id"]])
    return {
        "name": name,
        "description": description,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "version": version,
        "capabilities": {"streaming": streaming, "pushNotifications": False},
        "defaultInputModes": list(input_modes),
        "defaultOutputModes": list(output_modes),
        "skills": shown,
    }


# ---------------------------------------------------------------------------------------------
# A run's events as a task's


_STATES: Final[Mapping[str, TaskState]] = {
    "queued": TaskState.SUBMITTED, "running": TaskState.WORKING,
    "awaiting_input": TaskState.INPUT_REQUIRED, "cancelled": TaskState.CANCELED,
} | dict.fromkeys(("completed", "finished"), TaskState.COMPLETED) | dict.fromkeys(
    ("partial", "failed", "abandoned"), TaskState.FAILED
)  # fmt: skip


def state_of(status: str) -> TaskState:
    """The A2A state of a job in ``status`` (a :class:`~protocols.jobs.JobStatus`) or of a run
    that ended with the event ``status``: queued -> submitted, running -> working,
    awaiting_input -> input-required, completed / finished -> completed, cancelled -> canceled;
    partial, failed, abandoned -> failed (a partial result is not the answer asked for; the
    artifact still holds it). Raises :class:`~protocols.errors.ValidationError` for others."""
    try:
        return _STATES[str(status)]
    except KeyError:
        raise ValidationError(f"no A2A task state for {status!r}") from None


def _stamp(time: float) -> str | None:
    try:
        moment = datetime.fromtimestamp(time, UTC)
    except (OverflowError, ValueError, OSError):  # not finite, or not a date
        return None
    return moment.isoformat(timespec="milliseconds")[:-6] + "Z"


class TaskEncoder:
    """Task ``task_id`` of context ``context_id`` (A2A wants both non-empty: a server mints a
    context for a message without one) as A2A shows it, from its run's events (as
    :func:`~protocols.relay_jobs.shown_event` shows them to the owner: no exception's text).
    :meth:`feed` gives the stream events (``SendStreamingMessage`` results) each event makes;
    the same events always make the same stream (message ids derive from seqs, timestamps
    from the events' times). The stream:

    * opens with the Task (``submitted``, its ``history`` the messages given), then a
      ``working`` status update (as it does again when a task goes on after input-required);
    * streams the answer as chunks of one artifact (``artifact_id``): the first delta of a
      turn replaces its text (``append`` false), the next ones append -- so the artifact ends
      as the last turn's text, the run's answer. (Artifact chunks, not status messages: the
      SDK's client yields each one, its task aggregation appends a chunk's parts, and a
      status message replaces the last one instead of adding to it);
    * shows tool calls and results, progress, sub-agents and handoffs as ``working`` status
      updates whose agent message holds one data part ``{"event": <kind>, ...}`` (the other
      kinds -- thinking, usage, retries, ... -- show nothing);
    * holds deltas back after a ``gap`` or a ``rewind`` (some are lost, or void) until the next
      turn, and before its end sends the whole answer (``append`` false, ``lastChunk`` true)
      if what it streamed is not the run's content: the artifact always ends equal to it;
    * ends with one status update, after which :meth:`feed` gives nothing: ``finished`` ->
      completed (failed when partial, saying why: a partial answer is not the one asked for),
      ``cancelled`` -> canceled, ``failed`` -> failed (with its error), ``awaiting_input`` ->
      input-required (its message asks for the approvals: :func:`approvals_of` reads them).
    """

    def __init__(
        self,
        task_id: str,
        context_id: str,
        *,
        history: Iterable[A2AMessage] = (),
        artifact_id: str = "answer",
    ) -> None:
        self.task_id, self.context_id, self.artifact_id = task_id, context_id, artifact_id
        #: The task's state, as last shown.
        self.state = TaskState.SUBMITTED
        #: This stream has had its final event.
        self.ended = False
        self._opened = False
        self._pieces: list[str] = []  # the artifact's text as a client assembled it, in pieces
        self._artifact = False  # the artifact exists
        self._fresh = True  # the next delta starts the artifact anew (a new turn)
        self._stale = False  # deltas are held back (some were lost)
        self._status: dict[str, JSON] = {"state": self.state.value}
        self._history: list[dict[str, JSON]] = []
        for message in history:
            self.add_message(message)

    def add_message(self, message: A2AMessage) -> None:
        """Keep ``message`` (one the task was sent) in the task's history."""
        parts = [_part_json(part) for part in message.parts]
        self._history.append(self._message(message.message_id, parts, message.role))

    def feed(self, event: RunEvent) -> list[dict[str, JSON]]:
        """The stream events ``event`` makes: none after the final one."""
        if self.ended:
            return []
        out = [] if self._opened else [{"task": self.task()}]
        self._opened = True
        kind, data = event.kind, event.data
        if self.state is not TaskState.WORKING and kind not in ("finished", "failed", "cancelled"):
            out.append(self._update(event, TaskState.WORKING))
        if kind == "content":
            out += self._delta(data["text"])
        elif kind == "turn":
            self._fresh, self._stale = True, False
        elif kind in ("gap", "rewind"):
            self._stale = True
        elif kind in _NOTES:
            note = {"event": kind} | {key: _plain(data.get(key)) for key in _NOTES[kind]}
            out.append(self._update(event, TaskState.WORKING, [_data_part(note)]))
        elif kind == "awaiting_input":
            calls = [dict(call) for call in data.get("calls", ())]
            parts = [{"text": _asking(calls)}, _data_part({"event": kind, "calls": calls})]
            out.append(self._update(event, TaskState.INPUT_REQUIRED, parts, end=True))
        elif kind == "failed":
            error = shown_event(event).data.get("error") or {}
            text = f"{error.get('type') or 'Error'}: {error.get('message') or 'the run failed'}"
            out.append(self._update(event, TaskState.FAILED, [{"text": text}], end=True))
        elif kind in ("finished", "cancelled"):
            result, response = data.get("result"), data.get("response")
            content = result.content if isinstance(result, AgentResult) else None
            if isinstance(response, Mapping) and isinstance(response.get("content"), str):
                content = response["content"]  # a relay run's
            out += self._settle(content)
            stop = result.stop if isinstance(result, AgentResult) else StopReason.COMPLETE
            if kind == "cancelled":
                out.append(self._update(event, TaskState.CANCELED, end=True))
            elif stop is StopReason.COMPLETE:
                out.append(self._update(event, TaskState.COMPLETED, end=True))
            else:
                why = f"the run stopped early ({stop.value}); the artifact holds a partial answer"
                out.append(self._update(event, TaskState.FAILED, [{"text": why}], end=True))
        return out

    def resume(self) -> list[dict[str, JSON]]:
        """Start another stream of the task (``SubscribeToTask``, or a message going on after
        input-required): its first event, the Task as known now. :meth:`feed` goes on from
        there; the stream of a task that has ended ends with that event (A2A answers a
        subscribe to such a task with ``-32004``: the route's choice)."""
        self._opened, self.ended = True, self.state.terminal
        return [{"task": self.task()}]

    def task(self, *, history_length: int | None = None) -> dict[str, JSON]:
        """The Task as known (``GetTask``'s and ``CancelTask``'s result; a blocking
        ``SendMessage``'s is ``{"task": ...}`` once the stream has ended): ``id``, ``contextId``,
        ``status`` (state, message, timestamp), ``artifacts`` (the answer as one text part,
        once there is one) and ``history`` (its last ``history_length`` messages: all when
        ``None``, and the field left out when 0 or none)."""
        out: dict[str, JSON] = {"id": self.task_id, "contextId": self.context_id}
        out["status"] = dict(self._status)
        if self._artifact:
            out["artifacts"] = [self._artifact_json(self._answer())]
        history = self._history[-history_length:] if history_length else self._history
        if history and history_length != 0:
            out["history"] = list(history)
        return out

    def _delta(self, text: str) -> list[dict[str, JSON]]:
        append = self._artifact and not self._fresh
        if self._stale or (append and not text):
            return []
        if not append:
            self._pieces.clear()
        self._pieces.append(text)
        self._artifact, self._fresh = True, False
        return [self._chunk(text, append=append, last=False)]

    def _answer(self) -> str:
        pieces = self._pieces
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]
        return pieces[0] if pieces else ""

    def append_text(self, event: RunEvent) -> str | None:
        """The text of ``event`` when all :meth:`feed` would make of it is one chunk appended
        to the answer (:meth:`appended` of that text) -- taken as :meth:`feed` takes it, so a
        route may frame it as it framed the chunk before (the hot path: one per delta);
        ``None`` when it is not such an event (then :meth:`feed` it)."""
        if (
            event.kind != "content"
            or self.ended
            or self.state is not TaskState.WORKING
            or not self._artifact
            or self._fresh
            or self._stale
        ):
            return None
        text = event.data.get("text")
        if not isinstance(text, str) or not text:
            return None
        self._pieces.append(text)
        return text

    def appended(self, text: str) -> dict[str, JSON]:
        """The stream event that appends ``text`` to the answer (what :meth:`append_text`
        stands for)."""
        return self._chunk(text, append=True, last=False)

    def _settle(self, content: str | None) -> list[dict[str, JSON]]:
        if content is None or (content == self._answer() and (self._artifact or not content)):
            return []
        self._pieces[:] = [content]
        self._artifact = True
        return [self._chunk(content, append=False, last=True)]

    def _update(
        self,
        event: RunEvent,
        state: TaskState,
        parts: list[dict[str, JSON]] | None = None,
        *,
        end: bool = False,
    ) -> dict[str, JSON]:
        self.state, self.ended = state, end
        status: dict[str, JSON] = {"state": state.value}
        if parts:
            status["message"] = self._message(f"{self.task_id}-{event.seq}", parts)
        if (stamp := _stamp(event.time)) is not None:
            status["timestamp"] = stamp
        self._status = status
        ids: dict[str, JSON] = {"taskId": self.task_id, "contextId": self.context_id}
        return {"statusUpdate": {**ids, "status": status}}

    def _chunk(self, text: str, *, append: bool, last: bool) -> dict[str, JSON]:
        update: dict[str, JSON] = {"taskId": self.task_id, "contextId": self.context_id}
        update["artifact"] = self._artifact_json(text)
        if append:
            update["append"] = True
        if last:
            update["lastChunk"] = True
        return {"artifactUpdate": update}

    def _artifact_json(self, text: str) -> dict[str, JSON]:
        return {"artifactId": self.artifact_id, "name": "answer", "parts": [{"text": text}]}

    def _message(
        self, message_id: str, parts: list[dict[str, JSON]], role: str = "agent"
    ) -> dict[str, JSON]:
        return {
            "messageId": message_id,
            "contextId": self.context_id,
            "taskId": self.task_id,
            "role": f"ROLE_{role.upper()}",
            "parts": parts,
        }


_ANSWERS: Final = '{"answers": [{"call_id": ..., "allow": true or false, "reason": ...}]}'
_QUESTION_ANSWERS: Final = '{"answers": [{"call_id": ..., "answer": ...}]}'


def _asking(calls: Sequence[Mapping[str, Any]]) -> str:
    """What an ``input-required`` status says: the approvals asked, and the questions -- one
    question alone is its prompt and what it expects, answered by the task's next message."""
    approvals = [c for c in calls if "question" not in c]
    questions = [c for c in calls if "question" in c]
    out: list[str] = []
    if approvals:
        asked = "; ".join(f"{c['tool']} ({c['call_id']}): {c['reason']}" for c in approvals)
        out.append(f"approval needed: {asked}. Answer with a data part {_ANSWERS}")
    shown = [(c["call_id"], _question(c["question"])) for c in questions]
    if len(shown) == 1 and not approvals:
        [(_, (prompt, expects))] = shown
        out.append(f"{prompt} (expected: {expects}; reply with the answer on this task)")
    elif shown:
        asked = "; ".join(f"{call} asks: {prompt} ({expects})" for call, (prompt, expects) in shown)
        out.append(f"questions: {asked}. Answer with a data part {_QUESTION_ANSWERS}")
    return " ".join(out)


def _question(data: Any) -> tuple[str, str]:
    """A question's prompt and what it expects, from its JSON (as an event carries it)."""
    try:
        question = from_json(Question, data)
    except ProtocolError:
        return str(data.get("prompt", "")) if isinstance(data, dict) else "", "an answer"
    return question.prompt, question.expects()


def _data_part(data: JSON) -> dict[str, JSON]:
    return {"data": data, "mediaType": "application/json"}


def _part_json(part: A2APart) -> dict[str, JSON]:
    if part.kind == "text":
        return {"text": part.text}
    if part.kind == "data":
        return {"data": part.data, "mediaType": part.media_type or "application/json"}
    fields = {
        "raw": part.raw,
        "url": part.url,
        "mediaType": part.media_type,
        "filename": part.filename,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _plain(value: Any) -> JSON:
    return to_json(value) if attrs.has(type(value)) else value


#: The events shown as ``working`` status updates, and the fields of theirs each shows.
_NOTES: Final[Mapping[str, tuple[str, ...]]] = {
    "tool_call": ("call",), "tool_result": ("result",), "progress": ("call_id", "text"),
    "subagent_started": ("call_id", "agent", "run_id"), "handoff": ("call_id", "agent"),
    "subagent_finished": ("call_id", "run_id", "status"),
}  # fmt: skip
