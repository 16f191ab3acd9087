"""The HTTP provider engine: one base class owns everything but the vendor's wire format, and
one stream (``_HTTPStream``) carries a call's bytes to its deltas. What configures it (time
limits, retries, a vendor's wire format) is ``_http_config``."""

from __future__ import annotations

import logging
import math
import random
import urllib.parse
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import attrs
import httpx
import trio

from protocols.codec import dumpb, dumps
from protocols.egress import EgressPolicy, Refusal
from protocols.errors import (
    ConfigError,
    ProtocolError,
    ProviderError,
    ValidationError,
    excerpt,
    redact,
    scrub,
)
from protocols.history import unanswered_calls
from protocols.messages import (
    Delta,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolDefinition,
)
from protocols.ndjson import NDJSONDecoder
from protocols.sse import SSEComment, SSEDecoder, SSEEvent
from protocols.wire import StreamAssembler, classify_status
from protocols.wire.schema import project

from .._egress import guarded_transport
from ._http_config import (
    _CREDENTIAL_WORDS,
    _REMEMBERED_CREDENTIALS,
    PROTECTED_HEADERS,
    RetryPolicy,
    Timeouts,
    WireFormat,
    _query,
    _report_retry,
    _retry_after,
)
from ._interface import ProviderStream, RetryEvent, StreamingProvider

__all__ = [
    "HTTPProvider",
    "RetryPolicy",
    "Timeouts",
    "WireFormat",
]

log = logging.getLogger(__name__)

#: How much of an error response body is read (the rest never is).
ERROR_BODY_LIMIT = 2048

#: How much of a record that failed to decode an error message shows (characters).
RECORD_EXCERPT_LIMIT = 200

#: After a stream's final record, how long (seconds) and how many bytes of what is left of the
#: body are read, so that the connection can be reused, before it is closed instead. Nothing
#: read after the final record changes the result.
AFTER_END_WAIT = 1.0
AFTER_END_LIMIT = 64 * 1024


