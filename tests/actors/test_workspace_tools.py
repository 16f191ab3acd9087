"""The model-facing workspace tools: definitions, every operation over both backends (the
in-memory workspace and a real directory), argument validation, and errors that come back as
tool failures -- never as exceptions -- while trio.Cancelled still propagates."""

from __future__ import annotations

import base64
import logging
import pathlib
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
from jsonschema import Draft202012Validator

from actors.workspace import (
    FileSystemWorkspace,
    MemoryBackend,
    WorkspaceBackend,
    WorkspaceTool,
    workspace_tools,
)
from protocols.codec import decode, encode
from protocols.messages import ToolCall, ToolFailure, ToolResult, ToolSuccess
from protocols.workspace import (
    File,
    FileInfo,
    Listing,
    Range,
    ReadResult,
    ReplaceResult,
    SearchMatch,
    SpliceResult,
    Workspace,
    WorkspaceError,
    WorkspaceEvent,
    WorkspaceManager,
    WriteEvent,
)

NAMES = [
    "workspace_read",
    "workspace_write",
    "workspace_splice",
    "workspace_search",
    "workspace_replace",
    "workspace_move",
    "workspace_remove",
    "workspace_list",
]


@attrs.define
class Env:
    """One backend under test, with a way to seed and inspect files outside the tools."""

    tools: dict[str, WorkspaceTool]
    seed_file: Any
    text_of: Any

    async def run(self, name: str, **arguments: Any) -> ToolResult:
        result = await self.tools[name].run(arguments, call_id="call-1")
        assert (result.id, result.name) == ("call-1", name)
        # every result is valid strict JSON through the codec
        assert decode(ToolResult, encode(result)) == result
        return result

    async def ok(self, name: str, **arguments: Any) -> Any:
        result = await self.run(name, **arguments)
        assert isinstance(result, ToolSuccess), result
        return result.value

    async def fails(self, name: str, **arguments: Any) -> str:
        result = await self.run(name, **arguments)
        assert isinstance(result, ToolFailure), result
        return result.error


def by_name(tools: Sequence[WorkspaceTool]) -> dict[str, WorkspaceTool]:
    return {tool.name: tool for tool in tools}


