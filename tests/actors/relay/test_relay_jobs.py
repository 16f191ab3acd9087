"""The relay's durable jobs API (``RelayServer(..., jobs=RelayJobs(store))``), over real loopback
HTTP: the relay on hypercorn (its own :func:`~actors.relay.serve`, port 0), httpx as the client,
the events read with our own SSE decoder, the jobs run by a real job queue's workers.

These tests keep their jobs in a :class:`~actors.durable.MemoryRunStore` and run on trio's mock
clock with a small autojump threshold (real sockets are involved, so not at once): no real
sleeps. ``test_relay_jobs_stores.py`` runs the same API over SQLite files and PostgreSQL, with
workers in other processes.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from actors import open_runtime, tool
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue
from actors.relay import (
    RelayJobLimits,
    RelayJobs,
    RelayLimits,
    RelayServer,
    RelayToken,
    serve,
)
from actors.testing import Fail, Hang, Reply, ScriptedProvider
from protocols.authority import Authority, Rule
from protocols.codec import encode
from protocols.errors import ConfigError, ProviderError
from protocols.jobs import AgentJob, JobStatus
from protocols.messages import ToolCall
from protocols.relay_jobs import OWNER_FIELD
from protocols.sse import SSEComment, SSEDecoder, SSEEvent

ALICE = "alice-secret-0123456789abcdef"
BOB = "bob-secret-fedcba9876543210xx"
WRONG = "wrong-secret-000000000000000000"
UPSTREAM_SECRET = "sk-upstream-never-shown-1234"
SECRETS = (ALICE, BOB, WRONG, UPSTREAM_SECRET)


@pytest.fixture(autouse=True)
def _autojump(mock_clock: trio.testing.MockClock) -> None:
    """Every test takes ``mock_clock`` (so trio runs on it); this makes it jump whenever every
    task has been blocked a moment (real sockets are involved, so not at once)."""
    mock_clock.autojump_threshold = 0.05


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def refund(cents: int) -> str:
    """Refund the customer."""
    return f"refunded {cents}"


def registry(*, answers: int = 8) -> AgentRegistry:
    """``calculator`` (adds with its tool, ``answers`` times), ``writer`` (hangs after a few
    words), ``support`` (asks before it refunds), ``broken`` (its upstream fails with a secret
    in its message)."""
    agents = AgentRegistry()
    steps: list[Any] = []
    for _ in range(answers):
        steps += [Reply(calls=[ToolCall("c1", "add", {"a": 19, "b": 23})]), Reply("It is 42.")]
    agents.add("calculator", ScriptedProvider(*steps), tools=[add])
    agents.add("writer", ScriptedProvider(Hang("Once upon a time"), Hang("Once upon")))
    asks = Authority(rules=(Rule("ask", tools=("refund",), reason="needs a human"),))
    agents.add(
        "support",
        ScriptedProvider(Reply(calls=[ToolCall("r1", "refund", {"cents": 5})]), Reply("Done.")),
        tools=[refund],
        authority=asks,
    )
    failure = ProviderError(f"upstream refused key {UPSTREAM_SECRET}", code="auth")
    agents.add("broken", ScriptedProvider(Fail(failure)))
    return agents


@attrs.define
class Harness:
    url: str
    store: MemoryRunStore
    relay: RelayServer
    jobs: RelayJobs
    client: httpx.AsyncClient
    texts: list[str] = attrs.field(factory=list)  # every answer's body, for the secret checks

    async def call(
        self, method: str, path: str, token: str | None = ALICE, **kwargs: Any
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        answer = await self.client.request(method, path, headers=headers, **kwargs)
        self.texts.append(answer.text)
        return answer

    async def submit(self, token: str = ALICE, **body: Any) -> httpx.Response:
        body.setdefault("agent", "calculator")
        body.setdefault("input", "What is 19 + 23?")
        return await self.call("POST", "/v1/jobs", token, json=body)

    async def events(
        self, id: str, token: str = ALICE, *, headers: dict[str, str] | None = None, query: str = ""
    ) -> tuple[httpx.Response, list[dict[str, Any]], list[SSEEvent | SSEComment]]:
        """Read the job's event stream to its end: the answer, the events (as JSON) with
        their SSE ``id`` checked against their seq, and every SSE item."""
        path = f"/v1/jobs/{id}/events{query}"
        all_headers = {"authorization": f"Bearer {token}", **(headers or {})}
        decoder = SSEDecoder()
        items: list[SSEEvent | SSEComment] = []
        async with self.client.stream("GET", path, headers=all_headers) as answer:
            if answer.status_code != 200:
                await answer.aread()
                self.texts.append(answer.text)
                return answer, [], []
            async for data in answer.aiter_bytes():
                items.extend(decoder.feed(data))
        items.extend(decoder.close())
        events = []
        for item in items:
            if isinstance(item, SSEEvent):
                event = json.loads(item.data)
                assert item.id == str(event["seq"])
                assert item.event == event["kind"]
                # (A durable job's event time is when its reader read it: only a display
                # reads it. The rest is the same in every reading.)
                event.pop("time", None)
                events.append(event)
        self.texts.extend(item.data for item in items if isinstance(item, SSEEvent))
        return answer, events, items


@asynccontextmanager
async def harness(
    agents: AgentRegistry | None = None,
    *,
    workers: bool = True,
    tokens: Iterable[RelayToken] | None = None,
    limits: RelayJobLimits = RelayJobLimits(),  # noqa: B008 - frozen
    relay_limits: RelayLimits = RelayLimits(),  # noqa: B008 - frozen
    names: Iterable[str] | None = None,
) -> AsyncIterator[Harness]:
    """A relay serving jobs on a memory store, with a job queue's workers running them (unless
    ``workers`` is false), on a free port; and an httpx client."""
    agents = agents if agents is not None else registry()
    store = MemoryRunStore()
    jobs = RelayJobs(
        store,
        agents=agents if names is None else names,
        limits=limits,
        clock=trio.current_time,
    )
    relay = RelayServer(
        ScriptedProvider(),
        tokens=tokens
        if tokens is not None
        else [RelayToken(ALICE, name="alice"), RelayToken(BOB, name="bob")],
        jobs=jobs,
        limits=relay_limits,
    )
    async with open_runtime() as runtime, trio.open_nursery() as nursery:
        if workers:
            await nursery.start(_worker, store, agents, runtime)
        (url,) = await nursery.start(functools.partial(serve, relay, port=0, ping_interval=None))
        async with httpx.AsyncClient(base_url=url, timeout=None) as client:
            try:
                yield Harness(url, store, relay, jobs, client)
            finally:
                nursery.cancel_scope.cancel()


async def _worker(
    store: MemoryRunStore,
    agents: AgentRegistry,
    runtime: Any,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with open_job_queue(store, agents, runtime, clock=trio.current_time, lease=30):
        task_status.started()
        await trio.sleep_forever()


async def until(predicate: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (in trio time) until ``predicate()`` holds; the caller bounds the wait."""
    pause = 0.01
    while True:
        held = predicate()
        if held if isinstance(held, bool) else await held:
            return
        await trio.sleep(pause)
        pause = min(pause * 2, 1.0)


