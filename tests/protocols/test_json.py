"""Tests for protocols._json (strict JSON): explicit cases for each refusal and repair, then
property tests against a model of the repair and against the standard library."""

from __future__ import annotations

import copy
import json
import math
import random
import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import codec
from protocols._json import (
    MAX_DEPTH,
    check_json,
    dumpb,
    dumpb_own,
    dumps,
    loads,
    loads_object_unchecked,
)
from protocols.errors import Category, ProtocolError, ValidationError

SETTINGS = settings(max_examples=80, deadline=None)

# --------------------------------------------------------------------------- helpers


def is_surrogate(char: str) -> bool:
    return 0xD800 <= ord(char) <= 0xDFFF


def repair_text(text: str) -> str:
    """The model of surrogate repair: every lone surrogate code point becomes U+FFFD."""
    return "".join("\ufffd" if is_surrogate(char) else char for char in text)


def repaired(value: Any) -> Any:
    """What a JSON value looks like after a trip through dumps/loads (tuples become lists)."""
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, dict):
        return {repair_text(key): repaired(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [repaired(item) for item in value]
    return value


def has_tuple(value: Any) -> bool:
    if isinstance(value, tuple):
        return True
    if isinstance(value, dict):
        return any(has_tuple(item) for item in value.values())
    if isinstance(value, list):
        return any(has_tuple(item) for item in value)
    return False


def has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(is_surrogate(char) for char in value)
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_surrogate(item) for item in value)
    return False


def same_structure(a: Any, b: Any) -> bool:
    """Equality that also compares container/scalar types exactly (a tuple is not a list, 1 is not
    1.0 nor True, -0.0 is not 0.0), so a repair that changes a type is noticed."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_structure(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def nested_lists(depth: int) -> list[Any]:
    """``depth`` arrays nested inside each other (depth 1 is ``[]``)."""
    root: list[Any] = []
    inner = root
    for _ in range(depth - 1):
        child: list[Any] = []
        inner.append(child)
        inner = child
    return root


def nested_dicts(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    inner = root
    for _ in range(depth - 1):
        child: dict[str, Any] = {}
        inner["k"] = child
        inner = child
    return root


# --------------------------------------------------------------------------- strategies

#: Characters of every general category, lone surrogates ("Cs") included: st.characters() leaves
#: surrogates out unless asked, so they are asked for explicitly.
ANY_CHARS = st.characters(categories=["Cs", "L", "M", "N", "P", "S", "Z", "Cc", "Cf", "Co"])
INTERESTING = st.sampled_from(
    ["", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00", "\ufffd", '"', "\\", "\x00",
     "\n", "\u2028", "é", "😀", "\U0010ffff"]
)  # fmt: skip
#: Text with lone surrogates (and other characters that need care) spliced in often.
TEXT = st.tuples(
    st.text(alphabet=ANY_CHARS, max_size=6), INTERESTING, st.text(alphabet=ANY_CHARS, max_size=6)
).map("".join)
#: Text that encodes to UTF-8, i.e. without surrogates (guaranteed by codec="utf-8").
CLEAN_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), FINITE, TEXT)
CLEAN_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), FINITE, CLEAN_TEXT)


def no_key_collision(mapping: dict[str, Any]) -> bool:
    """Keys stay distinct after repair (colliding keys are covered by explicit tests)."""
    return len({repair_text(key) for key in mapping}) == len(mapping)


def json_values(scalars: st.SearchStrategy[Any], keys: st.SearchStrategy[str]) -> Any:
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.lists(children, max_size=4).map(tuple),
            st.dictionaries(keys, children, max_size=4).filter(no_key_collision),
        ),
        max_leaves=10,
    )


#: Any strict JSON value as Python may hold it: lone surrogates anywhere, tuples as arrays.
JSON_VALUES = json_values(SCALARS, TEXT)
#: JSON values without surrogates or tuples (what the standard library reads back identically).
CLEAN_JSON = st.recursive(
    CLEAN_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(CLEAN_TEXT, children, max_size=4)
    ),
    max_leaves=10,
)


def shuffled(value: Any, rng: random.Random) -> Any:
    """An equal value whose every dict was built in a different (random) insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    if isinstance(value, tuple):
        return tuple(shuffled(item, rng) for item in value)
    return value


def attempt_loads(data: str | bytes) -> tuple[Any, ProtocolError | None]:
    """``(loads(data), None)``, or ``(None, error)`` when loads raised a ProtocolError."""
    try:
        return loads(data), None
    except ProtocolError as exc:
        return None, exc


def expect_json_error(data: Any, *, category: Category = Category.PROVIDER) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        loads(data, category=category)
    assert info.value.code == "json"
    assert info.value.category is category
    assert str(info.value).startswith("invalid JSON: ")
    return info.value


# --------------------------------------------------------------------------- loads: refusals


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("-Infinity", "-Infinity"),
        ("[1, NaN]", "NaN"),
        ('{"a": Infinity}', "Infinity"),
        ("1e999", "1e999"),
        ("-1e999", "-1e999"),
        ("[0.5, 1E400]", "1E400"),
        ('{"a": 1, "a": 2}', "duplicate object key 'a'"),
        ('{"x": {"b": 1, "c": 2, "b": 3}}', "duplicate object key 'b'"),
        ('{"a": 1, "a": 1}', "duplicate object key"),
        ("[1] x", "Extra data"),
        ("{} {}", "Extra data"),
        ("", "Expecting value"),
        ("[1,]", ""),
        ("{'a': 1}", ""),
        ('"unterminated', ""),
        ('"tab\there"', ""),
    ],
)
def test_loads_refuses(text: str, needle: str) -> None:
    error = expect_json_error(text)
    assert needle in str(error)
    # The same refusal for the UTF-8 bytes of the same text.
    assert str(expect_json_error(text.encode())) == str(error)


