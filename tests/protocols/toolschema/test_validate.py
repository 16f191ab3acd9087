"""protocols.toolschema, validation: model-sent arguments checked against a tool's schema, and
the flat-schema fast path agreeing with the general validator."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from toolschema_cases import (
    RICH,
    SEARCH,
    Point,
    fetch,
    wrap,
)

from protocols.toolschema import (
    MAX_PROBLEMS,
    schema_for,
    signature_of,
    structure_arguments,
    validate_arguments,
)

# ---------------------------------------------------------------------------------------------
# validate_arguments


def test_valid_arguments_have_no_problems() -> None:
    assert validate_arguments(SEARCH, {"query": "x"}) == []
    assert validate_arguments(SEARCH, {"query": "x", "limit": 3, "exact": True}) == []


def test_unknown_keys_name_the_allowed_ones() -> None:
    assert validate_arguments(SEARCH, {"query": "x", "lmit": 3}) == [
        "$.lmit: unknown argument 'lmit'; allowed: query, limit, exact"
    ]
    nested = validate_arguments(wrap(schema_for(Point)), {"value": {"x": 1, "z": 2}})
    assert nested == ["$.value.z: unknown field 'z'; allowed: x, y"]
    odd = validate_arguments(SEARCH, {"query": "x", "a b": 1})
    assert odd == ["$[\"a b\"]: unknown argument 'a b'; allowed: query, limit, exact"]


def test_missing_and_null_are_reported() -> None:
    assert validate_arguments(SEARCH, {}) == ["$.query: missing required argument 'query'"]
    assert validate_arguments(SEARCH, {"query": None}) == [
        "$.query: null is not allowed here; expected a string"
    ]
    nullable = signature_of(fetch).parameters
    assert validate_arguments(nullable, {"url": "u", "retries": None}) == []


@pytest.mark.parametrize(
    ("value", "word"), [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "Infinity")]
)
def test_non_finite_numbers_are_refused(value: float, word: str) -> None:
    schema = wrap(schema_for(float))
    assert validate_arguments(schema, {"value": value}) == [
        f"$.value: {word} is not a valid number; numbers must be finite"
    ]
    anything = wrap(schema_for(dict[str, Any]))
    assert validate_arguments(anything, {"value": {"deep": [1, value]}}) == [
        f"$.value.deep[1]: {word} is not a valid number; numbers must be finite"
    ]


def test_wrong_types_enums_and_nested_paths() -> None:
    arguments = {
        "text": 1,
        "count": "2",
        "ratio": True,
        "flag": "yes",
        "maybe": "x",
        "choice": "c",
        "color": "blue",
        "level": 3,
        "items": ["ok", 2],
        "pair": [1, "a", 3],
        "many": [],
        "table": {"k": [1, "2"]},
        "shape": {"name": "s", "points": [{"x": 1}, {"y": 2}]},
        "either": [],
        "anything": None,
        "user": 1.5,
    }
    assert validate_arguments(RICH.parameters, arguments) == [
        "$.text: expected a string, got an integer",
        "$.count: expected an integer, got a string",
        "$.ratio: expected a number, got a boolean",
        "$.flag: expected a boolean, got a string",
        "$.maybe: expected an integer or null, got a string",
        '$.choice: expected one of "a", "b", 3, got "c"',
        '$.color: expected one of "red", "green", got "blue"',
        "$.level: expected one of 1, 2, got 3",
        "$.items[1]: expected a string, got an integer",
        "$.pair: expected at most 2 items, got 3",
        "$.table.k[1]: expected an integer, got a string",
        "$.shape.points[1].x: missing required field 'x'",
        "$.either: expected an integer or a string, got an array",
        "$.user: expected an integer, got a number",
    ]


def test_problem_count_and_sizes_are_bounded() -> None:
    schema = wrap(schema_for(list[int]))
    problems = validate_arguments(schema, {"value": ["x"] * 1000})
    assert len(problems) == MAX_PROBLEMS
    assert problems[-1] == "$: more problems not shown"
    huge = validate_arguments(SEARCH, {"query": "x", "k" * 10_000: 1})
    assert len(huge) == 1
    assert len(huge[0]) < 300


def test_input_that_is_not_json_is_reported_not_raised() -> None:
    assert validate_arguments(SEARCH, ["query"]) == ["$: expected an object, got an array"]
    assert validate_arguments(SEARCH, {"query": {1, 2}}) == [
        "$.query: a set (not JSON) is not a JSON value"
    ]
    assert validate_arguments(SEARCH, {1: "x"}) == ["$: object key 1 is not a string"]
    assert validate_arguments(SEARCH, {"query": "x", "limit": 10**400}) == [
        "$.limit: integer too large (more than 1024 bits)"
    ]
    deep: Any = "x"
    for _ in range(1000):
        deep = [deep]
    assert "nested deeper than" in validate_arguments(SEARCH, {"query": deep})[0]
    loop: dict[str, Any] = {}
    loop["query"] = loop
    assert validate_arguments(SEARCH, loop) != []


def test_a_broken_schema_is_reported_not_raised() -> None:
    assert validate_arguments({"type": 5}, {})[0].startswith(
        "$: the tool's parameter schema is invalid"
    )
    assert validate_arguments([], {}) == [  # type: ignore[arg-type]
        "$: the tool's parameter schema is not a JSON object"
    ]


def test_nullable_attrs_arm_reports_the_inner_problem() -> None:
    schema = wrap(schema_for(Point | None))
    assert validate_arguments(schema, {"value": {"x": "a"}}) == [
        "$.value.x: expected a number, got a string"
    ]
    assert validate_arguments(schema, {"value": 1}) == [
        "$.value: expected an object or null, got an integer"
    ]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(["a", "b", "red", 3]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([*RICH.types, "zzz", ""]) | st.text(max_size=4), json_values, max_size=8
    )
)
def test_validate_never_raises_and_every_problem_has_a_path(arguments: dict[str, Any]) -> None:
    problems = validate_arguments(RICH.parameters, arguments)
    assert len(problems) <= MAX_PROBLEMS
    assert all(problem.startswith("$") and ": " in problem for problem in problems)
    assert all(len(problem) < 600 for problem in problems)
    if not problems:  # what validates also structures
        structure_arguments(RICH, arguments)


# ---------------------------------------------------------------------------------------------
# The flat-schema fast path never says "valid" where the general path finds a problem

_FLAT_KINDS = ("string", "integer", "number", "boolean")

flat_schemas = st.builds(
    lambda kinds, required, additional, described: {
        "type": "object",
        "properties": {
            name: ({"type": kind, "description": "d"} if described else {"type": kind})
            for name, kind in kinds.items()
        },
        "required": [name for name in kinds if name in required],
        "additionalProperties": additional,
    },
    st.dictionaries(st.sampled_from("abcde"), st.sampled_from(_FLAT_KINDS), max_size=4),
    st.sets(st.sampled_from("abcdef")),
    st.booleans(),
    st.booleans(),
)

argument_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(1.0),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@given(
    flat_schemas,
    st.one_of(
        st.dictionaries(st.sampled_from("abcdefg"), argument_values, max_size=6),
        argument_values,
    ),
)
@settings(max_examples=400, deadline=None)
def test_flat_fast_path_agrees_with_the_general_validator(
    schema: dict[str, Any], arguments: Any
) -> None:
    from protocols.toolschema._validate import _flat, _flat_valid, _problems

    flat = _flat(schema)
    assert flat is not None  # every schema drawn here is flat: the fast path applies
    general = _problems(Draft202012Validator(schema), arguments, top=True)
    if _flat_valid(flat, arguments):
        assert general == []
    assert validate_arguments(schema, arguments) == general


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}},
        {"type": "object", "properties": {"a": {"enum": ["x"]}}},
        {"type": "object", "properties": {"a": {"type": ["integer", "null"]}}},
        {"type": "object", "properties": {"a": {"type": "array"}}},
        {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {}, "minProperties": 1},
        {"type": "array"},
    ],
)
def test_the_fast_path_refuses_every_schema_it_cannot_decide(schema: dict[str, Any]) -> None:
    from protocols.toolschema._validate import _flat

    assert _flat(schema) is None


def test_a_typical_tool_signature_takes_the_fast_path() -> None:
    from protocols.toolschema._validate import _flat, _flat_valid

    def add(a: int, b: float, name: str = "x", loud: bool = False) -> None:
        """Add."""

    flat = _flat(signature_of(add).parameters)
    assert flat is not None
    assert _flat_valid(flat, {"a": 1, "b": 2.5})
    assert not _flat_valid(flat, {"a": True, "b": 2.5})  # a bool is no integer
    assert not _flat_valid(flat, {"a": 1, "b": math.nan})
    assert not _flat_valid(flat, {"a": 1})  # b is required
    assert not _flat_valid(flat, {"a": 1, "b": 2, "c": 3})  # no other keys
