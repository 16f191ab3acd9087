"""protocols.toolschema, structuring: validated arguments built into the annotated Python values."""

from __future__ import annotations

import enum
import json
from typing import Any, Literal

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolschema_cases import (
    RICH,
    Color,
    Level,
    Point,
    Positive,
    Private,
    Shape,
    described,
    search,
    wrap,
)

from protocols.errors import ValidationError
from protocols.toolschema import (
    ToolSignature,
    schema_for,
    signature_of,
    structure_arguments,
    validate_arguments,
)

# ---------------------------------------------------------------------------------------------
# structure_arguments


def test_structure_builds_typed_values_and_fills_defaults() -> None:
    values = structure_arguments(signature_of(described), {"amount": 3, "color": "red"})
    assert values == {"amount": 3.0, "note": "", "color": Color.RED}
    assert type(values["amount"]) is float
    assert list(values) == ["amount", "note", "color"]


def test_structure_refuses_with_paths() -> None:
    signature = signature_of(search)
    with pytest.raises(ValidationError) as caught:
        structure_arguments(signature, {"limit": "3", "other": 1})
    assert caught.value.message == (
        "invalid arguments for tool 'search': $.other: unknown argument 'other'; "
        "$.query: missing required argument 'query'; $.limit: expected an integer, got a string"
    )


def test_structure_reports_an_attrs_validator_refusal_at_its_path() -> None:
    signature = ToolSignature(
        "t", "", wrap(schema_for(list[Positive])), {"value": list[Positive]}, {}
    )
    assert validate_arguments(signature.parameters, {"value": [{"value": -1}]}) == []
    with pytest.raises(ValidationError, match=r"\$\.value\[0\]: Positive refused the value: "):
        structure_arguments(signature, {"value": [{"value": -1}]})


def test_structure_of_private_attrs_fields_uses_the_init_name() -> None:
    signature = ToolSignature("t", "", wrap(schema_for(Private)), {"value": Private}, {})
    assert structure_arguments(signature, {"value": {"secret": 4}})["value"] == Private(4)


def test_union_arms_are_tried_in_order_and_literals_kept_as_written() -> None:
    types = {
        "a": str | Color,
        "b": float | int,
        "c": int | float,
        "d": Literal[1, True],
        "e": Literal["x"] | None,
    }
    signature = ToolSignature("t", "", {}, types, {})
    values = structure_arguments(signature, {"a": "red", "b": 1, "c": 1, "d": True, "e": None})
    assert values == {"a": "red", "b": 1.0, "c": 1, "d": True, "e": None}
    assert type(values["b"]) is float
    assert type(values["c"]) is int
    assert values["d"] is True
    with pytest.raises(ValidationError, match=r"\$\.d: expected one of 1, true"):
        structure_arguments(signature, {**values, "d": 2})


def json_form(value: Any) -> Any:
    """Test-side dumper (independent of the module's): what a model would send."""
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(type(value)):
        return {name: json_form(item) for name, item in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, list | tuple):
        return [json_form(item) for item in value]
    if isinstance(value, dict):
        return {key: json_form(item) for key, item in value.items()}
    return value


finite = st.floats(allow_nan=False, allow_infinity=False)
points = st.builds(Point, finite, finite)
shapes = st.builds(
    Shape,
    st.text(max_size=5),
    st.lists(points, max_size=3).map(tuple),
    st.sampled_from(Color),
    st.none() | st.text(max_size=5),
)
plain_json = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)
rich_values = st.fixed_dictionaries(
    {
        "text": st.text(),
        "count": st.integers(),
        "ratio": finite,
        "flag": st.booleans(),
        "maybe": st.none() | st.integers(),
        "choice": st.sampled_from(["a", "b", 3]),
        "color": st.sampled_from(Color),
        "level": st.sampled_from(Level),
        "items": st.lists(st.text(max_size=5), max_size=4),
        "pair": st.tuples(st.integers(), st.text(max_size=5)),
        "many": st.lists(finite, max_size=4).map(tuple),
        "table": st.dictionaries(st.text(max_size=5), st.lists(st.integers(), max_size=3)),
        "shape": shapes,
        "either": st.integers() | st.text(max_size=5),
        "anything": plain_json,
        "user": st.integers(),
    },
    optional={"note": st.text(max_size=5), "extra": st.none() | shapes},
)


@settings(max_examples=200, deadline=None)
@given(rich_values)
def test_round_trip_through_json_validates_and_structures_to_the_originals(
    values: dict[str, Any],
) -> None:
    sent = json.loads(json.dumps(json_form(values)))
    assert validate_arguments(RICH.parameters, sent) == []
    structured = structure_arguments(RICH, sent)
    expected = {**RICH.defaults, **values}
    assert structured == expected
    assert list(structured) == list(RICH.types)
    assert isinstance(structured["shape"].points, tuple)
    assert isinstance(structured["many"], tuple)
    assert isinstance(structured["color"], Color)
    assert all(type(x) is float for x in structured["many"])
