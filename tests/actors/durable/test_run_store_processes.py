"""``SQLiteRunStore`` across real processes: an admission acknowledged by a process killed right
after survives it, whole; workers on one file never acquire one job twice; and a worker paused
(``SIGSTOP``) past its lease and then continued cannot write.

The workers are ``python -c`` children running :data:`WORKER` below; they pass explicit times,
so nothing here waits for a clock.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import pytest
import trio
from run_store_helpers import T0, ask

from actors.durable import SQLiteRunStore
from protocols import jobs as J
from protocols.messages import AgentResult

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the tests send POSIX signals")

# A worker process. argv: mode, database path, owner, T0 (the base of its explicit times), then
# the mode's arguments.
#
# drain LOG: print "ready", wait for a line on stdin, then acquire, journal and finish jobs until
#     none is left; write {"acquired": [...], "finished": [[id, outcome], ...]} to LOG (the
#     outcome: whether the finish was written, or the error code of the journal append).
# hold LEASE: acquire one job with a lease of LEASE seconds, journal one entry, print the lease;
#     wait for a line on stdin; then try to journal, journal with a checkpoint, and finish, and
#     print what each did.
# take NOW: acquire one job at time NOW, journal one entry, finish it; print what it did.
# admit: admit jobs with two children each, printing each id once admit returned, forever.
WORKER = """
import json, sys, trio
from actors.durable import SQLiteRunStore
from actors.store import StoreError
from protocols import jobs as J
from protocols.accounting import Usage
from protocols.messages import AgentResult

T0 = float(sys.argv[4])
mode, path, owner = sys.argv[1:4]
COMPLETED = J.JobStatus.COMPLETED


def say(**fields):
    print(json.dumps(fields), flush=True)


async def drain(store, log):
    say(ready=True)
    sys.stdin.readline()
    acquired, finished = [], []
    while (record := await store.acquire(owner=owner, lease=30, now=T0 + 1)) is not None:
        acquired.append(record.id)
        try:
            await store.append(record.id, record.lease, [J.RequestEntry(1)])
        except StoreError as exc:
            finished.append([record.id, exc.code])
            continue
        result = AgentResult(f"done by {owner}")
        done = J.finish(record, record.lease, now=T0 + 2, status=COMPLETED, result=result)
        finished.append([record.id, await store.write(done)])
    with open(log, "w", encoding="utf-8") as file:
        json.dump({"acquired": acquired, "finished": finished}, file)


async def attempt(name, write):
    try:
        outcome = await write
    except StoreError as exc:
        say(step=name, error=exc.code)
    else:
        say(step=name, outcome=outcome)


async def hold(store, lease):
    record = await store.acquire(owner=owner, lease=lease, now=T0 + 1)
    holder = record.lease
    await store.append(record.id, holder, [J.CheckpointEntry(1, f"{owner} before the pause")])
    say(id=record.id, fence=holder.fence, until=holder.until)
    sys.stdin.readline()
    late = J.CheckpointEntry(1, f"{owner} after the pause")
    await attempt("append", store.append(record.id, holder, [late]))
    spent = J.checkpoint(record, holder, now=T0 + 2, turns=1, usage=Usage(1, 1))
    await attempt("append_then", store.append(record.id, holder, [late], then=spent))
    result = AgentResult(f"done by {owner}")
    done = J.finish(record, holder, now=T0 + 2, status=COMPLETED, result=result)
    await attempt("finish", store.write(done))


async def take(store, now):
    record = await store.acquire(owner=owner, lease=30, now=now)
    say(id=record.id, fence=record.fence, takeovers=record.takeovers)
    await store.append(record.id, record.lease, [J.CheckpointEntry(1, f"{owner} took over")])
    result = AgentResult(f"done by {owner}")
    done = J.finish(record, record.lease, now=now + 1, status=COMPLETED, result=result)
    say(step="finish", outcome=await store.write(done))


async def admit(store):
    n = 0
    while True:
        n += 1
        tree = J.AgentJob.ask("echo", f"parent {n}", children=[
            J.AgentJob.ask("echo", f"child {n}.1"), J.AgentJob.ask("echo", f"child {n}.2")
        ])
        admitted = await store.admit(tree, now=T0, key=f"{owner}-{n}")
        say(id=admitted.record.id, key=f"{owner}-{n}")


async def main():
    store = await SQLiteRunStore.open(path, busy_timeout=30)
    try:
        if mode == "admit":
            await admit(store)
        elif mode == "drain":
            await drain(store, sys.argv[5])
        elif mode == "hold":
            await hold(store, float(sys.argv[5]))
        else:
            await take(store, float(sys.argv[5]))
    finally:
        await store.aclose()


