"""The data model's invariants, constructors and arithmetic."""

from __future__ import annotations

import math
import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import ValidationError
from protocols.messages import (
    AgentResult,
    Delta,
    FinishReason,
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
    new_id,
)

ALL_CLASSES = [
    Message,
    ToolCall,
    ToolSuccess,
    ToolFailure,
    ToolDefinition,
    Usage,
    ProviderOptions,
    Delta,
    ProviderResult,
    AgentResult,
]


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_every_class_is_frozen_and_slotted(cls: type) -> None:
    assert attrs.has(cls)
    assert "__slots__" in vars(cls)
    instance = {
        Message: lambda: Message.user("hi"),
        ToolCall: lambda: ToolCall("c1", "add"),
        ToolSuccess: lambda: ToolSuccess("c1", "add", 3),
        ToolFailure: lambda: ToolFailure("c1", "add", "boom"),
        ToolDefinition: lambda: ToolDefinition("add"),
        Usage: Usage,
        ProviderOptions: ProviderOptions,
        Delta: lambda: Delta("content", "x"),
        ProviderResult: ProviderResult,
        AgentResult: AgentResult,
    }[cls]()
    assert not hasattr(instance, "__dict__")
    field = attrs.fields(cls)[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(instance, field, getattr(instance, field))


# -- Message -------------------------------------------------------------------------------------


def test_constructors_set_role_and_fields() -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    assert Message.system("be terse").role is Role.SYSTEM
    user = Message.user("look", images=["aGk="])
    assert (user.role, user.content, user.images) == (Role.USER, "look", ("aGk=",))
    assistant = Message.assistant("sure", calls=[call], thinking="hmm", interrupted=True)
    assert assistant.calls == (call,)
    assert (assistant.thinking, assistant.interrupted) == ("hmm", True)
    tool = Message.tool("c1", "add", "3")
    assert (tool.role, tool.tool_call_id, tool.name, tool.content) == (Role.TOOL, "c1", "add", "3")


def test_ids_and_timestamps_are_minted_unless_given() -> None:
    first, second = Message.user("a"), Message.user("a")
    assert first.id != second.id
    assert len(first.id) == 32
    assert first.created_at > 1_600_000_000
    pinned = Message(role="user", content="a", id="m1", created_at=5)
    assert (pinned.id, pinned.created_at) == ("m1", 5.0)
    assert isinstance(pinned.created_at, float)
    assert Message.user("a", id="given").id == "given"
    stamped = [
        Message.system("s", created_at=1),
        Message.user("u", created_at=1),
        Message.assistant("a", created_at=1),
        Message.tool("c", "t", "r", created_at=1),
        Message.from_result(ToolFailure("c", "t", "e"), created_at=1),
    ]
    assert {message.created_at for message in stamped} == {1.0}
    assert len({new_id() for _ in range(100)}) == 100


def test_role_accepts_its_string_value() -> None:
    assert Message(role="assistant").role is Role.ASSISTANT
    with pytest.raises(ValidationError, match="'bogus' is not a valid Role"):
        Message(role="bogus")


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"role": "system", "calls": [ToolCall("a", "b")]}, "system message cannot have calls"),
        ({"role": "system", "images": ["x"]}, "system message cannot have images"),
        ({"role": "user", "calls": [ToolCall("a", "b")]}, "user message cannot have calls"),
        ({"role": "user", "thinking": "t"}, "user message cannot have thinking"),
        ({"role": "user", "interrupted": True}, "user message cannot have interrupted"),
        ({"role": "user", "tool_call_id": "c"}, "user message cannot have tool_call_id"),
        ({"role": "assistant", "images": ["x"]}, "assistant message cannot have images"),
        ({"role": "assistant", "name": "n"}, "assistant message cannot have name"),
        ({"role": "tool", "content": "x"}, "tool message needs tool_call_id and name"),
        ({"role": "tool", "tool_call_id": "c"}, "tool message needs tool_call_id and name"),
        (
            {"role": "tool", "tool_call_id": "c", "name": "n", "thinking": "t"},
            "tool message cannot have thinking",
        ),
        ({"role": "tool", "tool_call_id": "", "name": "n"}, "tool_call_id must be a non-empty"),
        ({"role": "user", "content": 3}, "Message.content must be a str, not int"),
        ({"role": "user", "images": "abc"}, "images must be a sequence of str"),
        ({"role": "user", "images": [""]}, r"images\[0\] must be a non-empty"),
        ({"role": "user", "images": [b"x"]}, r"images\[0\] must be a str"),
        ({"role": "assistant", "calls": [{"id": "a"}]}, r"calls\[0\] must be a ToolCall"),
        ({"role": "assistant", "interrupted": 1}, "interrupted must be a bool"),
        ({"role": "user", "id": ""}, "Message.id must be a non-empty str"),
        ({"role": "user", "created_at": math.nan}, "created_at must be a finite number"),
        ({"role": "user", "created_at": -1}, "created_at must be a finite number"),
        ({"role": "user", "created_at": True}, "created_at must be a number"),
    ],
)
def test_message_invariants(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Message(**kwargs)  # type: ignore[arg-type]


def test_continuation_is_assistant_only_opaque_json() -> None:
    data = {"anthropic": {"thinking_blocks": [{"thinking": "hm", "signature": "c2ln"}]}}
    message = Message.assistant("ok", continuation=data)
    assert message.continuation == data
    assert Message.assistant("ok").continuation == {}
    assert ProviderResult(content="ok", continuation=data).continuation == data
    with pytest.raises(ValidationError, match="user message cannot have continuation"):
        Message(role="user", continuation={"x": 1})
    with pytest.raises(ValidationError, match="continuation must be a JSON object"):
        Message.assistant(continuation=[1])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not a finite number"):
        ProviderResult(continuation={"x": math.nan})


def test_duplicate_call_ids_in_one_message_are_refused() -> None:
    with pytest.raises(ValidationError, match="two calls with id 'a'"):
        Message.assistant(calls=[ToolCall("a", "x"), ToolCall("a", "y")])
    # ...but the same id across different messages is fine (ids are not assumed unique).
    Message.assistant(calls=[ToolCall("a", "x")])
    Message.assistant(calls=[ToolCall("a", "x")])


def test_validation_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="cannot have calls"):
        Message(role="user", calls=[ToolCall("a", "b")])