@pytest.mark.parametrize(
    ("data", "byte"),
    [
        (b"\xff", 0),
        (b'"abc\xff"', 4),
        (b'["\xc3"]', 2),  # truncated 2-byte sequence
        (b'"\xed\xa0\x80"', 1),  # CESU-style encoded surrogate is not UTF-8
        (b'"\xc0\xaf"', 1),  # overlong encoding
    ],
)
def test_loads_refuses_invalid_utf8(data: bytes, byte: int) -> None:
    for form in (data, bytearray(data), memoryview(data)):
        error = expect_json_error(form)
        assert f"not UTF-8 at byte {byte}" in str(error)


def test_loads_category_passthrough() -> None:
    for category in Category:
        expect_json_error("NaN", category=category)
        expect_json_error(b"\xff", category=category)
        expect_json_error("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), category=category)


def test_loads_default_category_is_provider() -> None:
    with pytest.raises(ProtocolError) as info:
        loads("[")
    assert info.value.category is Category.PROVIDER
    assert info.value.code == "json"


def test_loads_huge_integer_is_protocol_error() -> None:
    limit = sys.get_int_max_str_digits()
    assert limit > 0  # the interpreter enforces a limit, so the text below exceeds it
    digits = "9" * (limit + 1)
    for text in (digits, f"[{digits}]", f'{{"n": -{digits}}}'):
        # ProtocolError is not a ValueError, so a leaking ValueError would not be caught here.
        error = expect_json_error(text)
        assert not isinstance(error, ValueError)
    # Just under the limit is a valid number.
    assert loads("9" * limit) == int("9" * limit)


def test_loads_huge_float_text_overflowing_is_refused() -> None:
    expect_json_error("1" * 400 + ".0")
    assert loads("1" * 300 + ".0") == float("1" * 300)


def test_loads_underflow_and_negative_zero_are_fine() -> None:
    assert loads("1e-999") == 0.0
    value = loads("-0.0")
    assert value == 0.0
    assert math.copysign(1.0, value) == -1.0


# --------------------------------------------------------------------------- loads: depth


@pytest.mark.parametrize("build", [nested_lists, nested_dicts])
def test_loads_depth_limit(build: Any) -> None:
    at_limit = json.dumps(build(MAX_DEPTH))
    assert loads(at_limit) == build(MAX_DEPTH)
    over = json.dumps(build(MAX_DEPTH + 1))
    error = expect_json_error(over)
    assert f"nested deeper than {MAX_DEPTH}" in str(error)


def test_loads_depth_limit_with_more_brackets_than_depth() -> None:
    # More than MAX_DEPTH brackets in total, so the depth is really measured: exactly at the limit
    # is accepted, one more level is refused.
    at_limit = [nested_lists(MAX_DEPTH - 1), []]
    assert loads(json.dumps(at_limit)) == at_limit
    assert loads(json.dumps({"a": nested_dicts(MAX_DEPTH - 1), "b": [[]]})) == {
        "a": nested_dicts(MAX_DEPTH - 1),
        "b": [[]],
    }
    expect_json_error(json.dumps([[], nested_lists(MAX_DEPTH)]))
    expect_json_error(json.dumps([nested_lists(MAX_DEPTH), []]))


def test_loads_depth_limit_mixed_and_wide() -> None:
    # Many brackets in total but shallow: fine.
    wide = "[" + ",".join(["[[]]"] * (MAX_DEPTH * 2)) + "]"
    assert len(loads(wide)) == MAX_DEPTH * 2
    # Brackets inside strings do not count as nesting.
    brackets = json.dumps(["[" * (MAX_DEPTH * 2)])
    assert loads(brackets) == ["[" * (MAX_DEPTH * 2)]
    # Alternating objects and arrays: exactly at the limit, then one level more.
    half = MAX_DEPTH // 2
    at_limit = '{"a":[' * half + "1" + "]}" * half
    assert loads(at_limit)
    expect_json_error("[" + at_limit + "]")


def test_loads_recursion_bomb_is_protocol_error() -> None:
    depth = 100_000
    expect_json_error("[" * depth + "]" * depth)
    expect_json_error('{"a":' * depth + "1" + "}" * depth)
    expect_json_error("[" * depth)  # unterminated as well


# --------------------------------------------------------------------------- loads: surrogates


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r'"\ud800"', "\ufffd"),
        (r'"\udfff"', "\ufffd"),
        (r'"\uD800"', "\ufffd"),
        (r'"\uDFFF"', "\ufffd"),
        (r'"\uDbFf"', "\ufffd"),
        (r'"x\uDC0A"', "x\ufffd"),
        (r'"\uD7FF\uE000"', "\ud7ff\ue000"),  # neighbours of the surrogate range: kept
        (r'"a\udc00b"', "a\ufffdb"),
        (r'"\ud83d\ude00"', "😀"),
        (r'"\uD83D\uDE00"', "😀"),
        (r'"\ude00\ud83d"', "\ufffd\ufffd"),  # reversed pair: two lone surrogates
        (r'"\ud83d\u0041"', "\ufffdA"),
        (r'"\ud83d\ud83d\ude00"', "\ufffd😀"),
        (r'"\\ud800"', "\\ud800"),  # an escaped backslash, not an escape
        (r'["\ud800", {"k": "\udfff"}]', ["\ufffd", {"k": "\ufffd"}]),
        (r'{"\ud800": 1}', {"\ufffd": 1}),
        (r'{"\udfff": {"\udbff": "\udfff"}}', {"\ufffd": {"\ufffd": "\ufffd"}}),
        (r'{"\ud83d\ude00": "\ud83d\ude00"}', {"😀": "😀"}),
    ],
)
def test_loads_repairs_lone_surrogate_escapes(text: str, expected: Any) -> None:
    assert loads(text) == expected
    assert loads(text.encode()) == expected
    assert not has_surrogate(loads(text))


