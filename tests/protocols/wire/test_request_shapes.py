"""The request body each adapter sends for every message shape, side by side -- and the rule
that no adapter ever sends ``"content": null`` (llama.cpp-based servers answer 500 to it on an
assistant message with tool calls, while ``""`` is accepted everywhere)."""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from protocols.messages import Message, ProviderOptions, ToolCall
from protocols.wire import anthropic, ollama, openai_chat

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
GIF = "data:image/gif;base64," + base64.b64encode(b"GIF89a" + b"\x00" * 10).decode()
CALL = ToolCall("call_1", "add", {"a": 19, "b": 23})


def messages_of(vendor: str, history: list[Message]) -> Any:
    module = {"openai": openai_chat, "anthropic": anthropic, "ollama": ollama}[vendor]
    # (Anthropic's prompt-cache marks, which its default adds, are shown in
    # test_prompt_cache.py: here they are left out, as cache="off" does.)
    options = ProviderOptions(cache="off") if vendor == "anthropic" else None
    body = module.encode_request(history, model="m", stream=False, options=options)
    return body["messages"]


def test_an_assistant_message_with_calls_and_no_text() -> None:
    history = [
        Message.user("q"),
        Message.assistant(calls=[CALL]),
        Message.tool("call_1", "add", "42"),
    ]
    assert messages_of("openai", history)[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a":19,"b":23}'},
            }
        ],
    }
    assert messages_of("anthropic", history)[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 19, "b": 23}}
        ],
    }
    assert messages_of("ollama", history)[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "add", "arguments": {"a": 19, "b": 23}}}],
    }


def test_an_assistant_message_with_text_and_calls() -> None:
    message = Message.assistant("Let me add.", calls=[CALL])
    history = [Message.user("q"), message, Message.tool("call_1", "add", "42")]
    assert messages_of("openai", history)[1]["content"] == "Let me add."
    assert messages_of("anthropic", history)[1]["content"] == [
        {"type": "text", "text": "Let me add."},
        {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 19, "b": 23}},
    ]
    assert messages_of("ollama", history)[1]["content"] == "Let me add."


def test_the_other_message_shapes() -> None:
    history = [
        Message.system("Be brief."),
        Message.user("Look", images=[PNG]),
        Message.assistant("Seen."),
        Message.user(""),
        Message.assistant(""),
    ]
    assert messages_of("openai", history) == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        },
        {"role": "assistant", "content": "Seen."},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
    ]
    image = {"type": "base64", "media_type": "image/png", "data": PNG}
    # Anthropic: the system text goes to "system", and empty turns are left out (it refuses them).
    assert messages_of("anthropic", history) == [
        {
            "role": "user",
            "content": [{"type": "image", "source": image}, {"type": "text", "text": "Look"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Seen."}]},
    ]
    assert messages_of("ollama", history) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Look", "images": [PNG]},
        {"role": "assistant", "content": "Seen."},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
    ]


def test_a_tool_result() -> None:
    history = [
        Message.user("q"),
        Message.assistant(calls=[CALL]),
        Message.tool("call_1", "add", "42"),
    ]
    assert messages_of("openai", history)[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "42",
    }
    assert messages_of("anthropic", history)[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "42"}],
    }
    assert messages_of("ollama", history)[2] == {
        "role": "tool",
        "content": "42",
        "tool_name": "add",
    }


def test_a_tool_result_with_images() -> None:
    history = [
        Message.user("q"),
        Message.assistant(calls=[CALL]),
        Message.tool("call_1", "add", "42", images=[PNG, GIF]),
    ]
    # Tool messages take text only: the images follow in a user message naming the call.
    assert messages_of("openai", history)[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by tool add (call call_1):"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": GIF}},
            ],
        },
    ]
    assert messages_of("anthropic", history)[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "content": [
                    {"type": "text", "text": "42"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/gif",
                            "data": GIF.split(",", 1)[1],
                        },
                    },
                ],
            }
        ],
    }
    assert messages_of("ollama", history)[2] == {
        "role": "tool",
        "content": "42",
        "tool_name": "add",
        "images": [PNG, GIF.split(",", 1)[1]],
    }


def test_a_tool_result_of_images_alone() -> None:
    history = [
        Message.user("q"),
        Message.assistant(calls=[CALL]),
        Message.tool("call_1", "add", "", images=[PNG]),
    ]
    assert messages_of("anthropic", history)[2]["content"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    ]
    assert messages_of("openai", history)[2]["content"] == ""
    assert messages_of("openai", history)[3]["role"] == "user"


def test_openai_chat_sends_a_runs_tool_images_in_one_user_message_after_it() -> None:
    first, second, third = (ToolCall(f"c{n}", f"tool{n}", {}) for n in (1, 2, 3))
    history = [
        Message.user("q"),
        Message.assistant(calls=[first, second, third]),
        Message.tool("c1", "tool1", "one", images=[PNG]),
        Message.tool("c2", "tool2", "two"),
        Message.tool("c3", "tool3", "three", images=[GIF, PNG]),
        Message.assistant(calls=[ToolCall("c4", "tool4", {})]),
        Message.tool("c4", "tool4", "four"),
        Message.user("and?"),
    ]
    sent = messages_of("openai", history)
    assert [message["role"] for message in sent] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",  # the images of the first run, after all of its tool messages
        "assistant",
        "tool",  # a run without images: no extra message
        "user",
    ]
    assert sent[5]["content"] == [
        {"type": "text", "text": "Images returned by tool tool1 (call c1):"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": "Images returned by tool tool3 (call c3):"},
        {"type": "image_url", "image_url": {"url": GIF}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    assert sent[-1] == {"role": "user", "content": "and?"}
    # A run that ends the history is followed by its images too.
    ending = messages_of("openai", history[:5])
    assert [message["role"] for message in ending][-2:] == ["tool", "user"]
    assert ending[-1] == sent[5]


def _nulls(value: Any, path: str = "$") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _nulls(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [
            found for index, item in enumerate(value) for found in _nulls(item, f"{path}[{index}]")
        ]
    return []


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    text = st.text(max_size=5)
    history: list[Message] = []
    for turn in range(draw(st.integers(1, 4))):
        history.append(
            Message.user(draw(text), images=[PNG] if draw(st.booleans()) else [])
            if draw(st.booleans())
            else Message.system(draw(text))
        )
        calls = [
            ToolCall(f"call_{turn}_{index}", "add", {"a": index})
            for index in range(draw(st.integers(0, 2)))
        ]
        history.append(Message.assistant(draw(text), calls=calls))
        history.extend(
            Message.tool(
                call.id, call.name, draw(text), images=[PNG] if draw(st.booleans()) else []
            )
            for call in calls
        )
    return history


@given(histories())
def test_no_adapter_ever_sends_a_null(history: list[Message]) -> None:
    for vendor in ("openai", "anthropic", "ollama"):
        assert _nulls(messages_of(vendor, history)) == [], vendor
