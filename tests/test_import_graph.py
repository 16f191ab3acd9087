"""The house's structure: the actor core is the bottom layer of ``actors``, no two modules import
each other in a circle, and no module is over 800 lines.

The rules, as these tests apply them:

* ``actors/_core`` imports no module of ``actors`` outside ``actors/_core`` -- not at run time,
  not in a function, not under ``if TYPE_CHECKING:`` either -- checked on the source, and in a
  fresh interpreter where the core is imported (and run) with nothing of ``actors`` above it.
* No import circle between modules of ``actors/`` and ``protocols/``: every ``import`` and
  ``from ... import`` counts, at module level or in a function, except those under
  ``if TYPE_CHECKING:`` (they never run). ``from package import name`` is an edge to the
  submodule ``package.name`` when there is one, else to the package (its ``__init__``) -- so a
  member importing a name from its own package's ``__init__`` is an edge to the package, and a
  circle when that ``__init__`` imports the member.
* No module of ``actors/`` or ``protocols/`` is over 800 lines, unless its first docstring has a
  line starting with :data:`ONE_ALGORITHM` followed by what that algorithm is: one algorithm
  that reads best whole may stay whole, and says so at its top.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "protocols")
CORE = "actors._core"

#: The most lines a module may have.
MAX_LINES = 800
#: How a module's first docstring says it is one algorithm, kept whole: a line starting with
#: this phrase, followed by what the algorithm is.
ONE_ALGORITHM = "One algorithm, kept whole:"


# -- the import graph ----------------------------------------------------------------------------


def modules(root: pathlib.Path, packages: tuple[str, ...]) -> dict[str, tuple[pathlib.Path, bool]]:
    """Every module of ``packages`` under ``root``: its dotted name -> (its file, is a package)."""
    found: dict[str, tuple[pathlib.Path, bool]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            found[".".join(parts)] = (path, is_package)
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under an ``if TYPE_CHECKING:`` (its body, not its ``else``)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for statement in node.body:
                skipped.update(id(inner) for inner in ast.walk(statement))
    return skipped


def imports(
    name: str, path: pathlib.Path, is_package: bool, *, type_checking: bool
) -> set[tuple[str, str | None]]:
    """What module ``name`` imports: (the module imported from, the name imported or ``None``
    for ``import x.y``), relative imports resolved; those under ``if TYPE_CHECKING:`` only when
    ``type_checking``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = set() if type_checking else _type_checking_only(tree)
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.update((source, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
    return found


def graph(
    found: dict[str, tuple[pathlib.Path, bool]], *, type_checking: bool = False
) -> dict[str, set[str]]:
    """The import edges between the modules ``found``: ``from p import n`` goes to the module
    ``p.n`` if there is one, else to ``p``; ``import a.b`` goes to ``a.b``."""
    edges: dict[str, set[str]] = {}
    for name, (path, is_package) in found.items():
        targets: set[str] = set()
        for source, imported in imports(name, path, is_package, type_checking=type_checking):
            if imported is not None and f"{source}.{imported}" in found:
                targets.add(f"{source}.{imported}")
            elif source in found:
                targets.add(source)
        targets.discard(name)
        edges[name] = targets
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``edges``: each strongly connected component of more than one
    module, sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_the_graph_resolves_imports_and_leaves_out_type_checking(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\n",
            "pkg/a.py": """\
                from typing import TYPE_CHECKING
                from . import b
                from .sub import c as _c
                if TYPE_CHECKING:
                    from .d import D
                else:
                    import pkg.d
                A = 1
            """,
            "pkg/b.py": "def f():\n    from pkg import A\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "from ..d import x\nimport os\n",
            "pkg/d.py": "",
        },
    )
    found = modules(tmp_path, ("pkg",))
    assert graph(found) == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b", "pkg.sub.c", "pkg.d"},
        "pkg.b": {"pkg"},  # a name from the package's __init__: an edge to the package
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg.d"},
        "pkg.d": set(),
    }
    assert graph(found, type_checking=True)["pkg.a"] == {"pkg.b", "pkg.sub.c", "pkg.d"}
    # the circle through the package's __init__, found; the TYPE_CHECKING import is no edge
    assert circles(graph(found)) == [["pkg", "pkg.a", "pkg.b"]]


def test_the_circle_finder_finds_every_circle_and_nothing_else() -> None:
    edges = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": set(),
        "e": {"f"},
        "f": {"e"},
        "g": {"g"},
    }
    assert circles(edges) == [["a", "b", "c"], ["e", "f"]]
    assert circles({"x": {"y"}, "y": set()}) == []


# -- the core is the bottom layer ----------------------------------------------------------------


