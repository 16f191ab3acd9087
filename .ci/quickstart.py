"""Print a command line from the README's "Quick start" block.

``python3 .ci/quickstart.py test`` prints the test line (the one that runs ``scripts/test.py``,
which sets up what the suite needs and runs pytest);
``python3 .ci/quickstart.py demo`` prints the demo line. `.ci/run` runs the test line, and the test
suite checks the same extraction, so CI always runs exactly what the README tells people to run.
"""

from __future__ import annotations

import pathlib
import sys

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def quickstart_lines(text: str) -> list[str]:
    """The non-empty lines of the first ```bash block under the "## Quick start" heading."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip().lower() == "## quick start")
    except StopIteration:
        raise SystemExit("README.md has no '## Quick start' section") from None
    block: list[str] | None = None
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if block is None:
            if line.strip() == "```bash":
                block = []
        elif line.strip() == "```":
            return [entry for entry in block if entry.strip()]
        else:
            block.append(line)
    raise SystemExit("README.md's Quick start has no complete ```bash block")


def is_test_line(line: str) -> bool:
    """Whether ``line`` runs the test suite (through ``scripts/test.py``, or pytest itself)."""
    return "scripts/test" in line or "pytest" in line


def command(kind: str, text: str) -> str:
    """The test line (see :func:`is_test_line`) or the demo line (every other line) of the
    block."""
    lines = quickstart_lines(text)
    tests = [line for line in lines if is_test_line(line)]
    demos = [line for line in lines if not is_test_line(line)]
    chosen = tests if kind == "test" else demos
    if len(chosen) != 1:
        raise SystemExit(f"README.md's Quick start must have exactly one {kind} line: {chosen}")
    return chosen[0]


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "test"
    print(command(kind, README.read_text(encoding="utf-8")))
