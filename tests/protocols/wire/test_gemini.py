"""Tests for protocols.wire.gemini: the encoder's rules, the reader's rules, thought signatures
kept and sent back, error mapping, and real-shaped ``streamGenerateContent?alt=sse``
transcripts (CRLF-framed, with fields the reader must ignore) replayed at random chunk
boundaries."""

from __future__ import annotations

import base64
import itertools
import json
import pathlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.codec import from_json
from protocols.errors import ConfigError, ProtocolError, ProviderError
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
)
from protocols.sse import SSEDecoder, SSEEvent
from protocols.wire import StreamAssembler
from protocols.wire.gemini import (
    MAX_STOP,
    NAMESPACE,
    THINKING_BUDGETS,
    GeminiReader,
    encode_request,
    error_details,
    is_context_overflow,
    model_path,
    read_response,
)
from protocols.wire.schema import project

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "gemini"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
WEATHER = ToolDefinition(
    "get_weather",
    "Current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def event(**fields: Any) -> SSEEvent:
    return SSEEvent(data=json.dumps(fields))


def candidate(parts: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"parts": parts, "role": "model"}, **fields}]}


# --------------------------------------------------------------------------- encoder


def test_a_minimal_body_has_contents_only_and_no_model() -> None:
    body = encode_request([Message.user("Hi")], model="gemini-2.5-flash")
    assert body == {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    assert encode_request([Message.user("Hi")], stream=False) == body  # the path says it


def test_system_messages_become_one_system_instruction() -> None:
    body = encode_request(
        [Message.system("Be terse."), Message.user("Hi"), Message.system("In French.")]
    )
    assert body["systemInstruction"] == {"parts": [{"text": "Be terse.\n\nIn French."}]}
    assert [content["role"] for content in body["contents"]] == ["user"]
    assert "systemInstruction" not in encode_request([Message.system(""), Message.user("x")])


def test_images_are_inline_data_after_the_text() -> None:
    body = encode_request([Message.user("What is it?", images=[PNG, "data:image/gif;base64,R0"])])
    assert body["contents"][0]["parts"] == [
        {"text": "What is it?"},
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"inlineData": {"mimeType": "image/gif", "data": "R0"}},
    ]


def test_parallel_results_travel_in_one_user_content_naming_their_functions() -> None:
    calls = [ToolCall("c1", "get_weather", {"city": "Paris"}), ToolCall("c2", "add", {"a": 1})]
    history = [
        Message.user("Two things"),
        Message.assistant("", calls=calls),
        Message.tool("c1", "get_weather", "18 C"),
        Message.tool("c2", "add", "3"),
        Message.user("Thanks"),
    ]
    contents = encode_request(history)["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"name": "add", "args": {"a": 1}}},
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"result": "18 C"}}},
            {"functionResponse": {"name": "add", "response": {"result": "3"}}},
            {"text": "Thanks"},
        ],
    }
    assert len(contents) == 3


def test_empty_messages_are_skipped_and_thinking_is_never_sent() -> None:
    body = encode_request(
        [Message.user(""), Message.user("Hi"), Message.assistant("", thinking="private")]
    )
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hi"}]}]


def test_signatures_go_back_on_the_parts_they_came_on() -> None:
    calls = [ToolCall("fc_1", "get_weather", {"city": "Oslo"}), ToolCall("minted", "add", {})]
    stored = {
        NAMESPACE: {
            "parts": [
                {"thought": "Plan.", "thoughtSignature": "T"},
                {"span": [6, 11], "thoughtSignature": "S"},
                {"call": 0, "id": "fc_1", "thoughtSignature": "C"},
            ]
        }
    }
    message = Message.assistant("Hello world!", calls=calls, continuation=stored)
    body = encode_request([Message.user("x"), message, Message.tool("fc_1", "get_weather", "cold")])
    assert body["contents"][1]["parts"] == [
        {"text": "Plan.", "thought": True, "thoughtSignature": "T"},
        {"text": "Hello "},
        {"text": "world", "thoughtSignature": "S"},
        {"text": "!"},
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "fc_1"},
            "thoughtSignature": "C",
        },
        {"functionCall": {"name": "add", "args": {}}},  # a minted id is never sent
    ]
    response = body["contents"][2]["parts"][0]["functionResponse"]
    assert response == {"name": "get_weather", "response": {"result": "cold"}, "id": "fc_1"}


