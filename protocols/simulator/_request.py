"""The simulator's view of a request: each vendor's request body read into one
:class:`~protocols.simulator._types.SimRequest` (the types are in :mod:`._types`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import attrs

from .._json import loads
from ..errors import ProtocolError, ValidationError
from ..settings import REASONING_EFFORTS, ModelSettings
from ..wire.openai_chat import TOOL_IMAGES_LABEL
from ._cache import anthropic_prefixes, chat_prefixes, responses_prefixes
from ._gemini import parse_gemini
from ._types import SimCall, SimRequest, SimTurn, Vendor

#: How the text parts of the user message carrying tool images begin (OpenAI chat completions).
_TOOL_IMAGES_PREFIX = TOOL_IMAGES_LABEL.split("{", 1)[0]


# ---------------------------------------------------------------------------------------------
# Reading requests


def parse_request(vendor: Vendor, body: bytes | str) -> SimRequest:
    """Read a request body of ``vendor``'s format.

    Guarantees: the body is parsed as strict JSON; a body that is not an object, lacks a non-empty
    ``model`` or a ``messages`` list (for the Responses API: an ``input`` string or list), or has
    a field of the wrong type raises
    :class:`~protocols.errors.ValidationError` naming the field (the server answers it with a 400).
    Content the policy does not read (images, unknown block types) is ignored, as a text-only
    model would -- and so is the ``user`` message an OpenAI chat request carries tool messages'
    images in after them (its text parts all lead with
    :data:`~protocols.wire.openai_chat.TOOL_IMAGES_LABEL`): the tools' results are still what
    the model was last given.
    """
    try:
        data = loads(body)
    except ProtocolError as error:
        raise ValidationError(f"the request body is not valid JSON: {error.message}") from None
    if not isinstance(data, dict):
        raise ValidationError("the request body must be a JSON object")
    if vendor == "gemini":  # the model is in the path, not the body
        return parse_gemini(data)
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise ValidationError("'model' must be a non-empty string")
    if vendor == "openai-responses":
        return _parse_responses(data, model)
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise ValidationError("'messages' must be a list")
    if vendor == "openai":
        return _parse_openai(data, model, messages)
    if vendor == "anthropic":
        return _parse_anthropic(data, model, messages)
    return _parse_ollama(data, model, messages)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"{where} must be an object")
    return value


def _optional_int(data: Mapping[str, Any], key: str, where: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{where}{key} must be an integer >= 1")
    return value


def _optional_object(data: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise ValidationError(f"'{key}' must be an object")
    return value


def _stream_flag(data: Mapping[str, Any], *, default: bool) -> bool:
    value = data.get("stream", default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError("'stream' must be true or false")
    return value


def _first_cap(*caps: int | None) -> int | None:
    return next((cap for cap in caps if cap is not None), None)


#: Body keys each format reads that are not settings (the rest, unknown, is ``extra``).
_STRUCTURAL: Final[Mapping[Vendor, frozenset[str]]] = {
    "openai": frozenset(
        {"model", "messages", "tools", "tool_choice", "stream", "stream_options", "response_format"}
    ),
    "openai-responses": frozenset(
        {"model", "input", "instructions", "tools", "tool_choice", "stream", "store", "include"}
        | {"text"}
    ),
    "anthropic": frozenset({"model", "messages", "system", "tools", "tool_choice", "stream"}),
    "ollama": frozenset({"model", "messages", "tools", "stream", "format"}),
}


def _settings(
    vendor: Vendor,
    data: Mapping[str, Any],
    names: Mapping[str, str],
    *,
    consumed: Iterable[str] = (),
    extra: Mapping[str, Any] | None = None,
    **read: Any,
) -> ModelSettings:
    """The settings ``data`` gives under the vendor's ``names`` (wire key -> field), with the
    fields in ``read`` (read otherwise; ``None``: not given) and, as ``extra``, ``extra`` and
    every key neither known to the format nor ``consumed`` by the caller."""
    fields: dict[str, Any] = {}
    unknown: dict[str, Any] = dict(extra or {})
    skip = _STRUCTURAL[vendor].union(consumed)
    for key, value in data.items():
        name = names.get(key)
        if name is None:
            if key not in skip:
                unknown[key] = value
        elif name == "reasoning_effort" and value not in REASONING_EFFORTS:
            unknown[key] = value  # "minimal", "none": the vendor's own levels
        elif value is not None:
            fields[name] = [value] if name == "stop" and isinstance(value, str) else value
    fields.update({name: value for name, value in read.items() if value is not None})
    if unknown:
        fields["extra"] = unknown
    try:
        return ModelSettings(**fields)
    except ValidationError as error:
        raise ValidationError(f"invalid settings: {error.message}") from None


_OPENAI_SETTINGS: Final = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "stop": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "reasoning_effort": "reasoning_effort",
    "parallel_tool_calls": "parallel_tool_calls",
    "prompt_cache_key": "cache_key",
    "prompt_cache_retention": "cache_retention",
}
_RESPONSES_SETTINGS: Final = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_output_tokens": "max_tokens",
    "parallel_tool_calls": "parallel_tool_calls",
    "prompt_cache_key": "cache_key",
    "prompt_cache_retention": "cache_retention",
}
_ANTHROPIC_SETTINGS: Final = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "stop_sequences": "stop",
}
_OLLAMA_SETTINGS: Final = {
    "num_predict": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "stop": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


def _role(value: Any, where: str) -> Literal["system", "user", "assistant", "tool"]:
    if value == "developer":
        return "system"
    if value in ("system", "user", "assistant", "tool"):
        return value  # type: ignore[no-any-return]
    raise ValidationError(f"{where}.role must be system, user, assistant or tool, not {value!r}")


def _text_of(content: Any, where: str) -> str:
    """Text of a string or a list of parts/blocks (text parts joined; others ignored)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, item in enumerate(content):
            part = _object(item, f"{where}[{index}]")
            if part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise ValidationError(f"{where}[{index}].text must be a string")
                texts.append(text)
            elif part.get("type") == "tool_result":
                texts.append(_text_of(part.get("content"), f"{where}[{index}].content"))
        return "".join(texts)
    raise ValidationError(f"{where} must be a string or a list of parts")


