"""OpenTelemetry tracing of agent runs, in the GenAI semantic conventions (``docs/tracing.md``).

Tracing is optional and costs nothing when off: the runtime imports ``opentelemetry-api``
(``pip install 'trio-agents[tracing]'``) only when a run asks whether it is traced, and traces
only when a tracer provider is configured -- globally (``opentelemetry.trace.
set_tracer_provider``) or given explicitly as ``tracer_provider=`` to :meth:`Agent.start
<actors.agent.Agent.start>`, :class:`~actors.relay.RelayServer` or
:func:`~actors.durable.open_job_queue`. Otherwise no span is made and nothing is looked up
beyond one cached check per run.

What a traced run makes: ``invoke_agent {agent}`` around the run (a child of the context current
where it was requested), ``chat {model}`` around each provider call and ``execute_tool {tool}``
around each tool call (children of the run's span); a run delegated to from a tool call is a
child of that call's span; a durable job's runs are children of the context it was enqueued in,
whichever process runs them; a relayed call's server span is a child of the client's ``chat``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import _tracing
from ._tracing import CARRIER_KEYS, INSTRUMENTATION_NAME, STOP_REASON, TRACE_METADATA_KEY

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import TracerProvider

__all__ = [
    "CARRIER_KEYS",
    "INSTRUMENTATION_NAME",
    "STOP_REASON",
    "TRACE_METADATA_KEY",
    "context_from_carrier",
    "trace_carrier",
    "tracing_active",
]


def tracing_active(tracer_provider: TracerProvider | None = None) -> bool:
    """Whether runs would be traced now: ``tracer_provider`` is given, or a global tracer
    provider is configured (and ``opentelemetry-api`` is installed). False means the runtime
    does no span work."""
    if tracer_provider is not None:
        return True
    return _tracing.global_tracer() is not None


def trace_carrier() -> dict[str, str]:
    """The W3C trace context current in this task (``traceparent`` and, when set,
    ``tracestate``), as the runtime carries it across processes -- empty when the API is not
    installed or no span is current. Put it in your own messages to continue a trace
    elsewhere."""
    return _tracing.carrier()


def context_from_carrier(carrier: Mapping[str, str] | None) -> Context | None:
    """The OpenTelemetry context a W3C carrier describes (to start spans in, or
    ``opentelemetry.context.attach``), or ``None`` when it holds no valid trace context or the
    API is not installed."""
    return _tracing.extract(carrier)