def test_a_signature_alone_goes_back_on_an_empty_text_part() -> None:
    stored = {NAMESPACE: {"parts": [{"span": [2, 2], "thoughtSignature": "S"}]}}
    parts = encode_request([Message.assistant("42", continuation=stored)])["contents"][0]["parts"]
    assert parts == [{"text": "42"}, {"text": "", "thoughtSignature": "S"}]


def test_a_continuation_not_of_the_reader_s_shape_is_refused() -> None:
    for bad in (
        {NAMESPACE: {"parts": "x"}},
        {NAMESPACE: {"parts": [{"span": "x", "thoughtSignature": "S"}]}},
    ):
        with pytest.raises(ConfigError):
            encode_request([Message.assistant("a", continuation=bad)])
    # another adapter's data is not ours to read
    body = encode_request([Message.assistant("a", continuation={"anthropic": {"x": 1}})])
    assert body["contents"][0]["parts"] == [{"text": "a"}]


def test_tools_are_function_declarations_with_their_json_schema() -> None:
    body = encode_request([Message.user("x")], tools=[WEATHER, ToolDefinition("ping")])
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Current weather in a city.",
                    "parametersJsonSchema": WEATHER.parameters,
                },
                {"name": "ping", "parametersJsonSchema": ToolDefinition("ping").parameters},
            ]
        }
    ]


def test_the_gemini_schema_projection_flattens_a_root_union_and_keeps_the_rest() -> None:
    nested = {
        "type": "object",
        "properties": {"when": {"$ref": "#/$defs/d"}},
        "$defs": {"d": {"type": "string"}},
        "additionalProperties": False,
    }
    assert project(nested, "gemini").outcome == "adopted"
    union = {
        "anyOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"b": {"type": "string"}}},
        ]
    }
    projection = project(union, "gemini")
    assert projection.outcome == "adapted"
    assert projection.schema is not None
    assert set(projection.schema["properties"]) == {"a", "b"}


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        ("get_weather", {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
    ],
)
def test_tool_choice_is_the_function_calling_mode(choice: str, config: dict[str, Any]) -> None:
    options = ProviderOptions(tool_choice=choice)
    body = encode_request([Message.user("x")], tools=[WEATHER], options=options)
    assert body["toolConfig"] == {"functionCallingConfig": config}


def test_tool_choice_without_tools() -> None:
    assert "toolConfig" not in encode_request(
        [Message.user("x")], options=ProviderOptions(tool_choice="auto")
    )
    with pytest.raises(ConfigError, match="needs tools"):
        encode_request([Message.user("x")], options=ProviderOptions(tool_choice="required"))
    with pytest.raises(ConfigError, match="not one of the request's tools"):
        encode_request(
            [Message.user("x")], tools=[WEATHER], options=ProviderOptions(tool_choice="nope")
        )


def test_every_setting_goes_in_generation_config_under_gemini_s_name() -> None:
    options = ProviderOptions(
        max_tokens=200,
        temperature=1.5,
        top_p=0.9,
        stop=("END",),
        seed=-7,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        reasoning_effort="low",
        schema={"type": "object"},
        extra={"safetySettings": [], "generationConfig": {"topK": 40}},
    )
    body = encode_request([Message.user("x")], options=options)
    assert body["generationConfig"] == {
        "maxOutputTokens": 200,
        "temperature": 1.5,
        "topP": 0.9,
        "stopSequences": ["END"],
        "seed": -7,
        "presencePenalty": 0.5,
        "frequencyPenalty": -0.5,
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object"},
        "topK": 40,
    }
    assert body["safetySettings"] == []


