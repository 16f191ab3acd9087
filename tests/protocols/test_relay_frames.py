"""Tests for protocols.relay: every frame round-trips (property tests), decoding is strict and
says whose fault a refusal is, the size limit is checked in UTF-8 bytes before parsing, the
token never renders, and error frames carry only their fixed text."""

from __future__ import annotations

import ast
import json
import re
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols._json import loads
from protocols.errors import Category, ProtocolError, SizeLimitError, ValidationError
from protocols.messages import (
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.relay import (
    DEFAULT_MAX_FRAME,
    ERROR_MESSAGES,
    MAX_REQUEST_ID,
    AbortFrame,
    ApprovalFrame,
    ApproveFrame,
    CancelFrame,
    ClientFrame,
    DeltaFrame,
    ErrorFrame,
    GapFrame,
    HelloFrame,
    HttpRequest,
    JobAnswerFrame,
    JobCancelFrame,
    JobEventFrame,
    JobFrame,
    JobGetFrame,
    JobSubmitFrame,
    JobWatchFrame,
    ReadyFrame,
    ResultFrame,
    RunFrame,
    ServerFrame,
    StreamFrame,
    WatchFrame,
    decode_client_frame,
    decode_http_request,
    decode_server_frame,
    encode_frame,
    error_frame,
)

SETTINGS = settings(max_examples=40, deadline=None)

TAGS: dict[type, str] = {
    HelloFrame: "hello",
    StreamFrame: "stream",
    CancelFrame: "cancel",
    ApproveFrame: "approve",
    ReadyFrame: "ready",
    DeltaFrame: "delta",
    ResultFrame: "result",
    AbortFrame: "abort",
    ErrorFrame: "error",
    ApprovalFrame: "approval",
    WatchFrame: "watch",
    RunFrame: "run",
    GapFrame: "gap",
    JobSubmitFrame: "job_submit",
    JobGetFrame: "job_get",
    JobCancelFrame: "job_cancel",
    JobAnswerFrame: "job_answer",
    JobWatchFrame: "job_watch",
    JobFrame: "job",
    JobEventFrame: "job_event",
}
CLIENT_TYPES = set(get_args(ClientFrame))
SERVER_TYPES = set(get_args(ServerFrame))
RETRYABLE = {
    "rate_limited",
    "too_many_streams",
    "upstream",
    "shutdown",
    "too_many_watchers",
    "unavailable",
}
TOKEN = "sk-relay-s3cret-token-value"

# --------------------------------------------------------------------------- strategies

#: Any character but a lone surrogate (those are repaired on the wire, so cannot round-trip).
UTF8 = st.characters(codec="utf-8")
TEXT = st.text(alphabet=UTF8, max_size=12)
NONEMPTY = st.text(alphabet=UTF8, min_size=1, max_size=10)
REQUEST_IDS = st.one_of(
    st.text(alphabet=UTF8, min_size=1, max_size=16),
    st.text(alphabet=UTF8, min_size=MAX_REQUEST_ID, max_size=MAX_REQUEST_ID),
)
TOOL_NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
POSITIVE = st.integers(min_value=1, max_value=2**53)
COUNTS = st.integers(min_value=0, max_value=2**40)

JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63),
        st.floats(allow_nan=False, allow_infinity=False),
        TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(TEXT, children, max_size=3)
    ),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=3)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


TOOL_CALLS = st.builds(ToolCall, id=NONEMPTY, name=NONEMPTY, arguments=JSON_OBJECTS)
CALL_LISTS = st.lists(TOOL_CALLS, max_size=3, unique_by=lambda call: call.id)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(Role))
    kwargs: dict[str, Any] = {"content": draw(TEXT)}
    if role is Role.USER:
        kwargs["images"] = draw(st.lists(NONEMPTY, max_size=2))
    elif role is Role.ASSISTANT:
        kwargs["calls"] = draw(CALL_LISTS)
        kwargs["thinking"] = draw(TEXT)
        kwargs["interrupted"] = draw(st.booleans())
        kwargs["continuation"] = draw(JSON_OBJECTS)
    elif role is Role.TOOL:
        kwargs["tool_call_id"] = draw(NONEMPTY)
        kwargs["name"] = draw(NONEMPTY)
    if draw(st.booleans()):
        kwargs["id"] = draw(NONEMPTY)
    if draw(st.booleans()):
        kwargs["created_at"] = draw(st.floats(min_value=0, max_value=1e12))
    return Message(role=role, **kwargs)


SCHEMAS = st.one_of(
    st.just({"type": "object", "properties": {}}),
    st.builds(
        lambda names: {"type": "object", "properties": {n: {"type": "string"} for n in names}},
        st.lists(TEXT, max_size=3),
    ),
)
TOOL_DEFINITIONS = st.one_of(
    st.builds(ToolDefinition, name=TOOL_NAMES),
    st.builds(ToolDefinition, name=TOOL_NAMES, description=TEXT, parameters=SCHEMAS),
)
OPTIONS = st.builds(
    ProviderOptions,
    think=optional(st.booleans()),
    schema=optional(SCHEMAS),
    max_tokens=optional(st.integers(min_value=1, max_value=2**31)),
    temperature=optional(st.floats(min_value=0, max_value=2)),
    tool_choice=optional(st.one_of(st.sampled_from(["auto", "none", "required"]), TOOL_NAMES)),
    stop=st.lists(NONEMPTY, max_size=3),
    extra=JSON_OBJECTS,
)


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    prompt, completion = draw(COUNTS), draw(COUNTS)
    return Usage(
        prompt=prompt, completion=completion, cached=draw(optional(st.integers(0, prompt)))
    )


@st.composite
def provider_results(draw: st.DrawFn) -> ProviderResult:
    calls = draw(CALL_LISTS)
    denied_ids = (
        draw(st.lists(st.sampled_from([c.id for c in calls]), unique=True)) if calls else []
    )
    return ProviderResult(
        content=draw(TEXT),
        thinking=draw(TEXT),
        calls=calls,
        usage=draw(optional(usages())),
        continuation=draw(JSON_OBJECTS),
        denied={call_id: draw(NONEMPTY) for call_id in denied_ids},
    )


