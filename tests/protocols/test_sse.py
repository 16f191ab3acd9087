"""Tests for protocols.sse: explicit cases for each rule, then properties against a reference."""

from __future__ import annotations

import itertools

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import Category, ProtocolError, SizeLimitError
from protocols.sse import SSEComment, SSEDecoder, SSEEvent

Item = SSEEvent | SSEComment
BOM = b"\xef\xbb\xbf"


def decode(*chunks: bytes, **kwargs: int) -> list[Item]:
    """Feed each chunk, then close; return every item in order."""
    decoder = SSEDecoder(**kwargs)
    items: list[Item] = []
    for chunk in chunks:
        items.extend(decoder.feed(chunk))
    items.extend(decoder.close())
    return items


def bytewise(stream: bytes) -> list[Item]:
    return decode(*(stream[i : i + 1] for i in range(len(stream))))


# --------------------------------------------------------------------------- items


def test_event_defaults_and_equality() -> None:
    event = SSEEvent("x")
    assert (event.data, event.event, event.id, event.retry) == ("x", "message", None, None)
    decoded = decode(b"data: x\n\n")
    assert decoded == [event]
    assert hash(decoded[0]) == hash(event)
    assert repr(decoded[0]) == repr(event)


def test_items_are_frozen_and_slotted() -> None:
    (event,) = decode(b"data: x\n\n")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.data = "y"  # type: ignore[misc]
    assert not hasattr(event, "__dict__")
    comment = SSEComment("c")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        comment.text = "d"  # type: ignore[misc]


# --------------------------------------------------------------------------- fields


def test_data_field_spacing() -> None:
    assert decode(b"data: a\n\n") == [SSEEvent("a")]
    assert decode(b"data:a\n\n") == [SSEEvent("a")]
    assert decode(b"data:  a \n\n") == [SSEEvent(" a ")]
    assert decode(b"data:\ta\n\n") == [SSEEvent("\ta")]
    assert decode(b"data: a: b\n\n") == [SSEEvent("a: b")]


def test_lone_data_line_dispatches_empty_data() -> None:
    assert decode(b"data:\n\n") == [SSEEvent("")]
    assert decode(b"data: \n\n") == [SSEEvent("")]
    assert decode(b"data\n\n") == [SSEEvent("")]


def test_multiline_data_is_joined_with_lf() -> None:
    assert decode(b"data: a\ndata: b\ndata:\ndata: c\n\n") == [SSEEvent("a\nb\n\nc")]
    assert decode(b"data\ndata\n\n") == [SSEEvent("\n")]


def test_blocks_without_data_dispatch_nothing() -> None:
    assert decode(b"event: x\n\n") == []
    assert decode(b"id: 1\n\n") == []
    assert decode(b"retry: 5\n\n") == []
    assert decode(b"\n\n\n") == []
    assert decode(b"foo: bar\n\n") == []


def test_event_type() -> None:
    assert decode(b"event: delta\ndata: x\n\n") == [SSEEvent("x", event="delta")]
    assert decode(b"event:\ndata: x\n\n") == [SSEEvent("x")]
    assert decode(b"event: a\nevent: b\ndata: x\n\n") == [SSEEvent("x", event="b")]
    # The type does not carry over to the next event, even from a block without data.
    assert decode(b"event: a\ndata: 1\n\ndata: 2\n\n") == [
        SSEEvent("1", event="a"),
        SSEEvent("2"),
    ]
    assert decode(b"event: a\n\ndata: 2\n\n") == [SSEEvent("2")]


def test_id_persists_and_resets() -> None:
    items = decode(b"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: 2\ndata: d\n\n")
    assert [(e.data, e.id) for e in items if isinstance(e, SSEEvent)] == [
        ("a", "1"),
        ("b", "1"),
        ("c", None),
        ("d", "2"),
    ]


def test_id_reaches_events_between_blank_lines() -> None:
    # Several one-line events in one chunk: the decoder takes those between blank lines whole.
    stream = b"id: 5\n\ndata: a\n\ndata: b\n\ndata: c\n\nid: 6\ndata: d\n\ndata: e\n\n"
    expected = [
        SSEEvent("a", id="5"),
        SSEEvent("b", id="5"),
        SSEEvent("c", id="5"),
        SSEEvent("d", id="6"),
        SSEEvent("e", id="6"),
    ]
    assert decode(stream) == expected
    assert decode(b"retry: 9\nevent: x\n" + stream) == expected