# -- Tools ---------------------------------------------------------------------------------------


def test_tool_call_arguments_must_be_a_strict_json_object() -> None:
    assert ToolCall("c", "f").arguments == {}
    with pytest.raises(ValidationError, match=r"ToolCall.arguments must be a JSON object"):
        ToolCall("c", "f", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"ToolCall\.arguments\.x: inf is not a finite"):
        ToolCall("c", "f", {"x": math.inf})
    with pytest.raises(ValidationError, match=r"ToolCall.name must be a non-empty str"):
        ToolCall("c", "")
    repaired = ToolCall("c", "f", {"k": "a\ud800"})
    assert repaired.arguments == {"k": "a\ufffd"}


def test_tool_result_arms() -> None:
    success = ToolSuccess("c1", "add", {"sum": 3})
    failure = ToolFailure("c1", "add", "division by zero")
    assert success.ok is True
    assert failure.ok is False
    assert isinstance(success, ToolResult)  # type: ignore[misc,arg-type]
    assert isinstance(failure, ToolResult)  # type: ignore[misc,arg-type]
    assert success.render() == '{"sum":3}'
    assert ToolSuccess("c1", "echo", "plain text").render() == "plain text"
    assert ToolSuccess("c1", "noop").render() == "null"
    assert failure.render() == "division by zero"
    message = Message.from_result(failure)
    assert (message.tool_call_id, message.name, message.content) == (
        "c1",
        "add",
        "division by zero",
    )
    with pytest.raises(ValidationError, match=r"ToolFailure.error must be a non-empty str"):
        ToolFailure("c1", "add", "")
    with pytest.raises(ValidationError, match="not a JSON type"):
        ToolSuccess("c1", "add", object())


