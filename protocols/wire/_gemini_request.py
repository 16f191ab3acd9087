"""The Gemini API request body, sans-IO: :func:`model_path` (the model in the URL) and
:func:`encode_request` (contents, function declarations, generation and tool config) with the
constants they write with; see :mod:`protocols.wire.gemini`, which re-exports the public ones."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..errors import ConfigError
from ..messages import Message, ProviderOptions, Role, ToolDefinition
from ..settings import ReasoningEffort
from ._common import Written, automatic_cache, image_media_type, split_system

#: The key of this adapter's data in ``continuation``.
NAMESPACE: Final = "gemini"
#: The most stop sequences Gemini takes.
MAX_STOP: Final = 5
#: ``thinkingConfig.thinkingBudget`` (tokens) sent for each reasoning effort: the budgets
#: Google's own OpenAI-compatible endpoint maps ``reasoning_effort`` to.
THINKING_BUDGETS: Final[Mapping[ReasoningEffort, int]] = {
    "low": 1024,
    "medium": 8192,
    "high": 24576,
}

#: Gemini's seed is a 32-bit signed integer.
_SEED_RANGE: Final = (-(2**31), 2**31 - 1)
#: Top-level body keys the encoder owns: ``extra`` may not set them.
_OWNED_KEYS: Final = ("contents", "systemInstruction", "tools", "model")
#: A model name: letters, digits and ``-._@`` in one or two path segments.
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*(?:/[A-Za-z0-9][A-Za-z0-9._@-]*)?")


def model_path(model: str) -> str:
    """The resource path of ``model`` in a URL: ``"gemini-2.5-flash"`` is
    ``"models/gemini-2.5-flash"``; a name that already has its collection
    (``"models/..."``, ``"tunedModels/..."``) is kept. Raises
    :class:`~protocols.errors.ConfigError` for a name that is not letters, digits and ``-._@``
    (in at most two segments): a model name never changes the path it is put in."""
    if not isinstance(model, str) or not _MODEL.fullmatch(model):
        raise ConfigError(
            f"a Gemini model name is letters, digits and -._@ (optionally after 'models/'), "
            f"not {model[:80]!r}"
            if isinstance(model, str)
            else "the Gemini model name must be a string"
        )
    path = model if "/" in model else f"models/{model}"
    return urllib.parse.quote(path, safe="/@")


# ---------------------------------------------------------------------------------------------
# Request


def encode_request(
    messages: Iterable[Message],
    *,
    model: str = "",
    tools: Iterable[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
) -> dict[str, Any]:
    """The JSON body of a ``generateContent`` request (the same for ``streamGenerateContent``:
    streaming is chosen by the path, so ``stream`` changes nothing in the body; ``model`` goes
    in the path too and is only checked here, when given).

    Messages:

    * Every system message (wherever it stands), in order and joined by a blank line, becomes
      ``systemInstruction`` (the rule every encoder applies; see ``docs/context.md``); empty
      ones are left out, and so is ``systemInstruction`` when nothing remains.
    * A user message becomes a ``user`` content: a text part unless the content is empty, then
      one ``inlineData`` part per image (a ``data:`` URL gives its declared type and payload, a
      bare payload is sniffed).
    * A tool message becomes a ``functionResponse`` part -- ``name`` (the message's ``name``,
      else the name of the call it answers), ``response: {"result": <its text>}``, and ``id``
      when Gemini gave the call one -- in a ``user`` content, followed by its images as
      ``inlineData`` parts. Consecutive messages that become ``user`` contents are merged into
      one, so parallel calls' results travel together as Gemini wants them.
    * An assistant message becomes a ``model`` content: its text, then one ``functionCall``
      part per call (``name``, ``args``, and ``id`` when Gemini gave it). The thought
      signatures the reader stored in ``continuation["gemini"]["parts"]`` go back on the parts
      they came on: a signed text part is the same span of the content, with its signature
      (an empty span too: Gemini sends a signature alone on an empty text part); a signed
      thought part is sent back as it came; a call's signature goes on that call's part.
      ``Message.thinking`` is never sent otherwise.
    * A message that gives no part at all is skipped: Gemini refuses empty contents.

    Options (``None``: not sent), in ``generationConfig``: ``max_tokens`` ->
    ``maxOutputTokens``; ``temperature``; ``top_p`` -> ``topP``; ``stop`` ->
    ``stopSequences`` (at most :data:`MAX_STOP`, else ``ConfigError``); ``seed`` (a 32-bit
    integer, else ``ConfigError``); ``presence_penalty`` -> ``presencePenalty``;
    ``frequency_penalty`` -> ``frequencyPenalty``; ``reasoning_effort`` ->
    ``thinkingConfig: {"thinkingBudget": THINKING_BUDGETS[effort], "includeThoughts": true}``,
    ``think=True`` alone -> ``{"includeThoughts": true}`` (the model's own budget),
    ``think=False`` -> ``{"thinkingBudget": 0}`` (a model that cannot stop thinking refuses
    it); ``schema`` -> ``responseMimeType: "application/json"`` with ``responseJsonSchema``.
    At the top level: ``tool_choice`` -> ``toolConfig.functionCallingConfig`` (``auto`` ->
    ``AUTO``, ``none`` -> ``NONE``, ``required`` -> ``ANY``, a tool's name -> ``ANY`` with
    ``allowedFunctionNames``; sent only with tools, as for Anthropic);
    ``parallel_tool_calls=False`` with tools raises ``ConfigError`` (Gemini has no way to keep
    calls apart), ``True`` is what it does and sends nothing. Prompt caching: Gemini caches
    repeated prefixes by itself -- ``cache="auto"`` sends nothing; ``cache="off"``,
    ``cache_breakpoints``, ``cache_key`` and ``cache_retention`` raise ``ConfigError``.

    ``extra`` is merged last: its ``generationConfig`` (an object) key by key into the one
    built here, every other key at the top level. It may not set ``contents``,
    ``systemInstruction`` or ``tools``, nor a key written from an option -- top level or in
    ``generationConfig`` (``ConfigError`` naming the key and the option).

    Tools become one ``{"functionDeclarations": [...]}`` entry: ``name``, ``description``
    unless empty, and ``parametersJsonSchema`` -- the tool's JSON Schema as it is (Gemini's
    other field, ``parameters``, takes an OpenAPI subset that would have to be translated,
    losing ``$ref``, ``$defs``, ``additionalProperties`` and more; ``parametersJsonSchema``
    takes JSON Schema itself, so nothing is translated and nothing is lost).
    """
    del stream  # the path says whether the answer streams
    if model:
        model_path(model)
    opts = options if options is not None else ProviderOptions()
    tool_list = list(tools)
    message_list = list(messages)
    names = _call_names(message_list)
    system, conversation = split_system(message_list)
    contents: list[dict[str, Any]] = []
    for message in conversation:
        if message.role is Role.ASSISTANT:
            parts = _model_parts(message)
            role = "model"
        elif message.role is Role.TOOL:
            parts = [_function_response(message, names)]
            parts.extend(_inline(image) for image in message.images)
            role = "user"
        else:
            parts = [{"text": message.content}] if message.content else []
            parts.extend(_inline(image) for image in message.images)
            role = "user"
        if not parts:
            continue
        if contents and contents[-1]["role"] == role == "user":
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    body: dict[str, Any] = {"contents": contents}
    written = Written("Gemini", body)
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if tool_list:
        body["tools"] = [{"functionDeclarations": [_declaration(tool) for tool in tool_list]}]
    choice = _tool_config(opts.tool_choice, tool_list)
    if choice is not None:
        written.put("toolConfig", choice, "tool_choice")
    # Gemini caches repeated prefixes by itself (its usage reports cachedContentTokenCount);
    # explicit cached contents are a separate API, not a request field.
    automatic_cache(opts, written)
    if opts.parallel_tool_calls is False and tool_list:
        raise ConfigError(
            "Gemini cannot honour parallel_tool_calls=False: it has no way to keep a reply to "
            "one call (leave it unset)"
        )
    config: dict[str, Any] = {}
    generation = Written("Gemini", config)
    _generation_config(opts, generation)
    extra_config: Any = opts.extra.get("generationConfig")
    if extra_config is not None:
        if not isinstance(extra_config, dict):
            raise ConfigError("extra's generationConfig must be a JSON object")
        for key, value in extra_config.items():
            generation.refuse(key, ())
            config[key] = value
    if config:
        body["generationConfig"] = config
    for key, value in opts.extra.items():
        if key == "generationConfig":
            continue
        written.refuse(key, _OWNED_KEYS)
        body[key] = value
    return body


def _generation_config(opts: ProviderOptions, generation: Written) -> None:
    put = generation.put
    if opts.max_tokens is not None:
        put("maxOutputTokens", opts.max_tokens, "max_tokens")
    if opts.temperature is not None:
        put("temperature", opts.temperature, "temperature")
    if opts.top_p is not None:
        put("topP", opts.top_p, "top_p")
    if opts.stop:
        if len(opts.stop) > MAX_STOP:
            raise ConfigError(
                f"Gemini takes at most {MAX_STOP} stop sequences, not {len(opts.stop)}"
            )
        put("stopSequences", list(opts.stop), "stop")
    if opts.seed is not None:
        low, high = _SEED_RANGE
        if not low <= opts.seed <= high:
            raise ConfigError(f"Gemini's seed is a 32-bit integer, not {opts.seed}")
        put("seed", opts.seed, "seed")
    if opts.presence_penalty is not None:
        put("presencePenalty", opts.presence_penalty, "presence_penalty")
    if opts.frequency_penalty is not None:
        put("frequencyPenalty", opts.frequency_penalty, "frequency_penalty")
    effort = opts.reasoning_effort
    if effort is not None:
        thinking = {"thinkingBudget": THINKING_BUDGETS[effort], "includeThoughts": True}
        put("thinkingConfig", thinking, "reasoning_effort")
    elif opts.think is True:
        put("thinkingConfig", {"includeThoughts": True}, "think")
    elif opts.think is False:
        put("thinkingConfig", {"thinkingBudget": 0}, "think")
    if opts.schema is not None:
        put("responseMimeType", "application/json", "schema")
        put("responseJsonSchema", opts.schema, "schema")


def _call_names(messages: Sequence[Message]) -> dict[str, tuple[str, bool]]:
    """Every call of the assistant messages: id -> (name, whether Gemini gave the id)."""
    names: dict[str, tuple[str, bool]] = {}
    for message in messages:
        if message.role is Role.ASSISTANT and message.calls:
            given = _given_ids(message)
            for call in message.calls:
                names[call.id] = (call.name, call.id in given)
    return names


def _stored_parts(continuation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The part records the reader stored (others' data ignored); ConfigError when ours are
    not what the reader writes."""
    ours = continuation.get(NAMESPACE)
    if ours is None:
        return []
    stored = ours.get("parts") if isinstance(ours, Mapping) else None
    if not isinstance(stored, list) or not all(isinstance(part, dict) for part in stored):
        raise ConfigError(
            'continuation["gemini"]["parts"] must be a list of JSON objects (as written by the '
            "Gemini reader)"
        )
    return stored


