"""Every benchmark script runs (in --quick mode) and ends with its JSON summary line.

Speed is never asserted here -- only that each benchmark works and reports what it promises.
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Every script but the shared harness (``_common.py``).
BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
PROMISED_RATIOS = {
    "actors.py": {"call_time_vs_raw"},
    "conversation.py": {"build_us_at_10k_over_at_1k", "save_time_vs_plain_file"},
    "doors.py": {
        "generate_thread_vs_trio",
        "stream_thread_vs_trio",
        "generate_thread_vs_guest",
        "stream_thread_vs_guest",
        "stall_guest_vs_thread",
    },
    "live.py": {
        "run_time_with_log_vs_without",
        "resume_p99_sqlite_over_target",
        "resume_p99_postgres_over_target",
        "fanout_1000_time_per_event_vs_one",
        "fanout_sse_time_per_event_vs_one",
    },
    "loop.py": {
        "run_time_vs_floor",
        "runs_per_s_vs_pydantic_ai",
        "bytes_per_idle_agent_over_target",
    },
    "provider_stream.py": {
        "deltas_per_s_vs_raw_httpx",
        "concurrent_time_vs_raw_httpx",
        "deltas_per_s_vs_openai_sdk",
        "gemini_deltas_per_s_vs_raw_httpx",
    },
    "relay.py": {
        "relay_throughput_vs_direct",
        "relay_p99_added_over_target",
        # Each served protocol's cost per event against the native SSE (issue 26: <= 1.2).
        "agui_per_event_vs_native",
        "ui_stream_per_event_vs_native",
        "openai_chat_per_event_vs_native",
        "a2a_per_event_vs_native",
        "route_agui_per_event_vs_native",
        "route_ui_stream_per_event_vs_native",
        "route_openai_chat_per_event_vs_native",
    },
    # (queue_jobs_per_s_vs_pgqueuer only where PgQueuer can run, as durable.py's DBOS ratio.)
    "scaleout.py": {"jobs_per_s_4_workers_vs_1", "pickup_p99_over_target"},
    "sse_decode.py": {"events_per_s_vs_httpx_sse", "mib8_over_mib4_time"},
    # jobs_per_s_vs_dbos (or jobs_per_s_vs_langgraph when DBOS cannot run) is reported only where
    # TRIO_AGENTS_DBOS_PYTHON (default /tmp/dbosvenv/bin/python) or TRIO_AGENTS_LANGGRAPH_PYTHON
    # runs it: neither is a dependency of this project, so it is not promised here.
    "durable.py": {"durable_run_time_vs_memory", "recovery_s_over_lease"},
    "team.py": {
        "delegation_time_vs_direct",
        "delegation_runs_per_s_vs_pydantic_ai",
        "bytes_retained_per_closed_agent_over_target",
        "chains_time_vs_provider_calls",
    },
}
#: Numbers that are rightly zero when nothing leaks (every other one is a size, a time or a
#: ratio of two, and must be positive).
MAY_BE_ZERO = {"bytes_retained_per_closed_agent", "bytes_retained_per_closed_agent_over_target"}


def test_every_benchmark_declares_its_ratios() -> None:
    assert {path.name for path in BENCHMARKS} == set(PROMISED_RATIOS)


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_benchmark_quick_json_run(script: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script), "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary) == {"metrics", "ratios"}
    assert set(summary["ratios"]) >= PROMISED_RATIOS[script.name]
    for name, value in {**summary["metrics"], **summary["ratios"]}.items():
        assert isinstance(value, int | float), name
        assert math.isfinite(value), name
        assert value > 0 or (name in MAY_BE_ZERO and value == 0), name
