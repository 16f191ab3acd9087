"""Run events as Server-Sent Events: what the relay's event routes write, read back by the
project's own SSE decoder, and the resume position a client sends back."""

from __future__ import annotations

import json

import hypothesis.strategies as st
import pytest
from hypothesis import given

from protocols.errors import ValidationError
from protocols.live import (
    SSE_KEEPALIVE,
    RunEvent,
    event_from_json,
    event_to_sse,
    last_event_id,
)
from protocols.sse import SSEComment, SSEDecoder, SSEEvent


@given(
    texts=st.lists(st.text(max_size=40), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=6),
)
def test_events_read_back_whole_at_any_chunk_boundary(texts: list[str], cuts: list[int]) -> None:
    events = [RunEvent("run-1", seq, "content", 1.5, {"text": t}) for seq, t in enumerate(texts, 1)]
    wire = SSE_KEEPALIVE.join(event_to_sse(event) for event in events)
    decoder = SSEDecoder()
    items: list[SSEEvent | SSEComment] = []
    start = 0
    for cut in sorted(c % (len(wire) + 1) for c in cuts):
        items += decoder.feed(wire[start:cut])
        start = max(start, cut)
    items += decoder.feed(wire[start:])
    items += decoder.close()
    read = [item for item in items if isinstance(item, SSEEvent)]
    assert [event_from_json(json.loads(item.data)) for item in read] == events
    assert [item.id for item in read] == [str(event.seq) for event in events]
    assert {item.event for item in read} == {"content"}
    assert sum(isinstance(item, SSEComment) for item in items) == len(events) - 1


def test_one_event_is_one_record_with_its_seq_as_id() -> None:
    raw = event_to_sse(RunEvent("r", 7, "content", 2.0, {"text": "two\nlines"}))
    assert raw.startswith(b"id: 7\nevent: content\ndata: {")
    assert raw.endswith(b"\n\n")
    assert raw.count(b"\n") == 4  # a newline in the text is escaped in the JSON


@pytest.mark.parametrize(("value", "seq"), [(None, 0), ("", 0), ("0", 0), ("42", 42), (" 9 ", 9)])
def test_last_event_id_is_the_seq_to_go_on_after(value: str | None, seq: int) -> None:
    assert last_event_id(value) == seq


@pytest.mark.parametrize("value", ["-1", "1.5", "abc", "\uff11\uff12", "9" * 19, "0x10"])
def test_a_last_event_id_that_is_not_a_seq_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="Last-Event-ID"):
        last_event_id(value)
