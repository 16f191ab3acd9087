"""Strict JSON: what crosses a wire is finite, well-formed and UTF-8 encodable.

The standard library's ``json`` is the engine (C-accelerated); this module adds the checks it leaves
out: ``NaN``/``Infinity`` and overflowing numbers (``1e999``) are refused, duplicate object keys are
refused, non-string keys and non-JSON Python values are refused on the way out, lone surrogates are
replaced by U+FFFD both ways, and nesting depth is bounded. Written here rather than taken from a
library because it must stay sans-IO and dependency-free, and because no maintained JSON library
offers exactly this set of refusals.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from .errors import Category, ProtocolError, ValidationError

__all__ = ["JSON", "MAX_DEPTH", "check_json", "dumpb", "dumps", "json_kind", "loads"]

#: A JSON value as Python sees it: ``dict``/``list`` (``tuple`` accepted on input), ``str``,
#: ``int``, ``float`` (finite), ``bool`` or ``None``.
JSON: TypeAlias = Any

#: The deepest nesting of arrays/objects accepted in either direction.
MAX_DEPTH = 200

_SURROGATE = re.compile("[\ud800-\udfff]")
# A \u escape of a surrogate code unit in JSON text; the only way JSON text yields a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} overflows to infinity")
    return value


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate object key {key[:80]!r}")
            seen.add(key)
    return result


_DECODER = json.JSONDecoder(
    parse_constant=_refuse_constant,
    parse_float=_parse_float,
    object_pairs_hook=_pairs,
    strict=True,
)


# The same decoder without the duplicate-key hook, for callers that prove key uniqueness another
# way (see loads_object_unchecked); NaN/Infinity and overflowing numbers are still refused.
_PLAIN_DECODER = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_float=_parse_float, strict=True
)


_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
# The decoder's C scanner, called directly: decode() adds two regex matches and two Python calls.
_scan_once: Callable[[str, int], tuple[Any, int]] = _PLAIN_DECODER.scan_once  # type: ignore[attr-defined]


def loads_object_unchecked(text: str) -> dict[str, Any] | None:
    """A fast path of :func:`loads` for short stream records: the JSON object ``text`` holds,
    or ``None`` when the caller must use :func:`loads` instead (not an object, not JSON, or
    text the checks below cannot vouch for).

    The object is parsed without the duplicate-key hook, so the caller MUST confirm that the
    total number of keys of all objects in it equals ``text.count(":")`` (colons inside strings
    accounted for, when ``text`` has no ``\\u`` escape) before trusting it, and fall back to
    :func:`loads` otherwise. That is sound: every key in the text is followed by exactly one
    structural colon and every other colon sits inside a string, so when the colons equal the
    keys that survived parsing (plus their strings' colons), no key was collapsed into a
    duplicate. NaN, Infinity and overflowing numbers are refused as by :func:`loads`; text that
    holds (an escape of) a surrogate or more than :data:`MAX_DEPTH` brackets goes to
    :func:`loads` (surrogate repair and the depth check live there).
    """
    if text[:1] != "{" or _may_hold_surrogates(text):
        return None
    if len(text) > MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH:
        return None
    try:
        value, end = _scan_once(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    if end != len(text) and text[end:].strip(" \t\n\r"):
        return None
    return value if type(value) is dict else None


def scan_string(text: str, start: int) -> tuple[str, int] | None:
    """``(value, end)`` of the JSON string token that starts at ``text[start]`` and ends just
    before ``text[end]``; ``None`` when no valid string token starts there."""
    if text[start : start + 1] != '"':
        return None
    try:
        return _scanstring(text, start + 1, True)
    except ValueError:
        return None


def string_token(text: str, start: int, stop: int) -> str | None:
    """The value of the JSON string token that spans exactly ``text[start:stop]``, or ``None``
    when that span is not one whole, valid string token, or its value holds a lone surrogate
    (which :func:`loads` would repair; the caller should use it instead)."""
    scanned = scan_string(text, start)
    if scanned is None or scanned[1] != stop:
        return None
    value = scanned[0]
    if not value.isascii() and _SURROGATE.search(value):
        return None
    return value


def _may_hold_surrogates(text: str) -> bool:
    # Cheapest first: stream records are mostly ASCII without escapes (both checks O(1)/C-speed).
    return ("\\u" in text and _SURROGATE_ESCAPE.search(text) is not None) or (
        not text.isascii() and _SURROGATE.search(text) is not None
    )


def _repair_str(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


def _int_too_long(value: int) -> bool:
    # Below ~13,000 bits an int has fewer than 4,000 digits: under any sane int-string limit, so
    # the (costly) exact check runs only for enormous values.
    if value.bit_length() < 13_000:
        return False
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        return False
    try:
        int.__repr__(value)
    except ValueError:
        return True
    return False


def _depth_ok(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def loads(
    data: str | bytes | bytearray | memoryview, *, category: Category = Category.PROVIDER
) -> JSON:
    """Parse one JSON document strictly.

    Guarantees: the result contains only ``dict`` (string keys), ``list``, ``str`` without lone
    surrogates, ``int``, finite ``float``, ``bool`` and ``None``, nested at most
    :data:`MAX_DEPTH` deep. Anything else -- invalid UTF-8, ``NaN``, ``Infinity``, ``1e999``,
    duplicate keys, trailing data, over-deep nesting -- raises :class:`ProtocolError` (with
    ``code="json"`` and the given ``category``) whose message says what and where.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(
                f"invalid JSON: not UTF-8 at byte {exc.start}", code="json", category=category
            ) from None
    else:
        text = data
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise ProtocolError(
            f"invalid JSON: nested deeper than {MAX_DEPTH}", code="json", category=category
        ) from None
    except ValueError as exc:
        # json.JSONDecodeError carries a position; errors from our hooks carry their own message.
        detail = str(exc)
        raise ProtocolError(f"invalid JSON: {detail}", code="json", category=category) from None
    # Only text with more brackets than the limit can nest that deep; skip the walk otherwise.
    if (
        len(text) > MAX_DEPTH
        and text.count("[") + text.count("{") > MAX_DEPTH
        and not _depth_ok(value, MAX_DEPTH)
    ):
        raise ProtocolError(
            f"invalid JSON: nested deeper than {MAX_DEPTH}", code="json", category=category
        )
    if _may_hold_surrogates(text):
        # The same walk dumps() uses: repairs strings and keys, refuses keys the repair merges.
        try:
            value = check_json(value)
        except ValidationError as exc:
            raise ProtocolError(
                f"invalid JSON: {exc.message}", code="json", category=category
            ) from None
    return value


def check_json(value: Any, *, what: str = "value") -> Any:
    """Validate that ``value`` is strict JSON and return it, repaired if it held lone surrogates.

    Guarantees: the returned value serialises with :func:`dumps` and is what :func:`loads` gives
    back from that text: it is ``value`` itself when nothing needed changing, otherwise a copy
    (the input is never mutated) in which lone surrogates are replaced by U+FFFD and tuples are
    lists. Raises :class:`ValidationError` naming the path of the first offending item: a
    non-finite float, an integer too long to print, a non-string key, two keys that become equal
    by the repair, an unsupported type, a cycle, or nesting deeper than :data:`MAX_DEPTH`.
    """
    try:
        return _check_fast(value, 0, set())
    except _Unusual:
        # Something to refuse (or an unusual type): the full walk says what, and where.
        return _check(value, what, 0, set())


class _Unusual(Exception):
    """Raised by the fast walk for anything it leaves to the full one."""


def _check_fast(value: Any, depth: int, active: set[int]) -> Any:
    """:func:`_check` for the common case, in a fraction of the time: exact built-in types
    only, no path strings, and the surrogate scan only for non-ASCII text. Anything else --
    including every error -- raises :class:`_Unusual`, and the caller runs :func:`_check`,
    which gives the same result for everything this accepts."""
    kind = type(value)
    if kind is str:
        if value.isascii() or not _SURROGATE.search(value):
            return value
        return _repair_str(value)
    if value is None or value is True or value is False:
        return value
    if kind is int:
        if value.bit_length() >= 13_000:
            raise _Unusual
        return value
    if kind is float:
        if value - value != 0.0:  # inf - inf and nan - nan are nan
            raise _Unusual
        return value
    if depth >= MAX_DEPTH or id(value) in active:
        raise _Unusual
    if kind is dict:
        active.add(id(value))
        changed = False
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual
            new_key = key if key.isascii() or not _SURROGATE.search(key) else _repair_str(key)
            new_item = _check_fast(item, depth + 1, active)
            if new_key is not key or new_item is not item:
                changed = True
                if new_key in out or (new_key is not key and new_key in value):
                    raise _Unusual
            out[new_key] = new_item
        active.discard(id(value))
        return out if changed else value
    if kind is list or kind is tuple:
        active.add(id(value))
        items = [_check_fast(item, depth + 1, active) for item in value]
        active.discard(id(value))
        if kind is tuple or any(new is not old for new, old in zip(items, value, strict=True)):
            return items
        return value
    raise _Unusual


def _check(value: Any, path: str, depth: int, active: set[int]) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if _int_too_long(value):
            raise ValidationError(f"{path}: integer has too many digits to write as JSON")
        return value
    if isinstance(value, str):
        return _repair_str(value) if _SURROGATE.search(value) else value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{path}: {value!r} is not a finite number")
        return value
    if depth >= MAX_DEPTH:
        raise ValidationError(f"{path}: nested deeper than {MAX_DEPTH}")
    if isinstance(value, Mapping):
        if id(value) in active:
            raise ValidationError(f"{path}: contains itself (a cycle)")
        active.add(id(value))
        changed = False
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(f"{path}: object key {key!r} is not a string")
            new_key = _repair_str(key) if _SURROGATE.search(key) else key
            new_item = _check(item, f"{path}.{new_key}", depth + 1, active)
            changed = changed or new_key is not key or new_item is not item
            if new_key in out:
                raise ValidationError(f"{path}: duplicate object key {new_key!r} after repair")
            out[new_key] = new_item
        active.discard(id(value))
        if changed or not isinstance(value, dict):
            return out
        return value
    if isinstance(value, list | tuple):
        if id(value) in active:
            raise ValidationError(f"{path}: contains itself (a cycle)")
        active.add(id(value))
        items = [_check(item, f"{path}[{i}]", depth + 1, active) for i, item in enumerate(value)]
        active.discard(id(value))
        if isinstance(value, tuple) or any(
            new is not old for new, old in zip(items, value, strict=True)
        ):
            return items
        return value
    raise ValidationError(f"{path}: {type(value).__name__} is not a JSON type")


def dumps(value: Any, *, canonical: bool = False) -> str:
    """Serialise ``value`` as compact strict JSON text (non-ASCII kept as is).

    Guarantees: the output parses with :func:`loads` to an equal value (tuples become lists, lone
    surrogates become U+FFFD) and encodes to UTF-8. With ``canonical=True`` object keys are sorted,
    so equal values give identical text -- the form to hash for digests. Raises
    :class:`ValidationError` for anything that is not strict JSON (see :func:`check_json`).
    """
    clean = check_json(value)
    return (_CANONICAL_CHECKED if canonical else _COMPACT)(clean)


# What json.dumps makes afresh on every call with these settings, made once.
_OWN_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_ENCODE = _OWN_ENCODER.encode
_CANONICAL_ENCODE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
).encode


