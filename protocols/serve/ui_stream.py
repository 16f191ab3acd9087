"""The AI SDK's UI message stream (the ``ai`` npm package, version 6: what ``useChat`` with
``DefaultChatTransport`` speaks), sans-IO: a chat request in, validated values out
(:func:`decode_chat_request`); a run's events in, the stream's chunks out
(:class:`UIStreamEncoder`, framed by :func:`encode_sse` and ended by :data:`DONE`).

The transport POSTs ``{"id", "messages", "trigger", "messageId", ...body extras}`` to its
``api`` and reads ``data: {chunk}`` events until the body ends; to resume after a reload it GETs
``{api}/{chat id}/stream`` (:func:`resume_path`) and takes 204 for "nothing to resume". A
resumed stream is read as a full replay: the route replays the run's events from its first,
through a fresh encoder with the same message id. Any other status than 2xx makes the client
fail with the response body's text as its error message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from .._json import JSON, dumpb, dumpb_own, loads
from ..codec import from_json
from ..errors import Category, ProtocolError, SizeLimitError, ValidationError
from ..jobs import ApprovalAnswer
from ..live import RunEvent
from ..messages import (
    AgentResult,
    FinishReason,
    Message,
    ProviderResult,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    ToolSuccess,
)

__all__ = [
    "CHAT_PATH",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_MAX_PARTS",
    "DEFAULT_MAX_TOOLS",
    "DONE",
    "HEADERS",
    "STATUS",
    "ChatRequest",
    "UIStreamEncoder",
    "decode_chat_request",
    "encode_sse",
    "resume_path",
    "resume_route",
]

#: Where the chat routes live: ``POST /v1/chat`` (the relay's model), ``POST /v1/chat/{agent}``.
CHAT_PATH: Final = "/v1/chat"
#: The response headers of a UI message stream (the package's own set, less the hop-by-hop
#: ``connection``, which the server sets).
HEADERS: Final[Mapping[str, str]] = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
#: The last event of every stream; the server then ends the body (the client reads to its end).
DONE: Final = b"data: [DONE]\n\n"
#: Every refusal's code and its HTTP status.
STATUS: Final[Mapping[str, int]] = {"json": 400, "invalid": 400, "too_large": 413}

DEFAULT_MAX_BYTES: Final = 8 * 1024 * 1024
DEFAULT_MAX_MESSAGES: Final = 1000
DEFAULT_MAX_PARTS: Final = 1000
DEFAULT_MAX_TOOLS: Final = 128

#: A chat id: what ``useChat`` mints (16 letters and digits), a UUID, and the like -- nothing
#: that needs encoding in a URL path.
_CHAT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_MAX_ID: Final = 256
_TRIGGERS: Final = ("submit-message", "regenerate-message")
_KNOWN: Final = frozenset({"id", "messages", "trigger", "messageId", "tools"})


# ---------------------------------------------------------------------------------------------
# Requests


@attrs.frozen
class ChatRequest:
    """A decoded chat request.

    ``messages`` is the conversation as our messages; ``trigger`` ``submit-message`` or
    ``regenerate-message`` (``message_id``: the message regenerated; the client has already left
    it out). When the last UI message is the assistant's (the client resends after adding tool
    results or approval answers), ``continues`` is its id -- the response must use it as its
    message id, or the client shows a second message -- ``continued_calls`` the ids of its tool
    calls (:class:`UIStreamEncoder`'s ``prior_calls``) and ``approvals`` the answers given in it
    (their calls are left without a result in ``messages``: the run gives it). ``tools``: the
    client's tool definitions (body field ``tools``); ``extra``: every other body field.
    """

    chat_id: str
    messages: tuple[Message, ...]
    trigger: str = "submit-message"
    message_id: str | None = None
    continues: str | None = None
    continued_calls: tuple[str, ...] = ()
    approvals: tuple[ApprovalAnswer, ...] = ()
    tools: tuple[ToolDefinition, ...] = ()
    extra: Mapping[str, JSON] = attrs.field(factory=dict)


def _refuse(what: str, problem: str, code: str = "invalid") -> ProtocolError:
    return ProtocolError(f"{what} {problem}", code=code, category=Category.USER)


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise _refuse(what, "must be a non-empty string")
    if len(value) > _MAX_ID:
        raise _refuse(what, f"is longer than {_MAX_ID} characters", "too_large")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _refuse(what, "must be a string")
    return value


def _list(value: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise _refuse(what, "must be an array")
    if len(value) > limit:
        raise _refuse(what, f"has more than {limit} items (the limit)", "too_large")
    return value


def decode_chat_request(
    body: bytes,
    *,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_parts: int = DEFAULT_MAX_PARTS,
    max_tools: int = DEFAULT_MAX_TOOLS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ChatRequest:
    """The request ``body`` a ``DefaultChatTransport`` POSTs, checked and converted.

    Guarantees: strict JSON of at most ``max_bytes``; ``id`` a chat id (1-128 letters, digits,
    ``-``, ``_``); ``messages`` 1 to ``max_messages`` UI messages of role ``system``, ``user`` or
    ``assistant``, each of at most ``max_parts`` parts; ``tools`` at most ``max_tools``
    definitions. Per message, text parts are joined (``""``); an assistant message becomes one
    message per step (parts between ``step-start``\\ s: text, reasoning as its ``thinking``, tool
    calls) each followed by its calls' results: ``output-available`` a success,
    ``output-error`` and ``output-denied`` a failure; ``input-streaming`` calls (never finished)
    are dropped. An open call (``input-available``, ``approval-requested``, a preliminary
    output) in the last message is refused: the client adds its result with ``addToolResult``
    (or answers it) before it resends; in an earlier message (the user moved on) it is answered
    with a failure so the history stays whole. A user's file part must be an image as a
    ``data:`` URL; data, source and unknown fields are ignored; an unknown part is refused.
    Raises :class:`~protocols.errors.ProtocolError` (category ``user``, ``code`` a key of
    :data:`STATUS`) naming the field.
    """
    if len(body) > max_bytes:
        raise SizeLimitError(
            "the chat request body", limit=max_bytes, size=len(body), category=Category.USER
        )
    data = loads(body, category=Category.USER)
    if not isinstance(data, dict):
        raise _refuse("the chat request", "must be a JSON object")
    if "id" not in data or "messages" not in data:
        raise _refuse("the chat request", "needs id (the chat's) and messages")
    chat_id = data["id"]
    if not isinstance(chat_id, str) or not _CHAT_ID.fullmatch(chat_id):
        raise _refuse("id", "must be a chat id: 1-128 letters, digits, '-' or '_'")
    trigger = data.get("trigger", "submit-message")
    if trigger not in _TRIGGERS:
        raise _refuse("trigger", f"must be one of {', '.join(_TRIGGERS)}")
    message_id = data.get("messageId")
    if message_id is not None:
        message_id = _string(message_id, "messageId")
    items = _list(data["messages"], "messages", max_messages)
    if not items:
        raise _refuse("messages", "must not be empty")
    reader = _Reader(max_parts)
    for index, item in enumerate(items):
        reader.message(item, f"messages[{index}]", last=index == len(items) - 1)
    tools = tuple(
        _tool(item, f"tools[{index}]")
        for index, item in enumerate(_list(data.get("tools", []), "tools", max_tools))
    )
    names = [tool.name for tool in tools]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise _refuse(f"tools[{index}]", "names a tool an earlier one names already")
    return ChatRequest(
        chat_id=chat_id,
        messages=tuple(reader.out),
        trigger=trigger,
        message_id=message_id,
        continues=reader.continues,
        continued_calls=tuple(reader.continued_calls),
        approvals=tuple(reader.approvals),
        tools=tools,
        extra={key: value for key, value in data.items() if key not in _KNOWN},
    )


def _tool(value: Any, what: str) -> ToolDefinition:
    try:
        return from_json(ToolDefinition, value, category=Category.USER)
    except ProtocolError as error:
        raise _refuse(what, f"is not a tool definition: {error.message}") from None


_OPEN: Final = frozenset({"input-available", "approval-requested", "approval-responded"})


class _Reader:
    """Converts UI messages one at a time into :attr:`out`."""

    def __init__(self, max_parts: int) -> None:
        self.max_parts = max_parts
        self.out: list[Message] = []
        self.continues: str | None = None
        self.continued_calls: list[str] = []
        self.approvals: list[ApprovalAnswer] = []

    def message(self, item: Any, what: str, *, last: bool) -> None:
        if not isinstance(item, dict):
            raise _refuse(what, "must be an object")
        ui_id = _string(item.get("id"), f"{what}.id")
        role = item.get("role")
        if role not in ("system", "user", "assistant"):
            raise _refuse(f"{what}.role", "must be system, user or assistant")
        parts = _list(item.get("parts"), f"{what}.parts", self.max_parts)
        if role == "assistant":
            if last:
                self.continues = ui_id
            self._assistant(ui_id, parts, what, last=last)
            return
        texts: list[str] = []
        images: list[str] = []
        for index, part in enumerate(parts):
            where = f"{what}.parts[{index}]"
            kind = _kind(part, where)
            if kind == "text":
                texts.append(_text(part.get("text"), f"{where}.text"))
            elif kind == "file" and role == "user":
                images.append(_image(part, where))
            elif not _ignored(kind):
                raise _refuse(where, f"({kind!r}) cannot be in a {role} message")
        content = "".join(texts)
        if role == "system":
            self.out.append(Message.system(content, id=ui_id))
        else:
            self.out.append(Message.user(content, images=images, id=ui_id))

    def _assistant(self, ui_id: str, parts: list[Any], what: str, *, last: bool) -> None:
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        blocks = 0

        def flush() -> None:
            nonlocal blocks
            if not (texts or thinking or calls):
                return
            block_id = ui_id if blocks == 0 else f"{ui_id}.{blocks}"
            blocks += 1
            try:
                self.out.append(
                    Message.assistant(
                        "".join(texts), calls=calls, thinking="".join(thinking), id=block_id
                    )
                )
            except ValidationError as error:
                raise _refuse(what, f"holds {error.message}") from None
            self.out.extend(
                Message.from_result(result, id=f"{ui_id}:{result.id}") for result in results
            )
            for done in (texts, thinking, calls, results):
                done.clear()

        for index, part in enumerate(parts):
            where = f"{what}.parts[{index}]"
            kind = _kind(part, where)
            if kind == "text" or kind == "reasoning":  # noqa: PLR1714
                text = _text(part.get("text"), f"{where}.text")
                (texts if kind == "text" else thinking).append(text)
            elif kind == "step-start":
                flush()
            elif kind == "dynamic-tool" or kind.startswith("tool-"):
                call, result = self._tool_part(part, kind, where, last=last)
                if call is not None:
                    calls.append(call)
                if result is not None:
                    results.append(result)
            elif not _ignored(kind):
                raise _refuse(where, f"({kind!r}) cannot be in an assistant message")
        flush()

    def _tool_part(
        self, part: dict[str, Any], kind: str, where: str, *, last: bool
    ) -> tuple[ToolCall | None, ToolResult | None]:
        state = part.get("state")
        if state == "input-streaming":
            return None, None
        if kind == "dynamic-tool":
            name = _string(part.get("toolName"), f"{where}.toolName")
        else:
            name = _string(kind[len("tool-") :], f"{where}.type's tool name")
        call_id = _string(part.get("toolCallId"), f"{where}.toolCallId")
        arguments = part.get("input")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise _refuse(f"{where}.input", "must be a JSON object (the call's arguments)")
        call = ToolCall(call_id, name, arguments)
        if last:
            self.continued_calls.append(call_id)
        if state == "output-available" and part.get("preliminary") is not True:
            return call, ToolSuccess(call_id, name, part.get("output"))
        if state == "output-error":
            text = part.get("errorText")
            error = text if isinstance(text, str) and text else "the tool failed"
            return call, ToolFailure(call_id, name, error)
        approval = part.get("approval")
        reason = approval.get("reason") if isinstance(approval, dict) else None
        reason = reason if isinstance(reason, str) and reason else None
        if state == "output-denied":
            return call, ToolFailure(call_id, name, reason or "the call was denied")
        if state not in _OPEN and state != "output-available":
            raise _refuse(f"{where}.state", f"is not a tool part's state: {str(state)[:40]!r}")
        if not last:
            return call, ToolFailure(call_id, name, "no result: the call was never completed")
        if state == "approval-responded" and isinstance(approval, dict):
            allow = approval.get("approved")
            if not isinstance(allow, bool):
                raise _refuse(f"{where}.approval.approved", "must be true or false")
            self.approvals.append(ApprovalAnswer(call_id, allow, reason or ""))
            return call, None
        raise _refuse(
            where,
            f"is call {call_id!r} of {name!r} without its result: add it (addToolResult) "
            "or answer its approval before resending",
        )


def _kind(part: Any, where: str) -> str:
    if not isinstance(part, dict):
        raise _refuse(where, "must be an object")
    return _string(part.get("type"), f"{where}.type")


def _ignored(kind: str) -> bool:
    """Parts only a display reads: sources and data parts."""
    return kind.startswith(("data-", "source-"))


def _image(part: dict[str, Any], where: str) -> str:
    media = part.get("mediaType")
    url = part.get("url")
    if not (isinstance(media, str) and media.startswith("image/")) or not (
        isinstance(url, str) and url.startswith("data:")
    ):
        shown = str(media)[:60] if isinstance(media, str) else "no media type"
        raise _refuse(where, f"is a file ({shown}) we cannot carry: only images as data: URLs")
    return url


# ---------------------------------------------------------------------------------------------
# Routes


def resume_path(api: str, chat_id: str) -> str:
    """The URL ``reconnectToStream`` GETs for chat ``chat_id`` of a transport whose ``api`` is
    ``api`` (a chat id as :func:`decode_chat_request` accepts needs no encoding)."""
    return f"{api.rstrip('/')}/{chat_id}/stream"


def resume_route(path: str) -> tuple[str | None, str] | None:
    """``(agent, chat id)`` of a resume path: ``/v1/chat/{chat}/stream`` (agent ``None``: the
    relay's model) or ``/v1/chat/{agent}/{chat}/stream`` (the agent segment as it is in the
    path); ``None`` for any other path, or a chat id :func:`decode_chat_request` refuses."""
    if not path.startswith(CHAT_PATH + "/") or not path.endswith("/stream"):
        return None
    segments = path[len(CHAT_PATH) + 1 : -len("/stream")].split("/")
    if not _CHAT_ID.fullmatch(segments[-1]) or len(segments) > 2 or not all(segments):
        return None
    return (segments[0] if len(segments) == 2 else None), segments[-1]


# ---------------------------------------------------------------------------------------------
# The stream

Chunk = dict[str, JSON]

_FINISH: Final[Mapping[FinishReason, str]] = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool-calls",
    FinishReason.CONTENT_FILTER: "content-filter",
}
_STOPPED: Final[Mapping[StopReason, str]] = {
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTENT_FILTER: "content-filter",
    StopReason.GUARDRAIL: "content-filter",
}


def encode_sse(chunks: Iterable[Mapping[str, JSON]]) -> bytes:
    """``chunks`` as Server-Sent Events, ``data: {json}\\n\\n`` each (compact strict JSON on one
    line, as the client's parser reads them); :data:`DONE` is not added."""
    return b"".join(b"data: " + dumpb_own(chunk) + b"\n\n" for chunk in chunks)


class UIStreamEncoder:
    """A run's events as one UI message stream for message ``message_id``.

    Guarantees, whatever the events: :meth:`start` (or the first :meth:`feed`) gives the
    ``start`` chunk first; a text or reasoning part is started, then its deltas, then ended
    before any other chunk; a tool call is ``tool-input-start``, one ``tool-input-delta`` (its
    JSON) and ``tool-input-available``, and results and approvals name only calls shown or in
    ``prior_calls``; every step started is finished; the stream ends with exactly one of
    ``finish``, ``abort`` or ``error``, after which nothing more comes (:attr:`done`). The same
    events give the same chunks (ids count from 1), so a replay rebuilds the same message.

    ``executes_tools``: the run runs its own tool calls (an agent's; marked ``providerExecuted``
    so the client's ``onToolCall`` leaves them alone); ``False`` for a model call whose calls
    the client runs. ``prior_calls``: calls of the message this stream continues
    (:attr:`ChatRequest.continued_calls`) -- their results and approvals may be shown.
    ``client_tools``: names of the client's own tools in an agent's run (its run stops for
    their calls): their calls are never marked ``providerExecuted``, the client runs them.
    """

    def __init__(
        self,
        message_id: str,
        *,
        executes_tools: bool = True,
        prior_calls: Iterable[str] = (),
        client_tools: Iterable[str] = (),
    ) -> None:
        self.message_id = message_id
        self.executes_tools = executes_tools
        self._client_tools = frozenset(client_tools)
        self.done = False
        self._started = False
        self._prior = frozenset(prior_calls)
        self._shown: set[str] = set()
        self._asked: set[str] = set()
        self._agents: dict[str | None, JSON] = {}
        self._open: tuple[str, str] | None = None  # the text or reasoning part open: kind, id
        self._step = False
        self._parts = 0
        self._any_text = False
        self._last_shown = 0

    def start(self) -> list[Chunk]:
        """The ``start`` chunk (once; ``[]`` afterwards)."""
        if self._started:
            return []
        self._started = True
        return [{"type": "start", "messageId": self.message_id}]

    def feed(self, event: RunEvent) -> list[Chunk]:
        """The chunks ``event`` adds (``[]`` once :attr:`done`). See the class for the order."""
        if self.done:
            return []
        out = self.start()
        size = len(out)
        kind, data = event.kind, event.data
        if kind == "content" or kind == "thinking":  # noqa: PLR1714
            self._delta(out, "text" if kind == "content" else "reasoning", data["text"])
        elif kind == "tool_call":
            self._call(out, _as(ToolCall, data["call"]))
        elif kind == "tool_result":
            self._result(out, _as(ToolResult, data["result"]))
        elif kind == "approval_requested":
            self._ask(out, data["call_id"], data.get("call"))
        elif kind == "progress":
            self._close(out)
            progress = {"callId": data["call_id"], "text": data["text"]}
            out.append({"type": "data-progress", "data": progress, "transient": True})
        elif kind == "subagent_started" or kind == "subagent_finished":  # noqa: PLR1714
            self._subagent(out, kind, data)
        elif kind == "handoff":
            self._close(out)
            handoff = {"callId": data["call_id"], "agent": data["agent"]}
            out.append({"type": "data-handoff", "data": handoff})
        elif kind == "turn":
            self._end_step(out)
        elif kind == "rewind" and data["to"] < self._last_shown:
            void = f"the run was rewound to event {data['to']}: what this stream showed after it"
            self._end(out, "error", errorText=f"{void} is void; reload the chat")
        elif kind == "gap":
            gone = f"events {data['first']} to {event.seq} of run {event.run_id} are gone"
            self._end(out, "error", errorText=f"{gone} (the stream fell behind); reload the chat")
        elif kind == "finished":
            self._finished(out, data)
        elif kind == "cancelled":
            self._end(out, "abort", reason="cancelled")
        elif kind == "failed":
            self._end(out, "error", errorText=str(data["error"]["message"]))
        elif kind == "awaiting_input":
            for asked in data["calls"]:
                self._ask(out, asked["call_id"], None)
            self._end(out, "finish", finishReason="tool-calls")
        if len(out) > size:
            self._last_shown = event.seq
        return out

    def fail(self, text: str) -> list[Chunk]:
        """End the stream with an ``error`` saying ``text`` (the route cannot go on: the run
        vanished, the server stops); ``[]`` once :attr:`done`."""
        if self.done:
            return []
        out = self.start()
        self._end(out, "error", errorText=text)
        return out

    # -- parts --------------------------------------------------------------------------------

    def _delta(self, out: list[Chunk], name: str, text: str) -> None:
        if not text:
            return
        if self._open is None or self._open[0] != name:
            self._close(out)
            self._open_step(out)
            self._parts += 1
            self._open = (name, f"{name}-{self._parts}")
            out.append({"type": f"{name}-start", "id": self._open[1]})
        out.append({"type": f"{name}-delta", "id": self._open[1], "delta": text})
        self._any_text = self._any_text or name == "text"

    def _close(self, out: list[Chunk]) -> None:
        if self._open is not None:
            out.append({"type": f"{self._open[0]}-end", "id": self._open[1]})
            self._open = None

    def _open_step(self, out: list[Chunk]) -> None:
        if not self._step:
            out.append({"type": "start-step"})
            self._step = True

    def _end_step(self, out: list[Chunk]) -> None:
        self._close(out)
        if self._step:
            out.append({"type": "finish-step"})
            self._step = False

    def _end(self, out: list[Chunk], kind: str, **fields: JSON) -> None:
        self._end_step(out)
        out.append({"type": kind, **fields})
        self.done = True

    def _call(self, out: list[Chunk], call: ToolCall) -> None:
        if call.id in self._shown:
            return
        self._close(out)
        self._open_step(out)
        self._shown.add(call.id)
        head: Chunk = {"toolCallId": call.id, "toolName": call.name}
        if self.executes_tools and call.name not in self._client_tools:
            head["providerExecuted"] = True
        out.append({"type": "tool-input-start", **head})
        delta = dumpb(call.arguments).decode()
        out.append({"type": "tool-input-delta", "toolCallId": call.id, "inputTextDelta": delta})
        out.append({"type": "tool-input-available", **head, "input": call.arguments})

    def _result(self, out: list[Chunk], result: ToolResult) -> None:
        if result.id not in self._shown and result.id not in self._prior:
            return  # the client has no part to put it in: it would fail the stream
        self._close(out)
        chunk: Chunk = {"toolCallId": result.id}
        if isinstance(result, ToolSuccess):
            chunk = {"type": "tool-output-available", **chunk, "output": result.value}
        else:
            chunk = {"type": "tool-output-error", **chunk, "errorText": result.error}
        if self.executes_tools:
            chunk["providerExecuted"] = True
        out.append(chunk)

    def _ask(self, out: list[Chunk], call_id: str, call: Any) -> None:
        if call_id in self._asked:
            return
        if call_id not in self._shown and call is not None:
            self._call(out, _as(ToolCall, call))
        if call_id not in self._shown and call_id not in self._prior:
            return
        self._close(out)
        self._asked.add(call_id)
        out.append({"type": "tool-approval-request", "approvalId": call_id, "toolCallId": call_id})

    def _subagent(self, out: list[Chunk], kind: str, data: Mapping[str, Any]) -> None:
        self._close(out)
        key = data["call_id"] or data["run_id"]
        agent = self._agents.setdefault(key, data.get("agent"))
        status = "running" if kind == "subagent_started" else data["status"]
        shown = {"agent": agent, "status": status, "runId": data["run_id"]}
        chunk: Chunk = {"type": "data-subagent", "data": {**shown, "callId": data["call_id"]}}
        if key is not None:
            chunk["id"] = key  # the finish replaces the start's data in the client's part
        out.append(chunk)

    def _finished(self, out: list[Chunk], data: Mapping[str, Any]) -> None:
        if "response" in data:
            response: ProviderResult = _as(ProviderResult, data["response"])
            content, reason = response.content, _FINISH.get(response.finish, "other")
        else:
            result: AgentResult = _as(AgentResult, data["result"])
            content, reason = result.content, _STOPPED.get(result.stop, "other")
            if result.stop is StopReason.CLIENT_TOOLS:
                reason = "tool-calls"  # the client runs them, then sends the chat again
            elif result.stop is StopReason.COMPLETE:
                reason = _FINISH.get(result.finish or FinishReason.STOP, "other")
        if content and not self._any_text:
            # A run whose answer was not streamed (no content event): shown whole.
            self._delta(out, "text", content)
        self._end(out, "finish", finishReason=reason)


def _as(cls: Any, value: Any) -> Any:
    """``value`` as a ``cls`` (an event's object kept as itself, or as its JSON)."""
    if isinstance(value, dict):
        return from_json(cls, value, category=Category.SYSTEM)
    return value
