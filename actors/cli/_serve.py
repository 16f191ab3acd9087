"""``trio-agents serve``: run a relay (with its browser chat page) in front of the simulator or a
real OpenAI-compatible endpoint -- and, with ``--store URL``, the durable jobs API on that store,
with workers of its own (``--workers``) and the agents ``--app`` names (by default one,
``assistant``, on the relay's model)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO

import trio

from protocols.relay import is_loopback, parse_origin, split_host

from .._runtime import Runtime, open_runtime
from ..durable import AgentRegistry, open_job_queue, open_run_store
from ..durable._open import check_store_url
from ..providers import OpenAIChat, StreamingProvider
from ..relay import RelayAgents, RelayJobs, RelayLimits, RelayServer, RelayToken, serve
from ..relay._serve import GRACE
from ..testing import Simulator
from ._demo import Endpoint

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_WORKERS",
    "GRACE",
    "TOKEN_ENV",
    "Jobs",
    "main",
    "run",
]

#: Where ``serve`` reads its bearer token when ``--token`` is not given.
TOKEN_ENV = "TRIO_AGENTS_RELAY_TOKEN"

#: The agent ``serve --store`` serves when ``--app`` names none: on the relay's model.
DEFAULT_AGENT = "assistant"

#: Jobs ``serve --store`` runs at once itself unless ``--workers`` says otherwise.
DEFAULT_WORKERS = 4


class Jobs:
    """What ``serve --store`` serves: the store ``url``, the agents of ``app`` (``MODULE:ATTR``
    as a worker's ``--app`` takes it: an :class:`~actors.durable.AgentRegistry`, or a function
    given the runtime (or nothing) that returns one; ``None``: :data:`DEFAULT_AGENT` on the
    relay's model), and ``workers``: jobs run at once in this process (0: none -- ``trio-agents
    worker`` processes on the same store run them)."""

    def __init__(self, url: str, *, app: str | None = None, workers: int = DEFAULT_WORKERS) -> None:
        from ._jobs import load_app  # noqa: PLC0415

        check_store_url(url)  # a bad URL, or an --app that cannot be had, fails before serving
        self.url = url
        self.app = app
        self.target: Any = None if app is None else load_app(app)
        self.workers = workers


async def _agents(
    app: str | None, target: Any, upstream: StreamingProvider, runtime: Runtime
) -> AgentRegistry:
    """The agents the relay serves: those of ``app`` (``MODULE:ATTR``, loaded as ``target``),
    else :data:`DEFAULT_AGENT` on the relay's model."""
    from ._demo import SYSTEM, add  # noqa: PLC0415
    from ._jobs import _registry  # noqa: PLC0415

    if app is not None:
        return await _registry(app, target, runtime)
    registry = AgentRegistry()
    registry.add(DEFAULT_AGENT, upstream, system=SYSTEM, tools=[add], limit=6)
    return registry


@contextlib.asynccontextmanager
async def _serving_jobs(
    jobs: Jobs, agents: AgentRegistry, runtime: Runtime, grace: float
) -> AsyncIterator[tuple[RelayJobs, str]]:
    """The relay's jobs API over ``jobs``' store, with its workers running ``agents``; and the
    line that says so. Leaving stops the workers (running jobs get ``grace`` seconds, then are
    cut: another worker continues them once their leases expire) and closes the store."""
    from .._postgres import redacted  # noqa: PLC0415

    store = await open_run_store(jobs.url)
    try:
        async with contextlib.AsyncExitStack() as stack:
            registry: AgentRegistry | None
            if jobs.app is not None or jobs.workers:
                registry = agents
            else:
                registry = None  # the workers elsewhere know the agents: any name is admitted
            if jobs.workers:
                queue = await stack.enter_async_context(
                    open_job_queue(store, agents, runtime, concurrency=jobs.workers)
                )

                async def drain() -> None:
                    queue.stop_taking()
                    with trio.move_on_after(grace):
                        await queue.wait_idle()

                stack.push_async_callback(drain)
            names = ", ".join(registry) if registry is not None else "any (not checked here)"
            workers = (
                f"{jobs.workers} worker{'s' if jobs.workers != 1 else ''} here"
                if jobs.workers
                else "no workers here: run trio-agents worker on the store"
            )
            line = f"durable jobs on {redacted(jobs.url)} (agents: {names}; {workers})"
            yield RelayJobs(store, agents=registry), line
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


