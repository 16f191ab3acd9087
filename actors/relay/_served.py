"""The shared core of the protocols the relay serves besides its own -- AG-UI, the AI SDK's UI
message stream, OpenAI's chat completions, A2A: each route reads its request within the relay's
limits (:func:`read_request`), starts the run it asks for (:func:`start_run`) -- a call of the
relay's model, or a run of one of its agents (:class:`RelayAgents`) -- as a run of the relay
(the same unguessable id, log, tenancy, limits and accounting as every relayed request), and
answers with that run's events in its protocol's encoding (:func:`answer_stream`, or
:func:`wait_outcome` for a whole answer). The protocols' encoders are sans-IO, in
:mod:`protocols.serve`; what is here is the part that waits.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from protocols.errors import AgentsError, ConfigError
from protocols.history import estimate_messages
from protocols.live import TERMINAL, RunEvent
from protocols.messages import (
    AgentResult,
    Message,
    ProviderOptions,
    ProviderResult,
    Role,
    ToolDefinition,
    new_id,
)
from protocols.relay import ERROR_MESSAGES, HTTP_REQUEST_ID, RUN_ID_HEADER, loggable
from protocols.settings import ModelSettings

from .._core._errors import raises_one_cause
from ._admission import _Refused, _TokenState
from ._asgi import (
    Receive,
    Scope,
    Send,
    _bearer,
    _body,
    _cancel_on_disconnect,
    _Gone,
    _HttpOut,
    _server_sent_events,
)
from ._runs import _Run, pump_events
from ._session import _Failed, _stack

if TYPE_CHECKING:
    from .._runtime import Runtime
    from ..agent import AgentRun
    from ..durable import AgentRegistry
    from ._server import RelayServer

__all__ = ["RelayAgents"]

log = logging.getLogger("trio_agents.relay")

#: The HTTP status each refusal of the relay is answered with, by its code.
REFUSAL_STATUS: Mapping[str, int] = {
    "unauthorized": 401,
    "forbidden_origin": 403,
    "too_large": 413,
    "timeout": 408,
    "invalid": 400,
    "unknown_agent": 404,
    "shutdown": 503,
    "budget": 429,
    "too_many_streams": 429,
    "rate_limited": 429,
}

#: What a refusal says, by its code (fixed texts: nothing a client sent is quoted back).
REFUSAL_TEXT: Mapping[str, str] = {
    "unauthorized": "the relay token is missing or wrong",
    "forbidden_origin": "this origin may not use the relay",
    "too_large": "the request is over the relay's size limit",
    "timeout": "the request's body did not arrive in time",
    "invalid": "the request is malformed",
    "unknown_agent": "no agent of that name is served here",
    "shutdown": "the relay is shutting down",
    "budget": "this token's budget is spent",
    "too_many_streams": "this token has too many requests open",
    "rate_limited": "this token made too many requests in the last minute",
}

#: Turns that stopped for a client's tools that :class:`RelayAgents` keeps, to put them back
#: whole when the client answers (the latest ones), and the characters they may hold.
STOPPED_KEPT = 1000
STOPPED_CHARS = 16_000_000

#: Seconds an aborted agent run has to commit its partial and say it ended.
ABORT_GRACE = 5.0


class RelayAgents:
    """The agents a relay runs itself, in memory: ``RelayServer(provider, tokens=...,
    agents=RelayAgents(registry, runtime))``. The served protocols name them (``POST
    /v1/agui/{agent}``, ``POST /v1/chat/{agent}``, ``model="agent:NAME"``, A2A's agent
    cards); each request is a run of its own on a fresh agent of the
    :class:`~actors.durable.AgentSpec` (its provider shared), working on the history the
    client sent -- nothing of one request's conversation is kept for the next, as these
    protocols expect (the client holds the conversation). ``runtime`` is the
    :class:`~actors.Runtime` the agents run under; it must outlive the server's requests."""

    def __init__(self, registry: AgentRegistry, runtime: Runtime) -> None:
        from ..durable import AgentRegistry  # noqa: PLC0415

        if not isinstance(registry, AgentRegistry):
            raise ConfigError(f"agents must be an AgentRegistry, not {type(registry).__name__}")
        self.registry = registry
        self.runtime = runtime
        # The turns that stopped for a client's tools, by owner and open call ids: what the
        # client may not have been shown of them (the agent's own calls and their results).
        self._stopped: collections.OrderedDict[
            tuple[_TokenState, tuple[str, ...]], tuple[Message, ...]
        ] = collections.OrderedDict()
        self._stopped_chars = 0

    def _keep(self, owner: _TokenState, result: AgentResult) -> None:
        """Remember the turn ``result`` stopped in for the client's tools (at most
        :data:`STOPPED_KEPT` such turns holding :data:`STOPPED_CHARS` characters, the
        latest)."""
        calls = result.client_calls
        if not calls:
            return
        messages = result.messages
        start = max(i for i, m in enumerate(messages) if m.role == Role.ASSISTANT)
        key = (owner, tuple(sorted(call.id for call in calls)))
        self._drop(key)
        turn = self._stopped[key] = tuple(messages[start:])
        self._stopped_chars += _chars(turn)
        while self._stopped and (
            len(self._stopped) > STOPPED_KEPT or self._stopped_chars > STOPPED_CHARS
        ):
            self._drop(next(iter(self._stopped)))

    def _drop(self, key: tuple[_TokenState, tuple[str, ...]]) -> tuple[Message, ...] | None:
        turn = self._stopped.pop(key, None)
        if turn is not None:
            self._stopped_chars -= _chars(turn)
        return turn

    def _restore(self, owner: _TokenState, messages: Sequence[Message]) -> tuple[Message, ...]:
        """``messages`` with a turn that stopped for the client's tools whole again: a
        client that was shown only its own calls (an OpenAI client) sends back an assistant
        message with those alone; the agent's own calls of that turn, and their results, are
        put back in, so that the model reads its turn as it was."""
        out = list(messages)
        for index in range(len(out) - 1, -1, -1):
            message = out[index]
            if message.role != Role.ASSISTANT or not message.calls:
                continue
            key = (owner, tuple(sorted(call.id for call in message.calls)))
            kept = self._drop(key)
            if kept is not None and kept[0].calls != message.calls:
                out[index : index + 1] = kept
            break  # (only the latest assistant message can be such a turn)
        return tuple(out)

    def __contains__(self, name: object) -> bool:
        return name in self.registry

    def names(self) -> list[str]:
        """The names served, sorted."""
        return list(self.registry)

    def __repr__(self) -> str:
        return f"<RelayAgents {', '.join(self.registry) or 'none'}>"


