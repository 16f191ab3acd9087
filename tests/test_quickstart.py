"""The README's Quick start is what CI runs, and it installs what the suite needs."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import runpy
import shlex
import subprocess
import sys
import sysconfig
import types

import pytest

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


def test_test_line_runs_the_set_up_script() -> None:
    line = quickstart["command"]("test", readme())
    assert line.split() == ["python", "scripts/test.py"]
    assert (ROOT / "scripts" / "test.py").is_file()


def load_script() -> types.ModuleType:
    """scripts/test.py as a module (so its settings can be changed for one test)."""
    spec = importlib.util.spec_from_file_location("scripts_test", ROOT / "scripts" / "test.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_set_up_script_installs_the_test_extras_then_runs_pytest_with_the_arguments() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "test.py"), "tests/protocols", "-x", "-k", "a b"],
        capture_output=True,
        text=True,
        env={**os.environ, "TRIO_AGENTS_TEST_DRY_RUN": "1"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    commands = [line[2:] for line in result.stderr.splitlines() if line.startswith("+ ")]
    python = shlex.quote(sys.executable)
    assert commands[0] == f"{python} -m pip install -e '.[test]'"
    assert commands[-1] == f"{python} -m pytest tests/protocols -x -k 'a b'"
    if not load_script().missing_browser():
        assert len(commands) == 2, "nothing else is installed when the browser is there"
        assert "not found" not in result.stderr


def test_set_up_script_installs_the_browser_without_asking_anything() -> None:
    script = load_script()
    which = {"apt-get": "/usr/bin/apt-get", "sudo": "/usr/bin/sudo"}.get
    assert script.apt_prefix(euid=0, which=which) == []
    assert script.apt_prefix(euid=1000, which=which, sudo_works=lambda: True) == ["sudo", "-n"]
    assert script.apt_prefix(euid=1000, which=which, sudo_works=lambda: False) is None
    assert script.apt_prefix(euid=1000, which={"apt-get": "/usr/bin/apt-get"}.get) is None
    assert script.apt_prefix(euid=0, which={"sudo": "/usr/bin/sudo"}.get) is None, "no apt-get"
    update, install = script.apt_commands(["sudo", "-n"])
    assert update == ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update"]
    assert install[:5] == ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]
    assert install[5:] == [
        "install",
        "-y",
        "--no-install-recommends",
        "chromium",
        "chromium-driver",
    ]
    # The programs it checks are the ones the browser tests drive.
    browser_tests = (ROOT / "tests" / "e2e" / "test_relay_browser.py").read_text()
    for path in script.BROWSER:
        assert f'"{path}"' in browser_tests


def test_set_up_script_says_what_to_install_and_the_run_fails_without_the_browser(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = load_script()
    there = tmp_path / "chromium"
    there.write_text("#!/bin/sh\n")
    there.chmod(0o755)
    absent = str(tmp_path / "chromedriver")
    assert script.missing_browser([str(there), absent]) == [absent]
    # No apt-get on PATH: it cannot install, so it says what to install -- before and after the
    # run, so the advice is not lost above pytest's report -- and still runs the suite.
    monkeypatch.setattr(script, "BROWSER", (str(there), absent))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TRIO_AGENTS_TEST_DRY_RUN", "1")
    assert script.main(["-q"]) == 0
    err = capsys.readouterr().err
    advice = (
        f"{absent} not found, so the browser tests (the relay's page, the AI SDK page) will fail"
    )
    assert err.count(advice) == 2
    assert "apt-get install chromium chromium-driver" in err
    assert err.index("-m pytest -q") < err.rindex(advice)
    # And the browser tests fail -- never skip -- when the programs are missing.
    browser_tests = (ROOT / "tests" / "e2e" / "test_relay_browser.py").read_text()
    assert "pytest.fail(" in browser_tests
    assert "pytest.skip" not in browser_tests
    assert "importorskip" not in browser_tests


def test_ci_runs_the_readme_test_line_and_nothing_else() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "quickstart.py test" in script
    commands = [
        line.strip()
        for line in script.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert commands == [
        "set -euo pipefail",
        'cd "$(dirname "$0")/.."',
        "line=$(python3 .ci/quickstart.py test)",
        'echo "+ $line"',
        'bash -euo pipefail -c "$line"',
    ], "the README's line does all the set-up; CI adds none of its own"
    printed = subprocess.run(
        ["python3", str(ROOT / ".ci" / "quickstart.py"), "test"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == quickstart["command"]("test", readme())


def test_extraction_rejects_a_readme_without_quick_start() -> None:
    with pytest.raises(SystemExit, match="no '## Quick start'"):
        quickstart["quickstart_lines"]("# Title\n\nno section here\n")
    with pytest.raises(SystemExit, match="exactly one test line"):
        quickstart["command"]("test", "## Quick start\n\n```bash\necho hi\n```\n")
