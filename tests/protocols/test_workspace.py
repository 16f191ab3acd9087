"""Tests for protocols.workspace: files, paths, ranges, the in-memory workspace, its manager,
snapshots through the codec and fenced rendering -- explicit cases, then property tests."""

from __future__ import annotations

import base64
import copy
import logging
import re

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.codec import decode, encode, from_json, to_json
from protocols.errors import Category, ProtocolError, ValidationError
from protocols.workspace import (
    MAX_PATH_LENGTH,
    MAX_QUERY_LENGTH,
    BinaryContent,
    ClearEvent,
    File,
    FileInfo,
    MoveEvent,
    Position,
    Range,
    ReadResult,
    RemoveEvent,
    ReplaceResult,
    SearchMatch,
    TextContent,
    Workspace,
    WorkspaceError,
    WorkspaceEvent,
    WorkspaceManager,
    WorkspaceSnapshot,
    WriteEvent,
    advance,
    clamp_position,
    clamp_range,
    compile_query,
    end_position,
    full_range,
    infer_language,
    normalize_path,
    offset_at,
    position_at,
    render_fenced,
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


# --------------------------------------------------------------------------- errors


def test_workspace_error_is_a_user_validation_error() -> None:
    error = WorkspaceError("nope", code="range", path="a.txt")
    assert isinstance(error, ValidationError)
    assert isinstance(error, ValueError)
    assert (error.code, error.category, error.retryable, error.path) == (
        "range",
        Category.USER,
        False,
        "a.txt",
    )
    assert str(error) == "nope"


# --------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    ("given_path", "expected"),
    [
        ("a.txt", "a.txt"),
        ("src/main.py", "src/main.py"),
        ("./a.txt", "a.txt"),
        ("a/./b", "a/b"),
        ("a/b/.", "a/b"),
        ("with space/ü.md", "with space/ü.md"),
        ("...", "..."),
        ("..a/b..", "..a/b.."),
        ("back\\slash", "back\\slash"),
    ],
)
def test_normalize_path_accepts_relative_paths(given_path: str, expected: str) -> None:
    assert normalize_path(given_path) == expected
    assert normalize_path(expected) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "",
        ".",
        "./.",
        "/etc/passwd",
        "/",
        "../x",
        "a/../b",
        "a/..",
        "a//b",
        "a/",
        "a\x00b",
        "a\nb",
        "tab\there",
        "del\x7f",
        "x" * (MAX_PATH_LENGTH + 1),
    ],
)
def test_normalize_path_refuses_unsafe_paths(bad: str) -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        normalize_path(bad)
    assert code_of(excinfo) == "path"


def test_normalize_path_refuses_non_strings() -> None:
    with pytest.raises(WorkspaceError, match="must be a string") as excinfo:
        normalize_path(b"a.txt")
    assert code_of(excinfo) == "path"


def test_the_longest_path_is_accepted() -> None:
    path = "x" * MAX_PATH_LENGTH
    assert normalize_path(path) == path


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("main.py", "python"),
        ("src/app.ts", "typescript"),
        ("README.MD", "markdown"),
        ("archive.tar.json", "json"),
        ("Makefile", "text"),
        ("notes.unknownext", "text"),
        ("dir.py/file", "text"),
        (".bashrc", "text"),
        ("run.sh", "bash"),
        ("trailing.", "text"),
    ],
)
def test_infer_language(path: str, language: str) -> None:
    assert infer_language(path) == language


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    ("text", "size", "lines"),
    [
        ("", 0, 0),
        ("a", 1, 1),
        ("a\n", 2, 2),
        ("a\nb", 3, 2),
        ("\n\n", 2, 3),
        ("é", 2, 1),
        ("日本", 6, 1),
        ("😀\n", 5, 2),
        ("a\r\nb", 4, 2),
    ],
)
def test_text_file_size_and_lines(text: str, size: int, lines: int) -> None:
    file = File.text("a.txt", text)
    assert (file.size, file.lines) == (size, lines)
    assert file.is_text
    assert not file.is_binary
    assert not file.is_image
    assert (file.language, file.mime, file.data, file.state) == ("text", None, None, "created")


