"""protocols.workspace, text: positions, ranges and search over a file's text."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.workspace import (
    MAX_QUERY_LENGTH,
    File,
    Position,
    Range,
    SearchMatch,
    Workspace,
    WorkspaceError,
    advance,
    clamp_position,
    clamp_range,
    compile_query,
    end_position,
    full_range,
    offset_at,
    position_at,
    replace_text,
    search_text,
    slice_range,
    splice_range,
)

SETTINGS = settings(max_examples=80, deadline=None)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-fake-image").decode()


def code_of(excinfo: pytest.ExceptionInfo[WorkspaceError]) -> str:
    return excinfo.value.code


def png(path: str = "img.png") -> File:
    return File.binary(path, PNG, "image/png")


# --------------------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("line", "column"), [(0, 1), (1, 0), (-1, 1), (True, 1), (1, 1.0), ("1", 1)]
)
def test_positions_are_one_based_integers(line: object, column: object) -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        Position(line, column)  # type: ignore[arg-type]
    assert code_of(excinfo) == "range"


def test_a_range_must_not_end_before_it_starts() -> None:
    with pytest.raises(WorkspaceError, match="must not end before") as excinfo:
        Range.of(2, 1, 1, 5)
    assert code_of(excinfo) == "range"
    with pytest.raises(WorkspaceError):
        Range.of(1, 3, 1, 2)
    with pytest.raises(WorkspaceError):
        Range((1, 1), (1, 2))  # type: ignore[arg-type]
    assert Range.of(1, 2, 1, 2) == Range(Position(1, 2), Position(1, 2))


def test_positions_are_ordered_by_line_then_column() -> None:
    assert Position(1, 9) < Position(2, 1) < Position(2, 2)
    assert sorted([Position(3, 1), Position(1, 5), Position(1, 2)]) == [
        Position(1, 2),
        Position(1, 5),
        Position(3, 1),
    ]


TEXT = "first\nsecond line\n\nlast"


@pytest.mark.parametrize(
    ("position", "clamped", "offset"),
    [
        (Position(1, 1), Position(1, 1), 0),
        (Position(1, 6), Position(1, 6), 5),
        (Position(1, 7), Position(1, 6), 5),
        (Position(1, 99), Position(1, 6), 5),
        (Position(2, 1), Position(2, 1), 6),
        (Position(2, 12), Position(2, 12), 17),
        (Position(3, 5), Position(3, 1), 18),
        (Position(4, 5), Position(4, 5), 23),
        (Position(4, 6), Position(4, 5), 23),
        (Position(5, 1), Position(4, 5), 23),
        (Position(10**9, 3), Position(4, 5), 23),
    ],
)
def test_clamp_position_and_offset(position: Position, clamped: Position, offset: int) -> None:
    assert clamp_position(TEXT, position) == clamped
    assert offset_at(TEXT, position) == offset
    assert position_at(TEXT, offset) == clamped


def test_positions_in_empty_text() -> None:
    assert end_position("") == Position(1, 1)
    assert clamp_position("", Position(3, 3)) == Position(1, 1)
    assert full_range("") == Range.of(1, 1, 1, 1)
    assert position_at("", 5) == Position(1, 1)
    assert position_at("ab", -3) == Position(1, 1)


def test_end_position_counts_a_trailing_newline_as_a_new_line() -> None:
    assert end_position("ab\n") == Position(2, 1)
    assert end_position("ab") == Position(1, 3)
    assert full_range("a\nbc") == Range.of(1, 1, 2, 3)


def test_slice_and_splice() -> None:
    assert slice_range(TEXT, Range.of(2, 1, 2, 7)) == "second"
    assert slice_range(TEXT, Range.of(1, 3, 2, 3)) == "rst\nse"
    assert slice_range(TEXT, Range.of(4, 1, 9, 9)) == "last"
    assert slice_range(TEXT, Range.of(2, 2, 2, 2)) == ""
    assert splice_range("const x = 1", Range.of(1, 11, 1, 12), "0") == "const x = 0"
    # an empty span inserts; an empty insert deletes
    assert splice_range("ab", Range.of(1, 2, 1, 2), "X") == "aXb"
    assert splice_range("a\nb\nc", Range.of(2, 1, 3, 1), "") == "a\nc"
    # past the end: appends
    assert splice_range("ab", Range.of(7, 1, 9, 9), "!") == "ab!"


def test_advance() -> None:
    assert advance(Position(2, 3), "") == Position(2, 3)
    assert advance(Position(2, 3), "abc") == Position(2, 6)
    assert advance(Position(2, 3), "ab\n") == Position(3, 1)
    assert advance(Position(2, 3), "ab\ncd\nxyz") == Position(4, 4)


texts = st.text(alphabet="ab\n\r😀é", max_size=40)
positions = st.builds(Position, st.integers(1, 12), st.integers(1, 12))


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    a, b = sorted([draw(positions), draw(positions)])
    return Range(a, b)


@SETTINGS
@given(text=texts, position=positions)
def test_clamp_is_idempotent_and_offsets_invert(text: str, position: Position) -> None:
    clamped = clamp_position(text, position)
    assert clamp_position(text, clamped) == clamped
    offset = offset_at(text, position)
    assert 0 <= offset <= len(text)
    assert position_at(text, offset) == clamped
    assert offset_at(text, clamped) == offset
    assert clamped <= end_position(text)


@SETTINGS
@given(text=texts, span=ranges())
def test_clamp_range_is_idempotent_and_valid(text: str, span: Range) -> None:
    clamped = clamp_range(text, span)
    assert clamp_range(text, clamped) == clamped
    assert clamped.start <= clamped.end <= end_position(text)
    assert slice_range(text, clamped) == slice_range(text, span)


@SETTINGS
@given(text=texts, a=positions, b=positions)
def test_offset_is_monotonic(text: str, a: Position, b: Position) -> None:
    low, high = sorted([a, b])
    assert offset_at(text, low) <= offset_at(text, high)


@SETTINGS
@given(text=texts, span=ranges(), insert=texts)
def test_splice_then_read_the_inserted_range(text: str, span: Range, insert: str) -> None:
    spliced = splice_range(text, span, insert)
    start = clamp_range(text, span).start
    inserted = Range(start, advance(start, insert))
    assert slice_range(spliced, inserted) == insert
    a, b = offset_at(text, span.start), offset_at(text, span.end)
    assert spliced == text[:a] + insert + text[b:]
    # what came before and after the range is untouched
    assert spliced.startswith(text[:a])
    assert spliced.endswith(text[b:])


@SETTINGS
@given(text=texts, span=ranges())
def test_splicing_a_slice_back_changes_nothing(text: str, span: Range) -> None:
    assert splice_range(text, span, slice_range(text, span)) == text


@SETTINGS
@given(text=st.text(max_size=60))
def test_text_size_and_lines_are_consistent(text: str) -> None:
    file = File.text("a.txt", text)
    stored = file.content.text  # type: ignore[union-attr]
    assert file.size == len(stored.encode("utf-8"))
    assert file.lines == (0 if stored == "" else len(stored.split("\n")))
    assert file.lines == (0 if stored == "" else end_position(stored).line)


@SETTINGS
@given(raw=st.binary(min_size=1, max_size=64))
def test_binary_size_matches_decoding(raw: bytes) -> None:
    data = base64.b64encode(raw).decode()
    file = File.binary("a.webp", data, "image/webp")
    assert file.size == len(base64.b64decode(file.content.data))  # type: ignore[union-attr]
    assert file.lines == 0


# --------------------------------------------------------------------------- search helpers


def test_compile_query_refusals() -> None:
    for bad in ["", "x" * (MAX_QUERY_LENGTH + 1)]:
        with pytest.raises(WorkspaceError) as excinfo:
            compile_query(bad)
        assert code_of(excinfo) == "pattern"
    with pytest.raises(WorkspaceError, match="invalid regular expression") as excinfo:
        compile_query("a(b", regex=True)
    assert code_of(excinfo) == "pattern"
    # the same text is fine literally
    assert compile_query("a(b").pattern == re.escape("a(b")


def test_absurd_regular_expressions_are_pattern_errors() -> None:
    with pytest.raises(WorkspaceError, match="too complex") as excinfo:
        compile_query("a{99999999999}", regex=True)
    assert code_of(excinfo) == "pattern"
    # deep nesting either compiles or is refused as a pattern error -- never a RecursionError
    deep = "(" * 499 + ")" * 499
    codes: list[str] = []
    try:
        compile_query(deep, regex=True)
    except WorkspaceError as error:
        codes.append(error.code)
    assert codes in ([], ["pattern"])


def test_search_text_reports_lines_columns_and_the_whole_line() -> None:
    text = "alpha beta\ngamma alpha\n\nalphalpha"
    matches = search_text("f", text, compile_query("alpha"))
    assert [(m.line, m.column, m.length, m.text) for m in matches] == [
        (1, 1, 5, "alpha beta"),
        (2, 7, 5, "gamma alpha"),
        (4, 1, 5, "alphalpha"),
    ]
    assert search_text("f", text, compile_query("alpha"), limit=2) == matches[:2]
    assert search_text("f", text, compile_query("alpha"), limit=0) == []


def test_regex_search_is_multiline_and_may_span_lines() -> None:
    text = "one\ntwo\nthree"
    starts = search_text("f", text, compile_query(r"^t\w+", regex=True))
    assert [(m.line, m.column, m.length) for m in starts] == [(2, 1, 3), (3, 1, 5)]
    span = search_text("f", text, compile_query(r"e\nt", regex=True))
    assert [(m.line, m.column, m.length, m.text) for m in span] == [(1, 3, 3, "one")]


def test_replace_text_literal_and_templates() -> None:
    pattern = compile_query("a.b")
    assert replace_text("a.b axb a.b", pattern, r"\1") == (r"\1 axb \1", 2)
    group = compile_query(r"(\w+)@(\w+)", regex=True)
    assert replace_text("me@host", group, r"\2 at \1", regex=True) == ("host at me", 1)
    with pytest.raises(WorkspaceError) as excinfo:
        replace_text("no match here", group, r"\3", regex=True)
    assert code_of(excinfo) == "pattern"


def naive_search(path: str, text: str, query: str) -> list[SearchMatch]:
    """Reference: every non-overlapping occurrence, left to right, by plain string scanning."""
    found: list[SearchMatch] = []
    lines = text.split("\n")
    at = text.find(query)
    while at >= 0:
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        found.append(SearchMatch(path, line, column, len(query), lines[line - 1]))
        at = text.find(query, at + len(query))
    return found


@SETTINGS
@given(
    files=st.dictionaries(
        st.sampled_from(["a.txt", "b.md", "c/d.py", "e"]),
        st.text(alphabet="ab\n ", max_size=30),
        max_size=4,
    ),
    query=st.text(alphabet="ab\n ", min_size=1, max_size=3),
    limit=st.none() | st.integers(1, 5),
)
def test_search_matches_a_naive_reference(
    files: dict[str, str], query: str, limit: int | None
) -> None:
    workspace = Workspace()
    workspace.put(png())  # binaries are skipped
    workspace.write_many(files)
    expected = [m for path, text in files.items() for m in naive_search(path, text, query)]
    if limit is not None:
        expected = expected[:limit]
    assert list(workspace.search(query, limit=limit)) == expected


@SETTINGS
@given(
    text=st.text(alphabet="aAbB\n", max_size=30),
    query=st.text(alphabet="aAbB", min_size=1, max_size=3),
)
def test_case_insensitive_search_matches_a_lowercased_reference(text: str, query: str) -> None:
    workspace = Workspace(files=[File.text("x", text)])
    expected = [
        (m.line, m.column, m.length) for m in naive_search("x", text.lower(), query.lower())
    ]
    found = workspace.search(query, case_sensitive=False)
    assert [(m.line, m.column, m.length) for m in found] == expected
    assert all(m.text == text.split("\n")[m.line - 1] for m in found)


@SETTINGS
@given(
    text=st.text(alphabet="ab\n", max_size=30),
    query=st.text(alphabet="ab", min_size=1, max_size=2),
    replacement=st.text(alphabet="xy\n", max_size=3),
)
def test_replace_count_equals_search_count(text: str, query: str, replacement: str) -> None:
    workspace = Workspace(files=[File.text("x", text)])
    matches = len(workspace.search(query))
    result = workspace.replace(query, replacement)
    assert result.replaced == matches
    assert workspace.read("x") == text.replace(query, replacement)
    assert result.files == (("x",) if matches else ())