def _token(given: str | None) -> tuple[str, bool]:
    """The token to accept, and whether it was made up here (then it is shown once)."""
    token = given or os.environ.get(TOKEN_ENV)
    if token:
        return token, False
    return secrets.token_urlsafe(24), True


@contextlib.asynccontextmanager
async def _upstream(
    endpoint: Endpoint | None, interval: float
) -> AsyncIterator[tuple[StreamingProvider, str]]:
    """The provider to relay to, and where it is. The simulator runs only when no endpoint is
    given."""
    async with contextlib.AsyncExitStack() as stack:
        if endpoint is None:
            simulator = await stack.enter_async_context(Simulator(interval=interval))
            provider: StreamingProvider = simulator.openai()
            where = "the offline simulator"
        else:
            provider, where = endpoint.provider(), endpoint.where
        try:
            yield provider, where
        finally:
            if isinstance(provider, OpenAIChat):  # its HTTP connections
                await provider.aclose()


async def run(
    *,
    host: str,
    port: int,
    token: str,
    origins: Sequence[str] | None,
    endpoint: Endpoint | None,
    interval: float,
    max_frame: int,
    out: TextIO,
    shown: bool,
    signals: bool = False,
    grace: float = GRACE,
    allowed_hosts: Sequence[str] | None = None,
    max_tokens: int | None = None,
    jobs: Jobs | None = None,
    app: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, or, with ``signals``, until SIGINT or SIGTERM: then open requests
    get their ``shutdown`` frame or line (websockets close with 1001) within ``grace``
    seconds, and it returns. ``task_status`` gets the page's URL once it is up. ``max_tokens``:
    the relay's cap on a request's output tokens (see :class:`~actors.relay.RelayLimits`).
    ``jobs``: also serve durable jobs under ``/v1/jobs`` (see :class:`Jobs`); on the way out
    its workers' running jobs get ``grace`` seconds to end. ``app``: the agents served
    (``MODULE:ATTR``, as a worker's ``--app``; default: :data:`DEFAULT_AGENT` on the relay's
    model) -- run in memory for the protocols that name an agent, and by the jobs' workers."""
    from ._jobs import load_app  # noqa: PLC0415

    if jobs is not None and jobs.app is not None:
        app, target = jobs.app, jobs.target
    else:
        target = None if app is None else load_app(app)

    async def signalled() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
            async for _ in received:
                return

    async with (
        _upstream(endpoint, interval) as (upstream, where),
        open_runtime() as runtime,
        contextlib.AsyncExitStack() as stack,
    ):
        registry = await _agents(app, target, upstream, runtime)
        served: RelayJobs | None = None
        said = None
        if jobs is not None:
            served, said = await stack.enter_async_context(
                _serving_jobs(jobs, registry, runtime, grace)
            )
        server = RelayServer(
            upstream,
            tokens=[RelayToken(token, name="serve")],
            origins=origins,
            allowed_hosts=allowed_hosts or (),
            limits=RelayLimits(max_frame=max_frame, max_tokens=max_tokens),
            jobs=served,
            agents=RelayAgents(registry, runtime),
        )
        async with trio.open_nursery() as nursery:
            bound: list[str] = await nursery.start(
                lambda task_status: serve(
                    server,
                    host=host,
                    port=port,
                    max_frame=max_frame,
                    shutdown=signalled if signals else None,
                    grace=grace,
                    task_status=task_status,
                )
            )
            url = bound[0] + "/"
            print(f"relay for {where} at {url}", file=out)
            print(f"websocket: {bound[0].replace('http', 'ws', 1)}/v1/relay", file=out)
            print(
                f"agents: {', '.join(registry)} -- OpenAI at {bound[0]}/v1 (model agent:NAME), "
                f"AG-UI at {bound[0]}/v1/agui/NAME, AI SDK at {bound[0]}/v1/chat/NAME, "
                f"A2A at {bound[0]}/a2a/NAME",
                file=out,
            )
            if said is not None:
                print(f"{said}: {bound[0]}/v1/jobs", file=out)
            if max_tokens is not None:
                print(f"output tokens capped at {max_tokens} per request", file=out)
            if shown:
                print(f"token (made up for this run): {token}", file=out)
            out.flush()
            task_status.started(url)
        # serve() returned: a signal came, and the graceful shutdown is done.
        print("stopped", file=out)
        out.flush()


def _check(
    host: str, origins: Sequence[str] | None, allowed_hosts: Sequence[str] | None
) -> str | None:
    """What is wrong with the options, in one line (None: nothing)."""
    for origin in origins or ():
        if parse_origin(origin) is None:
            return (
                f"--origin {origin!r} is not an origin: write scheme://host[:port] "
                "with http or https and no path, e.g. https://relay.example.com"
            )
    for name in allowed_hosts or ():
        if split_host(name) is None:
            return (
                f"--allowed-host {name!r} is not a host name: write name or name:port "
                "(an IPv6 address in brackets), e.g. relay.example.com"
            )
    if not host:
        return "--host must not be empty"
    return None


def main(
    *,
    host: str,
    port: int,
    token: str | None,
    origins: Sequence[str] | None,
    endpoint: Endpoint | None,
    interval: float,
    max_frame: int,
    grace: float = GRACE,
    allowed_hosts: Sequence[str] | None = None,
    max_tokens: int | None = None,
    store: str | None = None,
    app: str | None = None,
    workers: int | None = None,
    out: TextIO = sys.stdout,
    err: TextIO | None = None,
) -> int:
    """Run the relay until Ctrl-C or SIGTERM; returns the exit status (2: a bad option). With
    ``store``, it serves durable jobs too (``app``: their agents; ``workers``: jobs run at once
    here, :data:`DEFAULT_WORKERS` by default). A store URL no store opens, or an ``app`` that
    cannot be imported, raises :class:`~protocols.errors.ConfigError` before anything starts."""
    err = sys.stderr if err is None else err
    problem = _check(host, origins, allowed_hosts)
    if problem is None and store is None and workers is not None:
        problem = "--workers run durable jobs: it needs --store URL"
    if problem is not None:
        print(f"trio-agents serve: {problem}", file=err)
        return 2
    jobs = None
    if store is not None:
        jobs = Jobs(store, app=app, workers=DEFAULT_WORKERS if workers is None else workers)
    elif app is not None:
        from ._jobs import load_app  # noqa: PLC0415

        load_app(app)  # an app that cannot be had fails before serving
    chosen, shown = _token(token)
    try:
        RelayToken(chosen)
    except Exception as error:
        print(f"trio-agents serve: {error}", file=err)
        return 2
    if not is_loopback(host):
        print(
            f"trio-agents serve: warning: listening on {host}, beyond this machine, without "
            "TLS (the relay has none of its own): put a TLS reverse proxy in front "
            "(see docs/deploy-relay.md)",
            file=err,
        )
    try:
        trio.run(
            lambda: run(
                host=host,
                port=port,
                token=chosen,
                origins=origins,
                endpoint=endpoint,
                interval=interval,
                max_frame=max_frame,
                out=out,
                shown=shown,
                signals=True,
                grace=grace,
                allowed_hosts=allowed_hosts,
                max_tokens=max_tokens,
                jobs=jobs,
                app=app,
            )
        )
    except BaseException as error:
        failure = _bind_failure(error)
        if failure is None:
            raise
        print(f"trio-agents serve: cannot listen on {host}:{port}: {failure}", file=err)
        return 1
    return 0


def _bind_failure(error: BaseException) -> str | None:
    """Why the server could not listen, if that is what ``error`` (or a group of it) says."""
    if isinstance(error, BaseExceptionGroup):
        reasons = [_bind_failure(member) for member in error.exceptions]
        return reasons[0] if reasons and all(reasons) else None
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return None
