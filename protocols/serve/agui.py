"""AG-UI (the Agent-User Interaction protocol, 1.0), sans-IO: a client's ``RunAgentInput`` in,
validated values out (:func:`decode_run_input`); a run's :class:`~protocols.live.RunEvent`\\ s
in, AG-UI events out (:class:`AguiEncoder`), framed as the reference client reads them
(:func:`encode_sse`).

Field names and event types are those of ``@ag-ui/core`` 1.0.0's schemas. Every AG-UI object
is open (a client may send fields the schema does not name): unknown fields are ignored; a
field the schema names but of the wrong type is refused. A ``null`` in place of an optional
field is taken as its absence, as the reference client's own compatibility layer does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import attrs

from .._json import JSON, check_json, dumpb_own, dumps, loads
from ..codec import from_json
from ..errors import AgentsError, Category, ProtocolError, SizeLimitError
from ..jobs import ApprovalAnswer
from ..live import MAX_ID_CHARS, RunEvent
from ..messages import (
    AgentResult,
    Message,
    ProviderResult,
    Role,
    ToolCall,
    ToolDefinition,
    ToolResult,
    Usage,
)

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_CONTEXT",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_MAX_TOOLS",
    "PROTOCOL_VERSION",
    "AguiContext",
    "AguiEncoder",
    "AguiInput",
    "AguiResume",
    "decode_run_input",
    "encode_sse",
]

#: The AG-UI protocol version spoken here (what ``RUN_STARTED`` declares).
PROTOCOL_VERSION: Final = "1.0"
#: The content type of the event stream (the client reads anything but protobuf as SSE).
CONTENT_TYPE: Final = "text/event-stream"
#: The largest request body accepted by default, in bytes.
DEFAULT_MAX_BYTES: Final = 4 * 1024 * 1024
#: The most messages a request may carry by default.
DEFAULT_MAX_MESSAGES: Final = 1_000
#: The most tools a request may declare by default (what OpenAI's API takes at most).
DEFAULT_MAX_TOOLS: Final = 128
#: The most context entries a request may carry by default.
DEFAULT_MAX_CONTEXT: Final = 100
#: The most resume entries a request may carry.
MAX_RESUME: Final = 1_000
#: The longest reason an approval's answer may give (characters).
MAX_REASON: Final = 2_000

_KNOWN_ROLES: Final = "developer, system, user, assistant, tool, reasoning, activity"


def _refuse(message: str) -> ProtocolError:
    return ProtocolError(message, code="invalid", category=Category.USER)


@attrs.frozen
class AguiContext:
    """One entry of a request's ``context``: ambient information for the run."""

    description: str
    value: str


