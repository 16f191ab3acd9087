"""A2A 1.0's client side, sans-IO: what :class:`actors.a2a.A2AAgent` sends a remote A2A agent
and reads from it (the server side is :mod:`protocols.serve.a2a`).

* :func:`read_stream_event` and :class:`TaskView` read a remote server's stream events;
* :func:`send_request`, :func:`task_request` and :func:`answer_parts` write the requests,
  :func:`read_card` reads an Agent Card, and :class:`RemoteTask` follows a task's answers
  (:func:`read_response` each), saying why a task gave no answer.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from .._json import JSON, dumpb, loads
from ..errors import ProtocolError, SizeLimitError, ValidationError
from .a2a import RpcError, TaskState, _data_part

__all__ = [
    "CLIENT_HEADERS", "RemoteCard", "RemoteTask", "Reply", "StateChange", "StreamItem", "Taken",
    "TaskSnapshot", "TaskView", "TextDelta", "answer_parts", "read_card", "read_response",
    "read_stream_event", "send_request", "task_request",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# A remote server's stream


@attrs.frozen
class TextDelta:
    """An artifact chunk: ``text`` appended to artifact ``artifact_id`` -- or replacing its
    text, when not ``append``; ``data``: its data parts."""

    artifact_id: str
    text: str
    append: bool
    last_chunk: bool
    data: tuple[JSON, ...] = ()

    @property
    def final(self) -> bool:
        """Never: a chunk does not end a stream."""
        return False


@attrs.frozen
class StateChange:
    """The task is now in ``state``; ``text`` and ``data`` are its status message's; ``final``:
    nothing more comes in this stream (the state is terminal or interrupted)."""

    state: TaskState
    text: str
    data: tuple[JSON, ...]
    final: bool


@attrs.frozen
class TaskSnapshot:
    """The whole task: its ids, ``state``, status message ``text``, ``artifacts`` (``(id,
    text)`` each); ``final`` when its state is terminal (a stream that opens with a task
    waiting for input goes on)."""

    task_id: str
    context_id: str
    state: TaskState
    text: str
    artifacts: tuple[tuple[str, str], ...]
    final: bool


@attrs.frozen
class Reply:
    """A message the agent answered with instead of a task: always final."""

    text: str
    data: tuple[JSON, ...]
    final: bool = True


StreamItem: TypeAlias = TextDelta | StateChange | TaskSnapshot | Reply


def _refuse(what: str) -> ProtocolError:
    return ProtocolError(f"an A2A stream event {what}", code="decode")


def _texts(parts: Any) -> tuple[str, tuple[JSON, ...]]:
    if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
        raise _refuse("has parts that are not a list of objects")
    texts = [part["text"] for part in parts if isinstance(part.get("text"), str)]
    return "".join(texts), tuple(part["data"] for part in parts if "data" in part)


_STATE_VALUES: Final = frozenset(state.value for state in TaskState)


def _status(status: Any) -> tuple[TaskState, str, tuple[JSON, ...]]:
    state = status.get("state") if isinstance(status, dict) else None
    if not isinstance(state, str) or state not in _STATE_VALUES:
        raise _refuse("has no status with a known state")
    message = status.get("message")
    text, data = _texts(message.get("parts", [])) if isinstance(message, dict) else ("", ())
    return TaskState(state), text, data


def read_stream_event(data: Mapping[str, Any]) -> StreamItem:
    """What one event of an A2A server's stream (a stream response's ``result``) says: a
    :class:`TextDelta` (an artifact update), a :class:`StateChange` (a status update), a
    :class:`TaskSnapshot` (a task) or a :class:`Reply` (a message). Text parts are joined as
    they are, data parts kept, file parts left out, unknown fields ignored. Raises
    :class:`~protocols.errors.ProtocolError` (``code="decode"``) for anything else."""
    wraps = ("task", "message", "statusUpdate", "artifactUpdate")
    keys = [key for key in wraps if key in data] if isinstance(data, Mapping) else []
    body = data[keys[0]] if len(keys) == 1 else None
    if not isinstance(body, dict):
        raise _refuse("is not one of a task, a message, a status and an artifact update")
    if keys[0] == "artifactUpdate":
        artifact = body.get("artifact")
        if not isinstance(artifact, dict) or not isinstance(artifact.get("artifactId"), str):
            raise _refuse("has no artifact")
        text, parts = _texts(artifact.get("parts"))
        append, last = body.get("append") is True, body.get("lastChunk") is True
        return TextDelta(artifact["artifactId"], text, append, last, parts)
    if keys[0] == "message":
        return Reply(*_texts(body.get("parts")))
    state, text, parts = _status(body.get("status"))
    if keys[0] == "statusUpdate":
        return StateChange(state, text, parts, state.terminal or state.interrupted)
    artifacts = body.get("artifacts", [])
    if not isinstance(artifacts, list) or not all(isinstance(a, dict) for a in artifacts):
        raise _refuse("has artifacts that are not a list of objects")
    pairs = tuple((str(a.get("artifactId", "")), _texts(a.get("parts", []))[0]) for a in artifacts)
    task_id, context_id = body.get("id"), body.get("contextId", "")
    if not isinstance(task_id, str) or not isinstance(context_id, str):
        raise _refuse("is a task without an id")
    return TaskSnapshot(task_id, context_id, state, text, pairs, state.terminal)


class TaskView:
    """A remote task as its stream shows it: :meth:`apply` each item read."""

    def __init__(self) -> None:
        self.task_id: str | None = None
        self.state = TaskState.UNSPECIFIED
        #: The latest status message's text.
        self.message = ""
        #: The stream has had its final event.
        self.final = False
        #: Each artifact's text, by id, in the order they came.
        self.artifacts: dict[str, str] = {}

    def apply(self, item: StreamItem) -> None:
        """Take ``item`` in: a chunk appends to its artifact's text (or replaces it), a state
        change and a snapshot set the state, a reply is the answer."""
        if isinstance(item, TextDelta):
            before = self.artifacts.get(item.artifact_id, "") if item.append else ""
            self.artifacts[item.artifact_id] = before + item.text
            return
        self.final = item.final
        if isinstance(item, Reply):
            self.artifacts, self.state, self.message = {"": item.text}, TaskState.COMPLETED, ""
            return
        self.state, self.message = item.state, item.text
        if isinstance(item, TaskSnapshot):
            self.task_id, self.artifacts = item.task_id, dict(item.artifacts)

    @property
    def text(self) -> str:
        """The answer so far: the artifacts' texts, in order, joined by a blank line."""
        return "\n\n".join(self.artifacts.values())


