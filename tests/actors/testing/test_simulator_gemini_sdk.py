"""The simulator's Gemini API, proven against Google's own client: the official ``google-genai``
SDK, pointed at a loopback :class:`~actors.testing.Simulator` (from a worker thread: it
blocks), gets answers it accepts -- whole and streamed, thinking, parallel function calls with
their thought signature, a chat that sends the signature back (the simulator, like Gemini 3,
refuses a replayed call without it), usage, safety finishes and errors in Gemini's shape.
It also checks that what our GeminiChat sends for a request is what the SDK sends, where the
two say the same thing."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from google import genai
from google.genai import errors, types

from actors.testing import Simulator
from protocols.messages import Message, ProviderOptions, ToolDefinition

KEY = "AIzaSy-sdk-test-key"
ADD = types.FunctionDeclaration(
    name="add",
    description="Add two integers.",
    parameters_json_schema={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
TOOLS = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[ADD])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)


class Recording(Simulator):
    """The simulator, keeping each request's path and raw JSON body."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def _respond(self, exchange: Any, request: Any) -> None:
        if request.method == "POST":
            self.seen.append((request.path, json.loads(request.body)))
        await super()._respond(exchange, request)


def client(simulator: Simulator, key: str = KEY) -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=simulator.base_url))


async def test_whole_and_streamed_answers_with_usage() -> None:
    async with Recording(api_key=KEY) as simulator:

        def sdk() -> tuple[Any, list[Any]]:
            sdk_client = client(simulator)
            whole = sdk_client.models.generate_content(
                model="gemini-2.5-flash", contents="count to 3"
            )
            chunks = list(
                sdk_client.models.generate_content_stream(
                    model="gemini-2.5-flash", contents="count to 3"
                )
            )
            return whole, chunks

        whole, chunks = await trio.to_thread.run_sync(sdk)
        paths = [path for path, _ in simulator.seen]
    assert whole.text == "1 2 3"
    assert whole.candidates[0].finish_reason == types.FinishReason.STOP
    assert whole.usage_metadata.candidates_token_count == 3
    assert whole.model_version == "gemini-2.5-flash"
    assert "".join(chunk.text or "" for chunk in chunks) == "1 2 3"
    assert len(chunks) == 4  # a delta per chunk, then the finish
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.total_token_count == whole.usage_metadata.total_token_count
    assert paths[0].endswith("/models/gemini-2.5-flash:generateContent")
    assert paths[1].endswith("/models/gemini-2.5-flash:streamGenerateContent")


async def test_thinking_arrives_as_thought_parts_with_its_token_count() -> None:
    config = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=1024)
    )
    async with Simulator() as simulator:

        def sdk() -> list[Any]:
            sdk_client = client(simulator)  # (a client closes when it is collected)
            stream = sdk_client.models.generate_content_stream(
                model="gemini-2.5-flash", contents="count to 2", config=config
            )
            return list(stream)

        chunks = await trio.to_thread.run_sync(sdk)
        request = simulator.requests[-1]
    thoughts = [
        part.text
        for chunk in chunks
        for part in chunk.candidates[0].content.parts or []
        if part.thought
    ]
    assert "".join(thoughts).startswith("The user wants me to count to 2")
    assert chunks[-1].usage_metadata.thoughts_token_count > 0
    # the SDK writes thinkingConfig in snake_case; the simulator reads both spellings
    assert request.think
    assert request.settings.reasoning_effort == "low"


async def test_parallel_calls_and_a_chat_that_sends_the_signature_back() -> None:
    async with Simulator() as simulator:

        def sdk() -> tuple[Any, Any, Any]:
            sdk_client = client(simulator)
            chat = sdk_client.chats.create(model="gemini-2.5-flash", config=TOOLS)
            first = chat.send_message("What is 19 + 23 and 2 + 2?")
            calls = first.function_calls or []
            results = [
                types.Part.from_function_response(name=call.name or "", response={"result": value})
                for call, value in zip(calls, (42, 4), strict=True)
            ]
            second = chat.send_message(results)
            streamed = sdk_client.chats.create(model="gemini-2.5-flash", config=TOOLS)
            list(streamed.send_message_stream("What is 1 + 2?"))
            reply = "".join(
                chunk.text or ""
                for chunk in streamed.send_message_stream(
                    types.Part.from_function_response(name="add", response={"result": 3})
                )
            )
            return first, second, reply

        first, second, reply = await trio.to_thread.run_sync(sdk)
    parts = first.candidates[0].content.parts
    assert [call.args for call in first.function_calls] == [{"a": 19, "b": 23}, {"a": 2, "b": 2}]
    assert parts[0].thought_signature  # only the first call of a parallel set is signed
    assert parts[1].thought_signature is None
    assert second.text == "The tools returned: 42, 4."
    assert reply == "The answer is 3."


