"""Testing kit: servers and providers that run everything offline, for tests, demos and benchmarks.

Public and documented; nothing here is needed at run time in production.
"""

from ._fault import FaultProviderServer as FaultProviderServer

__all__ = ["FaultProviderServer"]