@pytest.mark.parametrize("raw", [b"a", b"ab", b"abc", b"abcd", bytes(range(256)) * 3])
def test_binary_size_is_the_decoded_size(raw: bytes) -> None:
    data = base64.b64encode(raw).decode()
    file = File.binary("x.gif", data, "image/gif")
    assert file.size == len(raw)
    assert file.lines == 0
    assert file.is_binary
    assert file.is_image
    assert not file.is_text
    assert (file.mime, file.data, file.language) == ("image/gif", data, None)


def test_binary_padding_variants_are_counted_exactly() -> None:
    assert File.binary("a.png", "QQ==", "image/png").size == 1
    assert File.binary("a.png", "QUI=", "image/png").size == 2
    assert File.binary("a.png", "QUJD", "image/png").size == 3


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "QQ=",
        "QQ",
        "Q===",
        "QR==",  # non-zero leftover bits: not canonical
        "QUJ=",  # idem for one '='
        "QU JD",
        "QUJD\n",
        "QU-_",  # URL-safe alphabet
        "=QUJ",
        "QQ==QUJD",
    ],
)
def test_binary_data_must_be_canonical_base64(bad: str) -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        File.binary("a.png", bad, "image/png")
    assert code_of(excinfo) == "content"


@pytest.mark.parametrize("mime", ["image/bmp", "text/plain", "", "IMAGE/PNG"])
def test_binary_mime_must_be_a_supported_image(mime: str) -> None:
    with pytest.raises(WorkspaceError, match="unsupported MIME") as excinfo:
        File.binary("a.png", PNG, mime)
    assert code_of(excinfo) == "content"


@pytest.mark.parametrize("language", ["c++", "objective-c", "f#", "x.y", "a" * 64])
def test_languages_that_fit_a_fence_info_string(language: str) -> None:
    assert File.text("a", "x", language).language == language


@pytest.mark.parametrize("language", ["", "a b", "```", "py\n", "-x", "a" * 65])
def test_languages_that_could_break_a_fence_are_refused(language: str) -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        File.text("a", "x", language)
    assert code_of(excinfo) == "content"


def test_file_text_infers_the_language_and_normalises_the_path() -> None:
    file = File.text("./src/app.py", "x = 1")
    assert file.path == "src/app.py"
    assert file.language == "python"
    assert File.text("a.py", "x", "text").language == "text"


def test_file_constructor_refuses_a_bad_path_content_or_state() -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        File("../a", TextContent("x", "text"))
    assert code_of(excinfo) == "path"
    with pytest.raises(WorkspaceError) as excinfo:
        File("a", "just a string")  # type: ignore[arg-type]
    assert code_of(excinfo) == "content"
    with pytest.raises(WorkspaceError):
        File("a", TextContent("x", "text"), "deleted")  # type: ignore[arg-type]
    with pytest.raises(WorkspaceError) as excinfo:
        TextContent(b"bytes", "text")
    assert code_of(excinfo) == "content"


def test_lone_surrogates_in_text_are_repaired() -> None:
    file = File.text("a.txt", "x\ud800y")
    assert file.content == TextContent("x\ufffdy", "text")
    assert file.size == len("x\ufffdy".encode())


def test_file_is_frozen_and_survives_copies_and_json() -> None:
    file = File.text("a.md", "# hi\n", state="modified")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        file.path = "b.md"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        file.size = 0  # type: ignore[misc]
    assert copy.deepcopy(file) == file
    assert from_json(File, to_json(file)) == file
    image = png()
    assert decode(File, encode(image)) == image
    # size and lines are derived, not stored: the JSON form has neither.
    assert set(to_json(file)) == {"path", "content", "state"}


def test_file_json_with_a_stored_size_is_refused() -> None:
    with pytest.raises(ProtocolError, match="size"):
        decode(File, '{"path":"a","content":{"text":"x","language":"text"},"size":99}')


def test_file_info() -> None:
    file = File.text("a.txt", "x\ny", state="modified")
    assert file.info() == FileInfo("a.txt", 3, 2, "modified")


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


# --------------------------------------------------------------------------- workspace: edits