class _Attempt(Exception):
    """A failure of one attempt, before any delta was shown: maybe worth retrying."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(error.message)
        self.error = error


class _HTTPStream(ProviderStream):
    """A :class:`ProviderStream` over one HTTP response (with retries before the first delta)."""

    def __init__(
        self,
        provider: HTTPProvider,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None,
        options: ProviderOptions | None,
    ) -> None:
        self._provider = provider
        self._body = dumpb(provider.encode(messages, tools or (), options))
        self._assembler = provider.new_assembler()
        self._pending: deque[Delta] = deque()
        self._response: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._decoder: SSEDecoder | NDJSONDecoder | None = None
        self._reader: Any = None
        self._shown = False  # a delta reached the caller: never retry from here on
        self._attempts = 0
        self._started = False
        self._finished = False
        self._noted_after_end = False
        self._result: ProviderResult | None = None
        self._deadline = math.inf
        self._idle_deadline = math.inf

    async def aclose(self) -> None:
        await self._close_response()

    @property
    def result(self) -> ProviderResult:
        """The assembled result, once the iteration has ended."""
        if self._result is None:
            raise RuntimeError("the stream has not finished: iterate it to the end first")
        return self._result

    @property
    def partial(self) -> ProviderResult:
        """What the stream produced so far (complete tool calls only): its text is what was
        yielded to the caller -- deltas decoded but not yet handed over are left out, so a
        commit of the partial never holds text nobody saw."""
        if self._result is not None:
            return self._result
        partial = self._assembler.partial()
        if not self._pending:
            return partial
        unseen = {"content": 0, "thinking": 0}
        for delta in self._pending:
            unseen[delta.channel] += len(delta.text)
        return attrs.evolve(
            partial,
            content=partial.content[: len(partial.content) - unseen["content"]],
            thinking=partial.thinking[: len(partial.thinking) - unseen["thinking"]],
        )

    def take_ready(self) -> list[Delta]:
        pending = self._pending
        if not pending:
            return []
        self._shown = True
        taken = list(pending)
        pending.clear()
        return taken

    async def __anext__(self) -> Delta:
        pending = self._pending
        if pending:  # the hot path: deltas already decoded from the last chunk
            # A cancel must not wait for the next network read to be noticed; this only raises
            # when the caller's scope is cancelled (it does not yield to the scheduler).
            await trio.lowlevel.checkpoint_if_cancelled()
            self._shown = True
            return pending.popleft()
        try:
            return await self._advance()
        except StopAsyncIteration:
            raise
        except Exception as error:
            # The one place every failure of a call leaves through: whatever built the error
            # (a status body, a vendor's in-stream error record, a decode failure, a transport
            # error, an auth hook), the provider's secrets are redacted from it here.
            self._provider.scrub(error)
            raise

    async def _advance(self) -> Delta:
        """:meth:`__anext__` past its hot path: start the call, read, retry."""
        if not self._started:
            self._started = True
            self._deadline = trio.current_time() + self._provider.timeouts.deadline
            await self._open()
        while not self._pending:
            if self._finished:
                raise StopAsyncIteration
            try:
                await self._pump()
            except _Attempt as attempt:
                if self._shown:
                    attempt.error.partial = self._assembler.partial()
                    raise attempt.error from attempt.error.__cause__
                await self._retry(attempt.error)
                await self._open()
        self._shown = True
        return self._pending.popleft()

    # -- attempts ------------------------------------------------------------------------------

    async def _open(self) -> None:
        """Send the request, retrying failures before any delta is shown."""
        while True:
            try:
                await self._request()
                return
            except _Attempt as attempt:
                await self._retry(attempt.error)

    async def _retry(self, error: ProviderError) -> None:
        """Close the failed attempt, then raise ``error`` if it may not be retried, else report
        the retry and wait before the next attempt."""
        await self._close_response()
        provider = self._provider
        attempt = self._attempts
        if not error.retryable or attempt >= provider.retry.retries:
            raise error from error.__cause__
        delay = provider.retry.delay(attempt, provider.rng, error.retry_after)
        if trio.current_time() + delay >= self._deadline:
            # The wait would outlast the call's deadline: no retry (and none reported), the
            # failure now rather than a deadline error later.
            raise error from error.__cause__
        self._attempts = attempt + 1
        event = RetryEvent(attempt=attempt + 1, delay=delay, code=error.code, status=error.status)
        _report_retry(event, provider.on_retry, provider.name)
        await trio.sleep(delay)
        self._assembler = provider.new_assembler()
        self._pending.clear()

    async def _request(self) -> None:
        provider = self._provider
        with trio.move_on_at(self._deadline) as scope:
            try:
                headers = await provider.request_headers()
                request = provider.client.build_request(
                    "POST", provider.url, content=self._body, headers=headers
                )
                first_event = trio.current_time() + provider.timeouts.first_event
                with trio.move_on_at(first_event) as waiting:
                    response = await provider.client.send(request, stream=True)
                if waiting.cancelled_caught:
                    raise _Attempt(
                        ProviderError(
                            f"{provider.name}: no response within "
                            f"{provider.timeouts.first_event} s",
                            code="timeout",
                            retryable=True,
                        )
                    )
            except httpx.TransportError as error:
                raise _Attempt(self._transport_error(error)) from None
        if scope.cancelled_caught:
            raise self._deadline_error()
        self._response = response
        if response.status_code >= 300:
            raise _Attempt(await self._status_error(response))
        self._chunks = response.aiter_bytes()
        self._decoder = provider.new_decoder()
        self._reader = provider.new_reader()
        self._idle_deadline = trio.current_time() + provider.timeouts.first_event

    async def _pump(self) -> None:
        """Read until at least one delta is pending or the stream ends."""
        if self._ended():
            # The response has ended: nothing read from here on may change it.
            await self._read_after_end()
            try:
                self._finish()
            except ProtocolError as error:  # a call whose arguments are not a JSON object, ...
                raise _Attempt(
                    ProviderError(error.message, code=error.code, retryable=False)
                ) from None
            return
        assert self._chunks is not None
        assert self._decoder is not None
        provider = self._provider
        with trio.move_on_at(min(self._deadline, self._idle_deadline)) as scope:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                chunk = None
            except httpx.TransportError as error:
                raise _Attempt(self._transport_error(error)) from None
        if scope.cancelled_caught:
            if trio.current_time() >= self._deadline:
                raise self._deadline_error()
            raise _Attempt(
                ProviderError(
                    f"{provider.name}: no event for {provider.timeouts.idle} s",
                    code="timeout",
                    retryable=True,
                )
            )
        decoder = self._decoder
        try:
            try:
                items = decoder.close() if chunk is None else decoder.feed(chunk)
            except ProtocolError as error:
                # The chunk's records before the line that failed still count: the response may
                # have ended among them, and then what failed came after the end.
                if type(decoder) is NDJSONDecoder and decoder.before_failure:
                    self._add(decoder.before_failure)
                if not self._ended():
                    raise self._undecodable_line(error) from None
                self._undecodable_after_end()
                return
            if items:
                self._add(items)
            if chunk is None:
                self._finish()
        except ProviderError as error:
            raise _Attempt(error) from None
        except ProtocolError as error:
            raise _Attempt(
                ProviderError(error.message, code=error.code, retryable=error.code == "truncated")
            ) from None

    def _ended(self) -> bool:
        """Whether the response's final record has been read."""
        return self._assembler.final

    def _finish(self) -> None:
        """The stream has ended (its body, or the response with its final record): release what
        the think splitter held back and build the result."""
        self._pending.extend(self._assembler.flush())
        if not self._assembler.terminal:
            raise ProtocolError(
                f"{self._provider.name}: the stream ended without its terminal record",
                code="truncated",
            )
        self._result = self._assembler.result()
        self._finished = True

    async def _read_after_end(self) -> None:
        """After the final record: read what is left of the body -- so that the connection can
        serve another request -- for at most :data:`AFTER_END_WAIT` seconds (and never past the
        deadline) and :data:`AFTER_END_LIMIT` bytes, then close the response. What it holds is
        never read as a record (see :meth:`_note_after_end`); bytes that do not decode, a stall,
        a cut or a transport error end the reading, never the call."""
        chunks = self._chunks
        assert chunks is not None
        received = 0
        wait = min(self._deadline, trio.current_time() + AFTER_END_WAIT)
        with trio.move_on_at(wait):
            try:
                while received <= AFTER_END_LIMIT:
                    try:
                        chunk = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                    received += len(chunk)
                    self._ignore_after_end(chunk)
            except httpx.TransportError:
                pass
        await self._close_response()

    def _ignore_after_end(self, chunk: bytes) -> None:
        """Decode ``chunk`` (bytes after the end) only to note what it holds; stop decoding at
        the first bytes that do not decode."""
        decoder = self._decoder
        if decoder is None:
            return
        try:
            items = decoder.feed(chunk)
        except ProtocolError:
            self._undecodable_after_end()
            return
        for item in items:
            if type(item) is not SSEComment:
                self._note_after_end(item)

    def _undecodable_after_end(self) -> None:
        """Bytes after the end failed to decode: stop decoding the body (it is still read to
        its end, for the connection's sake) and note it -- as a trailing ``[DONE]`` when the
        line that failed is one, which some servers send after NDJSON too."""
        decoder = self._decoder
        self._decoder = None
        line = decoder.failed_line if type(decoder) is NDJSONDecoder else None
        done = line is not None and line.strip() in (b"[DONE]", b"data: [DONE]")
        self._note_after_end(None, kind="[DONE]" if done else "bytes that do not decode")

    def _note_after_end(self, record: Any, *, kind: str | None = None) -> None:
        """A record (an SSE event, an NDJSON value; or bytes described by ``kind``) that came
        after the final record, which is ignored: a trailing ``[DONE]`` silently, the first
        anything else of the stream logged at debug level, by its kind -- never its text."""
        if self._noted_after_end:
            return
        if kind is None:
            if isinstance(record, SSEEvent):
                done = record.data.strip() == "[DONE]"
                kind = "[DONE]" if done else f"event {record.event[:40]!r}"
            else:
                kind = "a JSON line"
        if kind == "[DONE]":
            return
        self._noted_after_end = True
        log.debug(
            "%s: ignored what came after the end of the stream (first: %s)",
            self._provider.name,
            kind,
        )

    def _add(self, items: list[Any]) -> None:
        """Fold the records of one chunk (the hot loop: one pass, no per-record clock read)."""
        read = self._reader.read
        assembler = self._assembler
        add = assembler.add
        pending = self._pending
        events = 0
        item: Any = None
        try:
            for item in items:
                # An SSEComment is a keep-alive: it proves nothing and does not reset the idle
                # timer.
                if type(item) is not SSEComment:
                    if assembler.final:  # after the end: never read
                        self._note_after_end(item)
                        continue
                    events += 1
                    pending.extend(add(read(item)))
        except ProtocolError as error:
            raise ProtocolError(
                f"{error.message}; the record: {self._record_excerpt(item)}", code=error.code
            ) from None
        if events:
            # Every record of a chunk arrived at once, so one reset after them is the same as
            # one per record.
            self._idle_deadline = trio.current_time() + self._provider.timeouts.idle

    def _undecodable_line(self, error: ProtocolError) -> ProtocolError:
        """``error`` (a framing decoder's), with an excerpt of the NDJSON line that failed."""
        decoder = self._decoder
        if error.code != "json" or type(decoder) is not NDJSONDecoder:
            return error
        line = decoder.failed_line
        if line is None:
            return error
        shown = excerpt(line.decode("utf-8", "replace"), RECORD_EXCERPT_LIMIT)
        return ProtocolError(f"{error.message}; the record: {shown}", code=error.code)

    @staticmethod
    def _record_excerpt(item: Any) -> str:
        """A short excerpt of one record, as received (SSE data) or as parsed (NDJSON)."""
        if isinstance(item, SSEEvent):
            text = item.data
        else:
            try:
                text = dumps(item)
            except ValidationError:
                text = repr(item)
        return excerpt(text, RECORD_EXCERPT_LIMIT)

    # -- errors --------------------------------------------------------------------------------

    def _transport_error(self, error: httpx.TransportError) -> ProviderError:
        # A pool timeout says the client's pool is stuck (not the server): a connection actor
        # renews the client when it sees one.
        code = "pool_timeout" if isinstance(error, httpx.PoolTimeout) else "transport"
        return ProviderError(
            f"{self._provider.name}: {type(error).__name__}: {str(error)[:300]}",
            code=code,
            retryable=True,
        )

    def _deadline_error(self) -> ProviderError:
        error = ProviderError(
            f"{self._provider.name}: the call took longer than its deadline of "
            f"{self._provider.timeouts.deadline} s",
            code="timeout",
            retryable=False,
        )
        error.partial = self._assembler.partial()
        return error

    async def _status_error(self, response: httpx.Response) -> ProviderError:
        provider = self._provider
        excerpt = ""
        with trio.move_on_at(self._deadline):
            raw = bytearray()
            try:
                async for chunk in response.aiter_raw():
                    raw.extend(chunk[: ERROR_BODY_LIMIT - len(raw)])
                    if len(raw) >= ERROR_BODY_LIMIT:
                        break
            except httpx.TransportError:
                pass
            excerpt = raw.decode("utf-8", "replace")
        vendor_type, vendor_code, message = provider.error_details(excerpt)
        code, retryable = classify_status(response.status_code, message)
        text = f"{provider.name} error: {response.status_code}"
        if message:
            text += f" - {message[:300]}"
        return ProviderError(
            text,
            code=code,
            retryable=retryable,
            status=response.status_code,
            vendor_type=vendor_type,
            vendor_code=vendor_code,
            excerpt=excerpt,
            retry_after=_retry_after(response.headers),
        )

    async def _close_response(self) -> None:
        chunks, self._chunks = self._chunks, None
        if chunks is not None and hasattr(chunks, "aclose"):
            await chunks.aclose()
        response, self._response = self._response, None
        if response is not None:
            await response.aclose()


