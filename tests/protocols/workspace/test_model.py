"""protocols.workspace, the file model: errors, path normalisation, text and binary files."""

from __future__ import annotations

import base64
import copy

import attrs
import pytest
from hypothesis import settings

from protocols.codec import decode, encode, from_json, to_json
from protocols.errors import Category, ProtocolError, ValidationError
from protocols.workspace import (
    MAX_PATH_LENGTH,
    File,
    FileInfo,
    TextContent,
    WorkspaceError,
    infer_language,
    normalize_path,
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