def _chars(messages: Sequence[Message]) -> int:
    """About how much ``messages`` hold: their texts and calls, and a little per message."""
    return sum(
        64 + len(m.content) + len(m.thinking) + sum(len(str(c.arguments)) for c in m.calls)
        for m in messages
    )


class Refusal(Exception):
    """A request the relay refuses before any run: ``code`` (a key of :data:`REFUSAL_STATUS`)
    and the HTTP status; each route answers it in its own protocol's shape."""

    def __init__(self, code: str, message: str | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.status = REFUSAL_STATUS.get(code, 400)
        self.message = message if message is not None else REFUSAL_TEXT.get(code, code)


async def read_request(
    server: RelayServer,
    scope: Scope,
    headers: Mapping[str, str],
    receive: Receive,
    *,
    limit: int | None = None,
) -> tuple[_TokenState, bytes]:
    """The request's token holder and its whole body -- or :class:`Refusal`: a bad origin or
    token (checked before the body is read), a body over ``limit`` bytes (default: the
    relay's ``max_frame``; by its ``Content-Length`` before reading, else as it comes), one
    that takes over ``handshake_timeout`` seconds to arrive, or a server shutting down. The
    refusal is counted in the relay's statistics."""
    if server._closing:
        server._refuse("shutdown")
        raise Refusal("shutdown")
    if not server._origin_ok(scope, headers):
        server._refuse("forbidden_origin")
        raise Refusal("forbidden_origin")
    holder = server._holder(_bearer(headers))
    if holder is None:
        server._refuse("unauthorized")
        raise Refusal("unauthorized")
    return holder, await read_body(server, headers, receive, limit=limit)


async def read_body(
    server: RelayServer,
    headers: Mapping[str, str],
    receive: Receive,
    *,
    limit: int | None = None,
) -> bytes:
    """A request's whole body -- or :class:`Refusal` for one over ``limit`` bytes (default:
    the relay's ``max_frame``; by its ``Content-Length`` before reading, else as it comes) or
    one that takes over ``handshake_timeout`` seconds to arrive (counted in the relay's
    statistics); :class:`_Gone` when the client left first."""
    most = server.limits.max_frame if limit is None else limit
    length = headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > most):
        server._refuse("too_large")
        raise Refusal("too_large")
    body = bytearray()
    with trio.move_on_after(server.limits.handshake_timeout) as waited:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone  # (nothing to answer: the client is gone)
            body += message.get("body", b"")
            if len(body) > most:
                server._refuse("too_large")
                raise Refusal("too_large")
            if not message.get("more_body", False):
                break
    if waited.cancelled_caught:
        server._refuse("timeout")
        raise Refusal("timeout")
    return bytes(body)