# ---------------------------------------------------------------------------------------------
# A client's side (``actors.a2a.A2AAgent``): the requests it sends, the answers and the card it
# reads. Its streams are read with :func:`read_stream_event` and :class:`TaskView` above.

#: The headers every request of an A2A 1.0 client carries.
CLIENT_HEADERS: Final[Mapping[str, str]] = {
    "A2A-Version": "1.0", "Content-Type": "application/json", "Accept": "text/event-stream",
}  # fmt: skip
#: How much of a remote's error message, or of a card's text, a reader keeps (characters).
_SHOWN: Final = 500
_MAX_SKILLS: Final = 32


def send_request(
    id: str | int,
    parts: Sequence[Mapping[str, JSON]],
    *,
    message_id: str,
    task_id: str | None = None,
    context_id: str | None = None,
    streaming: bool = True,
) -> bytes:
    """The body of a ``SendStreamingMessage`` (``SendMessage`` when not ``streaming``: a
    blocking one) sending a user message of ``parts`` (``{"text": ...}`` or ``{"data": ...}``
    objects); with ``task_id`` (and its ``context_id``) it goes on with that task (the answer
    to an input-required). Strict compact JSON; raises
    :class:`~protocols.errors.ValidationError` for no parts or empty ids."""
    if not parts or not message_id or task_id == "":
        raise ValidationError("a message needs parts and a message id (and a non-empty task id)")
    message: dict[str, JSON] = {"messageId": message_id, "role": "ROLE_USER"}
    message["parts"] = [dict(part) for part in parts]
    if task_id is not None:
        message["taskId"] = task_id
    if context_id:
        message["contextId"] = context_id
    method = "SendStreamingMessage" if streaming else "SendMessage"
    return dumpb({"jsonrpc": "2.0", "id": id, "method": method, "params": {"message": message}})


def task_request(
    id: str | int, method: Literal["GetTask", "CancelTask", "SubscribeToTask"], task_id: str
) -> bytes:
    """The body of a request about task ``task_id``: ``GetTask``, ``CancelTask`` or
    ``SubscribeToTask`` (whose answer is a stream that opens with the task as it is now)."""
    if method not in ("GetTask", "CancelTask", "SubscribeToTask") or not task_id:
        raise ValidationError(f"not a request about a task: {method!r} of {task_id!r}")
    return dumpb({"jsonrpc": "2.0", "id": id, "method": method, "params": {"id": task_id}})


