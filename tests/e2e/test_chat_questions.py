"""``trio-agents chat`` answers the agent's questions: the chat agent has the ``ask_user`` tool,
and the next line of the input answers its question -- refused answers are shown and the
question is asked again, an empty line declines -- while lines keep their order for the chat
itself. Driven through :func:`chat_session` with the offline simulator (loopback HTTP)."""

from __future__ import annotations

import io
import json
import pathlib

from rich.console import Console

from actors.cli._chat import chat_session
from protocols.messages import Role

ASK = "call ask_user with " + json.dumps(
    {"question": "Which size?", "kind": "choice", "options": ["S", "M"]}
)


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200, height=40, highlight=False), out


async def test_the_next_line_answers_the_agents_question(tmp_path: pathlib.Path) -> None:
    console, out = _console()
    lines = [ASK, "XL", "M", "What is 19 + 23?", "/quit", "never read"]
    session = await chat_session(lines, console, interval=0, db=tmp_path / "c.sqlite3")
    first, second = session.results
    [result] = [m for m in first.messages if m.role is Role.TOOL]
    assert result.content == "M"
    assert second.content == "The answer is 42."  # the line after the answer is the chat's
    text = out.getvalue()
    assert "? Which size? (one of 'S', 'M'; an empty line declines)" in text
    assert "error: answer refused: 'XL' is not an option (expected one of 'S', 'M')" in text
    assert "never read" not in text


async def test_an_empty_line_declines_and_ended_input_leaves_it_unanswered(
    tmp_path: pathlib.Path,
) -> None:
    console, _ = _console()
    session = await chat_session([ASK, "", ASK], console, interval=0, db=tmp_path / "c.sqlite3")
    texts = [
        m.content for result in session.results for m in result.messages if m.role is Role.TOOL
    ]
    assert texts == [
        "not answered: the user declined to answer",
        "not answered: the chat's input ended",
    ]
