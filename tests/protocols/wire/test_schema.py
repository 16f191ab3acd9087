"""Tests for protocols.wire.schema: every adoption, adaptation and rejection rule, the input never
mutated, then property tests over random nested object schemas."""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
import string
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from protocols.wire.schema import Projection, project

VENDORS = ["openai", "anthropic", "ollama"]
FILLING = ["openai", "ollama"]


def snapshot(value: Any) -> str | None:
    """Everything about ``value`` (its repr shows cycles as ``{...}``; None when too deep)."""
    try:
        return repr(value)
    except RecursionError:
        return None


def projected(schema: Any, vendor: Any, **kwargs: Any) -> Projection:
    """project(), asserting it left its input exactly as it was."""
    before = snapshot(schema)
    result = project(schema, vendor, **kwargs)
    assert snapshot(schema) == before
    return result


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


# --------------------------------------------------------------------------- adoption


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_plain_schema_is_adopted_as_the_same_object(vendor: Any) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "A city", "minLength": 1},
            "days": {"type": "integer", "minimum": 1, "default": 1},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            "when": {"type": "string", "format": "date-time"},
            "mode": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    result = projected(schema, vendor)
    assert result == Projection("adopted", schema)
    assert result.schema is schema
    assert result.changes == ()
    assert result.reason is None


def test_anthropic_takes_missing_properties_and_items_as_they_are() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "array"}}
    assert projected(schema, "anthropic").schema is schema


@pytest.mark.parametrize("vendor", VENDORS)
def test_nested_schema_keywords_are_left_alone(vendor: Any) -> None:
    schema = obj(x={"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"})
    assert projected(schema, vendor).schema is schema


@pytest.mark.parametrize("vendor", VENDORS)
def test_unknown_keywords_and_odd_shapes_are_carried_over(vendor: Any) -> None:
    schema = {
        "type": "object",
        "properties": {},
        "x-vendor": {"nested": [1, 2.5, None, True]},
        "items": 3,  # not a schema: projection does not validate, it carries it over
        "anyOf": "oops",
    }
    assert projected(schema, vendor).schema is schema


@pytest.mark.parametrize("vendor", VENDORS)
def test_shared_subschemas_are_not_cycles(vendor: Any) -> None:
    shared = {"type": "string"}
    schema = obj(a=shared, b=shared, c={"type": "array", "items": shared})
    assert projected(schema, vendor).outcome == "adopted"


@pytest.mark.parametrize("vendor", VENDORS)
def test_reserved_words_in_values_and_patterns_are_fine(vendor: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["constructor", "__proto__"], "default": "prototype"}},
        "patternProperties": {"constructor": {"type": "string"}},
        "description": "prototype constructor",
    }
    assert projected(schema, vendor).schema is schema


# --------------------------------------------------------------------------- adaptation


@pytest.mark.parametrize("vendor", VENDORS)
def test_root_schema_keyword_is_dropped_for_every_vendor(vendor: Any) -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"a": {"type": "string"}},
    }
    result = projected(schema, vendor)
    assert result == Projection(
        "adapted",
        {"type": "object", "properties": {"a": {"type": "string"}}},
        ("dropped '$schema' at $",),
    )


@pytest.mark.parametrize("vendor", FILLING)
def test_object_without_properties_gets_empty_properties(vendor: Any) -> None:
    schema = {"type": "object", "description": "anything"}
    assert projected(schema, vendor) == Projection(
        "adapted",
        {"type": "object", "description": "anything", "properties": {}},
        ("added empty 'properties' at $",),
    )


