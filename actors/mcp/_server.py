"""An agent, or a tool registry, served as MCP tools over stdio or streamable HTTP."""

from __future__ import annotations

import hmac
import inspect
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import trio

from protocols.errors import AgentsError, ConfigError
from protocols.mcp import local_name, write_result
from protocols.messages import AgentResult, Message, ToolCall, ToolFailure, ToolResult
from protocols.relay import is_loopback

from .._core._errors import raises_one_cause
from .._request import _Request
from ..agent import Agent, RunOptions
from ..tools import CallableTool, ToolRegistry
from ._client import _sdk

if TYPE_CHECKING:
    from .._runtime import Runtime
    from ..conversation import Conversation

__all__ = ["PROMPT_SCHEMA", "mcp_server", "resolve_app", "serve_http", "serve_stdio"]

log = logging.getLogger("actors.mcp")

#: The input schema of an agent served as a tool: one prompt.
PROMPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "What to ask the agent."}},
    "required": ["prompt"],
    "additionalProperties": False,
}


def _agent_tool_name(agent: Agent, name: str | None) -> str:
    chosen = name if name is not None else agent.name
    local = local_name(chosen)
    if local is None:
        raise ConfigError(f"cannot serve the agent as an MCP tool named {chosen!r}")
    return local


#: The longest prompt an agent served as a tool takes, by default (in characters).
MAX_PROMPT_CHARS = 1_000_000


