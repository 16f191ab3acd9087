"""Tracing: OpenTelemetry spans in the GenAI semantic conventions, optional and free when off.

``opentelemetry-api`` is imported lazily, once, the first time a run asks whether it is traced;
when it is absent, or when no tracer provider is configured (the API's default proxy) and none
was given explicitly, :func:`global_tracer` answers ``None`` and the runtime does no span work at
all. Otherwise a run (:class:`RunTrace`) makes:

* ``invoke_agent {agent}`` (INTERNAL) around the run, a child of the OpenTelemetry context that
  was current *where the run was requested* (captured on the run request, never taken from the
  agent actor's task);
* ``chat {model}`` (CLIENT) around each provider call, a child of the run's span, current while
  the provider streams (so a relay client propagates it);
* ``execute_tool {tool}`` (INTERNAL) around each tool call, a child of the run's span, current
  while the tool runs (so a run delegated to from it, or the tool's own spans, are its children).

No request body, message content or tool argument goes into a span. An error is recorded with
its ``code`` as ``error.type``; the exception's message is recorded only for the project's own
errors (:class:`~protocols.errors.AgentsError`, redacted by design) -- any other exception is
recorded by its type and traceback alone.

Trace context crosses process boundaries as a W3C carrier (``traceparent``, ``tracestate``):
:func:`carrier` writes the current one, :func:`extract` reads one back.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from protocols.errors import AgentsError
from protocols.messages import (
    AgentResult,
    ProviderOptions,
    ProviderResult,
    StopReason,
    ToolCall,
    ToolFailure,
    ToolResult,
    Usage,
)

from ._version import __version__

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "CARRIER_KEYS",
    "INSTRUMENTATION_NAME",
    "STOP_REASON",
    "TRACE_METADATA_KEY",
    "RunTrace",
    "ServeSpan",
    "carrier",
    "current_context",
    "extract",
    "global_tracer",
    "idle",
    "root_context",
    "stamp_job",
    "tracer_for",
]

#: The instrumentation scope every tracer of the runtime is named after.
INSTRUMENTATION_NAME: Final = "trio_agents"
#: The attribute of an ``invoke_agent`` span naming how the run ended (a ``StopReason`` value).
STOP_REASON: Final = "trio_agents.stop_reason"
#: The key of an ``AgentJob``'s metadata holding the trace context it was enqueued in.
TRACE_METADATA_KEY: Final = "trio_agents.trace"
#: The keys of a trace carrier (W3C Trace Context).
CARRIER_KEYS: Final = ("traceparent", "tracestate")

#: Provider names as the semantic conventions spell them (``gen_ai.provider.name``).
_PROVIDER_NAMES: Final[Mapping[str, str]] = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "openai": "openai",
    "anthropic": "anthropic",
    "ollama": "ollama",
}


class _Api:
    """The OpenTelemetry modules the runtime uses, imported once."""

    __slots__ = ("context", "kind", "propagator", "status", "trace")

    def __init__(self) -> None:
        # Imported here, only once tracing is asked about: the package is optional.
        from opentelemetry import context, trace  # noqa: PLC0415
        from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
            TraceContextTextMapPropagator,
        )

        self.trace = trace
        self.context = context
        self.kind = trace.SpanKind
        self.status = trace.Status
        self.propagator = TraceContextTextMapPropagator()


_UNSET: Any = object()


class _Lookup:
    """What was looked up once: the API (``None`` when it is not installed), and the global
    provider last seen with its tracer."""

    __slots__ = ("api", "provider", "tracer")

    def __init__(self) -> None:
        self.api: _Api | None = _UNSET
        self.provider: object = None
        self.tracer: Tracer | None = None


_lookup = _Lookup()


def _load() -> _Api | None:
    lookup = _lookup
    if lookup.api is _UNSET:
        try:
            api = _Api()
        except ImportError:
            lookup.api = None
        else:
            # A provider named by OTEL_PYTHON_TRACER_PROVIDER becomes the global one now.
            api.trace.get_tracer_provider()
            lookup.api = api
    return lookup.api


def _reset() -> None:
    """Forget what was looked up (for tests that simulate the package being absent)."""
    _lookup.__init__()  # type: ignore[misc]


def global_tracer() -> Tracer | None:
    """The runtime's tracer from the global tracer provider, or ``None`` -- at once, with no
    span work -- when ``opentelemetry-api`` is not installed or no global provider is set."""
    lookup = _lookup
    api = lookup.api
    if api is None:
        return None
    if api is _UNSET:
        api = _load()
        if api is None:
            return None
    trace = api.trace
    # The API keeps the provider set with set_tracer_provider() in this module global; reading
    # it is the cheap check. get_tracer_provider() (which consults the environment each time
    # no provider is set) answers if the API ever stops keeping it there.
    provider = getattr(trace, "_TRACER_PROVIDER", _UNSET)
    if provider is _UNSET:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            return None
    elif provider is None:
        return None
    if provider is lookup.provider:
        return lookup.tracer
    tracer: Tracer = provider.get_tracer(INSTRUMENTATION_NAME, __version__)
    lookup.provider, lookup.tracer = provider, tracer
    return tracer


def tracer_for(provider: TracerProvider | None) -> Tracer | None:
    """The runtime's tracer from ``provider`` (``None``: none given)."""
    if provider is None:
        return None
    if _load() is None:  # pragma: no cover - a provider was given, so the API is installed
        return None
    return provider.get_tracer(INSTRUMENTATION_NAME, __version__)


