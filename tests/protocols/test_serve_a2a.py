"""``protocols.serve.a2a``: A2A 1.0 JSON-RPC requests read strictly (every malformed one answered
with its JSON-RPC error), a run's events written as a task's stream (one final event, nothing
after it) and read back by the client-side reader into the run's answer.

(Compatibility with the official ``a2a-sdk`` is checked in an environment of its own, where its
types parsed these shapes strictly; these tests pin them.)"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import ProtocolError, ValidationError
from protocols.jobs import ApprovalAnswer, JobStatus
from protocols.live import RunEvent
from protocols.messages import AgentResult, Role, StopReason, ToolCall, ToolFailure, ToolSuccess
from protocols.serve.a2a import (
    CARD_PATH,
    A2AMessage,
    A2APart,
    A2ARequest,
    RpcCode,
    RpcError,
    TaskEncoder,
    TaskState,
    agent_card,
    approvals_of,
    decode_rpc,
    message_to_messages,
    rpc_error,
    rpc_result,
    sse_event,
    state_of,
)
from protocols.serve.a2a_client import (
    Reply,
    StateChange,
    TaskSnapshot,
    TaskView,
    TextDelta,
    read_stream_event,
)

PNG = base64.b64encode(b"\x89PNG\r\n").decode()


def body(method: str = "SendMessage", params: Any = None, **envelope: Any) -> bytes:
    doc = {"jsonrpc": "2.0", "id": "r1", "method": method, **envelope}
    if params is not None:
        doc["params"] = params
    return json.dumps(doc).encode()


def send(*parts: Any, **message: Any) -> dict[str, Any]:
    return {
        "message": {
            "role": "ROLE_USER",
            "messageId": "m1",
            "parts": list(parts) or [{"text": "hi"}],
            **message,
        }
    }


def refused(raw: bytes, code: int, words: str = "") -> RpcError:
    decoded = decode_rpc(raw)
    assert isinstance(decoded, RpcError), decoded
    assert decoded.code == code, decoded
    assert words in decoded.message
    return decoded


# -- requests ----------------------------------------------------------------------------------


def test_a_send_as_the_sdk_client_writes_it() -> None:
    params = send(
        {"text": "hi"},
        {"data": {"a": 1.0}},
        {"raw": PNG, "mediaType": "image/png", "filename": "x.png"},
        {"url": "data:image/png;base64," + PNG},
        contextId="ctx",
        taskId="t0",
        extensions=["ignored"],
    )
    params["configuration"] = {"historyLength": 3, "returnImmediately": True}
    params["metadata"] = {"unknown": "fields are ignored"}
    request = decode_rpc(body("SendStreamingMessage", params))
    assert isinstance(request, A2ARequest)
    assert (request.id, request.method, request.streaming) == ("r1", "SendStreamingMessage", True)
    assert (request.task_id, request.context_id, request.history_length) == ("t0", "ctx", 3)
    assert request.blocking is False
    message = request.message
    assert message is not None
    assert message.message_id == "m1"
    assert message.role == "user"
    assert [part.kind for part in message.parts] == ["text", "data", "file", "file"]
    assert message.parts[2] == A2APart("file", raw=PNG, media_type="image/png", filename="x.png")
    (ours,) = message_to_messages(message)
    assert ours.role is Role.USER
    assert ours.id == "m1"
    assert ours.content == 'hi\n{"a":1.0}'
    assert ours.images == ("data:image/png;base64," + PNG, "data:image/png;base64," + PNG)


def test_a_send_is_blocking_unless_asked_otherwise() -> None:
    request = decode_rpc(body("SendMessage", send(), id=7))
    assert isinstance(request, A2ARequest)
    assert (request.id, request.blocking, request.streaming) == (7, True, False)
    assert request.history_length is None
    assert request.accepted_output_modes == ()


@pytest.mark.parametrize("method", ["GetTask", "CancelTask", "SubscribeToTask"])
def test_the_task_methods_take_a_task_id(method: str) -> None:
    request = decode_rpc(body(method, {"id": "t1", "historyLength": 2, "tenant": ""}, id=None))
    assert isinstance(request, A2ARequest)
    assert (request.id, request.method, request.task_id, request.history_length) == (
        None,
        method,
        "t1",
        2,
    )
    assert request.streaming is (method == "SubscribeToTask")
    refused(body(method, {}), RpcCode.INVALID_PARAMS, "params.id")
    refused(body(method, {"id": ""}), RpcCode.INVALID_PARAMS, "params.id")
    refused(body(method, {"id": "x" * 1001}), RpcCode.INVALID_PARAMS, "params.id")
    refused(body(method, {"id": "t", "historyLength": -1}), RpcCode.INVALID_PARAMS, "history")


@pytest.mark.parametrize(
    ("raw", "code", "words"),
    [
        (b"{not json", RpcCode.PARSE_ERROR, "not JSON"),
        (b"\xff\xfe", RpcCode.PARSE_ERROR, "not JSON"),
        (b'{"jsonrpc": "2.0", "jsonrpc": "2.0"}', RpcCode.PARSE_ERROR, "duplicate"),
        (b'{"jsonrpc": "2.0", "id": NaN}', RpcCode.PARSE_ERROR, "not JSON"),
        (b"[]", RpcCode.INVALID_REQUEST, "batch"),
        (b'"SendMessage"', RpcCode.INVALID_REQUEST, "not an object"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "GetTask"}', RpcCode.INVALID_REQUEST, "id"),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}', RpcCode.INVALID_REQUEST, "id"),
        (b'{"jsonrpc": "2.0", "id": {}, "method": "GetTask"}', RpcCode.INVALID_REQUEST, "id"),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}', RpcCode.INVALID_REQUEST, "2.0"),
        (b'{"id": 1, "method": "GetTask"}', RpcCode.INVALID_REQUEST, "jsonrpc"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', RpcCode.INVALID_REQUEST, "method"),
        (b'{"jsonrpc": "2.0", "id": 1}', RpcCode.INVALID_REQUEST, "method"),
        (body("message/send"), RpcCode.METHOD_NOT_FOUND, "message/send"),
        (body("Nope"), RpcCode.METHOD_NOT_FOUND, "'Nope'"),
        (body("ListTasks"), RpcCode.UNSUPPORTED_OPERATION, "listing"),
        (body("GetExtendedAgentCard"), RpcCode.EXTENDED_CARD_NOT_CONFIGURED, "extended"),
        (body("CreateTaskPushNotificationConfig"), RpcCode.PUSH_NOTIFICATION_NOT_SUPPORTED, ""),
        (body("ListTaskPushNotificationConfigs"), RpcCode.PUSH_NOTIFICATION_NOT_SUPPORTED, ""),
        (body("GetTask", [1]), RpcCode.INVALID_PARAMS, "params must be an object"),
    ],
)
def test_malformed_requests_get_their_json_rpc_error(raw: bytes, code: int, words: str) -> None:
    error = refused(raw, code, words)
    answer = json.loads(error.body)
    assert answer == {
        "jsonrpc": "2.0",
        "id": error.id,
        "error": {"code": code, "message": error.message},
    }


def test_an_error_names_the_request_once_its_id_is_known() -> None:
    assert refused(body("Nope"), RpcCode.METHOD_NOT_FOUND).id == "r1"
    assert refused(b"{oops", RpcCode.PARSE_ERROR).id is None


def test_a_body_over_the_limit_is_refused_before_it_is_parsed() -> None:
    raw = body("SendMessage", send({"text": "x" * 100}))
    refused_ = decode_rpc(raw, max_bytes=len(raw) - 1)
    assert isinstance(refused_, RpcError)
    assert refused_.code == RpcCode.INVALID_REQUEST
    assert isinstance(decode_rpc(raw, max_bytes=len(raw)), A2ARequest)


@pytest.mark.parametrize(
    ("params", "code", "words"),
    [
        ({}, RpcCode.INVALID_PARAMS, "params.message must be an object"),
        (send(role="ROLE_AGENT"), RpcCode.INVALID_PARAMS, "must be ROLE_USER"),
        (send(role="user"), RpcCode.INVALID_PARAMS, "params.message.role"),
        (send(messageId=""), RpcCode.INVALID_PARAMS, "messageId"),
        (send(messageId=None), RpcCode.INVALID_PARAMS, "messageId"),
        (send(contextId=3), RpcCode.INVALID_PARAMS, "contextId"),
        (send(taskId=""), RpcCode.INVALID_PARAMS, "taskId"),
        (send(parts=[]), RpcCode.INVALID_PARAMS, "1 to 64 parts"),
        (send(parts="hi"), RpcCode.INVALID_PARAMS, "parts"),
        (send(parts=[{"text": "x"}] * 65), RpcCode.INVALID_PARAMS, "1 to 64 parts"),
        (send("hi"), RpcCode.INVALID_PARAMS, "parts[0] must be an object"),
        (send({}), RpcCode.INVALID_PARAMS, "exactly one of"),
        (send({"text": "a", "data": {}}), RpcCode.INVALID_PARAMS, "exactly one of"),
        (send({"data": None}), RpcCode.INVALID_PARAMS, "exactly one of"),
        (send({"text": 5}), RpcCode.INVALID_PARAMS, "text must be a string"),
        (send({"text": "a", "mediaType": 5}), RpcCode.INVALID_PARAMS, "mediaType"),
        (send({"raw": "!!", "mediaType": "image/png"}), RpcCode.INVALID_PARAMS, "base64"),
        (
            send({"raw": PNG, "mediaType": "application/pdf"}),
            RpcCode.CONTENT_TYPE_NOT_SUPPORTED,
            "pdf",
        ),
        (send({"raw": PNG}), RpcCode.CONTENT_TYPE_NOT_SUPPORTED, "untyped"),
        (send({"url": "https://x/y.png"}), RpcCode.CONTENT_TYPE_NOT_SUPPORTED, "by URL"),
        (send() | {"configuration": []}, RpcCode.INVALID_PARAMS, "configuration"),
        (
            send() | {"configuration": {"returnImmediately": "yes"}},
            RpcCode.INVALID_PARAMS,
            "returnImmediately",
        ),
        (
            send() | {"configuration": {"historyLength": True}},
            RpcCode.INVALID_PARAMS,
            "historyLength",
        ),
        (
            send() | {"configuration": {"acceptedOutputModes": "text"}},
            RpcCode.INVALID_PARAMS,
            "acceptedOutputModes",
        ),
    ],
)
def test_a_send_with_bad_params_is_refused(params: Any, code: int, words: str) -> None:
    refused(body("SendMessage", params), code, words)


@given(st.binary(max_size=200))
def test_decoding_never_raises_on_bytes(raw: bytes) -> None:
    assert isinstance(decode_rpc(raw), A2ARequest | RpcError)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_part = st.fixed_dictionaries(
    {}, optional={"text": _json, "data": _json, "raw": _json, "url": _json, "mediaType": _json}
)


@given(
    st.sampled_from(["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask"]),
    st.fixed_dictionaries(
        {},
        optional={
            "id": _json,
            "historyLength": _json,
            "configuration": _json,
            "message": st.fixed_dictionaries(
                {},
                optional={
                    "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", 1]),
                    "messageId": _json,
                    "parts": st.lists(_part, max_size=3) | _json,
                    "contextId": _json,
                    "taskId": _json,
                },
            ),
        },
    ),
)
def test_decoding_never_raises_on_json(method: str, params: dict[str, Any]) -> None:
    decoded = decode_rpc(body(method, params))
    assert isinstance(decoded, A2ARequest | RpcError)
    if isinstance(decoded, RpcError):
        assert decoded.code in {RpcCode.INVALID_PARAMS, RpcCode.CONTENT_TYPE_NOT_SUPPORTED}


def test_the_answers_writers() -> None:
    assert json.loads(rpc_result(3, {"task": {}})) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"task": {}},
    }
    assert json.loads(rpc_error("a", RpcCode.TASK_NOT_FOUND, "no such task")) == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {"code": -32001, "message": "no such task"},
    }
    payload = rpc_result(1, {"text": "a\nb"})
    assert b"\n" not in payload
    assert sse_event(payload) == b"data: " + payload + b"\n\n"
    assert sse_event(payload, error=True) == b"event: error\ndata: " + payload + b"\n\n"


def test_an_agents_message_becomes_an_assistant_one() -> None:
    message = A2AMessage(
        "m2",
        "agent",
        (
            A2APart("text", text="see"),
            A2APart("file", raw=PNG, media_type="image/png", filename="a.png"),
        ),
    )
    (ours,) = message_to_messages(message)
    assert ours.role is Role.ASSISTANT
    assert ours.content == "see\n[file a.png]"
    assert ours.id == "m2"


def test_approvals_are_read_from_a_data_part() -> None:
    answers = {
        "answers": [
            {"call_id": "c1", "allow": True},
            {"call_id": "c2", "allow": False, "reason": "no"},
        ]
    }
    message = A2AMessage("m", "user", (A2APart("text", text="ok"), A2APart("data", data=answers)))
    assert approvals_of(message) == (
        ApprovalAnswer("c1", True, ""),
        ApprovalAnswer("c2", False, "no"),
    )
    assert approvals_of(A2AMessage("m", "user", (A2APart("data", data={"x": 1}),))) == ()
    for bad in ({"answers": [{"call_id": "c1"}]}, {"answers": [3]}, {"answers": "yes"},
                {"answers": [{"call_id": "c", "allow": True, "reason": 1}]}):  # fmt: skip
        with pytest.raises(ValidationError):
            approvals_of(A2AMessage("m", "user", (A2APart("data", data=bad),)))


# -- the card ----------------------------------------------------------------------------------


def test_the_agent_card() -> None:
    card = agent_card("greeter", "Greets.", "https://relay/a2a/greeter")
    assert CARD_PATH == "/.well-known/agent-card.json"
    assert card["supportedInterfaces"] == [
        {"url": "https://relay/a2a/greeter", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
    assert card["skills"] == [
        {"id": "greeter", "name": "greeter", "description": "Greets.", "tags": ["greeter"]}
    ]
    assert {"name", "description", "version", "defaultInputModes", "defaultOutputModes"} <= set(
        card
    )
    skill = {"id": "s", "name": "S", "description": "d", "tags": ["t"], "examples": ["e"]}
    assert agent_card("a", "b", "u", skills=[skill], streaming=False)["skills"] == [skill]
    with pytest.raises(ValidationError):
        agent_card("a", "b", "u", skills=[{"id": "s"}, {"name": 3}])


# -- states ------------------------------------------------------------------------------------


def test_state_of_each_job_status_and_run_ending() -> None:
    assert {status.value: state_of(status) for status in JobStatus} == {
        "queued": TaskState.SUBMITTED,
        "running": TaskState.WORKING,
        "awaiting_input": TaskState.INPUT_REQUIRED,
        "completed": TaskState.COMPLETED,
        "partial": TaskState.FAILED,
        "failed": TaskState.FAILED,
        "cancelled": TaskState.CANCELED,
        "abandoned": TaskState.FAILED,
    }
    assert state_of("finished") is TaskState.COMPLETED
    with pytest.raises(ValidationError):
        state_of("gap")
    assert [s for s in TaskState if s.terminal] == [
        TaskState.COMPLETED,
        TaskState.CANCELED,
        TaskState.FAILED,
        TaskState.REJECTED,
    ]
    assert {s for s in TaskState if s.interrupted} == {
        TaskState.INPUT_REQUIRED,
        TaskState.AUTH_REQUIRED,
    }


# -- the encoder -------------------------------------------------------------------------------

_ALONE = {"started": "agent", "turn": "turn", "content": "text", "tool_call": "call"}
_ALONE |= {"tool_result": "result", "finished": "result", "cancelled": "result"}


def events(*items: tuple[str, Any], start: int = 1) -> list[RunEvent]:
    out = []
    for seq, (kind, data) in enumerate(items, start):
        shown = data if isinstance(data, dict) else {_ALONE[kind]: data}
        out.append(RunEvent("run", seq, kind, 1_700_000_000.0 + seq, shown))
    return out


def encode(items: list[RunEvent], encoder: TaskEncoder | None = None) -> list[dict[str, Any]]:
    encoder = encoder or TaskEncoder("t1", "c1")
    return [out for event in items for out in encoder.feed(event)]


def kinds(stream: list[dict[str, Any]]) -> list[str]:
    return [next(iter(item)) for item in stream]


def states(stream: list[dict[str, Any]]) -> list[str]:
    return [i["statusUpdate"]["status"]["state"] for i in stream if "statusUpdate" in i]


USER = A2AMessage("m1", "user", (A2APart("text", text="hi"),))


def test_a_streamed_answer() -> None:
    encoder = TaskEncoder("t1", "c1", history=[USER])
    run = events(("started", "bot"), ("turn", 1), ("content", "Hel"), ("content", "lo"),
                 ("usage", {"usage": None, "estimated": False, "finish": "stop"}),
                 ("finished", AgentResult(content="Hello")))  # fmt: skip
    stream = encode(run, encoder)
    assert kinds(stream) == [
        "task",
        "statusUpdate",
        "artifactUpdate",
        "artifactUpdate",
        "statusUpdate",
    ]
    assert stream[0] == {
        "task": {
            "id": "t1",
            "contextId": "c1",
            "status": {"state": "TASK_STATE_SUBMITTED"},
            "history": [
                {"messageId": "m1", "contextId": "c1", "taskId": "t1", "role": "ROLE_USER",
                 "parts": [{"text": "hi"}]}
            ],
        }
    }  # fmt: skip
    assert stream[1] == {
        "statusUpdate": {
            "taskId": "t1",
            "contextId": "c1",
            "status": {"state": "TASK_STATE_WORKING", "timestamp": "2023-11-14T22:13:21.000Z"},
        }
    }
    artifact = {"artifactId": "answer", "name": "answer"}
    assert stream[2]["artifactUpdate"] == {
        "taskId": "t1", "contextId": "c1", "artifact": artifact | {"parts": [{"text": "Hel"}]}
    }  # fmt: skip
    assert stream[3]["artifactUpdate"]["append"] is True
    assert states(stream) == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert encoder.ended
    assert encoder.state is TaskState.COMPLETED
    task = encoder.task()
    assert task["artifacts"] == [artifact | {"parts": [{"text": "Hello"}]}]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert encoder.feed(events(("content", "late"))[0]) == []
    assert encoder.resume() == [{"task": task}]
    assert encoder.ended


def test_the_task_keeps_its_history() -> None:
    encoder = TaskEncoder("t1", "c1", history=[USER])
    encoder.add_message(A2AMessage("m2", "user", (A2APart("data", data={"answers": []}),)))
    assert [m["messageId"] for m in encoder.task()["history"]] == ["m1", "m2"]
    assert [m["messageId"] for m in encoder.task(history_length=1)["history"]] == ["m2"]
    assert "history" not in encoder.task(history_length=0)
    assert encoder.task()["history"][1]["parts"] == [
        {"data": {"answers": []}, "mediaType": "application/json"}
    ]
    assert "history" not in TaskEncoder("t", "c").task()
    assert "artifacts" not in encoder.task()


def test_each_turn_starts_the_answer_anew_and_tools_show_as_working_updates() -> None:
    call = ToolCall("c1", "add", {"a": 1})
    run = events(("turn", 1), ("content", "Let me add."), ("tool_call", call),
                 ("tool_result", ToolSuccess("c1", "add", 3)),
                 ("tool_result", ToolFailure("c2", "div", "by zero")),
                 ("progress", {"call_id": "c1", "text": "50%"}),
                 ("subagent_started", {"call_id": "c3", "agent": "helper", "run_id": "r3"}),
                 ("subagent_finished", {"call_id": "c3", "run_id": "r3", "status": "finished"}),
                 ("handoff", {"call_id": "c4", "agent": "other"}),
                 ("turn", 2), ("content", "It is "), ("content", "3."),
                 ("finished", AgentResult(content="It is 3.")))  # fmt: skip
    stream = encode(run)
    notes = [
        i["statusUpdate"]["status"]["message"]
        for i in stream
        if "message" in i.get("statusUpdate", {}).get("status", {})
    ]
    assert [n["messageId"] for n in notes] == [f"t1-{seq}" for seq in range(3, 10)]
    assert {n["role"] for n in notes} == {"ROLE_AGENT"}
    data = [n["parts"][0]["data"] for n in notes]
    assert data[0] == {
        "event": "tool_call",
        "call": {"id": "c1", "name": "add", "arguments": {"a": 1}},
    }
    assert data[1] == {
        "event": "tool_result",
        "result": {"success": True, "id": "c1", "name": "add", "value": 3},
    }
    assert data[2]["result"] == {"success": False, "id": "c2", "name": "div", "error": "by zero"}
    assert data[3:] == [
        {"event": "progress", "call_id": "c1", "text": "50%"},
        {"event": "subagent_started", "call_id": "c3", "agent": "helper", "run_id": "r3"},
        {"event": "subagent_finished", "call_id": "c3", "run_id": "r3", "status": "finished"},
        {"event": "handoff", "call_id": "c4", "agent": "other"},
    ]
    chunks = [i["artifactUpdate"] for i in stream if "artifactUpdate" in i]
    assert [(c["artifact"]["parts"][0]["text"], c.get("append", False)) for c in chunks] == [
        ("Let me add.", False),
        ("It is ", False),
        ("3.", True),
    ]
    assert read_back(stream).text == "It is 3."


def test_a_gap_holds_deltas_back_and_the_end_sends_the_whole_answer() -> None:
    run = events(("turn", 1), ("content", "It "), ("gap", {"first": 1}), ("content", "3."),
                 ("finished", AgentResult(content="It is 3.")))  # fmt: skip
    stream = encode(run)
    chunks = [i["artifactUpdate"] for i in stream if "artifactUpdate" in i]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["It ", "It is 3."]
    assert chunks[-1].get("append") is None
    assert chunks[-1]["lastChunk"] is True
    assert read_back(stream).text == "It is 3."


def test_a_rewind_also_holds_deltas_back_until_the_next_turn() -> None:
    fresh = AgentResult(content="Fresh")
    run = events(("turn", 1), ("content", "void"), ("rewind", {"to": 1}), ("content", " more"),
                 ("turn", 2), ("content", "Fresh"), ("finished", fresh))  # fmt: skip
    stream = encode(run)
    texts = [
        i["artifactUpdate"]["artifact"]["parts"][0]["text"] for i in stream if "artifactUpdate" in i
    ]
    assert texts == ["void", "Fresh"]
    assert read_back(stream).text == "Fresh"


def test_a_run_that_streamed_nothing_sends_its_answer_whole() -> None:
    stream = encode(events(("started", "bot"), ("finished", AgentResult(content="All at once"))))
    assert kinds(stream) == ["task", "statusUpdate", "artifactUpdate", "statusUpdate"]
    assert read_back(stream).text == "All at once"
    empty = encode(events(("finished", AgentResult(content=""))))
    assert kinds(empty) == ["task", "statusUpdate"]
    assert states(empty) == ["TASK_STATE_COMPLETED"]


def test_a_relay_runs_response_is_its_answer() -> None:
    response = {"response": {"content": "relayed", "finish": "stop"}}
    stream = encode(events(("turn", 1), ("content", "rel"), ("finished", response)))
    assert states(stream)[-1] == "TASK_STATE_COMPLETED"
    assert read_back(stream).text == "relayed"


def test_a_partial_answer_fails_the_task_saying_why() -> None:
    cut = AgentResult(content="It is", stop=StopReason.MAX_TOKENS)
    stream = encode(events(("turn", 1), ("content", "It is"), ("finished", cut)))
    status = stream[-1]["statusUpdate"]["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    assert "max_tokens" in status["message"]["parts"][0]["text"]
    view = read_back(stream)
    assert view.text == "It is"
    assert "partial" in view.message


def test_a_cancelled_run_cancels_the_task() -> None:
    stopped = AgentResult(content="It", stop=StopReason.CANCELLED)
    stream = encode(events(("turn", 1), ("content", "It"), ("cancelled", stopped)))
    assert states(stream)[-1] == "TASK_STATE_CANCELED"
    assert read_back(stream).text == "It"
    before = encode(events(("cancelled", {"result": None})))
    assert kinds(before) == ["task", "statusUpdate"]
    assert states(before) == ["TASK_STATE_CANCELED"]


def test_a_failed_run_shows_its_error_as_the_relay_does() -> None:
    written = {"error": {"type": "JobError", "code": None, "message": "the attempt timed out"}}
    stream = encode(events(("turn", 1), ("failed", written)))
    assert states(stream) == ["TASK_STATE_WORKING", "TASK_STATE_FAILED"]
    assert stream[-1]["statusUpdate"]["status"]["message"]["parts"] == [
        {"text": "JobError: the attempt timed out"}
    ]
    raised = {"error": {"type": "RuntimeError", "code": None, "message": "upstream secret"}}
    shown = json.dumps(encode(events(("failed", raised))))
    assert "RuntimeError" in shown
    assert "upstream secret" not in shown


def test_awaiting_input_ends_the_stream_and_a_resume_goes_on() -> None:
    asked = [{"call_id": "c1", "tool": "delete", "reason": "destructive"}]
    encoder = TaskEncoder("t1", "c1")
    first = encode(events(("turn", 1), ("awaiting_input", {"calls": asked})), encoder)
    status = first[-1]["statusUpdate"]["status"]
    assert status["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert encoder.ended
    text, data = status["message"]["parts"]
    assert "delete (c1): destructive" in text["text"]
    assert '"answers"' in text["text"]
    assert data["data"] == {"event": "awaiting_input", "calls": asked}
    assert read_back(first).final
    assert encoder.feed(events(("turn", 2), start=3)[0]) == []
    resumed = encoder.resume()
    assert resumed == [{"task": encoder.task()}]
    assert not encoder.ended
    assert resumed[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    answered = {"call_id": "c1", "allow": True, "reason": ""}
    done = AgentResult(content="Done.")
    rest = encode(events(("approval_answered", answered), ("turn", 2), ("content", "Done."),
                         ("finished", done), start=3), encoder)  # fmt: skip
    assert states(rest) == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert read_back(resumed + rest).text == "Done."


def test_the_same_events_make_the_same_stream() -> None:
    run = events(("turn", 1), ("content", "a"), ("tool_call", ToolCall("c", "t", {})),
                 ("finished", AgentResult(content="a")))  # fmt: skip
    assert encode(run) == encode(run)
    assert json.loads(json.dumps(encode(run))) == encode(run)  # plain JSON
    nan = RunEvent("run", 1, "content", float("nan"), {"text": "x"})
    assert "timestamp" not in encode([nan])[1]["statusUpdate"]["status"]


# -- the reader --------------------------------------------------------------------------------


def read_back(stream: list[dict[str, Any]]) -> TaskView:
    view = TaskView()
    for item in stream:
        assert not view.final, "nothing after the final event"
        view.apply(read_stream_event(item))
    return view


@settings(max_examples=200)
@given(
    turns=st.lists(st.lists(st.text(max_size=4), max_size=4), min_size=1, max_size=3),
    lost=st.sets(st.integers(0, 12), max_size=3),
    stop=st.sampled_from([StopReason.COMPLETE, StopReason.CANCELLED, StopReason.BUDGET]),
)
def test_the_reader_reads_back_the_runs_answer(
    turns: list[list[str]], lost: set[int], stop: StopReason
) -> None:
    items: list[tuple[str, Any]] = [("started", "bot")]
    delta = 0
    for number, chunks in enumerate(turns, 1):
        items.append(("turn", number))
        for chunk in chunks:
            if delta in lost:
                items.append(("gap", {"first": 1}))  # (the delta is one of the events lost)
            else:
                items.append(("content", chunk))
            delta += 1
        if number < len(turns):
            items.append(("tool_call", ToolCall(f"c{number}", "t", {})))
    content = "".join(turns[-1])
    kind = "cancelled" if stop is StopReason.CANCELLED else "finished"
    items.append((kind, AgentResult(content=content, stop=stop)))
    encoder = TaskEncoder("t1", "c1", history=[USER])
    stream = encode(events(*items), encoder)
    finals = [read_stream_event(i).final for i in stream]
    assert finals.count(True) == 1
    assert finals[-1] is True
    view = read_back(stream)
    assert view.text == content
    assert encoder.task()["artifacts"][0]["parts"] == [{"text": content}] if content else True
    want = {StopReason.COMPLETE: TaskState.COMPLETED, StopReason.CANCELLED: TaskState.CANCELED}
    assert view.state is want.get(stop, TaskState.FAILED) is encoder.state
    assert view.task_id == "t1"


def test_reading_each_kind_of_event() -> None:
    artifact = {"artifactId": "a", "parts": [{"text": "x"}, {"data": [1]}]}
    update = {"artifact": artifact, "append": True, "lastChunk": True, "taskId": "t"}
    assert read_stream_event({"artifactUpdate": update}) == TextDelta("a", "x", True, True, ([1],))
    status = {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"parts": [{"text": "ok?"}]}}
    assert read_stream_event({"statusUpdate": {"status": status}}) == StateChange(
        TaskState.INPUT_REQUIRED, "ok?", (), True
    )
    assert read_stream_event({"statusUpdate": {"status": {"state": "TASK_STATE_WORKING"}}}) == (
        StateChange(TaskState.WORKING, "", (), False)
    )
    artifacts = [{"artifactId": "a", "parts": [{"text": "x"}, {"text": "y"}]}]
    task = {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}
    task["artifacts"] = artifacts
    assert read_stream_event({"task": task}) == TaskSnapshot(
        "t", "c", TaskState.COMPLETED, "", (("a", "xy"),), True
    )
    reply = read_stream_event({"message": {"role": "ROLE_AGENT", "parts": [{"text": "hi"}]}})
    assert reply == Reply("hi", ())
    view = TaskView()
    view.apply(reply)
    assert (view.text, view.final, view.state) == ("hi", True, TaskState.COMPLETED)


@pytest.mark.parametrize(
    "data",
    [
        [],
        {},
        {"task": {}, "message": {}},
        {"task": "x"},
        {"artifactUpdate": {"artifact": {"parts": []}}},
        {"artifactUpdate": {"artifact": {"artifactId": "a", "parts": "x"}}},
        {"statusUpdate": {"status": {"state": "working"}}},
        {"statusUpdate": {"status": {"state": ["TASK_STATE_WORKING"]}}},
        {"statusUpdate": {}},
        {"message": {"parts": ["x"]}},
        {"task": {"status": {"state": "TASK_STATE_WORKING"}}},
        {"task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"}, "artifacts": {}}},
    ],
)
def test_the_reader_refuses_what_is_not_an_event(data: Any) -> None:
    with pytest.raises(ProtocolError) as caught:
        read_stream_event(data)
    assert caught.value.code == "decode"
