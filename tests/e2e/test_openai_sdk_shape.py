"""Model settings against the reference client (issue 24, item 1): the request body our OpenAI
adapters send for a set of settings is the body the official ``openai`` SDK sends for the
same request -- chat completions and the Responses API, field by field.

Both send to the same loopback :class:`~actors.testing.Simulator` (the SDK from a worker
thread: it blocks), which keeps each raw body it answers; the SDK's request is written as a
user of the SDK would write it, with our settings under the SDK's own parameter names."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import trio

from actors import ModelSettings, OpenAIChat, OpenAIResponses
from actors.testing import Simulator
from protocols.messages import Message, ProviderOptions, ToolDefinition

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
TOOL = ToolDefinition("add", "Add.", SCHEMA)

CASES = {
    "every field": ModelSettings(
        temperature=0.5,
        top_p=0.9,
        max_tokens=100,
        stop=["END", "\n\n"],
        seed=7,
        presence_penalty=0.25,
        frequency_penalty=-0.5,
        reasoning_effort="low",
        parallel_tool_calls=False,
        extra={"vendor_option": 1, "metadata": {"k": "v"}},
    ),
    "a cap alone": ModelSettings(max_tokens=1),
    "none": ModelSettings(),
    "zeros": ModelSettings(temperature=0, seed=0, presence_penalty=0, parallel_tool_calls=True),
}


class Recording(Simulator):
    """The simulator, keeping each request's raw JSON body."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def _respond(self, exchange: Any, request: Any) -> None:
        if request.method == "POST":
            self.bodies.append(json.loads(request.body))
        await super()._respond(exchange, request)


def sdk_settings(settings: ModelSettings, *, cap: str) -> dict[str, Any]:
    """``settings`` as the SDK's keyword arguments (``cap``: its name for max_tokens)."""
    names = {"max_tokens": cap, "extra": "extra_body", "stop": "stop"}
    return {names.get(name, name): value for name, value in settings.fields().items()}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_openai_chat_sends_what_the_sdk_sends(case: str) -> None:
    settings = CASES[case]
    async with Recording() as sim:
        ours = OpenAIChat(
            model="m", base_url=sim.openai_base_url, max_tokens_key="max_completion_tokens"
        )
        options = ProviderOptions.from_settings(settings)
        await ours.generate([Message.user("hi")], tools=[TOOL], options=options)
        await ours.aclose()
        kwargs = sdk_settings(settings, cap="max_completion_tokens")
        if "stop" in kwargs:
            kwargs["stop"] = list(kwargs["stop"])

        def sdk() -> None:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="key")
            stream = client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                tools=[
                    {
                        "type": "function",
                        "function": {"name": "add", "description": "Add.", "parameters": SCHEMA},
                    }
                ],
                stream=True,
                stream_options={"include_usage": True},
                **kwargs,
            )
            for _ in stream:
                pass
            client.close()

        await trio.to_thread.run_sync(sdk)
    ours_body, sdk_body = sim.bodies
    assert ours_body == sdk_body
    for name in settings.fields():  # every set field is there (the cap under the SDK's name)
        key = {"max_tokens": "max_completion_tokens", "extra": "vendor_option"}.get(name, name)
        assert key in ours_body, name


@pytest.mark.parametrize("case", sorted(CASES))
async def test_openai_responses_sends_what_the_sdk_sends(case: str) -> None:
    settings = CASES[case]
    # the Responses API has no stop sequences, seed or penalties: our adapter refuses them
    # (tested in tests/protocols/test_settings_wire.py), and the SDK has no parameter for them
    kept = ModelSettings(
        **{
            name: value
            for name, value in settings.fields().items()
            if name not in ("stop", "seed", "presence_penalty", "frequency_penalty")
        }
    )
    async with Recording() as sim:
        ours = OpenAIResponses(model="m", base_url=sim.openai_base_url)
        options = ProviderOptions.from_settings(kept)
        await ours.generate([Message.user("hi")], tools=[TOOL], options=options)
        await ours.aclose()
        kwargs = sdk_settings(kept, cap="max_output_tokens")
        effort = kwargs.pop("reasoning_effort", None)
        if effort is not None:
            kwargs["reasoning"] = {"effort": effort, "summary": "auto"}
            kwargs["include"] = ["reasoning.encrypted_content"]

        def sdk() -> None:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="key")
            stream = client.responses.create(
                model="m",
                input=[
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "hi"}],
                    }
                ],
                tools=[
                    {
                        "type": "function",
                        "name": "add",
                        "description": "Add.",
                        "parameters": SCHEMA,
                        "strict": False,
                    }
                ],
                store=False,
                stream=True,
                **kwargs,
            )
            for _ in stream:
                pass
            client.close()

        await trio.to_thread.run_sync(sdk)
    ours_body, sdk_body = sim.bodies
    assert ours_body == sdk_body