@pytest.fixture(params=["memory", "disk"])
def env(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Env:
    if request.param == "memory":
        workspace = Workspace()
        return Env(by_name(workspace_tools(workspace)), workspace.write, workspace.read)

    def seed(path: str, text: str) -> None:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def text_of(path: str) -> str | None:
        target = tmp_path / path
        return target.read_text(encoding="utf-8") if target.is_file() else None

    return Env(by_name(workspace_tools(FileSystemWorkspace(tmp_path))), seed, text_of)


# --------------------------------------------------------------------------- definitions


def test_definitions() -> None:
    tools = workspace_tools(Workspace())
    assert [tool.name for tool in tools] == NAMES
    for tool in tools:
        schema = tool.definition.parameters
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        assert tool.definition.description
        assert repr(tool) == f"<WorkspaceTool {tool.name}>"
    # a fresh list every call, definitions equal
    again = workspace_tools(Workspace())
    assert again is not tools
    assert [t.definition for t in again] == [t.definition for t in tools]


def test_tools_accept_any_backend_and_refuse_other_things(tmp_path: pathlib.Path) -> None:
    backend: WorkspaceBackend = FileSystemWorkspace(tmp_path)
    assert len(workspace_tools(backend)) == 8
    assert len(workspace_tools(WorkspaceManager())) == 8
    with pytest.raises(WorkspaceError):
        MemoryBackend("not a workspace")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- operations


async def test_write_then_read(env: Env) -> None:
    written = await env.ok("workspace_write", path="src/a.py", content="x = 1\ny = 2\n")
    assert written == {"path": "src/a.py", "size": 12, "lines": 3, "state": "created"}
    again = await env.ok("workspace_write", path="src/a.py", content="z")
    assert again["state"] == "modified"
    assert env.text_of("src/a.py") == "z"
    env.seed_file("b.txt", "one\ntwo\nthree")
    whole = await env.ok("workspace_read", path="b.txt")
    assert whole == {
        "path": "b.txt",
        "content": "one\ntwo\nthree",
        "lines": 3,
        "start_line": 1,
        "start_column": 1,
        "end_line": 3,
        "end_column": 6,
    }
    part = await env.ok(
        "workspace_read", path="b.txt", start_line=2, start_column=1, end_line=3, end_column=1
    )
    assert part["content"] == "two\n"
    clamped = await env.ok(
        "workspace_read", path="b.txt", start_line=3, start_column=3, end_line=99, end_column=1
    )
    assert (clamped["content"], clamped["end_line"], clamped["end_column"]) == ("ree", 3, 6)


async def test_splice(env: Env) -> None:
    env.seed_file("a.ts", "const x = 1")
    value = await env.ok(
        "workspace_splice",
        path="a.ts",
        start_line=1,
        start_column=11,
        end_line=1,
        end_column=12,
        content="0;\n// done",
    )
    assert env.text_of("a.ts") == "const x = 0;\n// done"
    assert value["inserted"] == {
        "start_line": 1,
        "start_column": 11,
        "end_line": 2,
        "end_column": 8,
    }
    assert (value["path"], value["lines"], value["state"]) == ("a.ts", 2, "modified")


async def test_search(env: Env) -> None:
    env.seed_file("a.txt", "alpha\nbeta alpha")
    env.seed_file("b.txt", "ALPHA")
    value = await env.ok("workspace_search", query="alpha")
    assert value == {
        "matches": [
            {"path": "a.txt", "line": 1, "column": 1, "length": 5, "text": "alpha"},
            {"path": "a.txt", "line": 2, "column": 6, "length": 5, "text": "beta alpha"},
        ],
        "truncated": False,
    }
    folded = await env.ok("workspace_search", query="alpha", case_sensitive=False, limit=2)
    assert (len(folded["matches"]), folded["truncated"]) == (2, True)
    regex = await env.ok("workspace_search", query="^[A-Z]+$", regex=True)
    assert [m["path"] for m in regex["matches"]] == ["b.txt"]


async def test_search_shows_an_excerpt_of_a_long_line(env: Env) -> None:
    env.seed_file("min.js", "a" * 1000 + "NEEDLE" + "b" * 1000)
    (match,) = (await env.ok("workspace_search", query="NEEDLE"))["matches"]
    assert (match["line"], match["column"], match["length"]) == (1, 1001, 6)
    assert "NEEDLE" in match["text"]
    assert len(match["text"]) < 300
    assert match["text"].startswith("...")
    assert match["text"].endswith("...")


async def test_replace(env: Env) -> None:
    env.seed_file("a.ts", "const a = 1\nconst b = 2")
    env.seed_file("b.ts", "let c = 3")
    env.seed_file("c.ts", "const d = 4")
    value = await env.ok("workspace_replace", query="const", replacement="let")
    assert value == {"replaced": 3, "files": ["a.ts", "c.ts"]}
    assert env.text_of("a.ts") == "let a = 1\nlet b = 2"
    grouped = await env.ok(
        "workspace_replace", query=r"let (\w)", replacement=r"var \1", regex=True
    )
    assert grouped["replaced"] == 4
    assert env.text_of("b.ts") == "var c = 3"


async def test_move(env: Env) -> None:
    env.seed_file("a.txt", "A")
    env.seed_file("b.txt", "B")
    value = await env.ok("workspace_move", source="./a.txt", destination="b.txt")
    assert value == {"moved": True, "source": "a.txt", "destination": "b.txt"}
    assert (env.text_of("a.txt"), env.text_of("b.txt")) == (None, "A")
    error = await env.fails("workspace_move", source="a.txt", destination="c.txt")
    assert error.startswith("not_found:")
    assert "'a.txt'" in error


async def test_remove(env: Env) -> None:
    env.seed_file("a.txt", "A")
    env.seed_file("b.txt", "B")
    value = await env.ok("workspace_remove", paths=["a.txt", "zz.txt", "./a.txt"])
    assert value == {"removed": ["a.txt"], "missing": ["zz.txt"]}
    assert env.text_of("a.txt") is None
    assert env.text_of("b.txt") == "B"


async def test_list(env: Env) -> None:
    env.seed_file("b.txt", "bb")
    env.seed_file("a/x.py", "x")
    env.seed_file("a/y.py", "yyy")
    listing = await env.ok("workspace_list")
    assert sorted(entry["path"] for entry in listing["files"]) == ["a/x.py", "a/y.py", "b.txt"]
    assert {entry["path"]: entry["size"] for entry in listing["files"]}["a/y.py"] == 3
    assert listing["truncated"] is False
    under = await env.ok("workspace_list", directory="a")
    assert [entry["path"] for entry in under["files"]] == ["a/x.py", "a/y.py"]
    capped = await env.ok("workspace_list", limit=1)
    assert (len(capped["files"]), capped["truncated"]) == (1, True)


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("workspace_read", {}, "missing required argument 'path'"),
        ("workspace_read", {"path": "a", "extra": 1}, "unknown argument 'extra'; allowed: path"),
        ("workspace_read", {"path": 3}, "$.path: expected a string, got an integer"),
        ("workspace_read", {"path": ""}, "$.path"),
        ("workspace_read", {"path": "a", "start_line": 0}, "$.start_line"),
        ("workspace_read", {"path": "a", "start_line": True}, "$.start_line"),
        ("workspace_read", {"path": "a", "start_line": 1.5}, "$.start_line"),
        ("workspace_write", {"path": "a"}, "missing required argument 'content'"),
        ("workspace_splice", {"path": "a", "content": "x"}, "required argument 'start_line'"),
        ("workspace_search", {"query": "x", "limit": 501}, "$.limit"),
        ("workspace_search", {"query": "x", "regex": "yes"}, "$.regex"),
        ("workspace_remove", {"paths": []}, "$.paths"),
        ("workspace_remove", {"paths": ["a", 1]}, "$.paths[1]"),
        ("workspace_list", {"limit": 0}, "$.limit"),
    ],
)
async def test_bad_arguments_are_failures(
    env: Env, name: str, arguments: dict[str, Any], fragment: str
) -> None:
    error = await env.fails(name, **arguments)
    assert error.startswith("invalid arguments: ")
    assert fragment in error