def test_id_with_nul_is_ignored() -> None:
    assert decode(b"id: 1\n\nid: a\x00b\ndata: x\n\n") == [SSEEvent("x", id="1")]
    assert decode(b"id: \x00\ndata: x\n\n") == [SSEEvent("x")]


def test_last_event_id_commits_at_blank_lines() -> None:
    decoder = SSEDecoder()
    assert decoder.last_event_id is None
    decoder.feed(b"id: 7\n")
    assert decoder.last_event_id is None  # not until the block ends
    decoder.feed(b"\n")
    assert decoder.last_event_id == "7"  # a block without data still commits its id
    decoder.feed(b"data: x\n\nid: 8\ndata: y\n")
    assert decoder.last_event_id == "7"
    assert decoder.close() == []  # the unfinished event is discarded ...
    assert decoder.last_event_id == "7"  # ... and its id never committed


def test_retry() -> None:
    assert decode(b"retry: 1500\ndata: x\n\n") == [SSEEvent("x", retry=1500)]
    assert decode(b"retry: 0\ndata: x\n\n") == [SSEEvent("x", retry=0)]
    for bad in [b"1.5", b"-1", b"+1", b"1a", b" 1", b"", b"\xd9\xa1"]:  # last: Arabic-Indic one
        assert decode(b"retry: " + bad + b"\ndata: x\n\n") == [SSEEvent("x")], bad
    assert decode(b"retry\ndata: x\n\n") == [SSEEvent("x")]
    # Per event: the next event does not inherit it.
    assert decode(b"retry: 5\ndata: a\n\ndata: b\n\n") == [SSEEvent("a", retry=5), SSEEvent("b")]


def test_retry_property_tracks_reconnection_time() -> None:
    decoder = SSEDecoder()
    assert decoder.retry is None
    assert decoder.feed(b"retry: 3000\n\n") == []
    assert decoder.retry == 3000
    assert decoder.feed(b"retry: soon\ndata: x\n\n") == [SSEEvent("x")]
    assert decoder.retry == 3000
    decoder.feed(b"retry: 10\n")
    assert decoder.retry == 10


def test_absurdly_long_retry_is_ignored() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"retry: " + b"9" * 10_000 + b"\ndata: x\n\n") == [SSEEvent("x")]
    assert decoder.retry is None


def test_unknown_and_miscased_fields_are_ignored() -> None:
    assert decode(b"Data: x\nDATA: y\nfoo: z\n: c\nx\ndata: ok\n\n") == [
        SSEComment("c"),
        SSEEvent("ok"),
    ]


def test_comments() -> None:
    assert decode(b": keep-alive\n\n") == [SSEComment("keep-alive")]
    assert decode(b":\n") == [SSEComment("")]
    assert decode(b":x\n") == [SSEComment("x")]
    assert decode(b":  two\n") == [SSEComment(" two")]
    assert decode(b": a: b\n") == [SSEComment("a: b")]


def test_items_come_in_stream_order() -> None:
    assert decode(b": a\ndata: 1\n: b\n\n: c\ndata: 2\n\n") == [
        SSEComment("a"),
        SSEComment("b"),
        SSEEvent("1"),
        SSEComment("c"),
        SSEEvent("2"),
    ]


def test_comment_inside_event_does_not_split_it() -> None:
    assert decode(b"data: a\n: ping\ndata: b\n\n") == [SSEComment("ping"), SSEEvent("a\nb")]


# --------------------------------------------------------------------------- line endings


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_each_line_ending(eol: bytes) -> None:
    stream = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol + b": c" + eol
    expected = [SSEEvent("a\nb", event="e"), SSEComment("c")]
    assert decode(stream) == expected
    assert bytewise(stream) == expected


def test_mixed_line_endings() -> None:
    assert decode(b"data: a\rdata: b\r\ndata: c\n\r\n") == [SSEEvent("a\nb\nc")]
    assert decode(b"data: a\n\r") == [SSEEvent("a")]


