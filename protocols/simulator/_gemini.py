"""The simulator's Gemini API: its routes, its requests read, its answers written.

Gemini names the model and whether the answer streams in the path
(``/v1beta/models/{model}:streamGenerateContent`` or ``:generateContent``), so the route gives
both (:func:`match_route`). Like Gemini 3, the simulator puts a thought signature on the first
``functionCall`` part of every answer with calls (and, when it thinks, on a last empty text
part of an answer without), and refuses a request whose current turn replays a function call
without its signature -- so a client that drops them fails against it as against Gemini.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from .._json import dumpb, dumps
from ..accounting import estimate_tokens
from ..errors import ValidationError
from ..messages import FinishReason
from ..settings import ModelSettings
from ._types import _WORDS, SimAnswer, SimCall, SimRequest, SimTurn, Vendor

#: ``/v1beta/models/{model}:streamGenerateContent`` (any API version; ``tunedModels`` too).
_GEMINI_PATH: Final = re.compile(
    r"/(v[0-9]+[a-z0-9]*)/((?:models|tunedModels)/[A-Za-z0-9][A-Za-z0-9._@-]*)"
    r":(streamGenerateContent|generateContent)"
)
#: Azure OpenAI's paths: ``/openai/deployments/{name}/...`` and the v1 API ``/openai/v1/...``.
_AZURE_PATH: Final = re.compile(
    r"/openai/(?:deployments/([A-Za-z0-9][A-Za-z0-9._-]*)|v1)/(chat/completions|responses)"
)

#: Reasoning effort of each thinking budget the Gemini encoder sends.
_EFFORTS: Final = {1024: "low", 8192: "medium", 24576: "high"}
#: Gemini's generationConfig names of the settings.
_SETTINGS: Final = {
    "maxOutputTokens": "max_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "stopSequences": "stop",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
_STRUCTURAL: Final = frozenset(
    {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"}
)
_FINISH: Final[Mapping[FinishReason, str]] = {
    FinishReason.STOP: "STOP",
    FinishReason.TOOL_CALLS: "STOP",
    FinishReason.LENGTH: "MAX_TOKENS",
    FinishReason.CONTENT_FILTER: "SAFETY",
}
_STATUS: Final[Mapping[int, str]] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def match_route(path: str) -> tuple[Vendor, str | None, bool | None] | None:
    """The wire format a path beyond :data:`~protocols.simulator.ROUTES` speaks, with the
    model and whether to stream when the path says: Gemini's ``.../models/{model}:
    streamGenerateContent`` and ``:generateContent``, and Azure OpenAI's deployment and v1
    paths (``/openai/deployments/{name}/chat/completions``, ``/openai/v1/responses``, ...).
    ``None`` for any other path."""
    gemini = _GEMINI_PATH.fullmatch(path)
    if gemini is not None:
        model = gemini.group(2).split("/", 1)[1]
        return "gemini", model, gemini.group(3) == "streamGenerateContent"
    azure = _AZURE_PATH.fullmatch(path)
    if azure is not None:
        vendor: Vendor = "openai" if azure.group(2) == "chat/completions" else "openai-responses"
        return vendor, azure.group(1), None
    return None


# ---------------------------------------------------------------------------------------------
# Requests


def _snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda match: "_" + match.group().lower(), name)


def _get(data: Mapping[str, Any], name: str) -> Any:
    """``data[name]``, or under its snake_case spelling: Gemini reads protobuf JSON, which
    takes both (Google's SDK sends some fields one way, some the other)."""
    value = data.get(name)
    return data.get(_snake(name)) if value is None else value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"{where} must be an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError(f"{where} must be a list")
    return value


def _signature_ok(value: Any) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:  # standard or URL-safe base64, as protobuf JSON takes bytes
        base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except ValueError:
        return False
    return True


def parse_gemini(data: dict[str, Any]) -> SimRequest:
    """A ``generateContent`` request body read into a :class:`SimRequest` (its ``model`` is
    ``"gemini"`` and ``stream`` true: the path says both, and the server sets them from it).
    Raises :class:`~protocols.errors.ValidationError` naming the field that is wrong -- and,
    as Gemini 3 does, for a function call of the current turn replayed without its thought
    signature."""
    contents = data.get("contents")
    if not isinstance(contents, list):
        raise ValidationError("'contents' must be a list")
    turns: list[SimTurn] = []
    system = _optional_object(data, "systemInstruction")
    if system is not None:
        text = "".join(
            part.get("text", "")
            for part in _list(system.get("parts"), "systemInstruction.parts")
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
        if text:
            turns.append(SimTurn("system", text))
    unsigned: list[str] = []  # model contents whose first call has no signature
    for index, raw in enumerate(contents):
        where = f"contents[{index}]"
        content = _object(raw, where)
        role = content.get("role", "user")
        if role not in ("user", "model"):
            raise ValidationError(f"{where}.role must be 'user' or 'model', not {role!r:.40}")
        parts = [
            _object(part, f"{where}.parts[{number}]")
            for number, part in enumerate(_list(content.get("parts"), f"{where}.parts"))
        ]
        if role == "model":
            calls: list[SimCall] = []
            for number, part in enumerate(parts):
                call = _get(part, "functionCall")
                if call is None:
                    continue
                call = _object(call, f"{where}.parts[{number}].functionCall")
                name = call.get("name")
                if not isinstance(name, str) or not name:
                    raise ValidationError(f"{where}.parts[{number}].functionCall needs a name")
                arguments = call.get("args") or {}
                if not isinstance(arguments, dict):
                    raise ValidationError(f"{where}.parts[{number}].functionCall.args")
                if not calls and not _signature_ok(_get(part, "thoughtSignature")):
                    unsigned.append(where)
                calls.append(SimCall(name, arguments))
            text = "".join(
                part["text"]
                for part in parts
                if isinstance(part.get("text"), str) and part.get("thought") is not True
            )
            turns.append(SimTurn("assistant", text, tuple(calls)))
            continue
        texts: list[str] = []
        for number, part in enumerate(parts):
            response = _get(part, "functionResponse")
            if response is not None:
                response = _object(response, f"{where}.parts[{number}].functionResponse")
                if not isinstance(response.get("name"), str) or not response["name"]:
                    raise ValidationError(
                        f"{where}.parts[{number}].functionResponse.name must be a name"
                    )
                result = _object(response.get("response") or {}, "functionResponse.response")
                value = result.get("result", result.get("output", result))
                turns.append(SimTurn("tool", value if isinstance(value, str) else dumps(value)))
            elif isinstance(part.get("text"), str):
                texts.append(part["text"])
        if texts or not parts:
            turns.append(SimTurn("user", "".join(texts)))
            unsigned.clear()  # a new turn: earlier steps are not checked (as Gemini's rule)
    if unsigned:
        raise ValidationError(
            f"Function call is missing a thought_signature in functionCall parts ({unsigned[0]})"
        )
    config = _optional_object(data, "generationConfig") or {}
    fields: dict[str, Any] = {}
    unknown_config: dict[str, Any] = {}
    think = False
    for given, value in config.items():
        key = _camel(given)
        name = _SETTINGS.get(key)
        if name is not None:
            fields[name] = value
        elif key == "thinkingConfig" and isinstance(value, dict):
            budget = _get(value, "thinkingBudget")
            think = _get(value, "includeThoughts") is True
            effort = _EFFORTS.get(budget) if isinstance(budget, int) and think else None
            if effort is not None:
                fields["reasoning_effort"] = effort
            elif {_camel(name) for name in value} - {"includeThoughts"} and budget != 0:
                unknown_config[given] = value
        elif key not in ("responseMimeType", "responseJsonSchema", "responseSchema"):
            unknown_config[given] = value
    extra = {key: value for key, value in data.items() if _camel(key) not in _STRUCTURAL}
    if unknown_config:
        extra["generationConfig"] = unknown_config
    if extra:
        fields["extra"] = extra
    cap = fields.get("max_tokens")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValidationError("generationConfig.maxOutputTokens must be an integer >= 1")
    try:
        settings = ModelSettings(**fields)
    except ValidationError as error:
        raise ValidationError(f"invalid settings: {error.message}") from None
    return SimRequest(
        vendor="gemini",
        model="gemini",
        turns=tuple(turns),
        tools=_tools(data.get("tools")),
        stream=True,
        think=think,
        include_usage=True,
        tool_choice=_tool_choice(data),
        max_tokens=cap,
        settings=settings,
    )


def _optional_object(data: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = _get(data, key)
    if value is not None and not isinstance(value, dict):
        raise ValidationError(f"'{key}' must be an object")
    return value


def _tools(value: Any) -> tuple[str, ...]:
    names: list[str] = []
    for index, raw in enumerate(_list(value, "tools")):
        tool = _object(raw, f"tools[{index}]")
        declarations = _list(_get(tool, "functionDeclarations"), f"tools[{index}]")
        for number, item in enumerate(declarations):
            where = f"tools[{index}].functionDeclarations[{number}]"
            declaration = _object(item, where)
            name = declaration.get("name")
            if not isinstance(name, str) or not name:
                raise ValidationError(f"{where} has no name")
            for key in ("parametersJsonSchema", "parameters"):
                schema = _get(declaration, key)
                if schema is None:
                    continue
                kind = schema.get("type") if isinstance(schema, dict) else None
                if not isinstance(kind, str) or kind.lower() != "object":
                    raise ValidationError(f"{where}.{key}: the schema must describe an object")
            names.append(name)
    return tuple(names)


def _tool_choice(data: Mapping[str, Any]) -> str | None:
    config = _optional_object(data, "toolConfig") or {}
    calling = _optional_object(config, "functionCallingConfig") or {}
    mode = calling.get("mode")
    if mode == "NONE":
        return "none"
    if mode in ("ANY", "VALIDATED"):
        allowed = _get(calling, "allowedFunctionNames")
        if isinstance(allowed, list) and len(allowed) == 1 and isinstance(allowed[0], str):
            return allowed[0]
        return "required" if mode == "ANY" else None
    return None


# ---------------------------------------------------------------------------------------------
# Answers


def _signature(seq: int, what: str) -> str:
    digest = hashlib.sha256(f"{seq}:{what}".encode("utf-8", "surrogatepass")).digest()
    return base64.b64encode(digest).decode("ascii")


def _usage(result: SimAnswer, *, final: bool) -> dict[str, int]:
    usage = result.usage
    if not final:
        return {"promptTokenCount": usage.prompt, "totalTokenCount": usage.prompt}
    thoughts = min(estimate_tokens(result.thinking), usage.completion)
    counts = {
        "promptTokenCount": usage.prompt,
        "candidatesTokenCount": usage.completion - thoughts,
        "totalTokenCount": usage.total,
    }
    if result.thinking:
        counts["thoughtsTokenCount"] = thoughts
    return counts


def _call_parts(result: SimAnswer, seq: int) -> list[dict[str, Any]]:
    """The answer's calls as parts (a call cut short is not sent: Gemini sends calls whole),
    the first one signed."""
    parts: list[dict[str, Any]] = []
    for call in result.calls:
        if call.cut is not None:
            continue
        part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.arguments}}
        if not parts:
            names = ",".join(c.name for c in result.calls)
            part["thoughtSignature"] = _signature(seq, f"calls:{names}")
        parts.append(part)
    return parts


def _response(
    request: SimRequest,
    result: SimAnswer,
    seq: int,
    parts: list[dict[str, Any]],
    *,
    finish: bool,
    usage: bool,
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish:
        candidate["finishReason"] = _FINISH.get(result.finish, "OTHER")
    candidate["index"] = 0
    response: dict[str, Any] = {"candidates": [candidate]}
    if usage:
        response["usageMetadata"] = _usage(result, final=finish)
    response["modelVersion"] = request.model
    response["responseId"] = f"sim{seq}"
    return response


def _event(response: dict[str, Any]) -> bytes:
    return b"data: " + dumpb(response) + b"\r\n\r\n"


def gemini_frames(request: SimRequest, result: SimAnswer, seq: int, usage: bool) -> Iterator[bytes]:
    """The ``streamGenerateContent?alt=sse`` stream of ``result``: one event per thinking word
    (thought parts) and per content delta, one with every call (the first signed), and a last
    one with the finish reason and the whole usage (and, after thinking without calls, the
    signature on an empty text part)."""
    for piece in _WORDS.findall(result.thinking):
        parts = [{"text": piece, "thought": True}]
        yield _event(_response(request, result, seq, parts, finish=False, usage=usage))
    for piece in result.pieces:
        yield _event(_response(request, result, seq, [{"text": piece}], finish=False, usage=usage))
    calls = _call_parts(result, seq)
    if calls:
        yield _event(_response(request, result, seq, calls, finish=False, usage=usage))
    last: list[dict[str, Any]] = [{"text": ""}]
    if result.thinking and not calls:
        last = [{"text": "", "thoughtSignature": _signature(seq, "text")}]
    yield _event(_response(request, result, seq, last, finish=True, usage=usage))


def gemini_body(request: SimRequest, result: SimAnswer, seq: int, usage: bool) -> dict[str, Any]:
    """The ``generateContent`` response of ``result``: the same parts, whole."""
    parts: list[dict[str, Any]] = []
    if result.thinking:
        parts.append({"text": result.thinking, "thought": True})
    calls = _call_parts(result, seq)
    if result.pieces or not calls:
        text: dict[str, Any] = {"text": result.text}
        if result.thinking and not calls:
            text["thoughtSignature"] = _signature(seq, "text")
        parts.append(text)
    parts.extend(calls)
    return _response(request, result, seq, parts, finish=True, usage=usage)


def gemini_error(status: int, message: str) -> dict[str, Any]:
    """A Gemini error body: ``{"error": {"code", "message", "status"}}``."""
    return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}
