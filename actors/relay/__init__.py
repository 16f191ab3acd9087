"""The relay: a server that holds a model and its credential, and clients that drive it over a
websocket without ever seeing the credential.

* :class:`RelayServer` -- the ASGI application (mount it anywhere, or :func:`serve` it on
  hypercorn's trio worker); ``trio-agents serve`` runs one with the browser chat page.
* :class:`RelayProvider` -- the client: a provider like any other, so an ``Agent`` runs over
  the relay unchanged (its tools run client-side).

The frames are :mod:`protocols.relay`.
"""

from ._client import RelayApprover as RelayApprover
from ._client import RelayProvider as RelayProvider
from ._serve import serve as serve
from ._server import RelayLimits as RelayLimits
from ._server import RelayServer as RelayServer
from ._server import RelayStatistics as RelayStatistics
from ._server import RelayToken as RelayToken

__all__ = [
    "RelayApprover",
    "RelayLimits",
    "RelayProvider",
    "RelayServer",
    "RelayStatistics",
    "RelayToken",
    "serve",
]
