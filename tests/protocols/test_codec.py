"""Tests for protocols.codec: round trips of every data-model type (property tests), strict
decoding with JSON paths in the errors, and the omission of defaults."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.accounting import Cost
from protocols.codec import decode, dumps, encode, from_json, loads, to_json
from protocols.errors import Category, ProtocolError
from protocols.messages import (
    AgentResult,
    Delta,
    FinishReason,
    GuardrailTrip,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    Usage,
)

SETTINGS = settings(max_examples=50, deadline=None)
#: Fewer examples for the per-type fuzzing of from_json (eleven targets, each mostly refusals).
FUZZ_SETTINGS = settings(max_examples=25, deadline=None)

# --------------------------------------------------------------------------- helpers


def is_surrogate(char: str) -> bool:
    return 0xD800 <= ord(char) <= 0xDFFF


def repair_text(text: str) -> str:
    return "".join("\ufffd" if is_surrogate(char) else char for char in text)


def same_structure(a: Any, b: Any) -> bool:
    """Equality that also compares types exactly (a tuple is not a list, 1 is not 1.0 nor True,
    a str enum member is not a str)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_structure(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def assert_plain_json(value: Any, path: str = "$") -> None:
    """``value`` holds only exact JSON types: no tuples, no enum members, no str subclasses."""
    assert type(value) in (dict, list, str, int, float, bool, type(None)), (path, type(value))
    if isinstance(value, float):
        assert math.isfinite(value), path
    if isinstance(value, str):
        assert not any(is_surrogate(char) for char in value), path
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str, (path, key)
            assert_plain_json(item, f"{path}.{key}")
    if isinstance(value, list):
        for index, item in enumerate(value):
            assert_plain_json(item, f"{path}[{index}]")


def decode_error(cls: Any, data: Any, *, category: Category = Category.PROVIDER) -> str:
    """The message of the ProtocolError ``from_json(cls, data)`` raises (checked for its code)."""
    with pytest.raises(ProtocolError) as info:
        from_json(cls, data, category=category)
    assert info.value.code == "decode"
    assert info.value.category is category
    return str(info.value)


def base(obj: Any) -> dict[str, Any]:
    plain = to_json(obj)
    assert isinstance(plain, dict)
    return plain


CALL = ToolCall("c1", "search", {"q": "x"})
USER = Message.user("hi", id="m1")
ASSISTANT = Message.assistant("ok", calls=[CALL], id="m2")


# --------------------------------------------------------------------------- strategies

#: Text for the model's own str fields: no lone surrogates (those are repaired on the wire,
#: so they would not round-trip; see test_str_fields_with_lone_surrogates_are_repaired).
UTF8 = st.characters(codec="utf-8")
TEXT = st.text(alphabet=UTF8, max_size=10)
NONEMPTY = st.text(alphabet=UTF8, min_size=1, max_size=8)
#: Text for JSON-valued fields, which the model repairs at construction: surrogates welcome.
JSON_TEXT = st.text(alphabet=st.characters(categories=["Cs", "L", "N", "P", "S", "Z"]), max_size=8)
TOOL_NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
COUNTS = st.integers(min_value=0, max_value=2**53)


def distinct_after_repair(mapping: dict[str, Any]) -> bool:
    return len({repair_text(key) for key in mapping}) == len(mapping)


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        JSON_TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(JSON_TEXT, children, max_size=3).filter(distinct_after_repair),
    ),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(JSON_TEXT, JSON_VALUES, max_size=3).filter(distinct_after_repair)

PROPERTY_SCHEMAS = st.one_of(
    st.sampled_from(["string", "integer", "number", "boolean", "null"]).map(
        lambda kind: {"type": kind}
    ),
    st.builds(lambda d: {"type": "string", "description": d}, JSON_TEXT),
    st.builds(
        lambda kind: {"type": "array", "items": {"type": kind}},
        st.sampled_from(["string", "integer"]),
    ),
    st.lists(st.one_of(st.integers(), TEXT), min_size=1, max_size=3, unique=True).map(
        lambda values: {"enum": values}
    ),
)


@st.composite
def object_schemas(draw: st.DrawFn) -> dict[str, Any]:
    properties = draw(st.dictionaries(TEXT, PROPERTY_SCHEMAS, max_size=3))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if draw(st.booleans()) and properties:
        schema["required"] = draw(st.lists(st.sampled_from(sorted(properties)), unique=True))
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    if draw(st.booleans()):
        schema["description"] = draw(JSON_TEXT)
    return schema


