"""MCP tools in our data model, sans-IO: listings read into tool definitions, results into tool
results, and our results written back as MCP's.

Everything here works on the JSON shapes the Model Context Protocol puts on the wire (plain
dicts, with its camelCase keys), so it is tested without an SDK, an event loop or a server. The
runtime half (:mod:`actors.mcp`) turns the SDK's objects into these dicts.

What a model sees of an MCP result is text or JSON, and the result's images: an image part the
model can be shown (PNG, JPEG, GIF or WebP, within :data:`MAX_RESULT_IMAGES` and
:data:`MAX_RESULT_IMAGE_CHARS`) goes on the tool result as an image, which each vendor's encoder
sends as an image. Any other image, audio or binary resource is named in the text by its media
type and size rather than sent as base64 the model would have to read as tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from .errors import ValidationError
from .messages import ToolDefinition, ToolFailure, ToolResult, ToolSuccess
from .wire._common import image_media_type, sniff_image

__all__ = [
    "MAX_PROBLEM_CHARS",
    "MAX_RESULT_CHARS",
    "MAX_RESULT_IMAGES",
    "MAX_RESULT_IMAGE_CHARS",
    "MAX_TOOLS",
    "Listing",
    "content_text",
    "describe_problems",
    "local_name",
    "read_listing",
    "read_result",
    "shown_name",
    "write_result",
]

#: The most characters of one MCP result a model is given (the rest is cut, and the cut said).
MAX_RESULT_CHARS: Final = 100_000

#: The most images of one MCP result a model is given (the rest are noted in the text).
MAX_RESULT_IMAGES: Final = 8

#: The most characters of base64 the images of one MCP result hold together, 5 MiB (an image
#: that would pass it is noted in the text instead).
MAX_RESULT_IMAGE_CHARS: Final = 5 * 1024 * 1024

#: The most tools taken from one server (the rest are left out, and that said).
MAX_TOOLS: Final = 1000

#: The most characters :func:`describe_problems` gives.
MAX_PROBLEM_CHARS: Final = 300

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_NAME_LIMIT: Final = 64


def local_name(remote: str, prefix: str = "") -> str | None:
    """The name a model calls the MCP tool ``remote`` by: ``prefix`` then ``remote`` with every
    character a tool name may not hold (anything but letters, digits, ``_`` and ``-``) made
    ``_``; ``None`` when that is empty or longer than 64 characters (such a tool is left out)."""
    name = prefix + _UNSAFE.sub("_", remote)
    if not remote or len(name) > _NAME_LIMIT:
        return None
    return name


def shown_name(name: object) -> str:
    """A tool's name as a server sent it (any JSON value), for a message: its ``repr``, cut
    to 80 characters."""
    text = repr(name)
    return text if len(text) <= _SHOWN_NAME else text[: _SHOWN_NAME - 3] + "..."


_SHOWN_NAME: Final = 80


@attrs.frozen
class Listing:
    """A server's tool list read into definitions: ``tools`` maps each local name to its
    definition and ``remote`` to the server's own name for it; ``skipped`` says, one line per
    tool, why a tool was left out."""

    tools: dict[str, ToolDefinition]
    remote: dict[str, str]
    skipped: tuple[str, ...]


def read_listing(
    tools: Iterable[Mapping[str, Any]], *, prefix: str = "", taken: Iterable[str] = ()
) -> Listing:
    """Read the ``tools`` of ``tools/list`` answers (each ``{"name", "description",
    "inputSchema", ...}``) into definitions named by :func:`local_name`.

    Guarantees: never raises for what a server sends. A tool is left out -- and the reason
    recorded in ``skipped`` -- when its name cannot be made a tool name, when it would take a
    name in ``taken`` (tools not from this server) or one an earlier tool of the list took,
    or when its input schema is not a valid object schema, and every tool after the first
    :data:`MAX_TOOLS` kept; each reason is one line of at most :data:`MAX_PROBLEM_CHARS`
    characters. Unknown fields are ignored.
    """
    blocked = set(taken)
    definitions: dict[str, ToolDefinition] = {}
    remote: dict[str, str] = {}
    skipped: list[str] = []
    for entry in tools:
        if len(definitions) >= MAX_TOOLS:
            skipped.append(
                f"{shown_name(entry.get('name'))}: the server lists more than {MAX_TOOLS} tools"
            )
            continue
        raw_name = entry.get("name")
        if not isinstance(raw_name, str):
            skipped.append(f"{shown_name(raw_name)}: the tool's name is not a string")
            continue
        name = local_name(raw_name, prefix)
        if name is None:
            skipped.append(f"{shown_name(raw_name)}: not a usable tool name (empty or too long)")
            continue
        if name in blocked:
            skipped.append(f"{shown_name(raw_name)}: its name {name!r} is taken by another tool")
            continue
        if name in definitions:
            skipped.append(
                f"{shown_name(raw_name)}: its name {name!r} is taken by {remote[name]!r}"
            )
            continue
        description = entry.get("description")
        schema = entry.get("inputSchema")
        if schema is None:
            schema = {"type": "object"}
        try:
            definition = ToolDefinition(
                name=name,
                description=description if isinstance(description, str) else "",
                parameters=schema,
            )
        except (ValidationError, TypeError, ValueError) as error:
            skipped.append(f"{shown_name(raw_name)}: its input schema is not usable: {error}")
            continue
        definitions[name] = definition
        remote[name] = raw_name
    return Listing(definitions, remote, tuple(_one_line(line) for line in skipped))


def describe_problems(problems: Sequence[Any], *, skip: int = 0) -> str:
    """What is wrong with something a server sent, from a validator's problems (each a mapping
    with a ``loc`` -- a path of keys and indexes -- and a ``msg``, as pydantic gives them), in
    one line a person reads: where the first problem is (its path less the first ``skip``
    parts) and what it is, and how many more there are.

    Guarantees: one line (whitespace runs made one space) of at most
    :data:`MAX_PROBLEM_CHARS` characters, holding only the first problem's path and message;
    never raises for what it is given.
    """
    first = next((p for p in problems if isinstance(p, Mapping)), None)
    if first is None:
        return "not valid"
    loc = first.get("loc")
    parts = tuple(loc)[skip:] if isinstance(loc, list | tuple) else ()
    where = ".".join(str(part) for part in parts)
    message = first.get("msg")
    what = message if isinstance(message, str) and message.strip() else "not valid"
    text = f"{where}: {what}" if where else what
    if len(problems) > 1:
        text += f" (and {len(problems) - 1} more)"
    return _one_line(text)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_PROBLEM_CHARS:
        text = text[: MAX_PROBLEM_CHARS - 3] + "..."
    return text


def _size(data: object) -> str:
    if not isinstance(data, str):
        return "unknown size"
    # The decoded size of base64 text: three bytes per four characters, less the padding.
    return f"{len(data) * 3 // 4 - len(data) + len(data.rstrip('='))} bytes"


def _part_text(part: Mapping[str, Any]) -> str:
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        return text if isinstance(text, str) else ""
    if kind in ("image", "audio"):
        media = part.get("mimeType") or "unknown type"
        return f"[{kind}: {media}, {_size(part.get('data'))}, not shown]"
    if kind == "resource_link":
        return f"[resource: {part.get('uri')}]"
    if kind == "resource":
        resource = part.get("resource")
        if isinstance(resource, Mapping):
            text = resource.get("text")
            if isinstance(text, str):
                return text
            media = resource.get("mimeType") or "unknown type"
            blob = resource.get("blob")
            return f"[resource {resource.get('uri')}: {media}, {_size(blob)}, not shown]"
    return f"[{kind} content, not shown]"


def content_text(content: Sequence[Mapping[str, Any]], *, limit: int = MAX_RESULT_CHARS) -> str:
    """The text of MCP ``content`` parts, one part per paragraph: text as is, an embedded text
    resource's text, and for an image, audio or binary resource a bracketed note of its media
    type and size. Cut at ``limit`` characters, with the cut said at the end."""
    return _cut(
        "\n\n".join(_part_text(part) for part in content if isinstance(part, Mapping)), limit
    )


def _cut(text: str, limit: int) -> str:
    if len(text) > limit:
        text = text[:limit] + f"\n[... cut: the result had {len(text)} characters]"
    return text


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _shown(part: Mapping[str, Any]) -> str | None:
    """An image part as a ``data:`` URL a model can be shown: its ``data`` is base64 whose bytes
    are a PNG, JPEG, GIF or WebP image (the bytes decide the media type, not ``mimeType``);
    ``None`` otherwise."""
    data = part.get("data")
    if not isinstance(data, str) or not data or len(data) % 4 or not _BASE64.fullmatch(data):
        return None
    media = sniff_image(data)
    return None if media is None else f"data:{media};base64,{data}"


def _read_content(content: Sequence[Any], limit: int) -> tuple[str, tuple[str, ...]]:
    """The text of ``content`` (as :func:`content_text`) without the images a model is shown,
    and those images, at most :data:`MAX_RESULT_IMAGES` of at most
    :data:`MAX_RESULT_IMAGE_CHARS` of base64 together, in order."""
    texts: list[str] = []
    images: list[str] = []
    room = MAX_RESULT_IMAGE_CHARS
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "image" and len(images) < MAX_RESULT_IMAGES:
            data = part.get("data")
            if isinstance(data, str) and len(data) <= room:
                shown = _shown(part)
                if shown is not None:
                    images.append(shown)
                    room -= len(data)
                    continue
        texts.append(_part_text(part))
    return _cut("\n\n".join(texts), limit), tuple(images)


def read_result(
    call_id: str, name: str, result: Mapping[str, Any], *, limit: int = MAX_RESULT_CHARS
) -> ToolResult:
    """The result a model sees of one MCP ``tools/call`` answer (``{"content", "isError",
    "structuredContent"}``) to the call ``call_id`` of tool ``name``.

    Guarantees: an ``isError`` answer is a :class:`~protocols.messages.ToolFailure` whose error
    is the answer's text (never empty; an image in it is only noted); otherwise a
    :class:`~protocols.messages.ToolSuccess` whose value is the content's text -- what the
    server wrote for a model, of which the protocol makes ``structuredContent`` the
    machine-readable twin -- or, when the content holds no text at all, the
    ``structuredContent`` itself (any JSON value). The success's ``images`` are its image parts
    a model can be shown, in order, each a ``data:`` URL: base64 of a PNG, JPEG, GIF or WebP
    image (its media type read from its bytes), the first :data:`MAX_RESULT_IMAGES` of them
    whose base64 fits in :data:`MAX_RESULT_IMAGE_CHARS` together. Every other part is in the
    text as :func:`content_text` gives it (an image left out is noted there with its media type
    and size). Never raises for what a server sends.
    """
    raw_content = result.get("content")
    content = raw_content if isinstance(raw_content, list) else []
    if result.get("isError") is True:
        text = content_text(content, limit=limit)
        return ToolFailure(id=call_id, name=name, error=text or f"{name} failed (no message)")
    text, images = _read_content(content, limit)
    structured = result.get("structuredContent")
    if structured is not None and not text.strip():
        try:
            return ToolSuccess(id=call_id, name=name, value=structured, images=images)
        except (ValidationError, TypeError, ValueError):
            pass  # not strict JSON: the (empty) text is all the model gets
    return ToolSuccess(id=call_id, name=name, value=text, images=images)


def write_result(result: ToolResult) -> dict[str, Any]:
    """One of our tool results as the answer of an MCP ``tools/call``: its rendered text as one
    text part, then a success's images as image parts (base64 ``data`` and its ``mimeType``:
    a ``data:`` URL's declared type, a bare payload's sniffed), ``isError`` for a failure, and a
    success's value as ``structuredContent`` when it is a JSON object."""
    content: list[dict[str, Any]] = [{"type": "text", "text": result.render()}]
    if isinstance(result, ToolSuccess):
        content.extend(_image_part(image) for image in result.images)
    answer: dict[str, Any] = {"content": content, "isError": not result.ok}
    if isinstance(result, ToolSuccess) and isinstance(result.value, dict):
        answer["structuredContent"] = result.value
    return answer


def _image_part(image: str) -> dict[str, Any]:
    data = image.partition(",")[2] if image.startswith("data:") else image
    return {"type": "image", "data": data, "mimeType": image_media_type(image)}