SEQS = st.integers(min_value=1, max_value=2**53 - 1)
RUN_IDS = st.text(alphabet=UTF8, min_size=1, max_size=64)
JOB_IDS = st.from_regex(r"[A-Za-z0-9_-]{1,128}", fullmatch=True)


@st.composite
def errors(draw: st.DrawFn) -> ErrorFrame:
    code = draw(st.sampled_from(sorted(ERROR_MESSAGES)))
    request_id = draw(optional(REQUEST_IDS))
    seq = draw(optional(SEQS))
    if draw(st.booleans()):
        return error_frame(code, request_id, seq)
    return ErrorFrame(code, ERROR_MESSAGES[code], draw(st.booleans()), request_id, seq)


@st.composite
def gaps(draw: st.DrawFn) -> GapFrame:
    first, last = sorted((draw(SEQS), draw(SEQS)))
    return GapFrame(draw(REQUEST_IDS), first, last)


FRAMES: dict[type, st.SearchStrategy[Any]] = {
    HelloFrame: st.builds(HelloFrame, version=POSITIVE, token=TEXT),
    StreamFrame: st.builds(
        StreamFrame,
        id=REQUEST_IDS,
        messages=st.lists(messages(), min_size=1, max_size=3),
        tools=st.lists(TOOL_DEFINITIONS, max_size=2),
        options=optional(OPTIONS),
        cancel_on_disconnect=st.booleans(),
    ),
    CancelFrame: st.builds(CancelFrame, id=REQUEST_IDS),
    ApproveFrame: st.builds(
        ApproveFrame,
        id=REQUEST_IDS,
        call=NONEMPTY,
        decision=st.sampled_from(["allow", "deny"]),
        reason=optional(TEXT),
    ),
    ReadyFrame: st.builds(ReadyFrame, version=POSITIVE, max_frame=POSITIVE, max_streams=POSITIVE),
    DeltaFrame: st.builds(
        DeltaFrame,
        id=REQUEST_IDS,
        channel=st.sampled_from(["content", "thinking"]),
        text=NONEMPTY,
        seq=optional(SEQS),
    ),
    ResultFrame: st.builds(
        ResultFrame, id=REQUEST_IDS, result=provider_results(), seq=optional(SEQS)
    ),
    AbortFrame: st.builds(
        AbortFrame, id=REQUEST_IDS, partial=provider_results(), seq=optional(SEQS)
    ),
    ErrorFrame: errors(),
    ApprovalFrame: st.builds(
        ApprovalFrame, id=REQUEST_IDS, call=TOOL_CALLS, reason=optional(TEXT), seq=optional(SEQS)
    ),
    WatchFrame: st.builds(
        WatchFrame, id=REQUEST_IDS, run_id=RUN_IDS, after=st.integers(0, 2**53 - 1)
    ),
    RunFrame: st.builds(RunFrame, id=REQUEST_IDS, run_id=RUN_IDS),
    GapFrame: gaps(),
    # The durable jobs' frames (their own tests: test_relay_job_frames.py).
    JobSubmitFrame: st.builds(JobSubmitFrame, id=REQUEST_IDS, job=JSON_OBJECTS),
    JobGetFrame: st.builds(JobGetFrame, id=REQUEST_IDS, job_id=JOB_IDS),
    JobCancelFrame: st.builds(JobCancelFrame, id=REQUEST_IDS, job_id=JOB_IDS),
    JobAnswerFrame: st.builds(
        JobAnswerFrame,
        id=REQUEST_IDS,
        job_id=JOB_IDS,
        answers=st.lists(JSON_OBJECTS, min_size=1, max_size=3),
    ),
    JobWatchFrame: st.builds(
        JobWatchFrame, id=REQUEST_IDS, job_id=JOB_IDS, after=st.integers(0, 2**53 - 1)
    ),
    JobFrame: st.builds(
        JobFrame, id=REQUEST_IDS, job=JSON_OBJECTS, created=optional(st.booleans())
    ),
    JobEventFrame: st.builds(JobEventFrame, id=REQUEST_IDS, event=JSON_OBJECTS),
}


def test_every_frame_type_has_a_strategy_and_a_side() -> None:
    assert set(FRAMES) == set(TAGS) == CLIENT_TYPES | SERVER_TYPES
    assert not CLIENT_TYPES & SERVER_TYPES
    assert {
        HelloFrame,
        StreamFrame,
        CancelFrame,
        ApproveFrame,
        WatchFrame,
        JobSubmitFrame,
        JobGetFrame,
        JobCancelFrame,
        JobAnswerFrame,
        JobWatchFrame,
    } == CLIENT_TYPES


# --------------------------------------------------------------------------- round trips


def decoders(cls: type) -> tuple[Any, Any]:
    """(the decoder of ``cls``'s side, the decoder of the other side)."""
    if cls in CLIENT_TYPES:
        return decode_client_frame, decode_server_frame
    return decode_server_frame, decode_client_frame


@pytest.mark.parametrize("cls", list(FRAMES), ids=lambda cls: cls.__name__)
@SETTINGS
@given(data=st.data())
def test_every_frame_round_trips(cls: type, data: st.DataObject) -> None:
    frame: Any = data.draw(FRAMES[cls])
    decode, _ = decoders(cls)
    text = encode_frame(frame)

    back: Any = decode(text)
    assert encode_frame(back) == text  # re-encoding is stable
    assert type(back) is cls
    assert back == frame
    assert decode(text.encode("utf-8")) == frame

    # "type" is the first key, and holds the frame's tag.
    plain = json.loads(text)
    assert next(iter(plain)) == "type"
    assert plain["type"] == TAGS[cls]
    assert text.startswith(f'{{"type":"{TAGS[cls]}"')


@pytest.mark.parametrize("cls", list(FRAMES), ids=lambda cls: cls.__name__)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_a_frame_is_refused_by_the_other_sides_decoder(cls: type, data: st.DataObject) -> None:
    frame = data.draw(FRAMES[cls])
    _, other = decoders(cls)
    with pytest.raises(ProtocolError) as info:
        other(encode_frame(frame))
    assert not isinstance(info.value, SizeLimitError)
    expected = Category.PROVIDER if other is decode_server_frame else Category.USER
    assert info.value.category is expected
    assert f"frame type {TAGS[cls]!r}" in str(info.value)