@pytest.mark.parametrize(
    ("options", "thinking"),
    [
        (ProviderOptions(think=True), {"includeThoughts": True}),
        (ProviderOptions(think=False), {"thinkingBudget": 0}),
        *[
            (
                ProviderOptions(reasoning_effort=effort),
                {"thinkingBudget": budget, "includeThoughts": True},
            )
            for effort, budget in THINKING_BUDGETS.items()
        ],
    ],
)
def test_thinking(options: ProviderOptions, thinking: dict[str, Any]) -> None:
    body = encode_request([Message.user("x")], options=options)
    assert body["generationConfig"]["thinkingConfig"] == thinking
    assert "generationConfig" not in encode_request([Message.user("x")])


def test_what_gemini_cannot_take_is_refused_never_dropped() -> None:
    user = [Message.user("x")]
    with pytest.raises(ConfigError, match=f"at most {MAX_STOP} stop sequences"):
        encode_request(user, options=ProviderOptions(stop=[str(n) for n in range(6)]))
    with pytest.raises(ConfigError, match="32-bit"):
        encode_request(user, options=ProviderOptions(seed=2**31))
    with pytest.raises(ConfigError, match="parallel_tool_calls=False"):
        encode_request(user, tools=[WEATHER], options=ProviderOptions(parallel_tool_calls=False))
    # nothing to keep apart without tools, and True is what Gemini does
    assert encode_request(user, options=ProviderOptions(parallel_tool_calls=False))
    body = encode_request(user, tools=[WEATHER], options=ProviderOptions(parallel_tool_calls=True))
    assert set(body) == {"contents", "tools"}


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"contents": []}, "owns it"),
        ({"tools": []}, "owns it"),
        ({"systemInstruction": {}}, "owns it"),
        ({"toolConfig": {}}, "from tool_choice"),
        ({"generationConfig": {"temperature": 1}}, "from temperature"),
        ({"generationConfig": {"thinkingConfig": {}}}, "from think"),
        ({"generationConfig": "x"}, "must be a JSON object"),
    ],
)
def test_extra_may_not_set_what_the_encoder_writes(extra: dict[str, Any], says: str) -> None:
    options = ProviderOptions(extra=extra, temperature=0.5, think=True, tool_choice="auto")
    with pytest.raises(ConfigError, match=says):
        encode_request([Message.user("x")], tools=[WEATHER], options=options)


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("gemini-2.5-flash", "models/gemini-2.5-flash"),
        ("models/gemini-2.5-pro", "models/gemini-2.5-pro"),
        ("tunedModels/my-model-123", "tunedModels/my-model-123"),
    ],
)
def test_model_path(model: str, path: str) -> None:
    assert model_path(model) == path


@pytest.mark.parametrize("model", ["", "../x", "a/b/c", "gemini?alt=json", "m:generate", "a b"])
def test_a_model_name_never_changes_the_path(model: str) -> None:
    with pytest.raises(ConfigError):
        model_path(model)


# --------------------------------------------------------------------------- reader


def test_text_and_thought_parts_are_content_and_thinking() -> None:
    reader = GeminiReader()
    assert reader.read(event(**candidate([{"text": "Hi"}]))) == "Hi"
    increment = reader.read(event(**candidate([{"text": "Plan", "thought": True}, {"text": "!"}])))
    assert not isinstance(increment, str)
    assert (increment.thinking, increment.content) == ("Plan", "!")


def test_unknown_parts_and_fields_are_ignored_but_wrong_shapes_are_not() -> None:
    reader = GeminiReader()
    increment = reader.read(
        event(**candidate([{"executableCode": {"code": "1"}}, {"inlineData": {}}]), extra=1)
    )
    assert not isinstance(increment, str)
    assert increment.content == ""
    assert not increment.calls
    for bad in (
        "[1]",
        '{"candidates": {}}',
        '{"candidates": [{"content": {"parts": [1]}}]}',
        '{"candidates": [{"content": {"parts": [{"text": 5}]}}]}',
        '{"candidates": [{"content": {"parts": [{"functionCall": {"args": []}}]}}]}',
    ):
        with pytest.raises(ProtocolError):
            GeminiReader().read(SSEEvent(data=bad))


