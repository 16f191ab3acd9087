"""notes/002.md guarantee 10: tool schemas whose root is a union of object schemas -- how MCP
servers (zod, pydantic) write "one of these argument sets" -- are accepted and sent.

``ToolDefinition`` takes a typeless root ``anyOf``/``oneOf`` whose members are all objects,
adding ``"type": "object"`` (002 G10: only there); every vendor gets it flattened into one
object schema (OpenAI's chat and Responses APIs and Anthropic's refuse those combinators at the
top level; Ollama ignores them), and the model's arguments are still checked against the
original union. Pure: no event loop.
"""

from __future__ import annotations

import copy
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from protocols.errors import ValidationError
from protocols.mcp import read_listing
from protocols.messages import Message, ToolDefinition
from protocols.toolschema import validate_arguments
from protocols.wire import anthropic, ollama, openai_chat, openai_responses
from protocols.wire.schema import project

VENDORS = ["openai", "anthropic", "ollama"]
COMBINATORS = ("anyOf", "oneOf", "allOf")

BY_ID = {
    "type": "object",
    "title": "By id",
    "properties": {"id": {"type": "string"}, "verbose": {"type": "boolean"}},
    "required": ["id"],
    "additionalProperties": False,
}
BY_PATH = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "verbose": {"type": "boolean"}},
    "required": ["path"],
    "additionalProperties": False,
}
#: What zod-to-json-schema writes for ``z.union([byId, byPath])`` with a description.
OPEN_FILE = {"description": "Open a file.", "anyOf": [BY_ID, BY_PATH]}


def flat(schema: dict[str, Any], vendor: Any = "openai") -> dict[str, Any]:
    before = copy.deepcopy(schema)
    projection = project(schema, vendor)
    assert schema == before  # never mutated
    assert projection.outcome == "adapted", projection.reason
    assert projection.schema is not None
    return projection.schema


def top_level_ok(schema: dict[str, Any], vendor: str) -> bool:
    """What the vendors accept at the top of a tool's schema."""
    refused = COMBINATORS + (("not", "enum", "const") if vendor != "anthropic" else ())
    return schema.get("type") == "object" and not any(key in schema for key in refused)


# -- ToolDefinition ------------------------------------------------------------------------------


@pytest.mark.parametrize("keyword", ["anyOf", "oneOf"])
def test_a_typeless_union_of_objects_is_accepted_with_type_object_added(keyword: str) -> None:
    schema = {keyword: [BY_ID, BY_PATH]}
    definition = ToolDefinition("open_file", "Open a file.", schema)
    assert definition.parameters == {"type": "object", keyword: [BY_ID, BY_PATH]}
    assert schema == {keyword: [BY_ID, BY_PATH]}  # the input is left alone


def test_members_given_as_local_references_or_nested_unions_count_as_objects() -> None:
    schema = {
        "anyOf": [{"$ref": "#/$defs/ById"}, {"oneOf": [BY_PATH, {"$ref": "#/definitions/X"}]}],
        "$defs": {"ById": BY_ID},
        "definitions": {"X": {"type": "object"}},
    }
    assert ToolDefinition("t", "", schema).parameters["type"] == "object"


@pytest.mark.parametrize(
    "schema",
    [
        {"anyOf": [BY_ID, {"type": "string"}]},  # a member that is not an object
        {"anyOf": [BY_ID, {"description": "anything"}]},  # a member that admits anything
        {"anyOf": [BY_ID, {"$ref": "#/$defs/missing"}]},
        {"anyOf": [BY_ID, {"$ref": "https://example.com/s.json"}]},
        {"allOf": [BY_ID, BY_PATH]},  # 002 G10: anyOf/oneOf only
        {"anyOf": []},
        {"type": ["object", "null"], "anyOf": [BY_ID]},
    ],
)
def test_other_roots_are_still_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match=r'"type": "object" at its root \(or be an anyOf'):
        ToolDefinition("t", "", schema)


def test_an_mcp_listing_keeps_a_tool_whose_schema_is_a_union() -> None:
    listing = read_listing(
        [
            {"name": "open_file", "description": "Open a file.", "inputSchema": OPEN_FILE},
            {"name": "bad", "inputSchema": {"anyOf": [BY_ID, {"type": "string"}]}},
        ]
    )
    assert list(listing.tools) == ["open_file"]
    assert listing.tools["open_file"].parameters == {"type": "object", **OPEN_FILE}
    assert len(listing.skipped) == 1
    assert listing.skipped[0].startswith("'bad': its input schema is not usable")


# -- arguments are checked against the original --------------------------------------------------