def test_the_type_key_may_come_anywhere_in_what_is_decoded() -> None:
    assert decode_client_frame('{"id":"r1","type":"cancel"}') == CancelFrame("r1")
    assert decode_server_frame(
        '{"text":"hé","channel":"thinking","id":"r1","type":"delta"}'
    ) == DeltaFrame("r1", "thinking", "hé")


def test_result_denied_survives_the_round_trip() -> None:
    calls = (ToolCall("c1", "rm", {"path": "/"}), ToolCall("c2", "ls"))
    frame = ResultFrame("r1", ProviderResult(calls=calls, denied={"c1": "refused by policy: rm"}))
    text = encode_frame(frame)
    assert json.loads(text)["result"]["denied"] == {"c1": "refused by policy: rm"}
    back = decode_server_frame(text)
    assert isinstance(back, ResultFrame)
    assert back.result.denied == {"c1": "refused by policy: rm"}
    assert back == frame


@pytest.mark.parametrize(("cls", "field"), [(ResultFrame, "result"), (AbortFrame, "partial")])
def test_a_results_model_and_response_id_are_never_sent_but_are_accepted(
    cls: type, field: str
) -> None:
    # A client from before the fields refuses unknown ones: a server leaves them out...
    named = ProviderResult(content="hi", model="gpt-4.1-mini", response_id="chatcmpl-1")
    sent = json.loads(encode_frame(cls("r1", named)))
    assert sent[field] == {"content": "hi"}
    assert decode_server_frame(encode_frame(cls("r1", named))) == cls(
        "r1", ProviderResult(content="hi")
    )
    # ... and a client still takes them, should a server send them.
    sent[field].update(model="gpt-4.1-mini", response_id="chatcmpl-1")
    assert decode_server_frame(json.dumps(sent)) == cls("r1", named)


@pytest.mark.parametrize(("cls", "field"), [(ResultFrame, "result"), (AbortFrame, "partial")])
def test_a_usages_reasoning_is_never_sent_but_is_accepted(cls: type, field: str) -> None:
    thought = ProviderResult(content="hi", usage=Usage(3, 5, reasoning=4))
    sent = json.loads(encode_frame(cls("r1", thought)))
    assert sent[field]["usage"] == {"prompt": 3, "completion": 5}
    assert decode_server_frame(json.dumps(sent)) == cls(
        "r1", ProviderResult(content="hi", usage=Usage(3, 5))
    )
    sent[field]["usage"]["reasoning"] = 4
    assert decode_server_frame(json.dumps(sent)) == cls("r1", thought)


@pytest.mark.parametrize(("cls", "field"), [(ResultFrame, "result"), (AbortFrame, "partial")])
def test_a_usages_cache_write_is_never_sent_but_is_accepted(cls: type, field: str) -> None:
    written = ProviderResult(content="hi", usage=Usage(30, 5, cached=10, cache_write=20))
    sent = json.loads(encode_frame(cls("r1", written)))
    assert sent[field]["usage"] == {"prompt": 30, "completion": 5, "cached": 10}
    sent[field]["usage"]["cache_write"] = 20
    assert decode_server_frame(json.dumps(sent)) == cls("r1", written)


@settings(max_examples=100)
@given(
    usage=st.none()
    | usages().flatmap(
        lambda u: st.sampled_from([u, Usage(u.prompt, u.completion, reasoning=u.completion)])
    ),
    cut=st.booleans(),
)
def test_a_frames_usage_counts_every_token_or_says_none_were_reported(
    usage: Usage | None, cut: bool
) -> None:
    # (Leaving the reasoning part out drops a breakdown, never a token of the counts.)
    result = ProviderResult(content="hi", usage=usage)
    frame = AbortFrame("r1", result) if cut else ResultFrame("r1", result)
    back = decode_server_frame(encode_frame(frame))
    got = back.partial.usage if isinstance(back, AbortFrame) else back.result.usage
    if usage is None:
        assert got is None  # unknown, not zero
    else:
        assert got is not None
        assert (got.prompt, got.completion, got.total, got.cached) == (
            usage.prompt,
            usage.completion,
            usage.total,
            usage.cached,
        )


def test_a_tool_messages_images_are_never_sent_but_are_accepted() -> None:
    # A server from before tool messages had images refuses a tool message with them: a client
    # leaves them out, and says so in the message's text...
    history = (
        Message.user("look", images=["iVBORw0KGgo="], id="u", created_at=0),
        Message.tool("c1", "draw", "a dot", images=["iVBORw0KGgo=", "R0lG"], id="t", created_at=0),
        Message.tool("c2", "draw", "", images=["R0lG"], id="s", created_at=0),
        Message.tool("c3", "add", "3", id="p", created_at=0),
    )
    sent = json.loads(encode_frame(StreamFrame("r1", history)))
    user, drawn, silent, plain = sent["messages"]
    assert user["images"] == ["iVBORw0KGgo="]  # a user message's images always went
    assert "images" not in drawn
    assert "images" not in silent
    assert drawn["content"] == "a dot\n\n[2 images the tool returned, not sent through the relay]"
    assert silent["content"] == "[1 image the tool returned, not sent through the relay]"
    assert plain == json.loads(encode_frame(StreamFrame("r1", history[3:])))["messages"][0]
    decoded = decode_client_frame(encode_frame(StreamFrame("r1", history)))
    assert isinstance(decoded, StreamFrame)
    assert [message.images for message in decoded.messages] == [("iVBORw0KGgo=",), (), (), ()]
    # ... and a server still takes them, should a client send them.
    drawn.update(content="a dot", images=["iVBORw0KGgo="])
    taken = decode_client_frame(json.dumps(sent))
    assert isinstance(taken, StreamFrame)
    assert taken.messages[1].images == ("iVBORw0KGgo=",)