@attrs.frozen
class AguiResume:
    """One entry of a request's ``resume``: the answer to the interrupt ``interrupt_id`` of the
    run before (``payload``: ``None`` when not given)."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: JSON = None


@attrs.frozen
class AguiInput:
    """A validated AG-UI ``RunAgentInput``: the conversation as
    :class:`~protocols.messages.Message`\\ s (a ``developer`` message is a ``system`` one; a
    ``reasoning`` message becomes the next assistant message's ``thinking``; ``activity``
    messages, UI state only, are dropped), the frontend's tools, and the rest as sent
    (``state`` and ``forwarded_props``: any JSON, ``None`` when absent)."""

    thread_id: str
    run_id: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
    context: tuple[AguiContext, ...] = ()
    state: JSON = None
    forwarded_props: JSON = None
    parent_run_id: str | None = None
    resume: tuple[AguiResume, ...] = ()

    def approvals(self) -> tuple[ApprovalAnswer, ...]:
        """The ``resume`` entries as answers to the approvals the run before asked (each
        interrupt :class:`AguiEncoder` sends is named by its tool call's id): ``cancelled``
        denies; ``resolved`` takes a payload ``{"approved": bool, "reason"?: str}`` or a bare
        bool. Raises :class:`~protocols.errors.ProtocolError` (``invalid``) for another."""
        answers = []
        for index, entry in enumerate(self.resume):
            payload = entry.payload
            if entry.status == "cancelled":
                answers.append(ApprovalAnswer(entry.interrupt_id, False, "cancelled by the user"))
            elif isinstance(payload, bool):
                answers.append(ApprovalAnswer(entry.interrupt_id, payload))
            elif isinstance(payload, dict) and isinstance(payload.get("approved"), bool):
                reason = payload.get("reason") or ""
                if not isinstance(reason, str) or len(reason) > MAX_REASON:
                    raise _refuse(
                        f"resume[{index}].payload.reason must be a string of at most "
                        f"{MAX_REASON} characters"
                    )
                answers.append(ApprovalAnswer(entry.interrupt_id, payload["approved"], reason))
            else:
                raise _refuse(f'resume[{index}].payload must be {{"approved": true or false}}')
        return tuple(answers)


# ---------------------------------------------------------------------------------------------
# Decoding a request


_KINDS: Final[dict[type, str]] = {str: "a string", list: "an array", dict: "an object"}


def _field(data: dict[str, Any], key: str, kind: type, where: str, *, required: bool) -> Any:
    """``data[key]``, of type ``kind``; ``None`` when absent or null (refused if
    ``required``)."""
    value = data.get(key)
    if value is None:
        if required:
            raise _refuse(f"{where}{key} is required")
        return None
    if not isinstance(value, kind):
        raise _refuse(f"{where}{key} must be {_KINDS[kind]}")
    return value


def _id(data: dict[str, Any], key: str, where: str = "", *, required: bool = True) -> Any:
    value = _field(data, key, str, where, required=required)
    if value is not None and not 0 < len(value) <= MAX_ID_CHARS:
        raise _refuse(f"{where}{key} must be a non-empty string of at most {MAX_ID_CHARS} chars")
    return value


def _list(data: dict[str, Any], key: str, limit: int, *, required: bool = False) -> list[Any]:
    value = _field(data, key, list, "", required=required) or []
    if len(value) > limit:
        raise _refuse(f"{key} has {len(value)} items; at most {limit} are accepted")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise _refuse(f"{key}[{index}] must be a JSON object")
    return value


def _image(part: dict[str, Any], where: str) -> str:
    source = part.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("value"), str):
        raise _refuse(f"{where}.source must be an object with a string value")
    kind, mime = source.get("type"), source.get("mimeType")
    value: str = source["value"]
    if kind == "url" and value.startswith("data:image/"):
        return value
    if kind != "data":
        raise _refuse(
            f"{where}: an image by {kind} is not supported; send its bytes inline "
            "(source type data)"
        )
    if not isinstance(mime, str) or not mime.startswith("image/") or not value:
        raise _refuse(f"{where}.source must hold base64 bytes with an image/* mimeType")
    return f"data:{mime};base64,{value}"


def _content(value: Any, where: str, *, parts: bool) -> tuple[str, list[str]]:
    """A message's text and images, from a string or (where ``parts``) content parts."""
    if isinstance(value, str):
        return value, []
    if not parts or not isinstance(value, list):
        raise _refuse(f"{where}.content must be a string" + (" or content parts" * parts))
    texts: list[str] = []
    images: list[str] = []
    for index, part in enumerate(value):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(_field(part, "text", str, at + ".", required=True))
        elif kind == "image":
            images.append(_image(part, at))
        elif kind in ("audio", "video", "document"):
            raise _refuse(f"{at}: {kind} content is not supported (text and images are)")
        else:
            raise _refuse(f"{at} must be a text or image part")
    return "\n".join(texts), images


def _calls(item: dict[str, Any], where: str) -> list[ToolCall]:
    calls = []
    for index, raw in enumerate(_field(item, "toolCalls", list, where + ".", required=False) or []):
        at = f"{where}.toolCalls[{index}]"
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict):
            raise _refuse(f"{at} must be an object with an id and a function")
        call_id = _id(raw, "id", at + ".")
        name = _id(function, "name", at + ".function.")
        text = _field(function, "arguments", str, at + ".function.", required=True)
        try:
            arguments = loads(text, category=Category.USER) if text.strip() else {}
        except ProtocolError as error:
            raise _refuse(f"{at}.function.arguments is not JSON: {error.message}") from None
        if not isinstance(arguments, dict):
            raise _refuse(f"{at}.function.arguments must be a JSON object")
        calls.append(ToolCall(call_id, name, arguments))
    return calls


