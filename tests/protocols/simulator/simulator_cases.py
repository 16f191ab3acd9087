"""Requests, tools and our own client code, driven purely, shared by the protocols.simulator
tests: each vendor's request encoder, the SSE and NDJSON decoders, the vendor stream readers
with the StreamAssembler (as the HTTP engine combines them), and the one-shot response readers.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from protocols._json import dumpb, loads
from protocols.messages import (
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
)
from protocols.ndjson import NDJSONDecoder
from protocols.simulator import (
    MEDIA_TYPES,
    SimAnswer,
    SimRequest,
    ThinkStyle,
    Vendor,
    answer,
    parse_request,
    response_body,
    stream_frames,
)
from protocols.sse import SSEDecoder, SSEEvent
from protocols.wire import Increment, StreamAssembler, anthropic, ollama, openai_chat

MODEL = "sim-model"
VENDORS: tuple[Vendor, ...] = ("openai", "anthropic", "ollama")
STYLES: tuple[ThinkStyle, ...] = ("tags", "field")
#: Every vendor, and the OpenAI format once per think style.
FORMATS: list[tuple[Vendor, ThinkStyle]] = [
    ("openai", "tags"),
    ("openai", "field"),
    ("anthropic", "tags"),
    ("ollama", "tags"),
]
FORMAT_IDS = ["openai-tags", "openai-field", "anthropic", "ollama"]

#: Inline ``<think>`` splitting per vendor, as the HTTP providers configure their assembler
#: (``AnthropicMessages`` turns it off: Anthropic reports reasoning natively).
SPLIT: dict[Vendor, bool] = {"openai": True, "anthropic": False, "ollama": True}

ADD = ToolDefinition(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
LOOKUP = ToolDefinition(
    "lookup",
    "Look something up.",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()


# ---------------------------------------------------------------------------------------------
# Our client code, driven purely


def encode(
    vendor: Vendor,
    messages: Sequence[Message],
    *,
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
) -> bytes:
    """The request body our client sends for ``vendor``, serialised as it goes on the wire."""
    if vendor == "openai":
        body = openai_chat.encode_request(
            messages, model=MODEL, tools=tools, options=options, stream=stream
        )
    elif vendor == "anthropic":
        body = anthropic.encode_request(
            messages, model=MODEL, tools=tools, options=options, stream=stream
        )
    else:
        body = ollama.encode_request(
            messages, model=MODEL, tools=tools, options=options, stream=stream
        )
    return dumpb(body)


def new_reader(vendor: Vendor) -> Callable[[Any], Any]:
    """A fresh stream reader's ``read`` for ``vendor`` (one per stream): it returns an
    :class:`Increment`, or a plain ``str`` standing for ``Increment(content=text)``."""
    if vendor == "openai":
        return openai_chat.OpenAIChatReader().read
    if vendor == "anthropic":
        return anthropic.AnthropicReader().read
    return ollama.OllamaReader().read


def drive(vendor: Vendor, chunks: Iterable[bytes]) -> tuple[ProviderResult, list[Increment]]:
    """Bytes -> framing decoder -> vendor reader -> StreamAssembler, as ``_HTTPStream`` does:
    the decoder is chosen by the simulator's media type, SSE comments are skipped, the decoder is
    closed at the end of the body, the assembler flushed and required to be terminal."""
    decoder: SSEDecoder | NDJSONDecoder
    decoder = SSEDecoder() if MEDIA_TYPES[vendor] == "text/event-stream" else NDJSONDecoder()
    read = new_reader(vendor)
    # Ollama sends no call ids: mint them deterministically, so equal streams give equal results.
    minted = itertools.count()
    assembler = StreamAssembler(split=SPLIT[vendor], mint_id=lambda: f"minted_{next(minted)}")
    increments: list[Increment] = []

    def take(items: Sequence[Any]) -> None:
        for item in items:
            if isinstance(item, SSEEvent) or isinstance(decoder, NDJSONDecoder):
                output = read(item)
                assembler.add(output)  # as the engine does: the reader's output, unchanged
                if isinstance(output, str):  # the readers' shorthand for content only
                    output = Increment(content=output)
                assert isinstance(output, Increment)
                increments.append(output)

    for chunk in chunks:
        take(decoder.feed(chunk))
    take(decoder.close())
    assembler.flush()
    assert assembler.terminal, "the stream lacks the vendor's terminal record"
    return assembler.result(), increments


def read_body(vendor: Vendor, body: dict[str, Any]) -> ProviderResult:
    """A one-shot response body, sent through JSON as on the wire, read by our client."""
    wire = loads(dumpb(body))
    if vendor == "openai":
        return openai_chat.read_response(wire)
    if vendor == "anthropic":
        return anthropic.read_response(wire)
    return ollama.read_response(wire)


def calls_of(result: ProviderResult | SimAnswer) -> list[tuple[str, dict[str, Any]]]:
    # A call the simulator cut short reads back with empty arguments (it never runs).
    return [
        (call.name, {} if getattr(call, "cut", None) is not None else call.arguments)
        for call in result.calls
    ]


def assert_same(result: ProviderResult, expected: SimAnswer, *, usage: bool = True) -> None:
    """What the client read equals what the simulator said."""
    assert result.content == expected.text
    assert result.thinking == expected.thinking
    assert calls_of(result) == calls_of(expected)
    assert result.finish is expected.finish
    # Every call of an answer cut short is refused (never run); no other is.
    cut = expected.finish in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER)
    assert set(result.denied) == ({call.id for call in result.calls} if cut else set())
    if usage:
        assert result.usage == expected.usage
    else:
        assert result.usage is None


def streamed(request: SimRequest, *, seq: int = 0, style: ThinkStyle = "tags") -> ProviderResult:
    result = answer(request)
    frames = b"".join(stream_frames(request, result, seq=seq, think_style=style))
    return drive(request.vendor, [frames])[0]


def round_trip(
    vendor: Vendor,
    messages: Sequence[Message],
    *,
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    style: ThinkStyle = "tags",
) -> SimAnswer:
    """Encode the request both streamed and not, parse it, answer it, and check that the streamed
    frames and the one-shot body both read back (through our client) as that answer."""
    answers: list[SimAnswer] = []
    for stream in (True, False):
        body = encode(vendor, messages, tools=tools, options=options, stream=stream)
        request = parse_request(vendor, body)
        assert request.vendor == vendor
        assert request.model == MODEL
        assert request.stream is stream
        result = answer(request)
        answers.append(result)
        if stream:
            frames = b"".join(stream_frames(request, result, seq=3, think_style=style))
            got, _ = drive(vendor, [frames])
        else:
            got = read_body(vendor, response_body(request, result, seq=3, think_style=style))
        assert_same(got, result)
    # Whether the answer is streamed does not change what is said.
    assert answers[0] == answers[1]
    return answers[0]


def think_options(
    vendor: Vendor, extra: dict[str, Any] | None = None, **kwargs: Any
) -> ProviderOptions:
    """Options that ask ``vendor`` for reasoning the way our client can: Anthropic ``think``
    (with room for the budget), Ollama ``think``, OpenAI-compatible through ``extra``."""
    if vendor == "anthropic":
        return ProviderOptions(think=True, max_tokens=4000, **kwargs)
    if vendor == "ollama":
        return ProviderOptions(think=True, **kwargs)
    return ProviderOptions(extra=extra or {"reasoning_effort": "low"}, **kwargs)


def words(pieces: Sequence[str]) -> list[str]:
    """Each delta is one word (leading whitespace allowed): the words, checked to be single."""
    out = []
    for piece in pieces:
        assert piece
        assert len(piece.split()) == 1, piece
        out.append(piece.strip())
    return out


def user(text: str) -> list[Message]:
    return [Message.user(text)]


def tool_conversation(results: Sequence[str]) -> list[Message]:
    """A user turn, one assistant turn calling ``add`` once per result, and the results."""
    calls = [ToolCall(f"call_{i}", "add", {"a": i, "b": 1}) for i in range(len(results))]
    return [
        Message.user("Add some numbers."),
        Message.assistant(calls=calls),
        *(
            Message.tool(call.id, call.name, content)
            for call, content in zip(calls, results, strict=True)
        ),
    ]
