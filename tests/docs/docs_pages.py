"""How the docs runner reads a page: its Python blocks, which continue which, and stated outputs.

The conventions (also stated in docs/index.md, "Writing the docs"):

* **Blocks stand alone.** Every ```python block runs as a script of its own, in a fresh
  interpreter (in an empty temporary folder, as ``__main__``), so it must import and define
  what it uses. A block whose first line is exactly ``# continued from above`` runs after the
  block before it instead, in the same interpreter and namespace, like the rest of one script.
  A block may be marked so only when it uses a name it does not define itself, and the first
  block of a page cannot be.
* **Stated output is checked.** A ``print(...)`` statement states what it prints with comments
  of the form ``# -> TEXT``: one at the end of the statement's (last) line, and/or whole comment
  lines right below it, one per output line (``# ->`` alone is an empty line). Everything that
  print writes while the page runs -- every time it runs, in order, with the final newline
  dropped, trailing spaces ignored -- must equal the stated lines. ``...`` in a stated line
  matches any text (across lines too), for output that legitimately varies (ids, timings, a
  real model's words). A stated print that never runs fails.
* **No unchecked claims.** A comment at the end of a print's line, or the first comment line
  right below a print, must be a ``# ->`` line (leave a blank line before any other comment);
  a ``# ->`` comment anywhere else is an error.

Only ``print`` calls that are whole statements can state output. Output written elsewhere (a
``print`` inside a lambda, a library writing to stdout) is not checked.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
import pathlib
import re
import subprocess
import symtable
import sys
import tempfile
import tokenize
from collections.abc import Iterator
from typing import Any

import attrs

CONTINUES = "# continued from above"
ARROW = "# ->"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
#: The real ``print``: ``run_script`` replaces the builtin with a recorder's.
_print = builtins.print
#: Names every module namespace has without defining them.
_MODULE_NAMES = frozenset({"__name__", "__file__", "__doc__", "__builtins__", "__spec__"})


class PageError(AssertionError):
    """A page breaks one of the conventions, or a block's output is not what it states."""


@attrs.frozen
class Block:
    """One ```python block: the Markdown line of its first code line, its code, and whether
    it continues the block before it."""

    line: int
    code: str

    @property
    def continues(self) -> bool:
        return self.code.split("\n", 1)[0].rstrip() == CONTINUES


@attrs.frozen
class Statement:
    """A ``print(...)`` statement with stated output: its lines in the Markdown file (first and
    last, inclusive) and the stated lines."""

    first: int
    last: int
    stated: tuple[str, ...]


def blocks(text: str) -> list[Block]:
    """Every ```python block of a Markdown text, in order."""
    return [
        Block(text.count("\n", 0, match.start()) + 2, match.group(1))
        for match in FENCE.finditer(text)
    ]


#: A fence that looks like Python but is not the runner's exact ```python at column 0.
_STRAY = re.compile(r"^(?!```python$)[ \t>]*```[ \t]*(py|python|python3|pycon)\b.*$", re.MULTILINE)


def stray_fences(text: str) -> list[int]:
    """Lines of fences that open Python code the runner would not run (```py, an indented
    ```python, ...): the runner refuses them rather than skip them silently."""
    return [text.count("\n", 0, match.start()) + 1 for match in _STRAY.finditer(text)]


def padded(block: Block) -> str:
    """The block's code preceded by newlines, so that line numbers are the Markdown file's."""
    return "\n" * (block.line - 1) + block.code


def _comments(source: str) -> Iterator[tuple[int, str, bool]]:
    """(line, comment text, alone on its line) for every comment of ``source``."""
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, column = token.start
            alone = not lines[row - 1][:column].strip()
            yield row, token.string, alone


def _stated_text(comment: str) -> str:
    text = comment[len(ARROW) :]
    return text[1:] if text.startswith(" ") else text


def _is_arrow(comment: str) -> bool:
    return comment == ARROW or comment.startswith(ARROW + " ")


def statements(source: str, where: str) -> list[Statement]:
    """The print statements of ``source`` that state their output, checked against the
    conventions (``PageError`` names the line of any breach; ``where`` names the file)."""
    tree = ast.parse(source)
    prints = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "print"
    ]
    comments = {row: (text, alone) for row, text, alone in _comments(source)}
    used: set[int] = set()
    found: list[Statement] = []
    for node in prints:
        last = node.end_lineno or node.lineno
        stated: list[str] = []
        trailing = comments.get(last)
        if trailing is not None and not trailing[1]:
            if not _is_arrow(trailing[0]):
                raise PageError(
                    f"{where}:{last}: a comment after a print must state its output as "
                    f"'# -> ...', not {trailing[0]!r}"
                )
            stated.append(_stated_text(trailing[0]))
            used.add(last)
        row = last + 1
        while row in comments and comments[row][1]:
            if not _is_arrow(comments[row][0]):
                if stated:  # the stated lines are over: an ordinary comment follows
                    break
                raise PageError(
                    f"{where}:{row}: a comment line right below a print must state its output "
                    f"as '# -> ...' (leave a blank line before other comments), not "
                    f"{comments[row][0]!r}"
                )
            stated.append(_stated_text(comments[row][0]))
            used.add(row)
            row += 1
        if stated:
            found.append(Statement(node.lineno, last, tuple(stated)))
    for row, (text, _) in sorted(comments.items()):
        if _is_arrow(text) and row not in used:
            raise PageError(f"{where}:{row}: '# ->' states output, but there is no print to check")
    return found