def test_stop_with_calls_is_tool_calls_and_other_reasons_map() -> None:
    reader = GeminiReader()
    increment = reader.read(
        event(**candidate([{"functionCall": {"name": "f", "args": {}}}], finishReason="STOP"))
    )
    assert not isinstance(increment, str)
    assert increment.finish is FinishReason.TOOL_CALLS
    assert increment.terminal
    for reason, finish in [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "other"),
        ("SOMETHING_NEW", "other"),
    ]:
        got = GeminiReader().read(event(**candidate([], finishReason=reason)))
        assert not isinstance(got, str)
        assert got.finish == finish


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        ("RESOURCE_EXHAUSTED", "rate_limit", True),
        ("UNAVAILABLE", "overloaded", True),
        ("INTERNAL", "server_error", True),
        ("PERMISSION_DENIED", "auth", False),
        ("NOT_FOUND", "model_not_found", False),
        ("SOMETHING", "provider_error", False),
    ],
)
def test_an_error_record_raises(status: str, code: str, retryable: bool) -> None:
    with pytest.raises(ProviderError) as raised:
        GeminiReader().read(event(error={"code": 400, "message": "no", "status": status}))
    assert (raised.value.code, raised.value.retryable) == (code, retryable)
    assert raised.value.vendor_type == status


def test_a_context_overflow_is_named() -> None:
    text = "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    assert is_context_overflow(text)
    with pytest.raises(ProviderError) as raised:
        read_response({"error": {"code": 400, "message": text, "status": "INVALID_ARGUMENT"}})
    assert raised.value.code == "context_overflow"


def test_error_details() -> None:
    body = '{"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}}'
    assert error_details(body) == ("RESOURCE_EXHAUSTED", "429", "Quota exceeded.")
    assert error_details(f"[{body}]") == ("RESOURCE_EXHAUSTED", "429", "Quota exceeded.")
    assert error_details("Bad Gateway") == (None, None, "Bad Gateway")


@given(st.text(max_size=300))
def test_error_details_never_raises(text: str) -> None:
    _, _, message = error_details(text)
    assert len(message) <= 300


def test_usage_counts_thinking_in_the_completion() -> None:
    usage = {
        "promptTokenCount": 100,
        "candidatesTokenCount": 10,
        "thoughtsTokenCount": 30,
        "cachedContentTokenCount": 60,
        "toolUsePromptTokenCount": 5,
        "totalTokenCount": 145,
    }
    increment = GeminiReader().read(event(usageMetadata=usage))
    assert not isinstance(increment, str)
    assert increment.usage is not None
    assert (increment.usage.prompt, increment.usage.completion, increment.usage.total) == (
        105,
        40,
        145,
    )
    assert (increment.usage.cached, increment.usage.reasoning) == (60, 30)


# --------------------------------------------------------------------------- transcripts

TRANSCRIPTS = [
    "text",
    "thinking_tools",
    "signed_text",
    "call_with_id",
    "safety",
    "prompt_blocked",
    "max_tokens",
]


def replay(chunks: list[bytes]) -> tuple[ProviderResult, list[Delta]]:
    counter = itertools.count()
    assembler = StreamAssembler(split=False, mint_id=lambda: f"minted-{next(counter)}")
    decoder = SSEDecoder()
    reader = GeminiReader()
    deltas: list[Delta] = []
    for piece in [*chunks, None]:
        items = decoder.close() if piece is None else decoder.feed(piece)
        for item in items:
            if isinstance(item, SSEEvent):
                deltas.extend(assembler.add(reader.read(item)))
    deltas.extend(assembler.flush())
    assert assembler.terminal
    return assembler.result(), deltas


