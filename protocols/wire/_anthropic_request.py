"""The Anthropic Messages API request body, sans-IO: :func:`encode_request` (with its cache
breakpoints, thinking budget, turns and tool blocks) and the constants it writes with; see
:mod:`protocols.wire.anthropic`, which re-exports the public ones."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigError
from ..messages import Message, ProviderOptions, Role, ToolDefinition
from ..settings import CACHE_SYSTEM, CACHE_TOOLS, ReasoningEffort
from ._common import Written, image_media_type, split_system

#: ``max_tokens`` when the options leave it unset (Anthropic requires the field).
DEFAULT_MAX_TOKENS = 4096

#: The smallest thinking budget Anthropic accepts (tokens).
_MIN_THINKING_BUDGET = 1024


#: Request-body keys the encoder owns: ``ProviderOptions.extra`` may not set them.
_OWNED_KEYS = ("model", "messages", "system", "tools", "stream")
#: The settings Anthropic has no field for: refused, never dropped.
_NO_SUCH_FIELD = ("seed", "presence_penalty", "frequency_penalty")
#: Quarters of ``max_tokens`` the thinking budget is at each reasoning effort.
_EFFORT_SHARE: dict[str, int] = {"low": 1, "medium": 2, "high": 3}
#: The namespace of this adapter's data in ``continuation``.
_NAMESPACE = "anthropic"
#: Block types a cache breakpoint may not be put on (Anthropic refuses ``cache_control`` there).
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


# ---------------------------------------------------------------------------------------------
# Request


def encode_request(
    messages: Iterable[Message],
    *,
    model: str,
    tools: Iterable[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
) -> dict[str, Any]:
    """The JSON body of a Messages API request.

    Messages:

    * Every system message (wherever it stands) goes, in order and joined by a blank line, into
      the top-level ``"system"`` string (the rule every encoder applies; see
      ``docs/context.md``); empty ones are left out and so is ``"system"`` when nothing remains.
    * A user message becomes a ``user`` turn: its images first (base64 ``image`` blocks; a
      ``data:`` URL gives its declared media type and payload, a bare payload is sniffed), then a
      text block unless the content is empty -- Anthropic advises images before text.
    * A tool message becomes a ``tool_result`` block (``tool_use_id`` = its ``tool_call_id``)
      in a ``user`` turn. Its ``content`` is the message's text; with images, a list of a text
      block (unless the text is empty) then one ``image`` block per image, as for a user
      message.
    * An assistant message becomes an ``assistant`` turn of: the thinking and redacted thinking
      blocks stored in ``continuation["anthropic"]["thinking_blocks"]``, sent back exactly; a text
      block unless the content is empty; one ``tool_use`` block per call. ``Message.thinking`` is
      never sent (it is kept for audit; the signed blocks are what Anthropic wants back).
    * Anthropic wants user and assistant turns to alternate, so consecutive messages that map to
      ``user`` turns (tool results, and a user message after them) are merged into one turn, in
      which ``tool_result`` blocks come before every other block as Anthropic requires.
    * A message that produces no block at all (an empty user or assistant message) is skipped:
      Anthropic refuses empty turns.

    Options (``None`` means defaults): ``max_tokens`` (default :data:`DEFAULT_MAX_TOKENS`:
    Anthropic requires one); ``temperature`` (Anthropic allows 0 to 1, so a higher value raises
    :class:`~protocols.errors.ConfigError` rather than being silently clamped); ``top_p``;
    ``stop`` -> ``stop_sequences``; ``tool_choice`` -> ``{"type": "auto" | "any" | "none"}`` or
    ``{"type": "tool", "name": ...}`` (sent only with tools; ``"required"`` or a name without
    tools, or a name that is not one of the tools, raises ``ConfigError``);
    ``parallel_tool_calls=False`` (with tools) -> ``"disable_parallel_tool_use": true`` in the
    tool choice (``{"type": "auto"}`` when none is set), ``True`` is Anthropic's default and
    sends nothing; ``reasoning_effort`` -> ``"thinking": {"type": "enabled", "budget_tokens":
    thinking_budget(max_tokens, effort)}`` (a quarter, half or three quarters of
    ``max_tokens``, at least 1024), and ``think=True`` without one the same at ``"medium"``
    (``max(1024, max_tokens // 2)``); thinking needs ``max_tokens`` above 1024 (``ConfigError``
    otherwise); ``think=False`` or ``None`` sends nothing; ``seed``, ``presence_penalty``,
    ``frequency_penalty`` and ``schema`` raise ``ConfigError``: Anthropic has no such field
    (for structured output, define a tool whose ``input_schema`` is the schema, with
    ``tool_choice`` set to its name). ``extra`` is merged last; it may not set ``model``,
    ``messages``, ``system``, ``tools`` or ``stream``, nor a key written from an option --
    ``max_tokens`` is always one (``ConfigError`` naming the key).

    Prompt caching: Anthropic caches only the prefixes a request marks, with
    ``"cache_control": {"type": "ephemeral"}`` on a block (a tool definition, a system block, a
    message's content block), at most four per request. With ``cache`` unset or ``"auto"``
    and no ``cache_breakpoints``, the marks go on the stable prefix: the last tool definition,
    the system prompt (then sent as one text block, the only form that carries a mark), the
    last block of the turn before the last one -- the history up to the new turn, written to
    the cache -- and the last block of the turn three before the last, where the same
    conversation's previous request put its mark (read back even when more than Anthropic's
    20-block look-back lies between them). With ``cache_breakpoints``, the marks go exactly
    where it names instead (``"tools"``, ``"system"`` -- those, even if a message has that id
    -- or the last block of the last message with that id; a name with nothing to mark in this
    request marks nothing). ``cache="off"``
    marks nothing. Thinking blocks are never marked (a turn's last other block is). The marks
    change nothing else in the body, but that a marked system prompt is a list of one text
    block. ``cache_retention="in_memory"`` is Anthropic's only retention and sends nothing;
    ``"24h"`` and ``cache_key`` raise ``ConfigError`` (it keeps a prefix an hour at most, and
    has no key).

    ``stream=True`` adds ``"stream": true``. ``model`` must be a non-empty string.
    """
    if not isinstance(model, str) or not model:
        raise ConfigError("the Anthropic model name must be a non-empty string")
    opts = options if options is not None else ProviderOptions()
    tool_list = list(tools)

    system, conversation = split_system(messages)
    turns: list[_Turn] = []
    # A message id -> the last block a breakpoint may go on of the last message with that id
    # ("tools" and "system" name those, never a message: one name, one mark).
    named: dict[str, dict[str, Any]] = {}
    wanted = frozenset(opts.cache_breakpoints or ()) - {CACHE_TOOLS, CACHE_SYSTEM}
    if opts.cache == "off":
        wanted = frozenset()
    for message in conversation:
        role = message.role
        if role is Role.ASSISTANT:
            blocks = _assistant_blocks(message)
            if blocks:
                turns.append(_Turn("assistant", [], blocks))
                _remember(named, wanted, message, blocks)
            continue
        if role is Role.TOOL:
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": _result_content(message),
                }
            ]
            others: list[dict[str, Any]] = []
        else:
            results, others = [], _user_blocks(message)
            if not others:
                continue
        _remember(named, wanted, message, results or others)
        if turns and turns[-1].role == "user":
            turns[-1].results.extend(results)
            turns[-1].others.extend(others)
        else:
            turns.append(_Turn("user", results, others))

    for name in _NO_SUCH_FIELD:
        if getattr(opts, name) is not None:
            raise ConfigError(
                f"Anthropic has no {name}: leave it unset (refusing it beats dropping it)"
            )
    max_tokens = opts.max_tokens if opts.max_tokens is not None else DEFAULT_MAX_TOKENS
    body: dict[str, Any] = {"model": model}
    written = Written("Anthropic", body)
    put = written.put
    put("max_tokens", max_tokens, f"max_tokens ({DEFAULT_MAX_TOKENS} when unset)")
    body["messages"] = [turn.encode() for turn in turns]
    if system:
        body["system"] = system
    if tool_list:
        body["tools"] = [_tool(tool) for tool in tool_list]
    choice = _tool_choice(opts.tool_choice, tool_list)
    if opts.parallel_tool_calls is False and tool_list and choice != {"type": "none"}:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
        put("tool_choice", choice, "parallel_tool_calls")
    elif choice is not None:
        put("tool_choice", choice, "tool_choice")
    if opts.temperature is not None:
        if opts.temperature > 1:
            raise ConfigError(
                f"Anthropic accepts a temperature from 0 to 1, not {opts.temperature!r}"
            )
        put("temperature", opts.temperature, "temperature")
    if opts.top_p is not None:
        put("top_p", opts.top_p, "top_p")
    if opts.stop:
        put("stop_sequences", list(opts.stop), "stop")
    effort = opts.reasoning_effort
    if effort is not None or opts.think:
        if max_tokens <= _MIN_THINKING_BUDGET:
            raise ConfigError(
                f"thinking on Anthropic needs max_tokens above {_MIN_THINKING_BUDGET} (the "
                f"thinking budget is at least {_MIN_THINKING_BUDGET} tokens and must be less than "
                f"max_tokens), not {max_tokens}"
            )
        budget = thinking_budget(max_tokens, effort or "medium")
        source = "think" if effort is None else "reasoning_effort"
        put("thinking", {"type": "enabled", "budget_tokens": budget}, source)
    if opts.schema is not None:
        raise ConfigError(
            "Anthropic has no JSON-Schema answer mode: for structured output define a tool whose "
            "parameters are the schema and set tool_choice to its name, then read the call's "
            "arguments"
        )
    if stream:
        body["stream"] = True
    _place_breakpoints(body, opts, turns, named)
    for key, value in opts.extra.items():
        written.refuse(key, _OWNED_KEYS)
        body[key] = value
    return body


def _remember(
    named: dict[str, dict[str, Any]],
    wanted: frozenset[str],
    message: Message,
    blocks: list[dict[str, Any]],
) -> None:
    """Note the block a breakpoint naming ``message`` goes on, if one names it."""
    if message.id in wanted:
        block = _markable(blocks)
        if block is not None:
            named[message.id] = block


def _markable(blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last of ``blocks`` a breakpoint may go on (not a thinking block), or ``None``."""
    block: dict[str, Any]
    for block in reversed(blocks):
        kind: object = block.get("type")
        if kind not in _UNMARKABLE:
            return block
    return None


def _place_breakpoints(
    body: dict[str, Any],
    opts: ProviderOptions,
    turns: list[_Turn],
    named: dict[str, dict[str, Any]],
) -> None:
    """Put the request's cache breakpoints in ``body`` (see :func:`encode_request`): at most
    four, each on a block the encoder made itself (never on one shared with the inputs)."""
    if opts.cache_key is not None:
        raise ConfigError(
            "Anthropic has no cache_key (OpenAI's prompt_cache_key): leave it unset "
            "(refusing it beats dropping it)"
        )
    if opts.cache_retention == "24h":
        raise ConfigError(
            "Anthropic keeps a cached prefix an hour at most: cache_retention='24h' cannot be "
            "honoured (leave it unset, or 'in_memory')"
        )
    if opts.cache == "off":
        return
    marks: list[dict[str, Any]] = []
    by_hand = opts.cache_breakpoints
    if by_hand:
        tools, system = CACHE_TOOLS in by_hand, CACHE_SYSTEM in by_hand
        marks.extend(named[name] for name in by_hand if name in named)
    else:
        tools = system = True
        for back in (2, 4):  # the history up to the last turn; the previous request's mark
            if len(turns) >= back:
                block = _markable(turns[-back].results + turns[-back].others)
                if block is not None:
                    marks.append(block)
    if tools and body.get("tools"):
        marks.append(body["tools"][-1])
    text = body.get("system")
    if system and text:
        block = {"type": "text", "text": text}
        body["system"] = [block]
        marks.append(block)
    for block in marks:
        block["cache_control"] = {"type": "ephemeral"}


def thinking_budget(max_tokens: int, effort: ReasoningEffort) -> int:
    """The ``budget_tokens`` of thinking at ``effort`` for a reply of at most ``max_tokens``
    (above 1024): a quarter, half or three quarters of it for ``low``, ``medium`` and ``high``,
    and never under Anthropic's minimum of 1024 -- always less than ``max_tokens``."""
    return max(_MIN_THINKING_BUDGET, max_tokens * _EFFORT_SHARE[effort] // 4)


class _Turn:
    """A turn being built; ``tool_result`` blocks are kept apart so they can come first."""

    __slots__ = ("others", "results", "role")

    def __init__(
        self, role: str, results: list[dict[str, Any]], others: list[dict[str, Any]]
    ) -> None:
        self.role = role
        self.results = results
        self.others = others

    def encode(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.results + self.others}


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = [_image(image) for image in message.images]
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    return blocks


def _result_content(message: Message) -> str | list[dict[str, Any]]:
    if not message.images:
        return message.content
    blocks = [{"type": "text", "text": message.content}] if message.content else []
    blocks.extend(_image(image) for image in message.images)
    return blocks


def _image(image: str) -> dict[str, Any]:
    media_type = image_media_type(image)
    data = image.split(",", 1)[1] if image.startswith("data:") and "," in image else image
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = _thinking_blocks(message.continuation)
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in message.calls
    )
    return blocks


def _thinking_blocks(continuation: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The thinking blocks stored in an assistant message's ``continuation`` (a new list).

    Raises :class:`ConfigError` when the ``"anthropic"`` entry is not what the reader writes.
    """
    namespace = continuation.get(_NAMESPACE)
    if namespace is None:
        return []
    stored = namespace.get("thinking_blocks", []) if isinstance(namespace, Mapping) else None
    if not isinstance(stored, list) or not all(isinstance(block, dict) for block in stored):
        raise ConfigError(
            'continuation["anthropic"]["thinking_blocks"] must be a list of JSON objects '
            "(as written by the Anthropic reader)"
        )
    return list(stored)


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    encoded: dict[str, Any] = {"name": tool.name}
    if tool.description:
        encoded["description"] = tool.description
    encoded["input_schema"] = tool.parameters
    return encoded


def _tool_choice(choice: str | None, tools: list[ToolDefinition]) -> dict[str, Any] | None:
    if choice is None:
        return None
    if not tools:
        if choice in ("auto", "none"):
            return None  # nothing to choose from: the same as not sending it
        raise ConfigError(f"tool_choice={choice!r} needs tools, and the request has none")
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    if all(tool.name != choice for tool in tools):
        raise ConfigError(f"tool_choice names {choice!r}, which is not one of the request's tools")
    return {"type": "tool", "name": choice}
