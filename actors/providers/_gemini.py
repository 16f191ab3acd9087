"""``GeminiChat``: Google's Gemini API, natively (``streamGenerateContent`` with SSE)."""

from __future__ import annotations

import os
import re
from typing import Any

from protocols.errors import ConfigError
from protocols.wire import gemini

from ._http import HTTPProvider, WireFormat

__all__ = ["GeminiChat"]

#: The header Gemini takes the API key in.
_KEY_HEADER = "x-goog-api-key"
#: An API version in the path: ``v1beta``, ``v1``, ``v1alpha``.
_API_VERSION = re.compile(r"v[0-9]+[a-z0-9]*")


class GeminiChat(HTTPProvider):
    """Google's Gemini API (``POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse``),
    streamed as SSE.

    ``api_key`` defaults to ``$GOOGLE_API_KEY``, else ``$GEMINI_API_KEY`` (the order Google's
    own SDK reads them in), and is sent in the ``x-goog-api-key`` header -- never in the URL,
    where it would end up in proxies' logs. ``base_url`` defaults to Google's
    (``https://generativelanguage.googleapis.com``); ``api_version`` is the path's version
    (``"v1beta"``, where thinking and ``parametersJsonSchema`` are). ``model`` is a Gemini
    model name (``"gemini-2.5-flash"``; ``"models/..."`` and ``"tunedModels/..."`` are taken
    as they are): letters, digits and ``-._@``, else :class:`~protocols.errors.ConfigError`.

    Thinking arrives on the thinking channel when asked for (``think=True`` or a reasoning
    effort); thought signatures are kept in the result's ``continuation`` and sent back with
    that assistant message, as Gemini 3 requires across tool calls. Inline ``<think>``
    splitting is off: Gemini reports reasoning natively. How each model setting is sent, and
    what Gemini refuses: ``docs/providers.md``. Other arguments: see :class:`HTTPProvider`.
    """

    name = "gemini"
    wire = WireFormat(
        path="/{api_version}/{model}:streamGenerateContent?alt=sse",
        framing="sse",
        schema_vendor="gemini",
        encode_request=gemini.encode_request,
        new_reader=gemini.GeminiReader,
        error_details=gemini.error_details,
    )

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_version: str = gemini.API_VERSION,
        **kwargs: Any,
    ) -> None:
        if not (isinstance(api_version, str) and _API_VERSION.fullmatch(api_version)):
            raise ConfigError(
                f"{self.name}: api_version is such as 'v1beta' or 'v1', not {api_version!r:.40}"
            )
        if not model:
            raise ConfigError(f"{self.name}: a model name is required")
        given = [name for name in kwargs.get("headers") or {} if name.lower() == _KEY_HEADER]
        if given:
            raise ConfigError(
                f"{self.name}: headers may not set {given[0]} (the engine sends the key in it; "
                "use api_key= or auth=)"
            )
        #: The API version in the path.
        self.api_version = api_version
        self._model_path = gemini.model_path(model)
        if api_key is None:
            api_key = os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY")
        kwargs.setdefault("split_think", False)
        super().__init__(
            base_url=base_url or gemini.DEFAULT_BASE_URL, model=model, api_key=api_key, **kwargs
        )

    @property
    def url(self) -> str:
        """``{base}/{api_version}/models/{model}:streamGenerateContent?alt=sse``, then the
        ``query=`` parameters."""
        return self.with_query(
            f"{self.base_url}/{self.api_version}/{self._model_path}:streamGenerateContent?alt=sse"
        )

    def auth_headers(self) -> dict[str, str]:
        return {_KEY_HEADER: self._api_key} if self._api_key else {}
