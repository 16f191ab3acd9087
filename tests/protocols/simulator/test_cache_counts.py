"""The simulator's prompt cache (issue 27, section 3), pure: which prefixes a request offers,
and how a repeated prefix is reported -- Anthropic's read and write for marked prefixes,
OpenAI's cached tokens for any repeated one -- deterministic and bounded."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import ValidationError
from protocols.messages import Message, ProviderOptions, Usage
from protocols.simulator import PromptCache, SimRequest, answer, parse_request, response_body
from protocols.simulator._cache import CACHE_STEP
from protocols.wire import anthropic, openai_chat, openai_responses
from protocols.wire.anthropic import read_response as read_anthropic
from protocols.wire.openai_chat import read_response as read_chat
from protocols.wire.openai_responses import read_response as read_responses

WORDS = " ".join(["lorem"] * 200)  # 1,199 characters: 300 tokens by the estimate


def history(turns: int) -> list[Message]:
    """A conversation of ``turns`` exchanges, each about 600 tokens."""
    messages: list[Message] = []
    for number in range(turns):
        messages.append(Message.user(f"{number}: {WORDS}"))
        messages.append(Message.assistant(f"{number}: {WORDS}"))
    return messages


def parsed(vendor: str, messages: list[Message], **options: Any) -> SimRequest:
    module = {
        "anthropic": anthropic,
        "openai": openai_chat,
        "openai-responses": openai_responses,
    }[vendor]
    body = module.encode_request(
        messages, model="m", options=ProviderOptions(**options), stream=False
    )
    return parse_request(vendor, json.dumps(body))  # type: ignore[arg-type]


def served(cache: PromptCache, request: SimRequest) -> Usage:
    """The usage the simulator reports for ``request``, read back by the vendor's reader."""
    result = answer(request)
    result = attrs.evolve(result, usage=cache.use(request.vendor, request.prefixes, result.usage))
    body = response_body(request, result, seq=0)
    reader = {
        "anthropic": read_anthropic,
        "openai": read_chat,
        "openai-responses": read_responses,
    }[request.vendor]
    usage = reader(body).usage
    assert usage is not None
    assert usage.prompt == answer(request).usage.prompt  # the cache never changes the prompt
    return usage


def test_anthropic_writes_the_marked_prefix_then_reads_it_back() -> None:
    cache = PromptCache()
    past = history(3)
    first = served(cache, parsed("anthropic", [*past, Message.user("q1")]))
    assert first.cached == 0
    assert first.cache_write is not None
    assert first.cache_write >= 1800  # the whole history
    second_request = parsed(
        "anthropic", [*past, Message.user("q1"), Message.assistant("a1"), Message.user("q2")]
    )
    second = served(cache, second_request)
    assert second.cached == first.cache_write  # the first request's mark, read back
    assert second.cache_write == 1 + 1  # "q1" and "a1": from the read mark to the new one
    assert second.cached + second.cache_write + 1 == second.prompt  # and "q2" uncached
    # the same request again: everything up to its last mark is read, nothing written
    again = served(cache, second_request)
    assert (again.cached, again.cache_write) == (second.cached + second.cache_write, 0)


def test_anthropic_caches_nothing_unmarked_nor_short() -> None:
    cache = PromptCache()
    off = parsed("anthropic", [*history(3), Message.user("q")], cache="off")
    assert off.prefixes == ()
    assert served(cache, off).cached is None
    assert served(cache, off).cache_write is None
    short = parsed("anthropic", [Message.system("Be terse."), Message.user("hi")])
    assert len(short.prefixes) == 1  # marked, but under the minimum: no counts at all
    usage = served(cache, short)
    assert (usage.cached, usage.cache_write) == (None, None)
    assert len(cache) == 0
    small = PromptCache(min_tokens=1)
    assert served(small, short).cache_write == 3  # "Be terse.": 9 characters