def test_a_successful_results_images_go_on_its_tool_message() -> None:
    dot = "data:image/png;base64,iVBORw0KGgo="
    success = ToolSuccess("c1", "draw", "a dot", images=[dot, "R0lGODlh"])
    assert success.images == (dot, "R0lGODlh")
    assert success.render() == "a dot"  # the text only
    message = Message.from_result(success)
    assert (message.role, message.content, message.images) == (
        Role.TOOL,
        "a dot",
        (dot, "R0lGODlh"),
    )
    assert Message.tool("c1", "draw", "x", images=[dot]).images == (dot,)
    assert Message.from_result(ToolSuccess("c1", "draw", "x")).images == ()
    with pytest.raises(ValidationError, match=r"ToolSuccess.images\[1\] must be a non-empty"):
        ToolSuccess("c1", "draw", images=[dot, ""])
    with pytest.raises(ValidationError, match=r"ToolSuccess\.images must be a sequence of str"):
        ToolSuccess("c1", "draw", images=dot)


def test_tool_definition_validation() -> None:
    definition = ToolDefinition("get_weather", "Look up the weather.")
    assert definition.parameters == {"type": "object", "properties": {}}
    ToolDefinition(
        "a" * 64, parameters={"type": "object", "properties": {"x": {"type": "integer"}}}
    )
    for bad in ["", "a" * 65, "has space", "dot.name", "ünï"]:
        with pytest.raises(ValidationError, match=r"ToolDefinition.name must be 1-64"):
            ToolDefinition(bad)
    with pytest.raises(ValidationError, match='must have "type": "object" at its root'):
        ToolDefinition("f", parameters={"type": "array"})
    with pytest.raises(ValidationError, match="not a valid JSON Schema at properties/x/type"):
        ToolDefinition("f", parameters={"type": "object", "properties": {"x": {"type": "int"}}})
    with pytest.raises(ValidationError, match="not a valid JSON Schema at properties"):
        ToolDefinition("f", parameters={"type": "object", "properties": 3})
    with pytest.raises(ValidationError, match="description must be a str"):
        ToolDefinition("f", 3)  # type: ignore[arg-type]


# -- Usage ---------------------------------------------------------------------------------------


def test_usage_total_defaults_to_the_parts_and_may_exceed_them() -> None:
    assert Usage(3, 4).total == 7
    assert Usage(3, 4, total=10).total == 10
    with pytest.raises(ValidationError, match=r"total \(6\) is less than prompt \+ completion"):
        Usage(3, 4, total=6)
    with pytest.raises(ValidationError, match=r"cached \(4\) exceeds Usage.prompt \(3\)"):
        Usage(3, 4, cached=4)
    for bad in [-1, 1.5, True, "3"]:
        with pytest.raises(ValidationError, match=re.escape("Usage.prompt must be an int >= 0")):
            Usage(prompt=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=re.escape("Usage.cached must be an int >= 0")):
        Usage(prompt=3, cached=-1)
    assert Usage(3, 4, reasoning=4).reasoning == 4
    with pytest.raises(ValidationError, match=r"reasoning \(5\) exceeds Usage.completion \(4\)"):
        Usage(3, 4, reasoning=5)
    with pytest.raises(ValidationError, match=re.escape("Usage.reasoning must be an int >= 0")):
        Usage(completion=3, reasoning=-1)


counts = st.integers(min_value=0, max_value=10**9)


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    prompt, completion = draw(counts), draw(counts)
    total = prompt + completion + draw(st.integers(0, 1000))
    cached = draw(st.none() | st.integers(0, prompt))
    reasoning = draw(st.none() | st.integers(0, completion))
    return Usage(prompt, completion, total, cached, reasoning)


