"""OpenAI's Chat Completions, served, sans-IO: ``POST /v1/chat/completions`` as the relay answers
it, so that any OpenAI-compatible client (the official ``openai`` SDK, ``trio-agents chat
--base-url``) is a credential-free relay client, with a relay token as its API key.

* :func:`decode_request` reads a request body into a :class:`ChatCompletionRequest`: the data
  model's messages, tools and :class:`~protocols.settings.ModelSettings`, and which agent
  (``model="agent:NAME"``) or the relay's own model answers.
* :class:`ChunkEncoder` turns a run's events (:class:`~protocols.live.RunEvent`) into
  ``chat.completion.chunk`` objects; :func:`encode_sse` frames them, :data:`DONE` ends a stream.
* :func:`completion` is the whole ``chat.completion`` of a result; :func:`answer` the status and
  body of a non-streamed request from its run's terminal event.
* :func:`error_body` / :func:`error_response` are errors in OpenAI's shape; :data:`ERRORS` maps
  our error codes to an HTTP status, an OpenAI error ``type`` and whether a retry may help.

The messages, tools and settings are read as :func:`protocols.wire.openai_chat.encode_request`
(the project's client of this format) writes them: a request it encodes decodes back to the same
messages, tools and options (but the images of tool messages, which the format carries in a
``user`` message after them, stay in that message), and
:class:`~protocols.wire.openai_chat.OpenAIChatReader` reads a stream of :class:`ChunkEncoder`'s
back into the result it was made of.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

import attrs

from .._json import dumpb, dumpb_own, dumps, json_kind, loads
from ..codec import from_json
from ..errors import Category, ProtocolError, SizeLimitError, ValidationError, excerpt
from ..live import RunEvent
from ..messages import (
    AgentResult,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    StopReason,
    ToolCall,
    ToolDefinition,
    Usage,
    new_id,
)
from ..settings import REASONING_EFFORTS, ModelSettings

__all__ = [
    "AGENT_PREFIX",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_MAX_TOOLS",
    "DONE",
    "ERRORS",
    "PATH",
    "ChatCompletionRequest",
    "ChunkEncoder",
    "ErrorKind",
    "answer",
    "completion",
    "decode_request",
    "encode_sse",
    "error_body",
    "error_response",
    "new_completion_id",
]

#: The route's path.
PATH: Final = "/v1/chat/completions"
#: ``model`` names a registered agent as ``agent:NAME``.
AGENT_PREFIX: Final = "agent:"
#: What ends a stream (after the terminal event's data).
DONE: Final = b"data: [DONE]\n\n"
#: The most messages and tools a request may hold by default (OpenAI's own limits).
DEFAULT_MAX_MESSAGES: Final = 2048
DEFAULT_MAX_TOOLS: Final = 128
_MAX_MODEL: Final = 256
_MAX_ERROR: Final = 2000
_TURNS: Final = "\n\n"  # between what two turns of an agent run say (as AgentResult.thinking)


class ErrorKind(NamedTuple):
    """How an error code is answered: its HTTP ``status``, OpenAI's error ``type`` and whether
    the client may ``retry`` the same request (the route's ``x-should-retry`` header, which the
    ``openai`` SDK obeys over its own rule)."""

    status: int
    type: str
    retry: bool


def _kinds(status: int, kind: str, retry: bool, *codes: str) -> dict[str, ErrorKind]:
    return dict.fromkeys(codes, ErrorKind(status, kind, retry))


#: Our error codes (the relay's, the jobs API's, the data model's, a provider's) -> how they
#: are answered; any other code is :data:`_INTERNAL`. A provider's ``auth`` and
#: ``model_not_found`` are the relay's own upstream failing (a 502), never the client's token.
ERRORS: Final[Mapping[str, ErrorKind]] = {
    **_kinds(400, "invalid_request_error", False, "invalid", "protocol", "json", "decode"),
    **_kinds(400, "invalid_request_error", False, "unsupported", "config", "context_overflow"),
    **_kinds(400, "invalid_request_error", False, "bad_request", "schema", "tool_choice"),
    **_kinds(401, "authentication_error", False, "unauthorized"),
    **_kinds(403, "permission_error", False, "forbidden_origin", "egress"),
    **_kinds(404, "not_found_error", False, "unknown_agent", "not_found", "unknown_run"),
    **_kinds(405, "invalid_request_error", False, "method_not_allowed"),
    **_kinds(408, "timeout_error", True, "timeout"),
    **_kinds(409, "conflict_error", False, "cancelled", "awaiting_input", "conflict", "ended"),
    **_kinds(413, "invalid_request_error", False, "too_large", "run_too_large"),
    **_kinds(429, "rate_limit_error", True, "rate_limited", "rate_limit", "too_many_streams"),
    **_kinds(429, "rate_limit_error", True, "too_many_watchers"),
    **_kinds(429, "insufficient_quota", False, "budget"),
    **_kinds(500, "server_error", False, "internal", "gap", "rewind"),
    **_kinds(502, "server_error", True, "upstream", "provider_error", "server_error"),
    **_kinds(502, "server_error", True, "transient", "transport", "truncated"),
    **_kinds(502, "server_error", False, "auth", "model_not_found"),
    **_kinds(503, "server_error", True, "shutdown", "unavailable", "circuit_open"),
}
_INTERNAL: Final = ErrorKind(500, "server_error", False)


def error_body(status: int, message: str, type: str, code: str | None) -> bytes:
    """The body of an HTTP ``status`` error in OpenAI's shape, as UTF-8 JSON: ``{"error":
    {"message", "type", "param": null, "code"}}`` (the message at most 2000 characters, on one
    line). ``status`` is the route's to send; see :func:`error_response`."""
    return dumpb(_error(message, type, code))