def _messages(raw: list[Any]) -> tuple[Message, ...]:
    out: list[Message] = []
    asked: dict[str, ToolCall] = {}  # every call an assistant message made, by id
    answered: set[str] = set()
    thinking = ""
    for index, item in enumerate(raw):
        where = f"messages[{index}]"
        role = item.get("role")
        mid = _id(item, "id", where + ".")
        try:
            if role == "reasoning":
                thinking += _content(item.get("content"), where, parts=False)[0]
                continue
            if role == "activity":
                continue
            if role in ("system", "developer"):
                text = _content(item.get("content"), where, parts=False)[0]
                out.append(Message(Role.SYSTEM, text, id=mid))
            elif role == "user":
                text, images = _content(item.get("content"), where, parts=True)
                out.append(Message.user(text, images=images, id=mid))
            elif role == "assistant":
                content = item.get("content")
                text = "" if content is None else _content(content, where, parts=False)[0]
                calls = _calls(item, where)
                for call in calls:
                    if call.id in asked:
                        raise _refuse(f"{where}: tool call id {call.id!r} is used twice")
                    asked[call.id] = call
                out.append(Message.assistant(text, calls=calls, thinking=thinking, id=mid))
            elif role == "tool":
                call_id = _id(item, "toolCallId", where + ".")
                if call_id not in asked:
                    raise _refuse(
                        f"{where} answers no tool call of an earlier message "
                        f"(toolCallId {call_id[:80]!r})"
                    )
                if call_id in answered:
                    raise _refuse(f"{where} answers tool call {call_id[:80]!r} a second time")
                answered.add(call_id)
                text, images = _content(item.get("content"), where, parts=True)
                error = _field(item, "error", str, where + ".", required=False)
                name = asked[call_id].name
                out.append(Message.tool(call_id, name, text or error or "", images=images, id=mid))
            else:
                shown = repr(role[:40]) if isinstance(role, str) else "missing"
                raise _refuse(f"{where}.role {shown} is not one of {_KNOWN_ROLES}")
        except ProtocolError:
            raise
        except AgentsError as error:  # pragma: no cover - every field was checked above
            raise _refuse(f"{where}: {error.message}") from None
        thinking = ""
    return tuple(out)


def _tools(raw: list[Any]) -> tuple[ToolDefinition, ...]:
    tools: dict[str, ToolDefinition] = {}
    for index, item in enumerate(raw):
        where = f"tools[{index}]"
        name = _field(item, "name", str, where + ".", required=True)
        description = _field(item, "description", str, where + ".", required=False) or ""
        parameters = item.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise _refuse(f"{where}.parameters of {name[:64]!r} must be a JSON Schema object")
        try:
            tool = ToolDefinition(name, description, *([] if parameters is None else [parameters]))
        except AgentsError as error:
            raise _refuse(f"{where}: {error.message}") from None
        if name in tools:
            raise _refuse(f"{where}: two tools are named {name!r}")
        tools[name] = tool
    return tuple(tools.values())


def _resume(raw: list[Any]) -> tuple[AguiResume, ...]:
    out: dict[str, AguiResume] = {}
    for index, item in enumerate(raw):
        where = f"resume[{index}]."
        interrupt = _id(item, "interruptId", where)
        status = item.get("status")
        if status not in ("resolved", "cancelled"):
            raise _refuse(f"{where}status must be resolved or cancelled")
        if interrupt in out:
            raise _refuse(f"{where}interruptId {interrupt[:80]!r} is answered twice")
        out[interrupt] = AguiResume(interrupt, status, item.get("payload"))
    return tuple(out.values())


