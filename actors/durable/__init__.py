"""Durable runs and jobs: the stores that keep them, the registry of agents a job may name,
and the job queue whose workers run them as journaled runs, continuing after a crash.

The pure model -- jobs, records, transitions, the journal -- is :mod:`protocols.jobs`.
"""

from ._feed import JobFeed as JobFeed
from ._feed import feed_jobs as feed_jobs
from ._journal import LINGER as LINGER
from ._journal import RETRY_FOR as RETRY_FOR
from ._journal import StoreJournal as StoreJournal
from ._memory_store import MemoryRunStore as MemoryRunStore
from ._open import check_store_url as check_store_url
from ._open import migrate_store as migrate_store
from ._open import open_run_store as open_run_store
from ._ops import answer_job as answer_job
from ._ops import cancel_job as cancel_job
from ._ops import purge_job as purge_job
from ._ops import submit_job as submit_job
from ._ops import wait_job as wait_job
from ._postgres_store import PostgresRunStore as PostgresRunStore
from ._queue import JobError as JobError
from ._queue import JobQueue as JobQueue
from ._queue import open_job_queue as open_job_queue
from ._registry import AgentRegistry as AgentRegistry
from ._registry import AgentSpec as AgentSpec
from ._sqlite_store import SQLiteRunStore as SQLiteRunStore
from ._store import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from ._store import Admitted as Admitted
from ._store import RunStore as RunStore
from ._store import Taken as Taken
from ._watch import JobEvents as JobEvents
from ._watch import watch_job as watch_job

__all__ = [
    "DEFAULT_MAX_BYTES",
    "LINGER",
    "RETRY_FOR",
    "Admitted",
    "AgentRegistry",
    "AgentSpec",
    "JobError",
    "JobEvents",
    "JobFeed",
    "JobQueue",
    "MemoryRunStore",
    "PostgresRunStore",
    "RunStore",
    "SQLiteRunStore",
    "StoreJournal",
    "Taken",
    "answer_job",
    "cancel_job",
    "check_store_url",
    "feed_jobs",
    "migrate_store",
    "open_job_queue",
    "open_run_store",
    "purge_job",
    "submit_job",
    "wait_job",
    "watch_job",
]