def idle(tracer: Tracer, parent: Context | None) -> bool:
    """Whether a run with ``tracer``, requested in ``parent``, would trace nothing at all: a
    no-op tracer (what a disabled SDK gives, ``OTEL_SDK_DISABLED=true``) makes no span, and
    with no valid span in ``parent`` there is no context to carry on either."""
    api = _lookup.api
    if api is None or api is _UNSET or not isinstance(tracer, api.trace.NoOpTracer):
        return False
    if parent is None:
        return True
    return not api.trace.get_current_span(parent).get_span_context().is_valid


def current_context() -> Context | None:
    """The OpenTelemetry context current in this task (``None`` without the API)."""
    api = _load()
    return None if api is None else api.context.get_current()


def root_context() -> Context | None:
    """An empty OpenTelemetry context: a span started in it is a root (``None`` without the
    API)."""
    api = _load()
    return None if api is None else api.context.Context()


def carrier(context: Context | None = None) -> dict[str, str]:
    """The W3C trace context (``traceparent``, ``tracestate``) of ``context`` (default: the
    current one); empty without the API or without a valid span in it."""
    api = _load()
    if api is None:
        return {}
    if context is None:
        context = api.context.get_current()
    if not api.trace.get_current_span(context).get_span_context().is_valid:
        return {}
    out: dict[str, str] = {}
    api.propagator.inject(out, context=context)
    return out


def extract(source: Mapping[str, str] | None) -> Context | None:
    """The context a W3C carrier describes, or ``None`` (none given, the API absent, or no
    valid trace context in it)."""
    if not source:
        return None
    api = _load()
    if api is None:
        return None
    picked = {key: value for key in CARRIER_KEYS if isinstance(value := source.get(key), str)}
    context = api.propagator.extract(picked, context=api.context.Context())
    if not api.trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def stamp_job(job: Any) -> Any:
    """``job`` (an :class:`~protocols.jobs.AgentJob`) with the current trace context in its
    metadata under :data:`TRACE_METADATA_KEY` -- and so its children -- when there is one and
    the metadata does not hold one already; else ``job`` itself."""
    found = carrier()
    if not found:
        return job
    return _stamped(job, found)


def _stamped(job: Any, found: dict[str, str]) -> Any:
    import attrs  # noqa: PLC0415 - only when stamping

    children = tuple(_stamped(child, found) for child in job.children)
    metadata = job.metadata
    if TRACE_METADATA_KEY not in metadata:
        metadata = {**metadata, TRACE_METADATA_KEY: dict(found)}
    return attrs.evolve(job, metadata=metadata, children=children)


# -- attributes ---------------------------------------------------------------------------------


def _provider_name(provider: object) -> str:
    name = getattr(provider, "name", None)
    if not isinstance(name, str) or not name:
        return "unknown"
    name = name.removesuffix("-connection")
    return _PROVIDER_NAMES.get(name, name)


