"""trio-agents' trio runtime: everything that waits, owns a task, or talks to a socket or disk.

The actor core, providers, agents and the relay arrive here issue by issue; the data model they all
speak lives in :mod:`protocols`.
"""

from ._version import __version__ as __version__
from .cli import main as main

__all__ = ["__version__", "main"]
