"""Durable jobs, pure: what a job is (:class:`AgentJob`), the run record of a job and its state
machine (:class:`JobRecord` and the transitions), and the journal a run writes and a continuing
worker reads (:func:`replay`, :func:`decide`), and the gap-aware cursor a reader pages through
a store's jobs with (:class:`JobCursor`, :func:`next_page`). Nothing here waits or touches a
disk; the stores, the queue and the workers are in :mod:`actors`.
"""

from ._cursor import Gap as Gap
from ._cursor import Horizon as Horizon
from ._cursor import JobCursor as JobCursor
from ._cursor import JobPage as JobPage
from ._cursor import next_page as next_page
from ._job import MAX_CHILDREN as MAX_CHILDREN
from ._job import MAX_DEPTH as MAX_DEPTH
from ._job import AgentJob as AgentJob
from ._journal import CHECKPOINT_EVERY as CHECKPOINT_EVERY
from ._journal import UNKNOWN_EFFECT as UNKNOWN_EFFECT
from ._journal import AnswerEntry as AnswerEntry
from ._journal import AskEntry as AskEntry
from ._journal import AttemptEntry as AttemptEntry
from ._journal import CheckpointEntry as CheckpointEntry
from ._journal import CheckpointPolicy as CheckpointPolicy
from ._journal import Decision as Decision
from ._journal import Entry as Entry
from ._journal import InputEntry as InputEntry
from ._journal import IntentEntry as IntentEntry
from ._journal import JournalDrift as JournalDrift
from ._journal import MessageEntry as MessageEntry
from ._journal import Replay as Replay
from ._journal import RequestEntry as RequestEntry
from ._journal import ResponseEntry as ResponseEntry
from ._journal import ResultEntry as ResultEntry
from ._journal import StreamEntry as StreamEntry
from ._journal import TerminalEntry as TerminalEntry
from ._journal import crosses as crosses
from ._journal import decide as decide
from ._journal import entry_from_json as entry_from_json
from ._journal import entry_to_json as entry_to_json
from ._journal import idempotency_key as idempotency_key
from ._journal import replay as replay
from ._prepare import prepare_codec as prepare_codec
from ._record import TERMINAL as TERMINAL
from ._record import Admission as Admission
from ._record import Applied as Applied
from ._record import ApprovalAnswer as ApprovalAnswer
from ._record import ApprovalRequest as ApprovalRequest
from ._record import Conflict as Conflict
from ._record import JobRecord as JobRecord
from ._record import JobStatus as JobStatus
from ._record import Lease as Lease
from ._record import Priority as Priority
from ._record import Tombstone as Tombstone
from ._record import Transition as Transition
from ._record import abandon as abandon
from ._record import acquire as acquire
from ._record import admission as admission
from ._record import admit as admit
from ._record import admit_tree as admit_tree
from ._record import answer as answer
from ._record import cancel as cancel
from ._record import checkpoint as checkpoint
from ._record import finish as finish
from ._record import may_append as may_append
from ._record import purge as purge
from ._record import renew as renew
from ._record import retry as retry
from ._record import runnable as runnable
from ._record import suspend as suspend

__all__ = [
    "CHECKPOINT_EVERY",
    "MAX_CHILDREN",
    "MAX_DEPTH",
    "TERMINAL",
    "UNKNOWN_EFFECT",
    "Admission",
    "AgentJob",
    "AnswerEntry",
    "Applied",
    "ApprovalAnswer",
    "ApprovalRequest",
    "AskEntry",
    "AttemptEntry",
    "CheckpointEntry",
    "CheckpointPolicy",
    "Conflict",
    "Decision",
    "Entry",
    "Gap",
    "Horizon",
    "InputEntry",
    "IntentEntry",
    "JobCursor",
    "JobPage",
    "JobRecord",
    "JobStatus",
    "JournalDrift",
    "Lease",
    "MessageEntry",
    "Priority",
    "Replay",
    "RequestEntry",
    "ResponseEntry",
    "ResultEntry",
    "StreamEntry",
    "TerminalEntry",
    "Tombstone",
    "Transition",
    "abandon",
    "acquire",
    "admission",
    "admit",
    "admit_tree",
    "answer",
    "cancel",
    "checkpoint",
    "crosses",
    "decide",
    "entry_from_json",
    "entry_to_json",
    "finish",
    "idempotency_key",
    "may_append",
    "next_page",
    "prepare_codec",
    "purge",
    "renew",
    "replay",
    "retry",
    "runnable",
    "suspend",
]
