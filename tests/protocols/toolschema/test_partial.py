"""Structured answers while they stream: ``PartialOutput`` and ``partial_value`` -- what a partial
shows under a schema, and (property) for random schemas, random valid values and the four class
kinds, every partial of every chunking consistent with the final value, growing, and the last
one the strictly validated value."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Literal

import attrs
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from partial_kit import consistent, same

from protocols import PartialJSON, ProtocolError, ValidationError, loads
from protocols.partial_json import NOTHING, JSONPrefix
from protocols.toolschema import (
    PartialOutput,
    partial_value,
    schema_for,
    structure_value,
    validate_arguments,
)


def stream(schema: Any, text: str, *, strings: bool = False, size: int = 1) -> list[Any]:
    """Every new partial, feeding ``size`` characters at a time, and the one at close."""
    output = PartialOutput(schema, strings=strings)
    seen = []
    for start in range(0, len(text), size):
        if output.feed(text[start : start + size]):
            seen.append(output.value)
    if output.close():
        seen.append(output.value)
    return seen


# -- the four class kinds -----------------------------------------------------------------------


@dataclasses.dataclass
class Stop:
    city: str
    nights: int = 1


@dataclasses.dataclass
class Trip:
    title: str
    stops: list[Stop]
    rating: float | None = None
    kind: Literal["work", "fun"] = "fun"


@attrs.define
class AttrsStop:
    city: str
    nights: int = 1


@attrs.define
class AttrsTrip:
    title: str
    stops: list[AttrsStop]
    rating: float | None = None
    kind: Literal["work", "fun"] = "fun"


class TypedStop(typing.TypedDict):
    city: str
    nights: typing.NotRequired[int]


class TypedTrip(typing.TypedDict):
    title: str
    stops: list[TypedStop]
    rating: typing.NotRequired[float | None]
    kind: typing.NotRequired[Literal["work", "fun"]]


class PydanticStop(pydantic.BaseModel):
    city: str
    nights: int = pydantic.Field(default=1, ge=0)


class PydanticTrip(pydantic.BaseModel):
    title: str = pydantic.Field(max_length=60)
    stops: list[PydanticStop]
    rating: float | None = None
    kind: Literal["work", "fun"] = "fun"


TRIPS = [Trip, AttrsTrip, TypedTrip, PydanticTrip]
ANSWER = (
    '{"title": "Coast", "stops": [{"city": "Nice", "nights": 2}, {"city": "Genoa"}], '
    '"rating": 4.5, "kind": "work"}'
)


@pytest.mark.parametrize("cls", TRIPS, ids=lambda cls: cls.__name__)
def test_a_class_answer_streams_as_a_dict_of_its_complete_fields(cls: type) -> None:
    seen = stream(schema_for(cls), ANSWER)
    assert seen == [
        {},
        {"title": "Coast"},
        {"title": "Coast", "stops": []},
        {"title": "Coast", "stops": [{}]},
        {"title": "Coast", "stops": [{"city": "Nice"}]},
        {"title": "Coast", "stops": [{"city": "Nice", "nights": 2}]},
        {"title": "Coast", "stops": [{"city": "Nice", "nights": 2}, {}]},
        {"title": "Coast", "stops": [{"city": "Nice", "nights": 2}, {"city": "Genoa"}]},
        {
            "title": "Coast",
            "stops": [{"city": "Nice", "nights": 2}, {"city": "Genoa"}],
            "rating": 4.5,
        },
        loads(ANSWER),
    ]
    assert all(type(partial) is dict for partial in seen)  # never an instance
    final = structure_value(cls, seen[-1])  # the final one is what the class is built from
    assert final == structure_value(cls, loads(ANSWER))


@pytest.mark.parametrize("cls", TRIPS, ids=lambda cls: cls.__name__)
def test_a_growing_string_of_a_class_field(cls: type) -> None:
    seen = stream(schema_for(cls), '{"title": "Co", "kind": "fun"}', strings=True)
    assert seen[:4] == [{}, {"title": ""}, {"title": "C"}, {"title": "Co"}]
    # An enum's string is shown only complete: "f" is no valid kind.
    assert seen[-2:] == [{"title": "Co"}, {"title": "Co", "kind": "fun"}]


def test_a_field_that_fails_its_schema_is_left_out() -> None:
    schema = schema_for(Trip)
    text = '{"title": 7, "stops": [{"city": "Nice"}, {"city": 3}, {"city": "Rome"}], "kind": "x"}'
    seen = stream(schema, text)
    assert {"title": 7} not in seen
    assert {"stops": [{"city": "Nice"}]} in seen  # the items before the bad one
    assert {"stops": [{"city": "Nice"}, {"city": "Rome"}]} not in seen  # never after it
    assert seen[-1] == {}  # the stops, complete, are invalid: the field is left out


def test_a_missing_required_field_is_no_reason_to_hide_the_others() -> None:
    schema = schema_for(Trip)
    assert stream(schema, '{"stops": []}')[-1] == {"stops": []}
    assert validate_arguments(schema, {"stops": []})  # although the whole is invalid


def test_unknown_fields_are_left_out() -> None:
    assert stream(schema_for(Trip), '{"title": "a", "extra": 1}')[-1] == {"title": "a"}


def test_pydantic_validators_run_on_the_final_object_only() -> None:
    class Verdict(pydantic.BaseModel):
        label: str

        @pydantic.field_validator("label")
        @classmethod
        def known(cls, label: str) -> str:
            if label not in ("spam", "ham"):
                raise ValueError("label must be spam or ham")
            return label

    assert stream(schema_for(Verdict), '{"label": "junk"}')[-1] == {"label": "junk"}
    with pytest.raises(ValidationError, match="label must be spam or ham"):
        structure_value(Verdict, {"label": "junk"})


def test_pydantic_aliases_key_the_partial() -> None:
    class Named(pydantic.BaseModel):
        full_name: str = pydantic.Field(alias="fullName")

    assert stream(schema_for(Named), '{"fullName": "Ada"}')[-1] == {"fullName": "Ada"}


# -- JSON Schemas -------------------------------------------------------------------------------


def test_a_schema_for_a_list_of_records() -> None:
    schema = {
        "type": "array",
        "items": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }
    assert stream(schema, '[{"n": 1}, {"n": 2}]') == [
        [],
        [{}],
        [{"n": 1}],
        [{"n": 1}, {}],
        [{"n": 1}, {"n": 2}],  # (closing the item and the array shows nothing new)
    ]


def test_scalars_at_the_top() -> None:
    assert stream({"type": "integer"}, "42") == [42]  # a number ends with the answer
    assert stream({"type": "integer"}, '"42"') == []
    assert stream({"type": "string"}, '"ab"', strings=True) == ["", "a", "ab"]
    assert stream({"type": "string", "pattern": "^a+$"}, '"ab"', strings=True) == []


def test_union_of_object_shapes_shows_the_arm_that_fits() -> None:
    schema = {
        "anyOf": [
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"b": {"type": "string"}},
                "additionalProperties": False,
            },
        ]
    }
    assert stream(schema, '{"b": "x"}') == [{}, {"b": "x"}]
    assert stream(schema, '{"a": 1}') == [{}, {"a": 1}]


def test_a_string_under_a_union_grows_only_where_every_arm_takes_its_prefixes() -> None:
    either = {"anyOf": [{"const": "fixed"}, {"type": "string", "maxLength": 4}]}
    # (A prefix of "fixed" fits the second arm until it is too long for it: never shown.)
    assert stream(either, '"fixed"', strings=True) == ["fixed"]
    lengths = {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "string", "maxLength": 9}]}
    assert stream(lengths, '"abcde"', strings=True) == ["", "a", "ab", "abc", "abcd", "abcde"]
    optional = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert stream(optional, '"ab"', strings=True) == ["", "a", "ab"]


def test_strings_inside_a_container_several_arms_take_are_shown_complete() -> None:
    schema = {
        "anyOf": [
            {"type": "array", "items": {"type": "string", "maxLength": 3}},
            {"type": "array", "items": {"const": "fixed"}},
        ]
    }
    assert stream(schema, '["fixed"]', strings=True) == [[], ["fixed"]]
    one = {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    assert stream(one, '["ab"]', strings=True) == [[], [""], ["a"], ["ab"]]


def test_what_one_arm_showed_of_an_open_member_another_never_takes_back() -> None:
    # The final value fits the second arm only; the first would show "b" open, then find "k"
    # invalid. Under a union that several object arms take, only complete members show.
    schema = {
        "anyOf": [
            {
                "type": "object",
                "properties": {"b": {"type": "object", "properties": {"k": {"type": "string"}}}},
            },
            {"type": "object", "properties": {"b": {"const": {"k": 1, "m": 2}}}},
        ]
    }
    assert stream(schema, '{"b": {"k": 1, "m": 2}}') == [{}, {"b": {"k": 1, "m": 2}}]


def test_containers_judged_as_a_whole_are_shown_complete() -> None:
    schema = {"type": "object", "properties": {"p": {"const": {"x": 1}}}}
    assert stream(schema, '{"p": {"x": 1}}') == [{}, {"p": {"x": 1}}]


def test_local_refs_are_followed() -> None:
    schema = {
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "type": "object",
        "properties": {"at": {"$ref": "#/$defs/Point"}, "n": {"type": "integer"}},
    }
    assert stream(schema, '{"at": {"x": 1.5}, "n": 2}') == [
        {},
        {"at": {}},
        {"at": {"x": 1.5}},
        {"at": {"x": 1.5}, "n": 2},
    ]
    # Checked through the $ref: invalid once complete, and left out.
    assert stream(schema, '{"at": {"x": "no"}}') == [{}, {"at": {}}, {}]


def test_partial_value_of_one_prefix() -> None:
    schema = schema_for(Trip)
    reader = PartialJSON()
    reader.feed('{"title": "Coast", "stops": [{"city": "Ni')
    assert partial_value(schema, reader.prefix()) == {"title": "Coast", "stops": [{}]}
    assert partial_value(schema, JSONPrefix(NOTHING)) is NOTHING


def test_an_invalid_schema_is_refused() -> None:
    with pytest.raises(ValidationError, match="the output schema is invalid"):
        PartialOutput({"type": "no such type"})
    with pytest.raises(ValidationError, match="needs a JSON Schema"):
        PartialOutput(["not", "a", "schema"])  # type: ignore[arg-type]


def test_text_that_is_not_json_is_refused_until_reset() -> None:
    output = PartialOutput(schema_for(Trip))
    with pytest.raises(ProtocolError, match="expected a JSON value"):
        output.feed("Here you go: {")
    with pytest.raises(ProtocolError):
        output.feed('{"title": "a"}')
    output.reset()
    output.feed('{"title": "a"}')
    assert output.value == {"title": "a"}
    cut = PartialOutput(schema_for(Trip))
    cut.feed('{"title": ')
    with pytest.raises(ProtocolError, match="ends with an incomplete value"):
        cut.close()


def test_reset_starts_a_new_answer() -> None:
    output = PartialOutput(schema_for(Trip))
    output.feed('{"title": "first", ')
    assert output.value == {"title": "first"}
    output.reset()
    assert output.value is NOTHING
    output.feed('{"stops": [], ')
    assert output.value == {"stops": []}


# -- properties ---------------------------------------------------------------------------------

_NAMES = ["a", "b", "name", "note", "x", "é"]
_LEAVES = [
    {"type": "string"},
    {"type": "string", "maxLength": 4},
    {"type": "string", "enum": ["red", "green", "blue"]},
    {"type": "string", "pattern": "^[a-c]*$"},
    {"type": "string", "description": "words"},
    {"type": "integer"},
    {"type": "integer", "minimum": 0, "maximum": 9},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"const": "fixed"},
    {"const": {"k": [1, "a"]}},
    {"enum": [[1, 2], {"m": None}]},
    {},
]


def _containers(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    records = st.dictionaries(st.sampled_from(_NAMES), inner, max_size=4).flatmap(
        lambda properties: st.builds(
            lambda required, closed: {
                "type": "object",
                "properties": properties,
                "required": sorted(required),
                "additionalProperties": not closed,
            },
            st.sets(st.sampled_from(sorted(properties))) if properties else st.just(set()),
            st.booleans(),
        )
    )
    return st.one_of(
        records,
        st.builds(lambda items: {"type": "array", "items": items}, inner),
        st.builds(lambda items: {"type": "object", "additionalProperties": items}, inner),
        st.lists(inner, min_size=1, max_size=3).map(
            lambda items: {
                "type": "array",
                "prefixItems": items,
                "minItems": len(items),
                "maxItems": len(items),
            }
        ),
        st.builds(lambda arm: {"anyOf": [arm, {"type": "null"}]}, inner),
        st.lists(inner, min_size=2, max_size=3).map(lambda arms: {"anyOf": arms}),
    )


schemas: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.sampled_from(_LEAVES), _containers, max_leaves=10
)


def values_of(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Valid values of ``schema`` (the schemas :data:`schemas` makes, and the classes')."""
    if "anyOf" in schema:
        return st.one_of([values_of(arm) for arm in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return st.text(max_size=schema.get("maxLength", 8))
    if kind == "integer":
        return st.integers(schema.get("minimum", -(10**12)), schema.get("maximum", 10**12))
    if kind == "number":
        low = schema.get("minimum")
        return st.floats(min_value=low, allow_nan=False, allow_infinity=False) | st.integers(
            min_value=0 if low is not None else None
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        if "prefixItems" in schema:
            return st.tuples(*map(values_of, schema["prefixItems"])).map(list)
        return st.lists(values_of(schema["items"]), max_size=4)
    if kind == "object":
        properties = schema.get("properties", {})
        other = schema.get("additionalProperties", True)
        required = set(schema.get("required", ()))
        fixed = st.fixed_dictionaries(
            {name: values_of(sub) for name, sub in properties.items() if name in required},
            optional={
                name: values_of(sub) for name, sub in properties.items() if name not in required
            },
        )
        if isinstance(other, dict):
            extra = st.dictionaries(st.sampled_from(["k", "l", "m"]), values_of(other), max_size=3)
            return st.tuples(fixed, extra).map(lambda both: {**both[1], **both[0]})
        return fixed
    return st.none() | st.integers() | st.text(max_size=4) | st.lists(st.booleans(), max_size=2)


@st.composite
def answers(draw: st.DrawFn, schema: dict[str, Any]) -> tuple[Any, str, list[int]]:
    """A valid value of ``schema``, a text of it and the cut points of a random chunking."""
    value = draw(values_of(schema))
    text = json.dumps(
        value, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans())
    )
    if draw(st.booleans()):
        text = "```json\n" + text + "\n```"
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=max(1, len(text) - 1)))))
    return value, text, cuts


