#!/usr/bin/env python3
"""Set up what the test suite needs, then run it: ``python scripts/test.py [PYTEST ARGS...]``.

This is the README's test line. On a fresh machine with Python 3.11+ and pip it does the set-up
itself, in order:

1. ``python -m pip install -e '.[test]'``: trio-agents with its test extras, for this interpreter.
2. The relay's browser page is tested in headless Chromium at ``/usr/bin/chromium`` with
   ``/usr/bin/chromedriver``. When they are missing and apt-get can run without a question (as
   root, or through ``sudo -n``), it installs Debian's ``chromium`` and ``chromium-driver``.
   Otherwise it says exactly what to install and goes on: the browser tests then FAIL,
   each naming what is missing, and the command says so again at the end and exits non-zero.
   They are never skipped: a run without the browser is not a passing run, but the rest of the
   suite still runs and reports.
3. ``python -m pytest`` with the arguments given here, from the repository's root; its exit
   status is this command's.

``TRIO_AGENTS_TEST_DRY_RUN=1`` prints the commands instead of running them (the suite's own test
of this script uses it).
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: What the browser tests drive (tests/e2e/test_relay_browser.py), and Debian's packages.
BROWSER = ("/usr/bin/chromium", "/usr/bin/chromedriver")
PACKAGES = ("chromium", "chromium-driver")

DRY_RUN = "TRIO_AGENTS_TEST_DRY_RUN"


def say(text: str) -> None:
    print(f"scripts/test.py: {text}", file=sys.stderr, flush=True)


def missing_browser(paths: Sequence[str] | None = None) -> list[str]:
    """The browser programs (default: :data:`BROWSER`) that are not executable files."""
    return [path for path in (BROWSER if paths is None else paths) if not os.access(path, os.X_OK)]


def apt_prefix(
    *,
    euid: int,
    which: Callable[[str], str | None] = shutil.which,
    sudo_works: Callable[[], bool] | None = None,
) -> list[str] | None:
    """How to run apt-get without asking anything: ``[]`` as root, ``["sudo", "-n"]`` when sudo
    needs no password, ``None`` when apt-get is missing or cannot be run so."""
    if which("apt-get") is None:
        return None
    if euid == 0:
        return []
    if which("sudo") is None:
        return None
    works = sudo_works if sudo_works is not None else _sudo_without_password
    return ["sudo", "-n"] if works() else None


def _sudo_without_password() -> bool:
    probe = subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def apt_commands(prefix: Sequence[str]) -> list[list[str]]:
    """The commands that install the browser packages, non-interactively."""
    quiet = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive"]
    return [
        [*quiet, "apt-get", "update"],
        [*quiet, "apt-get", "install", "-y", "--no-install-recommends", *PACKAGES],
    ]


def instructions(missing: Sequence[str]) -> str:
    """What to install by hand, naming what is missing."""
    return (
        f"{' and '.join(missing)} not found, so the browser tests (the relay's page, the AI SDK "
        "page) will fail. "
        f"Install them: on Debian or Ubuntu, `sudo apt-get install {' '.join(PACKAGES)}`; "
        f"elsewhere, a Chromium and its chromedriver at {' and '.join(BROWSER)}."
    )


def pip_command(python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "install", "-e", ".[test]"]


def pytest_command(args: Sequence[str], python: str = sys.executable) -> list[str]:
    return [python, "-m", "pytest", *args]


def _pip_hint() -> str:
    managed = pathlib.Path(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED").exists()
    if managed and sys.prefix == sys.base_prefix:
        return (
            " This Python is managed by the system; use a virtual environment: "
            "`python3 -m venv .venv && . .venv/bin/activate`, then run this again."
        )
    return ""


def main(args: Sequence[str]) -> int:
    dry = os.environ.get(DRY_RUN, "") not in ("", "0")

    def run(command: Sequence[str]) -> int:
        print(f"+ {shlex.join(command)}", file=sys.stderr, flush=True)
        if dry:
            return 0
        return subprocess.run(command, cwd=ROOT, check=False).returncode

    status = run(pip_command())
    if status != 0:
        say(f"pip could not install the test extras (exit status {status}).{_pip_hint()}")
        return status

    missing = missing_browser()
    if missing:
        prefix = apt_prefix(euid=os.geteuid() if hasattr(os, "geteuid") else -1)
        if prefix is None:
            say(instructions(missing) + " (apt-get cannot run here without a password.)")
        else:
            say(f"installing Debian's {' and '.join(PACKAGES)} for the browser tests")
            for command in apt_commands(prefix):
                if run(command) != 0:
                    say(f"`{shlex.join(command)}` failed. {instructions(missing)}")
                    break
            missing = [] if dry else missing_browser()

    status = run(pytest_command(args))
    if missing:
        say(instructions(missing))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