def test_write_then_read_and_states() -> None:
    workspace = Workspace("w")
    created = workspace.write("a.py", "x = 1\n")
    assert (created.state, created.language, created.path) == ("created", "python", "a.py")
    assert workspace.read("a.py") == "x = 1\n"
    modified = workspace.write("./a.py", "x = 2\n")
    assert modified.state == "modified"
    assert workspace.file("a.py") is modified
    # the value held before the edit keeps its content
    assert created.content == TextContent("x = 1\n", "python")
    assert created.size == 6


def test_whole_write_keeps_an_existing_language() -> None:
    workspace = Workspace(files=[File.text("notes.py", "x", "text")])
    assert workspace.write("notes.py", "y").language == "text"


def test_whole_write_over_a_binary_retypes_it_to_text() -> None:
    workspace = Workspace(files=[png("pic.png")])
    stored = workspace.write("pic.png", "now text")
    assert stored.is_text
    assert stored.state == "modified"
    assert stored.language == "text"
    assert workspace.read("pic.png") == "now text"


def test_ranged_write_splices_with_clamping() -> None:
    workspace = Workspace()
    workspace.write("a.ts", "const x = 1")
    stored = workspace.write("a.ts", "0", Range.of(1, 11, 1, 12))
    assert workspace.read("a.ts") == "const x = 0"
    assert stored.state == "modified"
    assert stored.language == "typescript"
    workspace.write("a.ts", ";", Range.of(5, 1, 9, 9))
    assert workspace.read("a.ts") == "const x = 0;"


def test_ranged_write_on_a_binary_or_absent_file_is_refused() -> None:
    workspace = Workspace(files=[png()])
    before = workspace.snapshot()
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.write("img.png", "x", Range.of(1, 1, 1, 1))
    assert code_of(excinfo) == "modality"
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.write("absent.txt", "x", Range.of(1, 1, 1, 1))
    assert code_of(excinfo) == "not_found"
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.write("img.png", "x", (1, 1))  # type: ignore[arg-type]
    assert code_of(excinfo) == "range"
    assert workspace.snapshot() == before


def test_read_variants() -> None:
    workspace = Workspace(files=[File.text("a.txt", "one\ntwo\nthree"), png()])
    assert workspace.read("a.txt", Range.of(2, 1, 2, 99)) == ReadResult(
        "a.txt", "two", Range.of(2, 1, 2, 4), 3
    )
    assert workspace.read("a.txt", Range.of(9, 9, 9, 9)) == ReadResult(
        "a.txt", "", Range.of(3, 6, 3, 6), 3
    )
    assert workspace.read("img.png") is None
    assert workspace.read("absent") is None
    assert workspace.read("absent", Range.of(1, 1, 1, 1)) is None
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.read("img.png", Range.of(1, 1, 1, 1))
    assert code_of(excinfo) == "modality"
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.read("../a.txt")
    assert code_of(excinfo) == "path"
    assert workspace.read_many(["a.txt", "img.png", "absent", "./a.txt"]) == {
        "a.txt": "one\ntwo\nthree"
    }


def test_has_contains_count_and_order() -> None:
    workspace = Workspace()
    for name in ["c", "a", "b"]:
        workspace.write(name, name)
    workspace.write("a", "again")  # an edit keeps the place
    assert workspace.paths() == ("c", "a", "b")
    assert [f.path for f in workspace.files()] == ["c", "a", "b"]
    assert (workspace.count, len(workspace)) == (3, 3)
    assert workspace.has("a")
    assert workspace.has(["zz", "b"])
    assert not workspace.has(["x", "y"])
    assert "a" in workspace
    assert "./a" in workspace
    assert "zz" not in workspace
    assert 3 not in workspace
    assert "../a" not in workspace


def test_append_and_prepend_create_when_absent() -> None:
    workspace = Workspace()
    first = workspace.append("log.md", "one")
    assert (first.state, first.language) == ("created", "markdown")
    workspace.append("log.md", "\ntwo")
    workspace.prepend("log.md", "zero\n")
    assert workspace.read("log.md") == "zero\none\ntwo"
    assert workspace.prepend("new.txt", "x").state == "created"
    workspace.put(png())
    for extend in (workspace.append, workspace.prepend):
        with pytest.raises(WorkspaceError) as excinfo:
            extend("img.png", "x")
        assert code_of(excinfo) == "modality"


