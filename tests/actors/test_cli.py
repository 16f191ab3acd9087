"""The ``trio-agents`` command line."""

from __future__ import annotations

import io
import pathlib
import subprocess
import sys
import sysconfig
from importlib.metadata import version

import pytest
import trio
import trio.testing

import actors
from actors._demo import run_demo
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


def test_demo_streams_a_completion_from_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--interval", "0", "What is 19 + 23?"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("trio-agents demo: OpenAIChat -> simulator at http://127.0.0.1:")
    assert lines[1] == "> What is 19 + 23?"
    assert lines[2] == "[thinking] I can add these numbers myself."
    assert lines[3] == "19 + 23 = 42."
    assert lines[4].startswith("-- finish: stop; ")
    assert "\x1b[" not in out, "no colour codes when the output is not a terminal"


def test_demo_without_thinking_prints_only_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-think", "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert "[thinking]" not in out
    assert "\n1 2 3 4 5 6 7 8 9 10 11 12\n" in out


@pytest.mark.parametrize("interval", ["-1", "11", "fast"])
def test_demo_refuses_a_bad_interval(interval: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--interval", interval])
    assert exited.value.code == 2
    assert "--interval" in capsys.readouterr().err


async def test_run_demo_paces_deltas_and_dims_thinking_on_a_terminal(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.05

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    start = trio.current_time()
    result = await run_demo(out, prompt="count to 3", interval=2.0)
    assert result.content == "1 2 3"
    assert result.thinking == "The user wants me to count to 3, one number at a time."
    # Every streamed frame waits the interval: role, <think>, 12 thinking words, </think>, 3
    # numbers, the finish chunk, usage and [DONE] -- at least the 3 numbers and the thinking.
    assert trio.current_time() - start >= 2.0 * (3 + 12)
    text = out.getvalue()
    assert "\x1b[2m[thinking] The user wants me" in text
    assert "\x1b[0m\n1 2 3\x1b[0m\n-- finish: stop" in text
