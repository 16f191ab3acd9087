"""Getting the codec ready for the durable types before the first job needs it."""

from __future__ import annotations

import threading
from typing import Any

from ..codec import converter, decode, encode
from ..messages import AgentResult, Message, ToolCall, ToolFailure, ToolSuccess, Usage
from ..questions import Question
from ._job import AgentJob
from ._journal import (
    AnswerEntry,
    AskEntry,
    AttemptEntry,
    CheckpointEntry,
    InputEntry,
    IntentEntry,
    MessageEntry,
    RequestEntry,
    ResponseEntry,
    ResultEntry,
    StreamEntry,
    TerminalEntry,
    entry_from_json,
    entry_to_json,
)
from ._record import Applied, JobRecord, JobStatus, acquire, admit, finish

__all__ = ["prepare_codec"]

_prepared = threading.Event()
_lock = threading.Lock()


def prepare_codec() -> None:
    """Make the codec's encoders and decoders of a job, its record and every kind of journal
    entry, with what they usually hold, now -- once a process (later calls return at once).
    Nothing else changes: without it, the first job a process encodes and decodes makes them
    (some milliseconds: a queue's worker calls this before it takes its first job)."""
    if _prepared.is_set():
        return
    with _lock:
        if not _prepared.is_set():
            # Until a pass makes nothing: making some encoders (of a mapping, a tuple) makes
            # the converter forget the ones it had looked up, to be made again.
            for _ in range(5):
                before = _made()
                _round_trips()
                if _made() == before:
                    break
            _prepared.set()


def _made() -> tuple[Any, ...]:
    """What the converter has looked up and kept so far (it changes when it makes a hook)."""
    counts = []
    for dispatch in (converter._unstructure_func, converter._structure_func):
        info = getattr(dispatch.dispatch, "cache_info", None)
        counts.append(info() if info is not None else None)
    return tuple((c.misses, c.currsize) if c is not None else None for c in counts)


def _round_trips() -> None:
    """Encode and decode one of each: a job's records through its life, and every entry."""
    call = ToolCall("call-1", "tool", {"argument": 1})
    usage = Usage(prompt=1, completion=1)
    result = AgentResult("answer", usage=usage)
    record = admit("0" * 32, AgentJob.ask("agent", "question"), sequence=1, now=1.0)
    took = acquire(record, owner="worker", now=1.0, lease=1.0, execution=1)
    assert isinstance(took, Applied)
    taken = took.record
    assert taken.lease is not None
    ended = finish(taken, taken.lease, now=1.0, status=JobStatus.COMPLETED, result=result)
    assert isinstance(ended, Applied)
    for value in (record, taken, ended.record):
        decode(JobRecord, encode(value))
    entries = (
        InputEntry((Message.user("question"),)),
        RequestEntry(1),
        StreamEntry(1, (("thinking", "a"), ("content", "b"))),
        ResponseEntry(Message.assistant("", calls=(call,)), usage),
        MessageEntry(Message.user("more")),
        IntentEntry(call, "key"),
        ResultEntry(ToolSuccess("call-1", "tool", {"value": [1, "a", True, None, 1.5]})),
        ResultEntry(ToolFailure("call-1", "tool", "error")),
        CheckpointEntry(1, "content", "thinking"),
        AttemptEntry(2),
        AskEntry(("call-1",), {"call-1": "reason"}, {"call-2": Question("question?")}),
        AnswerEntry("call-1", True, "reason", {"value": 1}),
        TerminalEntry(None, result),
    )
    for entry in entries:
        entry_from_json(entry_to_json(entry))
