"""What comes after the end of a stream never changes the response (issue 23, 002 G18).

For each of the four readers -- OpenAI chat completions (final record ``data: [DONE]``; its
finish reason is terminal but a usage chunk still follows it), the Responses API
(``response.completed`` / ``response.incomplete``), Anthropic Messages (``message_stop``) and
Ollama's NDJSON (``done: true``) -- a recorded transcript followed by anything at all (more
deltas, usage, another terminal record, an error record, a trailing ``[DONE]``, text that is
not JSON, random bytes), cut at random chunk boundaries, gives exactly the result and the deltas
of the transcript alone. Records are run the way the provider engine runs them: framing decoder
-> reader -> assembler, where a decoder error after the final record ends the decoding (with the
records of the failing chunk before it still read) instead of the call.
"""

from __future__ import annotations

import itertools
import json
import logging
import pathlib
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.errors import ProtocolError, ProviderError
from protocols.messages import Delta, ProviderResult
from protocols.ndjson import NDJSONDecoder
from protocols.sse import SSEDecoder, SSEEvent
from protocols.wire import NOTHING, Increment, StreamAssembler
from protocols.wire.anthropic import AnthropicReader
from protocols.wire.ollama import OllamaReader
from protocols.wire.openai_chat import OpenAIChatReader
from protocols.wire.openai_responses import OpenAIResponsesReader

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"


def sse(kind: str | None, record: Any) -> bytes:
    """One SSE event (named ``kind`` when given) whose data is ``record`` as JSON."""
    head = f"event: {kind}\n" if kind else ""
    return f"{head}data: {json.dumps(record)}\n\n".encode()


def line(record: Any) -> bytes:
    return json.dumps(record).encode() + b"\n"


@attrs.frozen
class Format:
    """One wire format: its transcripts, framing, reader, and records that would change the
    response if they were read (the junk every format gets is added by :func:`trailing`)."""

    name: str
    framing: str  # "sse" or "ndjson"
    reader: Callable[[], Any]
    harmful: tuple[bytes, ...]
    #: Trailing records that are harmless even before the end (a second final record).
    repeats: tuple[bytes, ...] = ()

    def transcripts(self) -> list[str]:
        return sorted(p.name.split(".")[0] for p in (FIXTURES / self.name).glob("*.expected.json"))

    def transcript(self, name: str) -> bytes:
        suffix = "sse" if self.framing == "sse" else "ndjson"
        data = (FIXTURES / self.name / f"{name}.{suffix}").read_bytes()
        return data if data.endswith(b"\n") else data + b"\n"


def chat_chunk(delta: dict[str, Any], finish: str | None = None, **top: Any) -> bytes:
    record = {
        "id": "chatcmpl-after",
        "object": "chat.completion.chunk",
        "model": "after-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **top,
    }
    return sse(None, record)


CHAT = Format(
    "openai_chat",
    "sse",
    OpenAIChatReader,
    (
        chat_chunk({"content": "AFTER"}),
        chat_chunk({"reasoning_content": "after thought"}),
        chat_chunk(
            {"tool_calls": [{"index": 5, "id": "c9", "function": {"name": "x", "arguments": "{}"}}]}
        ),
        chat_chunk({}, "length"),
        sse(None, {"choices": [], "usage": {"prompt_tokens": 999, "completion_tokens": 999}}),
        sse(None, {"error": {"message": "late failure", "type": "server_error"}}),
        sse("error", {"error": {"message": "late failure"}}),
    ),
)

RESPONSES = Format(
    "openai_responses",
    "sse",
    OpenAIResponsesReader,
    (
        sse(
            "response.output_text.delta",
            {"type": "response.output_text.delta", "output_index": 0, "delta": "AFTER"},
        ),
        sse(
            "response.reasoning_summary_text.delta",
            {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "hm"},
        ),
        sse(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 9,
                "item": {"type": "function_call", "call_id": "c9", "name": "x", "arguments": "{}"},
            },
        ),
        sse(
            "response.completed",
            {
                "type": "response.completed",
                "response": {
                    "id": "resp_other",
                    "model": "other-model",
                    "usage": {"input_tokens": 999, "output_tokens": 999, "total_tokens": 1998},
                },
            },
        ),
        sse(
            "response.incomplete",
            {
                "type": "response.incomplete",
                "response": {"incomplete_details": {"reason": "max_output_tokens"}},
            },
        ),
        sse(
            "response.failed",
            {"type": "response.failed", "response": {"error": {"code": "server_error"}}},
        ),
        sse("error", {"type": "error", "code": "server_error", "message": "late failure"}),
        b"event: error\ndata: plain text failure\n\n",
    ),
)