def decode_run_input(
    body: bytes,
    *,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_tools: int = DEFAULT_MAX_TOOLS,
    max_context: int = DEFAULT_MAX_CONTEXT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> AguiInput:
    """The :class:`AguiInput` an AG-UI ``RunAgentInput`` body holds, checked: strict JSON of at
    most ``max_bytes`` bytes; ``threadId`` and ``runId`` non-empty ids; at most
    ``max_messages`` messages of the known roles, a tool message answering a call of an
    earlier assistant message (once), assistant tool calls' ``arguments`` JSON objects; text
    and inline images only (audio, video, documents and images by URL are refused); at most
    ``max_tools`` tools, uniquely named, each with an object JSON Schema; at most
    ``max_context`` context entries. Raises :class:`~protocols.errors.ProtocolError` of
    category ``user``: ``too_large`` (:class:`~protocols.errors.SizeLimitError`), ``json``, or
    ``invalid`` with a message naming the field."""
    if len(body) > max_bytes:
        raise SizeLimitError(
            "an AG-UI run request", limit=max_bytes, size=len(body), category=Category.USER
        )
    data = loads(body, category=Category.USER)
    if not isinstance(data, dict):
        raise _refuse("an AG-UI run request must be a JSON object (a RunAgentInput)")
    context = [
        AguiContext(
            _field(item, "description", str, f"context[{index}].", required=True),
            _field(item, "value", str, f"context[{index}].", required=True),
        )
        for index, item in enumerate(_list(data, "context", max_context))
    ]
    return AguiInput(
        thread_id=_id(data, "threadId"),
        run_id=_id(data, "runId"),
        parent_run_id=_id(data, "parentRunId", required=False),
        messages=_messages(_list(data, "messages", max_messages, required=True)),
        tools=_tools(_list(data, "tools", max_tools)),
        context=tuple(context),
        state=data.get("state"),
        forwarded_props=data.get("forwardedProps"),
        resume=_resume(_list(data, "resume", MAX_RESUME)),
    )


# ---------------------------------------------------------------------------------------------
# Encoding a run's events


@attrs.define
class _Lane:
    """Who speaks: the run itself, or one sub-agent it delegated to."""

    key: str  # what the ids minted for it start with
    subagent: str | None = None  # its subagentRunId (None: the run itself)
    name: str | None = None  # the member speaking
    call_id: str | None = None  # the delegating call (a sub-agent)
    outer: _Lane | None = None  # the lane that delegated to it
    text: str | None = None  # the open text message
    reasoning: str | None = None  # the open reasoning span and message
    parent: str | None = None  # the assistant message of this turn's tool calls


_STOPS: Final = {"finished": "complete", "cancelled": "cancelled", "awaiting_input": "suspended"}


class AguiEncoder:
    """One AG-UI run's events, from the run's events (:class:`~protocols.live.RunEvent`):

    * :meth:`start` (or the first :meth:`feed`): ``RUN_STARTED``;
    * ``content``: ``TEXT_MESSAGE_START`` (once per message; role ``assistant``, ``name`` the
      member speaking), then ``TEXT_MESSAGE_CONTENT``;
    * ``thinking``: ``REASONING_START`` and ``REASONING_MESSAGE_START`` (once per message),
      then ``REASONING_MESSAGE_CONTENT``;
    * ``tool_call``: ``TOOL_CALL_START`` (``parentMessageId``: the turn's assistant message),
      ``TOOL_CALL_ARGS`` (the whole arguments as JSON), ``TOOL_CALL_END``;
    * ``tool_result``: ``TOOL_CALL_RESULT`` (the result as the model reads it);
    * ``subagent_started``: ``SUBAGENT_STARTED`` and ``STEP_STARTED`` (``stepName``: the
      sub-agent's name); ``subagent_finished``: ``STEP_FINISHED`` and ``SUBAGENT_FINISHED``
      (``SUBAGENT_ERROR`` for status ``error``);
    * ``turn``, ``handoff``: nothing (the next text is a new assistant message; after a
      handoff, its ``name`` is the member handed to);
    * ``rewind``: ``CUSTOM`` named ``rewind`` (``value``: ``{"to": seq}``);
    * ``finished``: ``RUN_FINISHED`` (outcome ``success``, the calls left without a result
      as ``pendingToolCallIds``; ``result``: the answer's content and why it stopped;
      ``usage``); ``cancelled``: ``RUN_FINISHED`` (outcome ``cancelled``);
      ``awaiting_input``: ``RUN_FINISHED`` (outcome ``interrupt``, one per approval asked:
      reason ``tool_call``, id and ``toolCallId`` the call's id);
    * ``failed``: ``RUN_ERROR`` (the error's ``message`` and ``code``, nothing else);
      ``gap``: ``RUN_ERROR`` (code ``gap``);
    * any other kind: nothing.

    Guarantees: ``RUN_STARTED`` comes first; an open text or reasoning message is ended
    before anything else of its speaker (the other kind of output, a tool call, a new turn,
    the end); every message, step and sub-agent started is ended before ``RUN_FINISHED``;
    exactly one ``RUN_FINISHED`` or ``RUN_ERROR`` ends the stream, and nothing follows it.
    Events of a sub-agent's run fed here (their ``run_id`` is the one its
    ``subagent_started`` named) carry its ``subagentRunId``; its own terminal event ends only
    its messages. Ids are minted from the run's ids and seqs: the same events give the same
    AG-UI events."""

    def __init__(self, thread_id: str, run_id: str, *, parent_run_id: str | None = None) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        #: The terminal event was given: :meth:`feed` returns nothing more.
        self.ended = False
        self._started = False
        self._main = _Lane(run_id)
        self._lanes: dict[str, _Lane] = {}  # a sub-agent's run id -> its lane
        self._open: dict[str, _Lane] = {}  # subagentRunId -> the sub-agents not yet finished
        self._ids: set[str] = set()
        self._pending: dict[str, None] = {}  # the run's tool calls without a result yet

    def start(self) -> list[dict[str, Any]]:
        """``[RUN_STARTED]`` the first time; ``[]`` after."""
        if self._started:
            return []
        self._started = True
        event = {"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}
        if self.parent_run_id is not None:
            event["parentRunId"] = self.parent_run_id
        return [{**event, "protocolVersion": PROTOCOL_VERSION}]

    def feed(self, event: RunEvent) -> list[dict[str, Any]]:
        """The AG-UI events ``event`` stands for (the list above), after ``RUN_STARTED`` if
        not given yet; ``[]`` once the stream has ended."""
        if self.ended:
            return []
        out = self.start()
        lane = self._lanes.get(event.run_id, self._main)
        kind, data, seq = event.kind, event.data, event.seq
        if kind in ("content", "thinking"):
            out += self._delta(lane, kind, data.get("text"), seq)
        elif kind == "tool_call":
            out += self._tool_call(lane, data["call"], seq)
        elif kind == "tool_result":
            result = data["result"]
            if isinstance(result, dict):
                result = from_json(ToolResult, result)
            self._pending.pop(result.id, None)
            out += self._close(lane)
            message = {"messageId": self._mint(lane, seq), "toolCallId": result.id}
            answer = {"content": result.render(), "role": "tool"}
            out.append(self._ev("TOOL_CALL_RESULT", lane, **message, **answer))
        elif kind == "subagent_started":
            out += self._subagent(lane, data, seq)
        elif kind == "subagent_finished":
            child = self._lanes.get(data.get("run_id") or "") or next(
                (c for c in self._open.values() if c.call_id and c.call_id == data.get("call_id")),
                None,
            )
            if child is not None and child.subagent in self._open:
                out += self._finish(child, data.get("status"))
        elif kind in ("turn", "handoff"):
            out += self._close(lane)
            lane.parent = None
            if kind == "handoff" and isinstance(data.get("agent"), str):
                lane.name = data["agent"]
        elif kind == "started" and isinstance(data.get("agent"), str):
            lane.name = data["agent"]
        elif kind == "rewind":
            out += self._close_lanes()
            out.append(self._ev("CUSTOM", None, name="rewind", value={"to": data.get("to")}))
        elif kind == "gap" or (event.terminal and lane is self._main):
            out += self._end(kind, data, seq)
        elif event.terminal:
            out += self._close(lane)  # a sub-agent's run ended: its messages end
        stamp = _milliseconds(event.time)
        if stamp is not None:
            for item in out:
                item.setdefault("timestamp", stamp)
        return out

    def fail(self, message: str, *, code: str | None = None) -> list[dict[str, Any]]:
        """A ``RUN_ERROR`` saying ``message`` (and ``code``) for a stream that cannot go on
        (what the server says, not a run's event); ``[]`` once the stream has ended."""
        if self.ended:
            return []
        self.ended = True
        out = self.start()
        return [*out, *self._close_lanes(), self._ev("RUN_ERROR", None, message=message, code=code)]

    # -- the pieces ---------------------------------------------------------------------------

    def _ev(self, kind: str, lane: _Lane | None, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, **{key: value for key, value in fields.items() if value is not None}}
        if lane is not None and lane.subagent is not None:
            event["subagentRunId"] = lane.subagent
        return event

    def _mint(self, lane: _Lane, seq: int, suffix: str = "") -> str:
        base = f"{lane.key}:{seq}{suffix}"
        mid, n = base, 1
        while mid in self._ids:
            n += 1
            mid = f"{base}.{n}"
        self._ids.add(mid)
        return mid

    def _close(self, lane: _Lane, keep: str = "") -> list[dict[str, Any]]:
        """End ``lane``'s open text (unless ``keep`` is ``content``) and reasoning (unless
        ``keep`` is ``thinking``)."""
        out = []
        if lane.text is not None and keep != "content":
            out.append(self._ev("TEXT_MESSAGE_END", lane, messageId=lane.text))
            lane.text = None
        if lane.reasoning is not None and keep != "thinking":
            out.append(self._ev("REASONING_MESSAGE_END", lane, messageId=lane.reasoning))
            out.append(self._ev("REASONING_END", lane, messageId=lane.reasoning))
            lane.reasoning = None
        return out

    def _delta(self, lane: _Lane, kind: str, text: Any, seq: int) -> list[dict[str, Any]]:
        if not isinstance(text, str) or not text:
            return []
        out = self._close(lane, keep=kind)
        if kind == "content":
            if lane.text is None:
                lane.text = lane.parent = self._mint(lane, seq)
                start = {"messageId": lane.text, "role": "assistant", "name": lane.name}
                out.append(self._ev("TEXT_MESSAGE_START", lane, **start))
            out.append(self._ev("TEXT_MESSAGE_CONTENT", lane, messageId=lane.text, delta=text))
            return out
        if lane.reasoning is None:
            lane.reasoning = self._mint(lane, seq, "r")
            out.append(self._ev("REASONING_START", lane, messageId=lane.reasoning))
            start = {"messageId": lane.reasoning, "role": "reasoning"}
            out.append(self._ev("REASONING_MESSAGE_START", lane, **start))
        out.append(
            self._ev("REASONING_MESSAGE_CONTENT", lane, messageId=lane.reasoning, delta=text)
        )
        return out

    def _tool_call(self, lane: _Lane, call: Any, seq: int) -> list[dict[str, Any]]:
        if isinstance(call, dict):
            call = from_json(ToolCall, call)
        out = self._close(lane)
        if lane.parent is None:
            lane.parent = self._mint(lane, seq)
        start = {"toolCallId": call.id, "toolCallName": call.name, "parentMessageId": lane.parent}
        out.append(self._ev("TOOL_CALL_START", lane, **start))
        out.append(
            self._ev("TOOL_CALL_ARGS", lane, toolCallId=call.id, delta=dumps(call.arguments))
        )
        out.append(self._ev("TOOL_CALL_END", lane, toolCallId=call.id))
        if lane is self._main:
            self._pending[call.id] = None
        return out

    def _subagent(self, lane: _Lane, data: Any, seq: int) -> list[dict[str, Any]]:
        run_id, call_id = data.get("run_id"), data.get("call_id")
        name = data.get("agent") or "subagent"
        sub = self._mint(lane, seq, "s") if not run_id or run_id in self._ids else run_id
        self._ids.add(sub)
        child = _Lane(sub, subagent=sub, name=name, call_id=call_id, outer=lane)
        if run_id:
            self._lanes[run_id] = child
        self._open[sub] = child
        started = {"subagentRunId": sub, "name": name, "parentToolCallId": call_id}
        out = [self._ev("SUBAGENT_STARTED", None, **started, parentSubagentRunId=lane.subagent)]
        return [*out, self._ev("STEP_STARTED", child, stepName=name)]

    def _finish(self, child: _Lane, status: Any) -> list[dict[str, Any]]:
        out = []
        for inner in [c for c in self._open.values() if c.outer is child]:
            out += self._finish(inner, status)
        out += self._close(child)
        out.append(self._ev("STEP_FINISHED", child, stepName=child.name))
        del self._open[child.subagent or ""]
        if status == "error":
            failed = {"message": f"the sub-agent {child.name} failed", "code": "error"}
            return [*out, self._ev("SUBAGENT_ERROR", child, **failed)]
        outcome = {"type": "suspended" if status == "suspended" else "success"}
        result = None if status is None else {"status": status}
        return [*out, self._ev("SUBAGENT_FINISHED", child, outcome=outcome, result=result)]

    def _close_lanes(self) -> list[dict[str, Any]]:
        """End every open text and reasoning message."""
        return [item for lane in (*self._lanes.values(), self._main) for item in self._close(lane)]

    def _end(self, kind: str, data: Any, seq: int) -> list[dict[str, Any]]:
        self.ended = True
        if kind in ("gap", "failed"):
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            message, code = error.get("message"), error.get("code")
            if kind == "gap":
                gone = f"events {data.get('first')}..{seq} of the run are gone from its log"
                message, code = f"{gone}: this stream fell behind the run and ends here", "gap"
            message = message if isinstance(message, str) else "the run failed"
            code = code if isinstance(code, str) else None
            return [*self._close_lanes(), self._ev("RUN_ERROR", None, message=message, code=code)]
        out = []  # every sub-agent still open ends (suspended when the run waits for input)
        while self._open:  # the latest first: one started inside another ends before it
            out += self._finish(list(self._open.values())[-1], _STOPS[kind])
        out += self._close_lanes()
        finished = {"threadId": self.thread_id, "runId": self.run_id}
        asked = (data.get("calls") or []) if kind == "awaiting_input" else []
        if asked:
            interrupts = [_interrupt(ask) for ask in asked]
            outcome: dict[str, Any] = {"type": "interrupt", "interrupts": interrupts}
            return [*out, self._ev("RUN_FINISHED", None, **finished, outcome=outcome)]
        result, usage = _outcome(data.get("result", data.get("response")))
        if kind == "cancelled":
            outcome, result = {"type": "cancelled"}, None
        else:
            outcome = {"type": "success"}
            if self._pending:
                outcome["pendingToolCallIds"] = list(self._pending)
        event = self._ev("RUN_FINISHED", None, **finished, result=result, outcome=outcome)
        return [*out, {**event, **({"usage": [usage]} if usage else {})}]


#: What an approval's answer says, for a client to validate against.
_APPROVAL_SCHEMA: Final = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}


def _interrupt(ask: Any) -> dict[str, Any]:
    tool, reason = ask.get("tool"), ask.get("reason")
    message = f"approve the call of tool {tool}" + (f": {reason}" if reason else "?")
    return {
        "id": ask["call_id"],
        "reason": "tool_call",
        "message": message,
        "toolCallId": ask["call_id"],
        "responseSchema": _APPROVAL_SCHEMA,
    }


def _outcome(value: Any) -> tuple[dict[str, Any] | None, dict[str, int | str] | None]:
    """A terminal event's ``result`` or ``response`` as ``RUN_FINISHED``'s result and usage."""
    if isinstance(value, dict):
        try:
            value = from_json(ProviderResult, value)
        except AgentsError:
            return None, None
    if isinstance(value, AgentResult):
        result: dict[str, Any] = {"content": value.content, "stop": value.stop.value}
        try:
            if value.output is not None:
                result["output"] = check_json(value.output)
        except AgentsError:
            pass  # (an instance of the caller's class: not JSON)
        return result, _usage(value.total_usage, None)
    if isinstance(value, ProviderResult):
        result = {"content": value.content, "finish": value.finish.value}
        return result, _usage(value.usage, value.model)
    return None, None


def _usage(usage: Usage | None, model: str | None) -> dict[str, int | str] | None:
    if usage is None:
        return None
    out: dict[str, int | str] = {
        "inputTokens": usage.prompt,
        "outputTokens": usage.completion,
        "totalTokens": usage.prompt + usage.completion,
    }
    if usage.reasoning is not None:
        out["reasoningTokens"] = usage.reasoning
    if usage.cached is not None:
        out["cachedInputTokens"] = usage.cached
    if model is not None:
        out["model"] = model
    return out


def _milliseconds(time: float) -> int | None:
    if not math.isfinite(time) or not 0 < time < 2**53 / 1000:
        return None
    return int(time * 1000)


def encode_sse(events: Iterable[Mapping[str, Any]]) -> bytes:
    """``events`` (an :class:`AguiEncoder`'s) as Server-Sent Events the AG-UI client reads:
    each one ``data: {json}`` (compact strict JSON on one line) and a blank line. Raises
    :class:`~protocols.errors.ValidationError` for an event that is not JSON."""
    return b"".join(b"data: " + dumpb_own(event) + b"\n\n" for event in events)
