"""AG-UI, sans-IO (protocols.serve.agui): a RunAgentInput read into validated values, a run's
events written as AG-UI events, and those events checked -- here by the protocol's rules, and
(when Node and tests/e2e/node's packages are there) by @ag-ui/core's own schema and
@ag-ui/client's own sequence verifier."""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Iterable, Sequence
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from node_clients import NODE_DIR, node_clients

from protocols.codec import to_json
from protocols.errors import Category, ProtocolError, SizeLimitError
from protocols.live import RunEvent
from protocols.messages import (
    AgentResult,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    Usage,
)
from protocols.serve.agui import (
    CONTENT_TYPE,
    AguiEncoder,
    AguiResume,
    decode_run_input,
    encode_sse,
)

RUN = "run-1"


def body(**fields: Any) -> bytes:
    """A RunAgentInput as the reference client sends it (its defaults), with ``fields``."""
    data: dict[str, Any] = {
        "threadId": "thread-1",
        "runId": "agui-run-1",
        "protocolVersion": "1.0",
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "state": {},
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
    }
    data.update(fields)
    return json.dumps(data).encode()


def refused(raw: bytes, **limits: int) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        decode_run_input(raw, **limits)
    assert caught.value.category is Category.USER
    return caught.value


ASSISTANT_CALL = {
    "id": "a1",
    "role": "assistant",
    "content": "let me look",
    "toolCalls": [
        {
            "id": "call-1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


# -- decoding ---------------------------------------------------------------------------------


def test_a_full_request_becomes_messages_tools_and_the_rest() -> None:
    messages = [
        {"id": "d1", "role": "developer", "content": "be brief"},
        {"id": "s1", "role": "system", "content": "you help"},
        {
            "id": "u1",
            "role": "user",
            "content": [
                {"type": "text", "text": "what is"},
                {
                    "type": "image",
                    "source": {"type": "data", "value": "QUJD", "mimeType": "image/png"},
                },
                {"type": "text", "text": "this?"},
            ],
        },
        {"id": "r1", "role": "reasoning", "content": "they ask for the weather"},
        ASSISTANT_CALL,
        {"id": "t1", "role": "tool", "toolCallId": "call-1", "content": "21C", "extra": 1},
        {"id": "act", "role": "activity", "activityType": "progress", "content": {}},
        {"id": "a2", "role": "assistant"},
    ]
    got = decode_run_input(
        body(
            messages=messages,
            tools=[WEATHER],
            context=[{"description": "city", "value": "Paris"}],
            state={"step": 2},
            forwardedProps={"x": [1]},
            parentRunId="agui-run-0",
            unknownField=True,
        )
    )
    assert (got.thread_id, got.run_id, got.parent_run_id) == (
        "thread-1",
        "agui-run-1",
        "agui-run-0",
    )
    assert [m.role for m in got.messages] == [
        Role.SYSTEM,
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    user, assistant, tool = got.messages[2], got.messages[3], got.messages[4]
    assert (user.content, user.images, user.id) == (
        "what is\nthis?",
        ("data:image/png;base64,QUJD",),
        "u1",
    )
    assert assistant.calls == (ToolCall("call-1", "get_weather", {"city": "Paris"}),)
    assert assistant.thinking == "they ask for the weather"
    assert (tool.tool_call_id, tool.name, tool.content) == ("call-1", "get_weather", "21C")
    assert got.messages[5].thinking == ""
    assert [t.name for t in got.tools] == ["get_weather"]
    assert got.tools[0].parameters["properties"] == {"city": {"type": "string"}}
    assert [(c.description, c.value) for c in got.context] == [("city", "Paris")]
    assert (got.state, got.forwarded_props, got.resume) == ({"step": 2}, {"x": [1]}, ())


def test_nulls_for_optional_fields_are_absence_and_a_tool_error_is_its_text() -> None:
    messages = [
        {"id": "u", "role": "user", "content": "go"},
        {**ASSISTANT_CALL, "content": None},
        {"id": "t", "role": "tool", "toolCallId": "call-1", "content": "", "error": "no network"},
    ]
    got = decode_run_input(
        body(messages=messages, tools=None, context=None, state=None, parentRunId=None)
    )
    assert got.messages[2].content == "no network"
    inline = {"type": "image", "source": {"type": "url", "value": "data:image/gif;base64,R0"}}
    pictured = decode_run_input(body(messages=[{"id": "u", "role": "user", "content": [inline]}]))
    assert pictured.messages[0].images == ("data:image/gif;base64,R0",)
    assert (got.tools, got.context, got.state, got.parent_run_id) == ((), (), None, None)
    # A tool without parameters takes no arguments.
    (tool,) = decode_run_input(body(tools=[{"name": "now", "description": "the time"}])).tools
    assert tool.parameters == {"type": "object", "properties": {}}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    """``messages``: one user message of content ``parts``."""
    return {"messages": [{"id": "u", "role": "user", "content": list(parts)}]}


def image(**source: Any) -> dict[str, Any]:
    return {"type": "image", "source": source}


def arguments(text: str) -> dict[str, Any]:
    """``messages``: one assistant message calling a tool with ``text`` as its arguments."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": text}}
    return {"messages": [{**ASSISTANT_CALL, "toolCalls": [call]}]}


def tool(call_id: str, content: str = "1") -> dict[str, Any]:
    return {"id": f"t{content}", "role": "tool", "toolCallId": call_id, "content": content}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"threadId": ""}, "threadId"),
        ({"runId": None}, "runId is required"),
        ({"runId": 7}, "runId must be a string"),
        ({"messages": "hi"}, "messages must be an array"),
        ({"messages": [1]}, "messages[0] must be a JSON object"),
        ({"messages": [{"id": "x", "role": "wizard", "content": "?"}]}, "'wizard' is not one of"),
        ({"messages": [{"id": "x", "content": "?"}]}, "role missing"),
        ({"messages": [{"role": "user", "content": "?"}]}, "messages[0].id is required"),
        ({"messages": [{"id": "x", "role": "system", "content": []}]}, "content must be a string"),
        ({"messages": [tool("nope")]}, "messages[0] answers no tool call"),
        ({"messages": [ASSISTANT_CALL, tool("call-1"), tool("call-1", "2")]}, "a second time"),
        ({"messages": [ASSISTANT_CALL, ASSISTANT_CALL]}, "is used twice"),
        (
            {"messages": [{**ASSISTANT_CALL, "toolCalls": [{"id": "c", "function": "f"}]}]},
            "toolCalls[0] must be an object",
        ),
        (arguments("{"), "toolCalls[0].function.arguments is not JSON"),
        (arguments("[1]"), "arguments must be a JSON object"),
        (user({"type": "audio", "source": {}}), "audio content is not supported"),
        (user({"type": "sticker"}), "must be a text or image part"),
        (user({"type": "text", "text": 1}), "content[0].text must be a string"),
        (user(image(type="url", value="https://x/y.png")), "an image by url is not supported"),
        (user(image(type="file", value="file-1")), "an image by file is not supported"),
        (user(image(type="data", value="QQ==", mimeType="text/plain")), "image/* mimeType"),
        (user({"type": "image"}), ".source must be"),
        (
            {"tools": [{"name": "f", "parameters": {"type": "string"}}]},
            'ToolDefinition.parameters for \'f\' must have "type": "object"',
        ),
        ({"tools": [{"name": "f", "parameters": "x"}]}, "parameters of 'f' must be a JSON Schema"),
        (
            {"tools": [{"name": "f", "parameters": {"type": "object", "properties": 5}}]},
            "tools[0]: ToolDefinition.parameters for 'f' is not a valid JSON Schema",
        ),
        ({"tools": [{"name": "bad name!", "description": ""}]}, "tools[0]: ToolDefinition.name"),
        ({"tools": [{"description": "nameless"}]}, "tools[0].name is required"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1]: two tools are named 'get_weather'"),
        ({"context": [{"description": "d"}]}, "context[0].value is required"),
        ({"resume": [{"interruptId": "i", "status": "maybe"}]}, "resume[0].status"),
        ({"resume": [{"interruptId": "i", "status": "cancelled"}] * 2}, "'i' is answered twice"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(fields: dict[str, Any], says: str) -> None:
    error = refused(body(**fields))
    assert error.code == "invalid"
    assert says in error.message


def test_each_limit_is_refused() -> None:
    many = [{"id": f"m{i}", "role": "user", "content": "x"} for i in range(11)]
    assert (
        "messages has 11 items; at most 10" in refused(body(messages=many), max_messages=10).message
    )
    tools = [{**WEATHER, "name": f"t{i}"} for i in range(5000)]
    assert (
        "tools has 5000 items; at most 128" in refused(body(tools=tools), max_bytes=10**8).message
    )
    context = [{"description": "d", "value": "v"}] * 3
    assert "context has 3 items" in refused(body(context=context), max_context=2).message
    with pytest.raises(SizeLimitError) as caught:
        decode_run_input(body(), max_bytes=50)
    assert (caught.value.code, caught.value.category) == ("too_large", Category.USER)


@pytest.mark.parametrize("raw", [b"{", b'{"a": NaN}', b"\xff", b'{"a": 1, "a": 2}'])
def test_bad_json_is_refused(raw: bytes) -> None:
    assert refused(raw).code == "json"


@pytest.mark.parametrize("raw", [b"[]", b'"x"', b"null"])
def test_a_request_must_be_an_object(raw: bytes) -> None:
    assert "must be a JSON object" in refused(raw).message


def test_resume_entries_are_approval_answers() -> None:
    resume = [
        {"interruptId": "c1", "status": "resolved", "payload": {"approved": True}},
        {"interruptId": "c2", "status": "resolved", "payload": {"approved": False, "reason": "no"}},
        {"interruptId": "c3", "status": "resolved", "payload": True, "metadata": {"k": 1}},
        {"interruptId": "c4", "status": "cancelled"},
    ]
    got = decode_run_input(body(resume=resume))
    assert got.resume[3] == AguiResume("c4", "cancelled")
    answers = [(a.call_id, a.allow, a.reason) for a in got.approvals()]
    assert answers == [
        ("c1", True, ""),
        ("c2", False, "no"),
        ("c3", True, ""),
        ("c4", False, "cancelled by the user"),
    ]
    for payload, says in [
        ({"ok": 1}, '"approved"'),
        (None, '"approved"'),
        ({"approved": True, "reason": 5}, "reason"),
    ]:
        entry = {"interruptId": "c", "status": "resolved", "payload": payload}
        with pytest.raises(ProtocolError, match=says):
            decode_run_input(body(resume=[entry])).approvals()


# -- encoding ---------------------------------------------------------------------------------


class Script:
    """Run events of one run, numbered as a log numbers them."""

    def __init__(self, run_id: str = RUN) -> None:
        self.run_id = run_id
        self.events: list[RunEvent] = []

    def __call__(self, kind: str, run: str | None = None, **data: Any) -> Script:
        self.events.append(RunEvent(run or self.run_id, len(self.events) + 1, kind, 0.0, data))
        return self


def encode(events: Iterable[RunEvent], encoder: AguiEncoder | None = None) -> list[dict[str, Any]]:
    encoder = encoder or AguiEncoder("thread-1", "agui-run-1")
    out = encoder.start()
    for event in events:
        out += encoder.feed(event)
    return out


def types(events: Sequence[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def test_a_streamed_answer_then_its_tool_calls() -> None:
    call = ToolCall("call-1", "get_weather", {"city": "Paris"})
    script = Script()("started", agent="helper")("turn", turn=1)
    script("content", text="Let ")("content", text="")("content", text="me look.")
    script("tool_call", call=call)("usage", usage=None, estimated=False, finish="tool_calls")
    script("finished", response=ProviderResult(content="Let me look.", calls=(call,)))
    out = encode(script.events)
    assert types(out) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    started = out[0]
    assert started == {
        "type": "RUN_STARTED",
        "threadId": "thread-1",
        "runId": "agui-run-1",
        "protocolVersion": "1.0",
    }
    message = out[1]["messageId"]
    assert out[1] == {
        "type": "TEXT_MESSAGE_START",
        "messageId": message,
        "role": "assistant",
        "name": "helper",
    }
    assert [e["delta"] for e in out[2:4]] == ["Let ", "me look."]
    assert out[5] == {
        "type": "TOOL_CALL_START",
        "toolCallId": "call-1",
        "toolCallName": "get_weather",
        "parentMessageId": message,
    }
    assert json.loads(out[6]["delta"]) == {"city": "Paris"}
    assert out[8]["outcome"] == {"type": "success", "pendingToolCallIds": ["call-1"]}
    assert out[8]["result"] == {"content": "Let me look.", "finish": "tool_calls"}
    assert "usage" not in out[8]


def test_thinking_is_reasoning_ended_before_the_answer() -> None:
    script = Script()("thinking", text="hm")("thinking", text="m")("content", text="A")
    script("thinking", text="again")
    script("finished", result=AgentResult(content="A", usage=Usage(10, 5, cached=4, reasoning=2)))
    out = encode(script.events)
    assert types(out) == [
        "RUN_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "RUN_FINISHED",
    ]
    assert out[2]["role"] == "reasoning"
    assert out[1]["messageId"] != out[11]["messageId"]
    assert out[-1]["usage"] == [
        {
            "inputTokens": 10,
            "outputTokens": 5,
            "totalTokens": 15,
            "reasoningTokens": 2,
            "cachedInputTokens": 4,
        }
    ]
    assert out[-1]["result"] == {"content": "A", "stop": "complete"}


def test_an_agent_run_shows_each_turn_and_its_results() -> None:
    call = ToolCall("c1", "lookup", {})
    script = Script()("turn", turn=1)("tool_call", call=call)
    script("tool_result", result=ToolSuccess("c1", "lookup", {"hits": 2}))
    script("turn", turn=2)("content", text="two")("turn", turn=3)("content", text="more")
    script("tool_result", result=to_json(ToolFailure("c9", "lookup", "it broke")))
    script("tool_call", call=to_json(ToolCall("c10", "lookup", {"a": 1})))
    script("finished", result=AgentResult(content="more", output={"n": 2}, usage=None))
    out = encode(script.events)
    assert types(out)[1:7] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
    ]
    result = out[4]
    assert result["toolCallId"] == "c1"
    assert (result["content"], result["role"]) == ('{"hits":2}', "tool")
    assert result["messageId"] not in {out[1]["parentMessageId"], out[5]["messageId"]}
    # A new turn is a new assistant message.
    assert types(out)[7:10] == ["TEXT_MESSAGE_END", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    assert out[8]["messageId"] != out[5]["messageId"]
    assert types(out)[-6:-4] == ["TEXT_MESSAGE_END", "TOOL_CALL_RESULT"]
    assert out[-5]["content"] == "it broke"
    assert out[-4]["toolCallName"] == "lookup"
    finished = out[-1]
    assert finished["outcome"] == {"type": "success", "pendingToolCallIds": ["c10"]}
    assert finished["result"] == {"content": "more", "stop": "complete", "output": {"n": 2}}


def test_a_handoff_names_the_member_speaking() -> None:
    script = Script()("started", agent="triage")("content", text="over to billing")
    script("handoff", call_id="h1", agent="billing")("content", text="billing here")
    script("finished", result=AgentResult(content="billing here", agent="billing"))
    starts = [e for e in encode(script.events) if e["type"] == "TEXT_MESSAGE_START"]
    assert [e["name"] for e in starts] == ["triage", "billing"]


def test_sub_agents_are_attributed() -> None:
    script = Script()("tool_call", call=ToolCall("d1", "ask_researcher", {"q": "x"}))
    script("subagent_started", call_id="d1", agent="researcher", run_id="child-1")
    script("content", run="child-1", text="found it")
    script("subagent_started", run="child-1", call_id="d2", agent="reader", run_id=None)
    script("thinking", run="child-1", text="hm")
    script("finished", run="child-1", result=AgentResult(content="found it"))
    script("subagent_finished", call_id="d1", run_id="child-1", status="complete")
    script("subagent_started", call_id="d3", agent="researcher", run_id="child-2")
    script("subagent_finished", call_id="d3", run_id=None, status="error")
    script("subagent_finished", call_id="d3", run_id=None, status="error")  # already ended
    script("finished", result=AgentResult())
    out = encode(script.events)
    kinds = types(out)
    assert kinds[4:7] == ["SUBAGENT_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START"]
    assert out[4] == {
        "type": "SUBAGENT_STARTED",
        "subagentRunId": "child-1",
        "name": "researcher",
        "parentToolCallId": "d1",
    }
    assert out[5] == {"type": "STEP_STARTED", "stepName": "researcher", "subagentRunId": "child-1"}
    assert out[6]["name"] == "researcher"
    tagged = [e for e in out if e.get("subagentRunId") == "child-1"]
    assert {"TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "SUBAGENT_FINISHED"} <= set(types(tagged))
    nested = next(e for e in out if e["type"] == "SUBAGENT_STARTED" and e["name"] == "reader")
    assert nested["parentSubagentRunId"] == "child-1"
    # The nested one (which never said it finished) ends before the one around it.
    finishes = [(e["type"], e["subagentRunId"]) for e in out if e["type"].startswith("SUBAGENT_")]
    assert finishes == [
        ("SUBAGENT_STARTED", "child-1"),
        ("SUBAGENT_STARTED", nested["subagentRunId"]),
        ("SUBAGENT_FINISHED", nested["subagentRunId"]),
        ("SUBAGENT_FINISHED", "child-1"),
        ("SUBAGENT_STARTED", "child-2"),
        ("SUBAGENT_ERROR", "child-2"),
    ]
    error = next(e for e in out if e["type"] == "SUBAGENT_ERROR")
    assert error == {
        "type": "SUBAGENT_ERROR",
        "message": "the sub-agent researcher failed",
        "code": "error",
        "subagentRunId": "child-2",
    }
    # The child's own terminal event did not end the run.
    assert kinds.count("RUN_FINISHED") == 1
    assert kinds[-1] == "RUN_FINISHED"
    assert "subagentRunId" not in out[-1]
    check_well_formed(out)


def test_a_failure_shows_only_the_errors_message_and_code() -> None:
    error = {
        "type": "ProviderError",
        "code": "rate_limited",
        "message": "slow down",
        "retryable": True,
    }
    script = Script()("content", text="par")("failed", error=error)("content", text="tial")
    out = encode(script.events)
    assert types(out) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_ERROR",
    ]
    assert out[-1] == {"type": "RUN_ERROR", "message": "slow down", "code": "rate_limited"}
    no_code = encode(Script()("failed", error={"type": "X", "code": None, "message": "m"}).events)
    assert no_code[-1] == {"type": "RUN_ERROR", "message": "m"}


def test_a_gap_ends_the_stream_with_an_error_saying_what_is_gone() -> None:
    encoder = AguiEncoder("t", "r")
    out = encode([RunEvent(RUN, 1, "content", 0.0, {"text": "a"})], encoder)
    out += encoder.feed(RunEvent(RUN, 40, "gap", 0.0, {"first": 2}))
    assert out[-1] == {
        "type": "RUN_ERROR",
        "code": "gap",
        "message": "events 2..40 of the run are gone from its log: this stream fell behind the run "
        "and ends here",
    }
    assert out[-2]["type"] == "TEXT_MESSAGE_END"
    assert encoder.ended
    assert encoder.feed(RunEvent(RUN, 41, "content", 0.0, {"text": "b"})) == []
    assert encoder.fail("too late") == []


def test_cancelled_runs_finish_with_the_cancelled_outcome() -> None:
    partial = ProviderResult(content="par", usage=Usage(3, 1), model="m-1")
    out = encode(Script()("content", text="par")("cancelled", response=to_json(partial)).events)
    assert out[-1] == {
        "type": "RUN_FINISHED",
        "threadId": "thread-1",
        "runId": "agui-run-1",
        "outcome": {"type": "cancelled"},
        "usage": [{"inputTokens": 3, "outputTokens": 1, "totalTokens": 4, "model": "m-1"}],
    }
    result = AgentResult(content="par", stop=StopReason.CANCELLED)
    assert encode(Script()("cancelled", result=result).events)[-1]["outcome"] == {
        "type": "cancelled"
    }
    assert "result" not in encode(Script()("cancelled", result=None).events)[-1]


def test_a_result_that_is_not_json_is_left_out() -> None:
    opaque = encode(Script()("finished", result=AgentResult(content="c", output=object())).events)
    assert opaque[-1]["result"] == {"content": "c", "stop": "complete"}
    odd = encode(Script()("finished", response={"content": 5}).events)[-1]
    assert (odd.get("result"), odd.get("usage")) == (None, None)


def test_waiting_for_approvals_is_an_interrupt_answered_by_resume() -> None:
    call = ToolCall("call-7", "delete_file", {"path": "/tmp/x"})
    script = Script()("tool_call", call=call)
    script("approval_requested", call_id="call-7", tool="delete_file", reason="destructive")
    script("subagent_started", call_id="d", agent="helper", run_id="child")
    asked = [{"call_id": "call-7", "tool": "delete_file", "reason": "destructive"}]
    script("awaiting_input", calls=asked)
    out = encode(script.events)
    assert types(out)[-4:] == ["STEP_STARTED", "STEP_FINISHED", "SUBAGENT_FINISHED", "RUN_FINISHED"]
    assert out[-2]["outcome"] == {"type": "suspended"}
    (interrupt,) = out[-1]["outcome"]["interrupts"]
    assert out[-1]["outcome"]["type"] == "interrupt"
    assert (interrupt["id"], interrupt["toolCallId"], interrupt["reason"]) == (
        "call-7",
        "call-7",
        "tool_call",
    )
    assert "delete_file" in interrupt["message"]
    assert "destructive" in interrupt["message"]
    assert interrupt["responseSchema"]["required"] == ["approved"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    (answer,) = decode_run_input(body(resume=resume)).approvals()
    assert (answer.call_id, answer.allow) == ("call-7", True)
    # Nothing asked: a plain finish.
    assert encode(Script()("awaiting_input", calls=[]).events)[-1]["outcome"] == {"type": "success"}


def test_a_rewind_ends_open_messages_and_says_so() -> None:
    out = encode(Script()("content", text="a")("rewind", to=0)("content", text="b").events)
    assert types(out)[3:6] == ["TEXT_MESSAGE_END", "CUSTOM", "TEXT_MESSAGE_START"]
    assert out[4] == {"type": "CUSTOM", "name": "rewind", "value": {"to": 0}}


def test_start_comes_once_and_first_and_times_are_milliseconds() -> None:
    encoder = AguiEncoder("t", "r", parent_run_id="p")
    first = encoder.feed(RunEvent(RUN, 1, "content", 1_700_000_000.25, {"text": "x"}))
    assert types(first) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    assert first[0]["parentRunId"] == "p"
    assert {e["timestamp"] for e in first} == {1_700_000_000_250}
    assert encoder.start() == []
    assert (
        encoder.feed(RunEvent(RUN, 2, "content", float("nan"), {"text": "y"}))[0].get("timestamp")
        is None
    )
    assert types(encoder.fail("the relay is shutting down", code="shutdown")) == [
        "TEXT_MESSAGE_END",
        "RUN_ERROR",
    ]
    assert encoder.ended
    assert encoder.fail("again") == []
    fresh = AguiEncoder("t", "r")
    assert fresh.fail("no") == [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "protocolVersion": "1.0"},
        {"type": "RUN_ERROR", "message": "no"},
    ]


def test_the_same_events_give_the_same_ids() -> None:
    script = Script()("content", text="a")("tool_call", call=ToolCall("c", "f", {}))
    script("tool_result", result=ToolSuccess("c", "f", 1))("finished", result=AgentResult())
    assert encode(script.events) == encode(script.events)
    # Seqs repeated by a careless caller still give distinct ids.
    twice = [
        RunEvent(RUN, 1, "content", 0.0, {"text": "a"}),
        RunEvent(RUN, 1, "turn", 0.0, {"turn": 2}),
    ]
    twice.append(RunEvent(RUN, 1, "content", 0.0, {"text": "b"}))
    starts = [e["messageId"] for e in encode(twice) if e["type"] == "TEXT_MESSAGE_START"]
    assert len(set(starts)) == 2


def test_encode_sse_is_one_data_line_per_event() -> None:
    events = [
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "a\nb\u2028é"},
        {"type": "X"},
    ]
    raw = encode_sse(events)
    assert CONTENT_TYPE == "text/event-stream"
    assert raw.endswith(b"\n\n")
    frames = raw.decode().split("\n\n")[:-1]
    assert [json.loads(frame.removeprefix("data: ")) for frame in frames] == events
    assert all(frame.startswith("data: {") and "\n" not in frame for frame in frames)
    assert b", " not in raw  # compact
    assert encode_sse([]) == b""


# -- any run, well formed ----------------------------------------------------------------------

STEPS = (
    "content",
    "thinking",
    "empty",
    "tool_call",
    "tool_result",
    "turn",
    "handoff",
    "usage",
    "retry",
    "approval",
    "sub_start",
    "sub_content",
    "sub_call",
    "sub_end",
    "sub_finish",
    "rewind",
)
ENDS = (
    "finished",
    "finished_relay",
    "finished_json",
    "cancelled",
    "failed",
    "awaiting",
    "awaiting_none",
    "gap",
)


def build(
    steps: Sequence[tuple[str, str]], end: str, after: int, run_id: str = RUN
) -> list[RunEvent]:
    """A run of ``steps`` (each with a text), ended by ``end``, then ``after`` more events."""
    script = Script(run_id)
    calls: list[ToolCall] = []
    children: list[str] = []
    for number, (step, text) in enumerate(steps):
        child = children[-1] if children else None
        if step in ("content", "thinking"):
            script(step, text=text or "x")
        elif step == "empty":
            script("content", text="")
        elif step == "tool_call":
            calls.append(ToolCall(f"c{number}", "tool", {"text": text}))
            script("tool_call", call=calls[-1])
        elif step == "tool_result" and calls:
            script("tool_result", result=ToolSuccess(calls[0].id, "tool", text))
        elif step == "turn":
            script("turn", turn=number)
        elif step == "handoff":
            script("handoff", call_id=None, agent=text or None)
        elif step == "usage":
            script("usage", usage=Usage(1, 1), estimated=False, finish="stop")
        elif step == "retry":
            script("retry", attempt=1, delay=0.5, reason="busy")
        elif step == "approval":
            script("approval_requested", call_id="c", tool="tool", reason=None)
        elif step == "sub_start":
            children.append(f"{run_id}-child{number}")
            script(
                "subagent_started",
                run=child,
                call_id=f"d{number}",
                agent=text or None,
                run_id=children[-1],
            )
        elif step == "sub_content" and child:
            script("content", run=child, text=text or "y")
        elif step == "sub_call" and child:
            script("tool_call", run=child, call=ToolCall(f"s{number}", "inner", {}))
        elif step == "sub_end" and child:
            script("finished", run=child, result=AgentResult())
        elif step == "sub_finish" and child:
            script(
                "subagent_finished", call_id=None, run_id=children.pop(), status=text or "complete"
            )
        elif step == "rewind":
            script("rewind", to=0)
    asked = [{"call_id": "c", "tool": "tool", "reason": ""}]
    ending: dict[str, tuple[str, dict[str, Any]]] = {
        "finished": ("finished", {"result": AgentResult(content="done")}),
        "finished_relay": ("finished", {"response": ProviderResult(calls=tuple(calls))}),
        "finished_json": ("finished", {"response": to_json(ProviderResult(content="x"))}),
        "cancelled": ("cancelled", {"result": None}),
        "failed": ("failed", {"error": {"type": "E", "code": "boom", "message": "it failed"}}),
        "awaiting": ("awaiting_input", {"calls": asked}),
        "awaiting_none": ("awaiting_input", {"calls": []}),
        "gap": ("gap", {"first": 1}),
    }
    kind, data = ending[end]
    script(kind, **data)
    for _ in range(after):
        script("content", text="late")
    return script.events


def check_well_formed(events: Sequence[dict[str, Any]]) -> None:
    """What AG-UI asks of one run's events (the rules @ag-ui/client's verifier applies)."""
    assert events[0]["type"] == "RUN_STARTED"
    ends = [i for i, e in enumerate(events) if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
    assert ends == [len(events) - 1]
    texts: dict[str, str | None] = {}
    reasoning: set[str] = set()
    steps: set[tuple[str | None, str]] = set()
    subagents: set[str] = set()
    seen: set[str] = set()
    for index, event in enumerate(events):
        kind, owner = event["type"], event.get("subagentRunId")
        mid = event.get("messageId")
        if kind == "TEXT_MESSAGE_START":
            assert mid not in seen
            seen.add(mid)
            texts[mid] = owner
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            assert mid in texts
            assert texts[mid] == owner
            if kind == "TEXT_MESSAGE_END":
                del texts[mid]
            else:
                assert event["delta"]
        elif kind == "REASONING_START":
            assert mid not in seen
            seen.add(mid)
            assert events[index + 1] == {
                **event,
                "type": "REASONING_MESSAGE_START",
                "role": "reasoning",
            }
            reasoning.add(mid)
        elif kind == "REASONING_MESSAGE_CONTENT":
            assert mid in reasoning
        elif kind == "REASONING_END":
            assert events[index - 1] == {**event, "type": "REASONING_MESSAGE_END"}
            reasoning.remove(mid)
        elif kind == "TOOL_CALL_START":
            args, end = events[index + 1], events[index + 2]
            assert (args["type"], end["type"]) == ("TOOL_CALL_ARGS", "TOOL_CALL_END")
            assert args["toolCallId"] == end["toolCallId"] == event["toolCallId"]
            assert isinstance(json.loads(args["delta"]), dict)
        elif kind == "STEP_STARTED":
            assert (owner, event["stepName"]) not in steps
            steps.add((owner, event["stepName"]))
        elif kind == "STEP_FINISHED":
            steps.remove((owner, event["stepName"]))
        elif kind == "SUBAGENT_STARTED":
            assert owner not in subagents
            subagents.add(owner)
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            subagents.remove(owner)
        elif kind == "RUN_FINISHED":
            assert (texts, reasoning, steps, subagents) == ({}, set(), set(), set())
        elif kind == "RUN_ERROR":
            assert isinstance(event["message"], str)
        if kind.startswith("RUN_"):
            assert "subagentRunId" not in event


RUNS = st.tuples(
    st.lists(
        st.tuples(st.sampled_from(STEPS), st.sampled_from(["", "a", "é", "error", "x y"])),
        max_size=40,
    ),
    st.sampled_from(ENDS),
    st.integers(0, 2),
)


@settings(max_examples=300, deadline=None)
@given(RUNS)
def test_any_run_gives_a_well_formed_agui_run(run: tuple[list[tuple[str, str]], str, int]) -> None:
    steps, end, after = run
    events = build(steps, end, after)
    out = encode(events)
    check_well_formed(out)
    assert out[-1]["type"] == ("RUN_ERROR" if end in ("failed", "gap") else "RUN_FINISHED")
    encode_sse(out)  # strict JSON throughout


# -- the reference client's own checks -----------------------------------------------------------


def random_runs(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for number in range(count):
        steps = [
            (rng.choice(STEPS), rng.choice(["", "a", "complete", "error"]))
            for _ in range(rng.randrange(30))
        ]
        events = build(steps, rng.choice(ENDS), 1, run_id=f"run{number}")
        out += encode(events, AguiEncoder("thread", f"agui{number}"))
    return out


def test_the_reference_client_accepts_the_events() -> None:
    # Many runs in one stream (the client's verifier takes a new RUN_STARTED after an end).
    node_clients()  # (npm ci there, once; a skip only where there is no node or npm)
    events = random_runs(150, seed=7)
    result = subprocess.run(
        ["node", "agui_client.mjs", "verify"],
        cwd=NODE_DIR,
        input="".join(json.dumps(event) + "\n" for event in events),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {"verified": len(events)}
    assert "warning" not in result.stdout
