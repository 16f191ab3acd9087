"""``trio-agents jobs answer JOB CALL --answer VALUE``: a durable job's question (the
``ask_user`` tool) answered from another process -- refused answers write nothing and say why --
while a worker process waits; a new worker continues the job. Real processes on one SQLite file,
on the real clock; every wait is bounded."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import trio
from jobs_app import app, cli, start_worker, stop

from actors.durable import SQLiteRunStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ASKER = (
    "from actors import ask_user; "
    'agents.add("asker", ScriptedProvider(Reply(calls=[ToolCall("q1", "ask_user", '
    '{"question": "Which toppings?", "kind": "choices", "options": ["ham", "egg", "kale"]})]), '
    'Reply("Noted your toppings.")), tools=[ask_user])'
)


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "app.py").write_text(app(ASKER), encoding="utf-8")
    return tmp_path


async def _until_waiting(folder: pathlib.Path, job: str) -> None:
    async with await SQLiteRunStore.open(folder / "jobs.db") as store:
        with trio.fail_after(30):
            while True:
                record = await store.get(job)
                if record is not None and record.status.value == "awaiting_input":
                    return
                await trio.sleep(0.05)


async def test_a_question_is_answered_with_jobs_answer_and_a_new_worker_goes_on(
    folder: pathlib.Path,
) -> None:
    store = ("--store", "sqlite:///jobs.db")
    job = cli(folder, "jobs", "submit", *store, "--agent", "asker", "Pizza.").stdout.strip()
    worker = start_worker(folder)
    try:
        await _until_waiting(folder, job)
    finally:
        stop(worker)  # the worker that asked is gone
    shown = json.loads(cli(folder, "jobs", "show", *store, job, "--json").stdout)
    assert shown["status"] == "awaiting_input"
    assert shown["waiting_for"] == [
        {
            "call_id": "q1",
            "tool": "ask_user",
            "reason": "Which toppings?",
            "question": {
                "prompt": "Which toppings?",
                "kind": "choices",
                "options": ["ham", "egg", "kale"],
            },
        }
    ]
    text = cli(folder, "jobs", "show", *store, job).stdout
    assert "waits for an answer (call q1): Which toppings? -- one or more of 'ham'" in text
    # Refused: not an option, an approval's verdict, a number given twice -- nothing written.
    refused = cli(folder, "jobs", "answer", *store, job, "q1", "--answer", "ham,tuna")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "answer refused: 'tuna' is not an option" in refused.stderr
    assert "one or more of 'ham', 'egg', 'kale'" in refused.stderr
    assert cli(folder, "jobs", "answer", *store, job, "q1", "--allow").returncode == 1
    assert json.loads(cli(folder, "jobs", "show", *store, job, "--json").stdout) == shown
    answered = cli(
        folder, "jobs", "answer", *store, job, "q1", "--answer", "kale", "--answer", "ham"
    )
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == f"{job}: queued\n"
    worker = start_worker(folder)
    try:
        waited = cli(folder, "jobs", "wait", *store, job, "--timeout", "30", "--json")
    finally:
        stop(worker)
    assert waited.returncode == 0, waited.stderr
    ended = json.loads(waited.stdout)
    assert ended["status"] == "completed"
    assert ended["result"]["content"] == "Noted your toppings."
    # The model read the answer, in the options' order, as the call's result.
    async with await SQLiteRunStore.open(folder / "jobs.db") as opened:
        entries = await opened.journal(job)
    kinds = [e.kind for e in entries]
    # Asked, then waited; the answer journaled with the continued attempt, before the result.
    assert kinds[:8] == [
        "input",
        "request",
        "response",
        "ask",
        "attempt",
        "answer",
        "intent",
        "result",
    ]
    assert entries[7].result.value == ["ham", "kale"]  # type: ignore[union-attr]
    # (The new worker's scripted provider starts its script again -- it asks once more, under
    # the same call id, and that call reads the recorded answer too.)