def tool_calls() -> st.SearchStrategy[ToolCall]:
    return st.one_of(
        st.builds(ToolCall, id=NONEMPTY, name=NONEMPTY, arguments=JSON_OBJECTS),
        st.builds(ToolCall, id=NONEMPTY, name=NONEMPTY),
    )


def call_lists() -> st.SearchStrategy[list[ToolCall]]:
    return st.lists(tool_calls(), max_size=3, unique_by=lambda call: call.id)


TIMESTAMPS = st.one_of(
    st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=2**40),  # converted to float at construction
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(Role))
    kwargs: dict[str, Any] = {"content": draw(TEXT)}
    if role is Role.USER:
        kwargs["images"] = draw(st.lists(NONEMPTY, max_size=2))
    elif role is Role.ASSISTANT:
        kwargs["calls"] = draw(call_lists())
        kwargs["thinking"] = draw(TEXT)
        kwargs["interrupted"] = draw(st.booleans())
        kwargs["continuation"] = draw(JSON_OBJECTS)
    elif role is Role.TOOL:
        kwargs["tool_call_id"] = draw(NONEMPTY)
        kwargs["name"] = draw(NONEMPTY)
        kwargs["images"] = draw(st.lists(NONEMPTY, max_size=2))
    if draw(st.booleans()):
        kwargs["id"] = draw(NONEMPTY)
    if draw(st.booleans()):
        kwargs["created_at"] = draw(TIMESTAMPS)
    # The role travels as an enum member or as its plain string value.
    return Message(role=draw(st.sampled_from([role, role.value])), **kwargs)


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    prompt = draw(COUNTS)
    completion = draw(COUNTS)
    kwargs: dict[str, Any] = {"prompt": prompt, "completion": completion}
    if draw(st.booleans()):
        kwargs["total"] = prompt + completion + draw(st.integers(0, 1000))
    kwargs["cached"] = draw(st.none() | st.integers(0, prompt))
    kwargs["cost"] = draw(
        st.none()
        | st.builds(Cost.unavailable, st.none() | st.just("USD"))
        | st.builds(
            Cost,
            st.decimals(min_value=0, max_value=1000, places=12, allow_nan=False),
            st.sampled_from(["USD", "EUR"]),
            st.sampled_from(["computed", "reported"]),
        )
    )
    return Usage(**kwargs)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


PROVIDER_OPTIONS = st.builds(
    ProviderOptions,
    think=optional(st.booleans()),
    schema=optional(st.one_of(object_schemas(), PROPERTY_SCHEMAS, st.just({}))),
    max_tokens=optional(st.integers(min_value=1, max_value=2**31)),
    # As floats: an int temperature does not re-encode stably (see test_temperature_...).
    temperature=optional(st.floats(min_value=0, max_value=2)),
    tool_choice=optional(st.one_of(st.sampled_from(["auto", "none", "required"]), TOOL_NAMES)),
    stop=st.lists(NONEMPTY, max_size=3),
    extra=JSON_OBJECTS,
)

TOOL_DEFINITIONS = st.one_of(
    st.builds(ToolDefinition, name=TOOL_NAMES),
    st.builds(ToolDefinition, name=TOOL_NAMES, description=TEXT, parameters=object_schemas()),
)

TOOL_SUCCESSES = st.one_of(
    st.builds(ToolSuccess, id=NONEMPTY, name=NONEMPTY, value=JSON_VALUES),
    st.builds(ToolSuccess, id=NONEMPTY, name=NONEMPTY),
    st.builds(
        ToolSuccess,
        id=NONEMPTY,
        name=NONEMPTY,
        value=JSON_VALUES,
        images=st.lists(NONEMPTY, min_size=1, max_size=2),
    ),
)
TOOL_FAILURES = st.builds(ToolFailure, id=NONEMPTY, name=NONEMPTY, error=NONEMPTY)
TOOL_RESULTS = st.one_of(TOOL_SUCCESSES, TOOL_FAILURES)

DELTAS = st.builds(Delta, channel=st.sampled_from(["content", "thinking"]), text=NONEMPTY)


@st.composite
def provider_results(draw: st.DrawFn) -> ProviderResult:
    kwargs: dict[str, Any] = {
        "content": draw(TEXT),
        "thinking": draw(TEXT),
        "calls": draw(call_lists()),
        "usage": draw(optional(usages())),
        "continuation": draw(JSON_OBJECTS),
        # The vendor's names for the model and the response: bounded, left out when unknown.
        "model": draw(optional(st.text(alphabet=UTF8, min_size=1, max_size=256))),
        "response_id": draw(optional(st.text(alphabet=UTF8, min_size=1, max_size=256))),
    }
    if draw(st.booleans()):
        finish = draw(st.sampled_from(FinishReason))
        kwargs["finish"] = draw(st.sampled_from([finish, finish.value]))
    return ProviderResult(**kwargs)


