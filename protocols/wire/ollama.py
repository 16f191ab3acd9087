"""Ollama's native chat API (``POST /api/chat``), sans-IO: the request body, the stream reader and
the non-streaming response reader.

Ollama streams newline-delimited JSON (decode it with :class:`~protocols.ndjson.NDJSONDecoder`):
every line is one object carrying a piece of ``message`` (``content``, ``thinking``, complete
``tool_calls``) and ``done``; the line with ``done: true`` ends the stream and carries the finish
reason (``done_reason``) and the token counts (``prompt_eval_count``, ``eval_count``). A failure
once the stream has started arrives as a line ``{"error": "..."}``. With ``"stream": false`` the
whole answer is one such object, the final one.

What the request body does with each part of the data model:

- System messages, wherever they stand, become one ``system`` message, first (their texts
  joined by a blank line). The others become ``{"role", "content"}``, in order. A user or tool
  message's images go in ``images`` as
  bare base64 (a ``data:`` URL prefix is stripped); an assistant message's calls go in
  ``tool_calls`` as ``{"function": {"name", "arguments"}}`` with the arguments as an object; a
  tool message names its tool in ``tool_name``. Thinking, the interrupted mark and continuation
  data are never sent: Ollama has no place for them.
- Tools are sent OpenAI-style, ``{"type": "function", "function": {"name", "description",
  "parameters"}}``, with the parameters as given (projecting them with
  :func:`protocols.wire.schema.project` is the caller's choice).
- Options: ``think`` is the top-level ``think`` flag, and ``reasoning_effort`` the same field
  with the level (``"think": "high"``: gpt-oss takes levels; other reasoning models may refuse
  one); ``schema`` is the top-level ``format``; ``max_tokens``, ``temperature``, ``top_p``,
  ``stop``, ``seed``, ``presence_penalty`` and ``frequency_penalty`` go in the ``options``
  object (``num_predict`` for ``max_tokens``, the others under their own names). Ollama cannot
  force a tool call, so ``tool_choice`` may only be ``"auto"`` (or unset) or ``"none"``, which
  leaves the tools out of the request; nor can it keep a reply to one call, so
  ``parallel_tool_calls=False`` with tools is refused (``True`` is what it does anyway).
  Ollama keeps the last prompt's cache by itself: ``cache="auto"`` is what it does and sends
  nothing; ``cache="off"``, ``cache_breakpoints``, ``cache_key`` and ``cache_retention`` are
  refused (it has no field for any of them; its ``keep_alive`` goes through ``extra``).
- ``extra`` is merged last; an ``options`` object in it is merged into the encoder's own
  ``options``, so ``{"options": {"num_ctx": 8192}}`` keeps ``num_predict``. It may not set a
  key the encoder wrote from an option, at the top level or in ``options``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .._json import dumps, loads
from .._json import json_kind as _kind
from ..errors import ConfigError, ProtocolError, ProviderError, ValidationError
from ..messages import (
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    ToolDefinition,
    Usage,
    new_id,
)
from ._common import Written, automatic_cache, split_system
from ._stream import (
    NOTHING,
    CallFragment,
    Increment,
    StreamAssembler,
    ignore_after_end,
    response_name,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "PATH",
    "OllamaReader",
    "encode_request",
    "error_details",
    "read_response",
]

#: The chat endpoint, relative to the server's base URL.
PATH: Final = "/api/chat"
#: Where a local Ollama server listens by default.
DEFAULT_BASE_URL: Final = "http://127.0.0.1:11434"

#: Body keys the encoder writes itself and ``extra`` may not replace.
_OWNED_KEYS: Final = ("model", "messages", "tools", "stream")
#: The most vendor error text kept in a message.
_ERROR_TEXT_LIMIT: Final = 300

_FINISH: Final = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}

#: The settings that go in the ``options`` object: (option field, Ollama's name), in order.
_SAMPLING: Final = (
    ("max_tokens", "num_predict"),
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("stop", "stop"),
    ("seed", "seed"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
)


# ---------------------------------------------------------------------------------------------
# Request


def encode_request(
    messages: Sequence[Message],
    *,
    model: str,
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
) -> dict[str, Any]:
    """The JSON body of one ``/api/chat`` request (see the module docstring for the mapping).

    Guarantees: system messages, wherever they stand, become one ``system`` message, first:
    their texts in order, joined by a blank line (empty ones left out; see ``docs/context.md``),
    and none when no message is a system message -- never two. The body is strict JSON
    (serialisable with :func:`protocols._json.dumps`); it holds
    ``model``, ``messages`` and ``stream`` always, ``tools`` only when there are tools to offer,
    and ``think``, ``format`` and ``options`` only when an option sets them. Nested values (tool
    arguments, schemas, ``extra`` values) are shared with the inputs, not copied: treat the body
    as read-only. The inputs are never modified.

    Raises :class:`~protocols.errors.ConfigError` when ``model`` is empty, when ``tool_choice``
    asks for something Ollama cannot do (``"required"`` or a tool name), when
    ``parallel_tool_calls`` is ``False`` for a request with tools, and when ``extra`` sets a key
    the encoder owns (``model``, ``messages``, ``tools``, ``stream``) or wrote from an option.
    """
    if not isinstance(model, str) or not model:
        raise ConfigError("the Ollama model name must be a non-empty string")
    opts = options if options is not None else ProviderOptions()
    choice = opts.tool_choice
    if choice not in (None, "auto", "none"):
        raise ConfigError(
            f"Ollama cannot honour tool_choice={choice!r}: its API has no way to force a tool "
            "call; use 'auto' (or leave it unset) or 'none', and ask for the tool in the prompt"
        )
    if opts.parallel_tool_calls is False and tools and choice != "none":
        raise ConfigError(
            "Ollama cannot honour parallel_tool_calls=False: its API has no way to keep a reply "
            "to one tool call; leave it unset"
        )
    for key in _OWNED_KEYS:
        if key in opts.extra:
            raise ConfigError(f"extra may not set {key!r}: the Ollama encoder owns it")

    system, others = split_system(messages)
    encoded = [] if system is None else [{"role": "system", "content": system}]
    encoded.extend(_message(message) for message in others)
    body: dict[str, Any] = {"model": model, "messages": encoded}
    if tools and choice != "none":
        body["tools"] = [_tool(tool) for tool in tools]
    body["stream"] = stream
    written = Written("Ollama", body)
    if opts.reasoning_effort is not None:
        written.put("think", opts.reasoning_effort, "reasoning_effort")
    elif opts.think is not None:
        written.put("think", opts.think, "think")
    if opts.schema is not None:
        written.put("format", opts.schema, "schema")
    automatic_cache(opts, written)  # it keeps the last prompt's cache itself: nothing to say
    sampling: dict[str, Any] = {}
    inner = Written("Ollama", sampling)  # what ``extra``'s own ``options`` may not set
    for name, key in _SAMPLING:
        value = getattr(opts, name)
        if value is not None and value != ():
            inner.put(key, list(value) if name == "stop" else value, name)
    if sampling:
        body["options"] = sampling
    for key, value in opts.extra.items():
        if key == "options" and sampling:
            if not isinstance(value, dict):
                raise ConfigError(
                    "extra's 'options' must be an object, merged into the encoder's own"
                )
            for option in value:
                inner.refuse(option, ())
            body[key] = {**sampling, **value}
        else:
            written.refuse(key, _OWNED_KEYS)
            body[key] = value
    return body


def _message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.role is Role.ASSISTANT and message.calls:
        out["tool_calls"] = [
            {"function": {"name": call.name, "arguments": call.arguments}} for call in message.calls
        ]
    elif message.role is Role.TOOL:
        out["tool_name"] = message.name
    if message.images:  # a user's or a tool's
        out["images"] = [_bare_base64(image) for image in message.images]
    return out


def _bare_base64(image: str) -> str:
    """The base64 payload of an image: a ``data:...,`` prefix removed, anything else as is."""
    if image.startswith("data:"):
        _, comma, payload = image.partition(",")
        if comma:
            return payload
    return image


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


# ---------------------------------------------------------------------------------------------
# Stream


class OllamaReader:
    """Turns each parsed line of one ``/api/chat`` stream into an :class:`Increment`.

    Use one reader per stream (it numbers the stream's tool calls). Guarantees for :meth:`read`:

    * ``message.content`` is the increment's content (it may hold inline ``<think>`` tags, which
      older reasoning models write; the assembler splits them out) and ``message.thinking`` its
      thinking.
    * Each entry of ``message.tool_calls`` is one complete call: a :class:`CallFragment` whose
      ``index`` counts the calls seen so far in the stream (0, 1, ...; Ollama's own indexes are
      not trusted), whose ``id`` is the call's ``id`` when the server sent one (else ``None``, for
      the assembler to mint), and whose ``arguments`` are the arguments as compact JSON text (an
      object is serialised; a string, which some Ollama-compatible servers send, is passed through
      for the assembler to parse).
    * ``done: true`` makes the increment terminal and final, with the usage (``prompt_eval_count``,
      ``eval_count``, sanitised; ``None`` when the line has neither) and the finish reason
      from ``done_reason``: ``stop`` is ``stop``
      (``tool_calls`` when the stream made tool calls, since Ollama reports ``stop`` then),
      ``length`` is ``length``, and any other reason (``load``, ``unload``, ...) is ``other``. A
      missing ``done_reason`` leaves the finish to the assembler's default.
    * The ``done: true`` line ends the response: every value after it -- more content, another
      ``done`` line, an ``error`` line, anything at all -- gives nothing and raises nothing,
      unread (the first one is logged at debug level), so what comes after the end never
      changes the response. (A line after it that is not JSON at all fails in the NDJSON
      decoder, before it reaches a reader: the provider engine stops decoding at the end.)
    * The line's ``model`` is the increment's ``model`` on the first line that has an
      acceptable one (a non-empty string of at most 256 characters; anything else is ignored,
      never an error), and not again. Ollama names no response: ``response_id`` stays ``None``.
    * Unknown fields are ignored. A line that is not an object, or a known field of the wrong
      type, raises :class:`~protocols.errors.ProtocolError`; an ``error`` line raises
      :class:`~protocols.errors.ProviderError` (``code="provider_error"``) carrying at most 300
      characters of the vendor's message.
    """

    __slots__ = ("_calls", "_ended", "_logged", "_model")

    def __init__(self) -> None:
        self._calls = 0
        self._model: str | None = None  # the model reported, once known
        # The done line was read (what follows is ignored), and an ignored value was logged.
        self._ended = False
        self._logged = False

    def read(self, record: Any) -> Increment:
        """The increment of one parsed NDJSON value (see the class docstring)."""
        if self._ended:
            self._logged = ignore_after_end(
                "Ollama", f"a line holding {_kind(record)}", logged=self._logged
            )
            return NOTHING
        if not isinstance(record, dict):
            raise ProtocolError(
                f"Ollama stream line is not a JSON object (got {_kind(record)})",
            )
        error = record.get("error")
        if error is not None:
            text = _error_text(error)
            raise ProviderError(f"Ollama reported an error: {text}", excerpt=text)

        content = thinking = ""
        calls: tuple[CallFragment, ...] = ()
        message = record.get("message")
        if message is not None:
            if not isinstance(message, dict):
                raise ProtocolError(f"Ollama 'message' is not a JSON object (got {_kind(message)})")
            content = _text(message, "content")
            thinking = _text(message, "thinking")
            raw_calls = message.get("tool_calls")
            if raw_calls is not None:
                if not isinstance(raw_calls, list):
                    raise ProtocolError(
                        f"Ollama 'message.tool_calls' is not an array (got {_kind(raw_calls)})"
                    )
                calls = tuple(self._call(raw) for raw in raw_calls)

        model = None
        if self._model is None:
            model = self._model = response_name(record.get("model"))
        done = record.get("done")
        if done is None or done is False:
            return Increment(content=content, thinking=thinking, calls=calls, model=model)
        if done is not True:
            raise ProtocolError(f"Ollama 'done' is not true or false (got {_kind(done)})")
        prompt, completion = record.get("prompt_eval_count"), record.get("eval_count")
        # A server that counts nothing (some Ollama-compatible ones) leaves usage unknown.
        usage = (
            None
            if prompt is None and completion is None
            else Usage.sanitize(prompt=prompt, completion=completion)
        )
        finish = self._finish(record.get("done_reason"))
        self._ended = True
        return Increment(
            content=content,
            thinking=thinking,
            calls=calls,
            usage=usage,
            finish=finish,
            terminal=True,
            final=True,
            model=model,
        )

    def _call(self, raw: Any) -> CallFragment:
        index = self._calls
        if not isinstance(raw, dict):
            raise ProtocolError(f"Ollama tool call {index} is not a JSON object (got {_kind(raw)})")
        function = raw.get("function")
        if not isinstance(function, dict):
            raise ProtocolError(
                f"Ollama tool call {index} has no 'function' object (got {_kind(function)})"
            )
        name = function.get("name")
        if name is not None and not isinstance(name, str):
            raise ProtocolError(f"Ollama tool call {index} name is not a string ({_kind(name)})")
        call_id = raw.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise ProtocolError(f"Ollama tool call {index} id is not a string ({_kind(call_id)})")
        arguments = function.get("arguments")
        if arguments is None:
            text = ""
        elif isinstance(arguments, str):
            text = arguments
        elif isinstance(arguments, dict):
            try:
                text = dumps(arguments)
            except ValidationError as error:
                raise ProtocolError(
                    f"Ollama tool call {index} arguments are not strict JSON: {error.message}"
                ) from None
        else:
            raise ProtocolError(
                f"Ollama tool call {index} arguments are not a JSON object (got {_kind(arguments)})"
            )
        self._calls += 1
        return CallFragment(index=index, id=call_id or None, name=name or None, arguments=text)

    def _finish(self, reason: Any) -> FinishReason | None:
        if reason is None or reason == "":
            return None
        if not isinstance(reason, str):
            raise ProtocolError(f"Ollama 'done_reason' is not a string (got {_kind(reason)})")
        finish = _FINISH.get(reason, FinishReason.OTHER)
        if finish is FinishReason.STOP and self._calls:
            return FinishReason.TOOL_CALLS
        return finish


def read_response(
    body: str | bytes | Mapping[str, Any],
    *,
    split: bool = True,
    mint_id: Callable[[], str] = new_id,
) -> ProviderResult:
    """The result of a non-streaming (``"stream": false``) ``/api/chat`` response.

    ``body`` is the response's JSON text (``str`` or UTF-8 ``bytes``, parsed strictly) or the
    already parsed object. The object is read exactly as a one-line stream would be (see
    :class:`OllamaReader`): ``split`` turns inline ``<think>`` spans into thinking, and
    ``mint_id`` names tool calls the server sent without an id.

    Raises :class:`~protocols.errors.ProviderError` for an ``{"error": ...}`` body and
    :class:`~protocols.errors.ProtocolError` for malformed JSON, a malformed field, malformed
    tool-call arguments or a body without ``done: true`` (a response that is not final).
    """
    record = loads(body) if isinstance(body, str | bytes) else body
    if isinstance(record, Mapping) and not isinstance(record, dict):
        record = dict(record)
    increment = OllamaReader().read(record)
    if not increment.terminal:
        raise ProtocolError('Ollama response is not final: it lacks "done": true')
    assembler = StreamAssembler(split=split, mint_id=mint_id)
    assembler.add(increment)
    assembler.flush()
    return assembler.result()


# ---------------------------------------------------------------------------------------------
# Errors


def error_details(body: str) -> tuple[str | None, str | None, str]:
    """``(vendor_type, vendor_code, message)`` from the body of an Ollama error response.

    Ollama's errors are ``{"error": "..."}`` with no type or code, so the first two are always
    ``None``. The message is the error text; for a body that is not such JSON it is the body's
    text, stripped. Either way it is cut to 300 characters (``""`` for an empty body). Never
    raises.
    """
    try:
        parsed = loads(body)
    except ProtocolError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("error") is not None:
        return None, None, _error_text(parsed["error"])
    return None, None, body.strip()[:_ERROR_TEXT_LIMIT]


def _error_text(error: Any) -> str:
    """The bounded text of an ``error`` value: a string as is, ``{"message": ...}``'s message,
    anything else as compact JSON."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        error = error["message"]
    if isinstance(error, str):
        text = error
    else:
        try:
            text = dumps(error)
        except ValidationError:  # not strict JSON (only possible from a hand-built record)
            text = repr(error)
    return text.strip()[:_ERROR_TEXT_LIMIT]


def _text(message: dict[str, Any], field: str) -> str:
    value = message.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ProtocolError(f"Ollama 'message.{field}' is not a string (got {_kind(value)})")
    return value
