"""Small pure helpers shared by the vendor wire modules."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from ..messages import Message, ProviderOptions, Role

__all__ = ["RETRYABLE_STATUSES", "classify_status", "image_media_type"]

#: What joins the texts of several system messages into the one system text a request carries.
SYSTEM_SEPARATOR = "\n\n"


class Written:
    """The request-body keys an encoder wrote from the options, and what each was written from:
    what ``extra`` may then not set. Not part of the public API."""

    __slots__ = ("adapter", "body", "sources")

    def __init__(self, adapter: str, body: dict[str, Any]) -> None:
        self.adapter = adapter
        self.body = body
        self.sources: dict[str, str] = {}

    def put(self, key: str, value: Any, source: str, *aliases: str) -> None:
        """Write ``body[key] = value`` from ``source`` (the option's name); ``aliases`` are
        other keys that say the same to some server, which ``extra`` may not set either."""
        self.body[key] = value
        self.sources[key] = source
        for alias in aliases:
            self.sources[alias] = source

    def refuse(self, key: str, owned: Iterable[str]) -> None:
        """Raise :class:`ConfigError` when ``extra`` may not set ``key``: a key the encoder
        always owns (``owned``), or one it wrote from an option."""
        if key in owned:
            raise ConfigError(f"extra may not set {key!r}: the {self.adapter} encoder owns it")
        source = self.sources.get(key)
        if source is not None:
            raise ConfigError(
                f"extra may not set {key!r}: the {self.adapter} encoder sets it itself, from "
                f"{source}; set that instead"
            )


def automatic_cache(
    options: ProviderOptions,
    written: Written,
    *,
    key: str | None = None,
    retention: str | None = None,
) -> None:
    """The prompt-cache settings of a vendor that caches prompt prefixes by itself (OpenAI,
    Ollama, Gemini): ``cache="auto"`` and ``cache_breakpoints=()`` are what it does and send
    nothing; ``cache="off"`` and breakpoints by hand are refused (:class:`ConfigError`: it has
    no way to say either); ``cache_key`` and ``cache_retention`` are written under the
    vendor's names ``key`` and ``retention``, or refused where it has none (``None``). Not
    part of the public API."""
    adapter = written.adapter
    if options.cache == "off":
        raise ConfigError(
            f"{adapter} caches prompt prefixes by itself and cannot be told not to: "
            "cache='off' cannot be honoured (leave it unset, or 'auto')"
        )
    if options.cache_breakpoints:
        raise ConfigError(
            f"{adapter} takes no cache breakpoints (it caches prompt prefixes by itself): "
            "leave cache_breakpoints unset"
        )
    for value, name, field in (
        (options.cache_key, key, "cache_key"),
        (options.cache_retention, retention, "cache_retention"),
    ):
        if value is None:
            continue
        if name is None:
            raise ConfigError(
                f"{adapter} has no {field}: leave it unset (refusing it beats dropping it)"
            )
        written.put(name, value, field)


def split_system(messages: Iterable[Message]) -> tuple[str | None, list[Message]]:
    """The one rule for system messages, which every encoder applies: ``(system, others)``.

    ``system`` is the texts of every system message of ``messages``, wherever it stands, in
    order, joined by a blank line (:data:`SYSTEM_SEPARATOR`) -- empty texts left out, so an
    all-empty set gives ``""`` -- or ``None`` when there is no system message at all. ``others``
    are the other messages, in their order. An encoder sends ``system`` as its format's one
    system message, first (or its one system field), so a request never carries two system
    roles, and a system message's position among the others is not kept. Not part of the
    public API (the rule is documented in ``docs/context.md``)."""
    texts: list[str] | None = None
    others: list[Message] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            if texts is None:
                texts = []
            if message.content:
                texts.append(message.content)
        else:
            others.append(message)
    return (None if texts is None else SYSTEM_SEPARATOR.join(texts)), others


# (magic prefix, media type); WebP is RIFF....WEBP, checked separately.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_media_type(payload: str) -> str:
    """The media type of a base64 image payload, from its first bytes.

    Guarantees: one of ``image/png``, ``image/jpeg``, ``image/gif``, ``image/webp``; a payload that
    is none of those (or not base64) is reported as ``image/png``, the type every vendor accepts,
    leaving the vendor to refuse a bad image with its own error. A ``data:`` URL's declared type is
    returned as given.
    """
    if payload.startswith("data:"):
        declared = payload[5:].split(";", 1)[0].split(",", 1)[0]
        return declared or "image/png"
    return sniff_image(payload) or "image/png"


def sniff_image(payload: str) -> str | None:
    """The media type a bare base64 image payload's first bytes show (``image/png``,
    ``image/jpeg``, ``image/gif`` or ``image/webp``), or ``None`` when they show none of those
    or are not base64. Not part of the public API."""
    try:
        head = base64.b64decode(payload[:24] + "=" * (-len(payload[:24]) % 4), validate=False)
    except (binascii.Error, ValueError):
        return None
    for magic, media_type in _MAGIC:
        if head.startswith(magic):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def data_url(image: str) -> str:
    """``image`` (a base64 payload or a ``data:`` URL) as a ``data:`` URL: one given as a URL is
    kept as it is, a bare payload gets the media type its bytes show (:func:`image_media_type`).
    Not part of the public API."""
    if image.startswith("data:"):
        return image
    return f"data:{image_media_type(image)};base64,{image}"


def label(value: Any) -> str | None:
    """A vendor's error type or code as text: a non-empty string as it is, an integer written
    out, anything else ``None``. Not part of the public API."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


#: Statuses worth retrying: timeouts, conflicts, too early, rate limits, transient server errors.
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

_CONTEXT_WORDS = (
    "context length",
    "context_length",
    "context window",
    "too long",
    "too many tokens",
    "maximum number of tokens",  # Gemini: "... exceeds the maximum number of tokens allowed"
)


def classify_status(status: int, message: str = "") -> tuple[str, bool]:
    """The error ``code`` and ``retryable`` flag for an HTTP error status.

    400 is ``context_overflow`` when the vendor's message says the prompt is too long, else
    ``bad_request``; 401/403 ``auth``; 404 ``model_not_found``; 429 ``rate_limit``; 408, 409,
    425, 500, 502, 503, 504 retryable (``server_error`` for 5xx, ``transient`` otherwise); any
    other status is not retryable (``bad_request`` for 4xx, ``server_error`` for 5xx).
    """
    lowered = message.lower()
    if status == 400 and any(word in lowered for word in _CONTEXT_WORDS):
        return "context_overflow", False
    if status in (401, 403):
        return "auth", False
    if status == 404:
        return "model_not_found", False
    if status == 429:
        return "rate_limit", True
    if status in RETRYABLE_STATUSES:
        return ("server_error" if status >= 500 else "transient"), True
    return ("server_error" if status >= 500 else "bad_request"), False
