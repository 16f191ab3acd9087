"""One system message on every wire (issue 23, 003 G19): whatever system messages a message list
holds -- the agent's own prompt first, then any from a run's input or a loaded history, wherever
they stand -- each encoder sends them as its format's one system message, first (OpenAI chat and
Ollama: a ``system`` message; the Responses API: a ``system`` input item; Anthropic: the
top-level ``system`` field), their texts in order joined by a blank line. Never two system roles.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.messages import Message, Role, ToolCall
from protocols.wire import anthropic, ollama, openai_chat, openai_responses
from protocols.wire._common import SYSTEM_SEPARATOR, split_system

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()


def chat_system(body: dict[str, Any]) -> list[tuple[int, str]]:
    return [(i, m["content"]) for i, m in enumerate(body["messages"]) if m["role"] == "system"]


def responses_system(body: dict[str, Any]) -> list[tuple[int, str]]:
    assert "instructions" not in body
    return [
        (i, item["content"])
        for i, item in enumerate(body["input"])
        if item.get("type") == "message" and item.get("role") in ("system", "developer")
    ]


def anthropic_system(body: dict[str, Any]) -> list[tuple[int, str]]:
    assert all(turn["role"] in ("user", "assistant") for turn in body["messages"])
    system = body.get("system")
    if isinstance(system, list):  # marked for the prompt cache: one text block (see
        [block] = system  # test_prompt_cache.py), the text as the string would be
        assert block["type"] == "text"
        assert "cache_control" in block
        system = block["text"]
    return [(0, system)] if "system" in body else []


#: encoder, and where each of its system texts is on the wire as (position, text).
ENCODERS: dict[str, tuple[Callable[..., dict[str, Any]], Callable[..., list[tuple[int, str]]]]] = {
    "openai_chat": (openai_chat.encode_request, chat_system),
    "openai_responses": (openai_responses.encode_request, responses_system),
    "anthropic": (anthropic.encode_request, anthropic_system),
    "ollama": (ollama.encode_request, chat_system),
}


def systems(vendor: str, messages: list[Message]) -> list[tuple[int, str]]:
    encode, find = ENCODERS[vendor]
    return find(encode(messages, model="m"))


HISTORY = [
    Message.system("Be terse."),  # the agent's own prompt, as context.build puts it
    Message.user("Weather in Paris?"),
    Message.system("Answer in French."),  # from a loaded history
    Message.assistant("", calls=[ToolCall("c1", "weather", {"city": "Paris"})]),
    Message.tool("c1", "weather", "18 C"),
    Message.system(""),  # empty: adds nothing
    Message.assistant("Il fait 18 degrés."),
    Message.user("Thanks"),
    Message.system("Never use emoji."),  # from a run's input, after the user message
]
MERGED = "Be terse.\n\nAnswer in French.\n\nNever use emoji."


def test_openai_chat_sends_one_system_message_first() -> None:
    body = openai_chat.encode_request(HISTORY, model="m")
    assert body["messages"][0] == {"role": "system", "content": MERGED}
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


def test_responses_sends_one_system_item_first_and_no_instructions() -> None:
    body = openai_responses.encode_request(HISTORY, model="m")
    assert body["input"][0] == {"type": "message", "role": "system", "content": MERGED}
    assert "instructions" not in body
    kinds = [(item["type"], item.get("role")) for item in body["input"]]
    assert kinds == [
        ("message", "system"),
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "user"),
    ]


def test_anthropic_sends_one_system_field() -> None:
    body = anthropic.encode_request(HISTORY, model="m")
    assert anthropic_system(body) == [(0, MERGED)]
    assert [turn["role"] for turn in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]


def test_ollama_sends_one_system_message_first() -> None:
    body = ollama.encode_request(HISTORY, model="m")
    assert body["messages"][0] == {"role": "system", "content": MERGED}
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


@pytest.mark.parametrize("vendor", ENCODERS)
def test_no_system_message_sends_none(vendor: str) -> None:
    assert systems(vendor, [Message.user("hi"), Message.assistant("hello")]) == []


@pytest.mark.parametrize(
    ("vendor", "expected"),
    [
        ("openai_chat", [(0, "")]),
        ("openai_responses", [(0, "")]),
        ("ollama", [(0, "")]),
        ("anthropic", []),  # an empty system field is refused: none is sent
    ],
)
def test_only_empty_system_messages_send_one_empty_system_message(
    vendor: str, expected: list[tuple[int, str]]
) -> None:
    """An explicit empty system prompt is still a system message where the format has one (it
    replaces a server's default prompt, such as an Ollama Modelfile's SYSTEM)."""
    history = [Message.system(""), Message.user("hi"), Message.system("")]
    assert systems(vendor, history) == expected


def test_split_system_keeps_the_others_in_order() -> None:
    system, others = split_system(HISTORY)
    assert system == MERGED
    assert others == [m for m in HISTORY if m.role is not Role.SYSTEM]
    user = Message.user("x")
    assert split_system([user]) == (None, [user])
    assert split_system([])[0] is None


# --------------------------------------------------------------------------- the property

TEXT = st.text(max_size=8)


@st.composite
def message_lists(draw: st.DrawFn) -> list[Message]:
    """Any well-formed message list: system messages anywhere (empty ones too), user messages
    with and without images, assistant messages with and without calls, their tool results."""
    messages: list[Message] = []
    for turn in range(draw(st.integers(0, 5))):
        for _ in range(draw(st.integers(0, 2))):
            messages.append(Message.system(draw(TEXT)))
        if draw(st.booleans()):
            images = [PNG] if draw(st.booleans()) else []
            messages.append(Message.user(draw(TEXT), images=images))
        if draw(st.booleans()):
            calls = [
                ToolCall(f"call_{turn}_{i}", "add", {"a": i})
                for i in range(draw(st.integers(0, 2)))
            ]
            messages.append(Message.assistant(draw(TEXT), calls=calls))
            for call in calls:
                if draw(st.booleans()):
                    messages.append(Message.system(draw(TEXT)))
                messages.append(Message.tool(call.id, call.name, draw(TEXT)))
    return messages


@given(message_lists())
def test_every_encoder_sends_at_most_one_system_text_holding_them_all_in_order(
    messages: list[Message],
) -> None:
    texts = [m.content for m in messages if m.role is Role.SYSTEM]
    merged = SYSTEM_SEPARATOR.join(text for text in texts if text)
    for vendor in ENCODERS:
        found = systems(vendor, messages)
        assert len(found) <= 1, vendor
        if vendor == "anthropic":
            assert found == ([(0, merged)] if merged else []), vendor
        else:
            assert found == ([(0, merged)] if texts else []), vendor


@given(message_lists())
def test_the_other_messages_keep_their_order(messages: list[Message]) -> None:
    """Removing the system messages changes nothing else of a request."""
    others = [m for m in messages if m.role is not Role.SYSTEM]
    for vendor, (encode, _) in ENCODERS.items():
        with_system = encode(messages, model="m")
        without = encode(others, model="m")
        key = "input" if vendor == "openai_responses" else "messages"
        skip = 0 if vendor == "anthropic" or not any(m.role is Role.SYSTEM for m in messages) else 1
        assert with_system[key][skip:] == without[key], vendor