def _model(provider: object) -> str | None:
    model = getattr(provider, "model", None)
    return model if isinstance(model, str) and model else None


def _chat_attributes(
    provider: object, model: str | None, options: ProviderOptions | None, key: str, value: object
) -> dict[str, Any]:
    """The attributes a ``chat`` span starts with: the operation, the provider, the request's
    model and settings when known, and ``key`` (what identifies the call where it is made)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _provider_name(provider),
        key: value,
    }
    if model is not None:
        attributes["gen_ai.request.model"] = model
    if options is not None:
        for name, attribute in _REQUEST_SETTINGS:
            setting = getattr(options, name)
            if setting is not None:
                attributes[attribute] = setting
        if options.stop:
            attributes["gen_ai.request.stop_sequences"] = options.stop
    return attributes


#: The settings a ``chat`` span records, by the GenAI semantic conventions' names.
_REQUEST_SETTINGS = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("seed", "gen_ai.request.seed"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
)


def _usage(attributes: dict[str, Any], usage: Usage | None) -> None:
    if usage is None:
        return
    attributes["gen_ai.usage.input_tokens"] = usage.prompt
    attributes["gen_ai.usage.output_tokens"] = usage.completion
    if usage.cached is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached
    if usage.cache_write is not None:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write
    cost = usage.cost
    if cost is not None:  # priced (see actors._pricing): the amount when known, and whence
        if cost.amount is not None:
            attributes["trio_agents.usage.cost"] = float(cost.amount)
        if cost.currency is not None:
            attributes["trio_agents.usage.cost.currency"] = cost.currency
        attributes["trio_agents.usage.cost.provenance"] = cost.provenance


def _response(attributes: dict[str, Any], result: ProviderResult) -> None:
    """The usage of ``result`` and, when the vendor reported them, its model and id."""
    _usage(attributes, result.usage)
    if result.model is not None:
        attributes["gen_ai.response.model"] = result.model
    if result.response_id is not None:
        attributes["gen_ai.response.id"] = result.response_id


def _error(span: Span, error: BaseException, api: _Api) -> None:
    """Record ``error`` on ``span``: ``error.type``, status ERROR, and an exception event --
    with its message only for the project's own (redacted) errors."""
    kind = type(error)
    if isinstance(error, AgentsError):
        span.set_attribute("error.type", error.code or kind.__qualname__)
        span.record_exception(error, escaped=True)
        description = error.message
    else:
        name = f"{kind.__module__}.{kind.__qualname__}"
        span.set_attribute("error.type", name)
        span.add_event(
            "exception",
            {
                "exception.type": name,
                "exception.stacktrace": "".join(traceback.format_tb(error.__traceback__)),
                "exception.escaped": True,
            },
        )
        description = kind.__qualname__
    span.set_status(api.status(api.trace.StatusCode.ERROR, description))


def _safe_detach(api: _Api, token: object) -> None:
    # The API logs and swallows its own failures; tracing must never fail a run either way.
    with contextlib.suppress(Exception):
        api.context.detach(token)


# -- spans ----------------------------------------------------------------------------------------


class _Call:
    """A ``chat`` or ``execute_tool`` span, current in the task that opened it until ended.

    Of a run whose span is not recorded (sampled out, or a no-op tracer), no span is made: the
    call only makes the run's context current (when it holds a valid one, so that it still
    propagates) -- or, with none to carry, does nothing at all."""

    __slots__ = ("_api", "_ended", "_token", "span")

    def __init__(self, api: _Api, span: Span | None, context: Context | None) -> None:
        self._api = api
        self.span = span
        self._ended = False
        if span is not None:
            assert context is not None
            context = api.trace.set_span_in_context(span, context)
        self._token = api.context.attach(context) if context is not None else None

    def _recording(self) -> Span | None:
        span = self.span
        return span if span is not None and span.is_recording() else None

    def _end(self) -> None:
        if self._ended:
            return
        if self._token is None and self.span is None:
            return  # the shared call that does nothing: no state to change
        self._ended = True
        if self._token is not None:
            _safe_detach(self._api, self._token)
        if self.span is not None:
            self.span.end()