def test_loads_str_with_raw_lone_surrogate() -> None:
    assert loads('"a\ud800b"') == "a\ufffdb"
    assert loads('{"\udfff": ["\ud800"]}') == {"\ufffd": ["\ufffd"]}
    # A raw (unpaired) high then low surrogate in a str are two code points: both repaired.
    assert loads('"\ud83d\ude00"') == "\ufffd\ufffd"


def test_loads_raw_surrogate_keys_that_are_duplicates_are_refused() -> None:
    expect_json_error('{"\ud800": 1, "\ud800": 2}')
    expect_json_error(r'{"\ud800": 1, "\ud800": 2}')


@pytest.mark.parametrize(
    "text",
    [
        r'{"\ud800": 1, "\udfff": 2}',
        r'{"\ud800": 1, "\ufffd": 2}',
        '{"\ud800": 1, "\ufffd": 2}',
        r'{"x": {"a\ud800": [1], "a\udbff": [2]}}',
    ],
)
def test_loads_refuses_keys_that_collide_after_repair(text: str) -> None:
    # Repair must not silently merge two distinct keys into one and drop a value: keys that become
    # equal once lone surrogates are replaced are duplicate keys, which loads refuses.
    error = expect_json_error(text)
    assert "duplicate object key" in str(error)


# --------------------------------------------------------------------------- loads: inputs


