"""The README's Quick start is what CI runs, and it installs what the suite needs."""

from __future__ import annotations

import pathlib
import runpy
import subprocess
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parent.parent
quickstart = runpy.run_path(str(ROOT / ".ci" / "quickstart.py"))


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_quick_start_block_holds_only_the_command_lines() -> None:
    lines = quickstart["quickstart_lines"](readme())
    assert all(not line.lstrip().startswith("#") for line in lines), "no comments in the block"
    demo_line = quickstart["command"]("demo", readme())
    test_line = quickstart["command"]("test", readme())
    assert lines == [demo_line, test_line], "exactly two lines: the demo first, then the tests"


def test_demo_line_installs_the_package_then_runs_the_demo() -> None:
    line = quickstart["command"]("demo", readme())
    install, sep, run = line.partition("&&")
    assert sep, "the demo line must install first, then run the demo"
    assert install.split() == ["python", "-m", "pip", "install", "-e", "."]
    assert run.split() == ["trio-agents", "demo"]
    # The command part, as installed for this interpreter (PATH may miss the scripts dir here).
    script = pathlib.Path(sysconfig.get_path("scripts")) / "trio-agents"
    result = subprocess.run(
        [str(script), "demo", "--interval", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # The team demo: 20 agents in the results table, one row each with its stop reason.
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(" agent-")]
    assert [row[0] for row in rows] == [f"agent-{i:02d}" for i in range(1, 21)]
    stops = [next(w for w in row if w in ("complete", "cancelled", "budget")) for row in rows]
    assert stops.count("cancelled") == 1
    assert stops.count("budget") == 1
    assert stops.count("complete") == 18
    assert "The answer is 42." in result.stdout
    assert "20 agents: 18 complete, 1 cancelled, 1 budget;" in result.stdout
    assert "saved 20 conversation(s) to " in result.stdout


def test_test_line_installs_the_test_extras_then_runs_pytest() -> None:
    line = quickstart["command"]("test", readme())
    install, sep, run = line.partition("&&")
    assert sep, "the test line must install first, then run the suite"
    assert "pip install" in install
    assert "'.[test]'" in install or "'.[dev]'" in install
    assert run.strip() == "python -m pytest"


def test_ci_runs_the_readme_test_line() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "quickstart.py test" in script
    printed = subprocess.run(
        ["python3", str(ROOT / ".ci" / "quickstart.py"), "test"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == quickstart["command"]("test", readme())


def test_extraction_rejects_a_readme_without_quick_start() -> None:
    import pytest

    with pytest.raises(SystemExit, match="no '## Quick start'"):
        quickstart["quickstart_lines"]("# Title\n\nno section here\n")
    with pytest.raises(SystemExit, match="exactly one test line"):
        quickstart["command"]("test", "## Quick start\n\n```bash\necho hi\n```\n")