def test_a_lone_surrogate_in_received_text_is_repaired_not_crashed_on() -> None:
    # As raw text (measured with surrogatepass) and as a JSON escape.
    raw = '{"type":"delta","id":"r1","channel":"content","text":"a\ud800b"}'
    escaped = '{"type":"delta","id":"r1","channel":"content","text":"a\\ud800b"}'
    for text in (raw, escaped):
        assert decode_server_frame(text) == DeltaFrame("r1", "content", "a\ufffdb")


def test_hello_of_another_version_still_decodes_the_server_refuses_it() -> None:
    # Versions are compared by the server (it answers error "version"), not by the decoder.
    assert decode_client_frame(f'{{"type":"hello","version":2,"token":"{TOKEN}"}}') == HelloFrame(
        2, TOKEN
    )


# --------------------------------------------------------------------------- strict refusals

CALL_JSON = '{"id":"c1","name":"ls"}'
USER_MESSAGE = '{"role":"user","content":"hi"}'

#: (text, a fragment the error message must contain), sent to decode_client_frame.
CLIENT_REFUSALS: list[tuple[str, str]] = [
    # unknown / missing / non-string type
    ('{"type":"bogus","id":"r1"}', "unknown client frame type 'bogus'"),
    ('{"id":"r1"}', 'must have a "type"'),
    ('{"type":null,"id":"r1"}', '"type" of a client frame must be a string, not null'),
    ('{"type":["cancel"],"id":"r1"}', "must be a string, not an array"),
    ('{"type":"Cancel","id":"r1"}', "unknown client frame type 'Cancel'"),
    # not an object, not JSON
    ('["cancel","r1"]', "must be a JSON object, not an array"),
    ('"cancel"', "must be a JSON object, not a string"),
    ("null", "must be a JSON object, not null"),
    ('{"type":"cancel","id":"r1"', "invalid JSON"),
    ('{"type":"cancel","id":"r1"} {}', "invalid JSON"),
    ("", "invalid JSON"),
    ('{"type":"cancel","id":"r1","id":"r2"}', "duplicate object key 'id'"),
    ('{"type":"ready","version":NaN}', "invalid JSON"),
    # unknown fields
    ('{"type":"cancel","id":"r1","extra":1}', "unknown field(s) 'extra'"),
    (
        '{"type":"stream","id":"r1","messages":[{"role":"user","content":"x","foo":1}]}',
        "$.messages[0]: unknown field(s) 'foo'",
    ),
    # missing fields
    ('{"type":"cancel"}', "$.id: required field missing"),
    ('{"type":"stream","id":"r1"}', "$.messages: required field missing"),
    ('{"type":"approve","id":"r1","call":"c1"}', "$.decision: required field missing"),
    ('{"type":"hello","token":"t"}', "$.version: required field missing"),
    # wrong types
    ('{"type":"hello","version":true,"token":"t"}', "$.version: expected an integer, got bool"),
    ('{"type":"hello","version":1.0,"token":"t"}', "$.version: expected an integer"),
    ('{"type":"hello","version":1,"token":5}', "$.token: expected a string, got int"),
    ('{"type":"cancel","id":5}', "$.id: expected a string, got int"),
    ('{"type":"cancel","id":null}', "$.id: expected a string"),
    ('{"type":"stream","id":"r1","messages":"hi"}', "$.messages: expected an array"),
    (
        f'{{"type":"stream","id":"r1","messages":[{USER_MESSAGE}],"tools":{{}}}}',
        "$.tools: expected an array",
    ),
    (
        f'{{"type":"stream","id":"r1","messages":[{USER_MESSAGE}],"options":[]}}',
        "$.options",
    ),
    ('{"type":"approve","id":"r1","call":7,"decision":"allow"}', "$.call: expected a string"),
    (
        '{"type":"approve","id":"r1","call":"c1","decision":"allow","reason":1}',
        "$.reason",
    ),
    # values breaking an invariant
    ('{"type":"hello","version":0,"token":"t"}', "HelloFrame.version must be an integer >= 1"),
    ('{"type":"cancel","id":""}', f"CancelFrame.id must be a string of 1 to {MAX_REQUEST_ID}"),
    (
        f'{{"type":"cancel","id":"{"x" * (MAX_REQUEST_ID + 1)}"}}',
        f"CancelFrame.id must be a string of 1 to {MAX_REQUEST_ID}",
    ),
    ('{"type":"stream","id":"r1","messages":[]}', "StreamFrame.messages must not be empty"),
    (
        f'{{"type":"stream","id":"","messages":[{USER_MESSAGE}]}}',
        "StreamFrame.id must be a string of 1 to",
    ),
    (
        '{"type":"approve","id":"r1","call":"c1","decision":"maybe"}',
        "ApproveFrame.decision must be 'allow' or 'deny'",
    ),
    (
        '{"type":"approve","id":"r1","call":"c1","decision":"ALLOW"}',
        "ApproveFrame.decision must be 'allow' or 'deny'",
    ),
    ('{"type":"approve","id":"r1","call":"","decision":"deny"}', "ApproveFrame.call must be"),
    # a server frame sent to the server
    ('{"type":"ready","version":1,"max_frame":10,"max_streams":1}', "frame type 'ready'"),
    ('{"type":"delta","id":"r1","channel":"content","text":"x"}', "frame type 'delta'"),
]