def _given_ids(message: Message) -> set[str]:
    return {
        part["id"]
        for part in _stored_parts(message.continuation)
        if isinstance(part.get("id"), str) and "call" in part
    }


def _model_parts(message: Message) -> list[dict[str, Any]]:
    stored = _stored_parts(message.continuation)
    content = message.content
    parts: list[dict[str, Any]] = []
    cursor = 0
    for record in stored:
        signature = record.get("thoughtSignature")
        if "span" in record and isinstance(signature, str):
            span = record["span"]
            if not (
                isinstance(span, list)
                and len(span) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) for n in span)
            ):
                raise ConfigError('a Gemini text part\'s "span" must be [start, end]')
            start = min(max(span[0], cursor), len(content))
            end = min(max(span[1], start), len(content))
            if start > cursor:
                parts.append({"text": content[cursor:start]})
            parts.append({"text": content[start:end], "thoughtSignature": signature})
            cursor = end
        elif "thought" in record and isinstance(signature, str):
            text = record["thought"] if isinstance(record["thought"], str) else ""
            parts.append({"text": text, "thought": True, "thoughtSignature": signature})
    if cursor < len(content):
        parts.append({"text": content[cursor:]})
    calls = {
        record["call"]: record
        for record in stored
        if isinstance(record.get("call"), int) and not isinstance(record.get("call"), bool)
    }
    for index, call in enumerate(message.calls):
        function: dict[str, Any] = {"name": call.name, "args": call.arguments}
        record = calls.get(index, {})
        if record.get("id") == call.id:
            function["id"] = call.id
        part: dict[str, Any] = {"functionCall": function}
        signature = record.get("thoughtSignature")
        if isinstance(signature, str):
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _function_response(message: Message, names: Mapping[str, tuple[str, bool]]) -> dict[str, Any]:
    call_id = message.tool_call_id or ""
    known = names.get(call_id)
    name = message.name or (known[0] if known else None)
    if not name:
        raise ConfigError(
            f"Gemini needs the name of the function a tool message answers: tool message "
            f"{call_id!r} has no name and answers no call of the history"
        )
    response: dict[str, Any] = {"name": name, "response": {"result": message.content}}
    if known is not None and known[1]:
        response["id"] = call_id
    return {"functionResponse": response}


def _inline(image: str) -> dict[str, Any]:
    media_type = image_media_type(image)
    data = image.split(",", 1)[1] if image.startswith("data:") and "," in image else image
    return {"inlineData": {"mimeType": media_type, "data": data}}


def _declaration(tool: ToolDefinition) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": tool.name}
    if tool.description:
        declaration["description"] = tool.description
    declaration["parametersJsonSchema"] = tool.parameters
    return declaration


def _tool_config(choice: str | None, tools: list[ToolDefinition]) -> dict[str, Any] | None:
    if choice is None:
        return None
    if not tools:
        if choice in ("auto", "none"):
            return None  # nothing to choose from: the same as not sending it
        raise ConfigError(f"tool_choice={choice!r} needs tools, and the request has none")
    if choice in ("auto", "none", "required"):
        mode = {"auto": "AUTO", "none": "NONE", "required": "ANY"}[choice]
        return {"functionCallingConfig": {"mode": mode}}
    if all(tool.name != choice for tool in tools):
        raise ConfigError(f"tool_choice names {choice!r}, which is not one of the request's tools")
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [choice]}}
