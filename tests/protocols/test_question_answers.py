"""Questions and the strict check of their answers (pure: no event loop), and the job
transition that records a question's answer."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.codec import from_json, to_json
from protocols.errors import ValidationError
from protocols.jobs import (
    AgentJob,
    Applied,
    ApprovalAnswer,
    ApprovalRequest,
    AskEntry,
    Conflict,
    JobRecord,
    JobStatus,
    Lease,
    answer,
    entry_from_json,
    entry_to_json,
    suspend,
)
from protocols.questions import (
    MAX_OPTIONS,
    Question,
    check_answer,
    parse_answer,
    question_from_arguments,
    question_schema,
)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
options = st.lists(
    st.text(min_size=1, max_size=8).filter(lambda text: text.strip() != ""),
    min_size=2,
    max_size=6,
    unique=True,
)


# ---------------------------------------------------------------------------------------------
# Questions


def test_a_question_refuses_fields_that_do_not_fit_its_kind() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"prompt": " "}, "non-blank"),
        ({"prompt": "q", "kind": "yes/no"}, "must be one of"),
        ({"prompt": "q", "kind": "choice", "options": ["one"]}, "at least two"),
        ({"prompt": "q", "kind": "choices"}, "at least one option"),
        ({"prompt": "q", "options": ["a", "b"]}, "takes no options"),
        ({"prompt": "q", "kind": "number", "options": ["1"]}, "takes no options"),
        ({"prompt": "q", "min": 1}, "for a 'number' question"),
        ({"prompt": "q", "kind": "number", "min": 2, "max": 1}, "above max"),
        ({"prompt": "q", "kind": "number", "max": math.inf}, "finite number"),
        ({"prompt": "q", "kind": "number", "min": True}, "finite number"),
        ({"prompt": "q", "kind": "choice", "options": ["a", "a"]}, "repeats"),
        ({"prompt": "q", "kind": "choice", "options": ["a", ""]}, "non-blank"),
        ({"prompt": "q", "kind": "choice", "options": "ab"}, "sequence of str"),
        (
            {"prompt": "q", "kind": "choices", "options": [str(n) for n in range(MAX_OPTIONS + 1)]},
            "more than",
        ),
    ]
    for fields, problem in cases:
        with pytest.raises(ValidationError, match=problem):
            Question(**fields)


def test_a_question_round_trips_through_json_and_from_a_models_arguments() -> None:
    question = Question("How many?", kind="number", min=1, max=9, integer=True)
    assert from_json(Question, to_json(question)) == question
    assert to_json(Question("Name?")) == {"prompt": "Name?"}  # defaults left out
    arguments = {"question": "Size?", "kind": "choice", "options": ["S", "M"]}
    assert question_from_arguments(arguments) == Question(
        "Size?", kind="choice", options=("S", "M")
    )
    assert set(question_schema()["properties"]) == {
        "question",
        "kind",
        "options",
        "min",
        "max",
        "integer",
    }
    with pytest.raises(ValidationError, match="no field colour"):
        question_from_arguments({"question": "q", "colour": "red"})
    with pytest.raises(ValidationError, match="non-blank"):
        question_from_arguments({"kind": "text"})


# ---------------------------------------------------------------------------------------------
# Answers


def test_text_answers() -> None:
    question = Question("Name?")
    assert check_answer(question, "Ada") == "Ada"
    for wrong, problem in (("  ", "blank"), (3, "is not text"), (["Ada"], "is not text")):
        with pytest.raises(ValidationError, match=problem):
            check_answer(question, wrong)
    with pytest.raises(ValidationError, match="longer than"):
        check_answer(question, "x" * 100_001)


@given(options, st.data())
def test_a_choice_is_exactly_one_option(choices: list[str], data: st.DataObject) -> None:
    question = Question("Pick", kind="choice", options=choices)
    picked = data.draw(st.sampled_from(choices))
    assert check_answer(question, picked) == picked
    other = data.draw(st.text(max_size=10).filter(lambda text: text not in choices))
    with pytest.raises(ValidationError, match="is not an option"):
        check_answer(question, other)
    with pytest.raises(ValidationError, match="is not one option"):
        check_answer(question, [picked])


@given(options, st.data())
def test_choices_are_options_each_once_in_the_options_order(
    choices: list[str], data: st.DataObject
) -> None:
    question = Question("Pick", kind="choices", options=choices)
    picked = data.draw(st.lists(st.sampled_from(choices), min_size=1, unique=True))
    checked = check_answer(question, picked)
    assert checked == [option for option in choices if option in picked]
    assert check_answer(question, tuple(reversed(picked))) == checked
    with pytest.raises(ValidationError, match="chosen twice"):
        check_answer(question, [*picked, picked[0]])
    with pytest.raises(ValidationError, match="no option was chosen"):
        check_answer(question, [])
    stranger = data.draw(st.text(max_size=10).filter(lambda text: text not in choices))
    with pytest.raises(ValidationError, match="is not an option"):
        check_answer(question, [*picked, stranger])
    with pytest.raises(ValidationError, match="not a list of options"):
        check_answer(question, picked[0])


@given(finite, finite, finite)
def test_a_number_is_accepted_exactly_when_within_its_bounds(
    low: float, high: float, value: float
) -> None:
    low, high = min(low, high), max(low, high)
    question = Question("n?", kind="number", min=low, max=high)
    if low <= value <= high:
        assert check_answer(question, value) == value
    else:
        with pytest.raises(ValidationError, match="answer refused"):
            check_answer(question, value)


@given(st.integers(-1000, 1000), st.floats(-1000, 1000, allow_nan=False))
def test_an_integer_question_takes_whole_numbers_only(whole: int, any_number: float) -> None:
    question = Question("n?", kind="number", integer=True)
    assert check_answer(question, whole) == whole
    checked = check_answer(question, float(whole))
    assert checked == whole
    assert isinstance(checked, int)
    if not any_number.is_integer():
        with pytest.raises(ValidationError, match="not a whole number"):
            check_answer(question, any_number)


def test_a_number_is_never_a_string_a_bool_or_infinite() -> None:
    question = Question("n?", kind="number")
    for wrong in ("3", True, None, math.inf, math.nan, [3]):
        with pytest.raises(ValidationError, match="answer refused"):
            check_answer(question, wrong)


def test_a_refusal_says_what_was_expected() -> None:
    with pytest.raises(ValidationError) as refused:
        check_answer(Question("n?", kind="number", min=1, max=5, integer=True), 9)
    assert refused.value.message == (
        "answer refused: 9 is above 5 (expected a whole number from 1 to 5)"
    )
    with pytest.raises(ValidationError) as refused:
        check_answer(Question("Size?", kind="choice", options=["S", "M"]), "XL")
    assert (
        refused.value.message == "answer refused: 'XL' is not an option (expected one of 'S', 'M')"
    )


def test_answers_typed_as_text() -> None:
    assert parse_answer(Question("Name?"), " Ada ") == " Ada "  # text is kept as typed
    choice = Question("Size?", kind="choice", options=["S", "M"])
    assert parse_answer(choice, " M\n") == "M"
    several = Question("Which?", kind="choices", options=["a, b", "c", "d"])
    assert parse_answer(several, "d, c") == ["c", "d"]
    assert parse_answer(several, '["a, b", "d"]') == ["a, b", "d"]
    with pytest.raises(ValidationError, match="not a JSON array"):
        parse_answer(several, "[a")
    number = Question("n?", kind="number", max=10)
    assert parse_answer(number, " 1e1 ") == 10
    assert parse_answer(number, "-2.5") == -2.5
    for wrong in ("ten", "true", "NaN", "[1]", ""):
        with pytest.raises(ValidationError, match="answer refused"):
            parse_answer(number, wrong)


# ---------------------------------------------------------------------------------------------
# A job's question


def _waiting(question: Question) -> JobRecord:
    holder = Lease("w", 1, 100.0)
    record = JobRecord(
        "j1",
        AgentJob.ask("shop", "go"),
        sequence=1,
        created_at=0.0,
        status=JobStatus.RUNNING,
        fence=1,
        lease=holder,
    )
    waiting = suspend(
        record,
        holder,
        now=1.0,
        pending=[ApprovalRequest("q1", "ask_user", question.prompt, question)],
    )
    assert isinstance(waiting, Applied)
    return waiting.record


def test_the_answer_transition_checks_a_questions_answer_and_keeps_it_canonical() -> None:
    record = _waiting(Question("Which?", kind="choices", options=["a", "b", "c"]))
    refused = answer(record, ApprovalAnswer("q1", True, value=["z"]), now=2.0)
    assert isinstance(refused, Conflict)
    assert refused.reason == "invalid"
    assert "'z' is not an option" in refused.detail
    missing = answer(record, ApprovalAnswer("q1", True), now=2.0)
    assert isinstance(missing, Conflict)
    assert missing.reason == "invalid"
    done = answer(record, ApprovalAnswer("q1", True, value=["c", "a"]), now=2.0)
    assert isinstance(done, Applied)
    assert done.record.status is JobStatus.QUEUED
    assert done.record.answers == (ApprovalAnswer("q1", True, "", ["a", "c"]),)
    # The record, with its question and answer, round-trips through JSON.
    assert from_json(JobRecord, to_json(done.record)) == done.record
    again = answer(done.record, ApprovalAnswer("q1", True, value=["a", "c"]), now=3.0)
    assert isinstance(again, Conflict)
    assert again.reason == "duplicate"
    declined = answer(record, ApprovalAnswer("q1", False, "busy"), now=2.0)
    assert isinstance(declined, Applied)


def test_an_approval_takes_no_value() -> None:
    holder = Lease("w", 1, 100.0)
    record = JobRecord(
        "j1", AgentJob.ask("a", "go"), 1, 0.0, JobStatus.RUNNING, fence=1, lease=holder
    )
    waiting = suspend(record, holder, now=1.0, pending=[ApprovalRequest("r1", "refund", "why")])
    assert isinstance(waiting, Applied)
    refused = answer(waiting.record, ApprovalAnswer("r1", True, value="yes"), now=2.0)
    assert isinstance(refused, Conflict)
    assert refused.reason == "invalid"
    assert isinstance(answer(waiting.record, ApprovalAnswer("r1", True), now=2.0), Applied)


def test_an_ask_entry_keeps_its_questions_through_json() -> None:
    question = Question("n?", kind="number", min=0)
    entry = AskEntry(("q1",), {"q1": "n?"}, {"q1": question})
    assert entry_from_json(entry_to_json(entry)) == entry
    assert entry_from_json(entry_to_json(AskEntry(("r1",), {"r1": "x"}))) == AskEntry(
        ("r1",), {"r1": "x"}
    )
    assert "questions" not in entry_to_json(AskEntry(("r1",)))
