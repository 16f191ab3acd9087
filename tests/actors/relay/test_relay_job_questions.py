"""The relay's jobs API and a job's question (the ``ask_user`` tool), over real loopback HTTP:
the job shows its question, ``POST /v1/jobs/{id}/answers`` takes ``{"call_id", "answer"}``,
refuses (409, nothing written) an answer the question refuses and (400) one of the wrong shape,
and the job goes on with the answer. The harness is ``test_relay_jobs.py``'s (memory store, a
job queue's workers, trio's mock clock)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from test_relay_jobs import harness, kinds

from actors import ask_user
from actors.durable import AgentRegistry
from actors.testing import Reply, ScriptedProvider
from protocols.messages import ToolCall
from protocols.relay_jobs import decode_answers

ASKED = {"question": "How many?", "kind": "number", "min": 1, "max": 3, "integer": True}


@pytest.fixture(autouse=True)
def _autojump(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.05


def _agents(provider: ScriptedProvider) -> AgentRegistry:
    agents = AgentRegistry()
    agents.add("asker", provider, tools=[ask_user])
    return agents


async def test_a_jobs_question_is_shown_and_answered_over_http(
    mock_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider(
        Reply(calls=[ToolCall("q1", "ask_user", ASKED)]), Reply("Two, then.")
    )
    async with harness(_agents(provider)) as h:
        with trio.fail_after(120):
            id = (await h.submit(agent="asker", input="Order.")).json()["id"]
            _, asked, _ = await h.events(id)
            waiting = (await h.call("GET", f"/v1/jobs/{id}")).json()
            path = f"/v1/jobs/{id}/answers"
            out_of_range = await h.call("POST", path, json={"call_id": "q1", "answer": 7})
            wrong_shape = await h.call("POST", path, json={"call_id": "q1", "answer": {"n": 2}})
            still = (await h.call("GET", f"/v1/jobs/{id}")).json()
            answered = await h.call("POST", path, json={"call_id": "q1", "answer": 2})
            _, rest, _ = await h.events(id, headers={"last-event-id": str(asked[-1]["seq"])})
    question = {"prompt": "How many?", "kind": "number", "min": 1, "max": 3, "integer": True}
    assert kinds(asked)[-2:] == ["approval_requested", "awaiting_input"], asked
    assert asked[-1]["data"]["calls"] == [
        {"call_id": "q1", "tool": "ask_user", "reason": "How many?", "question": question}
    ]
    assert waiting["pending"] == [
        {"call_id": "q1", "tool": "ask_user", "reason": "How many?", "question": question}
    ]
    assert out_of_range.status_code == 409
    assert out_of_range.json()["error"]["code"] == "conflict"
    assert "answer refused: 7 is above 3" in out_of_range.json()["error"]["message"]
    assert wrong_shape.status_code == 400
    assert still == waiting  # nothing was written
    assert answered.status_code == 200
    assert answered.json()["status"] == "queued"
    answer = next(e for e in rest if e["kind"] == "approval_answered")
    assert answer["data"] == {"call_id": "q1", "allow": True, "reason": "", "answer": 2}
    assert rest[-1]["kind"] == "finished"
    assert provider.calls[1].messages[-1].content == "2"


def test_answers_decode_with_a_value_or_as_before() -> None:
    [plain] = decode_answers(b'{"call_id": "r1", "allow": true}')
    assert (plain.allow, plain.value) == (True, None)
    [typed] = decode_answers({"answers": [{"call_id": "q1", "answer": ["a", "b"]}]})
    assert (typed.allow, typed.value) == (True, ["a", "b"])
    [declined] = decode_answers({"call_id": "q1", "allow": False, "reason": "busy"})
    assert (declined.allow, declined.value) == (False, None)
    bad: list[Any] = [
        {"call_id": "q1", "allow": False, "answer": "x"},
        {"call_id": "q1", "answer": None},
        {"call_id": "q1", "answer": True},
        {"call_id": "q1", "answer": [1]},
    ]
    for body in bad:
        with pytest.raises(Exception, match="answer"):
            decode_answers(body)