def test_loads_accepts_every_input_type() -> None:
    text = '{"a": [1, 2.5, "é😀", true, false, null]}'
    expected = {"a": [1, 2.5, "é😀", True, False, None]}
    data = text.encode()
    for form in (text, data, bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert loads(form) == expected


def test_loads_types_and_whitespace() -> None:
    assert loads(" \n\t[1 , 2]\r\n ") == [1, 2]
    assert type(loads("1")) is int
    assert type(loads("1.0")) is float
    assert type(loads("1e2")) is float
    assert loads("true") is True
    assert loads("null") is None
    assert type(loads("{}")) is dict
    assert type(loads("[]")) is list


# --------------------------------------------------------------------------- dumps: format


def test_dumps_compact_and_non_ascii_kept() -> None:
    value = {"a": [1, 2.5, None, True], "é": "ü😀\u2028"}
    text = dumps(value)
    assert text == '{"a":[1,2.5,null,true],"é":"ü😀\u2028"}'
    assert "\\u" not in text
    assert " " not in text
    assert dumpb(value) == text.encode("utf-8")
    assert isinstance(dumpb(value), bytes)


def test_dumps_escapes_what_json_requires() -> None:
    assert dumps('"\\\n\x00') == '"\\"\\\\\\n\\u0000"'


def test_dumps_canonical_sorts_keys_recursively() -> None:
    value = {"b": {"z": 1, "a": [{"y": 2, "x": 3}]}, "a": 0}
    assert dumps(value) == '{"b":{"z":1,"a":[{"y":2,"x":3}]},"a":0}'
    assert dumps(value, canonical=True) == '{"a":0,"b":{"a":[{"x":3,"y":2}],"z":1}}'
    assert dumpb(value, canonical=True) == b'{"a":0,"b":{"a":[{"x":3,"y":2}],"z":1}}'


def test_dumps_tuples_as_arrays() -> None:
    assert dumps((1, (2, [3]), {"a": ()})) == '[1,[2,[3]],{"a":[]}]'


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_dumps_refuses_non_finite_floats(number: float) -> None:
    for value, path in [
        (number, "value"),
        ([number], "value[0]"),
        ({"a": [1, number]}, "value.a[1]"),
        ((0, {"b": number}), "value[1].b"),
    ]:
        with pytest.raises(ValidationError) as info:
            dumps(value)
        assert str(info.value).startswith(f"{path}: ")
        assert "not a finite number" in str(info.value)
        with pytest.raises(ValidationError):
            dumpb(value, canonical=True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1: "a"}, "value: object key 1 is not a string"),
        ({None: "a"}, "value: object key None is not a string"),
        ({(1, 2): "a"}, "value: object key (1, 2) is not a string"),
        ({True: "a"}, "value: object key True is not a string"),
        ({"a": [{1.5: 0}]}, "value.a[0]: object key 1.5 is not a string"),
        ({1, 2}, "value: set is not a JSON type"),
        (frozenset(), "value: frozenset is not a JSON type"),
        (b"abc", "value: bytes is not a JSON type"),
        (bytearray(b"abc"), "value: bytearray is not a JSON type"),
        (object(), "value: object is not a JSON type"),
        ({"a": [1, {"b": b"x"}]}, "value.a[1].b: bytes is not a JSON type"),
        ([1, 2, complex(1, 2)], "value[2]: complex is not a JSON type"),
        (range(3), "value: range is not a JSON type"),
    ],
)
def test_dumps_refuses_non_json(value: Any, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        dumps(value)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValidationError):
        check_json(value)


def test_check_json_path_uses_what() -> None:
    with pytest.raises(ValidationError) as info:
        check_json({"a": [1, {"b": math.nan}]}, what="args")
    assert str(info.value).startswith("args.a[1].b: ")


