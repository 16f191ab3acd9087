"""The simulator's request and answer types, the wire formats it speaks, and the patterns its
policy reads: what the request readers, the policy and the writers all share."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from .._json import dumps
from ..messages import FinishReason, Usage
from ..settings import ModelSettings
from ._cache import CachePrefix

#: The wire formats the simulator speaks (``"openai"`` is chat completions, ``"openai-responses"``
#: OpenAI's Responses API).
Vendor: TypeAlias = Literal["openai", "anthropic", "ollama", "openai-responses", "gemini"]

#: How reasoning is shown on the OpenAI-compatible format: inline ``<think>`` tags in the content,
#: or the ``reasoning_content`` field of the deltas.
ThinkStyle: TypeAlias = Literal["tags", "field"]

#: Request path -> wire format.
ROUTES: Final[Mapping[str, Vendor]] = {
    "/v1/chat/completions": "openai",
    "/v1/messages": "anthropic",
    "/api/chat": "ollama",
    "/v1/responses": "openai-responses",
}

#: Content type of a streamed response per wire format.
MEDIA_TYPES: Final[Mapping[Vendor, str]] = {
    "openai": "text/event-stream",
    "anthropic": "text/event-stream",
    "ollama": "application/x-ndjson",
    "openai-responses": "text/event-stream",
    "gemini": "text/event-stream",
}

#: The largest ``N`` honoured by ``count to N`` (bigger requests count to this).
MAX_COUNT_TO: Final = 1_000_000

# Characters per fragment when tool-call arguments are streamed (small, so clients must assemble).
_ARGUMENT_FRAGMENT = 7
_CREATED_AT = "2026-01-01T00:00:00Z"


_CALL = re.compile(
    r"\bcall\s+(?:the\s+)?([A-Za-z_][\w-]*(?:\.[\w-]+)*)(?:\s+tool)?(?:\s+with\s+(\{[^{}]*\}))?",
    re.IGNORECASE,
)
# Integers only: a decimal point before or a decimal part after a number is not a sum.
_SUM = re.compile(r"(?<![\w.])(-?\d{1,15})\s*\+\s*(-?\d{1,15})(?!\w|\.\d)")
_COUNT = re.compile(r"\bcount\s+to\s+(\d+)\b", re.IGNORECASE)
_WORDS = re.compile(r"\s*\S+")


@attrs.frozen
class SimCall:
    """A tool call the simulator makes (or one found in a request's assistant turn).

    ``cut`` is set when the answer was cut short inside this call: the part of its arguments'
    JSON text that was sent (``None``: the arguments went whole). :attr:`text` is what is sent.
    """

    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    cut: str | None = None

    @property
    def text(self) -> str:
        """The arguments' JSON text as sent: whole, or cut."""
        return dumps(self.arguments) if self.cut is None else self.cut


@attrs.frozen
class SimTurn:
    """One message of a request, reduced to what the policy reads: role, text and tool calls."""

    role: Literal["system", "user", "assistant", "tool"]
    text: str = ""
    calls: tuple[SimCall, ...] = ()


@attrs.frozen
class SimRequest:
    """A request body of one of the wire formats, read into one shape.

    ``tools`` lists the advertised tool names in order; ``tool_choice`` is ``None`` (auto),
    ``"none"``, ``"required"`` or a tool name; ``max_tokens`` is the output cap, if any.
    ``settings`` are the model settings the body gave, read back from the vendor's names
    (``extra``: the body's keys the simulator does not know, as sent; for Ollama, unknown
    ``options`` keys under ``{"options": ...}``); a reasoning effort Anthropic expresses as a
    thinking budget is ``thinking_budget`` instead. ``prefixes`` are what the request offers
    the simulator's prompt cache (:mod:`protocols.simulator._cache`): the prefixes its
    ``cache_control`` marks end (Anthropic), or every message boundary (OpenAI's two formats).
    """

    vendor: Vendor
    model: str
    turns: tuple[SimTurn, ...]
    tools: tuple[str, ...] = ()
    stream: bool = True
    think: bool = False
    include_usage: bool = False
    tool_choice: str | None = None
    max_tokens: int | None = None
    settings: ModelSettings = attrs.field(factory=ModelSettings)
    thinking_budget: int | None = None
    prefixes: tuple[CachePrefix, ...] = ()


@attrs.frozen
class SimAnswer:
    """What the simulator says: thinking, content deltas, tool calls, finish reason and usage."""

    thinking: str
    pieces: tuple[str, ...]
    calls: tuple[SimCall, ...]
    finish: FinishReason
    usage: Usage

    @property
    def text(self) -> str:
        """The whole content."""
        return "".join(self.pieces)