#: (text, a fragment the error message must contain), sent to decode_server_frame.
SERVER_REFUSALS: list[tuple[str, str]] = [
    ('{"type":"bogus"}', "unknown server frame type 'bogus'"),
    ('{"version":1,"max_frame":1,"max_streams":1}', 'must have a "type"'),
    ('{"type":1}', '"type" of a server frame must be a string, not an integer'),
    ("[]", "must be a JSON object, not an array"),
    ("42", "must be a JSON object, not an integer"),
    ("{", "invalid JSON"),
    ("\xff", "invalid JSON"),
    (b"\xff\xfe", "not UTF-8"),  # type: ignore[list-item]
    ('{"type":"ready","version":1,"max_frame":1,"max_streams":1,"x":0}', "unknown field(s) 'x'"),
    ('{"type":"ready","version":1,"max_frame":1}', "$.max_streams: required field missing"),
    (
        '{"type":"ready","version":1,"max_frame":true,"max_streams":1}',
        "$.max_frame: expected an integer, got bool",
    ),
    ('{"type":"ready","version":1,"max_frame":0,"max_streams":1}', "ReadyFrame.max_frame must be"),
    (
        '{"type":"delta","id":"r1","channel":"content","text":""}',
        "DeltaFrame.text must be a non-empty",
    ),
    ('{"type":"delta","id":"r1","channel":"content","text":3}', "$.text: expected a string"),
    (
        '{"type":"delta","id":"r1","channel":"reasoning","text":"x"}',
        "DeltaFrame.channel must be 'content' or 'thinking'",
    ),
    ('{"type":"delta","channel":"content","text":"x"}', "$.id: required field missing"),
    (
        '{"type":"result","id":"r1","result":{"denied":{"c9":"no"}}}',
        "ProviderResult.denied names a call the result does not hold",
    ),
    (
        f'{{"type":"result","id":"r1","result":{{"calls":[{CALL_JSON}],"denied":{{"c2":"no"}}}}}}',
        "ProviderResult.denied names a call the result does not hold",
    ),
    (
        f'{{"type":"result","id":"r1","result":{{"calls":[{CALL_JSON}],"denied":{{"c1":""}}}}}}',
        "ProviderResult.denied must map call ids to non-empty strings",
    ),
    ('{"type":"result","id":"r1"}', "$.result: required field missing"),
    ('{"type":"result","id":"r1","result":"done"}', "$.result"),
    ('{"type":"abort","id":"r1","partial":{},"extra":1}', "unknown field(s) 'extra'"),
    (
        '{"type":"error","code":"upstream","message":"sk-upstream said: quota for acct 42"}',
        "ErrorFrame.message must be the fixed text of its code",
    ),
    (
        '{"type":"error","code":"upstream","message":"unauthorized"}',
        "ErrorFrame.message must be the fixed text of its code",
    ),
    ('{"type":"error","code":"teapot","message":"teapot"}', "ErrorFrame.code must be one of"),
    ('{"type":"error","code":"upstream"}', "$.message: required field missing"),
    (
        '{"type":"error","code":"upstream","message":"relay provider failed","retryable":1}',
        "$.retryable: expected true or false, got int",
    ),
    (
        '{"type":"error","code":"upstream","message":"relay provider failed","id":""}',
        "ErrorFrame.id must be a string of 1 to",
    ),
    # (codec words a str where an object is due as "'str' object has no attribute 'keys'")
    ('{"type":"approval","id":"r1","call":"c1"}', "invalid ApprovalFrame: $.call: "),
    ('{"type":"approval","id":"r1","call":{"id":"","name":"ls"}}', "ToolCall.id must be"),
    # a client frame sent to the client
    (f'{{"type":"hello","version":1,"token":"{TOKEN}"}}', "frame type 'hello'"),
    ('{"type":"cancel","id":"r1"}', "frame type 'cancel'"),
]


def refusal(decode: Any, text: str | bytes, category: Category) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decode(text)
    error = info.value
    assert not isinstance(error, SizeLimitError)
    assert error.category is category
    return error


@pytest.mark.parametrize(("text", "fragment"), CLIENT_REFUSALS)
def test_client_frames_are_refused_strictly(text: str, fragment: str) -> None:
    error = refusal(decode_client_frame, text, Category.USER)
    assert fragment in str(error)


@pytest.mark.parametrize(("text", "fragment"), SERVER_REFUSALS)
def test_server_frames_are_refused_strictly(text: str | bytes, fragment: str) -> None:
    error = refusal(decode_server_frame, text, Category.PROVIDER)
    assert fragment in str(error)


def test_an_upstream_message_is_never_echoed_by_the_refusal() -> None:
    leaked = "sk-upstream-secret-in-a-vendor-message"
    error = refusal(
        decode_server_frame,
        f'{{"type":"error","code":"upstream","message":"{leaked}"}}',
        Category.PROVIDER,
    )
    assert leaked not in str(error)
    assert leaked not in repr(error)


def test_an_unknown_type_is_echoed_only_in_part() -> None:
    long_type = "x" * 5000
    error = refusal(decode_client_frame, f'{{"type":"{long_type}"}}', Category.USER)
    assert "x" * 40 in str(error)
    assert "x" * 41 not in str(error)


# --------------------------------------------------------------------------- request ids


@pytest.mark.parametrize("cls", [CancelFrame, DeltaFrame, ApproveFrame, ErrorFrame])
def test_request_id_bounds_are_enforced_in_characters(cls: type) -> None:
    def build(request_id: str) -> Any:
        if cls is CancelFrame:
            return CancelFrame(request_id)
        if cls is DeltaFrame:
            return DeltaFrame(request_id, "content", "x")
        if cls is ApproveFrame:
            return ApproveFrame(request_id, "c1", "allow")
        return error_frame("invalid", request_id)

    longest = "é" * MAX_REQUEST_ID  # 2 bytes each: the bound counts characters
    frame = build(longest)
    decode, _ = decoders(cls)
    assert decode(encode_frame(frame)) == frame
    for bad in ("", "é" * (MAX_REQUEST_ID + 1)):
        with pytest.raises(ValidationError, match=f"id must be a string of 1 to {MAX_REQUEST_ID}"):
            build(bad)


# --------------------------------------------------------------------------- size limit


def test_a_frame_over_the_limit_is_refused_before_parsing() -> None:
    malformed = '{"type":"cancel","id":' + "[" * 200  # not JSON, and too deep
    for decode, category in (
        (decode_client_frame, Category.USER),
        (decode_server_frame, Category.PROVIDER),
    ):
        # Under a big enough limit the same text is a JSON error...
        with pytest.raises(ProtocolError) as parsed:
            decode(malformed, max_bytes=len(malformed))
        assert not isinstance(parsed.value, SizeLimitError)
        assert "invalid JSON" in str(parsed.value)
        # ... one byte under, the size is refused first.
        for text in (malformed, malformed.encode("utf-8")):
            with pytest.raises(SizeLimitError) as info:
                decode(text, max_bytes=len(malformed) - 1)
            assert info.value.category is category
            assert info.value.code == "too_large"
            assert info.value.limit == len(malformed) - 1
            assert info.value.size == len(malformed)