def error_response(code: str | None, message: str) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)`` answering error ``code`` (:data:`ERRORS`) with ``message``:
    the headers are the JSON content type and ``x-should-retry``."""
    kind = ERRORS.get(code or "", _INTERNAL)
    headers = {"content-type": "application/json", "x-should-retry": str(kind.retry).lower()}
    return kind.status, headers, dumpb(_error(message, kind.type, code))


def _error(message: str, type: str, code: str | None) -> dict[str, Any]:
    shown = excerpt(message, _MAX_ERROR)
    return {"error": {"message": shown, "type": type, "param": None, "code": code}}


def new_completion_id() -> str:
    """A fresh completion id in OpenAI's form: ``chatcmpl-`` and 32 random hex digits."""
    return "chatcmpl-" + new_id()


# ---------------------------------------------------------------------------------------------
# Requests


@attrs.frozen
class ChatCompletionRequest:
    """A request, validated: ``model`` as sent, ``agent`` the NAME of ``agent:NAME`` (``None``:
    the relay's own model answers, whatever the name), the conversation and tools, the
    ``tool_choice`` (``auto``, ``none``, ``required`` or a tool's name; ``None``: not given), the
    structured-output ``schema`` (``response_format`` ``json_schema``), ``stream`` and
    ``include_usage`` (``stream_options.include_usage``, only when streaming) and the settings."""

    model: str
    agent: str | None
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: str | None = None
    schema: dict[str, Any] | None = None
    stream: bool = False
    include_usage: bool = False
    settings: ModelSettings = attrs.field(factory=ModelSettings)

    @property
    def options(self) -> ProviderOptions:
        """The request's provider options: its settings, tool choice and schema."""
        return ProviderOptions.from_settings(
            self.settings, schema=self.schema, tool_choice=self.tool_choice
        )


