"""One system message on the wire, end to end (issue 23, 003 G19): an agent with its own system
prompt, given a system message in a run's input (which the conversation then keeps in its
history), sends every request of every adapter with exactly one system message, first: the
agent's prompt, then the history's system texts in order. Checked on what the Simulator
received over real loopback HTTP, per wire format."""

from __future__ import annotations

import pytest

from actors import Agent, open_runtime
from actors.providers import HTTPProvider
from actors.testing import Simulator
from protocols import Message


def adapter(simulator: Simulator, vendor: str) -> HTTPProvider:
    if vendor == "openai_chat":
        return simulator.openai()
    if vendor == "openai_responses":
        return simulator.openai_responses()
    if vendor == "anthropic":
        return simulator.anthropic()
    return simulator.ollama()


@pytest.mark.parametrize("vendor", ["openai_chat", "openai_responses", "anthropic", "ollama"])
async def test_a_system_message_in_the_input_joins_the_agents_prompt(vendor: str) -> None:
    async with Simulator() as simulator, open_runtime() as runtime:
        provider = adapter(simulator, vendor)
        agent = await Agent.start(runtime, provider, system="Be terse.")
        await agent.generate([Message.user("Hi"), Message.system("Answer in French.")])
        await agent.generate("And now?")  # the system message is in the history by now
        stored = await agent.conversation.messages()
        requests = simulator.requests
        await provider.aclose()
    assert [m.role.value for m in stored][:2] == ["user", "system"]  # history keeps it in place
    assert len(requests) == 2
    for request in requests:
        roles = [turn.role for turn in request.turns]
        assert roles.count("system") == 1, (vendor, roles)
        assert roles[0] == "system"
        assert request.turns[0].text == "Be terse.\n\nAnswer in French."
    assert [t.role for t in requests[1].turns] == ["system", "user", "assistant", "user"]
