"""The durable jobs' websocket frames (protocol version 3): ``job_submit``, ``job_get``,
``job_cancel``, ``job_answer`` and ``job_watch``, answered by the same operations as the jobs
API over HTTP -- same tenancy, same limits.

Real parts only: the relay on hypercorn on loopback port 0 (the harness of
``test_relay_jobs.py``: a memory store and a real job queue's workers), raw websocket clients
(:class:`~test_relay.Raw`), trio's mock clock (autojump): no real sleeps.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from test_relay import Raw
from test_relay_jobs import ALICE, BOB, harness, kinds, no_secret, running, until

from actors.relay import RelayJobLimits, RelayLimits, RelayServer, RelayToken, serve
from actors.testing import ScriptedProvider
from protocols.jobs import JobStatus
from protocols.relay import (
    ERROR_MESSAGES,
    CancelFrame,
    ErrorFrame,
    HelloFrame,
    JobAnswerFrame,
    JobCancelFrame,
    JobEventFrame,
    JobFrame,
    JobGetFrame,
    JobSubmitFrame,
    JobWatchFrame,
    ReadyFrame,
    ServerFrame,
    decode_server_frame,
    encode_frame,
)


@pytest.fixture(autouse=True)
def _autojump(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.05


class Client:
    """A raw websocket client of the relay, its hello said."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw

    async def send(self, frame: Any) -> None:
        await self.raw.send(encode_frame(frame))

    async def receive(self) -> ServerFrame:
        text = await self.raw.receive()
        assert text is not None, f"closed ({self.raw.close_code})"
        return decode_server_frame(text)

    async def ask(self, frame: Any) -> ServerFrame:
        await self.send(frame)
        return await self.receive()

    async def job(self, frame: Any) -> dict[str, Any]:
        answer = await self.ask(frame)
        assert isinstance(answer, JobFrame), answer
        assert answer.id == frame.id
        return answer.job

    async def watch(self, id: str, job_id: str, after: int = 0) -> list[dict[str, Any]]:
        """Follow a job to the end of its watch: its events (without their times)."""
        await self.send(JobWatchFrame(id, job_id, after))
        events = []
        while True:
            frame = await self.receive()
            assert isinstance(frame, JobEventFrame), frame
            assert frame.id == id
            event = dict(frame.event)
            event.pop("time", None)
            events.append(event)
            if frame.terminal:
                return events


@asynccontextmanager
async def connect(url: str, token: str = ALICE, version: int = 3) -> AsyncIterator[Client]:
    async with Raw.connect(url) as raw:
        client = Client(raw)
        await client.send(HelloFrame(version, token))
        assert isinstance(await client.receive(), ReadyFrame)
        yield client


