"""``trio-agents jobs watch`` as a user runs it: real processes on one SQLite file -- a worker,
the watcher, the other ``jobs`` commands -- and an app module from the current directory.

They run on the real clock (subprocesses do not follow trio's mock clock); every wait is
bounded.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from jobs_app import CUT, app, cli, ended, opened, start, start_worker, stop

from protocols.live import event_from_json

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

APP = app(CUT, answer='Reply("It is 42.\\nSure.", chunk=3, delay=0.02)')

STORE = "sqlite:///jobs.db"


def submit(folder: pathlib.Path, agent: str, text: str) -> str:
    done = cli(folder, "jobs", "submit", "--store", STORE, "--agent", agent, text)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def watch(folder: pathlib.Path, id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli(folder, "jobs", "watch", "--store", STORE, id, "--poll", "0.05", *extra)


def untimed(lines: str) -> list[dict[str, object]]:
    out = []
    for line in lines.splitlines():
        event = json.loads(line)
        event.pop("time", None)
        out.append(event)
    return out


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="watches /proc")
async def test_a_watcher_started_before_the_worker_follows_the_job_to_its_end(
    folder: pathlib.Path,
) -> None:
    id = submit(folder, "calculator", "What is 19 + 23?")
    # The watcher runs first: the job is queued, and nothing has happened yet.
    watcher = start(folder, "jobs", "watch", "--store", STORE, id, "--poll", "0.05")
    worker = None
    try:
        await opened(watcher, "jobs.db")  # past its imports and following the job
        worker = start_worker(folder)
        out, err = await ended(watcher)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
        if worker is not None:
            stop(worker)
    assert watcher.returncode == 0, err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [str(n) for n in range(1, len(lines) + 1)]
    assert lines[0].split() == ["1", "started", "agent", "calculator"]
    assert lines[1].split() == ["2", "turn", "provider", "call", "1"]
    assert lines[2].split() == [
        "3",
        "tool_call",
        "add",
        '{"a":',
        "19,",
        '"b":',
        "23}",
        "(call",
        "c1)",
    ]
    assert "tool_result        add -> 42 (call c1)" in out
    # A delta is a JSON string: its newline shows as \n, and each event stays one line.
    assert '  7 content            "It "' in out
    assert '"\\nSu"' in out
    assert lines[-1].split()[1:4] == ["finished", "stop", "complete,"]
    assert lines[-1].endswith('2 turn(s): "It is 42.\\nSure."')
    # --json: one event_to_json object per line; --after N: exactly what follows N.
    as_json = watch(folder, id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    events = [event_from_json(json.loads(line)) for line in as_json.stdout.splitlines()]
    assert [e.seq for e in events] == list(range(1, len(lines) + 1))
    assert {e.run_id for e in events} == {id}
    assert events[-1].kind == "finished"
    assert events[-1].data["result"].content == "It is 42.\nSure."
    after = watch(folder, id, "--json", "--after", "5")
    assert after.returncode == 0, after.stderr
    # (An event's time is when it was read from the journal: a display's, not the seq's.)
    assert untimed(after.stdout) == untimed(as_json.stdout)[5:]
    # After its terminal event there is nothing more: nothing printed, the job's status.
    past = watch(folder, id, "--after", str(len(lines)))
    assert (past.returncode, past.stdout) == (0, "")


def test_a_job_awaiting_input_exits_4_and_is_watched_again_after_the_answer(
    folder: pathlib.Path,
) -> None:
    id = submit(folder, "support", "Refund order 9.")
    worker = start_worker(folder)
    try:
        asked = watch(folder, id)
        assert asked.returncode == 4, asked.stderr
        lines = asked.stdout.splitlines()
        assert lines[-2].split() == [
            "5",
            "approval_requested",
            "refund",
            "(call",
            "r1):",
            "needs",
            "a",
            "human",
        ]
        assert lines[-1].split() == [
            "6",
            "awaiting_input",
            "waits",
            "for",
            "approval",
            "of",
            "refund",
            "(call",
            "r1)",
        ]
        assert asked.stderr == (
            f"trio-agents jobs: job {id} waits for input: answer it (trio-agents jobs answer), "
            "then watch the rest with --after 6\n"
        )
        # Watched again before the answer: from 0 it stops at the same place.
        assert watch(folder, id).stdout == asked.stdout
        answered = cli(
            folder, "jobs", "answer", "--store", STORE, id, "r1", "--allow", "--reason", "fine"
        )
        assert answered.returncode == 0, answered.stderr
        rest = watch(folder, id, "--after", "6")
    finally:
        stop(worker)
    assert rest.returncode == 0, rest.stderr
    kinds = [line.split()[:2] for line in rest.stdout.splitlines()]
    assert kinds[:4] == [
        ["7", "rewind"],
        ["8", "takeover"],
        ["9", "approval_answered"],
        ["10", "tool_result"],
    ]
    assert "approval_answered  call r1 allowed: fine" in rest.stdout
    assert kinds[-1][1] == "finished"


def test_exit_statuses_by_how_the_job_ended(folder: pathlib.Path) -> None:
    cancelled = submit(folder, "calculator", "never mind")
    assert cli(folder, "jobs", "cancel", "--store", STORE, cancelled).returncode == 0
    partial = submit(folder, "cut", "a story")
    abandoned = submit(folder, "no-such-agent", "hello")
    worker = start_worker(folder)
    try:
        watched = {id: watch(folder, id) for id in (cancelled, partial, abandoned)}
    finally:
        stop(worker)
    # Cancelled while queued: its end comes from its record.
    assert watched[cancelled].returncode == 3, watched[cancelled].stderr
    assert watched[cancelled].stdout.split() == ["1", "cancelled", "before", "it", "began"]
    # Cut short by the provider: finished, partial -- not completed (as jobs wait says).
    assert watched[partial].returncode == 1, watched[partial].stderr
    assert "finished           stop max_tokens" in watched[partial].stdout
    assert watched[abandoned].returncode == 1, watched[abandoned].stderr
    assert watched[abandoned].stdout.splitlines()[-1].split()[1] == "failed"
    # Mistakes: an unknown job is one line and status 1; a bad option, argparse's 2.
    unknown = watch(folder, "no-such-job")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == "trio-agents jobs: no job 'no-such-job' (never admitted, or purged)\n"
    assert watch(folder, cancelled, "--after", "-1").returncode == 2
    missing = cli(folder, "jobs", "watch", "--store", "sqlite:///nothing.db", cancelled)
    assert missing.returncode == 1
    assert "check --store" in missing.stderr
