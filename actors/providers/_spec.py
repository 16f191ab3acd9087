"""Provider strings (``"openai:gpt-4.1-mini"``) turned into adapters."""

from __future__ import annotations

import os
from collections.abc import Mapping

from protocols.provider_spec import resolve_provider

from ._gemini import GeminiChat
from ._http import HTTPProvider
from ._vendors import AnthropicMessages, OllamaChat, OpenAIChat, OpenAIResponses

__all__ = ["provider_from_string"]

_ADAPTERS: dict[str, type[HTTPProvider]] = {
    "openai": OpenAIChat,
    "openai-responses": OpenAIResponses,
    "anthropic": AnthropicMessages,
    "ollama": OllamaChat,
    "gemini": GeminiChat,
}


def provider_from_string(text: str, *, environ: Mapping[str, str] | None = None) -> HTTPProvider:
    """The adapter a provider string names -- ``"openai:MODEL"`` (:class:`OpenAIChat`),
    ``"openai-responses:MODEL"`` (:class:`OpenAIResponses`), ``"anthropic:MODEL"``
    (:class:`AnthropicMessages`), ``"ollama:MODEL"`` (:class:`OllamaChat`), ``"gemini:MODEL"``
    (:class:`GeminiChat`) -- built from the
    environment variables that adapter documents (``environ``, default ``os.environ``; see
    :mod:`protocols.provider_spec`). Raises :class:`~protocols.errors.ConfigError` for a
    string that is not one of those, and naming the variable when a needed key is unset.

    ``runtime.agent("openai:gpt-4.1-mini")``, ``runtime.connect(...)``, ``Agent.start`` and
    ``AgentRegistry.add`` take the string itself and call this."""
    spec = resolve_provider(text, os.environ if environ is None else environ)
    adapter = _ADAPTERS[spec.vendor]
    # An empty key is passed as it is: "none", without the adapter reading the environment again.
    return adapter(model=spec.model, base_url=spec.base_url, api_key=spec.api_key)