def invalid(server: RelayServer, message: str) -> Refusal:
    """The refusal of a malformed request, saying what is wrong (``message``: the codec's
    words about the client's request, naming the field; it may quote a short value of the
    request back to its own client, never anything of the relay's or the upstream's)."""
    server._refuse("invalid")
    return Refusal("invalid", message)


def _known(server: RelayServer, agent: str | None) -> None:
    """Refuse (``unknown_agent``) an ``agent`` the relay does not serve (``None``: its model)."""
    agents = server.agents
    if agent is not None and (agents is None or agent not in agents):
        server._refuse("unknown_agent")
        raise Refusal("unknown_agent")


def start_run(
    server: RelayServer,
    holder: _TokenState,
    *,
    messages: Sequence[Message],
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    agent: str | None = None,
    outlives: bool = False,
    trace: Mapping[str, str] | None = None,
) -> _Run:
    """Start a run for ``holder``: a call of the relay's model with ``messages`` and the
    client's ``tools`` (the calls come back to the client, which runs them), or with
    ``agent`` a run of that agent of the relay's :class:`RelayAgents` on ``messages`` (its
    last user message and what follows it are the input, what comes before it the history;
    the client's ``tools`` are the run's ``client_tools``: a call of one ends the run for the
    client to answer; of ``options``, its settings override the agent's field by field).
    The run is admitted against the token's limits first (:class:`Refusal` when it is not)
    and runs as a task of its own: it ends however the request goes, its log ends with its
    terminal event, its slot is freed and its cost charged. ``outlives``: the run goes on if
    the client leaves (else :func:`answer_stream` cancels it when its client goes)."""
    agents: RelayAgents | None = server.agents
    if not messages:
        raise invalid(server, "messages: a run needs at least one message")
    _known(server, agent)
    if agent is not None and tools:
        assert agents is not None
        own = {tool.definition.name for tool in agents.registry.get(agent).tools}
        if any(tool.name in own for tool in tools):
            raise invalid(server, "a tool the client declares has the name of the agent's own")
    try:
        server._admit(holder)
    except _Refused as refused:
        server._refuse(refused.code)
        raise Refusal(refused.code) from None
    run = server._runs.open(holder, request_id=HTTP_REQUEST_ID, cancel_on_disconnect=not outlives)
    relay: Callable[[], Awaitable[object]]
    if agent is None:
        relay = functools.partial(
            server._run,
            run,
            holder,
            messages=messages,
            tools=tools,
            options=options,
            ask=None,  # no approvals over these protocols: an "ask" is denied
            trace=trace,
        )
    else:
        assert agents is not None
        relay = functools.partial(
            _agent_run,
            server,
            agents,
            run,
            holder,
            name=agent,
            messages=messages,
            tools=tools,
            settings=None if options is None else options.settings,
        )
    trio.lowlevel.spawn_system_task(
        _contained, relay, name="relay run", context=contextvars.copy_context()
    )
    return run


