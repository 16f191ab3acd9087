"""protocols.workspace, the in-memory workspace: edits, search and replace, moves, events,
limits, snapshots through the codec, and the manager."""

from __future__ import annotations

import base64
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.codec import decode, encode, to_json
from protocols.errors import ProtocolError
from protocols.workspace import (
    BinaryContent,
    ClearEvent,
    File,
    MoveEvent,
    Range,
    ReadResult,
    RemoveEvent,
    ReplaceResult,
    TextContent,
    Workspace,
    WorkspaceError,
    WorkspaceEvent,
    WorkspaceManager,
    WorkspaceSnapshot,
    WriteEvent,
)

SETTINGS = settings(max_examples=80, deadline=None)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-fake-image").decode()


def code_of(excinfo: pytest.ExceptionInfo[WorkspaceError]) -> str:
    return excinfo.value.code


def png(path: str = "img.png") -> File:
    return File.binary(path, PNG, "image/png")


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
