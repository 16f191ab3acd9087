"""Tests for protocols.ndjson: explicit cases for each rule, then property tests."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import Category, ProtocolError, SizeLimitError
from protocols.ndjson import NDJSONDecoder


def decode(*chunks: bytes, **kwargs: Any) -> list[Any]:
    """Feed each chunk, then close; return every value in order."""
    decoder = NDJSONDecoder(**kwargs)
    values: list[Any] = []
    for chunk in chunks:
        values.extend(decoder.feed(chunk))
    values.extend(decoder.close())
    return values


# --------------------------------------------------------------------------- lines


def test_values_of_complete_lines() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b'{"a": 1}\n[1, 2]\n"s"\n3.5\nnull\ntrue\n') == [
        {"a": 1},
        [1, 2],
        "s",
        3.5,
        None,
        True,
    ]
    assert decoder.lines == 6


def test_partial_lines_wait_for_their_end() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b'{"a"') == []
    assert decoder.feed(b": [1,") == []
    assert decoder.lines == 0
    assert decoder.feed(b" 2]}\n{") == [{"a": [1, 2]}]
    assert decoder.lines == 1
    assert decoder.feed(b"}\n") == [{}]


def test_crlf_is_stripped() -> None:
    assert decode(b"1\r\n2\r\n") == [1, 2]
    assert decode(b"1\r", b"\n2\r\n") == [1, 2]


def test_cr_alone_does_not_end_a_line() -> None:
    with pytest.raises(ProtocolError, match="line 1"):
        decode(b"1\r2\n")


def test_blank_and_whitespace_lines_are_skipped_but_counted() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b"\n1\n \t \n\r\n\n2\n") == [1, 2]
    assert decoder.lines == 6
    with pytest.raises(ProtocolError, match="line 8"):
        decoder.feed(b"\nnope\n")


def test_surrounding_whitespace_is_allowed() -> None:
    assert decode(b'  {"a": 1}  \t\n') == [{"a": 1}]


def test_unterminated_final_line_is_recovered_at_close() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b'1\n{"last": true}') == [1]
    assert decoder.lines == 1
    assert decoder.close() == [{"last": True}]
    assert decoder.lines == 2
    assert decode(b"1\n2\r") == [1, 2]
    assert decode(b"1\n   ") == [1]


def test_close_without_pending_line() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b"1\n") == [1]
    assert decoder.close() == []
    assert decoder.lines == 1


def test_close_is_idempotent_and_feed_after_close_raises() -> None:
    decoder = NDJSONDecoder()
    decoder.feed(b"7")
    assert decoder.close() == [7]
    assert decoder.close() == []
    with pytest.raises(ProtocolError, match="closed") as info:
        decoder.feed(b"8\n")
    assert info.value.category is Category.SYSTEM


def test_empty_feed() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b"") == []
    assert decoder.lines == 0


def test_multibyte_characters_split_across_chunks() -> None:
    line = '{"t": "café 😀"}\n'.encode()
    assert decode(*(line[i : i + 1] for i in range(len(line)))) == [{"t": "café 😀"}]


# --------------------------------------------------------------------------- errors


def test_malformed_line_names_its_number_and_the_json_error() -> None:
    decoder = NDJSONDecoder()
    with pytest.raises(ProtocolError) as info:
        decoder.feed(b'1\n\n{"a": }\n')
    message = str(info.value)
    assert "line 3" in message
    assert "Expecting value" in message
    assert info.value.code == "json"
    assert info.value.category is Category.PROVIDER
    assert decoder.lines == 3


def test_error_category_follows_the_decoder() -> None:
    with pytest.raises(ProtocolError) as info:
        decode(b"[1,\n", category=Category.USER)
    assert info.value.category is Category.USER
    assert "line 1" in str(info.value)
    with pytest.raises(SizeLimitError) as size_info:
        decode(b"[1, 2]\n", max_line_size=3, category=Category.USER)
    assert size_info.value.category is Category.USER
    with pytest.raises(SizeLimitError) as size_info:
        decode(b"[1, 2]\n", max_line_size=3)
    assert size_info.value.category is Category.PROVIDER


def test_malformed_final_line_at_close() -> None:
    decoder = NDJSONDecoder()
    decoder.feed(b"1\n2\n{")
    with pytest.raises(ProtocolError, match="line 3"):
        decoder.close()


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        (b"NaN", "NaN"),
        (b"1e999", "infinity"),
        (b'{"a": 1, "a": 2}', "duplicate"),
        (b"1 2", "Extra data"),
        (b"\xff", "UTF-8"),
    ],
)
def test_strict_json_rules_apply(line: bytes, detail: str) -> None:
    with pytest.raises(ProtocolError, match=detail) as info:
        decode(b"0\n" + line + b"\n")
    assert "line 2" in str(info.value)


def test_the_values_before_a_failing_line_of_the_chunk_are_kept_aside() -> None:
    """Nothing of the failing chunk is returned, but the values of its lines before the one
    that failed are in ``before_failure`` (a stream may have ended among them)."""
    decoder = NDJSONDecoder()
    assert decoder.before_failure == []
    assert decoder.feed(b'{"a": 1}\n{"b"') == [{"a": 1}]
    with pytest.raises(ProtocolError, match="line 4"):
        decoder.feed(b': 2}\n\n[DONE]\n{"c": 3}\n')
    assert decoder.before_failure == [{"b": 2}]
    assert decoder.failed_line == b"[DONE]"
    at_close = NDJSONDecoder()
    at_close.feed(b"1\n")
    at_close.feed(b"2\nnope")
    with pytest.raises(ProtocolError, match="line 3"):
        at_close.close()
    assert at_close.before_failure == []  # the chunk before it was returned whole


def test_feed_after_an_error_raises() -> None:
    decoder = NDJSONDecoder()
    with pytest.raises(ProtocolError, match="line 1"):
        decoder.feed(b"x\n")
    with pytest.raises(ProtocolError, match="failed"):
        decoder.feed(b"1\n")
    assert decoder.close() == []


# --------------------------------------------------------------------------- size limit


def test_invalid_max_line_size() -> None:
    with pytest.raises(ValueError, match="max_line_size"):
        NDJSONDecoder(max_line_size=0)


def test_line_of_exactly_the_limit_is_accepted() -> None:
    assert decode(b'"abcd"\n"efgh"\n', max_line_size=6) == ["abcd", "efgh"]
    assert decode(b'"ab', b'cd"\n', max_line_size=6) == ["abcd"]
    assert decode(b'"abcd"', max_line_size=6) == ["abcd"]


def test_line_over_the_limit_raises() -> None:
    with pytest.raises(SizeLimitError) as info:
        decode(b'1\n"abcde"\n2\n', max_line_size=6)
    assert (info.value.limit, info.value.size) == (6, 7)
    assert "NDJSON line" in str(info.value)
    assert info.value.code == "too_large"


def test_long_line_raises_while_still_arriving() -> None:
    decoder = NDJSONDecoder(max_line_size=1000)
    assert decoder.feed(b"1\n[" + b"1," * 300) == [1]
    with pytest.raises(SizeLimitError) as info:
        decoder.feed(b"1," * 200)  # 1001 bytes of an unfinished line
    assert info.value.size == 1001
    with pytest.raises(ProtocolError, match="failed"):
        decoder.feed(b"1]\n")


def test_limit_is_per_line() -> None:
    stream = b"".join(b"[%d]\n" % (i % 10) for i in range(3000))
    chunks = [stream[i : i + 333] for i in range(0, len(stream), 333)]
    assert decode(*chunks, max_line_size=3) == [[i % 10] for i in range(3000)]


def test_pending_piece_counts_toward_the_line() -> None:
    with pytest.raises(SizeLimitError):
        decode(b'"abc', b'de"\n', max_line_size=6)
    # A chunk starting with LF ends the pending line; it does not start a new one.
    assert decode(b'"abcd"', b'\n"efgh"\n', max_line_size=6) == ["abcd", "efgh"]


# --------------------------------------------------------------------------- properties

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"]), max_size=5), children)
    ),
    max_leaves=6,
)


@st.composite
def ndjson_streams(draw: st.DrawFn) -> tuple[bytes, list[Any]]:
    values = draw(st.lists(json_values, max_size=10))
    parts: list[bytes] = []
    for value in values:
        parts.append(draw(st.sampled_from([b"", b"\n", b" \n", b"\r\n"])))  # blank lines
        text = json.dumps(value, ensure_ascii=draw(st.booleans()))
        parts.append(text.encode() + draw(st.sampled_from([b"\n", b"\r\n"])))
    if values and draw(st.booleans()):
        parts[-1] = parts[-1].rstrip(b"\r\n")  # the last line unterminated
    return b"".join(parts), values


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=100, deadline=None)
@given(case=ndjson_streams(), cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_any_chunking_gives_the_values(case: tuple[bytes, list[Any]], cuts: list[int]) -> None:
    stream, values = case
    assert decode(stream) == values
    assert decode(*split(stream, cuts)) == values


@settings(max_examples=40, deadline=None)
@given(case=ndjson_streams())
def test_one_byte_chunks_give_the_values(case: tuple[bytes, list[Any]]) -> None:
    stream, values = case
    decoder = NDJSONDecoder()
    out: list[Any] = []
    for i in range(len(stream)):
        out.extend(decoder.feed(stream[i : i + 1]))
    out.extend(decoder.close())
    assert out == values
    unterminated = 0 if stream.endswith(b"\n") or not stream else 1
    assert decoder.lines == stream.count(b"\n") + unterminated


@settings(max_examples=60, deadline=None)
@given(
    case=ndjson_streams(),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    limit=st.integers(min_value=1, max_value=40),
)
def test_size_limit_decision_is_chunking_independent(
    case: tuple[bytes, list[Any]], cuts: list[int], limit: int
) -> None:
    stream, values = case
    too_long = any(len(line) > limit for line in stream.split(b"\n"))
    for chunks in ([stream], split(stream, cuts)):
        if too_long:
            with pytest.raises(SizeLimitError):
                decode(*chunks, max_line_size=limit)
        else:
            assert decode(*chunks, max_line_size=limit) == values