@raises_one_cause
async def _contained(relay: Any) -> None:
    """Run ``relay``; a failure is the run's (its log says so), never the server's."""
    try:
        await relay()
    except Exception as error:  # contained: logged, the server goes on
        log.warning("a served run failed: %s\n%s", type(error).__name__, _stack(error))


def _split(messages: Sequence[Message]) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """``messages`` as (history, input): the input is the last user message and what follows
    it (tool results the client sends back, say); with no user message, the last message."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return tuple(messages[:index]), tuple(messages[index:])
    return tuple(messages[:-1]), tuple(messages[-1:])


async def _agent_run(
    server: RelayServer,
    agents: RelayAgents,
    run: _Run,
    holder: _TokenState,
    *,
    name: str,
    messages: Sequence[Message],
    tools: Sequence[ToolDefinition],
    settings: ModelSettings | None,
) -> None:
    """Run agent ``name`` on ``messages`` as ``run``: its events copied into the run's log as
    they come. A cut -- a client's cancel or departure -- aborts the agent's run, which
    commits and ends ``cancelled`` with its partial; cut by the log's size or the shutdown,
    the log ends ``failed`` saying so. A failure of the run ends it ``failed`` with the
    error's class and code and a fixed text (what a provider said is logged, never sent)."""
    from ..agent import Agent  # noqa: PLC0415

    spec = agents.registry.get(name)
    messages = agents._restore(holder, messages)
    history, input = _split(messages)
    result: AgentResult | None = None
    server._scopes.add(run.scope)
    if server._closing:
        run.scope.cancel()
    try:
        options = dict(spec.options)
        if settings is not None:
            options["settings"] = ModelSettings.of(options.get("settings")).merge(settings)
        agent: Agent | None = None
        actor = f"{name}-{new_id()[:8]}"
        stream: AgentRun | None = None
        terminal: RunEvent | None = None
        try:
            with run.scope:
                agent = await Agent.start(
                    agents.runtime,
                    spec.provider,
                    system=spec.system,
                    tools=spec.tools,
                    authority=spec.authority,
                    # Its own actor's name: the agent's, and a suffix of its own (the runs
                    # of one agent go on at once, each on a fresh agent of the spec). The
                    # run's events and result say the agent's name alone.
                    name=actor,
                    **options,
                )
                stream = agent.stream(input, history=history, client_tools=tools)
                terminal = await _copy(run, stream.events(), names=(actor, name))
            if terminal is None and stream is not None:
                # Cut: the agent's run is aborted, commits its partial, and ends saying so.
                stream.abort()
                with trio.CancelScope(shield=True), trio.move_on_after(ABORT_GRACE):
                    terminal = await _copy(run, stream.events(after=run.last), log=False)
            terminal = _renamed(terminal, (actor, name)) if terminal is not None else None
            result = _result_of(terminal)
            if result is not None:
                agents._keep(holder, result)
            if terminal is not None and not run.ended and not run.too_large:
                if terminal.kind == "failed":
                    error = terminal.data.get("error")
                    said = error if isinstance(error, Mapping) else {}
                    run.add("failed", {"error": _said(said.get("type"), said.get("code"))})
                elif terminal.kind != "cancelled" or run.cancelled or not server._closing:
                    run.add(terminal.kind, terminal.data)
        finally:
            if agent is not None:
                with trio.CancelScope(shield=True):
                    await agent.aclose(cancel=True)
    except Exception as error:  # the run's failure, said in its log
        if not run.ended:
            run.add("failed", {"error": _error(error)})
    finally:
        server._scopes.discard(run.scope)
        if not run.ended:
            if run.too_large or server._closing:
                run.add("failed", {"error": _cut_error(run.too_large)})
            else:
                run.add("cancelled", {"result": result})
        run.outcome = result
        run.attached = None
        holder.open -= 1
        usage = result.total_usage if result is not None else None
        holder.spent += usage.total if usage is not None else estimate_messages(messages)
        server._runs.end(run)
        run.done.set()


