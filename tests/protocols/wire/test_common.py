"""image_media_type: the media type of a base64 image, from its magic bytes."""

from __future__ import annotations

import base64

import pytest

from protocols.wire import image_media_type


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("payload", "media_type"),
    [
        (b64(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16), "image/png"),
        (b64(b"\xff\xd8\xff\xe0" + b"\x00" * 16), "image/jpeg"),
        (b64(b"GIF87a" + b"\x00" * 16), "image/gif"),
        (b64(b"GIF89a" + b"\x00" * 16), "image/gif"),
        (b64(b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 8), "image/webp"),
        (b64(b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 8), "image/png"),  # RIFF, not WebP
        (b64(b"plain text, not an image"), "image/png"),
        ("!!!not base64!!!", "image/png"),
        ("A", "image/png"),  # too short to decode cleanly
        ("", "image/png"),
        ("data:image/webp;base64,UklGRg==", "image/webp"),
        ("data:;base64,AAAA", "image/png"),
    ],
)
def test_media_type(payload: str, media_type: str) -> None:
    assert image_media_type(payload) == media_type
