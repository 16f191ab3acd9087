"""``trio-agents worker`` and ``trio-agents jobs ...`` as a user runs them: real processes on
one SQLite file, an app module imported from the current directory.

They run on the real clock (subprocesses do not follow trio's mock clock); every wait is
bounded.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import psycopg
import pytest
import trio
from jobs_app import CUT, app, cli, ended, opened, start_worker, stop
from postgres_server import drop_schemas, new_schema, postgres_url

from actors.durable import SQLiteRunStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

APP = app(CUT)


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path


def test_submit_twice_with_a_key_then_a_worker_runs_it_and_wait_shows_it(
    folder: pathlib.Path,
) -> None:
    first = cli(
        folder,
        "jobs",
        "submit",
        "--store",
        "sqlite:///jobs.db",
        "--agent",
        "calculator",
        "--key",
        "q-1",
        "--json",
        "What is 19 + 23?",
    )
    assert first.returncode == 0, first.stderr
    submitted = json.loads(first.stdout)
    assert submitted["created"] is True
    again = cli(
        folder,
        "jobs",
        "submit",
        "--store",
        "sqlite:///jobs.db",
        "--agent",
        "calculator",
        "--key",
        "q-1",
        "What is 19 + 23?",
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[0] == submitted["id"]
    assert "existing job" in again.stdout
    assert oct((folder / "jobs.db").stat().st_mode & 0o777) == oct(0o600)
    worker = start_worker(folder)
    try:
        waited = cli(
            folder,
            "jobs",
            "wait",
            "--store",
            "sqlite:///jobs.db",
            submitted["id"],
            "--timeout",
            "30",
            "--json",
        )
    finally:
        out, _ = stop(worker)
    assert waited.returncode == 0, waited.stderr
    shown = json.loads(waited.stdout)
    assert shown["status"] == "completed"
    assert shown["result"]["content"] == "It is 42."
    assert shown["attempts"] == 1
    assert "taking no more jobs" in out
    assert "completed 1" in out
    listed = cli(folder, "jobs", "list", "--store", "sqlite:///jobs.db", "--json")
    assert [job["id"] for job in json.loads(listed.stdout)] == [submitted["id"]]


async def test_an_approval_is_answered_from_another_process_and_the_job_goes_on(
    folder: pathlib.Path,
) -> None:
    submitted = cli(
        folder,
        "jobs",
        "submit",
        "--store",
        "sqlite:///jobs.db",
        "--agent",
        "support",
        "Refund order 9.",
    )
    job = submitted.stdout.strip()
    worker = start_worker(folder)
    try:
        # The worker is another process, on the real clock: watch the store until it waits.
        async with await SQLiteRunStore.open(folder / "jobs.db") as store:
            with trio.fail_after(30):
                while True:
                    record = await store.get(job)
                    if record is not None and record.status.value == "awaiting_input":
                        break
                    await trio.sleep(0.05)
        shown = json.loads(
            cli(folder, "jobs", "show", "--store", "sqlite:///jobs.db", job, "--json").stdout
        )
        assert shown["waiting_for"] == [
            {"call_id": "r1", "tool": "refund", "reason": "needs a human"}
        ]
        answered = cli(
            folder,
            "jobs",
            "answer",
            "--store",
            "sqlite:///jobs.db",
            job,
            "r1",
            "--allow",
            "--reason",
            "ok",
        )
        assert answered.returncode == 0, answered.stderr
        waited = cli(folder, "jobs", "wait", "--store", "sqlite:///jobs.db", job, "--timeout", "30")
    finally:
        stop(worker)
    assert waited.returncode == 0, waited.stderr
    assert "completed" in waited.stdout
    assert "Done." in waited.stdout
    # The job has ended: answering it again, or cancelling it, does nothing -- and says so.
    again = cli(folder, "jobs", "answer", "--store", "sqlite:///jobs.db", job, "r1", "--allow")
    assert again.returncode == 1
    assert again.stdout == ""
    assert again.stderr == (
        f"trio-agents jobs: job {job} has already ended (completed): nothing to answer\n"
    )
    cancelled = cli(folder, "jobs", "cancel", "--store", "sqlite:///jobs.db", job)
    assert cancelled.returncode == 1
    assert cancelled.stderr == (
        f"trio-agents jobs: job {job} has already ended (completed): nothing to cancel\n"
    )


def test_a_job_whose_reply_was_cut_short_ends_partial_and_show_says_why(
    folder: pathlib.Path,
) -> None:
    submitted = cli(
        folder, "jobs", "submit", "--store", "sqlite:///jobs.db", "--agent", "cut", "A story."
    )
    job = submitted.stdout.strip()
    worker = start_worker(folder)
    try:
        waited = cli(
            folder, "jobs", "wait", "--store", "sqlite:///jobs.db", job, "--timeout", "30", "--json"
        )
    finally:
        stop(worker)
    assert waited.returncode == 1, waited.stderr  # it did not complete
    shown = json.loads(waited.stdout)
    assert shown["status"] == "partial"
    assert shown["result"] == {
        "content": "Once upon a",
        "stop": "max_tokens",
        "partial": True,
        "finish": "length",
        "usage": None,  # the provider reported none: unknown, not 0
        "estimated": False,
    }
    text = cli(folder, "jobs", "show", "--store", "sqlite:///jobs.db", job).stdout
    assert "  stop max_tokens; finish length; usage unknown\n" in text


def test_cancel_and_purge_and_the_purged_key(folder: pathlib.Path) -> None:
    submitted = cli(
        folder,
        "jobs",
        "submit",
        "--store",
        "sqlite:///jobs.db",
        "--agent",
        "calculator",
        "--key",
        "k",
        "hi",
    )
    job = submitted.stdout.strip()
    cancelled = cli(folder, "jobs", "cancel", "--store", "sqlite:///jobs.db", job)
    assert cancelled.stdout.strip() == f"{job}: cancelled"
    again = cli(folder, "jobs", "cancel", "--store", "sqlite:///jobs.db", job)
    assert (again.returncode, again.stdout) == (0, f"{job}: already cancelled\n")
    waited = cli(folder, "jobs", "wait", "--store", "sqlite:///jobs.db", job, "--timeout", "5")
    assert waited.returncode == 1
    assert "cancelled" in waited.stdout
    # --timeout 0 asks whether it has ended: it has, so it is shown, not timed out.
    now = cli(folder, "jobs", "wait", "--store", "sqlite:///jobs.db", job, "--timeout", "0")
    assert (now.returncode, now.stderr) == (1, "")
    assert f"{job}  cancelled" in now.stdout
    purged = cli(folder, "jobs", "purge", "--store", "sqlite:///jobs.db", job)
    assert purged.stdout.strip() == f"{job}: purged"
    shown = cli(folder, "jobs", "show", "--store", "sqlite:///jobs.db", job)
    assert shown.returncode == 1
    assert f"job {job} was purged" in shown.stderr
    reused = cli(
        folder,
        "jobs",
        "submit",
        "--store",
        "sqlite:///jobs.db",
        "--agent",
        "calculator",
        "--key",
        "k",
        "hi",
    )
    assert reused.returncode == 1
    assert "was purged; use a new key" in reused.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("jobs", "list", "--store", "mysql://db/test"), "unsupported store URL 'mysql'"),
        (
            (
                "jobs",
                "list",
                "--store",
                "postgresql://ada:s3cret-pw@127.0.0.1:1/x?connect_timeout=2",
            ),
            "ada:***@127.0.0.1:1",
        ),
        (("jobs", "list", "--store", "sqlite://jobs.db"), "is sqlite:///PATH"),
        (("jobs", "show", "--store", "sqlite:///jobs.db", "nope"), "no store at jobs.db"),
        (("worker", "--store", "sqlite:///jobs.db", "--app", "missing:x"), "cannot import"),
        (("worker", "--store", "sqlite:///jobs.db", "--app", "app"), "takes MODULE:ATTR"),
        (("worker", "--store", "sqlite:///jobs.db", "--app", "app:nothing"), "has no 'nothing'"),
        (("worker", "--store", "sqlite:///jobs.db", "--app", "app:add"), "AgentRegistry"),
    ],
)
def test_mistakes_are_one_line_with_exit_status_1(
    folder: pathlib.Path, args: tuple[str, ...], expected: str
) -> None:
    result = cli(folder, *args, timeout=30)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
    assert "s3cret-pw" not in result.stderr


def test_the_same_commands_on_postgresql(folder: pathlib.Path) -> None:
    schema = new_schema()
    url = postgres_url()
    store = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    try:
        submitted = cli(
            folder, "jobs", "submit", "--store", store, "--agent", "calculator", "--json", "Sum?"
        )
        assert submitted.returncode == 0, submitted.stderr
        assert "warning: no worker has ever run on" in submitted.stderr
        id = json.loads(submitted.stdout)["id"]
        worker = start_worker(folder, store=store)
        try:
            waited = cli(folder, "jobs", "wait", "--store", store, id, "--timeout", "30", "--json")
        finally:
            out, _ = stop(worker)
        assert waited.returncode == 0, waited.stderr
        again = cli(folder, "jobs", "submit", "--store", store, "--agent", "calculator", "Sum?")
        assert (again.returncode, again.stderr) == (0, "")
        shown = json.loads(waited.stdout)
        assert (shown["status"], shown["result"]["content"]) == ("completed", "It is 42.")
        assert "completed 1" in out
        # The jobs are in the schema the URL named, not in public.
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".trio_agents_jobs').fetchone()
        assert row == (2,)
    finally:
        drop_schemas(schema)


def test_store_migrate_creates_then_finds_the_schema_up_to_date(folder: pathlib.Path) -> None:
    created = cli(folder, "store", "migrate", "--store", "sqlite:///jobs.db")
    assert created.returncode == 0, created.stderr
    assert created.stdout == "sqlite:///jobs.db: created at schema version 4\n"
    again = cli(folder, "store", "migrate", "--store", "sqlite:///jobs.db")
    assert again.stdout == "sqlite:///jobs.db: schema version 4, up to date\n"
    schema = new_schema()
    url = postgres_url()
    store = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    try:
        first = cli(folder, "store", "migrate", "--store", store)
        assert first.returncode == 0, first.stderr
        assert first.stdout.endswith(": created at schema version 6\n")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{schema}".trio_agents_meta SET value = %s WHERE key = %s',
                ("9", "schema_version"),
            )
        newer = cli(folder, "store", "migrate", "--store", store)
        assert newer.returncode == 1
        lines = newer.stderr.strip().splitlines()
        assert len(lines) == 1, newer.stderr
        assert "schema version 9, newer than this trio-agents supports (6)" in lines[0]
    finally:
        drop_schemas(schema)


def submit(folder: pathlib.Path, store: str = "sqlite:///jobs.db") -> tuple[str, str]:
    """Submit a job asking the calculator; its id and what was said on stderr."""
    done = cli(folder, "jobs", "submit", "--store", store, "--agent", "calculator", "Sum?")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


def test_submit_says_when_no_worker_has_ever_run_on_the_store(folder: pathlib.Path) -> None:
    # A new store (a mistyped --store would be one too): submitted, with a warning.
    first, said = submit(folder)
    assert said == (
        "trio-agents jobs: warning: no worker has ever run on sqlite:///jobs.db: the job "
        "waits until one does (trio-agents worker --store URL --app MODULE:ATTR)\n"
    )
    # Still none: still said.
    assert submit(folder)[1] == said
    worker = start_worker(folder)
    try:
        waited = cli(
            folder, "jobs", "wait", "--store", "sqlite:///jobs.db", first, "--timeout", "30"
        )
    finally:
        stop(worker)
    assert waited.returncode == 0, waited.stderr
    # A worker has run on it (and may again): nothing to say.
    assert submit(folder)[1] == ""
    # Another store beside it is another story.
    assert "no worker has ever run on sqlite:///other.db" in submit(folder, "sqlite:///other.db")[1]


def start_waiting(folder: pathlib.Path, job: str) -> subprocess.Popen[str]:
    """``trio-agents jobs wait JOB``, started with SIGINT handled (Python ignores SIGINT when
    started with it ignored, as a background job is: restore it)."""
    restore = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'trio-agents'; runpy.run_module('actors', run_name='__main__')"
    )
    return subprocess.Popen(
        [sys.executable, "-c", restore, "jobs", "wait", "--store", "sqlite:///jobs.db", job],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="watches /proc")
async def test_ctrl_c_while_waiting_is_one_line_and_status_130(folder: pathlib.Path) -> None:
    job, _ = submit(folder)
    waiting = start_waiting(folder, job)
    try:
        await opened(waiting, "jobs.db")  # past its imports and waiting
        waiting.send_signal(signal.SIGINT)
        out, err = await ended(waiting)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert (waiting.returncode, out, err) == (130, "", "trio-agents jobs: interrupted\n")