@st.composite
def agent_results(draw: st.DrawFn) -> AgentResult:
    kwargs: dict[str, Any] = {
        "content": draw(TEXT),
        "thinking": draw(TEXT),
        "messages": draw(st.lists(messages(), max_size=3)),
        "turns": draw(st.integers(0, 1000)),
    }
    if draw(st.booleans()):
        kwargs["usage"] = draw(optional(usages()))  # None: the usage is unknown
        kwargs["estimated"] = draw(st.booleans())
    stop = draw(optional(st.sampled_from(StopReason)))
    if stop is not None:
        kwargs["stop"] = stop
        if draw(st.booleans()):
            kwargs["partial"] = stop is not StopReason.COMPLETE
        if stop is StopReason.GUARDRAIL and draw(st.booleans()):
            kwargs["guardrail"] = draw(GUARDRAIL_TRIPS)
    finish = draw(optional(st.sampled_from(FinishReason)))
    if finish is not None:  # the last provider call's (None: the run made none)
        kwargs["finish"] = draw(st.sampled_from([finish, finish.value]))
    return AgentResult(**kwargs)


GUARDRAIL_TRIPS = st.builds(
    GuardrailTrip,
    TEXT,
    st.sampled_from(["input", "output", "tool"]),
    TEXT,
    optional(TEXT),
)

MODEL_CASES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (Message, messages()),
    (ToolCall, tool_calls()),
    (ToolSuccess, TOOL_SUCCESSES),
    (ToolFailure, TOOL_FAILURES),
    (ToolDefinition, TOOL_DEFINITIONS),
    (Usage, usages()),
    (ProviderOptions, PROVIDER_OPTIONS),
    (Delta, DELTAS),
    (ProviderResult, provider_results()),
    (AgentResult, agent_results()),
    (GuardrailTrip, GUARDRAIL_TRIPS),
]
MODEL_IDS = [cls.__name__ for cls, _ in MODEL_CASES]


def test_every_model_type_has_a_strategy() -> None:
    import protocols.messages as messages_module

    model_types = {
        obj
        for name in messages_module.__all__
        if attrs.has(obj := getattr(messages_module, name)) and isinstance(obj, type)
    }
    assert model_types == {cls for cls, _ in MODEL_CASES}


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(("cls", "strategy"), MODEL_CASES, ids=MODEL_IDS)
@SETTINGS
@given(data=st.data())
def test_round_trip(cls: Any, strategy: st.SearchStrategy[Any], data: st.DataObject) -> None:
    obj = data.draw(strategy)
    assert type(obj) is cls

    plain = to_json(obj)
    assert_plain_json(plain)
    assert from_json(cls, plain) == obj

    text = encode(obj)
    assert text == dumps(plain)
    assert same_structure(loads(text), plain)  # to_json is already strict JSON
    back: Any = decode(cls, text)
    assert back == obj
    assert decode(cls, text.encode("utf-8")) == obj
    assert encode(back) == text  # re-encoding is stable
    assert same_structure(to_json(back), plain)

    canonical = encode(obj, canonical=True)
    assert canonical == dumps(plain, canonical=True)
    assert decode(cls, canonical) == obj
    assert encode(decode(cls, canonical), canonical=True) == canonical


@SETTINGS
@given(TOOL_RESULTS)
def test_tool_result_union_decodes_to_the_right_arm(result: ToolSuccess | ToolFailure) -> None:
    plain = to_json(result)
    assert plain["success"] is result.ok
    assert plain["success"] is isinstance(result, ToolSuccess)
    decoded: list[Any] = [from_json(ToolResult, plain), decode(ToolResult, encode(result))]
    for back in decoded:
        assert type(back) is type(result)
        assert back == result
    wrong_arm = ToolFailure if isinstance(result, ToolSuccess) else ToolSuccess
    message = decode_error(wrong_arm, plain)
    assert f'a {wrong_arm.__name__} needs "success": {str(not result.ok).lower()}' in message


def test_to_json_of_collections() -> None:
    assert to_json([USER, CALL]) == [to_json(USER), to_json(CALL)]
    assert to_json((CALL,)) == [to_json(CALL)]
    assert from_json(list[Message], [to_json(USER), to_json(ASSISTANT)]) == [USER, ASSISTANT]
    assert from_json(tuple[ToolCall, ...], [to_json(CALL)]) == (CALL,)