async def test_non_object_arguments_are_failures() -> None:
    tool = by_name(workspace_tools(Workspace()))["workspace_list"]
    result = await tool.run(None, call_id="c")  # type: ignore[arg-type]
    assert isinstance(result, ToolFailure)
    assert "expected an object" in result.error


async def test_huge_argument_values_are_cut_in_messages() -> None:
    tool = by_name(workspace_tools(Workspace()))["workspace_read"]
    result = await tool.run({"path": "x" * 5000}, call_id="c")
    assert isinstance(result, ToolFailure)
    assert len(result.error) < 400


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("workspace_read", {"path": "../etc/passwd"}, "path: "),
        ("workspace_read", {"path": "/etc/passwd"}, "path: "),
        ("workspace_read", {"path": "absent.txt"}, "not_found: "),
        ("workspace_write", {"path": "a//b", "content": "x"}, "path: "),
        (
            "workspace_read",
            {"path": "a.txt", "start_line": 1, "start_column": 1},
            "range: a range needs all of",
        ),
        (
            "workspace_read",
            {"path": "a.txt", "start_line": 2, "start_column": 1, "end_line": 1, "end_column": 1},
            "range: a range must not end before it starts",
        ),
        (
            "workspace_splice",
            {
                "path": "absent.txt",
                "start_line": 1,
                "start_column": 1,
                "end_line": 1,
                "end_column": 1,
                "content": "x",
            },
            "not_found: ",
        ),
        ("workspace_search", {"query": "(", "regex": True}, "pattern: invalid regular expression"),
        ("workspace_replace", {"query": "a", "replacement": "\\9", "regex": True}, "pattern: "),
        ("workspace_move", {"source": "a.txt", "destination": "../out.txt"}, "path: "),
        ("workspace_remove", {"paths": ["a.txt", "../b"]}, "path: "),
        ("workspace_list", {"directory": "nope"}, "not_found: "),
        ("workspace_list", {"directory": "a.txt"}, "path: "),
    ],
)
async def test_refused_operations_are_failures(
    env: Env, name: str, arguments: dict[str, Any], expected: str
) -> None:
    env.seed_file("a.txt", "a")
    error = await env.fails(name, **arguments)
    assert error.startswith(expected), error
    assert env.text_of("a.txt") == "a"  # nothing was changed


