"""``prepare_codec``: once it has run, encoding and decoding a job's record and every kind of
journal entry makes nothing more (a worker's first job pays for none of it). Checked in a
fresh interpreter each time: in this one, other tests have long made everything."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys

from protocols import jobs as J
from protocols.codec import decode, encode
from protocols.messages import AgentResult, Message, ToolCall, ToolFailure, ToolSuccess, Usage
from protocols.questions import Question

if sys.argv[1] == "prepared":
    J.prepare_codec()
    J.prepare_codec()  # (a second call does nothing)


# cattrs makes each encoder and decoder as Python source it compiles: counted here.
import builtins

compiled = 0
compile = builtins.compile


def counted(*args, **kwargs):
    global compiled
    compiled += 1
    return compile(*args, **kwargs)


builtins.compile = counted
call = ToolCall("call-1", "pay", {"amount": 3})
record = J.admit("a" * 32, J.AgentJob.ask("agent", "question"), sequence=1, now=1.0)
taken = J.acquire(record, owner="w", now=2.0, lease=30.0, execution=1).record
result = AgentResult("done", usage=Usage(prompt=1, completion=2))
ended = J.finish(taken, taken.lease, now=3.0, status=J.JobStatus.COMPLETED, result=result)
entries = [
    J.InputEntry((Message.user("question"),)),
    J.RequestEntry(1),
    J.StreamEntry(1, (("thinking", "hm"), ("content", "so"))),
    J.ResponseEntry(Message.assistant("", calls=(call,)), Usage(prompt=1, completion=2)),
    J.MessageEntry(Message.user("more")),
    J.IntentEntry(call, "key-1"),
    J.ResultEntry(ToolSuccess("call-1", "pay", {"paid": True})),
    J.ResultEntry(ToolFailure("call-2", "pay", "declined")),
    J.CheckpointEntry(1, "so far"),
    J.AttemptEntry(2),
    J.AskEntry(("call-1",), {"call-1": "why"}, {"call-2": Question("Which?")}),
    J.AnswerEntry("call-1", True, "ok", {"value": 1}),
    J.TerminalEntry(None, result),
]
for value in (record, taken, ended.record):
    assert decode(J.JobRecord, encode(value)) == value
for entry in entries:
    assert J.entry_from_json(json.loads(json.dumps(J.entry_to_json(entry)))) == entry
print(json.dumps({"made": compiled}))
"""


def made_while_used(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    made: int = json.loads(done.stdout.splitlines()[-1])["made"]
    return made


@pytest.mark.parametrize("mode", ["prepared", "not prepared"])
def test_a_prepared_codec_makes_nothing_when_a_job_is_encoded_and_decoded(mode: str) -> None:
    made = made_while_used(mode)
    if mode == "prepared":
        assert made == 0
    else:
        assert made > 20  # (what prepare_codec spares the first job)
