"""Provider strings: ``"openai:gpt-4.1-mini"`` read as which adapter, which model, and which
settings the environment gives it -- pure, so it is tested without an event loop.

A provider string is ``VENDOR:MODEL``. The vendor is one of :data:`VENDORS`; the model is the
rest of the string, colons included (``"ollama:qwen3:8b"`` is Ollama's ``qwen3:8b``). Each
vendor reads the environment variables its adapter documents (``docs/models.md``), no others:

* ``openai`` and ``openai-responses``: ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``; the key is
  needed unless ``OPENAI_BASE_URL`` names another server (local servers take none).
* ``anthropic``: ``ANTHROPIC_API_KEY``, needed.
* ``ollama``: ``OLLAMA_HOST`` (``http://`` added when it has no scheme); no key.
* ``gemini``: ``GOOGLE_API_KEY``, else ``GEMINI_API_KEY`` (the order Google's SDK reads
  them in), needed.

Guarantees: a string that is not ``VENDOR:MODEL`` with a known vendor, and a key that is
needed but unset (or empty), raise one :class:`~protocols.errors.ConfigError` whose message
names what to fix -- the variable, for a key. No error ever contains a variable's value, nor
a string that does not parse (it might be a key pasted in the wrong place): of that, only a
vendor-like word before the colon is repeated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal, get_args

import attrs

from .errors import ConfigError
from .wire import anthropic, gemini, ollama, openai_chat, openai_responses

__all__ = [
    "MAX_PROVIDER_STRING",
    "VENDORS",
    "ProviderSpec",
    "Vendor",
    "parse_provider",
    "resolve_provider",
]

Vendor = Literal["openai", "openai-responses", "anthropic", "ollama", "gemini"]
#: The vendors a provider string may name, in the order the errors list them.
VENDORS: Final[tuple[Vendor, ...]] = get_args(Vendor)
#: The longest provider string taken (characters).
MAX_PROVIDER_STRING: Final = 512

#: A vendor-looking word, the only part of a bad string an error may repeat.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
#: Whitespace and control characters: never part of a model name.
_BAD_MODEL = re.compile(r"[\s\x00-\x1f\x7f]")

_EXPECTED = (
    "a provider string is VENDOR:MODEL with VENDOR one of "
    + ", ".join(VENDORS)
    + " (for example 'openai:gpt-4.1-mini' or 'ollama:qwen3:8b')"
)


@attrs.frozen
class ProviderSpec:
    """What a provider string resolved to: the adapter's ``vendor``, the ``model``, and the
    ``base_url`` and ``api_key`` to build it with (``api_key`` ``""``: send none). Its
    ``repr`` never shows the key."""

    vendor: Vendor
    model: str
    base_url: str
    api_key: str = attrs.field(repr=lambda key: "<redacted>" if key else "''")


def parse_provider(text: str) -> tuple[Vendor, str]:
    """Split a provider string into its vendor and model, checking both; raises
    :class:`~protocols.errors.ConfigError` saying what a provider string is otherwise."""
    if not isinstance(text, str):
        raise ConfigError(f"{_EXPECTED}; got {type(text).__name__}")
    if len(text) > MAX_PROVIDER_STRING:
        raise ConfigError(f"{_EXPECTED}; got a string of {len(text)} characters")
    vendor, colon, model = text.partition(":")
    if not colon:
        raise ConfigError(f"{_EXPECTED}; got a string without ':'")
    if vendor not in VENDORS:
        named = f"{vendor!r}" if _NAME.fullmatch(vendor) else "a vendor"
        raise ConfigError(f"unknown provider {named}: {_EXPECTED}")
    if not model:
        raise ConfigError(f"{vendor}: the model is missing after ':' ({_EXPECTED})")
    if _BAD_MODEL.search(model):
        raise ConfigError(
            f"{vendor}: a model name has no spaces or control characters ({_EXPECTED})"
        )
    return vendor, model


def resolve_provider(text: str, environ: Mapping[str, str]) -> ProviderSpec:
    """Parse ``text`` (see :func:`parse_provider`) and read its vendor's settings from
    ``environ`` (``os.environ`` at the call site). Raises
    :class:`~protocols.errors.ConfigError` naming the variable when a needed key is unset or
    empty."""
    vendor, model = parse_provider(text)
    if vendor == "ollama":
        host = environ.get("OLLAMA_HOST", "")
        if host and not host.startswith(("http://", "https://")):
            host = f"http://{host}"
        return ProviderSpec(vendor, model, host or ollama.DEFAULT_BASE_URL, "")
    if vendor == "gemini":
        variable = (
            "GOOGLE_API_KEY" if environ.get("GOOGLE_API_KEY", "").strip() else "GEMINI_API_KEY"
        )
        key = _key(environ, variable, text=text, required=True)
        return ProviderSpec(vendor, model, gemini.DEFAULT_BASE_URL, key)
    if vendor == "anthropic":
        key = _key(environ, "ANTHROPIC_API_KEY", text=text, required=True)
        return ProviderSpec(vendor, model, anthropic.DEFAULT_BASE_URL, key)
    default = (
        openai_chat.DEFAULT_BASE_URL if vendor == "openai" else openai_responses.DEFAULT_BASE_URL
    )
    base_url = environ.get("OPENAI_BASE_URL") or default
    # Another OpenAI-compatible server (vLLM, llama.cpp, Ollama's /v1) may well take no key.
    key = _key(environ, "OPENAI_API_KEY", text=text, required=base_url == default)
    return ProviderSpec(vendor, model, base_url, key)


def _key(environ: Mapping[str, str], variable: str, *, text: str, required: bool) -> str:
    key = environ.get(variable, "")
    if required and not key.strip():
        raise ConfigError(
            f"{text} needs an API key: set the environment variable {variable} "
            "(or build the provider yourself and pass api_key=)",
            code="missing_key",
        )
    return key
