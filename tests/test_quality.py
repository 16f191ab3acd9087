"""The static checks run as part of the suite: ruff lint, ruff format, mypy --strict."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("ruff", "check", "."), id="ruff-check"),
        pytest.param(("ruff", "format", "--check", "."), id="ruff-format"),
        # Files and strictness come from [tool.mypy] in pyproject.toml; --strict is repeated here so
        # the check cannot be weakened there alone.
        pytest.param(("mypy", "--strict"), id="mypy-strict"),
    ],
)
def test_static_check_is_clean(command: tuple[str, ...]) -> None:
    result = run(*command)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"


def test_mypy_covers_both_packages() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    mypy_section = text.split("[tool.mypy]", 1)[1].split("\n[", 1)[0]
    assert "strict = true" in mypy_section
    assert '"protocols"' in mypy_section
    assert '"actors"' in mypy_section


def test_no_two_test_modules_share_a_name() -> None:
    # pytest imports test modules by their bare name (the test directories are not packages, so
    # helpers such as actor_helpers import plainly): two files of one name in different folders
    # would make the second fail to import.
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert "test_quality.py" in seen
    assert not clashes, f"test modules share a name: {clashes}"