def test_dumps_refuses_cycles() -> None:
    items: list[Any] = [1]
    items.append(items)
    with pytest.raises(ValidationError) as info:
        dumps(items)
    assert str(info.value) == "value[1]: contains itself (a cycle)"

    obj: dict[str, Any] = {}
    obj["x"] = [obj]
    with pytest.raises(ValidationError) as info:
        dumps(obj)
    assert str(info.value) == "value.x[0]: contains itself (a cycle)"

    direct: dict[str, Any] = {}
    direct["self"] = direct
    with pytest.raises(ValidationError, match=r"^value\.outer\.self: contains itself"):
        dumps({"outer": direct})


def test_dumps_accepts_shared_sub_objects() -> None:
    shared = {"k": [1, 2]}
    value = {"a": shared, "b": [shared, shared], "c": [shared]}
    assert dumps(value) == '{"a":{"k":[1,2]},"b":[{"k":[1,2]},{"k":[1,2]}],"c":[{"k":[1,2]}]}'
    assert check_json(value) is value
    # A shared object needing repair is repaired everywhere it appears.
    dirty = ["\ud800"]
    assert dumps([dirty, {"x": dirty}]) == '[["\ufffd"],{"x":["\ufffd"]}]'


@pytest.mark.parametrize("build", [nested_lists, nested_dicts])
def test_dumps_depth_limit(build: Any) -> None:
    at_limit = build(MAX_DEPTH)
    assert loads(dumps(at_limit)) == at_limit
    assert check_json(at_limit) is at_limit
    over = build(MAX_DEPTH + 1)
    for call in (dumps, dumpb, check_json):
        with pytest.raises(ValidationError) as info:
            call(over)
        assert f"nested deeper than {MAX_DEPTH}" in str(info.value)


def test_dumps_depth_limit_with_tuples() -> None:
    value: Any = ()
    for _ in range(MAX_DEPTH):
        value = (value,)
    with pytest.raises(ValidationError, match="nested deeper than"):
        dumps(value)


def test_dumps_huge_integer_is_validation_error() -> None:
    # check_json promises its result serialises with dumps, and dumps promises ValidationError for
    # anything it cannot write: an int beyond the interpreter's int-string limit must not leak a
    # bare ValueError out of json.dumps.
    huge = 10 ** (sys.get_int_max_str_digits() + 1)
    for value, path in ((huge, "value"), ([1, huge], "value[1]"), ({"n": -huge}, "value.n")):
        with pytest.raises(ValidationError) as info:
            dumps(value)  # today a bare ValueError from int.__repr__ escapes here
        assert str(info.value).startswith(f"{path}: ")
        with pytest.raises(ValidationError):
            check_json(value)


def test_dumps_big_but_printable_integers_round_trip() -> None:
    big = 10 ** (sys.get_int_max_str_digits() - 1)
    assert loads(dumps([big, -big])) == [big, -big]


# --------------------------------------------------------------------------- dumps: surrogates


def test_dumps_repairs_lone_surrogates() -> None:
    value = {"k\ud800": ["a\udfff", ("\ud83d",)], "ok": "😀"}
    text = dumps(value)
    assert text == '{"k\ufffd":["a\ufffd",["\ufffd"]],"ok":"😀"}'
    assert text.encode("utf-8")  # does not raise
    assert dumpb(value) == text.encode("utf-8")
    assert loads(text) == {"k\ufffd": ["a\ufffd", ["\ufffd"]], "ok": "😀"}


def test_dumps_raw_surrogate_pair_in_python_str_becomes_two_replacements() -> None:
    # Two surrogate code points in a Python str are not a character: each is lone.
    assert dumps("\ud83d\ude00") == '"\ufffd\ufffd"'


def test_dumps_refuses_keys_that_collide_after_repair() -> None:
    # Repairing {"\ud800": 1, "\udfff": 2} would give two "\ufffd" keys; silently keeping one
    # value loses data, so it must be refused like any other non-JSON input.
    # (Built from pairs: ruff's F601 mistakes distinct surrogate keys for repeated ones.)
    for keys in (("\ud800", "\udfff"), ("\ufffd", "\ud800")):
        value = dict(zip(keys, (1, 2), strict=True))
        assert len(value) == 2
        with pytest.raises(ValidationError):
            dumps(value)
        with pytest.raises(ValidationError):
            check_json(value)


# --------------------------------------------------------------------------- check_json