# --------------------------------------------------------------------------- defaults omitted


def test_defaults_omitted_for_message() -> None:
    plain = to_json(Message.user("hi", id="x"))
    assert set(plain) == {"role", "content", "id", "created_at"}
    for key in (
        "calls",
        "images",
        "thinking",
        "interrupted",
        "continuation",
        "tool_call_id",
        "name",
    ):
        assert key not in plain
    assert plain["role"] == "user"
    assert plain["content"] == "hi"
    assert plain["id"] == "x"
    assert type(plain["created_at"]) is float


def test_defaults_omitted_for_empty_objects() -> None:
    assert to_json(ProviderResult()) == {}
    assert to_json(ProviderOptions()) == {}
    assert to_json(AgentResult()) == {}
    assert to_json(Usage()) == {}
    assert to_json(ToolDefinition("t")) == {"name": "t"}
    assert to_json(ToolCall("a", "b")) == {"id": "a", "name": "b"}
    assert to_json(ToolSuccess("a", "b")) == {"success": True, "id": "a", "name": "b"}
    assert to_json(ToolFailure("a", "b", "e")) == {
        "success": False,
        "id": "a",
        "name": "b",
        "error": "e",
    }
    assert encode(ProviderResult()) == "{}"
    assert decode(ProviderResult, "{}") == ProviderResult()


def test_tool_images_are_written_only_when_there_are_some() -> None:
    # What was stored before tool results and tool messages had images decodes as before.
    assert "images" not in to_json(Message.tool("c", "t", "x", id="m", created_at=0))
    assert decode(ToolResult, '{"success":true,"id":"a","name":"b","value":1}') == ToolSuccess(
        "a", "b", 1
    )
    pictured = ToolSuccess("a", "b", "seen", images=["iVBORw0KGgo="])
    assert to_json(pictured) == {
        "success": True,
        "id": "a",
        "name": "b",
        "value": "seen",
        "images": ["iVBORw0KGgo="],
    }
    assert decode(ToolResult, encode(pictured)) == pictured
    message = Message.from_result(pictured, id="m", created_at=0)
    assert to_json(message)["images"] == ["iVBORw0KGgo="]
    assert decode(Message, encode(message)) == message


def test_self_referential_defaults_omitted_only_when_default() -> None:
    # Usage.total defaults to prompt + completion.
    assert to_json(Usage(1, 2)) == {"prompt": 1, "completion": 2}
    assert to_json(Usage(1, 2, 5, 1)) == {"prompt": 1, "completion": 2, "total": 5, "cached": 1}
    assert from_json(Usage, {"prompt": 1, "completion": 2}).total == 3
    # ProviderResult.finish defaults to tool_calls when there are calls, else stop.
    with_calls = ProviderResult(calls=[CALL])
    assert with_calls.finish is FinishReason.TOOL_CALLS
    assert "finish" not in to_json(with_calls)
    stopped = ProviderResult(calls=[CALL], finish="stop")
    assert to_json(stopped)["finish"] == "stop"
    decoded: ProviderResult = decode(ProviderResult, encode(stopped))
    assert decoded == stopped
    assert to_json(ProviderResult(finish="tool_calls")) == {"finish": "tool_calls"}
    # AgentResult.partial defaults to stop != complete.
    assert to_json(AgentResult(stop="timeout")) == {"stop": "timeout"}
    assert from_json(AgentResult, {"stop": "timeout"}).partial is True
    assert to_json(AgentResult(stop=StopReason.COMPLETE, partial=False)) == {}


def test_enums_are_plain_strings() -> None:
    plain = to_json(
        AgentResult(
            messages=[USER, ASSISTANT, Message.tool("c1", "search", "r", id="m3")],
            stop=StopReason.BUDGET,
        )
    )
    assert type(plain["stop"]) is str
    assert plain["stop"] == "budget"
    roles = [message["role"] for message in plain["messages"]]
    assert roles == ["user", "assistant", "tool"]
    assert all(type(role) is str for role in roles)
    finish = to_json(ProviderResult(finish=FinishReason.CONTENT_FILTER))["finish"]
    assert type(finish) is str
    assert finish == "content_filter"
    assert type(to_json(Message.system("s"))["role"]) is str
    assert '"role":"system"' in encode(Message.system("s", id="s"))