def test_put_stores_binaries_with_minted_states() -> None:
    workspace = Workspace()
    first = workspace.put(File.binary("a.png", PNG, "image/png", state="modified"))
    assert first.state == "created"
    second = workspace.put(File.binary("a.png", "QQ==", "image/png"))
    assert second.state == "modified"
    assert workspace.file("a.png") == second
    with pytest.raises(WorkspaceError):
        workspace.put("a.png")  # type: ignore[arg-type]


def test_write_many_is_all_or_nothing() -> None:
    workspace = Workspace(max_files=2)
    files = workspace.write_many({"a.ts": "const x = 1", "b.ts": "const y = 2"})
    assert [f.path for f in files] == ["a.ts", "b.ts"]
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.write_many({"a.ts": "changed", "c.ts": "one too many"})
    assert code_of(excinfo) == "size"
    assert workspace.read("a.ts") == "const x = 1"
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.write_many({"a.ts": "changed", "../c.ts": "bad path"})
    assert code_of(excinfo) == "path"
    assert workspace.read("a.ts") == "const x = 1"


def test_the_editing_walkthrough() -> None:
    workspace = Workspace()
    workspace.write_many({"a.ts": "const x = 1", "b.ts": "const y = 2"})
    workspace.write("a.ts", "0", Range.of(1, 11, 1, 12))
    assert workspace.read("a.ts") == "const x = 0"
    assert workspace.replace("const", "let") == ReplaceResult("const", 2, ("a.ts", "b.ts"))
    assert workspace.move("b.ts", "c.ts") is True
    assert workspace.read_many(["a.ts", "c.ts"]) == {"a.ts": "let x = 0", "c.ts": "let y = 2"}


# --------------------------------------------------------------------------- search / replace


def test_search_options_and_binaries() -> None:
    workspace = Workspace(
        files=[File.text("a.txt", "Foo foo\nfoo"), png(), File.text("b.txt", "FOO")]
    )
    assert [(m.path, m.line, m.column) for m in workspace.search("foo")] == [
        ("a.txt", 1, 5),
        ("a.txt", 2, 1),
    ]
    assert len(workspace.search("foo", case_sensitive=False)) == 4
    assert [m.path for m in workspace.search("foo", case_sensitive=False, limit=3)] == [
        "a.txt",
        "a.txt",
        "a.txt",
    ]
    assert [(m.path, m.length) for m in workspace.search(r"F\w+", regex=True)] == [
        ("a.txt", 3),
        ("b.txt", 3),
    ]
    # literal by default: regex syntax is just text
    assert workspace.search(r"F\w+") == ()
    assert workspace.search("PNG") == ()  # binaries are never searched


def test_search_refusals() -> None:
    workspace = Workspace(files=[File.text("a", "x")])
    for kwargs in ({"query": ""}, {"query": "(", "regex": True}):
        with pytest.raises(WorkspaceError) as excinfo:
            workspace.search(**kwargs)
        assert code_of(excinfo) == "pattern"
    for limit in (0, -1, True):
        with pytest.raises(WorkspaceError) as excinfo:
            workspace.search("x", limit=limit)
        assert code_of(excinfo) == "invalid"


def test_replace_tallies_and_emits_one_write_per_file() -> None:
    workspace = Workspace(
        files=[File.text("a", "x x"), File.text("b", "y"), File.text("c", "x"), png()]
    )
    events: list[WorkspaceEvent] = []
    workspace.subscribe(events.append)
    result = workspace.replace("x", "z")
    assert result == ReplaceResult("x", 3, ("a", "c"))
    assert [(type(e), e.file.path) for e in events if isinstance(e, WriteEvent)] == [
        (WriteEvent, "a"),
        (WriteEvent, "c"),
    ]
    assert len(events) == 2
    assert workspace.read_many(["a", "b", "c"]) == {"a": "z z", "b": "y", "c": "z"}
    assert workspace.file("a").state == "modified"  # type: ignore[union-attr]
    assert workspace.replace("nothing", "z") == ReplaceResult("nothing", 0, ())
    assert len(events) == 2