async def test_a_call_replayed_without_its_signature_is_refused_as_gemini_does() -> None:
    history = [
        types.Content(role="user", parts=[types.Part.from_text(text="What is 1 + 2?")]),
        types.Content(
            role="model", parts=[types.Part.from_function_call(name="add", args={"a": 1, "b": 2})]
        ),
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="add", response={"result": 3})],
        ),
    ]
    async with Simulator() as simulator:

        def sdk() -> Exception:
            sdk_client = client(simulator)
            try:
                sdk_client.models.generate_content(
                    model="gemini-3-pro-preview", contents=history, config=TOOLS
                )
            except errors.ClientError as error:
                return error
            raise AssertionError("the unsigned call was accepted")

        error = await trio.to_thread.run_sync(sdk)
    assert isinstance(error, errors.ClientError)
    assert error.code == 400
    assert error.status == "INVALID_ARGUMENT"
    assert "thought_signature" in str(error.message)


async def test_safety_and_errors_in_gemini_s_shape() -> None:
    async with Simulator(api_key=KEY, content_filter=["forbidden"]) as simulator:

        def sdk() -> tuple[Any, Exception]:
            sdk_client, wrong = client(simulator), client(simulator, key="wrong")
            blocked = sdk_client.models.generate_content(
                model="gemini-2.5-flash", contents="say forbidden things"
            )
            try:
                wrong.models.generate_content(model="gemini-2.5-flash", contents="hi")
            except errors.ClientError as error:
                return blocked, error
            raise AssertionError("a wrong key was accepted")

        blocked, error = await trio.to_thread.run_sync(sdk)
    assert blocked.candidates[0].finish_reason == types.FinishReason.SAFETY
    assert isinstance(error, errors.ClientError)
    assert (error.code, error.status) == (401, "UNAUTHENTICATED")


@pytest.mark.parametrize("think", [False, True])
async def test_our_request_says_what_the_sdk_s_says(think: bool) -> None:
    """The same conversation, tools and settings from GeminiChat and from the SDK arrive
    at the simulator as the same request (read by its parser: the SDK spells some fields in
    snake_case, which Gemini takes as well)."""
    tool = ToolDefinition("add", "Add two integers.", ADD.parameters_json_schema)  # type: ignore[arg-type]
    options = ProviderOptions(
        temperature=0.5,
        top_p=0.9,
        max_tokens=100,
        stop=("END",),
        seed=7,
        reasoning_effort="high" if think else None,
    )
    config = types.GenerateContentConfig(
        system_instruction="Be terse.",
        temperature=0.5,
        top_p=0.9,
        max_output_tokens=100,
        stop_sequences=["END"],
        seed=7,
        tools=[types.Tool(function_declarations=[ADD])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        thinking_config=(
            types.ThinkingConfig(include_thoughts=True, thinking_budget=24576) if think else None
        ),
    )
    async with Recording() as simulator:
        ours = simulator.gemini(model="gemini-2.5-flash")
        await ours.generate(
            [Message.system("Be terse."), Message.user("What is 2 + 2?")],
            tools=[tool],
            options=options,
        )
        await ours.aclose()

        def sdk() -> None:
            sdk_client = client(simulator)
            sdk_client.models.generate_content(
                model="gemini-2.5-flash", contents="What is 2 + 2?", config=config
            )

        await trio.to_thread.run_sync(sdk)
        mine, theirs = simulator.requests
    assert mine.turns == theirs.turns
    assert mine.tools == theirs.tools
    assert mine.settings == theirs.settings
    assert mine.think == theirs.think == think
    assert mine.max_tokens == theirs.max_tokens == 100