def test_decoded_enums_are_members() -> None:
    message: Message = from_json(Message, {"role": "assistant", "id": "x", "created_at": 1})
    assert message.role is Role.ASSISTANT
    assert type(message.created_at) is float
    assert from_json(ProviderResult, {"finish": "length"}).finish is FinishReason.LENGTH
    assert from_json(AgentResult, {"stop": "exhausted"}).stop is StopReason.EXHAUSTED


def test_optional_fields_accept_explicit_defaults() -> None:
    data = {
        "role": "user",
        "content": "",
        "calls": [],
        "images": [],
        "thinking": "",
        "interrupted": False,
        "tool_call_id": None,
        "name": None,
        "id": "x",
        "created_at": 0,
    }
    message: Message = from_json(Message, data)
    assert message == Message(role="user", id="x", created_at=0.0)
    assert from_json(ProviderOptions, {"schema": None, "stop": [], "extra": {}}) == (
        ProviderOptions()
    )
    assert from_json(ProviderResult, {"usage": None}) == ProviderResult()


# --------------------------------------------------------------------------- strictness


@pytest.mark.parametrize(
    ("cls", "data", "expected"),
    [
        # unknown fields
        (Message, {"role": "user", "bogus": 1}, "$: unknown field(s) 'bogus'"),
        (Usage, {"prompt": 1, "zz": 0, "aa": 0}, "$: unknown field(s) 'aa', 'zz'"),
        (
            Message,
            {**base(ASSISTANT), "calls": [{"id": "a", "name": "b", "zz": 1}]},
            "$.calls[0]: unknown field(s) 'zz'",
        ),
        (
            Message,
            {**base(ASSISTANT), "calls": [base(CALL), {"id": "d", "name": "b", "zz": 1}]},
            "$.calls[1]: unknown field(s) 'zz'",
        ),
        (
            AgentResult,
            {"messages": [base(USER), {**base(ASSISTANT), "calls": [{**base(CALL), "x": 1}]}]},
            "$.messages[1].calls[0]: unknown field(s) 'x'",
        ),
        (ProviderResult, {"usage": {"prompt": 1, "zz": 1}}, "$.usage: unknown field(s) 'zz'"),
        (ToolSuccess, {"success": True, "id": "a", "name": "b", "error": "e"}, "unknown field"),
        # missing required fields
        (Message, {"content": "x"}, "$.role: required field missing"),
        (Delta, {"channel": "content"}, "$.text: required field missing"),
        (ToolCall, {"id": "a"}, "$.name: required field missing"),
        (ToolFailure, {"success": False, "id": "a", "name": "b"}, "$.error: required field"),
        (ToolDefinition, {}, "$.name: required field missing"),
        (
            ProviderResult,
            {"calls": [{"name": "b"}]},
            "$.calls[0].id: required field missing",
        ),
        # wrong JSON types
        (Usage, {"prompt": True}, "$.prompt: expected an integer, got bool"),
        (Usage, {"prompt": 1.0}, "$.prompt: expected an integer, got float"),
        (Usage, {"prompt": "1"}, "$.prompt: expected an integer, got str"),
        (Usage, {"prompt": 3, "cached": False}, "$.cached: expected an integer, got bool"),
        (AgentResult, {"turns": 1.5}, "$.turns: expected an integer, got float"),
        (ProviderOptions, {"max_tokens": 10.0}, "$.max_tokens: expected an integer, got float"),
        (Message, {"role": "user", "content": 1}, "$.content: expected a string, got int"),
        (Message, {"role": "user", "content": 1.5}, "$.content: expected a string, got float"),
        (Message, {"role": "user", "content": None}, "$.content: expected a string, got NoneType"),
        (ToolCall, {"id": 7, "name": "b"}, "$.id: expected a string, got int"),
        (Delta, {"channel": "content", "text": True}, "$.text: expected a string, got bool"),
        (Message, {"role": "user", "images": "abc"}, "$.images: expected an array, got str"),
        (Message, {"role": "user", "images": {"a": 1}}, "$.images: expected an array, got dict"),
        (Message, {"role": "user", "images": ["a", 2]}, "$.images[1]: expected a string, got int"),
        (Message, {**base(ASSISTANT), "calls": {"id": "a"}}, "$.calls: expected an array"),
        (ProviderOptions, {"stop": "abc"}, "$.stop: expected an array, got str"),
        (ProviderOptions, {"stop": ["a", 1]}, "$.stop[1]: expected a string, got int"),
        (Message, {"role": "user", "interrupted": 1}, "$.interrupted: expected true or false"),
        (ProviderOptions, {"think": "yes"}, "$.think: expected true or false, got str"),
        (Message, {"role": "user", "created_at": "now"}, "$.created_at: expected a number"),
        (Message, {"role": "user", "created_at": True}, "$.created_at: expected a number"),
        (ProviderOptions, {"temperature": False}, "$.temperature: expected a number, got bool"),
        (ProviderOptions, {"extra": []}, "$.extra: expected an object, got list"),
        (ProviderOptions, {"schema": "x"}, "$.schema: expected an object, got str"),
        (ToolCall, {"id": "a", "name": "b", "arguments": [1]}, "$.arguments: expected an object"),
        (ProviderResult, {"usage": 5}, "$.usage"),
        # invalid enum / Literal values
        (Message, {"role": "bogus"}, "$.role: 'bogus' is not a valid Role"),
        (Message, {"role": "User"}, "'User' is not a valid Role"),
        (ProviderResult, {"finish": "done"}, "$.finish: 'done' is not a valid FinishReason"),
        (AgentResult, {"stop": "halt"}, "$.stop: 'halt' is not a valid StopReason"),
        (
            AgentResult,
            {"messages": [base(USER), {"role": "bogus"}]},
            "$.messages[1].role: 'bogus' is not a valid Role",
        ),
        (Delta, {"channel": "bogus", "text": "x"}, "$.channel:"),
        (Delta, {"channel": "Content", "text": "x"}, "$.channel:"),
        # values breaking invariants
        (ToolDefinition, {"name": ""}, "ToolDefinition.name must be 1-64"),
        (ToolDefinition, {"name": "has space"}, "ToolDefinition.name must be 1-64"),
        (ToolDefinition, {"name": "t", "parameters": {"type": "string"}}, '"type": "object"'),
        (
            ToolDefinition,
            {"name": "t", "parameters": {"type": "object", "properties": 5}},
            "not a valid JSON Schema",
        ),
        (ToolCall, {"id": "", "name": "b"}, "ToolCall.id must be a non-empty str"),
        (ToolCall, {"id": "a", "name": ""}, "ToolCall.name must be a non-empty str"),
        (
            Message,
            {**base(ASSISTANT), "calls": [{"id": "a", "name": ""}]},
            "$.calls[0]: ToolCall.name must be a non-empty str",
        ),
        (Message, {"role": "tool", "content": "x"}, "a tool message needs tool_call_id and name"),
        (
            Message,
            {"role": "tool", "content": "x", "tool_call_id": "c"},
            "a tool message needs tool_call_id and name",
        ),
        (Message, {"role": "user", "calls": [base(CALL)]}, "a user message cannot have calls"),
        (Message, {"role": "system", "images": ["x"]}, "a system message cannot have images"),
        (Message, {"role": "user", "images": [""]}, "Message.images[0] must be a non-empty"),
        (Message, {"role": "tool", "images": [""], "tool_call_id": "c", "name": "t"}, "images[0]"),
        (
            ToolSuccess,
            {"success": True, "id": "a", "name": "b", "images": [""]},
            "ToolSuccess.images[0] must be a non-empty",
        ),
        (
            ToolSuccess,
            {"success": True, "id": "a", "name": "b", "images": "iVBORw0KGgo="},
            "$.images",
        ),
        (Message, {"role": "user", "created_at": -1}, "Message.created_at must be a finite"),
        (Message, {"role": "user", "id": ""}, "Message.id must be a non-empty str"),
        (
            Message,
            {**base(ASSISTANT), "calls": [base(CALL), base(CALL)]},
            "Message.calls has two calls with id 'c1'",
        ),
        (
            ProviderResult,
            {"calls": [base(CALL), base(CALL)]},
            "ProviderResult.calls has two calls with id 'c1'",
        ),
        (Usage, {"prompt": 3, "completion": 3, "total": 5}, "Usage.total (5) is less than"),
        (Usage, {"prompt": 3, "cached": 4}, "Usage.cached (4) exceeds Usage.prompt (3)"),
        (Usage, {"prompt": -1}, "Usage.prompt must be an int >= 0"),
        (
            ProviderResult,
            {"usage": {"prompt": 1, "total": 0}},
            "$.usage: Usage.total (0) is less than",
        ),
        (AgentResult, {"stop": "timeout", "partial": False}, "AgentResult.partial=False"),
        (AgentResult, {"partial": True}, "AgentResult.partial=True contradicts stop='complete'"),
        (AgentResult, {"turns": -1}, "AgentResult.turns must be an int >= 0"),
        (ProviderOptions, {"temperature": 2.5}, "temperature must be a number from 0 to 2"),
        (ProviderOptions, {"temperature": -0.1}, "temperature must be a number from 0 to 2"),
        (ProviderOptions, {"max_tokens": 0}, "max_tokens must be an int >= 1"),
        (ProviderOptions, {"tool_choice": "bad name!"}, "tool_choice must be 'auto'"),
        (ProviderOptions, {"stop": [""]}, "stop[0] must be a non-empty str"),
        (ProviderOptions, {"schema": {"type": 5}}, "ProviderOptions.schema is not a valid"),
        (Delta, {"channel": "content", "text": ""}, "Delta.text must be a non-empty string"),
        (ToolFailure, {"success": False, "id": "a", "name": "b", "error": ""}, "non-empty"),
        # ToolResult tags
        (ToolResult, {"id": "a", "name": "b"}, 'needs "success": true or false'),
        (ToolResult, {"id": "a", "name": "b", "success": 1}, 'needs "success": true or false'),
        (ToolResult, {"id": "a", "name": "b", "success": "true"}, '"success": true or false'),
        (ToolResult, {"id": "a", "name": "b", "success": None}, '"success": true or false'),
        (ToolResult, [1], "$: expected an object, got list"),
        (ToolResult, {"success": True, "id": "a", "name": "b", "error": "e"}, "unknown field"),
        (ToolResult, {"success": False, "id": "a", "name": "b"}, "$.error: required field"),
        (ToolSuccess, {"id": "a", "name": "b"}, 'needs "success": true or false'),
        (
            ToolSuccess,
            {"success": False, "id": "a", "name": "b", "error": "e"},
            'a ToolSuccess needs "success": true',
        ),
        (ToolFailure, {"success": True, "id": "a", "name": "b"}, 'ToolFailure needs "success"'),
        # not an object at all
        (Message, 5, "invalid Message: $"),
        (Usage, "prompt", "invalid Usage: $"),
        (Usage, ["prompt"], "invalid Usage: $"),
        (AgentResult, None, "invalid AgentResult: $"),
        (ProviderResult, {"calls": "c"}, "$.calls: expected an array, got str"),
        (AgentResult, {"messages": [5]}, "$.messages[0]"),
    ],
)
def test_from_json_refuses(cls: Any, data: Any, expected: str) -> None:
    message = decode_error(cls, data)
    name = "ToolResult" if cls == ToolResult else cls.__name__
    assert message.startswith(f"invalid {name}: ")
    assert expected in message


