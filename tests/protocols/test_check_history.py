"""``check_history``: what a run on a caller's history accepts (issue 24, item 4). Pure: no
event loop. Checked against a reference written another way (blocks, not a scan)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import ValidationError
from protocols.history import check_history
from protocols.messages import Message, Role, ToolCall

IDS = st.sampled_from(["a", "b", "c"])


@st.composite
def messages(draw: st.DrawFn) -> Message:
    kind = draw(st.sampled_from(["user", "system", "assistant", "calls", "tool", "tool"]))
    if kind == "user":
        return Message.user("u")
    if kind == "system":
        return Message.system("s")
    if kind == "assistant":
        return Message.assistant("x", interrupted=draw(st.booleans()))
    if kind == "calls":
        ids = draw(st.lists(IDS, min_size=1, max_size=3, unique=True))  # unique in a message
        calls = [ToolCall(call_id, "t") for call_id in ids]
        return Message.assistant(calls=calls)
    return Message.tool(draw(IDS), "t", "r")


def well_formed(history: Sequence[Message]) -> bool:
    """The reference: after an assistant message with k calls come exactly k tool messages
    answering them (as a multiset); no tool message stands anywhere else."""
    index = 0
    while index < len(history):
        message = history[index]
        index += 1
        if message.role is Role.TOOL:
            return False
        if message.role is Role.ASSISTANT and message.calls:
            answers = history[index : index + len(message.calls)]
            if len(answers) < len(message.calls) or any(m.role is not Role.TOOL for m in answers):
                return False
            if Counter(m.tool_call_id for m in answers) != Counter(c.id for c in message.calls):
                return False
            index += len(message.calls)
    return True


@given(st.lists(messages(), max_size=10))
def test_check_history_accepts_exactly_the_well_formed_histories(
    history: list[Message],
) -> None:
    if well_formed(history):
        assert check_history(history) == tuple(history)
    else:
        with pytest.raises(ValidationError, match=r"^history\[\d+\] "):
            check_history(history)


@given(st.lists(messages(), max_size=10))
def test_a_well_formed_history_stays_so_with_any_answered_batch_appended(
    history: list[Message],
) -> None:
    if not well_formed(history):
        return
    calls = [ToolCall("a", "t"), ToolCall("b", "t")]  # ids an earlier turn may have used
    batch = [Message.assistant(calls=calls), *(Message.tool(c.id, "t", "r") for c in calls)]
    check_history([*history, *batch, Message.user("next")])


def test_what_it_names_in_an_error() -> None:
    many = [ToolCall(f"c{n}", "t") for n in range(8)]
    with pytest.raises(ValidationError, match=r"'c4' and 3 more$"):
        check_history([Message.assistant(calls=many)])
    with pytest.raises(ValidationError, match=r"^thread\[0\] answers"):
        check_history([Message.tool("c1", "t", "r")], what="thread")
