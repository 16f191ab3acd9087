"""The ``trio-agents`` command line."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import sysconfig
from importlib.metadata import version

import pytest

import actors
from actors.cli import main


def test_version_flag_prints_the_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"trio-agents {version('trio-agents')}"
    assert actors.__version__ == version("trio-agents")


def test_no_arguments_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "usage: trio-agents" in capsys.readouterr().out


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--frobnicate"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


def test_console_script_and_module_entry_points() -> None:
    # Where pip puts console scripts for this interpreter (PATH may not include it, e.g. pyenv).
    script = pathlib.Path(sysconfig.get_path("scripts")) / "trio-agents"
    assert script.is_file(), "the trio-agents console script is installed by the package"
    for command in ([str(script), "--version"], [sys.executable, "-m", "actors", "--version"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"trio-agents {version('trio-agents')}"
