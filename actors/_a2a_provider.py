"""A remote A2A agent as a model (:meth:`A2AAgent.as_provider <actors.a2a.A2AAgent.as_provider>`):
each call is one task of the remote agent, sent the conversation so far, whose answer streams
as the call's content -- so that an :class:`~actors.Agent` on it is the remote agent in our
runtime, and :func:`~actors.handoff` (or anything that takes an agent) can hand it a turn.

The stream pulls the remote's Server-Sent Events itself, one delta at a time, as every provider
stream does; its cut (the caller's scope, leaving the block) cancels the remote task.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx
import trio

from protocols.errors import ProtocolError, ProviderError, SizeLimitError
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    ToolDefinition,
    new_id,
)
from protocols.serve import a2a as wire
from protocols.serve import a2a_client
from protocols.sse import SSEDecoder, SSEEvent

from .providers import ProviderStream, StreamingProvider, TextStream

if TYPE_CHECKING:
    from .a2a import A2AAgent

__all__ = ["A2AProvider"]

#: Characters of the conversation a call sends the remote agent at most (its latest part).
MAX_TRANSCRIPT = 100_000
#: Seconds a cut call's ``CancelTask`` may take.
CANCEL_WAIT = 3.0


def transcript(messages: Sequence[Message], most: int = MAX_TRANSCRIPT) -> str:
    """The conversation as the remote agent is told it: the last user message alone when it is
    the whole conversation; else each message a paragraph (``user: ...``, ``assistant: ...``,
    a tool's result as ``tool NAME: ...``; system prompts are ours, not sent), the latest
    ``most`` characters of it."""
    shown = [m for m in messages if m.role in (Role.USER, Role.ASSISTANT, Role.TOOL)]
    if len(shown) == 1 and shown[0].role == Role.USER:
        return shown[0].content[-most:]
    lines = []
    for message in shown:
        if message.role == Role.TOOL:
            lines.append(f"tool {message.name}: {message.content}")
        elif message.content:
            lines.append(f"{message.role.value}: {message.content}")
    return "\n\n".join(lines)[-most:]


class A2AProvider(StreamingProvider):
    """The remote agent ``remote`` as a model (see the module's docstring). It takes no tools
    (the remote agent has its own): a call given tools is refused, as is one whose task asks
    for input -- a model cannot ask; use :meth:`A2AAgent.as_tool` for an agent that does."""

    def __init__(self, remote: A2AAgent) -> None:
        self.remote = remote
        self.name = f"a2a:{remote.name}"

    def __repr__(self) -> str:
        return f"<A2AProvider {self.remote!r}>"

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        """One task of the remote agent, sent :func:`transcript` of ``messages``."""
        if tools:
            raise ProviderError(
                f"{self.name} takes no tools: the remote agent has its own", code="bad_request"
            )
        return _Stream(self.remote, transcript(messages))


class _Stream(TextStream):
    def __init__(self, remote: A2AAgent, text: str) -> None:
        super().__init__()
        self.remote = remote
        self.text = text
        self.task = a2a_client.RemoteTask(max_answer_chars=remote.max_answer_chars)
        self.where = f"the remote agent {remote.name!r}"
        self._response: httpx.Response | None = None
        self._chunks: collections.abc.AsyncIterator[bytes] | None = None
        self._decoder = SSEDecoder(max_event_size=remote.max_event_bytes)
        self._ready: collections.deque[str] = collections.deque()
        self._final = False
        self._closed = False

    def _fail(self, what: str, code: str = "upstream", *, retryable: bool = False) -> ProviderError:
        return ProviderError(f"{self.where}: {what}", code=code, retryable=retryable)

    async def _open(self) -> None:
        remote = self.remote
        if remote.closed:
            raise self._fail("its connection is closed", "bad_request")
        body = a2a_client.send_request(
            new_id(), [{"text": self.text}], message_id=new_id(), streaming=True
        )
        client = remote._client
        request = client.build_request(
            "POST", remote.endpoint, content=body, headers=remote._headers
        )
        try:
            with trio.fail_after(remote.timeout):
                response = await client.send(request, stream=True)
        except (trio.TooSlowError, httpx.HTTPError) as error:
            raise self._fail(f"unreachable ({type(error).__name__})", retryable=True) from None
        self._response = response
        if response.status_code != 200:
            raise self._fail(
                f"answered HTTP {response.status_code}", retryable=response.status_code >= 500
            )
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            raise self._fail("did not stream its answer (a card without streaming?)", "protocol")
        self._chunks = response.aiter_bytes()

    async def __anext__(self) -> Delta:
        while not self._ready:
            if self._final:
                self._finish()
                raise StopAsyncIteration
            if self._chunks is None:
                await self._open()
            assert self._chunks is not None
            chunk: bytes | None = None
            with trio.move_on_after(self.remote.idle_timeout) as waiting:
                try:
                    chunk = await anext(self._chunks, None)
                except httpx.HTTPError as error:
                    raise self._fail(
                        f"the stream broke ({type(error).__name__})", retryable=True
                    ) from None
            if waiting.cancelled_caught:
                raise self._fail(f"nothing came for {self.remote.idle_timeout:g} s", retryable=True)
            try:
                events = self._decoder.feed(chunk) if chunk is not None else self._decoder.close()
                for event in events:
                    if isinstance(event, SSEEvent):
                        self._take(event.data)
            except SizeLimitError as error:
                raise self._fail(error.message, "too_large") from None
            except ProtocolError as error:
                raise self._fail(
                    f"it sent what is not A2A 1.0: {error.message}", "protocol"
                ) from None
            if chunk is None and not self._final and not self._ready:
                raise self._fail("the stream ended before the task did", retryable=True)
        text = self._ready.popleft()
        self._content.append(text)
        return Delta("content", text)

    def _take(self, data: str) -> None:
        taken = self.task.take(data, stream=True)
        if isinstance(taken, wire.RpcError):
            raise self._fail(
                f"it refused the task: {taken.message} (A2A error {taken.code})", "bad_request"
            )
        self._ready.extend(text for text in taken.text if text)
        self._final = self._final or taken.final

    def _finish(self) -> None:
        view = self.task.view
        if view.state is wire.TaskState.COMPLETED:
            self._result = ProviderResult(content="".join(self._content), finish=FinishReason.STOP)
            return
        if view.state.interrupted:
            what = view.message.strip()[:200] or view.state.value
            raise self._fail(
                f"it asked for input ({what}), which a model cannot give: use it as a tool"
            )
        failure = self.task.failure()
        why = failure[1] if failure is not None else f"the task ended {view.state.value}"
        raise self._fail(why)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        response = self._response
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CANCEL_WAIT
            if response is not None:
                await response.aclose()
            task_id = self.task.task_id
            if task_id is not None and not self.task.view.state.terminal and not self.remote.closed:
                body = a2a_client.task_request(new_id(), "CancelTask", task_id)
                remote = self.remote
                try:
                    answer = await remote._client.post(
                        remote.endpoint, content=body, headers=remote._headers
                    )
                    await answer.aclose()
                except httpx.HTTPError:
                    pass  # (the remote is gone: its task with it, or it ends by itself)