class HTTPProvider(StreamingProvider):
    """Base class of the HTTP providers: a vendor subclass supplies only its wire format.

    Guarantees: every call is bounded by :class:`Timeouts`; failures before the first delta are
    retried per :class:`RetryPolicy` (each retry reported to ``on_retry``); an error response is
    read for at most 2 KiB and classified into a :class:`~protocols.errors.ProviderError`; a
    stream that ends without its vendor's terminal record is an error, never a success; secrets
    (the API key, auth header values) never appear in an error message or ``repr``.

    ``query`` adds parameters to the endpoint's URL (Azure OpenAI's ``api-version``, a
    gateway's own); the URL is never shown in ``repr``, and the value of a parameter whose
    name holds auth, key, token, secret, password, cookie or signature is a secret like the
    API key (prefer a header for credentials all the same: URLs end up in proxies' logs).
    """

    name: str = "provider"
    #: The vendor's wire format; a subclass sets this (and its constructor's defaults) only.
    wire: ClassVar[WireFormat]

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        auth: Callable[[], Awaitable[Mapping[str, str]]] | None = None,
        split_think: bool = True,
        on_retry: Callable[[RetryEvent], object] | None = None,
        max_event_size: int = 16 * 1024 * 1024,
        rng: random.Random | None = None,
        egress: EgressPolicy | None = None,
        query: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(getattr(type(self), "wire", None), WireFormat):
            raise TypeError(f"{type(self).__name__} must set `wire` to its WireFormat")
        if not model:
            raise ConfigError(f"{self.name}: a model name is required")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{self.name}: base_url must be an http(s) URL, not {base_url!r}")
        extra = dict(headers or {})
        protected = sorted(key for key in extra if key.lower() in PROTECTED_HEADERS)
        if protected:
            raise ConfigError(
                f"{self.name}: headers may not override {', '.join(protected)} "
                "(set by the engine; use api_key= or auth= for credentials)"
            )
        self._query = _query(self.name, query)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.timeouts = timeouts if timeouts is not None else Timeouts()
        self.retry = retry if retry is not None else RetryPolicy()
        self._extra_headers = extra
        self._auth = auth
        self._supplied_credentials: list[str] = []
        self.split_think = split_think
        self.on_retry = on_retry
        self.max_event_size = max_event_size
        self.rng = rng if rng is not None else random.Random()
        self.egress = egress
        if egress is not None:
            if client is not None:
                raise ConfigError(
                    f"{self.name}: egress= guards the provider's own client; a client passed in "
                    "is guarded by whoever made it"
                )
            refused = egress.check_url(self.url)
            if refused is not None:
                raise ConfigError(f"{self.name}: {refused}")
        self._owns_client = client is None
        self.client = client if client is not None else self._make_client()
        #: Further keywords of the wire format's encoder (a vendor subclass's choices).
        self._encoding: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} model={self.model!r} base_url={self.base_url!r}>"

    def _make_client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        timeout = httpx.Timeout(
            connect=min(self.timeouts.connect, 1e9), read=None, write=60.0, pool=60.0
        )
        if self.egress is not None:
            name = self.name

            def refuse(refusal: Refusal) -> ProviderError:
                # Not retried: the same connection would be refused again.
                return ProviderError(f"{name}: {refusal}", code="egress", retryable=False)

            return httpx.AsyncClient(
                timeout=timeout,
                transport=guarded_transport(self.egress, refuse, limits=limits),
                follow_redirects=False,
                trust_env=False,
            )
        return httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False)

    @property
    def url(self) -> str:
        """The endpoint the requests go to: the base URL, the wire format's path, then the
        ``query=`` parameters (after the path's own, if it has any)."""
        return self.with_query(self.base_url + self.wire.path)

    def with_query(self, url: str) -> str:
        """``url`` with this provider's ``query=`` parameters appended (``url`` itself when
        there are none)."""
        if not self._query:
            return url
        joiner = "&" if "?" in url else "?"
        return url + joiner + urllib.parse.urlencode(self._query)

    @property
    def framing(self) -> Literal["sse", "ndjson"]:
        """How the vendor frames a streamed response."""
        return self.wire.framing

    # -- what a vendor subclass may refine -----------------------------------------------------

    def encode(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ProviderOptions | None,
    ) -> dict[str, Any]:
        """The vendor's request body, with each tool's schema projected onto what the vendor
        accepts. A schema the vendor cannot take raises :class:`~protocols.errors.ConfigError`
        here, before any request is sent. (Arguments are still validated against the original
        schema by whoever runs the tool.) A history with an assistant tool call that no tool
        message answers raises :class:`~protocols.errors.ValidationError`: vendors refuse it,
        so it is refused here, before anything is sent."""
        dangling = unanswered_calls(messages)
        if dangling:
            names = ", ".join(f"{call.name} ({call.id})" for call in dangling[:5])
            raise ValidationError(
                f"{self.name}: the history has tool calls without a result: {names}; add a tool "
                "message answering each call before asking the model again"
            )
        return self.wire.encode_request(
            messages,
            model=self.model,
            tools=self.project_tools(tools),
            options=options,
            **self._encoding,
        )

    def project_tools(self, tools: Sequence[ToolDefinition]) -> list[ToolDefinition]:
        """``tools`` with their parameter schemas adapted to this vendor (unchanged objects
        when nothing needed adapting); ``ConfigError`` naming the tool when one is rejected."""
        projected: list[ToolDefinition] = []
        for tool in tools:
            projection = project(tool.parameters, self.wire.schema_vendor)
            if projection.outcome == "rejected":
                raise ConfigError(
                    f"{self.name}: the schema of tool {tool.name!r} cannot be sent: "
                    f"{projection.reason}"
                )
            if projection.outcome == "adapted":
                assert projection.schema is not None
                log.debug("%s: tool %r adapted: %s", self.name, tool.name, projection.changes)
                projected.append(attrs.evolve(tool, parameters=projection.schema))
            else:
                projected.append(tool)
        return projected

    def new_reader(self) -> Any:
        """A fresh record reader for one stream: its ``read(record)`` returns an Increment, or
        a ``str`` for a record of content only."""
        return self.wire.new_reader()

    def error_details(self, body: str) -> tuple[str | None, str | None, str]:
        """(vendor type, vendor code, message) from an error body excerpt."""
        return self.wire.error_details(body)

    def auth_headers(self) -> dict[str, str]:
        """Headers carrying the API key (default: a bearer token, when there is a key)."""
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    # -- the engine ----------------------------------------------------------------------------

    def new_decoder(self) -> SSEDecoder | NDJSONDecoder:
        """A fresh framing decoder for one response."""
        if self.framing == "sse":
            return SSEDecoder(max_event_size=self.max_event_size)
        return NDJSONDecoder(max_line_size=self.max_event_size)

    def new_assembler(self) -> StreamAssembler:
        """A fresh assembler for one attempt."""
        return StreamAssembler(split=self.split_think)

    async def request_headers(self) -> dict[str, str]:
        """The request's headers: protocol headers, extra headers, then credentials."""
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if self.framing == "sse" else "application/x-ndjson",
        }
        headers.update(self._extra_headers)
        headers.update(self.auth_headers())
        if self._auth is not None:
            supplied = await self._auth()
            for value in supplied.values():
                self._remember_credential(value)
            headers.update({key.lower(): value for key, value in supplied.items()})
        return headers

    def _remember_credential(self, value: str) -> None:
        remembered = self._supplied_credentials
        if value in remembered:
            return
        remembered.append(value)
        del remembered[:-_REMEMBERED_CREDENTIALS]

    def secrets(self) -> tuple[str, ...]:
        """What this provider never lets into an error: the API key, the values of credential
        headers among ``headers=`` and of credential parameters among ``query=`` (names
        holding auth, key, token, secret, password, cookie or signature), and the latest
        values the ``auth=`` hook supplied -- each also without
        its scheme (``Bearer``, ...)."""
        values: list[str] = [self._api_key] if self._api_key else []
        values.extend(
            value
            for name, value in (*self._extra_headers.items(), *self._query.items())
            if any(word in name.lower() for word in _CREDENTIAL_WORDS)
        )
        values.extend(self._supplied_credentials)
        found: list[str] = []
        for value in values:
            found.append(value)
            scheme, _, credential = value.strip().partition(" ")
            if credential.strip() and scheme.isalpha():
                found.append(credential.strip())
        return tuple(found)

    def redact(self, text: str) -> str:
        """``text`` with this provider's :meth:`secrets` replaced by ``[redacted]``, by the rule
        of :func:`protocols.errors.redact`: a secret of 8 characters or more wherever it appears
        (and its start where a cut text ends with it), a shorter one -- ``api_key="x"``, as local
        servers are often given -- only where it stands as a whole token, so ``"expected"`` stays
        readable."""
        return redact(text, self.secrets())

    def scrub(self, error: BaseException) -> None:
        """Redact this provider's :meth:`secrets` from ``error`` in place: its message, ``args``,
        excerpt and vendor labels, and those of the exceptions it was raised from. Every error a
        stream of this provider raises has been through this."""
        scrub(error, self.secrets())

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        """Stream a completion (see :class:`ProviderStream`). Encoding errors raise here."""
        try:
            return _HTTPStream(self, messages, tools, options)
        except Exception as error:
            self.scrub(error)
            raise

    def renew_client(self) -> None:
        """Replace a closed client of this provider's own with a fresh one (a new pool).
        A client passed in by the caller is never replaced."""
        if self._owns_client and self.client.is_closed:
            self.client = self._make_client()

    async def aclose(self) -> None:
        """Close the HTTP client, if this provider created it."""
        if self._owns_client:
            await self.client.aclose()