def above_core(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each module of the core with the modules of ``actors`` outside the core it imports."""
    return {
        name: sorted(
            target
            for target in targets
            if (target == "actors" or target.startswith("actors."))
            and not (target == CORE or target.startswith(CORE + "."))
        )
        for name, targets in sorted(edges.items())
        if name == CORE or name.startswith(CORE + ".")
    }


def test_the_core_imports_nothing_above_it() -> None:
    found = modules(ROOT, ("actors",))
    core = [name for name in found if name.startswith(CORE)]
    assert len(core) >= 7, "the walk must actually find the core's modules"
    # TYPE_CHECKING imports count too: the core names nothing above it, even for annotations.
    offenders = above_core(graph(found, type_checking=True))
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_core_check_sees_an_upward_import(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "actors/__init__.py": "",
            "actors/agent.py": "",
            "actors/_core/__init__.py": "",
            "actors/_core/_a.py": "from . import _b\n",
            "actors/_core/_b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..agent import X\n"
            ),
        },
    )
    edges = graph(modules(tmp_path, ("actors",)), type_checking=True)
    assert above_core(edges) == {
        "actors._core": [],
        "actors._core._a": [],
        "actors._core._b": ["actors.agent"],
    }


def test_the_core_runs_in_a_fresh_interpreter_with_nothing_above_it_imported() -> None:
    # Importing ``actors._core`` would run ``actors/__init__.py`` first, which imports every
    # feature: the package is stood in for by an empty one over the same directory, so that
    # only what the core itself imports is loaded. Then a core runtime runs an actor.
    code = textwrap.dedent(
        f"""\
        import importlib, pathlib, sys, types
        package = types.ModuleType("actors")
        package.__path__ = [str(pathlib.Path({str(ROOT)!r}) / "actors")]
        sys.modules["actors"] = package
        core = sorted(
            "actors._core." + path.stem
            for path in (pathlib.Path(package.__path__[0]) / "_core").glob("_*.py")
        )
        for name in ["actors._core", *core]:
            importlib.import_module(name)

        import trio
        from actors._core._actor import Actor
        from actors._core._runtime import Runtime, open_runtime

        class Echo(Actor[str, str]):
            async def handle(self, message: str) -> str:
                return message.upper()

        async def main() -> None:
            async with open_runtime() as runtime:
                assert type(runtime) is Runtime
                ref = await runtime.spawn(Echo, name="echo", register=True)
                assert await ref.call("hi") == "HI"
                assert runtime.lookup("echo") == ref
                assert len(runtime.statistics().children) == 1

        trio.run(main)
        print(len(core))
        print(sorted(
            name for name in sys.modules
            if name.startswith("actors.") and not name.startswith("{CORE}")
        ))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    count, loaded = result.stdout.strip().splitlines()
    assert int(count) >= 6  # the core's modules were found and imported
    assert loaded == "[]"


# -- no import circles ---------------------------------------------------------------------------


def test_no_import_circles_between_modules() -> None:
    found = modules(ROOT, PACKAGES)
    assert len(found) >= 100, "the walk must actually find the packages' modules"
    assert circles(graph(found)) == []


# -- no module over 800 lines --------------------------------------------------------------------


def long_modules(root: pathlib.Path, packages: tuple[str, ...]) -> dict[str, int]:
    """The modules over :data:`MAX_LINES` lines whose first docstring does not say they are one
    algorithm (a line starting with :data:`ONE_ALGORITHM`), with their line counts."""
    long: dict[str, int] = {}
    for path, _ in modules(root, packages).values():
        text = path.read_text(encoding="utf-8")
        count = len(text.splitlines())
        if count <= MAX_LINES:
            continue
        docstring = ast.get_docstring(ast.parse(text, filename=str(path))) or ""
        if any(line.strip().startswith(ONE_ALGORITHM) for line in docstring.splitlines()):
            continue
        long[str(path.relative_to(root))] = count
    return long


def test_the_length_check_counts_lines_and_honours_the_marker(tmp_path: pathlib.Path) -> None:
    body = "x = 1\n" * MAX_LINES
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/at_the_limit.py": '"""Doc."""\n' + "x = 1\n" * (MAX_LINES - 1),
            "pkg/long.py": '"""Doc."""\n' + body,
            "pkg/algorithm.py": f'"""A parser.\n\n{ONE_ALGORITHM} the LR(1) tables.\n"""\n' + body,
            "pkg/mentions.py": f'"""Not marked.\n"""\n# {ONE_ALGORITHM}\n' + body,
        },
    )
    assert long_modules(tmp_path, ("pkg",)) == {
        "pkg/long.py": MAX_LINES + 1,
        "pkg/mentions.py": MAX_LINES + 3,  # the marker counts in the docstring only
    }


def test_no_module_is_over_800_lines_unless_it_is_one_algorithm() -> None:
    assert long_modules(ROOT, PACKAGES) == {}