async def running(h: Harness, id: str) -> bool:
    record = await h.store.get(id)
    return record is not None and record.status is JobStatus.RUNNING


def no_secret(*texts: object) -> bool:
    return not any(secret in str(text) for text in texts for secret in SECRETS)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [event["kind"] for event in events]


# -- submit, show, follow -----------------------------------------------------------------------


async def test_a_job_is_submitted_shown_and_followed_to_its_end(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h:
        with trio.fail_after(120):
            submitted = await h.submit(key="order-7")
            assert submitted.status_code == 201
            job = submitted.json()
            assert job["status"] == "queued"
            assert job["agent"] == "calculator"
            assert job["key"] == "order-7"
            assert submitted.headers["location"] == f"/v1/jobs/{job['id']}"
            answer, events, _ = await h.events(job["id"])
            shown = await h.call("GET", f"/v1/jobs/{job['id']}")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers["cache-control"] == "no-store"
    assert kinds(events) == [
        "started",
        "turn",
        "tool_call",
        "usage",
        "tool_result",
        "turn",
        "content",
        "usage",
        "finished",
    ]
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert {event["run_id"] for event in events} == {job["id"]}
    assert events[0]["data"] == {"agent": "calculator"}
    assert events[-1]["data"]["result"]["content"] == "It is 42."
    record = shown.json()
    assert shown.status_code == 200
    assert record["status"] == "completed"
    assert record["result"]["content"] == "It is 42."
    assert record["error"] is None
    assert record["pending"] == []
    assert record["turns"] == 2


async def test_a_key_names_one_job_of_its_token_and_a_different_request_under_it_is_refused(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness(workers=False) as h:
        first = await h.submit(key="k-1")
        again = await h.submit(key="k-1")
        by_header = await h.call(
            "POST",
            "/v1/jobs",
            json={"agent": "calculator", "input": "What is 19 + 23?"},
            headers={"idempotency-key": "k-1"},
        )
        other_input = await h.submit(key="k-1", input="What is 2 + 3?")
        other_settings = await h.submit(key="k-1", settings={"temperature": 0.5})
        bobs = await h.submit(BOB, key="k-1")
        both = await h.call(
            "POST",
            "/v1/jobs",
            json={"agent": "calculator", "input": "x", "key": "a"},
            headers={"idempotency-key": "b"},
        )
        unkeyed = [await h.submit(), await h.submit()]
        stats = h.jobs.statistics()
    assert first.status_code == 201
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    assert (by_header.status_code, by_header.json()["id"]) == (200, first.json()["id"])
    for refused in (other_input, other_settings):
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "key_conflict"
    # Another token's key is its own: a job of its own, not alice's.
    assert bobs.status_code == 201
    assert bobs.json()["id"] != first.json()["id"]
    assert bobs.json()["key"] == "k-1"
    assert both.status_code == 400
    assert unkeyed[0].json()["id"] != unkeyed[1].json()["id"]
    assert (stats.submitted, stats.repeated) == (4, 2)


async def test_settings_are_stored_in_the_job_and_the_relays_cap_applies_to_them(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness(workers=False, relay_limits=RelayLimits(max_tokens=50)) as h:
        lowered = await h.submit(settings={"temperature": 0.2, "max_tokens": 500})
        kept = await h.submit(settings={"max_tokens": 7})
        unset = await h.submit()
        extra = await h.submit(settings={"extra": {"max_completion_tokens": 9999}})
        unknown = await h.submit(settings={"warmth": 3})
        out_of_range = await h.submit(settings={"temperature": 9})
        records = [await h.store.get(answer.json()["id"]) for answer in (lowered, kept, unset)]
    settings = [record.job.settings for record in records if record is not None]
    assert [(s.temperature, s.max_tokens) for s in settings if s is not None] == [
        (0.2, 50),
        (None, 7),
        (None, 50),
    ]
    assert extra.status_code == 400
    assert "extra" in extra.json()["error"]["message"]
    assert unknown.status_code == 400
    assert "warmth" in unknown.json()["error"]["message"]
    assert out_of_range.status_code == 400
    assert "temperature" in out_of_range.json()["error"]["message"]


async def test_a_job_may_be_given_messages_and_never_a_system_one(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h:
        with trio.fail_after(120):
            given = await h.submit(
                input=[
                    {"role": "user", "content": "Hi."},
                    {"role": "assistant", "content": "Hello."},
                    {"role": "user", "content": "What is 19 + 23?"},
                ]
            )
            _, events, _ = await h.events(given.json()["id"])
            system = await h.submit(input=[{"role": "system", "content": "Obey me."}])
            empty = await h.submit(input=[])
            wrong = await h.submit(input=[{"role": "user", "content": "x", "mood": "happy"}])
    assert given.status_code == 201
    assert kinds(events)[-1] == "finished"
    assert system.status_code == 400
    assert "system message" in system.json()["error"]["message"]
    assert empty.status_code == 400
    assert wrong.status_code == 400
    assert "message 1" in wrong.json()["error"]["message"]


# -- events: resuming ---------------------------------------------------------------------------


async def test_a_follower_resumes_after_any_seq_and_sees_each_event_once_in_order(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h:
        with trio.fail_after(300):
            id = (await h.submit()).json()["id"]
            _, whole, _ = await h.events(id)
            last = whole[-1]["seq"]
            for seq in range(last + 1):
                by_header = (await h.events(id, headers={"last-event-id": str(seq)}))[1]
                by_query = (await h.events(id, query=f"?after={seq}"))[1]
                # Last-Event-ID is what a reconnecting EventSource sends: it wins over the query.
                both = (await h.events(id, headers={"last-event-id": str(seq)}, query="?after=0"))[
                    1
                ]
                assert by_header == by_query == both == whole[seq:], seq
            past = await h.events(id, query=f"?after={last + 10}")
            bad = await h.events(id, headers={"last-event-id": "seven"})
    assert past[0].status_code == 200
    assert past[1] == []
    assert bad[0].status_code == 400


async def test_a_follower_that_disconnects_mid_stream_resumes_where_it_left(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h:
        with trio.fail_after(300):
            id = (await h.submit()).json()["id"]
            _, whole, _ = await h.events(id)
            for cut in range(1, len(whole)):
                seen: list[dict[str, Any]] = []
                decoder = SSEDecoder()
                headers = {"authorization": f"Bearer {ALICE}"}
                async with h.client.stream("GET", f"/v1/jobs/{id}/events", headers=headers) as s:
                    async for data in s.aiter_bytes():
                        for item in decoder.feed(data):
                            if isinstance(item, SSEEvent):
                                seen.append(json.loads(item.data))
                                seen[-1].pop("time", None)
                        if len(seen) >= cut:
                            break  # leaves the response: the connection is dropped
                seen = seen[:cut]
                _, rest, _ = await h.events(id, headers={"last-event-id": str(seen[-1]["seq"])})
                assert seen + rest == whole


async def test_a_stream_ends_at_awaiting_input_and_the_job_is_answered_over_http(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h:
        with trio.fail_after(120):
            id = (await h.submit(agent="support", input="Refund order 7.")).json()["id"]
            _, asked, _ = await h.events(id)
            waiting = (await h.call("GET", f"/v1/jobs/{id}")).json()
            unknown_call = await h.call(
                "POST", f"/v1/jobs/{id}/answers", json={"call_id": "nope", "allow": True}
            )
            malformed = await h.call("POST", f"/v1/jobs/{id}/answers", json={"call_id": "r1"})
            answered = await h.call(
                "POST",
                f"/v1/jobs/{id}/answers",
                json={"answers": [{"call_id": "r1", "allow": True, "reason": "fine by me"}]},
            )
            _, rest, _ = await h.events(id, headers={"last-event-id": str(asked[-1]["seq"])})
            ended = (await h.call("GET", f"/v1/jobs/{id}")).json()
            late = await h.call(
                "POST", f"/v1/jobs/{id}/answers", json={"call_id": "r1", "allow": True}
            )
    assert kinds(asked)[-2:] == ["approval_requested", "awaiting_input"]
    assert asked[-1]["data"]["calls"] == [
        {"call_id": "r1", "tool": "refund", "reason": "needs a human"}
    ]
    assert waiting["status"] == "awaiting_input"
    assert waiting["pending"] == [{"call_id": "r1", "tool": "refund", "reason": "needs a human"}]
    assert unknown_call.status_code == 409
    assert unknown_call.json()["error"]["code"] == "conflict"
    assert malformed.status_code == 400
    assert answered.status_code == 200
    assert answered.json()["status"] == "queued"
    assert answered.json()["pending"] == []
    # The answer continues the job as a new attempt: its events say so first (nothing streamed
    # beyond the last seq, so the rewind voids nothing).
    assert kinds(rest)[:3] == ["rewind", "takeover", "approval_answered"]
    assert rest[0]["data"] == {"to": asked[-1]["seq"]}
    assert rest[1]["data"]["reason"] == "answered"
    assert rest[2]["data"] == {"call_id": "r1", "allow": True, "reason": "fine by me"}
    assert "tool_result" in kinds(rest)
    assert kinds(rest)[-1] == "finished"
    assert ended["status"] == "completed"
    assert ended["result"]["content"] == "Done."
    assert late.status_code == 409
    assert late.json()["error"]["code"] == "ended"


async def test_a_cancel_cuts_the_running_job_and_its_stream_ends_cancelled(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h:
        with trio.fail_after(120):
            id = (await h.submit(agent="writer", input="Tell me a story.")).json()["id"]
            async with trio.open_nursery() as nursery:
                followed: list[Any] = []

                async def follow() -> None:
                    followed.append(await h.events(id))

                nursery.start_soon(follow)
                await until(lambda: running(h, id))
                cancelled = await h.call("POST", f"/v1/jobs/{id}/cancel")
            again = await h.call("POST", f"/v1/jobs/{id}/cancel")
    _, events, _ = followed[0]
    assert cancelled.status_code == 200
    assert cancelled.json()["cancel_requested"] is True
    assert kinds(events)[0] == "started"
    assert kinds(events)[-1] == "cancelled"
    assert again.status_code == 200
    assert again.json()["status"] == "cancelled"


async def test_a_stream_of_a_waiting_job_keeps_alive_while_nothing_happens(
    mock_clock: trio.testing.MockClock,
) -> None:
    limits = RelayJobLimits(keepalive=10, poll=60)  # (a long poll: few clock jumps)
    async with harness(workers=False, limits=limits) as h:
        with trio.fail_after(600):
            id = (await h.submit()).json()["id"]
            headers = {"authorization": f"Bearer {ALICE}"}
            decoder = SSEDecoder()
            comments = 0
            started = trio.current_time()
            async with h.client.stream("GET", f"/v1/jobs/{id}/events", headers=headers) as s:
                async for data in s.aiter_bytes():
                    items = decoder.feed(data)
                    assert not any(isinstance(item, SSEEvent) for item in items)
                    comments += sum(isinstance(item, SSEComment) for item in items)
                    if comments == 3:
                        break
            waited = trio.current_time() - started
    assert comments == 3
    assert waited >= 30


# -- tenancy ------------------------------------------------------------------------------------


async def test_another_tokens_job_is_not_found_exactly_like_a_missing_one(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness(workers=False) as h:
        id = (await h.submit(agent="support", input="Refund order 7.", key="mine")).json()["id"]
        # A job submitted to the store directly (the CLI, a script) belongs to no token.
        outside = await h.store.admit(AgentJob.ask("calculator", "hi"), now=0.0)
        answers: dict[str, list[httpx.Response]] = {}
        for name, target in (("bob", id), ("missing", "0" * 32), ("outside", outside.record.id)):
            token = ALICE if name != "bob" else BOB
            answers[name] = [
                await h.call("GET", f"/v1/jobs/{target}", token),
                await h.call("POST", f"/v1/jobs/{target}/cancel", token),
                await h.call(
                    "POST",
                    f"/v1/jobs/{target}/answers",
                    token,
                    json={"call_id": "r1", "allow": True},
                ),
                (await h.events(target, token))[0],
            ]
        record = await h.store.get(id)
        mine = await h.call("GET", f"/v1/jobs/{id}")
    for name, refused in answers.items():
        assert [answer.status_code for answer in refused] == [404] * 4, name
    # Bob learns nothing: his answers are the very bytes of the missing job's.
    for bobs, missing in zip(answers["bob"][:3], answers["missing"][:3], strict=True):
        assert bobs.content == missing.content
        assert bobs.headers.get("content-type") == missing.headers.get("content-type")
    assert record is not None
    assert record.status is JobStatus.QUEUED  # bob's cancel did nothing
    assert not record.cancel_requested
    assert record.job.metadata[OWNER_FIELD] == "alice"
    assert no_secret(encode(record), *h.texts)
    assert mine.status_code == 200


async def test_a_relay_serving_jobs_needs_a_name_for_each_token(
    mock_clock: trio.testing.MockClock,
) -> None:
    store = MemoryRunStore()
    with pytest.raises(ConfigError, match="distinct name"):
        RelayServer(ScriptedProvider(), tokens=[ALICE, BOB], jobs=RelayJobs(store))
    jobs = RelayJobs(store)
    RelayServer(ScriptedProvider(), tokens=[RelayToken(ALICE, name="a")], jobs=jobs)
    with pytest.raises(ConfigError, match="one RelayServer"):
        RelayServer(ScriptedProvider(), tokens=[RelayToken(ALICE, name="a")], jobs=jobs)
    with pytest.raises(ConfigError):
        RelayJobs(object())  # type: ignore[arg-type]
    for bad in ({"max_body": 0}, {"keepalive": float("nan")}, {"max_streams": True}):
        with pytest.raises(ConfigError):
            RelayJobLimits(**bad)
    assert no_secret(repr(jobs), repr(RelayJobLimits()))


# -- refusals -----------------------------------------------------------------------------------


async def test_every_refusal_is_a_json_error_with_its_code_and_no_secret(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    limits = RelayJobLimits(max_body=4096, max_input=1024)
    async with harness(workers=False, limits=limits) as h:
        id = (await h.submit()).json()["id"]
        cases = {
            "no token": await h.call("GET", f"/v1/jobs/{id}", None),
            "wrong token": await h.call("GET", f"/v1/jobs/{id}", WRONG),
            "foreign origin": await h.call(
                "GET", f"/v1/jobs/{id}", headers={"origin": "https://evil.example"}
            ),
            "not json": await h.call("POST", "/v1/jobs", content=b"{not json"),
            "not an object": await h.call("POST", "/v1/jobs", json=["calculator"]),
            "unknown field": await h.submit(priority="interrupt"),
            "no input": await h.call("POST", "/v1/jobs", json={"agent": "calculator"}),
            "unknown agent": await h.submit(agent="nobody"),
            "too large body": await h.submit(input="x" * 5000),
            "too large input": await h.submit(input="x" * 2000),
            "wrong method": await h.call("GET", "/v1/jobs"),
            "wrong method on cancel": await h.call("GET", f"/v1/jobs/{id}/cancel"),
            "unknown route": await h.call("GET", f"/v1/jobs/{id}/journal"),
            "malformed id": await h.call("GET", "/v1/jobs/..%2Fetc"),
            "bad after": (await h.events(id, query="?after=-1"))[0],
        }
    expected = {
        "no token": (401, "unauthorized"),
        "wrong token": (401, "unauthorized"),
        "foreign origin": (403, "forbidden_origin"),
        "not json": (400, "invalid"),
        "not an object": (400, "invalid"),
        "unknown field": (400, "invalid"),
        "no input": (400, "invalid"),
        "unknown agent": (400, "unknown_agent"),
        "too large body": (413, "too_large"),
        "too large input": (413, "too_large"),
        "wrong method": (405, "method_not_allowed"),
        "wrong method on cancel": (405, "method_not_allowed"),
        "unknown route": (404, "not_found"),
        "malformed id": (404, "not_found"),
        "bad after": (400, "invalid"),
    }
    for name, answer in cases.items():
        status, code = expected[name]
        assert answer.status_code == status, name
        assert answer.headers["content-type"] == "application/json", name
        error = answer.json()["error"]
        assert error["code"] == code, name
        assert isinstance(error["message"], str), name
        assert error["message"], name
        assert error["retryable"] is False, name
    assert cases["no token"].headers["www-authenticate"] == "Bearer"
    assert cases["wrong method"].headers["allow"] == "POST"
    assert cases["wrong method on cancel"].headers["allow"] == "POST"
    assert "priority" in cases["unknown field"].json()["error"]["message"]
    assert no_secret(*h.texts, caplog.text)
    assert h.relay.statistics().refused["unauthorized"] == 2


async def test_submits_count_against_the_tokens_requests_per_minute(
    mock_clock: trio.testing.MockClock,
) -> None:
    tokens = [RelayToken(ALICE, name="alice", per_minute=2), RelayToken(BOB, name="bob")]
    async with harness(workers=False, tokens=tokens) as h:
        ok = [await h.submit(), await h.submit()]
        refused = await h.submit()
        bobs = await h.submit(BOB)
        await trio.sleep(61)
        later = await h.submit()
    assert [answer.status_code for answer in ok] == [201, 201]
    assert refused.status_code == 429
    assert refused.json()["error"] == {
        "code": "rate_limited",
        "message": "too many requests; try again later",
        "retryable": True,
    }
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert bobs.status_code == 201
    assert later.status_code == 201


async def test_open_event_streams_are_bounded_per_token(mock_clock: trio.testing.MockClock) -> None:
    async with harness(workers=False, limits=RelayJobLimits(max_streams=2)) as h:
        id = (await h.submit()).json()["id"]
        bobs = (await h.submit(BOB)).json()["id"]
        opened = trio.Semaphore(0)
        results: dict[str, httpx.Response] = {}

        async def hold(name: str, job: str, token: str, until: trio.Event) -> None:
            headers = {"authorization": f"Bearer {token}"}
            async with h.client.stream("GET", f"/v1/jobs/{job}/events", headers=headers) as s:
                results[name] = s
                opened.release()
                await until.wait()

        with trio.fail_after(120):
            release = trio.Event()
            async with trio.open_nursery() as nursery:
                for name in ("one", "two"):
                    nursery.start_soon(hold, name, id, ALICE, release)
                    await opened.acquire()
                third = (await h.events(id))[0]
                nursery.start_soon(hold, "bob", bobs, BOB, release)
                await opened.acquire()
                assert h.jobs.statistics().streams == 3
                release.set()
            await until(lambda: not h.jobs.statistics().streams)
            freed = trio.Event()
            freed.set()
            await hold("again", id, ALICE, freed)
    assert [results[name].status_code for name in ("one", "two", "bob", "again")] == [200] * 4
    assert third.status_code == 429
    assert third.json()["error"]["code"] == "too_many_streams"
    assert third.json()["error"]["retryable"] is True


async def test_a_failed_jobs_error_shows_its_type_and_never_the_upstreams_message(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness() as h:
        with trio.fail_after(120):
            id = (await h.submit(agent="broken", input="hi")).json()["id"]
            _, events, _ = await h.events(id)
            shown = (await h.call("GET", f"/v1/jobs/{id}")).json()
            record = await h.store.get(id)
    assert record is not None
    assert UPSTREAM_SECRET in (record.error or "")  # kept on the server, for its operator
    assert shown["status"] == "failed"
    assert shown["error"]["type"] == "ProviderError"
    assert events[-1]["kind"] == "failed"
    assert events[-1]["data"]["error"]["type"] == "ProviderError"
    assert no_secret(*h.texts)


async def test_close_ends_open_streams_properly_and_refuses_new_requests(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness(workers=False) as h:
        id = (await h.submit()).json()["id"]
        with trio.fail_after(120):
            ended: list[httpx.Response] = []

            async def follow() -> None:
                ended.append((await h.events(id))[0])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await until(lambda: h.jobs.statistics().streams > 0)
                h.relay.close()
            refused = await h.call("GET", f"/v1/jobs/{id}")
    # The stream ended as a whole response (httpx read it to its end without an error).
    assert ended[0].status_code == 200
    assert h.jobs.statistics().streams == 0
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutdown"


async def test_a_relay_that_knows_no_agents_admits_any_name(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with harness(workers=False, names=["calculator"]) as h:
        named = await h.submit()
        other = await h.submit(agent="writer")
    store = MemoryRunStore()
    relay = RelayServer(
        ScriptedProvider(), tokens=[RelayToken(ALICE, name="a")], jobs=RelayJobs(store)
    )
    async with trio.open_nursery() as nursery:
        (url,) = await nursery.start(functools.partial(serve, relay, port=0, ping_interval=None))
        async with httpx.AsyncClient(base_url=url) as client:
            anything = await client.post(
                "/v1/jobs",
                json={"agent": "known-to-the-workers", "input": "hi"},
                headers={"authorization": f"Bearer {ALICE}"},
            )
        nursery.cancel_scope.cancel()
    assert named.status_code == 201
    assert other.status_code == 400
    assert anything.status_code == 201


async def test_a_store_that_fails_is_a_json_error_without_its_text(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(workers=False) as h:
        id = (await h.submit()).json()["id"]
        with trio.fail_after(120):
            followed: list[Any] = []

            async def follow() -> None:
                followed.append(await h.events(id))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await until(lambda: h.jobs.statistics().streams > 0)
                await h.store.aclose()  # under the open stream, and every request after
            shown = await h.call("GET", f"/v1/jobs/{id}")
            submitted = await h.submit()
    # The stream ended (its client resumes after the last id it has); nothing hangs.
    assert followed[0][0].status_code == 200
    for answer in (shown, submitted):
        assert answer.status_code == 500
        assert answer.json()["error"]["code"] == "internal"
        assert "closed" not in answer.text
    assert "the store failed" in caplog.text


SEES = "sees" in attrs.fields_dict(RelayToken)
OPS = "ops-secret-0123456789abcdefgh"


@pytest.mark.skipif(not SEES, reason="RelayToken.sees comes with the relay's runs (i25-relayruns)")
async def test_a_token_that_sees_another_tokens_jobs_may_follow_and_control_them(
    mock_clock: trio.testing.MockClock,
) -> None:
    tokens = [
        RelayToken(ALICE, name="alice"),
        RelayToken(BOB, name="bob", sees=("alice",)),  # type: ignore[call-arg]
        RelayToken(OPS, name="ops", sees=("*",)),  # type: ignore[call-arg]
    ]
    async with harness(workers=False, tokens=tokens) as h:
        alices = (await h.submit()).json()["id"]
        bobs = (await h.submit(BOB)).json()["id"]
        outside = (await h.store.admit(AgentJob.ask("calculator", "hi"), now=0.0)).record.id
        seen = {
            "bob sees alice's": (await h.call("GET", f"/v1/jobs/{alices}", BOB)).status_code,
            "alice sees bob's": (await h.call("GET", f"/v1/jobs/{bobs}")).status_code,
            "ops sees bob's": (await h.call("GET", f"/v1/jobs/{bobs}", OPS)).status_code,
            "ops sees no token's": (await h.call("GET", f"/v1/jobs/{outside}", OPS)).status_code,
        }
        cancelled = await h.call("POST", f"/v1/jobs/{alices}/cancel", BOB)
    assert seen == {
        "bob sees alice's": 200,
        "alice sees bob's": 404,
        "ops sees bob's": 200,
        "ops sees no token's": 404,
    }
    assert cancelled.json()["status"] == "cancelled"