def test_arguments_are_checked_against_the_union_not_the_flat_schema() -> None:
    original = ToolDefinition("open_file", "", OPEN_FILE).parameters
    sent = flat(original)
    # Both fields at once: the flat schema takes it, the union does not (each member is closed).
    both = {"id": "7", "path": "a.txt"}
    assert Draft202012Validator(sent).is_valid(both)
    assert validate_arguments(original, both) == [
        "$: fits none of the 2 accepted forms: (1) $.path: unknown argument 'path'; allowed: "
        "id, verbose (2) $.id: unknown argument 'id'; allowed: path, verbose"
    ]
    assert validate_arguments(original, {"path": "a.txt", "verbose": True}) == []
    assert validate_arguments(original, {"id": "7"}) == []
    # A union's failure names what each argument set found wrong (not "expected an object").
    assert validate_arguments(original, {}) == [
        "$: fits none of the 2 accepted forms: (1) $.id: missing required argument 'id' "
        "(2) $.path: missing required argument 'path'"
    ]


# -- the projection, per vendor ------------------------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("keyword", ["anyOf", "oneOf"])
def test_a_union_of_objects_is_flattened_for_every_vendor(vendor: str, keyword: str) -> None:
    schema = {"description": "Open a file.", keyword: [BY_ID, BY_PATH]}
    sent = flat(schema, vendor)
    which = "exactly one" if keyword == "oneOf" else "at least one"
    assert sent == {
        "type": "object",
        "description": (
            f"Open a file.\n\nThe arguments must match {which} of these sets: "
            "(1) By id: id, verbose (required: id); (2) path, verbose (required: path)."
        ),
        "properties": {
            "id": {"type": "string"},
            "verbose": {"type": "boolean"},
            "path": {"type": "string"},
        },
        "additionalProperties": False,  # every member is closed
    }
    assert top_level_ok(sent, vendor)
    assert project(sent, vendor).outcome == "adopted"  # flattening again changes nothing
    assert project(schema, vendor).changes == (
        "added 'type': 'object' at $ (its members are all objects)",
        f"flattened '{keyword}' of 2 schemas at $ into one object "
        "(arguments are still checked against the original)",
    )


@pytest.mark.parametrize(
    ("module", "tool_key", "schema_key"),
    [
        (openai_chat, "function", "parameters"),
        (openai_responses, None, "parameters"),
        (anthropic, None, "input_schema"),
        (ollama, "function", "parameters"),
    ],
)
def test_each_vendor_request_carries_the_flat_schema(
    module: Any, tool_key: str | None, schema_key: str
) -> None:
    # What the HTTP providers send: the definition projected with the wire's own rules (as
    # HTTPProvider.project_tools does), then encoded.
    definition = ToolDefinition("open_file", "Open a file.", OPEN_FILE)
    vendor = {anthropic: "anthropic", ollama: "ollama"}.get(module, "openai")
    projection = project(definition.parameters, vendor)  # type: ignore[arg-type]
    assert projection.schema is not None
    sent = ToolDefinition(definition.name, definition.description, projection.schema)
    body = module.encode_request([Message.user("hi")], model="m", tools=[sent], options=None)
    (tool,) = body["tools"]
    schema = tool[tool_key][schema_key] if tool_key else tool[schema_key]
    assert top_level_ok(schema, vendor)
    assert set(schema["properties"]) == {"id", "verbose", "path"}


def test_local_reference_members_are_followed_and_differing_fields_become_a_union() -> None:
    schema = {
        "anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}],
        "$defs": {
            "A": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            "B": {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "required": ["a", "b"],
            },
        },
    }
    sent = flat(schema, "anthropic")
    assert sent["properties"] == {
        "a": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "b": {"type": "string"},
    }
    assert sent["required"] == ["a"]  # what every member requires
    assert "additionalProperties" not in sent  # a member is open
    assert sent["$defs"] == schema["$defs"]  # kept: nested references still resolve


def test_root_properties_and_required_are_kept_beside_the_union() -> None:
    schema = {
        "type": "object",
        "properties": {"mode": {"enum": ["fast", "slow"]}},
        "required": ["mode"],
        "oneOf": [BY_ID, BY_PATH],
    }
    sent = flat(schema, "ollama")
    assert list(sent["properties"]) == ["mode", "id", "verbose", "path"]
    assert sent["required"] == ["mode"]


def test_an_allof_root_is_merged_and_its_members_requirements_add_up() -> None:
    schema = {
        "type": "object",
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ],
    }
    sent = flat(schema, "openai")
    assert sent["properties"] == {"a": {"type": "string"}, "b": {"type": "integer"}}
    assert sent["required"] == ["a", "b"]
    assert "description" not in sent  # an allOf is one argument set: nothing to choose


def test_a_member_that_admits_no_object_is_left_out() -> None:
    schema = {"type": "object", "anyOf": [BY_ID, {"type": "string"}, False]}
    sent = flat(schema, "openai")
    assert sent["properties"] == BY_ID["properties"]
    assert sent["required"] == ["id"]


