"""Running a relay: :func:`serve` puts any ASGI application (a :class:`RelayServer`) on
hypercorn's trio protocol stack, with each connection contained and a graceful shutdown."""

from __future__ import annotations

import functools
import logging
import math
import pathlib
import socket
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import trio

from .._core._errors import raises_one_cause

if TYPE_CHECKING:
    from hypercorn.typing import ConnectionState

__all__ = ["serve"]

log = logging.getLogger("trio_agents.relay.server")

#: Seconds between websocket pings the server sends (a dead peer is noticed by the next one).
PING_INTERVAL = 20.0
#: Seconds a new connection has to deliver its first request to the application; then it is
#: cut. (hypercorn closes an HTTP/1.1 connection that stays idle, but not one it switched to
#: HTTP/2 on a client's say-so -- a prior-knowledge preface -- whose request never comes.)
FIRST_REQUEST_TIMEOUT = 10.0
#: Seconds a write to a client may make no progress (the client stopped reading); then the
#: connection is closed. hypercorn shields its writes from cancellation, so without this a
#: client that never reads again would hold its connection, and a task, forever.
WRITE_TIMEOUT = 120.0
_CHUNK = 65536
#: Seconds open requests get, once a shutdown begins, to receive their ``shutdown`` frame or
#: line and close, before their connections are cut.
GRACE = 5.0


class _Contained:
    """Reports failures contained to one connection: the first of each kind (exception type and
    where it was raised) at WARNING, repeats at DEBUG -- a client that can cause one cannot
    flood the log with it. Only the type and the code location are logged, never an exception's
    message: it may quote what the client sent."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()
        self.count = 0

    def report(self, what: str, error: BaseException) -> None:
        self.count += 1
        kinds = sorted({(type(leaf).__name__, _where(leaf)) for leaf in _leaves(error)})
        described = ", ".join(f"{name} at {where}" for name, where in kinds)
        new = not self._seen.issuperset(kinds)
        self._seen.update(kinds)
        log.log(
            logging.WARNING if new else logging.DEBUG,
            "%s failed and was closed; the server goes on (%s)",
            what,
            described,
        )


class _Transport:
    """A connection's socket stream as hypercorn's TCPServer sees it. hypercorn closes it when
    the connection ends, and this tells the connection's handler, which then ends what
    hypercorn leaves running on it (its keep-alive ping task sleeps out its whole interval
    before it looks: a shutdown would wait for it). A write that makes no progress for
    :data:`WRITE_TIMEOUT` seconds closes it."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.socket = stream.socket
        self.closed = trio.Event()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        if not view:
            await self.stream.send_all(b"")
        for start in range(0, len(view), _CHUNK):
            with trio.move_on_after(WRITE_TIMEOUT) as waited:
                await self.stream.send_all(view[start : start + _CHUNK])
            if waited.cancelled_caught:  # no progress: the client stopped reading
                self.socket.close()  # (its half-written frame is beyond repair anyway)
                raise trio.BrokenResourceError("the client stopped reading")

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        self.closed.set()
        await self.stream.aclose()


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for member in error.exceptions for leaf in _leaves(member)]
    return [error]


def _address(value: object) -> tuple[str, int]:
    """A peer's ``(host, port)``, from a socket address or an ASGI scope's ``client``."""
    if isinstance(value, tuple | list) and len(value) >= 2:
        return (str(value[0]), value[1] if isinstance(value[1], int) else -1)
    return ("", -1)


