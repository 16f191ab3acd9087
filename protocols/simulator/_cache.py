"""The simulator's prompt cache: which prefix of a request it has seen before, reported the way
each vendor reports a cached prefix. Pure and sans-IO; the server keeps one per instance.

What a request offers the cache is a tuple of :class:`CachePrefix` -- a digest of a prefix of
the prompt and the tokens it holds -- read from the body by :func:`anthropic_prefixes` (the
prefixes a ``cache_control`` breakpoint ends: Anthropic caches only what a request marks),
:func:`chat_prefixes` and :func:`responses_prefixes` (every message boundary: OpenAI caches
prefixes by itself). :meth:`PromptCache.use` then turns a request's usage into one with
``cached`` (and, for marked prefixes, ``cache_write``) filled in, and remembers the prefixes.

Guarantees:

* Deterministic: the same requests in the same order give the same counts (digests are
  BLAKE2b of canonical JSON; no clock, no randomness).
* Bounded: a :class:`PromptCache` holds at most ``capacity`` digests, the least recently used
  leaving first; reading a body costs time linear in its size.
* Counts stay valid: ``cached + cache_write`` never exceeds the usage's ``prompt``; a prefix
  shorter than ``min_tokens`` is neither read nor written (as the vendors' minimum cacheable
  length), and a request offering none such leaves the usage unchanged.
* A digest covers the vendor, the model, (OpenAI) the ``prompt_cache_key`` and the content up
  to the prefix's end, with ``cache_control`` marks left out -- so moving a mark does not change
  what a prefix is. There is no time-to-live and no 20-block look-back: a mark is read back
  only when the same prefix was marked (or, for OpenAI, sent) before.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from .._json import dumpb
from ..accounting import estimate_tokens
from ..errors import ValidationError
from ..messages import Usage
from ..settings import MAX_CACHE_BREAKPOINTS

__all__ = [
    "CACHE_STEP",
    "DEFAULT_CACHE_CAPACITY",
    "DEFAULT_CACHE_MIN_TOKENS",
    "CachePrefix",
    "PromptCache",
    "anthropic_prefixes",
    "chat_prefixes",
    "responses_prefixes",
]

#: The shortest prefix cached, in tokens, by default: OpenAI's minimum, and Anthropic's for
#: most of its models.
DEFAULT_CACHE_MIN_TOKENS: Final = 1024
#: OpenAI reports cached tokens in steps of this many past the minimum.
CACHE_STEP: Final = 128
#: How many prefix digests a :class:`PromptCache` keeps by default.
DEFAULT_CACHE_CAPACITY: Final = 10_000


@attrs.frozen
class CachePrefix:
    """A prefix of a request's prompt: its digest and the tokens it holds (estimated as the
    simulator estimates the whole prompt)."""

    digest: bytes
    tokens: int


class _Hasher:
    """A running digest over a request's elements, noting a :class:`CachePrefix` where told."""

    __slots__ = ("_hash", "_tokens", "prefixes")

    def __init__(self, *seed: Any) -> None:
        self._hash = hashlib.blake2b(dumpb(list(seed)), digest_size=16)
        self._tokens = 0
        self.prefixes: list[CachePrefix] = []

    def add(self, element: Any, tokens: int) -> None:
        data = dumpb(element)
        self._hash.update(len(data).to_bytes(8, "big") + data)
        self._tokens += tokens

    def mark(self) -> None:
        self.prefixes.append(CachePrefix(self._hash.copy().digest(), self._tokens))


