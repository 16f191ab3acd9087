"""``ScriptedProvider``: a provider whose replies are written down in advance, step by step."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

import attrs
import trio

from protocols.errors import AgentsError, Category, ProviderError
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
    Usage,
)

from ..providers import ProviderStream, StreamingProvider, TextStream

__all__ = ["Fail", "Hang", "Reply", "ScriptExhausted", "ScriptedCall", "ScriptedProvider"]


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0, not {value!r}")


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


@attrs.frozen
class Reply:
    """One scripted answer.

    ``text`` and ``thinking`` are streamed as deltas in pieces of ``chunk`` characters (code
    points; 0 means one delta each), thinking first; ``delay`` seconds of trio time pass before
    each delta (so ``autojump_clock`` tests run instantly). ``calls``, ``usage`` and ``finish``
    go into the result (``finish`` defaults to ``tool_calls`` when there are calls, else
    ``stop``), and so does ``denied`` (calls the provider side refused, as a relay's policy
    would), and ``model`` and ``response_id`` (what a vendor reports answered, and its id of the
    response; ``None``: not reported).
    """

    text: str = ""
    thinking: str = ""
    calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    usage: Usage | None = None
    finish: FinishReason | None = None
    chunk: int = 0
    delay: float = attrs.field(default=0.0, validator=_non_negative)
    denied: dict[str, str] = attrs.field(factory=dict)
    model: str | None = None
    response_id: str | None = None


@attrs.frozen
class Fail:
    """The call fails with ``error`` before any delta (a ``ProviderError`` by default), after
    ``delay`` seconds of trio time."""

    error: BaseException = attrs.field(
        factory=lambda: ProviderError("scripted failure", code="scripted", retryable=False)
    )
    delay: float = attrs.field(default=0.0, validator=_non_negative)


@attrs.frozen
class Hang:
    """The call never answers (until the caller's scope cancels it), after streaming ``text``."""

    text: str = ""


Step = Reply | Fail | Hang


@attrs.frozen
class ScriptedCall:
    """What one call to the provider was given."""

    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...]
    options: ProviderOptions | None


class ScriptExhausted(AgentsError):
    """The provider was called more times than its script has steps."""

    default_code = "script_exhausted"
    default_category = Category.USER


def _pieces(text: str, size: int) -> list[str]:
    if not text:
        return []
    if size <= 0:
        return [text]
    return [text[start : start + size] for start in range(0, len(text), size)]


class _ScriptedStream(TextStream):
    def __init__(self, provider: ScriptedProvider, call: ScriptedCall) -> None:
        super().__init__()
        self._provider = provider
        self._call = call
        self._step: Step | None = None
        self._queue: deque[Delta] = deque()
        self._delay = 0.0
        self._started = False

    async def __anext__(self) -> Delta:
        if not self._started:
            self._started = True
            self._begin()
        step = self._step
        if isinstance(step, Fail):
            await trio.sleep(step.delay)
            raise step.error
        if not self._queue:
            if isinstance(step, Hang):
                await trio.sleep_forever()
            if self._result is None:
                assert isinstance(step, Reply)
                default = FinishReason.TOOL_CALLS if step.calls else FinishReason.STOP
                self._result = ProviderResult(
                    content="".join(self._content),
                    thinking="".join(self._thinking),
                    calls=step.calls,
                    usage=step.usage,
                    finish=step.finish or default,
                    denied=step.denied,
                    model=step.model,
                    response_id=step.response_id,
                )
            raise StopAsyncIteration
        await trio.sleep(self._delay)
        delta = self._queue.popleft()
        (self._content if delta.channel == "content" else self._thinking).append(delta.text)
        return delta

    def _begin(self) -> None:
        provider = self._provider
        provider.calls.append(self._call)
        if not provider._script:
            raise ScriptExhausted(
                f"the scripted provider was called {len(provider.calls)} times but its script "
                f"has only {provider.steps} steps"
            )
        step = self._step = provider._script.popleft()
        if isinstance(step, Reply):
            self._delay = step.delay
            self._queue.extend(
                Delta("thinking", piece) for piece in _pieces(step.thinking, step.chunk)
            )
            self._queue.extend(Delta("content", piece) for piece in _pieces(step.text, step.chunk))
        elif isinstance(step, Hang):
            self._queue.extend(Delta("content", piece) for piece in _pieces(step.text, 0))

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class ScriptedProvider(StreamingProvider):
    """A provider that answers from a script, one step per call, for tests and examples.

    Steps are :class:`Reply`, :class:`Fail`, :class:`Hang`, or a plain string (a :class:`Reply`
    with that text). ``calls`` records what every call was given, in order. A call beyond the
    end of the script raises :class:`ScriptExhausted`. It implements the same interface as the
    HTTP providers, including cancellation: a cancel while streaming raises ``trio.Cancelled``
    and ``stream.partial`` keeps what was streamed.
    """

    name = "scripted"

    def __init__(self, *steps: Step | str) -> None:
        self._script: deque[Step] = deque(
            Reply(step) if isinstance(step, str) else step for step in steps
        )
        self.steps = len(self._script)
        self.calls: list[ScriptedCall] = []

    @property
    def remaining(self) -> int:
        """Steps not used yet."""
        return len(self._script)

    def extend(self, steps: Iterable[Step | str]) -> None:
        """Append more steps to the script."""
        for step in steps:
            self._script.append(Reply(step) if isinstance(step, str) else step)
            self.steps += 1

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        """Stream the next step of the script (see :class:`ProviderStream`)."""
        return _ScriptedStream(self, ScriptedCall(tuple(messages), tuple(tools or ()), options))
