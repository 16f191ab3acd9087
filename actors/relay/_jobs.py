"""The relay's durable jobs: ``RelayServer(..., jobs=RelayJobs(store))`` serves the jobs API of
:mod:`protocols.relay_jobs` under ``/v1/jobs``, over the job store any worker -- in this process
or in others -- takes the jobs from.

* ``POST /v1/jobs``: submit (``{"agent", "input", "settings"?, "key"?}``); 201 with the job,
  or 200 with the one its idempotency key names already;
* ``GET /v1/jobs/{id}``: the job (status, result, error, pending approvals);
* ``POST /v1/jobs/{id}/cancel``; ``POST /v1/jobs/{id}/answers`` (approvals, and the answers
  to the questions a job asks);
* ``GET /v1/jobs/{id}/events``: its events as Server-Sent Events, resumable;

and the same over the relay's websocket (protocol version 3), as the frames ``job_submit``,
``job_get``, ``job_cancel``, ``job_answer`` and ``job_watch`` -- one implementation of each
operation serves both (``_submit_job``, ``_owned``, ``_cancel_job``, ``_answer_job``,
``_follow``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import traceback
import urllib.parse
from collections.abc import (
    Awaitable,
    Callable,
    Container,
    Iterable,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from protocols._json import dumpb
from protocols.errors import AgentsError, ConfigError, ValidationError
from protocols.jobs import JobRecord
from protocols.live import SSE_KEEPALIVE, RunEvent, event_to_sse, last_event_id
from protocols.relay import (
    JobAnswerFrame,
    JobCancelFrame,
    JobFrame,
    JobGetFrame,
    JobSubmitFrame,
    JobWatchFrame,
    error_frame,
    loggable,
)
from protocols.relay_jobs import (
    DEFAULT_MAX_INPUT,
    JOBS_PATH,
    STATUS,
    JobRoute,
    decode_answers,
    decode_submit,
    error_body,
    job_event_frame,
    job_view,
    owner_of,
    route,
    same_request,
    shown_event,
)

from .._core._errors import raises_one_cause
from .._sqlite import StoreError
from ..durable import AgentRegistry, RunStore, answer_job, cancel_job, submit_job, watch_job
from ._admission import _TokenState
from ._asgi import Receive, Scope, Send, _bearer, _body, _Gone, _HttpOut, _server_sent_events

if TYPE_CHECKING:
    from ._server import RelayServer
    from ._session import _Connection

#: The job frames a websocket client sends (version 3).
JobClientFrame: TypeAlias = (
    JobSubmitFrame | JobGetFrame | JobCancelFrame | JobAnswerFrame | JobWatchFrame
)

__all__ = ["JOBS_PATH", "RelayJobLimits", "RelayJobStatistics", "RelayJobs"]

log = logging.getLogger("trio_agents.relay")

_JSON_TYPE = b"application/json"


def _positive(kind: type | tuple[type, ...], rule: str) -> Callable[[Any, Any, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        number: float = value if isinstance(value, int | float) else math.nan
        if (
            isinstance(value, bool)
            or not isinstance(value, kind)
            or not math.isfinite(number)
            or number <= 0
        ):
            raise ConfigError(f"RelayJobLimits.{attribute.name} must be {rule}, not {value!r}")

    return check


@attrs.frozen
class RelayJobLimits:
    """Limits of the relay's jobs API.

    ``max_body``: bytes of a request body (a larger one: 413 ``too_large``, refused before it
    is read past the limit); ``max_input``: bytes of a job's ``input`` as JSON (413
    ``too_large``); ``max_streams``: event streams one token may have open at once (then 429
    ``too_many_streams``); ``keepalive``: seconds an event stream may stay silent before a
    keep-alive comment goes out (proxies close idle responses); ``poll``: how often, at most, an
    event stream looks at the store when nothing woke it (a worker in another process on
    SQLite, whose commits this process is not told of)."""

    max_body: int = attrs.field(default=1024 * 1024, validator=_positive(int, "an int >= 1"))
    max_input: int = attrs.field(default=DEFAULT_MAX_INPUT, validator=_positive(int, "an int >= 1"))
    max_streams: int = attrs.field(default=4, validator=_positive(int, "an int >= 1"))
    keepalive: float = attrs.field(
        default=15.0, validator=_positive((int, float), "a number of seconds > 0")
    )
    poll: float = attrs.field(
        default=0.5, validator=_positive((int, float), "a number of seconds > 0")
    )


@attrs.define
class RelayJobStatistics:
    """Counters since the jobs API was made: ``submitted`` (new jobs), ``repeated`` (submits
    answered with the job their key names), ``streams`` (event streams open now)."""

    submitted: int = 0
    repeated: int = 0
    streams: int = 0


@attrs.frozen
class _Call:
    """One request under :data:`JOBS_PATH`, its token accepted."""

    server: RelayServer
    holder: _TokenState
    scope: Scope
    headers: Mapping[str, str]
    receive: Receive
    send: Send

    @property
    def owner(self) -> str:
        return self.holder.token.name


class _Refusal(Exception):
    def __init__(
        self,
        code: str,
        message: str | None = None,
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        super().__init__(code)
        self.code = code
        self.message = message
        self.extra = extra


class RelayJobs:
    """The durable jobs a relay serves: ``RelayServer(provider, tokens=[...], jobs=RelayJobs(
    store, agents=registry))``. The jobs are run by the workers of a job queue on ``store``
    (:func:`~actors.durable.open_job_queue`), in this process or in others -- the relay itself
    only admits, shows, cancels, answers and follows them, through the store.

    ``agents``: the agent names a job may give (an :class:`~actors.durable.AgentRegistry`, or
    names); another is refused at once (400 ``unknown_agent``). ``None``: any name is admitted,
    and a worker abandons a job whose agent it does not know. ``clock``: the wall clock the
    store's records are stamped with (the job queue's).

    Guarantees:

    * **Tenancy.** A job belongs to the token that submitted it: its token's *name* -- never
      its secret -- is recorded in the job's metadata, and every request about a job by id
      answers 404 ``not_found`` unless that token submitted it (or its ``sees``, where tokens
      have one, names the submitter, or is ``"*"``), exactly as for an id that does not exist
      (also a job submitted outside the relay). Idempotency keys are per token. Two
      tokens of a relay serving jobs must have different names (a :class:`ConfigError` when
      the server is made).
    * **Admission first.** Host, origin and token are checked before a body is read; then its
      size (:class:`RelayJobLimits`), the token's ``per_minute`` (submits count as requests),
      the request itself (strict JSON, unknown fields refused), and the relay's cap on output
      tokens (``RelayLimits.max_tokens`` caps a job's ``settings.max_tokens``). Every refusal is
      a JSON error ``{"error": {"code", "message", "retryable"}}`` with its status
      (:data:`protocols.relay_jobs.STATUS`).
    * **Nothing leaks.** No token secret is ever in an answer, a log line or a job; a job's
      error shows its exception's type, not its message (see
      :func:`protocols.relay_jobs.error_view`); store failures answer 503 ``unavailable``.
    * **Events** (``GET /v1/jobs/{id}/events``) are Server-Sent Events, each with its seq as
      ``id:``: a client resumes after ``Last-Event-ID`` (or ``?after=SEQ``) and sees every
      event once, in order, whichever process runs the job. The stream ends after a terminal
      event (``awaiting_input`` included: watch again once answered); a keep-alive comment goes
      out after ``keepalive`` seconds of silence; :meth:`RelayServer.close
      <actors.relay.RelayServer.close>` ends open streams properly.
    * **The websocket's job frames** (version 3) are answered by the same operations, with the
      same tenancy and limits (a ``job_watch`` counts as an event stream, and against its
      connection's ``max_streams``); a refusal is an ``error`` frame of the request's id with
      its code's fixed text. A ``job_watch`` ends with its terminal ``job_event``, or -- cancelled
      by its client, or nothing following ``after`` -- with a ``job`` frame of the job as it is;
      a ``cancel`` ends the watch, never the job.
    """

    def __init__(
        self,
        store: RunStore,
        *,
        agents: AgentRegistry | Iterable[str] | None = None,
        limits: RelayJobLimits = RelayJobLimits(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(store, RunStore):
            raise ConfigError(f"RelayJobs needs a RunStore, not {type(store).__name__}")
        if not isinstance(limits, RelayJobLimits):
            raise ConfigError("limits must be a RelayJobLimits")
        self.store = store
        self.agents: Container[str] | None
        if agents is None or isinstance(agents, AgentRegistry):
            self.agents = agents
        else:
            names = frozenset(agents)
            if not all(isinstance(name, str) for name in names):
                raise ConfigError("agents must be an AgentRegistry or agent names")
            self.agents = names
        self.limits = limits
        self._clock = clock
        self._server: RelayServer | None = None
        self._streams: dict[str, int] = {}
        self._statistics = RelayJobStatistics()

    def __repr__(self) -> str:
        return f"<RelayJobs store={type(self.store).__name__}>"

    def statistics(self) -> RelayJobStatistics:
        """A copy of the counters."""
        return attrs.evolve(self._statistics)

    def _attach(self, server: RelayServer) -> None:
        """Serve ``server``'s tokens: refused for a second server, or for tokens sharing a name
        (a job's owner is its token's name)."""
        if self._server is not None and self._server is not server:
            raise ConfigError("a RelayJobs serves one RelayServer")
        names = [holder.token.name for _, holder in server._holders]
        if len(set(names)) != len(names):
            raise ConfigError(
                "a relay serving jobs needs a distinct name for each token (RelayToken(secret, "
                "name=...)): the jobs a token submits are recorded under its name"
            )
        self._server = server

    # -- ASGI ----------------------------------------------------------------------------------

    @raises_one_cause
    async def _serve(
        self,
        server: RelayServer,
        scope: Scope,
        headers: Mapping[str, str],
        receive: Receive,
        send: Send,
    ) -> None:
        """Answer one HTTP request under :data:`JOBS_PATH` (its host already checked)."""
        started = [False]
        original = send

        async def tracked(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started[0] = True
            await original(message)

        send = tracked
        try:
            if server._closing:
                raise _Refusal("shutdown")
            if not server._origin_ok(scope, headers):
                raise _Refusal("forbidden_origin")
            holder = server._holder(_bearer(headers))
            if holder is None:
                raise _Refusal("unauthorized", extra=[(b"www-authenticate", b"Bearer")])
            where = route(scope.get("path", ""))
            if where is None:
                raise _Refusal("not_found", "no such route")
            if scope.get("method", "GET") != where.method:
                raise _Refusal("method_not_allowed", extra=[(b"allow", where.method.encode())])
            await self._route(_Call(server, holder, scope, headers, receive, send), where)
        except _Gone:
            return  # the client left: nobody to answer
        except _Refusal as refusal:
            server._refuse(refusal.code)
            await _answer(
                send,
                STATUS[refusal.code],
                error_body(refusal.code, refusal.message),
                refusal.extra,
            )
        except StoreError as error:
            code = "unavailable" if error.retryable else "internal"
            log.warning(
                "relay jobs: the store failed (%s %s): %s",
                type(error).__name__,
                error.code,
                loggable(error.message),
            )
            server._refuse(code)
            await _answer(send, STATUS[code], error_body(code))
        except Exception as error:
            # A bug: its own request fails, and nothing of it reaches the client. (An event
            # stream that had begun is cut: its client resumes after the last id it has.)
            _log_bug(error)
            if not started[0]:
                server._refuse("internal")
                await _answer(send, STATUS["internal"], error_body("internal"))

    async def _route(self, call: _Call, where: JobRoute) -> None:
        if where.action == "submit":
            await self._submit(call)
            return
        assert where.id is not None
        if where.action == "events":
            await self._events(call, where.id)
            return
        body = await self._body(call) if where.method == "POST" else b""
        if where.action == "cancel":
            record = await self._cancel_job(call.holder, where.id)
        elif where.action == "answers":
            record = await self._answer_job(call.holder, where.id, body)
        else:
            record = await self._owned(where.id, call.holder)
        await _answer(call.send, 200, _dumped(job_view(record)))

    # -- the operations, over HTTP and over the websocket (its job frames) alike ----------------

    async def _submit_job(
        self,
        server: RelayServer,
        holder: _TokenState,
        body: bytes | Mapping[str, Any],
        key_header: str | None = None,
    ) -> tuple[JobRecord, bool]:
        """Admit a job for ``holder``'s token (``body``: a ``POST /v1/jobs`` body, or a
        ``job_submit`` frame's ``job``): the job, and whether it is new (else its idempotency
        key named it already). Counts against the token's ``per_minute``; raises
        :class:`_Refusal`."""
        owner = holder.token.name
        _count_start(holder)
        submission = _decoded(
            lambda data: decode_submit(
                data,
                owner=owner,
                key_header=key_header,
                max_input=self.limits.max_input,
                max_tokens=server.limits.max_tokens,
            ),
            body,
        )
        job = submission.job
        if self.agents is not None and job.agent not in self.agents:
            raise _Refusal("unknown_agent", f"this relay has no agent {job.agent[:200]!r}")
        try:
            record, created = await submit_job(
                self.store, job, key=submission.key, clock=self._clock
            )
        except StoreError as error:
            if error.code == "purged":
                raise _Refusal("key_purged") from None
            raise
        if not created and (owner_of(record) != owner or not same_request(record.job, job)):
            raise _Refusal("key_conflict")
        if created:
            self._statistics.submitted += 1
            log.info(
                "relay job %s: submitted by %s for agent %s",
                record.id,
                loggable(owner),
                loggable(job.agent),
            )
        else:
            self._statistics.repeated += 1
        return record, created

    async def _cancel_job(self, holder: _TokenState, id: str) -> JobRecord:
        """Cancel ``holder``'s job ``id``: the job now (raises :class:`_Refusal`)."""
        await self._owned(id, holder)
        try:
            record, changed = await cancel_job(self.store, id, clock=self._clock)
        except ValidationError:  # purged meanwhile
            raise _Refusal("not_found") from None
        if changed:
            log.info("relay job %s: cancelled by %s", id, loggable(holder.token.name))
        return record

    async def _answer_job(
        self, holder: _TokenState, id: str, body: bytes | Mapping[str, Any]
    ) -> JobRecord:
        """Answer the approvals ``holder``'s job ``id`` waits for (``body``: a ``POST
        .../answers`` body, or ``{"answers": [...]}`` of a ``job_answer`` frame): the job
        now (raises :class:`_Refusal`)."""
        record = await self._owned(id, holder)
        answers = _decoded(decode_answers, body)
        if record.terminal:
            raise _Refusal("ended", f"the job has ended ({record.status.value})")
        for given in answers:
            try:
                record = await answer_job(
                    self.store,
                    id,
                    given.call_id,
                    given.allow,
                    given.reason,
                    value=given.value,
                    clock=self._clock,
                )
            except ValidationError as error:
                raise _Refusal("conflict", error.message) from None
        return record

    def _take_stream(self, owner: str) -> None:
        """Count an event stream (or a ``job_watch``) of the token named ``owner``, or refuse
        it (``too_many_streams``); :meth:`_give_stream` gives it back."""
        if self._streams.get(owner, 0) >= self.limits.max_streams:
            raise _Refusal(
                "too_many_streams",
                f"this token has {self.limits.max_streams} event streams open already",
            )
        self._streams[owner] = self._streams.get(owner, 0) + 1
        self._statistics.streams += 1

    def _give_stream(self, owner: str) -> None:
        self._statistics.streams -= 1
        left = self._streams[owner] - 1
        if left:
            self._streams[owner] = left
        else:
            del self._streams[owner]

    async def _follow(self, id: str, after: int, put: Callable[[RunEvent], Awaitable[None]]) -> str:
        """Give ``put`` the events of job ``id`` after seq ``after``, as they come, up to its
        terminal one; say how it ended: ``terminal`` (that event was put), ``purged`` (the job
        is gone), ``failed`` (the store failed: logged; the client resumes after the last
        event it has) or ``stopped`` (nothing more to give). What ``put`` raises goes
        through."""
        try:
            async for event in watch_job(self.store, id, after=after, poll=self.limits.poll):
                await put(event)
                if event.terminal:
                    return "terminal"
        except ValidationError:
            return "purged"  # purged meanwhile: nothing more to show
        except StoreError as error:
            log.warning(
                "relay job %s: its event stream ended: the store failed (%s): %s",
                id,
                error.code,
                loggable(error.message),
            )
            return "failed"
        return "stopped"

    async def _owned(self, id: str, holder: _TokenState) -> JobRecord:
        """The job ``id`` if ``holder``'s token submitted it (or may see its submitter's: its
        ``sees``, where tokens have one); else 404, as for no job at all."""
        record = await self.store.get(id)
        owner = None if record is None else owner_of(record)
        token = holder.token
        seen: tuple[str, ...] = tuple(getattr(token, "sees", ()))
        if (
            record is None
            or owner is None
            or (owner != token.name and owner not in seen and "*" not in seen)
        ):
            raise _Refusal("not_found")
        return record

    async def _body(self, call: _Call) -> bytes:
        """The request's body: at most ``max_body`` bytes, within the relay's
        ``handshake_timeout``."""
        limit = self.limits.max_body
        length = call.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise _Refusal("too_large", f"the body is larger than {limit} bytes")
        body = bytearray()
        with trio.move_on_after(call.server.limits.handshake_timeout) as waited:
            while True:
                message = await call.receive()
                if message["type"] == "http.disconnect":
                    raise _Gone
                body += message.get("body", b"")
                if len(body) > limit:
                    raise _Refusal("too_large", f"the body is larger than {limit} bytes")
                if not message.get("more_body", False):
                    break
        if waited.cancelled_caught:
            raise _Refusal("timeout")
        return bytes(body)

    # -- submit --------------------------------------------------------------------------------

    async def _submit(self, call: _Call) -> None:
        body = await self._body(call)
        record, created = await self._submit_job(
            call.server, call.holder, body, call.headers.get("idempotency-key")
        )
        where = f"{JOBS_PATH}/{record.id}".encode()
        await _answer(
            call.send, 201 if created else 200, _dumped(job_view(record)), [(b"location", where)]
        )

    # -- events --------------------------------------------------------------------------------

    async def _events(self, call: _Call, id: str) -> None:
        owner = call.owner
        after = _after(call.scope, call.headers)
        await self._owned(id, call.holder)
        self._take_stream(owner)
        try:
            await self._stream(call, id, after)
        finally:
            self._give_stream(owner)

    async def _stream(self, call: _Call, id: str, after: int) -> None:
        server = call.server

        async def pump(out: _HttpOut) -> None:
            with trio.CancelScope() as cut:
                # RelayServer.close() cuts it; the response still ends properly.
                server._scopes.add(cut)
                if server._closing:
                    cut.cancel()
                try:
                    await self._pump(id, after, out)
                finally:
                    server._scopes.discard(cut)

        await _server_sent_events(call.send, call.receive, server.limits.send_timeout, (), pump)

    async def _pump(self, id: str, after: int, out: _HttpOut) -> None:
        """Put the job's events after ``after`` to ``out`` up to its terminal one, with a
        keep-alive comment after each ``keepalive`` seconds of silence. A client that stopped
        reading (``out.cut``) ends it."""
        keepalive = self.limits.keepalive
        last = trio.current_time()

        async def beat(scope: trio.CancelScope) -> None:
            nonlocal last
            while True:
                await trio.sleep_until(last + keepalive)
                if trio.current_time() >= last + keepalive:
                    last = trio.current_time()
                    try:
                        await out.put(_body(SSE_KEEPALIVE))
                    except _Gone:
                        scope.cancel()
                        return

        async def put(event: RunEvent) -> None:
            nonlocal last
            await out.put(_body(event_to_sse(shown_event(event))))
            last = trio.current_time()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(beat, nursery.cancel_scope)
            with contextlib.suppress(_Gone):  # (out.cut says so to the caller)
                await self._follow(id, after, put)
            nursery.cancel_scope.cancel()

    # -- the websocket's job frames ------------------------------------------------------------

    async def _on_frame(
        self,
        connection: _Connection,
        holder: _TokenState,
        frame: JobClientFrame,
        nursery: trio.Nursery,
    ) -> None:
        """Answer one job frame of a websocket of version 3, exactly as its HTTP request is
        answered (the same operations, tenancy and limits): a ``job`` frame, or an ``error`` of
        the frame's id (the connection goes on). ``job_submit``, ``job_get``, ``job_cancel`` and
        ``job_answer`` are answered before the connection reads its next frame (a ``job_watch``
        after a ``job_submit`` finds its job); a ``job_watch`` runs as a task of the
        connection, counted against its ``max_streams`` and the token's event streams."""
        server = connection.server
        try:
            if connection.is_open(frame.id):
                raise _Refusal("duplicate")
            if server._closing:
                raise _Refusal("shutdown")
            if isinstance(frame, JobWatchFrame):
                await self._start_watch(connection, holder, frame, nursery)
                return
            created: bool | None = None
            if isinstance(frame, JobSubmitFrame):
                record, created = await self._submit_job(server, holder, frame.job)
            elif isinstance(frame, JobGetFrame):
                record = await self._owned(frame.job_id, holder)
            elif isinstance(frame, JobCancelFrame):
                record = await self._cancel_job(holder, frame.job_id)
            else:
                answers = {"answers": list(frame.answers)}
                record = await self._answer_job(holder, frame.job_id, answers)
            await connection.send(JobFrame(frame.id, job_view(record), created))
        except _Refusal as refusal:
            await self._refuse_frame(connection, frame.id, refusal.code)
        except StoreError as error:
            await self._store_failed(connection, frame.id, error)
        except _Gone:
            raise
        except Exception as error:  # a bug: its own frame fails, nothing of it crosses
            _log_bug(error)
            await self._refuse_frame(connection, frame.id, "internal")

    async def _refuse_frame(self, connection: _Connection, id: str, code: str) -> None:
        connection.server._refuse(code)
        await connection.send(error_frame(code, id))

    async def _store_failed(self, connection: _Connection, id: str, error: StoreError) -> None:
        code = "unavailable" if error.retryable else "internal"
        log.warning(
            "relay jobs: the store failed (%s %s): %s",
            type(error).__name__,
            error.code,
            loggable(error.message),
        )
        await self._refuse_frame(connection, id, code)

    async def _start_watch(
        self,
        connection: _Connection,
        holder: _TokenState,
        frame: JobWatchFrame,
        nursery: trio.Nursery,
    ) -> None:
        if connection.open_requests() >= connection.limits.max_streams:
            raise _Refusal("too_many_streams")
        await self._owned(frame.job_id, holder)
        owner = holder.token.name
        self._take_stream(owner)
        scope = trio.CancelScope()
        connection.job_watches[frame.id] = scope
        nursery.start_soon(self._watch, connection, holder, frame, scope)

    async def _watch(
        self,
        connection: _Connection,
        holder: _TokenState,
        frame: JobWatchFrame,
        scope: trio.CancelScope,
    ) -> None:
        """Send the job's events after ``frame.after`` as ``job_event`` frames, through its
        terminal one. A watch that ends otherwise says how: cancelled by the client (or nothing
        more to come), a ``job`` frame with the job now; the job purged meanwhile, ``error``
        ``not_found``; the store failing, ``error`` ``unavailable`` (resume after the last
        event's seq)."""
        id = frame.id

        async def put(event: RunEvent) -> None:
            await connection.send(job_event_frame(event, id))

        try:
            with scope:
                ended = await self._follow(frame.job_id, frame.after, put)
            if scope.cancelled_caught:
                ended = "stopped"
            if ended == "purged":
                await self._refuse_frame(connection, id, "not_found")
            elif ended == "failed":
                await self._refuse_frame(connection, id, "unavailable")
            elif ended == "stopped":
                record = await self.store.get(frame.job_id)
                if record is None:
                    await self._refuse_frame(connection, id, "not_found")
                else:
                    await connection.send(JobFrame(id, job_view(record)))
        except _Gone:
            pass  # the client left: nobody to tell
        except StoreError as error:
            with contextlib.suppress(_Gone):
                await self._store_failed(connection, id, error)
        except Exception as error:  # a bug: its own watch fails, nothing of it crosses
            _log_bug(error)
            with contextlib.suppress(_Gone):
                await self._refuse_frame(connection, id, "internal")
        finally:
            self._give_stream(holder.token.name)
            connection.forget_job_watch(id)