def test_replace_with_regex_groups_and_bad_templates() -> None:
    workspace = Workspace(files=[File.text("a", "key=value\nother=thing")])
    result = workspace.replace(r"^(\w+)=(\w+)$", r"\2=\1", regex=True)
    assert result.replaced == 2
    assert workspace.read("a") == "value=key\nthing=other"
    before = workspace.snapshot()
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.replace(r"(\w+)", r"\9", regex=True)
    assert code_of(excinfo) == "pattern"
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.replace("a", 3)  # type: ignore[arg-type]
    assert code_of(excinfo) == "invalid"
    assert workspace.snapshot() == before


def test_replace_that_would_oversize_a_file_changes_nothing() -> None:
    workspace = Workspace(files=[File.text("a", "x"), File.text("b", "x" * 5)], max_file_size=8)
    before = workspace.snapshot()
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.replace("x", "xx")
    assert code_of(excinfo) == "size"
    assert excinfo.value.path == "b"
    assert workspace.snapshot() == before


# --------------------------------------------------------------------------- move / remove / clear


def test_move_overwrites_and_keeps_the_targets_place() -> None:
    workspace = Workspace(files=[File.text("a", "A"), File.text("b", "B"), File.text("c", "C")])
    assert workspace.move("a", "c") is True
    assert workspace.paths() == ("b", "c")
    assert workspace.read("c") == "A"
    assert workspace.file("c").state == "modified"  # type: ignore[union-attr]
    assert workspace.move("b", "new/place.txt") is True
    assert workspace.paths() == ("c", "new/place.txt")


def test_move_absent_source_and_onto_itself() -> None:
    workspace = Workspace(files=[File.text("a", "A")])
    events: list[WorkspaceEvent] = []
    workspace.subscribe(events.append)
    assert workspace.move("absent", "b") is False
    assert workspace.move("a", "./a") is True
    assert events == []
    assert workspace.file("a") == File.text("a", "A")


def test_move_carries_an_inferred_language_and_keeps_a_chosen_one() -> None:
    workspace = Workspace(files=[File.text("a.py", "x"), File.text("b.py", "y", "text")])
    workspace.move("a.py", "a.ts")
    workspace.move("b.py", "b.ts")
    assert workspace.file("a.ts").language == "typescript"  # type: ignore[union-attr]
    assert workspace.file("b.ts").language == "text"  # type: ignore[union-attr]
    workspace.put(png("p.png"))
    workspace.move("p.png", "q.png")
    assert workspace.file("q.png").content == BinaryContent(PNG, "image/png")  # type: ignore[union-attr]


def test_remove_one_many_absent() -> None:
    workspace = Workspace(files=[File.text(p, p) for p in ["a", "b", "c", "d"]])
    assert workspace.remove("a") is True
    assert workspace.remove("a") is False
    assert workspace.remove(["b", "zz"]) is True
    assert workspace.remove(["zz", "yy"]) is False
    assert workspace.paths() == ("c", "d")
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.remove(["c", "../d"])  # every path is checked before anything is removed
    assert code_of(excinfo) == "path"
    assert workspace.paths() == ("c", "d")
    workspace.clear()
    assert workspace.count == 0
    assert workspace.files() == ()


# --------------------------------------------------------------------------- events


def test_events_follow_each_mutation_in_order() -> None:
    workspace = Workspace("w")
    seen: list[tuple[WorkspaceEvent, int]] = []
    # each listener sees the state after the mutation
    workspace.subscribe(lambda event: seen.append((event, workspace.count)))
    a = workspace.write("a", "1")
    moved_ok = workspace.move("a", "b")
    workspace.remove("b")
    workspace.write("c", "3")
    workspace.clear()
    assert moved_ok
    moved = workspace_file_after_move(seen)
    assert seen == [
        (WriteEvent("w", a), 1),
        (MoveEvent("w", "a", "b", moved), 1),
        (RemoveEvent("w", "b"), 0),
        (WriteEvent("w", File.text("c", "3")), 1),
        (ClearEvent("w"), 0),
    ]


def workspace_file_after_move(seen: list[tuple[WorkspaceEvent, int]]) -> File:
    event = seen[1][0]
    assert isinstance(event, MoveEvent)
    assert (event.file.path, event.file.state) == ("b", "modified")
    return event.file