class ChatSpan(_Call):
    """One provider call's span (``chat {model}``)."""

    __slots__ = ()

    def done(self, result: ProviderResult) -> None:
        """The call finished with ``result`` (its finish reason, usage, and the response's model
        and id when the provider reported them)."""
        span = self._recording()
        if span is not None:
            attributes: dict[str, Any] = {"gen_ai.response.finish_reasons": (result.finish.value,)}
            _response(attributes, result)
            span.set_attributes(attributes)
        self._end()

    def failed(self, error: BaseException, partial: ProviderResult | None) -> None:
        """The call raised ``error`` (a cut: ``trio.Cancelled``; ``partial``: what it made)."""
        span = self._recording()
        try:
            if span is not None:
                if isinstance(error, Exception):
                    _error(span, error, self._api)
                else:
                    span.set_attribute("gen_ai.response.finish_reasons", ("cancelled",))
                if partial is not None:
                    attributes: dict[str, Any] = {}
                    _response(attributes, partial)
                    span.set_attributes(attributes)
        finally:
            self._end()


class ToolSpan(_Call):
    """One tool call's span (``execute_tool {tool}``)."""

    __slots__ = ()

    def done(self, result: ToolResult | None, error: Exception | None) -> None:
        """The call returned ``result``; ``error``: what its tool raised (then the result is
        the failure the model reads)."""
        span = self._recording()
        try:
            if span is not None:
                if error is not None:
                    _error(span, error, self._api)
                elif isinstance(result, ToolFailure):
                    span.set_attribute("trio_agents.tool.failed", True)
        finally:
            self._end()

    def interrupted(self) -> None:
        """The call was cut while it ran."""
        span = self._recording()
        try:
            if span is not None:
                span.set_attribute("trio_agents.tool.interrupted", True)
        finally:
            self._end()


_QUIET: list[tuple[ChatSpan, ToolSpan]] = []


def _quiet(api: _Api) -> tuple[ChatSpan, ToolSpan]:
    """The shared calls that do nothing (made once)."""
    if not _QUIET:
        _QUIET.append((ChatSpan(api, None, None), ToolSpan(api, None, None)))
    return _QUIET[0]


