"""A PostgreSQL server restarting under a worker in the middle of a job (issue 15).

The shared test server cannot be restarted under the other tests, so this test starts a private
one of its own (from the ``pgserver`` test extra's binaries, in the test's directory), stops it
with ``pg_ctl stop -m immediate`` -- as a crash or a power cut would, with no goodbye to the
clients -- while the job's tool call is in flight, and starts it again on the same data.
"""

from __future__ import annotations

import logging
import pathlib
import warnings
from typing import Any

import pytest
import trio

from actors import RunContext, open_runtime, tool
from actors.durable import AgentRegistry, PostgresRunStore, open_job_queue
from actors.store import StoreError
from actors.testing import Reply, ScriptedProvider
from protocols import jobs as J
from protocols.messages import Role, ToolCall

pytestmark = pytest.mark.trio


def start_server(directory: pathlib.Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
        import pgserver

        return pgserver.get_server(directory, cleanup_mode="delete")


def stop_server(server: Any) -> None:
    """Stop it at once, as a crash would: every client connection is cut with no goodbye."""
    import pgserver

    pgserver.pg_ctl(
        ["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user
    )


def start_again(server: Any) -> None:
    """Start it again on the same data (and the same socket: the same URL)."""
    with server._lock:
        server.ensure_postgres_running()


async def test_a_worker_rides_out_a_server_restart_in_the_middle_of_a_job(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="actors")
    server = await trio.to_thread.run_sync(start_server, tmp_path / "pgdata")
    url = str(server.get_uri())
    in_call = trio.Event()
    restarted = trio.Event()
    effects: list[str] = []

    @tool
    async def transfer(amount: int, ctx: RunContext) -> str:
        """Move ``amount``: the server restarts while this runs."""
        effects.append(ctx.idempotency_key or "")
        in_call.set()
        await restarted.wait()
        return f"moved {amount}"

    provider = ScriptedProvider(
        Reply(calls=(ToolCall("t1", "transfer", {"amount": 5}),)),
        "transferred 5",
        "second job done",
    )
    registry = AgentRegistry()
    registry.add("bank", provider, tools=[transfer])
    try:
        async with (
            await PostgresRunStore.open(url, schema="jobs") as store,
            open_runtime() as runtime,
            # A lease the restart fits in (the worker keeps its job), a poll of a minute (only
            # a notification, through a listener that reconnected, makes it take the second
            # job in time).
            open_job_queue(store, registry, runtime, lease=30, poll=60) as queue,
        ):
            first = await queue.enqueue(J.AgentJob.ask("bank", "move 5"))
            with trio.fail_after(30):
                await in_call.wait()
            await trio.to_thread.run_sync(stop_server, server)
            # Down: a call fails, retryably, with no password or stack in its message.
            with pytest.raises(StoreError) as down:
                await store.get(first)
            assert down.value.retryable
            await trio.to_thread.run_sync(start_again, server)
            assert str(server.get_uri()) == url
            restarted.set()
            with trio.fail_after(30):
                result = await queue.result(first)
                assert result.messages[-1].content == "transferred 5"
                # New work submitted elsewhere after the restart is heard of (through the
                # worker's listener, reconnected), not polled for.
                # (Its listener is a thread of the store's: nothing to wait on but a look.)
                for _ in range(600):
                    if store.statistics()["listener_reconnects"] >= 1:
                        break
                    await trio.sleep(0.05)
                async with await PostgresRunStore.open(url, schema="jobs") as client:
                    second = (await client.admit(J.AgentJob.ask("bank", "and then"))).record.id
                assert (await queue.result(second)).messages[-1].content == "second job done"
            statistics = queue.statistics()
            record = await store.get(first)
            journal = await store.journal(first)
    finally:
        await trio.to_thread.run_sync(server.cleanup)

    # The job ran on, in place: by the one worker, its call's effect once, its journal whole
    # (the call's result, written while the server was down, was written once it was back).
    assert len(effects) == 1, effects
    assert record is not None
    assert (record.status, record.fence, record.takeovers) == (J.JobStatus.COMPLETED, 1, 0)
    made = J.replay(first, journal)
    assert [m.role for m in made.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert made.messages[2].content == "moved 5"
    # The failure is visible: in statistics() and in the log.
    assert statistics["listener_reconnects"] >= 1
    assert statistics["completed"] == 2
    said = [r.getMessage() for r in caplog.records]
    assert any("listener reconnected" in line for line in said), said
    assert all("password" not in line for line in said)