def test_a_raising_listener_is_isolated_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    workspace = Workspace("w")
    calls: list[str] = []

    def broken(event: WorkspaceEvent) -> None:
        calls.append("broken")
        raise RuntimeError("listener bug")

    workspace.subscribe(broken)
    workspace.subscribe(lambda event: calls.append("after"))
    with caplog.at_level(logging.ERROR, logger="protocols.workspace"):
        stored = workspace.write("a", "SECRET-CONTENT")
    assert stored.path == "a"
    assert workspace.read("a") == "SECRET-CONTENT"
    assert calls == ["broken", "after"]
    assert any("listener bug" in (r.exc_text or "") for r in caplog.records)
    assert any("WriteEvent" in r.getMessage() for r in caplog.records)
    # file content is never logged
    assert all("SECRET-CONTENT" not in r.getMessage() for r in caplog.records)
    assert all(r.name == "protocols.workspace" for r in caplog.records)


def test_unsubscribe_is_idempotent_and_per_registration() -> None:
    workspace = Workspace()
    calls: list[WorkspaceEvent] = []
    first = workspace.subscribe(calls.append)
    second = workspace.subscribe(calls.append)
    workspace.write("a", "x")
    assert len(calls) == 2
    first()
    first()
    workspace.write("a", "y")
    assert len(calls) == 3
    second()
    workspace.write("a", "z")
    assert len(calls) == 3
    with pytest.raises(WorkspaceError):
        workspace.subscribe("not callable")  # type: ignore[arg-type]


def test_a_refused_edit_emits_nothing() -> None:
    workspace = Workspace(files=[png()], max_file_size=3)
    events: list[WorkspaceEvent] = []
    workspace.subscribe(events.append)
    for attempt in (
        lambda: workspace.write("a", "toolong"),
        lambda: workspace.append("img.png", "x"),
        lambda: workspace.write("img.png", "x", Range.of(1, 1, 1, 1)),
        lambda: workspace.replace("(", "x", regex=True),
    ):
        with pytest.raises(WorkspaceError):
            attempt()
    assert events == []


# --------------------------------------------------------------------------- limits


def test_size_limits() -> None:
    workspace = Workspace(max_file_size=4, max_binary_size=2, max_files=2)
    workspace.write("a", "1234")
    with pytest.raises(WorkspaceError, match="limit is 4") as excinfo:
        workspace.write("a", "12345")
    assert code_of(excinfo) == "size"
    with pytest.raises(WorkspaceError):
        workspace.write("b", "ééé")  # 6 UTF-8 bytes
    with pytest.raises(WorkspaceError):
        workspace.append("a", "5")
    with pytest.raises(WorkspaceError) as excinfo:
        workspace.put(File.binary("i.png", "QUJD", "image/png"))  # 3 bytes
    assert code_of(excinfo) == "size"
    workspace.put(File.binary("i.png", "QUI=", "image/png"))
    with pytest.raises(WorkspaceError, match="more than 2 files") as excinfo:
        workspace.write("c", "x")
    assert code_of(excinfo) == "size"
    assert workspace.read("a") == "1234"
    assert workspace.paths() == ("a", "i.png")
    # a move never adds a file
    assert workspace.move("a", "c")
    assert workspace.paths() == ("i.png", "c")


def test_seeds_must_be_files() -> None:
    for bad in ("a.txt", [File.text("a", "x"), "b"], {"a": "x"}):
        with pytest.raises(WorkspaceError) as excinfo:
            Workspace(files=bad)  # type: ignore[arg-type]
        assert code_of(excinfo) == "invalid"


def test_reprs_name_what_matters() -> None:
    workspace = Workspace("w", [File.text("a", "x")])
    assert repr(workspace) == "<Workspace id='w' files=1>"
    manager = WorkspaceManager([workspace])
    assert repr(manager) == "<WorkspaceManager workspaces=1 active='w'>"


