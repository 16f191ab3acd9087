"""A remote A2A (Agent2Agent) agent, used like an agent of our own: :class:`A2AAgent`.

``async with A2AAgent(url, headers=...) as remote`` reads the remote's Agent Card (name,
description, skills, A2A 1.0 JSON-RPC endpoint); ``remote.as_tool()`` is a tool our agents call
with a task (``input``), as they call a local agent's :meth:`Agent.as_tool
<actors.agent.Agent.as_tool>`. A call is one remote task, streamed (``SendStreamingMessage``),
and a delegated run of the calling run, as a local agent's is:

* ``subagent_started`` / ``subagent_finished`` in the caller's log name its run id
  (``subagent:<call id>:<12 hex>``), whose log holds ``started``, the ``content`` deltas, a
  ``progress`` event per working status message, and a terminal event; the deltas reach the
  caller's stream as chunks tagged with the hop; the caller's listeners hear
  ``subagent_start`` / ``subagent_finish`` and, under the hop, ``start`` and ``finish``
  (``abort`` first when cut) or ``error``;
* it charges the caller's budget by estimate as it streams (the remote's own usage is not
  known), so a budget, a deadline or a cancel cuts it: a cut sends ``CancelTask`` (shielded,
  at most 3 s), and the caller records the call as interrupted;
* its result is the answer (the artifacts' text); a task that failed, was rejected or
  cancelled remotely, needs authentication or was lost is a failed result saying so;
* ``input-required`` goes to the calling run's approver (``Agent(approve=...)``), whose answer
  goes on with the same task (no approver: the call fails, the task is cancelled);
* a connection lost mid-stream is resubscribed once (``SubscribeToTask``; a task that ended
  meanwhile is read with ``GetTask``) before the call fails.

Everything the remote sends is size-limited. Headers (an API key) go only to the URL's origin
(or to ``endpoint=``), never into a ``repr``, an error or a log; ``egress=`` judges every
connection. A remote agent is not an :class:`~actors.Agent`, so it cannot be a ``handoff``
target (a handoff runs the target's turns here).
"""

from __future__ import annotations

import logging
import math
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NoReturn

import httpx
import trio

from protocols.accounting import BudgetMeter
from protocols.authority import Verdict
from protocols.egress import EgressPolicy, Refusal
from protocols.errors import AgentsError, Category, ConfigError, ProtocolError, SizeLimitError
from protocols.live import terminal_for
from protocols.messages import (
    AgentResult,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    Usage,
    new_id,
)
from protocols.serve import a2a as wire
from protocols.serve import a2a_client
from protocols.sse import SSEDecoder, SSEEvent
from protocols.toolschema import validate_arguments

from ._delegation import _PARAMETERS, _tool_name
from ._egress import guarded_transport
from ._run_context import RunStep
from ._run_loop import AgentEvent, Chunk
from ._tool_run import _tool_run
from .tools import _raised

if TYPE_CHECKING:
    from ._a2a_provider import A2AProvider
    from ._live import LiveRun
    from ._run_loop import _Run

__all__ = ["A2AAgent", "A2AError", "A2ATool"]

log = logging.getLogger("trio_agents.a2a")

#: How much of an error a failed result carries; of a remote's text a message shows.
_ERROR_LIMIT: Final = 2000
_SHOWN: Final = 300
#: The most of an error body read; the longest a cut waits for its ``CancelTask`` (seconds).
_EXCERPT: Final = 2048
_CANCEL_WAIT: Final = 3.0


class A2AError(AgentsError):
    """A remote A2A agent failed us: it could not be reached (``code="unreachable"``), refused
    a request (``"refused"``; ``rpc_code``: its JSON-RPC error code), answered an HTTP error
    (``"http_status"``, ``status``), sent a card that is not an A2A 1.0 one (``"bad_card"``),
    sent what is not A2A (``"protocol"``) or is over a limit (``"too_large"``), or its task
    ended other than completed (``"task_failed"``, ...) or was lost (``"lost"``). The message
    names the agent and its URL, never a header, a query or credentials."""

    default_code = "a2a"
    default_category = Category.PROVIDER

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        rpc_code: int | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.rpc_code, self.status = rpc_code, status