async def _copy(
    run: _Run,
    events: AsyncIterator[RunEvent],
    *,
    log: bool = True,
    names: tuple[str, str] | None = None,
) -> RunEvent | None:
    """Copy the agent run's ``events`` into ``run``'s log (with ``log``) up to the terminal
    one, which is returned -- ``None`` when the log refused an event (the run is being cut:
    nothing more of it is logged). ``names``: (its actor's name, the name to show instead)."""
    async for event in events:
        if event.kind in TERMINAL:
            return event
        shown = _renamed(event, names) if names is not None and event.kind == "started" else event
        if log and run.add(shown.kind, shown.data) is None:
            return None
    return None


def _renamed(event: RunEvent, names: tuple[str, str]) -> RunEvent:
    """``event`` saying the agent's name where it says its actor's (``names``: the actor's,
    the agent's): a ``started`` event's, a result's."""
    actor, name = names
    data = event.data
    if data.get("agent") == actor:
        return attrs.evolve(event, data={**data, "agent": name})
    result = data.get("result")
    if isinstance(result, AgentResult) and result.agent == actor:
        return attrs.evolve(event, data={**data, "result": attrs.evolve(result, agent=name)})
    return event


def _result_of(terminal: RunEvent | None) -> AgentResult | None:
    value = None if terminal is None else terminal.data.get("result")
    return value if isinstance(value, AgentResult) else None


def _said(kind: object, code: object) -> dict[str, Any]:
    """A failed run's ``error`` data: its class and code, and a fixed text for them."""
    text = (
        f"the agent's run failed ({code})"
        if isinstance(code, str) and code
        else ("the agent's run failed")
    )
    return {
        "type": kind if isinstance(kind, str) and kind else "AgentsError",
        "code": code if isinstance(code, str) and code else "internal",
        "message": text,
        "retryable": False,
    }


def _error(error: Exception) -> dict[str, Any]:
    """The ``error`` data of a run that raised ``error``: logged with its message (which may
    quote a provider); sent with a fixed text."""
    if isinstance(error, AgentsError):
        log.info("an agent run of the relay failed: %s (%s)", error.code, loggable(error.message))
        return _said(type(error).__name__, error.code)
    log.warning("an agent run of the relay failed: %s\n%s", type(error).__name__, _stack(error))
    return _said("InternalError", "internal")


def _cut_error(too_large: bool) -> dict[str, Any]:
    """The ``error`` data of a run cut by its log's size or by the shutdown."""
    code = "run_too_large" if too_large else "shutdown"
    return {
        "type": "RelayError",
        "code": code,
        "message": ERROR_MESSAGES[code],
        "retryable": not too_large,
    }


class Encoding(Protocol):
    """A protocol's encoding of one run's events as the body of a streamed answer."""

    def head(self) -> bytes:
        """What the body starts with (before any event)."""

    def feed(self, events: Sequence[RunEvent]) -> bytes:
        """The body's bytes for ``events`` (the next ones of the run, in order)."""

    def tail(self) -> bytes:
        """What the body ends with, after the terminal event."""


