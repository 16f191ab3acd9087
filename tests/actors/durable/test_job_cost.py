"""What a durable job cost (issue 27, section 4): a priced agent's job stores its cost with its
usage -- in the record, in the result, through the journal of a continued run -- ``jobs show``
says it, and a record written before cost existed still reads.

Jobs run on :class:`~actors.testing.ScriptedProvider` agents over a
:class:`~actors.durable.MemoryRunStore`, in trio time (see ``test_job_queue``).
"""

from __future__ import annotations

import io
import json
from decimal import Decimal
from typing import Any

import trio
from test_job_queue import lookup, worker

from actors import Cost, Prices, PriceTable
from actors.cli._jobs import _show
from actors.durable import AgentRegistry, MemoryRunStore
from actors.testing import Reply, ScriptedProvider
from protocols.codec import from_json, to_json
from protocols.jobs import AgentJob, JobRecord
from protocols.messages import ToolCall, Usage

BOUND = 600  # trio seconds; a job should end long before

PRICES = PriceTable({"m": Prices(input="2", output="8")})


def _without_cost(data: Any) -> Any:
    """``data`` as a record written before cost existed: no ``cost`` anywhere."""
    if isinstance(data, dict):
        return {key: _without_cost(value) for key, value in data.items() if key != "cost"}
    if isinstance(data, list):
        return [_without_cost(item) for item in data]
    return data


async def priced_job() -> JobRecord:
    call = ToolCall("c1", "lookup", {"name": "x"})
    registry = AgentRegistry()
    registry.add(
        "priced",
        ScriptedProvider(
            Reply(calls=[call], usage=Usage(100_000, 50_000), model="m"),
            Reply("found x", usage=Usage(200_000, 10_000), model="m"),
        ),
        tools=[lookup],
        pricing=PRICES,
    )
    store = MemoryRunStore()
    with trio.fail_after(BOUND):
        async with worker(store, registry) as queue:
            id = await queue.enqueue(AgentJob.ask("priced", "look x up"))
            await queue.result(id)
    record = await store.get(id)
    assert record is not None
    return record


async def test_a_priced_jobs_record_and_result_carry_its_cost(autojump_clock: Any) -> None:
    record = await priced_job()
    # 300k prompt tokens at $2 and 60k completion tokens at $8 per million.
    cost = Cost(Decimal("1.08"), "USD", "computed")
    assert record.result is not None
    assert record.result.usage == Usage(300_000, 60_000, cost=cost)
    assert record.result.total_usage == record.result.usage
    assert record.usage == Usage(300_000, 60_000, cost=cost)


async def test_jobs_show_says_what_the_job_cost(autojump_clock: Any) -> None:
    record = await priced_job()
    out = io.StringIO()
    _show(record, False, out, now=0.0)
    assert "\n  cost 1.08 USD (computed)\n" in out.getvalue()
    shown = io.StringIO()
    _show(record, True, shown, now=0.0)
    usage = json.loads(shown.getvalue())["result"]["usage"]
    assert usage["cost"] == {"amount": "1.08", "currency": "USD", "provenance": "computed"}


async def test_a_record_written_before_cost_existed_still_reads(autojump_clock: Any) -> None:
    record = await priced_job()
    old = _without_cost(to_json(record))
    assert "cost" not in json.dumps(old)
    read = from_json(JobRecord, old)
    assert read.result is not None
    assert read.result.usage == Usage(300_000, 60_000)
    assert read.usage == Usage(300_000, 60_000)
    out = io.StringIO()
    _show(read, False, out, now=0.0)
    assert "cost" not in out.getvalue()  # not priced: no cost line, never a made-up zero
