"""Tests for protocols.jobs.AgentJob: every field refuses a bad value with a ValidationError naming
the field (a bool is not an int, metadata must be JSON, children nest and count within limits),
and the strict JSON round trip through protocols.codec (property over random jobs with nested
children and budgets; unknown fields and wrong types refused with the JSON path)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.accounting import TokenBudget
from protocols.codec import decode, encode, from_json, loads, to_json
from protocols.errors import ProtocolError, ValidationError
from protocols.jobs import MAX_CHILDREN, MAX_DEPTH, AgentJob
from protocols.messages import Message, Role, ToolCall
from protocols.settings import ModelSettings

SETTINGS = settings(max_examples=60, deadline=None)


def chain(depth: int) -> AgentJob:
    """A job ``depth`` levels deep (each level one child)."""
    job = AgentJob("leaf")
    for level in range(depth - 1):
        job = AgentJob(f"level-{level}", children=[job])
    return job


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("value", ["", "   ", "\n\t", "x" * 201, 5, None, b"agent"])
def test_agent_must_be_a_nonempty_name(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.agent"):
        AgentJob(value)  # type: ignore[arg-type]


def test_names_up_to_200_characters_are_accepted() -> None:
    job = AgentJob("a" * 200, conversation="c" * 200)
    assert job.agent == "a" * 200
    assert job.conversation == "c" * 200


@pytest.mark.parametrize("value", ["", "  ", "x" * 201, 5, False])
def test_conversation_must_be_a_nonempty_name_or_none(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.conversation"):
        AgentJob("a", conversation=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [True, False, -1, 1.0, 2.5, "3", [3]],
    ids=["true", "false", "negative", "float", "fraction", "str", "list"],
)
def test_limit_is_an_int_at_least_zero_and_never_a_bool(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.limit"):
        AgentJob("a", limit=value)  # type: ignore[arg-type]


def test_limit_accepts_zero_and_none() -> None:
    assert AgentJob("a", limit=0).limit == 0
    assert AgentJob("a", limit=None).limit is None


@pytest.mark.parametrize(
    "value",
    [True, False, 0, -1, -0.5, math.nan, math.inf, -math.inf, "1", [1]],
    ids=["true", "false", "zero", "negative", "neg-float", "nan", "inf", "-inf", "str", "list"],
)
def test_timeout_is_a_finite_positive_number_never_a_bool(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.timeout"):
        AgentJob("a", timeout=value)  # type: ignore[arg-type]


def test_timeout_accepts_ints_and_floats() -> None:
    assert AgentJob("a", timeout=3).timeout == 3
    assert AgentJob("a", timeout=0.25).timeout == 0.25


@pytest.mark.parametrize("value", [5, {"max": 5}, "total", True])
def test_budget_must_be_a_token_budget(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.budget"):
        AgentJob("a", budget=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"x": math.nan}, r"AgentJob\.metadata\.x"),
        ({"x": math.inf}, r"AgentJob\.metadata\.x"),
        ({"x": {"y": [1, object()]}}, r"AgentJob\.metadata\.x\.y\[1\]"),
        ({1: "one"}, r"AgentJob\.metadata"),
        ({"x": {2: "two"}}, r"AgentJob\.metadata\.x"),
        ([1, 2], r"AgentJob\.metadata"),
        ("text", r"AgentJob\.metadata"),
        (None, r"AgentJob\.metadata"),
        ({"x": {1, 2}}, r"AgentJob\.metadata\.x"),
    ],
    ids=["nan", "inf", "object", "int-key", "nested-int-key", "list", "str", "none", "set"],
)
def test_metadata_must_be_a_json_object(value: object, where: str) -> None:
    with pytest.raises(ValidationError, match=where):
        AgentJob("a", metadata=value)  # type: ignore[arg-type]


def test_metadata_is_kept_as_json_given() -> None:
    job = AgentJob("a", metadata={"n": 1, "list": (1, 2), "nested": {"ok": True, "x": None}})
    # Tuples become lists: the metadata is what JSON gives back.
    assert job.metadata == {"n": 1, "list": [1, 2], "nested": {"ok": True, "x": None}}
    assert loads(json.dumps(job.metadata)) == job.metadata


def test_metadata_lone_surrogates_are_repaired() -> None:
    job = AgentJob("a", metadata={"text": "a\ud800b"})
    assert job.metadata == {"text": "a\ufffdb"}


@pytest.mark.parametrize(
    "value",
    [Message.user("hi"), "hi"],
    ids=["one-message", "str"],
)
def test_input_must_be_a_sequence_not_one_message_or_text(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.input"):
        AgentJob("a", input=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [["hi"], [Message.user("ok"), {"role": "user", "content": "x"}], [None]],
    ids=["str-item", "dict-item", "none-item"],
)
def test_input_holds_only_messages(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.input"):
        AgentJob("a", input=value)  # type: ignore[arg-type]


def test_input_is_a_tuple_of_the_given_messages() -> None:
    first, second = Message.system("be brief"), Message.user("hi")
    job = AgentJob("a", [first, second])
    assert job.input == (first, second)
    assert AgentJob.ask("a", "hello").input[0].role is Role.USER
    assert AgentJob.ask("a", "hello").input[0].content == "hello"


def test_ask_passes_the_other_fields_through() -> None:
    job = AgentJob.ask("a", "hello", limit=2, conversation="t", metadata={"k": "v"})
    assert (job.limit, job.conversation, job.metadata) == (2, "t", {"k": "v"})


@pytest.mark.parametrize(
    "value",
    [["child"], [{"agent": "b"}], [AgentJob("b"), 3]],
    ids=["str", "dict", "int"],
)
def test_children_hold_only_jobs(value: object) -> None:
    with pytest.raises(ValidationError, match=r"AgentJob\.children"):
        AgentJob("a", children=value)  # type: ignore[arg-type]


def test_children_count_limit() -> None:
    child = AgentJob("c")
    assert len(AgentJob("a", children=[child] * MAX_CHILDREN).children) == MAX_CHILDREN
    with pytest.raises(ValidationError, match=r"AgentJob\.children: at most"):
        AgentJob("a", children=[child] * (MAX_CHILDREN + 1))


def test_children_depth_limit() -> None:
    deepest = chain(MAX_DEPTH)
    assert deepest.depth() == MAX_DEPTH
    with pytest.raises(ValidationError, match=r"AgentJob\.children nest deeper"):
        AgentJob("top", children=[deepest])
    # The depth is the deepest branch's, not the first one's.
    with pytest.raises(ValidationError, match=r"AgentJob\.children nest deeper"):
        AgentJob("top", children=[AgentJob("shallow"), deepest])


def test_depth_counts_levels() -> None:
    assert AgentJob("a").depth() == 1
    assert AgentJob("a", children=[AgentJob("b"), chain(3)]).depth() == 4


def test_unknown_constructor_fields_are_refused() -> None:
    with pytest.raises(TypeError):
        AgentJob("a", priority="high")  # type: ignore[call-arg]


def test_a_job_is_frozen() -> None:
    job = AgentJob("a")
    with pytest.raises(AttributeError):
        job.agent = "b"  # type: ignore[misc]


# --------------------------------------------------------------------------- JSON


TEXT = st.text(max_size=12)
NAMES = st.text(min_size=1, max_size=20).filter(lambda s: bool(s.strip()))
IDS = st.text(alphabet="abcdefghij0123456789-", min_size=1, max_size=10)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
STAMPS = st.floats(min_value=0, max_value=4e9, allow_nan=False)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    kind = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    mid, stamp, content = draw(IDS), draw(STAMPS), draw(TEXT)
    if kind == "system":
        return Message.system(content, id=mid, created_at=stamp)
    if kind == "user":
        return Message.user(content, id=mid, created_at=stamp)
    if kind == "tool":
        return Message.tool(draw(IDS), draw(NAMES), content, id=mid, created_at=stamp)
    calls = draw(
        st.lists(
            st.builds(
                ToolCall,
                id=IDS,
                name=NAMES,
                arguments=st.dictionaries(TEXT, JSON_VALUES, max_size=2),
            ),
            max_size=2,
            unique_by=lambda call: call.id,
        )
    )
    return Message.assistant(content, calls=calls, thinking=draw(TEXT), id=mid, created_at=stamp)


BUDGETS = st.none() | st.builds(
    TokenBudget,
    max=st.integers(0, 10**9),
    scope=st.sampled_from(["total", "completion", "prompt"]),
)
TIMEOUTS = st.none() | st.integers(1, 10**6) | st.floats(min_value=1e-3, max_value=1e6)


MODEL_SETTINGS = st.none() | st.builds(
    ModelSettings,
    temperature=st.none() | st.floats(0, 2),
    max_tokens=st.none() | st.integers(1, 10**6),
    stop=st.none() | st.lists(st.text(min_size=1, max_size=5), max_size=3),
    reasoning_effort=st.none() | st.sampled_from(["low", "medium", "high"]),
    extra=st.none() | st.dictionaries(TEXT, JSON_VALUES, max_size=2),
)


def jobs(children: st.SearchStrategy[list[AgentJob]]) -> st.SearchStrategy[AgentJob]:
    return st.builds(
        AgentJob,
        agent=NAMES,
        input=st.lists(messages(), max_size=3),
        limit=st.none() | st.integers(0, 1000),
        timeout=TIMEOUTS,
        budget=BUDGETS,
        conversation=st.none() | NAMES,
        children=children,
        metadata=st.dictionaries(TEXT, JSON_VALUES, max_size=3),
        settings=MODEL_SETTINGS,
    )


# Children nest up to three levels here (the limit itself is tested above).
JOBS = jobs(st.lists(jobs(st.lists(jobs(st.just([])), max_size=2)), max_size=3))


@SETTINGS
@given(JOBS)
def test_json_round_trip(job: AgentJob) -> None:
    text = encode(job)
    back = decode(AgentJob, text)
    assert back == job
    assert back.depth() == job.depth()
    # The text is stable once decoded (an int timeout comes back as the equal float).
    assert encode(decode(AgentJob, encode(back))) == encode(back)
    assert from_json(AgentJob, to_json(job)) == job


@settings(max_examples=25, deadline=None)
@given(JOBS)
def test_canonical_text_round_trips(job: AgentJob) -> None:
    assert decode(AgentJob, encode(job, canonical=True)) == job


def test_defaults_are_omitted() -> None:
    assert to_json(AgentJob("a")) == {"agent": "a"}
    assert decode(AgentJob, '{"agent": "a"}') == AgentJob("a")


def test_a_job_carries_its_model_settings() -> None:
    job = AgentJob.ask("a", "hi", settings={"max_tokens": 10, "stop": ["END"]})
    assert job.settings == ModelSettings(max_tokens=10, stop=("END",))
    assert to_json(job)["settings"] == {"max_tokens": 10, "stop": ["END"]}  # type: ignore[index]
    assert decode(AgentJob, encode(job)) == job
    with pytest.raises(ProtocolError, match=r"\$\.settings: unknown field\(s\) 'temp'"):
        decode(AgentJob, '{"agent": "a", "settings": {"temp": 1}}')


def sample() -> dict[str, Any]:
    job = AgentJob.ask(
        "a",
        "hi",
        limit=3,
        timeout=2.5,
        budget=TokenBudget(100, "completion"),
        conversation="thread",
        children=[AgentJob.ask("b", "sub")],
        metadata={"k": [1, 2]},
    )
    data = to_json(job)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.update(extra=1), r"\$: unknown field\(s\) 'extra'"),
        (lambda d: d["children"][0].update(zz=1), r"\$\.children\[0\]: unknown field\(s\) 'zz'"),
        (lambda d: d["budget"].update(cap=1), r"\$\.budget: unknown field\(s\) 'cap'"),
        (lambda d: d["input"][0].update(who=1), r"\$\.input\[0\]: unknown field\(s\) 'who'"),
        (lambda d: d.update(limit=True), r"\$\.limit: expected an integer, got bool"),
        (lambda d: d.update(limit=1.5), r"\$\.limit"),
        (lambda d: d.update(limit=-1), r"AgentJob\.limit"),
        (lambda d: d.update(timeout=True), r"\$\.timeout: expected a number, got bool"),
        (lambda d: d.update(timeout="2"), r"\$\.timeout"),
        (lambda d: d.update(timeout=0), r"AgentJob\.timeout"),
        (lambda d: d["budget"].update(max=True), r"\$\.budget\.max: expected an integer"),
        (lambda d: d.update(metadata=[1]), r"\$\.metadata: expected an object"),
        (lambda d: d.update(input="hi"), r"\$\.input"),
        (lambda d: d.update(children={"agent": "b"}), r"\$\.children"),
        (lambda d: d.update(agent=""), r"AgentJob\.agent"),
        (lambda d: d.update(agent=7), r"\$\.agent"),
        (lambda d: d.pop("agent"), r"\$\.agent: required field missing"),
        (lambda d: d.update(conversation=""), r"AgentJob\.conversation"),
    ],
    ids=[
        "unknown-field",
        "unknown-child-field",
        "unknown-budget-field",
        "unknown-message-field",
        "bool-limit",
        "float-limit",
        "negative-limit",
        "bool-timeout",
        "str-timeout",
        "zero-timeout",
        "bool-budget",
        "list-metadata",
        "str-input",
        "object-children",
        "empty-agent",
        "int-agent",
        "missing-agent",
        "empty-conversation",
    ],
)
def test_decoding_is_strict(mutate: Any, where: str) -> None:
    data = sample()
    assert decode(AgentJob, json.dumps(data)) == from_json(AgentJob, data)
    mutate(data)
    with pytest.raises(ProtocolError, match=where) as caught:
        decode(AgentJob, json.dumps(data))
    assert caught.value.code == "decode"


def test_decoding_refuses_children_nested_too_deep() -> None:
    data = to_json(chain(MAX_DEPTH))
    with pytest.raises(ProtocolError, match="nest deeper"):
        from_json(AgentJob, {"agent": "top", "children": [data]})
    assert from_json(AgentJob, data) == chain(MAX_DEPTH)


def test_decoding_refuses_non_json_text() -> None:
    with pytest.raises(ProtocolError):
        decode(AgentJob, '{"agent": "a", "timeout": NaN}')
    with pytest.raises(ProtocolError):
        decode(AgentJob, '{"agent": "a", "agent": "b"}')
