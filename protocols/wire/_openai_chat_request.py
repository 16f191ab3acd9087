"""The OpenAI Chat Completions request body, sans-IO: :func:`encode_request` (messages, tool
images, tools and options) and the constants it writes with; see
:mod:`protocols.wire.openai_chat`, which re-exports them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias

from .._json import dumps
from ..errors import ConfigError
from ..messages import Message, ProviderOptions, Role, ToolDefinition
from ._common import Written, automatic_cache, data_url, split_system

#: Request-body keys :func:`encode_request` owns; ``ProviderOptions.extra`` may not set them.
RESERVED_KEYS: Final = frozenset({"model", "messages", "tools", "stream", "stream_options"})

#: The names the format has for the output token cap: ``max_tokens`` (what OpenAI-compatible
#: servers take) and ``max_completion_tokens`` (what OpenAI's API wants; its reasoning models
#: refuse ``max_tokens``).
MaxTokensKey: TypeAlias = Literal["max_tokens", "max_completion_tokens"]
MAX_TOKENS_KEYS: Final[tuple[MaxTokensKey, ...]] = ("max_tokens", "max_completion_tokens")

#: ``reasoning_effort`` sent for ``think=True``: the level OpenAI's reasoning models default to.
THINK_EFFORT: Final = "medium"

#: The text part that leads each tool message's images in the ``user`` message which carries them
#: (tool messages take text only): formatted with the tool's ``name`` and the ``call_id``.
TOOL_IMAGES_LABEL: Final = "Images returned by tool {name} (call {call_id}):"


# ---------------------------------------------------------------------------------------------
# Request


def encode_request(
    messages: Sequence[Message],
    *,
    model: str,
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
    max_tokens_key: MaxTokensKey = "max_tokens",
) -> dict[str, Any]:
    """The JSON request body for ``messages``: strict JSON data, ready to serialise and send.

    The body's dicts and lists are new, but tool parameter schemas, the output schema and
    ``extra`` values are the caller's objects, shared rather than copied: treat the body as
    read-only, like the data model.

    Guarantees:

    * System messages, wherever they stand, become one ``system`` message, first: their texts
      in order, joined by a blank line (empty ones left out; see ``docs/context.md``). There is
      none when no message is a system message, and never two.
    * The other messages keep their order. ``tool`` messages map to their wire role (a tool
      message carries ``tool_call_id``); a ``user`` message with images becomes a list of
      parts -- its text first (left out when empty), then one ``image_url`` part per image as a
      ``data:`` URL (a payload that already is a ``data:`` URL is sent as is, otherwise its media
      type is sniffed by :func:`~protocols.wire.image_media_type`); an ``assistant`` message sends
      its content (``""`` when empty, also with calls: never ``null``, which llama.cpp-based
      servers refuse with a 500) and its calls, with arguments as compact
      JSON text. An assistant message's ``thinking``, ``continuation`` and ``interrupted`` mark
      are never sent.
    * A tool message takes text only, so the images of tool messages follow them in one extra
      ``user`` message, placed right after the run of consecutive tool messages they are in:
      for each tool message with images, in order, a text part naming it
      (:data:`TOOL_IMAGES_LABEL`: "Images returned by tool add (call c1):") then its
      ``image_url`` parts, as for a user message. No such message is sent for a run without
      images.
    * ``tools`` become ``function`` tools (an empty description is left out); no ``tools`` key is
      sent when there are none.
    * ``stream=True`` asks for a streamed response with usage in its last chunk
      (``stream_options.include_usage``); ``stream=False`` sends neither key.
    * Options, each only when set: ``max_tokens`` as ``max_tokens_key`` -- ``max_tokens``
      (the default: what OpenAI-compatible servers take) or ``max_completion_tokens`` (what
      OpenAI's own API wants, and its reasoning models require); ``temperature``, ``top_p``,
      ``seed``, ``presence_penalty`` and ``frequency_penalty`` under their own names; ``stop``
      as a list; ``reasoning_effort`` as ``reasoning_effort``, and ``think=True`` without one as
      ``"reasoning_effort": "medium"`` (:data:`THINK_EFFORT`: OpenAI's reasoning models, vLLM,
      Groq, OpenRouter read it; a model that cannot reason may refuse it with a 400, which is
      better than being silently ignored); ``think=False`` sends nothing, since the format has
      no "off" every server takes -- turn reasoning off with the server's own field through
      ``extra``, e.g. ``{"reasoning_effort": "minimal"}`` for OpenAI or
      ``{"chat_template_kwargs": {"enable_thinking": False}}`` for vLLM or llama.cpp serving
      Qwen3; ``parallel_tool_calls`` when the request has tools (OpenAI refuses it without);
      ``tool_choice`` as ``"auto"``/``"none"``/``"required"`` or, for a tool name, the
      function-choice object (sent as given, also when there are no tools: the server
      judges); ``schema`` as a ``json_schema`` ``response_format`` named ``"output"``;
      ``cache_key`` as ``prompt_cache_key`` and ``cache_retention`` as
      ``prompt_cache_retention``. ``cache="auto"`` sends nothing (OpenAI caches a long
      prompt's prefix by itself); ``cache="off"`` and breakpoints by hand
      (``cache_breakpoints``) raise ``ConfigError``: the format has no way to say either.
    * ``options.extra`` is merged last. It may not set a key this function owns
      (:data:`RESERVED_KEYS`) nor one it wrote from an option (``max_tokens`` also reserves the
      other name of the token cap).

    Raises :class:`~protocols.errors.ConfigError` when ``model`` is empty or ``extra`` sets a
    key it may not (the error names it and why).
    """
    if not isinstance(model, str) or not model:
        raise ConfigError("the OpenAI chat request needs a non-empty model name")
    system, others = split_system(messages)
    encoded: list[dict[str, Any]] = []
    if system is not None:
        encoded.append({"role": "system", "content": system})
    pictures: list[dict[str, Any]] = []  # the images of the current run of tool messages
    for message in others:
        if pictures and message.role is not Role.TOOL:
            encoded.append({"role": "user", "content": pictures})
            pictures = []
        encoded.append(_encode_message(message))
        if message.role is Role.TOOL and message.images:
            label = TOOL_IMAGES_LABEL.format(name=message.name, call_id=message.tool_call_id)
            pictures.append({"type": "text", "text": label})
            pictures.extend(_image_parts(message.images))
    if pictures:
        encoded.append({"role": "user", "content": pictures})
    body: dict[str, Any] = {"model": model, "messages": encoded}
    if tools:
        body["tools"] = [_encode_tool(tool) for tool in tools]
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if options is not None:
        _encode_options(body, options, max_tokens_key)
    return body


def _encode_message(message: Message) -> dict[str, Any]:
    role = message.role
    if role is Role.USER:
        if not message.images:
            return {"role": "user", "content": message.content}
        parts: list[dict[str, Any]] = []
        if message.content:
            parts.append({"type": "text", "text": message.content})
        parts.extend(_image_parts(message.images))
        return {"role": "user", "content": parts}
    if role is Role.ASSISTANT:
        # Never null: the API allows ``null`` with tool calls, but llama.cpp-based servers answer
        # 500 to it, and every server takes "".
        encoded: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.calls:
            encoded["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": dumps(call.arguments)},
                }
                for call in message.calls
            ]
        return encoded
    assert role is Role.TOOL, "system messages are merged by split_system"
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}


def _image_parts(images: Sequence[str]) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": data_url(image)}} for image in images]


def _encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters
    return {"type": "function", "function": function}


def _encode_options(
    body: dict[str, Any], options: ProviderOptions, max_tokens_key: MaxTokensKey
) -> None:
    written = Written("OpenAI chat", body)
    put = written.put
    if options.max_tokens is not None:
        put(max_tokens_key, options.max_tokens, "max_tokens", *MAX_TOKENS_KEYS)
    if options.temperature is not None:
        put("temperature", options.temperature, "temperature")
    if options.top_p is not None:
        put("top_p", options.top_p, "top_p")
    if options.stop:
        put("stop", list(options.stop), "stop")
    if options.seed is not None:
        put("seed", options.seed, "seed")
    if options.presence_penalty is not None:
        put("presence_penalty", options.presence_penalty, "presence_penalty")
    if options.frequency_penalty is not None:
        put("frequency_penalty", options.frequency_penalty, "frequency_penalty")
    if options.reasoning_effort is not None:
        put("reasoning_effort", options.reasoning_effort, "reasoning_effort")
    elif options.think:
        put("reasoning_effort", THINK_EFFORT, "think")
    if options.parallel_tool_calls is not None and "tools" in body:
        put("parallel_tool_calls", options.parallel_tool_calls, "parallel_tool_calls")
    choice = options.tool_choice
    if choice is not None:
        if choice in ("auto", "none", "required"):
            put("tool_choice", choice, "tool_choice")
        else:
            put("tool_choice", {"type": "function", "function": {"name": choice}}, "tool_choice")
    if options.schema is not None:
        put(
            "response_format",
            {"type": "json_schema", "json_schema": {"name": "output", "schema": options.schema}},
            "schema",
        )
    automatic_cache(options, written, key="prompt_cache_key", retention="prompt_cache_retention")
    for key, value in options.extra.items():
        written.refuse(key, RESERVED_KEYS)
        body[key] = value