def mcp_server(
    target: Agent | ToolRegistry | Iterable[CallableTool],
    *,
    name: str = "trio-agents",
    tool_name: str | None = None,
    description: str | None = None,
    max_prompt_chars: int = MAX_PROMPT_CHARS,
    session_history: bool = False,
) -> Any:
    """An MCP server (the SDK's low-level ``Server``) whose tools are ``target``'s.

    * An :class:`~actors.Agent` is one tool, named ``tool_name`` or after the agent, taking
      ``{"prompt": str}`` (at most ``max_prompt_chars`` characters); a call is one run of the
      agent, answered with the run's text (and ``isError`` when the run fails or the prompt
      is refused). A client's cancellation cuts the run, which commits its
      partial as any cut run does.

      Clients are kept apart: a call never runs in the agent's own conversation (which the
      server never reads or changes). By default each call is a run on a fresh conversation
      of its own, as a delegation (``as_tool``) is; with ``session_history=True`` the calls
      of one MCP session share one conversation, made at the session's first call and
      stopped when the session ends, and run one at a time in order -- never one
      conversation for two sessions. (MCP 2026-07-28 has no sessions: a call of that
      protocol is a session of its own.) Calls run in their own tasks, as delegated runs do:
      calls of different sessions never wait for each other, :meth:`Agent.abort` cuts them,
      and the agent's listeners, statistics and tracing see them.
    * A :class:`~actors.tools.ToolRegistry` (or tools) is served tool for tool, with the
      definitions the registry gives models; a call goes through the registry's ``execute``
      (arguments validated, failures answered as ``isError`` results, never raised).
    """
    if isinstance(max_prompt_chars, bool) or not isinstance(max_prompt_chars, int):
        raise ConfigError("max_prompt_chars must be an integer >= 1")
    if max_prompt_chars < 1:
        raise ConfigError("max_prompt_chars must be an integer >= 1")
    _sdk()
    from mcp import types  # noqa: PLC0415
    from mcp.server.lowlevel import Server  # noqa: PLC0415

    if isinstance(target, Agent):
        agent = target
        exposed = _agent_tool_name(agent, tool_name)
        info = description or (
            f"Ask the agent {agent.name!r}; it answers in text (it may use its own tools)."
        )

        async def list_agent(ctx: Any, params: Any) -> Any:
            tool = types.Tool(name=exposed, description=info, input_schema=PROMPT_SCHEMA)
            return types.ListToolsResult(tools=[tool])

        served = _ServedAgent(agent, session_history=session_history)

        async def call_agent(ctx: Any, params: Any) -> Any:
            if params.name != exposed:
                return _error(types, f"unknown tool {params.name!r}; this server has {exposed!r}")
            prompt = (params.arguments or {}).get("prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                return _error(types, "the argument 'prompt' must be a non-empty string")
            if len(prompt) > max_prompt_chars:
                return _error(
                    types,
                    f"the prompt has {len(prompt)} characters; this server takes at most "
                    f"{max_prompt_chars}",
                )
            try:
                result = await served.run(ctx, prompt)
            except AgentsError as error:
                return _error(types, f"the run failed: {error}")
            answer = types.CallToolResult(
                content=[types.TextContent(type="text", text=result.content)],
                structured_content={
                    "content": result.content,
                    "stop": result.stop.value,
                    "turns": result.turns,
                },
            )
            return answer

        return Server(name, on_list_tools=list_agent, on_call_tool=call_agent)

    registry = target if isinstance(target, ToolRegistry) else ToolRegistry(target)
    if tool_name is not None or description is not None or session_history:
        raise ConfigError(
            "tool_name, description and session_history apply to an agent, not to a tool registry"
        )

    async def list_registry(ctx: Any, params: Any) -> Any:
        tools = [
            types.Tool(
                name=definition.name,
                description=definition.description or None,
                input_schema=definition.parameters,
            )
            for definition in registry.definitions()
        ]
        return types.ListToolsResult(tools=tools)

    async def call_registry(ctx: Any, params: Any) -> Any:
        call_id = f"mcp-{getattr(ctx, 'request_id', None) or 'call'}"
        result: ToolResult
        try:
            call = ToolCall(id=call_id, name=params.name, arguments=params.arguments or {})
        except AgentsError as error:
            result = ToolFailure(id=call_id, name=params.name or "unknown", error=str(error))
        else:
            (result,) = await registry.execute([call])
        return types.CallToolResult.model_validate(write_result(result))

    return Server(name, on_list_tools=list_registry, on_call_tool=call_registry)


#: Where a session's conversation is kept in the SDK's per-connection ``state``.
_SESSION_KEY = "trio_agents.session"


class _Session:
    """The conversation of one MCP session (made at its first call) and the lock that runs
    the session's calls one at a time, in order."""

    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.conversation: Conversation | None = None

    async def close(self) -> None:
        """The session ended: stop its conversation (it leaves the runtime)."""
        conversation, self.conversation = self.conversation, None
        if conversation is not None:
            with trio.CancelScope(shield=True):
                await conversation.stop()


class _ServedAgent:
    """How an agent served over MCP runs a call: in the call's own task (as a delegated run
    does), on a fresh conversation or on its session's."""

    def __init__(self, agent: Agent, *, session_history: bool) -> None:
        self.agent = agent
        self.session_history = session_history
        self._warned = False

    async def run(self, ctx: Any, prompt: str) -> AgentResult:
        agent = self.agent
        request = agent._traced(
            _Request(agent, (Message.user(prompt),), RunOptions(), None, history=())
        )
        session = self._session(ctx) if self.session_history else None
        if session is None:
            return await agent._execute_here(request)
        async with session.lock:
            if session.conversation is None:
                session.conversation = await agent._new_conversation((), compacting=True)
            request.history = None
            request.conversation = session.conversation
            return await agent._execute_here(request)

    def _session(self, ctx: Any) -> _Session | None:
        """The session of the call's MCP connection (made at its first call, closed with the
        connection); ``None`` when the SDK does not show the connection -- the call then gets
        a fresh conversation, never a shared one."""
        # The SDK gives every connection a ``state`` dict and an ``exit_stack`` unwound when it
        # closes, for handlers to keep per-connection state in; its low-level handlers reach
        # the connection only through the request's session (mcp 2.3).
        connection = getattr(getattr(ctx, "session", None), "_connection", None)
        state = getattr(connection, "state", None)
        exit_stack = getattr(connection, "exit_stack", None)
        if not isinstance(state, dict) or exit_stack is None:
            if not self._warned:
                self._warned = True
                log.warning(
                    "session_history: this mcp SDK does not show a call's connection; each "
                    "call runs on a fresh conversation"
                )
            return None
        session = state.get(_SESSION_KEY)
        if not isinstance(session, _Session):
            session = state[_SESSION_KEY] = _Session()
            exit_stack.push_async_callback(session.close)
        return session


def _error(types: Any, text: str) -> Any:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


@raises_one_cause
async def serve_stdio(server: Any) -> None:
    """Serve ``server`` (see :func:`mcp_server`) over this process's stdin and stdout until
    the client closes stdin."""
    from mcp.server.stdio import stdio_server  # noqa: PLC0415

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


@raises_one_cause
async def serve_http(
    server: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    path: str = "/mcp",
    token: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``server`` over streamable HTTP at ``http://host:port/path`` until cancelled;
    reports the URL it listens on through ``task_status`` (``nursery.start`` returns it).

    Binds to 127.0.0.1 unless told otherwise; on a loopback address, requests whose ``Host``
    or ``Origin`` is not a loopback one are refused (DNS-rebinding protection). With ``token``,
    every request must carry ``Authorization: Bearer <token>`` (compared in constant time) or
    is answered 401; serving beyond this machine (a host that is not a loopback one) without a
    token is refused with a :class:`~protocols.errors.ConfigError`: the tools would be anyone's.
    """
    import hypercorn.config  # noqa: PLC0415

    if not path.startswith("/"):
        raise ConfigError(f"the MCP path must start with '/': {path!r}")
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"an MCP server's token must have at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"serving MCP on {host}, beyond this machine, needs a token (token=, or --token): "
            "without one its tools would be anyone's"
        )
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    if token is not None:
        app = _BearerGate(app, token)
    config = hypercorn.config.Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = log
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(_serve, app, config)
        task_status.started(binds[0].rstrip("/") + path)


#: The fewest characters a bearer token of an MCP server may have.
MIN_TOKEN_CHARS = 16


class _BearerGate:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get a 401."""

    def __init__(self, app: Any, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            offered = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(offered, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain; charset=utf-8"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"a bearer token is needed\n"})
                return
        await self._app(scope, receive, send)


async def _serve(app: Any, config: Any, task_status: trio.TaskStatus[list[str]]) -> None:
    import hypercorn.trio  # noqa: PLC0415

    await hypercorn.trio.serve(app, config, task_status=task_status)


async def resolve_app(app: Any, runtime: Runtime) -> Agent | ToolRegistry:
    """What ``--app`` names, made ready to serve: an Agent, a ToolRegistry (or a list of
    tools, or one tool), or a function -- taking the runtime, or nothing; sync or async --
    returning one."""
    value = app
    if callable(value) and not isinstance(value, Agent | ToolRegistry | CallableTool):
        name = getattr(value, "__qualname__", type(value).__name__)
        try:
            wants_runtime = len(inspect.signature(value).parameters) >= 1
            value = value(runtime) if wants_runtime else value()
            if inspect.isawaitable(value):
                value = await value
        except (TypeError, ValueError, AgentsError) as error:
            raise ConfigError(
                f"--app: calling {name} failed: {type(error).__name__}: {error}"
            ) from error
    if isinstance(value, list | tuple) and all(isinstance(v, CallableTool) for v in value):
        value = ToolRegistry(value)
    elif isinstance(value, CallableTool) and not isinstance(value, Agent | ToolRegistry):
        value = ToolRegistry([value])  # one tool, served alone
    if not isinstance(value, Agent | ToolRegistry):
        raise ConfigError(
            "--app must name an Agent, a tool, a ToolRegistry or a list of tools, or a function "
            f"(taking the runtime, or nothing) that returns one; it gave {type(value).__name__}"
        )
    return value
