"""What a relay shares between its clients and what it does not (issue 24, item 6; written up
in docs/relay.md, "What clients share"): a relayed request carries its whole history, and the
relay keeps none -- one client's words never reach another's upstream call, whether or not
they hold the same token. Real websockets on loopback; every wait bounded by ``fail_after``."""

from __future__ import annotations

import trio

from actors import Agent, open_runtime
from actors.relay import RelayProvider, RelayServer, serve
from actors.testing import ScriptedProvider

TOKEN = "a-token-of-at-least-16-chars"
OTHER = "another-token-of-16-chars"
SECRET = "the vault code is 7431"
WITHIN = 60


async def test_one_clients_words_never_reach_another_clients_upstream_call() -> None:
    upstream = ScriptedProvider("Noted.", "I know no code.", "I know no code either.", "7431.")
    relay = RelayServer(upstream, tokens=[TOKEN, OTHER], page=False)
    with trio.fail_after(WITHIN):
        async with trio.open_nursery() as nursery:
            (address,) = await nursery.start(
                lambda task_status: serve(relay, port=0, task_status=task_status)
            )
            url = address.replace("http", "ws", 1) + "/v1/relay"
            async with (
                RelayProvider(url, token=TOKEN) as alice_model,
                RelayProvider(url, token=TOKEN) as bob_model,  # the same token, too
                RelayProvider(url, token=OTHER) as carol_model,
                open_runtime() as runtime,
            ):
                alice = await Agent.start(runtime, alice_model)
                bob = await Agent.start(runtime, bob_model)
                carol = await Agent.start(runtime, carol_model)
                await alice.generate(SECRET)
                await bob.generate("What is the code?")
                await carol.generate("What is the code?")
                # Alice's own agent keeps her conversation, and sends it again.
                assert (await alice.generate("And the code?")).content == "7431."
            nursery.cancel_scope.cancel()
    alice_first, bob_call, carol_call, alice_again = (call.messages for call in upstream.calls)
    assert [m.content for m in alice_first] == [SECRET]
    for call in (bob_call, carol_call):
        assert [m.content for m in call] == ["What is the code?"]
    assert [m.content for m in alice_again] == [SECRET, "Noted.", "And the code?"]
    assert relay.statistics().upstream_calls == 4