def test_crlf_split_across_chunks_is_one_line_ending() -> None:
    assert decode(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [SSEEvent("a\nb")]
    # A CR ending one chunk and a CR starting the next are two line endings: a blank line.
    assert decode(b"data: a\r", b"\r") == [SSEEvent("a")]
    # A CR then an LF in a later, non-adjacent chunk: the empty chunk between changes nothing.
    assert decode(b"data: a\r", b"", b"\n") == []
    assert decode(b"data: a\r", b"", b"\n", b"data: b\n\n") == [SSEEvent("a\nb")]
    # LF then CR is two line endings.
    assert decode(b"data: a\n", b"\r") == [SSEEvent("a")]


def test_lone_cr_chunks() -> None:
    assert decode(b"data: a", b"\r", b"\r", b"data: b", b"\r", b"\n", b"\r", b"\n") == [
        SSEEvent("a"),
        SSEEvent("b"),
    ]


def test_other_unicode_line_breaks_are_content() -> None:
    stream = "data: a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g\n\n".encode()
    assert decode(stream) == [SSEEvent("a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g")]


# --------------------------------------------------------------------------- BOM and UTF-8


def test_leading_bom_is_stripped() -> None:
    assert decode(BOM + b"data: x\n\n") == [SSEEvent("x")]
    assert bytewise(BOM + b"data: x\n\n") == [SSEEvent("x")]
    assert decode(BOM[:2], BOM[2:] + b"data: x\n\n") == [SSEEvent("x")]
    assert decode(BOM[:1], b"", BOM[1:2], BOM[2:], b"data: x\n\n") == [SSEEvent("x")]


def test_only_one_leading_bom_is_stripped() -> None:
    # The second BOM belongs to the field name, which is then unknown.
    assert decode(BOM + BOM + b"data: x\n\ndata: y\n\n") == [SSEEvent("y")]


def test_bom_later_in_the_stream_is_content() -> None:
    assert decode(b"data: a\n\n" + BOM + b"data: b\n\n") == [SSEEvent("a")]
    assert decode(b"data: " + BOM + b"b\n\n") == [SSEEvent("\ufeffb")]


def test_bom_prefix_that_is_not_a_bom_is_kept() -> None:
    # The first two bytes of a BOM, then something else: all of it is a (junk) field name.
    assert decode(BOM[:2], b"data: x\n\ndata: y\n\n") == [SSEEvent("y")]
    assert decode(BOM[:1], b"\n: c\n") == [SSEComment("c")]
    assert decode(BOM[:2]) == []
    assert decode(b":" + BOM[:2]) == [SSEComment("\ufffd")]


def test_stream_of_only_a_bom() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(BOM) == []
    assert decoder.feed(b": after\n") == [SSEComment("after")]


def test_multibyte_characters_split_across_chunks() -> None:
    stream = "data: café 😀\n: ünï\n\n".encode()
    expected = [SSEComment("ünï"), SSEEvent("café 😀")]
    assert decode(stream) == expected
    assert bytewise(stream) == expected


def test_invalid_utf8_is_replaced() -> None:
    assert decode(b"data: a\xffb\xe2\x82\n\n") == [SSEEvent("a\ufffdb\ufffd")]
    assert decode(b"event: \xc3\ndata: \xc3\xa9\n\n") == [SSEEvent("é", event="\ufffd")]


# --------------------------------------------------------------------------- end of stream


def test_unterminated_final_comment_is_returned_by_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\n: bye") == [SSEEvent("a")]
    assert decoder.close() == [SSEComment("bye")]


def test_incomplete_event_at_eof_is_discarded() -> None:
    assert decode(b"data: a\n") == []
    assert decode(b"data: a") == []
    assert decode(b"data: a\n\ndata: b\ndata: c") == [SSEEvent("a")]


def test_final_retry_line_is_processed_at_close() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"retry: 250")
    assert decoder.retry is None
    assert decoder.close() == []
    assert decoder.retry == 250


def test_close_is_idempotent_and_feed_after_close_raises() -> None:
    decoder = SSEDecoder()
    decoder.feed(b": x")
    assert decoder.close() == [SSEComment("x")]
    assert decoder.close() == []
    with pytest.raises(ProtocolError, match="closed") as info:
        decoder.feed(b"data: y\n\n")
    assert info.value.category is Category.SYSTEM
    with pytest.raises(ProtocolError):
        decoder.feed(b"")


def test_empty_feeds_change_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"data: a") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\n\n") == [SSEEvent("a")]


