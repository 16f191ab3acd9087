"""The durable jobs' websocket frames of protocols.relay (``job_submit``, ``job_get``,
``job_cancel``, ``job_answer``, ``job_watch``; ``job``, ``job_event``): strict decoding, and the
pure pieces the server shares with the HTTP routes (protocols.relay_jobs) -- no event loop."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import Category, ProtocolError
from protocols.live import TERMINAL, RunEvent, event_to_json
from protocols.relay import (
    ERROR_MESSAGES,
    MAX_JOB_ANSWERS,
    JobAnswerFrame,
    JobCancelFrame,
    JobEventFrame,
    JobFrame,
    JobGetFrame,
    JobSubmitFrame,
    JobWatchFrame,
    decode_client_frame,
    decode_server_frame,
    encode_frame,
    error_frame,
)
from protocols.relay_jobs import (
    decode_answers,
    decode_submit,
    job_event_frame,
    shown_event,
)

JOB_IDS = st.from_regex(r"[A-Za-z0-9_-]{1,128}", fullmatch=True)


def client(data: dict[str, Any]) -> Any:
    return decode_client_frame(json.dumps(data))


def refused(data: dict[str, Any], *, server: bool = False) -> ProtocolError:
    decode = decode_server_frame if server else decode_client_frame
    with pytest.raises(ProtocolError) as caught:
        decode(json.dumps(data))
    return caught.value


def test_each_client_job_frame_decodes_to_its_class() -> None:
    assert client({"type": "job_submit", "id": "1", "job": {"agent": "a", "input": "x"}}) == (
        JobSubmitFrame("1", {"agent": "a", "input": "x"})
    )
    assert client({"type": "job_get", "id": "2", "job_id": "j_1"}) == JobGetFrame("2", "j_1")
    assert client({"type": "job_cancel", "id": "3", "job_id": "j-1"}) == JobCancelFrame("3", "j-1")
    assert client(
        {"type": "job_answer", "id": "4", "job_id": "j", "answers": [{"call_id": "c"}]}
    ) == JobAnswerFrame("4", "j", [{"call_id": "c"}])
    assert client({"type": "job_watch", "id": "5", "job_id": "j"}) == JobWatchFrame("5", "j", 0)
    assert client({"type": "job_watch", "id": "5", "job_id": "j", "after": 7}).after == 7


@pytest.mark.parametrize(
    "data",
    [
        {"type": "job_submit", "id": "1"},  # no job
        {"type": "job_submit", "id": "1", "job": ["agent"]},  # not an object
        {"type": "job_submit", "id": "1", "job": {}, "key": "k"},  # unknown field
        {"type": "job_submit", "id": "", "job": {}},  # empty request id
        {"type": "job_get", "id": "1"},  # no job_id
        {"type": "job_get", "id": "1", "job_id": ""},
        {"type": "job_get", "id": "1", "job_id": "../etc"},  # not an id
        {"type": "job_get", "id": "1", "job_id": "j" * 129},  # too long
        {"type": "job_get", "id": "1", "job_id": 7},
        {"type": "job_cancel", "id": "1", "job_id": "j", "force": True},
        {"type": "job_answer", "id": "1", "job_id": "j", "answers": []},
        {"type": "job_answer", "id": "1", "job_id": "j", "answers": {"call_id": "c"}},
        {"type": "job_answer", "id": "1", "job_id": "j", "answers": ["c"]},
        {
            "type": "job_answer",
            "id": "1",
            "job_id": "j",
            "answers": [{"call_id": "c"}] * (MAX_JOB_ANSWERS + 1),
        },
        {"type": "job_watch", "id": "1", "job_id": "j", "after": -1},
        {"type": "job_watch", "id": "1", "job_id": "j", "after": True},
        {"type": "job_watch", "id": "1", "job_id": "j", "after": 2**53},
        {"type": "job_watch", "id": "1", "job_id": "j", "after": 1.5},
    ],
)
def test_a_malformed_client_job_frame_is_refused_as_the_clients_fault(
    data: dict[str, Any],
) -> None:
    assert refused(data).category is Category.USER


@pytest.mark.parametrize(
    "data",
    [
        {"type": "job", "id": "1"},
        {"type": "job", "id": "1", "job": []},
        {"type": "job", "id": "1", "job": {}, "created": 1},
        {"type": "job", "id": "1", "job": {}, "extra": None},
        {"type": "job_event", "id": "1"},
        {"type": "job_event", "id": "1", "event": "finished"},
    ],
)
def test_a_malformed_server_job_frame_is_refused_as_the_servers_fault(
    data: dict[str, Any],
) -> None:
    assert refused(data, server=True).category is Category.PROVIDER


def test_a_client_frame_is_not_a_server_frame_and_back() -> None:
    refused({"type": "job", "id": "1", "job": {}})
    refused({"type": "job_get", "id": "1", "job_id": "j"}, server=True)


def test_a_job_frame_says_created_only_when_it_answers_a_submit() -> None:
    assert json.loads(encode_frame(JobFrame("1", {"id": "j"}))) == {
        "type": "job",
        "id": "1",
        "job": {"id": "j"},
    }
    assert json.loads(encode_frame(JobFrame("1", {}, False)))["created"] is False


@given(
    st.text(min_size=1, max_size=20),
    JOB_IDS,
    st.integers(0, 2**53 - 1),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
)
@settings(max_examples=50, deadline=None)
def test_job_frames_round_trip(request: str, job_id: str, after: int, job: dict[str, Any]) -> None:
    for frame in (
        JobSubmitFrame(request, job),
        JobGetFrame(request, job_id),
        JobCancelFrame(request, job_id),
        JobWatchFrame(request, job_id, after),
        JobAnswerFrame(request, job_id, [job]),
    ):
        assert decode_client_frame(encode_frame(frame)) == frame
    for server in (JobFrame(request, job), JobFrame(request, job, True)):
        assert decode_server_frame(encode_frame(server)) == server


@pytest.mark.parametrize(
    "kind", ["started", "content", "approval_requested", *sorted(TERMINAL), "rewind"]
)
def test_a_job_event_frame_carries_the_events_json_and_a_terminal_one_ends_the_watch(
    kind: str,
) -> None:
    event = RunEvent("job_1", 3, kind, 12.5, {})
    frame = job_event_frame(event, "w")
    assert frame.event == event_to_json(event)
    assert decode_server_frame(encode_frame(frame)) == frame
    assert frame.terminal is (kind in TERMINAL)


def test_a_failed_events_frame_hides_the_exceptions_message_as_the_sse_route_does() -> None:
    secret = "upstream said: key sk-live-123 refused"
    event = RunEvent(
        "job_1",
        9,
        "failed",
        1.0,
        {"error": {"type": "ProviderError", "code": "auth", "message": secret}},
    )
    frame = job_event_frame(event, "w")
    assert frame == JobEventFrame("w", event_to_json(shown_event(event)))
    assert frame.event["data"]["error"]["type"] == "ProviderError"
    assert frame.event["data"]["error"]["code"] == "auth"
    assert secret not in encode_frame(frame)


def test_a_submit_and_answers_decode_the_same_from_a_frame_as_from_a_body() -> None:
    job = {"agent": "calculator", "input": "What is 19 + 23?", "key": "k1"}
    from_frame = decode_submit(job, owner="alice", max_input=1024)
    from_body = decode_submit(json.dumps(job).encode(), owner="alice", max_input=1024)
    assert from_frame.key == from_body.key
    assert from_frame.job.agent == from_body.job.agent
    assert from_frame.job.metadata == from_body.job.metadata
    assert [m.content for m in from_frame.job.input] == [m.content for m in from_body.job.input]
    with pytest.raises(ProtocolError) as caught:
        decode_submit({"agent": "a", "input": "x", "p": 1}, owner="alice")
    assert caught.value.code == "invalid"
    with pytest.raises(ProtocolError) as caught:
        decode_submit({"agent": "a", "input": "x" * 100}, owner="alice", max_input=10)
    assert caught.value.code == "too_large"
    answers = [{"call_id": "c1", "allow": True}, {"call_id": "c2", "allow": False, "reason": "no"}]
    assert decode_answers({"answers": answers}) == decode_answers(
        json.dumps({"answers": answers}).encode()
    )


def test_every_job_error_code_has_a_fixed_message() -> None:
    for code in (
        "no_jobs",
        "not_found",
        "unknown_agent",
        "key_conflict",
        "key_purged",
        "conflict",
        "ended",
        "unavailable",
        "internal",
    ):
        frame = error_frame(code, "r1")
        assert frame.message == ERROR_MESSAGES[code]
        assert decode_server_frame(encode_frame(frame)) == frame
    assert error_frame("unavailable").retryable
    assert not error_frame("not_found").retryable
