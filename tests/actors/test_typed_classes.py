"""Issue 24, item 3 ("Pydantic and friends"): where an agent takes a type -- a run's structured
output (``output=``, also by its first name ``schema=``), a tool's parameters, the ``deps`` a
tool reads through ``RunContext[Deps]`` -- a pydantic (v2) model, a dataclass and a TypedDict
work as an attrs class does: the schema is generated from it, the validated reply becomes an
instance of it, and a refusal goes back to the model, readable, for another try.

Structured output runs over ``ScriptedProvider`` (the reply is the test's to choose); tools run
end to end against the :class:`~actors.testing.Simulator` on loopback in every wire format,
which refuses a tool schema the vendors refuse.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Literal, NotRequired, TypedDict

import pydantic
import pytest
import trio
import trio.testing

from actors import Agent, RunContext, open_runtime, tool
from actors.agent import OutputError, RunOptions
from actors.testing import Reply, ScriptedProvider, Simulator
from protocols.errors import ValidationError
from protocols.messages import Role, StopReason, ToolCall

IDLE = 0.05  # mock-clock autojump threshold (real seconds): real sockets are involved
VENDORS = ["openai", "openai_responses", "anthropic", "ollama"]


class Mood(enum.Enum):
    HAPPY = "happy"
    GRUMPY = "grumpy"


class Review(pydantic.BaseModel):
    """A review of a film."""

    title: str = pydantic.Field(description="The film's title.")
    stars: int = pydantic.Field(ge=1, le=5)
    mood: Mood = Mood.HAPPY
    tags: list[str] = []

    @pydantic.field_validator("title")
    @classmethod
    def _no_spoilers(cls, value: str) -> str:
        if "dies" in value:
            raise ValueError("the title must not give the ending away")
        return value


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


class Verdict(TypedDict):
    label: Literal["spam", "ham"]
    score: NotRequired[int]


# -- structured output -------------------------------------------------------------------------


async def test_a_pydantic_model_is_an_output_type_and_the_answer_an_instance() -> None:
    provider = ScriptedProvider(Reply('{"title": "Alien", "stars": 5, "tags": ["space"]}'))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("Review Alien.", output=Review)
    assert result.output == Review(title="Alien", stars=5, tags=["space"])
    assert result.output.mood is Mood.HAPPY
    # The provider was given the model's schema: pydantic's, inlined, closed, no made-up titles.
    options = provider.calls[0].options
    assert options is not None
    assert options.schema is not None
    assert options.schema["required"] == ["title", "stars"]
    assert options.schema["additionalProperties"] is False
    assert options.schema["properties"]["title"] == {
        "type": "string",
        "description": "The film's title.",
    }
    assert options.schema["properties"]["mood"]["enum"] == ["happy", "grumpy"]
    assert "$defs" not in options.schema
    assert "title" not in options.schema  # the class name pydantic would put there


async def test_a_refused_answer_goes_back_to_the_model_in_a_line_and_is_tried_again() -> None:
    provider = ScriptedProvider(
        Reply('{"title": "Alien", "stars": 9}'),  # the schema says at most 5
        Reply('{"title": "Everyone dies", "stars": 4}'),  # the validator says no
        Reply('{"title": "Alien", "stars": 4}'),
    )
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        result = await agent.generate("Review Alien.", output=Review)
    assert result.output == Review(title="Alien", stars=4)
    assert result.stop is StopReason.COMPLETE
    feedback = [m.content for m in result.messages if m.role is Role.USER][1:]
    assert len(feedback) == 2
    assert "$.stars: " in feedback[0]
    assert "9" in feedback[0]
    assert feedback[1] == (
        "Your answer is not valid: $.title: the title must not give the ending away. Answer "
        "again with only a JSON value that matches the requested schema, with no other text."
    )


async def test_output_retries_run_out_with_pydantics_refusal_as_the_issue() -> None:
    provider = ScriptedProvider(Reply('{"title": "He dies", "stars": 1}'))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        with pytest.raises(OutputError) as caught:
            await agent.generate("Review.", output=Review, schema_retries=0)
    assert caught.value.issues == ("$.title: the title must not give the ending away",)


async def test_dataclasses_and_typeddicts_are_output_types_too() -> None:
    provider = ScriptedProvider(Reply('{"x": 1}'), Reply('{"label": "ham"}'))
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        point = await agent.generate("Where?", output=Point)
        verdict = await agent.generate("Spam?", output=Verdict)
    assert point.output == Point(1.0, 0.0)
    assert type(point.output.x) is float
    assert verdict.output == {"label": "ham"}


async def test_schema_is_the_same_option_by_its_first_name() -> None:
    provider = ScriptedProvider(Reply('{"title": "Heat", "stars": 3}'), Reply("[1, 2]"))
    schema = {"type": "array", "items": {"type": "integer"}}
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        review = await agent.generate("Review Heat.", schema=Review)
        numbers = await agent.generate("Two numbers.", output=schema)
    assert review.output == Review(title="Heat", stars=3)
    assert numbers.output == [1, 2]
    assert RunOptions(output=Review, schema=Review).output is Review  # the same, twice: fine
    with pytest.raises(ValidationError, match="give output= or schema=, not both"):
        RunOptions(output=Review, schema=Point)


@pytest.mark.parametrize(
    ("output", "fragment"),
    [
        (int, "not <class 'int'>"),
        (Mood, "a class whose values are JSON objects"),
        (object, "a class whose values are JSON objects"),
        (Exception, "output: unsupported annotation Exception: no JSON Schema mapping"),
    ],
)
async def test_an_output_type_without_an_object_schema_is_refused_saying_what_is_taken(
    output: Any, fragment: str
) -> None:
    provider = ScriptedProvider()
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider)
        with pytest.raises(ValidationError) as caught:
            await agent.generate("x", output=output)
    assert fragment in caught.value.message
    assert provider.calls == []


# -- tools -------------------------------------------------------------------------------------


class Line(pydantic.BaseModel):
    sku: str = pydantic.Field(pattern=r"^[A-Z]{3}$", description="Three capital letters.")
    qty: int = pydantic.Field(default=1, ge=1)


class Basket(pydantic.BaseModel):
    """What a customer buys."""

    lines: list[Line]
    gift: bool = False

    @pydantic.model_validator(mode="after")
    def _not_empty(self) -> Basket:
        if not self.lines:
            raise ValueError("a basket needs at least one line")
        return self


class Shop(pydantic.BaseModel):
    """The deps of the shop tools."""

    name: str
    prices: dict[str, float]


class Receipt(pydantic.BaseModel):
    shop: str
    total: float
    to: Point


@tool
async def checkout(basket: Basket, ship_to: Point, ctx: RunContext[Shop]) -> Receipt:
    """Check a basket out.

    Args:
        basket: The basket to pay for.
        ship_to: Where the parcel goes.
    """
    total = sum(ctx.deps.prices[line.sku] * line.qty for line in basket.lines)
    return Receipt(shop=ctx.deps.name, total=total, to=ship_to)


SHOP = Shop(name="Corner shop", prices={"TEA": 2.5, "JAM": 4.0})


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_tool_takes_pydantic_and_dataclass_parameters_and_typed_deps(
    mock_clock: trio.testing.MockClock, vendor: str
) -> None:
    mock_clock.autojump_threshold = IDLE
    arguments = (
        '{"basket": {"lines": [{"sku": "TEA", "qty": 2}, {"sku": "JAM"}]}, "ship_to": {"x": 1}}'
    )
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = getattr(simulator, vendor)()
        try:
            agent = await Agent.start(runtime, provider, tools=[checkout], deps=SHOP)
            result = await agent.generate(f"call checkout with {arguments}")
        finally:
            await provider.aclose()
        # The vendor's rules took the schema (the simulator refuses what they refuse).
        assert [request.tools for request in simulator.requests] == [("checkout",)] * 2
    answer = next(m for m in result.messages if m.role is Role.TOOL)
    # The tool got instances (it read ``.lines``, ``.qty``), its deps typed, and its pydantic
    # return value reached the model as JSON.
    assert json.loads(answer.content) == {
        "shop": "Corner shop",
        "total": 9.0,
        "to": {"x": 1.0, "y": 0.0},
    }
    assert result.content.startswith("The answer is ")
    assert result.stop is StopReason.COMPLETE


def test_a_tools_schema_nests_the_classes_and_leaves_the_context_out() -> None:
    parameters = checkout.definition.parameters
    assert list(parameters["properties"]) == ["basket", "ship_to"]
    basket = parameters["properties"]["basket"]
    assert basket["description"] == "The basket to pay for."
    assert basket["additionalProperties"] is False
    line = basket["properties"]["lines"]["items"]
    assert line["properties"]["sku"] == {
        "type": "string",
        "pattern": "^[A-Z]{3}$",
        "description": "Three capital letters.",
    }
    assert parameters["properties"]["ship_to"]["required"] == ["x"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            {"basket": {"lines": []}, "ship_to": {"x": 0}},
            "invalid arguments: $.basket: a basket needs at least one line",
        ),
        (
            {"basket": {"lines": [{"sku": "tea"}]}, "ship_to": {"x": 0}},
            "invalid arguments: $.basket.lines[0].sku: 'tea' does not match '^[A-Z]{3}$'",
        ),
        (
            {"basket": {"lines": [{"sku": "TEA"}], "coupon": "X"}, "ship_to": {"x": 0}},
            "invalid arguments: $.basket.coupon: unknown field 'coupon'; allowed: lines, gift",
        ),
    ],
)
async def test_a_call_the_classes_refuse_is_answered_in_a_line_and_never_runs(
    arguments: dict[str, Any], error: str
) -> None:
    provider = ScriptedProvider(Reply(calls=[ToolCall("c1", "checkout", arguments)]), "sorry")
    async with open_runtime() as runtime:
        agent = await Agent.start(runtime, provider, tools=[checkout], deps=SHOP)
        result = await agent.generate("buy")
    answer = next(m for m in result.messages if m.role is Role.TOOL)
    assert answer.content == error
