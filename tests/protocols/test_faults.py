"""Fault plans: strict parsing, the slow-step tokenizer and the exact SSE bytes."""

from __future__ import annotations

import pytest

from protocols import SSEDecoder, SSEEvent, ValidationError, loads
from protocols.faults import (
    BadJson,
    ConnectionRefused,
    HttpError,
    Pass,
    Slow,
    StreamCut,
    TimeoutBeforeFirstByte,
    UsageMissing,
    done_event,
    parse_plan,
    slow_tokens,
    text_event,
    usage_event,
)


def test_every_kind_parses_from_its_wire_form() -> None:
    plan = parse_plan(
        [
            {"kind": "pass"},
            {"kind": "pass", "text": "hello"},
            {"kind": "connection-refused"},
            {"kind": "timeout-before-first-byte", "milliseconds": 250},
            {"kind": "stream-cut", "afterBytes": 0},
            {"kind": "http-error", "status": 429},
            {"kind": "http-error", "status": 503, "retryAfter": "86400"},
            {"kind": "bad-json"},
            {"kind": "slow", "text": "a b", "tokensPerSecond": 4},
            {"kind": "usage-missing"},
        ]
    )
    assert plan == (
        Pass("ok"),
        Pass("hello"),
        ConnectionRefused(),
        TimeoutBeforeFirstByte(250),
        StreamCut(0),
        HttpError(429),
        HttpError(503, retry_after="86400"),
        BadJson(),
        Slow("a b", 4),
        UsageMissing("ok"),
    )


def test_step_objects_pass_through() -> None:
    steps = (HttpError(503), Pass("x"))
    assert parse_plan(steps) == steps


@pytest.mark.parametrize(
    ("plan", "problem"),
    [
        ([], "at least one step"),
        ("pass", "a sequence of steps"),
        ({"kind": "pass"}, "a sequence of steps"),
        ([3], "fault step 0 must be a mapping"),
        ([{"kind": "explode"}], "unknown kind 'explode'"),
        ([{"text": "no kind"}], "unknown kind None"),
        ([{"kind": "pass"}, {"kind": "pass", "txt": "x"}], r"fault step 1 \(pass\): unknown key"),
        ([{"kind": "stream-cut"}], r"stream-cut\): .*missing"),
        ([{"kind": "stream-cut", "afterBytes": -1}], "after_bytes must be an integer >= 0"),
        ([{"kind": "http-error", "status": 302}], "status must be an integer from 400 to 599"),
        ([{"kind": "http-error", "status": True}], "status must be an integer"),
        ([{"kind": "http-error", "status": 429, "retryAfter": 5}], "retry_after must be a header"),
        ([{"kind": "http-error", "status": 429, "retryAfter": "1\r\nx: y"}], "retry_after must"),
        ([{"kind": "timeout-before-first-byte", "milliseconds": 0}], "milliseconds must be"),
        ([{"kind": "slow", "text": "a", "tokensPerSecond": 0}], "tokens_per_second must be"),
        ([{"kind": "pass", "text": 3}], "text must be a string"),
    ],
)
def test_bad_plans_are_refused(plan: object, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        parse_plan(plan)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", []),
        ("word", ["word"]),
        ("a b  c", ["a ", "b  ", "c"]),
        (" lead", [" ", "lead"]),
        ("tail \n", ["tail \n"]),
        ("one\ttwo", ["one\t", "two"]),
    ],
)
def test_slow_tokens_split_after_whitespace(text: str, tokens: list[str]) -> None:
    assert slow_tokens(text) == tokens
    assert "".join(slow_tokens(text)) == text


@pytest.mark.parametrize(("tps", "tick"), [(1, 1.0), (3, 0.333), (1000, 0.001), (5000, 0.001)])
def test_slow_tick_is_whole_milliseconds_at_least_one(tps: float, tick: float) -> None:
    assert Slow("x", tps).tick == tick


def test_event_bytes_are_exact_openai_chunks() -> None:
    assert text_event("hi") == (
        b'data: {"id":"fault-bench","object":"chat.completion.chunk",'
        b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    )
    assert b'"delta":{},"finish_reason":"stop"' in text_event("", "stop")
    assert done_event() == b"data: [DONE]\n\n"
    events = SSEDecoder().feed(text_event("hi") + usage_event() + done_event())
    assert all(isinstance(event, SSEEvent) for event in events)
    records = [event.data for event in events if isinstance(event, SSEEvent)]
    assert loads(records[1])["usage"] == {
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "total_tokens": 2,
    }
    assert records[2] == "[DONE]"
