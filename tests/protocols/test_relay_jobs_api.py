"""``protocols.relay_jobs``: the relay's jobs API without an event loop -- its routes, the
requests it takes (strictly), the per-owner names of keys, and what a job and its events show
their owner."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.codec import from_json, to_json
from protocols.errors import ProtocolError
from protocols.jobs import (
    AgentJob,
    ApprovalAnswer,
    ApprovalRequest,
    InputEntry,
    JobRecord,
    JobStatus,
    TerminalEntry,
)
from protocols.live import JournalEvents, RunEvent
from protocols.messages import AgentResult, Message, Role
from protocols.relay_jobs import (
    OWNER_FIELD,
    STATUS,
    JobRoute,
    client_key,
    decode_answers,
    decode_submit,
    error_body,
    error_view,
    job_view,
    owned_key,
    owner_of,
    route,
    same_request,
    shown_event,
)
from protocols.settings import ModelSettings

ID = "0f3c" * 8


def body(**fields: Any) -> bytes:
    fields.setdefault("agent", "writer")
    fields.setdefault("input", "hello")
    return json.dumps(fields).encode()


# -- routes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/jobs", JobRoute("submit", None, "POST")),
        (f"/v1/jobs/{ID}", JobRoute("show", ID, "GET")),
        (f"/v1/jobs/{ID}/cancel", JobRoute("cancel", ID, "POST")),
        (f"/v1/jobs/{ID}/answers", JobRoute("answers", ID, "POST")),
        (f"/v1/jobs/{ID}/events", JobRoute("events", ID, "GET")),
        ("/v1/jobs/", None),
        (f"/v1/jobs/{ID}/", None),
        (f"/v1/jobs/{ID}/journal", None),
        (f"/v1/jobs/{ID}/events/x", None),
        ("/v1/jobs/../x", None),
        ("/v1/jobs/a b", None),
        ("/v1/jobs/" + "a" * 129, None),
        ("/v1/jobsx", None),
        ("/v1/stream", None),
    ],
)
def test_routes(path: str, expected: JobRoute | None) -> None:
    assert route(path) == expected


@given(st.text(max_size=80))
def test_a_route_names_an_id_of_safe_characters_only(rest: str) -> None:
    found = route("/v1/jobs/" + rest)
    if found is not None and found.id is not None:
        assert found.id.isascii()
        assert all(c.isalnum() or c in "-_" for c in found.id)
        assert 1 <= len(found.id) <= 128


# -- submitting ---------------------------------------------------------------------------------


def test_a_submission_records_its_owner_and_keeps_its_key_apart() -> None:
    made = decode_submit(body(key="k-1", settings={"temperature": 0.2}), owner="alice")
    assert made.job.agent == "writer"
    assert [(m.role, m.content) for m in made.job.input] == [(Role.USER, "hello")]
    assert made.job.settings == ModelSettings(temperature=0.2)
    assert made.job.metadata == {OWNER_FIELD: "alice"}
    assert made.key == owned_key("alice", "k-1")
    by_header = decode_submit(body(), owner="alice", key_header="k-1")
    assert by_header.key == made.key
    assert decode_submit(body(), owner="alice").key is None


@given(st.text(min_size=1, max_size=20), st.text(max_size=20), st.text(min_size=1, max_size=20))
def test_owned_keys_of_different_owners_never_meet(owner: str, key: str, other: str) -> None:
    if owner != other:
        assert owned_key(owner, key) != owned_key(other, key)
        # Nor does any key of one owner take another owner's name for one of its keys.
        assert not owned_key(other, key).startswith(owned_key(owner, ""))


def test_the_relays_cap_on_output_tokens_caps_a_jobs_settings() -> None:
    def capped(settings: Any) -> ModelSettings | None:
        return decode_submit(body(settings=settings), owner="a", max_tokens=10).job.settings

    assert capped(None) == ModelSettings(max_tokens=10)
    assert capped({"max_tokens": 5}) == ModelSettings(max_tokens=5)
    assert capped({"max_tokens": 50, "seed": 1}) == ModelSettings(max_tokens=10, seed=1)
    with pytest.raises(ProtocolError, match="extra"):
        capped({"extra": {"num_predict": 9999}})
    uncapped = decode_submit(body(settings={"extra": {"x": 1}}), owner="a").job.settings
    assert uncapped == ModelSettings(extra={"x": 1})


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"{", "JSON object"),
        (b"[]", "JSON object"),
        (b'{"agent": "w", "input": "x", "agent": "v"}', "duplicate"),
        (body(priority="interrupt"), "'priority'"),
        (body(agent=""), "agent"),
        (body(agent=7), "agent"),
        (json.dumps({"agent": "w"}).encode(), "input"),
        (body(input=""), "empty"),
        (body(input=[]), "empty"),
        (body(input=7), "list of messages"),
        (body(input=["hi"]), "message 1"),
        (body(input=[{"role": "user", "content": "x", "extra": 1}]), "message 1"),
        (body(input=[{"role": "system", "content": "x"}]), "system"),
        (body(settings=[]), "settings"),
        (body(settings={"temperature": 7}), "temperature"),
        (body(settings={"warmth": 1}), "warmth"),
        (body(key=7), "key"),
        (body(key=""), "key"),
        (body(key="a\nb"), "key"),
        (body(key="x" * 129), "key"),
    ],
)
def test_a_malformed_submission_is_refused_saying_what(data: bytes, words: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        decode_submit(data, owner="alice")
    assert refused.value.code == "invalid"
    assert words in refused.value.message


def test_the_key_in_the_body_and_in_the_header_must_agree() -> None:
    with pytest.raises(ProtocolError, match="differ"):
        decode_submit(body(key="a"), owner="o", key_header="b")
    assert decode_submit(body(key="a"), owner="o", key_header="a").key == owned_key("o", "a")


def test_an_input_over_its_limit_is_too_large() -> None:
    decode_submit(body(input="x" * 98), owner="o", max_input=100)  # 100 bytes with its quotes
    with pytest.raises(ProtocolError) as refused:
        decode_submit(body(input="x" * 99), owner="o", max_input=100)
    assert refused.value.code == "too_large"
    assert STATUS[refused.value.code] == 413


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_any_json_is_admitted_or_refused_as_invalid_never_otherwise(value: Any) -> None:
    for data in (
        value,
        {"agent": "w", "input": value},
        {"agent": "w", "input": "x", "settings": value},
    ):
        code = None
        try:
            decode_submit(json.dumps(data).encode(), owner="o")
        except ProtocolError as error:
            code = error.code
        assert code in (None, "invalid", "too_large")


def test_two_submissions_ask_the_same_whatever_their_messages_ids() -> None:
    first = decode_submit(body(settings={"seed": 1}), owner="o").job
    again = decode_submit(body(settings={"seed": 1}), owner="o").job
    assert first.input[0].id != again.input[0].id
    assert same_request(first, again)
    assert not same_request(first, decode_submit(body(input="other"), owner="o").job)
    assert not same_request(first, decode_submit(body(), owner="o").job)


# -- answers ------------------------------------------------------------------------------------


def test_answers_one_or_several() -> None:
    assert decode_answers(b'{"call_id": "c1", "allow": true}') == (ApprovalAnswer("c1", True),)
    several = json.dumps(
        {
            "answers": [
                {"call_id": "c1", "allow": False, "reason": "no"},
                {"call_id": "c2", "allow": True},
            ]
        }
    )
    assert decode_answers(several) == (
        ApprovalAnswer("c1", False, "no"),
        ApprovalAnswer("c2", True),
    )


@pytest.mark.parametrize(
    "data",
    [
        '{"call_id": "c1"}',
        '{"call_id": "c1", "allow": "yes"}',
        '{"call_id": "", "allow": true}',
        '{"call_id": "c1", "allow": true, "because": "x"}',
        '{"call_id": "c1", "allow": true, "reason": 7}',
        '{"answers": []}',
        '{"answers": [{"call_id": "c1", "allow": true}], "call_id": "c1"}',
        '{"answers": [{"call_id": "c1", "allow": true}, {"call_id": "c1", "allow": false}]}',
        '"c1"',
    ],
)
def test_a_malformed_answer_is_refused(data: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        decode_answers(data)
    assert refused.value.code == "invalid"


# -- what the owner is shown --------------------------------------------------------------------


def record(**fields: Any) -> JobRecord:
    submitted = decode_submit(body(key="k"), owner="alice")
    fields.setdefault("key", submitted.key)
    return JobRecord(ID, submitted.job, sequence=1, created_at=1.0, **fields)


def test_a_jobs_view_is_its_owners_and_json() -> None:
    result = AgentResult("It is 42.", messages=(Message.assistant("It is 42."),))
    view = job_view(
        record(
            status=JobStatus.AWAITING_INPUT,
            pending=(ApprovalRequest("c1", "refund", "needs a human"), ApprovalRequest("c2", "x")),
            answers=(ApprovalAnswer("c2", True),),
            result=result,
        )
    )
    assert json.loads(json.dumps(view)) == view
    assert view["key"] == "k"
    assert view["status"] == "awaiting_input"
    assert view["pending"] == [{"call_id": "c1", "tool": "refund", "reason": "needs a human"}]
    assert from_json(AgentResult, view["result"]) == result
    assert owner_of(record()) == "alice"
    assert client_key(record()) == "k"
    outside = JobRecord(ID, AgentJob.ask("w", "hi"), sequence=1, created_at=1.0, key="k")
    assert owner_of(outside) is None
    assert client_key(outside) is None


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (None, None),
        ("the attempt timed out", {"type": "JobError", "message": "the attempt timed out"}),
        (
            "unknown agent: writer (registered: none)",
            {"type": "JobError", "message": "unknown agent: writer (registered: none)"},
        ),
        ("ProviderError: Incorrect API key provided: sk-live-1234", "ProviderError"),
        ("RuntimeError: db password hunter2", "RuntimeError"),
    ],
)
def test_an_errors_exception_text_is_never_shown(error: str | None, shown: Any) -> None:
    view = job_view(record(status=JobStatus.FAILED, error=error))["error"]
    if isinstance(shown, str):
        assert view["type"] == shown
        assert "sk-live" not in view["message"]
        assert "hunter2" not in view["message"]
        assert "failed" in view["message"]
    else:
        assert view == shown
    assert error_view(error, JobStatus.FAILED) == view


def test_a_failed_event_shows_its_errors_type_and_no_exception_text() -> None:
    derived = JournalEvents(ID, agent="writer").feed(
        [
            InputEntry((Message.user("hi"),)),
            TerminalEntry(None, None, "ProviderError: refused key sk-live-1234"),
        ]
    )
    failed = shown_event(derived[-1])
    assert failed.kind == "failed"
    assert failed.data["error"]["type"] == "ProviderError"
    assert "sk-live" not in json.dumps(to_json(failed.data))
    ending = RunEvent(
        ID,
        3,
        "failed",
        0.0,
        {"error": {"type": "JobError", "code": "failed", "message": "RuntimeError: pw hunter2"}},
    )
    shown = shown_event(ending)
    assert shown.data["error"]["type"] == "RuntimeError"
    assert shown.data["error"]["code"] == "failed"
    assert "hunter2" not in shown.data["error"]["message"]
    plain = RunEvent(
        ID,
        3,
        "failed",
        0.0,
        {"error": {"type": "JobError", "code": None, "message": "the attempt timed out"}},
    )
    assert shown_event(plain) == plain
    content = RunEvent(ID, 2, "content", 0.0, {"text": "ProviderError: just text"})
    assert shown_event(content) is content


def test_error_bodies() -> None:
    assert json.loads(error_body("not_found")) == {
        "error": {"code": "not_found", "message": "no such job", "retryable": False}
    }
    assert json.loads(error_body("invalid", "input must not be empty"))["error"]["message"] == (
        "input must not be empty"
    )
    assert json.loads(error_body("unavailable"))["error"]["retryable"] is True
    assert all(400 <= status < 600 for status in STATUS.values())