def test_limits_apply_to_seeds_and_must_be_positive() -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        Workspace(files=[File.text("a", "x"), File.text("b", "y")], max_files=1)
    assert code_of(excinfo) == "size"
    with pytest.raises(WorkspaceError) as excinfo:
        Workspace(files=[File.text("a", "xx")], max_file_size=1)
    assert code_of(excinfo) == "size"
    for bad in (0, -5, True, 1.5):
        with pytest.raises(WorkspaceError) as excinfo:
            Workspace(max_files=bad)  # type: ignore[arg-type]
        assert code_of(excinfo) == "invalid"
    with pytest.raises(WorkspaceError) as excinfo:
        Workspace(files=[File.text("a", "x"), File.text("./a", "y")])
    assert code_of(excinfo) == "path"
    with pytest.raises(WorkspaceError):
        Workspace(id="")


# --------------------------------------------------------------------------- snapshots


def test_snapshot_and_restore() -> None:
    workspace = Workspace("ws-1", files=[png()])
    workspace.write("a.py", "x = 1\n")
    workspace.write("a.py", "y", Range.of(1, 1, 1, 2))
    snapshot = workspace.snapshot()
    assert snapshot == WorkspaceSnapshot("ws-1", workspace.files())
    restored = Workspace.restore(snapshot)
    assert restored.id == "ws-1"
    assert restored.snapshot() == snapshot
    assert [f.state for f in restored.files()] == ["created", "modified"]
    # the restored workspace is independent of the original
    restored.write("a.py", "changed")
    assert workspace.read("a.py") == "y = 1\n"
    with pytest.raises(WorkspaceError) as excinfo:
        Workspace.restore(snapshot, max_files=1)
    assert code_of(excinfo) == "size"
    with pytest.raises(WorkspaceError):
        Workspace.restore({"id": "x"})  # type: ignore[arg-type]


def test_snapshot_json_is_plain_and_round_trips() -> None:
    workspace = Workspace("w", files=[File.text("a.md", "# t", state="modified"), png()])
    data = to_json(workspace.snapshot())
    assert data == {
        "id": "w",
        "files": [
            {
                "path": "a.md",
                "content": {"text": "# t", "language": "markdown"},
                "state": "modified",
            },
            {"path": "img.png", "content": {"data": PNG, "mime": "image/png"}},
        ],
    }
    text = encode(workspace.snapshot())
    assert decode(WorkspaceSnapshot, text) == workspace.snapshot()
    assert encode(decode(WorkspaceSnapshot, text)) == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"id":"w","files":[{"path":"a","content":{}}]}', 'needs "text" and "language"'),
        ('{"id":"w","files":[{"path":"a","content":[]}]}', "expected an object"),
        ('{"id":"w","files":[{"path":"/a","content":{"text":"","language":"x"}}]}', "absolute"),
        (
            '{"id":"w","files":[{"path":"a","content":{"text":"","language":"x"},"lines":1}]}',
            "lines",
        ),
        ('{"id":"w","files":[{"path":"a","content":{"data":"QQ","mime":"image/png"}}]}', "base64"),
        (
            '{"id":"w","files":[{"path":"a","content":{"text":"","language":"x","mime":"x"}}]}',
            "mime",
        ),
        (
            '{"id":"w","files":[{"path":"a","content":{"text":"","language":"x"},"state":"gone"}]}',
            "state",
        ),
        ('{"id":"","files":[]}', "non-empty"),
        ('{"id":"w","files":{}}', "files"),
        (
            '{"id":"w","files":[{"path":"a","content":{"text":"","language":"x"}},'
            '{"path":"a","content":{"text":"","language":"x"}}]}',
            "two files",
        ),
    ],
)
def test_snapshot_decoding_refuses_bad_data(text: str, problem: str) -> None:
    with pytest.raises(ProtocolError, match="invalid WorkspaceSnapshot") as excinfo:
        decode(WorkspaceSnapshot, text)
    assert problem in str(excinfo.value)


file_strategy = st.one_of(
    st.builds(
        File.text,
        st.sampled_from(["a.py", "b/c.md", "d", "e.TS", "f g.txt"]),
        st.text(max_size=40),
        st.none() | st.sampled_from(["text", "c++", "python"]),
        state=st.sampled_from(["created", "modified"]),
    ),
    st.builds(
        File.binary,
        st.sampled_from(["i.png", "j/k.gif"]),
        st.binary(min_size=1, max_size=30).map(lambda b: base64.b64encode(b).decode()),
        st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
        state=st.sampled_from(["created", "modified"]),
    ),
)