def test_from_json_lists_every_problem() -> None:
    message = decode_error(Usage, {"prompt": True, "completion": "x", "total": 1.5})
    assert "$.prompt: expected an integer, got bool" in message
    assert "$.completion: expected an integer, got str" in message
    assert "$.total: expected an integer, got float" in message
    message = decode_error(
        Message, {**base(ASSISTANT), "calls": [{"id": 1, "name": "b"}, {"id": "x", "name": 2}]}
    )
    assert "$.calls[0].id: expected a string, got int" in message
    assert "$.calls[1].name: expected a string, got int" in message


def test_category_passthrough_and_codes() -> None:
    for category in Category:
        decode_error(Usage, {"prompt": True}, category=category)
        with pytest.raises(ProtocolError) as info:
            decode(Usage, '{"prompt": true}', category=category)
        assert info.value.code == "decode"
        assert info.value.category is category
        with pytest.raises(ProtocolError) as info:
            decode(Usage, '{"prompt": NaN}', category=category)
        assert info.value.code == "json"
        assert info.value.category is category
        with pytest.raises(ProtocolError) as info:
            decode(Usage, b"\xff", category=category)
        assert info.value.code == "json"
        assert info.value.category is category
    with pytest.raises(ProtocolError) as info:
        from_json(Usage, {"prompt": True})
    assert info.value.category is Category.PROVIDER
    with pytest.raises(ProtocolError) as info:
        decode(Usage, '{"prompt": 1, "prompt": 2}')
    assert info.value.code == "json"
    assert info.value.category is Category.PROVIDER