def expected_of(name: str) -> ProviderResult:
    data = json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8"))
    return from_json(ProviderResult, data)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = sorted({0, len(data), *points})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_a_transcript_replays_whole_and_byte_by_byte(name: str) -> None:
    data = (FIXTURES / f"{name}.sse").read_bytes()
    assert b"\r\n\r\n" in data  # Gemini frames its events with CRLF
    for chunks in ([data], [data[i : i + 1] for i in range(len(data))]):
        result, deltas = replay(chunks)
        assert result == expected_of(name)
        assert "".join(d.text for d in deltas if d.channel == "content") == result.content
        assert "".join(d.text for d in deltas if d.channel == "thinking") == result.thinking


@given(name=st.sampled_from(TRANSCRIPTS), cuts=st.lists(st.floats(0, 1), max_size=60))
def test_chunk_boundaries_never_change_the_result(name: str, cuts: list[float]) -> None:
    data = (FIXTURES / f"{name}.sse").read_bytes()
    result, _ = replay(cut(data, [int(point * len(data)) for point in cuts]))
    assert result == expected_of(name)


@pytest.mark.parametrize("name", ["text", "thinking_tools", "signed_text", "call_with_id"])
def test_the_same_answer_whole_reads_as_the_stream(name: str) -> None:
    """A generateContent body holding every part of the stream (and its last record's other
    fields) reads as the stream does."""
    records = [
        json.loads(block[len("data: ") :])
        for block in (FIXTURES / f"{name}.sse").read_bytes().decode("utf-8").split("\r\n\r\n")
        if block
    ]
    whole = dict(records[-1])
    parts = [part for record in records for part in record["candidates"][0]["content"]["parts"]]
    whole["candidates"] = [{**records[-1]["candidates"][0], "content": {"parts": parts}}]
    expected = expected_of(name)
    got = read_response(json.dumps(whole))
    minted = {call.id: f"minted-{n}" for n, call in enumerate(got.calls)}
    if any(call.id.startswith("minted") for call in expected.calls):
        got = ProviderResult(
            content=got.content,
            thinking=got.thinking,
            calls=tuple(ToolCall(minted[c.id], c.name, c.arguments) for c in got.calls),
            usage=got.usage,
            finish=got.finish,
            continuation=got.continuation,
            model=got.model,
            response_id=got.response_id,
        )
    assert got == expected


def test_an_error_in_the_stream_raises_after_what_came_before() -> None:
    decoder = SSEDecoder()
    reader = GeminiReader()
    assembler = StreamAssembler(split=False)
    first, second = decoder.feed((FIXTURES / "error.sse").read_bytes())
    assembler.add(reader.read(first))  # type: ignore[arg-type]
    with pytest.raises(ProviderError) as raised:
        reader.read(second)  # type: ignore[arg-type]
    assert raised.value.code == "overloaded"
    assert raised.value.retryable
    assert assembler.partial().content == "Partial"


def test_a_stream_without_a_finish_reason_is_not_terminal() -> None:
    data = (FIXTURES / "text.sse").read_bytes().split(b"\r\n\r\n")
    assembler = StreamAssembler(split=False)
    decoder, reader = SSEDecoder(), GeminiReader()
    for item in decoder.feed(b"\r\n\r\n".join(data[:2]) + b"\r\n\r\n"):
        assembler.add(reader.read(item))  # type: ignore[arg-type]
    assert not assembler.terminal


