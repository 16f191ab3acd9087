"""protocols/ is sans-IO: it never imports an event loop, an HTTP client, sockets or a database; and
asyncio is imported by the asyncio door (actors/aio.py) only."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "trio",
    "httpx",
    "anyio",
    "asyncio",
    "socket",
    "ssl",
    "selectors",
    "sqlite3",
    "trio_websocket",
    "hypercorn",
    "actors",
}


def imported_roots(path: pathlib.Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            roots.add("__import__")  # dynamic imports would dodge this check: refuse them
        elif isinstance(node, ast.Attribute) and node.attr == "import_module":
            roots.add("importlib.import_module")
    return roots


def protocol_modules() -> list[pathlib.Path]:
    modules = sorted((ROOT / "protocols").rglob("*.py"))
    assert len(modules) >= 8, "the walk must actually find the package's modules"
    return modules


def test_no_protocols_module_imports_io() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            imported_roots(path) & (FORBIDDEN | {"__import__", "importlib.import_module"})
        )
        for path in protocol_modules()
    }
    assert {path: bad for path, bad in offenders.items() if bad} == {}


def test_the_walk_detects_a_forbidden_import(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom trio import sleep\nimport httpx.sub\nfrom . import x\n")
    assert imported_roots(sample) == {"os", "trio", "httpx"}


def test_importing_every_protocols_module_loads_no_io_library() -> None:
    names = [".".join(path.relative_to(ROOT).with_suffix("").parts) for path in protocol_modules()]
    names = [name.removesuffix(".__init__") for name in names]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in {sorted(FORBIDDEN)!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# -- asyncio: only the asyncio door ------------------------------------------------------------

ASYNCIO_DOOR = ROOT / "actors" / "aio.py"


def test_asyncio_is_imported_by_the_asyncio_door_only() -> None:
    modules = sorted((ROOT / "actors").rglob("*.py"))
    assert len(modules) >= 40, "the walk must actually find the package's modules"
    importers = [
        str(path.relative_to(ROOT)) for path in modules if "asyncio" in imported_roots(path)
    ]
    assert importers == ["actors/aio.py"]


def test_the_library_and_its_blocking_door_run_without_asyncio() -> None:
    packages = ["actors", "actors.sync", "actors.durable", "actors.testing", "actors.relay"]
    code = (
        "import importlib, sys\n"
        f"for name in {packages!r}: importlib.import_module(name)\n"
        "print('asyncio' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
