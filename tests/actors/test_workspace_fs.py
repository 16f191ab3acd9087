"""FileSystemWorkspace against real temporary directories: round trips, atomic writes, and every
refusal -- '..', absolute paths, symlinks leading out (files, directories, dangling), a stale
resolution (the check-then-use race), FIFOs, sockets, directories, oversize and non-UTF-8 files."""

from __future__ import annotations

import os
import pathlib
import socket
import stat

import pytest
import trio

from actors.workspace import TEMP_PREFIX, FileSystemWorkspace
from protocols.workspace import FileInfo, Listing, Range, ReplaceResult, WorkspaceError


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret")
    return path


@pytest.fixture
def ws(root: pathlib.Path) -> FileSystemWorkspace:
    return FileSystemWorkspace(root)


async def refused(call: object, code: str) -> WorkspaceError:
    """Await ``call`` (an awaitable) and return the WorkspaceError it raised with ``code``."""
    with pytest.raises(WorkspaceError) as excinfo:
        await call  # type: ignore[misc]
    assert excinfo.value.code == code, excinfo.value
    return excinfo.value


def names(path: pathlib.Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def tree(path: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): p.read_text(errors="replace")
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# --------------------------------------------------------------------------- round trips


async def test_write_read_and_states(ws: FileSystemWorkspace, root: pathlib.Path) -> None:
    created = await ws.write("src/pkg/mod.py", "x = 1\nÿ\n")
    assert created == FileInfo("src/pkg/mod.py", len("x = 1\nÿ\n".encode()), 3, "created")
    assert (root / "src/pkg/mod.py").read_text(encoding="utf-8") == "x = 1\nÿ\n"
    modified = await ws.write("./src/pkg/mod.py", "y")
    assert modified.state == "modified"
    result = await ws.read("src/pkg/mod.py")
    assert (result.path, result.text, result.range, result.lines) == (
        "src/pkg/mod.py",
        "y",
        Range.of(1, 1, 1, 2),
        1,
    )


async def test_read_a_clamped_range_keeps_crlf(ws: FileSystemWorkspace, root: pathlib.Path) -> None:
    (root / "a.txt").write_bytes(b"one\r\ntwo\r\nthree")
    result = await ws.read("a.txt", Range.of(2, 1, 2, 99))
    assert result.text == "two\r"
    assert result.range == Range.of(2, 1, 2, 5)
    assert result.lines == 3


async def test_writes_are_atomic_and_keep_permissions(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    target = root / "keep.sh"
    target.write_text("old")
    target.chmod(0o640)
    inode = target.stat().st_ino
    await ws.write("keep.sh", "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode  # replaced by a new file, not rewritten in place
    assert names(root) == ["keep.sh"]  # no temporary file left


async def test_a_pre_cancelled_write_writes_nothing(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await ws.write("a.txt", "x")
    assert scope.cancelled_caught
    assert names(root) == []


async def test_concurrent_appends_are_not_lost(ws: FileSystemWorkspace, root: pathlib.Path) -> None:
    async with trio.open_nursery() as nursery:
        for index in range(20):
            nursery.start_soon(ws.append, "log.txt", f"{index}\n")
    lines = (root / "log.txt").read_text().splitlines()
    assert sorted(lines, key=int) == [str(i) for i in range(20)]


async def test_append_creates_then_appends(ws: FileSystemWorkspace) -> None:
    first = await ws.append("notes/log.md", "a")
    second = await ws.append("notes/log.md", "\nb")
    assert (first.state, second.state) == ("created", "modified")
    assert (await ws.read("notes/log.md")).text == "a\nb"
    assert second.lines == 2


async def test_splice(ws: FileSystemWorkspace) -> None:
    await ws.write("a.ts", "const x = 1")
    result = await ws.splice("a.ts", Range.of(1, 11, 1, 12), "42\n")
    assert (await ws.read("a.ts")).text == "const x = 42\n"
    assert result.range == Range.of(1, 11, 2, 1)
    assert result.file == FileInfo("a.ts", 13, 2, "modified")
    await refused(ws.splice("absent.ts", Range.of(1, 1, 1, 1), "x"), "not_found")


async def test_lone_surrogates_are_written_as_replacement_characters(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    await ws.write("a.txt", "x\ud800y")
    assert (root / "a.txt").read_text(encoding="utf-8") == "x\ufffdy"


# --------------------------------------------------------------------------- path refusals


@pytest.mark.parametrize("bad", ["../escape.txt", "a/../../escape.txt", "/etc/passwd", "", "a//b"])
async def test_malformed_paths_are_refused(
    ws: FileSystemWorkspace, tmp_path: pathlib.Path, bad: str
) -> None:
    await refused(ws.write(bad, "x"), "path")
    await refused(ws.read(bad), "path")
    assert not (tmp_path / "escape.txt").exists()


async def test_a_symlinked_file_pointing_outside_is_refused(
    ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path
) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    error = await refused(ws.read("link.txt"), "path")
    assert "outside" in error.message
    assert str(outside) not in error.message  # absolute locations are never reported
    await refused(ws.write("link.txt", "overwritten"), "path")
    await refused(ws.append("link.txt", "more"), "path")
    assert (outside / "secret.txt").read_text() == "top secret"


async def test_a_symlinked_directory_pointing_outside_is_refused(
    ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path
) -> None:
    (root / "out").symlink_to(outside, target_is_directory=True)
    await refused(ws.read("out/secret.txt"), "path")
    await refused(ws.write("out/new.txt", "x"), "path")
    await refused(ws.write("out/deeper/new.txt", "x"), "path")
    await refused(ws.list("out"), "path")
    assert names(outside) == ["secret.txt"]


async def test_a_dangling_symlink_pointing_outside_is_refused(
    ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path
) -> None:
    (root / "dangling").symlink_to(outside / "not-yet.txt")
    await refused(ws.write("dangling", "x"), "path")
    assert not (outside / "not-yet.txt").exists()


async def test_device_files_are_refused_even_via_symlink(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    (root / "null").symlink_to("/dev/null")
    await refused(ws.read("null"), "path")
    await refused(ws.write("null", "x"), "path")


async def test_symlinks_inside_the_root_are_followed(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    (root / "docs").mkdir()
    (root / "docs/real.md").write_text("real")
    (root / "alias.md").symlink_to("docs/real.md")
    (root / "d").symlink_to("docs", target_is_directory=True)
    assert (await ws.read("alias.md")).text == "real"
    assert (await ws.read("d/real.md")).text == "real"
    written = await ws.write("alias.md", "through the link")
    assert written.path == "alias.md"
    assert (root / "alias.md").is_symlink()  # the link is kept; its target was replaced
    assert (root / "docs/real.md").read_text() == "through the link"


async def test_a_symlink_loop_is_refused(ws: FileSystemWorkspace, root: pathlib.Path) -> None:
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    await refused(ws.read("loop_a"), "path")
    await refused(ws.write("loop_a", "x"), "path")
    await refused(ws.write("loop_a/x", "x"), "path")
    assert names(root) == ["loop_a", "loop_b"]


@pytest.fixture
def stale_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate the check-then-use race: resolution sees no symlinks (as if they were swapped
    in after it ran), so only the O_NOFOLLOW walk stands between the path and the outside."""
    monkeypatch.setattr(os.path, "realpath", os.path.abspath)


async def test_a_directory_swapped_for_a_symlink_after_resolution_is_refused(
    ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path, stale_resolution: None
) -> None:
    (root / "sub").symlink_to(outside, target_is_directory=True)
    error = await refused(ws.read("sub/secret.txt"), "path")
    assert "symbolic link" in error.message
    await refused(ws.write("sub/new.txt", "x"), "path")
    assert names(outside) == ["secret.txt"]


async def test_a_file_swapped_for_a_symlink_after_resolution_is_refused(
    ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path, stale_resolution: None
) -> None:
    (root / "file.txt").symlink_to(outside / "secret.txt")
    error = await refused(ws.read("file.txt"), "path")
    assert "symbolic link" in error.message
    await refused(ws.write("file.txt", "x"), "path")
    assert (outside / "secret.txt").read_text() == "top secret"


async def test_fifos_are_refused_without_blocking(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    os.mkfifo(root / "pipe")
    error = await refused(ws.read("pipe"), "path")
    assert "FIFO" in error.message
    await refused(ws.write("pipe", "x"), "path")
    await refused(ws.splice("pipe", Range.of(1, 1, 1, 1), "x"), "path")
    await refused(ws.append("pipe", "x"), "path")
    assert stat.S_ISFIFO((root / "pipe").lstat().st_mode)  # not replaced by a regular file


async def test_sockets_are_refused(ws: FileSystemWorkspace, root: pathlib.Path) -> None:
    previous = os.getcwd()
    os.chdir(root)  # a short relative name: socket paths are limited to ~100 bytes
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind("sock")
            error = await refused(ws.read("sock"), "path")
            assert "socket" in error.message
            await refused(ws.write("sock", "x"), "path")
    finally:
        os.chdir(previous)


async def test_directories_and_paths_through_files_are_refused(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    (root / "dir").mkdir()
    (root / "file.txt").write_text("x")
    error = await refused(ws.read("dir"), "path")
    assert "directory" in error.message
    await refused(ws.write("dir", "x"), "path")
    await refused(ws.write("file.txt/child", "x"), "path")
    assert (root / "dir").is_dir()


async def test_missing_files_and_root(ws: FileSystemWorkspace, tmp_path: pathlib.Path) -> None:
    await refused(ws.read("absent.txt"), "not_found")
    await refused(ws.read("no/such/dir.txt"), "not_found")
    gone = FileSystemWorkspace(tmp_path / "missing-root")
    await refused(gone.read("a"), "not_found")
    await refused(gone.write("a", "x"), "not_found")
    await refused(gone.remove(["a"]), "not_found")
    await refused(gone.move("a", "b"), "not_found")
    assert not (tmp_path / "missing-root").exists()


async def test_a_name_too_long_for_the_file_system_is_a_path_error(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    error = await refused(ws.write("x" * 300, "data"), "path")
    assert error.path == "x" * 300
    (root / "d").mkdir()
    await refused(ws.read("d/" + "y" * 300), "path")
    assert names(root) == ["d"]


async def test_a_root_that_is_not_a_directory(tmp_path: pathlib.Path) -> None:
    (tmp_path / "plain").write_text("x")
    ws = FileSystemWorkspace(tmp_path / "plain")
    error = await refused(ws.read("a"), "io")
    assert "cannot be opened" in error.message
    assert (tmp_path / "plain").read_text() == "x"


def test_root_and_repr(tmp_path: pathlib.Path) -> None:
    ws = FileSystemWorkspace(tmp_path / "a" / ".." / "b")
    assert ws.root == str(tmp_path / "b")
    assert repr(ws) == f"<FileSystemWorkspace root={str(tmp_path / 'b')!r}>"


# --------------------------------------------------------------------------- size / encoding


async def test_size_limits(root: pathlib.Path) -> None:
    ws = FileSystemWorkspace(root, max_read_bytes=8, max_write_bytes=4)
    (root / "big.txt").write_text("123456789")
    error = await refused(ws.read("big.txt"), "size")
    assert "8 bytes" in error.message
    await refused(ws.write("new.txt", "12345"), "size")
    await refused(ws.write("new.txt", "ééé"), "size")  # 6 UTF-8 bytes
    assert not (root / "new.txt").exists()
    await ws.write("ok.txt", "1234")
    await refused(ws.append("ok.txt", "5"), "size")
    assert (root / "ok.txt").read_text() == "1234"


@pytest.mark.parametrize("bad", [0, -1, True])
def test_limits_must_be_positive(root: pathlib.Path, bad: int) -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        FileSystemWorkspace(root, max_read_bytes=bad)
    assert excinfo.value.code == "invalid"


async def test_non_utf8_files_are_refused_for_text(
    ws: FileSystemWorkspace, root: pathlib.Path
) -> None:
    (root / "blob.bin").write_bytes(b"\xff\xfe\x00binary")
    error = await refused(ws.read("blob.bin"), "modality")
    assert "UTF-8" in error.message
    await refused(ws.splice("blob.bin", Range.of(1, 1, 1, 1), "x"), "modality")
    assert (root / "blob.bin").read_bytes() == b"\xff\xfe\x00binary"


# --------------------------------------------------------------------------- list / search


async def test_list_regular_files_in_a_stable_order(
    ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path
) -> None:
    (root / "b.txt").write_text("bb")
    (root / "a").mkdir()
    (root / "a/z.py").write_text("z")
    (root / "a/y.py").write_text("yyy")
    (root / ".git").mkdir()
    (root / ".git/config").write_text("ignored")
    (root / "link.txt").symlink_to("b.txt")
    (root / "outlink").symlink_to(outside, target_is_directory=True)
    os.mkfifo(root / "pipe")
    (root / f"{TEMP_PREFIX}leftover.tmp").write_text("x")
    listing = await ws.list()
    assert listing == Listing(
        (FileInfo("b.txt", 2), FileInfo("a/y.py", 3), FileInfo("a/z.py", 1)), truncated=False
    )
    assert await ws.list("a") == Listing((FileInfo("a/y.py", 3), FileInfo("a/z.py", 1)))
    assert await ws.list(limit=2) == Listing(listing.files[:2], truncated=True)
    await refused(ws.list("nope"), "not_found")
    await refused(ws.list("b.txt"), "path")
    await refused(ws.list(limit=0), "invalid")


async def test_search_skips_binaries_oversize_and_ignored(root: pathlib.Path) -> None:
    ws = FileSystemWorkspace(root, max_read_bytes=64)
    (root / "a.txt").write_text("needle one\nno\nneedle two")
    (root / "sub").mkdir()
    (root / "sub/b.md").write_text("a Needle")
    (root / "blob.bin").write_bytes(b"\xffneedle")
    (root / "big.txt").write_text("needle " * 20)
    (root / ".git").mkdir()
    (root / ".git/x").write_text("needle")
    matches = await ws.search("needle")
    assert [(m.path, m.line, m.column, m.text) for m in matches] == [
        ("a.txt", 1, 1, "needle one"),
        ("a.txt", 3, 1, "needle two"),
    ]
    folded = await ws.search("needle", case_sensitive=False)
    assert [m.path for m in folded] == ["a.txt", "a.txt", "sub/b.md"]
    assert len(await ws.search("needle", limit=1)) == 1
    regex = await ws.search(r"^needle \w+$", regex=True)
    assert [m.length for m in regex] == [10, 10]
    await refused(ws.search("(", regex=True), "pattern")
    await refused(ws.search(""), "pattern")
    await refused(ws.search("x", limit=0), "invalid")


async def test_search_refuses_to_walk_too_many_files(root: pathlib.Path) -> None:
    ws = FileSystemWorkspace(root, max_files=3)
    for index in range(4):
        (root / f"{index}.txt").write_text("x")
    await refused(ws.search("x"), "size")
    await refused(ws.replace("x", "y"), "size")
    assert set(tree(root).values()) == {"x"}


# --------------------------------------------------------------------------- replace


async def test_replace(ws: FileSystemWorkspace, root: pathlib.Path) -> None:
    (root / "a.ts").write_text("const a = 1\nconst b = 2")
    (root / "lib").mkdir()
    (root / "lib/c.ts").write_text("const c = 3")
    (root / "d.txt").write_text("nothing")
    (root / "blob").write_bytes(b"\xffconst")
    (root / "lib/c.ts").chmod(0o600)
    result = await ws.replace("const", "let")
    assert result == ReplaceResult("const", 3, ("a.ts", "lib/c.ts"))
    assert tree(root) == {
        "a.ts": "let a = 1\nlet b = 2",
        "blob": "\ufffdconst",
        "d.txt": "nothing",
        "lib/c.ts": "let c = 3",
    }
    assert (root / "blob").read_bytes() == b"\xffconst"
    assert stat.S_IMODE((root / "lib/c.ts").stat().st_mode) == 0o600
    regex = await ws.replace(r"let (\w)", r"var \1", regex=True)
    assert regex.replaced == 3
    assert (root / "a.ts").read_text() == "var a = 1\nvar b = 2"
    await refused(ws.replace(r"(\w)", r"\5", regex=True), "pattern")
    assert (root / "a.ts").read_text() == "var a = 1\nvar b = 2"


async def test_replace_checks_every_size_before_writing(root: pathlib.Path) -> None:
    ws = FileSystemWorkspace(root, max_write_bytes=6)
    (root / "a.txt").write_text("x")
    (root / "b.txt").write_text("xxxx")
    error = await refused(ws.replace("x", "xx"), "size")
    assert error.path == "b.txt"
    assert tree(root) == {"a.txt": "x", "b.txt": "xxxx"}


# --------------------------------------------------------------------------- move / remove


async def test_move(ws: FileSystemWorkspace, root: pathlib.Path) -> None:
    (root / "a.txt").write_text("A")
    (root / "b.txt").write_text("B")
    assert await ws.move("a.txt", "b.txt") is True
    assert tree(root) == {"b.txt": "A"}
    assert await ws.move("b.txt", "deep/er/c.txt") is True
    assert tree(root) == {"deep/er/c.txt": "A"}
    assert await ws.move("absent.txt", "x.txt") is False
    assert await ws.move("no/such/dir.txt", "x.txt") is False
    assert await ws.move("deep/er/c.txt", "./deep/er/c.txt") is True
    assert tree(root) == {"deep/er/c.txt": "A"}


async def test_move_refusals(
    ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path
) -> None:
    (root / "a.txt").write_text("A")
    (root / "dir").mkdir()
    (root / "link.txt").symlink_to("a.txt")
    (root / "out").symlink_to(outside, target_is_directory=True)
    await refused(ws.move("a.txt", "dir"), "path")
    await refused(ws.move("dir", "b"), "path")
    await refused(ws.move("link.txt", "b.txt"), "path")
    await refused(ws.move("a.txt", "out/stolen.txt"), "path")
    await refused(ws.move("a.txt", "../stolen.txt"), "path")
    await refused(ws.move("out/secret.txt", "mine.txt"), "path")
    assert (root / "a.txt").read_text() == "A"
    assert names(outside) == ["secret.txt"]


async def test_remove(ws: FileSystemWorkspace, root: pathlib.Path, outside: pathlib.Path) -> None:
    (root / "a.txt").write_text("A")
    (root / "sub").mkdir()
    (root / "sub/b.txt").write_text("B")
    (root / "link.txt").symlink_to("a.txt")
    (root / "out").symlink_to(outside / "secret.txt")
    assert await ws.remove(["a.txt", "missing", "sub/b.txt", "a.txt", "x/y"]) == (
        "a.txt",
        "sub/b.txt",
    )
    assert await ws.remove("a.txt") == ()
    (root / "c.txt").write_text("C")
    await refused(ws.remove(["c.txt", "sub"]), "path")
    assert (root / "c.txt").read_text() == "C"  # one refusal removes nothing
    await refused(ws.remove("link.txt"), "path")
    await refused(ws.remove("out"), "path")
    await refused(ws.remove(["../x"]), "path")
    assert (root / "sub").is_dir()
    assert (root / "link.txt").is_symlink()
    assert (outside / "secret.txt").read_text() == "top secret"