@given(usages(), usages(), usages())
def test_usage_addition_is_associative_with_a_zero(a: Usage, b: Usage, c: Usage) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a
    zero = Usage()
    assert (a + zero).prompt == a.prompt
    assert (a + zero).total == a.total
    summed = a + b
    assert summed.total == a.total + b.total
    if a.cached is None and b.cached is None:
        assert summed.cached is None
    else:
        assert summed.cached == (a.cached or 0) + (b.cached or 0)
    if a.reasoning is None and b.reasoning is None:
        assert summed.reasoning is None
    else:
        assert summed.reasoning == (a.reasoning or 0) + (b.reasoning or 0)


def test_usage_addition_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        Usage() + 3  # type: ignore[operator]


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ({"prompt": 10, "completion": 5, "total": 15}, Usage(10, 5, 15)),
        ({"prompt": 10, "completion": 5}, Usage(10, 5, 15)),
        ({"prompt": 10, "completion": 5, "total": 3}, Usage(10, 5, 15)),
        ({"prompt": 10, "completion": 5, "total": 20}, Usage(10, 5, 20)),
        ({"prompt": math.nan, "completion": math.inf, "total": -math.inf}, Usage(0, 0, 0)),
        ({"prompt": -4, "completion": 2.2}, Usage(0, 3, 3)),
        ({"prompt": "12", "completion": "x", "total": None}, Usage(12, 0, 12)),
        ({"prompt": True, "completion": [3]}, Usage(0, 0, 0)),
        ({"prompt": 10, "cached": 50}, Usage(10, 0, 10, cached=10)),
        ({"prompt": 10, "cached": None}, Usage(10, 0, 10, cached=None)),
        ({"completion": 5, "reasoning": 9}, Usage(0, 5, 5, reasoning=5)),
        ({"completion": 5, "reasoning": "3"}, Usage(0, 5, 5, reasoning=3)),
        ({"prompt": 1e300}, Usage(2**53 - 1, 0, 2**53 - 1)),
    ],
)
def test_usage_sanitize(reported: dict[str, object], expected: Usage) -> None:
    assert Usage.sanitize(**reported) == expected


@given(
    st.dictionaries(
        st.sampled_from(["prompt", "completion", "total", "cached", "reasoning"]),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=8)
        | st.lists(st.integers(), max_size=2),
    )
)
def test_usage_sanitize_never_raises(reported: dict[str, object]) -> None:
    usage = Usage.sanitize(**reported)
    assert usage.total >= usage.prompt + usage.completion
    assert usage.cached is None or usage.cached <= usage.prompt
    assert usage.reasoning is None or usage.reasoning <= usage.completion


# -- Provider boundary ---------------------------------------------------------------------------


def test_provider_options_defaults_and_validation() -> None:
    options = ProviderOptions()
    assert (options.think, options.schema, options.max_tokens, options.temperature) == (
        None,
        None,
        None,
        None,
    )
    assert (options.tool_choice, options.stop, options.extra) == (None, (), {})
    full = ProviderOptions(
        think=True,
        schema={"type": "object"},
        max_tokens=100,
        temperature=0.7,
        tool_choice="get_weather",
        stop=["END"],
        extra={"seed": 1},
    )
    assert full.stop == ("END",)
    bad = [
        ({"max_tokens": 0}, "max_tokens must be an int >= 1"),
        ({"max_tokens": True}, "max_tokens must be an int >= 1"),
        ({"temperature": 2.5}, "temperature must be a number from 0 to 2"),
        ({"temperature": math.nan}, "temperature must be a number from 0 to 2"),
        ({"tool_choice": "bad name"}, "tool_choice must be 'auto', 'none', 'required'"),
        ({"stop": "END"}, "stop must be a sequence of strings"),
        ({"stop": [""]}, r"stop\[0\] must be a non-empty str"),
        ({"stop": ["x"] * 17}, "stop holds at most 16 sequences"),
        ({"extra": {"x": math.inf}}, "ProviderOptions.extra.x: inf is not a finite"),
        ({"schema": {"type": 7}}, "ProviderOptions.schema is not a valid JSON Schema"),
        ({"think": "yes"}, "think must be a bool"),
    ]
    for kwargs, problem in bad:
        with pytest.raises(ValidationError, match=problem):
            ProviderOptions(**kwargs)  # type: ignore[arg-type]