async def test_a_job_is_submitted_shown_followed_and_resumed_over_the_websocket(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h, connect(h.url) as ws:
        with trio.fail_after(120):
            submitted = await ws.ask(
                JobSubmitFrame("s1", {"agent": "calculator", "input": "19+23?", "key": "k7"})
            )
            assert isinstance(submitted, JobFrame)
            id = submitted.job["id"]
            events = await ws.watch("w1", id)
            resumed = await ws.watch("w2", id, after=3)
            past_the_end = await ws.ask(JobWatchFrame("w3", id, after=len(events)))
            shown = await ws.job(JobGetFrame("g1", id))
            again = await ws.ask(
                JobSubmitFrame("s2", {"agent": "calculator", "input": "19+23?", "key": "k7"})
            )
            over_http = (await h.call("GET", f"/v1/jobs/{id}")).json()
    assert submitted.created is True
    assert submitted.job["status"] == "queued"
    assert submitted.job["key"] == "k7"
    assert kinds(events) == [
        "started", "turn", "tool_call", "usage", "tool_result", "turn", "content", "usage",
        "finished",
    ]  # fmt: skip
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert resumed == events[3:]
    # Nothing follows the end: the watch ends at once with the job as it is.
    assert isinstance(past_the_end, JobFrame)
    assert past_the_end.id == "w3"
    assert past_the_end.job["status"] == "completed"
    assert shown["status"] == "completed"
    assert shown["result"]["content"] == "It is 42."
    assert shown == over_http
    assert isinstance(again, JobFrame)
    assert again.created is False
    assert again.job["id"] == id


async def test_the_websocket_shows_the_same_events_as_the_sse_route(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h, connect(h.url) as ws:
        with trio.fail_after(120):
            id = (await ws.job(JobSubmitFrame("s", {"agent": "broken", "input": "hi"})))["id"]
            events = await ws.watch("w", id)
            _, sse, _ = await h.events(id)
    assert events == sse
    assert events[-1]["kind"] == "failed"
    assert no_secret(*ws.raw.texts)


async def test_a_cancel_ends_the_watch_and_only_job_cancel_cancels_the_job(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h, connect(h.url) as ws:
        with trio.fail_after(120):
            id = (await ws.job(JobSubmitFrame("s", {"agent": "writer", "input": "a tale"})))["id"]
            await until(functools.partial(running, h, id))
            await ws.send(JobWatchFrame("w", id))
            first = await ws.receive()
            await ws.send(CancelFrame("w"))
            frame = first
            while not isinstance(frame, JobFrame):  # the events already on their way, then
                assert isinstance(frame, JobEventFrame)
                frame = await ws.receive()
            ended_watch = frame
            still = await h.store.get(id)
            assert still is not None
            cancelled = await ws.job(JobCancelFrame("c", id))
            events = await ws.watch("w", id)  # the id is free again
    assert isinstance(first, JobEventFrame)
    assert first.event["kind"] == "started"
    assert ended_watch.id == "w"
    assert ended_watch.created is None
    assert ended_watch.job["status"] == "running"
    assert still.status is JobStatus.RUNNING
    assert cancelled["cancel_requested"] is True
    assert events[-1]["kind"] == "cancelled"


async def test_an_awaiting_job_is_answered_with_job_answer(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h, connect(h.url) as ws:
        with trio.fail_after(120):
            id = (await ws.job(JobSubmitFrame("s", {"agent": "support", "input": "Refund 7."})))[
                "id"
            ]
            asked = await ws.watch("w", id)
            wrong = await ws.ask(JobAnswerFrame("a0", id, [{"call_id": "nope", "allow": True}]))
            malformed = await ws.ask(JobAnswerFrame("a1", id, [{"call_id": "r1"}]))
            answered = await ws.job(
                JobAnswerFrame("a2", id, [{"call_id": "r1", "allow": True, "reason": "fine"}])
            )
            rest = await ws.watch("w", id, after=asked[-1]["seq"])
            late = await ws.ask(JobAnswerFrame("a3", id, [{"call_id": "r1", "allow": True}]))
    assert kinds(asked)[-1] == "awaiting_input"
    assert isinstance(wrong, ErrorFrame)
    assert (wrong.id, wrong.code) == ("a0", "conflict")
    assert isinstance(malformed, ErrorFrame)
    assert (malformed.id, malformed.code) == ("a1", "invalid")
    assert malformed.message == ERROR_MESSAGES["invalid"]  # (only the code's fixed text)
    assert answered["status"] == "queued"
    assert answered["pending"] == []
    assert kinds(rest)[-1] == "finished"
    assert isinstance(late, ErrorFrame)
    assert late.code == "ended"


async def test_another_tokens_job_is_not_found_exactly_like_a_missing_one(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness(workers=False) as h, connect(h.url) as alice, connect(h.url, BOB) as bob:
        with trio.fail_after(120):
            id = (await alice.job(JobSubmitFrame("s", {"agent": "calculator", "input": "x"})))["id"]
            answers = [{"call_id": "r1", "allow": True}]
            seen = {}
            for job_id in (id, "job_that_does_not_exist"):
                seen[job_id] = [
                    await bob.ask(JobGetFrame("g", job_id)),
                    await bob.ask(JobCancelFrame("c", job_id)),
                    await bob.ask(JobAnswerFrame("a", job_id, answers)),
                    await bob.ask(JobWatchFrame("w", job_id)),
                ]
            record = await h.store.get(id)
    assert seen[id] == seen["job_that_does_not_exist"]
    errors = [f for f in seen[id] if isinstance(f, ErrorFrame) and f.code == "not_found"]
    assert [frame.id for frame in errors] == ["g", "c", "a", "w"]
    assert record is not None
    assert not record.cancel_requested


async def test_limits_apply_as_over_http(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = [RelayToken(ALICE, name="alice", per_minute=4), RelayToken(BOB, name="bob")]
    async with (
        harness(
            workers=False,
            tokens=tokens,
            limits=RelayJobLimits(max_streams=2, max_input=64),
            relay_limits=RelayLimits(max_streams=2),
        ) as h,
        connect(h.url) as ws,
        connect(h.url) as other,
    ):
        with trio.fail_after(120):
            id = (await ws.job(JobSubmitFrame("s1", {"agent": "calculator", "input": "x"})))["id"]
            refusals = {
                "unknown field": await ws.ask(
                    JobSubmitFrame("s2", {"agent": "a", "input": "x", "p": 1})
                ),
                "unknown agent": await ws.ask(
                    JobSubmitFrame("s3", {"agent": "nobody", "input": "x"})
                ),
            }
            refusals["too large"] = await ws.ask(
                JobSubmitFrame("s4", {"agent": "calculator", "input": "x" * 100})
            )
            # (a submit counts before its body is checked, as over HTTP: the 5th is refused)
            refusals["rate limited"] = await ws.ask(
                JobSubmitFrame("s5", {"agent": "calculator", "input": "x"})
            )
            # Two watches of a queued job (no workers: they stay open).
            await ws.send(JobWatchFrame("w1", id))
            await ws.send(JobWatchFrame("w2", id))
            refusals["duplicate"] = await ws.ask(JobGetFrame("w1", id))
            refusals["connection's streams"] = await ws.ask(JobWatchFrame("w3", id))
            refusals["token's streams"] = await other.ask(JobWatchFrame("w4", id))
            await until(lambda: h.jobs.statistics().streams == 2)
            await ws.send(CancelFrame("w1"))
            ended = await ws.receive()
            await until(lambda: h.jobs.statistics().streams == 1)
            await other.send(JobWatchFrame("w4", id))
            await until(lambda: h.jobs.statistics().streams == 2)
    expected = {
        "unknown field": "invalid",
        "unknown agent": "unknown_agent",
        "too large": "too_large",
        "rate limited": "rate_limited",
        "duplicate": "duplicate",
        "connection's streams": "too_many_streams",
        "token's streams": "too_many_streams",
    }
    for name, code in expected.items():
        frame = refusals[name]
        assert isinstance(frame, ErrorFrame), name
        assert frame.code == code, name
    limited = refusals["rate limited"]
    assert isinstance(limited, ErrorFrame)
    assert limited.retryable is True
    assert limited.message == ERROR_MESSAGES["rate_limited"]
    assert isinstance(ended, JobFrame)
    assert ended.id == "w1"
    assert h.jobs.statistics().submitted == 1
    assert no_secret(*ws.raw.texts, *other.raw.texts, caplog.text)


async def test_a_relay_without_jobs_or_an_older_connection_refuses_the_job_frames(
    mock_clock: trio.testing.MockClock,
) -> None:
    relay = RelayServer(ScriptedProvider(), tokens=[RelayToken(ALICE, name="alice")])
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, relay, port=0, ping_interval=None))
        with trio.fail_after(60):
            async with connect(url) as ws:
                frames = [
                    await ws.ask(JobSubmitFrame("s", {"agent": "a", "input": "x"})),
                    await ws.ask(JobGetFrame("g", "j1")),
                    await ws.ask(JobCancelFrame("c", "j1")),
                    await ws.ask(JobAnswerFrame("a", "j1", [{"call_id": "x", "allow": True}])),
                    await ws.ask(JobWatchFrame("w", "j1")),
                ]
            async with connect(url, version=2) as old:
                older = await old.ask(JobGetFrame("g", "j1"))
        nursery.cancel_scope.cancel()
    assert [(f.id, f.code) for f in frames if isinstance(f, ErrorFrame)] == [
        ("s", "no_jobs"), ("g", "no_jobs"), ("c", "no_jobs"), ("a", "no_jobs"), ("w", "no_jobs"),
    ]  # fmt: skip
    assert isinstance(older, ErrorFrame)
    assert (older.id, older.code) == ("g", "version")