@pytest.mark.parametrize("vendor", FILLING)
def test_nested_objects_and_arrays_are_filled_everywhere(vendor: Any) -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "when": {"type": "object"},
            "tags": {"type": "array"},
            "maybe": {"type": ["object", "null"]},
            "list": {"type": "array", "items": {"type": "array"}},
            "either": {"anyOf": [{"type": "object"}, {"type": "string"}]},
            "tuple": {"type": "array", "prefixItems": [{"type": "array"}]},
            "odd key": {"type": "object"},
        },
        "additionalProperties": {"type": "object"},
        "$defs": {"Point": {"type": "object", "required": ["x"]}},
    }
    result = projected(schema, vendor)
    assert result.outcome == "adapted"
    assert result.changes == (
        "dropped '$schema' at $",
        "added empty 'properties' at $.properties.when",
        "added empty 'items' at $.properties.tags",
        "added empty 'properties' at $.properties.maybe",
        "added empty 'items' at $.properties.list.items",
        "added empty 'properties' at $.properties.either.anyOf[0]",
        "added empty 'items' at $.properties.tuple.prefixItems[0]",
        "added empty 'items' at $.properties.tuple",
        "added empty 'properties' at $.properties[\"odd key\"]",
        "added empty 'properties' at $.additionalProperties",
        "added empty 'properties' at $.$defs.Point",
    )
    assert result.schema == {
        "type": "object",
        "properties": {
            "when": {"type": "object", "properties": {}},
            "tags": {"type": "array", "items": {}},
            "maybe": {"type": ["object", "null"], "properties": {}},
            "list": {"type": "array", "items": {"type": "array", "items": {}}},
            "either": {"anyOf": [{"type": "object", "properties": {}}, {"type": "string"}]},
            "tuple": {
                "type": "array",
                "prefixItems": [{"type": "array", "items": {}}],
                "items": {},
            },
            "odd key": {"type": "object", "properties": {}},
        },
        "additionalProperties": {"type": "object", "properties": {}},
        "$defs": {"Point": {"type": "object", "required": ["x"], "properties": {}}},
    }


@pytest.mark.parametrize("keyword", ["not", "if", "then", "else", "contains", "propertyNames"])
def test_every_single_subschema_keyword_is_walked(keyword: str) -> None:
    # Under a property: at the root, OpenAI's rules drop "not" (see the flattening tests).
    schema = obj(p={"type": "object", "properties": {}, keyword: {"type": "array"}})
    assert projected(schema, "openai").changes == (
        f"added empty 'items' at $.properties.p.{keyword}",
    )


@pytest.mark.parametrize("keyword", ["allOf", "oneOf", "anyOf", "prefixItems"])
def test_every_subschema_list_keyword_is_walked(keyword: str) -> None:
    # Under a property: a root anyOf/oneOf/allOf is flattened (see the flattening tests).
    schema = obj(p={"type": "object", "properties": {}, keyword: [True, {"type": "array"}]})
    assert projected(schema, "ollama").changes == (
        f"added empty 'items' at $.properties.p.{keyword}[1]",
    )


@pytest.mark.parametrize(
    "keyword", ["patternProperties", "definitions", "dependentSchemas", "dependencies"]
)
def test_every_subschema_map_keyword_is_walked(keyword: str) -> None:
    schema = {"type": "object", "properties": {}, keyword: {"k": {"type": "array"}}}
    assert projected(schema, "ollama").changes == (f"added empty 'items' at $.{keyword}.k",)


def test_array_form_items_are_walked() -> None:
    schema = obj(t={"type": "array", "items": [{"type": "object"}, False]})
    assert projected(schema, "openai").changes == (
        "added empty 'properties' at $.properties.t.items[0]",
    )


def test_data_values_are_not_walked_as_schemas() -> None:
    schema = obj(a={"type": "object", "properties": {}, "default": {"type": "object"}})
    assert projected(schema, "openai").outcome == "adopted"


def test_adapted_schema_is_an_independent_deep_copy() -> None:
    schema = {
        "$schema": "x",
        "type": "object",
        "properties": {"a": {"type": "string", "enum": ["x", "y"]}, "b": {"type": "object"}},
    }
    result = projected(schema, "openai")
    assert result.schema is not None
    assert result.schema["properties"] is not schema["properties"]
    assert result.schema["properties"]["a"] is not schema["properties"]["a"]
    assert result.schema["properties"]["a"]["enum"] is not schema["properties"]["a"]["enum"]
    result.schema["properties"]["a"]["enum"].append("z")
    assert schema["properties"]["a"]["enum"] == ["x", "y"]


@pytest.mark.parametrize("vendor", VENDORS)
def test_an_adapted_schema_projects_again_as_adopted(vendor: Any) -> None:
    schema = {"$schema": "x", "type": "object", "properties": {"a": {"type": "array"}}}
    first = projected(schema, vendor)
    assert first.outcome == "adapted"
    assert first.schema is not None
    again = projected(first.schema, vendor)
    assert again.outcome == "adopted"
    assert again.schema is first.schema