def test_a_prefix_is_its_content_not_its_marks() -> None:
    past = history(2)
    document, reply = past[0], past[1]
    longer = [*past, Message.user("q"), Message.assistant("a"), Message.user("r")]
    one = parsed("anthropic", [*past, Message.user("q")], cache_breakpoints=[document.id])
    two = parsed("anthropic", longer, cache_breakpoints=[document.id, reply.id])
    three = parsed("anthropic", longer, cache_breakpoints=[reply.id])
    assert one.prefixes[0] == two.prefixes[0]  # the same content up to the mark
    assert two.prefixes[1] == three.prefixes[0]  # the document's mark is not content
    cache = PromptCache(min_tokens=64)
    assert served(cache, one).cache_write == one.prefixes[0].tokens
    usage = served(cache, two)
    assert usage.cached == one.prefixes[0].tokens
    assert usage.cache_write == two.prefixes[1].tokens - one.prefixes[0].tokens


def test_a_fifth_mark_or_a_malformed_one_is_refused_as_anthropic_does() -> None:
    turn = {
        "role": "user",
        "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}],
    }
    reply = {
        "role": "assistant",
        "content": [{"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}],
    }
    body = {"model": "m", "max_tokens": 9, "messages": [turn, reply, turn, reply, turn]}
    with pytest.raises(ValidationError, match="A maximum of 4 blocks with cache_control"):
        parse_request("anthropic", json.dumps(body))
    body["messages"] = [turn, reply, turn, reply]
    assert len(parse_request("anthropic", json.dumps(body)).prefixes) == 4
    body["system"] = [{"type": "text", "text": "s", "cache_control": {"type": "persistent"}}]
    with pytest.raises(ValidationError, match=r"system\[0\]\.cache_control must be"):
        parse_request("anthropic", json.dumps(body))


@pytest.mark.parametrize("vendor", ["openai", "openai-responses"])
def test_openai_reads_a_repeated_prefix_in_steps(vendor: str) -> None:
    cache = PromptCache()
    past = history(3)
    first = served(cache, parsed(vendor, [*past, Message.user("q1")]))
    assert first.cached == 0
    assert first.cache_write is None  # OpenAI bills no writes, and reports none
    second = served(
        cache,
        parsed(vendor, [*past, Message.user("q1"), Message.assistant("a1"), Message.user("q2")]),
    )
    assert second.cached is not None
    assert second.cached >= 1024
    assert (second.cached - 1024) % CACHE_STEP == 0
    assert second.prompt - second.cached < CACHE_STEP + 2 + 2 + 1
    # another cache key is another cache
    other = served(cache, parsed(vendor, [*past, Message.user("q1")], cache_key="tenant-2"))
    assert other.cached == 0


def test_a_short_openai_prompt_reports_as_before() -> None:
    cache = PromptCache()
    request = parsed("openai", [Message.user("hi")])
    for _ in range(2):
        assert served(cache, request).cached is None  # no prompt_tokens_details at all


def test_the_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    cache = PromptCache(min_tokens=1, capacity=3)
    requests = [parsed("openai", [Message.user(f"question {n}")]) for n in range(3)]
    for request in requests:
        served(cache, request)
    assert len(cache) == 3
    assert served(cache, requests[0]).cached  # used again: now the most recent
    served(cache, parsed("openai", [Message.user("another")]))  # pushes out requests[1]
    assert len(cache) == 3
    assert served(cache, requests[0]).cached
    assert served(cache, requests[1]).cached == 0
    with pytest.raises(ValidationError, match="capacity must be an int >= 1"):
        PromptCache(capacity=0)
    with pytest.raises(ValidationError, match="min_tokens must be an int >= 1"):
        PromptCache(min_tokens=True)


@given(
    turns=st.lists(st.text(max_size=3000), min_size=1, max_size=6),
    vendor=st.sampled_from(["anthropic", "openai", "openai-responses"]),
    repeats=st.integers(1, 3),
)
def test_counts_are_deterministic_and_never_exceed_the_prompt(
    turns: list[str], vendor: str, repeats: int
) -> None:
    messages = [
        Message.user(text) if index % 2 == 0 else Message.assistant(text)
        for index, text in enumerate(turns)
    ]
    if messages[-1].role.value == "assistant":
        messages.append(Message.user("and?"))
    request = parsed(vendor, messages)
    seen: list[list[Usage]] = []
    for _ in range(2):  # two simulators, the same requests: the same counts
        cache = PromptCache(min_tokens=64)
        seen.append([served(cache, request) for _ in range(repeats)])
    assert seen[0] == seen[1]
    for usage in seen[0]:
        assert (usage.cached or 0) + (usage.cache_write or 0) <= usage.prompt
