"""The relay: a server that holds a model and its credential, and clients that drive it over a
websocket without ever seeing the credential.

* :class:`RelayServer` -- the ASGI application (mount it anywhere, or :func:`serve` it on
  hypercorn's trio worker); ``trio-agents serve`` runs one with the browser chat page.
* :class:`RelayJobs` -- durable jobs served by the relay (``RelayServer(..., jobs=...)``):
  submitted, shown, cancelled, answered and followed over HTTP, run by the workers of a job
  queue on the same store.
* :class:`RelayAgents` -- agents the relay runs itself, in memory (``RelayServer(...,
  agents=...)``), for the protocols that name an agent.
* :class:`RelayProvider` -- the client: a provider like any other, so an ``Agent`` runs over
  the relay unchanged (its tools run client-side).

Every relayed request is a *run* with an id and an event log, which the token that started it
follows again by id (a websocket ``watch``, Server-Sent Events, polling), also after its
connection dropped when it asked for its run to outlive it.

The frames are :mod:`protocols.relay`.
"""

from ._client import RelayApprover as RelayApprover
from ._client import RelayProvider as RelayProvider
from ._jobs import RelayJobLimits as RelayJobLimits
from ._jobs import RelayJobs as RelayJobs
from ._jobs import RelayJobStatistics as RelayJobStatistics
from ._serve import serve as serve
from ._served import RelayAgents as RelayAgents
from ._server import RelayLimits as RelayLimits
from ._server import RelayServer as RelayServer
from ._server import RelayStatistics as RelayStatistics
from ._server import RelayToken as RelayToken

__all__ = [
    "RelayAgents",
    "RelayApprover",
    "RelayJobLimits",
    "RelayJobStatistics",
    "RelayJobs",
    "RelayLimits",
    "RelayProvider",
    "RelayServer",
    "RelayStatistics",
    "RelayToken",
    "serve",
]
