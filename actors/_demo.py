"""``trio-agents demo``: a real HTTP completion, streamed from the offline simulator."""

from __future__ import annotations

from typing import TextIO

import trio

from protocols.messages import Message, ProviderOptions, ProviderResult

from .testing import Simulator

__all__ = ["DEFAULT_PROMPT", "run_demo"]

#: What the demo asks when no prompt is given.
DEFAULT_PROMPT = "Please count to 12."

_DIM = "\x1b[2m"
_RESET = "\x1b[0m"


async def run_demo(
    out: TextIO,
    *,
    prompt: str = DEFAULT_PROMPT,
    interval: float = 0.05,
    think: bool = True,
    color: bool | None = None,
) -> ProviderResult:
    """Start a :class:`~actors.testing.Simulator`, stream one completion of ``prompt`` through
    :class:`~actors.providers.OpenAIChat` over loopback HTTP, and write it to ``out`` as it
    arrives: the model's thinking (dimmed on a terminal), then its answer, then the finish reason
    and usage. Returns the assembled result.

    ``interval`` is the simulator's pause between deltas in seconds; ``color`` defaults to
    whether ``out`` is a terminal. Nothing keeps running once it returns.
    """
    if color is None:
        color = out.isatty()
    dim, reset = (_DIM, _RESET) if color else ("", "")
    async with Simulator(interval=interval) as simulator:
        provider = simulator.openai(model="simulator")
        try:
            out.write(f"trio-agents demo: OpenAIChat -> simulator at {simulator.openai_base_url}\n")
            out.write(f"> {prompt}\n")
            options = ProviderOptions(extra={"reasoning_effort": "low"}) if think else None
            channel = None
            async with provider.stream([Message.user(prompt)], options=options) as stream:
                async for delta in stream:
                    if delta.channel != channel:
                        if channel is not None:
                            out.write(f"{reset}\n")
                        out.write(f"{dim}[thinking] " if delta.channel == "thinking" else "")
                        channel = delta.channel
                    out.write(delta.text)
                    out.flush()
            result: ProviderResult = stream.result
        finally:
            await provider.aclose()
    usage = result.usage
    counts = (
        f"{usage.prompt} prompt + {usage.completion} completion tokens"
        if usage is not None
        else "usage not reported"
    )
    out.write(f"{reset}\n-- finish: {result.finish}; {counts}\n")
    out.flush()
    return result


def main(*, prompt: str, interval: float, think: bool, out: TextIO) -> int:
    """Run the demo to completion (Ctrl-C stops it quietly); the exit status."""
    try:
        trio.run(lambda: run_demo(out, prompt=prompt, interval=interval, think=think))
    except KeyboardInterrupt:
        out.write("\ninterrupted\n")
        return 130
    return 0
