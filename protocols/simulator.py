"""The simulator's model: a deterministic answering policy and the three wire formats it answers in.

Pure functions, no I/O: :func:`parse_request` reads a request body of one of the three wire formats
into a :class:`SimRequest`, :func:`answer` decides what a (very small) model would say to it, and
:func:`stream_frames` / :func:`response_body` write that answer as the vendor's streamed records or
its one-shot JSON body. The server in ``actors.testing.Simulator`` only moves these bytes.

The policy, applied to the last message of the conversation:

* After tool results (the last message is a tool message): it answers from them --
  ``"The answer is 42."`` for one result, ``"The tools returned: 1, 2."`` for several.
* A user message containing ``call <tool>`` (optionally ``call <tool> with {json object}``) for an
  advertised tool: one call to that tool per mention, in order (several mentions make parallel
  calls). ``call add with {"a": 1, "b": 2}`` calls ``add`` with those arguments.
* A user message containing sums such as ``19 + 23``: with an advertised ``add`` tool, one ``add``
  call per sum with ``{"a": 19, "b": 23}``; without one, the sums are answered directly
  (``"19 + 23 = 42."``).
* ``tool_choice`` is honoured: ``none`` hides the tools, a tool name restricts them to that tool,
  and ``required`` (or a name) with nothing else to call calls that tool with ``{}``.
* ``count to N`` answers ``1 2 3 ... N``, one number per delta (``N`` up to :data:`MAX_COUNT_TO`).
* Anything else is echoed: ``You said: <text>``, one word per delta.
* When the request asks for reasoning (Anthropic ``thinking``, Ollama ``think``, OpenAI-compatible
  ``reasoning_effort`` or ``chat_template_kwargs.enable_thinking``), a short thinking text saying
  what it is about to do comes first: as native reasoning (Anthropic thinking blocks with a
  signature, Ollama ``message.thinking``, OpenAI ``reasoning_content`` with the ``"field"`` style)
  or inline ``<think>...</think>`` content (the OpenAI ``"tags"`` style, like llama.cpp serving a
  reasoning model).
* A output-token cap (``max_tokens``, ``max_completion_tokens``, Ollama ``num_predict``) smaller
  than the answer cuts it to that many deltas with finish reason ``length``.
* Usage: prompt tokens estimate the request's text (:func:`~protocols.budget.estimate_tokens`);
  completion tokens count the deltas plus the estimate of the thinking and call arguments.

Identifiers are derived from a caller-supplied sequence number, so equal inputs give equal bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from ._json import dumpb, dumps, loads
from .budget import estimate_tokens
from .errors import ProtocolError, ValidationError
from .messages import FinishReason, Usage

__all__ = [
    "MAX_COUNT_TO",
    "MEDIA_TYPES",
    "ROUTES",
    "SimAnswer",
    "SimCall",
    "SimRequest",
    "SimTurn",
    "ThinkStyle",
    "Vendor",
    "answer",
    "error_body",
    "parse_request",
    "response_body",
    "stream_frames",
]

#: The wire formats the simulator speaks.
Vendor: TypeAlias = Literal["openai", "anthropic", "ollama"]

#: How reasoning is shown on the OpenAI-compatible format: inline ``<think>`` tags in the content,
#: or the ``reasoning_content`` field of the deltas.
ThinkStyle: TypeAlias = Literal["tags", "field"]

#: Request path -> wire format.
ROUTES: Final[Mapping[str, Vendor]] = {
    "/v1/chat/completions": "openai",
    "/v1/messages": "anthropic",
    "/api/chat": "ollama",
}

#: Content type of a streamed response per wire format.
MEDIA_TYPES: Final[Mapping[Vendor, str]] = {
    "openai": "text/event-stream",
    "anthropic": "text/event-stream",
    "ollama": "application/x-ndjson",
}

#: The largest ``N`` honoured by ``count to N`` (bigger requests count to this).
MAX_COUNT_TO: Final = 1_000_000

# Characters per fragment when tool-call arguments are streamed (small, so clients must assemble).
_ARGUMENT_FRAGMENT = 7
_CREATED_AT = "2026-01-01T00:00:00Z"

_CALL = re.compile(
    r"\bcall\s+(?:the\s+)?([A-Za-z_][\w-]*(?:\.[\w-]+)*)(?:\s+tool)?(?:\s+with\s+(\{[^{}]*\}))?",
    re.IGNORECASE,
)
# Integers only: a decimal point before or a decimal part after a number is not a sum.
_SUM = re.compile(r"(?<![\w.])(-?\d{1,15})\s*\+\s*(-?\d{1,15})(?!\w|\.\d)")
_COUNT = re.compile(r"\bcount\s+to\s+(\d+)\b", re.IGNORECASE)
_WORDS = re.compile(r"\s*\S+")


@attrs.frozen
class SimCall:
    """A tool call the simulator makes (or one found in a request's assistant turn)."""

    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class SimTurn:
    """One message of a request, reduced to what the policy reads: role, text and tool calls."""

    role: Literal["system", "user", "assistant", "tool"]
    text: str = ""
    calls: tuple[SimCall, ...] = ()


@attrs.frozen
class SimRequest:
    """A request body of one of the three wire formats, read into one shape.

    ``tools`` lists the advertised tool names in order; ``tool_choice`` is ``None`` (auto),
    ``"none"``, ``"required"`` or a tool name; ``max_tokens`` is the output cap, if any.
    """

    vendor: Vendor
    model: str
    turns: tuple[SimTurn, ...]
    tools: tuple[str, ...] = ()
    stream: bool = True
    think: bool = False
    include_usage: bool = False
    tool_choice: str | None = None
    max_tokens: int | None = None


@attrs.frozen
class SimAnswer:
    """What the simulator says: thinking, content deltas, tool calls, finish reason and usage."""

    thinking: str
    pieces: tuple[str, ...]
    calls: tuple[SimCall, ...]
    finish: FinishReason
    usage: Usage

    @property
    def text(self) -> str:
        """The whole content."""
        return "".join(self.pieces)


# ---------------------------------------------------------------------------------------------
# Reading requests


def parse_request(vendor: Vendor, body: bytes | str) -> SimRequest:
    """Read a request body of ``vendor``'s format.

    Guarantees: the body is parsed as strict JSON; a body that is not an object, lacks a non-empty
    ``model`` or a ``messages`` list, or has a field of the wrong type raises
    :class:`~protocols.errors.ValidationError` naming the field (the server answers it with a 400).
    Content the policy does not read (images, unknown block types) is ignored, as a text-only
    model would.
    """
    try:
        data = loads(body)
    except ProtocolError as error:
        raise ValidationError(f"the request body is not valid JSON: {error.message}") from None
    if not isinstance(data, dict):
        raise ValidationError("the request body must be a JSON object")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise ValidationError("'model' must be a non-empty string")
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise ValidationError("'messages' must be a list")
    if vendor == "openai":
        return _parse_openai(data, model, messages)
    if vendor == "anthropic":
        return _parse_anthropic(data, model, messages)
    return _parse_ollama(data, model, messages)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"{where} must be an object")
    return value


