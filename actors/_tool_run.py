"""The run whose tool batch the current task is executing (``_tool_run``, set around each
batch): how a tool, the ``ask_user`` tool or a delegated run finds the run that called it. Its
own module, below everything that reads it."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._run_loop import _Run

#: The run whose tool batch the current task is executing (set around each batch).
_tool_run: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "trio_agents_tool_run", default=None
)