def test_from_json_refuses_non_json_values_in_json_fields() -> None:
    message = decode_error(ToolCall, {"id": "a", "name": "b", "arguments": {"x": math.nan}})
    assert "ToolCall.arguments.x" in message
    message = decode_error(ToolSuccess, {"success": True, "id": "a", "name": "b", "value": {1, 2}})
    assert "ToolSuccess.value" in message


def test_from_json_does_not_mutate_its_input() -> None:
    data = to_json(ToolSuccess("a", "b", {"x": [1]}))
    snapshot = {"success": True, "id": "a", "name": "b", "value": {"x": [1]}}
    assert from_json(ToolResult, data) == ToolSuccess("a", "b", {"x": [1]})
    assert from_json(ToolSuccess, data) == ToolSuccess("a", "b", {"x": [1]})
    assert data == snapshot


# --------------------------------------------------------------------------- wire repairs


def test_str_fields_with_lone_surrogates_are_repaired() -> None:
    message = Message.user("a\ud800b", id="x\udfff")
    back: Message = decode(Message, encode(message))
    assert back.content == "a\ufffdb"
    assert back.id == "x\ufffd"
    # JSON-valued fields are repaired already at construction, so they round-trip exactly.
    call = ToolCall("c", "n", {"k\ud800": ["\udfff"]})
    assert call.arguments == {"k\ufffd": ["\ufffd"]}
    assert decode(ToolCall, encode(call)) == call