@pytest.mark.parametrize("keyword", ["not", "enum", "const"])
def test_openai_rules_also_drop_a_narrowing_keyword_at_the_root(keyword: str) -> None:
    value: Any = {"required": ["x"]} if keyword == "not" else [{}] if keyword == "enum" else {}
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, keyword: value}
    for vendor in ("openai", "ollama"):
        sent = flat(schema, vendor)
        assert keyword not in sent
        assert sent["properties"] == schema["properties"]
    assert project(schema, "anthropic").outcome == "adopted"  # Anthropic takes them


def test_a_cycle_or_an_oversized_union_is_refused_not_looped() -> None:
    members: list[Any] = [BY_ID]
    members.append({"anyOf": members})
    projection = project({"anyOf": members, "type": "object"}, "openai")
    assert projection.outcome == "rejected"
    assert projection.reason == "the schema contains itself at $.anyOf[1].anyOf (a cycle)"
    # A chain of references that doubles at each step is bounded by max_nodes, not walked.
    defs: dict[str, Any] = {"d0": BY_ID}
    for level in range(1, 40):
        defs[f"d{level}"] = {"anyOf": [{"$ref": f"#/$defs/d{level - 1}"}] * 2}
    huge = {"type": "object", "anyOf": [{"$ref": "#/$defs/d39"}], "$defs": defs}
    projection = project(huge, "openai")
    assert projection.outcome == "rejected"
    assert projection.reason is not None
    assert projection.reason.startswith("the root union is too large to flatten")
    # Deciding whether a typeless root is a union of objects is bounded too: three levels of
    # 50 references each would be 125,000 looks at the same few definitions.
    wide: dict[str, Any] = {
        f"d{level}": {"anyOf": [{"$ref": f"#/$defs/d{level + 1}"}] * 50} for level in range(3)
    }
    wide["d3"] = BY_ID
    assert ToolDefinition("t", "", {"anyOf": [{"$ref": "#/$defs/d2"}], "$defs": wide})
    with pytest.raises(ValidationError, match="at its root"):
        ToolDefinition("t", "", {"anyOf": [{"$ref": "#/$defs/d0"}], "$defs": wide})


# -- properties ----------------------------------------------------------------------------------

NAMES = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=3)
FIELDS = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer"},
        {"type": "boolean"},
        {"type": "array", "items": {"type": "integer"}},
        {"enum": ["a", "b"]},
        {},
    ]
)
MEMBERS = st.builds(
    lambda props, required, closed: (
        {"type": "object", "properties": props}
        | ({"required": sorted(set(required) & set(props))} if required else {})
        | ({"additionalProperties": False} if closed else {})
    ),
    st.dictionaries(NAMES, FIELDS, max_size=4),
    st.lists(NAMES, max_size=3),
    st.booleans(),
)
UNIONS = st.builds(
    lambda keyword, members, typed: {keyword: members} | ({"type": "object"} if typed else {}),
    st.sampled_from(["anyOf", "oneOf"]),
    st.lists(MEMBERS, min_size=1, max_size=4),
    st.booleans(),
)
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["a", "b", "x"]),
    st.lists(st.integers(-2, 2), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(UNIONS, st.sampled_from(VENDORS), st.lists(st.dictionaries(NAMES, VALUES, max_size=4)))
def test_the_flat_schema_is_accepted_everywhere_and_takes_every_valid_argument_set(
    schema: dict[str, Any], vendor: str, instances: list[dict[str, Any]]
) -> None:
    definition = ToolDefinition("t", "", schema)  # accepted
    sent = flat(definition.parameters, vendor)
    Draft202012Validator.check_schema(sent)
    assert top_level_ok(sent, vendor)
    assert project(sent, vendor).outcome == "adopted"
    original = Draft202012Validator(definition.parameters)
    wider = Draft202012Validator(sent)
    members = schema.get("anyOf") or schema.get("oneOf") or []
    # Each member's own arguments are among the instances tried.
    tries = [*instances, *(dict.fromkeys(m.get("required", []), "a") for m in members)]
    for instance in tries:
        if original.is_valid(instance):
            # Members declare each field the same way or not at all, or are closed: then the
            # flat schema is never stricter than the union it describes.
            if _declared_alike(members):
                assert wider.is_valid(instance), (instance, sent)
            else:
                assert set(sent.get("required", [])) <= set(instance)
        # The model's arguments are judged by the original union, whatever was sent.
        problems = validate_arguments(definition.parameters, instance)
        assert (problems == []) == original.is_valid(instance)


def _declared_alike(members: list[dict[str, Any]]) -> bool:
    """No field is declared by one member and left open to anything by another."""
    declared = {name for member in members for name in member.get("properties", {})}
    return all(
        member.get("additionalProperties") is False or declared <= set(member["properties"])
        for member in members
    )