@SETTINGS
@given(
    workspace_id=st.text(min_size=1, max_size=10),
    files=st.lists(file_strategy, max_size=6, unique_by=lambda f: f.path),
)
def test_snapshots_round_trip_through_the_codec_exactly(
    workspace_id: str, files: list[File]
) -> None:
    snapshot = Workspace(workspace_id, files).snapshot()
    text = encode(snapshot)
    decoded = decode(WorkspaceSnapshot, text)
    assert decoded == snapshot
    assert encode(decoded) == text
    assert [(f.size, f.lines) for f in decoded.files] == [(f.size, f.lines) for f in files]
    assert Workspace.restore(decoded).snapshot() == snapshot


# --------------------------------------------------------------------------- manager


def test_manager_first_added_is_active_and_switch() -> None:
    manager = WorkspaceManager()
    assert (manager.active, manager.active_id) == (None, None)
    first = manager.add(Workspace("one"))
    second = manager.add(Workspace("two"))
    assert manager.active is first
    assert manager.switch("missing") is None
    assert manager.active is first
    assert manager.switch("two") is second
    assert manager.active is second
    assert manager.active_id == "two"
    assert manager.workspaces() == (first, second)
    assert ("one" in manager, "zz" in manager, len(manager)) == (True, False, 2)
    assert manager.get("one") is first
    assert manager.get("zz") is None


def test_manager_re_adding_the_active_id_is_reflected() -> None:
    manager = WorkspaceManager([Workspace("one"), Workspace("two")])
    replacement = Workspace("one", [File.text("a", "x")])
    manager.add(replacement)
    assert manager.active is replacement
    assert manager.workspaces()[0] is replacement
    assert len(manager) == 2


def active(manager: WorkspaceManager) -> Workspace | None:
    """The active workspace (a call, so the type checker does not narrow it across steps)."""
    return manager.active


def test_manager_remove_and_clear() -> None:
    manager = WorkspaceManager()
    one = manager.add(Workspace("one"))
    manager.add(Workspace("two"))
    assert manager.remove("two") is True
    assert active(manager) is one
    assert manager.remove("one") is True
    assert (active(manager), manager.active_id) == (None, None)
    assert manager.remove("one") is False
    fresh = manager.add()
    assert active(manager) is fresh
    assert fresh.count == 0
    manager.clear()
    assert (len(manager), active(manager)) == (0, None)
    with pytest.raises(WorkspaceError):
        manager.add("one")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- rendering


def test_render_fenced_format() -> None:
    file = File.text("src/main.ts", "export const x = 1")
    assert render_fenced(file) == "File: src/main.ts\n```typescript\nexport const x = 1\n```"


def test_render_fenced_uses_a_fence_longer_than_any_backtick_run() -> None:
    text = "before\n```\nnot the end\n`````\nafter"
    rendered = render_fenced(File.text("a.md", text))
    assert rendered == f"File: a.md\n``````markdown\n{text}\n``````"


def test_render_fenced_does_not_add_a_blank_line_after_a_final_newline() -> None:
    assert render_fenced(File.text("a.py", "x = 1\n")) == "File: a.py\n```python\nx = 1\n```"


def test_render_fenced_refuses_binaries() -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        render_fenced(png())
    assert code_of(excinfo) == "modality"


@SETTINGS
@given(text=st.text(alphabet="`a\n ~", max_size=40))
def test_rendered_content_cannot_close_its_fence(text: str) -> None:
    rendered = render_fenced(File.text("x.txt", text))
    header, opening, *body = rendered.split("\n")
    assert header == "File: x.txt"
    fence = opening.removesuffix("text")
    assert set(fence) == {"`"}
    assert len(fence) >= 3
    assert body[-1] == fence
    # The closing fence goes on its own line; a final newline of the text serves as its break.
    assert "\n".join(body[:-1]) == text.removesuffix("\n")
    # no line of the content could be read as a closing fence
    assert all(not line.lstrip(" ").startswith(fence) for line in body[:-1])