def answer_parts(asked: Sequence[JSON], allow: bool, reason: str = "") -> list[dict[str, JSON]]:
    """The parts of the message answering an input-required question whose status message had
    the data parts ``asked``, when the answer is ``allow`` (yes or no) and why: a text part
    (``approved``/``denied``, with the reason), and -- when the question is one of our own
    relay's (a data part ``{"event": "awaiting_input", "calls": [...]}``) -- the data part
    ``{"answers": [...]}`` giving that answer for each call it names (:func:`approvals_of`
    reads it)."""
    text = ("approved" if allow else "denied") + (f": {reason}" if reason else "")
    parts: list[dict[str, JSON]] = [{"text": text}]
    answers: list[JSON] = []
    for data in asked:
        if isinstance(data, dict) and data.get("event") == "awaiting_input":
            calls = data.get("calls")
            for call in calls if isinstance(calls, list) else []:
                call_id = call.get("call_id") if isinstance(call, dict) else None
                if isinstance(call_id, str) and call_id:
                    answers.append({"call_id": call_id, "allow": allow, "reason": reason})
    if answers:
        parts.append(_data_part({"answers": answers}))
    return parts


def read_response(body: bytes | str) -> dict[str, Any] | RpcError:
    """The ``result`` of a JSON-RPC response (an A2A result is always an object), or the
    :class:`RpcError` it answers with (its message cut to 500 characters). Raises
    :class:`~protocols.errors.ProtocolError` (``code="decode"``) for anything else."""
    doc = loads(body)
    if not isinstance(doc, dict):
        raise ProtocolError("an A2A answer is not a JSON-RPC response object", code="decode")
    rid = doc.get("id")
    rid = rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None
    error = doc.get("error")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        code = code if isinstance(code, int) and not isinstance(code, bool) else 0
        shown = message[:_SHOWN] if isinstance(message, str) else "(no message)"
        return RpcError(rid, code, shown)
    result = doc.get("result")
    if not isinstance(result, dict):
        raise ProtocolError("an A2A answer has no error and no object result", code="decode")
    return result


@attrs.frozen
class RemoteCard:
    """What a client needs of an Agent Card: the agent's ``name`` and ``description``, the
    ``url`` of its A2A 1.0 JSON-RPC interface, whether it ``streaming`` answers, and its
    ``skills`` (``(name, description)`` each, at most 32)."""

    name: str
    description: str
    url: str
    streaming: bool
    skills: tuple[tuple[str, str], ...] = ()


def _card_refused(what: str) -> ProtocolError:
    return ProtocolError(f"the agent card {what}", code="decode")


def read_card(body: bytes | str, base_url: str) -> RemoteCard:
    """The card ``body`` holds (fetched from ``base_url``'s :data:`CARD_PATH`): its name,
    description, skills, streaming capability, and the URL (made absolute against
    ``base_url``) of its first ``JSONRPC`` interface of protocol version 1.x (an interface
    naming no version counts as 1.0, as the SDK's client takes it). Texts are cut to 500
    characters. Raises :class:`~protocols.errors.ProtocolError` (``code="decode"``) for a
    card that is not JSON, has no name, or offers no such interface (an A2A 0.3 card)."""
    card = loads(body)
    if not isinstance(card, dict):
        raise _card_refused("is not a JSON object")
    name, description = card.get("name"), card.get("description", "")
    if not isinstance(name, str) or not name.strip():
        raise _card_refused("has no name")
    description = description[:_SHOWN] if isinstance(description, str) else ""
    interfaces = card.get("supportedInterfaces")
    offered: list[str] = []
    url: str | None = None
    for interface in interfaces if isinstance(interfaces, list) else []:
        if not isinstance(interface, dict):
            continue
        binding, version = interface.get("protocolBinding"), interface.get("protocolVersion")
        version = "1.0" if version is None or version == "" else str(version)
        offered.append(f"{binding} {version}"[:80])
        if binding == "JSONRPC" and version.split(".")[0] == "1" and url is None:
            found = interface.get("url")
            if isinstance(found, str) and found:
                url = urllib.parse.urljoin(base_url, found)
    if url is None:
        legacy = card.get("protocolVersion")
        if not offered and isinstance(legacy, str):
            offered.append(f"{card.get('preferredTransport', 'JSONRPC')} {legacy}"[:80])
        speaks = ", ".join(offered[:8]) or "none"
        raise _card_refused(f"offers no A2A 1.0 JSON-RPC interface (it lists: {speaks})")
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise _card_refused(f"names an endpoint that is not http(s): {url[:200]!r}")
    capabilities = card.get("capabilities")
    streaming = isinstance(capabilities, dict) and capabilities.get("streaming") is True
    skills: list[tuple[str, str]] = []
    listed = card.get("skills")
    for skill in listed if isinstance(listed, list) else []:
        if isinstance(skill, dict) and isinstance(skill.get("name"), str):
            about = skill.get("description")
            about = about if isinstance(about, str) else ""
            skills.append((skill["name"][:100], about[:_SHOWN]))
    return RemoteCard(name[:_SHOWN], description, url, streaming, tuple(skills[:_MAX_SKILLS]))