trio.run(main)
"""


class Worker:
    """A worker process: its stdin, its stdout read line by line, its stderr in a file."""

    def __init__(self, process: trio.Process, errors: pathlib.Path) -> None:
        self.process = process
        self.errors = errors
        self._buffer = b""

    @classmethod
    async def start(cls, tmp_path: pathlib.Path, *args: str) -> Worker:
        errors = tmp_path / f"stderr-{args[0]}-{args[2]}.txt"
        with errors.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-c", WORKER, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        return cls(process, errors)

    def failure(self, what: str) -> str:
        return f"{what}; the worker's stderr:\n{self.errors.read_text(errors='replace')}"

    async def line(self) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in self._buffer:
            chunk = await stdout.receive_some()
            if not chunk:
                await self.process.wait()
                pytest.fail(self.failure(f"the worker exited ({self.process.returncode})"))
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    async def send(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(text.encode())

    async def finish(self) -> None:
        code = await self.process.wait()
        assert code == 0, self.failure(f"the worker exited with {code}")

    async def aclose(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                await stream.aclose()


async def test_workers_in_several_processes_acquire_each_job_exactly_once(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "runs.db"
    async with await SQLiteRunStore.open(path) as store:
        expected = {(await store.admit(ask(f"job {n}"), now=T0)).record.id for n in range(200)}
    owners = [f"p{n}" for n in range(4)]
    workers = []
    try:
        with trio.fail_after(120):
            for owner in owners:
                log = tmp_path / f"{owner}.json"
                workers.append(
                    await Worker.start(tmp_path, "drain", str(path), owner, str(T0), str(log))
                )
            # All ready, then all released at once: they race for the same jobs.
            for worker in workers:
                assert await worker.line() == {"ready": True}
            for worker in workers:
                await worker.send("go\n")
            for worker in workers:
                await worker.finish()
    finally:
        for worker in workers:
            await worker.aclose()

    logs = {
        owner: json.loads((tmp_path / f"{owner}.json").read_text(encoding="utf-8"))
        for owner in owners
    }
    acquired_by: dict[str, str] = {}
    for owner, log in logs.items():
        for id in log["acquired"]:
            assert id not in acquired_by, f"{id} acquired by {acquired_by[id]} and {owner}"
            acquired_by[id] = owner
    for owner, log in logs.items():
        assert [id for id, _ in log["finished"]] == log["acquired"]
        refused = [(id, outcome) for id, outcome in log["finished"] if outcome is not True]
        assert not refused, f"{owner} could not finish what it acquired: {refused}"
    assert set(acquired_by) == expected

    async with await SQLiteRunStore.open(path) as store:
        records = await store.list(limit=1000)
        assert {r.id for r in records} == expected
        for record in records:
            assert record.status is J.JobStatus.COMPLETED
            assert (record.fence, record.attempts, record.takeovers) == (1, 1, 0)
            assert record.result == AgentResult(f"done by {acquired_by[record.id]}")
            assert await store.journal(record.id) == [J.RequestEntry(1)]


async def _stopped(pid: int) -> None:
    """Wait until the child ``pid`` is stopped (its stop reported, not reaped)."""

    def wait() -> None:
        _, status = os.waitpid(pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), status

    with trio.fail_after(30):
        await trio.to_thread.run_sync(wait, abandon_on_cancel=True)


async def test_a_worker_paused_past_its_lease_cannot_write_when_continued(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "runs.db"
    async with await SQLiteRunStore.open(path) as store:
        job = (await store.admit(ask("contested"), now=T0)).record
    lease = 0.5
    paused = await Worker.start(tmp_path, "hold", str(path), "A", str(T0), str(lease))
    try:
        with trio.fail_after(60):
            held = await paused.line()
            assert held == {"id": job.id, "fence": 1, "until": T0 + 1 + lease}
            paused.process.send_signal(signal.SIGSTOP)
            await _stopped(paused.process.pid)
            # While A is frozen, B comes past A's lease (an explicit time: nobody waits) and
            # takes the job over.
            taker = await Worker.start(
                tmp_path, "take", str(path), "B", str(T0), str(held["until"])
            )
            try:
                assert await taker.line() == {"id": job.id, "fence": 2, "takeovers": 1}
                assert await taker.line() == {"step": "finish", "outcome": True}
                await taker.finish()
            finally:
                await taker.aclose()
            # A is continued and tries to carry on: every write is refused.
            await paused.send("carry on\n")
            paused.process.send_signal(signal.SIGCONT)
            assert await paused.line() == {"step": "append", "error": "fenced"}
            assert await paused.line() == {"step": "append_then", "error": "fenced"}
            assert await paused.line() == {"step": "finish", "outcome": False}
            await paused.finish()
    finally:
        await paused.aclose()

    async with await SQLiteRunStore.open(path) as store:
        record = await store.get(job.id)
        assert record is not None
        assert record.status is J.JobStatus.COMPLETED
        assert record.result == AgentResult("done by B")
        assert (record.fence, record.takeovers, record.attempts) == (2, 1, 1)
        assert record.turns == 0  # A's checkpoint never landed
        assert await store.journal(job.id) == [
            J.CheckpointEntry(1, "A before the pause"),
            J.CheckpointEntry(1, "B took over"),
        ]


async def test_an_acknowledged_admission_survives_the_process_killed_after_it(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "runs.db"
    admitter = await Worker.start(tmp_path, "admit", str(path), "A", str(T0))
    try:
        with trio.fail_after(60):
            acknowledged = [await admitter.line() for _ in range(40)]
        # Killed wherever it has got to (often inside a later admission).
        admitter.process.send_signal(signal.SIGKILL)
        assert await admitter.process.wait() == -signal.SIGKILL
    finally:
        await admitter.aclose()

    async with await SQLiteRunStore.open(path) as store:
        records = await store.list(limit=1000)
        by_id = {r.id: r for r in records}
        for seen in acknowledged:
            record = by_id.get(seen["id"])
            assert record is not None, f"the acknowledged job {seen} was lost"
            assert await store.find(seen["key"]) == record
        # Nothing is half admitted: every parent has both children, every child its parent.
        parents = [r for r in records if r.parent is None]
        assert len(parents) >= len(acknowledged)
        for parent in parents:
            assert len(parent.children) == 2
            assert all(child in by_id for child in parent.children)
        assert len(records) == 3 * len(parents)
        assert all(r.parent in by_id for r in records if r.parent is not None)
