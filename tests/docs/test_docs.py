"""Every ```python block in README.md and docs/*.md runs, and so does every examples/*.py script."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
FENCE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block, in order."""
    return [
        (text.count("\n", 0, match.start()) + 2, match.group(1)) for match in FENCE.finditer(text)
    ]


def test_there_is_something_to_run() -> None:
    assert len(DOCUMENTS) >= 3
    assert EXAMPLES
    assert sum(len(python_blocks(doc.read_text(encoding="utf-8"))) for doc in DOCUMENTS) >= 5


def test_block_extraction_finds_blocks_and_their_lines() -> None:
    text = "# T\n\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [(4, "x = 1\n"), (11, "y = 2\n")]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_document_code_blocks_run(document: pathlib.Path) -> None:
    # Blocks of one document share a namespace, in order, like a reader following along.
    namespace: dict[str, object] = {"__name__": f"docs_{document.stem}"}
    for line, code in python_blocks(document.read_text(encoding="utf-8")):
        # Pad with newlines so tracebacks point at the right line of the Markdown file. The
        # blocks run as a reader's script would: without this module's __future__ imports.
        compiled = compile("\n" * (line - 1) + code, str(document), "exec", dont_inherit=True)
        exec(compiled, namespace)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), f"{script.name} printed nothing"
