"""protocols.toolschema: schemas from signatures, argument validation and structuring."""

from __future__ import annotations

import datetime
import enum
import json
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, NewType, Optional, TypeVar, Union

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from protocols.errors import ValidationError
from protocols.messages import ToolDefinition
from protocols.toolschema import (
    MAX_PROBLEMS,
    ToolSignature,
    schema_for,
    signature_of,
    structure_arguments,
    validate_arguments,
)

# ---------------------------------------------------------------------------------------------
# Module-level types and tools (annotations are strings here and must resolve from globals)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Empty(enum.Enum):
    pass


class Pairish(enum.Enum):
    A = (1, 2)


UserId = NewType("UserId", int)
T = TypeVar("T")


@attrs.frozen
class Point:
    """A point on the plane.

    Attributes:
        x: Horizontal
            position.
        y: Vertical position.
    """

    x: float
    y: float = 0.0


@attrs.frozen
class Shape:
    name: str
    points: tuple[Point, ...]
    color: Color = Color.RED
    label: Annotated[str | None, "shown to people"] = None


@attrs.define
class Private:
    _secret: int
    cache: dict[str, int] = attrs.field(init=False, factory=dict)


@attrs.frozen
class Positive:
    value: int = attrs.field()

    @value.validator
    def _check(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value <= 0:
            raise ValueError("value must be positive")


@attrs.frozen
class Node:
    children: list[Node]


@attrs.frozen
class Ping:
    pong: Pong | None


@attrs.frozen
class Pong:
    ping: Ping


class Plain:
    pass


def search(query: str, limit: int = 10, *, exact: bool = False) -> list[str]:
    """Search the index for documents.

    Matches are ranked by relevance.

    Args:
        query: The text to look for;
            may span several words.
        limit (int): At most this many results.
        exact: Match the whole phrase only.

    Returns:
        The matching document names.

    Raises:
        ValueError: never, really.
    """
    return []


def described(
    amount: Annotated[float, "money, in euros"], note: str = "", *, color: Color = Color.GREEN
) -> None:
    """Pay.

    Args:
        amount: The docstring loses to Annotated.
        note:
            The description starts on the next line.
    """


def undocumented(flag: bool) -> None:
    pass


async def fetch(url: str, retries: int | None = None) -> str:
    """Fetch a URL."""
    return url


def rich(  # noqa: PLR0917
    text: str,
    count: int,
    ratio: float,
    flag: bool,
    maybe: int | None,
    choice: Literal["a", "b", 3],
    color: Color,
    level: Level,
    items: list[str],
    pair: tuple[int, str],
    many: tuple[float, ...],
    table: dict[str, list[int]],
    shape: Shape,
    either: int | str,
    anything: Any,
    user: UserId,
    note: Annotated[str, "a note"] = "x",
    *,
    extra: Shape | None = None,
) -> None:
    """A tool with one parameter of every kind."""


def star_args(*values: int) -> None:
    pass


def star_kwargs(**values: int) -> None:
    pass


def positional(value: int, /) -> None:
    pass


def unannotated(value) -> None:  # type: ignore[no-untyped-def]
    pass


def bad_default(count: int = None) -> None:  # type: ignore[assignment]  # noqa: RUF013
    pass


def bad_attrs_default(point: Point = {"x": 1}) -> None:  # type: ignore[assignment]  # noqa: B006
    pass


def enum_as_text(color: Color = "red") -> None:  # type: ignore[assignment]
    pass


def good_defaults(
    point: Point = Point(1.0),
    color: Color = Color.RED,
    pair: tuple[int, str] = (1, "a"),
    names: Sequence[str] = (),
    ratio: float = 1,
) -> None:
    pass


def unsupported(when: datetime.datetime) -> None:
    pass


def unresolved(thing: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
    pass


def recursive(node: Node) -> None:
    pass


def badly_named(value: int) -> None:
    pass


badly_named.__name__ = "bad name"


class Methods:
    def lookup(self, key: str) -> str:
        """Look a key up."""
        return key


class CallableTool:
    def __call__(self, n: int) -> int:
        return n


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
    assert validate_arguments(_wrap(schema_for(int)), {"value": True}) != []
    assert validate_arguments(_wrap(schema_for(float)), {"value": 3}) == []
    assert validate_arguments(_wrap(schema_for(Literal[1])), {"value": True}) != []


def _wrap(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
        "additionalProperties": False,
    }


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


# ---------------------------------------------------------------------------------------------
# signature_of


def test_signature_reads_name_summary_types_defaults_and_args_descriptions() -> None:
    signature = signature_of(search)
    assert signature.name == "search"
    assert signature.description == (
        "Search the index for documents. Matches are ranked by relevance."
    )
    assert signature.parameters == {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "The text to look for; may span several words.",
            },
            "limit": {"type": "integer", "description": "At most this many results."},
            "exact": {"type": "boolean", "description": "Match the whole phrase only."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert signature.types == {"query": str, "limit": int, "exact": bool}
    assert signature.defaults == {"limit": 10, "exact": False}


def test_annotated_text_wins_over_docstring_and_descriptions_may_start_below() -> None:
    signature = signature_of(described)
    properties = signature.parameters["properties"]
    assert signature.description == "Pay."
    assert properties["amount"] == {"type": "number", "description": "money, in euros"}
    assert properties["note"] == {
        "type": "string",
        "description": "The description starts on the next line.",
    }
    assert "description" not in properties["color"]
    assert signature.types["amount"] == Annotated[float, "money, in euros"]
    assert signature.defaults == {"note": "", "color": Color.GREEN}


def test_name_and_description_overrides_and_no_docstring() -> None:
    signature = signature_of(undocumented)
    assert (signature.name, signature.description) == ("undocumented", "")
    renamed = signature_of(search, name="find", description="Find things.")
    assert (renamed.name, renamed.description) == ("find", "Find things.")
    assert renamed.parameters == signature_of(search).parameters


def test_async_functions_methods_and_callable_objects() -> None:
    assert signature_of(fetch).parameters["properties"]["retries"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}]
    }
    method = signature_of(Methods().lookup)
    assert (method.name, method.description, method.types) == (
        "lookup",
        "Look a key up.",
        {"key": str},
    )
    assert signature_of(CallableTool(), name="double").types == {"n": int}
    with pytest.raises(ValidationError, match="needs a name"):
        signature_of(CallableTool())


def test_every_signature_is_a_valid_tool_definition() -> None:
    for function in (search, described, undocumented, fetch, rich, good_defaults):
        signature = signature_of(function)
        Draft202012Validator.check_schema(signature.parameters)
        definition = ToolDefinition(signature.name, signature.description, signature.parameters)
        assert definition.parameters == signature.parameters


def test_rich_signature_schema_covers_every_kind() -> None:
    signature = signature_of(rich)
    properties = signature.parameters["properties"]
    assert list(properties) == list(signature.types)
    assert signature.parameters["required"] == list(signature.types)[:-2]
    assert properties["choice"] == {"type": ["string", "integer"], "enum": ["a", "b", 3]}
    assert properties["note"] == {"type": "string", "description": "a note"}
    assert properties["anything"] == {}
    assert properties["extra"]["anyOf"][1] == {"type": "null"}


def test_defaults_that_fit_are_accepted_in_their_python_form() -> None:
    signature = signature_of(good_defaults)
    assert signature.defaults == {
        "point": Point(1.0),
        "color": Color.RED,
        "pair": (1, "a"),
        "names": (),
        "ratio": 1,
    }
    assert signature.parameters["required"] == []


REFUSED_SIGNATURES: list[tuple[Callable[..., Any], str]] = [
    (star_args, "tool 'star_args', parameter 'values': *values is not supported"),
    (star_kwargs, "tool 'star_kwargs', parameter 'values': **values is not supported"),
    (positional, "tool 'positional', parameter 'value': positional-only parameters"),
    (unannotated, "tool 'unannotated', parameter 'value': no type annotation"),
    (
        bad_default,
        "tool 'bad_default', parameter 'count': the default None does not fit the parameter's "
        "schema: $: null is not allowed here; expected an integer",
    ),
    (bad_attrs_default, "$: not a value of type test_toolschema.Point"),
    (enum_as_text, "$: not a value of type test_toolschema.Color"),
    (unsupported, "tool 'unsupported', parameter 'when': unsupported annotation datetime."),
    (unresolved, "tool 'unresolved': cannot resolve its type hints: name 'Missing'"),
    (recursive, "tool 'recursive', parameter 'node': "),
    (badly_named, "ToolDefinition.name must be 1-64 ASCII letters"),
]


@pytest.mark.parametrize(
    ("function", "fragment"),
    REFUSED_SIGNATURES,
    ids=[getattr(f, "__name__", "?") for f, _ in REFUSED_SIGNATURES],
)
def test_signature_refusals_name_the_tool_parameter_and_reason(
    function: Callable[..., Any], fragment: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        signature_of(function)
    assert fragment in caught.value.message


def test_bad_names_given_explicitly_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"ToolDefinition\.name"):
        signature_of(search, name="has space")


def test_docstring_sections_other_than_args_never_leak_into_the_summary() -> None:
    def tool(a: int) -> None:
        """Do it.
        Args:
            a: An int.
            ghost: Not a parameter; ignored.
        Example:
            tool(1)
        """

    signature = signature_of(tool)
    assert signature.description == "Do it."
    assert signature.parameters["properties"]["a"]["description"] == "An int."
    assert "ghost" not in signature.parameters["properties"]


# ---------------------------------------------------------------------------------------------
# validate_arguments

SEARCH = signature_of(search).parameters
RICH = signature_of(rich)


def test_valid_arguments_have_no_problems() -> None:
    assert validate_arguments(SEARCH, {"query": "x"}) == []
    assert validate_arguments(SEARCH, {"query": "x", "limit": 3, "exact": True}) == []


def test_unknown_keys_name_the_allowed_ones() -> None:
    assert validate_arguments(SEARCH, {"query": "x", "lmit": 3}) == [
        "$.lmit: unknown argument 'lmit'; allowed: query, limit, exact"
    ]
    nested = validate_arguments(_wrap(schema_for(Point)), {"value": {"x": 1, "z": 2}})
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
    schema = _wrap(schema_for(float))
    assert validate_arguments(schema, {"value": value}) == [
        f"$.value: {word} is not a valid number; numbers must be finite"
    ]
    anything = _wrap(schema_for(dict[str, Any]))
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
    schema = _wrap(schema_for(list[int]))
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
    schema = _wrap(schema_for(Point | None))
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
        "t", "", _wrap(schema_for(list[Positive])), {"value": list[Positive]}, {}
    )
    assert validate_arguments(signature.parameters, {"value": [{"value": -1}]}) == []
    with pytest.raises(ValidationError, match=r"\$\.value\[0\]: Positive refused the value: "):
        structure_arguments(signature, {"value": [{"value": -1}]})


def test_structure_of_private_attrs_fields_uses_the_init_name() -> None:
    signature = ToolSignature("t", "", _wrap(schema_for(Private)), {"value": Private}, {})
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