def test_many_events_in_one_chunk_and_one_event_over_many() -> None:
    stream = b"".join(b"data: %d\n\n" % i for i in range(500))
    assert decode(stream) == [SSEEvent(str(i)) for i in range(500)]
    big = b"data: " + b"x" * 100_000 + b"\n\n"
    assert decode(*(big[i : i + 7] for i in range(0, len(big), 7))) == [SSEEvent("x" * 100_000)]


# --------------------------------------------------------------------------- size limit


def test_invalid_max_event_size() -> None:
    with pytest.raises(ValueError, match="max_event_size"):
        SSEDecoder(max_event_size=0)
    with pytest.raises(ValueError, match="max_event_size"):
        SSEDecoder(max_event_size=-5)


def test_event_of_exactly_the_limit_is_accepted() -> None:
    # "data: " + 4 bytes = 10 bytes of line; terminators do not count.
    assert decode(b"data: abcd\r\n\r\n", max_event_size=10) == [SSEEvent("abcd")]
    assert decode(b"data: ab\ndata\n\n", max_event_size=12) == [SSEEvent("ab\n")]


def test_event_over_the_limit_raises() -> None:
    with pytest.raises(SizeLimitError) as info:
        decode(b"data: abcde\n\n", max_event_size=10)
    assert info.value.limit == 10
    assert info.value.size == 11
    assert info.value.code == "too_large"
    assert isinstance(info.value, ProtocolError)
    assert "SSE event" in str(info.value)
    with pytest.raises(SizeLimitError):
        decode(b"data: ab\ndata: cd\n\n", max_event_size=15)


def test_huge_line_raises_before_its_end_arrives() -> None:
    decoder = SSEDecoder(max_event_size=1000)
    for _ in range(9):
        assert decoder.feed(b"data: " + b"x" * 100) == []
    with pytest.raises(SizeLimitError) as info:
        decoder.feed(b"x" * 100)  # 1054 bytes of an unfinished line
    assert info.value.size == 1054
    with pytest.raises(ProtocolError, match="failed"):
        decoder.feed(b"\n\n")
    assert decoder.close() == []


def test_huge_event_of_small_lines_raises_before_it_ends() -> None:
    decoder = SSEDecoder(max_event_size=1000)
    line = b"data: 0123456789\n"  # 16 bytes without its terminator
    for _ in range(62):
        assert decoder.feed(line) == []
    with pytest.raises(SizeLimitError) as info:
        decoder.feed(line)  # 63 * 16 = 1008 bytes
    assert info.value.size == 1008


def test_limit_is_per_event() -> None:
    stream = b"".join(b"data: 0123456789\n: c\n\n" for _ in range(1000))
    items = decode(*(stream[i : i + 50] for i in range(0, len(stream), 50)), max_event_size=32)
    assert len(items) == 2000


def test_comments_and_ignored_fields_count_toward_the_event() -> None:
    with pytest.raises(SizeLimitError):
        decode(b": " + b"x" * 20 + b"\n", max_event_size=20)
    with pytest.raises(SizeLimitError):
        decode(b"foo: 1234567890\nbar: 1234567890\n", max_event_size=20)
    assert decode(b": " + b"x" * 18 + b"\n\n" + b": " + b"y" * 18 + b"\n", max_event_size=20) == [
        SSEComment("x" * 18),
        SSEComment("y" * 18),
    ]


def test_size_left_by_a_run_of_data_lines_is_exact() -> None:
    decoder = SSEDecoder(max_event_size=100)
    assert decoder.feed(b"data: " + b"a" * 20 + b"\ndata: " + b"b" * 20 + b"\n") == []  # 52
    with pytest.raises(SizeLimitError) as info:
        decoder.feed(b"data: " + b"c" * 50 + b"\n")
    assert info.value.size == 52 + 56


def test_size_left_after_one_line_events_is_exact() -> None:
    decoder = SSEDecoder(max_event_size=150)
    chunk = b"data: x\n\ndata: y\n\ndata: " + b"z" * 40 + b"\ndata: " + b"w" * 40 + b"\n"
    assert decoder.feed(chunk) == [SSEEvent("x"), SSEEvent("y")]  # leaves 46 + 46 bytes
    with pytest.raises(SizeLimitError) as info:
        decoder.feed(b"data: " + b"v" * 60 + b"\n")
    assert info.value.size == 92 + 66


