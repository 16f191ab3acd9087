"""Replay a recorded OpenAI-compatible streaming response through the sans-IO core.

The bytes below are what a chat-completions server sends for a model that reasons inline
(``<think>...</think>``), with a keep-alive comment and a usage record. The script feeds them to an
``SSEDecoder`` in awkward network-sized chunks, splits the reasoning out with a ``ThinkSplitter``,
and assembles a ``ProviderResult`` -- no event loop, no network.

Run: ``python examples/replay_stream.py``
"""

from __future__ import annotations

import random

from protocols import (
    Delta,
    FinishReason,
    ProtocolError,
    ProviderResult,
    SSEDecoder,
    SSEEvent,
    ThinkSplitter,
    Usage,
    dumpb,
    encode,
    loads,
)


def chunk(text: str) -> bytes:
    record = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + dumpb(record) + b"\n\n"


RECORDED = b"".join(
    [
        chunk("<think>The user asks 19 + 23."),
        b": keep-alive\n\n",
        chunk(" 19 + 23 = 42.</th"),
        chunk("ink>19 + 23 = "),
        chunk("42."),
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":21,"completion_tokens":17,"total_tokens":38}}\n\n',
        b"data: [DONE]\n\n",
    ]
)


def replay(stream: bytes, rng: random.Random) -> tuple[list[Delta], ProviderResult]:
    decoder, splitter = SSEDecoder(), ThinkSplitter()
    deltas: list[Delta] = []
    usage: Usage | None = None
    finish: FinishReason | None = None
    done = False
    position = 0
    while position < len(stream):
        size = rng.randint(1, 40)  # the network decides chunk boundaries, not the protocol
        items = decoder.feed(stream[position : position + size])
        position += size
        for item in items:
            if not isinstance(item, SSEEvent):
                continue  # a comment: the connection is alive, but nothing happened
            if item.data == "[DONE]":
                done = True
                continue
            record = loads(item.data)
            for choice in record["choices"]:
                deltas.extend(splitter.feed(choice["delta"].get("content") or ""))
                if choice["finish_reason"] == "stop":
                    finish = FinishReason.STOP
            if "usage" in record:
                reported = record["usage"]
                usage = Usage.sanitize(
                    prompt=reported.get("prompt_tokens"),
                    completion=reported.get("completion_tokens"),
                    total=reported.get("total_tokens"),
                )
    decoder.close()
    deltas.extend(splitter.flush())
    if not done or finish is None:
        raise ProtocolError("stream ended without its terminal record")
    result = ProviderResult(
        content=splitter.content, thinking=splitter.thinking, usage=usage, finish=finish
    )
    return deltas, result


def main() -> None:
    deltas, result = replay(RECORDED, random.Random(7))
    for delta in deltas:
        print(f"{delta.channel:>8}: {delta.text!r}")
    # -> thinking: 'The user asks 19 + 23.'
    # -> thinking: ' 19 + 23 = 42.'
    # ->  content: '19 + 23 = '
    # ->  content: '42.'
    print("result:", encode(result))
    # -> result: {"content":"19 + 23 = 42.","thinking":"The user asks 19 + 23. 19 + 23 = 42.",...}

    # Any other chunking of the same bytes assembles the same result.
    for seed in range(20):
        assert replay(RECORDED, random.Random(seed))[1] == result
    assert result.content == "19 + 23 = 42."


if __name__ == "__main__":
    main()