def _compact(sort_keys: bool) -> Callable[[Any], str]:
    """``_ENCODE`` (``_CANONICAL_ENCODE`` with ``sort_keys``) without what ``JSONEncoder.encode``
    makes afresh on every call -- its C encoder and a closure, half its time for a small
    value: the C encoder made once, with no cycle check (a cycle raises ``RecursionError``, as
    nesting too deep does; ``NaN`` raises ``ValueError``, a type that is not JSON
    ``TypeError``). The same text; without the C encoder, ``JSONEncoder``'s own."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython has it
        return _CANONICAL_ENCODE if sort_keys else _ENCODE
    encoder = make(
        None, _not_json, json.encoder.encode_basestring, None, ":", ",", sort_keys, False, False
    )

    def encode(value: Any) -> str:
        return "".join(encoder(value, 0))

    return encode


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: Compact JSON text of a value; canonical (keys sorted) JSON text (see :func:`_compact`).
_COMPACT = _compact(False)
_CANONICAL_CHECKED = _compact(True)


def dumps_own(value: Any) -> str:
    """:func:`dumps` of JSON data this library built itself -- :func:`~protocols.codec.to_json`
    of a record or a journal entry, whose JSON-typed fields were checked when the object was
    made -- the same text, without :func:`check_json`'s walk in Python. Anything the fast
    encoding refuses (a non-finite number, a cycle, a type that is not JSON, an integer too
    long to write) and any text that may hold a lone surrogate or nest deeper than
    :data:`MAX_DEPTH` goes through :func:`dumps`, which repairs or refuses it. Not for values
    from outside: a number key would be written as a string where :func:`dumps` refuses it."""
    try:
        text = _COMPACT(value)
    except (ValueError, TypeError, RecursionError):
        return dumps(value)
    if (not text.isascii() and _SURROGATE.search(text) is not None) or (
        len(text) > MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH
    ):
        return dumps(value)
    return text


def dumpb(value: Any, *, canonical: bool = False) -> bytes:
    """:func:`dumps`, encoded as UTF-8 bytes."""
    return dumps(value, canonical=canonical).encode("utf-8")


def dumpb_own(value: Any) -> bytes:
    """:func:`dumpb` of a value this library built itself from checked parts -- a protocol
    encoder's event: dicts with string keys holding checked JSON (a tool call's arguments),
    strings, numbers -- without walking it in Python first (the hot path of the served
    protocols: an event per delta). The same bytes as :func:`dumpb`: anything the fast
    encoding refuses or cannot encode (a lone surrogate in a string, NaN, a cycle) goes
    through :func:`dumpb`, which repairs or refuses it. Not for values from outside: it does
    not refuse non-string keys (it converts them), nor bound depth or integer size."""
    try:
        return _COMPACT(value).encode("utf-8")
    except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
        return dumpb(value)


def json_kind(value: Any) -> str:
    """A short description of a value's JSON type for error messages: ``"null"``,
    ``"a boolean"``, ``"an integer"``, ``"a number"``, ``"a string"``, ``"an array"``,
    ``"an object"``, or ``"a <type> (not JSON)"``. Bounded: it never includes the value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__} (not JSON)"