def test_delta_invariants() -> None:
    assert Delta("thinking", "hm").channel == "thinking"
    with pytest.raises(ValidationError, match=re.escape("Delta.text must be a non-empty string")):
        Delta("content", "")
    with pytest.raises(
        ValidationError, match=re.escape("Delta.channel must be 'content' or 'thinking'")
    ):
        Delta("reasoning", "x")  # type: ignore[arg-type]


def test_provider_result_finish_defaults_from_calls() -> None:
    assert ProviderResult(content="hi").finish is FinishReason.STOP
    call = ToolCall("c1", "add")
    assert ProviderResult(calls=[call]).finish is FinishReason.TOOL_CALLS
    assert ProviderResult(calls=[call], finish="length").finish is FinishReason.LENGTH
    assert ProviderResult().usage is None
    with pytest.raises(ValidationError, match="two calls with id 'c1'"):
        ProviderResult(calls=[call, call])
    with pytest.raises(ValidationError, match="not a valid FinishReason"):
        ProviderResult(finish="done")
    with pytest.raises(TypeError, match="usage"):
        ProviderResult(usage={"prompt": 1})  # type: ignore[arg-type]


def test_provider_result_denied_names_only_its_own_calls_and_round_trips() -> None:
    from protocols.codec import decode, encode

    call = ToolCall("c1", "deploy")
    result = ProviderResult(calls=[call], denied={"c1": "denied: not on a Friday"})
    assert decode(ProviderResult, encode(result)) == result
    assert "denied" not in encode(ProviderResult(calls=[call]))  # the default is left out
    with pytest.raises(ValidationError, match="names a call the result does not hold"):
        ProviderResult(calls=[call], denied={"c2": "denied"})
    with pytest.raises(ValidationError, match="non-empty strings"):
        ProviderResult(calls=[call], denied={"c1": ""})
    with pytest.raises(ValidationError, match="non-empty strings"):
        ProviderResult(calls=[call], denied={"c1": 3})  # type: ignore[dict-item]


def test_agent_result_partial_follows_stop() -> None:
    assert AgentResult().partial is False
    assert AgentResult().stop is StopReason.COMPLETE
    for stop in ["cancelled", "timeout", "budget", "exhausted"]:
        result = AgentResult(stop=stop)
        assert result.partial is True
        assert result.stop.value == stop
    with pytest.raises(ValidationError, match="contradicts stop='timeout'"):
        AgentResult(stop="timeout", partial=False)
    with pytest.raises(ValidationError, match="contradicts stop='complete'"):
        AgentResult(partial=True)
    with pytest.raises(ValidationError, match="turns must be an int >= 0"):
        AgentResult(turns=-1)
    with pytest.raises(ValidationError, match=r"messages\[0\] must be a Message"):
        AgentResult(messages=["hi"])  # type: ignore[list-item]


def test_provider_result_model_and_response_id_are_optional_bounded_names() -> None:
    from protocols.codec import decode, encode, from_json

    assert (ProviderResult().model, ProviderResult().response_id) == (None, None)
    named = ProviderResult(content="hi", model="gpt-4.1-mini", response_id="chatcmpl-1")
    assert (named.model, named.response_id) == ("gpt-4.1-mini", "chatcmpl-1")
    assert decode(ProviderResult, encode(named)) == named
    # Left out when unknown, so what was encoded before the fields existed still decodes.
    assert "model" not in encode(ProviderResult(content="hi"))
    assert from_json(ProviderResult, {"content": "hi"}) == ProviderResult(content="hi")
    longest = "m" * 256
    assert ProviderResult(model=longest, response_id=longest).model == longest
    for field in ("model", "response_id"):
        for bad in ("", "m" * 257, 7):
            with pytest.raises(ValidationError, match=re.escape(f"ProviderResult.{field} must")):
                ProviderResult(**{field: bad})