async def test_size_limits_are_failures(tmp_path: pathlib.Path) -> None:
    memory = by_name(workspace_tools(Workspace(max_file_size=4)))
    disk = by_name(workspace_tools(FileSystemWorkspace(tmp_path, max_write_bytes=4)))
    for tools in (memory, disk):
        result = await tools["workspace_write"].run({"path": "a", "content": "12345"})
        assert isinstance(result, ToolFailure)
        assert result.error.startswith("size: ")


async def test_binary_files_are_modality_failures() -> None:
    data = base64.b64encode(b"\x89PNG....").decode()
    workspace = Workspace(files=[File.binary("pic.png", data, "image/png")])
    tools = by_name(workspace_tools(workspace))
    span = {"start_line": 1, "start_column": 1, "end_line": 1, "end_column": 1}
    cases: list[tuple[str, dict[str, Any]]] = [
        ("workspace_read", {"path": "pic.png"}),
        ("workspace_splice", {"path": "pic.png", "content": "x", **span}),
    ]
    for name, arguments in cases:
        result = await tools[name].run(arguments)
        assert isinstance(result, ToolFailure)
        assert result.error.startswith("modality: ")
        assert "image/png" in result.error
    listing = await tools["workspace_list"].run({})
    assert isinstance(listing, ToolSuccess)
    assert listing.value == {
        "files": [{"path": "pic.png", "size": 8, "lines": 0, "state": "created"}],
        "truncated": False,
    }
    assert workspace.file("pic.png") == File.binary("pic.png", data, "image/png")


# --------------------------------------------------------------------------- memory specifics


async def test_tools_over_a_manager_follow_the_active_workspace() -> None:
    manager = WorkspaceManager()
    tools = by_name(workspace_tools(manager))
    none = await tools["workspace_list"].run({})
    assert isinstance(none, ToolFailure)
    assert none.error == "not_found: there is no active workspace"
    one = manager.add(Workspace("one"))
    two = manager.add(Workspace("two"))
    await tools["workspace_write"].run({"path": "a", "content": "in one"})
    manager.switch("two")
    await tools["workspace_write"].run({"path": "a", "content": "in two"})
    assert (one.read("a"), two.read("a")) == ("in one", "in two")


async def test_tool_edits_emit_workspace_events() -> None:
    workspace = Workspace("w")
    events: list[WorkspaceEvent] = []
    workspace.subscribe(events.append)
    tools = by_name(workspace_tools(workspace))
    await tools["workspace_write"].run({"path": "a.md", "content": "x"})
    await tools["workspace_remove"].run({"paths": ["a.md"]})
    assert [type(e).__name__ for e in events] == ["WriteEvent", "RemoveEvent"]
    assert isinstance(events[0], WriteEvent)
    assert events[0].file.path == "a.md"


