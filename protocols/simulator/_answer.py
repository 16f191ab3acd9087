"""The simulator's answers in each vendor's wire format: streamed frames, whole bodies, errors."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from .._json import dumpb
from ..accounting import estimate_tokens
from ..messages import FinishReason, Usage
from ._gemini import gemini_body, gemini_error, gemini_frames
from ._types import (
    _ARGUMENT_FRAGMENT,
    _CREATED_AT,
    _WORDS,
    SimAnswer,
    SimCall,
    SimRequest,
    ThinkStyle,
    Vendor,
)

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
    (OpenAI and Anthropic) that a client must assemble. The Responses API stream runs from
    ``response.created`` to ``response.completed`` (``response.incomplete`` when the output cap
    cut the answer), with numbered events, reasoning as a summary, and each call as a
    ``function_call`` item whose arguments come in fragments. ``seq`` makes the ids. ``usage=False``
    leaves every count out (no usage chunk, no ``usage`` objects, no Ollama counts), as some
    servers do (llama-cpp-python ignores ``stream_options``).
    """
    if request.vendor == "openai":
        if not usage:
            request = attrs.evolve(request, include_usage=False)
        return _openai_frames(request, result, seq, think_style)
    if request.vendor == "anthropic":
        return _anthropic_frames(request, result, seq, usage)
    if request.vendor == "openai-responses":
        return _responses_frames(request, result, seq, usage)
    if request.vendor == "gemini":
        return gemini_frames(request, result, seq, usage)
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
        for fragment in _fragments(call.text):
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


def _openai_usage(usage: Usage) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "prompt_tokens": usage.prompt,
        "completion_tokens": usage.completion,
        "total_tokens": usage.total,
    }
    if usage.cached is not None:  # (the prompt cache had a say: see _cache.py)
        counts["prompt_tokens_details"] = {"cached_tokens": usage.cached}
    return counts


def _anthropic_usage(usage: Usage, output: int) -> dict[str, int]:
    """Anthropic's counts: ``input_tokens`` leaves out what was read from or written to the
    cache, which come apart (when the prompt cache had a say: see _cache.py)."""
    read, written = usage.cached or 0, usage.cache_write or 0
    counts = {"input_tokens": usage.prompt - read - written, "output_tokens": output}
    if usage.cached is not None or usage.cache_write is not None:
        counts["cache_read_input_tokens"] = read
        counts["cache_creation_input_tokens"] = written
    return counts


_ANTHROPIC_STOP: Final[Mapping[FinishReason, str]] = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
}

#: The Responses API's ``incomplete_details.reason`` of an answer cut short.
_INCOMPLETE: Final[Mapping[FinishReason, str]] = {
    FinishReason.LENGTH: "max_output_tokens",
    FinishReason.CONTENT_FILTER: "content_filter",
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
        "usage": _anthropic_usage(result.usage, 1),
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
        for fragment in _fragments(call.text):
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


def _responses_usage(result: SimAnswer) -> dict[str, Any]:
    return {
        "input_tokens": result.usage.prompt,
        "input_tokens_details": {"cached_tokens": result.usage.cached or 0},
        "output_tokens": result.usage.completion,
        "output_tokens_details": {"reasoning_tokens": estimate_tokens(result.thinking)},
        "total_tokens": result.usage.total,
    }


def _responses_object(
    request: SimRequest,
    result: SimAnswer,
    seq: int,
    output: list[dict[str, Any]] | None,
    usage: bool,
) -> dict[str, Any]:
    """The response object; ``output=None`` for the in-progress shell of the first events."""
    status = "in_progress"
    reason = _INCOMPLETE.get(result.finish)
    if output is not None:
        status = "incomplete" if reason is not None else "completed"
    return {
        "id": f"resp_sim{seq}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "error": None,
        "incomplete_details": ({"reason": reason} if status == "incomplete" else None),
        "model": request.model,
        "output": output or [],
        "parallel_tool_calls": True,
        "store": False,
        "usage": _responses_usage(result) if usage and output is not None else None,
    }


def _responses_items(result: SimAnswer, seq: int) -> list[dict[str, Any]]:
    """The output items of the whole answer: reasoning, message, calls, in that order."""
    items: list[dict[str, Any]] = []
    if result.thinking:
        items.append(
            {
                "id": f"rs_sim{seq}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": result.thinking}],
                "encrypted_content": _signature(result.thinking),
            }
        )
    if result.pieces:
        items.append(
            {
                "id": f"msg_sim{seq}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": result.text, "annotations": []}],
            }
        )
    items.extend(
        {
            "id": f"fc_sim{seq}_{index}",
            "type": "function_call",
            "status": "completed" if call.cut is None else "incomplete",
            "call_id": _call_id("openai", seq, index),
            "name": call.name,
            "arguments": call.text,
        }
        for index, call in enumerate(result.calls)
    )
    return items