def _arguments(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = loads(value) if value else {}
        except ProtocolError:
            raise ValidationError(f"{where} is not valid JSON") from None
    if not isinstance(value, dict):
        raise ValidationError(f"{where} must be a JSON object")
    return value


def _tool_names(tools: Any, nested: bool, schema_key: str = "parameters") -> tuple[str, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise ValidationError("'tools' must be a list")
    names = []
    for index, item in enumerate(tools):
        tool = _object(item, f"tools[{index}]")
        holder = _object(tool.get("function"), f"tools[{index}].function") if nested else tool
        name = holder.get("name")
        if not isinstance(name, str) or not name:
            raise ValidationError(f"tools[{index}] has no name")
        _check_tool_schema(holder.get(schema_key), f"tools[{index}].{schema_key}")
        names.append(name)
    return tuple(names)


def _check_tool_schema(schema: Any, where: str) -> None:
    """What OpenAI's and Anthropic's APIs refuse in a tool's schema, refused alike: a root that
    is not ``"type": "object"``, or one with ``anyOf``/``oneOf``/``allOf`` beside it."""
    if schema is None:
        return
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValidationError(f"{where}: the schema must have type 'object' at the top level")
    combined = [keyword for keyword in ("anyOf", "oneOf", "allOf") if keyword in schema]
    if combined:
        raise ValidationError(f"{where}: {'/'.join(combined)} is not allowed at the top level")


def _chat_turns(messages: list[Any]) -> tuple[SimTurn, ...]:
    """Messages of the OpenAI and Ollama formats (both: role, content, tool_calls.function)."""
    turns: list[SimTurn] = []
    for index, item in enumerate(messages):
        where = f"messages[{index}]"
        message = _object(item, where)
        raw_calls = message.get("tool_calls")
        if raw_calls is not None and not isinstance(raw_calls, list):
            raise ValidationError(f"{where}.tool_calls must be a list")
        calls = []
        for number, call in enumerate(raw_calls or ()):
            call_where = f"{where}.tool_calls[{number}]"
            function = _object(_object(call, call_where).get("function"), f"{call_where}.function")
            name = str(function.get("name", ""))
            calls.append(SimCall(name, _arguments(function.get("arguments"), call_where)))
        role = _role(message.get("role"), where)
        if role == "user" and turns and turns[-1].role == "tool" and _tool_images(message):
            continue
        turns.append(
            SimTurn(role, _text_of(message.get("content"), f"{where}.content"), tuple(calls))
        )
    return tuple(turns)


def _tool_images(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is the one carrying tool messages' images (OpenAI chat)."""
    content = message.get("content")
    if not isinstance(content, list) or not all(isinstance(part, dict) for part in content):
        return False
    texts = [part.get("text") for part in content if part.get("type") == "text"]
    return bool(texts) and all(
        isinstance(text, str) and text.startswith(_TOOL_IMAGES_PREFIX) for text in texts
    )


def _parse_openai(data: dict[str, Any], model: str, messages: list[Any]) -> SimRequest:
    choice = data.get("tool_choice")
    if isinstance(choice, dict):
        choice = _object(choice.get("function"), "tool_choice.function").get("name")
    if choice == "auto":
        choice = None
    if choice is not None and not isinstance(choice, str):
        raise ValidationError("'tool_choice' must be a string or a function choice")
    effort = data.get("reasoning_effort")
    template = _optional_object(data, "chat_template_kwargs")
    think = (isinstance(effort, str) and effort not in ("none", "minimal")) or (
        isinstance(template, dict) and template.get("enable_thinking") is True
    )
    options = _optional_object(data, "stream_options")
    stream = _stream_flag(data, default=False)
    return SimRequest(
        vendor="openai",
        model=model,
        turns=_chat_turns(messages),
        tools=_tool_names(data.get("tools"), nested=True),
        stream=stream,
        think=think,
        include_usage=stream and isinstance(options, dict) and options.get("include_usage") is True,
        tool_choice=choice,
        max_tokens=_first_cap(
            _optional_int(data, "max_completion_tokens", ""), _optional_int(data, "max_tokens", "")
        ),
        settings=_settings("openai", data, _OPENAI_SETTINGS),
        prefixes=chat_prefixes(data),
    )


def _parse_anthropic(data: dict[str, Any], model: str, messages: list[Any]) -> SimRequest:
    turns = []
    system = _text_of(data.get("system"), "system")
    if system:
        turns.append(SimTurn("system", system))
    for index, item in enumerate(messages):
        where = f"messages[{index}]"
        message = _object(item, where)
        role = _role(message.get("role"), where)
        content = message.get("content")
        if role == "user" and isinstance(content, list):
            # Tool results come first in a user turn; each becomes a tool turn of its own.
            results = [
                SimTurn("tool", _text_of(block.get("content"), f"{where}.content"))
                for block in content
                if isinstance(block, dict) and block.get("type") == "tool_result"
            ]
            turns.extend(results)
            rest = [
                block
                for block in content
                if not (isinstance(block, dict) and block.get("type") == "tool_result")
            ]
            if rest or not results:
                turns.append(SimTurn("user", _text_of(rest, f"{where}.content")))
            continue
        calls = []
        if isinstance(content, list):
            for number, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    calls.append(
                        SimCall(
                            str(block.get("name", "")),
                            _arguments(block.get("input"), f"{where}.content[{number}].input"),
                        )
                    )
        turns.append(SimTurn(role, _text_of(content, f"{where}.content"), tuple(calls)))
    choice_value = data.get("tool_choice")
    choice: str | None = None
    if choice_value is not None:
        choice_object = _object(choice_value, "tool_choice")
        kind = choice_object.get("type")
        choice = {"auto": None, "any": "required", "none": "none"}.get(str(kind))
        if kind == "tool":
            choice = str(choice_object.get("name", ""))
    cap = _optional_int(data, "max_tokens", "")
    thinking = data.get("thinking")
    enabled = isinstance(thinking, dict) and thinking.get("type") == "enabled"
    budget = thinking.get("budget_tokens") if enabled else None  # type: ignore[union-attr]
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise ValidationError("thinking.budget_tokens must be an integer")
    parallel = (
        False
        if isinstance(choice_value, dict) and choice_value.get("disable_parallel_tool_use") is True
        else None
    )
    settings = _settings(
        "anthropic",
        data,
        _ANTHROPIC_SETTINGS,
        consumed=("thinking",) if enabled else (),
        parallel_tool_calls=parallel,
    )
    return SimRequest(
        vendor="anthropic",
        model=model,
        turns=tuple(turns),
        tools=_tool_names(data.get("tools"), nested=False, schema_key="input_schema"),
        stream=_stream_flag(data, default=False),
        think=enabled,
        include_usage=True,
        tool_choice=choice,
        max_tokens=cap,
        settings=settings,
        thinking_budget=budget,
        prefixes=anthropic_prefixes(data),
    )


def _known_think(value: Any) -> bool:
    """Whether an Ollama ``think`` is one the simulator reads (absent, a flag or a level)."""
    return value is None or isinstance(value, bool) or value in REASONING_EFFORTS


def _parse_ollama(data: dict[str, Any], model: str, messages: list[Any]) -> SimRequest:
    options = _optional_object(data, "options")
    cap = _optional_int(options, "num_predict", "options.") if options is not None else None
    think = data.get("think")
    sampling = _settings("ollama", options or {}, _OLLAMA_SETTINGS)
    other = sampling.extra  # options no setting names
    settings = _settings(
        "ollama",
        data,
        {},
        consumed=("options", "think") if _known_think(think) else ("options",),
        extra={"options": other} if other else None,
        reasoning_effort=think if think in REASONING_EFFORTS else None,
        **{k: v for k, v in sampling.fields().items() if k != "extra"},
    )
    return SimRequest(
        vendor="ollama",
        model=model,
        turns=_chat_turns(messages),
        tools=_tool_names(data.get("tools"), nested=True),
        stream=_stream_flag(data, default=True),  # Ollama streams unless told not to
        think=think is True or think in REASONING_EFFORTS,
        include_usage=True,
        tool_choice=None,
        max_tokens=cap,
        settings=settings,
    )


def _responses_text(content: Any, where: str) -> str:
    """Text of a Responses message's content: a string, or its text parts joined."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ValidationError(f"{where} must be a string or a list of parts")
    texts = []
    for index, item in enumerate(content):
        part = _object(item, f"{where}[{index}]")
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise ValidationError(f"{where}[{index}].text must be a string")
            texts.append(text)
    return "".join(texts)


def _parse_responses(data: dict[str, Any], model: str) -> SimRequest:
    turns: list[SimTurn] = []
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ValidationError("'instructions' must be a string")
    if instructions:
        turns.append(SimTurn("system", instructions))
    items = data.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list):
        raise ValidationError("'input' must be a string or a list of items")
    for index, raw in enumerate(items):
        where = f"input[{index}]"
        item = _object(raw, where)
        kind = item.get("type", "message")
        if kind == "message":
            role = _role(item.get("role"), where)
            turns.append(SimTurn(role, _responses_text(item.get("content"), f"{where}.content")))
        elif kind == "function_call":
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise ValidationError(f"{where}.name must be a non-empty string")
            if not isinstance(item.get("call_id"), str):
                raise ValidationError(f"{where}.call_id must be a string")
            call = SimCall(name, _arguments(item.get("arguments"), f"{where}.arguments"))
            if turns and turns[-1].role == "assistant":
                last = turns[-1]
                turns[-1] = attrs.evolve(last, calls=(*last.calls, call))
            else:
                turns.append(SimTurn("assistant", "", (call,)))
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise ValidationError(f"{where}.call_id must be a string")
            turns.append(SimTurn("tool", _responses_text(item.get("output"), f"{where}.output")))
        # reasoning items and other item types carry nothing the policy reads
    tools = data.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValidationError("'tools' must be a list")
    functions = [
        tool for tool in tools or () if isinstance(tool, dict) and tool.get("type") == "function"
    ]
    choice = data.get("tool_choice")
    if isinstance(choice, dict):
        choice = choice.get("name")
    if choice == "auto":
        choice = None
    if choice is not None and not isinstance(choice, str):
        raise ValidationError("'tool_choice' must be a string or a function choice")
    reasoning = _optional_object(data, "reasoning")
    cap = _optional_int(data, "max_output_tokens", "")
    effort = reasoning.get("effort") if reasoning is not None else None
    named = effort in REASONING_EFFORTS and set(reasoning or ()) <= {"effort", "summary"}
    settings = _settings(
        "openai-responses",
        data,
        _RESPONSES_SETTINGS,
        consumed=("reasoning",) if named or reasoning is None else (),
        reasoning_effort=effort if named else None,
    )
    return SimRequest(
        vendor="openai-responses",
        model=model,
        turns=tuple(turns),
        tools=_tool_names(functions, nested=False),
        stream=_stream_flag(data, default=False),
        think=reasoning is not None and reasoning.get("effort") not in ("none", "minimal"),
        include_usage=True,
        tool_choice=choice,
        max_tokens=cap,
        settings=settings,
        prefixes=responses_prefixes(data),
    )