def check_stream(schema: Any, answer: tuple[Any, str, list[int]], strings: bool) -> Any:
    """Stream the answer in its chunks: each partial consistent with the final value and at
    least what the one before showed; the last the value itself. Returns the last."""
    value, text, cuts = answer
    final = json.loads(json.dumps(value))
    assert validate_arguments(schema, final) == [], "the value is valid (the test's premise)"
    output = PartialOutput(schema, strings=strings)
    before: Any = NOTHING
    for start, stop in zip([0, *cuts], [*cuts, len(text)], strict=True):
        changed = output.feed(text[start:stop])
        shown = output.value
        assert changed == (shown is not before)
        assert consistent(shown, final, strings=strings), (shown, final)
        assert consistent(before, shown, strings=strings), (before, shown)  # only grows
        before = shown
    output.close()
    assert same(output.value, final)  # the last is the strict value
    return output.value


@settings(max_examples=400, deadline=None)
@given(st.data(), st.booleans())
def test_every_partial_of_a_random_schema_is_consistent(data: st.DataObject, strings: bool) -> None:
    schema = data.draw(schemas)
    check_stream(schema, data.draw(answers(schema)), strings)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(TRIPS), st.booleans())
def test_every_partial_of_a_class_answer_is_consistent(
    data: st.DataObject, cls: type, strings: bool
) -> None:
    schema = schema_for(cls)
    last = check_stream(schema, data.draw(answers(schema)), strings)
    structure_value(cls, last)  # and the class builds from it


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_partial_value_agrees_with_partial_output(data: st.DataObject) -> None:
    schema = data.draw(schemas)
    _, text, cuts = data.draw(answers(schema))
    output = PartialOutput(schema)
    reader = PartialJSON()
    for start, stop in zip([0, *cuts], [*cuts, len(text)], strict=True):
        output.feed(text[start:stop])
        reader.feed(text[start:stop])
        assert same(output.value, partial_value(schema, reader.prefix()))
