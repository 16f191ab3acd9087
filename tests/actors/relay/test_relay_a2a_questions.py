"""A2A and a durable job's question (the ``ask_user`` tool): the task goes ``input-required``
with the question's text, and the next message on the task answers it -- its text read and
checked against the question (a refused answer is an error, and the task still waits) -- then
the task goes on to its end. Raw JSON-RPC over real loopback HTTP (httpx), the relay on
hypercorn, a job queue working the jobs in memory; blocking sends (nothing here sleeps)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from test_relay import TOKEN, Upstream, running, server

from actors import ask_user, open_runtime
from actors.durable import AgentRegistry, MemoryRunStore, open_job_queue
from actors.relay import RelayAgents, RelayJobs
from actors.testing import Reply, ScriptedProvider
from protocols.messages import ToolCall
from protocols.serve.a2a import A2AMessage, A2APart, approvals_of

SIZE = {"question": "Which size?", "kind": "choice", "options": ["S", "M", "L"]}
AUTH = {"authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def durable_relay(registry: AgentRegistry) -> AsyncIterator[tuple[str, MemoryRunStore]]:
    store = MemoryRunStore()
    async with (
        open_runtime() as runtime,
        open_job_queue(store, registry, runtime, concurrency=2, poll=0.05),
    ):
        app = server(
            Upstream(),
            agents=RelayAgents(registry, runtime),
            jobs=RelayJobs(store, agents=registry),
        )
        async with running(app) as url:
            yield url, store


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def message(text: str, task_id: str | None = None, message_id: str = "m1") -> dict[str, Any]:
    sent: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id is not None:
        sent["taskId"] = task_id
    return {"message": sent}


async def test_a_question_makes_the_task_input_required_and_the_next_message_answers_it() -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("q1", "ask_user", SIZE)]), Reply("One M shirt, ordered.")
    )
    registry = AgentRegistry()
    registry.add("shop", provider, tools=[ask_user])
    async with durable_relay(registry) as (url, store), httpx.AsyncClient(base_url=url) as client:
        with trio.fail_after(60):
            first = await client.post(
                "/a2a/shop", json=rpc("SendMessage", message("A shirt.")), headers=AUTH
            )
            # A blocking send answers once the task is interrupted (input-required) or ended.
            waiting = first.json()["result"]["task"]
            task_id = waiting["id"]
            wrong = await client.post(
                "/a2a/shop", json=rpc("SendMessage", message("XL", task_id, "m2")), headers=AUTH
            )
            still = await store.get(task_id)
            right = await client.post(
                "/a2a/shop", json=rpc("SendMessage", message(" M ", task_id, "m3")), headers=AUTH
            )
            assert "error" not in right.json(), right.json()
            done = right.json()["result"]["task"]
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    status_text = waiting["status"]["message"]["parts"][0]["text"]
    assert status_text.startswith("Which size? (expected: one of 'S', 'M', 'L'; reply with")
    assert wrong.json()["error"]["code"] == -32602
    assert "answer refused: 'XL' is not an option" in wrong.json()["error"]["message"]
    assert still is not None
    assert still.status.value == "awaiting_input"
    assert still.answers == ()
    record = await store.get(task_id)
    assert record is not None
    assert [(a.call_id, a.value) for a in record.answers] == [("q1", "M")]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert provider.calls[1].messages[-1].content == "M"


def test_a_data_part_answers_a_question_too() -> None:
    data = {"answers": [{"call_id": "q1", "answer": ["a", "b"]}, {"call_id": "r1", "allow": False}]}
    sent = A2AMessage("m", "user", (A2APart("data", data=data),), task_id="t")
    typed, approval = approvals_of(sent)
    assert (typed.call_id, typed.allow, typed.value) == ("q1", True, ["a", "b"])
    assert (approval.call_id, approval.allow, approval.value) == ("r1", False, None)