def test_the_limit_is_measured_in_utf8_bytes() -> None:
    frame = DeltaFrame("r1", "content", "日本語€😀" * 10)
    text = encode_frame(frame)
    size = len(text.encode("utf-8"))
    assert size > len(text)  # multi-byte characters count fully
    for data in (text, text.encode("utf-8")):
        assert decode_server_frame(data, max_bytes=size) == frame  # exactly at the limit
        with pytest.raises(SizeLimitError) as info:
            decode_server_frame(data, max_bytes=size - 1)
        assert info.value.size == size
    # Fewer characters than the limit, more bytes: refused.
    with pytest.raises(SizeLimitError):
        decode_server_frame(text, max_bytes=len(text))


def test_a_frame_exactly_at_the_default_limit_is_accepted() -> None:
    empty = encode_frame(HelloFrame(1, ""))
    pad = DEFAULT_MAX_FRAME - len(empty.encode("utf-8"))
    token = "€" * (pad // 3) + "a" * (pad % 3)
    text = encode_frame(HelloFrame(1, token))
    assert len(text.encode("utf-8")) == DEFAULT_MAX_FRAME
    assert decode_client_frame(text) == HelloFrame(1, token)
    with pytest.raises(SizeLimitError) as info:
        decode_client_frame(encode_frame(HelloFrame(1, token + "a")))
    assert info.value.limit == DEFAULT_MAX_FRAME
    assert info.value.category is Category.USER


def test_a_huge_string_is_refused_with_a_lower_bound_of_its_size() -> None:
    text = "é" * 1000
    with pytest.raises(SizeLimitError) as info:
        decode_client_frame(text, max_bytes=999)
    assert 1000 <= info.value.size <= 2000
    # A raw lone surrogate is measured too, not a UnicodeEncodeError.
    with pytest.raises(SizeLimitError):
        decode_client_frame('{"type":"cancel","id":"\ud800"}', max_bytes=20)


# --------------------------------------------------------------------------- nesting


@pytest.mark.parametrize("decode", [decode_client_frame, decode_server_frame])
@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "[" * 300 + "]" * 300,
        '{"type":"stream","id":"r1","messages":[{"role":"user","content":"x"}],'
        '"options":{"extra":{"a":' + "[" * 300 + "]" * 300 + "}}}",
        '{"type":' + '{"a":' * 50_000 + "1" + "}" * 50_000 + "}",
    ],
    ids=["unclosed", "closed", "inside-a-field", "objects"],
)
def test_deep_nesting_is_refused_cleanly(decode: Any, text: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(text)
    assert "nested deeper than" in str(info.value)
    category = Category.USER if decode is decode_client_frame else Category.PROVIDER
    assert info.value.category is category


def test_deep_nesting_in_an_http_request_is_refused_cleanly() -> None:
    with pytest.raises(ProtocolError, match="nested deeper than") as info:
        decode_http_request(b"[" * 100_000)
    assert info.value.category is Category.USER


# --------------------------------------------------------------------------- http request


@SETTINGS
@given(
    msgs=st.lists(messages(), min_size=1, max_size=3),
    tools=st.lists(TOOL_DEFINITIONS, max_size=2),
    options=optional(OPTIONS),
)
def test_http_request_decodes_messages_tools_and_options(
    msgs: list[Message], tools: list[ToolDefinition], options: ProviderOptions | None
) -> None:
    # The body a client sends is a stream frame's fields without type and id.
    frame = StreamFrame("r1", msgs, tools, options)
    body = json.loads(encode_frame(frame))
    del body["type"], body["id"]
    request = decode_http_request(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    assert request == HttpRequest(msgs, tools, options)


def test_http_request_tools_and_options_are_optional() -> None:
    request = decode_http_request(b'{"messages":[{"role":"user","content":"hi","id":"m1"}]}')
    assert request.tools == ()
    assert request.options is None
    assert request.messages[0].content == "hi"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"messages":[{"role":"user","content":"hi"}],"id":"r1"}', "unknown field(s) 'id'"),
        (
            b'{"type":"stream","messages":[{"role":"user","content":"hi"}]}',
            "unknown field(s) 'type'",
        ),
        (b'{"messages":[{"role":"user","content":"hi"}],"model":"x"}', "unknown field(s)"),
        (b'{"tools":[]}', "$.messages: required field missing"),
        (b'{"messages":[]}', "HttpRequest.messages must not be empty"),
        (b'{"messages":{}}', "$.messages: expected an array"),
        (b'[{"role":"user","content":"hi"}]', "must be a JSON object, not an array"),
        (b'{"messages":', "invalid JSON"),
        (b"\xc3\x28", "not UTF-8"),
    ],
)
def test_http_request_is_refused_strictly(body: bytes, fragment: str) -> None:
    error = refusal(decode_http_request, body, Category.USER)
    assert fragment in str(error)


# --------------------------------------------------------------------------- the token


BAD_HELLOS = [
    f'{{"type":"hello","version":1,"token":"{TOKEN}","extra":true}}',
    f'{{"type":"hello","version":true,"token":"{TOKEN}"}}',
    f'{{"type":"hello","version":0,"token":"{TOKEN}"}}',
    f'{{"type":"hello","version":"{TOKEN}","token":"{TOKEN}"}}',
    f'{{"type":"hello","token":"{TOKEN}"}}',
    f'{{"type":"hello","version":1,"token":["{TOKEN}"]}}',
    f'{{"type":"hello","version":1,"token":{{"{TOKEN}":1}}}}',
    f'{{"type":"hello","version":1,"token":"{TOKEN}","token":"{TOKEN}"}}',
    f'{{"type":"hello","version":1,"token":"{TOKEN}"',
    f'{{"type":"hullo","version":1,"token":"{TOKEN}"}}',
]


def test_hello_repr_never_shows_the_token() -> None:
    hello = HelloFrame(1, TOKEN)
    assert TOKEN not in repr(hello)
    assert TOKEN not in str(hello)
    assert TOKEN not in repr([hello])
    assert "<redacted>" in repr(hello)
    assert hello.token == TOKEN  # still there to be checked