@attrs.frozen
class Taken:
    """What one answer of a remote (an event of its stream, or a whole answer) adds: the new
    ``text`` of the answer to show, in order; ``progress``, the text of a working status
    message; ``final``: the exchange is over (the task ended, or waits for its client)."""

    text: tuple[str, ...] = ()
    progress: str = ""
    final: bool = False


class RemoteTask:
    """A remote task as its client follows it across exchanges (a stream, a resubscription,
    the answer to a question, a ``GetTask``): :meth:`take` each answer. :attr:`view` is the
    task as known (:class:`TaskView`), ``task_id`` and ``context_id`` its ids once a Task was
    seen, ``asked`` the data parts of the last question (input-required) it asked. The text
    it shows is the answer's (artifacts joined by a blank line): an artifact's chunk shows what
    it appends, a snapshot (a resubscription's first event) what is new in it, and a replaced
    artifact its whole new text."""

    def __init__(self, *, max_answer_chars: int = 200_000, max_artifacts: int = 64) -> None:
        self.view = TaskView()
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.asked: tuple[JSON, ...] = ()
        self.max_answer_chars, self.max_artifacts = max_answer_chars, max_artifacts
        self._shown: dict[str, str] = {}

    def take(self, data: bytes | str, *, stream: bool = True) -> Taken | RpcError:
        """Take in one answer: an event's data (``stream``), or a whole JSON-RPC answer (a
        ``SendMessage``'s, or ``GetTask``'s Task; its end is final when the task ended or
        waits). An error answer is returned. Raises :class:`~protocols.errors.ProtocolError`
        (``code="decode"``) for what is not A2A 1.0, and
        :class:`~protocols.errors.SizeLimitError` for more than ``max_artifacts`` artifacts or
        an answer over ``max_answer_chars``."""
        answer = read_response(data)
        if isinstance(answer, RpcError):
            return answer
        bare = not stream and "status" in answer and "id" in answer  # GetTask's: a Task
        item = read_stream_event({"task": answer} if bare else answer)
        view = self.view
        progress = ""
        if isinstance(item, TaskSnapshot):
            self.task_id, self.context_id = item.task_id, item.context_id or None
        if isinstance(item, StateChange) and item.state.interrupted:
            self.asked = item.data
        elif isinstance(item, StateChange) and not item.final:
            progress = item.text
        view.apply(item)
        if len(view.artifacts) > self.max_artifacts:
            count = len(view.artifacts)
            limit = self.max_artifacts
            raise SizeLimitError(
                "the number of artifacts", limit=limit, size=count, unit="artifacts"
            )
        size = sum(map(len, view.artifacts.values()))
        if size > self.max_answer_chars:
            limit = self.max_answer_chars
            raise SizeLimitError("the answer", limit=limit, size=size, unit="characters")
        text: list[str] = []
        for artifact, whole in view.artifacts.items():
            before = self._shown.get(artifact)
            if whole == before:
                continue
            self._shown[artifact] = whole
            if before is not None and whole.startswith(before):
                text.append(whole[len(before) :])
            elif whole:  # a new artifact (joined so to the answer), or one replaced
                text.append(("\n\n" if before is None and len(self._shown) > 1 else "") + whole)
        ended = view.state.terminal or view.state.interrupted
        return Taken(tuple(text), progress, item.final or (not stream and ended))

    def failure(self) -> tuple[str, str] | None:
        """Why the task gave no answer, once its exchange is over: ``(code, text)`` for a task
        that failed (``task_failed``), was rejected (``task_rejected``), cancelled
        (``task_cancelled``), needs authentication (``auth_required``) or stopped in another
        state (``lost``), or asks for input about a task it never named (``protocol``);
        ``None`` for one completed or waiting for input."""
        state, said = self.view.state, self.view.message[:_SHOWN]
        said = f": {said}" if said else ""
        if state is TaskState.INPUT_REQUIRED:
            named = self.task_id is not None
            return None if named else ("protocol", "it asked for input without naming its task")
        if state is TaskState.COMPLETED:
            return None
        whys = {
            TaskState.FAILED: ("task_failed", f"the task failed{said}"),
            TaskState.REJECTED: ("task_rejected", f"the task was rejected{said}"),
            TaskState.CANCELED: ("task_cancelled", f"the task was cancelled remotely{said}"),
            TaskState.AUTH_REQUIRED: ("auth_required", f"the task needs authentication{said}"),
        }
        stopped = f"task {self.task_id} stopped in {state.value}: its outcome is unknown"
        return whys.get(state, ("lost", stopped))