#: Wire key -> ModelSettings field (each its own name, but ``max_completion_tokens`` and
#: ``prompt_cache_retention``; the prompt-cache fields are known by OpenAI's names only).
_SETTINGS: Final = {
    "max_completion_tokens": "max_tokens",
    "prompt_cache_retention": "cache_retention",
} | {
    name: name
    for name in attrs.fields_dict(ModelSettings)
    if name != "extra" and not name.startswith("cache")
}
_STRUCTURE: Final = frozenset(
    {"model", "messages", "tools", "tool_choice", "stream", "stream_options", "response_format"}
)
#: Keys about the caller, not the answer: read and dropped.
_IGNORED: Final = frozenset(
    {"user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key"}
)
#: Keys refused unless they hold what asks for nothing (the relay answers one text completion).
_UNSUPPORTED: Final[Mapping[str, tuple[Any, ...]]] = {
    "n": (None, 1), "logprobs": (None, False), "logit_bias": (None, {}),
    "modalities": (None, ["text"]),
} | dict.fromkeys(
    ("top_logprobs", "audio", "prediction", "web_search_options", "functions", "function_call"),
    (None,),
)  # fmt: skip


def _refuse(message: str, code: str = "invalid") -> ProtocolError:
    return ProtocolError(message, code=code, category=Category.USER)


