"""A process stopped (``SIGSTOP``, a debugger, a frozen VM) in the middle of one of its
PostgreSQL store's transactions holds that transaction's row locks for as long as it stays
stopped. ``stall_timeout`` has the database end such a transaction: another worker takes the
stopped process's job over, and the process, once continued, finds its write failed (its
connection was ended) and the job no longer its own -- instead of the job staying locked until
the process goes on."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
import trio
from postgres_server import drop_schemas, new_schema, postgres_url
from run_store_helpers import T0, ask, holder

from actors.durable import PostgresRunStore
from protocols import jobs as J
from protocols.errors import ValidationError

# The stopped process: it takes the job, then a second store of its own (which has never read
# the job, so its write reads the row FOR UPDATE first: two statements in one transaction)
# renews the job's lease -- and the process stops itself right after the first statement,
# inside that transaction, its row lock held. Continued, it reports what the write did, and
# what the same write does when asked again.
CHILD = r"""
import json, os, signal, sys
import psycopg, trio
from actors.durable import PostgresRunStore
from actors.durable import _postgres_store
from actors.store import StoreError
from protocols import jobs as J

url, schema = sys.argv[1:3]
stall, lease, now = (float(argument) for argument in sys.argv[3:6])
armed = False
execute = _postgres_store._Connection.execute
INTRANS = psycopg.pq.TransactionStatus.INTRANS


def execute_then_stop(self, query, params=None):
    global armed
    cursor = execute(self, query, params)
    # (Once the row is locked: the read FOR UPDATE, inside the transaction.)
    if armed and "FOR UPDATE" in query and self._conn.info.transaction_status == INTRANS:
        armed = False
        os.kill(os.getpid(), signal.SIGSTOP)
    return cursor


_postgres_store._Connection.execute = execute_then_stop


def say(**fields):
    print(json.dumps(fields), flush=True)


async def main():
    global armed
    taker = await PostgresRunStore.open(url, schema=schema, stall_timeout=stall)
    writer = await PostgresRunStore.open(url, schema=schema, stall_timeout=stall)
    record = await taker.acquire(owner="stopped", lease=lease, now=now)
    say(took=record.id, fence=record.fence)
    renewed = J.renew(record, record.lease, now=now + 0.1, lease=lease)
    armed = True
    try:
        say(wrote=await writer.write(renewed))
    except StoreError as error:
        say(code=error.code, retryable=error.retryable, message=error.message)
    say(again=await writer.write(renewed))
    await writer.aclose()
    await taker.aclose()


trio.run(main)
"""


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as file:
        return file.read().rpartition(")")[2].split()[0]


async def test_a_job_locked_by_a_stopped_process_is_taken_over_once_its_transaction_stalls() -> (
    None
):
    schema = new_schema()
    lease = 1.0
    stall = 0.5
    store = await PostgresRunStore.open(postgres_url(), schema=schema)
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", CHILD, postgres_url(), schema, str(stall), str(lease), str(T0)],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    said = bytearray()

    async def line() -> Any:
        assert process.stdout is not None
        while b"\n" not in said:
            chunk = await process.stdout.receive_some()
            assert chunk, f"the process ended, having said {bytes(said)!r}"
            said.extend(chunk)
        text, _, rest = bytes(said).partition(b"\n")
        said[:] = rest
        return json.loads(text)

    try:
        admitted = await store.admit(ask(), now=T0)
        with trio.fail_after(20):
            assert await line() == {"took": admitted.record.id, "fence": 1}
            while process_state(process.pid) != "T":  # noqa: ASYNC110 - nothing to wait on
                await trio.sleep(0.01)
            # Stopped inside its transaction, the job's row locked. Its lease long expired
            # (now: T0 + 100), the job is taken over -- once the database ended the stalled
            # transaction (without it, never while the process stays stopped).
            while (taken := await store.acquire(owner="taker", lease=lease, now=T0 + 100)) is None:  # noqa: ASYNC110
                await trio.sleep(0.05)
            assert (taken.id, taken.fence, holder(taken).owner) == (admitted.record.id, 2, "taker")
            os.kill(process.pid, signal.SIGCONT)
            # Its write failed as a lost connection does (retryable); asked again, on a new
            # connection, it is refused: the job moved on.
            failed = await line()
            assert (failed["code"], failed["retryable"]) == ("io", True), failed
            assert await line() == {"again": False}
            assert await process.wait() == 0
        stored = await store.get(admitted.record.id)
        assert stored is not None
        assert (stored.status, stored.fence, stored.lease) == (
            J.JobStatus.RUNNING,
            2,
            taken.lease,
        )
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.stdout.aclose()
        await store.aclose()
        await trio.to_thread.run_sync(drop_schemas, schema)


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, True, "5", None])
async def test_stall_timeout_must_be_seconds_above_zero(bad: object) -> None:
    with pytest.raises(ValidationError, match="stall_timeout must be a number of seconds > 0"):
        await PostgresRunStore.open(postgres_url(), stall_timeout=bad)  # type: ignore[arg-type]