async def test_memory_backend_directly() -> None:
    workspace = Workspace(files=[File.text("a.txt", "hello")])
    backend = MemoryBackend(workspace)
    assert backend.workspace() is workspace
    assert await backend.read("a.txt") == ReadResult("a.txt", "hello", Range.of(1, 1, 1, 6), 1)
    spliced = await backend.splice("a.txt", Range.of(1, 1, 1, 6), "bye")
    assert spliced == SpliceResult(FileInfo("a.txt", 3, 1, "modified"), Range.of(1, 1, 1, 4))
    for directory, code in [("a", "not_found"), ("a.txt", "path")]:
        with pytest.raises(WorkspaceError) as excinfo:
            await backend.list(directory)
        assert excinfo.value.code == code
    with pytest.raises(WorkspaceError) as excinfo:
        await backend.list(limit=0)
    assert excinfo.value.code == "invalid"


# --------------------------------------------------------------------------- call / isolation


async def test_call_uses_the_call_id_and_checks_the_name() -> None:
    tools = by_name(workspace_tools(Workspace(files=[File.text("a", "x")])))
    result = await tools["workspace_read"].call(ToolCall("id-7", "workspace_read", {"path": "a"}))
    assert isinstance(result, ToolSuccess)
    assert result.id == "id-7"
    assert result.value["content"] == "x"
    wrong = await tools["workspace_read"].call(ToolCall("id-8", "workspace_write", {}))
    assert isinstance(wrong, ToolFailure)
    assert (wrong.id, wrong.name) == ("id-8", "workspace_write")
    minted = await tools["workspace_read"].run({"path": "a"})
    assert len(minted.id) == 32


class BrokenBackend:
    """A user-supplied backend with a bug, or one that blocks: the tool must contain both."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error

    async def read(self, path: str, range: Range | None = None) -> ReadResult:
        if self.error is not None:
            raise self.error
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def write(self, path: str, text: str) -> FileInfo:
        raise NotImplementedError

    async def splice(self, path: str, range: Range, text: str) -> SpliceResult:
        raise NotImplementedError

    async def search(
        self,
        query: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
        limit: int | None = None,
    ) -> tuple[SearchMatch, ...]:
        raise NotImplementedError

    async def replace(
        self,
        query: str,
        replacement: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
    ) -> ReplaceResult:
        raise NotImplementedError

    async def move(self, source: str, destination: str) -> bool:
        raise NotImplementedError

    async def remove(self, paths: Sequence[str]) -> tuple[str, ...]:
        raise NotImplementedError

    async def list(self, directory: str | None = None, *, limit: int | None = None) -> Listing:
        raise NotImplementedError


async def test_an_unexpected_error_is_a_logged_failure(caplog: pytest.LogCaptureFixture) -> None:
    tool = by_name(workspace_tools(BrokenBackend(RuntimeError("backend bug"))))["workspace_read"]
    with caplog.at_level(logging.ERROR, logger="actors.workspace"):
        result = await tool.run({"path": "a"})
    assert isinstance(result, ToolFailure)
    assert result.error == "workspace_read failed with an internal error"
    assert "backend bug" not in result.error
    assert any("backend bug" in (record.exc_text or "") for record in caplog.records)


async def test_os_errors_are_failures() -> None:
    tool = by_name(workspace_tools(BrokenBackend(PermissionError(13, "Permission denied"))))
    result = await tool["workspace_read"].run({"path": "a"})
    assert isinstance(result, ToolFailure)
    assert result.error == "io: Permission denied"


async def test_cancellation_propagates(autojump_clock: trio.testing.MockClock) -> None:
    tool = by_name(workspace_tools(BrokenBackend()))["workspace_read"]
    results: list[ToolResult] = []
    with trio.move_on_after(5) as scope:
        results.append(await tool.run({"path": "a"}))
    assert scope.cancelled_caught
    assert results == []


async def test_keyboard_interrupt_is_not_swallowed() -> None:
    tool = by_name(workspace_tools(BrokenBackend(KeyboardInterrupt())))["workspace_read"]
    with pytest.raises(KeyboardInterrupt):
        await tool.run({"path": "a"})