def foreign_names(code: str) -> set[str]:
    """Names ``code`` reads as globals without binding them itself (builtins excluded)."""
    table = symtable.symtable(code, "<block>", "exec")
    bound: set[str] = set()
    used: set[str] = set()

    def walk(scope: symtable.SymbolTable) -> None:
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            if scope is table:
                if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
                    bound.add(name)
                if symbol.is_referenced():
                    used.add(name)
            elif symbol.is_global():
                if symbol.is_declared_global() and symbol.is_assigned():
                    bound.add(name)
                if symbol.is_referenced():
                    used.add(name)
        for child in scope.get_children():
            walk(child)

    walk(table)
    return used - bound - set(dir(builtins)) - _MODULE_NAMES


def check_structure(page: list[Block], where: str) -> None:
    """Each block stands alone, or is marked as continuing and needs to."""
    for index, block in enumerate(page):
        foreign = foreign_names(block.code)
        if block.continues:
            if index == 0:
                raise PageError(f"{where}:{block.line}: the first block cannot continue another")
            if not foreign:
                raise PageError(
                    f"{where}:{block.line}: the block is marked {CONTINUES!r} but uses nothing "
                    "from the blocks above: remove the marker"
                )
        elif foreign:
            raise PageError(
                f"{where}:{block.line}: the block uses {', '.join(sorted(foreign))} without "
                f"defining or importing it: import it, or start the block with {CONTINUES!r}"
            )