# --------------------------------------------------------------------------- rejection


def rejected(schema: Any, vendor: Any = "openai", **kwargs: Any) -> str:
    result = projected(schema, vendor, **kwargs)
    assert result.outcome == "rejected"
    assert result.schema is None
    assert result.changes == ()
    assert result.reason
    return result.reason


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"properties": {}},
        {"type": ["object", "null"]},
        {"anyOf": [{"type": "object"}, {"type": "string"}]},  # not every member an object
        {"oneOf": []},
        {"type": "string", "anyOf": [{"type": "object"}]},
        {},
    ],
)
def test_root_must_be_an_object_schema(schema: Any, vendor: Any) -> None:
    assert rejected(schema, vendor) == (
        'the root schema must have "type": "object" (or be an anyOf/oneOf of object schemas)'
    )


@pytest.mark.parametrize("schema", [[], "object", None, True, 1])
def test_root_must_be_a_json_object(schema: Any) -> None:
    assert rejected(schema).startswith("the schema must be a JSON object, not a ")


def test_unknown_vendor() -> None:
    assert rejected({"type": "object"}, "mistral").startswith("unknown vendor 'mistral'")


def test_a_cycle_through_properties() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    schema["properties"]["self"] = schema
    assert rejected(schema) == "the schema contains itself at $.properties.self (a cycle)"


def test_a_cycle_through_a_schema_list() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}, "anyOf": []}
    schema["anyOf"].append({"anyOf": schema["anyOf"]})
    assert rejected(schema) == "the schema contains itself at $.anyOf[0].anyOf (a cycle)"


def test_a_cycle_in_data() -> None:
    default: list[Any] = [1]
    default.append(default)
    schema = obj(a={"default": default})
    assert rejected(schema) == "the schema contains itself at $.properties.a.default[1] (a cycle)"


def test_a_cycle_through_a_name_map() -> None:
    properties: dict[str, Any] = {}
    properties["x"] = {"type": "object", "properties": properties}
    schema = {"type": "object", "properties": properties}
    assert rejected(schema, "anthropic") == (
        "the schema contains itself at $.properties.x.properties (a cycle)"
    )


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("name", ["__proto__", "constructor", "prototype"])
@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda n: obj(**{n: {"type": "string"}}), "$.properties.{n}"),
        (lambda n: {"type": "object", "properties": {}, "required": ["a", n]}, "$.required[1]"),
        (lambda n: obj(a=obj(**{n: True})), "$.properties.a.properties.{n}"),
        (lambda n: {"type": "object", "$defs": {n: {}}}, "$.$defs.{n}"),
        (lambda n: {"type": "object", "definitions": {n: {}}}, "$.definitions.{n}"),
        (lambda n: {"type": "object", "dependentSchemas": {n: {}}}, "$.dependentSchemas.{n}"),
        (lambda n: {"type": "object", "dependentRequired": {n: []}}, "$.dependentRequired.{n}"),
        (
            lambda n: {"type": "object", "dependentRequired": {"a": [n]}},
            "$.dependentRequired.a[0]",
        ),
        (lambda n: {"type": "object", "dependencies": {"a": ["b", n]}}, "$.dependencies.a[1]"),
        (lambda n: {"type": "object", "dependencies": {n: {}}}, "$.dependencies.{n}"),
    ],
)
def test_reserved_names(vendor: Any, name: str, make: Any, where: str) -> None:
    assert rejected(make(name), vendor) == (
        f"{name!r} may not be used as a name (at {where.format(n=name)})"
    )


