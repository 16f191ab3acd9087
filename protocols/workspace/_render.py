"""Rendering workspace files into a prompt."""

from __future__ import annotations

import re

from ._model import File, TextContent, WorkspaceError

# ---------------------------------------------------------------------------------------------
# Rendering

_BACKTICKS = re.compile("`+")


def render_fenced(file: File) -> str:
    """A text file as a prompt block::

        File: <path>
        ```<language>
        <text>
        ```

    The fence is one backtick longer than the longest run of backticks in the text (and at least
    three), so no content can close it early. A binary file raises :class:`WorkspaceError`
    (code ``"modality"``): images travel as message attachments, not as text.
    """
    if not isinstance(file.content, TextContent):
        raise WorkspaceError(
            f"cannot render binary file {file.path!r} as text", code="modality", path=file.path
        )
    text = file.content.text
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    newline = "" if text.endswith("\n") else "\n"  # the closing fence on its own line
    return f"File: {file.path}\n{fence}{file.content.language}\n{text}{newline}{fence}"
