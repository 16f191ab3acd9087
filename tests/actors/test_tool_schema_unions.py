"""notes/002.md guarantee 10, end to end: a tool whose schema is a union of argument sets (a
root ``anyOf``, as MCP servers write them) is advertised to every vendor in a shape it accepts,
and the model's call is checked against the union itself and then run.

Each vendor's provider talks to the :class:`~actors.testing.Simulator` on loopback, which
refuses -- as OpenAI's and Anthropic's APIs do -- a tool schema with ``anyOf``/``oneOf``/``allOf``
at its top level or without ``"type": "object"`` there.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from actors import open_runtime, tool
from actors.agent import Agent
from actors.providers import AnthropicMessages, OllamaChat, OpenAIChat, OpenAIResponses
from actors.testing import Simulator
from protocols.messages import Message, Role, StopReason, ToolDefinition

IDLE = 0.05  # mock-clock autojump threshold (real seconds): real sockets are involved
VENDORS = ["openai", "openai_responses", "anthropic", "ollama"]

BY_ID = {
    "type": "object",
    "properties": {"id": {"type": "string"}},
    "required": ["id"],
    "additionalProperties": False,
}
BY_PATH = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
    "required": ["path"],
    "additionalProperties": False,
}
OPEN_FILE: dict[str, Any] = {"anyOf": [BY_ID, BY_PATH]}


def opener(opened: list[dict[str, Any]]) -> Any:
    @tool(name="open_file", description="Open a file by id or by path.", schema=OPEN_FILE)
    async def open_file(**arguments: Any) -> str:
        opened.append(arguments)
        return f"opened {arguments.get('path') or arguments.get('id')}"

    return open_file


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_union_schema_tool_is_advertised_called_checked_and_run(
    mock_clock: trio.testing.MockClock, vendor: str
) -> None:
    mock_clock.autojump_threshold = IDLE
    opened: list[dict[str, Any]] = []
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = getattr(simulator, vendor)()
        try:
            agent = await Agent.start(runtime, provider, tools=[opener(opened)])
            result = await agent.generate('call open_file with {"path": "a.txt", "lines": 3}')
        finally:
            await provider.aclose()
        # The simulator took the request (a root anyOf would have been a 400).
        assert [request.tools for request in simulator.requests] == [("open_file",)] * 2
    assert opened == [{"path": "a.txt", "lines": 3}]
    assert result.stop is StopReason.COMPLETE
    assert result.content == "The answer is opened a.txt."


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_call_that_fits_no_argument_set_is_refused_before_the_tool_runs(
    mock_clock: trio.testing.MockClock, vendor: str
) -> None:
    # The flat schema the vendor saw takes both fields at once; the union does not (each
    # argument set is closed), and the arguments are checked against the union.
    mock_clock.autojump_threshold = IDLE
    opened: list[dict[str, Any]] = []
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = getattr(simulator, vendor)()
        try:
            agent = await Agent.start(runtime, provider, tools=[opener(opened)])
            result = await agent.generate('call open_file with {"id": "7", "path": "a.txt"}')
        finally:
            await provider.aclose()
    assert opened == []
    (answer,) = [m for m in result.messages if m.role is Role.TOOL]
    assert answer.content == (
        "invalid arguments: $: fits none of the 2 accepted forms: "
        "(1) $.path: unknown argument 'path'; allowed: id "
        "(2) $.id: unknown argument 'id'; allowed: path, lines"
    )


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: OpenAIChat(model="m"), ("function", "parameters")),
        (lambda: OpenAIResponses(model="m"), ("parameters",)),
        (lambda: AnthropicMessages(model="m", api_key="k"), ("input_schema",)),
        (lambda: OllamaChat(model="m"), ("function", "parameters")),
    ],
)
async def test_each_providers_request_body_carries_a_flat_object_schema(
    make: Any, where: tuple[str, ...]
) -> None:
    provider = make()
    try:
        definition = ToolDefinition("open_file", "Open a file.", OPEN_FILE)
        body = provider.encode([Message.user("hi")], [definition], None)
    finally:
        await provider.aclose()
    schema: Any = body["tools"][0]
    for key in where:
        schema = schema[key]
    assert schema["type"] == "object"
    assert not {"anyOf", "oneOf", "allOf"} & set(schema)
    assert schema["properties"] == {
        "id": {"type": "string"},
        "path": {"type": "string"},
        "lines": {"type": "integer"},
    }
    assert schema["additionalProperties"] is False
    assert "(1) id (required: id); (2) path, lines (required: path)" in schema["description"]
    assert definition.parameters["anyOf"] == [BY_ID, BY_PATH]  # what calls are checked against