def _log_bug(error: Exception) -> None:
    log.warning(
        "relay jobs: a request failed: %s (its text is not logged: it may quote the request)\n%s",
        type(error).__name__,
        "".join(traceback.format_tb(error.__traceback__)).rstrip(),
    )


def _after(scope: Scope, headers: Mapping[str, str]) -> int:
    """The seq a stream resumes after: ``Last-Event-ID`` (what a reconnecting client sends:
    it wins), else ``?after=``, else 0."""
    query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
    given = headers.get("last-event-id")
    if given is None:
        values = query.get("after")
        given = values[-1] if values else None
    try:
        return last_event_id(given)
    except ValidationError as error:
        raise _Refusal("invalid", error.message) from None


def _decoded(decode: Callable[[Any], Any], body: bytes | Mapping[str, Any]) -> Any:
    try:
        return decode(body)
    except AgentsError as error:
        code = error.code if error.code in STATUS else "invalid"
        raise _Refusal(code, error.message) from None


def _count_start(holder: _TokenState) -> None:
    """Count a request against the token's ``per_minute``, or refuse it (429)."""
    now = trio.current_time()
    starts = holder.starts
    while starts and starts[0] <= now - 60:
        starts.popleft()
    if len(starts) >= holder.token.per_minute:
        wait = max(1, math.ceil(starts[0] + 60 - now))
        raise _Refusal("rate_limited", extra=[(b"retry-after", str(wait).encode())])
    starts.append(now)


def _dumped(value: Any) -> bytes:
    return dumpb(value)


async def _answer(
    send: Send, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """A whole JSON answer."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", _JSON_TYPE),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                (b"x-content-type-options", b"nosniff"),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