def nested(levels: int) -> dict[str, Any]:
    """An object schema whose deepest subschema is at level ``levels`` (the root is level 1)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        schema = obj(x=schema)
    return schema


def test_depth_limit() -> None:
    assert projected(nested(32), "openai").outcome == "adopted"
    path = "$" + ".properties.x" * 32
    assert rejected(nested(33)) == f"the schema nests deeper than 32 levels (at {path})"
    assert projected(nested(5), "openai", max_depth=5).outcome == "adopted"
    assert "deeper than 4 levels" in rejected(nested(5), max_depth=4)


def test_depth_counts_containers_in_data_values() -> None:
    schema = obj(a={"default": [[[1]]]})  # a: level 2; its default's arrays: levels 3, 4, 5
    assert projected(schema, "openai", max_depth=5).outcome == "adopted"
    assert rejected(schema, max_depth=4) == (
        "the schema nests deeper than 4 levels (at $.properties.a.default[0][0])"
    )


def test_boolean_subschemas_count_as_a_level() -> None:
    schema = obj(a=True)
    assert projected(schema, "openai", max_depth=2).outcome == "adopted"
    assert "deeper than 1 levels (at $.properties.a)" in rejected(schema, max_depth=1)


def test_node_limit() -> None:
    # Nodes: the root, each property schema, each keyword value.
    schema = obj(**{f"p{i}": {"type": "string"} for i in range(10)})
    assert projected(schema, "openai", max_nodes=22).outcome == "adopted"
    assert rejected(schema, max_nodes=21).startswith("the schema has more than 21 nodes (at ")


def test_node_limit_bounds_shared_subtrees() -> None:
    # 2**40 paths through 40 shared levels: refused after max_nodes, not walked. (Called
    # directly: a repr snapshot would walk every path too.)
    schema: dict[str, Any] = {"type": "string"}
    levels = [schema]
    for _ in range(40):
        schema = {"type": "object", "properties": {"a": schema, "b": schema}}
        levels.append(schema)
    result = project(schema, "openai", max_depth=100)
    assert result.outcome == "rejected"
    assert result.reason is not None
    assert result.reason.startswith("the schema has more than 2000 nodes")
    assert levels[0] == {"type": "string"}
    for below, level in itertools.pairwise(levels):
        assert level == {"type": "object", "properties": {"a": below, "b": below}}


def test_node_limit_bounds_huge_data() -> None:
    schema = obj(a={"enum": list(range(1_000_000))})
    assert rejected(schema).startswith("the schema has more than 2000 nodes")


def test_recursion_deeper_than_python_allows_is_refused_not_raised() -> None:
    reason = rejected(nested(5000), max_depth=10**6, max_nodes=10**6)
    assert reason == "the schema is nested too deeply to inspect"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "nan is not a finite number"),
        (math.inf, "inf is not a finite number"),
        ({1, 2}, "a set is not a JSON value"),
        ((1, 2), "a tuple is not a JSON value"),
        (b"bytes", "a bytes is not a JSON value"),
        (object(), "a object is not a JSON value"),
    ],
)
def test_non_json_values(value: Any, message: str) -> None:
    schema = obj(a={"type": "number", "default": value})
    assert rejected(schema) == f"$.properties.a.default: {message}"


def test_non_string_keys() -> None:
    assert rejected({"type": "object", 1: "x"}) == "$: object key 1 is not a string"
    assert rejected({"type": "object", "properties": {2: {}}}) == (
        "$.properties: object key 2 is not a string"
    )
    assert rejected(obj(a={"default": {3: 4}})) == (
        "$.properties.a.default: object key 3 is not a string"
    )


def test_non_json_subschema_container() -> None:
    schema = obj(a={"type": "array", "items": ({"type": "string"},)})
    assert rejected(schema) == "$.properties.a.items: a tuple is not a JSON value"


def test_long_names_are_cut_in_paths() -> None:
    name = "n" * 1000
    reason = rejected(obj(**{name: {"default": math.nan}}))
    assert reason == '$.properties["' + "n" * 64 + '..."].default: nan is not a finite number'


# --------------------------------------------------------------------------- properties

NAMES = st.text(alphabet=string.ascii_letters + "_ -é", min_size=1, max_size=6)
LEAVES = st.sampled_from(
    [
        {"type": "string"},
        {"type": "string", "enum": ["a", "b"], "description": "constructor"},
        {"type": "integer", "minimum": 0, "default": 3},
        {"type": "number", "maximum": 1.5},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "object"},
        {"type": "array"},
        {"type": ["object", "null"]},
        {"const": {"type": "object"}},
        {},
        True,
        False,
    ]
).map(copy.deepcopy)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    objects = st.builds(
        lambda props, keep, closed: (
            {"type": "object"}
            | ({"properties": props} if keep else {})
            | ({"additionalProperties": closed} if closed is not None else {})
        ),
        st.dictionaries(NAMES, children, max_size=4),
        st.booleans(),
        st.none() | st.booleans() | children,
    )
    arrays = st.builds(
        lambda items, keep: {"type": "array"} | ({"items": items} if keep else {}),
        children,
        st.booleans(),
    )
    unions = st.builds(
        lambda kind, options: {kind: options},
        st.sampled_from(["anyOf", "oneOf", "allOf"]),
        st.lists(children, min_size=1, max_size=3),
    )
    return objects | arrays | unions


SUBSCHEMAS = st.recursive(LEAVES, _extend, max_leaves=25)
SCHEMAS = st.builds(
    lambda props, keep, dialect, defs: (
        ({"$schema": "https://json-schema.org/draft/2020-12/schema"} if dialect else {})
        | {"type": "object"}
        | ({"properties": props, "required": sorted(props)[:1]} if keep else {})
        | ({"$defs": defs} if defs else {})
    ),
    st.dictionaries(NAMES, SUBSCHEMAS, max_size=5),
    st.booleans(),
    st.booleans(),
    st.dictionaries(NAMES, SUBSCHEMAS, max_size=2),
)

_STEP = re.compile(r'\.([A-Za-z_$][A-Za-z0-9_$]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')
_CHANGE = re.compile(r"(added empty|dropped) '([$a-z]+)' at (\$.*)")


def steps(path: str) -> Iterator[str | int]:
    """The keys and indexes of a change's JSON path."""
    assert path.startswith("$")
    position = 1
    while position < len(path):
        match = _STEP.match(path, position)
        assert match, path[position:]
        name, index, quoted = match.groups()
        yield name if name is not None else int(index) if index is not None else json.loads(quoted)
        position = match.end()