def _text(value: Any) -> str:
    """The text the policy reads in a content value: a string, or its text parts joined (an
    Anthropic ``tool_result`` block's own content included)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return ""
    texts: list[str] = []
    for part in value:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "tool_result":
            texts.append(_text(part.get("content")))
    return "".join(texts)


def _unmarked(block: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "cache_control"}


def _check_mark(value: Any, where: str) -> bool:
    """Whether a block carries a breakpoint (ValidationError when the mark is malformed)."""
    if value is None:
        return False
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        raise ValidationError(f"{where}.cache_control must be {{'type': 'ephemeral'}}")
    ttl = value.get("ttl")
    if ttl is not None and ttl not in ("5m", "1h"):
        raise ValidationError(f"{where}.cache_control.ttl must be '5m' or '1h'")
    return True


def anthropic_prefixes(data: Mapping[str, Any]) -> tuple[CachePrefix, ...]:
    """The prefixes an Anthropic Messages body marks with ``cache_control``, in prompt order
    (tools, then system, then messages), as Anthropic reads them.

    Raises :class:`~protocols.errors.ValidationError` (the server's 400) for a mark that is not
    ``{"type": "ephemeral"}`` (with an optional ``ttl`` of ``"5m"`` or ``"1h"``), or for more
    than four marks, as Anthropic does."""
    hasher = _Hasher("anthropic", data.get("model"))
    tools = data.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict):
            hasher.add(["tool", _unmarked(tool)], 1)
            if _check_mark(tool.get("cache_control"), f"tools[{index}]"):
                hasher.mark()
    system = data.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system
    for index, block in enumerate(blocks if isinstance(blocks, list) else ()):
        if isinstance(block, dict):
            hasher.add(["system", _unmarked(block)], estimate_tokens(_text([block])))
            if _check_mark(block.get("cache_control"), f"system[{index}]"):
                hasher.mark()
    messages = data.get("messages")
    for number, message in enumerate(messages if isinstance(messages, list) else ()):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        hasher.add(["message", message.get("role")], 0)
        for index, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, dict):
                hasher.add(_unmarked(block), estimate_tokens(_text([block])))
                where = f"messages[{number}].content[{index}]"
                if _check_mark(block.get("cache_control"), where):
                    hasher.mark()
    if len(hasher.prefixes) > MAX_CACHE_BREAKPOINTS:
        raise ValidationError(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(hasher.prefixes)}."
        )
    return tuple(hasher.prefixes)


def _automatic(
    vendor: str, data: Mapping[str, Any], tools: Any, items: Iterable[tuple[Any, str]]
) -> tuple[CachePrefix, ...]:
    key = data.get("prompt_cache_key")
    hasher = _Hasher(vendor, data.get("model"), key if isinstance(key, str) else None)
    if isinstance(tools, list) and tools:
        hasher.add(["tools", tools], len(tools))
        hasher.mark()
    for item, text in items:
        hasher.add(item, estimate_tokens(text))
        hasher.mark()
    return tuple(hasher.prefixes)


def chat_prefixes(data: Mapping[str, Any]) -> tuple[CachePrefix, ...]:
    """Every prefix of an OpenAI chat completions body that ends at a message boundary (after
    the tools, then after each message), in order: what OpenAI may find cached by itself."""
    messages = data.get("messages")
    items = [
        (message, _text(message.get("content")))
        for message in (messages if isinstance(messages, list) else ())
        if isinstance(message, dict)
    ]
    return _automatic("openai", data, data.get("tools"), items)


def responses_prefixes(data: Mapping[str, Any]) -> tuple[CachePrefix, ...]:
    """Every prefix of an OpenAI Responses body that ends at an item boundary (after the
    tools, the instructions, then each input item), in order."""
    items: list[tuple[Any, str]] = []
    instructions = data.get("instructions")
    if isinstance(instructions, str) and instructions:
        items.append((["instructions", instructions], instructions))
    raw = data.get("input")
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, dict):
            kind = item.get("type", "message")
            text = item.get("output") if kind == "function_call_output" else item.get("content")
            items.append((item, "" if kind == "function_call" else _text(text)))
    tools = data.get("tools")
    functions = [
        tool
        for tool in (tools if isinstance(tools, list) else ())
        if isinstance(tool, dict) and tool.get("type") == "function"
    ]
    return _automatic("openai-responses", data, functions, items)


class PromptCache:
    """The prefixes one simulator has seen, as a bounded LRU set of digests.

    :meth:`use` reports a request's prompt the way its vendor reports a cached prefix:

    * ``"anthropic"`` (marked prefixes): ``cached`` is the tokens of the longest marked prefix
      seen before, ``cache_write`` the tokens from there to the request's last mark when that
      last prefix was not seen before (else 0); every mark is remembered.
    * ``"openai"``, ``"openai-responses"`` (automatic): ``cached`` is the tokens of the
      longest prefix seen before, counted as OpenAI counts them -- ``min_tokens`` and then
      whole steps of :data:`CACHE_STEP` -- and no ``cache_write``; every prefix is remembered.

    Only prefixes of at least ``min_tokens`` count; a request without one keeps its usage.
    """

    __slots__ = ("_seen", "capacity", "min_tokens")

    def __init__(
        self,
        *,
        min_tokens: int = DEFAULT_CACHE_MIN_TOKENS,
        capacity: int = DEFAULT_CACHE_CAPACITY,
    ) -> None:
        for name, value in (("min_tokens", min_tokens), ("capacity", capacity)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{name} must be an int >= 1, not {value!r}")
        self.min_tokens = min_tokens
        self.capacity = capacity
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        """How many prefix digests are held (at most ``capacity``)."""
        return len(self._seen)

    def use(self, vendor: str, prefixes: Iterable[CachePrefix], usage: Usage) -> Usage:
        """``usage`` with the cached part of its prompt (see the class), remembering
        ``prefixes``."""
        eligible = [prefix for prefix in prefixes if prefix.tokens >= self.min_tokens]
        if not eligible:
            return usage
        seen = self._seen
        hits = [prefix.tokens for prefix in eligible if prefix.digest in seen]
        read = max(hits, default=0)
        write: int | None = None
        if vendor == "anthropic":
            last = eligible[-1]
            write = 0 if last.digest in seen else max(0, last.tokens - read)
        elif read:
            read = self.min_tokens + (read - self.min_tokens) // CACHE_STEP * CACHE_STEP
        for prefix in eligible:
            seen[prefix.digest] = None
            seen.move_to_end(prefix.digest)
        while len(seen) > self.capacity:
            seen.popitem(last=False)
        read = min(read, usage.prompt)
        if write is not None:
            write = min(write, usage.prompt - read)
        return attrs.evolve(usage, cached=read, cache_write=write)