@pytest.mark.parametrize("text", BAD_HELLOS)
def test_a_refused_hello_never_shows_the_token(text: str) -> None:
    error = refusal(decode_client_frame, text, Category.USER)
    assert TOKEN not in str(error)
    assert TOKEN not in repr(error)
    assert "s3cret" not in str(error)


def test_a_hello_refused_by_size_never_shows_the_token() -> None:
    text = encode_frame(HelloFrame(1, TOKEN))
    with pytest.raises(SizeLimitError) as info:
        decode_client_frame(text, max_bytes=10)
    assert TOKEN not in str(info.value)


# --------------------------------------------------------------------------- error frames


@pytest.mark.parametrize("code", sorted(ERROR_MESSAGES))
def test_error_frame_has_the_fixed_message_and_retry_hint(code: str) -> None:
    for request_id in (None, "r1"):
        frame = error_frame(code, request_id)
        assert frame.code == code
        assert frame.message == ERROR_MESSAGES[code]
        assert frame.retryable is (code in RETRYABLE)
        assert frame.id == request_id
        back = decode_server_frame(encode_frame(frame))
        assert back == frame
        plain = json.loads(encode_frame(frame))
        assert ("id" in plain) is (request_id is not None)


def test_the_retryable_codes_are_exactly_these() -> None:
    assert {code for code in ERROR_MESSAGES if error_frame(code).retryable} == RETRYABLE


def test_error_frame_refuses_an_unknown_code() -> None:
    with pytest.raises(ValidationError, match="unknown relay error code 'teapot'"):
        error_frame("teapot")


def test_an_error_cannot_be_built_with_another_message() -> None:
    with pytest.raises(ValidationError, match="fixed text of its code"):
        ErrorFrame("upstream", "the vendor said: invalid key sk-123")
    with pytest.raises(ValidationError, match="fixed text of its code"):
        ErrorFrame("upstream", ERROR_MESSAGES["unauthorized"])
    with pytest.raises(ValidationError, match=re.escape("ErrorFrame.code must be one of")):
        ErrorFrame("teapot", "teapot")


# --------------------------------------------------------------------------- construction


def test_frames_check_their_field_types_at_construction() -> None:
    user = Message.user("hi")
    with pytest.raises(ValidationError, match=r"messages\[0\] must be a Message, not int"):
        StreamFrame("r1", [1])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="messages must be a sequence of Message"):
        HttpRequest("hi")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"tools\[0\] must be a ToolDefinition"):
        StreamFrame("r1", [user], ["search"])  # type: ignore[list-item]
    with pytest.raises(
        ValidationError, match=re.escape("StreamFrame.options must be a ProviderOptions")
    ):
        StreamFrame("r1", [user], options={"think": True})  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match=re.escape("ResultFrame.result must be a ProviderResult")
    ):
        ResultFrame("r1", "done")  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match=re.escape("AbortFrame.partial must be a ProviderResult")
    ):
        AbortFrame("r1", None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=re.escape("ApprovalFrame.call must be a ToolCall")):
        ApprovalFrame("r1", "c1")  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match=re.escape("ErrorFrame.retryable must be true or false")
    ):
        ErrorFrame("upstream", ERROR_MESSAGES["upstream"], 1)  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match=re.escape("ApproveFrame.call must be a non-empty string")
    ):
        ApproveFrame("r1", "", "allow")
    with pytest.raises(ValidationError, match=re.escape("HelloFrame.token must be a string")):
        HelloFrame(1, None)  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match=re.escape("HelloFrame.version must be an integer >= 1")
    ):
        HelloFrame(True, "t")
    with pytest.raises(
        ValidationError, match=re.escape("ReadyFrame.max_streams must be an integer >= 1")
    ):
        ReadyFrame(1, 10, 0)
    # Any iterable of the right items is accepted, and stored as a tuple.
    stream = StreamFrame("r1", iter([user]), (t for t in [ToolDefinition("ls")]))
    assert stream.messages == (user,)
    assert stream.tools == (ToolDefinition("ls"),)


def test_encode_frame_refuses_what_is_not_a_frame() -> None:
    with pytest.raises(ValidationError, match="not a relay frame: HttpRequest"):
        encode_frame(HttpRequest([Message.user("hi")]))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not a relay frame: ToolCall"):
        encode_frame(ToolCall("c1", "ls"))  # type: ignore[arg-type]


def test_encoded_frames_omit_defaults_and_are_compact() -> None:
    text = encode_frame(ApproveFrame("r1", "c1", "deny"))
    assert text == '{"type":"approve","id":"r1","call":"c1","decision":"deny"}'
    assert loads(text) == json.loads(text)
    text = encode_frame(ErrorFrame("budget", ERROR_MESSAGES["budget"]))
    assert (
        text
        == '{"type":"error","code":"budget","message":"the token budget of this token is spent"}'
    )


# -- the delta fast paths agree with the general ones -------------------------------------------


@given(
    st.text(min_size=1, max_size=MAX_REQUEST_ID),
    st.sampled_from(["content", "thinking"]),
    st.text(min_size=1, max_size=200),
    optional(SEQS),
)
@settings(max_examples=300)
def test_delta_fast_paths_agree_with_the_codec(
    request_id: str, channel: str, text: str, seq: int | None
) -> None:
    from protocols._json import dumps
    from protocols.codec import from_json, to_json
    from protocols.relay import _fast_delta

    frame = DeltaFrame(request_id, channel, text, seq)
    general = dumps({"type": "delta", **to_json(frame)})  # type: ignore[dict-item]
    assert encode_frame(frame) == general
    fast = _fast_delta(general)
    data = json.loads(general)
    del data["type"]
    expected = from_json(DeltaFrame, data)
    assert decode_server_frame(general) == expected
    if fast is not None:  # taken only when it is sure; then it is exactly the general answer
        assert fast == expected


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"delta","id":"a","channel":"content","text":"x","text":"y"}',
        '{"type":"delta","id":"a","channel":"content","text":"x","extra":1}',
        '{"type":"delta","id":"a","channel":"content","text":""}',
        '{"type":"delta","id":"a","channel":"speech","text":"x"}',
        '{"type":"delta","id":"","channel":"content","text":"x"}',
        '{"type":"delta","id":"a","channel":"content","text":5}',
        '{"type":"delta","id":"a","channel":"content"}',
        '{"type":"delta","id":"a","channel":"content","text":"x","seq":0}',
        '{"type":"delta","id":"a","channel":"content","text":"x","seq":true}',
        '{"type":"delta","id":"a","channel":"content","text":"x","seq":1.5}',
        '{"type":"delta","id":"a","channel":"content","text":"x","seq":"1"}',
        '{"type":"delta","id":"a","channel":"content","text":"x","seq":1,"seq":2}',
        '{"type":"delta","id":"a","channel":"content","text":"x","seq":9007199254740992}',
    ],
)
def test_the_delta_fast_path_never_accepts_what_the_codec_refuses(text: str) -> None:
    from protocols.relay import _fast_delta

    assert _fast_delta(text) is None
    with pytest.raises(ProtocolError):
        decode_server_frame(text)