def _where(error: BaseException) -> str:
    """``package/module.py:LINE`` of the frame that raised ``error``."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    path = pathlib.PurePath(last.filename)
    return f"{'/'.join(path.parts[-2:])}:{last.lineno}"


@raises_one_cause
async def serve(
    app: Callable[..., Awaitable[None]],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ping_interval: float | None = PING_INTERVAL,
    max_frame: int | None = None,
    shutdown: Callable[[], Awaitable[Any]] | None = None,
    grace: float = GRACE,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` over HTTP/1.1 and websockets on ``host:port`` (127.0.0.1 unless told
    otherwise; port 0 picks a free one) until cancelled, or until ``shutdown`` returns.

    ``task_status.started`` receives the bound addresses (``["http://127.0.0.1:PORT"]``).
    Websocket keep-alive pings go out every ``ping_interval`` seconds; messages over
    ``max_frame`` bytes are refused by the server itself (the application checks too).

    **Each connection is contained**: whatever one connection's protocol handling raises (a
    malformed or hostile client can drive hypercorn's h11/wsproto layers into states where they
    raise) ends that connection only, and is logged once per kind without any client text. A
    connection whose first request has not reached ``app`` after
    :data:`FIRST_REQUEST_TIMEOUT` seconds, or whose client stops reading (a write makes no
    progress for :data:`WRITE_TIMEOUT` seconds), is closed.

    **Graceful shutdown** when ``shutdown`` returns: no new connection is accepted; the
    application's ``close()`` is called if it has one (a :class:`RelayServer` then tells every
    open request ``shutdown`` and closes its websockets with 1001); idle keep-alive connections
    are closed; open connections get ``grace`` seconds to finish, then are cut. Cancelling
    ``serve`` instead stops everything at once.
    """
    if ping_interval is not None and not (ping_interval >= 0 and math.isfinite(ping_interval)):
        raise ValueError("ping_interval must be None or a finite number of seconds >= 0")
    if not (grace >= 0 and math.isfinite(grace)):
        raise ValueError("grace must be a finite number of seconds >= 0")
    # hypercorn (~0.3 s to import) loads only when a relay is served: `import actors` stays light.
    from hypercorn.config import Config  # noqa: PLC0415
    from hypercorn.trio.lifespan import Lifespan  # noqa: PLC0415
    from hypercorn.trio.tcp_server import TCPServer  # noqa: PLC0415
    from hypercorn.trio.worker_context import WorkerContext  # noqa: PLC0415

    # The listening socket is made here, so a refused bind (the port is taken) closes it again
    # and raises a plain OSError.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(1024)
        bound = listener.getsockname()
        sock = trio.socket.from_stdlib_socket(listener)
    except BaseException:
        listener.close()
        raise
    where = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
    url = f"http://{where}:{bound[1]}"

    config = Config()
    config.websocket_ping_interval = ping_interval
    config.accesslog = None
    config.graceful_timeout = grace
    # hypercorn's own messages go through the logging module, silent unless the application
    # configures logging.
    config.errorlog = log
    if max_frame is not None:
        config.websocket_max_message_size = max_frame + 1  # one more: the app answers it
    contained = _Contained()

    class Application:
        """hypercorn's application interface, around ``app``: an exception escaping ``app``
        is reported (without its message) and ends that request's connection only."""

        async def __call__(
            self, scope: Any, receive: Any, send: Any, sync_spawn: Any, call_soon: Any
        ) -> None:
            arrived = first_requests.get(_address(scope.get("client")))
            if arrived is not None:
                arrived.set()
            try:
                await app(scope, receive, send)
            except* Exception as error:
                if scope.get("type") == "lifespan":
                    raise
                contained.report("a request's application", error)

    application = Application()
    context = WorkerContext(None)
    state: dict[str, Any] = {}
    lifespan = Lifespan(application, config, state)
    open_streams: set[trio.SocketStream] = set()
    all_closed = trio.Event()
    # A connection's first request reaching the application, by the peer's address (that is how
    # the application's scope names its connection).
    first_requests: dict[tuple[str, int], trio.Event] = {}

    async def watchdog(stream: trio.SocketStream, arrived: trio.Event) -> None:
        with trio.move_on_after(FIRST_REQUEST_TIMEOUT):
            await arrived.wait()
            return
        stream.socket.close()  # everything waiting on it wakes with an error: the end

    async def connection(stream: trio.SocketStream) -> None:
        # Why a wrapper around hypercorn's TCPServer, rather than hypercorn.trio.serve: hypercorn
        # runs each connection in the server's own nursery, so anything its protocol layers
        # raise for one connection ends the whole server (hypercorn issue #225: an upgrade
        # request with trailing bytes -> h11 "Can't send data when our state is ERROR"; a
        # keep-alive ping racing the connection's close -> trio.BusyResourceError). Those are
        # two instances of one class -- an exception from one connection's handling -- so the
        # class is contained here, whatever the next instance is. Cancellation (and
        # KeyboardInterrupt) still propagate: `except*` takes the Exceptions only.
        open_streams.add(stream)
        peer = _address(stream.socket.getpeername())
        arrived = first_requests[peer] = trio.Event()
        transport = _Transport(stream)

        async def ended(scope: trio.CancelScope) -> None:
            await transport.closed.wait()
            scope.cancel()  # the socket is closed: what still runs on it has nobody to serve

        try:
            server = TCPServer(
                application,
                config,
                context,
                cast("ConnectionState", state.copy()),  # a NewType (not in hypercorn 0.17)
                transport,  # type: ignore[arg-type]
            )
            async with trio.open_nursery() as guarded:
                guarded.start_soon(watchdog, stream, arrived)
                guarded.start_soon(ended, guarded.cancel_scope)
                await server.run()
                guarded.cancel_scope.cancel()
        except* Exception as error:
            contained.report("a connection", error)
        finally:
            if first_requests.get(peer) is arrived:
                del first_requests[peer]
            open_streams.discard(stream)
            if not open_streams and context.terminated.is_set():
                all_closed.set()
            await trio.aclose_forcefully(stream)

    try:
        async with trio.open_nursery() as lifespan_nursery:
            await lifespan_nursery.start(lifespan.handle_lifespan)
            await lifespan.wait_for_startup()
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(
                        functools.partial(
                            trio.serve_listeners,
                            connection,
                            [trio.SocketListener(sock)],
                            handler_nursery=connections,
                        )
                    )
                    task_status.started([url])
                    if shutdown is None:
                        await trio.sleep_forever()
                    await shutdown()
                    accepting.cancel_scope.cancel()  # and the listening socket is closed
                # A graceful shutdown: the application says so to its open requests...
                close = getattr(app, "close", None)
                if callable(close):
                    close()
                # ...idle keep-alive connections close, and open ones get `grace` to finish.
                await context.terminated.set()
                if not open_streams:
                    all_closed.set()
                with trio.move_on_after(grace):
                    await all_closed.wait()
                # What is left is cut, including a write hypercorn shields from cancellation
                # (closing the socket wakes it with an error).
                for stream in list(open_streams):
                    stream.socket.close()
                connections.cancel_scope.cancel()
            await lifespan.wait_for_shutdown()
            lifespan_nursery.cancel_scope.cancel()
    finally:
        sock.close()