def test_check_json_returns_same_object_when_clean() -> None:
    for value in (
        None,
        True,
        0,
        -1.5,
        "é😀",
        [],
        {},
        [1, {"a": [2, "b"]}],
        {"x": [None, {"y": ["z"]}]},
    ):
        assert check_json(value) is value


def test_check_json_turns_tuples_into_lists_and_keeps_clean_dicts() -> None:
    # What check_json returns is what loads would give back from dumps: arrays are lists.
    value = (1, ["\ud800"], (2,))
    result = check_json(value)
    assert same_structure(result, [1, ["\ufffd"], [2]])
    assert same_structure(check_json(()), [])
    assert same_structure(check_json({"a": (1,)}), {"a": [1]})
    ordered = {"a": 1}
    assert check_json(ordered) is ordered


def test_check_json_copies_read_only_mappings() -> None:
    proxy = types.MappingProxyType({"a": [1]})
    result = check_json(proxy)
    assert type(result) is dict
    assert result == {"a": [1]}
    assert dumps(proxy) == '{"a":[1]}'


def test_check_json_never_mutates_input_when_repairing() -> None:
    inner = ["x", "\ud800"]
    key_dirty = {"\udfff": 1, "ok": inner}
    value = {"a": key_dirty, "b": (inner, "clean"), "c": [1, 2]}
    snapshot = copy.deepcopy(value)
    result = check_json(value)
    assert same_structure(value, snapshot)
    assert value["a"] is key_dirty  # no reassignment
    assert key_dirty["ok"] is inner
    assert inner == ["x", "\ud800"]
    assert result == {
        "a": {"\ufffd": 1, "ok": ["x", "\ufffd"]},
        "b": [["x", "\ufffd"], "clean"],
        "c": [1, 2],
    }
    assert type(result["b"]) is list
    assert result is not value
    assert result["c"] is value["c"]  # clean branches are shared, not copied
    assert not has_surrogate(result)


def test_check_json_repairs_top_level_string() -> None:
    assert check_json("\ud800x") == "\ufffdx"


# --------------------------------------------------------------------------- codec re-exports


def test_codec_reexports_strict_json() -> None:
    assert codec.loads is loads
    assert codec.dumps is dumps
    assert codec.dumpb is dumpb
    assert codec.check_json is check_json
    assert codec.MAX_DEPTH == MAX_DEPTH == 200


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(JSON_VALUES)
def test_property_round_trip_repairs_surrogates(value: Any) -> None:
    text = dumps(value)
    expected = repaired(value)
    assert same_structure(loads(text), expected)
    assert same_structure(loads(text.encode("utf-8")), expected)
    assert dumpb(value) == text.encode("utf-8")
    # The text is valid JSON for the standard library too, and has no \u-escaped non-ASCII.
    assert same_structure(json.loads(text), expected)


@SETTINGS
@given(JSON_VALUES)
def test_property_check_json(value: Any) -> None:
    snapshot = copy.deepcopy(value)
    result = check_json(value)
    assert same_structure(value, snapshot)  # never mutated
    if has_surrogate(value) or has_tuple(value):
        assert result is not value
        assert not has_surrogate(result)
        assert not has_tuple(result)
    else:
        assert result is value
    assert same_structure(result, repaired(value))
    assert dumps(result) == dumps(value)


@SETTINGS
@given(JSON_VALUES, st.randoms(use_true_random=False))
def test_property_canonical_ignores_insertion_order(value: Any, rng: random.Random) -> None:
    other = shuffled(value, rng)
    assert other == value
    canonical = dumps(value, canonical=True)
    assert dumps(other, canonical=True) == canonical
    assert dumpb(other, canonical=True) == canonical.encode("utf-8")
    assert same_structure(loads(canonical), repaired(value))
    assert canonical == json.dumps(
        repaired(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True
    )


@SETTINGS
@given(
    CLEAN_JSON,
    st.booleans(),
    st.sampled_from([None, 0, 2, "\t"]),
    st.sampled_from([(",", ":"), (", ", ": ")]),
)
def test_property_agrees_with_stdlib(
    value: Any, ensure_ascii: bool, indent: int | str | None, separators: tuple[str, str]
) -> None:
    text = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators)
    expected = json.loads(text)
    assert same_structure(loads(text), expected)
    assert same_structure(loads(text.encode("utf-8")), expected)
    assert same_structure(loads(bytearray(text.encode("utf-8"))), expected)