class Recorder:
    """A ``print`` that also records, per stated statement, what it wrote."""

    def __init__(self, filename: str, stated: list[Statement]) -> None:
        self.filename = filename
        self.stated = stated
        self.written: dict[Statement, list[str]] = {statement: [] for statement in stated}
        self._by_line = {
            line: statement
            for statement in stated
            for line in range(statement.first, statement.last + 1)
        }

    def print(self, *args: Any, **kwargs: Any) -> None:
        target = kwargs.get("file")
        if target is not None and target is not sys.stdout:
            _print(*args, **kwargs)
            return
        buffer = io.StringIO()
        _print(*args, **{**kwargs, "file": buffer})
        text = buffer.getvalue()
        sys.stdout.write(text)  # still shown by pytest when the test fails
        frame = sys._getframe(1)
        if frame.f_code.co_filename == self.filename:
            statement = self._by_line.get(frame.f_lineno)
            if statement is not None:
                self.written[statement].append(text)

    def mismatches(self) -> list[str]:
        """One message per stated statement whose output differs from what it states."""
        problems = []
        for statement in self.stated:
            pieces = self.written[statement]
            expected = "\n".join(line.rstrip() for line in statement.stated)
            if not pieces:
                problems.append(
                    f"{self.filename}:{statement.first}: the print never ran; it states:\n"
                    f"{expected}"
                )
                continue
            actual = "".join(pieces)
            actual = actual.removesuffix("\n")
            actual = "\n".join(line.rstrip() for line in actual.split("\n"))
            if not matches(expected, actual):
                problems.append(
                    f"{self.filename}:{statement.first}: the print wrote\n{actual}\n"
                    f"but the page states\n{expected}"
                )
        return problems


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` equals ``expected``, where ``...`` in ``expected`` matches any text."""
    pattern = ".*".join(re.escape(piece) for piece in expected.split("..."))
    return re.fullmatch(pattern, actual, re.DOTALL) is not None


def scripts(page: list[Block]) -> list[list[Block]]:
    """The page's blocks as the scripts a reader runs: each block that stands alone, followed by
    the blocks marked as continuing it."""
    found: list[list[Block]] = []
    for block in page:
        if block.continues and found:
            found[-1].append(block)
        else:
            found.append([block])
    return found


#: The script that runs one of a page's scripts in a fresh interpreter (see its docstring).
FRESH = pathlib.Path(__file__).resolve().with_name("fresh_script.py")
#: The repository: the fresh interpreters import its ``actors`` and ``protocols``.
ROOT = FRESH.parent.parent.parent
#: How long one script may run (seconds) before its page fails.
SCRIPT_TIMEOUT = 300.0
#: How much of a failed script's output its page's failure shows (lines, from the end).
SHOWN = 60


def _tail(text: str) -> str:
    lines = text.rstrip().splitlines()
    cut = lines[-SHOWN:]
    return "\n".join((["[...]"] if len(lines) > SHOWN else []) + cut)


def _hint(stderr: str) -> str:
    """A line saying what a reader's fix probably is, for the failures a block that leans on
    another one makes."""
    missing = re.findall(r"AttributeError: module '([\w.]+)' has no attribute '(\w+)'", stderr)
    if missing:
        package, name = missing[-1]
        return (
            f"\n(hint: a block runs alone, in a fresh interpreter: if {package}.{name} is a "
            f"module, the block must `import {package}.{name}` itself)"
        )
    if re.search(r"^NameError: ", stderr, re.MULTILINE):
        return (
            "\n(hint: a block runs alone, in a fresh interpreter: it must define or import every "
            f"name it uses, or start with {CONTINUES!r})"
        )
    return ""


def run_script_of_page(
    script: list[Block],
    filename: str,
    stated: list[Statement],
    *,
    where: str,
    timeout: float = SCRIPT_TIMEOUT,
) -> list[str]:
    """Run one script of a page (see :func:`scripts`) in a fresh interpreter, in an empty
    temporary folder, and return the page's problems with it: its failure (its traceback,
    shown from the end) or the stated prints whose output differs. ``where`` names the script
    in those messages."""
    with tempfile.TemporaryDirectory(prefix="docs-block-") as folder:
        report = os.path.join(folder, ".stated.json")
        payload = json.dumps(
            {
                "filename": filename,
                "blocks": [padded(block) for block in script],
                "stated": [[statement.first, statement.last] for statement in stated],
                "report": report,
            }
        )
        paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        try:
            ran = subprocess.run(
                [sys.executable, str(FRESH)],
                input=payload,
                capture_output=True,
                text=True,
                cwd=folder,
                env=environment,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as expired:
            out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout
            return [f"{where} did not end within {timeout:g} s; its output:\n{_tail(out or '')}"]
        sys.stdout.write(ran.stdout)  # shown by pytest when the test fails
        if ran.returncode != 0:
            shown = _tail(ran.stderr) or _tail(ran.stdout) or "(no output)"
            return [
                f"{where} failed (exit status {ran.returncode}), run alone in a fresh "
                f"interpreter:\n{shown}{_hint(ran.stderr)}"
            ]
        with open(report, encoding="utf-8") as file:
            written = json.load(file)
    recorder = Recorder(filename, stated)
    for statement, pieces in zip(stated, written, strict=True):
        recorder.written[statement] = list(pieces)
    return recorder.mismatches()


def run_page(text: str, filename: str) -> None:
    """Run every Python block of a Markdown page under the conventions above; raise
    ``PageError`` at the first breach of a convention, or, once every script has run, listing
    each one that failed (its page, lines and traceback) and each stated output that differs.

    Each script of the page -- a block, with the blocks marked as continuing it -- runs in an
    interpreter of its own, started for it in an empty temporary folder, with ``__name__ ==
    "__main__"``: as a reader who copies it into a file and runs ``python file.py`` runs it.
    So a block that leans on an earlier one -- on a name it defined, a module it imported (such
    as ``trio.testing``, which ``import trio`` alone does not load), a file it wrote, a setting
    it made -- fails, as it would for that reader."""
    stray = stray_fences(text)
    if stray:
        raise PageError(
            f"{filename}:{stray[0]}: a Python block must open with ```python at the start of "
            "its line, or the runner does not run it"
        )
    page = blocks(text)
    check_structure(page, filename)
    problems: list[str] = []
    for number, script in enumerate(scripts(page), start=1):
        stated: list[Statement] = []
        for block in script:
            stated.extend(statements(padded(block), filename))
        first, last = script[0], script[-1]
        end = last.line + last.code.count("\n") - 1
        where = f"{filename}:{first.line}: the page's script {number} (lines {first.line}-{end}"
        where += ", blocks marked as continuing it included)" if len(script) > 1 else ")"
        problems.extend(run_script_of_page(script, filename, stated, where=where))
    if problems:
        raise PageError("\n\n".join(problems))


def run_script(path: str) -> None:
    """Run a script as ``python path`` would, checking its stated outputs (for examples/)."""
    import runpy

    with open(path, encoding="utf-8") as file:
        source = file.read()
    recorder = Recorder(path, statements(source, path))
    builtins.print = recorder.print
    sys.argv = [path]
    runpy.run_path(path, run_name="__main__")
    problems = recorder.mismatches()
    if problems:
        sys.stderr.write("\n\n".join(problems) + "\n")
        raise SystemExit(1)


if __name__ == "__main__":
    sys.path[0] = str(__import__("pathlib").Path(sys.argv[1]).resolve().parent)
    run_script(sys.argv[1])