@pytest.mark.parametrize("name", ["thinking_tools", "signed_text", "call_with_id"])
def test_what_the_reader_keeps_goes_back_as_it_came(name: str) -> None:
    """The continuation of a replayed transcript, sent back, puts each signature on the part
    it came on -- the text split where the signed part was."""
    result = expected_of(name)
    message = Message.assistant(
        result.content, calls=result.calls, continuation=result.continuation
    )
    history = [Message.user("q"), message]
    history += [Message.tool(call.id, call.name, "r") for call in result.calls]
    sent = encode_request(history)["contents"][1]["parts"]
    records = [
        json.loads(block[len("data: ") :])
        for block in (FIXTURES / f"{name}.sse").read_bytes().decode("utf-8").split("\r\n\r\n")
        if block
    ]
    received = [
        part
        for record in records
        for part in record["candidates"][0]["content"]["parts"]
        if not part.get("thought")
    ]
    signed = [part["thoughtSignature"] for part in received if "thoughtSignature" in part]
    assert [part["thoughtSignature"] for part in sent if "thoughtSignature" in part] == signed
    for got, came in zip(
        [p for p in sent if "thoughtSignature" in p],
        [p for p in received if "thoughtSignature" in p],
        strict=True,
    ):
        assert ("functionCall" in got) == ("functionCall" in came)
        if "text" in came:
            assert got["text"].endswith(came["text"])


# --------------------------------------------------------------------------- the text template

texts = st.lists(
    st.sampled_from(["a", " ", '"', "\\", ":", "é", "\n", "{", "}", '"text":', "😀"]),
    max_size=8,
).map("".join)
records = st.one_of(
    texts.map(lambda text: candidate([{"text": text}])),
    st.tuples(texts, st.integers(0, 3)).map(
        lambda pair: {
            **candidate([{"text": pair[0]}]),
            "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4 + pair[1]},
            "modelVersion": "gemini-2.5-flash",
        }
    ),
    texts.map(lambda text: candidate([{"text": text, "thought": True}])),
    st.just(candidate([{"text": ""}], finishReason="STOP")),
    st.just(candidate([{"text": "x", "thoughtSignature": "c2ln"}])),
)


@given(st.lists(records, max_size=30), st.booleans())
def test_the_template_fast_path_reads_every_record_as_the_general_path(
    stream: list[dict[str, Any]], spaced: bool
) -> None:
    """A reader that learns text templates gives, record for record, what a reader that never
    learns one gives -- whatever the text holds (quotes, escapes, colons, non-ASCII) and however
    the usage changes between records."""
    fast, slow = GeminiReader(), GeminiReader()
    slow._learned = 10**9  # never learns a template
    for record in stream:
        data = json.dumps(
            record, separators=(", ", ": ") if spaced else (",", ":"), ensure_ascii=spaced
        )
        assert fast.read(SSEEvent(data=data)) == slow.read(SSEEvent(data=data))


def test_a_template_is_learned_and_used() -> None:
    reader = GeminiReader()
    first = {**candidate([{"text": "a"}]), "usageMetadata": {"promptTokenCount": 3}}
    assert reader.read(SSEEvent(data=json.dumps(first))) != "a"  # the usage is news
    assert reader.read(SSEEvent(data=json.dumps(first))) == "a"  # a plain record: learned
    assert reader._prefix is not None
    second = {**candidate([{"text": 'b"\\:'}]), "usageMetadata": {"promptTokenCount": 3}}
    assert reader.read(SSEEvent(data=json.dumps(second))) == 'b"\\:'
    # a record with a duplicate key never passes for a template record
    duplicate = json.dumps(second)[:-1] + ', "usageMetadata": {"promptTokenCount": 9}}'
    with pytest.raises(ProtocolError, match="duplicate"):
        reader.read(SSEEvent(data=duplicate))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cache", "off"),
        ("cache_breakpoints", ("system",)),
        ("cache_key", "tenant-1"),
        ("cache_retention", "24h"),
    ],
)
def test_cache_settings_gemini_cannot_honour_are_refused(field: str, value: Any) -> None:
    # Gemini caches repeated prefixes by itself: "auto" sends nothing, the rest is refused.
    plain = encode_request([Message.user("hi")], options=ProviderOptions())
    assert encode_request([Message.user("hi")], options=ProviderOptions(cache="auto")) == plain
    with pytest.raises(ConfigError, match=field):
        encode_request([Message.user("hi")], options=ProviderOptions(**{field: value}))