class EventSource:
    """The :class:`Encoding` of a protocol whose encoder gives a run event's protocol events
    (``feed``) and the ones a body begins with (``start``), ``write`` putting them as bytes;
    ``end``: what the body ends with."""

    def __init__(
        self,
        start: Callable[[], Iterable[Any]],
        feed: Callable[[RunEvent], Iterable[Any]],
        write: Callable[[Iterable[Any]], bytes],
        end: bytes = b"",
    ) -> None:
        self._start, self._feed, self._write, self._end = start, feed, write, end

    def head(self) -> bytes:
        return self._write(self._start())

    def feed(self, events: Sequence[RunEvent]) -> bytes:
        feed = self._feed
        return self._write(item for event in events for item in feed(event))

    def tail(self) -> bytes:
        return self._end


async def answer_stream(
    server: RelayServer,
    run: _Run,
    encoding: Encoding,
    receive: Receive,
    send: Send,
    *,
    after: int = 0,
    headers: Sequence[tuple[bytes, bytes]] = (),
    grace: float | None = None,
) -> None:
    """Answer 200 with the run's events after ``after`` in ``encoding``, as they come, through
    the terminal one (a keep-alive comment after the relay's ``keepalive`` seconds of
    silence); a follower behind the log reads its ``gap`` as the encoding says. A client that
    leaves (or stops reading) cancels a run that does not outlive it; one that outlives it
    is cancelled ``grace`` seconds after its last follower left, unless one came back."""
    limits = server.limits

    async def pump(out: _HttpOut) -> None:
        head = encoding.head()
        if head:
            await out.put(_body(head))
        await pump_events(run, after, out, limits.keepalive, encoding.feed)
        tail = encoding.tail()
        if tail:
            await out.put(_body(tail))

    heads = [(RUN_ID_HEADER.encode(), run.run_id.encode()), *headers]
    left = False

    def leave() -> None:
        # Once, as soon as the client is gone or cut (not once the last write gives up: a
        # client that stopped reading leaves a write pending for a long while).
        nonlocal left
        if left:
            return
        left = True
        run.watchers -= 1
        if run.cancel_on_disconnect and not run.ended:
            run.cancel()  # its client left before its end: the run goes with it
        elif grace is not None and not run.ended and run.watchers == 0:
            trio.lowlevel.spawn_system_task(
                _orphaned, run, grace, name="relay run without followers"
            )

    async def follow(out: _HttpOut) -> None:
        try:
            await pump(out)
        except _Gone:
            leave()  # the client stopped reading: cut
            raise

    run.watchers += 1
    try:
        await _server_sent_events(send, receive, limits.send_timeout, heads, follow)
    finally:
        leave()


async def _orphaned(run: _Run, grace: float) -> None:
    """Cancel ``run`` if nobody follows it ``grace`` seconds from now (or it ends first)."""
    with trio.move_on_after(grace):
        await run.done.wait()
    if not run.ended and run.watchers == 0:
        log.info("relay run %s had no follower for %s s: cancelled", run.run_id, grace)
        run.cancel()


async def wait_outcome(run: _Run, receive: Receive) -> bool:
    """Wait for ``run`` to end; ``False`` when its client left first (the run is cancelled
    then, unless it outlives its client)."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
        await run.done.wait()
        nursery.cancel_scope.cancel()
    if not run.done.is_set():
        if run.cancel_on_disconnect:
            run.cancel()
        return False
    return True


def terminal_of(run: _Run) -> RunEvent | None:
    """The run's terminal event, once it has ended (``None`` before, or if the log dropped
    it -- it never does: the terminal event is the last one kept)."""
    if not run.ended:
        return None
    events = run.live.log.read(run.last - 1, 1)
    return events[-1] if events and events[-1].terminal else None


def outcome_of(run: _Run) -> ProviderResult | AgentResult | _Failed | None:
    """How ``run`` ended: the model's result, the agent's, the failure, or ``None`` (cut)."""
    outcome = run.outcome
    if isinstance(outcome, ProviderResult | AgentResult | _Failed):
        return outcome
    return None
