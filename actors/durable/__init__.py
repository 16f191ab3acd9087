"""Durable runs and jobs: the stores that keep them (this package's first part).

The pure model -- jobs, records, transitions, the journal -- is :mod:`protocols.jobs`.
"""

from ._sqlite_store import SQLiteRunStore as SQLiteRunStore
from ._store import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from ._store import Admitted as Admitted
from ._store import MemoryRunStore as MemoryRunStore
from ._store import RunStore as RunStore

__all__ = ["DEFAULT_MAX_BYTES", "Admitted", "MemoryRunStore", "RunStore", "SQLiteRunStore"]
