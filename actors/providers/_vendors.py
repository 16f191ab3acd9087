"""The wire formats people run, as HTTP providers: each only names its wire format and the
defaults of its constructor."""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from protocols.errors import ConfigError
from protocols.wire import anthropic, ollama, openai_chat, openai_responses

from ._http import HTTPProvider, WireFormat

__all__ = ["AnthropicMessages", "OllamaChat", "OpenAIChat", "OpenAIResponses"]

#: OpenAI's own API host: where ``max_tokens`` goes as ``max_completion_tokens``.
_OPENAI_HOST = "api.openai.com"


class OpenAIChat(HTTPProvider):
    """OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp server, LM Studio, OpenRouter,
    Ollama's ``/v1``), streamed as SSE with usage.

    ``base_url`` (ending in ``/v1``) defaults to ``$OPENAI_BASE_URL`` or OpenAI's; ``api_key``
    to ``$OPENAI_API_KEY`` (none is fine for local servers). ``max_tokens_key`` names the
    output token cap on the wire: ``"max_completion_tokens"`` (what OpenAI's API wants, and its
    reasoning models require) or ``"max_tokens"`` (what compatible servers take); by default
    the first for OpenAI's own host (``api.openai.com``), the second for any other. Other
    arguments: see :class:`HTTPProvider`.
    """

    name = "openai-chat"
    wire = WireFormat(
        path=openai_chat.PATH,
        framing="sse",
        schema_vendor="openai",
        encode_request=openai_chat.encode_request,
        new_reader=openai_chat.OpenAIChatReader,
        error_details=openai_chat.error_details,
    )

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens_key: openai_chat.MaxTokensKey | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or openai_chat.DEFAULT_BASE_URL,
            model=model,
            api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
            **kwargs,
        )
        if max_tokens_key is None:
            host = urllib.parse.urlsplit(self.base_url).hostname or ""
            max_tokens_key = "max_completion_tokens" if host == _OPENAI_HOST else "max_tokens"
        elif max_tokens_key not in openai_chat.MAX_TOKENS_KEYS:
            raise ConfigError(
                f"{self.name}: max_tokens_key must be 'max_tokens' or 'max_completion_tokens', "
                f"not {max_tokens_key!r}"
            )
        #: The name the output token cap is sent under.
        self.max_tokens_key: openai_chat.MaxTokensKey = max_tokens_key
        self._encoding["max_tokens_key"] = max_tokens_key


class OpenAIResponses(HTTPProvider):
    """OpenAI's Responses API (``POST {base}/responses``), streamed as SSE.

    Stateless at the vendor: every call sends the whole history with ``"store": false``, never a
    ``previous_response_id``. Reasoning summaries arrive on the thinking channel; with
    ``think=True`` the encrypted reasoning items are kept in the result's ``continuation`` and
    sent back with that assistant message. ``base_url`` (ending in ``/v1``) defaults to
    ``$OPENAI_BASE_URL`` or OpenAI's; ``api_key`` to ``$OPENAI_API_KEY``. Other arguments: see
    :class:`HTTPProvider`.
    """

    name = "openai-responses"
    wire = WireFormat(
        path=openai_responses.PATH,
        framing="sse",
        schema_vendor="openai",
        encode_request=openai_responses.encode_request,
        new_reader=openai_responses.OpenAIResponsesReader,
        error_details=openai_responses.error_details,
    )

    def __init__(
        self, *, model: str, base_url: str | None = None, api_key: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(
            base_url=(
                base_url or os.environ.get("OPENAI_BASE_URL") or openai_responses.DEFAULT_BASE_URL
            ),
            model=model,
            api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
            **kwargs,
        )


class AnthropicMessages(HTTPProvider):
    """Anthropic's Messages API, streamed as SSE.

    ``api_key`` defaults to ``$ANTHROPIC_API_KEY`` and is sent as ``x-api-key`` with the
    ``anthropic-version`` header. Inline ``<think>`` splitting is off: Anthropic reports
    reasoning natively.
    """

    name = "anthropic"
    wire = WireFormat(
        path=anthropic.PATH,
        framing="sse",
        schema_vendor="anthropic",
        encode_request=anthropic.encode_request,
        new_reader=anthropic.AnthropicReader,
        error_details=anthropic.error_details,
    )

    def __init__(
        self, *, model: str, base_url: str | None = None, api_key: str | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("split_think", False)
        super().__init__(
            base_url=base_url or anthropic.DEFAULT_BASE_URL,
            model=model,
            api_key=api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY"),
            **kwargs,
        )

    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": anthropic.API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers


class OllamaChat(HTTPProvider):
    """Ollama's native ``/api/chat``, streamed as NDJSON.

    ``base_url`` defaults to ``$OLLAMA_HOST`` (``http://`` added when it has no scheme) or
    ``http://127.0.0.1:11434``.
    """

    name = "ollama"
    wire = WireFormat(
        path=ollama.PATH,
        framing="ndjson",
        schema_vendor="ollama",
        encode_request=ollama.encode_request,
        new_reader=ollama.OllamaReader,
        error_details=ollama.error_details,
    )

    def __init__(
        self, *, model: str, base_url: str | None = None, api_key: str | None = None, **kwargs: Any
    ) -> None:
        host = os.environ.get("OLLAMA_HOST")
        if host and not host.startswith(("http://", "https://")):
            host = f"http://{host}"
        super().__init__(
            base_url=base_url or host or ollama.DEFAULT_BASE_URL,
            model=model,
            api_key=api_key,
            **kwargs,
        )
