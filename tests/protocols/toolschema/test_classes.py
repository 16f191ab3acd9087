"""protocols.toolschema with the classes a Python developer brings: dataclasses, TypedDicts and
pydantic (v2) models, besides attrs classes -- their schemas (inlined, closed, described), the
values built from validated JSON, pydantic's refusals as the model reads them, and round trips
of generated classes."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import typing
from typing import Annotated, Any, Generic, Literal, NotRequired, Optional, Required, TypeVar

import pydantic
import pydantic.v1
import pytest
import typing_extensions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from toolschema_cases import wrap

from protocols.errors import ValidationError
from protocols.messages import ToolDefinition
from protocols.toolschema import (
    ToolSignature,
    schema_for,
    signature_of,
    structure_arguments,
    structure_value,
    validate_arguments,
)
from protocols.wire.schema import project

T = TypeVar("T")


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


# ---------------------------------------------------------------------------------------------
# Dataclasses


@dataclasses.dataclass
class Corner:
    """A corner of a box.

    Attributes:
        x: Horizontal position.
        y: Vertical position.
    """

    x: float
    y: Annotated[float, "up from the floor"] = 0.0


@dataclasses.dataclass(frozen=True)
class Box:
    label: str
    corners: list[Corner]
    tags: list[str] = dataclasses.field(default_factory=list)
    color: Color | None = None
    cache: dict[str, int] = dataclasses.field(default_factory=dict, init=False)


@dataclasses.dataclass
class Checked:
    size: int

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("size must not be negative")


@dataclasses.dataclass
class Chain:
    next: Chain | None


@dataclasses.dataclass
class WithInitVar:
    seed: dataclasses.InitVar[int]


@dataclasses.dataclass
class Holder(Generic[T]):
    item: T


CORNER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A corner of a box.",
    "properties": {
        "x": {"type": "number", "description": "Horizontal position."},
        "y": {"type": "number", "description": "up from the floor"},
    },
    "required": ["x"],
    "additionalProperties": False,
}


def test_a_dataclass_is_an_object_of_its_init_fields() -> None:
    assert schema_for(Corner) == CORNER_SCHEMA
    # No docstring: the one @dataclass makes up ("Box(label: str, ...)") is not a description.
    assert schema_for(Box) == {
        "type": "object",
        "properties": {
            "label": {"type": "string"},
            "corners": {"type": "array", "items": CORNER_SCHEMA},
            "tags": {"type": "array", "items": {"type": "string"}},
            "color": {"anyOf": [{"type": "string", "enum": ["red", "green"]}, {"type": "null"}]},
        },
        "required": ["label", "corners"],
        "additionalProperties": False,
    }


def test_a_dataclass_is_built_from_json_nested_classes_too() -> None:
    value = {"label": "b", "corners": [{"x": 1, "y": 2.5}], "color": "red"}
    assert validate_arguments(schema_for(Box), value) == []
    built = structure_value(Box, value)
    assert built == Box("b", [Corner(1.0, 2.5)], [], Color.RED)
    assert type(built.corners[0]) is Corner
    assert type(built.corners[0].x) is float


def test_a_dataclass_that_refuses_its_value_says_where_and_why() -> None:
    with pytest.raises(ValidationError) as caught:
        structure_value(list[Checked], [{"size": 1}, {"size": -1}])
    assert caught.value.message == ("$[1]: Checked refused the value: size must not be negative")


REFUSED: list[tuple[Any, str]] = [
    (Chain, "recursive dataclasses are not supported (Chain -> Chain)"),
    (WithInitVar, "its InitVar 'seed' has no JSON form"),
    (Holder[int], "generic attrs classes and dataclasses are not supported"),
]


@pytest.mark.parametrize(("annotation", "fragment"), REFUSED, ids=[repr(a) for a, _ in REFUSED])
def test_dataclasses_without_a_json_form_are_refused(annotation: Any, fragment: str) -> None:
    with pytest.raises(ValidationError) as caught:
        schema_for(annotation)
    assert fragment in caught.value.message


# ---------------------------------------------------------------------------------------------
# TypedDicts


class Query(typing.TypedDict):
    """A search query.

    Attributes:
        text: What to look for.
    """

    text: str
    limit: NotRequired[int]


class Filters(typing_extensions.TypedDict, total=False):
    # Written as strings (this module has ``from __future__ import annotations``): Python 3.11's
    # ``__required_keys__`` misses ``Required`` here, so the hint itself must decide.
    field: Required[str]
    values: list[str]
    corner: Corner


def test_a_typeddict_is_an_object_whose_required_keys_follow_total_and_qualifiers() -> None:
    assert schema_for(Query) == {
        "type": "object",
        "description": "A search query.",
        "properties": {
            "text": {"type": "string", "description": "What to look for."},
            "limit": {"type": "integer"},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    schema = schema_for(Filters)
    assert schema["required"] == ["field"]
    assert schema["properties"]["corner"] == CORNER_SCHEMA


def test_a_typeddict_value_is_the_checked_dict_with_its_fields_built() -> None:
    value = {"field": "kind", "corner": {"x": 3}}
    assert validate_arguments(schema_for(Filters), value) == []
    built = structure_value(Filters, value)
    assert built == {"field": "kind", "corner": Corner(3.0)}
    assert type(built) is dict
    with pytest.raises(ValidationError, match=r"\$\.field: missing required field 'field'"):
        structure_value(Filters, {"values": []})
    with pytest.raises(ValidationError, match=r"\$\.other: unknown field 'other'; allowed: "):
        structure_value(Query, {"text": "a", "other": 1})


# ---------------------------------------------------------------------------------------------
# pydantic models


class Item(pydantic.BaseModel):
    """An item of an order."""

    name: str = pydantic.Field(description="What it is called.")
    qty: int = pydantic.Field(default=1, ge=1)
    color: Color | None = None
    size: Literal["S", "M", "L"] = "M"


class Order(pydantic.BaseModel):
    items: list[Item]
    main: Item = pydantic.Field(description="The item that matters most.")
    note: Optional[str] = pydantic.Field(default=None, title="Note to the cook")  # noqa: UP045
    customer: str = pydantic.Field(alias="customerName")

    @pydantic.field_validator("note")
    @classmethod
    def _polite(cls, value: str | None) -> str | None:
        if value is not None and "!" in value:
            raise ValueError("no shouting in notes")
        return value


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    a: int


class Cat(pydantic.BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(pydantic.BaseModel):
    kind: Literal["dog"]
    good: bool


class Pet(pydantic.BaseModel):
    animal: Cat | Dog = pydantic.Field(discriminator="kind")


class Tree(pydantic.BaseModel):
    children: list[Tree] = []


class Stamped(pydantic.BaseModel):
    at: Any
    when: pydantic.PastDate
    code: str = pydantic.Field(default="A", pattern="^[A-Z]+$")


class Boxed(pydantic.BaseModel, Generic[T]):
    item: T


class Crate(pydantic.BaseModel):
    boxes: list[Boxed[int]]


class Legacy(pydantic.v1.BaseModel):
    a: int


class Opaque:
    pass


class Strange(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    thing: Opaque


ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An item of an order.",
    "properties": {
        "name": {"type": "string", "description": "What it is called."},
        "qty": {"type": "integer", "default": 1, "minimum": 1},
        "color": {
            "anyOf": [{"type": "string", "enum": ["red", "green"]}, {"type": "null"}],
            "default": None,
        },
        "size": {"type": "string", "enum": ["S", "M", "L"], "default": "M"},
    },
    "required": ["name"],
    "additionalProperties": False,
}


def _walk(schema: Any) -> list[dict[str, Any]]:
    """Every dict in ``schema`` (schemas and data alike)."""
    found: list[dict[str, Any]] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def test_a_pydantic_model_gives_its_own_schema_inlined_closed_and_without_made_up_titles() -> None:
    assert schema_for(Item) == ITEM_SCHEMA
    schema = schema_for(Order)
    assert schema["properties"]["items"] == {"type": "array", "items": ITEM_SCHEMA}
    # A field's description wins over its model's docstring.
    assert schema["properties"]["main"] == {
        **ITEM_SCHEMA,
        "description": "The item that matters most.",
    }
    # The alias is the JSON name; a title set on purpose stays.
    assert schema["required"] == ["items", "main", "customerName"]
    assert schema["properties"]["note"]["title"] == "Note to the cook"
    assert schema["additionalProperties"] is False
    nodes = _walk(schema)
    assert not any("$ref" in node or "$defs" in node for node in nodes)
    assert [node["title"] for node in nodes if "title" in node] == ["Note to the cook"]
    Draft202012Validator.check_schema(schema)


def test_a_pydantic_model_that_allows_extra_fields_stays_open() -> None:
    assert schema_for(Loose)["additionalProperties"] is True
    assert validate_arguments(schema_for(Loose), {"a": 1, "b": 2}) == []


def test_a_discriminated_union_keeps_its_one_of_and_drops_openapis_discriminator() -> None:
    schema = schema_for(Pet)
    animal = schema["properties"]["animal"]
    assert "discriminator" not in animal
    assert [arm["properties"]["kind"]["const"] for arm in animal["oneOf"]] == ["cat", "dog"]
    assert structure_value(Pet, {"animal": {"kind": "dog", "good": True}}) == Pet(
        animal=Dog(kind="dog", good=True)
    )
    problems = validate_arguments(schema, {"animal": {"kind": "dog", "lives": 9}})
    assert problems
    assert all(problem.startswith("$.animal") for problem in problems)


def test_pydantic_models_without_a_finite_json_schema_are_refused_saying_why() -> None:
    with pytest.raises(ValidationError) as recursive:
        schema_for(Tree)
    assert recursive.value.message.endswith(
        "Tree: recursive models are not supported (Tree -> Tree); schemas are inlined, without $ref"
    )
    with pytest.raises(ValidationError) as opaque:
        schema_for(Strange)
    assert "Strange: pydantic gives no JSON Schema for it" in opaque.value.message
    assert len(opaque.value.message) < 400


def test_a_generic_model_is_inlined_without_its_made_up_title() -> None:
    assert schema_for(Crate)["properties"]["boxes"]["items"] == {
        "type": "object",
        "properties": {"item": {"type": "integer"}},
        "required": ["item"],
        "additionalProperties": False,
    }
    assert structure_value(Crate, {"boxes": [{"item": 2}]}) == Crate(boxes=[Boxed[int](item=2)])


def test_a_pydantic_v1_model_is_refused_saying_so() -> None:
    with pytest.raises(ValidationError, match="pydantic v1 models are not supported"):
        schema_for(Legacy)


ORDER = {
    "items": [{"name": "tea", "qty": 2}],
    "main": {"name": "cake", "color": "green"},
    "customerName": "Ada",
}


def test_a_pydantic_model_is_built_with_model_validate() -> None:
    assert validate_arguments(schema_for(Order), ORDER) == []
    order = structure_value(Order, ORDER)
    assert order == Order.model_validate(ORDER)
    assert order.main.color is Color.GREEN
    assert order.customer == "Ada"


def test_pydantics_refusals_read_as_paths_and_messages_without_values_or_links() -> None:
    # What the schema cannot say (a validator, a date in the past) is pydantic's to refuse.
    with pytest.raises(ValidationError) as caught:
        structure_value(Order, {**ORDER, "note": "NOW!"})
    assert caught.value.message == "$.note: no shouting in notes"
    with pytest.raises(ValidationError) as dated:
        structure_value(
            list[Stamped],
            [{"at": 1, "when": "2001-01-01"}, {"at": 2, "when": "2999-01-01", "code": "x"}],
        )
    problems = dated.value.message.split("; ")
    assert [problem.split(": ", 1)[0] for problem in problems] == ["$[1].when", "$[1].code"]
    assert problems[0] == "$[1].when: Date should be in the past"
    assert "2999" not in dated.value.message
    assert "pydantic.dev" not in dated.value.message
    assert "input_value" not in dated.value.message


@dataclasses.dataclass
class Ticket:
    order: Order
    seats: int = 1


def test_a_pydantic_model_inside_a_dataclass_reports_at_its_full_path() -> None:
    value = {"order": {**ORDER, "note": "hi!"}}
    assert validate_arguments(schema_for(Ticket), value) == []
    with pytest.raises(ValidationError) as caught:
        structure_value(Ticket, value)
    assert caught.value.message == "$.order.note: no shouting in notes"
    assert structure_value(Ticket, {"order": ORDER}) == Ticket(Order.model_validate(ORDER))


@pydantic.dataclasses.dataclass
class Reading:
    value: float = pydantic.Field(description="In degrees.", ge=-273.15)


def test_a_pydantic_dataclass_is_read_and_built_by_pydantic() -> None:
    schema = schema_for(Reading)
    assert schema["properties"]["value"] == {
        "type": "number",
        "description": "In degrees.",
        "minimum": -273.15,
    }
    assert structure_value(Reading, {"value": 20}) == Reading(20.0)
    with pytest.raises(ValidationError, match=r"^\$\.value: Input should be greater than"):
        structure_value(Reading, {"value": -300})


# ---------------------------------------------------------------------------------------------
# Tool signatures


class Address(pydantic.BaseModel):
    street: str
    city: str = "Paris"

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        return f"{self.street}, {self.city}"


HOME = Address(street="Rue de Rivoli")


def ship(
    order: Order,
    address: Address = HOME,
    box: Box | None = None,
    query: Query | None = None,
) -> str:
    """Ship an order.

    Args:
        order: What to ship.
    """
    return ""


def bad_default(address: Address = {"street": "x"}) -> None:  # type: ignore[assignment]  # noqa: B006
    pass


def test_tool_parameters_take_pydantic_models_dataclasses_and_typeddicts() -> None:
    signature = signature_of(ship)
    properties = signature.parameters["properties"]
    assert properties["order"]["description"] == "What to ship."
    assert properties["order"]["properties"]["main"]["properties"] == ITEM_SCHEMA["properties"]
    assert properties["address"]["required"] == ["street"]
    assert "label" not in properties["address"]["properties"]  # computed: not an input
    assert signature.parameters["required"] == ["order"]
    # Every vendor takes it as it is, apart from nothing at all.
    ToolDefinition("ship", "", signature.parameters)
    for vendor in ("openai", "anthropic", "ollama"):
        assert project(signature.parameters, vendor).outcome == "adopted"
    arguments = {"order": ORDER, "box": {"label": "x", "corners": []}, "query": {"text": "q"}}
    assert validate_arguments(signature.parameters, arguments) == []
    values = structure_arguments(signature, arguments)
    assert values["order"] == Order.model_validate(ORDER)
    assert values["address"] == Address(street="Rue de Rivoli")  # the default, checked
    assert values["box"] == Box("x", [])
    assert values["query"] == {"text": "q"}


def test_a_tools_pydantic_refusal_names_the_tool_and_the_path() -> None:
    signature = signature_of(ship)
    with pytest.raises(ValidationError) as caught:
        structure_arguments(signature, {"order": {**ORDER, "note": "!"}})
    assert caught.value.message == (
        "invalid arguments for tool 'ship': $.order.note: no shouting in notes"
    )


def test_a_default_that_is_not_an_instance_is_refused() -> None:
    with pytest.raises(ValidationError, match="parameter 'address': the default"):
        signature_of(bad_default)


def test_schema_for_does_not_import_pydantic() -> None:
    code = (
        "import dataclasses, sys, typing\n"
        "from protocols.toolschema import schema_for, structure_value\n"
        "import actors\n"
        "@dataclasses.dataclass\n"
        "class A:\n"
        "    x: int\n"
        "class B(typing.TypedDict):\n"
        "    a: A\n"
        "assert structure_value(B, {'a': {'x': 1}}) == {'a': A(1)}\n"
        "print(schema_for(B)['required'], 'pydantic' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "['a'] False"


# ---------------------------------------------------------------------------------------------
# Properties: generated classes round-trip through JSON


Leaf = tuple[Any, st.SearchStrategy[Any]]
finite = st.floats(allow_nan=False, allow_infinity=False)
LEAVES: list[Leaf] = [
    (int, st.integers(-(2**40), 2**40)),
    (str, st.text(max_size=6)),
    (bool, st.booleans()),
    (float, finite),
    (Optional[int], st.none() | st.integers(-5, 5)),  # noqa: UP045
    (Literal["a", "b"], st.sampled_from(["a", "b"])),
    (Color, st.sampled_from(Color)),
    (list[str], st.lists(st.text(max_size=3), max_size=3)),
]

_counter = iter(range(10**9))


@st.composite
def records(draw: st.DrawFn, depth: int = 0) -> Leaf:
    """A generated class (dataclass, TypedDict or pydantic model) and instances of it."""
    kind = draw(st.sampled_from(["dataclass", "typeddict", "pydantic"]))
    count = draw(st.integers(1, 4))
    fields: list[tuple[str, Any, st.SearchStrategy[Any], bool]] = []
    for index in range(count):
        nested = depth < 2 and draw(st.booleans())
        annotation, values = draw(records(depth + 1)) if nested else draw(st.sampled_from(LEAVES))
        if draw(st.booleans()):
            annotation, values = list[annotation], st.lists(values, max_size=2)  # type: ignore[valid-type]
        fields.append((f"f{index}", annotation, values, draw(st.booleans())))
    name = f"Gen{next(_counter)}"
    cls: Any
    if kind == "dataclass":
        ordered = sorted(fields, key=lambda field: field[3])  # required ones first
        cls = dataclasses.make_dataclass(
            name,
            [
                (n, a, dataclasses.field(default=None)) if optional else (n, a)
                for n, a, _, optional in ordered
            ],
        )
        strategy = st.builds(cls, **{n: v for n, _, v, _ in fields})
    elif kind == "typeddict":
        cls = typing_extensions.TypedDict(  # type: ignore[operator]
            name,
            {n: NotRequired[a] if optional else Required[a] for n, a, _, optional in fields},
        )
        strategy = st.fixed_dictionaries(
            {n: v for n, _, v, optional in fields if not optional},
            optional={n: v for n, _, v, optional in fields if optional},
        )
    else:
        cls = pydantic.create_model(
            name,
            **{n: (a, None if optional else ...) for n, a, _, optional in fields},  # type: ignore[call-overload]
        )
        strategy = st.builds(cls, **{n: v for n, _, v, _ in fields})
    return cls, strategy


def json_form(value: Any) -> Any:
    """Test-side dumper: what a model would send for ``value``."""
    if isinstance(value, pydantic.BaseModel):
        return {key: json_form(item) for key, item in value}
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_form(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [json_form(item) for item in value]
    if isinstance(value, dict):
        return {key: json_form(item) for key, item in value.items()}
    return value


@st.composite
def record_values(draw: st.DrawFn) -> tuple[Any, Any]:
    cls, strategy = draw(records())
    return cls, draw(strategy)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_values())
def test_a_generated_class_round_trips_instance_json_validate_instance(
    generated: tuple[Any, Any],
) -> None:
    cls, value = generated
    schema = schema_for(cls)
    Draft202012Validator.check_schema(schema)
    sent = json.loads(json.dumps(json_form(value)))
    assert validate_arguments(wrap(schema), {"value": sent}) == []
    assert structure_value(cls, sent) == value
    # The schema is closed: a field the class does not have is refused before anything is built.
    assert validate_arguments(schema, {**sent, "stray": 1}) != []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_values())
def test_a_generated_class_is_a_tool_parameter_every_vendor_takes(
    generated: tuple[Any, Any],
) -> None:
    cls, value = generated

    def use(thing: Any) -> None:
        pass

    use.__annotations__ = {"thing": cls, "return": None}
    signature = signature_of(use)
    for vendor in ("openai", "anthropic", "ollama"):
        assert project(signature.parameters, vendor).outcome != "rejected"
    sent = json.loads(json.dumps({"thing": json_form(value)}))
    assert validate_arguments(signature.parameters, sent) == []
    assert structure_arguments(signature, sent) == {"thing": value}
    assert isinstance(signature, ToolSignature)