class RunTrace:
    """The spans of one run: ``invoke_agent`` (started here, ended by exactly one of
    :meth:`finish`, :meth:`fail`, :meth:`cut`, or :meth:`end`), and the ``chat`` and
    ``execute_tool`` spans below it."""

    __slots__ = (
        "_api",
        "_chat",
        "_ended",
        "_tool",
        "_tracer",
        "agent",
        "context",
        "model",
        "provider",
        "recording",
        "span",
    )

    def __init__(
        self,
        tracer: Tracer,
        parent: Context | None,
        *,
        agent: str,
        provider: object,
        conversation: str | None,
        run_id: str,
    ) -> None:
        api = _lookup.api
        assert api is not None  # a tracer exists: the API was loaded
        self._api = api
        self._tracer = tracer
        self.agent = agent
        self.provider = provider
        self.model = _model(provider)
        # No parent captured means a root: never whatever the current task happens to hold.
        base = parent if parent is not None else api.context.Context()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.provider.name": _provider_name(provider),
            "trio_agents.run.id": run_id,
        }
        if self.model is not None:
            attributes["gen_ai.request.model"] = self.model
        if conversation is not None:
            attributes["gen_ai.conversation.id"] = conversation
        self.span = span = tracer.start_span(
            f"invoke_agent {agent}", context=base, kind=api.kind.INTERNAL, attributes=attributes
        )
        self.recording = span.is_recording()
        if span.get_span_context().is_valid:
            self.context = api.trace.set_span_in_context(span, base)
        else:  # a no-op tracer's span: the caller's context is what there is to carry
            self.context = base
        self._ended = False
        # The calls of a run that is not recorded make no span (see _Call): one shared call
        # does for all of them when there is no context to carry either.
        self._chat: ChatSpan | None = None
        self._tool: ToolSpan | None = None
        if not self.recording and not (
            api.trace.get_current_span(self.context).get_span_context().is_valid
        ):
            self._chat, self._tool = _quiet(api)

    def chat(self, provider: object, options: ProviderOptions | None, turn: int) -> ChatSpan:
        """Start (and make current) the span of a provider call of this run."""
        if self._chat is not None:
            return self._chat
        api = self._api
        if not self.recording:
            return ChatSpan(api, None, self.context)
        model = self.model if provider is self.provider else _model(provider)
        attributes = _chat_attributes(provider, model, options, "trio_agents.turn", turn)
        span = self._tracer.start_span(
            f"chat {model}" if model is not None else "chat",
            context=self.context,
            kind=api.kind.CLIENT,
            attributes=attributes,
        )
        return ChatSpan(api, span, self.context)

    def tool(self, call: ToolCall) -> ToolSpan:
        """Start (and make current, in the calling task) the span of a tool call of this run."""
        if self._tool is not None:
            return self._tool
        api = self._api
        if not self.recording:
            return ToolSpan(api, None, self.context)
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            context=self.context,
            kind=api.kind.INTERNAL,
            attributes=attributes,
        )
        return ToolSpan(api, span, self.context)

    def finish(self, result: AgentResult) -> None:
        """The run ended with ``result`` (complete, or partial with its stop reason)."""
        span = self.span
        try:
            if span.is_recording():
                attributes: dict[str, Any] = {STOP_REASON: result.stop.value}
                attributes["trio_agents.turns"] = result.turns
                _usage(attributes, result.usage)
                if result.estimated:
                    # Some of the usage is a budget's estimate, not what a vendor reported.
                    attributes["trio_agents.usage.estimated"] = True
                if result.agent and result.agent != self.agent:
                    attributes["trio_agents.answered_by"] = result.agent
                span.set_attributes(attributes)
        finally:
            self.end()

    def fail(self, error: BaseException) -> None:
        """The run raised ``error``."""
        try:
            if self.span.is_recording():
                _error(self.span, error, self._api)
        finally:
            self.end()

    def cut(self, stop: StopReason) -> None:
        """The run was cut from outside (its caller, its parent, its agent stopping)."""
        try:
            if self.span.is_recording():
                self.span.set_attribute(STOP_REASON, stop.value)
        finally:
            self.end()

    def end(self) -> None:
        """End the run's span (once; later calls do nothing)."""
        if not self._ended:
            self._ended = True
            self.span.end()


class ServeSpan:
    """The relay server's span of one relayed provider call: ``chat {model}`` (SERVER), a child
    of the trace context the client sent (its frame's, else its connection's handshake)."""

    __slots__ = ("_api", "_ended", "span")

    def __init__(
        self,
        tracer: Tracer,
        source: Mapping[str, str] | None,
        provider: object,
        request_id: str,
        options: ProviderOptions | None,
    ) -> None:
        api = _lookup.api
        assert api is not None
        self._api = api
        parent = extract(source) or api.context.Context()
        model = _model(provider)
        attributes = _chat_attributes(
            provider, model, options, "trio_agents.relay.request_id", request_id
        )
        self.span = tracer.start_span(
            f"chat {model}" if model is not None else "chat",
            context=parent,
            kind=api.kind.SERVER,
            attributes=attributes,
        )
        self._ended = False

    def done(self, result: ProviderResult | None, failure: str | None) -> None:
        """The call ended: with ``result``, or refused/failed with the relay's error code."""
        span = self.span
        try:
            if span.is_recording():
                if result is not None:
                    attributes: dict[str, Any] = {
                        "gen_ai.response.finish_reasons": (result.finish.value,)
                    }
                    _response(attributes, result)
                    span.set_attributes(attributes)
                elif failure is not None:
                    span.set_attribute("error.type", failure)
                    span.set_status(self._api.status(self._api.trace.StatusCode.ERROR, failure))
        finally:
            self.end()

    def failed(self, error: BaseException) -> None:
        """The call was cut (``trio.Cancelled``), or the relay failed sending its answer."""
        try:
            if self.span.is_recording():
                if isinstance(error, Exception):
                    _error(self.span, error, self._api)
                else:
                    self.span.set_attribute("gen_ai.response.finish_reasons", ("cancelled",))
        finally:
            self.end()

    def end(self) -> None:
        """End the span (once)."""
        if not self._ended:
            self._ended = True
            self.span.end()
