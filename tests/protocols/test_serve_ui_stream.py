"""protocols.serve.ui_stream: the AI SDK's UI message stream -- chat requests decoded strictly
(each limit refused naming its field), and run events encoded in the order the ``ai`` package's
client requires (a property over any event sequence). The real client reads the relay's route
in tests/actors/relay/test_relay_ui_stream.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.codec import to_json
from protocols.errors import ProtocolError
from protocols.jobs import ApprovalAnswer
from protocols.live import RunEvent, event_from_json, event_to_json
from protocols.messages import (
    AgentResult,
    FinishReason,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolSuccess,
)
from protocols.serve.ui_stream import (
    DONE,
    HEADERS,
    STATUS,
    UIStreamEncoder,
    decode_chat_request,
    encode_sse,
    resume_path,
    resume_route,
)

# -- decoding ----------------------------------------------------------------------------------


def user(text: str = "hi", id: str = "u1", **extra: Any) -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}], **extra}


def body(*messages: dict[str, Any], **fields: Any) -> bytes:
    data = {"id": "chat_1", "messages": list(messages or [user()]), "trigger": "submit-message"}
    data["messageId"] = None
    return json.dumps({**data, **fields}).encode()


def refusal(data: bytes, **limits: int) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        decode_chat_request(data, **limits)
    assert caught.value.category == "user"
    assert caught.value.code in STATUS
    return caught.value


def tool_part(state: str, call_id: str = "c1", **fields: Any) -> dict[str, Any]:
    return {
        "type": "tool-lookup",
        "toolCallId": call_id,
        "state": state,
        "input": {"q": 1},
        **fields,
    }


def test_a_conversation_decodes_into_our_messages() -> None:
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "think"},
            {"type": "text", "text": "Let me"},
            {"type": "text", "text": " check."},
            tool_part("output-available", output={"hits": 2}),
            {
                "type": "dynamic-tool",
                "toolName": "mcp_x",
                "toolCallId": "c2",
                "state": "output-error",
                "input": None,
                "errorText": "boom",
            },
            {"type": "data-note", "data": {"x": 1}},
            {"type": "source-url", "sourceId": "s", "url": "https://x"},
            {"type": "step-start"},
            {"type": "text", "text": "Done."},
        ],
    }
    image = {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA"}
    system = {"id": "s1", "role": "system", "parts": [{"type": "text", "text": "Be brief."}]}
    first = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Look "}, image]}
    request = decode_chat_request(body(system, first, assistant, user("thanks", "u2"), app=7))
    shown = [(m.role, m.content, m.id) for m in request.messages]
    assert shown == [
        (Role.SYSTEM, "Be brief.", "s1"),
        (Role.USER, "Look ", "u1"),
        (Role.ASSISTANT, "Let me check.", "a1"),
        (Role.TOOL, '{"hits":2}', "a1:c1"),
        (Role.TOOL, "boom", "a1:c2"),
        (Role.ASSISTANT, "Done.", "a1.1"),
        (Role.USER, "thanks", "u2"),
    ]
    assert request.messages[1].images == ("data:image/png;base64,AAAA",)
    turn = request.messages[2]
    assert turn.thinking == "think"
    assert turn.calls == (ToolCall("c1", "lookup", {"q": 1}), ToolCall("c2", "mcp_x", {}))
    assert request.chat_id == "chat_1"
    assert request.trigger == "submit-message"
    assert request.message_id is None
    assert request.continues is None
    assert request.extra == {"app": 7}


def test_streaming_calls_are_dropped_and_denied_ones_fail() -> None:
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            tool_part("input-streaming", "c0"),
            tool_part("output-denied", "c1", approval={"id": "c1", "approved": False}),
            tool_part(
                "output-denied", "c2", approval={"id": "c2", "approved": False, "reason": "no"}
            ),
        ],
    }
    messages = decode_chat_request(body(user(), assistant, user("again", "u2"))).messages
    assert [call.id for call in messages[1].calls] == ["c1", "c2"]
    assert [m.content for m in messages[2:4]] == ["the call was denied", "no"]


def test_open_calls_fail_in_earlier_messages_and_are_refused_in_the_last() -> None:
    assistant = {"id": "a1", "role": "assistant", "parts": [tool_part("input-available")]}
    messages = decode_chat_request(body(user(), assistant, user("moved on", "u2"))).messages
    assert messages[2].role is Role.TOOL
    assert messages[2].content.startswith("no result")
    error = refusal(body(user(), assistant))
    assert "c1" in error.message
    assert "addToolResult" in error.message


def test_a_continuation_carries_results_approvals_and_its_message_id() -> None:
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            tool_part("output-available", "c1", output="sunny"),
            tool_part(
                "approval-responded",
                "c2",
                approval={"id": "c2", "approved": True, "reason": "ok"},
            ),
        ],
    }
    request = decode_chat_request(body(user(), assistant, messageId="a1"))
    assert request.continues == "a1"
    assert request.continued_calls == ("c1", "c2")
    assert request.approvals == (ApprovalAnswer("c2", True, "ok"),)
    assert [m.role for m in request.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert request.messages[2].content == "sunny"
    assert request.message_id == "a1"


def test_tools_in_the_body_become_definitions() -> None:
    tools = [{"name": "lookup", "description": "find", "parameters": {"type": "object"}}]
    assert decode_chat_request(body(tools=tools)).tools[0].name == "lookup"
    assert "tools[0]" in refusal(body(tools=[{"name": "bad name!"}])).message


def alone(role: str, *parts: Any) -> bytes:
    """A request of one message of ``role`` with ``parts``."""
    return body({"id": "m", "role": role, "parts": list(parts)})


PDF = {"type": "file", "mediaType": "application/pdf", "url": "data:x"}
LINKED = {"type": "file", "mediaType": "image/png", "url": "https://x/y.png"}
ANSWERED = tool_part("approval-responded", approval={"id": "c1"})


@pytest.mark.parametrize(
    ("data", "limits", "named"),
    [
        (b"{not json", {}, "invalid JSON"),
        (b"[]", {}, "JSON object"),
        (json.dumps({"messages": []}).encode(), {}, "id"),
        (body(id="a/b"), {}, "id"),
        (body(id="x" * 129), {}, "id"),
        (body(trigger="resume-stream"), {}, "trigger"),
        (body(messageId=3), {}, "messageId"),
        (body(messages=[]), {}, "messages"),
        (body(messages={}), {}, "messages"),
        (body(user(), user(id="u2")), {"max_messages": 1}, "messages"),
        (body(user(extra_field=1), tools=[{"name": "a"}] * 3), {"max_tools": 2}, "tools"),
        (body(), {"max_bytes": 10}, "chat request body"),
        (alone("tool"), {}, "messages[0].role"),
        (body({"id": "", "role": "user", "parts": []}), {}, "messages[0].id"),
        (body({"id": "u", "role": "user", "parts": "x"}), {}, "messages[0].parts"),
        (alone("user", *[{"type": "text", "text": ""}] * 3), {"max_parts": 2}, "parts"),
        (alone("user", {"type": "text", "text": 1}), {}, "parts[0].text"),
        (alone("user", {"text": "x"}), {}, "parts[0].type"),
        (alone("user", {"type": "reasoning", "text": "x"}), {}, "parts[0]"),
        (alone("user", {"type": "wat"}), {}, "'wat'"),
        (alone("user", PDF), {}, "application/pdf"),
        (alone("user", LINKED), {}, "data: URLs"),
        (alone("system", tool_part("output-available")), {}, "system"),
        (alone("assistant", tool_part("output-available", input=[1])), {}, "input"),
        (alone("assistant", tool_part("weird")), {}, "state"),
        (alone("assistant", *[tool_part("output-error")] * 2), {}, "two calls"),
        (alone("assistant", ANSWERED), {}, "approved"),
    ],
)
def test_each_bad_request_is_refused_naming_its_field(
    data: bytes, limits: dict[str, int], named: str
) -> None:
    assert named in refusal(data, **limits).message


def test_limits_are_refused_with_too_large() -> None:
    assert refusal(body(user(), user(id="u2")), max_messages=1).code == "too_large"
    assert refusal(body(), max_bytes=10).code == "too_large"
    assert STATUS["too_large"] == 413


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
STATES = ["input-streaming", "input-available", "approval-requested", "approval-responded"]
STATES += ["output-available", "output-error", "output-denied"]
TEXT_PART = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)})
TOOL_PART = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["tool-a", "dynamic-tool", "tool-"]),
        "toolCallId": st.sampled_from(["c1", "c2", "c3"]),
        "state": st.sampled_from(STATES),
        "toolName": st.just("t"),
    },
    optional={
        "input": st.just({"a": 1}) | JSONISH,
        "output": JSONISH,
        "errorText": JSONISH,
        "preliminary": st.booleans(),
        "approval": st.fixed_dictionaries({"approved": st.booleans(), "reason": JSONISH}),
    },
)
FILE_PART = st.fixed_dictionaries(
    {
        "type": st.just("file"),
        "mediaType": st.sampled_from(["image/png", "text/plain"]),
        "url": st.sampled_from(["data:image/png;base64,AA", "https://x/a.png"]),
    }
)
ASSISTANT_PART = st.one_of(
    TEXT_PART,
    st.fixed_dictionaries({"type": st.just("reasoning"), "text": st.text(max_size=3)}),
    TOOL_PART,
    TOOL_PART,
    st.just({"type": "step-start"}),
    st.fixed_dictionaries({"type": st.sampled_from(["data-x", "source-url"])}),
)


def ui_message(role: str, part: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    ids = st.sampled_from(["m1", "m2"])
    return st.fixed_dictionaries(
        {"id": ids, "role": st.just(role), "parts": st.lists(part, max_size=4)}
    )


ROLES = ["user", "assistant", "system", "tool"]
VALID_MESSAGE = st.one_of(
    ui_message("user", TEXT_PART | FILE_PART),
    ui_message("assistant", ASSISTANT_PART),
    ui_message("assistant", ASSISTANT_PART),
    ui_message("system", TEXT_PART),
)
NOISE_MESSAGE = st.sampled_from(ROLES).flatmap(
    lambda role: ui_message(role, ASSISTANT_PART | FILE_PART | JSONISH)
) | st.dictionaries(st.sampled_from(["id", "role", "parts"]), JSONISH)
MESSAGES = st.lists(VALID_MESSAGE, min_size=1, max_size=4) | st.lists(
    VALID_MESSAGE | NOISE_MESSAGE, min_size=1, max_size=4
)


@settings(max_examples=300, deadline=None)
@given(MESSAGES, JSONISH)
def test_any_request_decodes_or_is_refused(messages: list[Any], extra: Any) -> None:
    data = json.dumps({"id": "c", "messages": messages, "x": extra}).encode()
    try:
        request = decode_chat_request(data)
    except ProtocolError as error:
        refused = error.code
    else:
        refused = None
        assert request.extra == {"x": extra}
        assert set(request.continued_calls) >= {a.call_id for a in request.approvals}
    assert refused is None or refused in STATUS


# -- encoding: the order rules ---------------------------------------------------------------


def events(*items: tuple[str, dict[str, Any]]) -> list[RunEvent]:
    return [RunEvent("run1", seq, kind, 0.0, data) for seq, (kind, data) in enumerate(items, 1)]


def encode(items: list[RunEvent], **options: Any) -> list[dict[str, Any]]:
    encoder = UIStreamEncoder("msg1", **options)
    out = encoder.start()
    for event in items:
        out += encoder.feed(event)
    return out


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [chunk["type"] for chunk in chunks]


CALL = ToolCall("c1", "lookup", {"q": "x"})
AGENT_EVENTS = events(
    ("started", {"agent": "a"}),
    ("turn", {"turn": 1}),
    ("thinking", {"text": "hm"}),
    ("content", {"text": "Let "}),
    ("content", {"text": "me"}),
    ("tool_call", {"call": CALL}),
    ("usage", {"usage": None, "estimated": False, "finish": "tool_calls"}),
    ("progress", {"call_id": "c1", "text": "50%"}),
    ("tool_result", {"result": ToolSuccess("c1", "lookup", {"n": 1})}),
    ("turn", {"turn": 2}),
    ("content", {"text": "Done."}),
    ("finished", {"result": AgentResult(content="Done.", finish=FinishReason.STOP)}),
)


def test_an_agent_run_gives_the_chunks_in_order() -> None:
    chunks = encode(AGENT_EVENTS)
    assert chunks == [
        {"type": "start", "messageId": "msg1"},
        {"type": "start-step"},
        {"type": "reasoning-start", "id": "reasoning-1"},
        {"type": "reasoning-delta", "id": "reasoning-1", "delta": "hm"},
        {"type": "reasoning-end", "id": "reasoning-1"},
        {"type": "text-start", "id": "text-2"},
        {"type": "text-delta", "id": "text-2", "delta": "Let "},
        {"type": "text-delta", "id": "text-2", "delta": "me"},
        {"type": "text-end", "id": "text-2"},
        {
            "type": "tool-input-start",
            "toolCallId": "c1",
            "toolName": "lookup",
            "providerExecuted": True,
        },
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"q":"x"}'},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "lookup",
            "providerExecuted": True,
            "input": {"q": "x"},
        },
        {"type": "data-progress", "data": {"callId": "c1", "text": "50%"}, "transient": True},
        {
            "type": "tool-output-available",
            "toolCallId": "c1",
            "output": {"n": 1},
            "providerExecuted": True,
        },
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "text-3"},
        {"type": "text-delta", "id": "text-3", "delta": "Done."},
        {"type": "text-end", "id": "text-3"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]
    # A replay (resume) of the same events gives the same chunks; so do the events as JSON.
    assert encode(AGENT_EVENTS) == chunks
    assert encode([event_from_json(event_to_json(event)) for event in AGENT_EVENTS]) == chunks


def test_a_relay_run_leaves_its_calls_to_the_client() -> None:
    response = ProviderResult(content="ok", calls=(CALL,))
    items = events(
        ("content", {"text": "ok"}),
        ("tool_call", {"call": CALL}),
        ("usage", {"usage": None, "estimated": False, "finish": "tool_calls"}),
        ("finished", {"response": to_json(response)}),
    )
    chunks = encode(items, executes_tools=False)
    assert types(chunks)[-5:] == [
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "finish-step",
        "finish",
    ]
    assert not any("providerExecuted" in chunk for chunk in chunks)
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}


@pytest.mark.parametrize(
    ("terminal", "last"),
    [
        (
            ("failed", {"error": {"type": "X", "code": None, "message": "it broke"}}),
            {"type": "error", "errorText": "it broke"},
        ),
        (("cancelled", {"result": None}), {"type": "abort", "reason": "cancelled"}),
        (
            ("finished", {"result": AgentResult(stop=StopReason.MAX_TOKENS)}),
            {"type": "finish", "finishReason": "length"},
        ),
        (
            ("finished", {"result": AgentResult(stop=StopReason.BUDGET)}),
            {"type": "finish", "finishReason": "other"},
        ),
        (
            ("finished", {"response": ProviderResult(finish=FinishReason.CONTENT_FILTER)}),
            {"type": "finish", "finishReason": "content-filter"},
        ),
        (
            ("gap", {"first": 2}),
            {
                "type": "error",
                "errorText": "events 2 to 2 of run run1 are "
                "gone (the stream fell behind); reload the chat",
            },
        ),
    ],
)
def test_each_end_closes_what_is_open_then_ends(
    terminal: tuple[str, dict[str, Any]], last: dict[str, Any]
) -> None:
    encoder = UIStreamEncoder("m")
    chunks = encoder.feed(events(("content", {"text": "x"}))[0])
    chunks += encoder.feed(RunEvent("run1", 2, terminal[0], 0.0, terminal[1]))
    assert types(chunks)[-3:-1] == ["text-end", "finish-step"]
    assert chunks[-1] == last
    assert encoder.done
    assert encoder.feed(RunEvent("run1", 3, "content", 0.0, {"text": "late"})) == []
    assert encoder.fail("again") == []


def test_awaiting_input_asks_the_approvals_then_finishes() -> None:
    asked = [{"call_id": "c1", "tool": "lookup", "reason": ""}]
    chunks = encode(
        events(
            ("tool_call", {"call": CALL}),
            ("approval_requested", {"call_id": "c1", "tool": "lookup", "reason": None}),
            ("awaiting_input", {"calls": asked}),
        )
    )
    approval = {"type": "tool-approval-request", "approvalId": "c1", "toolCallId": "c1"}
    assert chunks[-3:] == [
        approval,
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "tool-calls"},
    ]
    # A relay run asks with the call itself: it is shown first.
    relayed = encode(
        events(
            (
                "approval_requested",
                {"call_id": "c1", "tool": "lookup", "reason": None, "call": to_json(CALL)},
            )
        )
    )
    assert types(relayed)[2:6] == [
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-approval-request",
    ]
    # An approval or result of a call the client never saw is left out (it would fail its stream).
    unknown = events(
        ("approval_requested", {"call_id": "zz", "tool": "t", "reason": None}),
        ("tool_result", {"result": ToolFailure("zz", "t", "no")}),
    )
    assert encode(unknown) == [{"type": "start", "messageId": "msg1"}]
    shown = encode(unknown, prior_calls=["zz"])
    assert types(shown) == ["start", "tool-approval-request", "tool-output-error"]
    assert shown[2]["errorText"] == "no"


def test_subagents_and_handoffs_are_data_parts() -> None:
    chunks = encode(
        events(
            ("subagent_started", {"call_id": "c9", "agent": "helper", "run_id": "sub"}),
            ("subagent_finished", {"call_id": "c9", "run_id": "sub", "status": "finished"}),
            ("handoff", {"call_id": "c8", "agent": "other"}),
        )
    )
    assert chunks[1:] == [
        {
            "type": "data-subagent",
            "id": "c9",
            "data": {"agent": "helper", "status": "running", "runId": "sub", "callId": "c9"},
        },
        {
            "type": "data-subagent",
            "id": "c9",
            "data": {"agent": "helper", "status": "finished", "runId": "sub", "callId": "c9"},
        },
        {"type": "data-handoff", "data": {"callId": "c8", "agent": "other"}},
    ]


def test_a_rewind_past_what_was_shown_ends_the_stream() -> None:
    standing = encode(events(("content", {"text": "a"}), ("rewind", {"to": 1})))
    assert types(standing) == ["start", "start-step", "text-start", "text-delta"]
    void = encode(
        events(("content", {"text": "a"}), ("guard", {"reason": "r"}), ("rewind", {"to": 0}))
    )
    assert void[-1]["type"] == "error"
    assert "rewound to event 0" in void[-1]["errorText"]


def test_an_answer_never_streamed_is_shown_whole_at_the_end() -> None:
    chunks = encode(events(("finished", {"result": AgentResult(content="whole")})))
    assert types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert chunks[3]["delta"] == "whole"


def test_sse_framing_headers_and_paths() -> None:
    assert encode_sse([{"type": "text-delta", "id": "t", "delta": "é\n"}]) == (
        'data: {"type":"text-delta","id":"t","delta":"é\\n"}\n\n'.encode()
    )
    assert DONE == b"data: [DONE]\n\n"
    assert HEADERS["x-vercel-ai-ui-message-stream"] == "v1"
    assert HEADERS["content-type"] == "text/event-stream"
    assert resume_path("http://h/v1/chat/agent", "abc") == "http://h/v1/chat/agent/abc/stream"
    assert resume_route("/v1/chat/abc/stream") == (None, "abc")
    assert resume_route("/v1/chat/agent/abc/stream") == ("agent", "abc")
    for path in (
        "/v1/chat/stream",
        "/v1/chat/a/b/c/stream",
        "/v1/chat//x/stream",
        "/v1/chat/a%2F/stream",
        "/v1/jobs/x/stream",
    ):
        assert resume_route(path) is None
    encoder = UIStreamEncoder("m")
    assert encoder.fail("gone") == [
        {"type": "start", "messageId": "m"},
        {"type": "error", "errorText": "gone"},
    ]


# -- the property: any events give a well-formed stream ---------------------------------------

IDS = st.sampled_from(["c1", "c2", "c3"])
TEXT = st.text(max_size=4)
ENDS = {"finish", "abort", "error"}


def call(call_id: str) -> ToolCall:
    return ToolCall(call_id, "tool_" + call_id, {"x": call_id})


NONTERMINAL = st.one_of(
    st.tuples(st.sampled_from(["content", "thinking"]), st.fixed_dictionaries({"text": TEXT})),
    st.tuples(st.just("tool_call"), st.builds(lambda i: {"call": call(i)}, IDS)),
    st.tuples(
        st.just("tool_result"),
        st.builds(
            lambda i, ok: {"result": ToolSuccess(i, "t", 1) if ok else ToolFailure(i, "t", "e")},
            IDS,
            st.booleans(),
        ),
    ),
    st.tuples(
        st.just("approval_requested"),
        st.builds(
            lambda i, with_call: (
                {"call_id": i, "tool": "t", "reason": None}
                | ({"call": to_json(call(i))} if with_call else {})
            ),
            IDS,
            st.booleans(),
        ),
    ),
    st.tuples(st.just("progress"), st.fixed_dictionaries({"call_id": IDS, "text": TEXT})),
    st.tuples(
        st.sampled_from(["subagent_started", "subagent_finished"]),
        st.fixed_dictionaries(
            {
                "call_id": st.none() | IDS,
                "agent": st.just("h"),
                "run_id": st.just("r"),
                "status": st.just("finished"),
            }
        ),
    ),
    st.tuples(st.just("handoff"), st.fixed_dictionaries({"call_id": IDS, "agent": st.just("b")})),
    st.tuples(st.just("turn"), st.fixed_dictionaries({"turn": st.integers(1, 9)})),
    st.tuples(st.just("usage"), st.just({"usage": None, "estimated": False, "finish": None})),
    st.tuples(st.just("rewind"), st.fixed_dictionaries({"to": st.integers(0, 30)})),
    st.tuples(st.just("gap"), st.just({"first": 1})),
)
TERMINAL = st.one_of(
    st.tuples(
        st.just("finished"),
        st.builds(
            lambda c, s: {"result": AgentResult(content=c, stop=s)},
            TEXT,
            st.sampled_from(StopReason),
        ),
    ),
    st.tuples(
        st.just("finished"),
        st.builds(
            lambda c, f: {"response": to_json(ProviderResult(content=c, finish=f))},
            TEXT,
            st.sampled_from(FinishReason),
        ),
    ),
    st.tuples(st.just("cancelled"), st.just({"result": None})),
    st.tuples(st.just("failed"), st.just({"error": {"type": "E", "code": None, "message": "m"}})),
    st.tuples(
        st.just("awaiting_input"),
        st.builds(lambda i: {"calls": [{"call_id": i, "tool": "t", "reason": ""}]}, IDS),
    ),
)


def check_well_formed(chunks: list[dict[str, Any]], prior: frozenset[str]) -> None:
    """The rules the package's client holds a stream to (and ours on top: one end, balanced)."""
    assert chunks[0] == {"type": "start", "messageId": "m"}
    assert [c["type"] in ENDS for c in chunks].count(True) == 1
    assert chunks[-1]["type"] in ENDS
    open_part: tuple[str, str] | None = None  # ("text" | "reasoning", id)
    step = False
    ids: set[str] = set()
    calls: set[str] = set()
    pending: list[str] = []  # the tool-input chunks a tool-input-start owes
    for chunk in chunks[1:]:
        kind = chunk["type"]
        if pending:
            assert kind == pending.pop(0)
            continue
        if open_part is not None:
            assert kind in (f"{open_part[0]}-delta", f"{open_part[0]}-end")
            assert chunk["id"] == open_part[1]
            if kind.endswith("-end"):
                open_part = None
            else:
                assert chunk["delta"]
            continue
        if kind in ("text-start", "reasoning-start"):
            assert step
            assert chunk["id"] not in ids
            ids.add(chunk["id"])
            open_part = (kind.split("-")[0], chunk["id"])
        elif kind == "tool-input-start":
            assert step
            assert chunk["toolCallId"] not in calls
            calls.add(chunk["toolCallId"])
            pending = ["tool-input-delta", "tool-input-available"]
        elif kind in ("tool-output-available", "tool-output-error", "tool-approval-request"):
            assert chunk["toolCallId"] in calls | prior
        elif kind == "start-step":
            assert not step
            step = True
        elif kind == "finish-step":
            assert step
            step = False
        elif kind == "finish":
            assert chunk.get("finishReason") in {
                "stop",
                "length",
                "content-filter",
                "tool-calls",
                "other",
            }
        elif kind == "error":
            assert isinstance(chunk["errorText"], str)
        else:
            assert kind == "abort" or kind.startswith("data-"), kind
    assert open_part is None
    assert not step
    assert not pending
    lines = encode_sse(chunks).decode().split("\n\n")
    assert [json.loads(line.removeprefix("data: ")) for line in lines[:-1]] == chunks


@settings(max_examples=300, deadline=None)
@given(
    st.lists(NONTERMINAL, max_size=25),
    TERMINAL,
    st.frozensets(IDS, max_size=2),
    st.booleans(),
)
def test_any_run_gives_a_well_formed_stream(
    middle: list[tuple[str, dict[str, Any]]],
    terminal: tuple[str, dict[str, Any]],
    prior: frozenset[str],
    executes_tools: bool,
) -> None:
    items = [
        RunEvent(
            "r", seq, kind, 0.0, {"to": min(data["to"], seq - 1)} if kind == "rewind" else data
        )
        for seq, (kind, data) in enumerate([*middle, terminal], 1)
    ]
    encoder = UIStreamEncoder("m", executes_tools=executes_tools, prior_calls=prior)
    chunks = [chunk for event in items for chunk in encoder.feed(event)]
    assert encoder.done
    check_well_formed(chunks, prior)
    again = UIStreamEncoder("m", executes_tools=executes_tools, prior_calls=prior)
    assert [chunk for event in items for chunk in again.feed(event)] == chunks