def _responses_frames(
    request: SimRequest, result: SimAnswer, seq: int, usage: bool
) -> Iterator[bytes]:
    numbers = itertools.count()

    def event(name: str, **fields: Any) -> bytes:
        data = {"type": name, "sequence_number": next(numbers), **fields}
        return _event(name, data)

    shell = _responses_object(request, result, seq, None, usage)
    yield event("response.created", response=shell)
    yield event("response.in_progress", response=shell)
    items = _responses_items(result, seq)
    for index, item in enumerate(items):
        kind, item_id = item["type"], item["id"]
        where = {"item_id": item_id, "output_index": index}
        if kind == "reasoning":
            yield event(
                "response.output_item.added", output_index=index, item={**item, "summary": []}
            )
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
            yield event(
                "response.reasoning_summary_part.added", **where, summary_index=0, part=part
            )
            for piece in _WORDS.findall(result.thinking):
                yield event(
                    "response.reasoning_summary_text.delta", **where, summary_index=0, delta=piece
                )
            text = result.thinking
            yield event("response.reasoning_summary_text.done", **where, summary_index=0, text=text)
            part = {"type": "summary_text", "text": text}
            yield event("response.reasoning_summary_part.done", **where, summary_index=0, part=part)
        elif kind == "message":
            added = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", output_index=index, item=added)
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", **where, content_index=0, part=part)
            head = (
                b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                b'"sequence_number":'
            )
            tail = (
                b',"item_id":"'
                + item_id.encode()
                + b'","output_index":'
                + str(index).encode()
                + b',"content_index":0,"logprobs":[],"delta":'
            )
            for piece in result.pieces:
                yield head + str(next(numbers)).encode() + tail + _string(piece) + b"}\n\n"
            text = result.text
            yield event(
                "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
            )
            part = {"type": "output_text", "text": text, "annotations": []}
            yield event("response.content_part.done", **where, content_index=0, part=part)
        else:
            added = {**item, "status": "in_progress", "arguments": ""}
            yield event("response.output_item.added", output_index=index, item=added)
            for fragment in _fragments(item["arguments"]):
                yield event("response.function_call_arguments.delta", **where, delta=fragment)
            yield event(
                "response.function_call_arguments.done", **where, arguments=item["arguments"]
            )
        yield event("response.output_item.done", output_index=index, item=item)
    final = _responses_object(request, result, seq, items, usage)
    yield event(f"response.{final['status']}", response=final)


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
        calls = [{"function": _ollama_function(call)} for call in result.calls]
        yield head + b'"content":"","tool_calls":' + dumpb(calls) + tail
    final = _ollama_final(request, result, {"role": "assistant", "content": ""}, usage)
    yield dumpb(final) + b"\n"


def _ollama_function(call: SimCall) -> dict[str, Any]:
    # Arguments are an object; those of a call cut short go as the text that was sent.
    return {"name": call.name, "arguments": call.arguments if call.cut is None else call.cut}


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
    if request.vendor == "gemini":
        return gemini_body(request, result, seq, usage)
    body = _response_body(request, result, seq, think_style)
    if not usage:
        for key in ("usage", "prompt_eval_count", "eval_count"):
            body.pop(key, None)
    return body


def _response_body(
    request: SimRequest, result: SimAnswer, seq: int, think_style: ThinkStyle
) -> dict[str, Any]:
    if request.vendor == "openai-responses":
        return _responses_object(request, result, seq, _responses_items(result, seq), True)
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
                    "function": {"name": call.name, "arguments": call.text},
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
                # (A whole body holds objects: a call cut short has what parsed, nothing.)
                "input": call.arguments if call.cut is None else {},
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
            "usage": _anthropic_usage(result.usage, result.usage.completion),
        }
    reply: dict[str, Any] = {"role": "assistant", "content": result.text}
    if result.thinking:
        reply["thinking"] = result.thinking
    if result.calls:
        reply["tool_calls"] = [{"function": _ollama_function(call)} for call in result.calls]
    return _ollama_final(request, result, reply, True)


def error_body(vendor: Vendor, status: int, message: str) -> dict[str, Any]:
    """A JSON error body in ``vendor``'s shape for an HTTP error ``status`` with ``message``
    (both OpenAI formats share one shape)."""
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
    if vendor == "gemini":
        return gemini_error(status, message)
    if vendor == "ollama":
        return {"error": message}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