ANTHROPIC = Format(
    "anthropic",
    "sse",
    AnthropicReader,
    (
        sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "AFTER"},
            },
        ),
        sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 7,
                "content_block": {"type": "tool_use", "id": "t9", "name": "x"},
            },
        ),
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens"},
                "usage": {"output_tokens": 999},
            },
        ),
        sse(
            "message_start",
            {
                "type": "message_start",
                "message": {"id": "msg_o", "model": "o", "usage": {"input_tokens": 999}},
            },
        ),
        sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "late"}}),
    ),
    repeats=(sse("message_stop", {"type": "message_stop"}),),
)

OLLAMA = Format(
    "ollama",
    "ndjson",
    OllamaReader,
    (
        line({"model": "m", "message": {"role": "assistant", "content": "AFTER"}, "done": False}),
        line(
            {
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "x", "arguments": {}}}],
                },
                "done": False,
            }
        ),
        line({"done": True, "done_reason": "length", "prompt_eval_count": 999, "eval_count": 9}),
        line({"error": "late failure"}),
        b"[1, 2, 3]\n",
        b'"text"\n',
    ),
)

FORMATS = {f.name: f for f in (CHAT, RESPONSES, ANTHROPIC, OLLAMA)}


def minter() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"minted_{next(counter)}"


@attrs.define
class Run:
    result: ProviderResult
    deltas: list[Delta]
    after_end: list[Any]  # what the reader returned for records after the final one


def replay(fmt: Format, chunks: list[bytes]) -> Run:
    """Run ``chunks`` through decoder -> reader -> assembler the way the provider engine does."""
    decoder: SSEDecoder | NDJSONDecoder = SSEDecoder() if fmt.framing == "sse" else NDJSONDecoder()
    reader = fmt.reader()
    assembler = StreamAssembler(mint_id=minter())
    deltas: list[Delta] = []
    after_end: list[Any] = []

    def take(items: list[Any]) -> None:
        for item in items:
            if isinstance(decoder, SSEDecoder) and not isinstance(item, SSEEvent):
                continue  # a comment
            ended = assembler.final
            increment = reader.read(item)
            if ended:
                after_end.append(increment)
            deltas.extend(assembler.add(increment))

    for chunk in [*chunks, None]:
        try:
            items = decoder.close() if chunk is None else decoder.feed(chunk)
        except ProtocolError:
            if isinstance(decoder, NDJSONDecoder):
                take(decoder.before_failure)
            if not assembler.final:
                raise
            break  # the engine stops decoding: what failed came after the end
        take(items)  # a reader's error is never caught here
    deltas.extend(assembler.flush())
    assert assembler.final
    return Run(assembler.result(), deltas, after_end)


def cut(data: bytes, points: list[float]) -> list[bytes]:
    bounds = sorted({0, len(data), *(int(point * len(data)) for point in points)})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def trailing(fmt: Format) -> st.SearchStrategy[bytes]:
    """Whatever may follow the final record: the format's harmful records, trailing ``[DONE]``
    lines, text that is no record of the format, and random bytes."""
    done = b"data: [DONE]\n\n" if fmt.framing == "sse" else b"[DONE]\n"
    junk_text = st.text(max_size=40).map(
        (lambda text: f"data: {text}\n\n".encode())
        if fmt.framing == "sse"
        else (lambda text: text.replace("\n", " ").encode() + b"\n")
    )
    piece = st.one_of(
        st.sampled_from(
            [*fmt.harmful, *fmt.repeats, done, b"data:[DONE]\n\n", b": keep-alive\n\n"]
        ),
        junk_text,
        st.binary(max_size=30),
    )
    return st.lists(piece, min_size=1, max_size=8).map(b"".join)


def check_after_the_end(fmt: Format, name: str, extra: bytes, points: list[float]) -> None:
    data = fmt.transcript(name)
    alone = replay(fmt, [data])
    followed = replay(fmt, cut(data + extra, points))
    assert followed.result == alone.result
    assert followed.deltas == alone.deltas
    assert all(increment is NOTHING for increment in followed.after_end)


def transcripts_and_trailers(fmt: Format) -> st.SearchStrategy[tuple[str, bytes, list[float]]]:
    return st.tuples(
        st.sampled_from(fmt.transcripts()),
        trailing(fmt),
        st.lists(st.floats(0, 1), max_size=30),
    )


PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(case=transcripts_and_trailers(CHAT))
def test_openai_chat_ignores_what_follows_done(case: tuple[str, bytes, list[float]]) -> None:
    check_after_the_end(CHAT, *case)


@PROPERTY
@given(case=transcripts_and_trailers(RESPONSES))
def test_responses_ignores_what_follows_the_completed_response(
    case: tuple[str, bytes, list[float]],
) -> None:
    check_after_the_end(RESPONSES, *case)


@PROPERTY
@given(case=transcripts_and_trailers(ANTHROPIC))
def test_anthropic_ignores_what_follows_message_stop(case: tuple[str, bytes, list[float]]) -> None:
    check_after_the_end(ANTHROPIC, *case)


@PROPERTY
@given(case=transcripts_and_trailers(OLLAMA))
def test_ollama_ignores_what_follows_the_done_line(case: tuple[str, bytes, list[float]]) -> None:
    check_after_the_end(OLLAMA, *case)


def records(fmt: Format, data: bytes) -> list[Any]:
    """The records ``data`` holds, as the format's decoder gives them (comments left out)."""
    if fmt.framing == "sse":
        return [item for item in SSEDecoder().feed(data) if isinstance(item, SSEEvent)]
    return NDJSONDecoder().feed(data)


@pytest.mark.parametrize("fmt", FORMATS.values(), ids=lambda f: f.name)
def test_every_harmful_record_would_change_the_response_before_the_end(fmt: Format) -> None:
    """The properties above are not vacuous: each harmful record, read just before the final
    record, changes the response (or fails it)."""
    for name in fmt.transcripts():
        stream = records(fmt, fmt.transcript(name))
        alone = replay(fmt, [fmt.transcript(name)]).result
        for record in fmt.harmful:
            reader, assembler = fmt.reader(), StreamAssembler(mint_id=minter())
            try:
                for item in [*stream[:-1], *records(fmt, record), stream[-1]]:
                    assembler.add(reader.read(item))
                assembler.flush()
                changed = assembler.result() != alone
            except (ProtocolError, ProviderError):
                changed = True
            assert changed, (name, record)


@pytest.mark.parametrize("fmt", FORMATS.values(), ids=lambda f: f.name)
def test_a_trailing_done_is_accepted_silently(
    fmt: Format, caplog: pytest.LogCaptureFixture
) -> None:
    done = b"data: [DONE]\n\n" if fmt.framing == "sse" else b"[DONE]\n"
    for name in fmt.transcripts():
        data = fmt.transcript(name)
        with caplog.at_level(logging.DEBUG, logger="protocols.wire"):
            followed = replay(fmt, [data + done + done])
        assert followed.result == replay(fmt, [data]).result
        assert caplog.records == []


@pytest.mark.parametrize("fmt", FORMATS.values(), ids=lambda f: f.name)
def test_what_follows_the_end_is_logged_once_at_debug(
    fmt: Format, caplog: pytest.LogCaptureFixture
) -> None:
    data = fmt.transcript(fmt.transcripts()[0])
    with caplog.at_level(logging.DEBUG, logger="protocols.wire"):
        replay(fmt, [data + b"".join(fmt.harmful) * 3])
    assert [(r.name, r.levelno) for r in caplog.records] == [("protocols.wire", logging.DEBUG)]
    assert "after the end" in caplog.records[0].getMessage()
    assert "late failure" not in caplog.records[0].getMessage()  # kinds, never the text


def test_openai_chat_reads_the_usage_chunk_after_the_finish_reason() -> None:
    """Chat's finish reason is terminal, not final: the usage-only chunk that
    ``stream_options.include_usage`` sends after it still counts, and a stream that stops after
    the finish reason without ``[DONE]`` is complete all the same."""
    reader, assembler = OpenAIChatReader(), StreamAssembler()
    assembler.add(reader.read(SSEEvent(json.dumps({"choices": [{"delta": {"content": "Hi"}}]}))))
    finish = reader.read(
        SSEEvent(json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]}))
    )
    assert isinstance(finish, Increment)
    assert (finish.terminal, finish.final) == (True, False)
    assembler.add(finish)
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    assembler.add(reader.read(SSEEvent(json.dumps({"choices": [], "usage": usage}))))
    assert (assembler.terminal, assembler.final) == (True, False)
    assert assembler.usage is not None
    assert assembler.usage.total == 4
    assembler.add(reader.read(SSEEvent("[DONE]")))
    assert assembler.final
    assembler.add(
        reader.read(SSEEvent(json.dumps({"choices": [], "usage": {**usage, "total_tokens": 9}})))
    )
    assert assembler.usage.total == 4