def test_size_after_a_blank_line_counts_only_what_follows() -> None:
    decoder = SSEDecoder(max_event_size=100)
    assert decoder.feed(b": " + b"c" * 40 + b"\n\nid: " + b"x" * 40 + b"\n") == [
        SSEComment("c" * 40)
    ]
    # 44 bytes of "id: ..." and 56 of "data: ...": exactly at the limit.
    assert decoder.feed(b"data: " + b"y" * 50 + b"\n\n") == [SSEEvent("y" * 50, id="x" * 40)]


def test_bom_does_not_count() -> None:
    assert decode(BOM + b"data: abcd\n\n", max_event_size=10) == [SSEEvent("abcd")]


def test_pending_piece_counts_once() -> None:
    # 8 + 8 bytes arriving in two pieces form one 16-byte line: within a 16-byte limit.
    assert decode(b"data: ab", b"cdefghij\n\n", max_event_size=16) == [SSEEvent("abcdefghij")]
    with pytest.raises(SizeLimitError):
        decode(b"data: ab", b"cdefghijk\n\n", max_event_size=16)
    # A pending piece followed by a chunk that starts with a line ending is not a blank line.
    with pytest.raises(SizeLimitError):
        decode(b"data: 0123456789", b"\ndata: 0123456789\n\n", max_event_size=25)


# --------------------------------------------------------------------------- reference model


def reference_lines(stream: bytes) -> tuple[list[bytes], bytes | None]:
    """Split a stream (BOM already removed) into lines at CR, LF and CRLF, byte by byte.

    Returns the terminated lines and the unterminated final line (None if there is none).
    """
    lines: list[bytes] = []
    current = bytearray()
    i = 0
    while i < len(stream):
        byte = stream[i : i + 1]
        if byte == b"\r":
            lines.append(bytes(current))
            current = bytearray()
            if stream[i + 1 : i + 2] == b"\n":
                i += 1
        elif byte == b"\n":
            lines.append(bytes(current))
            current = bytearray()
        else:
            current += byte
        i += 1
    return lines, (bytes(current) if current else None)


def reference(stream: bytes) -> tuple[list[Item], str | None, int | None]:
    """The WHATWG interpretation, step by step, over the whole stream at once.

    Decodes the whole stream first (the spec's "UTF-8 decode", which strips one leading BOM),
    then splits the text into lines by hand. Returns the items, the last event ID committed by
    the last blank line and the latest reconnection time.
    """
    text = stream.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in "\r\n":
            lines.append("".join(current))
            current = []
            if char == "\r" and text[i + 1 : i + 2] == "\n":
                i += 1
        else:
            current.append(char)
        i += 1
    items: list[Item] = []
    data_buffer = ""
    event_type = ""
    id_buffer = ""
    committed = ""
    event_retry: int | None = None
    reconnect: int | None = None

    def process(line: str) -> None:
        nonlocal data_buffer, event_type, id_buffer, event_retry, reconnect
        if line.startswith(":"):
            comment = line[1:]
            items.append(SSEComment(comment[1:] if comment.startswith(" ") else comment))
            return
        if ":" in line:
            name, value = line.split(":", 1)
            if value.startswith(" "):
                value = value[1:]
        else:
            name, value = line, ""
        if name == "event":
            event_type = value
        elif name == "data":
            data_buffer += value + "\n"
        elif name == "id":
            if "\0" not in value:
                id_buffer = value
        # Only ASCII digits; int() refuses over 4300 digits and the decoder ignores those.
        elif (
            name == "retry"
            and value
            and all(c in "0123456789" for c in value)
            and len(value) <= 4300
        ):
            event_retry = reconnect = int(value)

    for line in lines:
        if line:
            process(line)
            continue
        committed = id_buffer
        if data_buffer:
            items.append(
                SSEEvent(
                    data_buffer[:-1] if data_buffer.endswith("\n") else data_buffer,
                    event=event_type or "message",
                    id=id_buffer or None,
                    retry=event_retry,
                )
            )
        data_buffer = ""
        event_type = ""
        event_retry = None
    if current:
        process("".join(current))
    return items, committed or None, reconnect


def reference_max_event_size(stream: bytes) -> int:
    """The largest event size (bytes of lines since the last blank line) the stream reaches."""
    if stream.startswith(BOM):
        stream = stream[3:]
    lines, final = reference_lines(stream)
    size = largest = 0
    for line in [*lines, *([final] if final is not None else [])]:
        size = size + len(line) if line else 0
        largest = max(largest, size)
    return largest