def _optional_int(data: Mapping[str, Any], key: str, where: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{where}{key} must be an integer >= 1")
    return value


def _optional_object(data: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise ValidationError(f"'{key}' must be an object")
    return value


def _stream_flag(data: Mapping[str, Any], *, default: bool) -> bool:
    value = data.get("stream", default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError("'stream' must be true or false")
    return value


def _first_cap(*caps: int | None) -> int | None:
    return next((cap for cap in caps if cap is not None), None)


def _role(value: Any, where: str) -> Literal["system", "user", "assistant", "tool"]:
    if value == "developer":
        return "system"
    if value in ("system", "user", "assistant", "tool"):
        return value  # type: ignore[no-any-return]
    raise ValidationError(f"{where}.role must be system, user, assistant or tool, not {value!r}")


def _text_of(content: Any, where: str) -> str:
    """Text of a string or a list of parts/blocks (text parts joined; others ignored)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, item in enumerate(content):
            part = _object(item, f"{where}[{index}]")
            if part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise ValidationError(f"{where}[{index}].text must be a string")
                texts.append(text)
            elif part.get("type") == "tool_result":
                texts.append(_text_of(part.get("content"), f"{where}[{index}].content"))
        return "".join(texts)
    raise ValidationError(f"{where} must be a string or a list of parts")


def _arguments(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = loads(value) if value else {}
        except ProtocolError:
            raise ValidationError(f"{where} is not valid JSON") from None
    if not isinstance(value, dict):
        raise ValidationError(f"{where} must be a JSON object")
    return value


def _tool_names(tools: Any, nested: bool) -> tuple[str, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise ValidationError("'tools' must be a list")
    names = []
    for index, item in enumerate(tools):
        tool = _object(item, f"tools[{index}]")
        holder = _object(tool.get("function"), f"tools[{index}].function") if nested else tool
        name = holder.get("name")
        if not isinstance(name, str) or not name:
            raise ValidationError(f"tools[{index}] has no name")
        names.append(name)
    return tuple(names)


def _chat_turns(messages: list[Any]) -> tuple[SimTurn, ...]:
    """Messages of the OpenAI and Ollama formats (both: role, content, tool_calls.function)."""
    turns = []
    for index, item in enumerate(messages):
        where = f"messages[{index}]"
        message = _object(item, where)
        raw_calls = message.get("tool_calls")
        if raw_calls is not None and not isinstance(raw_calls, list):
            raise ValidationError(f"{where}.tool_calls must be a list")
        calls = []
        for number, call in enumerate(raw_calls or ()):
            call_where = f"{where}.tool_calls[{number}]"
            function = _object(_object(call, call_where).get("function"), f"{call_where}.function")
            name = str(function.get("name", ""))
            calls.append(SimCall(name, _arguments(function.get("arguments"), call_where)))
        role = _role(message.get("role"), where)
        turns.append(
            SimTurn(role, _text_of(message.get("content"), f"{where}.content"), tuple(calls))
        )
    return tuple(turns)


def _parse_openai(data: dict[str, Any], model: str, messages: list[Any]) -> SimRequest:
    choice = data.get("tool_choice")
    if isinstance(choice, dict):
        choice = _object(choice.get("function"), "tool_choice.function").get("name")
    if choice == "auto":
        choice = None
    if choice is not None and not isinstance(choice, str):
        raise ValidationError("'tool_choice' must be a string or a function choice")
    effort = data.get("reasoning_effort")
    template = _optional_object(data, "chat_template_kwargs")
    think = (isinstance(effort, str) and effort not in ("none", "minimal")) or (
        isinstance(template, dict) and template.get("enable_thinking") is True
    )
    options = _optional_object(data, "stream_options")
    stream = _stream_flag(data, default=False)
    return SimRequest(
        vendor="openai",
        model=model,
        turns=_chat_turns(messages),
        tools=_tool_names(data.get("tools"), nested=True),
        stream=stream,
        think=think,
        include_usage=stream and isinstance(options, dict) and options.get("include_usage") is True,
        tool_choice=choice,
        max_tokens=_first_cap(
            _optional_int(data, "max_completion_tokens", ""), _optional_int(data, "max_tokens", "")
        ),
    )


def _parse_anthropic(data: dict[str, Any], model: str, messages: list[Any]) -> SimRequest:
    turns = []
    system = _text_of(data.get("system"), "system")
    if system:
        turns.append(SimTurn("system", system))
    for index, item in enumerate(messages):
        where = f"messages[{index}]"
        message = _object(item, where)
        role = _role(message.get("role"), where)
        content = message.get("content")
        if role == "user" and isinstance(content, list):
            # Tool results come first in a user turn; each becomes a tool turn of its own.
            results = [
                SimTurn("tool", _text_of(block.get("content"), f"{where}.content"))
                for block in content
                if isinstance(block, dict) and block.get("type") == "tool_result"
            ]
            turns.extend(results)
            rest = [
                block
                for block in content
                if not (isinstance(block, dict) and block.get("type") == "tool_result")
            ]
            if rest or not results:
                turns.append(SimTurn("user", _text_of(rest, f"{where}.content")))
            continue
        calls = []
        if isinstance(content, list):
            for number, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    calls.append(
                        SimCall(
                            str(block.get("name", "")),
                            _arguments(block.get("input"), f"{where}.content[{number}].input"),
                        )
                    )
        turns.append(SimTurn(role, _text_of(content, f"{where}.content"), tuple(calls)))
    choice_value = data.get("tool_choice")
    choice: str | None = None
    if choice_value is not None:
        choice_object = _object(choice_value, "tool_choice")
        kind = choice_object.get("type")
        choice = {"auto": None, "any": "required", "none": "none"}.get(str(kind))
        if kind == "tool":
            choice = str(choice_object.get("name", ""))
    thinking = data.get("thinking")
    return SimRequest(
        vendor="anthropic",
        model=model,
        turns=tuple(turns),
        tools=_tool_names(data.get("tools"), nested=False),
        stream=_stream_flag(data, default=False),
        think=isinstance(thinking, dict) and thinking.get("type") == "enabled",
        include_usage=True,
        tool_choice=choice,
        max_tokens=_optional_int(data, "max_tokens", ""),
    )


def _parse_ollama(data: dict[str, Any], model: str, messages: list[Any]) -> SimRequest:
    options = _optional_object(data, "options")
    cap = _optional_int(options, "num_predict", "options.") if options is not None else None
    return SimRequest(
        vendor="ollama",
        model=model,
        turns=_chat_turns(messages),
        tools=_tool_names(data.get("tools"), nested=True),
        stream=_stream_flag(data, default=True),  # Ollama streams unless told not to
        think=data.get("think") is True,
        include_usage=True,
        tool_choice=None,
        max_tokens=cap,
    )


# ---------------------------------------------------------------------------------------------
# The policy


def answer(request: SimRequest) -> SimAnswer:
    """What the simulator answers to ``request`` (see the module docstring for the policy).

    Guarantees: deterministic (equal requests give equal answers); never raises for a parsed
    request; ``finish`` is ``tool_calls`` exactly when there are calls, ``length`` when the output
    cap cut the answer, else ``stop``; usage is consistent (``total = prompt + completion``).
    """
    tools = _usable_tools(request)
    last = next((turn for turn in reversed(request.turns) if turn.role != "system"), None)
    calls: list[SimCall] = []
    plan: str
    if last is None:
        text = "Hello! I am the trio-agents simulator. Ask me something."
        plan = "There is no question yet, so I will introduce myself."
    elif last.role == "tool":
        results = _trailing_results(request.turns)
        if len(results) == 1:
            text = f"The answer is {results[0]}."
        else:
            text = f"The tools returned: {', '.join(results)}."
        plan = "The tools have answered, so I will report their results."
    else:
        question = last.text.strip()
        calls = _calls_for(question, tools, request.tool_choice) if last.role == "user" else []
        count = _COUNT.search(question)
        sums = _SUM.findall(question)
        if calls:
            text = ""
            plan = "I will call " + ", ".join(_describe(call) for call in calls) + "."
        elif count:
            digits = count.group(1).lstrip("0") or "0"
            n = MAX_COUNT_TO if len(digits) > len(str(MAX_COUNT_TO)) else int(digits)
            n = min(n, MAX_COUNT_TO)
            text = " ".join(str(i) for i in range(1, n + 1))
            plan = f"The user wants me to count to {n}, one number at a time."
        elif sums:
            text = " ".join(f"{a} + {b} = {int(a) + int(b)}." for a, b in sums)
            plan = "I can add these numbers myself."
        else:
            text = f"You said: {question}" if question else "You said nothing."
            plan = "I will repeat what the user said."
    thinking = plan if request.think else ""
    pieces = tuple(_WORDS.findall(text))
    finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    if request.max_tokens is not None and not calls and len(pieces) > request.max_tokens:
        pieces = pieces[: request.max_tokens]
        finish = FinishReason.LENGTH
    prompt = sum(estimate_tokens(turn.text) for turn in request.turns) + len(request.tools)
    completion = (
        len(pieces)
        + estimate_tokens(thinking)
        + sum(estimate_tokens(dumps(call.arguments)) for call in calls)
    )
    return SimAnswer(
        thinking=thinking,
        pieces=pieces,
        calls=tuple(calls),
        finish=finish,
        usage=Usage(prompt=prompt, completion=completion),
    )


def _usable_tools(request: SimRequest) -> tuple[str, ...]:
    choice = request.tool_choice
    if choice == "none":
        return ()
    if choice not in (None, "required"):
        return tuple(name for name in request.tools if name == choice)
    return request.tools


def _trailing_results(turns: Sequence[SimTurn]) -> list[str]:
    results: list[str] = []
    for turn in reversed(turns):
        if turn.role != "tool":
            break
        results.append(turn.text.strip())
    return results[::-1]


def _calls_for(question: str, tools: tuple[str, ...], choice: str | None) -> list[SimCall]:
    calls: list[SimCall] = []
    for match in _CALL.finditer(question):
        name = match.group(1)
        if name not in tools:
            continue
        arguments: dict[str, Any] = {}
        if match.group(2):
            try:
                parsed = loads(match.group(2))
            except ProtocolError:
                parsed = None
            if isinstance(parsed, dict):
                arguments = parsed
        calls.append(SimCall(name, arguments))
    if not calls and "add" in tools:
        calls = [SimCall("add", {"a": int(a), "b": int(b)}) for a, b in _SUM.findall(question)]
    if not calls and choice is not None and tools:
        calls = [SimCall(tools[0], {})]
    return calls


def _describe(call: SimCall) -> str:
    return f"{call.name}({dumps(call.arguments)})"


# ---------------------------------------------------------------------------------------------
# Writing answers


def _ids(vendor: Vendor, seq: int) -> str:
    return {"openai": f"chatcmpl-sim{seq}", "anthropic": f"msg_sim{seq}", "ollama": ""}[vendor]


def _call_id(vendor: Vendor, seq: int, index: int) -> str:
    return f"toolu_sim{seq}_{index}" if vendor == "anthropic" else f"call_sim{seq}_{index}"


def _signature(thinking: str) -> str:
    return hashlib.sha256(thinking.encode("utf-8", "surrogatepass")).hexdigest()


def _fragments(text: str) -> list[str]:
    return [text[i : i + _ARGUMENT_FRAGMENT] for i in range(0, len(text), _ARGUMENT_FRAGMENT)]


def _string(text: str) -> bytes:
    # The hot path: one piece of text as a JSON string (ASCII-escaped, so always valid).
    return json.dumps(text).encode("ascii")


def stream_frames(
    request: SimRequest,
    result: SimAnswer,
    *,
    seq: int = 0,
    think_style: ThinkStyle = "tags",
    usage: bool = True,
) -> Iterator[bytes]:
    """The streamed response for ``result`` in ``request``'s wire format, one frame per delta.

    Guarantees: the frames concatenated are a complete, well-formed stream of the vendor's format
    (OpenAI SSE chunks ending in ``data: [DONE]``, with a usage chunk when the request asked for
    it; Anthropic SSE events from ``message_start`` to ``message_stop``; Ollama NDJSON records
    ending in a ``done: true`` record with the counts); every content or thinking delta is its own
    frame, so a server pacing frames paces deltas; tool-call arguments are sent in small fragments
    (OpenAI and Anthropic) that a client must assemble. ``seq`` makes the ids. ``usage=False``
    leaves every count out (no usage chunk, no ``usage`` objects, no Ollama counts), as some
    servers do (llama-cpp-python ignores ``stream_options``).
    """
    if request.vendor == "openai":
        if not usage:
            request = attrs.evolve(request, include_usage=False)
        return _openai_frames(request, result, seq, think_style)
    if request.vendor == "anthropic":
        return _anthropic_frames(request, result, seq, usage)
    return _ollama_frames(request, result, usage)


def _openai_frames(
    request: SimRequest, result: SimAnswer, seq: int, style: ThinkStyle
) -> Iterator[bytes]:
    head = (
        b'data: {"id":"'
        + _ids("openai", seq).encode()
        + b'","object":"chat.completion.chunk","created":0,"model":'
        + _string(request.model)
        + b',"choices":[{"index":0,"delta":'
    )
    open_tail = b',"finish_reason":null}]}\n\n'

    def chunk(delta: bytes) -> bytes:
        return head + delta + open_tail

    yield chunk(b'{"role":"assistant","content":""}')
    if result.thinking:
        if style == "field":
            for piece in _WORDS.findall(result.thinking):
                yield chunk(b'{"reasoning_content":' + _string(piece) + b"}")
        else:
            yield chunk(b'{"content":"<think>"}')
            for piece in _WORDS.findall(result.thinking):
                yield chunk(b'{"content":' + _string(piece) + b"}")
            yield chunk(b'{"content":"</think>"}')
    for piece in result.pieces:
        yield chunk(b'{"content":' + _string(piece) + b"}")
    for index, call in enumerate(result.calls):
        start = {
            "tool_calls": [
                {
                    "index": index,
                    "id": _call_id("openai", seq, index),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
            ]
        }
        yield chunk(dumpb(start))
        for fragment in _fragments(dumps(call.arguments)):
            more = {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
            yield chunk(dumpb(more))
    yield head + b'{},"finish_reason":' + _string(result.finish.value) + b"}]}\n\n"
    if request.include_usage:
        usage = {
            "id": _ids("openai", seq),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": request.model,
            "choices": [],
            "usage": _openai_usage(result.usage),
        }
        yield b"data: " + dumpb(usage) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _openai_usage(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt,
        "completion_tokens": usage.completion,
        "total_tokens": usage.total,
    }


_ANTHROPIC_STOP: Final[Mapping[FinishReason, str]] = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
}


def _event(name: str, data: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumpb(data) + b"\n\n"


def _anthropic_frames(
    request: SimRequest, result: SimAnswer, seq: int, usage: bool
) -> Iterator[bytes]:
    message: dict[str, Any] = {
        "id": _ids("anthropic", seq),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": result.usage.prompt, "output_tokens": 1},
    }
    if not usage:
        del message["usage"]
    yield _event("message_start", {"type": "message_start", "message": message})
    yield _event("ping", {"type": "ping"})
    index = 0
    if result.thinking:
        # As the API sends it (the official SDK's ThinkingBlock requires the signature).
        thinking_block = {"type": "thinking", "thinking": "", "signature": ""}
        yield _event("content_block_start", _block_start(index, thinking_block))
        for piece in _WORDS.findall(result.thinking):
            yield _event(
                "content_block_delta",
                _block_delta(index, {"type": "thinking_delta", "thinking": piece}),
            )
        signature = {"type": "signature_delta", "signature": _signature(result.thinking)}
        yield _event("content_block_delta", _block_delta(index, signature))
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    if result.pieces:
        yield _event("content_block_start", _block_start(index, {"type": "text", "text": ""}))
        head = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
            + str(index).encode()
            + b',"delta":{"type":"text_delta","text":'
        )
        for piece in result.pieces:
            yield head + _string(piece) + b"}}\n\n"
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    for number, call in enumerate(result.calls):
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": _call_id("anthropic", seq, number),
            "name": call.name,
            "input": {},
        }
        yield _event("content_block_start", _block_start(index, block))
        for fragment in _fragments(dumps(call.arguments)):
            delta = {"type": "input_json_delta", "partial_json": fragment}
            yield _event("content_block_delta", _block_delta(index, delta))
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    end: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": _ANTHROPIC_STOP[result.finish], "stop_sequence": None},
    }
    if usage:
        end["usage"] = {"output_tokens": result.usage.completion}
    yield _event("message_delta", end)
    yield _event("message_stop", {"type": "message_stop"})


def _block_start(index: int, block: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _block_delta(index: int, delta: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _ollama_frames(request: SimRequest, result: SimAnswer, usage: bool) -> Iterator[bytes]:
    head = (
        b'{"model":'
        + _string(request.model)
        + b',"created_at":"'
        + _CREATED_AT.encode()
        + b'","message":{"role":"assistant",'
    )
    tail = b'},"done":false}\n'
    for piece in _WORDS.findall(result.thinking):
        yield head + b'"content":"","thinking":' + _string(piece) + tail
    for piece in result.pieces:
        yield head + b'"content":' + _string(piece) + tail
    if result.calls:
        calls = [
            {"function": {"name": call.name, "arguments": call.arguments}} for call in result.calls
        ]
        yield head + b'"content":"","tool_calls":' + dumpb(calls) + tail
    final = _ollama_final(request, result, {"role": "assistant", "content": ""}, usage)
    yield dumpb(final) + b"\n"


def _ollama_final(
    request: SimRequest, result: SimAnswer, message: dict[str, Any], usage: bool
) -> dict[str, Any]:
    final = {
        "model": request.model,
        "created_at": _CREATED_AT,
        "message": message,
        "done": True,
        "done_reason": "length" if result.finish is FinishReason.LENGTH else "stop",
        "total_duration": 0,
        "prompt_eval_count": result.usage.prompt,
        "eval_count": result.usage.completion,
    }
    if not usage:
        del final["prompt_eval_count"], final["eval_count"]
    return final


def response_body(
    request: SimRequest,
    result: SimAnswer,
    *,
    seq: int = 0,
    think_style: ThinkStyle = "tags",
    usage: bool = True,
) -> dict[str, Any]:
    """The one-shot (non-streamed) JSON response for ``result`` in ``request``'s wire format.

    Guarantees: it carries the same content, thinking, calls, finish reason and usage as
    :func:`stream_frames` would stream, in the vendor's response shape (``usage=False``: no
    counts at all).
    """
    body = _response_body(request, result, seq, think_style)
    if not usage:
        for key in ("usage", "prompt_eval_count", "eval_count"):
            body.pop(key, None)
    return body


def _response_body(
    request: SimRequest, result: SimAnswer, seq: int, think_style: ThinkStyle
) -> dict[str, Any]:
    if request.vendor == "openai":
        message: dict[str, Any] = {"role": "assistant"}
        content = result.text
        if result.thinking and think_style == "tags":
            content = f"<think>{result.thinking}</think>{content}"
        elif result.thinking:
            message["reasoning_content"] = result.thinking
        message["content"] = content if content or not result.calls else None
        if result.calls:
            message["tool_calls"] = [
                {
                    "id": _call_id("openai", seq, index),
                    "type": "function",
                    "function": {"name": call.name, "arguments": dumps(call.arguments)},
                }
                for index, call in enumerate(result.calls)
            ]
        return {
            "id": _ids("openai", seq),
            "object": "chat.completion",
            "created": 0,
            "model": request.model,
            "choices": [{"index": 0, "message": message, "finish_reason": result.finish.value}],
            "usage": _openai_usage(result.usage),
        }
    if request.vendor == "anthropic":
        blocks: list[dict[str, Any]] = []
        if result.thinking:
            blocks.append(
                {
                    "type": "thinking",
                    "thinking": result.thinking,
                    "signature": _signature(result.thinking),
                }
            )
        if result.pieces:
            blocks.append({"type": "text", "text": result.text})
        blocks.extend(
            {
                "type": "tool_use",
                "id": _call_id("anthropic", seq, index),
                "name": call.name,
                "input": call.arguments,
            }
            for index, call in enumerate(result.calls)
        )
        return {
            "id": _ids("anthropic", seq),
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "content": blocks,
            "stop_reason": _ANTHROPIC_STOP[result.finish],
            "stop_sequence": None,
            "usage": {
                "input_tokens": result.usage.prompt,
                "output_tokens": result.usage.completion,
            },
        }
    reply: dict[str, Any] = {"role": "assistant", "content": result.text}
    if result.thinking:
        reply["thinking"] = result.thinking
    if result.calls:
        reply["tool_calls"] = [
            {"function": {"name": call.name, "arguments": call.arguments}} for call in result.calls
        ]
    return _ollama_final(request, result, reply, True)


def error_body(vendor: Vendor, status: int, message: str) -> dict[str, Any]:
    """A JSON error body in ``vendor``'s shape for an HTTP error ``status`` with ``message``."""
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        405: "invalid_request_error",
        403: "permission_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    if vendor == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    if vendor == "ollama":
        return {"error": message}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