def test_json_fields_holding_tuples_round_trip() -> None:
    # Tuples are valid arrays in JSON-valued fields (check_json keeps them as they are), but the
    # wire turns them into lists, so the round trip the codec promises must still give back an
    # equal object.
    success = ToolSuccess("a", "b", (1, 2))
    rebuilt: ToolSuccess = from_json(ToolSuccess, to_json(success))
    assert rebuilt == success
    decoded: ToolSuccess = decode(ToolSuccess, encode(success))
    assert decoded == success
    call = ToolCall("c", "n", {"xs": (1, ("y",))})
    rebuilt_call: ToolCall = from_json(ToolCall, to_json(call))
    assert rebuilt_call == call
    options = ProviderOptions(extra={"stop_ids": (1, 2)})
    decoded_options: ProviderOptions = decode(ProviderOptions, encode(options))
    assert decoded_options == options


def test_temperature_given_as_int_re_encodes_stably() -> None:
    # ProviderOptions(temperature=1) == ProviderOptions(temperature=1.0), so both must give the
    # same canonical text (the form hashed for digests), and re-encoding must be stable.
    as_int = ProviderOptions(temperature=1)
    as_float = ProviderOptions(temperature=1.0)
    assert as_int == as_float
    assert encode(as_int, canonical=True) == encode(as_float, canonical=True)
    text = encode(as_int)
    assert encode(decode(ProviderOptions, text)) == text


# --------------------------------------------------------------------------- robustness

PLAIN_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(alphabet=UTF8, max_size=6),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(alphabet=UTF8, max_size=6), children, max_size=3),
    ),
    max_leaves=8,
)


def field_names(cls: Any) -> list[str]:
    if cls == ToolResult:
        return ["success", *(field.name for field in attrs.fields(ToolFailure))]
    return [field.name for field in attrs.fields(cls)]


def near_miss(cls: Any, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """JSON close to a valid encoding: fields of ``cls`` with arbitrary values, or a valid
    encoding with one field replaced, removed or added."""
    names = field_names(cls)
    shaped = st.dictionaries(st.sampled_from([*names, "success", "extra_field"]), PLAIN_JSON)

    @st.composite
    def mutated(draw: st.DrawFn) -> Any:
        plain = dict(to_json(draw(strategy)))
        key = draw(st.sampled_from([*names, "success", "zz"]))
        action = draw(st.sampled_from(["replace", "remove"]))
        if action == "remove":
            plain.pop(key, None)
        else:
            plain[key] = draw(PLAIN_JSON)
        return plain

    return st.one_of(PLAIN_JSON, shaped, mutated())


ROBUSTNESS_CASES = [*MODEL_CASES, (ToolResult, TOOL_RESULTS)]


@pytest.mark.parametrize(
    ("cls", "strategy"), ROBUSTNESS_CASES, ids=[*MODEL_IDS, "ToolResult_union"]
)
@FUZZ_SETTINGS
@given(data=st.data())
def test_from_json_raises_only_protocol_error(
    cls: Any, strategy: st.SearchStrategy[Any], data: st.DataObject
) -> None:
    value = loads(dumps(data.draw(near_miss(cls, strategy))))
    result: Any = None
    error: ProtocolError | None = None
    try:
        result = from_json(cls, value, category=Category.USER)
    except ProtocolError as exc:  # anything else fails the test
        error = exc
    if error is not None:
        assert error.code == "decode"
        assert error.category is Category.USER
        assert str(error).startswith("invalid ")
    else:
        expected = (ToolSuccess, ToolFailure) if cls == ToolResult else (cls,)
        assert isinstance(result, expected)
        # Whatever is accepted re-encodes and decodes to an equal object.
        assert decode(cls, encode(result)) == result
