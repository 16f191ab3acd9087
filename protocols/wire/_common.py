"""Small pure helpers shared by the vendor wire modules."""

from __future__ import annotations

import base64
import binascii

__all__ = ["image_media_type"]

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
    try:
        head = base64.b64decode(payload[:24] + "=" * (-len(payload[:24]) % 4), validate=False)
    except (binascii.Error, ValueError):
        return "image/png"
    for magic, media_type in _MAGIC:
        if head.startswith(magic):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"
