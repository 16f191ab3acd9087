"""docs/architecture.md names files and functions (the path of a delta, the subpackages): each
must exist, so the map cannot drift from the code without this failing."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
#: A table row of the delta's path: | hop | `file` | `Class.method` or `function` | what |
HOP = re.compile(r"^\| \d+ \| `([\w/.]+\.py)` \| `([\w.]+)` \|", re.MULTILINE)


def _defines(path: pathlib.Path, dotted: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scope: list[ast.stmt] = tree.body
    for part in dotted.split("."):
        found = next(
            (
                node
                for node in scope
                if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name == part
            ),
            None,
        )
        if found is None:
            return False
        scope = found.body
    return True


def test_the_delta_path_names_functions_that_exist() -> None:
    hops = HOP.findall(PAGE)
    assert len(hops) >= 8
    missing = [f"{file}: {name}" for file, name in hops if not _defines(ROOT / file, name)]
    assert not missing, f"docs/architecture.md names what the code does not have: {missing}"


def test_every_path_the_page_names_exists() -> None:
    paths = set(re.findall(r"`((?:actors|protocols|tests)/[\w/.]*)`", PAGE))
    assert paths
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
