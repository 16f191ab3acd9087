"""``Simulator``: a local model server speaking four wire formats, for demos and tests."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

import attrs
import h11
import trio

from protocols.codec import dumpb
from protocols.errors import ValidationError
from protocols.simulator import (
    MEDIA_TYPES,
    ROUTES,
    PromptCache,
    SimRequest,
    ThinkStyle,
    Vendor,
    answer,
    error_body,
    match_route,
    parse_request,
    response_body,
    stream_frames,
)

from ..providers import AnthropicMessages, GeminiChat, OllamaChat, OpenAIChat, OpenAIResponses
from ._loopback import Exchange, LoopbackServer, Request, RequestTooLarge

__all__ = ["Simulator", "SimulatorStatistics"]

#: Frames are coalesced into writes of about this size when there is no pacing interval.
_BATCH_BYTES = 16384


@attrs.frozen
class SimulatorStatistics:
    """Counters of a :class:`Simulator`, observed on the server side.

    ``requests`` counts requests answered (errors included); ``streaming`` how many streamed
    responses are being written now; ``completed`` streamed responses written to the end;
    ``abandoned`` streamed responses the client closed before the end; ``connections`` TCP
    connections accepted; ``open_connections`` those still open.
    """

    requests: int
    streaming: int
    completed: int
    abandoned: int
    connections: int
    open_connections: int


class Simulator(LoopbackServer):
    """A loopback server that answers like a model, deterministically, in five wire formats.

    It serves ``POST /v1/chat/completions`` (OpenAI-compatible, streamed or not), ``POST
    /v1/responses`` (OpenAI's Responses API), ``POST /v1/messages`` (Anthropic Messages) and
    ``POST /api/chat`` (Ollama native), ``POST /v1beta/models/{model}:streamGenerateContent``
    and ``:generateContent`` (Google's Gemini API; SSE whatever the ``alt`` parameter), Azure
    OpenAI's paths (``/openai/deployments/{name}/chat/completions``, ``/openai/v1/...``), plus
    ``GET /v1/models``. What it answers is the pure
    policy of :mod:`protocols.simulator`: it echoes text, counts, adds numbers (calling an
    advertised ``add`` tool and then answering from its result), calls any advertised tool the
    prompt names (``call <tool> with {...}``), and thinks first when the request asks for
    reasoning.

    Use it as an async context manager and point a provider at it, or take one ready-made::

        async with Simulator() as simulator:
            provider = simulator.openai()          # an OpenAIChat aimed at the simulator
            result = await provider.generate([Message.user("What is 19 + 23?")])

    Arguments:

    * ``interval``: seconds of trio time between deltas (0: as fast as the socket takes them);
      ``autojump_clock`` makes paced streams instant in tests.
    * ``think_style``: how reasoning is shown on the OpenAI-compatible format -- ``"tags"``
      (inline ``<think>...</think>`` content) or ``"field"`` (``reasoning_content`` deltas).
    * ``api_key``: when set, requests must carry it (``Authorization: Bearer``, ``x-api-key``,
      Gemini's ``x-goog-api-key`` or Azure's ``api-key``) or get a 401; it never appears in a
      response or in ``repr``.
    * ``max_request_bytes``: larger requests get a 413 without their body being read.
    * ``report_usage``: ``False`` makes it answer without any token counts, as servers that
      never report usage do (llama-cpp-python ignores ``stream_options``).
    * ``max_tokens``: the server's own output cap (a server's default limit, a model's maximum
      output), applied when a request asks for none or a larger one: a longer answer is cut
      with finish reason ``length`` -- in a tool call's arguments, too, whose text is then sent
      cut, as a vendor sends it (see :func:`protocols.simulator.answer`).
    * ``content_filter``: words its content filter blocks (case-insensitive): an answer is cut
      just before the first one, in its text or in a call's arguments, with the vendor's
      filter finish (OpenAI chat ``content_filter``, Responses API ``incomplete`` for
      ``content_filter``, Anthropic ``refusal``; Ollama has no filter and is never filtered).
    * ``cache_min_tokens``: the shortest prompt prefix (estimated tokens) its prompt cache
      keeps, 1024 by default as OpenAI's and Anthropic's (most models'). It reports a prefix it
      has seen before as the vendor does -- Anthropic: ``cache_read_input_tokens`` for a
      ``cache_control`` mark seen before, ``cache_creation_input_tokens`` for the rest up to the
      last mark; OpenAI chat and Responses: ``cached_tokens`` for the longest repeated prefix
      ending at a message boundary, in steps of 128 past the minimum -- holding at most 10,000
      prefix digests (least recently used go first; see
      :class:`protocols.simulator.PromptCache`). Its counts appear only when some prefix was
      long enough to count.
    * ``host`` / ``port``: where to listen (default 127.0.0.1 and a free port).

    Guarantees: connections are kept alive between requests; a client that goes away mid-stream
    ends only its own handler (counted as ``abandoned``); bad requests get the vendor's error
    shape (400 for an invalid body, 401, 404 for an unknown path, 405, 413); leaving the block
    stops the server and every handler.
    """

    kind = "simulator"

    def __init__(
        self,
        *,
        interval: float = 0.0,
        think_style: ThinkStyle = "tags",
        api_key: str | None = None,
        max_request_bytes: int = 8 * 1024 * 1024,
        report_usage: bool = True,
        max_tokens: int | None = None,
        content_filter: Sequence[str] = (),
        cache_min_tokens: int = 1024,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not interval >= 0:
            raise ValidationError(f"interval must be a number of seconds >= 0, not {interval!r}")
        if think_style not in ("tags", "field"):
            raise ValidationError(f"think_style must be 'tags' or 'field', not {think_style!r}")
        if api_key is not None and not (isinstance(api_key, str) and api_key):
            raise ValidationError("api_key must be a non-empty string or None")
        if isinstance(max_request_bytes, bool) or not (
            isinstance(max_request_bytes, int) and max_request_bytes > 0
        ):
            raise ValidationError("max_request_bytes must be an integer > 0")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ValidationError(f"max_tokens must be an integer >= 1 or None, not {max_tokens!r}")
        if isinstance(content_filter, str) or not all(
            isinstance(word, str) and word for word in content_filter
        ):
            raise ValidationError("content_filter must be a sequence of non-empty strings")
        self._prompt_cache = PromptCache(min_tokens=cache_min_tokens)
        super().__init__(host=host, port=port)
        self.max_tokens = max_tokens
        self.content_filter = tuple(content_filter)
        self.interval = float(interval)
        self.think_style: ThinkStyle = think_style
        self._api_key = api_key
        self._max_request_bytes = max_request_bytes
        self.report_usage = bool(report_usage)
        self._requests: list[SimRequest] = []
        self._answered = 0
        self._streaming = 0
        self._completed = 0
        self._abandoned = 0
        self._connections = 0
        self._open = 0

    def __repr__(self) -> str:
        where = self.origin if self._port is not None else "not running"
        key = ", api_key=<redacted>" if self._api_key else ""
        return f"Simulator({where}, interval={self.interval!r}{key})"

    # -- where to point clients -----------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: the base URL for Anthropic and Ollama clients."""
        return self.origin

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: the base URL for OpenAI-compatible clients (chat
        completions and the Responses API)."""
        return f"{self.origin}/v1"

    def openai(self, *, model: str = "simulator", **kwargs: Any) -> OpenAIChat:
        """An :class:`~actors.providers.OpenAIChat` aimed at this simulator, with its key
        (``kwargs`` go to the provider and may override both)."""
        kwargs.setdefault("base_url", self.openai_base_url)
        kwargs.setdefault("api_key", self._api_key or "")
        return OpenAIChat(model=model, **kwargs)

    def openai_responses(self, *, model: str = "simulator", **kwargs: Any) -> OpenAIResponses:
        """An :class:`~actors.providers.OpenAIResponses` aimed at this simulator's
        ``/v1/responses``, with its key (``kwargs`` go to the provider and may override both)."""
        kwargs.setdefault("base_url", self.openai_base_url)
        kwargs.setdefault("api_key", self._api_key or "")
        return OpenAIResponses(model=model, **kwargs)

    def anthropic(self, *, model: str = "simulator", **kwargs: Any) -> AnthropicMessages:
        """An :class:`~actors.providers.AnthropicMessages` aimed at this simulator."""
        kwargs.setdefault("base_url", self.base_url)
        kwargs.setdefault("api_key", self._api_key or "")
        return AnthropicMessages(model=model, **kwargs)

    def gemini(self, *, model: str = "simulator", **kwargs: Any) -> GeminiChat:
        """A :class:`~actors.providers.GeminiChat` aimed at this simulator's
        ``/v1beta/models/{model}:streamGenerateContent``, with its key (``kwargs`` go to the
        provider and may override both)."""
        kwargs.setdefault("base_url", self.base_url)
        kwargs.setdefault("api_key", self._api_key or "")
        return GeminiChat(model=model, **kwargs)

    def ollama(self, *, model: str = "simulator", **kwargs: Any) -> OllamaChat:
        """An :class:`~actors.providers.OllamaChat` aimed at this simulator."""
        kwargs.setdefault("base_url", self.base_url)
        kwargs.setdefault("api_key", self._api_key)
        return OllamaChat(model=model, **kwargs)

    # -- what it saw ----------------------------------------------------------------------------

    @property
    def requests(self) -> tuple[SimRequest, ...]:
        """Every valid model request received so far, parsed, in arrival order (each with the
        model settings it gave: ``SimRequest.settings``)."""
        return tuple(self._requests)

    def statistics(self) -> SimulatorStatistics:
        """A snapshot of the server-side counters."""
        return SimulatorStatistics(
            requests=self._answered,
            streaming=self._streaming,
            completed=self._completed,
            abandoned=self._abandoned,
            connections=self._connections,
            open_connections=self._open,
        )

    # -- serving --------------------------------------------------------------------------------

    async def _handle(self, stream: trio.SocketStream) -> None:
        self._connections += 1
        self._open += 1
        try:
            async with stream:
                exchange = Exchange(stream, self._max_request_bytes)
                while True:
                    try:
                        request = await exchange.read_request()
                    except RequestTooLarge:
                        self._answered += 1
                        await self._error(exchange, None, 413, "the request is too large", True)
                        return
                    if request is None:
                        return
                    self._answered += 1
                    await self._respond(exchange, request)
                    if not exchange.next_cycle():
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away
        finally:
            self._open -= 1

    async def _error(
        self,
        exchange: Exchange,
        vendor: Vendor | None,
        status: int,
        message: str,
        close: bool = False,
    ) -> None:
        body = dumpb(error_body(vendor or "openai", status, message))
        headers = [("allow", "POST")] if status == 405 else []
        await exchange.send_json(status, body, close=close, headers=headers)

    def _authorised(self, headers: dict[str, str]) -> bool:
        if self._api_key is None:
            return True
        expected = self._api_key.encode()
        bearer = headers.get("authorization", "")
        offered = bearer[7:] if bearer[:7].lower() == "bearer " else headers.get("x-api-key", "")
        # Gemini's header, and Azure OpenAI's.
        offered = offered or headers.get("x-goog-api-key", "") or headers.get("api-key", "")
        return hmac.compare_digest(offered.encode("utf-8", "replace"), expected)

    async def _respond(self, exchange: Exchange, request: Request) -> None:
        method, path = request.method, request.path
        vendor = ROUTES.get(path.rstrip("/") or "/")
        # Gemini's paths name the model and whether to stream; Azure OpenAI's, a deployment.
        routed = match_route(path) if vendor is None else None
        if routed is not None:
            vendor = routed[0]
        if path.rstrip("/") == "/v1/models" and method == "GET":
            models = {
                "object": "list",
                "data": [{"id": "simulator", "object": "model", "owned_by": "trio-agents"}],
            }
            await exchange.send_json(200, dumpb(models))
            return
        if vendor is None:
            await self._error(exchange, None, 404, f"no such endpoint: {path[:200]}")
            return
        if method != "POST":
            await self._error(exchange, vendor, 405, f"{path} takes POST, not {method[:20]}")
            return
        if not self._authorised(request.headers):
            await self._error(exchange, vendor, 401, "invalid or missing API key")
            return
        try:
            parsed = parse_request(vendor, request.body)
        except ValidationError as error:
            await self._error(exchange, vendor, 400, str(error)[:500])
            return
        if routed is not None and vendor == "gemini":
            parsed = attrs.evolve(parsed, model=routed[1] or "", stream=bool(routed[2]))
        seq = len(self._requests)
        self._requests.append(parsed)
        result = answer(parsed, max_tokens=self.max_tokens, blocked=self.content_filter)
        if parsed.prefixes:
            usage = self._prompt_cache.use(vendor, parsed.prefixes, result.usage)
            result = attrs.evolve(result, usage=usage)
        if not parsed.stream:
            body = response_body(
                parsed, result, seq=seq, think_style=self.think_style, usage=self.report_usage
            )
            await exchange.send_json(200, dumpb(body))
            return
        headers = [("content-type", MEDIA_TYPES[vendor]), ("cache-control", "no-cache")]
        await exchange.send(h11.Response(status_code=200, headers=headers))
        self._streaming += 1
        try:
            frames = stream_frames(
                parsed, result, seq=seq, think_style=self.think_style, usage=self.report_usage
            )
            if self.interval > 0:
                for frame in frames:
                    await trio.sleep(self.interval)
                    await exchange.send(h11.Data(data=frame))
            else:
                batch: list[bytes] = []
                size = 0
                for frame in frames:
                    batch.append(frame)
                    size += len(frame)
                    if size >= _BATCH_BYTES:
                        await exchange.send(h11.Data(data=b"".join(batch)))
                        batch, size = [], 0
                if batch:
                    await exchange.send(h11.Data(data=b"".join(batch)))
            await exchange.send(h11.EndOfMessage())
            self._completed += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._abandoned += 1
            raise
        finally:
            self._streaming -= 1