def undo(original: dict[str, Any], adapted: dict[str, Any], changes: tuple[str, ...]) -> Any:
    """Revert every recorded change on a copy of ``adapted``; nothing else may differ."""
    result = copy.deepcopy(adapted)
    for change in changes:
        match = _CHANGE.fullmatch(change)
        assert match, change
        verb, key, path = match.groups()
        node: Any = result
        source: Any = original
        for step in steps(path):
            node = node[step]
            source = source[step]
        if verb == "added empty":
            assert key in ("properties", "items")
            assert key not in source
            assert node.pop(key) == {}
        else:
            assert (key, path) == ("$schema", "$")
            assert key not in node
            node[key] = source[key]
    return result


@settings(max_examples=200, deadline=None)
@given(SCHEMAS, st.sampled_from(VENDORS))
def test_projection_of_valid_schemas(schema: dict[str, Any], vendor: Any) -> None:
    Draft202012Validator.check_schema(schema)
    result = projected(schema, vendor)
    assert result.outcome != "rejected", result.reason
    assert result.reason is None
    if result.outcome == "adopted":
        assert result.schema is schema
        assert result.changes == ()
        return
    assert result.schema is not None
    assert result.changes
    assert len(set(result.changes)) == len(result.changes)
    # It differs from the input only in the recorded ways...
    assert undo(schema, result.schema, result.changes) == schema
    # ...and projecting it again changes nothing (idempotence).
    again = projected(result.schema, vendor)
    assert again.outcome == "adopted"
    assert again.schema is result.schema
    if vendor == "anthropic":
        assert result.changes == ("dropped '$schema' at $",)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(SCHEMAS, st.sampled_from(FILLING), st.lists(JSON_VALUES, max_size=4))
def test_adaptations_accept_exactly_the_same_arguments(
    schema: dict[str, Any], vendor: Any, instances: list[Any]
) -> None:
    result = projected(schema, vendor)
    assert result.schema is not None
    before = Draft202012Validator(schema)
    after = Draft202012Validator(result.schema)
    for instance in instances:
        assert before.is_valid(instance) == after.is_valid(instance)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.text(max_size=3) | st.just(()),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=15,
    ),
    st.sampled_from(VENDORS),
    st.integers(0, 6),
    st.integers(0, 30),
)
def test_projection_never_raises(value: Any, vendor: Any, depth: int, nodes: int) -> None:
    schema = {"type": "object", "properties": {"v": value}, "default": value}
    result = projected(schema, vendor, max_depth=depth, max_nodes=nodes)
    assert result.outcome in ("adopted", "adapted", "rejected")
    assert (result.schema is None) == (result.outcome == "rejected")
    assert (result.reason is None) == (result.outcome != "rejected")