@SETTINGS
@given(st.one_of(TEXT, st.binary()))
def test_property_loads_raises_only_protocol_error(data: str | bytes) -> None:
    value, error = attempt_loads(data)
    if error is not None:
        assert error.code == "json"
    else:
        assert not has_surrogate(value)
        dumps(value)  # whatever loads returns is strict JSON


@SETTINGS
@given(CLEAN_JSON, st.integers(min_value=0), st.sampled_from(["", "x", "]", "}", ",", "NaN"]))
def test_property_loads_on_corrupted_json(value: Any, position: int, junk: str) -> None:
    text = json.dumps(value)
    cut = position % (len(text) + 1)
    corrupted = text[:cut] + junk + text[cut + 1 :]
    result, error = attempt_loads(corrupted)
    if error is not None:
        assert error.code == "json"
    else:
        # Where both accept the text they agree, up to the repair of lone surrogates.
        assert same_structure(result, repaired(json.loads(corrupted)))


# --------------------------------------------------------------------------- the fast path


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2]",  # not an object
        '"text"',
        " {}",  # the fast path wants the object first
        '{"a": 1} x',  # trailing data
        '{"a": 1',  # not JSON
        '{"a": NaN}',
        '{"a": 1e999}',
        '{"a": "\\ud800"}',  # a surrogate escape: loads repairs it
        '{"a": "\ud800"}',  # a lone surrogate in the text itself
        "{" * (MAX_DEPTH + 1) + "}" * (MAX_DEPTH + 1),
    ],
)
def test_the_fast_path_declines_what_loads_must_judge(text: str) -> None:
    assert loads_object_unchecked(text) is None


@pytest.mark.parametrize(
    "text", ['{"a": [1, {"b": null}]}', '{"a": 1} \n', '{"caf\u00e9": "ok"}', "{}"]
)
def test_the_fast_path_parses_plain_objects_like_loads(text: str) -> None:
    assert loads_object_unchecked(text) == loads(text)


def test_the_fast_path_leaves_duplicate_keys_to_its_caller() -> None:
    # Documented: keys are not checked here; the caller proves uniqueness by counting colons.
    text = '{"a": 1, "a": 2}'
    assert loads_object_unchecked(text) == {"a": 2}
    assert text.count(":") == 2 != len({"a": 2})
    with pytest.raises(ProtocolError, match="duplicate"):
        loads(text)


@given(JSON_VALUES, st.booleans())
def test_the_fast_path_agrees_with_loads_on_any_object(value: Any, ascii_only: bool) -> None:
    text = json.dumps({"v": value}, ensure_ascii=ascii_only)
    fast = loads_object_unchecked(text)
    if fast is not None:
        assert fast == loads(text)


@given(JSON_VALUES)
def test_the_fast_check_agrees_with_the_full_walk(value: Any) -> None:
    from protocols._json import _check, _check_fast, _Unusual

    try:
        fast = _check_fast(value, 0, set())
    except _Unusual:
        return  # left to the full walk, which check_json then runs
    full = _check(value, "value", 0, set())
    assert fast == full
    assert type(fast) is type(full)
    assert (fast is value) == (full is value)


@pytest.mark.parametrize(
    "value",
    [
        {chr(0xD800): 1, chr(0xFFFD): 2},  # a repaired key meets an original one
        {chr(0xFFFD): 2, chr(0xD800): 1},
        {chr(0xD800): 1, chr(0xDC00): 2},  # two keys repaired to the same one
        {1: "x"},
        [float("nan")],
        {"a": float("inf")},
    ],
)
def test_what_the_fast_check_refuses_still_gets_the_full_error(value: Any) -> None:
    with pytest.raises(ValidationError, match=r"value"):
        check_json(value)


OWN_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec=None), max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=500)
@given(OWN_VALUES)
def test_dumpb_own_gives_dumpbs_bytes(value: Any) -> None:
    """The served protocols' fast serialiser writes exactly what the checked one writes, lone
    surrogates repaired the same way."""
    assert dumpb_own(value) == dumpb(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, [math.nan], {"a": [math.inf]}])
def test_dumpb_own_refuses_what_dumpb_refuses(bad: Any) -> None:
    with pytest.raises(ValidationError):
        dumpb_own(bad)
