"""The stores' fast encoder (``protocols._json.dumps_own``) against the strict codec, the
reference of what is valid: for any value it gives exactly the text ``protocols.codec.dumps``
gives, or raises what it raises; and a record or journal entry is stored as the codec encodes
it, and decodes back to itself."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.durable._store import (
    decode_entry,
    decode_record,
    encode_admitted,
    encode_checked,
    encode_entry,
)
from protocols._json import dumps_own
from protocols.codec import MAX_DEPTH, dumps, encode, loads
from protocols.errors import ValidationError
from protocols.jobs import AgentJob, Entry, IntentEntry, ResponseEntry, TerminalEntry, admit
from protocols.jobs._journal import entry_to_json
from protocols.messages import Message, ToolCall, Usage

# Text with lone surrogates, non-ASCII and escapes; numbers non-finite, huge and negative zero.
_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    _TEXT,
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_TEXT, inner, max_size=4),
    ),
    max_leaves=30,
)


def _outcome(encode: Any, value: Any) -> tuple[str, str]:
    try:
        return "text", encode(value)
    except ValidationError as exc:
        return "refused", exc.message


def _both(value: Any) -> tuple[tuple[str, str], tuple[str, str]]:
    """What the fast encoder and the codec each make of ``value``: text, or a refusal."""
    return _outcome(dumps_own, value), _outcome(dumps, value)


@settings(max_examples=400, deadline=None)
@given(_JSON)
def test_the_fast_encoder_gives_the_codecs_text_or_its_error(value: Any) -> None:
    fast, codec = _both(value)
    assert fast == codec


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        {"a": [math.inf]},
        "lone \ud800 surrogate",
        {"k\udc00": 1},
        10**5000,
        object(),
        {"n": -0.0, "e": 1e16, "s": "ü\u2028\x00"},
    ],
    ids=["nan", "inf", "surrogate", "surrogate-key", "huge-int", "object", "plain"],
)
def test_the_fast_encoder_on_what_the_codec_repairs_or_refuses(value: Any) -> None:
    fast, codec = _both(value)
    assert fast == codec


def _nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"x": value}
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 50])
def test_the_fast_encoder_bounds_depth_as_the_codec_does(depth: int) -> None:
    fast, codec = _both(_nested(depth))
    assert fast == codec


def test_a_cycle_is_refused_as_the_codec_refuses_it() -> None:
    looped: list[Any] = []
    looped.append(looped)
    fast, codec = _both(looped)
    assert fast == codec


@settings(max_examples=100, deadline=None)
@given(text=_TEXT, arguments=st.dictionaries(_TEXT, _SCALARS, max_size=3))
def test_records_and_entries_are_stored_as_the_codec_encodes_them(
    text: str, arguments: dict[str, Any]
) -> None:
    try:
        call = ToolCall("c1", "add", arguments)
    except ValidationError:
        return  # (a value the model refuses to hold: nothing to store)
    record = admit("job-1", AgentJob.ask("calculator", text), sequence=1, now=0.0)
    stored = encode_checked(record, 1 << 24, "a record")
    assert stored == encode(record)
    # A lone surrogate is stored repaired (U+FFFD, as the codec repairs it): what is read back
    # is then the repaired value, which is stored again as the same text.
    whole = not _surrogates(text) and not _surrogates(arguments)
    decoded = decode_record("job-1", stored)
    assert decoded == record if whole else encode(decoded) == stored
    entries: list[Entry] = [
        ResponseEntry(Message.assistant(text, calls=(call,)), Usage(prompt=10, completion=8)),
        IntentEntry(call, "key-1"),
        TerminalEntry(None, None, text),
    ]
    for entry in entries:
        stored = encode_entry(entry, 1 << 24, at=1.5)
        data = entry_to_json(entry)
        data["at"] = 1.5
        assert stored == dumps(data)
        assert loads(stored)["at"] == 1.5
        back = decode_entry("job-1", stored)
        assert back == entry if whole else encode_entry(back, 1 << 24, at=1.5) == stored


@settings(max_examples=100, deadline=None)
@given(text=_TEXT, metadata=st.dictionaries(_TEXT, _JSON, max_size=3))
def test_an_admitted_record_and_its_jobs_text_are_the_stored_ones(
    text: str, metadata: dict[str, Any]
) -> None:
    # The memory store keeps a job's text at admission (the base of its successor checks):
    # it must be the job's encoding as the stored record holds it, or a later write would be
    # compared with a job that is not the stored one.
    try:
        job = AgentJob.ask("calculator", text, metadata=metadata)
    except ValidationError:
        return  # (a value the model refuses to hold: nothing to admit)
    record = admit("job-1", job, sequence=1, now=0.0)
    stored, job_text = encode_admitted(record, 1 << 24)
    assert stored == encode_checked(record, 1 << 24, "a record")
    assert job_text == dumps_own(loads(stored)["job"])
    # (Read back and admitted again, a record gives the same texts: a lone surrogate is
    # stored repaired, and the repaired value encodes as stored.)
    assert encode_admitted(decode_record("job-1", stored), 1 << 24) == (stored, job_text)


def _surrogates(value: Any) -> bool:
    """Whether any text in ``value`` (keys too) holds a surrogate code point."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_surrogates(k) or _surrogates(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_surrogates(item) for item in value)
    return False