def _shown(url: str) -> str:
    """``url`` without credentials, query or fragment (which may hold a key)."""
    parts = urllib.parse.urlsplit(url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _origin(url: str) -> tuple[str, str | None, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _checked(url: object, what: str, egress: EgressPolicy | None) -> str:
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        _port = parts.port if parts is not None else None  # (raises for a port not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} must be an http(s) URL with a host, not {str(url)[:100]!r}")
    assert isinstance(url, str)
    refused = egress.check_url(url) if egress is not None else None
    if refused is not None:
        raise ConfigError(f"{what}: {refused}")
    return url


def _described(error: BaseException) -> str:
    text = str(error).strip()[:_SHOWN]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def _read(response: httpx.Response, limit: int, what: str = "") -> bytes:
    """At most ``limit`` bytes of ``response``'s body: more raises
    :class:`~protocols.errors.SizeLimitError` naming ``what`` -- or, with no ``what``, the
    first ``limit`` bytes are the answer."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            if not what:
                return bytes(body[:limit])
            raise SizeLimitError(what, limit=limit, size=len(body))
    return bytes(body)


async def _status_error(response: httpx.Response, who: str) -> A2AError:
    excerpt = (await _read(response, _EXCERPT)).decode("utf-8", "replace").strip()[:_SHOWN]
    message = f"{who} HTTP {response.status_code} {excerpt}".strip()
    return A2AError(message, code="http_status", status=response.status_code)


class A2AAgent:
    """A remote agent that speaks A2A 1.0 (JSON-RPC over HTTP, Server-Sent Events) at ``url``,
    the base URL its Agent Card is served under (:data:`~protocols.serve.a2a.CARD_PATH`).

    ``async with A2AAgent(url) as remote`` fetches the card (:meth:`fetch_card`) and closes the
    connections when left. Used without (:meth:`aclose` it then), it sends its requests to
    ``url`` itself, named ``name``. ``name`` and ``description`` override the card's;
    ``endpoint`` is the JSON-RPC URL to use instead of the card's (the card may not name one on
    another origin while ``headers`` are set). ``headers`` go with every request and are never
    shown. ``timeout``: seconds to connect and to get an answer's headers, and the bound of a
    card's fetch; ``idle_timeout``: seconds a stream may stay silent (keep-alives count)
    before it counts as lost. ``egress`` judges every connection. ``max_card_bytes``,
    ``max_event_bytes`` (one event, or an answer that is not a stream) and ``max_answer_chars``
    bound what the remote sends; ``max_questions`` the input-required rounds of one task.
    Raises :class:`~protocols.errors.ConfigError` for a URL that is not http(s) or that the
    egress policy refuses, headers that would replace the protocol's own, or a bad limit.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        description: str | None = None,
        endpoint: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        idle_timeout: float = 300.0,
        egress: EgressPolicy | None = None,
        max_card_bytes: int = 256 * 1024,
        max_event_bytes: int = 1024 * 1024,
        max_answer_chars: int = 200_000,
        max_questions: int = 8,
    ) -> None:
        self.url = _checked(url, "an A2A agent's URL", egress)
        self.endpoint = _checked(endpoint or url, "an A2A endpoint", egress)
        self._pinned, self._secret = endpoint is not None, bool(headers)
        headers = dict(headers or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise ConfigError("headers must map strings to strings")
        if {k.lower() for k in headers} & {k.lower() for k in a2a_client.CLIENT_HEADERS}:
            raise ConfigError(
                f"headers may not set {', '.join(a2a_client.CLIENT_HEADERS)}: the client's"
            )
        self._headers = {**a2a_client.CLIENT_HEADERS, **headers}
        for value, what in ((timeout, "timeout"), (idle_timeout, "idle_timeout")):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{what} must be a number of seconds > 0, not {value!r}")
        if math.isinf(timeout):
            raise ConfigError("timeout must be finite")
        self.timeout, self.idle_timeout = float(timeout), float(idle_timeout)
        limits = (max_card_bytes, max_event_bytes, max_answer_chars, max_questions)
        names = ("max_card_bytes", "max_event_bytes", "max_answer_chars", "max_questions")
        for value, what in zip(limits, names, strict=True):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{what} must be an integer >= 1, not {value!r}")
        self.max_card_bytes, self.max_event_bytes = max_card_bytes, max_event_bytes
        self.max_answer_chars, self.max_questions = max_answer_chars, max_questions
        self.egress = egress
        self._name, self._description = name, description
        #: The card, once fetched (:meth:`fetch_card`).
        self.card: a2a_client.RemoteCard | None = None
        #: :meth:`aclose` was called: calls fail, saying so.
        self.closed = False
        shown = _shown(self.url)

        def refuse(refusal: Refusal) -> A2AError:
            return A2AError(f"the A2A agent at {shown}: {refusal}", code="egress")

        limits_ = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        transport = None if egress is None else guarded_transport(egress, refuse, limits=limits_)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout, read=None),
            limits=limits_,
            transport=transport,
            follow_redirects=False,
            trust_env=False,
        )

    @property
    def name(self) -> str:
        """The agent's name: given, else its card's, else its URL's host."""
        card = self.card.name if self.card is not None else None
        return self._name or card or urllib.parse.urlsplit(self.url).hostname or "remote"

    @property
    def description(self) -> str:
        """What the agent does: given, else its card's (``""``: unknown)."""
        return self._description or (self.card.description if self.card is not None else "")

    @property
    def streaming(self) -> bool:
        """Its answers stream: its card says so (assumed without a card)."""
        return self.card is None or self.card.streaming

    def __repr__(self) -> str:
        return f"<A2AAgent {self.name!r} at {_shown(self.endpoint)}>"

    async def __aenter__(self) -> A2AAgent:
        try:
            await self.fetch_card()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (idempotent); a call made afterwards fails, saying so."""
        self.closed = True
        with trio.CancelScope(shield=True):
            await self._client.aclose()

    async def fetch_card(self) -> a2a_client.RemoteCard:
        """Fetch the Agent Card and take from it the name, description, skills and endpoint
        (unless given). Raises :class:`A2AError`: unreachable or slower than ``timeout``, an
        HTTP error, a card over ``max_card_bytes``, not an A2A 1.0 card, naming an endpoint on
        another origin while ``headers`` are set, or one that the egress policy refuses."""
        where = self.url.rstrip("/") + wire.CARD_PATH
        shown = _shown(where)
        headers = {**self._headers, "Accept": "application/json"}
        try:
            with trio.fail_after(self.timeout):
                async with self._client.stream("GET", where, headers=headers) as response:
                    if response.status_code != 200:
                        raise await _status_error(response, f"no agent card at {shown}:")
                    body = await _read(response, self.max_card_bytes, f"the card at {shown}")
        except SizeLimitError as error:
            raise A2AError(error.message, code="too_large") from None
        except trio.TooSlowError:
            message = f"no agent card from {shown} within {self.timeout:g} s"
            raise A2AError(message, code="unreachable") from None
        except httpx.HTTPError as error:
            message = f"could not fetch the agent card from {shown}: {_described(error)}"
            raise A2AError(message, code="unreachable") from None
        try:
            card = a2a_client.read_card(body, self.url)
        except ProtocolError as error:
            raise A2AError(f"{shown}: {error.message}", code="bad_card") from None
        if not self._pinned:
            if self._secret and _origin(card.url) != _origin(self.url):
                raise A2AError(
                    f"the card at {shown} names an endpoint on another origin "
                    f"({_shown(card.url)}), and headers go only to {_shown(self.url)}: pass "
                    "endpoint= to trust it",
                    code="bad_card",
                )
            refused = self.egress.check_url(card.url) if self.egress is not None else None
            if refused is not None:
                raise A2AError(f"the card's endpoint: {refused}", code="egress")
            self.endpoint = card.url
        self.card = card
        return card

    def as_provider(self) -> A2AProvider:
        """This remote agent as a model: each call a task of it, sent the conversation so far,
        its answer streamed (see :mod:`actors._a2a_provider`). An agent on it --
        ``await Agent.start(runtime, remote.as_provider(), name=...)`` -- is the remote agent
        in this runtime: a :func:`~actors.handoff` target, or anything that takes an agent."""
        from ._a2a_provider import A2AProvider  # noqa: PLC0415

        return A2AProvider(self)

    def as_tool(self, name: str | None = None, description: str | None = None) -> A2ATool:
        """A tool whose call is a task of this remote agent, as :meth:`Agent.as_tool
        <actors.agent.Agent.as_tool>` is a run of a local one (see the module docstring);
        named after the agent and described by its card unless ``name`` / ``description``."""
        return A2ATool(self, name=name, description=description)


class A2ATool:
    """A tool whose call is one task of ``remote`` (see :meth:`A2AAgent.as_tool`). Its one
    argument, ``input``, is the task's message; its result is the remote's answer, or a
    failure saying why there is none. It never raises but for the calling run's cut."""

    def __init__(
        self, remote: A2AAgent, *, name: str | None = None, description: str | None = None
    ) -> None:
        self.remote = remote
        skills = remote.card.skills if remote.card is not None else ()
        listed = "; ".join(f"{n}: {d}" if d else n for n, d in skills)
        about = remote.description.strip()
        text = description or (
            f"Ask the remote agent {remote.name!r} to do a task and get its answer. "
            + (f"It says of itself: {about} " if about else "")
            + (f"Its skills: {listed}. " if listed else "")
            + "It starts from only what you write in `input`."
        )
        text = text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 3] + "..."
        self._definition = ToolDefinition(name or _tool_name(remote.name), text, _PARAMETERS)

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told about the tool."""
        return self._definition

    def __repr__(self) -> str:
        return f"<A2ATool {self._definition.name} -> {self.remote!r}>"

    async def call(self, call: ToolCall) -> ToolResult:
        """Run one remote task for ``call``; every failure is a result, a cut propagates (and
        cancels the remote task)."""
        problems = validate_arguments(self._definition.parameters, call.arguments)
        if problems:
            return ToolFailure(call.id, call.name, "invalid arguments: " + "; ".join(problems))
        if self.remote.closed:
            text = f"not sent: the connection to the remote agent {self.remote.name!r} is closed"
            return ToolFailure(call.id, call.name, text)
        return await _Task(self.remote, call, _tool_run.get()).run(str(call.arguments["input"]))


class _Lost(Exception):
    """The answer ended or broke before the task's final event (``reached``: a response had
    begun)."""

    def __init__(self, reason: str, *, reached: bool = True) -> None:
        super().__init__(reason)
        self.reason, self.reached = reason, reached


class _Refused(Exception):
    """The remote answered a request with a JSON-RPC error (``args[0]``)."""


class _Task:
    """One call's remote task: its stream, what it showed, and its place in the caller's run."""

    def __init__(self, remote: A2AAgent, call: ToolCall, parent: _Run | None) -> None:
        self.remote, self.call, self.parent = remote, call, parent
        self.where = f"the remote agent {remote.name!r} ({_shown(remote.endpoint)})"
        self.child = f"subagent:{call.id}:{new_id()[:12]}"
        self.path = (RunStep(parent.run_id, call.id, remote.name),) if parent is not None else ()
        self.task = a2a_client.RemoteTask(max_answer_chars=remote.max_answer_chars)
        self.view = self.task.view
        self.shown = 0  # characters of the answer shown
        self.live: LiveRun | None = None
        self.meter: BudgetMeter | None = None
        if parent is not None and parent.meter is not None:
            self.meter = BudgetMeter(None, parents=(parent.meter,))

    async def run(self, text: str) -> ToolResult:
        call, parent = self.call, self.parent
        started, status = trio.current_time(), "error"
        self.begin()
        try:
            answer = await self.converse(text)
            status = "complete"
            self.end()
            return ToolSuccess(call.id, call.name, answer)
        except A2AError as error:
            failed = error
        except Exception as error:  # a bug: reported as a tool that raised is
            log.warning("the A2A call %r to %s failed", call.id, self.where, exc_info=True)
            report = _raised.get()
            if report is not None:
                report(call, error)
            failed = A2AError(f"{self.where}: {_described(error)}")
        except BaseException:  # cut with the calling run
            stop = parent.cut_reason() if parent is not None else StopReason.CANCELLED
            status = stop.value
            await self.abandon()
            self.end(stop)
            raise
        finally:
            self.finish(status, trio.current_time() - started)
        await self.abandon()
        self.end(failed=failed)
        text = failed.message
        text = text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 3] + "..."
        return ToolFailure(call.id, call.name, text)

    def fail(self, what: str, code: str = "task_failed") -> NoReturn:
        raise A2AError(f"{self.where}: {what}", code=code) from None

    # -- the conversation with the remote ---------------------------------------------------

    async def converse(self, text: str) -> str:
        """The remote's answer to ``text``: the task followed to its end, its questions put to
        the approver, a lost stream resubscribed once."""
        remote, task, streaming = self.remote, self.task, self.remote.streaming
        parts: list[dict[str, Any]] = [{"text": text}]
        body = a2a_client.send_request(new_id(), parts, message_id=new_id(), streaming=streaming)
        questions, lost_before, subscribing = 0, "", False
        while True:
            try:
                await self.exchange(body)
            except _Lost as lost:
                if task.task_id is None:
                    self.fail(
                        f"it could not be reached ({lost.reason})"
                        if not lost.reached
                        else f"the connection broke before the task began ({lost.reason})",
                        "lost" if lost.reached else "unreachable",
                    )
                if lost_before:
                    self.fail(
                        f"the connection broke ({lost_before}), and resubscribing failed "
                        f"({lost.reason}): the outcome of task {task.task_id} is unknown",
                        "lost",
                    )
                log.info("resubscribing to task %s of %s (%s)", task.task_id, self.where, lost)
                lost_before, subscribing = lost.reason, True
                body = a2a_client.task_request(new_id(), "SubscribeToTask", task.task_id)
                continue
            except _Refused as refused:
                error: wire.RpcError = refused.args[0]
                if not subscribing:
                    message = f"{self.where} refused the request: {error.message}"
                    message += f" (A2A error {error.code})"
                    raise A2AError(message, code="refused", rpc_code=error.code) from None
                await self.read_task()  # (a task that has ended refuses a subscription)
            if task.view.state is wire.TaskState.COMPLETED:
                return task.view.text
            failure = task.failure()
            if failure is not None:
                self.fail(failure[1], failure[0])
            questions += 1
            if questions > remote.max_questions:
                self.fail(f"it asked for input more than {remote.max_questions} times")
            parts = a2a_client.answer_parts(task.asked, *await self.ask())
            body = a2a_client.send_request(
                new_id(),
                parts,
                message_id=new_id(),
                task_id=task.task_id,
                context_id=task.context_id,
                streaming=streaming,
            )
            subscribing = False

    async def exchange(self, body: bytes) -> None:
        """Send ``body`` and take in its answer up to the task's final event. Raises
        :class:`_Lost` when the answer ends or breaks first, :class:`_Refused` for an error
        answer, :class:`A2AError` for an HTTP error or an answer that is not A2A."""
        remote = self.remote
        client = remote._client
        request = client.build_request(
            "POST", remote.endpoint, content=body, headers=remote._headers
        )
        try:
            with trio.fail_after(remote.timeout):
                response = await client.send(request, stream=True)
        except trio.TooSlowError:
            raise _Lost(f"no answer within {remote.timeout:g} s", reached=False) from None
        except httpx.HTTPError as error:
            raise _Lost(_described(error), reached=False) from None
        try:
            if response.status_code != 200:
                raise await _status_error(response, f"{self.where} answered")
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                await self.follow(response)
            elif not self.take(await _read(response, remote.max_event_bytes, "its answer"), False):
                raise _Lost(f"it answered before the task ended ({self.view.state.value})")
        except httpx.HTTPError as error:
            raise _Lost(_described(error)) from None
        except SizeLimitError as error:
            raise A2AError(f"{self.where}: {error.message}", code="too_large") from None
        finally:
            with trio.CancelScope(shield=True) as closing:
                closing.deadline = trio.current_time() + remote.timeout
                await response.aclose()

    async def follow(self, response: httpx.Response) -> None:
        """Take in a stream of events up to the task's final one."""
        idle = self.remote.idle_timeout
        decoder = SSEDecoder(max_event_size=self.remote.max_event_bytes)
        chunks = response.aiter_bytes()
        while True:
            chunk: bytes | None = None
            with trio.move_on_after(idle) as waiting:
                chunk = await anext(chunks, None)
            if waiting.cancelled_caught:
                raise _Lost(f"nothing came for {idle:g} s")
            try:
                events = decoder.feed(chunk) if chunk is not None else decoder.close()
            except SizeLimitError:
                raise
            except ProtocolError as error:  # (a stream cut mid-event)
                raise _Lost(error.message) from None
            for event in events:
                if isinstance(event, SSEEvent) and self.take(event.data):
                    return
            if chunk is None:
                raise _Lost("the stream ended before the task did")

    def take(self, data: bytes | str, stream: bool = True) -> bool:
        """Take in one event of a stream (or a whole answer), show what it adds to the answer;
        whether it ends the exchange."""
        try:
            taken = self.task.take(data, stream=stream)
        except SizeLimitError as error:
            self.fail(error.message, "too_large")
        except ProtocolError as error:
            self.fail(f"it sent what is not A2A 1.0: {error.message}", "protocol")
        if isinstance(taken, wire.RpcError):
            raise _Refused(taken)
        if taken.progress:
            self.progress(taken.progress[:_ERROR_LIMIT])
        for text in taken.text:
            self.content(text)
        return taken.final

    async def read_task(self) -> None:
        """Read the task as it is now (``GetTask``)."""
        assert self.task.task_id is not None
        try:
            await self.exchange(a2a_client.task_request(new_id(), "GetTask", self.task.task_id))
        except (_Lost, _Refused) as error:
            why = error.reason if isinstance(error, _Lost) else error.args[0].message
            self.fail(f"the outcome of task {self.task.task_id} is unknown ({why})", "lost")

    async def ask(self) -> tuple[bool, str]:
        """Put the remote's question to the calling run's approver: ``(allow, reason)``."""
        parent = self.parent
        question = self.view.message.strip()[:_ERROR_LIMIT] or "(no question given)"
        approve = parent.agent.approve if parent is not None else None
        if parent is None or approve is None:
            self.fail(
                f"it asked for input ({question[:_SHOWN]}) and this run has no approver to "
                "answer it",
                "input_required",
            )
        reason = f"the remote agent {self.remote.name!r} asks: {question}"
        parent.asked(self.call, reason)
        try:
            answer = await approve(self.call, Verdict("ask", None, "a2a", reason))
        except Exception as error:
            log.warning("the approver raised for %s; denying", self.where, exc_info=True)
            answer = (False, f"the approver failed ({type(error).__name__})")
        allow, why = (answer[0], str(answer[1])) if isinstance(answer, tuple) else (answer, "")
        parent.answered(self.call, bool(allow), why)
        return bool(allow), why

    async def abandon(self) -> None:
        """Cancel the remote task unless it has ended (shielded, at most ``_CANCEL_WAIT``
        seconds); a failure to is logged, never raised."""
        remote, task_id = self.remote, self.task.task_id
        if task_id is None or self.view.state.terminal or remote.closed:
            return
        body = a2a_client.task_request(new_id(), "CancelTask", task_id)
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + min(remote.timeout, _CANCEL_WAIT)
            try:
                async with remote._client.stream(
                    "POST", remote.endpoint, content=body, headers=remote._headers
                ) as response:
                    answer = a2a_client.read_response(await _read(response, remote.max_event_bytes))
                if isinstance(answer, wire.RpcError):
                    log.info("%s refused to cancel task %s: %s", self.where, task_id, answer)
            except (httpx.HTTPError, ProtocolError) as error:
                log.info("could not cancel task %s of %s: %s", task_id, self.where, error)
        if scope.cancelled_caught:
            log.info("cancelling task %s of %s took too long", task_id, self.where)

    # -- what the caller's run sees ---------------------------------------------------------

    def begin(self) -> None:
        parent = self.parent
        if parent is None:
            return
        runtime = parent.agent._runtime
        if runtime is not None:
            self.live = runtime.live.open(self.child)  # followed by its id from here on
            self.live.add("started", self.remote.name)
        parent.event("subagent_start", call=self.call, agent=self.remote.name, child=self.child)
        self.relay("start")

    def content(self, text: str) -> None:
        self.shown += len(text)
        seq = self.live.add("content", text) if self.live is not None else 0
        if self.parent is not None:
            self.parent.emit(Chunk("content", text, run_id=self.child, path=self.path, seq=seq))
        if self.meter is not None:
            self.meter.charge_content(text)  # a spent budget cuts the caller (and so this)

    def progress(self, text: str) -> None:
        live = self.live
        seq = live.add("progress", {"call_id": None, "text": text}) if live is not None else 0
        if self.parent is not None:
            self.parent.emit(Chunk("progress", text, run_id=self.child, path=self.path, seq=seq))
            self.relay("progress", text=text, data={})

    def relay(self, kind: Any, **fields: Any) -> None:
        if self.parent is not None:
            self.parent.relay(AgentEvent(kind, 1, run_id=self.child, path=self.path, **fields))

    def end(self, stop: StopReason = StopReason.COMPLETE, failed: A2AError | None = None) -> None:
        """The remote run's end, in its log and to the caller's listeners."""
        name = self.remote.name
        result = AgentResult(self.view.text, stop=stop, run_id=self.child, agent=name, usage=None)
        if self.live is not None and self.parent is not None:
            if failed is not None:
                error = {"type": "A2AError", "code": failed.code, "message": failed.message}
                self.live.add("failed", {"error": error})
            else:
                self.live.add(terminal_for(result), result)
            runtime = self.parent.agent._runtime
            if runtime is not None:
                runtime.live.end(self.child)
        if failed is not None:
            self.relay("error", error=failed)
            return
        if stop is not StopReason.COMPLETE:
            self.relay("abort", reason=stop.value, stop=stop)
        self.relay("finish", partial=result.partial, stop=stop)

    def finish(self, status: str, duration: float) -> None:
        """``subagent_finish``, with what the remote streamed as its (estimated) usage."""
        parent = self.parent
        if parent is None:
            return
        usage = self.meter.reconcile(None) if self.meter is not None else None
        if usage is None:
            tokens = -(-self.shown // 4)
            usage = Usage(completion=tokens, total=tokens)
        parent.delegated_to(usage, estimated=True)
        parent.event(
            "subagent_finish",
            call=self.call,
            agent=self.remote.name,
            child=self.child,
            status=status,
            duration=duration,
            usage=usage,
            estimated=True,
        )
