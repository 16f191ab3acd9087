"""PartialJSON: a JSON value read in pieces -- what each prefix shows, strictness as ``loads``,
limits, and (property) every prefix of every chunking consistent with the final value."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from partial_kit import consistent, same

from protocols import MAX_DEPTH, PartialJSON, ProtocolError, SizeLimitError, ValidationError, loads
from protocols.partial_json import NOTHING, JSONPrefix


def prefixes(text: str, *, strings: bool = False, size: int = 1) -> list[JSONPrefix]:
    """The prefix after every feed that showed something new, feeding ``size`` characters at a
    time."""
    reader = PartialJSON(strings=strings)
    seen = []
    for start in range(0, len(text), size):
        if reader.feed(text[start : start + size]):
            seen.append(reader.prefix())
    return seen


# -- what a prefix shows ----------------------------------------------------------------------


def test_members_and_items_appear_once_complete() -> None:
    shown = [p.value for p in prefixes('{"a": [1, 22, {"b": "xy"}], "c": true}')]
    assert shown == [
        {},
        {"a": []},
        {"a": [1]},
        {"a": [1, 22]},
        {"a": [1, 22, {}]},
        {"a": [1, 22, {"b": "xy"}]},
        {"a": [1, 22, {"b": "xy"}]},  # the inner object closed
        {"a": [1, 22, {"b": "xy"}]},  # the array closed
        {"a": [1, 22, {"b": "xy"}], "c": True},
        {"a": [1, 22, {"b": "xy"}], "c": True},  # the whole
    ]
    opens = [p.open for p in prefixes('{"a": [1, 22, {"b": "xy"}], "c": true}')]
    assert opens == [1, 2, 2, 2, 3, 3, 2, 1, 1, 0]


def test_a_number_is_absent_until_something_follows_it() -> None:
    reader = PartialJSON()
    reader.feed('{"n": 12')
    assert reader.value == {}
    reader.feed("3")
    assert reader.value == {}
    assert reader.feed("}")
    assert reader.value == {"n": 123}
    assert reader.complete


def test_a_top_level_number_is_complete_at_close() -> None:
    reader = PartialJSON()
    reader.feed(" -1.5e3")
    assert reader.value is NOTHING
    assert not reader.complete
    assert reader.close() == -1500.0
    assert reader.prefix() == JSONPrefix(-1500.0)
    assert reader.prefix().complete


def test_literals_and_keys_in_progress_are_absent() -> None:
    reader = PartialJSON(strings=True)
    reader.feed('{"flag": tr')
    assert reader.value == {}
    reader.feed('ue, "na')
    assert reader.value == {"flag": True}  # a key being read shows nothing
    reader.feed('me": "Ad')
    assert reader.prefix() == JSONPrefix({"flag": True, "name": "Ad"}, 1, True)


def test_strings_are_absent_until_complete_by_default() -> None:
    reader = PartialJSON()
    reader.feed('{"name": "Ada Lov')
    assert reader.value == {}
    assert not reader.prefix().growing
    reader.feed('elace"')
    assert reader.value == {"name": "Ada Lovelace"}


def test_a_growing_string_grows() -> None:
    shown = [p.value for p in prefixes('["ab\\ncd"]', strings=True)]
    assert shown == [[], [""], ["a"], ["ab"], ["ab\n"], ["ab\nc"], *[["ab\ncd"]] * 3]
    growing = [(p.growing, p.open) for p in prefixes('["ab\\ncd"]', strings=True)]
    assert growing == [(False, 1), *[(True, 1)] * 6, (False, 1), (False, 0)]


def test_a_top_level_string_grows() -> None:
    reader = PartialJSON(strings=True)
    reader.feed('"hel')
    assert reader.prefix() == JSONPrefix("hel", 0, True)
    reader.feed('lo"')
    assert reader.prefix() == JSONPrefix("hello", 0, False)


def test_a_split_surrogate_pair_is_never_shown_half() -> None:
    reader = PartialJSON(strings=True)
    reader.feed('["\\ud83d')
    assert reader.value == [""]  # the high half waits for its low half
    reader.feed("\\ude00")
    assert reader.value == ["\U0001f600"]
    reader.feed('x"]')
    assert reader.close() == ["\U0001f600x"]


def test_an_escape_split_across_feeds() -> None:
    text = '{"s": "a\\u00e9\\t\\"b"}'
    for size in range(1, len(text) + 1):
        assert prefixes(text, size=size)[-1].value == {"s": 'a\u00e9\t"b'}


def test_lone_surrogates_are_replaced_as_loads_does() -> None:
    text = '["\\ud800x", "\\udc00", "\\ud83d\\ude00", "\\ude00\\ud83d"]'
    reader = PartialJSON()
    reader.feed(text)
    assert reader.close() == loads(text) == ["\ufffdx", "\ufffd", "\U0001f600", "\ufffd\ufffd"]


def test_the_same_object_until_something_new_is_read() -> None:
    reader = PartialJSON()
    reader.feed('{"a": 1, ')
    first = reader.prefix()
    assert not reader.feed('"b": 2')  # a number in progress: nothing new
    assert reader.prefix() is first
    assert reader.feed(",")
    assert reader.prefix() is not first


def test_a_prefix_never_changes_afterwards() -> None:
    reader = PartialJSON()
    reader.feed('{"a": [1, {"b": 2')
    before = reader.prefix()
    kept = json.dumps(before.value)
    reader.feed('}, 3], "c": {"d": [4]}}')
    assert json.dumps(before.value) == kept
    assert reader.value == {"a": [1, {"b": 2}, 3], "c": {"d": [4]}}


def test_complete_values_are_shared_between_prefixes() -> None:
    reader = PartialJSON()
    reader.feed('{"a": {"big": [1, 2, 3]}, ')
    first = reader.value
    reader.feed('"b": 1,')
    assert reader.value["a"] is first["a"]  # (not copied again)


# -- fences and whitespace, as structured output reads an answer -----------------------------


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"a": 1}\n```',
        '  ```\n{"a": 1}```',
        '\n```JSON  \r\n{"a": 1}\n```\ntrailing words are ignored',
        '\u2003{"a": 1}\n\n',
        '{"a": 1}',
        '```json\n{"a": 1}',  # never closed
    ],
)
def test_fences_and_whitespace_around_the_value(text: str) -> None:
    for size in (1, 2, 5, len(text)):
        reader = PartialJSON()
        for start in range(0, len(text), size):
            reader.feed(text[start : start + size])
        assert reader.close() == {"a": 1}


def test_the_fence_line_shows_nothing() -> None:
    reader = PartialJSON()
    assert not reader.feed("```js")
    assert reader.value is NOTHING
    assert reader.feed('on\n{"a')
    assert reader.value == {}
    assert reader.feed('": 1, ')
    assert reader.value == {"a": 1}


# -- strictness ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("Sure! {}", 0, "expected a JSON value"),
        ('{"a": 1} and more', 9, "unexpected 'a' after the JSON value"),
        ('{"a": 1}```', 8, "unexpected '`'"),
        ('{"a" 1}', 5, "expected ':'"),
        ('{"a": 1,}', 8, "expected an object key"),
        ("[1,]", 3, "expected a value after ','"),
        ("[1 2]", 3, "expected ',' or ']'"),
        ('{"a": 1, "a": 2}', 11, "duplicate object key 'a'"),
        ("[NaN]", 1, "expected a JSON value"),
        ("[Infinity]", 1, "expected a JSON value"),
        ("[-Infinity]", 2, "invalid number '-'"),
        ("[1e999]", 6, "overflows to infinity"),
        ("[01]", 3, "invalid number '01'"),
        ("[1.]", 3, "invalid number"),
        ("[tru]", 4, "expected 'true'"),
        ('["a\tb"]', 3, "control character U+0009 in a string"),
        ('["\\x"]', 3, "invalid escape"),
        ('["\\u12G4"]', 7, "invalid escape"),
        ("``{}", 2, "fence of three backticks"),
    ],
)
def test_invalid_json_is_refused_where_it_goes_wrong(text: str, where: int, message: str) -> None:
    reader = PartialJSON()

    def read() -> None:
        for char in text:
            reader.feed(char)
        reader.close()

    with pytest.raises(ProtocolError, match=re.escape(message)) as caught:
        read()
    assert caught.value.code == "json"
    assert f"at character {where}:" in caught.value.message
    with pytest.raises(ProtocolError) as again:  # and every feed after it
        reader.feed("{")
    assert again.value is caught.value
    with pytest.raises(ProtocolError):  # as loads refuses it
        loads(text)


def test_an_integer_longer_than_python_converts_is_refused() -> None:
    reader = PartialJSON()
    with pytest.raises(ProtocolError, match="is too long"):
        reader.feed("[" + "9" * 5000 + "]")


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    reader = PartialJSON()
    reader.feed("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert reader.complete
    reader = PartialJSON()
    with pytest.raises(ProtocolError, match=f"nested deeper than {MAX_DEPTH}"):
        reader.feed("[" * (MAX_DEPTH + 1))


@pytest.mark.parametrize("text", ["", "   ", '{"a": 1', '"abc', "[1, 2", "```json\n"])
def test_close_refuses_an_incomplete_document(text: str) -> None:
    reader = PartialJSON()
    reader.feed(text)
    with pytest.raises(ProtocolError, match="the document ends with"):
        reader.close()


def test_the_size_limit() -> None:
    reader = PartialJSON(max_chars=10)
    reader.feed('{"a": ')
    with pytest.raises(SizeLimitError) as caught:
        reader.feed('"bcde"}')
    assert (caught.value.limit, caught.value.size) == (10, 13)
    assert "10 characters" in caught.value.message
    with pytest.raises(SizeLimitError):
        reader.feed("")
    reader.reset()  # a new document: read from scratch
    reader.feed('{"a": 1}')
    assert reader.close() == {"a": 1}
    assert reader.fed == 8


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_max_chars_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ValidationError, match="max_chars"):
        PartialJSON(max_chars=bad)


def test_feed_takes_text() -> None:
    with pytest.raises(ValidationError, match="not bytes"):
        PartialJSON().feed(b"{}")  # type: ignore[arg-type]


def test_nothing_is_falsy_and_named() -> None:
    assert not NOTHING
    assert repr(NOTHING) == "NOTHING"
    assert NOTHING is not None
    assert PartialJSON().prefix() == JSONPrefix(NOTHING)
    assert not JSONPrefix(NOTHING).complete


# -- properties ---------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=25,
)


@st.composite
def documents(draw: st.DrawFn) -> tuple[Any, str, list[int]]:
    """A JSON value, a text of it (compact or pretty, escaped or not, maybe fenced, maybe
    padded) and cut points of a random chunking."""
    value = draw(json_values)
    indent = draw(st.sampled_from([None, 2]))
    text = json.dumps(value, indent=indent, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):
        text = "```json\n" + text + "\n```"
    text = draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", "\n "]))
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=max(1, len(text) - 1)))))
    return value, text, cuts


@settings(max_examples=300, deadline=None)
@given(documents(), st.booleans())
def test_every_prefix_is_consistent_with_the_final_value(
    document: tuple[Any, str, list[int]], strings: bool
) -> None:
    value, text, cuts = document
    final = loads(text.strip().removeprefix("```json\n").removesuffix("```"))
    assert same(final, json.loads(json.dumps(value)))
    reader = PartialJSON(strings=strings)
    before: Any = NOTHING
    for start, stop in zip([0, *cuts], [*cuts, len(text)], strict=True):
        changed = reader.feed(text[start:stop])
        prefix = reader.prefix()
        assert changed or prefix.value == before or before is NOTHING
        assert consistent(prefix.value, final, strings=strings)
        assert consistent(before, prefix.value, strings=strings)  # only ever grows
        if not strings:
            assert not prefix.growing
        before = prefix.value
    assert same(reader.close(), final)
    assert same(reader.value, final)
    assert reader.prefix().complete


@settings(max_examples=100, deadline=None)
@given(json_values, st.booleans())
def test_every_character_prefix_of_a_document(value: Any, strings: bool) -> None:
    text = json.dumps(value, ensure_ascii=False)
    final = json.loads(text)
    reader = PartialJSON(strings=strings)
    before: Any = NOTHING
    for char in text:
        reader.feed(char)
        shown = reader.value
        assert consistent(shown, final, strings=strings)
        assert consistent(before, shown, strings=strings)
        before = shown
    assert same(reader.close(), final)


_near_json = st.text(alphabet='{}[]",: 01239.eE+-truefalsn\\u\nAd', max_size=30)


@settings(max_examples=500, deadline=None)
@given(_near_json, st.integers(min_value=1, max_value=7))
def test_as_strict_as_loads(text: str, size: int) -> None:
    try:
        expected: Any = loads(text.strip())
    except ProtocolError:
        expected = ProtocolError
    reader = PartialJSON()
    try:
        for start in range(0, len(text), size):
            reader.feed(text[start : start + size])
        got: Any = reader.close()
    except ProtocolError:
        got = ProtocolError
    assert got is expected if expected is ProtocolError else same(got, expected)
