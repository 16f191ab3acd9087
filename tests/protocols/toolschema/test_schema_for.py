"""protocols.toolschema, schema generation: the exact schema of each supported annotation, and
the refusals."""

from __future__ import annotations

import datetime
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Optional, Union

import pytest
from jsonschema import Draft202012Validator
from toolschema_cases import (
    Color,
    Empty,
    Level,
    Node,
    Pairish,
    Ping,
    Plain,
    Point,
    Private,
    Shape,
    T,
    UserId,
    wrap,
)

from protocols.errors import ValidationError
from protocols.messages import ToolDefinition
from protocols.toolschema import (
    schema_for,
    validate_arguments,
)

# ---------------------------------------------------------------------------------------------
# schema_for: exact schemas

POINT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A point on the plane.",
    "properties": {
        "x": {"type": "number", "description": "Horizontal position."},
        "y": {"type": "number", "description": "Vertical position."},
    },
    "required": ["x"],
    "additionalProperties": False,
}

EXACT: list[tuple[Any, dict[str, Any]]] = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (None, {"type": "null"}),
    (type(None), {"type": "null"}),
    (Any, {}),
    (object, {}),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
    (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),  # noqa: UP007
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
    (Literal[True], {"type": "boolean", "enum": [True]}),
    (Literal["a", 1, None], {"type": ["string", "integer", "null"], "enum": ["a", 1, None]}),
    (Color, {"type": "string", "enum": ["red", "green"]}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (typing.List[str], {"type": "array", "items": {"type": "string"}}),  # noqa: UP006
    (Sequence[bool], {"type": "array", "items": {"type": "boolean"}}),
    (list, {"type": "array", "items": {}}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (
        tuple[int, str],
        {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
    ),
    (tuple[()], {"type": "array", "maxItems": 0}),
    (tuple, {"type": "array", "items": {}}),
    (typing.Tuple, {"type": "array", "items": {}}),  # noqa: UP006
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (
        Mapping[str, list[float]],
        {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"}}},
    ),
    (dict, {"type": "object"}),
    (Annotated[int, "how many"], {"type": "integer", "description": "how many"}),
    (
        Annotated[list[Annotated[str, "a tag"]], "the   tags\n  to set", 42],
        {
            "type": "array",
            "items": {"type": "string", "description": "a tag"},
            "description": "the tags to set",
        },
    ),
    (UserId, {"type": "integer"}),
    (Point, POINT_SCHEMA),
    (
        Shape,
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "points": {"type": "array", "items": POINT_SCHEMA},
                "color": {"type": "string", "enum": ["red", "green"]},
                "label": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "description": "shown to people",
                },
            },
            "required": ["name", "points"],
            "additionalProperties": False,
        },
    ),
    (
        Private,
        {
            "type": "object",
            "properties": {"secret": {"type": "integer"}},
            "required": ["secret"],
            "additionalProperties": False,
        },
    ),
]


@pytest.mark.parametrize(("annotation", "expected"), EXACT, ids=[repr(a) for a, _ in EXACT])
def test_schema_for_gives_the_exact_schema(annotation: Any, expected: dict[str, Any]) -> None:
    assert schema_for(annotation) == expected


@pytest.mark.parametrize(("annotation", "expected"), EXACT, ids=[repr(a) for a, _ in EXACT])
def test_every_generated_schema_is_valid_draft_2020_12_and_a_tool_parameter(
    annotation: Any, expected: dict[str, Any]
) -> None:
    schema = schema_for(annotation)
    Draft202012Validator.check_schema(schema)
    wrapped = {"type": "object", "properties": {"value": schema}, "required": ["value"]}
    assert ToolDefinition("t", "", wrapped).parameters == wrapped


def test_schema_for_returns_a_fresh_dict_each_call() -> None:
    first = schema_for(Shape)
    first["properties"]["points"]["items"]["properties"].clear()
    assert schema_for(Shape)["properties"]["points"]["items"] == POINT_SCHEMA


def test_int_is_not_bool_and_floats_accept_integers() -> None:
    assert validate_arguments(wrap(schema_for(int)), {"value": True}) != []
    assert validate_arguments(wrap(schema_for(float)), {"value": 3}) == []
    assert validate_arguments(wrap(schema_for(Literal[1])), {"value": True}) != []


# ---------------------------------------------------------------------------------------------
# schema_for: refusals

REFUSED: list[tuple[Any, str]] = [
    (datetime.datetime, "datetime.datetime: no JSON Schema mapping"),
    (bytes, "bytes cannot travel in JSON"),
    (set[int], "JSON has no sets"),
    (list[frozenset[str]], "JSON has no sets"),
    (dict[int, str], "JSON object keys are strings"),
    (T, "a type variable has no JSON Schema"),
    (Callable[[int], int], "no JSON Schema mapping"),
    (Plain, "Plain: no JSON Schema mapping"),
    (Empty, "an Enum without members"),
    (Pairish, "Enum values must be str, int, finite float or None"),
    (Literal[b"x"], "Literal values must be str, int, bool or None"),
    (Node, "recursive attrs classes are not supported (Node -> Node)"),
    (Ping, "recursive attrs classes are not supported (Ping -> Pong -> Ping)"),
    (Optional[list[Node]], "recursive attrs classes"),  # noqa: UP045
]


@pytest.mark.parametrize(("annotation", "fragment"), REFUSED, ids=[repr(a) for a, _ in REFUSED])
def test_unsupported_annotations_are_refused_saying_which_and_why(
    annotation: Any, fragment: str
) -> None:
    with pytest.raises(ValidationError, match="unsupported annotation") as caught:
        schema_for(annotation)
    assert fragment in caught.value.message