def _get(record: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``record[key]`` (``None`` when absent or null); refused when of another JSON type (a
    boolean is never a number or a string, nor anything but a boolean one)."""
    value = record.get(key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if value is None or (isinstance(value, kinds) and isinstance(value, bool) == (bool in kinds)):
        return value
    names = {str: "a string", list: "an array", dict: "an object", bool: "true or false"}
    wanted = " or ".join(names[k] for k in kinds)
    raise _refuse(f"{where}{key} must be {wanted}, not {json_kind(value)}")


def decode_request(
    body: bytes,
    *,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_tools: int = DEFAULT_MAX_TOOLS,
) -> ChatCompletionRequest:
    """The request ``body`` holds, validated; the caller bounds its size.

    Guarantees: roles ``system`` and ``developer`` (both system messages), ``user`` (text, and
    ``image_url`` parts as images: base64 ``data:`` URLs only, the relay fetches nothing;
    ``detail`` is ignored), ``assistant`` (text, ``tool_calls`` with JSON-object arguments,
    ``reasoning_content`` kept as thinking) and ``tool`` (named after the call it answers) are
    read (a message's ``name`` is ignored); a content array's text parts are joined as they
    are. ``max_completion_tokens`` (or ``max_tokens``), ``temperature``, ``top_p``, ``stop`` (a
    string or a list; ``[]`` is unset), ``seed``, the penalties, ``reasoning_effort`` and
    ``parallel_tool_calls`` are settings, and so is ``prompt_cache_retention``
    (``cache_retention``); a ``reasoning_effort`` we have no level for
    (``minimal``, ``none``), and every key not named here, go in the settings' ``extra`` as
    sent (the relay's own policy on ``extra`` applies).
    ``user``, ``metadata``, ``store``, ``service_tier``, ``safety_identifier`` and
    ``prompt_cache_key`` are dropped. ``n`` other than 1, ``logprobs``, ``top_logprobs``,
    ``logit_bias``, ``audio``, non-text ``modalities``, ``prediction``, ``web_search_options``,
    ``functions``/``function_call`` and a ``json_object`` ``response_format`` are refused with
    code ``unsupported`` (the relay does not do them), never dropped.

    Raises :class:`~protocols.errors.ProtocolError` (category ``user``; code ``json``,
    ``invalid`` or ``unsupported``) naming the field for a bad body: not JSON, not an object, a
    field of the wrong type or value, a tool message answering no earlier call (or one already
    answered), arguments that are not a JSON object; a
    :class:`~protocols.errors.SizeLimitError` (code ``too_large``) for more messages or tools
    than allowed.
    """
    data = loads(body, category=Category.USER)
    if not isinstance(data, dict):
        raise _refuse(f"the request body must be a JSON object, not {json_kind(data)}")
    model = _get(data, "model", str, "")
    if not model or len(model) > _MAX_MODEL:
        raise _refuse(f"model must be a non-empty string of at most {_MAX_MODEL} characters")
    agent = model[len(AGENT_PREFIX) :] if model.startswith(AGENT_PREFIX) else None
    if agent == "":
        raise _refuse("model 'agent:' must name an agent: agent:NAME")
    for key, allowed in _UNSUPPORTED.items():
        if key in data and data[key] not in allowed:
            raise _refuse(
                f"the relay does not support {key}={dumps(data[key])[:60]}", "unsupported"
            )
    raw = _get(data, "messages", list, "")
    if not raw:
        raise _refuse("messages must be an array of at least one message")
    if len(raw) > max_messages:
        raise SizeLimitError(
            "messages", limit=max_messages, size=len(raw), unit="messages", category=Category.USER
        )
    tools = _tools(_get(data, "tools", list, "") or [], max_tools)
    stream = _get(data, "stream", bool, "") or False
    stream_options = _get(data, "stream_options", dict, "") or {}
    schema = _schema(_get(data, "response_format", dict, ""))
    request = ChatCompletionRequest(
        model=model,
        agent=agent,
        messages=_messages(raw),
        tools=tools,
        tool_choice=_tool_choice(data.get("tool_choice"), {tool.name for tool in tools}),
        schema=schema,
        stream=stream,
        include_usage=stream
        and _get(stream_options, "include_usage", bool, "stream_options.") is True,
        settings=_settings(data),
    )
    try:
        _ = request.options  # (the options' own checks: the schema, a contradiction)
    except ValidationError as error:
        raise _refuse(error.message) from None
    return request


def _settings(data: Mapping[str, Any]) -> ModelSettings:
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        name = _SETTINGS.get(key)
        if name is None:
            if key not in _STRUCTURE and key not in _IGNORED and key not in _UNSUPPORTED:
                extra[key] = value
            continue
        if value is None or (name == "stop" and value == []):
            continue
        if name == "reasoning_effort" and isinstance(value, str) and value not in REASONING_EFFORTS:
            extra[key] = value  # the vendor's own level ("minimal", "none"): its server judges
            continue
        setting: Any = [value] if name == "stop" and isinstance(value, str) else value
        if name in fields and fields[name] != setting:
            raise _refuse("max_tokens and max_completion_tokens differ: send one")
        try:
            ModelSettings(**{name: setting})
        except ValidationError as error:
            raise _refuse(f"{key} {error.message.partition(' ')[2]}") from None
        fields[name] = setting
    return ModelSettings(**fields, extra=extra or None)


def _schema(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None or value.get("type") in (None, "text"):
        return None
    if value.get("type") != "json_schema":
        kind = str(value.get("type"))[:32]
        message = f"the relay does not support response_format {kind!r}: use json_schema"
        raise _refuse(message, "unsupported")
    spec = _get(value, "json_schema", dict, "response_format.") or {}
    schema = _get(spec, "schema", dict, "response_format.json_schema.")
    if schema is None:
        raise _refuse("response_format.json_schema.schema must be an object")
    return dict(schema)


def _tools(raw: list[Any], most: int) -> tuple[ToolDefinition, ...]:
    if len(raw) > most:
        raise SizeLimitError(
            "tools", limit=most, size=len(raw), unit="tools", category=Category.USER
        )
    tools: list[ToolDefinition] = []
    for index, item in enumerate(raw):
        where = f"tools[{index}]."
        if not isinstance(item, dict) or item.get("type", "function") != "function":
            raise _refuse(f"{where}type: the relay takes function tools only", "unsupported")
        function = _get(item, "function", dict, where) or {}
        try:
            tool = ToolDefinition(
                name=_get(function, "name", str, f"{where}function."),
                description=_get(function, "description", str, f"{where}function.") or "",
                parameters=function.get("parameters") or {"type": "object", "properties": {}},
            )
        except ValidationError as error:
            raise _refuse(f"{where}function: {error.message}") from None
        if any(other.name == tool.name for other in tools):
            raise _refuse(f"{where}function.name: two tools are named {tool.name!r}")
        tools.append(tool)
    return tuple(tools)


def _tool_choice(value: Any, names: set[str]) -> str | None:
    if isinstance(value, dict) and value.get("type") == "function":
        name = (_get(value, "function", dict, "tool_choice.") or {}).get("name")
        if name not in names:
            raise _refuse(f"tool_choice names no tool of the request: {str(name)[:64]!r}")
        return str(name)
    if value is None:
        return None
    if value in ("auto", "none") or (value == "required" and names):
        return str(value)
    raise _refuse("tool_choice must be auto, none, required (with tools) or a function choice")


def _text(content: Any, where: str, *, parts: tuple[str, ...] = ("text",)) -> str:
    """A content string, or the text parts of a content array joined (other parts refused)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(f"{where} must be a string or an array of parts, not {json_kind(content)}")
    return "".join(_part(part, f"{where}[{index}]", parts) for index, part in enumerate(content))


def _part(part: Any, where: str, parts: tuple[str, ...]) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in parts:
        taken = " and ".join(parts)
        raise _refuse(f"{where}: the relay takes {taken} parts here", "unsupported")
    text: str = _get(part, kind, str, f"{where}.") or ""
    return text


def _user(content: Any, where: str) -> tuple[str, list[str]]:
    """A user message's text (its text parts joined) and images (``data:`` URLs)."""
    if not isinstance(content, list):
        return _text(content, where), []
    texts: list[str] = []
    images: list[str] = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        if not (isinstance(part, dict) and part.get("type") == "image_url"):
            texts.append(_part(part, at, ("text",)))
            continue
        image = _get(part, "image_url", dict, f"{at}.") or {}
        url: str = _get(image, "url", str, f"{at}.image_url.") or ""
        if not url.startswith("data:") or ";base64," not in url:
            message = f"{at}.image_url.url: the relay takes base64 data: URLs only"
            raise _refuse(message, "unsupported")
        images.append(url)
    return "".join(texts), images


def _messages(raw: list[Any]) -> tuple[Message, ...]:
    messages: list[Message] = []
    calls: dict[str, str | None] = {}  # call id -> tool name (None: answered)
    for index, item in enumerate(raw):
        where = f"messages[{index}]"
        if not isinstance(item, dict):
            raise _refuse(f"{where} must be an object, not {json_kind(item)}")
        role, content = item.get("role"), item.get("content")
        try:
            if role in ("system", "developer"):
                messages.append(Message.system(_text(content, f"{where}.content")))
            elif role == "user":
                text, images = _user(content, f"{where}.content")
                messages.append(Message.user(text, images=images))
            elif role == "assistant":
                found = _calls(_get(item, "tool_calls", list, f"{where}.") or [], where)
                for call in found:
                    calls[call.id] = call.name
                at = f"{where}.content"
                text = "" if content is None else _text(content, at, parts=("text", "refusal"))
                thinking = _get(item, "reasoning_content", str, f"{where}.") or ""
                messages.append(Message.assistant(text, calls=found, thinking=thinking))
            elif role == "tool":
                call_id: str = _get(item, "tool_call_id", str, f"{where}.") or ""
                name = calls.get(call_id)
                if name is None:
                    said = "a call already answered" if call_id in calls else "no earlier call"
                    raise _refuse(f"{where}.tool_call_id {call_id[:64]!r} answers {said}")
                calls[call_id] = None
                text = _text(content, f"{where}.content")
                messages.append(Message.tool(call_id, name, text))
            else:
                raise _refuse(
                    f"{where}.role must be system, developer, user, assistant or tool, "
                    f"not {str(role)[:32]!r}"
                )
        except ValidationError as error:
            raise _refuse(f"{where}: {error.message}") from None
    return tuple(messages)


def _calls(raw: list[Any], where: str) -> list[ToolCall]:
    calls = []
    for number, item in enumerate(raw):
        at = f"{where}.tool_calls[{number}]."
        if not isinstance(item, dict) or item.get("type", "function") != "function":
            raise _refuse(f"{at}type: only function calls are taken")
        function = _get(item, "function", dict, at) or {}
        arguments = _get(function, "arguments", (str, dict), f"{at}function.") or {}
        if isinstance(arguments, str):
            try:
                arguments = loads(arguments, category=Category.USER) if arguments.strip() else {}
            except ProtocolError as error:
                raise _refuse(f"{at}function.arguments is not JSON: {error.message}") from None
        if not isinstance(arguments, dict):
            raise _refuse(
                f"{at}function.arguments must be a JSON object, not {json_kind(arguments)}"
            )
        call_id = _get(item, "id", str, at)
        calls.append(ToolCall(call_id, _get(function, "name", str, f"{at}function."), arguments))
    return calls


# ---------------------------------------------------------------------------------------------
# Answers

#: Our finish reasons -> OpenAI's (``other`` has none: ``stop``).
_FINISH: Final[Mapping[FinishReason, str]] = {
    **{reason: reason.value for reason in FinishReason}, FinishReason.OTHER: "stop"
}  # fmt: skip
#: Why an agent run ended -> OpenAI's finish reason: a run cut by a limit (its budget, its turns,
#: its time) is ``length``, as a reply cut at the token limit is: partial.
_STOP: Final[Mapping[StopReason, str]] = {
    StopReason.COMPLETE: "stop", StopReason.CONTENT_FILTER: "content_filter",
    StopReason.GUARDRAIL: "content_filter",
} | dict.fromkeys(
    (StopReason.MAX_TOKENS, StopReason.BUDGET, StopReason.EXHAUSTED, StopReason.TIMEOUT), "length"
)  # fmt: skip


class _Shown(NamedTuple):
    content: str
    thinking: str
    calls: tuple[ToolCall, ...]
    finish: str
    usage: Usage | None


def _shown(result: ProviderResult | AgentResult) -> _Shown:
    """What a client is shown of ``result``: a provider result's calls less those the relay
    denied (a client would run them); an agent run's answer with the calls of the client's
    tools it stopped for (its own it ran itself), its usage with what it delegated (none when
    unknown or estimated: never a guess as a count)."""
    if isinstance(result, AgentResult):
        if result.stop is StopReason.CANCELLED:
            raise ValidationError("a cancelled run has no completion: answer its error")
        usage = None if result.estimated else result.total_usage
        calls = result.client_calls  # (the client's tools' calls it left open: none else)
        finish = "tool_calls" if calls else _STOP.get(result.stop, "stop")
        return _Shown(result.content, result.thinking, calls, finish, usage)
    if result.finish is FinishReason.CANCELLED:
        raise ValidationError("a cancelled call has no completion: answer its error")
    calls = tuple(call for call in result.calls if call.id not in result.denied)
    finish = _FINISH[result.finish]
    if finish == "tool_calls" and not calls:
        finish = "stop"  # every call denied: nothing for the client to run
    return _Shown(result.content, result.thinking, calls, finish, result.usage)


def _usage(usage: Usage) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "prompt_tokens": usage.prompt,
        "completion_tokens": usage.completion,
        "total_tokens": usage.total,
    }
    if usage.cached is not None:
        shown["prompt_tokens_details"] = {"cached_tokens": usage.cached}
    if usage.reasoning is not None:
        shown["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning}
    return shown


def _wire_call(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": dumps(call.arguments)}
    return {"id": call.id, "type": "function", "function": function}


def completion(
    result: ProviderResult | AgentResult, *, completion_id: str, model: str, created: int
) -> dict[str, Any]:
    """The whole ``chat.completion`` object of ``result`` (strict JSON data): one choice whose
    message has the answer's text (``null`` when empty beside calls, as OpenAI sends it), its
    thinking as ``reasoning_content`` when there is some, and its calls (arguments as JSON text;
    see :func:`_shown` for which); the finish reason (``stop``, ``length``, ``tool_calls``,
    ``content_filter``); ``usage`` with cached and reasoning details where known, and no
    ``usage`` when it is unknown. Raises :class:`~protocols.errors.ValidationError` for a
    cancelled result: it has none (:func:`answer` answers it)."""
    shown = _shown(result)
    message: dict[str, Any] = {"role": "assistant", "content": shown.content, "refusal": None}
    if shown.calls:
        message["content"] = shown.content or None
        message["tool_calls"] = [_wire_call(call) for call in shown.calls]
    if shown.thinking:
        message["reasoning_content"] = shown.thinking
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": shown.finish, "logprobs": None}
        ],
    }
    if shown.usage is not None:
        body["usage"] = _usage(shown.usage)
    return body


def _result(data: Mapping[str, Any]) -> ProviderResult | AgentResult:
    value = data.get("result", data.get("response"))
    if isinstance(value, ProviderResult | AgentResult):
        return value
    response: ProviderResult = from_json(ProviderResult, value)  # a relay run's, as JSON
    return response


def _failure(event: RunEvent) -> tuple[str | None, str] | None:
    """``(code, message)`` of a terminal event other than ``finished`` (and of a ``gap``);
    ``None`` for ``finished``."""
    kind, data = event.kind, event.data
    if kind == "finished":
        return None
    if kind == "failed":
        error = data.get("error")
        error = error if isinstance(error, Mapping) else {}
        code, message = error.get("code"), error.get("message")
        return (code if isinstance(code, str) else None), (message or "the run failed")
    if kind == "cancelled":
        return "cancelled", "the run was cancelled before it finished"
    if kind == "awaiting_input":
        return "awaiting_input", "the run waits for an approval this endpoint cannot give"
    first = data.get("first")
    return "gap", f"the stream fell behind the run: events {first} to {event.seq} are gone"


def answer(
    event: RunEvent, *, completion_id: str, model: str, created: int
) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)`` of a non-streamed request whose run ended with the terminal
    ``event``: ``finished`` -> 200 and its :func:`completion`; ``failed`` -> its error's code
    (:func:`error_response`) with its message; ``cancelled`` and ``awaiting_input`` -> 409 (codes
    ``cancelled``, ``awaiting_input``). Raises :class:`~protocols.errors.ProtocolError` for a
    ``finished`` event whose data holds no result."""
    failure = _failure(event)
    if failure is not None:
        return error_response(*failure)
    result = _result(event.data)
    body = completion(result, completion_id=completion_id, model=model, created=created)
    return 200, {"content-type": "application/json"}, dumpb(body)


def encode_sse(chunks: Iterable[Mapping[str, Any]]) -> bytes:
    """``chunks`` (chunks or an error) as Server-Sent Events: ``data: <compact JSON>`` and a
    blank line each (JSON text holds no raw line break)."""
    return b"".join(b"data: " + dumpb_own(chunk) + b"\n\n" for chunk in chunks)


class ChunkEncoder:
    """One streamed completion's chunks, from its run's events, as OpenAI sends them.

    :meth:`feed` guarantees, per event (until :attr:`done`: then nothing more):

    * Before the first chunk, one with ``delta: {"role": "assistant", "content": ""}``.
    * ``content`` -> ``delta.content``; ``thinking`` -> ``delta.reasoning_content``, the field
      OpenAI-compatible servers (vLLM, DeepSeek, llama.cpp) stream reasoning in and this project's
      reader reads. A turn of an agent run after one that said something on that channel starts
      with a blank line (as :attr:`~protocols.messages.AgentResult.thinking` joins turns).
    * ``finished`` -> the calls the client is to run, one ``delta.tool_calls`` chunk each
      (``index``, ``id``, ``type: function``, ``name`` and the whole arguments text): a relayed
      model call's (which :func:`~protocols.relay.frame_events` logs whole as ``tool_call``
      events just before), less those the relay denied; an agent run's own calls are never sent
      (it runs them; their ``tool_call`` / ``tool_result`` events give nothing). Then a chunk
      with ``finish_reason`` and, with ``include_usage``, the usage chunk (``choices: []``) --
      the result's usage (an agent's with what it delegated), left out when unknown or
      estimated. Every other chunk then carries ``"usage": null``, as OpenAI's do.
    * ``failed`` -> ``{"error": {"message", "type", "param", "code"}}``: the error's own message
      and code, the type of :data:`ERRORS`. ``cancelled`` -> such an error with code
      ``cancelled``: a cut answer is never passed off as a whole one (the ``openai`` SDK raises
      it as an ``APIError``; what streamed before stays shown). ``awaiting_input`` (an
      approval this endpoint cannot ask for) and ``gap`` (the stream fell behind) -> errors too,
      and so does a ``rewind`` to before text already shown (it cannot be taken back).
    * Any other event (``usage``, ``turn``, ``approval_requested``, ``progress``, ...): nothing.

    After the terminal event the route sends :data:`DONE`, also after an error (as vLLM does).
    """

    __slots__ = ("_opened", "_said", "_shown", "_turn", "completion_id", "created", "done",
                 "include_usage", "model")  # fmt: skip

    def __init__(
        self, completion_id: str, model: str, created: int, include_usage: bool = False
    ) -> None:
        self.completion_id = completion_id
        self.model = model
        self.created = created
        self.include_usage = include_usage
        #: The stream's end was sent (a terminal event's chunks, or an error): nothing more is
        #: (the route sends :data:`DONE` and closes).
        self.done = False
        self._opened = False
        self._turn = 0
        self._said: dict[str, int] = {}  # channel -> the turn it last said something in
        self._shown = 0  # the seq of the last event whose text was shown

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _open(self) -> list[dict[str, Any]]:
        """The role chunk, before the first chunk only."""
        if self._opened:
            return []
        self._opened = True
        return [self._chunk({"role": "assistant", "content": ""})]

    def feed(self, event: RunEvent) -> list[dict[str, Any]]:
        """The chunks (or the one error) to send for ``event``; see the class docstring."""
        if self.done:
            return []
        kind, data = event.kind, event.data
        if kind in ("content", "thinking"):
            text = data.get("text")
            if not text:
                return []
            chunks = self._open()
            if self._said.get(kind, self._turn) != self._turn:
                text = _TURNS + text
            self._said[kind] = self._turn
            self._shown = event.seq
            field = "content" if kind == "content" else "reasoning_content"
            chunks.append(self._chunk({field: text}))
            return chunks
        if kind == "turn":
            self._turn += 1
            return []
        if kind == "rewind" and data.get("to", 0) < self._shown:
            self.done = True
            message = "the run was taken over, and takes back text already shown"
            return [_error(message, ERRORS["rewind"].type, "rewind")]
        if not event.terminal and kind != "gap":
            return []
        self.done = True
        failure = _failure(event)
        if failure is not None:
            code, message = failure
            return [_error(message, ERRORS.get(code or "", _INTERNAL).type, code)]
        shown = _shown(_result(data))
        chunks = self._open()
        for index, call in enumerate(shown.calls):
            chunks.append(self._chunk({"tool_calls": [{"index": index, **_wire_call(call)}]}))
        chunks.append(self._chunk({}, shown.finish))
        if self.include_usage and shown.usage is not None:
            last = self._chunk({})
            last["choices"], last["usage"] = [], _usage(shown.usage)
            chunks.append(last)
        return chunks