# -- text a peer controls, in a log line --------------------------------------------------------


@given(st.text(max_size=400), st.integers(min_value=1, max_value=300))
def test_loggable_text_is_one_printable_line_of_bounded_length(text: str, limit: int) -> None:
    from protocols.relay import loggable

    shown = loggable(text, limit)
    assert shown.isprintable()  # no newline, escape, bidi override, NUL...: no forged lines
    assert len(shown) <= 10 * limit + 60  # each character escapes to at most \U0010ffff
    if len(text) <= limit:
        assert ast.literal_eval(shown) == text  # nothing lost: it is the text's repr


def test_loggable_escapes_what_could_forge_or_restyle_a_line() -> None:
    from protocols.relay import loggable

    forged = "a\nINFO fake\r\x1b[31m\u2028\u202e\x85"
    shown = loggable(forged)
    assert "\n" not in shown
    assert "\x1b" not in shown
    assert "\u202e" not in shown
    assert shown == repr(forged)
    assert loggable("x" * 300) == repr("x" * 200) + "... (100 more characters)"


# -- host names and origins ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("LocalHost.", ("localhost", None)),
        ("[::1]:8000", ("::1", 8000)),
        ("[0:0::1]", ("::1", None)),
        ("relay.example.com", ("relay.example.com", None)),
        ("relay.example.com:443", ("relay.example.com", 443)),
        ("::1", None),  # an IPv6 address needs its brackets
        ("name:", None),
        ("name:0", None),
        ("name:65536", None),
        ("name:8o", None),
        ("a b", None),
        ("a/b", None),
        ("user@host", None),
        ("", None),
        ("-bad.example", None),
        ("é.example", None),
        ("[zz]:1", None),
        ("1.2.3.4:5:6", None),
        (None, None),
    ],
)
def test_split_host(value: Any, parsed: tuple[str, int | None] | None) -> None:
    from protocols.relay import split_host

    assert split_host(value) == parsed


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("http://127.0.0.1:8000", ("http", "127.0.0.1", 8000)),
        ("https://relay.example.com/", ("https", "relay.example.com", 443)),
        ("HTTP://Relay.Example.com", ("http", "relay.example.com", 80)),
        ("http://[::1]:8000", ("http", "::1", 8000)),
        ("null", None),
        ("file://x", None),
        ("relay.example.com", None),
        ("https://relay.example.com/app", None),
        ("https://user@relay.example.com", None),
        ("https://relay.example.com?x", None),
        ("https://", None),
    ],
)
def test_parse_origin(value: str, parsed: tuple[str, str, int] | None) -> None:
    from protocols.relay import parse_origin

    assert parse_origin(value) == parsed


def test_a_loopback_relay_answers_to_its_loopback_names_with_its_port() -> None:
    from protocols.relay import HostPolicy

    for address in ("127.0.0.1", "::1", "127.0.0.2"):
        policy = HostPolicy.build((address, 8000))
        assert {"localhost", "127.0.0.1", "::1"} <= policy.names
        assert policy.host_ok("localhost:8000")
        assert policy.host_ok("[::1]:8000")
        assert policy.host_ok(None)  # not a browser
        assert not policy.host_ok("evil.example:8000")  # a rebound name
        assert not policy.host_ok("127.0.0.1:8000 evil")
        assert policy.origin_ok("http://localhost:8000")
        assert policy.origin_ok("https://127.0.0.1:8000")
        assert not policy.origin_ok("http://localhost:3000")  # another page on this machine
        assert not policy.origin_ok("http://evil.example:8000")
        assert not policy.origin_ok("null")
        assert policy.origin_ok(None)


def test_a_relay_on_another_address_answers_to_that_address_and_its_allowed_hosts() -> None:
    from protocols.relay import HostPolicy

    policy = HostPolicy.build(("192.0.2.7", 8000), ["relay.example.com", "other.example:9000"])
    assert policy.names == {"192.0.2.7", "relay.example.com", "other.example"}
    assert not policy.host_ok("localhost:8000")
    assert policy.origin_ok("https://relay.example.com")  # a TLS proxy in front
    assert policy.origin_ok("http://relay.example.com:8000")
    assert policy.origin_ok("https://other.example:9000")
    assert not policy.origin_ok("https://other.example")
    assert not policy.origin_ok("http://localhost:8000")
    explicit = HostPolicy.build(("192.0.2.7", 8000), ["relay.example.com"], ["https://app.example"])
    assert explicit.origin_ok("https://app.example")
    assert not explicit.origin_ok("https://relay.example.com")  # a list replaces the default


@pytest.mark.parametrize(
    ("hosts", "origins"),
    [(["a b"], None), (["x:0"], None), ([], ["relay.example.com"]), ([], ["https://a/b"])],
)
def test_a_malformed_host_or_origin_is_refused_by_name(
    hosts: list[str], origins: list[str] | None
) -> None:
    from protocols.relay import HostPolicy

    with pytest.raises(ValidationError, match="not a"):
        HostPolicy.build(("127.0.0.1", 8000), hosts, origins)
