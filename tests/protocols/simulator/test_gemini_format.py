"""The simulator's Gemini API, pure: its routes, its reading of requests (both spellings
protobuf JSON allows, the thought-signature rule of Gemini 3), and its answers -- streamed and
whole -- read back by our own Gemini reader as the policy's answer."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from protocols._json import dumps, loads
from protocols.errors import ValidationError
from protocols.messages import FinishReason, Message, ProviderOptions, ToolCall, ToolDefinition
from protocols.simulator import (
    answer,
    error_body,
    match_route,
    parse_request,
    response_body,
    stream_frames,
)
from protocols.sse import SSEDecoder
from protocols.wire import StreamAssembler
from protocols.wire.gemini import GeminiReader, encode_request, read_response

ADD = ToolDefinition("add", "Add.", {"type": "object", "properties": {"a": {"type": "integer"}}})
SIGNATURE = base64.b64encode(b"signed").decode()


@pytest.mark.parametrize(
    ("path", "route"),
    [
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            ("gemini", "gemini-2.5-flash", True),
        ),
        ("/v1/models/gemini-2.5-pro:generateContent", ("gemini", "gemini-2.5-pro", False)),
        ("/v1beta/tunedModels/mine-1:generateContent", ("gemini", "mine-1", False)),
        ("/openai/deployments/gpt4o/chat/completions", ("openai", "gpt4o", None)),
        ("/openai/v1/chat/completions", ("openai", None, None)),
        ("/openai/v1/responses", ("openai-responses", None, None)),
        ("/v1beta/models/x:countTokens", None),
        ("/v1beta/models/../x:generateContent", None),
        ("/openai/deployments/a/b/chat/completions", None),
    ],
)
def test_routes(path: str, route: Any) -> None:
    assert match_route(path) == route


def body(messages: list[Message], **kwargs: Any) -> str:
    return dumps(encode_request(messages, **kwargs))


def test_our_request_reads_back_whole() -> None:
    call = ToolCall("c1", "add", {"a": 1})
    signed = {"gemini": {"parts": [{"call": 0, "thoughtSignature": SIGNATURE}]}}
    history = [
        Message.system("Be terse."),
        Message.user("add 1"),
        Message.assistant("", calls=[call], continuation=signed),
        Message.tool("c1", "add", "1"),
    ]
    options = ProviderOptions(tool_choice="add", max_tokens=50, reasoning_effort="medium")
    request = parse_request("gemini", body(history, tools=[ADD], options=options))
    assert [(turn.role, turn.text) for turn in request.turns] == [
        ("system", "Be terse."),
        ("user", "add 1"),
        ("assistant", ""),
        ("tool", "1"),
    ]
    assert request.turns[2].calls[0].arguments == {"a": 1}
    assert (request.tools, request.tool_choice, request.max_tokens) == (("add",), "add", 50)
    assert request.think
    assert request.settings.reasoning_effort == "medium"


def test_a_replayed_call_of_the_current_turn_needs_its_signature() -> None:
    history = [
        Message.user("add 1"),
        Message.assistant("", calls=[ToolCall("c1", "add", {"a": 1})]),
        Message.tool("c1", "add", "1"),
    ]
    with pytest.raises(ValidationError, match="thought_signature"):
        parse_request("gemini", body(history))
    # an earlier turn (before the last user text) is not checked, as Gemini does not
    later = [*history, Message.assistant("It is 1."), Message.user("thanks")]
    assert parse_request("gemini", body(later)).turns[-1].text == "thanks"


def test_snake_case_spellings_are_read_too() -> None:
    data = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "system_instruction": {"parts": [{"text": "S"}]},
        "generation_config": {
            "max_output_tokens": 7,
            "thinking_config": {"include_thoughts": True, "thinking_budget": 1024},
        },
        "tool_config": {"function_calling_config": {"mode": "NONE"}},
    }
    request = parse_request("gemini", dumps(data))
    assert request.turns[0].text == "S"
    assert (request.max_tokens, request.think, request.tool_choice) == (7, True, "none")
    assert request.settings.reasoning_effort == "low"


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"contents": {}},
        {"contents": [{"role": "system", "parts": []}]},
        {"contents": [{"parts": [{"functionResponse": {"response": {}}}]}]},
        {
            "contents": [],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": "f", "parametersJsonSchema": {"type": "string"}}
                    ]
                }
            ],
        },
        {"contents": [], "generationConfig": {"maxOutputTokens": 0}},
    ],
)
def test_a_bad_request_is_refused_naming_what(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_request("gemini", dumps(data))


@pytest.mark.parametrize(
    ("text", "think", "tools"),
    [
        ("count to 5", False, False),
        ("What is 2 + 3 and 4 + 5?", True, True),
        ("hello there", True, False),
    ],
)
def test_the_answer_streamed_and_whole_reads_back_as_the_policy_said(
    text: str, think: bool, tools: bool
) -> None:
    options = ProviderOptions(think=True) if think else None
    request = parse_request(
        "gemini", body([Message.user(text)], tools=[ADD] if tools else (), options=options)
    )
    said = answer(request)
    decoder, reader = SSEDecoder(), GeminiReader()
    assembler = StreamAssembler(split=False)
    for frame in stream_frames(request, said, seq=3):
        assert frame.endswith(b"\r\n\r\n")
        for event in decoder.feed(frame):
            assembler.add(reader.read(event))  # type: ignore[arg-type]
    assembler.flush()
    streamed = assembler.result()
    whole = read_response(response_body(request, said, seq=3))
    for result in (streamed, whole):
        assert result.content == said.text
        assert result.thinking == said.thinking
        assert [(c.name, c.arguments) for c in result.calls] == [
            (c.name, c.arguments) for c in said.calls
        ]
        assert result.finish is (FinishReason.TOOL_CALLS if said.calls else FinishReason.STOP)
        assert result.usage is not None
        assert (result.usage.prompt, result.usage.completion) == (
            said.usage.prompt,
            said.usage.completion,
        )
        if said.calls or said.thinking:
            assert result.continuation["gemini"]["parts"][0]["thoughtSignature"]


def test_errors_are_in_gemini_s_shape() -> None:
    assert error_body("gemini", 429, "slow down") == {
        "error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}
    }
    assert loads(dumps(error_body("gemini", 418, "x")))["error"]["status"] == "UNKNOWN"