def test_reference_model_agrees_with_the_examples_above() -> None:
    stream = BOM + b"id: 1\r\nevent: e\rdata: a\ndata\n\n: c\nretry: 7\ndata: \xff\n\n: end"
    items, last_id, retry = reference(stream)
    assert items == [
        SSEEvent("a\n", event="e", id="1"),
        SSEComment("c"),
        SSEEvent("\ufffd", id="1", retry=7),
        SSEComment("end"),
    ]
    assert (last_id, retry) == ("1", 7)
    assert reference_lines(b"a\r\nb\rc\n\nd") == ([b"a", b"b", b"c", b""], b"d")
    assert reference_max_event_size(b"ab\ncde\n\nf\r\ng") == 5


# --------------------------------------------------------------------------- generated streams

field_names = st.sampled_from(["data", "data", "data", "event", "id", "retry", "", "Data", "x"])
values = st.one_of(
    st.text(st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=12),
    st.sampled_from(["", " ", "0", "42", " 7", "12a", "a\x00b", "[DONE]", "\ufeff"]),
)
# Streams with LF line endings only take the decoder's fast paths; others its general one.
line_endings = st.sampled_from([[b"\n"], [b"\n", b"\r", b"\r\n"]])


@st.composite
def sse_lines(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            ["data", "event", "event", "field", "field", "bare", "comment", "blank", "raw"]
        )
    )
    if kind == "blank":
        return b""
    if kind == "data":  # the shape of typical LLM streams
        return b"data: " + draw(values).encode()
    if kind == "event":  # a one-line event and its blank line (before the next line ending)
        return b"data: " + draw(values).encode() + b"\n"
    if kind == "raw":
        return draw(st.binary(max_size=8)).replace(b"\r", b"").replace(b"\n", b"")
    value = draw(values)
    if kind == "comment":
        return (":" + value).encode()
    name = draw(field_names)
    if kind == "bare":
        return name.encode()
    space = draw(st.sampled_from(["", " ", "  "]))
    return f"{name}:{space}{value}".encode()


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(sse_lines(), max_size=25))
    parts = [BOM] if draw(st.booleans()) else []
    terminators = st.sampled_from(draw(line_endings))
    for line in lines:
        parts.append(line)
        parts.append(draw(terminators))
    if draw(st.booleans()):
        parts.append(draw(sse_lines()))  # maybe an unterminated final line
    return b"".join(parts)


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


def run_decoder(chunks: list[bytes], **kwargs: int) -> tuple[list[Item], str | None, int | None]:
    decoder = SSEDecoder(**kwargs)
    items: list[Item] = []
    for chunk in chunks:
        items.extend(decoder.feed(chunk))
    items.extend(decoder.close())
    return items, decoder.last_event_id, decoder.retry


@settings(max_examples=300, deadline=None)
@given(stream=sse_streams(), cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_matches_reference_under_any_chunking(stream: bytes, cuts: list[int]) -> None:
    expected = reference(stream)
    assert run_decoder([stream]) == expected
    assert run_decoder(split(stream, cuts)) == expected


@settings(max_examples=100, deadline=None)
@given(stream=sse_streams())
def test_one_byte_chunks_match_whole_input(stream: bytes) -> None:
    whole = run_decoder([stream])
    assert run_decoder([stream[i : i + 1] for i in range(len(stream))]) == whole
    assert whole == reference(stream)


@settings(max_examples=150, deadline=None)
@given(
    stream=st.lists(
        st.one_of(st.binary(max_size=6), st.sampled_from([b"\r", b"\n", b"\r\n", b":", BOM])),
        max_size=30,
    ).map(b"".join),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
)
def test_arbitrary_bytes_match_reference(stream: bytes, cuts: list[int]) -> None:
    assert run_decoder(split(stream, cuts)) == reference(stream)


@settings(max_examples=150, deadline=None)
@given(
    stream=sse_streams(),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    limit=st.integers(min_value=1, max_value=60),
)
def test_size_limit_decision_is_chunking_independent(
    stream: bytes, cuts: list[int], limit: int
) -> None:
    too_big = reference_max_event_size(stream) > limit
    for chunks in ([stream], split(stream, cuts)):
        if too_big:
            with pytest.raises(SizeLimitError):
                run_decoder(chunks, max_event_size=limit)
        else:
            assert run_decoder(chunks, max_event_size=limit) == reference(stream)
